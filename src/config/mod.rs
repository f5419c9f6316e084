//! The configuration model: TOML with the names of DESIGN.md, validated before anything starts.
//!
//! Every error names the file, the line and what is wrong; floodgate refuses to start on any.

mod admin;
mod alerts;
mod default_path;
mod duration;
mod graded;
mod hold;
mod identity;
mod message_keys;
mod milter;
mod net;
mod outcomes;
mod paths;
mod policy;
mod policy_service;
mod postfix;
mod report;
pub mod run_as;
mod source;
mod store;
mod tokens;
pub mod url;
mod words;
mod written;

pub use admin::{default_socket, AdminConfig, AdminTls, ListenerLimits, LoginDelay, MetricsConfig};
pub use alerts::AlertsConfig;
pub use default_path::{default_config, first_present, NoConfigFile, LOCAL_CONFIG, SYSTEM_CONFIG};
pub use duration::{parse_duration, ConfigDuration, DurationError};
pub use hold::{HoldConfig, OnExpiry};
pub use identity::{IdentityConfig, LoginFold};
pub use message_keys::MessageKeysConfig;
pub use milter::{parse_listen, MilterConfig, MilterConfigError, MilterListen};
pub use net::{Cidr, CidrError};
pub use outcomes::OutcomesConfig;
pub use paths::{problem, ConfigPath, PathErrors, PathUse};
pub use policy::{AuthFailuresConfig, LimitConfig, ListConfig, ListsConfig};
pub use policy_service::{PolicyListen, PolicyServiceConfig};
pub use postfix::PostfixConfig;
pub use report::ReportConfig;
pub use store::{PasswordError, Secret, StoreConfig, StoreConfigError};
pub use tokens::{valid_name as valid_token_name, AdminToken, MAX_TOKEN_NAME, MIN_TOKEN_LEN};

use std::net::SocketAddr;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::time::Duration;

use source::Source;

use serde::Deserialize;
use toml::Spanned;

/// A config that could not be used, with where and why.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("{path}: cannot read: {source}")]
    Read {
        /// The config file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The file is not valid TOML or does not match the model.
    #[error("{path}:{line}:{column}: {message}")]
    Invalid {
        /// The config file.
        path: PathBuf,
        /// 1-based line of the offending value.
        line: usize,
        /// 1-based column of the offending value.
        column: usize,
        /// What is wrong.
        message: String,
    },
}

/// How a listener or the upstream connection uses TLS.
#[derive(Clone, Copy, Debug, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum TlsMode {
    /// Plain SMTP only.
    None,
    /// Plain SMTP with STARTTLS (RFC 3207).
    Starttls,
    /// TLS from the first byte (RFC 8314).
    Implicit,
}

impl TlsMode {
    /// The config word for this mode.
    pub fn as_str(self) -> &'static str {
        match self {
            TlsMode::None => "none",
            TlsMode::Starttls => "starttls",
            TlsMode::Implicit => "implicit",
        }
    }
}

/// How new sessions are placed on the worker threads (`[server] placement`).
#[derive(Clone, Copy, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Placement {
    /// On the worker with the fewest open sessions: every core shares the work.
    #[default]
    Even,
    /// On the first worker whose event loop has room (see `server::balance`): as few loops
    /// as the load needs are awake, which costs less CPU per message on reused connections.
    Pack,
}

/// How floodgate tells upstream who the real client is.
#[derive(Clone, Copy, Debug, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum ClientIdentity {
    /// Upstream sees floodgate's address.
    None,
    /// Postfix-style XCLIENT after the upstream greeting.
    Xclient,
    /// A PROXY protocol v2 header before any SMTP.
    ProxyV2,
}

/// What floodgate does when upstream will not take the real client's identity (XCLIENT not
/// offered or refused).
#[derive(Clone, Copy, Debug, Deserialize, PartialEq, Eq, Default)]
#[serde(rename_all = "lowercase")]
pub enum OnIdentityRefused {
    /// Refuse the client with 421 4.3.5 and close: upstream would see floodgate's address,
    /// which is often trusted (`mynetworks`).
    #[default]
    Refuse,
    /// Relay the session anyway, with floodgate's own address (logged and counted).
    Relay,
}

