//! `[hold]` as written: the hold spool of `action = "hold"` (checked and made absolute when
//! the generation is compiled).

use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;

use super::ConfigDuration;

/// What happens to a held message when its `ttl` has passed.
#[derive(Clone, Copy, Debug, Deserialize, PartialEq, Eq, Default)]
#[serde(rename_all = "lowercase")]
pub enum OnExpiry {
    /// Remove it.
    #[default]
    Delete,
    /// Relay it as `held release` would.
    Release,
}

impl OnExpiry {
    /// The config word.
    pub fn as_str(self) -> &'static str {
        match self {
            OnExpiry::Delete => "delete",
            OnExpiry::Release => "release",
        }
    }
}

/// `[hold]` as written.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HoldConfig {
    /// The spool directory (relative to the config file's directory).
    pub dir: PathBuf,
    /// Most octets of held files together.
    #[serde(default = "default_hold_max_bytes")]
    pub max_bytes: u64,
    /// Most held messages.
    #[serde(default = "default_hold_max_messages")]
    pub max_messages: usize,
    /// How long a message stays held.
    #[serde(default = "default_hold_ttl")]
    pub ttl: ConfigDuration,
    /// What happens after `ttl`.
    #[serde(default)]
    pub on_expiry: OnExpiry,
    /// Whether an admin's release reason is written in the released message's trace
    /// header (which its recipients can read); off: the header names the audit line
    /// (`audit REF`) instead.
    #[serde(default)]
    pub reason_in_header: bool,
}

fn default_hold_max_bytes() -> u64 {
    1 << 30
}

fn default_hold_max_messages() -> usize {
    10_000
}

fn default_hold_ttl() -> ConfigDuration {
    ConfigDuration(Duration::from_secs(7 * 86400))
}
