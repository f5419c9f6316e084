//! Signatures and legal disclaimers at the end of a text: the same in every message of one
//! writer (or of a whole organisation), so they must not make two messages look alike.
//!
//! Left out: everything after a signature delimiter line (`-- `); a closing line ("Best
//! regards,", "Kind regards", "Cheers", "Mit freundlichen Grüßen", "Cordialement", …) and the
//! short block after it when that block ends the text; and paragraphs at the end that read
//! like a disclaimer (at least two of its phrases: "confidential", "intended recipient",
//! "received this e-mail in error", …).

/// Closings, lower-case, punctuation trimmed.
const CLOSINGS: [&str; 34] = [
    "best regards",
    "kind regards",
    "warm regards",
    "regards",
    "best wishes",
    "best",
    "cheers",
    "thanks",
    "thank you",
    "many thanks",
    "thanks and regards",
    "sincerely",
    "yours sincerely",
    "yours faithfully",
    "yours truly",
    "all the best",
    "mit freundlichen grüßen",
    "mit freundlichen grüssen",
    "freundliche grüße",
    "viele grüße",
    "beste grüße",
    "liebe grüße",
    "gruß",
    "grüße",
    "cordialement",
    "bien cordialement",
    "bien à vous",
    "salutations",
    "meilleures salutations",
    "saludos",
    "un saludo",
    "atentamente",
    "saluti",
    "cordiali saluti",
];

/// Phrases of legal disclaimers, lower-case.
const DISCLAIMER_PHRASES: [&str; 16] = [
    "confidential",
    "intended recipient",
    "intended solely",
    "intended only for",
    "privileged",
    "received this e-mail in error",
    "received this email in error",
    "received this message in error",
    "notify the sender",
    "any attachments",
    "disclosure, copying",
    "strictly prohibited",
    "vertraulich",
    "nicht der richtige adressat",
    "destinataire",
    "confidentiel",
];

/// At most this many non-blank lines may follow a closing for it to start a signature.
const SIGNATURE_LINES: usize = 8;

/// At most this many words may a line of a signature block have.
const SIGNATURE_LINE_WORDS: usize = 12;

/// At most this many rounds of closings and disclaimers are taken off the end.
const MAX_ROUNDS: usize = 6;

/// A paragraph of more lines is no disclaimer.
const MAX_DISCLAIMER_LINES: usize = 40;

/// Whether `line` is a closing.
fn is_closing(line: &str) -> bool {
    let t = line
        .trim()
        .trim_end_matches(|c: char| c.is_ascii_punctuation() || c.is_whitespace());
    if t.is_empty() || t.len() > 40 {
        return false;
    }
    let lower = t.to_lowercase();
    CLOSINGS.contains(&lower.as_str())
}

/// Whether `paragraph` (its lines joined) reads like a disclaimer.
fn is_disclaimer(paragraph: &str) -> bool {
    let lower = paragraph.to_lowercase();
    DISCLAIMER_PHRASES
        .iter()
        .filter(|p| lower.contains(*p))
        .count()
        >= 2
}

/// Why a line at the end is left out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Tail {
    /// A signature (after `-- `, or a closing and its short block).
    Signature,
    /// A legal disclaimer.
    Disclaimer,
}

/// The end of the author's own text in `lines`: the index from which the rest is a
/// signature or a disclaimer, and which; `(lines.len(), None)` when there is neither.
pub(super) fn end(lines: &[&str]) -> (usize, Option<Tail>) {
    let mut end = lines.len();
    let mut why = None;
    if let Some(i) = lines.iter().position(|l| l.trim_end() == "--") {
        end = i;
        why = Some(Tail::Signature);
    }
    // Closings, signatures and disclaimers alternate a few times at most; the bound keeps
    // the pass linear whatever the text.
    for _ in 0..MAX_ROUNDS {
        let before = end;
        // Disclaimer paragraphs at the end.
        while let Some(start) = last_paragraph(&lines[..end]) {
            if end - start > MAX_DISCLAIMER_LINES || !is_disclaimer(&lines[start..end].join(" ")) {
                break;
            }
            end = start;
            why = Some(Tail::Disclaimer);
        }
        // A closing followed only by a short block.
        let mut short = 0;
        for i in (0..end).rev() {
            let l = lines[i];
            if l.trim().is_empty() {
                continue;
            }
            if is_closing(l) {
                end = i;
                why = Some(Tail::Signature);
                break;
            }
            short += 1;
            if short > SIGNATURE_LINES || l.split_whitespace().count() > SIGNATURE_LINE_WORDS {
                break;
            }
        }
        if end == before {
            break;
        }
    }
    (end, why)
}

/// The start of the last paragraph of `lines` (blank lines at its end passed over), or
/// None when only blank lines are left.
fn last_paragraph(lines: &[&str]) -> Option<usize> {
    let last = lines.iter().rposition(|l| !l.trim().is_empty())?;
    Some(
        lines[..last]
            .iter()
            .rposition(|l| l.trim().is_empty())
            .map_or(0, |b| b + 1),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn own(text: &str) -> Vec<&str> {
        let lines: Vec<&str> = text.lines().collect();
        lines[..end(&lines).0].to_vec()
    }

    #[test]
    fn the_delimiter_and_closings_start_a_signature() {
        assert_eq!(own("Hello there.\n-- \nAnn\n+1 555\n"), ["Hello there."]);
        assert_eq!(
            own("Hello there.\n\nBest regards,\nAnn Example\nHead of Gardens\nExample Ltd\n"),
            ["Hello there.", ""]
        );
        assert_eq!(own("Hallo.\nMit freundlichen Grüßen\nAnn\n"), ["Hallo."]);
        assert_eq!(own("Salut.\nCordialement,\n"), ["Salut."]);
    }

    #[test]
    fn disclaimers_at_the_end_go_with_the_signature() {
        let text = "Please see the plan.\n\nCheers,\nAnn\n\nThis e-mail and any attachments are confidential and\nintended solely for the addressee. If you are not the intended recipient,\nplease notify the sender.\n";
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(own(text), ["Please see the plan.", ""]);
        assert_eq!(end(&lines).1, Some(Tail::Signature));
        let only = "Plan attached.\n\nThis message is confidential. If you are not the intended recipient delete it.\n";
        assert_eq!(own(only), ["Plan attached.", ""]);
    }

    #[test]
    fn a_closing_far_from_the_end_stays() {
        let mut text = String::from("Thanks\n");
        for i in 0..12 {
            text.push_str(&format!("line {i} of the real message\n"));
        }
        assert_eq!(own(&text).len(), 13);
        // A long line after the closing: not a signature block.
        let text = "Regards\nthis line has far too many words to be part of any signature block at all here\n";
        assert_eq!(own(text).len(), 2);
        // Confidential once is no disclaimer.
        assert_eq!(own("This plan is confidential.\n").len(), 1);
    }

    proptest! {
        /// Any lines: no panic, the end is within the text.
        #[test]
        fn any_lines_end_within(lines in prop::collection::vec("\\PC{0,40}", 0..30)) {
            let refs: Vec<&str> = lines.iter().map(String::as_str).collect();
            prop_assert!(end(&refs).0 <= refs.len());
        }
    }
}
