//! The upstream side of a session: connect, greeting, STARTTLS or implicit TLS, the real
//! client's identity (XCLIENT or PROXY v2), then one command at a time.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::BytesMut;
use rustls::pki_types::ServerName;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use tokio::time::{timeout, Instant};

use crate::config::{ClientIdentity, Config, TlsMode};
use crate::metrics::UpstreamFailure;
use crate::smtp::command::Command;
use crate::smtp::ehlo::{parse_ehlo, Capabilities};
use crate::smtp::proxy_header::encode_proxy_v2;
use crate::smtp::reply::{Reply, ReplyParser};
use crate::smtp::xclient::{xclient_command, XclientAttrs};

use super::deadline::{Deadline, WaitError};
use super::identity::{greeting_problem, helo_problem, proxy_probe_problem, IdentityProblem};
use super::stream::Stream;

/// How to reach upstream, prepared once per config.
pub struct UpstreamSettings {
    address: String,
    /// `address` when it is an IP address and port: connected to without parsing it again
    /// per connection. A host name is looked up at each connection.
    literal: Option<std::net::SocketAddr>,
    tls: TlsMode,
    identity: ClientIdentity,
    server_name: ServerName<'static>,
    tls_config: Option<Arc<rustls::ClientConfig>>,
    connect_timeout: Duration,
    reply_timeout: Duration,
    /// `[upstream] chunking`: messages go as one `BDAT n LAST` where CHUNKING is offered.
    chunking: bool,
    /// `[upstream] pipelining`: a MAIL goes with the command after it where PIPELINING is
    /// offered.
    pipelining: bool,
    /// `[upstream] always_ehlo`: a client's HELO goes upstream as EHLO.
    always_ehlo: bool,
    /// floodgate's own EHLO name there, and what the connections so far taught about this
    /// upstream (XCLIENT identity only).
    learned: Arc<Learned>,
}

/// What floodgate's own EHLO to an upstream answered, kept for its next connections: with
/// `client_identity = "xclient"` each connection then sends XCLIENT right after the
/// greeting instead of an EHLO first, saving a round trip and an EHLO on the smart host
/// per client connection (Postfix takes XCLIENT at any time outside a transaction). An
/// upstream that refuses an XCLIENT before EHLO (Exim) is answered with EHLO and XCLIENT
/// again, and gets EHLO first from then on.
#[derive(Debug)]
struct Learned {
    /// The name of floodgate's own EHLO.
    helo_name: String,
    state: std::sync::Mutex<LearnedState>,
}

#[derive(Debug, Default)]
struct LearnedState {
    /// The capabilities of floodgate's last EHLO there.
    caps: Option<Capabilities>,
    /// Upstream refused an XCLIENT that came before floodgate's EHLO.
    ehlo_first: bool,
}

impl Learned {
    fn state(&self) -> std::sync::MutexGuard<'_, LearnedState> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The capabilities to send XCLIENT on without an EHLO first, if that is known to work.
    fn caps_for_xclient(&self) -> Option<Capabilities> {
        let s = self.state();
        if s.ehlo_first {
            return None;
        }
        s.caps.clone().filter(|c| !c.xclient.is_empty())
    }

    fn remember(&self, caps: &Capabilities) {
        self.state().caps = Some(caps.clone());
    }
}

