//! The words of a text as the fingerprint reads them: case-folded, links reduced to their
//! host, digit runs and random-looking tokens masked, punctuation dropped.
//!
//! Masking makes the parts a campaign varies per recipient (order numbers, tracking tokens,
//! coupon codes) read the same in every copy, so that only the wording is compared.

use super::{invisible, links, minhash};

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
    if b.len() < SHORT_TOKEN {
        return false;
    }
    // One pass: the kinds and cases met, and how often they change.
    let (mut digits, mut letters) = (0usize, 0usize);
    let mut kind_changes = 0;
    let mut case_changes = 0;
    let mut last_kind = None;
    let mut last_case = None;
    for &c in b {
        let kind = if c.is_ascii_digit() {
            digits += 1;
            true
        } else if c.is_ascii_alphabetic() {
            letters += 1;
            let upper = c.is_ascii_uppercase();
            if last_case.is_some_and(|l| l != upper) {
                case_changes += 1;
            }
            last_case = Some(upper);
            false
        } else if matches!(c, b'+' | b'/' | b'=' | b'_' | b'-') {
            continue;
        } else {
            return false;
        };
        if last_kind.is_some_and(|l| l != kind) {
            kind_changes += 1;
        }
        last_kind = Some(kind);
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
/// Returns false when `emit` stopped it. (The fingerprint reads the words' hashes,
/// [`each_word_hash`].)
#[cfg(test)]
pub(super) fn each_word(text: &str, emit: &mut dyn FnMut(&str) -> bool) -> bool {
    let mut buf = String::new();
    let b = text.as_bytes();
    let mut start = None;
    let mut i = 0;
    while i < b.len() {
        let (space, len) = space_at(text, i);
        match (space, start) {
            (true, Some(s)) => {
                if !token(&text[s..i], &mut buf, emit) {
                    return false;
                }
                start = None;
            }
            (false, None) => start = Some(i),
            _ => {}
        }
        i += len;
    }
    start.is_none_or(|s| token(&text[s..], &mut buf, emit))
}

/// [`each_word`], each word given to `emit` as its hash ([`minhash::word_hash`]). A token
/// of ASCII bytes is found by bytes, and the common ones (letters, or digits, with
/// punctuation at their ends) are folded and hashed from the bytes on the stack
/// ([`common_word_hash`]); the others go the way of [`each_word`].
pub(super) fn each_word_hash(text: &str, emit: &mut dyn FnMut(u64) -> bool) -> bool {
    let letters = letter_folds();
    let mut buf = String::new();
    let b = text.as_bytes();
    let mut i = 0;
    while i < b.len() {
        if is_ascii_space(b[i]) {
            i += 1;
            continue;
        }
        if b[i] >= 0x80 {
            let c = text[i..].chars().next().unwrap_or(' ');
            if c.is_whitespace() {
                i += c.len_utf8();
                continue;
            }
        }
        let start = i;
        i = ascii_token_end(b, i);
        let common = if i < b.len() && b[i] >= 0x80 {
            // A character outside ASCII: the token ends at the next whitespace character
            // (its first character is none: the token is never empty).
            i = text[i..]
                .find(char::is_whitespace)
                .map_or(b.len(), |k| i + k);
            None
        } else {
            common_word_hash(&b[start..i], letters)
        };
        let more = match common {
            Some(h) => emit(h),
            None => token(&text[start..i], &mut buf, &mut |w| {
                emit(minhash::word_hash(w))
            }),
        };
        if !more {
            return false;
        }
    }
    true
}

/// The first byte of `b` from `k` on that is not visible ASCII (`!` to DEL): whitespace, a
/// control byte or a byte from 0x80 (`b.len()` when there is none). Eight bytes are looked
/// at a time.
#[inline]
pub(super) fn visible_ascii_end(b: &[u8], mut k: usize) -> usize {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGHS: u64 = 0x8080_8080_8080_8080;
    while let Some(chunk) = b.get(k..k + 8) {
        let w = u64::from_le_bytes(chunk.try_into().unwrap_or([0; 8]));
        // The high bit of each byte under '!' (a borrow can only mark bytes above the first
        // such one) or from 0x80: the lowest marked byte is the first.
        let marked = ((w.wrapping_sub(ONES * 0x21) & !w) | w) & HIGHS;
        if marked != 0 {
            return k + (marked.trailing_zeros() / 8) as usize;
        }
        k += 8;
    }
    while b.get(k).is_some_and(|&c| c > b' ' && c < 0x80) {
        k += 1;
    }
    k
}

/// The first byte of `b` from `i` on that is ASCII whitespace or not ASCII (`b.len()` when
/// there is none): a word at a time in prose ([`visible_ascii_end`]).
fn ascii_token_end(b: &[u8], mut i: usize) -> usize {
    loop {
        i = visible_ascii_end(b, i);
        if i == b.len() || b[i] >= 0x80 || is_ascii_space(b[i]) {
            return i;
        }
        // A control byte: part of the token.
        i += 1;
    }
}

/// ASCII whitespace as [`char::is_whitespace`] has it.
#[inline]
fn is_ascii_space(c: u8) -> bool {
    matches!(c, b'\t'..=b'\r' | b' ')
}

/// Whether the character at byte `i` of `text` (a character boundary) is whitespace, as
/// [`char::is_whitespace`] has it, and its length in bytes: an ASCII byte is looked at as a
/// byte, another character decoded.
#[inline]
pub(super) fn space_at(text: &str, i: usize) -> (bool, usize) {
    let b = text.as_bytes()[i];
    if b < 0x80 {
        (is_ascii_space(b), 1)
    } else {
        let c = text[i..].chars().next().unwrap_or(' ');
        (c.is_whitespace(), c.len_utf8())
    }
}

/// The hash of the one word of `raw` (a whitespace-separated token of ASCII bytes) when it
/// is a common token: no `:` (no link), and between its first and last letter or digit
/// either letters only, fewer than [`LONG_TOKEN`] (never random-looking, each folding to
/// a few lower-case letters, fewer than [`LONG_TOKEN`] in all: `letters`,
/// [`letter_folds`]) or digits only (one `0`). None for every other token, and for one
/// without letters or digits.
fn common_word_hash(raw: &[u8], letters: &[(u32, u8); 128]) -> Option<u64> {
    let mut start = 0;
    while start < raw.len() && !raw[start].is_ascii_alphanumeric() {
        if raw[start] == b':' {
            return None;
        }
        start += 1;
    }
    if start == raw.len() {
        return None;
    }
    let mut end = raw.len();
    while !raw[end - 1].is_ascii_alphanumeric() {
        if raw[end - 1] == b':' {
            return None;
        }
        end -= 1;
    }
    let core = &raw[start..end];
    if core.len() < LONG_TOKEN {
        // The folded word's bytes, little-endian, zero past it: each letter's fold put
        // after the folds before it.
        let mut word = 0u128;
        let mut n = 0;
        for &c in core {
            let (fold, len) = letters[usize::from(c & 0x7f)];
            word |= u128::from(fold) << (8 * n);
            n += usize::from(len);
            if len == 0 || n >= LONG_TOKEN {
                return digits_hash(core);
            }
        }
        return Some(minhash::word_hash_padded(word, n));
    }
    digits_hash(core)
}

/// The hash of `core` when it is digits only (one `0`).
fn digits_hash(core: &[u8]) -> Option<u64> {
    if core.iter().all(u8::is_ascii_digit) {
        static ZERO: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
        return Some(*ZERO.get_or_init(|| minhash::word_hash("0")));
    }
    None
}

/// At most this many bytes of one ASCII letter's fold are read from [`letter_folds`].
const FOLD_BYTES: usize = 3;

/// For each ASCII letter, the lower-case letters it folds to when its fold is one to
/// [`FOLD_BYTES`] of them (`m` reads as `rn`), as the bytes of a little-endian number, and
/// how many; none (0) for every other letter and every other byte.
fn letter_folds() -> &'static [(u32, u8); 128] {
    static LETTERS: std::sync::OnceLock<[(u32, u8); 128]> = std::sync::OnceLock::new();
    LETTERS.get_or_init(|| {
        let table = invisible::ascii_table();
        std::array::from_fn(|i| {
            let fold = table[i].as_bytes();
            if !(i as u8).is_ascii_alphabetic()
                || fold.is_empty()
                || fold.len() > FOLD_BYTES
                || !fold.iter().all(u8::is_ascii_lowercase)
            {
                return (0, 0);
            }
            let bytes = fold.iter().rev().fold(0u32, |b, &c| b << 8 | u32::from(c));
            (bytes, fold.len() as u8)
        })
    })
}

