//! `[outcomes]` as written: following the smart host's log for what became of queued
//! messages (checked when the generation is compiled).

use std::path::PathBuf;

use serde::Deserialize;
use toml::Spanned;

use super::ConfigDuration;

/// `[outcomes]` as written.
#[derive(Clone, Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct OutcomesConfig {
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
