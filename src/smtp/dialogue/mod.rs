//! The session's protocol state and every sequencing rule of the client dialogue, without
//! I/O: which command is allowed when, which parameters pass, what floodgate answers on its
//! own, and how upstream's answers move the session on.
//!
//! The driver (the proxy's command loop) reads a command, hands it to
//! [`Dialogue::on_command`], and does what the [`Step`] says: answer at once, ask the policy
//! at a stage and relay, take a message, start TLS or close. Upstream's answer to what was
//! relayed goes back through [`Dialogue::on_upstream`], which opens the transaction on an
//! accepted MAIL, counts accepted recipients, records an accepted AUTH and the extensions of
//! an accepted EHLO, and says when the transaction is over ([`Heard`]).
//!
//! Invariants kept whatever the order of calls: recipients are counted only inside a
//! transaction and never past [`Settings::max_recipients`]; a transaction opens only after
//! HELO or EHLO; BDAT chunks are only under way inside a transaction.

pub mod replies;

use crate::smtp::command::{Command, MailFrom, Param};
use crate::smtp::ehlo::{
    cap_size, filter_ehlo, parse_ehlo, pipelining_and_chunking, Capabilities, EhloFilter,
};
use crate::smtp::help::{help_reply, HelpCommands};
use crate::smtp::reply::Reply;
use crate::smtp::sasl::Mechanism;

/// What a session's dialogue is configured with; fixed for the session.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Settings {
    /// `[smtp] max_recipients`: most accepted RCPT per transaction.
    pub max_recipients: usize,
    /// `[smtp] max_message_size`: the largest SIZE accepted and advertised.
    pub max_message_size: u64,
    /// `[server] max_errors`: protocol errors before the session is closed.
    pub max_errors: u32,
    /// The listener accepts MAIL only under TLS.
    pub require_tls: bool,
    /// The listener accepts MAIL only after a successful AUTH.
    pub require_auth: bool,
    /// STARTTLS can be done here: a STARTTLS listener with a certificate.
    pub starttls: bool,
    /// `[tls] auth_without_tls`: AUTH is offered and taken without TLS.
    pub auth_without_tls: bool,
    /// `[smtp] chunking`: CHUNKING is passed on to the client when upstream offers it.
    pub chunking: bool,
    /// Upstream learns the client through XCLIENT, sent once before the first HELO/EHLO.
    pub xclient: bool,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            max_recipients: 100,
            max_message_size: 10 * 1024 * 1024,
            max_errors: 20,
            require_tls: false,
            require_auth: false,
            starttls: false,
            auth_without_tls: false,
            chunking: false,
            xclient: false,
        }
    }
}

/// A command relayed upstream whose answer comes back to [`Dialogue::on_upstream`] (for
/// most, the policy is asked first).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exchange {
    /// HELO.
    Helo,
    /// EHLO.
    Ehlo,
    /// AUTH, whose exchange ended with upstream's final reply.
    Auth,
    /// MAIL FROM.
    Mail,
    /// RCPT TO.
    Rcpt,
    /// The end of a message (DATA or the last BDAT chunk), with upstream's verdict.
    Message,
    /// RSET.
    Rset,
    /// NOOP, VRFY or EXPN: relayed, changing nothing.
    Other,
}

/// What the driver does with a command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// Answer with this reply; the command is done (no error).
    Reply(Reply),
    /// Answer with this reply and count a protocol error ([`Dialogue::count_error`]).
    Refuse {
        /// The refusal.
        reply: Reply,
        /// Why, for the log, when an operator should see it.
        note: Option<&'static str>,
    },
    /// Ask the policy about this exchange, then relay the command and hand upstream's
    /// answer to [`Dialogue::on_upstream`] with the same exchange.
    Ask(Exchange),
    /// Relay the command without asking the policy; upstream's answer goes back through
    /// [`Dialogue::on_upstream`] with this exchange.
    Relay(Exchange),
    /// Ask the policy at the auth stage and run the exchange with this mechanism; its final
    /// reply goes to [`Dialogue::on_upstream`] as [`Exchange::Auth`].
    Auth(Mechanism),
    /// Ask the policy at the data stage, answer 354 and take the message.
    Data,
    /// Take this BDAT chunk; `first`: the first of its message (ask the policy at the data
    /// stage before it). A chunk that is not the last is then [`Dialogue::chunk_taken`].
    Chunk {
        /// The first chunk of the message.
        first: bool,
    },
    /// Read the BDAT chunk off the wire and drop it (it must never be read as commands),
    /// then answer with `reply`; `error`: count a protocol error.
    Discard {
        /// The answer once the chunk is read.
        reply: Reply,
        /// Whether the chunk counts as a protocol error.
        error: bool,
    },
    /// Answer 220 ([`replies::ready_for_tls`]) and start TLS; on success
    /// [`Dialogue::tls_started`].
    StartTls,
    /// Answer 221 ([`replies::closing`]) and end the session.
    Quit,
    /// A PROXY header from a peer not trusted for it: answer 421
    /// ([`replies::proxy_header_refused`]) and end the session.
    ProxyHeader,
    /// Answer with this reply and end the session.
    Close(Reply),
}

