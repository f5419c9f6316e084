//! One generation of the running configuration: the config as written and what each layer
//! compiled from it. `floodgate check`, start and every reload build it with
//! [`Generation::compile`], so each refuses the same configs with the same errors; a reload
//! puts a whole new generation in force at once, or none of it.
//!
//! Each layer compiles its own part and takes only that part on reload: the policy its
//! [`PolicyModel`] ([`crate::policy::Policy::reload`]), the event log and alerts their
//! [`ObserverSettings`] ([`crate::report::Observers::reload`]), the hold spool its
//! [`HoldSettings`].

use std::path::Path;
use std::sync::Arc;

use crate::config::{Config, ConfigError};
use crate::hold::postfix::PostfixSettings;
use crate::hold::HoldSettings;
use crate::outcomes::OutcomesSettings;
use crate::policy::alert::AlertSettings;
use crate::policy::model::PolicyModel;
use crate::report::{ObserverSettings, ReportSettings};

/// The config and what was compiled from it, in force together.
#[derive(Clone, Debug)]
pub struct Generation {
    /// The config as written (sections checked that need no compiling).
    pub config: Arc<Config>,
    /// `[lists]`, `[[limit]]` and `[auth_failures]`, compiled and checked.
    pub policy: Arc<PolicyModel>,
    /// `[report]`: the event log for measurement.
    pub report: ReportSettings,
    /// `[alerts]`; `None` when absent or disabled.
    pub alerts: Option<AlertSettings>,
    /// `[hold]`, with its directory made absolute; `None` when absent.
    pub hold: Option<HoldSettings>,
    /// `[outcomes]`: the smart host's log to follow, if any.
    pub outcomes: OutcomesSettings,
    /// `[postfix]`: Postfix's hold queue and its commands; `None` when absent.
    pub postfix: Option<PostfixSettings>,
}

impl Generation {
    /// Compiles every section of `config`; the first error found is returned, in the order
    /// the sections are listed here (a limit's countermeasure is checked against `[hold]`
    /// and `[upstream.high_risk]` once both are known).
    pub fn compile(config: Config) -> Result<Generation, ConfigError> {
        let policy = crate::policy::compile(&config)?;
        let report = crate::report::compile(&config)?;
        let alerts = crate::policy::alert::compile(&config)?;
        let hold = HoldSettings::compile(&config)?;
        // Without [[listener]] floodgate holds in Postfix's hold queue: no spool of its own.
        let holds_somewhere = hold.is_some() || config.listeners.is_empty();
        crate::policy::check_sections(&policy, &config, holds_somewhere)?;
        let outcomes = crate::outcomes::compile(&config)?;
        let postfix = PostfixSettings::compile(&config)?;
        Ok(Generation {
            config: Arc::new(config),
            policy: Arc::new(policy),
            report,
            alerts,
            hold,
            outcomes,
            postfix,
        })
    }

    /// Reads, validates and compiles a config file.
    pub fn load(path: &Path) -> Result<Generation, ConfigError> {
        Generation::compile(Config::load(path)?)
    }

    /// Validates and compiles config text; `path` names it in errors and anchors relative
    /// paths.
    pub fn parse(path: &Path, text: &str) -> Result<Generation, ConfigError> {
        Generation::compile(Config::parse(path, text)?)
    }

    /// What the event log and the alerts take from this generation.
    pub fn observer_settings(&self) -> ObserverSettings<'_> {
        ObserverSettings {
            policy: &self.policy,
            report: &self.report,
            alerts: self.alerts.as_ref(),
            host: &self.config.server.hostname,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HEAD: &str =
        "[[listener]]\naddress = \"127.0.0.1:0\"\n[upstream]\naddress = \"127.0.0.1:2525\"\n";

    fn err(body: &str) -> String {
        Generation::parse(Path::new("/etc/floodgate/g.toml"), &format!("{HEAD}{body}"))
            .unwrap_err()
            .to_string()
    }

    #[test]
    fn every_part_is_compiled_from_one_config() {
        let g = Generation::parse(
            Path::new("/etc/floodgate/g.toml"),
            &format!(
                "{HEAD}[report]\nevents = \"ev.jsonl\"\n[alerts]\nmax_keys = 7\n\
                 [hold]\ndir = \"held\"\n[outcomes]\nremember = 5\n\
                 [[limit]]\nname = \"h\"\nrate = \"1 / 1m\"\nburst = \"1\"\ncount = \"messages\"\naction = \"hold\"\n"
            ),
        )
        .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(g.policy.limits[0].name, "h");
        assert_eq!(
            g.report.events.as_deref(),
            Some(Path::new("/etc/floodgate/ev.jsonl"))
        );
        assert_eq!(g.alerts.as_ref().map(|a| a.max_keys), Some(7));
        assert_eq!(
            g.hold.as_ref().map(|h| h.dir.as_path()),
            Some(Path::new("/etc/floodgate/held"))
        );
        assert_eq!(g.outcomes.remember, 5);
        let s = g.observer_settings();
        assert!(Arc::ptr_eq(s.policy, &g.policy));
        assert_eq!(s.host, "floodgate");
    }

    #[test]
    fn the_first_refused_section_is_named_in_a_fixed_order() {
        let hold_limit = "[[limit]]\nname = \"h\"\nrate = \"1 / 1m\"\nburst = \"1\"\ncount = \"messages\"\naction = \"hold\"\n";
        // The limits before [report], [report] before [alerts], [alerts] before [hold].
        let e = err(&format!(
            "[report]\nqueue = 0\n[alerts]\nmax_keys = 0\n{hold_limit}stage = \"nowhere\"\n"
        ));
        assert!(e.contains("unknown stage \"nowhere\""), "{e}");
        let e = err(&format!(
            "[report]\nqueue = 0\n[alerts]\nmax_keys = 0\n{hold_limit}"
        ));
        assert!(e.contains("[report] queue"), "{e}");
        let e = err("[alerts]\nmax_keys = 0\n[hold]\ndir = \"h\"\nttl = \"0s\"\n");
        assert!(e.contains("[alerts] max_keys"), "{e}");
        // [hold] itself before what the limits need of it, that before [outcomes].
        let e = err("[hold]\ndir = \"h\"\nttl = \"0s\"\n[outcomes]\nremember = 0\n");
        assert!(e.contains("[hold] ttl"), "{e}");
        let e = err(&format!("[outcomes]\nremember = 0\n{hold_limit}"));
        assert!(
            e.contains("has action = \"hold\" but there is no [hold]"),
            "{e}"
        );
        let e = err("[outcomes]\nremember = 0\n");
        assert!(e.contains("[outcomes] remember"), "{e}");
        assert!(e.starts_with("/etc/floodgate/g.toml:6:"), "{e}");
    }
}
