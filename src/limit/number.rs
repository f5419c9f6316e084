//! Number and time-interval readers with the exact acceptance rules of C's
//! `strtod` and Exim's `readconf_readtime`.

/// Reads the longest prefix of `s` that C's `strtod` (C locale) accepts.
///
/// Returns the value and the number of bytes consumed. When no number is
/// present the result is `(0.0, 0)`, as `strtod` returns 0 and leaves the end
/// pointer at the start. Accepted: leading white space, a sign, decimal
/// numbers with optional fraction and exponent, hexadecimal floats (`0x1.8p3`),
/// `inf`, `infinity` and `nan` (optionally `nan(chars)`), all case-insensitive.
pub fn strtod_prefix(s: &str) -> (f64, usize) {
    let b = s.as_bytes();
    let mut i = 0;
    while i < b.len() && matches!(b[i], b' ' | b'\t' | b'\n' | b'\r' | 0x0b | 0x0c) {
        i += 1;
    }
    let mut neg = false;
    if i < b.len() && (b[i] == b'+' || b[i] == b'-') {
        neg = b[i] == b'-';
        i += 1;
    }
    let sign = |v: f64| if neg { -v } else { v };
    let rest = &b[i..];
    if starts_with_ci(rest, b"infinity") {
        return (sign(f64::INFINITY), i + 8);
    }
    if starts_with_ci(rest, b"inf") {
        return (sign(f64::INFINITY), i + 3);
    }
    if starts_with_ci(rest, b"nan") {
        let mut end = i + 3;
        // `nan(n-char-sequence)` is consumed only when the parenthesis closes.
        if end < b.len() && b[end] == b'(' {
            let mut j = end + 1;
            while j < b.len() && (b[j].is_ascii_alphanumeric() || b[j] == b'_') {
                j += 1;
            }
            if j < b.len() && b[j] == b')' {
                end = j + 1;
            }
        }
        return (sign(f64::NAN), end);
    }
    if rest.len() >= 2 && rest[0] == b'0' && (rest[1] | 0x20) == b'x' {
        if let Some((v, n)) = hex_float(&rest[2..]) {
            return (sign(v), i + 2 + n);
        }
        // "0x" without hex digits: strtod reads the "0" only.
        return (sign(0.0), i + 1);
    }
    match decimal_len(rest) {
        0 => (0.0, 0),
        n => {
            let text = std::str::from_utf8(&rest[..n]).unwrap_or("0");
            // Rust's parser is correctly rounded, like glibc's strtod.
            let v: f64 = normalise_decimal(text).parse().unwrap_or(0.0);
            (sign(v), i + n)
        }
    }
}

fn starts_with_ci(s: &[u8], word: &[u8]) -> bool {
    s.len() >= word.len() && s[..word.len()].eq_ignore_ascii_case(word)
}

/// Length of the decimal floating-point literal at the start of `b` (0 if none).
fn decimal_len(b: &[u8]) -> usize {
    let mut i = 0;
    let mut digits = 0;
    while i < b.len() && b[i].is_ascii_digit() {
        i += 1;
        digits += 1;
    }
    if i < b.len() && b[i] == b'.' {
        let mut j = i + 1;
        while j < b.len() && b[j].is_ascii_digit() {
            j += 1;
            digits += 1;
        }
        if digits > 0 {
            i = j;
        }
    }
    if digits == 0 {
        return 0;
    }
    if i < b.len() && (b[i] | 0x20) == b'e' {
        let mut j = i + 1;
        if j < b.len() && (b[j] == b'+' || b[j] == b'-') {
            j += 1;
        }
        let start = j;
        while j < b.len() && b[j].is_ascii_digit() {
            j += 1;
        }
        if j > start {
            i = j;
        }
    }
    i
}

/// Makes forms like `5.` and `.5` acceptable to Rust's float parser.
fn normalise_decimal(text: &str) -> std::borrow::Cow<'_, str> {
    let mut owned = String::with_capacity(text.len() + 2);
    let (mant, exp) = match text.find(['e', 'E']) {
        Some(p) => (&text[..p], &text[p..]),
        None => (text, ""),
    };
    if mant.starts_with('.') {
        owned.push('0');
    }
    owned.push_str(mant);
    if mant.ends_with('.') {
        owned.push('0');
    }
    owned.push_str(exp);
    std::borrow::Cow::Owned(owned)
}

/// Parses the part of a hex float after `0x`. Returns the value and the bytes used.
fn hex_float(b: &[u8]) -> Option<(f64, usize)> {
    let mut i = 0;
    let mut mant: f64 = 0.0;
    let mut digits = 0;
    let mut exp: i64 = 0;
    while i < b.len() && b[i].is_ascii_hexdigit() {
        mant = mant * 16.0 + f64::from(hex_val(b[i]));
        i += 1;
        digits += 1;
    }
    if i < b.len() && b[i] == b'.' {
        let mut j = i + 1;
        let mut frac_digits = 0;
        while j < b.len() && b[j].is_ascii_hexdigit() {
            mant = mant * 16.0 + f64::from(hex_val(b[j]));
            exp -= 4;
            j += 1;
            frac_digits += 1;
        }
        if digits + frac_digits > 0 {
            i = j;
            digits += frac_digits;
        }
    }
    if digits == 0 {
        return None;
    }
    if i < b.len() && (b[i] | 0x20) == b'p' {
        let mut j = i + 1;
        let mut eneg = false;
        if j < b.len() && (b[j] == b'+' || b[j] == b'-') {
            eneg = b[j] == b'-';
            j += 1;
        }
        let start = j;
        let mut e: i64 = 0;
        while j < b.len() && b[j].is_ascii_digit() {
            e = (e * 10 + i64::from(b[j] - b'0')).min(1 << 20);
            j += 1;
        }
        if j > start {
            exp += if eneg { -e } else { e };
            i = j;
        }
    }
    let exp = exp.clamp(-2200, 2200) as i32;
    Some((mant * 2f64.powi(exp), i))
}

