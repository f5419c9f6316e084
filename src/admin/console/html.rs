//! HTML text: escaping, truncation, links and the page shell every console page shares.
//!
//! Everything that comes from outside (keys, addresses, header fields, limit names,
//! evidence) goes through [`text`] or [`attr`]; nothing else writes such text into a page.

use std::fmt::Write as _;

use crate::admin::http::percent_encode;
// The figures the pages show: a byte size, and a number for a table cell.
pub use crate::figures::{size, table_number as num};

/// The longest key, address or header value shown in a table cell, in characters.
pub const CELL_CHARS: usize = 120;
/// The longest header section shown for one held message, in characters.
pub const HEADERS_CHARS: usize = 16 * 1024;

pub use crate::report::markup::{escape, escape_into};

/// `s` cut to at most `max` characters (never inside a character), with `…` appended
/// when something was cut, and whether it was.
pub fn truncate(s: &str, max: usize) -> (&str, bool) {
    match s.char_indices().nth(max) {
        Some((i, _)) => (&s[..i], true),
        None => (s, false),
    }
}

/// `s` cut to `max` characters and escaped; a cut text ends in `…` and says how long it
/// was in a `title` the caller cannot forget: the returned HTML is a `<span>`.
pub fn text(s: &str, max: usize) -> String {
    let (shown, cut) = truncate(s, max);
    if cut {
        format!(
            "<span class=\"cut\" title=\"{} characters, cut\">{}…</span>",
            s.chars().count(),
            escape(shown)
        )
    } else {
        escape(s)
    }
}

/// Tokens longer than this many characters (an address, an id, a key) may wrap anywhere;
/// shorter ones, and every word and number, never break inside.
pub const LONG_TOKEN: usize = 24;

/// A token (an address, an id, a key) cut to `max` characters and escaped: when it is
/// longer than [`LONG_TOKEN`] it may wrap anywhere (`<span class="tok">`), else it keeps
/// whole like any word.
pub fn token(s: &str, max: usize) -> String {
    let t = text(s, max);
    if s.chars().count() > LONG_TOKEN {
        format!("<span class=\"tok\">{t}</span>")
    } else {
        t
    }
}

/// `s` escaped for a quoted attribute value (not truncated: use it for ids and URLs).
pub fn attr(s: &str) -> String {
    crate::report::markup::escape_attr(s)
}

/// A console URL: `path` with the query `params` percent-encoded, ready for an `href`
/// (escaped).
pub fn url(path: &str, params: &[(&str, &str)]) -> String {
    let mut u = String::from(path);
    for (i, (k, v)) in params.iter().enumerate() {
        u.push(if i == 0 { '?' } else { '&' });
        u.push_str(&percent_encode(k));
        u.push('=');
        u.push_str(&percent_encode(v));
    }
    escape(&u)
}

/// The URL of the incident page of `key` (`/console/key/KEY`, the key percent-encoded),
/// escaped.
pub fn key_url(key: &str) -> String {
    // A browser would resolve `/console/key/..` to another path: those two keys go in
    // the query instead.
    if key.is_empty() || key == "." || key == ".." {
        return url("/console/key", &[("k", key)]);
    }
    escape(&format!("/console/key/{}", percent_encode(key)))
}

/// A link to the incident page of `key`, showing the key cut to [`CELL_CHARS`].
pub fn key_link(key: &str) -> String {
    format!(
        "<a href=\"{}\">{}</a>",
        key_url(key),
        token(key, CELL_CHARS)
    )
}

/// A link to the page of held message `id`.
pub fn held_link(id: &str) -> String {
    format!(
        "<a href=\"/console/held/{}\"><code>{}</code></a>",
        attr(&percent_encode(id)),
        token(id, CELL_CHARS)
    )
}

/// The result of a form action the page was sent back to with (`?done=TEXT` or
/// `?failed=TEXT`), as a note that stays in view; empty without one.
pub fn done_note(done: Option<&str>, failed: Option<&str>) -> String {
    let mut out = String::new();
    if let Some(d) = done.filter(|d| !d.is_empty()) {
        let _ = write!(
            out,
            "<p class=\"status ok\" id=\"done\" role=\"status\">{}</p>",
            text(d, 2000)
        );
    }
    if let Some(f) = failed.filter(|f| !f.is_empty()) {
        let _ = write!(
            out,
            "<p class=\"status bad\" id=\"failed\" role=\"alert\">{}</p>",
            text(f, 2000)
        );
    }
    out
}

