//! Time as floodgate reads and writes it: RFC 3339 (`2025-01-31T12:00:00Z`, fractions and
//! offsets allowed) or a duration back from now (`24h`: the last 24 hours), and RFC 3339 output.

use jiff::civil::{Date, DateTime, Time};
use jiff::SignedDuration;

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

/// The Unix epoch as a civil date-time (UTC).
const EPOCH: DateTime = DateTime::constant(1970, 1, 1, 0, 0, 0, 0);

/// The UTC civil date-time `us` microseconds after the epoch, clamped to the calendar's
/// range (years -9999 to 9999).
fn utc_datetime(us: i64) -> DateTime {
    EPOCH.saturating_add(SignedDuration::from_micros(us))
}

/// Parses an RFC 3339 date-time into microseconds since the Unix epoch (fractions beyond
/// the microsecond are truncated; leap second 60 is refused). The text is read by RFC 3339's
/// grammar (`YYYY-MM-DD`, `T`, `t` or a space, `hh:mm:ss`, an optional fraction, `Z`, `z` or
/// `+hh:mm`/`-hh:mm`); the calendar (which dates and times exist, and how far they are from
/// the epoch) is `jiff`'s.
pub fn parse_rfc3339(text: &str) -> Result<i64, TimeError> {
    let err = |why| TimeError {
        text: text.to_string(),
        why,
    };
    let b = text.as_bytes();
    let num = |r: std::ops::Range<usize>| -> Result<u16, TimeError> {
        let s = b.get(r).ok_or_else(|| err("too short"))?;
        if s.iter().all(u8::is_ascii_digit) {
            Ok(s.iter().fold(0u16, |a, &c| a * 10 + u16::from(c - b'0')))
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
    // Every field has at most four digits: the casts cannot wrap.
    let date = Date::new(year as i16, month as i8, day as i8).map_err(|_| err("no such date"))?;
    let time =
        Time::new(hour as i8, min as i8, sec as i8, 0).map_err(|_| err("no such time of day"))?;
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
            let o = i64::from(oh) * 3600 + i64::from(om) * 60;
            if s == b'-' {
                -o
            } else {
                o
            }
        }
        None => return Err(err("a time zone (Z or +hh:mm) is needed")),
        _ => return Err(err("not RFC 3339")),
    };
    let secs = date.to_datetime(time).duration_since(EPOCH).as_secs() - offset_secs;
    Ok(secs * 1_000_000 + micros)
}

/// Formats microseconds since the epoch as RFC 3339 UTC with microseconds (times beyond the
/// years -9999 to 9999 are clamped to them).
pub fn rfc3339(us: i64) -> String {
    utc_datetime(us)
        .strftime("%Y-%m-%dT%H:%M:%S.%6fZ")
        .to_string()
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
