//! The handlers of the command loop, one per SMTP command (DATA and AUTH have their own files).

use tracing::{info, warn};

use crate::config::{ClientIdentity, TlsMode};
use crate::policy::{Stage, Verdict};
use crate::smtp::command::{Command, MailFrom, Param, RcptTo};
use crate::smtp::ehlo::{cap_size, filter_ehlo, parse_ehlo, EhloFilter};
use crate::smtp::help::{help_reply, HelpCommands};
use crate::smtp::reply::Reply;

use super::session::{FactSlot, Flow, Judged, Session};
use super::upstream::UpstreamError;

type Handled = Result<Flow, UpstreamError>;

impl Session {
    /// Runs one parsed command.
    pub(super) async fn dispatch(&mut self, cmd: Command) -> Handled {
        match cmd {
            // The parts are borrowed from `cmd`, a local: no copies per command.
            Command::Ehlo(ref name) | Command::Helo(ref name) => self.helo(&cmd, name).await,
            Command::Mail(ref m) => self.mail(&cmd, m).await,
            Command::Rcpt(ref r) => self.rcpt(&cmd, r).await,
            Command::Data => self.data().await,
            Command::Bdat { size, last } => self.bdat(size, last).await,
            Command::Rset => {
                let r = self.up()?.relay(&cmd).await?;
                self.reset_txn();
                self.answer(r);
                Ok(Flow::Next)
            }
            Command::Help => {
                let commands = HelpCommands {
                    starttls: self.starttls_offered(),
                    auth: !self.offered.auth.is_empty(),
                    bdat: self.offered.chunking,
                };
                self.client.queue(&help_reply(&commands));
                Ok(Flow::Next)
            }
            Command::Noop | Command::Vrfy(_) | Command::Expn(_) => {
                let r = self.up()?.relay(&cmd).await?;
                self.client.queue(&r);
                Ok(Flow::Next)
            }
            Command::Quit => {
                let host = self.shared.config.server.hostname.clone();
                self.client
                    .queue(&Reply::new(221, format!("2.0.0 {host} closing connection")));
                Ok(Flow::Close)
            }
            Command::StartTls => self.starttls().await,
            Command::Auth {
                mechanism, initial, ..
            } => self.auth(mechanism, initial).await,
            Command::Unknown(verb) if verb == "PROXY" => {
                // A PROXY header from a peer not in trusted_proxies (or on a listener without
                // proxy_protocol) is a misconfigured load balancer: going on would count every
                // client behind it as the balancer's address, so refuse loudly instead.
                warn!(client = %self.peer.ip(), listener = %self.listener.name,
                    "PROXY header from a peer not trusted for it: closing (see [server] trusted_proxies and the listener's proxy_protocol)");
                self.client.queue(&Reply::new(
                    421,
                    format!(
                        "4.7.0 {} PROXY header not accepted from {}",
                        self.shared.config.server.hostname,
                        self.peer.ip()
                    ),
                ));
                Ok(Flow::Close)
            }
            Command::Unknown(verb) => {
                info!(client = %self.peer.ip(), verb = %verb, "unknown command");
                self.client
                    .queue(&Reply::new(502, "5.5.1 Command not recognized"));
                Ok(self.error_flow())
            }
        }
    }

    /// After a client error: go on, or close when there were too many.
    pub(super) fn error_flow(&mut self) -> Flow {
        if self.count_error() {
            Flow::Close
        } else {
            Flow::Next
        }
    }

    /// Queues a local error reply and counts it.
    pub(super) fn refuse(&mut self, code: u16, text: &str) -> Flow {
        self.client.queue(&Reply::new(code, text));
        self.error_flow()
    }

    async fn helo(&mut self, cmd: &Command, name: &str) -> Handled {
        let ehlo = matches!(cmd, Command::Ehlo(_));
        self.facts.helo = Some(name.to_string());
        match self.judge(Stage::Helo).await {
            Judged::Go => {}
            Judged::Answered => return Ok(Flow::Next),
            Judged::Close => return Ok(Flow::Close),
        }
        if self.shared.upstream.identity() == ClientIdentity::Xclient && !self.xclient_done {
            self.xclient_done = true;
            if let Some(flow) = self.send_xclient(name, ehlo).await? {
                return Ok(flow);
            }
        }
        let reply = self.up()?.relay(cmd).await?;
        if let Some(p) = super::identity::helo_problem(&reply) {
            // Never the client's answer: upstream refuses every command of this session.
            return Ok(self.identity_refused(p).err().unwrap_or(Flow::Close));
        }
        if reply.is_completion() {
            self.helo_seen = true;
            self.ehlo = ehlo;
            self.reset_txn();
        }
        if ehlo && reply.code == 250 {
            let tls_ready = self.shared.tls.is_some();
            let client_tls = self.client.is_tls();
            let filter = EhloFilter {
                offer_starttls: self.listener.tls == TlsMode::Starttls && tls_ready && !client_tls,
                offer_auth: client_tls || self.auth_without_tls(),
                chunking: self.shared.config.smtp.chunking,
            };
            self.upstream_chunking = parse_ehlo(&reply).chunking;
            let mut filtered = filter_ehlo(&reply, &filter);
            cap_size(&mut filtered, self.shared.config.smtp.max_message_size);
            self.offered = parse_ehlo(&filtered);
            self.client.queue(&filtered);
        } else {
            if reply.is_completion() {
                // HELO: no extensions may be used.
                self.offered = Default::default();
            }
            self.client.queue(&reply);
        }
        Ok(Flow::Next)
    }