/// The hidden field carrying the session's CSRF value in a form that acts (forms work
/// without scripting; the value is checked like the header the buttons send).
pub fn csrf_field(shell: &Shell<'_>) -> String {
    shell.csrf.map_or_else(String::new, |c| {
        format!(
            "<input type=\"hidden\" name=\"csrf\" value=\"{}\">",
            attr(c)
        )
    })
}

/// Which navigation entry a page is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Nav {
    /// The overview.
    Overview,
    /// Top keys.
    Top,
    /// Restricted keys.
    Restricted,
    /// Held messages.
    Held,
    /// Campaigns of message keys.
    Campaigns,
    /// A key page (not in the navigation bar).
    Key,
    /// The login page (no navigation).
    Login,
}

const NAV: [(Nav, &str, &str); 5] = [
    (Nav::Overview, "/console/", "Overview"),
    (Nav::Top, "/console/top", "Top keys"),
    (Nav::Restricted, "/console/restricted", "Restricted"),
    (Nav::Held, "/console/held", "Held"),
    (Nav::Campaigns, "/console/campaigns", "Campaigns"),
];

/// What the shell needs besides the page's own content.
#[derive(Clone, Debug, Default)]
pub struct Shell<'a> {
    /// The session's CSRF value for the page's script (`None`: no session, no actions).
    pub csrf: Option<&'a str>,
    /// The console may act (release, delete, reset).
    pub actions: bool,
    /// The host name floodgate calls itself.
    pub host: &'a str,
}

/// The page title: the page's, then the host; "floodgate" is said once (not when the host
/// name already starts with it, as `floodgate.example.org` does).
pub fn title_text(title: &str, host: &str) -> String {
    let host = text(host, 60);
    let says_it = host
        .split(['.', '-'])
        .next()
        .is_some_and(|first| first.eq_ignore_ascii_case("floodgate"));
    if host.is_empty() {
        format!("{} · floodgate", escape(title))
    } else if says_it {
        format!("{} · {host}", escape(title))
    } else {
        format!("{} · floodgate on {host}", escape(title))
    }
}

/// A whole page: head (style sheet and script from this server only), navigation, the
/// page's `body` HTML, footer.
pub fn page(title: &str, nav: Nav, shell: &Shell<'_>, body: &str) -> String {
    page_refreshing(title, nav, shell, body, None)
}

