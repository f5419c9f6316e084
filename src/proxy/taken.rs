//! A message floodgate takes instead of relaying it, as the exchange's order says (hold,
//! pace, reroute): told to the event log, carried out (`hold`, `reroute`), and answered in
//! one way for all three: a message taken is heard like one upstream queued, one not taken
//! ends its transaction with the refusal; upstream's transaction is reset either way (it
//! saw MAIL and RCPT and must never deliver the message).

use crate::hold::spool::{new_id, now_secs};
use crate::hold::HeldEnvelope;
use crate::policy::{Stage, TakeOrder, TakenAnswer};
use crate::smtp::dialogue;

use super::envelope::{kept_name, Named};
use super::relay::{self, Spooled};
use super::session::{Flow, Session};
use super::upstream::UpstreamError;
use super::{hold, reroute};

impl Session {
    /// Takes the transaction's message as `order` says instead of relaying it, and answers
    /// the client; `received` is floodgate's Received line, `size` the message's size.
    pub(super) async fn take_message(
        &mut self,
        msg: &Spooled,
        order: TakeOrder,
        received: Option<&[u8]>,
        size: u64,
    ) -> Result<Flow, UpstreamError> {
        self.tell_transaction(match order.answer {
            TakenAnswer::Reroute => "rerouted",
            TakenAnswer::Pace(_) => "paced",
            TakenAnswer::Hold => "held",
        });
        let body = relay::octets(msg, received, &self.exchange.headers());
        let envelope = self.held_envelope(&order).await;
        let recipients = envelope.rcpts.len();
        let facts = self.exchange.facts();
        let who = Named {
            client: &self.client.ip_text,
            user: facts.user.as_deref().unwrap_or(""),
            sender: facts.sender.as_deref().unwrap_or(""),
            size,
        };
        let taken = match order.answer {
            TakenAnswer::Reroute => {
                reroute::reroute(&self.shared, &order, &envelope, &body, &who).await
            }
            TakenAnswer::Hold | TakenAnswer::Pace(_) => {
                hold::store(&self.shared, &order, envelope, body, &who).await
            }
        };
        let flow = match taken {
            Ok(reply) => {
                // The policy counts a message taken as one the client sent.
                self.tally.messages += 1;
                self.tally.recipients += recipients as u64;
                match self
                    .hear(Stage::Message, dialogue::Exchange::Message, reply)
                    .await
                {
                    Some((answer, _)) => {
                        self.client.conn.queue(&answer);
                        Flow::Next
                    }
                    None => Flow::Close,
                }
            }
            Err(reply) => {
                self.tally.refused += 1;
                // The transaction is abandoned: its reservations are released.
                self.reset_txn();
                self.client.conn.queue(&reply);
                Flow::Next
            }
        };
        // After the client's answer is queued: a failing upstream ends the session with a
        // 421 after it, never instead of it (the message is safe on disk or delivered).
        relay::reset(self.up()?).await?;
        Ok(flow)
    }

    /// The transaction's envelope as floodgate takes its message: the client it came from,
    /// its names, HELO, user and TLS, the MAIL and accepted RCPT arguments as relayed.
    async fn held_envelope(&mut self, order: &TakeOrder) -> HeldEnvelope {
        let names = self.client.names.get().await;
        let facts = self.exchange.facts();
        let kept = &self.transaction.envelope;
        HeldEnvelope {
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
            user: facts.user.clone(),
            helo: facts.helo.clone(),
            proto: if self.dialogue.ehlo() {
                "ESMTP"
            } else {
                "SMTP"
            }
            .into(),
            tls: self.client.conn.tls_info().map(|t| t.to_string()),
            mail: kept
                .mail
                .clone()
                .unwrap_or_else(|| format!("<{}>", facts.sender.as_deref().unwrap_or(""))),
            rcpts: kept.rcpts.clone(),
        }
    }
}
