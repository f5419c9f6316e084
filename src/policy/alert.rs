//! Alerts: one event when a key first crosses a limit in a period, and the hook through
//! which the engine reports what it sees ([`Observer`]: every evaluation, for the event log
//! of `floodgate report`; every limit that is over, for alerts).
//!
//! The decision here is cheap and synchronous (a map lookup under a mutex, only for limits
//! that are over); delivery (log line, webhook, command) runs elsewhere, off the session
//! path, fed through a bounded queue ([`Alerter::new`] returns its receiving end).
//!
//! # The alert, a stable JSON shape
//!
//! ```json
//! {"event":"floodgate.alert","limit":"hermes-per-user","key":"alice","rate":101.2,
//!  "limit_value":"100","period":"1h","action":"warn","stage":"mail",
//!  "first_at":"2025-01-31T12:00:00.123456Z","client_ip":"192.0.2.7","user":"alice",
//!  "host":"ppsw.example.ac.uk","suppressed":0}
//! ```
//!
//! * `key`: the key text of the limit (the expanded key, or the client IP when the limit has
//!   none), as in the event log; `rate`: the rate or level that crossed (`$sender_rate`);
//!   `limit_value` and `period`: `$sender_rate_limit` and `$sender_rate_period` as text;
//! * `first_at`: when the key crossed (RFC 3339, UTC); `client_ip` and `user` (`null` when
//!   not authenticated) of the session that crossed it;
//! * `suppressed`: alerts not delivered since the previous delivered one (`max_per_minute`).
//!
//! `max_per_minute` bounds every kind of notice, each kind on its own budget, on every
//! channel (the log line, the webhook, the command and the mail each get what is
//! delivered): limit crossings (alerts), restrictions and releases, and campaigns. A flood
//! of one kind (400 logins crossing a limit, a campaign of 400 accounts) is cut at
//! `max_per_minute` a minute without silencing the others: the restriction that follows a
//! burst of alerts is still told. When notices were suppressed and no later one of their
//! kind reported them, a summary follows at the end of the minute: `{"event":"floodgate.alert.suppressed","suppressed":<n>,
//! "from":"<RFC 3339>","to":"<RFC 3339>","host":".."}`. Fields may be added; none will be
//! renamed or removed.

use std::collections::HashMap;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use toml::Spanned;

use super::action::Reading;
use super::model::{LimitDef, RateDef};
use super::{Facts, Stage};
use crate::config::url::Url;
use crate::config::{parse_duration, Config, ConfigError};
use crate::time::rfc3339;

/// What the engine tells an observer about one evaluation of one limit (one store
/// request, not a cached answer).
#[derive(Clone, Copy, Debug)]
pub struct Evaluated<'a> {
    /// The limit.
    pub def: &'a LimitDef,
    /// The key text (the expanded key, or the client IP when the limit has none).
    pub key: &'a str,
    /// The amount offered.
    pub count: f64,
    /// The value tested against the key's unique set, for unique limits.
    pub unique: Option<&'a str>,
    /// The key's own limit, when the limit's `limit_list` gives it one.
    pub own_limit: Option<f64>,
    /// When (the policy clock, microseconds since the Unix epoch).
    pub time_us: i64,
}

/// One message at the end of its data, with what floodgate did with it: the event log's
/// recent transactions of a key (the console's incident page).
#[derive(Clone, Copy, Debug)]
pub struct MessageRecord<'a> {
    /// When (microseconds since the Unix epoch).
    pub time_us: i64,
    /// The key a restriction of the sender would have ([`incident_key`]).
    pub key: &'a str,
    /// The client's address.
    pub client: Option<std::net::IpAddr>,
    /// The client's reverse name, when the session knew it.
    pub name: Option<&'a str>,
    /// The authenticated user, if any (the login folded into its account).
    pub user: Option<&'a str>,
    /// The login as the client typed it, when the fold changed it.
    pub login: Option<&'a str>,
    /// The envelope sender ("" for the null sender).
    pub sender: &'a str,
    /// The accepted recipients.
    pub recipients: &'a [String],
    /// The message's Subject, when the header was read.
    pub subject: Option<&'a str>,
    /// What happened: `relayed 250`, `refused 552`, `held`, `paced`, `rerouted`…
    pub verdict: &'a str,
}

