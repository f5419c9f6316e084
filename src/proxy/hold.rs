//! Holding a message: instead of relaying it, floodgate writes it with its envelope and
//! client to the hold spool, answers 250 once it is on disk, and resets upstream's
//! transaction.

use std::sync::Arc;

use tracing::{info, warn};

use crate::hold::pace::{clock_ms, Paced};
use crate::hold::spool::{new_id, now_secs};
use crate::hold::{HeldEnvelope, HeldMessage, Spool, SpoolError};
use crate::policy::{HoldOrder, Stage, TakenAnswer};
use crate::smtp::command::Command;
use crate::smtp::dialogue;
use crate::smtp::reply::Reply;
use crate::smtp::xclient::{ClientName, TEMPUNAVAIL};

use super::data::Spooled;
use super::envelope::argument;
use super::session::{Flow, Session};
use super::upstream::UpstreamError;

/// How strong a way of taking a message is: a stronger order replaces a milder one.
fn strength(a: &TakenAnswer) -> u8 {
    match a {
        TakenAnswer::Pace(_) => 0,
        TakenAnswer::Reroute => 1,
        TakenAnswer::Hold => 2,
    }
}

/// Sets the hold spool's gauges from what it holds.
pub fn refresh_gauges(spool: &Spool, metrics: &crate::metrics::Metrics) {
    if let Ok((n, bytes)) = spool.usage() {
        metrics.hold.messages.set(n as i64);
        metrics.hold.bytes.set(bytes as i64);
    }
}

impl Session {
    /// Holds the current transaction's message instead of relaying it: the client still
    /// sends it and gets 250 once it is on disk; upstream's transaction is reset. The entry
    /// point for anything that decides a transaction is to be held (a limit with
    /// `action = "hold"`, a restricted key). Without a hold spool it does nothing: the
    /// configuration refuses hold actions without `[hold]`.
    ///
    /// A reroute needs the second smart host, a pace the hold spool. A later, stronger
    /// order of the same transaction replaces a milder one (pace, then reroute, then hold).
    pub fn hold_transaction(&mut self, order: HoldOrder) {
        let usable = match order.answer {
            TakenAnswer::Reroute => self.shared.high_risk.is_some(),
            TakenAnswer::Hold | TakenAnswer::Pace(_) => self.shared.hold.is_some(),
        };
        if usable
            && self
                .transaction
                .order
                .as_ref()
                .is_none_or(|h| strength(&h.answer) < strength(&order.answer))
        {
            self.transaction.order = Some(order);
        }
    }

    /// Whether a transaction's message may be taken (a hold spool or a second smart host):
    /// only then is its MAIL argument kept (the recipients always are, for the event log).
    fn may_take(&self) -> bool {
        self.shared.hold.is_some() || self.shared.high_risk.is_some()
    }

    /// Notes an accepted MAIL for a message that may be held.
    pub(super) fn note_mail(&mut self, cmd: &Command) {
        if self.may_take() {
            self.transaction.envelope.mail = Some(argument(cmd));
        }
        self.transaction.envelope.rcpts.clear();
    }

    /// Notes an accepted RCPT: for a message that may be held, and for the message's line
    /// in the event log.
    pub(super) fn note_rcpt(&mut self, cmd: &Command) {
        self.transaction.envelope.rcpts.push(argument(cmd));
    }

    /// The message octets as floodgate relays them: its Received line and the policy's
    /// header lines on top, CRLF lines, not dot-stuffed.
    fn relayed_octets(&mut self, msg: &Spooled, received: Option<&[u8]>) -> Vec<u8> {
        let headers = self.policy.session.message_headers();
        let mut out = Vec::new();
        out.extend_from_slice(received.unwrap_or_default());
        for h in &headers {
            out.extend(h.bytes().filter(|b| *b != b'\r' && *b != b'\n'));
            out.extend_from_slice(b"\r\n");
        }
        match msg {
            Spooled::Chunked(body) => out.extend_from_slice(body),
            Spooled::Data(wire) => {
                // Every line starting with '.' was stuffed: drop that one dot.
                for line in wire.message().split_inclusive(|&b| b == b'\n') {
                    out.extend_from_slice(line.strip_prefix(b".").unwrap_or(line));
                }
            }
        }
        out
    }

