//! `[hold]`: the hold spool of `action = "hold"`.

use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;
use toml::Spanned;

use super::{ConfigDuration, ConfigError};

/// `[hold]` as written.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawHold {
    dir: PathBuf,
    #[serde(default = "default_hold_max_bytes")]
    max_bytes: u64,
    #[serde(default = "default_hold_max_messages")]
    max_messages: usize,
    #[serde(default = "default_hold_ttl")]
    ttl: ConfigDuration,
    #[serde(default)]
    on_expiry: crate::hold::OnExpiry,
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

/// Validates `[hold]`; a limit with `action = "hold"` needs it.
pub(super) fn validate(
    raw: Option<Spanned<RawHold>>,
    abs: &dyn Fn(PathBuf) -> PathBuf,
    policy: &crate::policy::model::PolicyModel,
    at: &dyn Fn(std::ops::Range<usize>, String) -> ConfigError,
) -> Result<Option<crate::hold::HoldSettings>, ConfigError> {
    let hold = match raw {
        Some(h) => {
            let span = h.span();
            let h = h.into_inner();
            if h.max_messages == 0 || h.max_bytes == 0 {
                return Err(at(
                    span,
                    "[hold] max_messages and max_bytes must be at least 1".into(),
                ));
            }
            if h.ttl.0.is_zero() {
                return Err(at(span, "[hold] ttl must be longer than 0s".into()));
            }
            Some(crate::hold::HoldSettings {
                dir: abs(h.dir),
                max_bytes: h.max_bytes,
                max_messages: h.max_messages,
                ttl: h.ttl.0,
                on_expiry: h.on_expiry,
            })
        }
        None => None,
    };
    if hold.is_none() {
        if let Some(l) = policy
            .limits
            .iter()
            .find(|l| l.action == crate::policy::model::Action::Hold)
        {
            return Err(at(
                0..0,
                format!(
                    "limit {} has action = \"hold\" but there is no [hold] section with a dir",
                    l.name
                ),
            ));
        }
        if let Some(l) = policy
            .limits
            .iter()
            .find(|l| l.restrict.as_ref().is_some_and(|r| r.hold))
        {
            return Err(at(
                0..0,
                format!(
                    "limit {} has while_restricted = \"hold\", which needs [hold] (a [hold] section with a dir)",
                    l.name
                ),
            ));
        }
    }
    Ok(hold)
}
