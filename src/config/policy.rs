//! The policy sections of the config as written: `[lists]`, `[[limit]]`, `[auth_failures]`.
//! Values keep their position so the policy compiler can name file, line and column.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::Deserialize;
use toml::Spanned;

use super::ConfigDuration;

/// One entry of `[lists]`: `{ file = "path" }` or `{ entries = ["10.0.0.0/8 500", ...] }`.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ListConfig {
    /// A file with one entry a line (relative to the config file's directory).
    #[serde(default)]
    pub file: Option<Spanned<String>>,
    /// Inline entries.
    #[serde(default)]
    pub entries: Option<Spanned<Vec<Spanned<String>>>>,
}

/// `[lists]`: name → list.
pub type ListsConfig = BTreeMap<String, Spanned<ListConfig>>;

/// One `[[limit]]` as written (see conf/floodgate.toml for the meaning of each field).
#[derive(Clone, Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct LimitConfig {
    /// Name for logs, headers and non-Exim keys.
    pub name: Option<Spanned<String>>,
    /// SMTP stage.
    pub stage: Option<Spanned<String>>,
    /// What is counted.
    pub count: Option<Spanned<String>>,
    /// Key template.
    pub key: Option<Spanned<String>>,
    /// Exim `ratelimit` string.
    pub ratelimit: Option<Spanned<String>>,
    /// `gcra` (default) or `bucket` for `rate`/`burst` limits.
    pub algorithm: Option<Spanned<String>>,
    /// Rspamd-style rate (`"10 / 1min"`).
    pub rate: Option<Spanned<String>>,
    /// Bucket size (events).
    pub burst: Option<Spanned<String>>,
    /// Bucket only: dynamic multipliers fed by upstream's verdicts.
    pub dynamic: Option<Spanned<bool>>,
    /// Concurrency limits: most sessions at once per key.
    pub max: Option<Spanned<i64>>,
    /// leaky | strict | readonly.
    pub mode: Option<Spanned<String>>,
    /// Condition.
    pub when: Option<Spanned<String>>,
    /// Countermeasure.
    pub action: Option<Spanned<String>>,
    /// Reply text template.
    pub message: Option<Spanned<String>>,
    /// Reply code override.
    pub code: Option<Spanned<i64>>,
    /// Delay: a duration or `computed`.
    pub delay: Option<Spanned<String>>,
    /// Cap of the delay.
    pub max_delay: Option<Spanned<String>>,
    /// A list whose values give per-key limits.
    pub limit_list: Option<Spanned<String>>,
    /// What is looked up in `limit_list` (a condition subject, default client_ip).
    pub limit_by: Option<Spanned<String>>,
    /// A per-key limit from the key's own history: `"p95 / 14d"`.
    pub baseline: Option<Spanned<String>>,
    /// With `baseline`: the multiple of the key's percentile peak it may send (default 5).
    pub factor: Option<Spanned<f64>>,
    /// With `baseline`: the lowest per-key limit (default: the limit's own m or burst).
    pub floor: Option<Spanned<f64>>,
    /// action = "restrict": the key restricted (a template; default the limit's key).
    pub restrict_key: Option<Spanned<String>>,
    /// action = "restrict": a duration (`"24h"`) or `"until_released"` (the default).
    pub restrict_for: Option<Spanned<String>>,
    /// action = "restrict": what a restricted key's MAIL FROM gets, `"defer"` or `"hold"`.
    pub while_restricted: Option<Spanned<String>>,
    /// action = "restrict": reply code to a restricted key's MAIL FROM (4xx or 5xx).
    pub restricted_code: Option<Spanned<i64>>,
    /// action = "restrict": reply text template to a restricted key's MAIL FROM.
    pub restricted_message: Option<Spanned<String>>,
    /// action = "restrict": a template giving the address told of each restriction by a
    /// short mail (`"${authenticated_id}"`).
    pub notify_user: Option<Spanned<String>>,
    /// A limit keyed on a message key: when over, restrict every sender (account, else
    /// client address) of a message with that key within the limit's period.
    pub restrict_senders: Option<Spanned<bool>>,
    /// A ratio limit: `"COUNT / COUNT"`.
    pub ratio: Option<Spanned<String>>,
    /// Ratio: over when the ratio is above this.
    pub above: Option<Spanned<f64>>,
    /// Ratio: the fewest denominator events to judge (default 1).
    pub min_events: Option<Spanned<i64>>,
    /// Ratio: the window.
    pub period: Option<Spanned<String>>,
    /// Ratio: count null-sender and auto-submitted messages too (default false).
    pub include_automatic: Option<Spanned<bool>>,
}

/// `[auth_failures]`: timeouts, not lockouts, after failed AUTH.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AuthFailuresConfig {
    /// Delay failed AUTH answers at all.
    pub enabled: bool,
    /// Delay after the first recent failure; each further failure doubles it.
    pub base_delay: ConfigDuration,
    /// Cap of the delay (at most 120 s).
    pub max_delay: ConfigDuration,
    /// How fast failures are forgotten: the failure count decays by e every `decay`.
    pub decay: ConfigDuration,
}

impl Default for AuthFailuresConfig {
    fn default() -> Self {
        AuthFailuresConfig {
            enabled: true,
            base_delay: ConfigDuration(Duration::from_secs(1)),
            max_delay: ConfigDuration(Duration::from_secs(30)),
            decay: ConfigDuration(Duration::from_secs(600)),
        }
    }
}