/// The key restrictions and their evidence are kept under: the authenticated user, else
/// the client address ("" with neither).
pub fn incident_key(facts: &Facts) -> String {
    match (&facts.user, facts.client_ip) {
        (Some(u), _) => u.clone(),
        (None, Some(ip)) => ip.to_string(),
        (None, None) => String::new(),
    }
}

/// A limit that is over for one event.
#[derive(Clone, Copy, Debug)]
pub struct Crossed<'a> {
    /// The limit.
    pub def: &'a LimitDef,
    /// The key text.
    pub key: &'a str,
    /// The rate, limit and period.
    pub outcome: &'a Reading,
    /// Where.
    pub stage: Stage,
    /// The session's facts (client IP, user).
    pub facts: &'a Facts,
    /// When (microseconds since the Unix epoch).
    pub time_us: i64,
}

/// A key contained by a countermeasure: its message taken to hold (`held`), an event
/// deferred by a `defer` limit (`defer`), or the key restricted (`restricted`, told through
/// [`Observer::restriction`]).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Contained {
    /// `restricted`, `held` or `defer`.
    pub what: String,
    /// The limit that did it (`admin` for a restriction by hand).
    pub limit: String,
    /// The key.
    pub key: String,
    /// When (microseconds since the Unix epoch).
    pub time_us: i64,
}

