//! Upstream's queue id in its answer to the end of data: Postfix's
//! `250 2.0.0 Ok: queued as 4Xyz0123AB` and Exim's `250 OK id=1rOBxk-0003Ab-2Q`.

/// Most characters a queue id may have.
pub const MAX_LEN: usize = 64;

fn id_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '-' || c == '.' || c == '_'
}

/// The queue id after `marker` in `text`, if a plausible one follows it.
fn after<'a>(text: &'a str, marker: &str) -> Option<&'a str> {
    let lower = text.to_ascii_lowercase();
    let at = lower.find(marker)? + marker.len();
    let rest = &text[at..];
    let end = rest.find(|c: char| !id_char(c)).unwrap_or(rest.len());
    let id = rest[..end].trim_end_matches(['.', '-', '_']);
    (!id.is_empty()
        && id.len() <= MAX_LEN
        && id.chars().next().is_some_and(|c| c.is_ascii_alphanumeric()))
    .then_some(id)
}

/// The queue id in one line of a 2xx reply to the end of data (Postfix `queued as ID`,
/// Exim `id=ID`), or `None`.
pub fn parse_line(text: &str) -> Option<&str> {
    after(text, "queued as ").or_else(|| after(text, "id="))
}

/// The queue id in a reply's lines (the last line that has one).
pub fn parse(lines: &[String]) -> Option<&str> {
    lines.iter().rev().find_map(|l| parse_line(l))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn real_replies() {
        assert_eq!(
            parse_line("2.0.0 Ok: queued as 4XyzQ1bCDf"),
            Some("4XyzQ1bCDf")
        );
        assert_eq!(
            parse_line("2.0.0 Ok: queued as 3F1A2B3C4D"),
            Some("3F1A2B3C4D")
        );
        assert_eq!(
            parse_line("OK id=1rOBxk-0003Ab-2Q"),
            Some("1rOBxk-0003Ab-2Q")
        );
        assert_eq!(
            parse_line("OK id=1rOBxk-00000003Abc-2Qxy"),
            Some("1rOBxk-00000003Abc-2Qxy")
        );
        assert_eq!(parse_line("2.0.0 Ok: Queued As ABC."), Some("ABC"));
        assert_eq!(parse_line("2.0.0 Ok"), None);
        assert_eq!(parse_line("2.0.0 Ok: queued as "), None);
        assert_eq!(parse_line("2.0.0 Ok: queued as -x"), None);
        assert_eq!(parse_line(&format!("queued as {}", "A".repeat(65))), None);
        let lines = vec!["first".to_string(), "2.0.0 Ok: queued as ZZ1".to_string()];
        assert_eq!(parse(&lines), Some("ZZ1"));
        assert_eq!(parse(&[]), None);
    }

    proptest! {
        #[test]
        fn any_text_is_safe(s in "\\PC{0,120}") {
            if let Some(id) = parse_line(&s) {
                prop_assert!(!id.is_empty() && id.len() <= MAX_LEN);
                prop_assert!(id.chars().all(id_char));
            }
        }

        #[test]
        fn ids_are_found(id in "[0-9A-Za-z]{1,20}(-[0-9A-Za-z]{1,11}){0,2}", pre in "[ -~]{0,20}") {
            let postfix = format!("{pre} queued as {id}");
            let exim = format!("OK id={id} more");
            prop_assert_eq!(parse_line(&postfix), Some(id.as_str()));
            prop_assert_eq!(parse_line(&exim), Some(id.as_str()));
        }
    }
}
