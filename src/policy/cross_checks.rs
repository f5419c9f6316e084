//! The compiled limits checked against other sections of the config, which the policy's
//! own compile does not read: what some countermeasures need of them. `action = "hold"` and
//! `while_restricted = "hold"` the hold spool (`[hold]`), `action = "reroute"` the second
//! smart host (`[upstream.high_risk]`), `action = "pace"` the hold spool too.

use super::model::{Action, PolicyModel};
use crate::config::{Config, ConfigError};

/// Refuses the first limit of `model` whose countermeasure needs a section `config` lacks;
/// `hold` says whether `[hold]` is there.
pub fn check_sections(model: &PolicyModel, config: &Config, hold: bool) -> Result<(), ConfigError> {
    let refuse = |message: String| Err(config.error_at(0..0, message));
    if !hold {
        if let Some(l) = model.limits.iter().find(|l| l.action == Action::Hold) {
            return refuse(format!(
                "limit {} has action = \"hold\" but there is no [hold] section with a dir",
                l.name
            ));
        }
        if let Some(l) = model
            .limits
            .iter()
            .find(|l| l.restrict.as_ref().is_some_and(|r| r.hold))
        {
            return refuse(format!(
                "limit {} has while_restricted = \"hold\", which needs [hold] (a [hold] section with a dir)",
                l.name
            ));
        }
    }
    if config.upstream.high_risk.is_none() {
        if let Some(l) = model.limits.iter().find(|l| l.action == Action::Reroute) {
            return refuse(format!(
                "limit {} (line {}) has action = \"reroute\" but there is no [upstream.high_risk] section (the second smart host, with an address)",
                l.name, l.line
            ));
        }
    }
    if !hold {
        if let Some(l) = model.limits.iter().find(|l| l.action == Action::Pace) {
            return refuse(format!(
                "limit {} (line {}) has action = \"pace\" but there is no [hold] section with a dir (paced messages wait in the hold spool)",
                l.name, l.line
            ));
        }
    }
    Ok(())
}
