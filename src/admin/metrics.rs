//! The metrics registry and its Prometheus text exposition (format 0.0.4), written by hand.
//!
//! Every instrumentation point is one call on [`Metrics`], reached through
//! [`crate::proxy::Shared`] (sessions), the server's accept context (admission), the policy
//! (verdicts) and [`super::MeteredStore`] (store decisions). Counters are sharded relaxed
//! atomics ([`super::counter`]); nothing on the session path takes a lock.
//!
//! Verdicts by limit name use a small sharded map (`DashMap`, limit name → one counter per
//! countermeasure). It is touched only when a limit is over, which is rare next to the
//! commands that pass; a per-generation table indexed by limit position would save the
//! hash of the name but would have to be rebuilt and re-linked on every reload. Counts of a
//! limit survive reloads (Prometheus counters must not go backwards) and the map is bounded
//! by the limit names the configs have used.
//!
//! Labels carry only configured names (listeners, limits) and fixed words: never a user
//! name, an address or a key.

use std::fmt::Write as _;
use std::sync::{Arc, OnceLock, RwLock};

use dashmap::DashMap;

use super::counter::{Counter, Gauge, Histogram, LATENCY_BUCKETS};
use crate::proxy::identity::PROBLEM_KINDS;
use crate::proxy::UpstreamError;
use crate::server::Refusal;
use crate::store::open::Opened;
use crate::store::StoreError;

/// The countermeasures, in the order of [`LimitCounters`].
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

/// The events of the restricted set, in the order of the registry's counters.
pub const RESTRICTION_EVENTS: [&str; 6] = [
    "restricted",
    "released",
    "refused",
    "expired",
    "user_notified",
    "user_notice_failed",
];

/// The counter of `label` among `counters`, kept in the order of `labels`.
fn labelled<'a>(labels: &[&str], counters: &'a [Counter], label: &str) -> Option<&'a Counter> {
    labels
        .iter()
        .position(|l| *l == label)
        .and_then(|i| counters.get(i))
}

/// The kinds of upstream failure, in the order of the registry's counters.
const UPSTREAM_KINDS: [&str; 5] = ["connect", "timeout", "lost", "protocol", "tls"];

/// Which end of a TLS handshake.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Side {
    /// floodgate as the server, towards a client (STARTTLS or implicit TLS).
    Client,
    /// floodgate as the client, towards upstream.
    Upstream,
}

/// Counters of one listener.
#[derive(Debug, Default)]
pub struct ListenerMetrics {
    /// Sessions admitted on it.
    pub sessions: Counter,
}

/// Verdict counters of one limit, one per countermeasure ([`ACTIONS`] order).
#[derive(Debug, Default)]
pub struct LimitCounters([Counter; 10]);

/// The hold spool's gauges and counters.
#[derive(Debug, Default)]
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
    /// Messages the spool could not take (full or unwritable): deferred with a 4xx.
    pub refused: Counter,
}

/// The graded answers: messages rerouted to the second smart host, messages paced.
#[derive(Debug, Default)]
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

/// Every counter floodgate exports.
#[derive(Debug, Default)]
pub struct Metrics {
    listeners: RwLock<Vec<(Arc<str>, Arc<ListenerMetrics>)>>,
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
    verdicts: DashMap<Box<str>, LimitCounters>,
    /// Upstream sessions set up.
    pub upstream_connects: Counter,
    upstream_errors: [Counter; 5],
    /// Store decisions asked.
    pub store_decisions: Counter,
    /// Store decisions that failed because the store was unavailable.
    pub store_unavailable: Counter,
    /// Store decisions refused as invalid.
    pub store_invalid: Counter,
    /// Store decision latency.
    pub store_latency: Histogram,
    tls_ok: [Counter; 2],
    tls_failed: [Counter; 2],
    /// AUTH exchanges upstream accepted (235).
    pub auth_ok: Counter,
    /// AUTH exchanges upstream refused.
    pub auth_failed: Counter,
    /// Connections refused by `max_connections`.
    pub refused_total_cap: Counter,
    /// Connections refused by `max_connections_per_ip`.
    pub refused_per_ip_cap: Counter,
    identity_refused: [Counter; 5],
    /// The hold spool: messages and octets held now, and what happened to held messages.
    pub hold: HoldMetrics,
    /// Reroute and pace.
    pub graded: GradedMetrics,
    restriction_events: [Counter; 6],
    store: OnceLock<Opened>,
    workers: OnceLock<Arc<crate::server::WorkerLoads>>,
    log_dropped: OnceLock<crate::logs::DroppedLines>,
    outcomes: OnceLock<Arc<crate::outcomes::index::Index>>,
}

