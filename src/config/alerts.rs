//! `[alerts]` as written: when a key first crosses a limit, tell someone (checked when the
//! generation is compiled).

use serde::Deserialize;
use toml::Spanned;

/// `[alerts]` as written.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AlertsConfig {
    /// Alerts on or off (default on when the section is present).
    #[serde(default)]
    pub enabled: Option<bool>,
    /// Alert a key again after this long; default: the limit's own period.
    #[serde(default)]
    pub period: Option<Spanned<String>>,
    /// Alerts delivered per minute at most (default 60); more are counted as suppressed.
    #[serde(default)]
    pub max_per_minute: Option<Spanned<i64>>,
    /// Keys remembered as already alerted at most (default 100000).
    #[serde(default)]
    pub max_keys: Option<Spanned<i64>>,
    /// POST each alert here (`http://host:port/path` or `https://...`).
    #[serde(default)]
    pub webhook: Option<Spanned<String>>,
    /// CA bundle for an https webhook; the system roots when absent.
    #[serde(default)]
    pub ca_file: Option<Spanned<String>>,
    /// Time limit of one webhook delivery (default 5s).
    #[serde(default)]
    pub webhook_timeout: Option<Spanned<String>>,
    /// Run this program (no shell) with the alert as JSON on stdin.
    #[serde(default)]
    pub command: Option<Spanned<Vec<String>>>,
    /// Time limit of one command run (default 10s); it is killed after.
    #[serde(default)]
    pub command_timeout: Option<Spanned<String>>,
    /// Mail each alert to these addresses through `[upstream]`.
    #[serde(default)]
    pub mail_to: Option<Spanned<Vec<String>>>,
    /// The `From:` address of alert mail (default `MAILER-DAEMON@` floodgate's host name).
    #[serde(default)]
    pub mail_from: Option<Spanned<String>>,
    /// Mail a digest every day at this local time (`HH:MM`), to `mail_to`.
    #[serde(default)]
    pub mail_digest: Option<Spanned<String>>,
}