/// What went wrong with upstream; each maps to the reply the client gets.
#[derive(Debug, thiserror::Error)]
pub enum UpstreamError {
    /// No TCP connection (refused, unreachable, name not found).
    #[error("cannot connect to upstream {address}: {source}")]
    Connect {
        /// The configured address.
        address: String,
        /// Why.
        source: std::io::Error,
    },
    /// Upstream did not answer in time.
    #[error("upstream timed out {0}")]
    Timeout(&'static str),
    /// The connection broke or closed.
    #[error("upstream connection lost: {0}")]
    Lost(std::io::Error),
    /// Upstream answered something that is not SMTP.
    #[error("upstream protocol error: {0}")]
    Protocol(String),
    /// TLS towards upstream failed.
    #[error("upstream TLS failed: {0}")]
    Tls(String),
    /// Upstream did not take the client's identity (a PROXY header it did not expect, a
    /// greeting that shows it waited for one).
    #[error("{0}")]
    Identity(IdentityProblem),
}

impl UpstreamError {
    /// How the metrics count this failure: by kind in `floodgate_upstream_errors_total`, or
    /// an identity problem by its reason in `floodgate_upstream_identity_refused_total`.
    pub fn label(&self) -> UpstreamFailure {
        UpstreamFailure::Error(match self {
            UpstreamError::Connect { .. } => "connect",
            UpstreamError::Timeout(_) => "timeout",
            UpstreamError::Lost(_) => "lost",
            UpstreamError::Protocol(_) => "protocol",
            UpstreamError::Tls(_) => "tls",
            UpstreamError::Identity(p) => return UpstreamFailure::Identity(p.kind()),
        })
    }

    /// The reply for the client: 421 with an enhanced code; the session then ends.
    pub fn client_reply(&self, hostname: &str) -> Reply {
        let text = match self {
            UpstreamError::Connect { .. } | UpstreamError::Tls(_) => {
                format!("4.4.1 {hostname} Service not available, try again later")
            }
            UpstreamError::Timeout(_) => {
                format!("4.4.2 {hostname} Upstream did not answer, try again later")
            }
            UpstreamError::Lost(_) | UpstreamError::Protocol(_) => {
                format!("4.4.2 {hostname} Upstream connection lost, try again later")
            }
            UpstreamError::Identity(_) => return super::identity::refusal_reply(hostname),
        };
        Reply::new(421, text)
    }
}

impl UpstreamSettings {
    /// Prepares the upstream side from a validated config.
    pub fn from_config(config: &Config) -> Result<Self, crate::tls::TlsError> {
        Self::for_host(config, &config.upstream, "upstream")
    }

    /// Prepares the side of the second smart host, `[upstream.high_risk]`, when configured.
    pub fn high_risk(config: &Config) -> Result<Option<Self>, crate::tls::TlsError> {
        match &config.upstream.high_risk {
            Some(h) => Self::for_host(config, h, "upstream.high_risk").map(Some),
            None => Ok(None),
        }
    }

    /// Prepares the side of one smart host; `section` names it in errors.
    fn for_host(
        config: &Config,
        host: &crate::config::UpstreamConfig,
        section: &str,
    ) -> Result<Self, crate::tls::TlsError> {
        let tls_config = match host.tls {
            TlsMode::None => None,
            _ => Some(crate::tls::client_config(host.ca_file.as_deref())?),
        };
        let name = crate::config::server_name_of(host);
        let server_name =
            ServerName::try_from(name.clone()).map_err(|_| crate::tls::TlsError::Pem {
                path: config.path.clone(),
                what: format!("{section} server_name {name:?} is not a valid TLS name"),
            })?;
        let helo_name = host
            .helo_name
            .as_deref()
            .unwrap_or_else(|| config.helo_name());
        Ok(UpstreamSettings {
            address: host.address.get_ref().clone(),
            literal: host.address.get_ref().parse().ok(),
            tls: host.tls,
            identity: host.client_identity,
            server_name,
            tls_config,
            connect_timeout: config.timeouts.upstream_connect.0,
            reply_timeout: config.timeouts.upstream_reply.0,
            chunking: host.chunking,
            pipelining: host.pipelining,
            always_ehlo: host.always_ehlo,
            learned: Arc::new(Learned {
                helo_name: helo_name.to_string(),
                state: std::sync::Mutex::new(LearnedState::default()),
            }),
        })
    }

    /// The configured address (`host:port`).
    pub fn address(&self) -> &str {
        &self.address
    }

    /// How the real client is passed on.
    pub fn identity(&self) -> ClientIdentity {
        self.identity
    }

    /// Whether messages go as one `BDAT n LAST` where upstream offers CHUNKING.
    pub fn chunking(&self) -> bool {
        self.chunking
    }

