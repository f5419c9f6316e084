//! The shape of a Subject: what stays the same across a campaign's copies when each copy
//! numbers or tags its Subject differently.

use super::words::{case_fold_into, is_random, RANDOM};

/// A shape is cut to at most this many bytes (at a character boundary): it is a key.
pub const MAX_SHAPE: usize = 200;

/// The shape of a decoded Subject: case-folded, whitespace collapsed to single spaces, each
/// run of digits read as `0`, each random-looking token (see the fingerprint's masking) as
/// `*`, punctuation kept. None when nothing is left.
pub(super) fn shape(subject: &str) -> Option<String> {
    let mut out = String::new();
    let mut buf = String::new();
    for token in subject.split(char::is_whitespace).filter(|t| !t.is_empty()) {
        if !out.is_empty() {
            out.push(' ');
        }
        // The token's core (punctuation around it kept as written).
        let core_start = token.find(char::is_alphanumeric).unwrap_or(token.len());
        let core_end = token.rfind(char::is_alphanumeric).map_or(core_start, |i| {
            i + token[i..].chars().next().map_or(0, char::len_utf8)
        });
        let core = &token[core_start..core_end];
        if is_random(core) {
            case_fold_into(&token[..core_start], &mut buf);
            out.push_str(&buf);
            out.push_str(RANDOM);
            case_fold_into(&token[core_end..], &mut buf);
            out.push_str(&buf);
        } else {
            case_fold_into(token, &mut buf);
            out.push_str(&buf);
        }
        if out.len() >= MAX_SHAPE {
            break;
        }
    }
    if out.len() > MAX_SHAPE {
        let mut end = MAX_SHAPE;
        while !out.is_char_boundary(end) {
            end -= 1;
        }
        out.truncate(end);
    }
    let out = out.trim_end().to_string();
    (!out.is_empty()).then_some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_tokens_case_and_spaces_are_normalised() {
        assert_eq!(
            shape("  Your Invoice #INV-2024-88213   is\tREADY ").as_deref(),
            Some("your invoice #inv-0-0 is ready")
        );
        assert_eq!(
            shape("Ref: [a8f7c6d5e4b3a2f1c0] order 12 of 2025").as_deref(),
            Some("ref: [*] order 0 of 0")
        );
        assert_eq!(shape("Größe ÄNDERN").as_deref(), Some("größe ändern"));
    }

    #[test]
    fn copies_of_one_campaign_share_the_shape() {
        assert_eq!(
            shape("Payment 4471 failed - code 8f3k2j"),
            shape("PAYMENT 93 failed - code x9y8z7")
        );
    }

    #[test]
    fn empty_subjects_have_no_shape() {
        assert_eq!(shape(""), None);
        assert_eq!(shape(" \t "), None);
        assert_eq!(shape("\u{200B}"), None);
    }

    #[test]
    fn shapes_are_bounded() {
        let long = "é".repeat(1000);
        let s = shape(&long).unwrap();
        assert!(s.len() <= MAX_SHAPE && s.chars().all(|c| c == 'é'));
        let words = "word ".repeat(1000);
        assert!(shape(&words).unwrap().len() <= MAX_SHAPE);
    }
}