/// What to do with a bare CR or LF inside message data.
#[derive(Clone, Copy, Debug, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum BareLineEndings {
    /// Refuse the message with 550 5.5.2.
    Reject,
    /// Turn each bare CR or LF into CRLF.
    Normalize,
}

/// Log output format.
#[derive(Clone, Copy, Debug, Deserialize, PartialEq, Eq, Default)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    /// Human-readable lines.
    #[default]
    Text,
    /// One JSON object per line.
    Json,
}

/// `[server]`: process-wide limits and names.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ServerConfig {
    /// Name used in floodgate's own replies.
    pub hostname: String,
    /// Sessions at once, over all listeners; more get 421 4.7.0.
    pub max_connections: usize,
    /// Sessions at once from one client IP; more get 421 4.7.0.
    pub max_connections_per_ip: usize,
    /// Protocol errors per session before 421 4.7.0.
    pub max_errors: u32,
    /// Addresses allowed to send a PROXY header on listeners with `proxy_protocol`.
    pub trusted_proxies: Vec<Cidr>,
    /// How long sessions may finish after SIGTERM before they get 421 4.3.2.
    pub shutdown_grace: ConfigDuration,
    /// Worker threads, each with its own event loop accepting from the listening sockets;
    /// 0 means one per CPU core.
    pub workers: usize,
    /// How new sessions are placed on the workers.
    pub placement: Placement,
    /// Look up the client's name (reverse, then forward-confirmed) for XCLIENT NAME and
    /// REVERSE_NAME and the Received line.
    pub resolve_client_names: bool,
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            hostname: "floodgate".into(),
            max_connections: 10_000,
            max_connections_per_ip: 100,
            max_errors: 10,
            trusted_proxies: Vec::new(),
            shutdown_grace: ConfigDuration(Duration::from_secs(30)),
            workers: 0,
            placement: Placement::Even,
            resolve_client_names: true,
        }
    }
}

/// `[timeouts]`.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Timeouts {
    /// Time to receive each whole command line (RFC 5321 §4.5.3.2: at least 5 minutes).
    pub command: ConfigDuration,
    /// The whole DATA phase.
    pub data: ConfigDuration,
    /// A whole session.
    pub session: ConfigDuration,
    /// A TLS handshake with the client.
    pub tls_handshake: ConfigDuration,
    /// A PROXY header from a load balancer.
    pub proxy_header: ConfigDuration,
    /// Connecting to upstream (TCP and, for implicit TLS, the handshake).
    pub upstream_connect: ConfigDuration,
    /// Each upstream reply.
    pub upstream_reply: ConfigDuration,
    /// The client's name lookup (reverse and forward together); past it the name is
    /// `[TEMPUNAVAIL]`.
    pub client_name_lookup: ConfigDuration,
}

impl Default for Timeouts {
    fn default() -> Self {
        let s = |n| ConfigDuration(Duration::from_secs(n));
        Timeouts {
            command: s(300),
            data: s(600),
            session: s(3600),
            tls_handshake: s(10),
            proxy_header: s(5),
            upstream_connect: s(10),
            upstream_reply: s(300),
            client_name_lookup: s(5),
        }
    }
}

/// One `[[listener]]`.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ListenerConfig {
    /// A name for logs and metrics; defaults to the address.
    #[serde(default)]
    pub name: Option<String>,
    /// Where to listen.
    pub address: SocketAddr,
    /// TLS mode towards clients.
    #[serde(default = "default_listener_tls")]
    pub tls: Spanned<TlsMode>,
    /// Accept a PROXY v1/v2 header from `[server] trusted_proxies`.
    #[serde(default)]
    pub proxy_protocol: bool,
    /// Refuse MAIL before STARTTLS (`530 5.7.0`); met from the start on an implicit-TLS
    /// listener.
    #[serde(default)]
    pub require_tls: bool,
    /// Refuse MAIL before a successful AUTH (`530 5.7.0`).
    #[serde(default)]
    pub require_auth: bool,
}

