//! `[report]` as written: the event log for measurement (checked when the generation is
//! compiled).
//!
//! ```toml
//! [report]
//! events = "/var/lib/floodgate/events.jsonl"   # off when absent
//! max_size = "100M"     # optional: at this size the file is renamed to PATH.1 and reopened
//! queue = 65536         # events waiting for the writer at most; more are dropped and counted
//! ```

use serde::Deserialize;
use toml::Spanned;

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