    /// The transaction's message as floodgate takes it (held, paced or rerouted): its
    /// envelope with the client it came from, and the octets as they would be relayed.
    pub(super) async fn taken_message(
        &mut self,
        msg: &Spooled,
        order: &HoldOrder,
        received: Option<&[u8]>,
    ) -> (HeldEnvelope, Vec<u8>) {
        let body = self.relayed_octets(msg, received);
        let names = self.client.names.get().await;
        let envelope = HeldEnvelope {
            id: new_id(),
            key: order.key.clone(),
            limit: order.limit.clone(),
            paced: match &order.answer {
                TakenAnswer::Pace(rate) => Some(rate.to_string()),
                _ => None,
            },
            time: now_secs(),
            client: self.client.peer,
            local: self.client.local,
            name: kept_name(&names.name),
            reverse_name: kept_name(&names.reverse),
            user: self.policy.facts.user.clone(),
            helo: self.policy.facts.helo.clone(),
            proto: if self.dialogue.ehlo() {
                "ESMTP"
            } else {
                "SMTP"
            }
            .into(),
            tls: self.client.conn.tls_info().map(|t| t.to_string()),
            mail: self.transaction.envelope.mail.clone().unwrap_or_else(|| {
                format!("<{}>", self.policy.facts.sender.as_deref().unwrap_or(""))
            }),
            rcpts: self.transaction.envelope.rcpts.clone(),
        };
        (envelope, body)
    }

    /// Ends upstream's transaction: it saw MAIL and RCPT, and must never deliver a message
    /// floodgate holds.
    pub(super) async fn reset_upstream(&mut self) -> Result<(), UpstreamError> {
        let r = self.up()?.command(b"RSET\r\n").await?;
        if !r.is_completion() {
            warn!(code = r.code, "upstream refused RSET");
        }
        self.up()?.recycle(r);
        Ok(())
    }

    /// Writes the message to the hold spool and answers the client: 250 once it is on
    /// disk, 451 4.3.1 when the spool is full (its limits, or its disk or quota), 451 4.3.0
    /// when it cannot be written otherwise (the client keeps the message and retries).
    /// Upstream's transaction is reset either way.
    pub(super) async fn hold_message(
        &mut self,
        msg: &Spooled,
        order: HoldOrder,
        received: Option<&[u8]>,
        size: u64,
    ) -> Result<Flow, UpstreamError> {
        let Some(spool) = self.shared.hold.clone() else {
            return Err(UpstreamError::Protocol("no hold spool".into()));
        };
        let spool_settings = &spool.settings().clone();
        let (envelope, body) = self.taken_message(msg, &order, received).await;
        let held = HeldMessage::new(envelope, body);
        let paced = match &order.answer {
            TakenAnswer::Pace(rate) => Some(Paced {
                id: held.envelope.id.clone(),
                limit: order.limit.clone(),
                key: order.key.clone(),
                rate: *rate,
                weight: rate.weight(held.envelope.rcpts.len(), held.body.len()),
            }),
            _ => None,
        };
        let id = held.envelope.id.clone();
        let recipients = held.envelope.rcpts.len();
        let metrics = self.shared.metrics.clone();
        match store_blocking(spool, held, metrics).await {
            Ok(()) => {
                let stored = Stored {
                    id: &id,
                    recipients,
                    size,
                };
                self.note_stored(&order, paced, &stored);
                self.answer_stored(&stored).await
            }
            Err(e) => self.spool_refused(&e, &order, spool_settings).await,
        }
    }

