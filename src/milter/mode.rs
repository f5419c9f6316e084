//! What `floodgate check` says of milter mode: the mode named, and the limits that need
//! what a milter cannot see or do.

use crate::config::Config;
use crate::policy::counted::Counted;
use crate::policy::model::{Action, PolicyModel};
use crate::policy::Stage;

/// The lines naming milter mode, one per `[[milter]]`: where Postfix reaches it and the
/// main.cf lines that use it.
pub fn describe(config: &Config) -> Vec<String> {
    config
        .milters
        .iter()
        .map(|m| {
            let address = match m.address(config.base_dir()) {
                Ok(crate::config::MilterListen::Unix(p)) => {
                    format!("unix:{} mode={}", p.display(), m.mode.get_ref())
                }
                Ok(crate::config::MilterListen::Tcp(a)) => format!("inet:{a}"),
                Err(e) => e.to_string(),
            };
            format!(
                "milter {}: {address} (milter mode: name it in Postfix's smtpd_milters and non_smtpd_milters, with milter_default_action = tempfail)",
                m.display_name()
            )
        })
        .collect()
}

/// Why a limit sees less (or acts otherwise) in milter mode, if it does.
fn limit_warning(stage: Stage, counted: Counted, action: &Action) -> Option<&'static str> {
    match (stage, counted) {
        (Stage::Auth, _) | (_, Counted::AuthFailures) => {
            return Some("counts AUTH attempts: a milter sees only the login of a successful AUTH ({auth_authen}), never a failure")
        }
        (Stage::Command, _) | (_, Counted::Commands) => {
            return Some("counts commands: a milter is told of connect, HELO, MAIL, RCPT and DATA only")
        }
        (_, Counted::RefusedRecipients) => {
            return Some("counts refused recipients: recipients Postfix refuses itself never reach a milter")
        }
        _ => {}
    }
    match action {
        Action::Reroute => Some("reroutes: a milter has no second smart host, so the message is held in Postfix's hold queue instead"),
        Action::Pace => Some("paces: a milter holds the message in Postfix's hold queue, where it waits for `floodgate held release` instead of leaving at the limit's rate"),
        Action::Delay(_) => Some("delays: keep the delay shorter than Postfix's milter_command_timeout (30s by default), or Postfix applies milter_default_action"),
        _ => None,
    }
}

/// The warnings of milter mode for `model`'s limits: none without a `[[milter]]`.
pub fn warnings(config: &Config, model: &PolicyModel) -> Vec<String> {
    if config.milters.is_empty() {
        return Vec::new();
    }
    let mut out: Vec<String> = model
        .limits
        .iter()
        .filter_map(|l| {
            limit_warning(l.stage, l.counted, &l.action)
                .map(|why| format!("limit {} (line {}) {why}", l.name, l.line))
        })
        .collect();
    if model.limits.iter().any(|l| l.stage == Stage::Connect) {
        out.push("connect-stage limits judge mail from the local sendmail (non_smtpd_milters) at its end, as the envelope sender, with client 127.0.0.1".into());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_a_milter_cannot_see_is_named() {
        assert!(
            limit_warning(Stage::Auth, Counted::AuthFailures, &Action::Defer)
                .unwrap()
                .contains("never a failure")
        );
        assert!(
            limit_warning(Stage::Command, Counted::Commands, &Action::Defer)
                .unwrap()
                .contains("commands")
        );
        assert!(
            limit_warning(Stage::Rcpt, Counted::RefusedRecipients, &Action::Defer)
                .unwrap()
                .contains("refuses itself")
        );
        assert!(
            limit_warning(Stage::Message, Counted::Messages, &Action::Reroute)
                .unwrap()
                .contains("hold queue")
        );
        assert_eq!(
            limit_warning(Stage::Rcpt, Counted::Recipients, &Action::Defer),
            None
        );
        assert_eq!(
            limit_warning(Stage::Message, Counted::Messages, &Action::Hold),
            None
        );
    }
}
