//! The words of a text as the fingerprint reads them: case-folded, links reduced to their
//! host, digit runs and random-looking tokens masked, punctuation dropped.
//!
//! Masking makes the parts a campaign varies per recipient (order numbers, tracking tokens,
//! coupon codes) read the same in every copy, so that only the wording is compared.

use super::{invisible, links};

/// What every random-looking token reads as.
pub(super) const RANDOM: &str = "*";

/// What every run of digits reads as.
const DIGITS: char = '0';

/// The length from which a token of letters and digits (or of base64 characters) is taken
/// for machine-made.
const LONG_TOKEN: usize = 16;

/// The length from which a token that alternates letters and digits (`a7B3x9`) is taken for
/// machine-made.
const SHORT_TOKEN: usize = 6;

/// Whether `token` looks machine-made rather than written: ASCII letters, digits and the
/// base64 characters `+/=_-` only, and either
/// - at least 16 characters mixing letters and digits (tracking ids, hex digests), or
/// - at least 16 letters with upper and lower case changing at least three times inside
///   (base64 without digits), or
/// - at least 6 characters that switch between letters and digits at least three times
///   (`a7B3x9`, `8f3k2j`).
pub(super) fn is_random(token: &str) -> bool {
    let b = token.as_bytes();
    if b.len() < SHORT_TOKEN
        || !b
            .iter()
            .all(|&c| c.is_ascii_alphanumeric() || matches!(c, b'+' | b'/' | b'=' | b'_' | b'-'))
    {
        return false;
    }
    let digits = b.iter().filter(|c| c.is_ascii_digit()).count();
    let letters = b.iter().filter(|c| c.is_ascii_alphabetic()).count();
    let mut kind_changes = 0;
    let mut case_changes = 0;
    let mut last_kind = None;
    let mut last_case = None;
    for &c in b {
        let kind = if c.is_ascii_digit() {
            Some(true)
        } else if c.is_ascii_alphabetic() {
            Some(false)
        } else {
            None
        };
        if kind.is_some() {
            if last_kind.is_some() && kind != last_kind {
                kind_changes += 1;
            }
            last_kind = kind;
        }
        if c.is_ascii_alphabetic() {
            let upper = c.is_ascii_uppercase();
            if last_case.is_some() && last_case != Some(upper) {
                case_changes += 1;
            }
            last_case = Some(upper);
        }
    }
    if b.len() >= LONG_TOKEN && ((digits > 0 && letters > 0) || case_changes >= 3) {
        return true;
    }
    kind_changes >= 3
}

/// Characters that change nothing a reader sees and are dropped inside words (zero-width
/// spaces and joiners, the soft hyphen, every other default-ignorable or format character):
/// spammers put them in words to make every copy spell them differently.
fn is_invisible(c: char) -> bool {
    invisible::is_invisible(c)
}

/// Whether `c` separates words: anything that is neither a letter or digit nor invisible.
fn separates(c: char) -> bool {
    !c.is_alphanumeric() && !is_invisible(c)
}

/// Calls `emit` with each word of `text` in order, normalised: a link (`http://`,
/// `https://`, or a token starting with `www.`) reads as its host, a random-looking token as
/// `*`, and every other token is case-folded, cut at punctuation into words, with each run
/// of digits read as `0` and invisible characters dropped. `emit` returns false to stop.
/// Returns false when `emit` stopped it.
pub(super) fn each_word(text: &str, emit: &mut dyn FnMut(&str) -> bool) -> bool {
    let mut buf = String::new();
    text.split(char::is_whitespace)
        .filter(|t| !t.is_empty())
        .all(|raw| token(raw, &mut buf, emit))
}

/// The words of one whitespace-separated token.
fn token(raw: &str, buf: &mut String, emit: &mut dyn FnMut(&str) -> bool) -> bool {
    if let Some((start, after)) = links::find_link(raw) {
        if !plain(&raw[..start], buf, emit) {
            return false;
        }
        return match links::host(&raw[after..]) {
            Some(host) => emit(&host),
            None => true,
        };
    }
    let core = raw.trim_matches(separates);
    if core.len() > 4 && core.is_char_boundary(4) && core[..4].eq_ignore_ascii_case("www.") {
        if let Some(host) = links::host(core) {
            return emit(&host);
        }
    }
    plain(core, buf, emit)
}

/// The words of a token that is not a link.
fn plain(token: &str, buf: &mut String, emit: &mut dyn FnMut(&str) -> bool) -> bool {
    let token = token.trim_matches(separates);
    if token.is_empty() {
        return true;
    }
    if is_random(token) {
        return emit(RANDOM);
    }
    token
        .split(separates)
        .filter(|p| !p.is_empty())
        .all(|piece| {
            if is_random(piece) {
                return emit(RANDOM);
            }
            fold_into(piece, buf);
            buf.is_empty() || emit(buf)
        })
}