/// The words of one whitespace-separated token.
fn token(raw: &str, buf: &mut String, emit: &mut dyn FnMut(&str) -> bool) -> bool {
    // A link has its "://" (the search for it costs more than this look at most words).
    let may_link = raw.len() >= "http://".len() && raw.as_bytes().contains(&b':');
    if let Some((start, after)) = may_link.then(|| links::find_link(raw)).flatten() {
        if !plain(&raw[..start], buf, emit) {
            return false;
        }
        return match links::host(&raw[after..]) {
            Some(host) => emit(&host),
            None => true,
        };
    }
    let core = trim_separators(raw);
    if core.len() > 4 && core.is_char_boundary(4) && core[..4].eq_ignore_ascii_case("www.") {
        if let Some(host) = links::host(core) {
            return emit(&host);
        }
    }
    trimmed(core, buf, emit)
}

/// `token` without the separators at its ends (ASCII ones looked at as bytes).
fn trim_separators(token: &str) -> &str {
    if token.is_ascii() {
        let b = token.as_bytes();
        let start = b
            .iter()
            .position(u8::is_ascii_alphanumeric)
            .unwrap_or(b.len());
        let end = b
            .iter()
            .rposition(u8::is_ascii_alphanumeric)
            .map_or(start, |e| e + 1);
        return &token[start..end];
    }
    token.trim_matches(separates)
}