    /// Counts and logs a message on disk, held or paced (a paced one joins the pace book).
    fn note_stored(&self, order: &HoldOrder, paced: Option<Paced>, stored: &Stored<'_>) {
        let metrics = &self.shared.metrics;
        metrics.hold.held.inc();
        let facts = &self.policy.facts;
        let (recipients, size, id) = (stored.recipients, stored.size, stored.id);
        if let Some(p) = paced {
            info!(
                client = %self.client.ip_text,
                user = facts.user.as_deref().unwrap_or(""),
                sender = facts.sender.as_deref().unwrap_or(""),
                recipients,
                size,
                id = %id,
                limit = %order.limit,
                key = %order.key,
                rate = %p.rate,
                "message paced"
            );
            metrics.graded.paced.inc();
            self.shared.paced.add(p, clock_ms());
            metrics
                .graded
                .paced_waiting
                .set(self.shared.paced.len() as i64);
        } else {
            info!(
                client = %self.client.ip_text,
                user = facts.user.as_deref().unwrap_or(""),
                sender = facts.sender.as_deref().unwrap_or(""),
                recipients,
                size,
                id = %id,
                limit = %order.limit,
                key = %order.key,
                "message held"
            );
        }
    }

    /// Answers a message that is on disk with 250, as the policy hears it, then resets
    /// upstream's transaction.
    async fn answer_stored(&mut self, stored: &Stored<'_>) -> Result<Flow, UpstreamError> {
        self.tally.messages += 1;
        self.tally.recipients += stored.recipients as u64;
        let reply = Reply::new(250, format!("2.0.0 Ok: queued as {}", stored.id));
        // The policy counts a held message as one the client sent.
        let heard = self
            .dialogue
            .on_upstream(dialogue::Exchange::Message, &reply);
        let answer = self.after_upstream(Stage::Message, reply).await;
        self.heard(heard);
        let flow = match answer {
            Some(a) => {
                self.client.conn.queue(&a);
                Flow::Next
            }
            None => Flow::Close,
        };
        // After the client's answer is queued: a failing upstream ends the session
        // with a 421 after it, never instead of it (the message is safe on disk).
        self.reset_upstream().await?;
        Ok(flow)
    }

    /// The spool did not take the message: counted, logged, the postmaster told (at most
    /// once a minute), the transaction dropped, the client answered 451, and upstream's
    /// transaction reset.
    async fn spool_refused(
        &mut self,
        e: &SpoolError,
        order: &HoldOrder,
        spool_settings: &crate::hold::HoldSettings,
    ) -> Result<Flow, UpstreamError> {
        // Full (its limits, or its disk or quota) or unwritable: one count, and the
        // postmaster told (at most once a minute).
        self.shared.metrics.hold.refused.inc();
        warn!(client = %self.client.ip_text, error = %e, full = e.is_full(), limit = %order.limit,
            key = %order.key, "message not held: deferred");
        if let Some(notice) = FULL_NOTICES.due(crate::store::now_micros()).then(|| {
            spool_notice(
                e,
                order,
                spool_settings,
                &self.shared.config().server.hostname,
            )
        }) {
            self.shared.policy.notice(&notice);
        }
        self.reset_txn();
        let host = &self.shared.config().server.hostname;
        let reply = if e.is_full() {
            Reply::new(
                451,
                format!("4.3.1 {host} Insufficient system storage, try again later"),
            )
        } else {
            Reply::new(
                451,
                format!("4.3.0 {host} Local error in processing, try again later"),
            )
        };
        self.tally.refused += 1;
        self.client.conn.queue(&reply);
        self.reset_upstream().await?;
        Ok(Flow::Next)
    }
}

/// A message the hold spool took: its id, and its counts for the log and the tally.
struct Stored<'a> {
    /// Its id in the spool.
    id: &'a str,
    /// Its recipients.
    recipients: usize,
    /// Its size as the client sent it.
    size: u64,
}

/// How often the spool's refusals are told to the alerts, at most (per node).
const FULL_NOTICE_EVERY_US: i64 = 60_000_000;