/// [`page`], reloaded by the browser every `refresh` seconds when given (a `<meta
/// http-equiv="refresh">`: no script needed).
pub fn page_refreshing(
    title: &str,
    nav: Nav,
    shell: &Shell<'_>,
    body: &str,
    refresh: Option<u32>,
) -> String {
    let mut out = String::with_capacity(body.len() + 2048);
    out.push_str("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">");
    if let Some(secs) = refresh {
        let _ = write!(out, "<meta http-equiv=\"refresh\" content=\"{secs}\">");
    }
    out.push_str("<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">");
    out.push_str("<meta name=\"referrer\" content=\"same-origin\">");
    if let Some(c) = shell.csrf {
        let _ = write!(
            out,
            "<meta name=\"floodgate-csrf\" content=\"{}\">",
            attr(c)
        );
    }
    let _ = write!(out, "<title>{}</title>", title_text(title, shell.host));
    out.push_str("<link rel=\"icon\" href=\"/console/static/icon.svg\">");
    out.push_str("<link rel=\"stylesheet\" href=\"/console/static/console.css\">");
    out.push_str("<script src=\"/console/static/console.js\" defer></script>");
    out.push_str("</head><body>");
    if nav != Nav::Login {
        out.push_str("<header><nav><span class=\"brand\">floodgate</span>");
        for (n, href, label) in NAV {
            let current = if n == nav {
                " aria-current=\"page\""
            } else {
                ""
            };
            let _ = write!(out, "<a href=\"{href}\"{current}>{label}</a>");
        }
        out.push_str("<form class=\"key-search\" method=\"get\" action=\"/console/key\">");
        out.push_str("<input name=\"k\" placeholder=\"key\" aria-label=\"key\" required>");
        out.push_str("<button type=\"submit\">Inspect</button></form>");
        if let Some(c) = shell.csrf {
            let _ = write!(
                out,
                "<form class=\"logout\" method=\"post\" action=\"/console/logout\">\
                 <input type=\"hidden\" name=\"csrf\" value=\"{}\">\
                 <button type=\"submit\">Log out</button></form>",
                attr(c)
            );
        }
        out.push_str("</nav>");
        let mode = if shell.actions {
            "actions on"
        } else {
            "read-only (set [admin] console_actions = true to act)"
        };
        let _ = write!(
            out,
            "<p class=\"mode\">{} · {}</p></header>",
            text(shell.host, 60),
            mode
        );
    }
    out.push_str("<main>");
    let _ = write!(out, "<h1>{}</h1>", escape(title));
    out.push_str("<p id=\"status\" class=\"status\" role=\"status\" aria-live=\"polite\"></p>");
    out.push_str(body);
    out.push_str("</main></body></html>\n");
    out
}

/// A button the page's script turns into a POST to `action` (a URL from [`url`], already
/// escaped) with the CSRF header; `confirm` is what the armed button asks before the
/// second click; `reason`: the row's `input.reason` must say why. Without script it does nothing, and the page
/// says so once in a `<noscript>`.
pub fn action_button(label: &str, action: &str, confirm: &str, reason: bool) -> String {
    format!(
        "<button type=\"button\" class=\"act\" data-action=\"{}\" data-confirm=\"{}\"{}>{}</button>",
        action,
        attr(confirm),
        if reason { " data-reason=\"1\"" } else { "" },
        escape(label)
    )
}

/// The box of a release form that releases held mail of a key still restricted all the
/// same (`confirm=true`; without it such a release is refused, saying since when, by whom
/// and why the key is restricted).
pub const CONFIRM_FIELD: &str =
    "<label class=\"confirm-form\"><input type=\"checkbox\" name=\"confirm\" value=\"true\"> \
     release though restricted</label>";

/// The note shown in place of working buttons when scripting is off.
pub const NOSCRIPT: &str =
    "<noscript><p class=\"note\">The buttons need JavaScript; everything else works without \
     it.</p></noscript>";

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Reverses [`escape`] (for strings without control characters).
    fn unescape(s: &str) -> String {
        s.replace("&lt;", "<")
            .replace("&gt;", ">")
            .replace("&quot;", "\"")
            .replace("&#39;", "'")
            .replace("&amp;", "&")
    }

    #[test]
    fn escapes_the_five_characters() {
        assert_eq!(
            escape("<a href=\"x\">'&'</a>"),
            "&lt;a href=&quot;x&quot;&gt;&#39;&amp;&#39;&lt;/a&gt;"
        );
        assert_eq!(escape("plain ünïcode"), "plain ünïcode");
        assert_eq!(
            escape("a\0b\x1bc\u{7f}d\te\nf"),
            "a\\u{0}b\\u{1b}c\\u{7f}d\te\nf"
        );
        // A right-to-left override in a key is shown, not obeyed; in a form's value it
        // stays what is submitted.
        assert_eq!(escape("k\u{202e}gpj"), "k\\u{202e}gpj");
        assert_eq!(attr("k\u{202e}gpj"), "k\u{202e}gpj");
        assert_eq!(escape("&amp;"), "&amp;amp;");
    }

    #[test]
    fn truncates_on_character_boundaries() {
        assert_eq!(truncate("abc", 3), ("abc", false));
        assert_eq!(truncate("abcd", 3), ("abc", true));
        assert_eq!(truncate("ééé", 2), ("éé", true));
        assert_eq!(truncate("", 0), ("", false));
        assert_eq!(truncate("x", 0), ("", true));
        let long = "<".repeat(1000);
        let t = text(&long, 10);
        assert!(t.contains(&"&lt;".repeat(10)), "{t}");
        assert!(!t.contains(&"&lt;".repeat(11)), "{t}");
        assert!(t.contains("1000 characters, cut"), "{t}");
        assert_eq!(text("<b>", 10), "&lt;b&gt;");
        // Long tokens may wrap anywhere; short ones and words stay whole.
        assert_eq!(token("127.0.0.150", 60), "127.0.0.150");
        let a = "a.very.long.address@mail.example.org";
        assert_eq!(token(a, 60), format!("<span class=\"tok\">{a}</span>"));
        assert!(token("<".repeat(30).as_str(), 60).contains("&lt;&lt;"));
    }

    #[test]
    fn urls_are_encoded_then_escaped() {
        assert_eq!(
            url("/console/key", &[("k", "a&b <c>\"")]),
            "/console/key?k=a%26b%20%3Cc%3E%22"
        );
        assert_eq!(
            url("/console/top", &[("limit", "x"), ("page", "2")]),
            "/console/top?limit=x&amp;page=2"
        );
        let l = key_link("<script>/x");
        assert!(
            l.contains("href=\"/console/key/%3Cscript%3E%2Fx\"")
                && l.contains(">&lt;script&gt;/x</a>"),
            "{l}"
        );
        let l = held_link("abc-1");
        assert!(l.contains("href=\"/console/held/abc-1\""), "{l}");
        let d = done_note(Some("<b>2 released</b>"), Some("x"));
        assert!(
            d.contains("&lt;b&gt;2 released") && d.contains("id=\"failed\""),
            "{d}"
        );
        assert_eq!(done_note(None, Some("")), "");
    }

    #[test]
    fn page_escapes_title_and_carries_csrf_only_with_a_session() {
        let shell = Shell {
            csrf: Some("c0ffee"),
            actions: false,
            host: "mx<1>",
        };
        let p = page("<t>", Nav::Held, &shell, "<p>body</p>");
        assert!(p.contains("<h1>&lt;t&gt;</h1>"), "{p}");
        assert!(
            p.contains("name=\"floodgate-csrf\" content=\"c0ffee\""),
            "{p}"
        );
        assert!(p.contains("mx&lt;1&gt;") && !p.contains("mx<1>"), "{p}");
        assert!(
            p.contains("href=\"/console/held\" aria-current=\"page\""),
            "{p}"
        );
        assert!(p.contains("read-only"), "{p}");
        let p = page("login", Nav::Login, &Shell::default(), "");
        assert!(!p.contains("floodgate-csrf") && !p.contains("<nav>"), "{p}");
        // Nothing from another host.
        assert!(!p.contains("http://") && !p.contains("https://"), "{p}");
    }

    proptest! {
        #[test]
        fn escaped_text_has_no_markup_and_reads_back(s in "\\PC*") {
            let e = escape(&s);
            prop_assert!(!e.contains('<') && !e.contains('>'));
            prop_assert!(!e.contains('"') && !e.contains('\''));
            // Every & starts one of the five references.
            for (i, _) in e.match_indices('&') {
                let rest = &e[i..];
                prop_assert!(["&amp;", "&lt;", "&gt;", "&quot;", "&#39;"]
                    .iter()
                    .any(|r| rest.starts_with(r)), "{}", rest);
            }
            prop_assert_eq!(unescape(&e), s);
        }

        #[test]
        fn escaping_any_string_removes_controls(s in any::<String>()) {
            let e = escape(&s);
            prop_assert!(!e.contains('<') && !e.contains('"'));
            prop_assert!(e.chars().all(|c| !c.is_control() || matches!(c, '\t' | '\n' | '\r')));
        }

        #[test]
        fn truncation_is_a_prefix_of_at_most_max_chars(s in any::<String>(), max in 0usize..50) {
            let (t, cut) = truncate(&s, max);
            prop_assert!(s.starts_with(t));
            prop_assert!(t.chars().count() <= max);
            prop_assert_eq!(cut, s.chars().count() > max);
        }
    }

    #[test]
    fn the_title_says_floodgate_once() {
        assert_eq!(
            title_text("Overview", "floodgate.test"),
            "Overview · floodgate.test"
        );
        assert_eq!(
            title_text("Overview", "mx1.example.org"),
            "Overview · floodgate on mx1.example.org"
        );
        assert_eq!(title_text("Held <x>", ""), "Held &lt;x&gt; · floodgate");
    }
}