fn no_listeners() -> Spanned<Vec<ListenerConfig>> {
    Spanned::new(0..0, Vec::new())
}

fn default_listener_tls() -> Spanned<TlsMode> {
    Spanned::new(0..0, TlsMode::None)
}

impl ListenerConfig {
    /// The listener's name, or its address.
    pub fn display_name(&self) -> String {
        self.name
            .clone()
            .unwrap_or_else(|| self.address.to_string())
    }
}

/// `[tls]`: floodgate's own certificate.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TlsConfig {
    /// PEM certificate chain.
    pub certificate: PathBuf,
    /// PEM private key (PKCS#8, PKCS#1 or SEC1).
    pub private_key: PathBuf,
    /// Advertise and accept AUTH before TLS.
    #[serde(default)]
    pub auth_without_tls: bool,
}

/// `[upstream]`: the smart host.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UpstreamConfig {
    /// host:port of the smart host (a name is resolved at each connect).
    pub address: Spanned<String>,
    /// TLS towards upstream.
    #[serde(default = "default_upstream_tls")]
    pub tls: TlsMode,
    /// How the real client is passed on.
    #[serde(default = "default_identity")]
    pub client_identity: ClientIdentity,
    /// Name to verify upstream's certificate against; defaults to the host of `address`.
    #[serde(default)]
    pub server_name: Option<String>,
    /// CA bundle for upstream's certificate; the system roots when absent.
    #[serde(default)]
    pub ca_file: Option<PathBuf>,
    /// floodgate's own EHLO name towards upstream.
    #[serde(default)]
    pub helo_name: Option<String>,
    /// When upstream does not take XCLIENT: refuse the client (default) or relay anyway.
    #[serde(default)]
    pub on_identity_refused: OnIdentityRefused,
    /// Send each message as one `BDAT n LAST` (RFC 3030) when upstream offers CHUNKING,
    /// whichever way the client sent it: one round trip per message fewer than DATA and its
    /// 354, and no dot-stuffing for upstream to undo. `false`: always DATA.
    #[serde(default = "default_true")]
    pub chunking: bool,
    /// When upstream offers PIPELINING (RFC 2920), a MAIL goes upstream together with the
    /// command after it (the transaction's first RCPT), and floodgate answers the MAIL
    /// itself once its own checks pass: one round trip per message fewer for clients that
    /// send one command at a time. Upstream's refusal of the sender is then the answer to
    /// that RCPT, as Postfix gives it with `smtpd_delay_reject`. A MAIL that declares a
    /// SIZE over the one announced to the client still waits, to be refused at MAIL.
    /// `false`: every MAIL waits for upstream's answer.
    #[serde(default = "default_true")]
    pub pipelining: bool,
    /// Greet upstream with EHLO also when the client said HELO, so that floodgate's own
    /// commands use upstream's extensions (a MAIL with the first RCPT, BDAT); the client
    /// still gets HELO's one-line answer and is offered no extension, and XCLIENT still
    /// says `PROTO=SMTP`. An upstream that refuses that EHLO (5xx, as 500 or 502 from one
    /// that does not know it) is greeted with the client's HELO after all. `false`: the client's HELO goes upstream as HELO.
    #[serde(default = "default_true")]
    pub always_ehlo: bool,
    /// `[upstream.high_risk]`: the second smart host, with the same keys, that messages of
    /// `action = "reroute"` limits go to. Only in `[upstream]` itself.
    #[serde(default)]
    pub high_risk: Option<Box<UpstreamConfig>>,
}

fn default_store() -> Spanned<StoreConfig> {
    Spanned::new(0..0, StoreConfig::default())
}

fn default_true() -> bool {
    true
}

fn default_upstream_tls() -> TlsMode {
    TlsMode::None
}
fn default_identity() -> ClientIdentity {
    ClientIdentity::None
}