    /// Whether a MAIL waits to go upstream with the command after it, where upstream
    /// offers PIPELINING.
    pub fn pipelining(&self) -> bool {
        self.pipelining
    }

    /// Whether a client's HELO goes upstream as EHLO.
    pub fn always_ehlo(&self) -> bool {
        self.always_ehlo
    }

    /// The name floodgate gives in its own EHLO.
    pub fn helo_name(&self) -> &str {
        &self.learned.helo_name
    }
}

/// The longest floodgate waits for upstream's 221 (and TLS close) when leaving.
const QUIT_WAIT: Duration = Duration::from_secs(2);

/// One upstream SMTP connection, driven one command at a time.
pub struct Upstream {
    stream: Stream,
    rbuf: BytesMut,
    /// Output buffer reused for every relayed command.
    wbuf: Vec<u8>,
    /// The one timer of every wait on upstream.
    timer: Deadline,
    parser: ReplyParser,
    reply_timeout: Duration,
    /// What upstream advertised in its last EHLO reply.
    pub caps: Capabilities,
    /// `caps` come from an earlier connection's EHLO: no EHLO was sent on this one yet.
    caps_learned: bool,
    /// Where this connection's EHLO answers are kept for the next connections.
    learned: Option<Arc<Learned>>,
    /// A MAIL, in wire form, waiting to go upstream in one write with the next command.
    pipelined_mail: Vec<u8>,
    /// Upstream's answer to the pipelined MAIL, read with the answer to the command it went
    /// with.
    mail_answer: Option<Reply>,
}

impl Upstream {
    /// Connects, reads the greeting and prepares the session (TLS, identity).
    /// Returns the connection and upstream's greeting.
    pub async fn connect(
        settings: &UpstreamSettings,
        client: SocketAddr,
        local: Option<SocketAddr>,
    ) -> Result<(Upstream, Reply), UpstreamError> {
        Upstream::open(settings, Some((client, local))).await
    }

    /// Connects as [`Upstream::connect`] for mail floodgate sends on its own behalf (the
    /// notices of `notify_user`): with `client_identity = "proxy-v2"` the header names this
    /// connection's own endpoints (floodgate is the client); XCLIENT is for the caller to
    /// send or not.
    pub async fn connect_own(
        settings: &UpstreamSettings,
    ) -> Result<(Upstream, Reply), UpstreamError> {
        Upstream::open(settings, None).await
    }

    /// Opens a session: the connection, upstream's greeting, then (on a 220) floodgate's
    /// first command and STARTTLS as configured.
    async fn open(
        settings: &UpstreamSettings,
        client: Option<(SocketAddr, Option<SocketAddr>)>,
    ) -> Result<(Upstream, Reply), UpstreamError> {
        let mut up = Upstream::reach(settings, client).await?;
        let greeting = up.read_reply().await?;
        if let Some(p) = greeting_problem(&greeting) {
            return Err(UpstreamError::Identity(p));
        }
        if greeting.code != 220 {
            return Ok((up, greeting));
        }
        up.introduce(settings).await?;
        if settings.tls == TlsMode::Starttls {
            up.starttls(settings).await?;
        }
        Ok((up, greeting))
    }

    /// The connection up to upstream's greeting: TCP, the PROXY header for
    /// `client_identity = "proxy-v2"` (naming `client`, or this connection's own endpoints
    /// without one), and the handshake of implicit TLS.
    async fn reach(
        settings: &UpstreamSettings,
        client: Option<(SocketAddr, Option<SocketAddr>)>,
    ) -> Result<Upstream, UpstreamError> {
        let tcp = timeout(settings.connect_timeout, connect_tcp(settings))
            .await
            .map_err(|_| UpstreamError::Timeout("connecting"))??;
        let _ = tcp.set_nodelay(true);
        // The PROXY header's source and destination: the client's, or this connection's.
        let (source, destination) = match client {
            Some((c, l)) => (c, l.unwrap_or(c)),
            None => (
                tcp.local_addr().map_err(UpstreamError::Lost)?,
                tcp.peer_addr().map_err(UpstreamError::Lost)?,
            ),
        };
        let mut up = Upstream::over(Stream::Plain(tcp), settings.reply_timeout);
        if settings.identity == ClientIdentity::ProxyV2 {
            let header = encode_proxy_v2(source, destination);
            up.stream
                .write_all(&header)
                .await
                .map_err(UpstreamError::Lost)?;
        }
        if settings.tls == TlsMode::Implicit {
            up.encrypt(settings).await?;
        }
        Ok(up)
    }