/// `piece` folded into `buf`: invisible characters dropped, look-alike letters folded to
/// one form (NFKC, lower case, confusable skeleton: Cyrillic `а` reads as `a`, a digit
/// that looks like a letter as that letter), each remaining run of digits as `0`.
pub(super) fn fold_into(piece: &str, buf: &mut String) {
    buf.clear();
    if piece.chars().all(|c| c.is_numeric() || is_invisible(c)) {
        if piece.chars().any(char::is_numeric) {
            buf.push(DIGITS);
        }
        return;
    }
    let mut folded = String::with_capacity(piece.len());
    let mut run = String::new();
    for c in piece.chars() {
        if is_invisible(c) {
            continue;
        }
        run.push(c);
    }
    invisible::fold_letters(&run, &mut folded);
    let mut in_digits = false;
    for c in folded.chars() {
        if c.is_numeric() {
            if !in_digits {
                buf.push(DIGITS);
            }
            in_digits = true;
            continue;
        }
        in_digits = false;
        buf.push(c);
    }
}

/// `piece` case-folded into `buf`, each run of digits as `0`, invisible characters dropped
/// (the Subject's shape: people read it, so look-alikes are not folded there).
pub(super) fn case_fold_into(piece: &str, buf: &mut String) {
    buf.clear();
    let mut in_digits = false;
    for c in piece.chars() {
        if is_invisible(c) {
            continue;
        }
        if c.is_numeric() {
            if !in_digits {
                buf.push(DIGITS);
            }
            in_digits = true;
            continue;
        }
        in_digits = false;
        if c.is_ascii() {
            buf.push(c.to_ascii_lowercase());
        } else {
            buf.extend(c.to_lowercase());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(text: &str) -> Vec<String> {
        let mut out = Vec::new();
        each_word(text, &mut |w| {
            out.push(w.to_string());
            true
        });
        out
    }

    #[test]
    fn case_is_folded_and_punctuation_dropped() {
        assert_eq!(
            words("Hello, WORLD! It's «Straße»."),
            ["hello", "world", "it", "s", "straße"]
        );
    }

    #[test]
    fn digit_runs_read_as_zero() {
        assert_eq!(
            words("Order 12345 costs $1,299.00 (ref A12B)"),
            ["order", "0", "costs", "0", "0", "0", "ref", "al0b"]
        );
        assert_eq!(words("covid19 ٣٤٥"), ["covidl0", "0"]);
        // A digit that looks like a letter reads as the letter.
        assert_eq!(words("0ffer 0rder"), ["offer", "order"]);
    }

    #[test]
    fn random_tokens_read_as_star() {
        assert_eq!(
            words("code 8f3k2j token d41d8cd98f00b204e9800998ecf8427e b64 aGVsbG8gd29ybGQ+Zm9vYmFy= end"),
            ["code", "*", "token", "*", "b0", "*", "end"]
        );
        assert_eq!(words("QmFzZVNpeHR5Rm91ckxldHRlcnM"), ["*"]);
    }

    #[test]
    fn ordinary_long_words_are_not_random() {
        assert!(!is_random("internationalization"));
        assert!(!is_random("Donaudampfschifffahrt"));
        assert!(!is_random("x86_64"));
        assert!(!is_random("mp3"));
        assert!(!is_random("covid19"));
        assert!(is_random("a7B3x9"));
        assert!(is_random("0123456789abcdef0123"));
    }

    #[test]
    fn links_read_as_their_host() {
        assert_eq!(
            words("click <https://Track.Example.com/c/8f3k2j?u=123> or www.shop.example.org/x now"),
            [
                "click",
                "track.example.com",
                "or",
                "www.shop.example.org",
                "now"
            ]
        );
        assert_eq!(words("see:http://a.example.net."), ["see", "a.example.net"]);
    }

    #[test]
    fn invisible_characters_do_not_split_words() {
        assert_eq!(words("fr\u{200B}ee mo\u{00AD}ney"), words("free money"));
        assert_eq!(
            words("fr\u{034F}ee mo\u{2062}n\u{2063}e\u{2064}y o\u{180E}ffer"),
            words("free money offer")
        );
        assert_eq!(words("Frее mоnеy"), words("free money"));
    }

    #[test]
    fn emit_can_stop() {
        let mut n = 0;
        let finished = each_word("a b c d e", &mut |_| {
            n += 1;
            n < 2
        });
        assert!(!finished);
        assert_eq!(n, 2);
    }
}