    /// STARTTLS is available: a STARTTLS listener with a certificate, not yet TLS.
    fn starttls_offered(&self) -> bool {
        self.listener.tls == TlsMode::Starttls && self.shared.tls.is_some() && !self.client.is_tls()
    }

    pub(super) fn auth_without_tls(&self) -> bool {
        self.shared
            .config
            .tls
            .as_ref()
            .is_some_and(|t| t.auth_without_tls)
    }

    /// MAIL and RCPT parameters pass only if the matching extension was offered.
    fn params_ok(&self, params: &[Param], rcpt: bool) -> bool {
        params.iter().all(|p| {
            let o = &self.offered;
            match (rcpt, p.keyword.as_str()) {
                (false, "SIZE") => o.size.is_some(),
                (false, "BODY") => o.eight_bit_mime,
                (false, "SMTPUTF8") => o.smtputf8,
                (false, "RET") | (false, "ENVID") => o.dsn,
                (false, "AUTH") => !o.auth.is_empty(),
                (true, "NOTIFY") | (true, "ORCPT") => o.dsn,
                _ => false,
            }
        })
    }

    async fn mail(&mut self, cmd: &Command, m: &MailFrom) -> Handled {
        if !self.helo_seen {
            return Ok(self.refuse(503, "5.5.1 Send HELO or EHLO first"));
        }
        if self.listener.require_tls && !self.client.is_tls() {
            info!(client = %self.peer.ip(), listener = %self.listener.name, "MAIL refused: the listener requires TLS");
            return Ok(self.refuse(530, "5.7.0 Must issue a STARTTLS command first"));
        }
        if self.listener.require_auth && !self.authenticated {
            info!(client = %self.peer.ip(), listener = %self.listener.name, "MAIL refused: the listener requires AUTH");
            return Ok(self.refuse(530, "5.7.0 Authentication required"));
        }
        if self.in_txn {
            return Ok(self.refuse(503, "5.5.1 Nested MAIL command"));
        }
        if !self.params_ok(&m.params, false) {
            return Ok(self.refuse(555, "5.5.4 Unsupported option"));
        }
        let max = self.shared.config.smtp.max_message_size;
        let size_hint = m
            .params
            .iter()
            .find(|p| p.keyword == "SIZE")
            .and_then(|p| p.value.as_deref())
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(0);
        if size_hint > max {
            self.client
                .queue(&Reply::new(552, "5.3.4 Message size exceeds fixed limit"));
            return Ok(Flow::Next);
        }
        self.set_fact(FactSlot::Sender, m.sender.as_str());
        self.facts.message_size = size_hint;
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
        let reply = self.up()?.relay(cmd).await?;
        let Some(reply) = self.after_upstream(Stage::Mail, reply).await else {
            return Ok(Flow::Close);
        };
        if reply.is_completion() {
            self.in_txn = true;
            self.rcpts.clear();
            self.note_mail(cmd);
        } else {
            self.facts.sender = None;
        }
        self.answer(reply);
        Ok(Flow::Next)
    }

    async fn rcpt(&mut self, cmd: &Command, r: &RcptTo) -> Handled {
        if !self.in_txn {
            return Ok(self.refuse(503, "5.5.1 Send MAIL first"));
        }
        if self.rcpts.len() >= self.shared.config.smtp.max_recipients {
            self.client
                .queue(&Reply::new(452, "4.5.3 Too many recipients"));
            return Ok(Flow::Next);
        }
        if !self.params_ok(&r.params, true) {
            return Ok(self.refuse(555, "5.5.4 Unsupported option"));
        }
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
        let Some(reply) = self.after_upstream(Stage::Rcpt, reply).await else {
            return Ok(Flow::Close);
        };
        if reply.is_completion() {
            let rcpt = self.pooled(r.recipient.as_str());
            self.rcpts.push(rcpt);
            self.note_rcpt(cmd);
            self.facts.recipients_count = self.rcpts.len();
        }
        self.answer(reply);
        Ok(Flow::Next)
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
        let acceptor = match (&self.shared.tls, self.listener.tls) {
            (Some(a), TlsMode::Starttls) => a.clone(),
            _ => return Ok(self.refuse(502, "5.5.1 STARTTLS not available on this port")),
        };
        if self.client.is_tls() {
            return Ok(self.refuse(554, "5.5.1 TLS already active"));
        }
        if self.in_txn {
            return Ok(self.refuse(503, "5.5.1 MAIL transaction in progress"));
        }
        if self.authenticated {
            return Ok(self.refuse(503, "5.5.1 Already authenticated"));
        }
        self.client
            .queue(&Reply::new(220, "2.0.0 Ready to start TLS"));
        let handshake = self.shared.config.timeouts.tls_handshake.0;
        let handshake = self.client.starttls(&acceptor, handshake).await;
        self.shared
            .metrics
            .tls_handshake(crate::metrics::Side::Client, handshake.is_ok());
        match handshake {
            Ok(discarded) => {
                if discarded > 0 {
                    warn!(
                        client = %self.peer.ip(),
                        discarded,
                        "discarded bytes pipelined after STARTTLS (CVE-2011-0411)"
                    );
                }
                // RFC 3207 §4.2: forget everything learned before TLS.
                self.framer =
                    crate::smtp::line::LineFramer::new(self.shared.config.smtp.max_command_line);
                self.helo_seen = false;
                self.facts.helo = None;
                self.facts.tls = true;
                self.offered = Default::default();
                self.reset_txn();
                Ok(Flow::Next)
            }
            Err(e) => {
                info!(client = %self.peer.ip(), port = self.peer.port(), listener = %self.listener.name, error = %e, "STARTTLS handshake failed");
                Ok(Flow::Close)
            }
        }
    }
}
