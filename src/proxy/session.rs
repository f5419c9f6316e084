//! One client session: the command loop that parses every client byte, asks the policy,
//! and relays one command at a time to its own upstream session.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;
use tokio_rustls::TlsAcceptor;
use tokio_util::sync::CancellationToken;
use tracing::{debug, error, info, warn};

use crate::config::{ClientIdentity, Config, TlsMode};
use crate::exchange::{Exchange, Takes};
use crate::logs::text::IpText;
use crate::policy::{Facts, Policy, Stage};
use crate::smtp::command::parse_command;
use crate::smtp::dialogue::{replies, Dialogue, Settings, Step};
use crate::smtp::line::{LineEvent, LineFramer};
use crate::smtp::reply::Reply;

use super::client::{ClientConn, ReadEnd, Wait};
use super::envelope::Envelope;
use super::identity::{refusal_reply, refused_identity, xclient_offer_problem, IdentityProblem};
use super::names::{NameLookup, NameResolver};
use super::stream::Stream;
use super::upstream::{Upstream, UpstreamError, UpstreamSettings};

/// Everything sessions share for one config generation.
pub struct Shared {
    /// The generation in force: the config and what was compiled from it.
    pub generation: Arc<crate::generation::Generation>,
    /// How to reach upstream.
    pub upstream: UpstreamSettings,
    /// floodgate's TLS server side, when `[tls]` is configured.
    pub tls: Option<TlsAcceptor>,
    /// The policy asked at every stage.
    pub policy: Arc<dyn Policy>,
    /// The metrics registry (the same across reloads).
    pub metrics: Arc<crate::metrics::Metrics>,
    /// Client name lookups, cached.
    pub names: Arc<NameResolver>,
    /// The hold spool, when `[hold]` is configured.
    pub hold: Option<Arc<crate::hold::Spool>>,
    /// Postfix's hold queue and the ledger of what floodgate held there, when `[postfix]`
    /// is configured (the same ledger across reloads).
    pub postfix: Option<Arc<crate::hold::postfix::PostfixHold>>,
    /// How to reach the second smart host, `[upstream.high_risk]`, when configured.
    pub high_risk: Option<UpstreamSettings>,
    /// Paced messages waiting for their release (the same book across reloads).
    pub paced: Arc<crate::hold::pace::PaceBook>,
}

impl Shared {
    /// The validated config in force (the generation's).
    pub fn config(&self) -> &Arc<Config> {
        &self.generation.config
    }
}

/// The listener a session came in on.
#[derive(Clone, Debug)]
pub struct ListenerInfo {
    /// Its name.
    pub name: Arc<str>,
    /// Its TLS mode.
    pub tls: TlsMode,
    /// MAIL only once the session is TLS.
    pub require_tls: bool,
    /// MAIL only after a successful AUTH.
    pub require_auth: bool,
}

/// What the command loop does once a command is done. Where a step may end a command
/// early (the policy answered it, the session is over), it hands back `Option<Flow>`:
/// `None` to go on with the command, `Some(flow)` for what the loop does instead.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Flow {
    /// Read the next command.
    Next,
    /// End the session (replies already queued).
    Close,
}

/// Counters for the session's log line.
#[derive(Default, Debug)]
pub(super) struct Tally {
    pub commands: u64,
    pub messages: u64,
    pub recipients: u64,
    pub bytes: u64,
    pub refused: u64,
}

/// The client's side of a session: its connection, where it came from, and its names.
pub(super) struct ClientSide {
    /// The connection: its input buffer and the replies queued for it.
    pub conn: ClientConn,
    /// Cuts the client's input into command lines.
    pub framer: LineFramer,
    /// The listener it came in on.
    pub listener: ListenerInfo,
    /// Its address.
    pub peer: SocketAddr,
    /// Its address as its log lines write it.
    pub ip_text: IpText,
    /// The address it connected to, when upstream needs it (PROXY v2, XCLIENT).
    pub local: Option<SocketAddr>,
    /// Its names, looked up from the start of the session.
    pub names: NameLookup,
}

/// The transaction under way: what floodgate keeps of it besides the exchange's facts.
#[derive(Default)]
pub(super) struct Transaction {
    /// The message of a BDAT transaction, from its first chunk to its LAST.
    pub chunked: Option<crate::smtp::ChunkedBody>,
    /// floodgate's Received line for the message being taken, made when it starts.
    pub received: Option<Vec<u8>>,
    /// With a hold spool: the transaction's MAIL and accepted RCPT arguments as relayed.
    pub envelope: Envelope,
}

impl Transaction {
    /// Forgets the transaction's message, Received line and envelope.
    pub(super) fn clear(&mut self) {
        self.chunked = None;
        self.received = None;
        self.envelope.clear();
    }
}