/// The words of a token that is not a link.
fn plain(token: &str, buf: &mut String, emit: &mut dyn FnMut(&str) -> bool) -> bool {
    trimmed(trim_separators(token), buf, emit)
}

/// [`plain`] of a token without separators at its ends.
fn trimmed(token: &str, buf: &mut String, emit: &mut dyn FnMut(&str) -> bool) -> bool {
    if token.is_empty() {
        return true;
    }
    if is_random(token) {
        return emit(RANDOM);
    }
    let ascii = token.is_ascii();
    let mut piece_word = |piece: &str| {
        // The token itself was found not random.
        if piece.len() < token.len() && is_random(piece) {
            return emit(RANDOM);
        }
        if ascii {
            buf.clear();
            fold_ascii_into(piece, buf);
        } else {
            fold_into(piece, buf);
        }
        buf.is_empty() || emit(buf)
    };
    if ascii {
        // In ASCII the separators are the bytes that are neither letters nor digits,
        // looked at as bytes.
        let b = token.as_bytes();
        let mut i = 0;
        while i < b.len() {
            let start = i;
            while i < b.len() && b[i].is_ascii_alphanumeric() {
                i += 1;
            }
            if i > start && !piece_word(&token[start..i]) {
                return false;
            }
            while i < b.len() && !b[i].is_ascii_alphanumeric() {
                i += 1;
            }
        }
        return true;
    }
    token
        .split(separates)
        .filter(|p| !p.is_empty())
        .all(piece_word)
}

/// For each ASCII byte, the lower-case ASCII letter it folds to when that is its whole
/// fold (most letters), or 0.
fn simple_folds() -> &'static [u8; 128] {
    static SIMPLE: std::sync::OnceLock<[u8; 128]> = std::sync::OnceLock::new();
    SIMPLE.get_or_init(|| {
        let table = invisible::ascii_table();
        std::array::from_fn(|i| match table[i].as_bytes() {
            [c] if c.is_ascii_lowercase() => *c,
            _ => 0,
        })
    })
}

