//! `[report]`: the event log for measurement.
//!
//! ```toml
//! [report]
//! events = "/var/lib/floodgate/events.jsonl"   # off when absent
//! max_size = "100M"     # optional: at this size the file is renamed to PATH.1 and reopened
//! queue = 65536         # events waiting for the writer at most; more are dropped and counted
//! ```

use std::ops::Range;
use std::path::{Path, PathBuf};

use serde::Deserialize;
use toml::Spanned;

use crate::config::ConfigError;

/// `[report]` as written.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReportConfig {
    /// The event log (relative to the config file's directory).
    #[serde(default)]
    pub events: Option<Spanned<String>>,
    /// Rotate at this size (`100M`, `1G`, `500k`, plain bytes).
    #[serde(default)]
    pub max_size: Option<Spanned<String>>,
    /// Queue length between sessions and the writer.
    #[serde(default)]
    pub queue: Option<Spanned<i64>>,
}

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

impl ReportConfig {
    /// Validates the section; `base` anchors a relative path, `at` places errors.
    pub fn compile(
        &self,
        base: &Path,
        at: &dyn Fn(Range<usize>, String) -> ConfigError,
    ) -> Result<ReportSettings, ConfigError> {
        let mut s = ReportSettings::default();
        if let Some(e) = &self.events {
            if e.get_ref().trim().is_empty() {
                return Err(at(e.span(), "[report] events must be a file path".into()));
            }
            let p = PathBuf::from(e.get_ref());
            let p = if p.is_absolute() { p } else { base.join(p) };
            if p.is_dir() {
                return Err(at(
                    e.span(),
                    format!("[report] events: {} is a directory", p.display()),
                ));
            }
            s.events = Some(p);
        }
        if let Some(m) = &self.max_size {
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
        if let Some(q) = &self.queue {
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
        Ok(s)
    }
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
