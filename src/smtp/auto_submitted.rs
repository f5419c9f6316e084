//! The `Auto-Submitted:` header field (RFC 3834): whether a message says it was sent
//! automatically (`auto-generated`, `auto-replied`, `auto-notified` or any other keyword
//! but `no`). Read from the header section only, folded lines unfolded, comments dropped.

/// Whether the header section `head` (the message's start; the body is not read) has an
/// `Auto-Submitted:` field whose keyword is not `no`.
pub fn is_automatic(head: &[u8]) -> bool {
    let mut value: Option<Vec<u8>> = None;
    let mut in_field = false;
    for raw in head.split(|&b| b == b'\n') {
        let line = raw.strip_suffix(b"\r").unwrap_or(raw);
        if line.is_empty() {
            break;
        }
        if line[0] == b' ' || line[0] == b'\t' {
            if in_field {
                if let Some(v) = value.as_mut() {
                    v.push(b' ');
                    v.extend_from_slice(line);
                }
            }
            continue;
        }
        in_field = false;
        let Some(colon) = line.iter().position(|&b| b == b':') else {
            continue;
        };
        if line[..colon].eq_ignore_ascii_case(b"auto-submitted") && value.is_none() {
            in_field = true;
            value = Some(line[colon + 1..].to_vec());
        }
    }
    value.is_some_and(|v| keyword_is_automatic(&v))
}

/// The keyword of a field value (before any `;` parameters, comments removed), judged.
fn keyword_is_automatic(v: &[u8]) -> bool {
    let mut depth = 0usize;
    let mut word = Vec::new();
    for &b in v {
        match b {
            b'(' => depth += 1,
            b')' => depth = depth.saturating_sub(1),
            b';' if depth == 0 => break,
            _ if depth == 0 && !b.is_ascii_whitespace() => word.push(b.to_ascii_lowercase()),
            _ => {}
        }
    }
    !word.is_empty() && word != b"no"
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn keywords() {
        assert!(is_automatic(
            b"From: a@b\r\nAuto-Submitted: auto-replied\r\n\r\nbody"
        ));
        assert!(is_automatic(
            b"auto-submitted:auto-generated; owner-email=x@y\r\n\r\n"
        ));
        assert!(is_automatic(
            b"Auto-Submitted:\r\n\tauto-notified (folded)\r\n\r\n"
        ));
        assert!(!is_automatic(b"Auto-Submitted: no\r\n\r\n"));
        assert!(!is_automatic(
            b"Auto-Submitted: No (a person wrote this)\r\n\r\n"
        ));
        assert!(!is_automatic(b"Auto-Submitted: (only a comment)\r\n\r\n"));
        assert!(!is_automatic(b"Subject: Auto-Submitted: yes\r\n\r\n"));
        // Only the header section is read.
        assert!(!is_automatic(
            b"From: a@b\r\n\r\nAuto-Submitted: auto-replied\r\n"
        ));
        // The first field counts.
        assert!(!is_automatic(
            b"Auto-Submitted: no\nAuto-Submitted: auto-replied\n\n"
        ));
        assert!(!is_automatic(b""));
    }

    proptest! {
        #[test]
        fn any_bytes_are_safe(b in proptest::collection::vec(any::<u8>(), 0..300)) {
            let _ = is_automatic(&b);
        }

        #[test]
        fn keyword_decides(k in "[a-zA-Z-]{1,20}", other in "[A-Z][a-z]{0,10}: [ -~]{0,30}") {
            let head = format!("{other}\r\nAuto-Submitted: {k}; x=y\r\n\r\nbody");
            prop_assert_eq!(is_automatic(head.as_bytes()), !k.eq_ignore_ascii_case("no"));
        }
    }
}