/// `piece` folded into `buf`: invisible characters dropped, look-alike letters folded to
/// one form (NFKC, lower case, confusable skeleton: Cyrillic `а` reads as `a`, a digit
/// that looks like a letter as that letter), each remaining run of digits as `0`.
pub(super) fn fold_into(piece: &str, buf: &mut String) {
    buf.clear();
    if piece.is_ascii() {
        fold_ascii_into(piece, buf);
        return;
    }
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

/// [`fold_into`] for an ASCII `piece`, without allocating: each character's fold from the
/// table of [`invisible::ascii_table`], digit runs as `0` (ASCII holds no invisible
/// character, and a piece of digits only reads as one `0`).
fn fold_ascii_into(piece: &str, buf: &mut String) {
    if piece.bytes().all(|b| b.is_ascii_digit()) {
        if !piece.is_empty() {
            buf.push(DIGITS);
        }
        return;
    }
    let table = invisible::ascii_table();
    let simple = simple_folds();
    let mut in_digits = false;
    for b in piece.bytes() {
        let letter = simple[usize::from(b & 0x7f)];
        if letter != 0 {
            // Most letters fold to one lower-case letter.
            in_digits = false;
            buf.push(char::from(letter));
            continue;
        }
        let folded = &table[usize::from(b)];
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
    use proptest::prelude::*;

    /// The words of `text` as the plain reading of the rules gives them, character by
    /// character, with no shortcut for ASCII: what [`each_word`] must agree with.
    fn reference_words(text: &str) -> Vec<String> {
        fn plain(token: &str, out: &mut Vec<String>) {
            let token = token.trim_matches(separates);
            if token.is_empty() {
                return;
            }
            if is_random(token) {
                out.push(RANDOM.into());
                return;
            }
            for piece in token.split(separates).filter(|p| !p.is_empty()) {
                if is_random(piece) {
                    out.push(RANDOM.into());
                    continue;
                }
                let mut buf = String::new();
                fold_into(piece, &mut buf);
                if !buf.is_empty() {
                    out.push(buf);
                }
            }
        }
        let mut out = Vec::new();
        for raw in text.split(char::is_whitespace).filter(|t| !t.is_empty()) {
            if let Some((start, after)) = links::find_link(raw) {
                plain(&raw[..start], &mut out);
                out.extend(links::host(&raw[after..]).map(std::borrow::Cow::into_owned));
                continue;
            }
            let core = raw.trim_matches(separates);
            if core.len() > 4 && core.is_char_boundary(4) && core[..4].eq_ignore_ascii_case("www.")
            {
                if let Some(host) = links::host(core) {
                    out.push(host.into_owned());
                    continue;
                }
            }
            plain(core, &mut out);
        }
        out
    }

    proptest! {
        /// Any bytes, from any start: the token ends where the byte-by-byte walk ends it.
        #[test]
        fn ascii_tokens_end_where_walked_byte_by_byte(
            b in proptest::collection::vec(prop_oneof![Just(b' '), Just(b'\t'), Just(0x0b_u8), Just(0x1f_u8), Just(b'!'), Just(0x7f_u8), Just(0x80_u8), Just(b'a'), any::<u8>()], 0..40),
            start in 0usize..40,
        ) {
            let start = start.min(b.len());
            let mut i = start;
            while i < b.len() && b[i] < 0x80 && !is_ascii_space(b[i]) {
                i += 1;
            }
            prop_assert_eq!(ascii_token_end(&b, start), i);
        }
    }

    proptest! {
        /// Any text: the hashes given are those of the words, and stop where they stop.
        #[test]
        fn word_hashes_are_those_of_the_words(
            text in "([a-zA-Z0-9]{1,20}|[ \t\r\n\x0b\x0c.,:;!?()'/_+=-]{1,3}|https?://[a-z.]{1,12}|www\\.[a-z]{1,5}\\.com|\\PC{1,4}|[\u{00A0}\u{2003}\u{200B}\u{0430}\u{0661}])*",
            stop in 0usize..40,
        ) {
            let mut hashes = Vec::new();
            let finished = each_word_hash(&text, &mut |h| {
                hashes.push(h);
                hashes.len() < stop
            });
            let mut expected = Vec::new();
            let expected_finished = each_word(&text, &mut |w| {
                expected.push(minhash::word_hash(w));
                expected.len() < stop
            });
            prop_assert_eq!(hashes, expected);
            prop_assert_eq!(finished, expected_finished);
        }

        /// Any text, ASCII or not: the words are those of the plain reading.
        #[test]
        fn words_are_those_of_the_plain_reading(
            text in "([a-zA-Z0-9]{1,20}|[ \t\r\n\x0b\x0c.,:/_+=-]{1,3}|https?://[a-z.]{1,12}|www\\.[a-z]{1,5}\\.com|\\PC{1,4}|[\u{00A0}\u{2003}\u{200B}\u{00AD}\u{0430}\u{0415}\u{FF41}\u{0661}])*",
        ) {
            prop_assert_eq!(words(&text), reference_words(&text));
        }
    }

    #[test]
    fn is_random_reads_each_rule() {
        assert!(is_random("abcdefgh12345678"), "16 long, letters and digits");
        assert!(is_random("aBcDeFgHiJkLmNoP"), "16 letters, case changing");
        assert!(!is_random("aBcDeFgHiJkLmNo"), "15 letters");
        assert!(is_random("ab1cd2ef"), "kind changes three times");
        assert!(!is_random("ab1cd2!f"), "a byte outside the set");
        assert!(!is_random("abc-12"), "two changes only");
        assert!(is_random("a-1-b-2"), "the set's punctuation neither kind");
    }

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