/// Sees what the engine decides. Every method runs on the session path: it must be cheap
/// and never block (queue work elsewhere).
pub trait Observer: Send + Sync {
    /// One evaluation of a limit (warn-mode limits included).
    fn evaluated(&self, e: &Evaluated<'_>);
    /// A limit is over for one event.
    fn crossed(&self, c: &Crossed<'_>);
    /// A key was restricted or released: the notice (`floodgate.restricted` or
    /// `floodgate.released`, see [`restriction_notice`]).
    fn restriction(&self, notice: &serde_json::Value) {
        let _ = notice;
    }
    /// A key was contained (a message held, an event deferred).
    fn contained(&self, c: &Contained) {
        let _ = c;
    }
    /// The latest containments seen (restrictions included), newest first, at most `n`.
    fn recent_contained(&self, n: usize) -> Vec<Contained> {
        let _ = n;
        Vec::new()
    }
    /// Upstream queued a message whose bounces and deferrals some limit counts.
    fn queued(&self, queue_id: &str, queued: &crate::outcomes::index::Queued, time_us: i64) {
        let _ = (queue_id, queued, time_us);
    }
    /// A message reached the end of its data and floodgate decided what to do with it.
    fn record_message(&self, t: &MessageRecord<'_>) {
        let _ = t;
    }
    /// An outcome of a queued message was counted.
    fn outcome(
        &self,
        queue_id: &str,
        recipient: &str,
        kind: crate::outcomes::logline::Kind,
        time_us: i64,
    ) {
        let _ = (queue_id, recipient, kind, time_us);
    }
}

/// One restriction as JSON: `{"key","limit","since","until","rate","limit_value","by",
/// "reason","evidence"}` (`until`: `null` for until released), as `floodgate restricted`
/// lists it and as every restriction notice carries it.
pub fn restriction_json(r: &crate::store::Restriction) -> serde_json::Value {
    serde_json::json!({
        "key": r.key,
        "limit": r.limit,
        "since": rfc3339(r.since_us),
        "until": r.until_us.map(rfc3339),
        "rate": r.rate,
        "limit_value": r.limit_text,
        "by": r.by,
        "reason": r.reason,
        "evidence": r.evidence,
    })
}

/// The notice of a restriction event, a stable JSON shape: [`restriction_json`] with
/// `"event"` (`floodgate.restricted` | `floodgate.released`), `"host"`, and `"by"` and
/// `"reason"` of the event (a release's differ from the restriction's); the evidence is
/// `{"client_ips","top_recipient_domains","subjects","messages","recipients","refusals",
/// "held","held_by_node","since"}` (see [`super::evidence`] and [`super::held`]).
pub fn restriction_notice(
    event: &str,
    r: &crate::store::Restriction,
    by: &str,
    reason: &str,
    host: &str,
) -> serde_json::Value {
    let mut v = restriction_json(r);
    v["event"] = event.into();
    v["by"] = by.into();
    v["reason"] = reason.into();
    v["host"] = host.into();
    v
}

/// `[alerts]`, validated.
#[derive(Clone, Debug, PartialEq)]
pub struct AlertSettings {
    /// Fixed re-alert period; `None`: each limit's own period.
    pub period: Option<Duration>,
    /// Delivered alerts per minute at most.
    pub max_per_minute: u32,
    /// Remembered keys at most.
    pub max_keys: usize,
    /// The webhook.
    pub webhook: Option<Url>,
    /// CA bundle for an https webhook.
    pub ca_file: Option<PathBuf>,
    /// Webhook time limit.
    pub webhook_timeout: Duration,
    /// The command and its arguments.
    pub command: Option<Vec<String>>,
    /// Command time limit.
    pub command_timeout: Duration,
    /// Alert mail (`mail_to`) and the daily digest.
    pub mail: Option<mail::MailSettings>,
}

impl Default for AlertSettings {
    fn default() -> Self {
        AlertSettings {
            period: None,
            max_per_minute: 60,
            max_keys: 100_000,
            webhook: None,
            ca_file: None,
            webhook_timeout: Duration::from_secs(5),
            command: None,
            command_timeout: Duration::from_secs(10),
            mail: None,
        }
    }
}

/// `config`'s `[alerts]`, checked; `None` when absent or off. Relative paths are taken
/// from the config file's directory.
pub fn compile(config: &Config) -> Result<Option<AlertSettings>, ConfigError> {
    let Some(a) = &config.alerts else {
        return Ok(None);
    };
    let at = |span: Range<usize>, message: String| config.error_at(span, message);
    if a.enabled == Some(false) {
        return Ok(None);
    }
    let mut s = AlertSettings::default();
    let dur = |v: &Spanned<String>, what: &str| {
        let d = parse_duration(v.get_ref())
            .map_err(|e| at(v.span(), format!("[alerts] {what}: {e}")))?;
        if d.is_zero() {
            return Err(at(v.span(), format!("[alerts] {what} must be positive")));
        }
        Ok(d)
    };
    if let Some(p) = &a.period {
        s.period = Some(dur(p, "period")?);
    }
    if let Some(t) = &a.webhook_timeout {
        s.webhook_timeout = dur(t, "webhook_timeout")?;
    }
    if let Some(t) = &a.command_timeout {
        s.command_timeout = dur(t, "command_timeout")?;
    }
    if let Some(n) = &a.max_per_minute {
        s.max_per_minute = u32::try_from(*n.get_ref())
            .ok()
            .filter(|&n| n > 0)
            .ok_or_else(|| {
                at(
                    n.span(),
                    "[alerts] max_per_minute must be a positive number".into(),
                )
            })?;
    }
    if let Some(n) = &a.max_keys {
        s.max_keys = usize::try_from(*n.get_ref())
            .ok()
            .filter(|&n| n > 0)
            .ok_or_else(|| {
                at(
                    n.span(),
                    "[alerts] max_keys must be a positive number".into(),
                )
            })?;
    }
    if let Some(w) = &a.webhook {
        let url =
            Url::parse(w.get_ref()).map_err(|e| at(w.span(), format!("[alerts] webhook: {e}")))?;
        s.webhook = Some(url);
    }
    if let Some(c) = &a.ca_file {
        let p = config.resolve(c.get_ref());
        if !p.is_file() {
            return Err(at(
                c.span(),
                format!("[alerts] ca_file {} is not a readable file", p.display()),
            ));
        }
        s.ca_file = Some(p);
    }
    if let Some(c) = &a.command {
        let argv = c.get_ref();
        let Some(prog) = argv.first() else {
            return Err(at(
                c.span(),
                "[alerts] command needs at least the program".into(),
            ));
        };
        if !Path::new(prog).is_absolute() {
            return Err(at(
                c.span(),
                format!(
                    "[alerts] command: the program {prog:?} must be an absolute path (no shell, no PATH search)"
                ),
            ));
        }
        s.command = Some(argv.clone());
    }
    s.mail = mail::compile(config, a)?;
    Ok(Some(s))
}

/// One alert, in its stable JSON shape (see the module documentation).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Alert {
    /// Always `floodgate.alert`.
    pub event: String,
    /// The limit's name.
    pub limit: String,
    /// The key text.
    pub key: String,
    /// The rate or level that crossed.
    pub rate: f64,
    /// The limit in force, as text.
    pub limit_value: String,
    /// The limit's period, as text.
    pub period: String,
    /// The countermeasure.
    pub action: String,
    /// The SMTP stage.
    pub stage: String,
    /// When the key crossed (RFC 3339, UTC).
    pub first_at: String,
    /// The client of the session that crossed.
    pub client_ip: Option<String>,
    /// The authenticated user of that session.
    pub user: Option<String>,
    /// floodgate's hostname.
    pub host: String,
    /// Alerts suppressed since the previous delivered one.
    pub suppressed: u64,
}

/// The summary of alerts that `max_per_minute` suppressed.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Suppressed {
    /// Always `floodgate.alert.suppressed`.
    pub event: String,
    /// How many.
    pub suppressed: u64,
    /// Start of the minute they fell in.
    pub from: String,
    /// End of that minute.
    pub to: String,
    /// floodgate's hostname.
    pub host: String,
}

