//! The command loop's driver: each command goes to the dialogue, and its [`Step`] is
//! carried out here (the exchange asked, upstream awaited, answer written): HELO/EHLO with
//! the XCLIENT before it, MAIL, RCPT, the relayed commands, STARTTLS. DATA, BDAT and AUTH
//! have their own files.

use tracing::{info, warn};

use crate::policy::Stage;
use crate::smtp::command::{Command, MailFrom, RcptTo};
use crate::smtp::dialogue::{self, replies, Heard, Step};
use crate::smtp::reply::Reply;
use crate::smtp::xclient::XclientAttrs;

use super::envelope::argument;
use super::identity::{helo_problem, xclient_reply_problem, IdentityProblem};
use super::session::{Flow, Session};
use super::upstream::UpstreamError;

/// What became of a MAIL pipelined upstream with the command just relayed: floodgate
/// answered the client's MAIL itself, so a refusal heard now ends the transaction late.
enum PipelinedMail {
    /// No MAIL went with the command, or upstream accepted the sender.
    Stands,
    /// Upstream refused the sender: the answer the client gets instead of the command's.
    Refused(Reply),
    /// The policy ended the session on upstream's answer (already queued for the client).
    Close,
}

impl Session {
    /// Runs one parsed command.
    pub(super) async fn dispatch(&mut self, cmd: Command) -> Result<Flow, UpstreamError> {
        match self.dialogue.on_command(&cmd) {
            Step::Reply(reply) => {
                self.client.conn.queue(&reply);
                Ok(Flow::Next)
            }
            Step::Refuse { reply, note } => {
                if let Some(note) = note {
                    info!(client = %self.client.ip_text, listener = %self.client.listener.name, "{note}");
                }
                if let Command::Unknown(verb) = &cmd {
                    info!(client = %self.client.ip_text, verb = %verb, "unknown command");
                }
                Ok(self.refuse_with(&reply))
            }
            // The parts are borrowed from `cmd`, a local: no copies per command.
            Step::Ask(exchange) => match &cmd {
                Command::Ehlo(name) | Command::Helo(name) => self.helo(exchange, name).await,
                Command::Mail(m) => self.mail(&cmd, m).await,
                Command::Rcpt(r) => self.rcpt(&cmd, r).await,
                _ => Err(UpstreamError::Protocol(format!(
                    "{} asked at {:?}",
                    cmd.verb(),
                    exchange
                ))),
            },
            Step::Relay(exchange) => {
                let r = self.up()?.relay(&cmd).await?;
                // A NOOP, VRFY or EXPN took a pipelined MAIL with it. If upstream refused the
                // sender, the transaction has ended: the client's next RCPT hears 503.
                match self.pipelined_mail().await {
                    PipelinedMail::Stands => {}
                    PipelinedMail::Refused(_) => self.reset_txn(),
                    PipelinedMail::Close => return Ok(Flow::Close),
                }
                let heard = self.dialogue.on_upstream(exchange, &r);
                self.heard(heard);
                if exchange == dialogue::Exchange::Rset {
                    self.answer(r);
                } else {
                    self.client.conn.queue(&r);
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
                let host = &self.shared.config().server.hostname;
                self.client.conn.queue(&replies::closing(host));
                Ok(Flow::Close)
            }
            Step::ProxyHeader => {
                // Going on would count every client behind a misconfigured load balancer
                // as the balancer's address, so refuse loudly instead.
                warn!(client = %self.client.ip_text, listener = %self.client.listener.name,
                    "PROXY header from a peer not trusted for it: closing (see [server] trusted_proxies and the listener's proxy_protocol)");
                let host = &self.shared.config().server.hostname;
                self.client
                    .conn
                    .queue(&replies::proxy_header_refused(host, self.client.peer.ip()));
                Ok(Flow::Close)
            }
            Step::Close(reply) => {
                self.client.conn.queue(&reply);
                Ok(Flow::Close)
            }
        }
    }

    async fn helo(
        &mut self,
        exchange: dialogue::Exchange,
        name: &str,
    ) -> Result<Flow, UpstreamError> {
        let ehlo = exchange == dialogue::Exchange::Ehlo;
        self.exchange.facts_mut().helo = Some(name.to_string());
        if let Some(flow) = self.judge(Stage::Helo).await {
            return Ok(flow);
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
            return Ok(self.identity_refused(p).unwrap_or(Flow::Close));
        }
        let heard = self.dialogue.on_greeting(ehlo, upstream_ehlo, &reply);
        match self.heard(heard) {
            Some(filtered) => self.client.conn.queue(&filtered),
            None => self.client.conn.queue(&reply),
        }
        Ok(Flow::Next)
    }

    async fn mail(&mut self, cmd: &Command, m: &MailFrom) -> Result<Flow, UpstreamError> {
        self.exchange.set_sender(m.sender.as_str());
        self.exchange.facts_mut().message_size = dialogue::size_hint(m);
        // A refusal leaves no transaction and no sender (the exchange forgets it).
        if let Some(flow) = self.judge(Stage::Mail).await {
            return Ok(flow);
        }
        // A declared size over the SIZE announced to the client (upstream's, or floodgate's
        // own if smaller) waits for upstream's refusal at MAIL, where the client expects it.
        let size_fits = match self.dialogue.offered().size {
            Some(limit) if limit > 0 => self.exchange.facts().message_size <= limit,
            _ => true,
        };
        if size_fits && self.shared.upstream.pipelining() && self.dialogue.upstream_pipelining() {
            // The MAIL goes upstream with the next command, normally the first RCPT, and
            // upstream's answer to it is heard then (`pipelined_mail`).
            self.up()?.pipeline_mail(cmd);
            let reply = replies::sender_ok();
            if self.dialogue.on_upstream(dialogue::Exchange::Mail, &reply) == Heard::Accepted {
                self.note_mail(cmd);
            }
            self.client.conn.queue(&reply);
            return Ok(Flow::Next);
        }
        let reply = self.up()?.relay(cmd).await?;
        let Some((reply, accepted)) = self
            .hear(Stage::Mail, dialogue::Exchange::Mail, reply)
            .await
        else {
            return Ok(Flow::Close);
        };
        if accepted {
            self.note_mail(cmd);
        }
        self.answer(reply);
        Ok(Flow::Next)
    }

    async fn rcpt(&mut self, cmd: &Command, r: &RcptTo) -> Result<Flow, UpstreamError> {
        self.exchange
            .set_recipient(r.recipient.as_str(), |n| r.recipient.normalized_into(n));
        if let Some(flow) = self.judge(Stage::Rcpt).await {
            return Ok(flow);
        }
        let reply = self.up()?.relay(cmd).await?;
        match self.pipelined_mail().await {
            PipelinedMail::Stands => {}
            PipelinedMail::Refused(refusal) => {
                // Upstream answered this RCPT too (a 503: it has no transaction). The policy
                // hears that answer, as it hears every answer to a relayed RCPT; the client
                // hears why there is no transaction.
                let Some(reply) = self.hear_policy(Stage::Rcpt, reply).await else {
                    return Ok(Flow::Close);
                };
                self.up()?.recycle(reply);
                self.reset_txn();
                self.answer(refusal);
                return Ok(Flow::Next);
            }
            PipelinedMail::Close => return Ok(Flow::Close),
        }
        let Some((reply, accepted)) = self
            .hear(Stage::Rcpt, dialogue::Exchange::Rcpt, reply)
            .await
        else {
            return Ok(Flow::Close);
        };
        if accepted {
            self.note_rcpt(cmd);
        }
        self.answer(reply);
        Ok(Flow::Next)
    }

    /// Upstream's answer to a MAIL that went with the command just relayed, heard by the
    /// policy as every answer to MAIL is. After a refusal the caller ends the transaction
    /// floodgate opened when it answered the MAIL itself (`reset_txn`).
    async fn pipelined_mail(&mut self) -> PipelinedMail {
        let Some(up) = self.upstream.as_mut() else {
            return PipelinedMail::Stands;
        };
        let Some(reply) = up.take_mail_answer() else {
            return PipelinedMail::Stands;
        };
        // The exchange forgets a refused sender as it hears the refusal; the log names it.
        let sender = (!reply.is_completion())
            .then(|| self.exchange.facts().sender.clone())
            .flatten();
        let Some(reply) = self.hear_policy(Stage::Mail, reply).await else {
            return PipelinedMail::Close;
        };
        if reply.is_completion() {
            if let Some(up) = self.upstream.as_mut() {
                up.recycle(reply);
            }
            return PipelinedMail::Stands;
        }
        info!(
            client = %self.client.ip_text,
            sender = sender.as_deref().unwrap_or(""),
            code = reply.code,
            upstream = reply.lines.last().map(String::as_str).unwrap_or(""),
            "sender refused upstream after MAIL was answered"
        );
        PipelinedMail::Refused(reply)
    }

    /// Whether a transaction's message may be taken (a hold spool or a second smart host):
    /// only then is its MAIL argument kept (the recipients always are, for the event log).
    fn may_take(&self) -> bool {
        self.shared.hold.is_some() || self.shared.high_risk.is_some()
    }

    /// Notes an accepted MAIL for a message that may be taken.
    fn note_mail(&mut self, cmd: &Command) {
        if self.may_take() {
            self.transaction.envelope.mail = Some(argument(cmd));
        }
        self.transaction.envelope.rcpts.clear();
    }

    /// Notes an accepted RCPT: for a message that may be taken, and for the message's line
    /// in the event log.
    fn note_rcpt(&mut self, cmd: &Command) {
        self.transaction.envelope.rcpts.push(argument(cmd));
    }

    /// Sends XCLIENT before the client's first HELO/EHLO is relayed, so upstream learns the
    /// real client (address, port, names, HELO, protocol) instead of floodgate's own
    /// address. `Ok(Some(flow))`: the session ends (refusal queued).
    async fn send_xclient(
        &mut self,
        helo: &str,
        ehlo: bool,
    ) -> Result<Option<Flow>, UpstreamError> {
        let names = self.client.names.get().await;
        let attrs = XclientAttrs {
            addr: self.client.peer.ip(),
            port: self.client.peer.port(),
            name: &names.name,
            reverse_name: &names.reverse,
            helo: Some(helo),
            proto: if ehlo { "ESMTP" } else { "SMTP" },
            dest: self.client.local,
            login: None,
        };
        let up = self.up()?;
        let reply = match up.xclient(&attrs).await? {
            Some(r) => r,
            None => {
                let offered = up.caps.xclient.join(" ");
                return Ok(self.identity_refused(IdentityProblem::XclientNotOffered { offered }));
            }
        };
        let Some(problem) = xclient_reply_problem(&reply) else {
            return Ok(None);
        };
        Ok(self.identity_refused(problem))
    }

    async fn starttls(&mut self) -> Result<Flow, UpstreamError> {
        let Some(acceptor) = self.shared.tls.clone() else {
            // The dialogue offers STARTTLS only with a certificate.
            return Ok(self.refuse_with(&replies::starttls_unavailable()));
        };
        self.client.conn.queue(&replies::ready_for_tls());
        let handshake = self.shared.config().timeouts.tls_handshake.0;
        let handshake = self.client.conn.starttls(&acceptor, handshake).await;
        self.shared
            .metrics
            .tls_handshake(crate::metrics::Side::Client, handshake.is_ok());
        match handshake {
            Ok(discarded) => {
                if discarded > 0 {
                    warn!(
                        client = %self.client.ip_text,
                        discarded,
                        "discarded bytes pipelined after STARTTLS (CVE-2011-0411)"
                    );
                }
                // RFC 3207 §4.2: forget everything learned before TLS.
                self.client.framer =
                    crate::smtp::line::LineFramer::new(self.shared.config().smtp.max_command_line);
                let facts = self.exchange.facts_mut();
                facts.helo = None;
                facts.tls = true;
                let abandoned = self.dialogue.tls_started();
                self.forget_txn(abandoned);
                Ok(Flow::Next)
            }
            Err(e) => {
                info!(client = %self.client.ip_text, port = self.client.peer.port(), listener = %self.client.listener.name, error = %e, "STARTTLS handshake failed");
                Ok(Flow::Close)
            }
        }
    }
}
