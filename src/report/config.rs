//! `[report]` compiled: the event log for measurement (the section as written is
//! [`crate::config::ReportConfig`]).

use std::ops::Range;
use std::path::PathBuf;

use crate::config::{Config, ConfigError};

/// `[report]`, validated.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReportSettings {
    /// The event log; `None`: off.
    pub events: Option<PathBuf>,
    /// Rotation size in bytes.
    pub max_size: Option<u64>,
    /// Queue length.
    pub queue: usize,
}

impl Default for ReportSettings {
    fn default() -> Self {
        ReportSettings {
            events: None,
            max_size: None,
            queue: 65_536,
        }
    }
}

/// Parses a size: digits with an optional `k`, `M` or `G` (powers of 1024, any case).
pub fn parse_size(text: &str) -> Option<u64> {
    let t = text.trim();
    let (digits, mult) = match t.char_indices().last()? {
        (i, 'k' | 'K') => (&t[..i], 1u64 << 10),
        (i, 'm' | 'M') => (&t[..i], 1 << 20),
        (i, 'g' | 'G') => (&t[..i], 1 << 30),
        _ => (t, 1),
    };
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse::<u64>().ok()?.checked_mul(mult)
}

/// `config`'s `[report]`, checked, with its path made absolute; a limit with a `baseline`
/// needs the event log (its history is read from it).
pub fn compile(config: &Config) -> Result<ReportSettings, ConfigError> {
    let at = |span: Range<usize>, message: String| config.error_at(span, message);
    let raw = &config.report;
    let mut s = ReportSettings::default();
    if let Some(e) = &raw.events {
        if e.get_ref().trim().is_empty() {
            return Err(at(e.span(), "[report] events must be a file path".into()));
        }
        let p = config.resolve(e.get_ref());
        if p.is_dir() {
            return Err(at(
                e.span(),
                format!("[report] events: {} is a directory", p.display()),
            ));
        }
        s.events = Some(p);
    }
    if let Some(m) = &raw.max_size {
        let v = parse_size(m.get_ref())
            .filter(|&v| v >= 4096)
            .ok_or_else(|| {
                at(
                    m.span(),
                    format!(
                        "[report] max_size {:?}: write a size of at least 4k, e.g. 100M",
                        m.get_ref()
                    ),
                )
            })?;
        s.max_size = Some(v);
    }
    if let Some(q) = &raw.queue {
        s.queue = usize::try_from(*q.get_ref())
            .ok()
            .filter(|&n| (1..=16_777_216).contains(&n))
            .ok_or_else(|| {
                at(
                    q.span(),
                    "[report] queue must be between 1 and 16777216".into(),
                )
            })?;
    }
    super::baseline::check_config(&config.limits, s.events.is_some(), &at)?;
    Ok(s)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn sizes() {
        assert_eq!(parse_size("100M"), Some(100 << 20));
        assert_eq!(parse_size("4096"), Some(4096));
        assert_eq!(parse_size("2g"), Some(2 << 30));
        assert_eq!(parse_size("5k"), Some(5 << 10));
        for bad in ["", "M", "1.5M", "-1", "10T", "99999999999999999999G"] {
            assert_eq!(parse_size(bad), None, "{bad}");
        }
    }

    proptest! {
        #[test]
        fn size_round_trip(n in 0u64..1 << 40, unit in 0usize..4) {
            let (suffix, mult) = [("", 1u64), ("k", 1 << 10), ("M", 1 << 20), ("G", 1 << 30)][unit];
            let want = n.checked_mul(mult);
            prop_assert_eq!(parse_size(&format!("{n}{suffix}")), want);
        }

        #[test]
        fn size_never_panics(s in "\\PC{0,24}") {
            let _ = parse_size(&s);
        }
    }
}