fn hex_val(c: u8) -> u8 {
    match c {
        b'0'..=b'9' => c - b'0',
        b'a'..=b'f' => c - b'a' + 10,
        _ => c - b'A' + 10,
    }
}

/// Reads an Exim time interval such as `1h`, `8h30m` or `1w` into seconds.
///
/// Exim's rules: one or more `<decimal integer><unit>` pairs, units `w d h m s`
/// (lower case only), in any order, repeats allowed. Returns `None` for
/// anything else, for overflow of a C `int`, and for zero.
pub fn exim_interval(s: &str) -> Option<u32> {
    let b = s.as_bytes();
    if b.is_empty() {
        return None;
    }
    let mut i = 0;
    let mut total: i64 = 0;
    while i < b.len() {
        let start = i;
        let mut value: i64 = 0;
        while i < b.len() && b[i].is_ascii_digit() {
            value = value * 10 + i64::from(b[i] - b'0');
            if value > i64::from(i32::MAX) {
                return None;
            }
            i += 1;
        }
        if i == start || i == b.len() {
            return None;
        }
        let mult = match b[i] {
            b'w' => 7 * 24 * 3600,
            b'd' => 24 * 3600,
            b'h' => 3600,
            b'm' => 60,
            b's' => 1,
            _ => return None,
        };
        i += 1;
        total += value * mult;
        if total > i64::from(i32::MAX) {
            return None;
        }
    }
    u32::try_from(total).ok().filter(|&t| t > 0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn strtod_forms() {
        assert_eq!(strtod_prefix("4"), (4.0, 1));
        assert_eq!(strtod_prefix("4 k"), (4.0, 1));
        assert_eq!(strtod_prefix("1.5e3x"), (1500.0, 5));
        assert_eq!(strtod_prefix("1e"), (1.0, 1));
        assert_eq!(strtod_prefix(".5"), (0.5, 2));
        assert_eq!(strtod_prefix("5."), (5.0, 2));
        assert_eq!(strtod_prefix("-2"), (-2.0, 2));
        assert_eq!(strtod_prefix("x"), (0.0, 0));
        assert_eq!(strtod_prefix(""), (0.0, 0));
        assert_eq!(strtod_prefix("."), (0.0, 0));
        assert_eq!(strtod_prefix("0x1p3"), (8.0, 5));
        assert_eq!(strtod_prefix("0x.8"), (0.5, 4));
        assert_eq!(strtod_prefix("0xg"), (0.0, 1));
        assert_eq!(strtod_prefix("INF"), (f64::INFINITY, 3));
        assert_eq!(strtod_prefix("Infinity"), (f64::INFINITY, 8));
        let (v, n) = strtod_prefix("nan(abc)");
        assert!(v.is_nan());
        assert_eq!(n, 8);
        let (v, n) = strtod_prefix("nan(");
        assert!(v.is_nan());
        assert_eq!(n, 3);
    }

    #[test]
    fn intervals() {
        assert_eq!(exim_interval("1h"), Some(3600));
        assert_eq!(exim_interval("8h30m"), Some(30600));
        assert_eq!(exim_interval("1w"), Some(604800));
        assert_eq!(exim_interval("1m1h"), Some(3660));
        assert_eq!(exim_interval("1h1h"), Some(7200));
        for bad in [
            "",
            "3600",
            "1.5h",
            "1H",
            "+1h",
            "1 h",
            "1hx",
            "0s",
            "h",
            "99999999999s",
        ] {
            assert_eq!(exim_interval(bad), None, "{bad}");
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]
        #[test]
        fn strtod_never_overreads(s in "\\PC{0,20}") {
            let (_, n) = strtod_prefix(&s);
            prop_assert!(n <= s.len());
            prop_assert!(s.is_char_boundary(n));
        }

        #[test]
        fn decimal_roundtrip(v in 0.0f64..1e12) {
            let text = format!("{v}");
            prop_assert_eq!(strtod_prefix(&text), (v, text.len()));
        }

        #[test]
        fn interval_sums(parts in proptest::collection::vec((0u32..1000, 0usize..5), 1..5)) {
            let units = [('w', 604800u64), ('d', 86400), ('h', 3600), ('m', 60), ('s', 1)];
            let text: String = parts.iter().map(|(v, u)| format!("{v}{}", units[*u].0)).collect();
            let sum: u64 = parts.iter().map(|(v, u)| u64::from(*v) * units[*u].1).sum();
            let expect = if sum == 0 || sum > i32::MAX as u64 { None } else { Some(sum as u32) };
            prop_assert_eq!(exim_interval(&text), expect);
        }
    }
}