/// What upstream's answer did to the dialogue.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Heard {
    /// The command was accepted (MAIL opened the transaction, RCPT counted a recipient,
    /// AUTH authenticated).
    Accepted,
    /// The command was not accepted: nothing changed.
    Refused,
    /// The transaction is over: its facts are forgotten. `abandoned`: it was still open
    /// (its reservations go back), not ended by upstream's verdict on its message.
    Reset {
        /// The transaction was open and is dropped without a verdict.
        abandoned: bool,
    },
    /// HELO or EHLO accepted: the transaction is over as for [`Heard::Reset`], and the
    /// client is answered with `answer`: for EHLO upstream's list filtered to what floodgate
    /// passes on, for a HELO that went upstream as EHLO the list's first line alone.
    Greeted {
        /// The client's answer.
        answer: Reply,
        /// A transaction was open and is dropped.
        abandoned: bool,
    },
}

/// The session has been refused at upstream's greeting (554): only QUIT is answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// The ordinary dialogue.
    Open,
    /// Upstream greeted with a 5xx: 503 to everything until QUIT (RFC 5321 §3.1).
    Refused,
}

/// The protocol state of one client session.
#[derive(Debug, Clone)]
pub struct Dialogue {
    settings: Settings,
    phase: Phase,
    /// The session is under TLS (implicit or after STARTTLS).
    tls: bool,
    /// HELO or EHLO was accepted (since the session or TLS started).
    helo_seen: bool,
    /// The last accepted greeting was EHLO.
    ehlo: bool,
    /// The extensions offered to the client in the last EHLO answer.
    offered: Capabilities,
    /// Upstream offered CHUNKING in its reply to the client's EHLO.
    upstream_chunking: bool,
    /// Upstream offered PIPELINING in its reply to the client's EHLO.
    upstream_pipelining: bool,
    /// Upstream accepted an AUTH.
    authenticated: bool,
    /// XCLIENT was sent (or settled without sending).
    xclient_done: bool,
    /// A MAIL was accepted and the transaction is not over.
    in_txn: bool,
    /// Accepted recipients of the transaction.
    recipients: usize,
    /// BDAT chunks of the transaction's message are under way.
    chunks: bool,
    /// Protocol errors so far.
    errors: u32,
}

impl Dialogue {
    /// A new session's dialogue; `tls`: the connection is already TLS.
    pub fn new(settings: Settings, tls: bool) -> Self {
        Dialogue {
            settings,
            phase: Phase::Open,
            tls,
            helo_seen: false,
            ehlo: false,
            offered: Capabilities::default(),
            upstream_chunking: false,
            upstream_pipelining: false,
            authenticated: false,
            xclient_done: false,
            in_txn: false,
            recipients: 0,
            chunks: false,
            errors: 0,
        }
    }

    /// A transaction is open (MAIL accepted, its message not yet answered).
    pub fn in_transaction(&self) -> bool {
        self.in_txn
    }

    /// Recipients accepted in the open transaction.
    pub fn recipients(&self) -> usize {
        self.recipients
    }

    /// The last accepted greeting was EHLO (the session is ESMTP).
    pub fn ehlo(&self) -> bool {
        self.ehlo
    }

    /// HELO or EHLO was accepted.
    pub fn helo_seen(&self) -> bool {
        self.helo_seen
    }

    /// Upstream accepted an AUTH in this session.
    pub fn authenticated(&self) -> bool {
        self.authenticated
    }

    /// What the client was offered in the last EHLO answer.
    pub fn offered(&self) -> &Capabilities {
        &self.offered
    }