/// Keeps a session counted as open; dropping it closes it.
#[derive(Debug)]
pub struct OpenSession(Arc<Metrics>);

impl Drop for OpenSession {
    fn drop(&mut self) {
        self.0.sessions_open.dec();
    }
}

impl Metrics {
    /// An empty registry.
    pub fn new() -> Metrics {
        Metrics::default()
    }

    /// The counters of listener `name` (registered on first use; listeners are fixed for
    /// the life of the process).
    pub fn listener(&self, name: &str) -> Arc<ListenerMetrics> {
        let mut ls = self.listeners.write().unwrap_or_else(|e| e.into_inner());
        if let Some((_, m)) = ls.iter().find(|(n, _)| &**n == name) {
            return m.clone();
        }
        let m = Arc::new(ListenerMetrics::default());
        ls.push((name.into(), m.clone()));
        m
    }

    /// A session was admitted on `listener`; it counts as open until the guard drops.
    pub fn session_opened(self: &Arc<Self>, listener: &ListenerMetrics) -> OpenSession {
        listener.sessions.inc();
        self.sessions_open.inc();
        OpenSession(self.clone())
    }

    /// A connection refused by a cap.
    pub fn connection_refused(&self, why: &Refusal) {
        match why {
            Refusal::Total => self.refused_total_cap.inc(),
            Refusal::PerIp => self.refused_per_ip_cap.inc(),
        }
    }

    /// A message upstream accepted, with its recipients and size.
    pub fn message_relayed(&self, recipients: usize, bytes: u64) {
        self.messages.inc();
        self.recipients.add(recipients as u64);
        self.bytes.add(bytes);
    }

    /// A limit that was over, and its countermeasure (`warn`, `defer`, …).
    pub fn verdict(&self, limit: &str, action: &str) {
        let Some(i) = ACTIONS.iter().position(|a| *a == action) else {
            return;
        };
        if let Some(c) = self.verdicts.get(limit) {
            c.0[i].inc();
            return;
        }
        self.verdicts.entry(limit.into()).or_default().0[i].inc();
    }

    /// A restriction event: `restricted`, `released` (by an admin), `expired` (released by
    /// time), `refused` (a MAIL FROM of a restricted key), `user_notified` or
    /// `user_notice_failed` (the mail to the user, `notify_user`).
    pub fn restriction(&self, event: &str) {
        if let Some(c) = labelled(&RESTRICTION_EVENTS, &self.restriction_events, event) {
            c.inc();
        }
    }

    /// How many restriction events of `event` there were.
    pub fn restrictions_of(&self, event: &str) -> u64 {
        labelled(&RESTRICTION_EVENTS, &self.restriction_events, event).map_or(0, Counter::get)
    }

    /// How many times `limit` was over with `action`.
    pub fn verdicts_of(&self, limit: &str, action: &str) -> u64 {
        let i = ACTIONS.iter().position(|a| *a == action);
        match (self.verdicts.get(limit), i) {
            (Some(c), Some(i)) => c.0[i].get(),
            _ => 0,
        }
    }

    /// The outcome of setting up an upstream session (`None`: it worked); `tls` says
    /// whether the set-up included a TLS handshake with upstream.
    pub fn upstream_connected(&self, error: Option<&UpstreamError>, tls: bool) {
        match error {
            None => {
                self.upstream_connects.inc();
                if tls {
                    self.tls_handshake(Side::Upstream, true);
                }
            }
            Some(e) => {
                if tls && matches!(e, UpstreamError::Tls(_)) {
                    self.tls_handshake(Side::Upstream, false);
                }
                self.upstream_failed(e);
            }
        }
    }

    /// An upstream failure.
    pub fn upstream_failed(&self, e: &UpstreamError) {
        let i = match e {
            UpstreamError::Connect { .. } => 0,
            UpstreamError::Timeout(_) => 1,
            UpstreamError::Lost(_) => 2,
            UpstreamError::Protocol(_) => 3,
            UpstreamError::Tls(_) => 4,
            UpstreamError::Identity(p) => {
                self.identity_refused(p.kind());
                return;
            }
        };
        self.upstream_errors[i].inc();
    }

