//! The command loop's driver: each command goes to the dialogue, and its [`Step`] is
//! carried out here (policy asked, upstream awaited, answer written). DATA, BDAT and AUTH
//! have their own files.

use tracing::{info, warn};

use crate::policy::{Stage, Verdict};
use crate::smtp::command::{Command, MailFrom, RcptTo};
use crate::smtp::dialogue::{self, replies, Heard, Step};
use crate::smtp::reply::Reply;

use super::identity::helo_problem;
use super::session::{FactSlot, Flow, Judged, Session};
use super::upstream::UpstreamError;

type Handled = Result<Flow, UpstreamError>;

/// What became of a MAIL that went upstream with a later command.
enum LateMail {
    /// No MAIL went with it.
    None,
    /// Upstream accepted the sender.
    Accepted,
    /// Upstream refused the sender: the answer the client gets instead of the command's.
    Refused(Reply),
    /// The policy ended the session on upstream's answer (already queued for the client).
    Close,
}

impl Session {
    /// Runs one parsed command.
    pub(super) async fn dispatch(&mut self, cmd: Command) -> Handled {
        match self.dialogue.on_command(&cmd) {
            Step::Reply(reply) => {
                self.client.queue(&reply);
                Ok(Flow::Next)
            }
            Step::Refuse { reply, note } => {
                if let Some(note) = note {
                    info!(client = %self.ip_text, listener = %self.listener.name, "{note}");
                }
                if let Command::Unknown(verb) = &cmd {
                    info!(client = %self.ip_text, verb = %verb, "unknown command");
                }
                Ok(self.refuse_with(&reply))
            }
            // The parts are borrowed from `cmd`, a local: no copies per command.
            Step::Ask(stage) => match &cmd {
                Command::Ehlo(name) | Command::Helo(name) => self.helo(stage, name).await,
                Command::Mail(m) => self.mail(&cmd, m).await,
                Command::Rcpt(r) => self.rcpt(&cmd, r).await,
                _ => Err(UpstreamError::Protocol(format!(
                    "{} asked at {:?}",
                    cmd.verb(),
                    stage
                ))),
            },
            Step::Relay(stage) => {
                let r = self.up()?.relay(&cmd).await?;
                // A NOOP, VRFY or EXPN took a pipelined MAIL with it. If upstream refused the
                // sender, the transaction has ended: the client's next RCPT hears 503.
                match self.late_mail().await {
                    LateMail::None | LateMail::Accepted => {}
                    LateMail::Refused(_) => self.reset_txn(),
                    LateMail::Close => return Ok(Flow::Close),
                }
                let heard = self.dialogue.on_upstream(stage, &r);
                self.heard(heard);
                if stage == dialogue::Exchange::Rset {
                    self.answer(r);
                } else {
                    self.client.queue(&r);
                }
                Ok(Flow::Next)
            }
            Step::Auth(mech) => match cmd {
                Command::Auth {
                    mechanism, initial, ..
                } => self.auth(mech, mechanism, initial).await,
                _ => Err(UpstreamError::Protocol("AUTH step for another verb".into())),
            },
            Step::Data => self.data().await,
            Step::Chunk { first } => match cmd {
                Command::Bdat { size, last } => self.bdat(size, last, first).await,
                _ => Err(UpstreamError::Protocol("BDAT step for another verb".into())),
            },
            Step::Discard { reply, error } => {
                let size = match cmd {
                    Command::Bdat { size, .. } => size,
                    _ => 0,
                };
                self.discard_chunk(size, &reply, error).await
            }
            Step::StartTls => self.starttls().await,
            Step::Quit => {
                let host = &self.shared.config.server.hostname;
                self.client.queue(&replies::closing(host));
                Ok(Flow::Close)
            }
            Step::ProxyHeader => {
                // Going on would count every client behind a misconfigured load balancer
                // as the balancer's address, so refuse loudly instead.
                warn!(client = %self.ip_text, listener = %self.listener.name,
                    "PROXY header from a peer not trusted for it: closing (see [server] trusted_proxies and the listener's proxy_protocol)");
                let host = &self.shared.config.server.hostname;
                self.client
                    .queue(&replies::proxy_header_refused(host, self.peer.ip()));
                Ok(Flow::Close)
            }
            Step::Close(reply) => {
                self.client.queue(&reply);
                Ok(Flow::Close)
            }
        }
    }