/// `[smtp]`: protocol limits.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SmtpConfig {
    /// Longest command line, CRLF included (RFC 5321: 512 plus extension slack).
    pub max_command_line: usize,
    /// Longest message line accepted, CRLF included (at least RFC 5321's 1000); a
    /// longer line refuses the message with 554 5.6.0. Lines up to it are relayed
    /// unchanged, as Postfix and Exim take them.
    pub max_text_line: usize,
    /// Longest AUTH response line (RFC 4954: 12288).
    pub max_auth_line: usize,
    /// Largest message accepted, in octets.
    pub max_message_size: u64,
    /// Bare CR or LF in message data.
    pub bare_line_endings: BareLineEndings,
    /// Recipients per message.
    pub max_recipients: usize,
    /// Offer CHUNKING (RFC 3030 BDAT) to clients after EHLO.
    pub chunking: bool,
    /// Put floodgate's own `Received:` line at the top of every relayed message.
    pub add_received: bool,
    /// Name the authenticated user in that line.
    pub received_show_user: bool,
}

/// The default `[smtp] max_text_line`: far above RFC 5321's 1000, so the long lines
/// real mail carries (HTML without line breaks, long base64) are relayed unchanged.
pub const DEFAULT_MAX_TEXT_LINE: usize = 1024 * 1024;

impl Default for SmtpConfig {
    fn default() -> Self {
        SmtpConfig {
            max_command_line: 2048,
            max_text_line: DEFAULT_MAX_TEXT_LINE,
            max_auth_line: 12288,
            max_message_size: 50 * 1024 * 1024,
            bare_line_endings: BareLineEndings::Normalize,
            max_recipients: 1000,
            chunking: true,
            add_received: false,
            received_show_user: false,
        }
    }
}

/// `[log]`.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LogConfig {
    /// A tracing filter (`info`, `floodgate=debug`); `RUST_LOG` overrides it.
    pub level: String,
    /// `text` or `json`.
    pub format: LogFormat,
    /// Lines waiting for the log writer thread at most; more are dropped and counted.
    pub queue: usize,
}

impl Default for LogConfig {
    fn default() -> Self {
        LogConfig {
            level: "info".into(),
            format: LogFormat::Text,
            queue: DEFAULT_LOG_QUEUE,
        }
    }
}

/// `[log] queue` by default: lines waiting for the log writer at most.
pub const DEFAULT_LOG_QUEUE: usize = 65_536;

/// The largest `[log] queue` accepted.
pub const MAX_LOG_QUEUE: usize = 16_777_216;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawConfig {
    #[serde(default)]
    server: ServerConfig,
    #[serde(default)]
    timeouts: Timeouts,
    #[serde(default = "no_listeners")]
    listener: Spanned<Vec<ListenerConfig>>,
    #[serde(default)]
    policy_service: Vec<PolicyServiceConfig>,
    #[serde(default)]
    milter: Vec<MilterConfig>,
    #[serde(default)]
    tls: Option<TlsConfig>,
    upstream: Option<UpstreamConfig>,
    #[serde(default)]
    smtp: SmtpConfig,
    #[serde(default = "default_store")]
    store: Spanned<StoreConfig>,
    #[serde(default)]
    log: LogConfig,
    #[serde(default)]
    lists: ListsConfig,
    #[serde(default)]
    limit: Vec<LimitConfig>,
    #[serde(default)]
    auth_failures: AuthFailuresConfig,
    #[serde(default)]
    report: ReportConfig,
    #[serde(default)]
    alerts: Option<AlertsConfig>,
    metrics: Option<admin::RawMetrics>,
    #[serde(default)]
    admin: admin::RawAdmin,
    #[serde(default)]
    hold: Option<Spanned<HoldConfig>>,
    #[serde(default)]
    outcomes: Option<Spanned<OutcomesConfig>>,
    #[serde(default)]
    postfix: Option<Spanned<PostfixConfig>>,
    #[serde(default)]
    message_keys: MessageKeysConfig,
    #[serde(default)]
    identity: IdentityConfig,
}

