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
        crate::policy::check_sections(&policy, &config, hold.is_some())?;
        let outcomes = crate::outcomes::compile(&config)?;
        Ok(Generation {
            config: Arc::new(config),
            policy: Arc::new(policy),
            report,
            alerts,
            hold,
            outcomes,
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