    async fn helo(&mut self, stage: dialogue::Exchange, name: &str) -> Handled {
        let ehlo = stage == dialogue::Exchange::Ehlo;
        self.facts.helo = Some(name.to_string());
        match self.judge(Stage::Helo).await {
            Judged::Go => {}
            Judged::Answered => return Ok(Flow::Next),
            Judged::Close => return Ok(Flow::Close),
        }
        if self.dialogue.xclient_due() {
            if let Some(flow) = self.send_xclient(name, ehlo).await? {
                return Ok(flow);
            }
        }
        let always_ehlo = self.shared.upstream.always_ehlo();
        let (upstream_ehlo, reply) = self.up()?.greet(name, ehlo, always_ehlo).await?;
        if let Some(p) = helo_problem(&reply) {
            // Never the client's answer: upstream refuses every command of this session.
            return Ok(self.identity_refused(p).err().unwrap_or(Flow::Close));
        }
        let heard = self.dialogue.on_greeting(ehlo, upstream_ehlo, &reply);
        match self.heard(heard) {
            Some(filtered) => self.client.queue(&filtered),
            None => self.client.queue(&reply),
        }
        Ok(Flow::Next)
    }

    async fn mail(&mut self, cmd: &Command, m: &MailFrom) -> Handled {
        self.set_fact(FactSlot::Sender, m.sender.as_str());
        self.facts.message_size = dialogue::size_hint(m);
        // A new transaction: only its own checks may hold it.
        self.hold = None;
        match self.judge(Stage::Mail).await {
            Judged::Go => {}
            Judged::Answered => {
                self.facts.sender = None;
                return Ok(Flow::Next);
            }
            Judged::Close => return Ok(Flow::Close),
        }
        // A declared size over the SIZE announced to the client (upstream's, or floodgate's
        // own if smaller) waits for upstream's refusal at MAIL, where the client expects it.
        let size_fits = match self.dialogue.offered().size {
            Some(limit) if limit > 0 => self.facts.message_size <= limit,
            _ => true,
        };
        if size_fits && self.shared.upstream.pipelining() && self.dialogue.upstream_pipelining() {
            // The MAIL goes upstream with the next command, normally the first RCPT, and
            // upstream's answer to it is heard then (`late_mail`).
            self.up()?.pipeline_mail(cmd);
            let reply = replies::sender_ok();
            if self.dialogue.on_upstream(dialogue::Exchange::Mail, &reply) == Heard::Accepted {
                self.note_mail(cmd);
            }
            self.client.queue(&reply);
            return Ok(Flow::Next);
        }
        let reply = self.up()?.relay(cmd).await?;
        let Some(reply) = self.after_upstream(Stage::Mail, reply).await else {
            return Ok(Flow::Close);
        };
        match self.dialogue.on_upstream(dialogue::Exchange::Mail, &reply) {
            Heard::Accepted => self.note_mail(cmd),
            _ => self.facts.sender = None,
        }
        self.answer(reply);
        Ok(Flow::Next)
    }

    async fn rcpt(&mut self, cmd: &Command, r: &RcptTo) -> Handled {
        self.set_fact(FactSlot::Recipient, r.recipient.as_str());
        let mut normalized = self
            .facts
            .recipient_normalized
            .take()
            .unwrap_or_else(|| self.pooled(""));
        r.recipient.normalized_into(&mut normalized);
        self.facts.recipient_normalized = Some(normalized);
        match self.judge(Stage::Rcpt).await {
            Judged::Go => {}
            Judged::Answered => return Ok(Flow::Next),
            Judged::Close => return Ok(Flow::Close),
        }
        let reply = self.up()?.relay(cmd).await?;
        match self.late_mail().await {
            LateMail::None | LateMail::Accepted => {}
            LateMail::Refused(refusal) => {
                // Upstream answered this RCPT too (a 503: it has no transaction). The policy
                // hears that answer, as it hears every answer to a relayed RCPT; the client
                // hears why there is no transaction.
                let Some(reply) = self.after_upstream(Stage::Rcpt, reply).await else {
                    return Ok(Flow::Close);
                };
                self.up()?.recycle(reply);
                self.reset_txn();
                self.answer(refusal);
                return Ok(Flow::Next);
            }
            LateMail::Close => return Ok(Flow::Close),
        }
        let Some(reply) = self.after_upstream(Stage::Rcpt, reply).await else {
            return Ok(Flow::Close);
        };
        if self.dialogue.on_upstream(dialogue::Exchange::Rcpt, &reply) == Heard::Accepted {
            self.note_rcpt(cmd);
            self.facts.recipients_count = self.dialogue.recipients();
        }
        self.answer(reply);
        Ok(Flow::Next)
    }