/// A validated configuration: the sections as written, with what can be checked without
/// compiling them checked (listeners, upstream, store, protocol limits, admin). The policy,
/// report, alert, hold and outcome sections are compiled, and checked, into a runtime
/// generation by the layers that use them; their errors are placed with
/// [`Config::error_at`].
#[derive(Clone, Debug)]
pub struct Config {
    /// The file it came from.
    pub path: PathBuf,
    /// `[server]`.
    pub server: ServerConfig,
    /// `[timeouts]`.
    pub timeouts: Timeouts,
    /// `[[listener]]`, in file order.
    pub listeners: Vec<ListenerConfig>,
    /// `[[policy_service]]`, in file order, each with where it listens.
    pub policy_services: Vec<(PolicyServiceConfig, PolicyListen)>,
    /// `[[milter]]`, in file order, each `listen` checked.
    pub milters: Vec<MilterConfig>,
    /// `[tls]`, with paths made absolute.
    pub tls: Option<TlsConfig>,
    /// `[upstream]`, with paths made absolute.
    pub upstream: UpstreamConfig,
    /// `[smtp]`.
    pub smtp: SmtpConfig,
    /// `[store]`.
    pub store: StoreConfig,
    /// `[log]`.
    pub log: LogConfig,
    /// `[lists]` as written.
    pub lists: ListsConfig,
    /// `[[limit]]` as written, in file order.
    pub limits: Vec<LimitConfig>,
    /// `[auth_failures]`.
    pub auth_failures: AuthFailuresConfig,
    /// `[report]` as written: the event log for measurement.
    pub report: ReportConfig,
    /// `[alerts]` as written; `None` when absent.
    pub alerts: Option<AlertsConfig>,
    /// `[metrics]` (off when absent).
    pub metrics: Option<MetricsConfig>,
    /// `[admin]`, with the socket path resolved.
    pub admin: AdminConfig,
    /// `[hold]` as written; `None` when absent.
    pub hold: Option<Spanned<HoldConfig>>,
    /// `[outcomes]` as written; `None` when absent.
    pub outcomes: Option<Spanned<OutcomesConfig>>,
    /// `[postfix]` as written; `None` when absent (held mail is in floodgate's own spool
    /// only).
    pub postfix: Option<Spanned<PostfixConfig>>,
    /// `[message_keys]` as written (defaults when absent).
    pub message_keys: MessageKeysConfig,
    /// `[identity]`: how logins are folded into accounts (defaults when absent).
    pub identity: IdentityConfig,
    /// The text it was read from, to place errors found later.
    source: Source,
}

