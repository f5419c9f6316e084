//! `[upstream.high_risk]` and the graded answers that need a section of their own:
//! `action = "reroute"` needs the second smart host, `action = "pace"` the hold spool.

use std::path::PathBuf;

use super::{split_host_port, ConfigError, UpstreamConfig};
use crate::policy::model::{Action, PolicyModel};

type At<'a> = &'a dyn Fn(std::ops::Range<usize>, String) -> ConfigError;

/// Checks `[upstream.high_risk]` (an address, no section of its own inside) and makes its
/// paths absolute.
pub(super) fn check_high_risk(
    upstream: &mut UpstreamConfig,
    abs: &dyn Fn(PathBuf) -> PathBuf,
    at: At<'_>,
) -> Result<(), ConfigError> {
    let Some(h) = upstream.high_risk.as_mut() else {
        return Ok(());
    };
    let span = h.address.span();
    if h.high_risk.is_some() {
        return Err(at(
            span,
            "[upstream.high_risk] cannot have a high_risk section of its own".into(),
        ));
    }
    if split_host_port(h.address.get_ref()).is_none() {
        return Err(at(
            span,
            format!(
                "[upstream.high_risk] address {:?} is not host:port",
                h.address.get_ref()
            ),
        ));
    }
    h.ca_file = h.ca_file.take().map(abs);
    Ok(())
}

/// A `reroute` limit needs `[upstream.high_risk]`; a `pace` limit needs `[hold]`.
pub(super) fn check_actions(
    policy: &PolicyModel,
    upstream: &UpstreamConfig,
    hold: bool,
    at: At<'_>,
) -> Result<(), ConfigError> {
    if upstream.high_risk.is_none() {
        if let Some(l) = policy.limits.iter().find(|l| l.action == Action::Reroute) {
            return Err(at(
                0..0,
                format!(
                    "limit {} (line {}) has action = \"reroute\" but there is no [upstream.high_risk] section (the second smart host, with an address)",
                    l.name, l.line
                ),
            ));
        }
    }
    if !hold {
        if let Some(l) = policy.limits.iter().find(|l| l.action == Action::Pace) {
            return Err(at(
                0..0,
                format!(
                    "limit {} (line {}) has action = \"pace\" but there is no [hold] section with a dir (paced messages wait in the hold spool)",
                    l.name, l.line
                ),
            ));
        }
    }
    Ok(())
}
