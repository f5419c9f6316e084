//! Characters a reader cannot see, and letters that look alike.
//!
//! Spammers put invisible characters inside words and swap letters for look-alikes from other
//! scripts (Cyrillic `а` for Latin `a`) so that every copy spells its words differently while
//! reading the same. The fingerprint drops every character of Unicode's
//! Default_Ignorable_Code_Point property and of general category Cf (format characters), and
//! folds each word to its confusable skeleton (UTS #39, the `unicode-security` crate) after
//! NFKC compatibility folding (fullwidth and mathematical letters to plain ones).

use std::sync::OnceLock;
use unicode_normalization::UnicodeNormalization;

/// Default_Ignorable_Code_Point (Unicode 15) and the format characters (general category
/// Cf) outside it, as inclusive ranges in order.
const INVISIBLE: &[(char, char)] = &[
    ('\u{00AD}', '\u{00AD}'),
    ('\u{034F}', '\u{034F}'),
    ('\u{0600}', '\u{0605}'),
    ('\u{061C}', '\u{061C}'),
    ('\u{06DD}', '\u{06DD}'),
    ('\u{070F}', '\u{070F}'),
    ('\u{0890}', '\u{0891}'),
    ('\u{08E2}', '\u{08E2}'),
    ('\u{115F}', '\u{1160}'),
    ('\u{17B4}', '\u{17B5}'),
    ('\u{180B}', '\u{180F}'),
    ('\u{200B}', '\u{200F}'),
    ('\u{202A}', '\u{202E}'),
    ('\u{2060}', '\u{206F}'),
    ('\u{3164}', '\u{3164}'),
    ('\u{FE00}', '\u{FE0F}'),
    ('\u{FEFF}', '\u{FEFF}'),
    ('\u{FFA0}', '\u{FFA0}'),
    ('\u{FFF0}', '\u{FFFB}'),
    ('\u{110BD}', '\u{110BD}'),
    ('\u{110CD}', '\u{110CD}'),
    ('\u{13430}', '\u{1343F}'),
    ('\u{1BCA0}', '\u{1BCA3}'),
    ('\u{1D173}', '\u{1D17A}'),
    ('\u{E0000}', '\u{E0FFF}'),
];

/// Whether `c` shows nothing: a default-ignorable code point or a format character.
pub(super) fn is_invisible(c: char) -> bool {
    if (c as u32) < 0xAD {
        return false;
    }
    INVISIBLE.iter().any(|&(lo, hi)| lo <= c && c <= hi)
}

/// The folded form of each ASCII character (index = code point), as [`fold_letters`] folds
/// it.
pub(super) fn ascii_table() -> &'static [String; 128] {
    static TABLE: OnceLock<[String; 128]> = OnceLock::new();
    TABLE.get_or_init(|| {
        std::array::from_fn(|i| {
            let c = char::from(i as u8).to_ascii_lowercase();
            fold_slow(c.encode_utf8(&mut [0; 4]))
        })
    })
}

/// The skeleton of `s` lower-cased, lower-cased again (some prototypes are capitals).
fn fold_slow(s: &str) -> String {
    let lower: String = s.nfkc().flat_map(char::to_lowercase).collect();
    unicode_security::skeleton(&lower)
        .flat_map(char::to_lowercase)
        .filter(|&c| !is_invisible(c))
        .collect()
}

/// Appends the look-alike fold of `piece` (a run of letters and digits) to `out`: NFKC,
/// lower case, confusable skeleton, lower case. ASCII goes through a table.
pub(super) fn fold_letters(piece: &str, out: &mut String) {
    if piece.is_ascii() {
        let table = ascii_table();
        for b in piece.bytes() {
            out.push_str(&table[usize::from(b)]);
        }
    } else {
        out.push_str(&fold_slow(piece));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fold(s: &str) -> String {
        let mut out = String::new();
        fold_letters(s, &mut out);
        out
    }

    #[test]
    fn every_listed_invisible_character_is_invisible() {
        for c in [
            '\u{34F}',
            '\u{115F}',
            '\u{1160}',
            '\u{17B4}',
            '\u{17B5}',
            '\u{180B}',
            '\u{180E}',
            '\u{180F}',
            '\u{200B}',
            '\u{200F}',
            '\u{202A}',
            '\u{202E}',
            '\u{2060}',
            '\u{2062}',
            '\u{2064}',
            '\u{206F}',
            '\u{3164}',
            '\u{FE00}',
            '\u{FE0F}',
            '\u{FEFF}',
            '\u{FFA0}',
            '\u{E0001}',
            '\u{E0FFF}',
            '\u{AD}',
            '\u{600}',
            '\u{FFF9}',
        ] {
            assert!(is_invisible(c), "{:04X}", c as u32);
        }
        for c in ['a', ' ', 'é', 'ж', '\u{2010}', '\u{FE10}', '\u{E1000}'] {
            assert!(!is_invisible(c), "{:04X}", c as u32);
        }
    }

    #[test]
    fn look_alikes_fold_to_one_form() {
        // Cyrillic а, е, о, р, с in a Latin word; fullwidth; mathematical bold.
        assert_eq!(fold("pаypаl"), fold("paypal"));
        assert_eq!(fold("\u{0441}\u{043E}\u{0440}\u{0435}"), fold("cope"));
        assert_eq!(fold("ＰａｙＰａｌ"), fold("paypal"));
        assert_eq!(fold("𝐚𝐜𝐜𝐨𝐮𝐧𝐭"), fold("account"));
        assert_eq!(fold("ACCOUNT"), fold("account"));
        // Different words stay different.
        assert_ne!(fold("account"), fold("amount"));
    }

    #[test]
    fn the_ascii_table_agrees_with_the_slow_path() {
        for b in 0u8..128 {
            let s = char::from(b).to_string();
            assert_eq!(
                ascii_table()[usize::from(b)],
                fold_slow(&s.to_ascii_lowercase())
            );
        }
    }
}