    /// Upstream offered CHUNKING to the client's EHLO: a BDAT message goes on as BDAT.
    pub fn upstream_chunking(&self) -> bool {
        self.upstream_chunking
    }

    /// Upstream offered PIPELINING to the client's EHLO: commands may go to it in groups
    /// (RFC 2920), a MAIL with the RCPT after it.
    pub fn upstream_pipelining(&self) -> bool {
        self.upstream_pipelining
    }

    /// BDAT chunks of the open transaction are under way.
    pub fn chunks_under_way(&self) -> bool {
        self.chunks
    }

    /// STARTTLS is available now: possible on this listener and not yet done.
    pub fn starttls_available(&self) -> bool {
        self.settings.starttls && !self.tls
    }

    /// AUTH is offered and accepted in the session as it stands.
    fn auth_allowed(&self) -> bool {
        self.tls || self.settings.auth_without_tls
    }

    /// Counts a protocol error; true once `[server] max_errors` is reached (the driver
    /// answers [`replies::too_many_errors`] and closes).
    pub fn count_error(&mut self) -> bool {
        self.errors = self.errors.saturating_add(1);
        self.errors >= self.settings.max_errors
    }

    /// Whether XCLIENT is to be sent now, before the first HELO/EHLO is relayed: true once
    /// per session, and only when upstream learns the client through XCLIENT.
    pub fn xclient_due(&mut self) -> bool {
        let due = self.settings.xclient && !self.xclient_done;
        self.xclient_done = true;
        due
    }

    /// XCLIENT is settled before the client is greeted (upstream cannot take it): it is
    /// never sent in this session.
    pub fn xclient_settled(&mut self) {
        self.xclient_done = true;
    }

    /// Upstream refused the session in its greeting with a 5xx: from now on only QUIT is
    /// answered (221), everything else gets 503 ([`Dialogue::on_command`], [`Dialogue::on_bad_line`]).
    pub fn refuse_session(&mut self) {
        self.phase = Phase::Refused;
    }

    /// The answer to a line that is no command (too long, badly ended, unparsable): in a
    /// refused session the 503 of every non-QUIT line, else `ordinary`, counted as an error.
    pub fn on_bad_line(&mut self, ordinary: Reply) -> Step {
        match self.phase {
            Phase::Refused => Step::Refuse {
                reply: replies::session_refused(),
                note: None,
            },
            Phase::Open => Step::Refuse {
                reply: ordinary,
                note: None,
            },
        }
    }

    /// The rules for one parsed command: what the driver does with it.
    pub fn on_command(&mut self, cmd: &Command) -> Step {
        if self.phase == Phase::Refused {
            return match cmd {
                Command::Quit => Step::Close(replies::bye()),
                _ => refuse(replies::session_refused()),
            };
        }
        match cmd {
            Command::Helo(_) => Step::Ask(Exchange::Helo),
            Command::Ehlo(_) => Step::Ask(Exchange::Ehlo),
            Command::Mail(m) => self.mail(m),
            Command::Rcpt(r) => self.rcpt(&r.params),
            Command::Data => self.data(),
            Command::Bdat { .. } => self.bdat(),
            Command::Rset => Step::Relay(Exchange::Rset),
            Command::Noop | Command::Vrfy(_) | Command::Expn(_) => Step::Relay(Exchange::Other),
            Command::Help => Step::Reply(help_reply(&HelpCommands {
                starttls: self.starttls_available(),
                auth: !self.offered.auth.is_empty(),
                bdat: self.offered.chunking,
            })),
            Command::Quit => Step::Quit,
            Command::StartTls => self.starttls(),
            Command::Auth { mechanism, .. } => self.auth(mechanism),
            // A PROXY header from a peer not trusted for it is a misconfigured load
            // balancer: going on would count every client behind it as the balancer.
            Command::Unknown(verb) if verb == "PROXY" => Step::ProxyHeader,
            Command::Unknown(_) => refuse(replies::not_recognized()),
        }
    }

    /// MAIL: after HELO/EHLO, under TLS and after AUTH where the listener requires them,
    /// outside a transaction, with offered parameters only, and no SIZE over the limit.
    fn mail(&self, m: &MailFrom) -> Step {
        if !self.helo_seen {
            return refuse(replies::send_helo_first());
        }
        if self.settings.require_tls && !self.tls {
            return Step::Refuse {
                reply: replies::tls_required(),
                note: Some("MAIL refused: the listener requires TLS"),
            };
        }
        if self.settings.require_auth && !self.authenticated {
            return Step::Refuse {
                reply: replies::auth_required(),
                note: Some("MAIL refused: the listener requires AUTH"),
            };
        }
        if self.in_txn {
            return refuse(replies::nested_mail());
        }
        if !self.params_ok(&m.params, false) {
            return refuse(replies::unsupported_option());
        }
        if size_hint(m) > self.settings.max_message_size {
            return Step::Reply(replies::size_over_limit());
        }
        Step::Ask(Exchange::Mail)
    }

