//! The metrics registry: every count floodgate exports, and its Prometheus text exposition.
//!
//! A leaf: this module imports nothing else of the crate. The parts that record name what
//! happened with `&'static str` labels their own types give (`Refusal::label`,
//! `StoreError::label`, `IdentityProblem::kind`) or with the small label types defined here
//! ([`Side`], [`UpstreamFailure`]); the label values of every family are listed here
//! ([`ACTIONS`], [`RESTRICTION_EVENTS`], [`UPSTREAM_KINDS`], [`IDENTITY_REASONS`],
//! [`CAPS`], [`STORE_ERRORS`]), and a label outside its list is not counted. Figures another
//! part keeps itself (the workers' loads, the store's keys, the outcome counters, dropped
//! log lines) are read at scrape time by a reader that part registers ([`Metrics::scrape`]).
//!
//! The families are `prometheus_client` families, written in the Prometheus text format
//! 0.0.4 ([`CONTENT_TYPE`]). Every series whose labels are known at start is resolved once,
//! in [`Metrics::new`], into a counter handle kept in a field, so recording is one relaxed
//! atomic add on a thread-sharded counter ([`Sharded`]), without a lock or a hash.
//! Listeners are resolved when the server binds them ([`Metrics::listener`]). Verdicts are
//! counted by limit name, and the names come from the config: a verdict looks its limit up
//! in a small sharded map (`DashMap`) of handles resolved on the limit's first verdict.
//! That map is touched only when a limit is over, which is rare next to the commands that
//! pass; counts of a limit survive reloads (Prometheus counters must not go backwards) and
//! the map is bounded by the limit names the configs have used. A verdict series appears
//! with its first count.
//!
//! Labels carry only configured names (listeners, limits) and fixed words: never a user
//! name, an address or a key.

mod scrape;
mod sharded;

use std::borrow::Cow;
use std::sync::{Mutex, MutexGuard, OnceLock};
use std::time::Duration;

use dashmap::DashMap;
use prometheus_client::encoding::EncodeMetric;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::{Metric, Registry};

pub use scrape::Scrape;
use scrape::{counter_base, Reader, ReaderCollector};
pub use sharded::{Histogram, Sharded, LATENCY_BUCKETS};

/// A counter of the registry: a `prometheus_client` counter on [`Sharded`] storage.
pub type Counter = prometheus_client::metrics::counter::Counter<u64, Sharded>;

/// A gauge of the registry.
pub type Gauge = prometheus_client::metrics::gauge::Gauge;

/// The `Content-Type` of [`Metrics::render`]'s text.
pub const CONTENT_TYPE: &str = prometheus_client::encoding::prometheus_text::CONTENT_TYPE;

/// Label sets of `N` labels: fixed names, fixed or configured values.
type Labels<const N: usize> = [(&'static str, Cow<'static, str>); N];

/// A counter family with `N` labels.
type Counters<const N: usize> = Family<Labels<N>, Counter>;

/// The countermeasures: the `action` label of `floodgate_policy_verdicts_total`.
pub const ACTIONS: [&str; 10] = [
    "warn",
    "header",
    "delay",
    "hold",
    "reroute",
    "pace",
    "defer",
    "deny",
    "disconnect",
    "restrict",
];

/// The events of the restricted set: the `event` label of `floodgate_restrictions_total`.
pub const RESTRICTION_EVENTS: [&str; 6] = [
    "restricted",
    "released",
    "refused",
    "expired",
    "user_notified",
    "user_notice_failed",
];

/// What became of an alert mail: the `result` label of `floodgate_alert_mail_total`.
pub const ALERT_MAIL_RESULTS: [&str; 3] = ["sent", "failed", "dropped"];

/// The kinds of upstream failure: the `kind` label of `floodgate_upstream_errors_total`.
pub const UPSTREAM_KINDS: [&str; 5] = ["connect", "timeout", "lost", "protocol", "tls"];