impl Config {
    /// Reads and validates a config file.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        Config::parse(path, &text)
    }

    /// Validates config text; `path` names it in errors and anchors relative paths.
    pub fn parse(path: &Path, text: &str) -> Result<Config, ConfigError> {
        let at = |span: Range<usize>, message: String| Source::locate(text, path, span, message);
        let raw: RawConfig = toml::from_str(text).map_err(|e| {
            at(
                e.span().unwrap_or(0..0),
                e.message().trim_end().replace('\n', "; "),
            )
        })?;
        let base = path.parent().map(Path::to_path_buf).unwrap_or_default();
        let listeners_span = raw.listener.span();
        let listeners = raw.listener.into_inner();
        let mut policy_services = Vec::with_capacity(raw.policy_service.len());
        for p in raw.policy_service {
            let listen = p.resolve(&base).map_err(|(span, m)| at(span, m))?;
            policy_services.push((p, listen));
        }
        if listeners.is_empty() && policy_services.is_empty() && raw.milter.is_empty() {
            return Err(at(
                listeners_span,
                "at least one [[listener]], [[policy_service]] or [[milter]] is needed".into(),
            ));
        }
        check_listeners(&listeners, &listeners_span, raw.tls.as_ref(), &at)?;
        check_milters(&raw.milter, &base, &at)?;
        let upstream = match raw.upstream {
            Some(u) => u,
            None if listeners.is_empty() => local_postfix(),
            None => {
                return Err(at(
                    listeners_span,
                    "the [[listener]]s relay to a smart host: an [upstream] section is needed"
                        .into(),
                ))
            }
        };
        let up_span = upstream.address.span();
        if split_host_port(upstream.address.get_ref()).is_none() {
            return Err(at(
                up_span,
                format!(
                    "upstream address {:?} is not host:port",
                    upstream.address.get_ref()
                ),
            ));
        }
        let store_span = raw.store.span();
        let store = raw
            .store
            .into_inner()
            .validate(&base)
            .map_err(|e| at(store_span, e.to_string()))?;
        let smtp = raw.smtp;
        check_sizes(&smtp, &raw.log, &at)?;
        raw.identity
            .check()
            .map_err(|(span, message)| at(span, message))?;
        let abs = |p: PathBuf| if p.is_absolute() { p } else { base.join(p) };
        let tls = raw.tls.map(|t| TlsConfig {
            certificate: abs(t.certificate),
            private_key: abs(t.private_key),
            auth_without_tls: t.auth_without_tls,
        });
        let mut upstream = upstream;
        upstream.ca_file = upstream.ca_file.map(abs);
        graded::check_high_risk(&mut upstream, &abs, &at)?;
        let (metrics, admin) = admin::validate(
            raw.metrics,
            raw.admin,
            &base,
            store.path.as_deref(),
            path,
            &|span, message| at(span, message),
        )?;
        Ok(Config {
            path: path.to_path_buf(),
            server: raw.server,
            timeouts: raw.timeouts,
            listeners,
            policy_services,
            milters: raw.milter,
            tls,
            upstream,
            smtp,
            store,
            log: raw.log,
            lists: raw.lists,
            limits: raw.limit,
            auth_failures: raw.auth_failures,
            report: raw.report,
            alerts: raw.alerts,
            metrics,
            admin,
            hold: raw.hold,
            outcomes: raw.outcomes,
            postfix: raw.postfix,
            message_keys: raw.message_keys,
            identity: raw.identity,
            source: Source::new(text),
        })
    }

    /// An error at a byte span of the config text, named by file, line and column (an
    /// empty span at 0 names line 1, column 1: the file as a whole).
    pub fn error_at(&self, span: Range<usize>, message: String) -> ConfigError {
        self.source.error_at(&self.path, span, message)
    }

    /// The directory relative paths of the config are taken from: the config file's own.
    pub fn base_dir(&self) -> &Path {
        self.path.parent().unwrap_or(Path::new(""))
    }

    /// `path` as written in the config: kept when absolute, else taken from
    /// [`base_dir`](Self::base_dir).
    pub fn resolve(&self, path: impl AsRef<Path>) -> PathBuf {
        let path = path.as_ref();
        if path.is_absolute() {
            path.to_path_buf()
        } else {
            self.base_dir().join(path)
        }
    }

    /// floodgate's EHLO name towards upstream.
    pub fn helo_name(&self) -> &str {
        self.upstream
            .helo_name
            .as_deref()
            .unwrap_or(&self.server.hostname)
    }

    /// The TLS server name for upstream.
    pub fn upstream_server_name(&self) -> String {
        server_name_of(&self.upstream)
    }
}

/// The TLS server name of a smart host: its `server_name`, or the host of its `address`.
pub fn server_name_of(u: &UpstreamConfig) -> String {
    if let Some(n) = &u.server_name {
        return n.clone();
    }
    split_host_port(u.address.get_ref())
        .map(|(h, _)| h.to_string())
        .unwrap_or_default()
}

/// The smart host of a config without `[[listener]]` and without `[upstream]` (Postfix's
/// policy service alone): the local Postfix on port 25, where alert mail goes.
fn local_postfix() -> UpstreamConfig {
    toml::from_str("address = \"127.0.0.1:25\"").expect("a valid [upstream]")
}

