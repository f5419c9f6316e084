//! `[outcomes]` compiled: which smart host log to follow and how many queued messages to
//! remember (the section as written is [`crate::config::OutcomesConfig`]).

use std::time::Duration;

use crate::config::{Config, ConfigError};

use super::follow::FollowSettings;
use super::index::DEFAULT_CAPACITY;
use super::logline::Format;

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

/// `config`'s `[outcomes]`, checked; relative paths are taken from the config file's
/// directory.
pub fn compile(config: &Config) -> Result<OutcomesSettings, ConfigError> {
    let Some(raw) = &config.outcomes else {
        return Ok(OutcomesSettings::default());
    };
    let at = |span, message| config.error_at(span, message);
    let span = raw.span();
    let raw = raw.get_ref();
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
    let follow = match (&raw.follow, &raw.format) {
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
            Some(FollowSettings {
                path: config.resolve(p.get_ref()),
                format,
                poll,
            })
        }
    };
    Ok(OutcomesSettings { follow, remember })
}