    /// Upstream did not take a client's identity (`kind`: one of
    /// [`crate::proxy::identity::PROBLEM_KINDS`]).
    pub fn identity_refused(&self, kind: &str) {
        if let Some(c) = labelled(&PROBLEM_KINDS, &self.identity_refused, kind) {
            c.inc();
        }
    }

    /// Identity refusals of one kind.
    pub fn identity_refused_of(&self, kind: &str) -> u64 {
        labelled(&PROBLEM_KINDS, &self.identity_refused, kind).map_or(0, Counter::get)
    }

    /// Upstream failures of one kind (`connect`, `timeout`, `lost`, `protocol`, `tls`).
    pub fn upstream_errors_of(&self, kind: &str) -> u64 {
        labelled(&UPSTREAM_KINDS, &self.upstream_errors, kind).map_or(0, Counter::get)
    }

    /// A TLS handshake on `side` that worked or failed.
    pub fn tls_handshake(&self, side: Side, ok: bool) {
        let i = side as usize;
        if ok {
            self.tls_ok[i].inc()
        } else {
            self.tls_failed[i].inc()
        }
    }

    /// An AUTH exchange that upstream judged.
    pub fn auth(&self, ok: bool) {
        if ok {
            self.auth_ok.inc()
        } else {
            self.auth_failed.inc()
        }
    }

    /// A store decision that took `elapsed` and ended with `error`.
    pub fn store_decision(&self, elapsed: std::time::Duration, error: Option<&StoreError>) {
        self.store_decisions.inc();
        self.store_latency.observe(elapsed);
        match error {
            Some(StoreError::Unavailable(_)) => self.store_unavailable.inc(),
            Some(StoreError::Invalid(_)) => self.store_invalid.inc(),
            None => {}
        }
    }

    /// Makes the store's own figures (memory keys, Redis failover) part of the exposition.
    pub fn attach_store(&self, store: &Opened) {
        let _ = self.store.set(store.clone());
    }

    /// Makes the count of log lines dropped by a full log queue part of the exposition.
    pub fn attach_log(&self, dropped: crate::logs::DroppedLines) {
        let _ = self.log_dropped.set(dropped);
    }

    /// Log lines dropped because the log queue was full (0 when no queue is attached).
    pub fn log_lines_dropped(&self) -> u64 {
        self.log_dropped
            .get()
            .map_or(0, crate::logs::DroppedLines::get)
    }

    /// Makes the outcome counters (smart host log lines, reported outcomes) part of the
    /// exposition.
    pub fn attach_outcomes(&self, index: Arc<crate::outcomes::index::Index>) {
        let _ = self.outcomes.set(index);
    }

    /// Makes the workers' session counts part of the exposition.
    pub fn attach_workers(&self, loads: Arc<crate::server::WorkerLoads>) {
        let _ = self.workers.set(loads);
    }