/// What the delivery side receives.
#[derive(Clone, Debug, PartialEq)]
pub enum Notice {
    /// An alert.
    Alert(Alert),
    /// A summary of suppressed alerts.
    Suppressed(Suppressed),
    /// A restriction, a release or a campaign (within `max_per_minute` like alerts; a
    /// `"suppressed"` field counts the notices suppressed before it).
    Restriction(serde_json::Value),
}

impl Notice {
    /// The JSON text delivered (one line).
    pub fn to_json(&self) -> String {
        match self {
            Notice::Alert(a) => serde_json::to_string(a),
            Notice::Suppressed(s) => serde_json::to_string(s),
            Notice::Restriction(v) => serde_json::to_string(v),
        }
        .unwrap_or_default()
    }
}

/// The re-alert period of a limit: its own period (Exim's `p`, a bucket's rate period);
/// one hour for concurrency limits, which have none.
pub fn limit_period(def: &LimitDef) -> Duration {
    let secs = match &def.rate {
        RateDef::Exim { spec, .. } => f64::from(spec.period_secs()),
        RateDef::Gcra(g) => g.rate.period_secs(),
        RateDef::Bucket(b) => b.rate.period_secs(),
        RateDef::Concurrency(_) => 3600.0,
        RateDef::Ratio(r) => r.period_secs as f64,
    };
    Duration::from_secs_f64(secs.clamp(1.0, 1e9))
}

const MINUTE_US: i64 = 60_000_000;

/// The kinds of notice, each with its own `max_per_minute` budget.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    /// A limit crossing (`floodgate.alert`).
    Alert = 0,
    /// A restriction or a release.
    Restriction = 1,
    /// A campaign found or updated (`floodgate.campaign`).
    Campaign = 2,
}

impl Kind {
    /// The kind of a restriction notice, by its `event`.
    fn of(notice: &serde_json::Value) -> Kind {
        if notice["event"] == "floodgate.campaign" {
            Kind::Campaign
        } else {
            Kind::Restriction
        }
    }
}

