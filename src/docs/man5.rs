//! `floodgate.toml(5)`: the book's configuration reference (`docs/configuration/*.md`, one
//! page per section with a table of its keys) written as one man page, so that the page
//! and the book cannot say different things.
//!
//! The Markdown the reference uses is turned into man(7) requests: headings into `.SH` and
//! `.SS`, paragraphs into filled text, lists into `.IP`, tables into `.TP` entries (a key
//! table's row: the key in bold, its default and what it does), fenced blocks into
//! unfilled text; inline code and bold into bold, links into their text.

/// The reference's pages, in the order of the book's summary.
const PAGES: &[(&str, &str)] = &[
    (
        "index.md",
        include_str!("../../docs/configuration/index.md"),
    ),
    (
        "server.md",
        include_str!("../../docs/configuration/server.md"),
    ),
    (
        "timeouts.md",
        include_str!("../../docs/configuration/timeouts.md"),
    ),
    (
        "listener.md",
        include_str!("../../docs/configuration/listener.md"),
    ),
    (
        "milter.md",
        include_str!("../../docs/configuration/milter.md"),
    ),
    ("tls.md", include_str!("../../docs/configuration/tls.md")),
    (
        "upstream.md",
        include_str!("../../docs/configuration/upstream.md"),
    ),
    ("smtp.md", include_str!("../../docs/configuration/smtp.md")),
    (
        "store.md",
        include_str!("../../docs/configuration/store.md"),
    ),
    (
        "identity.md",
        include_str!("../../docs/configuration/identity.md"),
    ),
    (
        "lists.md",
        include_str!("../../docs/configuration/lists.md"),
    ),
    (
        "limit.md",
        include_str!("../../docs/configuration/limit.md"),
    ),
    (
        "auth-failures.md",
        include_str!("../../docs/configuration/auth-failures.md"),
    ),
    ("log.md", include_str!("../../docs/configuration/log.md")),
    (
        "report.md",
        include_str!("../../docs/configuration/report.md"),
    ),
    (
        "alerts.md",
        include_str!("../../docs/configuration/alerts.md"),
    ),
    (
        "metrics.md",
        include_str!("../../docs/configuration/metrics.md"),
    ),
    (
        "admin.md",
        include_str!("../../docs/configuration/admin.md"),
    ),
    ("hold.md", include_str!("../../docs/configuration/hold.md")),
    (
        "outcomes.md",
        include_str!("../../docs/configuration/outcomes.md"),
    ),
    (
        "postfix.md",
        include_str!("../../docs/configuration/postfix.md"),
    ),
    (
        "policy-service.md",
        include_str!("../../docs/configuration/policy-service.md"),
    ),
    (
        "message-keys.md",
        include_str!("../../docs/configuration/message-keys.md"),
    ),
];

/// The file names of the pages the man page is made of.
pub fn pages() -> impl Iterator<Item = &'static str> {
    PAGES.iter().map(|(name, _)| *name)
}

/// The man page `floodgate.toml(5)`, for floodgate `version`.
pub fn render(version: &str) -> String {
    let mut out = String::new();
    out.push_str(&format!(
        ".TH floodgate.toml 5 \"\" \"floodgate {}\" \"File Formats\"\n",
        quoted(version)
    ));
    out.push_str(".SH NAME\nfloodgate.toml \\- the configuration file of floodgate(1)\n");
    out.push_str(".SH SYNOPSIS\n/etc/floodgate/floodgate.toml, or the file given with \\fB\\-\\-config\\fR\n");
    for (i, (_, text)) in PAGES.iter().enumerate() {
        page(&mut out, text, i == 0);
    }
    out.push_str(".SH SEE ALSO\nfloodgate(1), floodgate\\-check(1), floodgate\\-run(1)\n");
    out
}

/// One page: its title as a section (`DESCRIPTION` for the first), its headings as
/// subsections. A paragraph or list item is gathered whole before it is written, so that
/// marks across its lines (a link broken over two) are read as one.
fn page(out: &mut String, text: &str, first: bool) {
    let mut lines = text.lines().peekable();
    // The paragraph or list item being gathered, and its request.
    let mut held: Option<(&str, String)> = None;
    let flush = |out: &mut String, held: &mut Option<(&str, String)>| {
        if let Some((request, body)) = held.take() {
            out.push_str(request);
            out.push_str(&text_line(&inline(&body)));
        }
    };
    while let Some(line) = lines.next() {
        let trimmed = line.trim();
        let item = trimmed.strip_prefix("- ").or(trimmed.strip_prefix("* "));
        if let Some(title) = line.strip_prefix("# ") {
            flush(out, &mut held);
            let title = if first {
                "DESCRIPTION".to_string()
            } else {
                plain(title)
            };
            out.push_str(&format!(".SH \"{}\"\n", quoted(&title)));
        } else if let Some(title) = line.strip_prefix("## ") {
            flush(out, &mut held);
            out.push_str(&format!(".SS \"{}\"\n", quoted(&plain(title))));
        } else if trimmed.starts_with("```") {
            flush(out, &mut held);
            out.push_str(".PP\n.RS 4\n.nf\n");
            for code in lines.by_ref() {
                if code.trim().starts_with("```") {
                    break;
                }
                out.push_str(&text_line(&escape(code.trim_start_matches("   "))));
            }
            out.push_str(".fi\n.RE\n");
        } else if trimmed.starts_with('|') {
            flush(out, &mut held);
            let mut rows = vec![trimmed];
            while let Some(next) = lines.peek().filter(|l| l.trim().starts_with('|')) {
                rows.push(next.trim());
                lines.next();
            }
            table(out, &rows);
        } else if trimmed.is_empty() || trimmed.starts_with("<!--") {
            flush(out, &mut held);
        } else if let Some(item) = item {
            flush(out, &mut held);
            held = Some((".IP \\(bu 2\n", item.to_string()));
        } else {
            match &mut held {
                Some((_, body)) => {
                    body.push(' ');
                    body.push_str(trimmed);
                }
                None => held = Some((".PP\n", trimmed.to_string())),
            }
        }
    }
    flush(out, &mut held);
}

