//! Human durations in the config: `250ms`, `10s`, `5m`, `1h30m`, `2d`.

use std::fmt;
use std::time::Duration;

use serde::de::{self, Deserializer, Visitor};
use serde::Deserialize;

/// A duration written as one or more `<integer><unit>` pairs, unit one of `ms`, `s`, `m`,
/// `h`, `d` (for example `1h30m`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct ConfigDuration(pub Duration);

/// Why a duration text was refused.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum DurationError {
    /// Nothing was written.
    #[error("empty duration")]
    Empty,
    /// A number without a unit, or an unknown unit.
    #[error("bad duration {0:?}: write numbers with a unit, e.g. 250ms, 10s, 5m, 1h30m, 2d")]
    Syntax(String),
    /// The total does not fit.
    #[error("duration {0:?} is too long")]
    Overflow(String),
}

/// Parses a duration text such as `1h30m`.
pub fn parse_duration(text: &str) -> Result<Duration, DurationError> {
    let t = text.trim();
    if t.is_empty() {
        return Err(DurationError::Empty);
    }
    let bytes = t.as_bytes();
    let mut i = 0;
    let mut total: u64 = 0; // milliseconds
    while i < bytes.len() {
        let start = i;
        while i < bytes.len() && bytes[i].is_ascii_digit() {
            i += 1;
        }
        if start == i {
            return Err(DurationError::Syntax(text.to_string()));
        }
        let n: u64 = t[start..i]
            .parse()
            .map_err(|_| DurationError::Overflow(text.to_string()))?;
        let ustart = i;
        while i < bytes.len() && bytes[i].is_ascii_alphabetic() {
            i += 1;
        }
        let factor: u64 = match &t[ustart..i] {
            "ms" => 1,
            "s" => 1_000,
            "m" | "min" => 60_000,
            "h" => 3_600_000,
            "d" => 86_400_000,
            _ => return Err(DurationError::Syntax(text.to_string())),
        };
        let part = n
            .checked_mul(factor)
            .ok_or_else(|| DurationError::Overflow(text.to_string()))?;
        total = total
            .checked_add(part)
            .ok_or_else(|| DurationError::Overflow(text.to_string()))?;
    }
    Ok(Duration::from_millis(total))
}

impl<'de> Deserialize<'de> for ConfigDuration {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = ConfigDuration;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a duration such as \"10s\", \"5m\" or \"1h30m\"")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
                parse_duration(v).map(ConfigDuration).map_err(E::custom)
            }
        }
        d.deserialize_str(V)
    }
}

impl fmt::Display for ConfigDuration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ms = self.0.as_millis();
        if ms % 1000 != 0 {
            write!(f, "{ms}ms")
        } else {
            write!(f, "{}s", ms / 1000)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn units() {
        assert_eq!(parse_duration("250ms").unwrap(), Duration::from_millis(250));
        assert_eq!(parse_duration("10s").unwrap(), Duration::from_secs(10));
        assert_eq!(parse_duration("5m").unwrap(), Duration::from_secs(300));
        assert_eq!(parse_duration("1h30m").unwrap(), Duration::from_secs(5400));
        assert_eq!(parse_duration("2d").unwrap(), Duration::from_secs(172_800));
    }

    #[test]
    fn errors() {
        assert_eq!(parse_duration(""), Err(DurationError::Empty));
        assert!(matches!(
            parse_duration("10"),
            Err(DurationError::Syntax(_))
        ));
        assert!(matches!(
            parse_duration("10 s"),
            Err(DurationError::Syntax(_))
        ));
        assert!(matches!(parse_duration("s"), Err(DurationError::Syntax(_))));
        assert!(matches!(
            parse_duration("1w"),
            Err(DurationError::Syntax(_))
        ));
        assert!(matches!(
            parse_duration("99999999999999999999d"),
            Err(DurationError::Overflow(_))
        ));
    }

    proptest! {
        #[test]
        fn never_panics(s in ".{0,24}") {
            let _ = parse_duration(&s);
        }

        #[test]
        fn sums_parts(h in 0u64..1000, m in 0u64..1000, s in 0u64..1000) {
            let d = parse_duration(&format!("{h}h{m}m{s}s")).unwrap();
            prop_assert_eq!(d, Duration::from_secs(h * 3600 + m * 60 + s));
        }
    }
}