/// Why upstream did not take a client's identity: the `reason` label of
/// `floodgate_upstream_identity_refused_total`.
pub const IDENTITY_REASONS: [&str; 5] = [
    "xclient_not_offered",
    "xclient_refused",
    "proxy_header_not_expected",
    "proxy_header_expected",
    "bad_greeting",
];

/// The connection caps: the `cap` label of `floodgate_connections_refused_total`.
pub const CAPS: [&str; 2] = ["max_connections", "max_connections_per_ip"];

/// The admin listeners: the `listener` label of `floodgate_admin_connections_refused_total`
/// (the admin socket, the admin TCP address, the metrics address).
pub const ADMIN_LISTENERS: [&str; 3] = ["socket", "admin", "metrics"];

/// Why an admin listener cut a connection: the `reason` label of
/// `floodgate_admin_connections_refused_total`. `evicted`: closed, its request not yet
/// sent, to make room for a new connection at `[admin] max_connections`; `full`: accepted
/// at the bound with nothing that may be cut, answered 503 and closed; `per_address`:
/// accepted while its address had `[admin] max_connections_per_address` connections waiting
/// for their request, answered 429 and closed; `request_timeout`: the request (or the
/// TLS handshake) did not arrive within `request_timeout`; `tls_handshake`: the handshake
/// failed; `busy`: no free handler within `request_timeout` (answered 503);
/// `write_timeout`: the client did not take the answer within `write_timeout`.
pub const ADMIN_REFUSALS: [&str; 7] = [
    "evicted",
    "full",
    "per_address",
    "request_timeout",
    "tls_handshake",
    "busy",
    "write_timeout",
];

/// The kinds of failed store decision: the `kind` label of `floodgate_store_errors_total`.
pub const STORE_ERRORS: [&str; 2] = ["unavailable", "invalid"];

/// Which end of a TLS handshake.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Side {
    /// floodgate as the server, towards a client (STARTTLS or implicit TLS).
    Client,
    /// floodgate as the client, towards upstream.
    Upstream,
}

impl Side {
    /// The `side` label.
    pub fn label(self) -> &'static str {
        match self {
            Side::Client => "client",
            Side::Upstream => "upstream",
        }
    }
}