/// The state of one client session.
pub struct Session {
    /// What every session of the config generation shares.
    pub(super) shared: Arc<Shared>,
    /// The client: its connection, where it came from, its names.
    pub(super) client: ClientSide,
    /// The upstream session (present for the whole command loop).
    pub(super) upstream: Option<Upstream>,
    /// The session's choreography: its policy and the facts it is asked about.
    pub(super) exchange: Exchange,
    /// The protocol state and its sequencing rules.
    pub(super) dialogue: Dialogue,
    /// What floodgate keeps of the transaction under way.
    pub(super) transaction: Transaction,
    /// Fires when the session must end now (fast stop, the end of the shutdown grace).
    pub(super) stop: CancellationToken,
    /// Counters for the session's log line.
    pub(super) tally: Tally,
}

impl Session {
    /// Runs a session to its end. `stream` is already through any PROXY header and, on an
    /// implicit-TLS listener, the TLS handshake. `stop` fires when sessions must end now
    /// (fast stop, or the end of the shutdown grace period).
    pub async fn run(
        shared: Arc<Shared>,
        listener: ListenerInfo,
        stream: Stream,
        peer: SocketAddr,
        local: Option<SocketAddr>,
        stop: CancellationToken,
    ) {
        let started = Instant::now();
        let cfg = shared.config().clone();
        let deadline = started + cfg.timeouts.session.0;
        let tls = stream.is_tls();
        let dialogue = Dialogue::new(dialogue_settings(&shared, &listener), tls);
        let facts = Facts {
            client_ip: Some(peer.ip()),
            client_port: peer.port(),
            listener: listener.name.clone(),
            tls,
            ..Facts::default()
        };
        let mut s = Session {
            client: ClientSide {
                conn: ClientConn::new(stream, deadline),
                framer: LineFramer::new(cfg.smtp.max_command_line),
                listener,
                peer,
                ip_text: IpText::new(peer.ip()),
                local,
                names: NameLookup::default(),
            },
            upstream: None,
            exchange: Exchange::new(shared.policy.session(), facts).taking(Takes {
                hold: shared.hold.is_some(),
                pace: shared.hold.is_some(),
                reroute: shared.high_risk.is_some(),
            }),
            shared,
            dialogue,
            transaction: Transaction::default(),
            stop,
            tally: Tally::default(),
        };
        let end = s.serve().await;
        s.exchange.ended(s.dialogue.in_transaction());
        s.client.conn.close().await;
        if let Some(up) = s.upstream.take() {
            up.quit().await;
        }
        info!(
            client = %s.client.ip_text,
            port = s.client.peer.port(),
            listener = %s.client.listener.name,
            tls = s.client.conn.tls_info().unwrap_or("no"),
            user = s.exchange.facts().user.as_deref().unwrap_or(""),
            helo = s.exchange.facts().helo.as_deref().unwrap_or(""),
            commands = s.tally.commands,
            messages = s.tally.messages,
            recipients = s.tally.recipients,
            bytes = s.tally.bytes,
            refused = s.tally.refused,
            ms = started.elapsed().as_millis() as u64,
            end = end,
            "session"
        );
    }