    /// The Prometheus text exposition (format 0.0.4).
    pub fn render(&self) -> String {
        let mut w = Writer(String::with_capacity(8192));
        w.head(
            "floodgate_sessions_total",
            "counter",
            "Sessions admitted, by listener.",
        );
        for (name, m) in self
            .listeners
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
        {
            w.sample(
                "floodgate_sessions_total",
                &[("listener", name)],
                m.sessions.get(),
            );
        }
        w.one(
            "floodgate_sessions_open",
            "gauge",
            "Sessions open now.",
            self.sessions_open.get(),
        );
        if let Some(loads) = self.workers.get() {
            w.head(
                "floodgate_worker_sessions",
                "gauge",
                "Sessions open now, by worker thread.",
            );
            for (i, n) in loads.sessions().into_iter().enumerate() {
                w.sample(
                    "floodgate_worker_sessions",
                    &[("worker", &i.to_string())],
                    n as u64,
                );
            }
            w.one(
                "floodgate_worker_handoffs_total",
                "counter",
                "Connections accepted by one worker and served by a less loaded one.",
                loads.handoffs(),
            );
        }
        w.one(
            "floodgate_commands_total",
            "counter",
            "Command lines received from clients.",
            self.commands.get(),
        );
        w.one(
            "floodgate_messages_relayed_total",
            "counter",
            "Messages upstream accepted.",
            self.messages.get(),
        );
        w.one(
            "floodgate_recipients_relayed_total",
            "counter",
            "Recipients of the messages upstream accepted.",
            self.recipients.get(),
        );
        w.one(
            "floodgate_bytes_relayed_total",
            "counter",
            "Bytes of the messages upstream accepted.",
            self.bytes.get(),
        );
        w.one(
            "floodgate_refused_total",
            "counter",
            "Commands and messages floodgate refused itself (limits, size, line endings).",
            self.refused.get(),
        );
        w.head(
            "floodgate_policy_verdicts_total",
            "counter",
            "Limits found over, by limit name and countermeasure.",
        );
        let mut limits: Vec<(String, Vec<u64>)> = self
            .verdicts
            .iter()
            .map(|e| {
                (
                    e.key().to_string(),
                    e.value().0.iter().map(Counter::get).collect(),
                )
            })
            .collect();
        limits.sort();
        for (name, counts) in &limits {
            for (action, n) in ACTIONS.iter().zip(counts) {
                if *n > 0 {
                    w.sample(
                        "floodgate_policy_verdicts_total",
                        &[("limit", name), ("action", action)],
                        *n,
                    );
                }
            }
        }
        w.head(
            "floodgate_restrictions_total",
            "counter",
            "Restricted-set events: keys restricted, released (by an admin) or expired, MAIL FROMs refused because restricted, notices mailed to the user or failed.",
        );
        for (event, c) in RESTRICTION_EVENTS.iter().zip(&self.restriction_events) {
            w.sample("floodgate_restrictions_total", &[("event", event)], c.get());
        }
        w.one(
            "floodgate_upstream_connects_total",
            "counter",
            "Upstream sessions set up.",
            self.upstream_connects.get(),
        );
        w.head(
            "floodgate_upstream_errors_total",
            "counter",
            "Upstream failures, by kind.",
        );
        for (k, c) in UPSTREAM_KINDS.iter().zip(&self.upstream_errors) {
            w.sample("floodgate_upstream_errors_total", &[("kind", k)], c.get());
        }
        w.head(
            "floodgate_upstream_identity_refused_total",
            "counter",
            "Sessions whose client identity upstream did not take (XCLIENT not offered or refused, PROXY header not expected), by reason.",
        );
        for (k, c) in PROBLEM_KINDS.iter().zip(&self.identity_refused) {
            w.sample(
                "floodgate_upstream_identity_refused_total",
                &[("reason", k)],
                c.get(),
            );
        }
        w.one(
            "floodgate_store_decisions_total",
            "counter",
            "Rate-limit store decisions.",
            self.store_decisions.get(),
        );
        w.head(
            "floodgate_store_errors_total",
            "counter",
            "Rate-limit store decisions that failed, by kind.",
        );
        w.sample(
            "floodgate_store_errors_total",
            &[("kind", "unavailable")],
            self.store_unavailable.get(),
        );
        w.sample(
            "floodgate_store_errors_total",
            &[("kind", "invalid")],
            self.store_invalid.get(),
        );
        self.render_latency(&mut w);
        self.render_store(&mut w);
        self.render_hold(&mut w);
        self.render_graded(&mut w);
        w.head(
            "floodgate_tls_handshakes_total",
            "counter",
            "TLS handshakes, by side and result.",
        );
        for (i, side) in ["client", "upstream"].iter().enumerate() {
            w.sample(
                "floodgate_tls_handshakes_total",
                &[("side", side), ("result", "ok")],
                self.tls_ok[i].get(),
            );
            w.sample(
                "floodgate_tls_handshakes_total",
                &[("side", side), ("result", "failed")],
                self.tls_failed[i].get(),
            );
        }
        w.head(
            "floodgate_auth_total",
            "counter",
            "AUTH exchanges judged by upstream, by result.",
        );
        w.sample(
            "floodgate_auth_total",
            &[("result", "success")],
            self.auth_ok.get(),
        );
        w.sample(
            "floodgate_auth_total",
            &[("result", "failure")],
            self.auth_failed.get(),
        );
        w.head(
            "floodgate_connections_refused_total",
            "counter",
            "Connections refused by the connection caps, by cap.",
        );
        w.sample(
            "floodgate_connections_refused_total",
            &[("cap", "max_connections")],
            self.refused_total_cap.get(),
        );
        w.sample(
            "floodgate_connections_refused_total",
            &[("cap", "max_connections_per_ip")],
            self.refused_per_ip_cap.get(),
        );
        w.one(
            "floodgate_log_lines_dropped_total",
            "counter",
            "Log lines dropped because the log queue was full (the writer could not keep up).",
            self.log_lines_dropped(),
        );
        if let Some(ix) = self.outcomes.get() {
            w.head(
                "floodgate_outcomes_total",
                "counter",
                "Smart host log lines and reported outcomes, by what became of them: lines, other_lines (not delivery results), unknown_lines (of no known shape, skipped), unknown_queue_ids, duplicates, charged, uncharged.",
            );
            for (what, v) in ix.stats().snapshot() {
                w.sample("floodgate_outcomes_total", &[("what", what)], v);
            }
            w.one(
                "floodgate_outcomes_queued",
                "gauge",
                "Queued messages remembered for their outcomes.",
                ix.len(),
            );
        }
        w.0
    }