/// Splits `host:port` or `[v6]:port`.
pub fn split_host_port(s: &str) -> Option<(&str, u16)> {
    let (host, port) = s.rsplit_once(':')?;
    let port: u16 = port.parse().ok()?;
    let host = host
        .strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host);
    if host.is_empty() {
        return None;
    }
    Some((host, port))
}

/// Refuses a `[[milter]]` whose `listen` or `mode` cannot be read, and two of one name.
fn check_milters(
    milters: &[MilterConfig],
    base: &Path,
    at: &dyn Fn(Range<usize>, String) -> ConfigError,
) -> Result<(), ConfigError> {
    let mut seen = std::collections::HashSet::new();
    for m in milters {
        m.address(base)
            .map_err(|e| at(m.listen.span(), e.to_string()))?;
        m.mode_bits()
            .map_err(|e| at(m.mode.span(), e.to_string()))?;
        if !seen.insert(m.display_name()) {
            return Err(at(
                m.listen.span(),
                format!("two [[milter]] named {:?}", m.display_name()),
            ));
        }
    }
    Ok(())
}

/// Refuses a listener with TLS but no `[tls]`, and one that requires TLS or AUTH (which
/// needs TLS) where TLS is never offered.
fn check_listeners(
    listeners: &[ListenerConfig],
    listeners_span: &Range<usize>,
    tls: Option<&TlsConfig>,
    at: &dyn Fn(Range<usize>, String) -> ConfigError,
) -> Result<(), ConfigError> {
    for l in listeners {
        if *l.tls.get_ref() != TlsMode::None && tls.is_none() {
            return Err(at(
                l.tls.span(),
                format!(
                    "listener {} uses tls = \"{}\" but there is no [tls] section with a certificate",
                    l.display_name(),
                    l.tls.get_ref().as_str()
                ),
            ));
        }
        let auth_in_clear = tls.is_some_and(|t| t.auth_without_tls);
        if *l.tls.get_ref() == TlsMode::None
            && (l.require_tls || (l.require_auth && !auth_in_clear))
        {
            let (key, why) = if l.require_tls {
                ("require_tls", "TLS is never offered there")
            } else {
                (
                    "require_auth",
                    "AUTH is offered only after TLS ([tls] auth_without_tls = false)",
                )
            };
            // The listener's `tls` line, or the [[listener]] list when it has none.
            let span = match l.tls.span() {
                s if s.is_empty() => listeners_span.clone(),
                s => s,
            };
            return Err(at(
                span,
                format!(
                    "listener {} has {key} = true but tls = \"none\": {why}, so every MAIL would be refused",
                    l.display_name()
                ),
            ));
        }
    }
    Ok(())
}

/// Refuses `[smtp]` line and message sizes below what SMTP needs, and a `[log] queue` out
/// of range.
fn check_sizes(
    smtp: &SmtpConfig,
    log: &LogConfig,
    at: &dyn Fn(Range<usize>, String) -> ConfigError,
) -> Result<(), ConfigError> {
    if smtp.max_command_line < 512 {
        return Err(at(
            0..0,
            "[smtp] max_command_line must be at least 512 (RFC 5321 §4.5.3.1.4)".into(),
        ));
    }
    if smtp.max_text_line < 1000 {
        return Err(at(
            0..0,
            "[smtp] max_text_line must be at least 1000 (RFC 5321 §4.5.3.1.6)".into(),
        ));
    }
    if smtp.max_auth_line < 512 {
        return Err(at(0..0, "[smtp] max_auth_line must be at least 512".into()));
    }
    if smtp.max_message_size == 0 {
        return Err(at(
            0..0,
            "[smtp] max_message_size must be at least 1 (0 would refuse every message)".into(),
        ));
    }
    if !(1..=MAX_LOG_QUEUE).contains(&log.queue) {
        return Err(at(
            0..0,
            format!(
                "[log] queue must be between 1 and {MAX_LOG_QUEUE} (lines waiting for the log writer)"
            ),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests;
