//! `[message_keys]` as written: what the message keys (`${fingerprint}`, `${link_domain}`,
//! `${subject_shape}`) leave out (checked when the policy is compiled).

use serde::Deserialize;
use toml::Spanned;

use super::duration::ConfigDuration;

/// `[message_keys]` as written.
#[derive(Clone, Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct MessageKeysConfig {
    /// Registered domains (and their subdomains) whose links are not message keys: your
    /// own domains, your newsletter platform. A message whose links all go to them gets no
    /// message key at all.
    #[serde(default)]
    pub exempt_link_domains: Vec<Spanned<String>>,
    /// Compute message keys also for mail from the null sender and automatic or list mail
    /// (`Auto-Submitted`, `List-Id`, `Precedence: bulk|list|junk`); default false.
    #[serde(default)]
    pub include_automatic: bool,
    /// The CPU time one message's keys may take (default 50ms, from 1ms to 10s): past it
    /// the message keeps the keys finished by then, and is relayed all the same.
    pub budget: Option<Spanned<ConfigDuration>>,
}