    /// A session over `stream` that has read nothing yet.
    fn over(stream: Stream, reply_timeout: Duration) -> Upstream {
        Upstream {
            stream,
            rbuf: BytesMut::with_capacity(4096),
            wbuf: Vec::with_capacity(256),
            timer: Deadline::new(),
            parser: ReplyParser::new(),
            reply_timeout,
            caps: Capabilities::default(),
            caps_learned: false,
            learned: None,
            pipelined_mail: Vec::new(),
            mail_answer: None,
        }
    }

    /// floodgate's first command after a 220 greeting: with a PROXY header, a probe (EHLO
    /// when one is needed, else NOOP) that shows upstream read the header as one; for
    /// XCLIENT without STARTTLS, EHLO only when no earlier connection taught upstream's
    /// extensions; else EHLO when STARTTLS or XCLIENT needs the extensions.
    async fn introduce(&mut self, settings: &UpstreamSettings) -> Result<(), UpstreamError> {
        let needs_ehlo =
            settings.tls == TlsMode::Starttls || settings.identity == ClientIdentity::Xclient;
        if settings.identity == ClientIdentity::ProxyV2 {
            // The first reply after the greeting must answer floodgate's own command: an
            // upstream that read the header as commands answers those first.
            let probe = if needs_ehlo {
                format!("EHLO {}\r\n", settings.helo_name())
            } else {
                "NOOP\r\n".to_string()
            };
            let r = self.command(probe.as_bytes()).await?;
            if let Some(p) = proxy_probe_problem(&r) {
                return Err(UpstreamError::Identity(p));
            }
            if needs_ehlo {
                self.ehlo_reply(&r)?;
            }
        } else if settings.identity == ClientIdentity::Xclient && settings.tls != TlsMode::Starttls
        {
            self.learned = Some(settings.learned.clone());
            match settings.learned.caps_for_xclient() {
                Some(caps) => {
                    self.caps = caps;
                    self.caps_learned = true;
                }
                None => {
                    self.ehlo(settings.helo_name()).await?;
                    settings.learned.remember(&self.caps);
                }
            }
        } else if needs_ehlo {
            self.ehlo(settings.helo_name()).await?;
        }
        Ok(())
    }

    /// STARTTLS where upstream offers it, the handshake, and EHLO again under TLS.
    async fn starttls(&mut self, settings: &UpstreamSettings) -> Result<(), UpstreamError> {
        if !self.caps.starttls {
            return Err(UpstreamError::Tls(
                "upstream does not offer STARTTLS".into(),
            ));
        }
        let r = self.command(b"STARTTLS\r\n").await?;
        if r.code != 220 {
            return Err(UpstreamError::Tls(format!(
                "upstream refused STARTTLS: {}",
                r.code
            )));
        }
        if !self.rbuf.is_empty() {
            // Response injection: bytes after the 220 that were sent in the clear.
            return Err(UpstreamError::Protocol(
                "upstream sent data after its STARTTLS reply".into(),
            ));
        }
        self.encrypt(settings).await?;
        self.ehlo(settings.helo_name()).await
    }

    /// Runs the TLS handshake on the plain connection, which TLS then replaces in place.
    async fn encrypt(&mut self, settings: &UpstreamSettings) -> Result<(), UpstreamError> {
        let Some(tcp) = self.stream.take_plain() else {
            return Err(UpstreamError::Tls("already encrypted".into()));
        };
        self.stream = timeout(settings.connect_timeout, tls_connect(settings, tcp))
            .await
            .map_err(|_| UpstreamError::Timeout("in the TLS handshake"))??;
        Ok(())
    }