    /// RCPT: inside a transaction, below the recipient limit, offered parameters only.
    fn rcpt(&self, params: &[Param]) -> Step {
        if !self.in_txn {
            return refuse(replies::send_mail_first());
        }
        if self.recipients >= self.settings.max_recipients {
            return Step::Reply(replies::too_many_recipients());
        }
        if !self.params_ok(params, true) {
            return refuse(replies::unsupported_option());
        }
        Step::Ask(Exchange::Rcpt)
    }

    /// DATA: inside a transaction with a recipient, and not after BDAT chunks.
    fn data(&self) -> Step {
        if !self.in_txn {
            return refuse(replies::send_mail_first());
        }
        if self.recipients == 0 {
            return refuse(replies::no_valid_recipients());
        }
        if self.chunks {
            // RFC 3030 §2: one transaction is DATA or BDAT, never both.
            return refuse(replies::data_after_bdat());
        }
        Step::Data
    }

    /// BDAT: only when CHUNKING was offered (else its chunk is still read and dropped, as
    /// an error), inside a transaction with a recipient. Chunks pipelined after a refused
    /// one get the same refusal, not counted as errors: a client that pipelined its chunks
    /// cannot take them back (RFC 3030 §4).
    fn bdat(&self) -> Step {
        if !self.offered.chunking {
            return Step::Discard {
                reply: replies::bdat_not_offered(),
                error: true,
            };
        }
        if !self.in_txn || self.recipients == 0 {
            let reply = if self.in_txn {
                replies::no_valid_recipients()
            } else {
                replies::send_mail_first()
            };
            return Step::Discard {
                reply,
                error: false,
            };
        }
        Step::Chunk {
            first: !self.chunks,
        }
    }

    /// STARTTLS: only where available, once, outside a transaction and before AUTH.
    fn starttls(&self) -> Step {
        if !self.settings.starttls {
            return refuse(replies::starttls_unavailable());
        }
        if self.tls {
            return refuse(replies::tls_already_active());
        }
        if self.in_txn {
            return refuse(replies::transaction_in_progress());
        }
        if self.authenticated {
            return refuse(replies::already_authenticated());
        }
        Step::StartTls
    }

    /// AUTH: after EHLO, once, outside a transaction, under TLS unless allowed without,
    /// and only with a mechanism that was offered and whose user name can be read.
    fn auth(&self, mechanism: &str) -> Step {
        if !self.helo_seen {
            return refuse(replies::send_ehlo_first());
        }
        if self.authenticated {
            return refuse(replies::already_authenticated());
        }
        if self.in_txn {
            return refuse(replies::transaction_in_progress());
        }
        if !self.auth_allowed() {
            return refuse(replies::encryption_required());
        }
        let offered = self
            .offered
            .auth
            .iter()
            .any(|m| m.eq_ignore_ascii_case(mechanism));
        match Mechanism::from_name(mechanism).filter(|_| offered) {
            Some(mech) => Step::Auth(mech),
            None => refuse(replies::unrecognized_mechanism()),
        }
    }

    /// MAIL and RCPT parameters pass only if the matching extension was offered.
    fn params_ok(&self, params: &[Param], rcpt: bool) -> bool {
        let o = &self.offered;
        params.iter().all(|p| match (rcpt, p.keyword.as_str()) {
            (false, "SIZE") => o.size.is_some(),
            (false, "BODY") => o.eight_bit_mime,
            (false, "SMTPUTF8") => o.smtputf8,
            (false, "RET") | (false, "ENVID") => o.dsn,
            (false, "AUTH") => !o.auth.is_empty(),
            (true, "NOTIFY") | (true, "ORCPT") => o.dsn,
            _ => false,
        })
    }