    /// The session from the connect stage to its end; what ended it, for the log line.
    async fn serve(&mut self) -> &'static str {
        if self.judge(Stage::Connect).await.is_some() {
            // A refusal at connect ends the session: there is nothing to go on with.
            return "refused at connect";
        }
        self.start_name_lookup();
        let greeting = match self.reach_upstream().await {
            Ok(greeting) => greeting,
            Err(end) => return end,
        };
        if greeting.code == 220 && self.xclient_unusable() {
            return "identity refused";
        }
        let result = match greeting.class() {
            _ if greeting.code == 220 => {
                self.client.conn.queue(&greeting);
                self.command_loop().await
            }
            4 | 5 => {
                self.client.conn.queue(&greeting);
                return self.refused_at_greeting(&greeting).await;
            }
            _ => Err(UpstreamError::Protocol(format!(
                "greeting with reply code {}",
                greeting.code
            ))),
        };
        match result {
            Ok(end) => end,
            Err(e) => {
                self.shared.metrics.upstream_failed(e.label());
                warn!(client = %self.client.ip_text, error = %e, "upstream failed");
                let r = e.client_reply(&self.shared.config().server.hostname);
                self.client.conn.queue(&r);
                // The upstream session is unusable; do not QUIT it politely.
                self.upstream = None;
                "upstream failed"
            }
        }
    }

    /// Connects upstream and hands back its greeting; when that fails, the client's answer
    /// is queued and what ended the session is handed back instead.
    async fn reach_upstream(&mut self) -> Result<Reply, &'static str> {
        let connected =
            Upstream::connect(&self.shared.upstream, self.client.peer, self.client.local).await;
        self.shared.metrics.upstream_connected(
            connected.as_ref().err().map(UpstreamError::label),
            self.shared.config().upstream.tls != TlsMode::None,
        );
        match connected {
            Ok((up, greeting)) => {
                self.upstream = Some(up);
                Ok(greeting)
            }
            Err(UpstreamError::Identity(p)) => {
                // Counted with the upstream outcome above.
                error!(client = %self.client.ip_text, port = self.client.peer.port(), problem = %p,
                    "upstream did not take the client's identity: refusing the client");
                self.client
                    .conn
                    .queue(&refusal_reply(&self.shared.config().server.hostname));
                Err("identity refused")
            }
            Err(e) => {
                warn!(client = %self.client.ip_text, error = %e, "upstream unavailable");
                let r = e.client_reply(&self.shared.config().server.hostname);
                self.client.conn.queue(&r);
                Err("upstream unavailable")
            }
        }
    }

    /// With XCLIENT identity, whether upstream's offer rules XCLIENT out and the client is
    /// refused for it (refusal queued). Decided once, before the client is greeted.
    fn xclient_unusable(&mut self) -> bool {
        if self.shared.upstream.identity() != ClientIdentity::Xclient {
            return false;
        }
        let offered = &self
            .upstream
            .as_ref()
            .map(|u| u.caps.xclient.clone())
            .unwrap_or_default();
        let Some(p) = xclient_offer_problem(offered) else {
            return false;
        };
        // Nothing to send XCLIENT to: it is never sent in this session.
        self.dialogue.xclient_settled();
        self.identity_refused(p).is_some()
    }

    /// Upstream refused the session in its greeting; that reply is already queued for the
    /// client, and upstream's session is ended at once. A 4xx (421: service not available)
    /// closes the session, as 421 says it will (RFC 5321 §3.8). A 5xx (554: no SMTP service
    /// here) keeps it until QUIT, answering 503 to everything else: RFC 5321 §3.1 says a
    /// server that greets with 554 MUST wait for QUIT and SHOULD answer 503 meanwhile, and
    /// a client that is closed on instead may retry at once. The wait is bounded by the
    /// command timeout and `[server] max_errors`.
    async fn refused_at_greeting(&mut self, greeting: &Reply) -> &'static str {
        warn!(
            client = %self.client.ip_text,
            code = greeting.code,
            upstream = greeting.text().as_str(),
            "upstream refused the session in its greeting; its reply is passed on"
        );
        if let Some(up) = self.upstream.take() {
            up.quit().await;
        }
        if greeting.class() != 5 {
            return "upstream greeting refused";
        }
        self.dialogue.refuse_session();
        loop {
            let step = match self.next_event().await {
                Err(end) => return end,
                Ok(LineEvent::Line(l)) => match parse_command(&l) {
                    Ok(cmd) => self.dialogue.on_command(&cmd),
                    Err(_) => self.dialogue.on_bad_line(replies::session_refused()),
                },
                Ok(_) => self.dialogue.on_bad_line(replies::session_refused()),
            };
            let flow = match step {
                Step::Close(reply) => {
                    self.client.conn.queue(&reply);
                    return "quit";
                }
                Step::Refuse { reply, .. } => self.refuse_with(&reply),
                // A refused session answers nothing else.
                _ => Flow::Next,
            };
            if flow == Flow::Close {
                return "too many errors";
            }
        }
    }

    async fn command_loop(&mut self) -> Result<&'static str, UpstreamError> {
        loop {
            let event = match self.next_event().await {
                Ok(e) => e,
                Err(end) => return Ok(end),
            };
            let line = match event {
                LineEvent::Line(l) => l,
                LineEvent::TooLong => {
                    if self.refuse_with(&replies::line_too_long()) == Flow::Close {
                        return Ok("too many errors");
                    }
                    continue;
                }
                LineEvent::BareLineEnding => {
                    if self.refuse_with(&replies::bare_line_ending()) == Flow::Close {
                        return Ok("too many errors");
                    }
                    continue;
                }
            };
            self.tally.commands += 1;
            self.shared.metrics.commands.inc();
            let cmd = match parse_command(&line) {
                Ok(c) => c,
                Err(e) => {
                    debug!(client = %self.client.ip_text, error = %e, "bad command");
                    if self.refuse_with(&e.reply()) == Flow::Close {
                        return Ok("too many errors");
                    }
                    continue;
                }
            };
            self.exchange.facts_mut().command = Some(cmd.verb());
            match self.judge(Stage::Command).await {
                None => {}
                Some(Flow::Next) => continue,
                Some(Flow::Close) => return Ok("closed by policy"),
            }
            if self.dispatch(cmd).await? == Flow::Close {
                return Ok("closed");
            }
        }
    }

    /// The next framed line from the client, reading as needed.
    /// `[timeouts] command` bounds the wait for the whole line, not each read: a client
    /// trickling one byte at a time must not hold the session open forever.
    pub(super) async fn next_event(&mut self) -> Result<LineEvent, &'static str> {
        let command = self.shared.config().timeouts.command.0;
        let mut wait = Wait::new(command, command);
        loop {
            if let Some(e) = self.client.framer.next_line(&mut self.client.conn.rbuf) {
                return Ok(e);
            }
            if let Err(end) = self.client.conn.fill(&mut wait, &self.stop).await {
                return Err(self.read_end(end));
            }
        }
    }

    /// Starts the client's name lookup when something will use it (XCLIENT, the Received
    /// line) and lookups are on; it runs while upstream is reached and the client greeted.
    fn start_name_lookup(&mut self) {
        let cfg = &self.shared.config();
        let used = cfg.upstream.client_identity == ClientIdentity::Xclient || cfg.smtp.add_received;
        if used && cfg.server.resolve_client_names {
            self.client
                .names
                .start(&self.shared.names, self.client.peer.ip());
        }
    }

    /// Handles an identity upstream did not take ([`refused_identity`]): `None` to go on
    /// with floodgate's own address, `Some(Close)` once the refusal is queued.
    pub(super) fn identity_refused(&mut self, problem: IdentityProblem) -> Option<Flow> {
        let client = &self.client;
        let refusal = refused_identity(
            &problem,
            self.shared.config(),
            &self.shared.metrics,
            &client.ip_text,
            client.peer.port(),
        )?;
        self.client.conn.queue(&refusal);
        Some(Flow::Close)
    }

    /// Queues the reply that goes with an end of input and names it for the log.
    pub(super) fn read_end(&mut self, end: ReadEnd) -> &'static str {
        let host = &self.shared.config().server.hostname;
        match end {
            ReadEnd::Eof => "client closed",
            ReadEnd::Io(_) => "client connection error",
            ReadEnd::Idle => {
                self.client.conn.queue(&replies::idle_timeout(host));
                "idle timeout"
            }
            ReadEnd::SessionDeadline => {
                self.client.conn.queue(&replies::session_too_long(host));
                "session timeout"
            }
            ReadEnd::Shutdown => {
                self.client.conn.queue(&replies::shutting_down(host));
                "shutdown"
            }
        }
    }

    /// Queues a refusal and counts it as a protocol error; past the cap queues a 421 and
    /// says to close.
    pub(super) fn refuse_with(&mut self, reply: &Reply) -> Flow {
        self.client.conn.queue(reply);
        self.error_flow()
    }

    /// After a client error: go on, or (past `[server] max_errors`, 421 queued) close.
    pub(super) fn error_flow(&mut self) -> Flow {
        if self.dialogue.count_error() {
            let host = &self.shared.config().server.hostname;
            self.client.conn.queue(&replies::too_many_errors(host));
            return Flow::Close;
        }
        Flow::Next
    }

    /// Waits `d` (replies already queued go out first). False if the client went away or
    /// floodgate is stopping; the caller then queues what is still owed and ends the session
    /// (with [`Session::stopped`]).
    pub(super) async fn pause(&mut self, d: Duration) -> bool {
        if self.client.conn.flush().await.is_err() {
            return false;
        }
        tokio::select! {
            _ = tokio::time::sleep(d) => true,
            _ = self.stop.cancelled() => {
                debug!("stopped during a delay");
                false
            }
        }
    }

    /// Queues the 421 of a session ended by a shutdown while it waited.
    pub(super) fn stopped(&mut self) {
        if self.stop.is_cancelled() {
            self.read_end(ReadEnd::Shutdown);
        }
    }

    /// The upstream connection (present for the whole command loop).
    pub(super) fn up(&mut self) -> Result<&mut Upstream, UpstreamError> {
        self.upstream
            .as_mut()
            .ok_or_else(|| UpstreamError::Protocol("no upstream session".into()))
    }

    /// Queues a reply relayed from upstream, then hands it back to the reply parser.
    pub(super) fn answer(&mut self, reply: Reply) {
        self.client.conn.queue(&reply);
        if let Some(up) = self.upstream.as_mut() {
            up.recycle(reply);
        }
    }
}

/// The dialogue's settings for a session on `listener`.
fn dialogue_settings(shared: &Shared, listener: &ListenerInfo) -> Settings {
    let cfg = &shared.config();
    Settings {
        max_recipients: cfg.smtp.max_recipients,
        max_message_size: cfg.smtp.max_message_size,
        max_errors: cfg.server.max_errors,
        require_tls: listener.require_tls,
        require_auth: listener.require_auth,
        starttls: listener.tls == TlsMode::Starttls && shared.tls.is_some(),
        auth_without_tls: cfg.tls.as_ref().is_some_and(|t| t.auth_without_tls),
        chunking: cfg.smtp.chunking,
        xclient: shared.upstream.identity() == ClientIdentity::Xclient,
    }
}
