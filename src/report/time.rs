//! Times for `floodgate report`: RFC 3339 (`2025-01-31T12:00:00Z`, fractions and offsets
//! allowed) or a duration back from now (`24h`: the last 24 hours), and RFC 3339 output.

use crate::config::parse_duration;

/// Why a time argument was refused.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("bad time {text:?}: {why} (write RFC 3339, e.g. 2025-01-31T12:00:00Z, or a duration back from now, e.g. 24h)")]
pub struct TimeError {
    /// The text given.
    pub text: String,
    /// What is wrong.
    pub why: &'static str,
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's algorithm).
fn days_from_civil(y: i64, m: u32, d: u32) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let m = i64::from(m);
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + i64::from(d) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// The date of a day number (inverse of [`days_from_civil`]).
pub(crate) fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (yoe + era * 400 + i64::from(m <= 2), m, d)
}

fn days_in_month(y: i64, m: u32) -> u32 {
    match m {
        2 if (y % 4 == 0 && y % 100 != 0) || y % 400 == 0 => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// Parses an RFC 3339 date-time into microseconds since the Unix epoch (fractions beyond
/// the microsecond are truncated; leap second 60 is refused).
pub fn parse_rfc3339(text: &str) -> Result<i64, TimeError> {
    let err = |why| TimeError {
        text: text.to_string(),
        why,
    };
    let b = text.as_bytes();
    let num = |r: std::ops::Range<usize>| -> Result<u32, TimeError> {
        let s = b.get(r).ok_or_else(|| err("too short"))?;
        if s.iter().all(u8::is_ascii_digit) {
            Ok(s.iter().fold(0u32, |a, &c| a * 10 + u32::from(c - b'0')))
        } else {
            Err(err("digits expected"))
        }
    };
    let sep = |i: usize, want: &[u8]| -> Result<(), TimeError> {
        match b.get(i) {
            Some(c) if want.contains(c) => Ok(()),
            _ => Err(err("not RFC 3339")),
        }
    };
    let year = num(0..4)?;
    sep(4, b"-")?;
    let month = num(5..7)?;
    sep(7, b"-")?;
    let day = num(8..10)?;
    sep(10, b"Tt ")?;
    let hour = num(11..13)?;
    sep(13, b":")?;
    let min = num(14..16)?;
    sep(16, b":")?;
    let sec = num(17..19)?;
    if !(1..=12).contains(&month) || day == 0 || day > days_in_month(i64::from(year), month) {
        return Err(err("no such date"));
    }
    if hour > 23 || min > 59 || sec > 59 {
        return Err(err("no such time of day"));
    }
    let mut i = 19;
    let mut micros = 0i64;
    if b.get(i) == Some(&b'.') {
        i += 1;
        let start = i;
        while b.get(i).is_some_and(u8::is_ascii_digit) {
            if i - start < 6 {
                micros = micros * 10 + i64::from(b[i] - b'0');
            }
            i += 1;
        }
        if i == start {
            return Err(err("digits expected after '.'"));
        }
        for _ in (i - start)..6 {
            micros *= 10;
        }
    }
    let offset_secs: i64 = match b.get(i) {
        Some(b'Z' | b'z') if i + 1 == b.len() => 0,
        Some(&s @ (b'+' | b'-')) if i + 6 == b.len() => {
            let oh = num(i + 1..i + 3)?;
            sep(i + 3, b":")?;
            let om = num(i + 4..i + 6)?;
            if oh > 23 || om > 59 {
                return Err(err("bad offset"));
            }
            let o = i64::from(oh * 3600 + om * 60);
            if s == b'-' {
                -o
            } else {
                o
            }
        }
        None => return Err(err("a time zone (Z or +hh:mm) is needed")),
        _ => return Err(err("not RFC 3339")),
    };
    let days = days_from_civil(i64::from(year), month, day);
    let secs = days * 86_400 + i64::from(hour * 3600 + min * 60 + sec) - offset_secs;
    Ok(secs * 1_000_000 + micros)
}

/// Formats microseconds since the epoch as RFC 3339 UTC with microseconds.
pub fn rfc3339(us: i64) -> String {
    let secs = us.div_euclid(1_000_000);
    let micros = us.rem_euclid(1_000_000);
    let (y, m, d) = civil_from_days(secs.div_euclid(86_400));
    let s = secs.rem_euclid(86_400);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{micros:06}Z",
        s / 3600,
        (s / 60) % 60,
        s % 60
    )
}

/// A `--since`/`--until` argument: RFC 3339, or a duration meaning that long before
/// `now_us`.
pub fn parse_time_arg(text: &str, now_us: i64) -> Result<i64, TimeError> {
    let t = text.trim();
    if t.as_bytes().first().is_some_and(u8::is_ascii_digit)
        && t.len() >= 10
        && t.as_bytes()[4] == b'-'
    {
        return parse_rfc3339(t);
    }
    match parse_duration(t) {
        Ok(d) => Ok(now_us.saturating_sub(i64::try_from(d.as_micros()).unwrap_or(i64::MAX))),
        Err(_) => Err(TimeError {
            text: text.to_string(),
            why: "neither a date-time nor a duration",
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn known_instants() {
        assert_eq!(parse_rfc3339("1970-01-01T00:00:00Z"), Ok(0));
        assert_eq!(
            parse_rfc3339("2025-01-31T12:00:00.5Z"),
            Ok(1_738_324_800_500_000)
        );
        assert_eq!(
            parse_rfc3339("2025-01-31T13:00:00+01:00"),
            parse_rfc3339("2025-01-31T12:00:00Z")
        );
        assert_eq!(
            parse_rfc3339("2024-02-29t00:00:00.1234567z"),
            Ok(1_709_164_800_123_456)
        );
        assert_eq!(
            rfc3339(1_738_324_800_500_000),
            "2025-01-31T12:00:00.500000Z"
        );
        assert_eq!(rfc3339(-1), "1969-12-31T23:59:59.999999Z");
    }

    #[test]
    fn refusals() {
        for bad in [
            "",
            "2025-01-31",
            "2025-01-31T12:00:00",
            "2025-02-29T00:00:00Z",
            "2025-13-01T00:00:00Z",
            "2025-01-31T24:00:00Z",
            "2025-01-31T12:00:60Z",
            "2025-01-31T12:00:00.Z",
            "2025-01-31T12:00:00+1:00",
            "2025-01-31T12:00:00Zjunk",
            "2025-0a-31T12:00:00Z",
        ] {
            assert!(parse_rfc3339(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn relative_and_absolute_args() {
        let now = 1_000_000_000_000_000;
        assert_eq!(parse_time_arg("24h", now), Ok(now - 86_400_000_000));
        assert_eq!(parse_time_arg("1970-01-01T00:00:01Z", now), Ok(1_000_000));
        let e = parse_time_arg("yesterday", now).unwrap_err();
        assert!(e.to_string().contains("RFC 3339"), "{e}");
    }

    proptest! {
        #[test]
        fn format_then_parse_is_identity(us in -62_135_596_800_000_000i64..253_402_300_799_999_999) {
            prop_assert_eq!(parse_rfc3339(&rfc3339(us)), Ok(us));
        }

        #[test]
        fn never_panics(s in "\\PC{0,40}") {
            let _ = parse_rfc3339(&s);
            let _ = parse_time_arg(&s, 0);
        }

        #[test]
        fn offsets_shift(secs in 0i64..4_000_000_000, oh in 0u32..24, om in 0u32..60) {
            let base = rfc3339(secs * 1_000_000);
            let utc = &base[..19];
            let shifted = format!("{utc}+{oh:02}:{om:02}");
            prop_assert_eq!(
                parse_rfc3339(&shifted),
                Ok((secs - i64::from(oh * 3600 + om * 60)) * 1_000_000)
            );
        }
    }
}
