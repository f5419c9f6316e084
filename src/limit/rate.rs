//! Rspamd-style rate and burst strings (peers.md §1.2): `"10 / 1min"`, `"1k"`.
//!
//! Amount suffixes are Rspamd's decimal ones (k = 1e3, m = 1e6, g = 1e9);
//! period suffixes are s, m or min, h, d (none = seconds). Unlike Rspamd,
//! trailing text is an error instead of being ignored, so `"10 / 1w"` is
//! refused rather than silently meaning 10 per second.

use std::fmt;

/// Why a rate or burst string was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RateError {
    /// The amount is not a number with an optional k/m/g suffix.
    #[error("\"{0}\" is not an amount (a number with an optional k, m or g suffix)")]
    BadAmount(String),
    /// The period is not a number with an optional s/m/min/h/d suffix.
    #[error("\"{0}\" is not a period (a number with an optional s, m, min, h or d suffix)")]
    BadPeriod(String),
    /// The value must be positive and finite.
    #[error("\"{0}\" must be positive and finite")]
    NotPositive(String),
}

/// A rate: `amount` events per `period_secs` seconds.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Rate {
    amount: f64,
    period_secs: f64,
}

impl Rate {
    /// A rate of `amount` per `period_secs`; both must be positive and finite.
    pub fn new(amount: f64, period_secs: f64) -> Option<Rate> {
        let ok = |v: f64| v > 0.0 && v.is_finite();
        (ok(amount) && ok(period_secs)).then_some(Rate {
            amount,
            period_secs,
        })
    }

    /// Parses `"<amount>[k|m|g] / <period>[s|m|min|h|d]"` or a bare number
    /// (events per second, as Rspamd's numeric `rate`).
    pub fn parse(text: &str) -> Result<Rate, RateError> {
        let (amount_text, period_text) = match text.split_once('/') {
            Some((a, p)) => (a.trim(), p.trim()),
            None => (text.trim(), "1"),
        };
        let amount = parse_amount(amount_text)?;
        let period = parse_period(period_text)?;
        Rate::new(amount, period).ok_or_else(|| RateError::NotPositive(text.trim().to_string()))
    }

    /// Events per second.
    pub fn per_second(&self) -> f64 {
        self.amount / self.period_secs
    }

    /// The amount as given.
    pub fn amount(&self) -> f64 {
        self.amount
    }

    /// The period in seconds.
    pub fn period_secs(&self) -> f64 {
        self.period_secs
    }
}

impl fmt::Display for Rate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} / {}s", self.amount, self.period_secs)
    }
}

/// Splits a number from its alphabetic suffix, both trimmed.
fn split_number(text: &str) -> Option<(f64, &str)> {
    let end = text
        .find(|c: char| {
            !(c.is_ascii_digit() || c == '.' || c == '-' || c == '+' || c == 'e' || c == 'E')
        })
        .unwrap_or(text.len());
    // An 'e' directly before a suffix letter is not an exponent: back off
    // until the number parses.
    let mut end = end;
    loop {
        if let Ok(v) = text[..end].trim().parse::<f64>() {
            return Some((v, text[end..].trim()));
        }
        if end == 0 {
            return None;
        }
        end -= 1;
    }
}

/// Parses an Rspamd amount/burst: a number with an optional k/m/g suffix (powers of 1000).
pub fn parse_amount(text: &str) -> Result<f64, RateError> {
    let bad = || RateError::BadAmount(text.to_string());
    let (v, suffix) = split_number(text).ok_or_else(bad)?;
    let mult = match suffix.to_ascii_lowercase().as_str() {
        "" => 1.0,
        "k" => 1e3,
        "m" => 1e6,
        "g" => 1e9,
        _ => return Err(bad()),
    };
    Ok(v * mult)
}

/// Parses an Rspamd period into seconds.
pub fn parse_period(text: &str) -> Result<f64, RateError> {
    let bad = || RateError::BadPeriod(text.to_string());
    let (v, suffix) = split_number(text).ok_or_else(bad)?;
    let mult = match suffix.to_ascii_lowercase().as_str() {
        "" | "s" => 1.0,
        "m" | "min" => 60.0,
        "h" => 3600.0,
        "d" => 86400.0,
        _ => return Err(bad()),
    };
    Ok(v * mult)
}

/// Parses a burst (capacity): a positive amount such as `"100"` or `"1k"`.
pub fn parse_burst(text: &str) -> Result<f64, RateError> {
    let v = parse_amount(text)?;
    if v > 0.0 && v.is_finite() {
        Ok(v)
    } else {
        Err(RateError::NotPositive(text.trim().to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn forms() {
        let r = Rate::parse("10 / 1min").unwrap();
        assert_eq!((r.amount(), r.period_secs()), (10.0, 60.0));
        let r = Rate::parse("2/5m").unwrap();
        assert_eq!((r.amount(), r.period_secs()), (2.0, 300.0));
        let r = Rate::parse("1k / 1h").unwrap();
        assert_eq!((r.amount(), r.period_secs()), (1000.0, 3600.0));
        let r = Rate::parse("0.5").unwrap();
        assert_eq!(r.per_second(), 0.5);
        let r = Rate::parse("3 / 2d").unwrap();
        assert_eq!(r.period_secs(), 172800.0);
        assert_eq!(Rate::parse("1e3 / 10").unwrap().amount(), 1000.0);
        assert_eq!(parse_burst("100"), Ok(100.0));
        assert_eq!(parse_burst("1k"), Ok(1000.0));
        assert_eq!(parse_burst("2M"), Ok(2e6));
        assert_eq!(parse_burst("1g"), Ok(1e9));
    }

    #[test]
    fn errors() {
        assert!(matches!(
            Rate::parse("10 / 1w"),
            Err(RateError::BadPeriod(_))
        ));
        assert!(matches!(
            Rate::parse("x / 1m"),
            Err(RateError::BadAmount(_))
        ));
        assert!(matches!(
            Rate::parse("0 / 1m"),
            Err(RateError::NotPositive(_))
        ));
        assert!(matches!(
            Rate::parse("-1 / 1m"),
            Err(RateError::NotPositive(_))
        ));
        assert!(matches!(parse_burst("0"), Err(RateError::NotPositive(_))));
        assert!(matches!(parse_burst("10x"), Err(RateError::BadAmount(_))));
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]
        #[test]
        fn parse_never_panics(s in "\\PC{0,24}") {
            let _ = Rate::parse(&s);
            let _ = parse_burst(&s);
        }

        #[test]
        fn roundtrip(a in 1u32..100_000, p in 1u32..10_000, unit in 0usize..4) {
            let (u, m) = [("s", 1.0), ("min", 60.0), ("h", 3600.0), ("d", 86400.0)][unit];
            let r = Rate::parse(&format!("{a} / {p}{u}")).unwrap();
            prop_assert_eq!(r.amount(), f64::from(a));
            prop_assert_eq!(r.period_secs(), f64::from(p) * m);
        }
    }
}