    fn render_hold(&self, w: &mut Writer) {
        let h = &self.hold;
        w.one(
            "floodgate_held_messages",
            "gauge",
            "Messages in the hold spool now.",
            h.messages.get(),
        );
        w.one(
            "floodgate_held_bytes",
            "gauge",
            "Octets of the hold spool's files now.",
            h.bytes.get(),
        );
        w.head(
            "floodgate_held_total",
            "counter",
            "Held messages by what happened: held, released, deleted, expired, refused (spool full or unwritable).",
        );
        for (what, c) in [
            ("held", &h.held),
            ("released", &h.released),
            ("deleted", &h.deleted),
            ("expired", &h.expired),
            ("refused", &h.refused),
        ] {
            w.sample("floodgate_held_total", &[("event", what)], c.get());
        }
    }

    fn render_graded(&self, w: &mut Writer) {
        let g = &self.graded;
        w.head(
            "floodgate_rerouted_total",
            "counter",
            "Messages of reroute limits by outcome at the second smart host: relayed, refused (its answer went to the client), failed (unreachable: 4xx to the client).",
        );
        for (what, c) in [
            ("relayed", &g.rerouted),
            ("refused", &g.reroute_refused),
            ("failed", &g.reroute_failed),
        ] {
            w.sample("floodgate_rerouted_total", &[("outcome", what)], c.get());
        }
        w.head(
            "floodgate_paced_total",
            "counter",
            "Paced messages by event: paced (held for an automatic release), released, retry (a release failed and will be tried again).",
        );
        for (what, c) in [
            ("paced", &g.paced),
            ("released", &g.paced_released),
            ("retry", &g.paced_retries),
        ] {
            w.sample("floodgate_paced_total", &[("event", what)], c.get());
        }
        w.one(
            "floodgate_paced_waiting",
            "gauge",
            "Paced messages waiting for their release now.",
            g.paced_waiting.get(),
        );
    }

    fn render_latency(&self, w: &mut Writer) {
        let name = "floodgate_store_decision_seconds";
        w.head(name, "histogram", "Rate-limit store decision latency.");
        let (cum, count, sum) = self.store_latency.snapshot();
        for (b, n) in LATENCY_BUCKETS.iter().zip(&cum) {
            let le = format!("{b}");
            w.sample(&format!("{name}_bucket"), &[("le", &le)], *n);
        }
        w.sample(&format!("{name}_bucket"), &[("le", "+Inf")], count);
        let _ = writeln!(w.0, "{name}_sum {sum}");
        let _ = writeln!(w.0, "{name}_count {count}");
    }

    fn render_store(&self, w: &mut Writer) {
        match self.store.get() {
            Some(Opened::Memory(m)) => {
                let s = m.stats();
                w.head(
                    "floodgate_store_keys",
                    "gauge",
                    "Keys in the memory store, by record kind.",
                );
                for (kind, n) in [
                    ("ewma", s.ewma_keys),
                    ("unique", s.unique_keys),
                    ("gcra", s.gcra_keys),
                    ("bucket", s.bucket_keys),
                ] {
                    w.sample("floodgate_store_keys", &[("kind", kind)], n as u64);
                }
                w.one(
                    "floodgate_store_evictions_total",
                    "counter",
                    "Keys evicted from the memory store because of the key cap.",
                    s.evictions,
                );
            }
            Some(Opened::Redis(f)) => {
                let s = f.stats();
                w.one(
                    "floodgate_redis_down",
                    "gauge",
                    "1 while Redis is considered down and the failure mode applies.",
                    u64::from(s.down),
                );
                w.head(
                    "floodgate_redis_decisions_total",
                    "counter",
                    "Decisions by who answered them.",
                );
                w.sample(
                    "floodgate_redis_decisions_total",
                    &[("answered_by", "redis")],
                    s.redis_decisions,
                );
                w.sample(
                    "floodgate_redis_decisions_total",
                    &[("answered_by", "fallback")],
                    s.fallback_decisions,
                );
                w.one(
                    "floodgate_redis_closed_failures_total",
                    "counter",
                    "Decisions refused because a closed limit could not be checked.",
                    s.closed_failures,
                );
                w.one(
                    "floodgate_redis_errors_total",
                    "counter",
                    "Redis errors and timeouts.",
                    s.redis_errors,
                );
                w.head(
                    "floodgate_redis_switches_total",
                    "counter",
                    "Switches between Redis and the failure mode.",
                );
                w.sample(
                    "floodgate_redis_switches_total",
                    &[("to", "fallback")],
                    s.switches_to_fallback,
                );
                w.sample(
                    "floodgate_redis_switches_total",
                    &[("to", "redis")],
                    s.switches_to_redis,
                );
            }
            None => {}
        }
    }
}

