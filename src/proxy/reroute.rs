//! Rerouting a message (`action = "reroute"`): floodgate takes the transaction from the
//! client as a hold does (the main smart host never gets the message: its transaction is
//! reset), then, at the end of data, relays it synchronously to the second smart host,
//! `[upstream.high_risk]`, through the release path: a new session with the client's
//! identity (XCLIENT or PROXY v2, as configured for that host), the same envelope and
//! octets, and one trace header. The client gets that host's answer: its 250 once it has
//! the message, its refusal, or a 451 when it cannot be reached. Nothing is written to
//! disk, so nothing is lost: until the 250 the client still has the message.

use tracing::{info, warn};

use crate::hold::spool::now_secs;
use crate::policy::{HoldOrder, Stage};
use crate::smtp::dialogue;
use crate::smtp::reply::Reply;

use super::data::Spooled;
use super::release::{relay_with_trace, reroute_header, ReleaseError};
use super::session::{Flow, Session};
use super::upstream::UpstreamError;

/// The client's answer when the second smart host refused a step: its own reply when it
/// gave one that refuses (4xx or 5xx), else a 451.
fn refusal_answer(answer: Option<&Reply>, hostname: &str) -> Reply {
    match answer {
        Some(r) if (400..600).contains(&r.code) => r.clone(),
        _ => unavailable(hostname),
    }
}

fn unavailable(hostname: &str) -> Reply {
    Reply::new(
        451,
        format!("4.4.1 {hostname} High-risk relay not available, try again later"),
    )
}

impl Session {
    /// Relays the transaction's message to the second smart host and answers the client
    /// with its verdict; upstream's transaction is reset either way.
    pub(super) async fn reroute_message(
        &mut self,
        msg: &Spooled,
        order: HoldOrder,
        received: Option<&[u8]>,
        size: u64,
    ) -> Result<Flow, UpstreamError> {
        let host = self.shared.config().server.hostname.clone();
        let shared = self.shared.clone();
        let Some(settings) = shared.high_risk.as_ref() else {
            return Err(UpstreamError::Protocol("no high-risk smart host".into()));
        };
        let (m, body) = self.taken_message(msg, &order, received).await;
        let recipients = m.rcpts.len();
        let trace = reroute_header(&order.limit, now_secs() as i64);
        let metrics = &self.shared.metrics;
        let outcome = relay_with_trace(settings, &m, &body, &trace).await;
        let answer = match outcome {
            Ok(reply) => {
                metrics.graded.rerouted.inc();
                info!(
                    client = %self.client.ip_text,
                    user = self.policy.facts.user.as_deref().unwrap_or(""),
                    sender = self.policy.facts.sender.as_deref().unwrap_or(""),
                    recipients,
                    size,
                    limit = %order.limit,
                    key = %order.key,
                    high_risk = settings.address(),
                    upstream = reply.lines.last().map(String::as_str).unwrap_or(""),
                    code = reply.code,
                    "message rerouted"
                );
                self.tally.messages += 1;
                self.tally.recipients += recipients as u64;
                self.shared.metrics.message_relayed(recipients, size);
                let heard = self
                    .dialogue
                    .on_upstream(dialogue::Exchange::Message, &reply);
                let answer = self.after_upstream(Stage::Message, reply).await;
                self.heard(heard);
                answer
            }
            Err(e) => {
                let reply = match &e {
                    ReleaseError::Refused { answer, .. } => {
                        metrics.graded.reroute_refused.inc();
                        refusal_answer(answer.as_deref(), &host)
                    }
                    ReleaseError::Upstream(_) => {
                        metrics.graded.reroute_failed.inc();
                        unavailable(&host)
                    }
                };
                warn!(
                    client = %self.client.ip_text,
                    user = self.policy.facts.user.as_deref().unwrap_or(""),
                    limit = %order.limit,
                    key = %order.key,
                    high_risk = settings.address(),
                    error = %e,
                    code = reply.code,
                    "message not rerouted: refused to the client"
                );
                self.tally.refused += 1;
                self.shared.metrics.refused.inc();
                // The transaction is abandoned: its reservations are released.
                self.reset_txn();
                Some(reply)
            }
        };
        let flow = match answer {
            Some(a) => {
                self.client.conn.queue(&a);
                Flow::Next
            }
            None => Flow::Close,
        };
        // The main smart host saw MAIL and RCPT: it must never deliver this message.
        self.reset_upstream().await?;
        Ok(flow)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refusals_keep_the_high_risk_hosts_answer() {
        let r = Reply::new(550, "5.1.1 no such user".to_string());
        assert_eq!(refusal_answer(Some(&r), "fg"), r);
        let t = Reply::new(452, "4.5.3 too many".to_string());
        assert_eq!(refusal_answer(Some(&t), "fg"), t);
        // A greeting that is not 220 but not a refusal either, or no reply at all.
        for odd in [Some(Reply::new(250, "ok".to_string())), None] {
            let a = refusal_answer(odd.as_ref(), "fg");
            assert_eq!(a.code, 451);
            assert!(a.text().contains("4.4.1 fg"), "{}", a.text());
        }
    }
}