/// Why an upstream session failed, as the metrics count it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UpstreamFailure {
    /// A failure of one of the [`UPSTREAM_KINDS`] (`floodgate_upstream_errors_total`).
    Error(&'static str),
    /// Upstream did not take the client's identity, for one of the [`IDENTITY_REASONS`]
    /// (`floodgate_upstream_identity_refused_total`).
    Identity(&'static str),
}

/// Counters of one listener.
#[derive(Clone, Debug)]
pub struct ListenerMetrics {
    /// Sessions admitted on it.
    pub sessions: Counter,
}

/// The hold spool's gauges and counters.
#[derive(Debug)]
pub struct HoldMetrics {
    /// Messages held now.
    pub messages: Gauge,
    /// Octets of held files now.
    pub bytes: Gauge,
    /// Messages put on hold.
    pub held: Counter,
    /// Messages released (relayed upstream).
    pub released: Counter,
    /// Messages deleted by an operator.
    pub deleted: Counter,
    /// Messages whose ttl passed (deleted or released by `on_expiry`).
    pub expired: Counter,
    /// Messages the spool could not take (full: its limits, disk or quota; or unwritable):
    /// deferred with a 4xx.
    pub refused: Counter,
    /// Held files that did not read (damaged, or not written by floodgate), moved to the
    /// spool's `corrupt/` directory.
    pub corrupt: Counter,
}

/// The graded answers: messages rerouted to the second smart host, messages paced.
#[derive(Debug)]
pub struct GradedMetrics {
    /// Rerouted messages the second smart host accepted.
    pub rerouted: Counter,
    /// Rerouted messages the second smart host refused (its answer went to the client).
    pub reroute_refused: Counter,
    /// Rerouted messages not delivered because the second smart host could not be reached
    /// or failed (4xx to the client).
    pub reroute_failed: Counter,
    /// Messages paced (held for an automatic release).
    pub paced: Counter,
    /// Paced messages released.
    pub paced_released: Counter,
    /// Paced releases that failed and will be tried again.
    pub paced_retries: Counter,
    /// Paced messages waiting now.
    pub paced_waiting: Gauge,
}

/// The counters of one family over a fixed list of label values, each resolved once.
#[derive(Debug)]
struct Fixed<const N: usize> {
    values: [&'static str; N],
    counters: [Counter; N],
}

impl<const N: usize> Fixed<N> {
    fn new(family: &Counters<1>, label: &'static str, values: [&'static str; N]) -> Self {
        Fixed {
            values,
            counters: values.map(|v| family.get_or_create_owned(&[(label, Cow::Borrowed(v))])),
        }
    }

    /// The counter of label value `value` (`None`: not one of the family's values).
    fn get(&self, value: &str) -> Option<&Counter> {
        let i = self.values.iter().position(|v| *v == value)?;
        self.counters.get(i)
    }

    fn count(&self, value: &str) -> u64 {
        self.get(value).map_or(0, Counter::get)
    }
}

/// The verdict counters of one limit, one per countermeasure ([`ACTIONS`] order), each
/// resolved on its first count.
#[derive(Debug, Default)]
struct LimitCounters([OnceLock<Counter>; ACTIONS.len()]);

/// What a scrape writes: the registered families and the readers' keys.
#[derive(Debug)]
struct Exposition {
    registry: Registry,
    readers: Vec<&'static str>,
}

/// Registers the families of [`Metrics::new`] under their exposed names.
struct Families(Registry);

impl Families {
    fn register(&mut self, name: &'static str, help: &str, metric: impl Metric) {
        let name = match EncodeMetric::metric_type(&metric) {
            MetricType::Counter => counter_base(name),
            _ => name,
        };
        // The registry ends every help text with a full stop of its own.
        self.0
            .register(name, help.strip_suffix('.').unwrap_or(help), metric);
    }

    fn counter(&mut self, name: &'static str, help: &str) -> Counter {
        let c = Counter::default();
        self.register(name, help, c.clone());
        c
    }

    fn gauge(&mut self, name: &'static str, help: &str) -> Gauge {
        let g = Gauge::default();
        self.register(name, help, g.clone());
        g
    }

    fn family<const N: usize>(&mut self, name: &'static str, help: &str) -> Counters<N> {
        let f = Counters::<N>::default();
        self.register(name, help, f.clone());
        f
    }

    fn fixed<const N: usize>(
        &mut self,
        name: &'static str,
        help: &str,
        label: &'static str,
        values: [&'static str; N],
    ) -> Fixed<N> {
        Fixed::new(&self.family(name, help), label, values)
    }
}

/// Every counter floodgate exports.
#[derive(Debug)]
pub struct Metrics {
    exposition: Mutex<Exposition>,
    sessions: Counters<1>,
    /// Sessions open now.
    pub sessions_open: Gauge,
    /// Command lines received.
    pub commands: Counter,
    /// Messages upstream accepted.
    pub messages: Counter,
    /// Recipients of the messages upstream accepted.
    pub recipients: Counter,
    /// Bytes of the messages upstream accepted.
    pub bytes: Counter,
    /// Commands and messages floodgate refused itself (policy, size, bad line endings).
    pub refused: Counter,
    verdicts: Counters<2>,
    limits: DashMap<Box<str>, LimitCounters>,
    restrictions: Fixed<6>,
    alert_mail: Fixed<3>,
    /// Upstream sessions set up.
    pub upstream_connects: Counter,
    upstream_errors: Fixed<5>,
    identity_refused: Fixed<5>,
    /// Store decisions asked.
    pub store_decisions: Counter,
    store_errors: Fixed<2>,
    /// Store decision latency.
    pub store_latency: Histogram,
    /// TLS handshakes by [`Side`], then ok (0) or failed (1).
    tls: [[Counter; 2]; 2],
    /// AUTH exchanges upstream accepted (235).
    pub auth_ok: Counter,
    /// AUTH exchanges upstream refused.
    pub auth_failed: Counter,
    connections_refused: Fixed<2>,
    /// `floodgate_admin_connections_refused_total`, by [`ADMIN_LISTENERS`] then
    /// [`ADMIN_REFUSALS`].
    admin_refused: [[Counter; ADMIN_REFUSALS.len()]; ADMIN_LISTENERS.len()],
    /// The hold spool: messages and octets held now, and what happened to held messages.
    pub hold: HoldMetrics,
    /// Reroute and pace.
    pub graded: GradedMetrics,
    /// Audit lines (`[admin] audit`) that could not be written.
    pub audit_write_errors: Counter,
    /// Messages whose keys took longer than `[message_keys] budget` (they kept the keys
    /// finished in time).
    pub message_keys_budget_exceeded: Counter,
}

/// Keeps a session counted as open; dropping it closes it.
#[derive(Debug)]
pub struct OpenSession(Gauge);

impl Drop for OpenSession {
    fn drop(&mut self) {
        self.0.dec();
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}

/// The families of sessions and of what they relay.
struct Traffic {
    /// Sessions admitted, by listener.
    sessions: Counters<1>,
    /// Sessions open now.
    sessions_open: Gauge,
    /// Command lines received.
    commands: Counter,
    /// Messages relayed.
    messages: Counter,
    /// Recipients relayed.
    recipients: Counter,
    /// Bytes relayed.
    bytes: Counter,
    /// Commands and messages refused by floodgate.
    refused: Counter,
}

/// The families of the policy's verdicts, restrictions and alert mail.
struct Containment {
    /// Limits found over.
    verdicts: Counters<2>,
    /// Restricted-set events.
    restrictions: Fixed<6>,
    /// Alert mail by result.
    alert_mail: Fixed<3>,
}

/// The families of upstream and of the rate-limit store.
struct Backends {
    /// Upstream sessions set up.
    upstream_connects: Counter,
    /// Upstream failures.
    upstream_errors: Fixed<5>,
    /// Client identities upstream did not take.
    identity_refused: Fixed<5>,
    /// Store decisions.
    store_decisions: Counter,
    /// Store decisions that failed.
    store_errors: Fixed<2>,
}

/// The families of TLS handshakes and AUTH exchanges.
struct Handshakes {
    /// TLS handshakes by side and result.
    tls: [[Counter; 2]; 2],
    /// AUTH exchanges upstream accepted.
    auth_ok: Counter,
    /// AUTH exchanges upstream refused.
    auth_failed: Counter,
}

/// The families of connections cut by the caps and by the admin listeners.
struct Cuts {
    /// Connections refused by the caps.
    connections_refused: Fixed<2>,
    /// Admin, console and metrics connections cut.
    admin_refused: [[Counter; ADMIN_REFUSALS.len()]; ADMIN_LISTENERS.len()],
}

/// The latency histogram's family, written after the registry's.
const LATENCY: &str = "floodgate_store_decision_seconds";

impl Metrics {
    /// A registry with every family floodgate records, all at zero.
    pub fn new() -> Metrics {
        let mut f = Families(Registry::default());
        // Registered in this order: the exposition lists families in it.
        let traffic = Self::traffic_families(&mut f);
        let containment = Self::containment_families(&mut f);
        let backends = Self::backend_families(&mut f);
        let hold = Self::hold_families(&mut f);
        let graded = Self::graded_families(&mut f);
        let handshakes = Self::handshake_families(&mut f);
        let cuts = Self::cut_families(&mut f);
        let audit_write_errors = f.counter(
            "floodgate_audit_write_errors_total",
            "Admin actions whose audit line could not be written to [admin] audit.",
        );
        let message_keys_budget_exceeded = f.counter(
            "floodgate_message_keys_budget_exceeded_total",
            "Messages whose message keys took longer than [message_keys] budget (they kept the keys finished in time).",
        );
        Metrics {
            audit_write_errors,
            message_keys_budget_exceeded,
            exposition: Mutex::new(Exposition {
                registry: f.0,
                readers: Vec::new(),
            }),
            sessions: traffic.sessions,
            sessions_open: traffic.sessions_open,
            commands: traffic.commands,
            messages: traffic.messages,
            recipients: traffic.recipients,
            bytes: traffic.bytes,
            refused: traffic.refused,
            verdicts: containment.verdicts,
            limits: DashMap::new(),
            restrictions: containment.restrictions,
            alert_mail: containment.alert_mail,
            upstream_connects: backends.upstream_connects,
            upstream_errors: backends.upstream_errors,
            identity_refused: backends.identity_refused,
            store_decisions: backends.store_decisions,
            store_errors: backends.store_errors,
            store_latency: Histogram::default(),
            tls: handshakes.tls,
            auth_ok: handshakes.auth_ok,
            auth_failed: handshakes.auth_failed,
            connections_refused: cuts.connections_refused,
            admin_refused: cuts.admin_refused,
            hold,
            graded,
        }
    }

    /// Registers the families of sessions and of what they relay.
    fn traffic_families(f: &mut Families) -> Traffic {
        let sessions = f.family(
            "floodgate_sessions_total",
            "Sessions admitted, by listener.",
        );
        let sessions_open = f.gauge("floodgate_sessions_open", "Sessions open now.");
        let commands = f.counter(
            "floodgate_commands_total",
            "Command lines received from clients.",
        );
        let messages = f.counter(
            "floodgate_messages_relayed_total",
            "Messages upstream accepted.",
        );
        let recipients = f.counter(
            "floodgate_recipients_relayed_total",
            "Recipients of the messages upstream accepted.",
        );
        let bytes = f.counter(
            "floodgate_bytes_relayed_total",
            "Bytes of the messages upstream accepted.",
        );
        let refused = f.counter(
            "floodgate_refused_total",
            "Commands and messages floodgate refused itself (limits, size, line endings).",
        );
        Traffic {
            sessions,
            sessions_open,
            commands,
            messages,
            recipients,
            bytes,
            refused,
        }
    }

    /// Registers the families of verdicts, restrictions and alert mail.
    fn containment_families(f: &mut Families) -> Containment {
        let verdicts = f.family(
            "floodgate_policy_verdicts_total",
            "Limits found over, by limit name and countermeasure.",
        );
        let restrictions = f.fixed(
            "floodgate_restrictions_total",
            "Restricted-set events: keys restricted, released (by an admin) or expired, MAIL FROMs refused because restricted, notices mailed to the user or failed.",
            "event",
            RESTRICTION_EVENTS,
        );
        let alert_mail = f.fixed(
            "floodgate_alert_mail_total",
            "Alert mail ([alerts] mail_to and mail_digest) by result: sent (upstream accepted it), failed (upstream refused it or could not be reached), dropped (the mail queue was full).",
            "result",
            ALERT_MAIL_RESULTS,
        );
        Containment {
            verdicts,
            restrictions,
            alert_mail,
        }
    }

    /// Registers the families of upstream and of the rate-limit store.
    fn backend_families(f: &mut Families) -> Backends {
        let upstream_connects = f.counter(
            "floodgate_upstream_connects_total",
            "Upstream sessions set up.",
        );
        let upstream_errors = f.fixed(
            "floodgate_upstream_errors_total",
            "Upstream failures, by kind.",
            "kind",
            UPSTREAM_KINDS,
        );
        let identity_refused = f.fixed(
            "floodgate_upstream_identity_refused_total",
            "Sessions whose client identity upstream did not take (XCLIENT not offered or refused, PROXY header not expected), by reason.",
            "reason",
            IDENTITY_REASONS,
        );
        let store_decisions = f.counter(
            "floodgate_store_decisions_total",
            "Rate-limit store decisions.",
        );
        let store_errors = f.fixed(
            "floodgate_store_errors_total",
            "Rate-limit store decisions that failed, by kind.",
            "kind",
            STORE_ERRORS,
        );
        Backends {
            upstream_connects,
            upstream_errors,
            identity_refused,
            store_decisions,
            store_errors,
        }
    }

    /// Registers the families of TLS handshakes and AUTH exchanges.
    fn handshake_families(f: &mut Families) -> Handshakes {
        let tls_family: Counters<2> = f.family(
            "floodgate_tls_handshakes_total",
            "TLS handshakes, by side and result.",
        );
        let tls = [Side::Client, Side::Upstream].map(|side| {
            ["ok", "failed"].map(|result| {
                tls_family.get_or_create_owned(&[
                    ("side", Cow::Borrowed(side.label())),
                    ("result", Cow::Borrowed(result)),
                ])
            })
        });
        let auth = f.fixed(
            "floodgate_auth_total",
            "AUTH exchanges judged by upstream, by result.",
            "result",
            ["success", "failure"],
        );
        let [auth_ok, auth_failed] = auth.counters;
        Handshakes {
            tls,
            auth_ok,
            auth_failed,
        }
    }

    /// Registers the families of connections cut by the caps and the admin listeners.
    fn cut_families(f: &mut Families) -> Cuts {
        let connections_refused = f.fixed(
            "floodgate_connections_refused_total",
            "Connections refused by the connection caps, by cap.",
            "cap",
            CAPS,
        );
        let admin_family: Counters<2> = f.family(
            "floodgate_admin_connections_refused_total",
            "Admin, console and metrics connections cut by their listener, by listener and reason.",
        );
        let admin_refused = ADMIN_LISTENERS.map(|listener| {
            ADMIN_REFUSALS.map(|reason| {
                admin_family.get_or_create_owned(&[
                    ("listener", Cow::Borrowed(listener)),
                    ("reason", Cow::Borrowed(reason)),
                ])
            })
        });
        Cuts {
            connections_refused,
            admin_refused,
        }
    }

    fn hold_families(f: &mut Families) -> HoldMetrics {
        let messages = f.gauge("floodgate_held_messages", "Messages in the hold spool now.");
        let bytes = f.gauge(
            "floodgate_held_bytes",
            "Octets of the hold spool's files now.",
        );
        let events = f.fixed(
            "floodgate_held_total",
            "Held messages by what happened: held, released, deleted, expired, refused (spool full, its disk full, or unwritable).",
            "event",
            ["held", "released", "deleted", "expired", "refused"],
        );
        let [held, released, deleted, expired, refused] = events.counters;
        let corrupt = f.counter(
            "floodgate_held_corrupt_total",
            "Held files that did not read (damaged, or not written by floodgate), moved to the spool's corrupt/ directory.",
        );
        HoldMetrics {
            messages,
            bytes,
            held,
            released,
            deleted,
            expired,
            refused,
            corrupt,
        }
    }

    fn graded_families(f: &mut Families) -> GradedMetrics {
        let rerouted = f.fixed(
            "floodgate_rerouted_total",
            "Messages of reroute limits by outcome at the second smart host: relayed, refused (its answer went to the client), failed (unreachable: 4xx to the client).",
            "outcome",
            ["relayed", "refused", "failed"],
        );
        let [rerouted, reroute_refused, reroute_failed] = rerouted.counters;
        let paced = f.fixed(
            "floodgate_paced_total",
            "Paced messages by event: paced (held for an automatic release), released, retry (a release failed and will be tried again).",
            "event",
            ["paced", "released", "retry"],
        );
        let [paced, paced_released, paced_retries] = paced.counters;
        let paced_waiting = f.gauge(
            "floodgate_paced_waiting",
            "Paced messages waiting for their release now.",
        );
        GradedMetrics {
            rerouted,
            reroute_refused,
            reroute_failed,
            paced,
            paced_released,
            paced_retries,
            paced_waiting,
        }
    }

    fn exposition(&self) -> MutexGuard<'_, Exposition> {
        self.exposition.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The counters of listener `name`; the server resolves them once per listener.
    pub fn listener(&self, name: &str) -> ListenerMetrics {
        ListenerMetrics {
            sessions: self
                .sessions
                .get_or_create_owned(&[("listener", Cow::Owned(name.to_owned()))]),
        }
    }

    /// A session was admitted on `listener`; it counts as open until the guard drops.
    pub fn session_opened(&self, listener: &ListenerMetrics) -> OpenSession {
        listener.sessions.inc();
        self.sessions_open.inc();
        OpenSession(self.sessions_open.clone())
    }

    /// A connection refused by a cap (one of [`CAPS`]).
    pub fn connection_refused(&self, cap: &str) {
        if let Some(c) = self.connections_refused.get(cap) {
            c.inc();
        }
    }

    /// An admin connection cut by `listener` (one of [`ADMIN_LISTENERS`]) for `reason` (one
    /// of [`ADMIN_REFUSALS`]); other values are not counted.
    pub fn admin_connection_refused(&self, listener: &str, reason: &str) {
        if let Some(c) = self.admin_counter(listener, reason) {
            c.inc();
        }
    }

    fn admin_counter(&self, listener: &str, reason: &str) -> Option<&Counter> {
        let l = ADMIN_LISTENERS.iter().position(|v| *v == listener)?;
        let r = ADMIN_REFUSALS.iter().position(|v| *v == reason)?;
        Some(&self.admin_refused[l][r])
    }

    /// A message upstream accepted, with its recipients and size.
    pub fn message_relayed(&self, recipients: usize, bytes: u64) {
        self.messages.inc();
        self.recipients.inc_by(recipients as u64);
        self.bytes.inc_by(bytes);
    }

    /// A limit that was over, and its countermeasure (one of [`ACTIONS`]).
    pub fn verdict(&self, limit: &str, action: &str) {
        let Some(i) = ACTIONS.iter().position(|a| *a == action) else {
            return;
        };
        if let Some(c) = self.limits.get(limit).and_then(|l| l.0[i].get().cloned()) {
            c.inc();
            return;
        }
        // The limit's first verdict with this action: resolve its series once.
        let c = self.verdicts.get_or_create_owned(&[
            ("limit", Cow::Owned(limit.to_owned())),
            ("action", Cow::Borrowed(ACTIONS[i])),
        ]);
        c.inc();
        let _ = self.limits.entry(limit.into()).or_default().0[i].set(c);
    }

    /// How many times `limit` was over with `action`.
    pub fn verdicts_of(&self, limit: &str, action: &str) -> u64 {
        let i = ACTIONS.iter().position(|a| *a == action);
        match (self.limits.get(limit), i) {
            (Some(l), Some(i)) => l.0[i].get().map_or(0, Counter::get),
            _ => 0,
        }
    }

    /// A restriction event (one of [`RESTRICTION_EVENTS`]): `restricted`, `released` (by an
    /// admin), `expired` (released by time), `refused` (a MAIL FROM of a restricted key),
    /// `user_notified` or `user_notice_failed` (the mail to the user, `notify_user`).
    pub fn restriction(&self, event: &str) {
        if let Some(c) = self.restrictions.get(event) {
            c.inc();
        }
    }

    /// One alert mail with `result` (one of [`ALERT_MAIL_RESULTS`]).
    pub fn alert_mail(&self, result: &str) {
        if let Some(c) = self.alert_mail.get(result) {
            c.inc();
        }
    }

    /// How many restriction events of `event` there were.
    pub fn restrictions_of(&self, event: &str) -> u64 {
        self.restrictions.count(event)
    }

    /// The outcome of setting up an upstream session (`None`: it worked); `tls` says
    /// whether the set-up included a TLS handshake with upstream.
    pub fn upstream_connected(&self, failure: Option<UpstreamFailure>, tls: bool) {
        match failure {
            None => {
                self.upstream_connects.inc();
                if tls {
                    self.tls_handshake(Side::Upstream, true);
                }
            }
            Some(f) => {
                if tls && f == UpstreamFailure::Error("tls") {
                    self.tls_handshake(Side::Upstream, false);
                }
                self.upstream_failed(f);
            }
        }
    }

    /// An upstream failure.
    pub fn upstream_failed(&self, failure: UpstreamFailure) {
        match failure {
            UpstreamFailure::Error(kind) => {
                if let Some(c) = self.upstream_errors.get(kind) {
                    c.inc();
                }
            }
            UpstreamFailure::Identity(reason) => self.identity_refused(reason),
        }
    }

    /// Upstream did not take a client's identity (`reason`: one of [`IDENTITY_REASONS`]).
    pub fn identity_refused(&self, reason: &str) {
        if let Some(c) = self.identity_refused.get(reason) {
            c.inc();
        }
    }

    /// A TLS handshake on `side` that worked or failed.
    pub fn tls_handshake(&self, side: Side, ok: bool) {
        self.tls[side as usize][usize::from(!ok)].inc();
    }

    /// An AUTH exchange that upstream judged.
    pub fn auth(&self, ok: bool) {
        if ok {
            self.auth_ok.inc();
        } else {
            self.auth_failed.inc();
        }
    }

    /// A store decision that took `elapsed` and failed with `error` (one of
    /// [`STORE_ERRORS`]) or worked (`None`).
    pub fn store_decision(&self, elapsed: Duration, error: Option<&str>) {
        self.store_decisions.inc();
        self.store_latency.observe(elapsed);
        if let Some(c) = error.and_then(|e| self.store_errors.get(e)) {
            c.inc();
        }
    }

    /// Failed store decisions so far of `kind` (one of [`STORE_ERRORS`]; 0 for another).
    pub fn store_errors_of(&self, kind: &str) -> u64 {
        self.store_errors.count(kind)
    }

    /// Adds the families `read` writes to every scrape, read then from figures the caller
    /// keeps (the workers' loads, the store's key counts). The first reader registered under
    /// `key` stays; a later one under the same key is dropped and `false` returned, so a
    /// part set up twice in one process does not write its families twice.
    pub fn scrape(
        &self,
        key: &'static str,
        read: impl Fn(&mut Scrape<'_>) + Send + Sync + 'static,
    ) -> bool {
        let mut e = self.exposition();
        if e.readers.contains(&key) {
            return false;
        }
        e.readers.push(key);
        let reader: Reader = Box::new(read);
        e.registry
            .register_collector(Box::new(ReaderCollector(reader)));
        true
    }

    /// The Prometheus text exposition (format 0.0.4, [`CONTENT_TYPE`]).
    pub fn render(&self) -> String {
        let mut out = String::with_capacity(8192);
        // Writing into a String does not fail, and readers only write.
        let _ = prometheus_client::encoding::prometheus_text::encode(
            &mut out,
            &self.exposition().registry,
        );
        self.store_latency
            .write_text(&mut out, LATENCY, "Rate-limit store decision latency.");
        out
    }
}

/// Counts read back by the tests.
#[cfg(test)]
impl Metrics {
    /// Admin connections cut by `listener` for `reason` so far.
    pub fn admin_connections_refused_of(&self, listener: &str, reason: &str) -> u64 {
        self.admin_counter(listener, reason).map_or(0, Counter::get)
    }

    /// How many alert mails had `result`.
    pub fn alert_mail_of(&self, result: &str) -> u64 {
        self.alert_mail.count(result)
    }

    /// Identity refusals for one reason.
    pub fn identity_refused_of(&self, reason: &str) -> u64 {
        self.identity_refused.count(reason)
    }

    /// Upstream failures of one kind (one of [`UPSTREAM_KINDS`]).
    pub fn upstream_errors_of(&self, kind: &str) -> u64 {
        self.upstream_errors.count(kind)
    }
}

#[cfg(test)]
mod tests;