/// Builds the exposition text.
struct Writer(String);

impl Writer {
    fn head(&mut self, name: &str, kind: &str, help: &str) {
        let _ = writeln!(self.0, "# HELP {name} {help}");
        let _ = writeln!(self.0, "# TYPE {name} {kind}");
    }

    fn one(&mut self, name: &str, kind: &str, help: &str, v: impl std::fmt::Display) {
        self.head(name, kind, help);
        let _ = writeln!(self.0, "{name} {v}");
    }

    fn sample(&mut self, name: &str, labels: &[(&str, &str)], v: u64) {
        self.0.push_str(name);
        if !labels.is_empty() {
            self.0.push('{');
            for (i, (k, val)) in labels.iter().enumerate() {
                if i > 0 {
                    self.0.push(',');
                }
                self.0.push_str(k);
                self.0.push_str("=\"");
                escape_label(&mut self.0, val);
                self.0.push('"');
            }
            self.0.push('}');
        }
        let _ = writeln!(self.0, " {v}");
    }
}

/// Escapes a label value as the text format requires (backslash, quote, newline).
fn escape_label(out: &mut String, v: &str) {
    for c in v.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The value of the sample `series` (name with labels, as rendered).
    fn value(text: &str, series: &str) -> Option<String> {
        text.lines()
            .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
            .map(str::to_string)
    }

    #[test]
    fn counts_restriction_events() {
        let m = Metrics::new();
        m.restriction("restricted");
        m.restriction("restricted");
        m.restriction("released");
        m.restriction("expired");
        m.restriction("user_notice_failed");
        m.restriction("nonsense");
        m.verdict("per-user", "restrict");
        let t = m.render();
        assert!(
            t.contains("floodgate_restrictions_total{event=\"restricted\"} 2"),
            "{t}"
        );
        assert!(
            t.contains("floodgate_restrictions_total{event=\"released\"} 1"),
            "{t}"
        );
        assert!(
            t.contains("floodgate_restrictions_total{event=\"refused\"} 0"),
            "{t}"
        );
        for line in [
            "floodgate_restrictions_total{event=\"expired\"} 1",
            "floodgate_restrictions_total{event=\"user_notified\"} 0",
            "floodgate_restrictions_total{event=\"user_notice_failed\"} 1",
        ] {
            assert!(t.contains(line), "{line}: {t}");
        }
        assert_eq!(m.restrictions_of("restricted"), 2);
        assert_eq!(m.verdicts_of("per-user", "restrict"), 1);
    }

    #[test]
    fn log_lines_dropped_reads_the_attached_queue() {
        use std::io::Write;
        let m = Metrics::new();
        assert_eq!(
            value(&m.render(), "floodgate_log_lines_dropped_total").as_deref(),
            Some("0")
        );
        // A queue of one line in front of a writer that is stuck in its first write: the
        // next line waits in the queue, every later one is dropped.
        struct Stalled {
            entered: std::sync::mpsc::Sender<()>,
            gate: std::sync::mpsc::Receiver<()>,
        }
        impl Write for Stalled {
            fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
                let _ = self.entered.send(());
                let _ = self.gate.recv();
                Ok(b.len())
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let (entered, stuck) = std::sync::mpsc::channel();
        let (release, gate) = std::sync::mpsc::channel();
        let mut q = crate::logs::spawn(Stalled { entered, gate }, 1);
        m.attach_log(q.dropped.clone());
        q.writer.write_all(b"first\n").unwrap();
        stuck
            .recv_timeout(std::time::Duration::from_secs(10))
            .expect("the writer thread takes the first line");
        for _ in 0..10 {
            q.writer.write_all(b"line\n").unwrap();
        }
        assert_eq!(m.log_lines_dropped(), 9);
        assert_eq!(
            value(&m.render(), "floodgate_log_lines_dropped_total").as_deref(),
            Some("9")
        );
        drop(release);
    }

    #[test]
    fn renders_every_family_once_with_type_lines() {
        let m = Arc::new(Metrics::new());
        let l = m.listener("submission");
        let guard = m.session_opened(&l);
        m.commands.add(7);
        m.message_relayed(3, 1200);
        m.verdict("per-user", "defer");
        m.verdict("per-user", "defer");
        m.verdict("per-ip", "warn");
        m.verdict("per-ip", "nonsense");
        m.tls_handshake(Side::Client, true);
        m.tls_handshake(Side::Upstream, false);
        m.auth(false);
        m.connection_refused(&Refusal::PerIp);
        m.store_decision(std::time::Duration::from_micros(30), None);
        m.store_decision(
            std::time::Duration::from_millis(30),
            Some(&StoreError::Unavailable("x".into())),
        );
        let t = m.render();
        assert_eq!(
            value(&t, "floodgate_sessions_total{listener=\"submission\"}").as_deref(),
            Some("1")
        );
        assert_eq!(value(&t, "floodgate_sessions_open").as_deref(), Some("1"));
        drop(guard);
        assert_eq!(
            value(&m.render(), "floodgate_sessions_open").as_deref(),
            Some("0")
        );
        assert_eq!(value(&t, "floodgate_commands_total").as_deref(), Some("7"));
        assert_eq!(
            value(&t, "floodgate_recipients_relayed_total").as_deref(),
            Some("3")
        );
        assert_eq!(
            value(
                &t,
                "floodgate_policy_verdicts_total{limit=\"per-user\",action=\"defer\"}"
            )
            .as_deref(),
            Some("2")
        );
        assert_eq!(
            value(
                &t,
                "floodgate_policy_verdicts_total{limit=\"per-ip\",action=\"warn\"}"
            )
            .as_deref(),
            Some("1")
        );
        assert_eq!(
            value(
                &t,
                "floodgate_tls_handshakes_total{side=\"upstream\",result=\"failed\"}"
            )
            .as_deref(),
            Some("1")
        );
        assert_eq!(
            value(
                &t,
                "floodgate_connections_refused_total{cap=\"max_connections_per_ip\"}"
            )
            .as_deref(),
            Some("1")
        );
        assert_eq!(
            value(
                &t,
                "floodgate_store_decision_seconds_bucket{le=\"0.00005\"}"
            )
            .as_deref(),
            Some("1")
        );
        assert_eq!(
            value(&t, "floodgate_store_decision_seconds_count").as_deref(),
            Some("2")
        );
        assert_eq!(
            value(&t, "floodgate_store_errors_total{kind=\"unavailable\"}").as_deref(),
            Some("1")
        );
        // Every family has exactly one TYPE line, and every sample belongs to one.
        let mut types = std::collections::HashSet::new();
        for l in t.lines().filter(|l| l.starts_with("# TYPE ")) {
            let name = l.split(' ').nth(2).unwrap();
            assert!(types.insert(name.to_string()), "duplicate TYPE {name}");
        }
        for l in t.lines().filter(|l| !l.starts_with('#')) {
            let name = l.split(['{', ' ']).next().unwrap();
            let base = name
                .strip_suffix("_bucket")
                .or_else(|| name.strip_suffix("_sum"))
                .or_else(|| name.strip_suffix("_count"))
                .filter(|b| types.contains(*b))
                .unwrap_or(name);
            assert!(types.contains(base), "sample without TYPE: {l}");
        }
    }

    #[test]
    fn label_values_are_escaped() {
        let m = Metrics::new();
        m.verdict("a\"b\\c\nd", "deny");
        let t = m.render();
        assert!(t.contains("limit=\"a\\\"b\\\\c\\nd\",action=\"deny\"} 1"));
    }

    #[test]
    fn listeners_register_once() {
        let m = Metrics::new();
        let a = m.listener("x");
        let b = m.listener("x");
        assert!(Arc::ptr_eq(&a, &b));
    }
}