    async fn ehlo(&mut self, name: &str) -> Result<(), UpstreamError> {
        let r = self.command(format!("EHLO {name}\r\n").as_bytes()).await?;
        self.ehlo_reply(&r)
    }

    /// Takes upstream's answer to floodgate's EHLO: its extensions, or an error.
    fn ehlo_reply(&mut self, r: &Reply) -> Result<(), UpstreamError> {
        if let Some(p) = helo_problem(r) {
            return Err(UpstreamError::Identity(p));
        }
        if r.code != 250 {
            return Err(UpstreamError::Protocol(format!(
                "upstream refused floodgate's EHLO with {}",
                r.code
            )));
        }
        self.caps = parse_ehlo(r);
        Ok(())
    }

    /// Sends XCLIENT with what upstream accepts; returns upstream's reply (220 on success,
    /// after which upstream is back at its greeting stage).
    pub async fn xclient(
        &mut self,
        attrs: &XclientAttrs<'_>,
    ) -> Result<Option<Reply>, UpstreamError> {
        if self.caps.xclient.is_empty() {
            return Ok(None);
        }
        let line = xclient_command(attrs, &self.caps.xclient);
        let r = self.command(&line).await?;
        let blind = std::mem::take(&mut self.caps_learned);
        // Sent before any EHLO on this connection, on what an earlier one learned, and
        // refused as out of order or unknown (500, 502, 503; Exim answers 550 to an XCLIENT
        // it did not advertise in an EHLO): EHLO, then XCLIENT again with what that EHLO
        // lists. A refused attribute value (501) or a temporary error is upstream's answer.
        if !blind || !matches!(r.code, 500 | 502 | 503 | 550) {
            return Ok(Some(r));
        }
        let Some(learned) = self.learned.clone() else {
            return Ok(Some(r));
        };
        let before = std::mem::take(&mut self.caps.xclient);
        self.recycle(r);
        self.ehlo(&learned.helo_name).await?;
        learned.remember(&self.caps);
        if self.caps.xclient == before {
            // The same offer: it was the order upstream refused (Exim wants EHLO first).
            learned.state().ehlo_first = true;
        }
        if self.caps.xclient.is_empty() {
            return Ok(None);
        }
        let line = xclient_command(attrs, &self.caps.xclient);
        self.command(&line).await.map(Some)
    }

    /// Writes bytes and flushes.
    pub async fn send(&mut self, bytes: &[u8]) -> Result<(), UpstreamError> {
        self.send_parts(&mut [std::io::IoSlice::new(bytes)]).await
    }