    /// Upstream's answer to a MAIL that went with the command just relayed, heard by the
    /// policy as every answer to MAIL is. After a refusal the caller ends the transaction
    /// floodgate opened when it answered the MAIL itself (`reset_txn`).
    async fn late_mail(&mut self) -> LateMail {
        let Some(up) = self.up.as_mut() else {
            return LateMail::None;
        };
        let Some(reply) = up.take_mail_answer() else {
            return LateMail::None;
        };
        let Some(reply) = self.after_upstream(Stage::Mail, reply).await else {
            return LateMail::Close;
        };
        if reply.is_completion() {
            if let Some(up) = self.up.as_mut() {
                up.recycle(reply);
            }
            return LateMail::Accepted;
        }
        info!(
            client = %self.ip_text,
            sender = self.facts.sender.as_deref().unwrap_or(""),
            code = reply.code,
            upstream = reply.lines.last().map(String::as_str).unwrap_or(""),
            "sender refused upstream after MAIL was answered"
        );
        LateMail::Refused(reply)
    }

    /// Tells the policy what upstream answered; it may delay the answer, or (for a reply
    /// that did not change upstream's state) replace it or close the session. `None`: the
    /// session ends; what the client is owed is already queued (upstream's answer first,
    /// then any 421), so a client never misses a success upstream gave.
    pub(super) async fn after_upstream(&mut self, stage: Stage, reply: Reply) -> Option<Reply> {
        let replaceable = !reply.is_completion() && !reply.is_intermediate();
        let verdict = match self.policy.after_upstream_now(stage, &self.facts, &reply) {
            Some(v) => v,
            None => self.policy.after_upstream(stage, &self.facts, &reply).await,
        };
        match verdict {
            Verdict::Delay(d) if !self.pause(d).await => {
                self.client.queue(&reply);
                self.stopped();
                None
            }
            Verdict::Reply(r) if replaceable => Some(r),
            Verdict::Disconnect(r) if replaceable => {
                self.tally.refused += 1;
                self.shared.metrics.refused.inc();
                self.client.queue(&r);
                None
            }
            _ => Some(reply),
        }
    }

    async fn starttls(&mut self) -> Handled {
        let Some(acceptor) = self.shared.tls.clone() else {
            // The dialogue offers STARTTLS only with a certificate.
            return Ok(self.refuse_with(&replies::starttls_unavailable()));
        };
        self.client.queue(&replies::ready_for_tls());
        let handshake = self.shared.config.timeouts.tls_handshake.0;
        let handshake = self.client.starttls(&acceptor, handshake).await;
        self.shared
            .metrics
            .tls_handshake(crate::metrics::Side::Client, handshake.is_ok());
        match handshake {
            Ok(discarded) => {
                if discarded > 0 {
                    warn!(
                        client = %self.ip_text,
                        discarded,
                        "discarded bytes pipelined after STARTTLS (CVE-2011-0411)"
                    );
                }
                // RFC 3207 §4.2: forget everything learned before TLS.
                self.framer =
                    crate::smtp::line::LineFramer::new(self.shared.config.smtp.max_command_line);
                self.facts.helo = None;
                self.facts.tls = true;
                let abandoned = self.dialogue.tls_started();
                self.forget_txn(abandoned);
                Ok(Flow::Next)
            }
            Err(e) => {
                info!(client = %self.ip_text, port = self.peer.port(), listener = %self.listener.name, error = %e, "STARTTLS handshake failed");
                Ok(Flow::Close)
            }
        }
    }
}