/// A table: one `.TP` entry per row, its first cell as the tag. A key table (`| key |
/// default | what it does |`) says the default in the tag's line.
fn table(out: &mut String, rows: &[&str]) {
    let cells = |row: &str| -> Vec<String> {
        let row = row.replace("\\|", "\u{1}");
        row.trim_matches('|')
            .split('|')
            .map(|c| c.trim().replace('\u{1}', "|"))
            .collect()
    };
    let header = cells(rows[0]);
    let keys = header.first().is_some_and(|h| h == "key") && header.len() == 3;
    for row in rows.iter().skip(2) {
        let c = cells(row);
        out.push_str(".TP\n");
        if keys {
            out.push_str(&text_line(&format!(
                "{} (default: {})",
                inline(&c[0]),
                inline(c.get(1).map_or("", String::as_str))
            )));
            out.push_str(&text_line(&inline(c.get(2).map_or("", String::as_str))));
        } else {
            out.push_str(&text_line(&inline(&c[0])));
            out.push_str(&text_line(&inline(&c[1..].join("; "))));
        }
    }
}

/// A heading's text without its Markdown marks.
fn plain(text: &str) -> String {
    text.replace('`', "")
}

/// Escapes for a `"…"` argument of a request.
fn quoted(text: &str) -> String {
    escape(text).replace('"', "\\(dq")
}

/// Text with roff's escape character and hyphens escaped, and every character beyond
/// ASCII named by its code point (`\[u2192]`), so the page reads the same without a
/// preprocessor.
fn escape(text: &str) -> String {
    let mut out = String::new();
    for c in text.chars() {
        match c {
            '\\' => out.push_str("\\e"),
            '-' => out.push_str("\\-"),
            c if c.is_ascii() => out.push(c),
            c => out.push_str(&format!("\\[u{:04X}]", u32::from(c))),
        }
    }
    out
}

/// A line of text that no roff request can be read from: a leading `.` or `'` is guarded.
fn text_line(text: &str) -> String {
    if text.starts_with('.') || text.starts_with('\'') {
        format!("\\&{text}\n")
    } else {
        format!("{text}\n")
    }
}

/// Markdown's inline marks as roff: code and bold in bold, a link as its text.
fn inline(text: &str) -> String {
    let mut out = String::new();
    let mut rest = text;
    let mut bold = false;
    while let Some(c) = rest.chars().next() {
        if c == '`' {
            let body = &rest[1..];
            match body.find('`') {
                Some(end) => {
                    out.push_str(&format!("\\fB{}\\fR", escape(&body[..end])));
                    rest = &body[end + 1..];
                }
                None => {
                    out.push('`');
                    rest = body;
                }
            }
        } else if let Some(after) = rest.strip_prefix("**") {
            out.push_str(if bold { "\\fR" } else { "\\fB" });
            bold = !bold;
            rest = after;
        } else if c == '[' {
            let link = rest[1..]
                .find("](")
                .and_then(|t| rest[1 + t..].find(')').map(|e| (t, 1 + t + e)));
            match link {
                Some((t, end)) => {
                    out.push_str(&inline(&rest[1..1 + t]));
                    rest = &rest[end + 1..];
                }
                None => {
                    out.push('[');
                    rest = &rest[1..];
                }
            }
        } else {
            out.push_str(&escape(&c.to_string()));
            rest = &rest[c.len_utf8()..];
        }
    }
    if bold {
        out.push_str("\\fR");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_page_of_the_reference_is_in_the_man_page() {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/docs/configuration");
        let mut files: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().to_string())
            .filter(|n| n.ends_with(".md"))
            .collect();
        files.sort();
        let mut named: Vec<String> = pages().map(str::to_string).collect();
        named.sort();
        assert_eq!(files, named, "docs/configuration/ against PAGES");
    }

    #[test]
    fn the_page_has_its_sections_keys_and_blocks() {
        let man = render("1.2.3");
        assert!(
            man.starts_with(".TH floodgate.toml 5 \"\" \"floodgate 1.2.3\""),
            "{man}"
        );
        assert!(man.contains(".SH \"[server]\"\n"), "{man}");
        assert!(man.contains(".SS \"[upstream.high_risk]\"\n"), "{man}");
        assert!(man.contains(".TP\n\\fBmax_connections\\fR (default: \\fB10000\\fR)\n"));
        assert!(man.contains(".nf\n"));
        // No Markdown left in the text.
        for line in man.lines().filter(|l| !l.starts_with('.')) {
            assert!(!line.contains("](") && !line.contains('`'), "{line}");
        }
    }

    #[test]
    fn markdown_marks_become_roff() {
        assert_eq!(inline("a `x-y` and **b**"), "a \\fBx\\-y\\fR and \\fBb\\fR");
        assert_eq!(inline("see [the page](../x.md#y)."), "see the page.");
        assert_eq!(inline("a \\ b"), "a \\e b");
        assert_eq!(escape("a → b"), "a \\[u2192] b");
        assert_eq!(text_line(".starts"), "\\&.starts\n");
        let mut out = String::new();
        table(
            &mut out,
            &[
                "| key | default | what |",
                "|---|---|---|",
                "| `k` | `1` | a \\| b |",
            ],
        );
        assert_eq!(out, ".TP\n\\fBk\\fR (default: \\fB1\\fR)\na | b\n");
    }
}