/// One kind's budget: a one-minute window and what it suppressed.
#[derive(Default)]
struct Window {
    /// Start of the current one-minute window (µs), 0 before the first notice.
    start: i64,
    /// Notices delivered in the window.
    delivered: u32,
    /// Suppressed and not yet reported.
    suppressed: u64,
    /// Start of the window of the first unreported suppression.
    suppressed_since: i64,
}

impl Window {
    /// Counts one notice at `now` against the minute's budget: `Some(suppressed before
    /// it)` when it may be delivered, `None` when it is suppressed (and counted).
    fn admit(&mut self, now: i64, max_per_minute: u32) -> Option<u64> {
        // A clock that went back a minute (a sped-up policy clock beside the real one)
        // starts a window too.
        if now >= self.start.saturating_add(MINUTE_US)
            || now < self.start.saturating_sub(MINUTE_US)
            || self.start == 0
        {
            self.start = now;
            self.delivered = 0;
        }
        if self.delivered >= max_per_minute {
            if self.suppressed == 0 {
                self.suppressed_since = self.start;
                tracing::warn!(max_per_minute, "alerts suppressed: max_per_minute reached");
            }
            self.suppressed += 1;
            return None;
        }
        self.delivered += 1;
        Some(std::mem::take(&mut self.suppressed))
    }
}

#[derive(Default)]
struct State {
    /// (limit, key) → when it may alert again (µs).
    seen: HashMap<(Arc<str>, String), i64>,
    /// Each kind's budget, by [`Kind`].
    windows: [Window; 3],
}

impl State {
    fn admit(&mut self, kind: Kind, now: i64, max_per_minute: u32) -> Option<u64> {
        self.windows[kind as usize].admit(now, max_per_minute)
    }
}

/// Decides which crossings become alerts: once per key and period, at most
/// `max_per_minute` a minute, with bounded memory.
pub struct Alerter {
    settings: Mutex<Option<Arc<AlertSettings>>>,
    state: Mutex<State>,
    tx: tokio::sync::mpsc::Sender<Notice>,
    /// Notices lost because the delivery queue was full.
    lost: std::sync::atomic::AtomicU64,
}

/// The delivery queue's length.
pub const QUEUE: usize = 256;

impl Alerter {
    /// An alerter with `settings` (`None`: off), and the receiving end of its queue.
    pub fn new(settings: Option<AlertSettings>) -> (Alerter, tokio::sync::mpsc::Receiver<Notice>) {
        let (tx, rx) = tokio::sync::mpsc::channel(QUEUE);
        (
            Alerter {
                settings: Mutex::new(settings.map(Arc::new)),
                state: Mutex::new(State::default()),
                tx,
                lost: Default::default(),
            },
            rx,
        )
    }