    /// Writes `parts` one after the other, without joining them first, and flushes.
    /// A pipelined MAIL not sent by [`relay`](Self::relay) is dropped: whatever else goes
    /// upstream first ends the transaction it opened.
    pub async fn send_parts(
        &mut self,
        parts: &mut [std::io::IoSlice<'_>],
    ) -> Result<(), UpstreamError> {
        self.pipelined_mail.clear();
        self.timer
            .write_all_parts(&mut self.stream, parts, self.reply_timeout)
            .await
            .map_err(|e| match e {
                WaitError::TimedOut => UpstreamError::Timeout("accepting data"),
                WaitError::Io(e) => UpstreamError::Lost(e),
            })
    }

    /// Greets upstream as `name` for a client that said EHLO (`client_ehlo`) or HELO: with
    /// EHLO, also for a HELO client when `always_ehlo` (`[upstream] always_ehlo`), and with
    /// HELO for a HELO client otherwise or when upstream refuses that EHLO (5xx; one that does
    /// not know it answers 500 or 502, RFC 5321 §4.1.4), so the client gets the answer its
    /// HELO would have had. Whether the answer is to EHLO, and the answer.
    pub async fn greet(
        &mut self,
        name: &str,
        client_ehlo: bool,
        always_ehlo: bool,
    ) -> Result<(bool, Reply), UpstreamError> {
        if client_ehlo || always_ehlo {
            let r = self.command(&hello_line("EHLO", name)).await?;
            if client_ehlo || !r.is_permanent() {
                return Ok((true, r));
            }
            self.recycle(r);
        }
        let r = self.command(&hello_line("HELO", name)).await?;
        Ok((false, r))
    }

    /// Writes one command (already in wire form) and reads the whole reply.
    pub async fn command(&mut self, wire: &[u8]) -> Result<Reply, UpstreamError> {
        self.send(wire).await?;
        self.read_reply().await
    }

    /// Relays one parsed client command in its canonical wire form and reads the reply.
    ///
    /// A pipelined MAIL goes first, in the same write, when `cmd` may follow it in a group
    /// (RCPT, NOOP, VRFY, EXPN: RFC 2920 §3.1); its answer is read first and kept for
    /// [`take_mail_answer`](Self::take_mail_answer). Any other command ends the transaction the MAIL
    /// opened (RSET, HELO, EHLO), and the MAIL is dropped unsent.
    pub async fn relay(&mut self, cmd: &Command) -> Result<Reply, UpstreamError> {
        let mut wire = std::mem::take(&mut self.wbuf);
        wire.clear();
        let with_mail = !self.pipelined_mail.is_empty()
            && matches!(
                cmd,
                Command::Rcpt(_) | Command::Noop | Command::Vrfy(_) | Command::Expn(_)
            );
        if with_mail {
            wire.extend_from_slice(&self.pipelined_mail);
        }
        cmd.write_wire(&mut wire);
        let sent = self.send(&wire).await;
        self.wbuf = wire;
        sent?;
        if with_mail {
            let mail = self.read_reply().await?;
            self.mail_answer = Some(mail);
        }
        self.read_reply().await
    }

    /// Keeps `mail` (a MAIL command) to go upstream in one write with the next command
    /// [`relay`](Self::relay)ed, for an upstream that offers PIPELINING.
    pub fn pipeline_mail(&mut self, mail: &Command) {
        self.pipelined_mail.clear();
        mail.write_wire(&mut self.pipelined_mail);
        self.mail_answer = None;
    }

    /// Upstream's answer to the pipelined MAIL that went with the last relayed command.
    pub fn take_mail_answer(&mut self) -> Option<Reply> {
        self.mail_answer.take()
    }

    /// Hands a reply that has been answered back to the reply parser for reuse.
    pub fn recycle(&mut self, reply: Reply) {
        self.parser.recycle(reply);
    }

    /// Reads one complete (possibly multi-line) reply.
    pub async fn read_reply(&mut self) -> Result<Reply, UpstreamError> {
        // The whole reply within the timeout, however many reads it takes.
        let mut until = None;
        loop {
            match self.parser.parse(&mut self.rbuf) {
                Ok(Some(r)) => return Ok(r),
                Ok(None) => {}
                Err(e) => return Err(UpstreamError::Protocol(e.to_string())),
            }
            let until = *until.get_or_insert_with(|| Instant::now() + self.reply_timeout);
            let n = self
                .timer
                .read_buf(&mut self.stream, &mut self.rbuf, until)
                .await
                .map_err(|e| match e {
                    WaitError::TimedOut => UpstreamError::Timeout("waiting for a reply"),
                    WaitError::Io(e) => UpstreamError::Lost(e),
                })?;
            if n == 0 {
                return Err(UpstreamError::Lost(std::io::Error::new(
                    std::io::ErrorKind::UnexpectedEof,
                    "upstream closed the connection",
                )));
            }
        }
    }

    /// Sends QUIT and closes, waiting briefly for the 221 (errors ignored: we are leaving).
    pub async fn quit(mut self) {
        // At most 2 s for the 221, on the connection's own timer.
        self.reply_timeout = self.reply_timeout.min(QUIT_WAIT);
        let _ = self.command(b"QUIT\r\n").await;
        // TLS ends with close_notify; plain TCP is closed by dropping the socket.
        if self.stream.is_tls() {
            let _ = timeout(QUIT_WAIT, self.stream.shutdown()).await;
        }
    }
}

/// `VERB name` and CRLF, the greeting command's wire form.
fn hello_line(verb: &str, name: &str) -> Vec<u8> {
    let mut line = Vec::with_capacity(verb.len() + name.len() + 3);
    line.extend_from_slice(verb.as_bytes());
    line.push(b' ');
    line.extend_from_slice(name.as_bytes());
    line.extend_from_slice(b"\r\n");
    line
}

async fn connect_tcp(settings: &UpstreamSettings) -> Result<TcpStream, UpstreamError> {
    let connected = match settings.literal {
        Some(addr) => TcpStream::connect(addr).await,
        None => TcpStream::connect(settings.address.as_str()).await,
    };
    connected.map_err(|source| UpstreamError::Connect {
        address: settings.address.clone(),
        source,
    })
}

/// The TLS handshake as a client on `tcp`, naming the configured server.
async fn tls_connect(settings: &UpstreamSettings, tcp: TcpStream) -> Result<Stream, UpstreamError> {
    let config = settings
        .tls_config
        .clone()
        .ok_or_else(|| UpstreamError::Tls("no TLS configuration".into()))?;
    let connector = tokio_rustls::TlsConnector::from(config);
    let tls = connector
        .connect(settings.server_name.clone(), tcp)
        .await
        .map_err(|e| UpstreamError::Tls(e.to_string()))?;
    Ok(Stream::ClientTls(Box::new(tls)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::{IDENTITY_REASONS, UPSTREAM_KINDS};

    fn settings(address: &str) -> UpstreamSettings {
        let text = format!(
            "[[listener]]\naddress = \"127.0.0.1:0\"\ntls = \"none\"\n\
             [upstream]\naddress = \"{address}\"\nclient_identity = \"none\"\n"
        );
        let config = Config::parse(std::path::Path::new("/etc/floodgate/t.toml"), &text)
            .expect("a valid config");
        UpstreamSettings::from_config(&config).expect("plain upstream settings")
    }

    /// An IP address is parsed once, a host name is looked up at each connection; both reach
    /// the upstream, and a failure names the address as configured.
    #[tokio::test]
    async fn literal_and_named_addresses_both_connect() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let literal = settings(&format!("127.0.0.1:{port}"));
        assert_eq!(literal.literal, Some(([127, 0, 0, 1], port).into()));
        let named = settings(&format!("localhost:{port}"));
        assert_eq!(named.literal, None);
        for s in [&literal, &named] {
            let tcp = connect_tcp(s).await.expect("connected");
            let (_, from) = listener.accept().await.unwrap();
            assert_eq!(tcp.local_addr().unwrap(), from);
        }
        drop(listener);
        match connect_tcp(&literal).await {
            Err(UpstreamError::Connect { address, .. }) => {
                assert_eq!(address, format!("127.0.0.1:{port}"))
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn every_error_has_a_label_the_metrics_count() {
        let io = || std::io::Error::other("x");
        let errors = [
            UpstreamError::Connect {
                address: "a".into(),
                source: io(),
            },
            UpstreamError::Timeout("x"),
            UpstreamError::Lost(io()),
            UpstreamError::Protocol("x".into()),
            UpstreamError::Tls("x".into()),
        ];
        let kinds: Vec<UpstreamFailure> = errors.iter().map(UpstreamError::label).collect();
        let want: Vec<UpstreamFailure> = UPSTREAM_KINDS.map(UpstreamFailure::Error).to_vec();
        assert_eq!(kinds, want);
        let identity = UpstreamError::Identity(IdentityProblem::XclientRefused {
            reply: String::new(),
        });
        assert_eq!(
            identity.label(),
            UpstreamFailure::Identity(IDENTITY_REASONS[1])
        );
    }
}