/// When the last spool notice of this node went out.
static FULL_NOTICES: NoticeClock = NoticeClock(std::sync::atomic::AtomicI64::new(i64::MIN));

/// A per-node clock that lets one notice through per [`FULL_NOTICE_EVERY_US`].
struct NoticeClock(std::sync::atomic::AtomicI64);

impl NoticeClock {
    /// Whether a notice is due at `now_us` (and, if so, marks it sent).
    fn due(&self, now_us: i64) -> bool {
        use std::sync::atomic::Ordering;
        let last = self.0.load(Ordering::Relaxed);
        now_us.saturating_sub(last) >= FULL_NOTICE_EVERY_US
            && self
                .0
                .compare_exchange(last, now_us, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
    }
}

/// The alert of a message the spool refused: `{"event": "floodgate.spool_full"` (or
/// `floodgate.spool_failed` when it could not be written for another reason), `"host"`,
/// `"dir"`, `"max_messages"`, `"max_bytes"`, `"error"`, and the `"limit"` and `"key"` of the
/// message deferred (451) instead of held}.
pub fn spool_notice(
    e: &SpoolError,
    order: &HoldOrder,
    settings: &crate::hold::HoldSettings,
    host: &str,
) -> serde_json::Value {
    serde_json::json!({
        "event": if e.is_full() { "floodgate.spool_full" } else { "floodgate.spool_failed" },
        "host": host,
        "dir": settings.dir.display().to_string(),
        "max_messages": settings.max_messages,
        "max_bytes": settings.max_bytes,
        "error": e.to_string(),
        "limit": order.limit,
        "key": order.key,
    })
}

/// A client name as the held file keeps it: the name, `[TEMPUNAVAIL]`, or nothing.
pub(super) fn kept_name(n: &ClientName) -> Option<String> {
    match n {
        ClientName::Known(n) => Some(n.clone()),
        ClientName::TempUnavailable => Some(TEMPUNAVAIL.into()),
        ClientName::Unavailable => None,
    }
}

/// Stores `held` in the spool off the event loop, and updates the spool's gauges.
async fn store_blocking(
    spool: Arc<Spool>,
    held: HeldMessage,
    metrics: Arc<crate::metrics::Metrics>,
) -> Result<(), SpoolError> {
    tokio::task::spawn_blocking(move || {
        let stored = spool.store(&held);
        refresh_gauges(&spool, &metrics);
        stored
    })
    .await
    .unwrap_or_else(|e| {
        Err(SpoolError::Io {
            path: "hold spool".into(),
            source: std::io::Error::other(e.to_string()),
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_spool_notice_a_minute() {
        let clock = NoticeClock(std::sync::atomic::AtomicI64::new(i64::MIN));
        assert!(clock.due(1_000_000));
        assert!(!clock.due(1_000_001));
        assert!(!clock.due(60_999_999));
        assert!(clock.due(61_000_000));
    }

    #[test]
    fn the_spool_notice_names_the_spool_and_the_deferred_message() {
        let settings = crate::hold::HoldSettings {
            dir: "/var/lib/floodgate/hold".into(),
            max_bytes: 1 << 30,
            max_messages: 2,
            ttl: std::time::Duration::from_secs(3600),
            on_expiry: Default::default(),
        };
        let order = HoldOrder {
            limit: "per-user".into(),
            key: "alice".into(),
            answer: TakenAnswer::Hold,
        };
        let full = SpoolError::Full("2 messages (max_messages 2)".into());
        let v = spool_notice(&full, &order, &settings, "mx");
        assert_eq!(v["event"], "floodgate.spool_full");
        assert_eq!(v["dir"], "/var/lib/floodgate/hold");
        assert_eq!(v["max_messages"], 2);
        assert_eq!(
            (v["limit"].as_str(), v["key"].as_str()),
            (Some("per-user"), Some("alice"))
        );
    }
}
