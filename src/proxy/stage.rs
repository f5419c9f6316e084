//! The proxy as an executor of [`crate::exchange`]: a stage asked and its [`Act`] carried
//! out on the wire, upstream's answer heard (the exchange first, then the dialogue) and its
//! [`After`] carried out, the transaction ended when the dialogue ends it, and the end of
//! its message told to the event log.

use tracing::debug;

use crate::exchange::{Act, After};
use crate::policy::alert::{incident_key, MessageRecord};
use crate::policy::Stage;
use crate::smtp::dialogue::{self, Heard};
use crate::smtp::reply::Reply;

use super::envelope::kept_name;
use super::session::{Flow, Session};

impl Session {
    /// Asks the exchange about `stage` and carries out its act: a wait served, a reply
    /// queued, an order to take the message kept by the exchange. `None`: go on with the
    /// command; `Some(Next)`: the policy answered it; `Some(Close)`: the policy ended the
    /// session.
    pub(super) async fn judge(&mut self, stage: Stage) -> Option<Flow> {
        match self.exchange.ask(stage).await {
            Act::Go | Act::Take(_) => None,
            Act::Wait(d) => {
                if self.pause(d).await {
                    None
                } else {
                    self.stopped();
                    Some(Flow::Close)
                }
            }
            Act::Refuse(r) => {
                debug!(client = %self.client.ip_text, stage = stage.as_str(), code = r.code, "answered by policy");
                self.count_refused();
                self.client.conn.queue(&r);
                Some(Flow::Next)
            }
            Act::Close(r) => {
                self.count_refused();
                self.client.conn.queue(&r);
                Some(Flow::Close)
            }
        }
    }

    /// Upstream's answer to a command relayed at `stage`, heard by the exchange alone (a
    /// MAIL pipelined upstream, which the dialogue heard when floodgate answered it), and
    /// the exchange's [`After`] carried out: the answer the client gets, or `None` when the
    /// session ends, what the client is owed already queued (upstream's answer first, then
    /// any 421), so a client never misses a success upstream gave.
    pub(super) async fn hear_policy(&mut self, stage: Stage, reply: Reply) -> Option<Reply> {
        match self.exchange.hear(stage, &reply).await {
            After::Pass => Some(reply),
            After::WaitThenPass(d) => {
                if self.pause(d).await {
                    Some(reply)
                } else {
                    self.client.conn.queue(&reply);
                    self.stopped();
                    None
                }
            }
            After::Replace(r) => Some(r),
            After::Close(r) => {
                self.count_refused();
                self.client.conn.queue(&r);
                None
            }
        }
    }

    /// Upstream's answer to `relayed` at `stage`: the exchange hears it first
    /// ([`Self::hear_policy`]), then the dialogue hears the answer the client gets, and a
    /// transaction that is over is forgotten. The answer and whether the dialogue took it
    /// as accepted, or `None` when the session ends.
    pub(super) async fn hear(
        &mut self,
        stage: Stage,
        relayed: dialogue::Exchange,
        reply: Reply,
    ) -> Option<(Reply, bool)> {
        // A session that ends here leaves the dialogue as it was: the exchange has noted
        // the answer, and nothing else is asked.
        let answer = self.hear_policy(stage, reply).await?;
        let heard = self.dialogue.on_upstream(relayed, &answer);
        let accepted = heard == Heard::Accepted;
        self.heard(heard);
        Some((answer, accepted))
    }

    /// Counts a command the policy refused.
    pub(super) fn count_refused(&mut self) {
        self.tally.refused += 1;
        self.shared.metrics.refused.inc();
    }

    /// Ends the transaction without a verdict (a refused message, a client gone) and
    /// forgets it; an open transaction's reservations are released.
    pub(super) fn reset_txn(&mut self) {
        let abandoned = self.dialogue.reset_transaction();
        self.forget_txn(abandoned);
    }

    /// Applies what upstream's answer did to the dialogue: a transaction that is over is
    /// forgotten. The client's answer, when the dialogue rewrote it (EHLO), is handed back.
    pub(super) fn heard(&mut self, heard: Heard) -> Option<Reply> {
        match heard {
            Heard::Accepted | Heard::Refused => None,
            Heard::Reset { abandoned } => {
                self.forget_txn(abandoned);
                None
            }
            Heard::Greeted { answer, abandoned } => {
                self.forget_txn(abandoned);
                Some(answer)
            }
        }
    }

    /// Forgets the transaction's facts and message (after RSET, HELO/EHLO, STARTTLS, end
    /// of data); `abandoned`: it was open, its reservations are released.
    pub(super) fn forget_txn(&mut self, abandoned: bool) {
        self.exchange.ended(abandoned);
        self.transaction.clear();
    }

    /// Tells the policy that the transaction's message ended with `verdict` (the message's
    /// line in the event log).
    pub(super) fn tell_transaction(&self, verdict: &str) {
        let facts = self.exchange.facts();
        let sender = facts.sender.as_deref().unwrap_or("");
        self.tell_line(verdict, sender, facts.subject.as_deref());
    }

    /// The message's line in the event log, with the transaction's `sender` and `subject`
    /// as they were before its end.
    pub(super) fn tell_line(&self, verdict: &str, sender: &str, subject: Option<&str>) {
        let recipients = self.transaction.envelope.recipients();
        let name = self
            .client
            .names
            .known()
            .and_then(|n| kept_name(&n.reverse));
        let facts = self.exchange.facts();
        let key = incident_key(facts);
        self.shared.policy.record_message(&MessageRecord {
            time_us: crate::store::now_micros(),
            key: &key,
            client: facts.client_ip,
            name: name.as_deref(),
            user: facts.user.as_deref(),
            login: facts.login.as_deref(),
            sender,
            recipients: &recipients,
            subject,
            verdict,
        });
    }
}
