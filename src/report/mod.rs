//! Measurement and alerts around the policy engine:
//!
//! * [`events`]: the event log (`[report] events`), every evaluation of every limit;
//! * [`transactions`]: its message lines, and the reader of a key's recent ones;
//! * [`analyze`] and [`render`]: `floodgate report`, per-key peaks replayed from the log,
//!   percentiles, top keys and a suggested limit;
//! * [`deliver`] and [`http`]: delivery of the alerts decided by
//!   [`crate::policy::alert`] (log, webhook, command); [`mail`], [`mailer`] and [`digest`]:
//!   alert mail and the daily digest;
//! * [`crate::time`]: RFC 3339 and relative times; [`config`]: `[report]` compiled.
//!
//! [`Observers`] plugs the event log and the alerter into the engine
//! (`observer` of [`crate::policy::engine::Serving`]); a reload hands them their
//! [`ObserverSettings`].

pub mod analyze;
pub mod baseline;
pub mod config;
pub mod deliver;
pub mod digest;
pub mod events;
pub mod html;
pub mod http;
pub mod mail;
pub mod mailer;
pub mod markup;
pub mod render;
pub mod svg;
pub mod transactions;

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, RwLock};

use crate::limit::spec::UpdateMode;
use crate::policy::alert::{AlertSettings, Alerter, Contained, Crossed, Evaluated, Observer};
use crate::policy::model::{PolicyModel, RateDef};

pub use config::{compile, ReportSettings};
pub use events::EventLog;

/// What the observers take from a generation.
#[derive(Clone, Copy, Debug)]
pub struct ObserverSettings<'a> {
    /// The limits in force, whose per-key baselines are kept fresh.
    pub policy: &'a Arc<PolicyModel>,
    /// `[report]`: the event log.
    pub report: &'a ReportSettings,
    /// `[alerts]`, when on.
    pub alerts: Option<&'a AlertSettings>,
    /// floodgate's host name, carried by alerts.
    pub host: &'a str,
}

/// The event log and the alerter, as one engine observer.
pub struct Observers {
    events: EventLog,
    alerter: Arc<Alerter>,
    mailer: Arc<mailer::Mailer>,
    host: Arc<RwLock<String>>,
    baselines: Arc<baseline::BaselineKeeper>,
    /// The latest containments, newest last, at most [`RECENT_CONTAINED`].
    recent: Mutex<VecDeque<Contained>>,
}

/// Most containments remembered for the console's overview.
pub const RECENT_CONTAINED: usize = 200;

/// Why observers could not start.
#[derive(Debug, thiserror::Error)]
pub enum ObserversError {
    /// The https webhook's TLS configuration could not be built.
    #[error("[alerts] webhook: {0}")]
    Tls(#[from] crate::tls::TlsError),
}

impl Observers {
    /// Starts the event log writer (when configured) and the alert delivery task (on the
    /// current tokio runtime, which must outlive the server); loads or computes the per-key
    /// baselines of the limits in force (from `store`, else from the event log) and keeps
    /// them fresh from now on: daily and at every reload.
    pub async fn start(
        settings: ObserverSettings<'_>,
        store: Arc<dyn crate::store::Store>,
        mail: mailer::MailParts,
    ) -> Result<Arc<Observers>, ObserversError> {
        if let Some(a) = settings.alerts {
            deliver::webhook_tls(a)?;
        }
        let (alerter, rx) = Alerter::new(settings.alerts.cloned());
        let alerter = Arc::new(alerter);
        let host = Arc::new(RwLock::new(settings.host.to_string()));
        let (mailer, mail_rx) = mailer::Mailer::new(mail);
        let mailer = Arc::new(mailer);
        tokio::spawn(deliver::run(
            alerter.clone(),
            rx,
            host.clone(),
            mailer.clone(),
        ));
        tokio::spawn(mailer::run(
            mailer.clone(),
            mail_rx,
            alerter.clone(),
            host.clone(),
        ));
        let baselines = baseline::BaselineKeeper::start(
            settings.policy.clone(),
            settings.report.events.clone(),
            store,
        )
        .await;
        Ok(Arc::new(Observers {
            events: EventLog::new(settings.report),
            alerter,
            mailer,
            host,
            baselines,
            recent: Mutex::default(),
        }))
    }

    /// The event log.
    pub fn events(&self) -> &EventLog {
        &self.events
    }

    /// The alerter.
    pub fn alerter(&self) -> &Alerter {
        &self.alerter
    }

    /// Alert mail and the daily digest.
    pub fn mailer(&self) -> &mailer::Mailer {
        &self.mailer
    }

    /// Makes and sends the daily digest now (with the settings in force).
    pub async fn digest_now(&self) -> Result<String, mailer::MailError> {
        let settings = self.alerter.settings().ok_or(mailer::MailError::Off)?;
        let host = self.host.read().unwrap_or_else(|e| e.into_inner()).clone();
        self.mailer.digest(&settings, &host).await
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
        self.events.record(crate::eventlog::Evaluation {
            time_us: e.time_us,
            limit: Some(e.def.name.clone()),
            key: Some(e.key.to_string()),
            count: Some(e.count),
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
        let limit = notice["limit"].as_str().unwrap_or("");
        if notice["event"] == "floodgate.restricted" {
            self.contained(&Contained {
                what: "restricted".into(),
                limit: limit.into(),
                key: notice["key"].as_str().unwrap_or("").into(),
                time_us: crate::store::now_micros(),
            });
        }
    }

    fn contained(&self, c: &Contained) {
        if self.events.enabled() {
            self.events.record_line(events::contained_line(c));
        }
        let mut recent = self.recent.lock().unwrap_or_else(|e| e.into_inner());
        if recent.len() >= RECENT_CONTAINED {
            recent.pop_front();
        }
        recent.push_back(c.clone());
    }

    fn recent_contained(&self, n: usize) -> Vec<Contained> {
        let recent = self.recent.lock().unwrap_or_else(|e| e.into_inner());
        recent.iter().rev().take(n).cloned().collect()
    }

    fn queued(&self, queue_id: &str, queued: &crate::outcomes::index::Queued, time_us: i64) {
        if self.events.enabled() {
            self.events
                .record_line(crate::outcomes::journal::queued_line(
                    queue_id, queued, time_us,
                ));
        }
    }

    fn record_message(&self, t: &crate::policy::alert::MessageRecord<'_>) {
        if self.events.enabled() {
            self.events.record_line(transactions::line(t));
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
}

impl Observers {
    /// A new generation is about to be in force (call this before its limits are
    /// installed in the policy): its limits adopt the per-key baselines computed so far,
    /// the event log, the alerts and the host name take its settings.
    pub fn reload(&self, settings: ObserverSettings<'_>) {
        self.baselines
            .reload(settings.policy, settings.report.events.clone());
        self.events.apply(settings.report);
        if let Some(a) = settings.alerts {
            if let Err(e) = deliver::webhook_tls(a) {
                tracing::warn!(error = %e, "[alerts] webhook TLS configuration failed");
            }
        }
        self.alerter.set_settings(settings.alerts.cloned());
        *self.host.write().unwrap_or_else(|e| e.into_inner()) = settings.host.to_string();
    }
}
