//! Quoted text left out: replies that quote the same original must not look alike because
//! of the quote.
//!
//! A quoted line starts with `>` after optional spaces. The attribution line just before a
//! quote ("On Mon, 3 Mar 2025, Ann <ann@example.org> wrote:", also when wrapped over two
//! lines, and its usual forms in a few other languages) goes with it.

/// Verbs of attribution lines, lower-case: "wrote:", "schrieb:", "a écrit :", …
const ATTRIBUTION_VERBS: [&str; 9] = [
    "wrote",
    "writes",
    "schrieb",
    "écrit",
    "escribió",
    "scritto",
    "schreef",
    "escreveu",
    "написал",
];

/// How attribution lines start when they are wrapped: "On …", "Am …", "Le …", "El …".
const ATTRIBUTION_OPENERS: [&str; 5] = ["on ", "am ", "le ", "el ", "op "];

/// Whether `line` is quoted: `>` after optional spaces or tabs.
pub(super) fn is_quoted(line: &str) -> bool {
    line.bytes().find(|&c| c != b' ' && c != b'\t') == Some(b'>')
}

/// Whether `line` reads like an attribution: it ends with a colon and names the writing.
fn is_attribution(line: &str) -> bool {
    let t = line.trim();
    if !t.ends_with(':') || t.len() > 400 {
        return false;
    }
    let lower = t.to_lowercase();
    ATTRIBUTION_VERBS.iter().any(|v| lower.contains(v))
}

/// Whether `line` starts like the first line of an attribution.
fn opens_attribution(line: &str) -> bool {
    let t = line.trim_start();
    ATTRIBUTION_OPENERS.iter().any(|o| {
        t.len() >= o.len() && t.is_char_boundary(o.len()) && t[..o.len()].eq_ignore_ascii_case(o)
    })
}

/// The lines of `text` as [`str::lines`] has them (a line ends at LF, a CR before it is
/// not part of it), each end found by memchr.
fn lines(text: &str) -> impl Iterator<Item = &str> {
    let mut at = 0;
    std::iter::from_fn(move || {
        let rest = text.get(at..).filter(|r| !r.is_empty())?;
        match memchr::memchr(b'\n', rest.as_bytes()) {
            Some(end) => {
                at += end + 1;
                let line = &rest[..end];
                Some(line.strip_suffix('\r').unwrap_or(line))
            }
            None => {
                at = text.len();
                Some(rest)
            }
        }
    })
}

/// The lines of `text` (LF or CRLF ends) that are neither quoted nor the attribution of a
/// quote, in order.
pub(super) fn unquoted_lines(text: &str) -> Vec<&str> {
    let mut kept: Vec<&str> = Vec::new();
    // The indices in `kept` of its lines with words, in order: each quoted line finds the
    // last of them in constant time whatever blank runs came before, and each index is
    // pushed and dropped at most once, so the whole pass is linear.
    let mut worded: Vec<usize> = Vec::new();
    for line in lines(text) {
        if !is_quoted(line) {
            if !line.trim().is_empty() {
                worded.push(kept.len());
            }
            kept.push(line);
            continue;
        }
        // Blank lines between an attribution and its quote stay; they hold no words.
        let Some(&last) = worded.last() else {
            continue;
        };
        if is_attribution(kept[last]) {
            let one_line = opens_attribution(kept[last]);
            kept.truncate(last);
            // Wrapped: "On …, Ann Example <" / "ann@example.org> wrote:".
            if !one_line
                && kept.last().is_some_and(|l| {
                    opens_attribution(l) && !l.trim_end().ends_with(['.', '!', '?'])
                })
            {
                kept.pop();
            }
            while worded.last().is_some_and(|&i| i >= kept.len()) {
                worded.pop();
            }
        }
    }
    kept
}

#[cfg(test)]
mod tests {
    use super::*;

    use proptest::prelude::*;

    proptest! {
        /// Any text: the lines `str::lines` finds.
        #[test]
        fn lines_are_those_of_str_lines(text in "([a\r\n ]|\u{E9})*") {
            prop_assert_eq!(lines(&text).collect::<Vec<_>>(), text.lines().collect::<Vec<_>>());
        }
    }

    #[test]
    fn quoted_lines_are_left_out() {
        let text = "Sounds good.\r\n\r\n> Shall we meet?\r\n  >> Earlier\r\nSee you\r\n";
        assert_eq!(unquoted_lines(text), ["Sounds good.", "", "See you"]);
    }

    #[test]
    fn the_attribution_goes_with_its_quote() {
        let text =
            "Yes.\n\nOn Mon, 3 Mar 2025 at 10:00, Ann <ann@example.org> wrote:\n\n> Coming?\n";
        assert_eq!(unquoted_lines(text), ["Yes.", ""]);
        let wrapped = "Yes.\nOn Mon, 3 Mar 2025 at 10:00, Ann Example <\nann@example.org> wrote:\n> Coming?\n";
        assert_eq!(unquoted_lines(wrapped), ["Yes."]);
        let german = "Ja.\nAm 03.03.2025 um 10:00 schrieb Ann:\n> Kommst du?\n";
        assert_eq!(unquoted_lines(german), ["Ja."]);
    }

    #[test]
    fn lines_that_only_look_like_attributions_stay() {
        // Not followed by a quote.
        let text = "Here is what she wrote:\nplain text\n";
        assert_eq!(
            unquoted_lines(text),
            ["Here is what she wrote:", "plain text"]
        );
        // Followed by a quote but not an attribution.
        let text = "Prices:\n> 10 EUR\n";
        assert_eq!(unquoted_lines(text), ["Prices:"]);
        // A wrapped attribution takes only the line that opens it.
        let text = "On the whole, fine.\nAnn wrote:\n> x\n";
        assert_eq!(unquoted_lines(text), ["On the whole, fine."]);
    }

    #[test]
    fn attributions_are_found_across_blank_runs_after_earlier_quotes() {
        // The last worded line is remembered across blank runs and dropped with the
        // attribution it was (benches/message_keys.rs times the worst case).
        let text = format!(
            "Hi.\n{}On Mon, Ann wrote:\n\n\n> a\n> b\nOk\n\n> c\n",
            "\n".repeat(500)
        );
        let kept = unquoted_lines(&text);
        assert_eq!(kept.first(), Some(&"Hi."));
        assert_eq!(kept.iter().filter(|l| !l.is_empty()).count(), 2);
        assert_eq!(kept.iter().rev().find(|l| !l.is_empty()), Some(&"Ok"));
    }

    #[test]
    fn a_greater_than_sign_inside_a_line_is_no_quote() {
        assert!(!is_quoted("a > b"));
        assert!(is_quoted("   > a"));
        assert!(is_quoted("\t>a"));
    }
}
