//! Whether a message is bulk or automatic mail, from its header section: the mail that
//! message keys pass over unless a limit asks for it (a null sender is the caller's to see).

/// The fields of a header section (up to its first empty line), unfolded: `(name, value)`
/// with the value's folding line ends kept. A line that is neither a field nor a
/// continuation is passed over.
fn fields(header_section: &[u8]) -> impl Iterator<Item = (&[u8], Vec<u8>)> {
    let mut lines = header_section
        .split(|&b| b == b'\n')
        .map(|l| l.strip_suffix(b"\r").unwrap_or(l))
        .take_while(|l| !l.is_empty())
        .peekable();
    std::iter::from_fn(move || loop {
        let line = lines.next()?;
        let Some(colon) = line.iter().position(|&b| b == b':') else {
            continue;
        };
        let name = line[..colon].trim_ascii();
        let mut value = line[colon + 1..].to_vec();
        while let Some(next) = lines.next_if(|l| l.starts_with(b" ") || l.starts_with(b"\t")) {
            value.extend_from_slice(next);
        }
        return Some((name, value));
    })
}

/// The first word of a structured field's value, lower-case (`auto-replied (vacation)` →
/// `auto-replied`).
fn first_word(value: &[u8]) -> String {
    value
        .trim_ascii_start()
        .iter()
        .take_while(|b| b.is_ascii_alphanumeric() || **b == b'-' || **b == b'_')
        .map(|b| b.to_ascii_lowercase() as char)
        .collect()
}

/// Whether the message is bulk or automatic mail that message keys skip unless a limit asks
/// for it: `Auto-Submitted` with any value but `no` (RFC 3834), a `List-Id` (RFC 2919), or
/// `Precedence: bulk`, `list` or `junk`. Reads `header_section` up to its first empty line;
/// a null sender is the caller's to check.
pub fn is_automatic(header_section: &[u8]) -> bool {
    fields(header_section).any(|(name, value)| {
        if name.eq_ignore_ascii_case(b"auto-submitted") {
            let word = first_word(&value);
            !word.is_empty() && word != "no"
        } else if name.eq_ignore_ascii_case(b"list-id") {
            !value.trim_ascii().is_empty()
        } else if name.eq_ignore_ascii_case(b"precedence") {
            matches!(first_word(&value).as_str(), "bulk" | "list" | "junk")
        } else {
            false
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn auto_submitted_is_automatic_unless_no() {
        assert!(is_automatic(
            b"From: a@b\r\nAuto-Submitted: auto-replied\r\n\r\nbody"
        ));
        assert!(is_automatic(b"auto-submitted:AUTO-GENERATED (daily)\r\n"));
        assert!(is_automatic(
            b"Subject: x\r\nAuto-Submitted:\r\n auto-notified\r\n"
        ));
        assert!(!is_automatic(b"Auto-Submitted: no\r\n"));
        assert!(!is_automatic(b"Auto-Submitted: No (a person)\r\n"));
        assert!(!is_automatic(b"Auto-Submitted: \r\n"));
    }

    #[test]
    fn lists_and_bulk_precedence_are_automatic() {
        assert!(is_automatic(b"List-Id: Team <team.lists.example.org>\r\n"));
        assert!(is_automatic(b"Precedence: bulk\r\n"));
        assert!(is_automatic(b"Precedence: List\r\n"));
        assert!(is_automatic(b"PRECEDENCE:junk\n"));
        assert!(!is_automatic(b"Precedence: first-class\r\n"));
        assert!(!is_automatic(b"Precedence: bulky\r\n"));
    }

    #[test]
    fn only_the_header_section_counts() {
        assert!(!is_automatic(
            b"From: a@b\r\nSubject: Precedence: bulk\r\n\r\nList-Id: x\r\n"
        ));
        assert!(!is_automatic(b"X-List-Id: x\r\nX-Precedence: bulk\r\n"));
        assert!(!is_automatic(b""));
        assert!(!is_automatic(b"no colon here\r\n\xff\xfe"));
    }
}
