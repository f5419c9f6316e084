//! Numbers, byte sizes, durations and periods as people read them, written once for every
//! text the crate shows: logs, headers, reports, the admin verbs and the web console. It
//! imports nothing else of the crate.
//!
//! Where two texts read the same figure differently (a rate in the report, a cell in a
//! console table), each has its own function, documented with an example.

/// A count and its noun, plural where the count asks for it: `1 message`, `3 messages`,
/// `2 copies`, `0 addresses` (English: consonant + `y` takes `ies`; `s`, `x`, `ch`, `sh`
/// take `es`).
pub fn count(n: u64, noun: &str) -> String {
    if n == 1 {
        return format!("1 {noun}");
    }
    let bytes = noun.as_bytes();
    let consonant_y = bytes.len() >= 2
        && bytes[bytes.len() - 1] == b'y'
        && !b"aeiou".contains(&bytes[bytes.len() - 2]);
    if consonant_y {
        format!("{n} {}ies", &noun[..noun.len() - 1])
    } else if ["s", "x", "ch", "sh"].iter().any(|e| noun.ends_with(e)) {
        format!("{n} {noun}es")
    } else {
        format!("{n} {noun}s")
    }
}

/// A rate for people: up to three decimals, no trailing zeros (`0.125`, `3`; `-0.0001`
/// reads `0`).
pub fn num(v: f64) -> String {
    let fixed = format!("{v:.3}");
    let s = trimmed(&fixed);
    if s == "-0" {
        "0".into()
    } else {
        s.to_string()
    }
}

/// A number as it is: whole numbers without a fraction, others in full (`3`, `2.5`,
/// `0.1`).
pub fn exact(v: f64) -> String {
    whole(v).unwrap_or_else(|| format!("{v}"))
}

/// A number with a fixed precision: whole numbers without a fraction, others with exactly
/// three decimals (`3`, `2.500`).
pub fn three_decimals(v: f64) -> String {
    whole(v).unwrap_or_else(|| format!("{v:.3}"))
}

/// A number for a table cell: whole numbers without a fraction, others with up to two
/// decimals, anything not finite `∞` (`3`, `2.5`, `0.33`).
pub fn table_number(v: f64) -> String {
    if !v.is_finite() {
        return "∞".into();
    }
    whole(v).unwrap_or_else(|| trimmed(&format!("{v:.2}")).to_string())
}

/// A number in few characters for an axis: up to one decimal, thousands with `k`, millions
/// with `M` (`2.5`, `5k`, `2.5M`).
pub fn abbreviated(v: f64) -> String {
    let (x, unit) = if v >= 1e6 {
        (v / 1e6, "M")
    } else if v >= 1e3 {
        (v / 1e3, "k")
    } else {
        (v, "")
    };
    format!("{}{unit}", trimmed(&format!("{x:.1}")))
}

/// An amount of octets in binary units (B, KiB, MiB, GiB, TiB), whole when it is a whole
/// number of the unit, else with one decimal: `512 B`, `1.5 KiB`, `1 GiB`.
pub fn size(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut unit = 0;
    let mut value = bytes as f64;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    let tenths = (value * 10.0).round() / 10.0;
    if unit == 0 || tenths.fract() == 0.0 {
        format!("{tenths:.0} {}", UNITS[unit])
    } else {
        format!("{tenths:.1} {}", UNITS[unit])
    }
}

/// A duration in its two largest units: `1d2h`, `13m24s`, `5s`, `0s`.
pub fn duration(mut secs: u64) -> String {
    let units = [("d", 86400), ("h", 3600), ("m", 60), ("s", 1)];
    let mut out = String::new();
    let mut parts = 0;
    for (u, n) in units {
        if secs >= n && parts < 2 {
            out.push_str(&format!("{}{u}", secs / n));
            secs %= n;
            parts += 1;
        } else if parts > 0 {
            parts = 2;
        }
    }
    if out.is_empty() {
        out.push_str("0s");
    }
    out
}

/// A wait in seconds, with milliseconds only when it has some: `2s`, `0.250s`.
pub fn seconds(d: std::time::Duration) -> String {
    if d.subsec_millis() == 0 {
        format!("{}s", d.as_secs())
    } else {
        format!("{:.3}s", d.as_secs_f64())
    }
}

/// A period in seconds as the config writes it (`1h`, `10m`, `1d`, `90s`); one under half
/// a second reads `-`.
pub fn period_text(secs: f64) -> String {
    match secs.round() as u64 {
        0 => "-".into(),
        s => units(s),
    }
}

/// A period in seconds as the config writes it, rounded to whole seconds (`1h`, `90s`);
/// one under half a second reads `0d`.
pub fn period_whole(secs: f64) -> String {
    units(secs.round() as u64)
}

/// A period in seconds as the config writes it (`1h`, `90s`); one under half a second
/// reads in seconds as given (`0.25s`).
pub fn period_precise(secs: f64) -> String {
    match secs.round() as u64 {
        0 => format!("{secs}s"),
        s => units(s),
    }
}

/// Nearest-rank percentile of ascending `v` (`p` in (0, 1]).
pub fn percentile(v: &[f64], p: f64) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    let rank = (p * v.len() as f64).ceil() as usize;
    v[rank.clamp(1, v.len()) - 1]
}