    /// Upstream answered the relayed `exchange` with `reply` (the answer the client gets,
    /// after the policy had its say): the state moves on.
    pub fn on_upstream(&mut self, exchange: Exchange, reply: &Reply) -> Heard {
        let accepted = reply.is_completion();
        match exchange {
            Exchange::Helo | Exchange::Ehlo => {
                let ehlo = exchange == Exchange::Ehlo;
                self.on_greeting(ehlo, ehlo, reply)
            }
            Exchange::Mail if accepted && self.helo_seen && !self.in_txn => {
                self.in_txn = true;
                self.recipients = 0;
                self.chunks = false;
                Heard::Accepted
            }
            Exchange::Rcpt
                if accepted && self.in_txn && self.recipients < self.settings.max_recipients =>
            {
                self.recipients += 1;
                Heard::Accepted
            }
            Exchange::Auth if reply.code == 235 && !self.authenticated => {
                self.authenticated = true;
                Heard::Accepted
            }
            Exchange::Message => {
                // Upstream's verdict ends the transaction, whatever it is.
                self.in_txn = false;
                self.reset_transaction();
                Heard::Reset { abandoned: false }
            }
            Exchange::Rset => Heard::Reset {
                abandoned: self.reset_transaction(),
            },
            _ => Heard::Refused,
        }
    }

    /// Upstream answered the client's HELO or EHLO (`client_ehlo`) with `reply`.
    /// `upstream_ehlo`: floodgate said EHLO upstream, also for a HELO client
    /// (`[upstream] always_ehlo`). Upstream's extensions then serve floodgate's own commands
    /// (a MAIL with the first RCPT, BDAT), while a HELO client is offered none and gets
    /// HELO's one-line answer.
    pub fn on_greeting(&mut self, client_ehlo: bool, upstream_ehlo: bool, reply: &Reply) -> Heard {
        if !reply.is_completion() {
            return Heard::Refused;
        }
        self.helo_seen = true;
        self.ehlo = client_ehlo;
        let abandoned = self.reset_transaction();
        // Only an upstream EHLO session takes extensions, whatever an earlier EHLO offered:
        // BDAT only after an EHLO that offered CHUNKING (RFC 3030 §2).
        (self.upstream_pipelining, self.upstream_chunking) = if upstream_ehlo {
            pipelining_and_chunking(reply)
        } else {
            (false, false)
        };
        if client_ehlo && reply.code == 250 {
            let filter = EhloFilter {
                offer_starttls: self.starttls_available(),
                offer_auth: self.auth_allowed(),
                chunking: self.settings.chunking,
            };
            let mut answer = filter_ehlo(reply, &filter);
            cap_size(&mut answer, self.settings.max_message_size);
            self.offered = parse_ehlo(&answer);
            return Heard::Greeted { answer, abandoned };
        }
        // HELO: no extensions may be used.
        self.offered = Capabilities::default();
        if upstream_ehlo {
            // EHLO's first line is the greeting HELO answers with; the rest is the list.
            let first = reply.lines.first().map(String::as_str).unwrap_or("");
            let answer = Reply::new(reply.code, first);
            return Heard::Greeted { answer, abandoned };
        }
        Heard::Reset { abandoned }
    }

    /// A BDAT chunk that is not the last was taken whole: the message is under way.
    pub fn chunk_taken(&mut self) {
        if self.in_txn {
            self.chunks = true;
        }
    }

    /// Ends the transaction without a verdict (RSET, a refused message, HELO/EHLO, TLS):
    /// true if one was open (the driver releases what it reserved).
    pub fn reset_transaction(&mut self) -> bool {
        let open = self.in_txn;
        self.in_txn = false;
        self.recipients = 0;
        self.chunks = false;
        open
    }

    /// TLS started after STARTTLS: everything learned before is forgotten (RFC 3207 §4.2),
    /// and the transaction, if any, is dropped (true if one was open).
    pub fn tls_started(&mut self) -> bool {
        self.tls = true;
        self.helo_seen = false;
        self.offered = Capabilities::default();
        self.reset_transaction()
    }
}

/// A refusal counted as a protocol error, with nothing for the log.
fn refuse(reply: Reply) -> Step {
    Step::Refuse { reply, note: None }
}

/// The SIZE announced with MAIL (0 when absent or unreadable).
pub fn size_hint(m: &MailFrom) -> u64 {
    m.params
        .iter()
        .find(|p| p.keyword == "SIZE")
        .and_then(|p| p.value.as_deref())
        .and_then(|v| v.parse::<u64>().ok())
        .unwrap_or(0)
}

#[cfg(test)]
mod tests;
