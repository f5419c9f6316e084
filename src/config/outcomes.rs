//! `[outcomes]`: following the smart host's log for what became of queued messages.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;
use toml::Spanned;

use super::{ConfigDuration, ConfigError};
use crate::outcomes::follow::FollowSettings;
use crate::outcomes::index::DEFAULT_CAPACITY;
use crate::outcomes::logline::Format;

/// `[outcomes]` as written.
#[derive(Clone, Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct RawOutcomes {
    /// The smart host's log file (absent: no log is followed).
    #[serde(default)]
    pub follow: Option<Spanned<PathBuf>>,
    /// `postfix` or `exim`.
    #[serde(default)]
    pub format: Option<Spanned<String>>,
    /// How often the log is looked at when nothing new was read (default 1s).
    #[serde(default)]
    pub poll: Option<ConfigDuration>,
    /// Queued messages remembered for their outcomes (default 100000).
    #[serde(default)]
    pub remember: Option<Spanned<i64>>,
}

/// `[outcomes]`, checked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OutcomesSettings {
    /// The log to follow, if any.
    pub follow: Option<FollowSettings>,
    /// Queued messages remembered.
    pub remember: usize,
}

impl Default for OutcomesSettings {
    fn default() -> Self {
        OutcomesSettings {
            follow: None,
            remember: DEFAULT_CAPACITY,
        }
    }
}

/// Checks `[outcomes]`; relative paths are taken from `base`.
pub fn validate(
    raw: Option<Spanned<RawOutcomes>>,
    base: &Path,
    at: &dyn Fn(std::ops::Range<usize>, String) -> ConfigError,
) -> Result<OutcomesSettings, ConfigError> {
    let Some(raw) = raw else {
        return Ok(OutcomesSettings::default());
    };
    let span = raw.span();
    let raw = raw.into_inner();
    let remember = match &raw.remember {
        Some(r) => usize::try_from(*r.get_ref())
            .ok()
            .filter(|n| *n >= 1)
            .ok_or_else(|| at(r.span(), "[outcomes] remember must be at least 1".into()))?,
        None => DEFAULT_CAPACITY,
    };
    let poll = raw.poll.map_or(Duration::from_secs(1), |d| d.0);
    if poll.is_zero() || poll > Duration::from_secs(60) {
        return Err(at(
            span,
            "[outcomes] poll must be between 1ms and 60s".into(),
        ));
    }
    let follow = match (raw.follow, raw.format) {
        (None, None) => None,
        (Some(f), None) => {
            return Err(at(
                f.span(),
                "[outcomes] follow needs format = \"postfix\" or \"exim\"".into(),
            ))
        }
        (None, Some(f)) => {
            return Err(at(
                f.span(),
                "[outcomes] format goes with follow (the log file)".into(),
            ))
        }
        (Some(p), Some(f)) => {
            let format = Format::parse(f.get_ref()).ok_or_else(|| {
                at(
                    f.span(),
                    format!(
                        "[outcomes] format {:?}: use \"postfix\" or \"exim\"",
                        f.get_ref()
                    ),
                )
            })?;
            let path = p.into_inner();
            Some(FollowSettings {
                path: if path.is_absolute() {
                    path
                } else {
                    base.join(path)
                },
                format,
                poll,
            })
        }
    };
    Ok(OutcomesSettings { follow, remember })
}