/// `s` seconds in the largest unit that divides them (`0` reads `0d`).
fn units(s: u64) -> String {
    match s {
        s if s % 86_400 == 0 => format!("{}d", s / 86_400),
        s if s % 3600 == 0 => format!("{}h", s / 3600),
        s if s % 60 == 0 => format!("{}m", s / 60),
        s => format!("{s}s"),
    }
}

/// `v` without a fraction when it is a whole number small enough to print exactly.
fn whole(v: f64) -> Option<String> {
    (v.fract() == 0.0 && v.abs() < 1e15).then(|| format!("{}", v as i64))
}

/// A decimal without its trailing zeros, nor its point when nothing follows it.
fn trimmed(s: &str) -> &str {
    s.trim_end_matches('0').trim_end_matches('.')
}

#[cfg(test)]
mod tests {

    #[test]
    fn counts_take_their_plural() {
        assert_eq!(count(1, "copy"), "1 copy");
        assert_eq!(count(2, "copy"), "2 copies");
        assert_eq!(count(0, "message"), "0 messages");
        assert_eq!(count(3, "address"), "3 addresses");
        assert_eq!(count(2, "day"), "2 days");
        assert_eq!(count(5, "batch"), "5 batches");
        assert_eq!(count(1, "recipient"), "1 recipient");
    }

    use super::*;
    use proptest::prelude::*;

    #[test]
    fn percentile_is_nearest_rank() {
        let v = [1.0, 2.0, 3.0, 4.0];
        assert_eq!(percentile(&v, 0.5), 2.0);
        assert_eq!(percentile(&v, 1.0), 4.0);
        assert_eq!(percentile(&v, 0.01), 1.0);
        assert_eq!(percentile(&[], 0.5), 0.0);
    }

    #[test]
    fn periods_and_rates_read_as_written() {
        assert_eq!(period_text(3600.0), "1h");
        assert_eq!(period_text(90.0), "90s");
        assert_eq!(period_text(0.0), "-");
        assert_eq!(period_whole(0.0), "0d");
        assert_eq!(period_whole(600.0), "10m");
        assert_eq!(period_precise(0.25), "0.25s");
        assert_eq!(period_precise(86_400.0), "1d");
        assert_eq!(num(0.125), "0.125");
        assert_eq!(num(-0.0001), "0");
    }

    #[test]
    fn numbers() {
        assert_eq!(table_number(3.0), "3");
        assert_eq!(table_number(2.5), "2.5");
        assert_eq!(table_number(1.0 / 3.0), "0.33");
        assert_eq!(table_number(f64::INFINITY), "∞");
        assert_eq!(exact(3.0), "3");
        assert_eq!(exact(0.1), "0.1");
        assert_eq!(three_decimals(3.0), "3");
        assert_eq!(three_decimals(2.5), "2.500");
        assert_eq!(abbreviated(0.0), "0");
        assert_eq!(abbreviated(2.5), "2.5");
        assert_eq!(abbreviated(5000.0), "5k");
        assert_eq!(abbreviated(2_500_000.0), "2.5M");
    }

    #[test]
    fn durations_keep_two_units() {
        assert_eq!(duration(0), "0s");
        assert_eq!(duration(5), "5s");
        assert_eq!(duration(13 * 60 + 24), "13m24s");
        assert_eq!(duration(86_400 + 2 * 3600 + 5), "1d2h");
        assert_eq!(duration(86_400 + 5), "1d");
        assert_eq!(seconds(std::time::Duration::from_secs(2)), "2s");
        assert_eq!(seconds(std::time::Duration::from_millis(250)), "0.250s");
    }

    #[test]
    fn sizes_are_in_binary_units() {
        assert_eq!(size(0), "0 B");
        assert_eq!(size(1023), "1023 B");
        assert_eq!(size(1024), "1 KiB");
        assert_eq!(size(1536), "1.5 KiB");
        assert_eq!(size(100 * 1024 * 1024), "100 MiB");
        assert_eq!(size(1 << 30), "1 GiB");
        assert_eq!(size(1_073_741_824 + 1), "1 GiB");
        assert_eq!(size(5 << 40), "5 TiB");
        assert_eq!(size(1 << 50), "1024 TiB");
    }

    proptest! {
        #[test]
        fn whole_numbers_read_back(n in -999_999_999_999_999i64..999_999_999_999_999) {
            let v = n as f64;
            for text in [exact(v), three_decimals(v), table_number(v), num(v)] {
                prop_assert_eq!(text.parse::<f64>().unwrap(), v);
            }
        }

        #[test]
        fn rates_read_back_within_their_precision(v in -1e9f64..1e9) {
            prop_assert!((num(v).parse::<f64>().unwrap() - v).abs() <= 0.0005 + 1e-9);
            prop_assert!((table_number(v).parse::<f64>().unwrap() - v).abs() <= 0.005 + 1e-9);
            prop_assert_eq!(exact(v).parse::<f64>().unwrap(), v);
        }

        #[test]
        fn periods_read_back(s in 1u64..10_000_000) {
            let text = period_text(s as f64);
            let (n, unit) = text.split_at(text.len() - 1);
            let mult = match unit { "d" => 86_400, "h" => 3600, "m" => 60, _ => 1 };
            prop_assert_eq!(n.parse::<u64>().unwrap() * mult, s);
            prop_assert_eq!(period_whole(s as f64), text.clone());
            prop_assert_eq!(period_precise(s as f64), text);
        }
    }
}
