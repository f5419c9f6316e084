//! Measurement and alerts around the policy engine:
//!
//! * [`events`]: the event log (`[report] events`), every evaluation of every limit;
//! * [`analyze`] and [`render`]: `floodgate report`, per-key peaks replayed from the log,
//!   percentiles, top keys and a suggested limit;
//! * [`deliver`] and [`http`]: delivery of the alerts decided by
//!   [`crate::policy::alert`] (log, webhook, command);
//! * [`time`]: RFC 3339 and relative times; [`config`]: `[report]`.
//!
//! [`Observers`] plugs the event log and the alerter into the engine
//! ([`crate::policy::RatePolicy::observe`]).

pub mod analyze;
pub mod baseline;
pub mod config;
pub mod deliver;
pub mod events;
pub mod html;
pub mod http;
pub mod render;
pub mod svg;
pub mod time;

use std::sync::{Arc, RwLock};

use crate::config::Config;
use crate::limit::spec::UpdateMode;
use crate::policy::alert::{Alerter, Crossed, Evaluated, Observer};
use crate::policy::model::RateDef;

pub use config::{ReportConfig, ReportSettings};
pub use events::{EventLog, Record};

/// The event log and the alerter, as one engine observer.
pub struct Observers {
    events: EventLog,
    alerter: Arc<Alerter>,
    host: Arc<RwLock<String>>,
    baselines: std::sync::OnceLock<Arc<baseline::BaselineKeeper>>,
}

/// Why observers could not start.
#[derive(Debug, thiserror::Error)]
pub enum ObserversError {
    /// The https webhook's TLS configuration could not be built.
    #[error("[alerts] webhook: {0}")]
    Tls(#[from] crate::tls::TlsError),
}

impl Observers {
    /// Starts the event log writer (when configured) and the alert delivery task (on the
    /// current tokio runtime, which must outlive the server).
    pub fn start(config: &Config) -> Result<Arc<Observers>, ObserversError> {
        if let Some(a) = &config.alerts {
            deliver::webhook_tls(a)?;
        }
        let (alerter, rx) = Alerter::new(config.alerts.clone());
        let alerter = Arc::new(alerter);
        let host = Arc::new(RwLock::new(config.server.hostname.clone()));
        tokio::spawn(deliver::run(alerter.clone(), rx, host.clone()));
        Ok(Arc::new(Observers {
            events: EventLog::new(&config.report),
            alerter,
            host,
            baselines: std::sync::OnceLock::new(),
        }))
    }

    /// Loads or computes the per-key baselines of `config`'s limits (from `store`, else
    /// from the event log) and keeps them fresh from now on: daily and at every reload.
    pub async fn keep_baselines(&self, config: &Config, store: Arc<dyn crate::store::Store>) {
        if self.baselines.get().is_none() {
            let keeper = baseline::BaselineKeeper::start(config, store).await;
            let _ = self.baselines.set(keeper);
        }
    }

    /// The event log.
    pub fn events(&self) -> &EventLog {
        &self.events
    }

    /// The alerter.
    pub fn alerter(&self) -> &Alerter {
        &self.alerter
    }
}

impl Observer for Observers {
    fn evaluated(&self, e: &Evaluated<'_>) {
        if !self.events.enabled() {
            return;
        }
        let readonly = match &e.def.rate {
            RateDef::Exim { resolved, .. } => resolved.update == UpdateMode::Readonly,
            RateDef::Concurrency(_) => true,
            _ => false,
        };
        if readonly {
            return;
        }
        self.events.record(Record {
            time_us: e.time_us,
            limit: e.def.name.clone(),
            key: e.key.to_string(),
            count: e.count,
            own_limit: e.own_limit,
            unique: e.unique.map(str::to_string),
        });
    }

    fn crossed(&self, c: &Crossed<'_>) {
        let host = self.host.read().unwrap_or_else(|e| e.into_inner());
        self.alerter.crossed(c, &host);
    }

    fn restriction(&self, notice: &serde_json::Value) {
        self.alerter.restriction(notice);
    }

    fn queued(&self, queue_id: &str, queued: &crate::outcomes::index::Queued, time_us: i64) {
        if self.events.enabled() {
            self.events
                .record_line(crate::outcomes::journal::queued_line(
                    queue_id, queued, time_us,
                ));
        }
    }

    fn outcome(
        &self,
        queue_id: &str,
        recipient: &str,
        kind: crate::outcomes::logline::Kind,
        time_us: i64,
    ) {
        if self.events.enabled() {
            self.events
                .record_line(crate::outcomes::journal::outcome_line(
                    queue_id, recipient, kind, time_us,
                ));
        }
    }

    fn reload(&self, config: &Config) {
        if let Some(k) = self.baselines.get() {
            k.reload(config);
        }
        self.events.apply(&config.report);
        if let Some(a) = &config.alerts {
            if let Err(e) = deliver::webhook_tls(a) {
                tracing::warn!(error = %e, "[alerts] webhook TLS configuration failed");
            }
        }
        self.alerter.set_settings(config.alerts.clone());
        *self.host.write().unwrap_or_else(|e| e.into_inner()) = config.server.hostname.clone();
    }
}