    /// The settings in force (`None`: off).
    pub fn settings(&self) -> Option<Arc<AlertSettings>> {
        self.settings
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Replaces the settings (reload). Keys already alerted stay remembered.
    pub fn set_settings(&self, settings: Option<AlertSettings>) {
        *self.settings.lock().unwrap_or_else(|e| e.into_inner()) = settings.map(Arc::new);
    }

    /// Notices dropped because delivery was too slow.
    pub fn lost(&self) -> u64 {
        self.lost.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Considers one crossing; queues an alert when it is the key's first in its period
    /// and the minute's budget allows. Returns what was queued (for tests).
    pub fn crossed(&self, c: &Crossed<'_>, host: &str) -> Option<Alert> {
        let settings = self.settings()?;
        let now = c.time_us;
        let period = settings.period.unwrap_or_else(|| limit_period(c.def));
        let period_us = i64::try_from(period.as_micros()).unwrap_or(i64::MAX);
        let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let id = (Arc::<str>::from(c.def.name.as_str()), c.key.to_string());
        if st.seen.get(&id).is_some_and(|&until| now < until) {
            return None;
        }
        if !st.seen.contains_key(&id) && st.seen.len() >= settings.max_keys {
            st.seen.retain(|_, until| now < *until);
            if st.seen.len() >= settings.max_keys {
                // Still full of live entries: forget the one that expires first (a key
                // forgotten early may alert again, within max_per_minute).
                if let Some(k) = st
                    .seen
                    .iter()
                    .min_by_key(|(_, &until)| until)
                    .map(|(k, _)| k.clone())
                {
                    st.seen.remove(&k);
                }
            }
        }
        st.seen.insert(id, now.saturating_add(period_us));
        let suppressed = st.admit(Kind::Alert, now, settings.max_per_minute)?;
        drop(st);
        let alert = Alert {
            event: "floodgate.alert".into(),
            limit: c.def.name.clone(),
            key: c.key.to_string(),
            rate: (c.outcome.value * 1000.0).round() / 1000.0,
            limit_value: c.outcome.limit_text.clone(),
            period: c.outcome.period_text.clone(),
            action: c.def.action.as_str().into(),
            stage: c.stage.as_str().into(),
            first_at: rfc3339(now),
            client_ip: c.facts.client_ip.map(|i| i.to_string()),
            user: c.facts.user.clone(),
            host: host.to_string(),
            suppressed,
        };
        self.queue(Notice::Alert(alert.clone()));
        Some(alert)
    }

    /// At the end of a minute with unreported suppressed alerts: queues (and returns) the
    /// summary. Called periodically by the delivery side.
    pub fn tick(&self, now_us: i64, host: &str) -> Option<Suppressed> {
        let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        // Every kind whose window with unreported suppressions has ended, in one summary.
        let mut suppressed = 0;
        let mut from = i64::MAX;
        let mut to = 0;
        for w in &mut st.windows {
            if w.suppressed == 0 || now_us < w.start.saturating_add(MINUTE_US) {
                continue;
            }
            suppressed += std::mem::take(&mut w.suppressed);
            from = from.min(w.suppressed_since);
            to = to.max(w.start.saturating_add(MINUTE_US));
        }
        drop(st);
        if suppressed == 0 {
            return None;
        }
        let s = Suppressed {
            event: "floodgate.alert.suppressed".into(),
            suppressed,
            from: rfc3339(from),
            to: rfc3339(to),
            host: host.to_string(),
        };
        self.queue(Notice::Suppressed(s.clone()));
        Some(s)
    }

    /// Keys remembered now.
    pub fn remembered(&self) -> usize {
        self.state
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .seen
            .len()
    }

    /// Queues a restriction notice (a restriction, a release, a campaign) for delivery
    /// (log line, webhook, command, mail) within its kind's `max_per_minute`; beyond it the
    /// notice is counted in the summary. Answers whether it was queued.
    pub fn restriction(&self, notice: &serde_json::Value) -> bool {
        let Some(settings) = self.settings() else {
            // No [alerts]: the notice is only logged; the log is bounded all the same.
            return self.admit_unconfigured(notice);
        };
        let now = crate::store::now_micros();
        let admitted = self.state.lock().unwrap_or_else(|e| e.into_inner()).admit(
            Kind::of(notice),
            now,
            settings.max_per_minute,
        );
        let Some(suppressed) = admitted else {
            return false;
        };
        let mut v = notice.clone();
        if suppressed > 0 {
            v["suppressed"] = suppressed.into();
        }
        self.queue(Notice::Restriction(v));
        true
    }

    fn admit_unconfigured(&self, notice: &serde_json::Value) -> bool {
        let now = crate::store::now_micros();
        let admitted = self.state.lock().unwrap_or_else(|e| e.into_inner()).admit(
            Kind::of(notice),
            now,
            AlertSettings::default().max_per_minute,
        );
        if admitted.is_some() {
            self.queue(Notice::Restriction(notice.clone()));
        }
        admitted.is_some()
    }

    fn queue(&self, n: Notice) {
        if self.tx.try_send(n).is_err() {
            self.lost.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
    }
}

pub mod mail;

#[cfg(test)]
mod tests;
