//! `[metrics]` and `[admin]`: where floodgate exports its counters and answers admin
//! requests. Neither is changed by a reload.

use std::net::SocketAddr;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;
use toml::Spanned;

use super::duration::ConfigDuration;
use super::tokens::{read_tokens, AdminToken, RawTokens};

/// `[metrics]` as written.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawMetrics {
    /// Where to serve `GET /metrics` over HTTP.
    pub address: Spanned<SocketAddr>,
    /// Allow a non-loopback address.
    #[serde(default)]
    pub allow_remote: bool,
}

/// `[admin]` as written.
#[derive(Clone, Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct RawAdmin {
    /// Serve the admin API at all (default true).
    #[serde(default)]
    pub enabled: Option<bool>,
    /// The unix socket (relative to the config file's directory).
    #[serde(default)]
    pub socket: Option<Spanned<PathBuf>>,
    /// Also serve the admin API on this TCP address, guarded by a bearer token.
    #[serde(default)]
    pub address: Option<Spanned<SocketAddr>>,
    /// The file holding a bearer token (relative to the config file's directory), named by
    /// the file's stem.
    #[serde(default)]
    pub token_file: Option<Spanned<PathBuf>>,
    /// `[admin.tokens]`: more bearer tokens, NAME = "FILE".
    #[serde(default)]
    pub tokens: Option<Spanned<RawTokens>>,
    /// The append-only audit log of admin actions (relative to the config file's directory).
    #[serde(default)]
    pub audit: Option<Spanned<PathBuf>>,
    /// Allow a non-loopback TCP address.
    #[serde(default)]
    pub allow_remote: Option<Spanned<bool>>,
    /// Serve a non-loopback address without TLS all the same.
    #[serde(default)]
    pub allow_remote_without_tls: bool,
    /// TLS on the TCP address.
    #[serde(default)]
    pub tls: Option<Spanned<RawAdminTls>>,
    /// Connections each admin listener (and the metrics address) holds at once.
    #[serde(default)]
    pub max_connections: Option<Spanned<usize>>,
    /// Connections from one client address that may be waiting for their request at once.
    #[serde(default)]
    pub max_connections_per_address: Option<Spanned<usize>>,
    /// Time allowed for a whole request (and the TLS handshake before it).
    #[serde(default)]
    pub request_timeout: Option<Spanned<ConfigDuration>>,
    /// Time allowed for the rest of an answer once its writing stalls.
    #[serde(default)]
    pub write_timeout: Option<Spanned<ConfigDuration>>,
    /// The wait after the first recent wrong token from an address.
    #[serde(default)]
    pub login_base_delay: Option<Spanned<ConfigDuration>>,
    /// The cap of that wait.
    #[serde(default)]
    pub login_max_delay: Option<Spanned<ConfigDuration>>,
    /// How fast wrong tokens are forgotten (the count decays by e every `login_decay`).
    #[serde(default)]
    pub login_decay: Option<Spanned<ConfigDuration>>,
    /// Wrong tokens looked at per minute from all addresses together.
    #[serde(default)]
    pub login_failures_per_minute: Option<Spanned<u32>>,
    /// Let the web console on the TCP address release, delete, reset and end restrictions
    /// (default false: the console only shows).
    #[serde(default)]
    pub console_actions: Option<Spanned<bool>>,
    /// The web console's address as people reach it (`https://floodgate.example.org`):
    /// alert mail links to the key's page there.
    #[serde(default)]
    pub public_url: Option<Spanned<String>>,
}

/// `[admin.tls]` as written.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawAdminTls {
    /// PEM certificate chain.
    pub certificate: PathBuf,
    /// PEM private key.
    pub private_key: PathBuf,
}

/// `[admin.tls]`, its paths made absolute.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AdminTls {
    /// PEM certificate chain.
    pub certificate: PathBuf,
    /// PEM private key (PKCS#8, PKCS#1 or SEC1).
    pub private_key: PathBuf,
}

/// What one admin listener (the admin socket, the admin address, the metrics address) allows
/// each connection, and how many at once.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ListenerLimits {
    /// Connections held at once; more wait in the kernel's queue (see `admin::serve`).
    pub max_connections: usize,
    /// Connections of one client address (IPv6: its /64) waiting for their request (its
    /// head, or the login form's body) at once; more are answered 429 at once.
    pub max_per_address: usize,
    /// Time for the TLS handshake and the whole request, from the connection's accept.
    pub request_timeout: Duration,
    /// Time for the rest of an answer once writing it stalls (the client does not read).
    pub write_timeout: Duration,
}

/// The default of `[admin] max_connections`.
pub const DEFAULT_MAX_CONNECTIONS: usize = 64;
/// The largest `[admin] max_connections`.
pub const MAX_MAX_CONNECTIONS: usize = 1024;
/// The default of `[admin] max_connections_per_address`: more than a browser opens to one
/// host at once (six), and an eighth of `max_connections`.
pub const DEFAULT_MAX_PER_ADDRESS: usize = 8;
/// The longest `request_timeout` and `write_timeout`.
pub const MAX_TIMEOUT: Duration = Duration::from_secs(300);

impl Default for ListenerLimits {
    fn default() -> Self {
        ListenerLimits {
            max_connections: DEFAULT_MAX_CONNECTIONS,
            max_per_address: DEFAULT_MAX_PER_ADDRESS,
            request_timeout: Duration::from_secs(10),
            write_timeout: Duration::from_secs(10),
        }
    }
}

/// The wait imposed on an address after wrong admin tokens: `base · 2^(n−1)` after its
/// n-th recent one, at most `max`; the count decays by e every `decay`. Across all
/// addresses together, at most `per_minute` wrong tokens are looked at per minute.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LoginDelay {
    /// The wait after the first wrong token.
    pub base: Duration,
    /// The longest wait.
    pub max: Duration,
    /// How fast wrong tokens are forgotten.
    pub decay: Duration,
    /// Wrong tokens from all addresses together looked at per minute (also the burst).
    pub per_minute: u32,
}

/// The longest `login_max_delay`.
pub const MAX_LOGIN_DELAY: Duration = Duration::from_secs(3600);
/// The default of `[admin] login_failures_per_minute`.
pub const DEFAULT_LOGIN_FAILURES_PER_MINUTE: u32 = 60;
/// The largest `[admin] login_failures_per_minute`.
pub const MAX_LOGIN_FAILURES_PER_MINUTE: u32 = 100_000;

impl Default for LoginDelay {
    fn default() -> Self {
        LoginDelay {
            base: Duration::from_secs(1),
            max: Duration::from_secs(60),
            decay: Duration::from_secs(600),
            per_minute: DEFAULT_LOGIN_FAILURES_PER_MINUTE,
        }
    }
}

/// `[metrics]`, validated.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MetricsConfig {
    /// Where `GET /metrics` is served.
    pub address: SocketAddr,
}

/// `[admin]`, validated.
#[derive(Clone, Debug, Default)]
pub struct AdminConfig {
    /// The unix socket of the admin API (`None`: the admin API is off).
    pub socket: Option<PathBuf>,
    /// The socket path is the default one (not written in the config): failing to bind it
    /// is a warning, not a reason to refuse to start.
    pub default_socket: bool,
    /// The token-guarded TCP address, with its named tokens (at least one).
    pub tcp: Option<(SocketAddr, Vec<AdminToken>)>,
    /// The audit log of admin actions (`None`: none is written).
    pub audit: Option<PathBuf>,
    /// TLS on the TCP address (`None`: plain HTTP).
    pub tls: Option<AdminTls>,
    /// The web console on the TCP address may act (release, delete, reset), not only show.
    pub console_actions: bool,
    /// Bounds of every admin listener and of the metrics address (also when the admin API
    /// is off).
    pub limits: ListenerLimits,
    /// The wait after wrong tokens on the TCP address.
    pub login_delay: LoginDelay,
    /// The web console's address as people reach it, without a trailing `/` (`None`:
    /// alert mail carries no link).
    pub public_url: Option<String>,
}

impl AdminConfig {
    /// The most connections the admin listeners and the metrics address hold together
    /// (their share of the descriptor budget).
    pub fn max_descriptors(&self, metrics: bool) -> usize {
        let listeners = usize::from(self.socket.is_some())
            + usize::from(self.tcp.is_some())
            + usize::from(metrics);
        listeners.saturating_mul(self.limits.max_connections)
    }
}

/// The socket path used when `[admin] socket` is not given: next to the memory store's
/// snapshot when there is one, else in `$XDG_RUNTIME_DIR`, else in the temporary directory
/// with the user id in its name; outside the state directory the name carries a hash of
/// the config file's path, so two floodgates with different configs never collide. Works
/// for a normal user running the example config.
pub fn default_socket(state_path: Option<&Path>, config_path: &Path) -> PathBuf {
    if let Some(dir) = state_path.and_then(Path::parent) {
        if !dir.as_os_str().is_empty() {
            return dir.join("floodgate-admin.sock");
        }
    }
    let canonical = std::fs::canonicalize(config_path).unwrap_or_else(|_| config_path.into());
    // FNV-1a: stable across builds and platforms (std's hasher is not).
    let hash = canonical
        .as_os_str()
        .as_encoded_bytes()
        .iter()
        .fold(0xcbf2_9ce4_8422_2325u64, |h, &b| {
            (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
        });
    let tag = format!("{:08x}", hash as u32);
    if let Some(run) = std::env::var_os("XDG_RUNTIME_DIR").filter(|v| !v.is_empty()) {
        return PathBuf::from(run).join(format!("floodgate-{tag}.sock"));
    }
    // SAFETY: geteuid has no preconditions and cannot fail.
    let uid = unsafe { libc::geteuid() };
    std::env::temp_dir().join(format!("floodgate-{uid}-{tag}.sock"))
}

fn loopback_only(
    addr: &Spanned<SocketAddr>,
    allow: bool,
    section: &str,
    at: &dyn Fn(Range<usize>, String) -> super::ConfigError,
) -> Result<(), super::ConfigError> {
    if !allow && !addr.get_ref().ip().is_loopback() {
        return Err(at(
            addr.span(),
            format!(
                "[{section}] address {} is not a loopback address: set allow_remote = true to serve it beyond this machine",
                addr.get_ref()
            ),
        ));
    }
    Ok(())
}

/// A duration key of `[admin]`: its value, or `default` when absent; refused outside
/// `range` with its place.
fn duration_key(
    key: &Option<Spanned<ConfigDuration>>,
    name: &str,
    default: Duration,
    range: std::ops::RangeInclusive<Duration>,
    at: &dyn Fn(Range<usize>, String) -> super::ConfigError,
) -> Result<Duration, super::ConfigError> {
    let Some(k) = key else {
        return Ok(default);
    };
    let d = k.get_ref().0;
    if !range.contains(&d) {
        return Err(at(
            k.span(),
            format!(
                "[admin] {name} must be between {:?} and {:?}",
                range.start(),
                range.end()
            ),
        ));
    }
    Ok(d)
}

/// `[admin]`'s bounds of every admin listener (and of the metrics address).
fn listener_limits(
    admin: &RawAdmin,
    at: &dyn Fn(Range<usize>, String) -> super::ConfigError,
) -> Result<ListenerLimits, super::ConfigError> {
    let d = ListenerLimits::default();
    let max_connections = match &admin.max_connections {
        None => d.max_connections,
        Some(m) if (1..=MAX_MAX_CONNECTIONS).contains(m.get_ref()) => *m.get_ref(),
        Some(m) => {
            return Err(at(
                m.span(),
                format!("[admin] max_connections must be between 1 and {MAX_MAX_CONNECTIONS}"),
            ))
        }
    };
    let max_per_address = match &admin.max_connections_per_address {
        None => d.max_per_address,
        Some(m) if (1..=MAX_MAX_CONNECTIONS).contains(m.get_ref()) => *m.get_ref(),
        Some(m) => {
            return Err(at(
                m.span(),
                format!(
                    "[admin] max_connections_per_address must be between 1 and \
                     {MAX_MAX_CONNECTIONS}"
                ),
            ))
        }
    };
    let short = Duration::from_millis(100)..=MAX_TIMEOUT;
    Ok(ListenerLimits {
        max_connections,
        max_per_address,
        request_timeout: duration_key(
            &admin.request_timeout,
            "request_timeout",
            d.request_timeout,
            short.clone(),
            at,
        )?,
        write_timeout: duration_key(
            &admin.write_timeout,
            "write_timeout",
            d.write_timeout,
            short,
            at,
        )?,
    })
}

/// `[admin]`'s waits after wrong tokens.
fn login_delay(
    admin: &RawAdmin,
    at: &dyn Fn(Range<usize>, String) -> super::ConfigError,
) -> Result<LoginDelay, super::ConfigError> {
    let d = LoginDelay::default();
    let base = duration_key(
        &admin.login_base_delay,
        "login_base_delay",
        d.base,
        Duration::from_millis(10)..=MAX_LOGIN_DELAY,
        at,
    )?;
    let max = duration_key(
        &admin.login_max_delay,
        "login_max_delay",
        d.max.max(base),
        base..=MAX_LOGIN_DELAY,
        at,
    )?;
    let decay = duration_key(
        &admin.login_decay,
        "login_decay",
        d.decay,
        Duration::from_secs(1)..=Duration::from_secs(7 * 86_400),
        at,
    )?;
    let per_minute = match &admin.login_failures_per_minute {
        None => d.per_minute,
        Some(n) if (1..=MAX_LOGIN_FAILURES_PER_MINUTE).contains(n.get_ref()) => *n.get_ref(),
        Some(n) => {
            return Err(at(
                n.span(),
                format!(
                    "[admin] login_failures_per_minute must be between 1 and \
                     {MAX_LOGIN_FAILURES_PER_MINUTE}"
                ),
            ))
        }
    };
    Ok(LoginDelay {
        base,
        max,
        decay,
        per_minute,
    })
}

/// Validates `[metrics]` and `[admin]`; relative paths are resolved against `base`, the
/// token file is read now.
pub fn validate(
    metrics: Option<RawMetrics>,
    admin: RawAdmin,
    base: &Path,
    state_path: Option<&Path>,
    config_path: &Path,
    at: &dyn Fn(Range<usize>, String) -> super::ConfigError,
) -> Result<(Option<MetricsConfig>, AdminConfig), super::ConfigError> {
    let abs = |p: &Path| {
        if p.is_absolute() {
            p.to_path_buf()
        } else {
            base.join(p)
        }
    };
    let metrics = match metrics {
        Some(m) => {
            loopback_only(&m.address, m.allow_remote, "metrics", at)?;
            Some(MetricsConfig {
                address: *m.address.get_ref(),
            })
        }
        None => None,
    };
    let limits = listener_limits(&admin, at)?;
    let public_url = public_url(&admin, at)?;
    if admin.enabled == Some(false) {
        if let Some(a) = &admin.audit {
            return Err(at(
                a.span(),
                "[admin] audit is only used with the admin API (enabled = false turns it off)"
                    .into(),
            ));
        }
        return Ok((
            metrics,
            AdminConfig {
                limits,
                public_url,
                ..AdminConfig::default()
            },
        ));
    }
    let login_delay = login_delay(&admin, at)?;
    let socket = match &admin.socket {
        Some(s) if s.get_ref().as_os_str().is_empty() => {
            return Err(at(s.span(), "[admin] socket must not be empty".into()));
        }
        Some(s) => abs(s.get_ref()),
        None => default_socket(state_path, config_path),
    };
    only_with_address(&admin, at)?;
    let tcp = tcp_of(&admin, &abs, at)?;
    let audit = match &admin.audit {
        Some(p) if p.get_ref().as_os_str().is_empty() => {
            return Err(at(p.span(), "[admin] audit must not be empty".into()));
        }
        Some(p) => Some(abs(p.get_ref())),
        None => None,
    };
    let tls = admin.tls.as_ref().map(|t| AdminTls {
        certificate: abs(&t.get_ref().certificate),
        private_key: abs(&t.get_ref().private_key),
    });
    Ok((
        metrics,
        AdminConfig {
            socket: Some(socket),
            default_socket: admin.socket.is_none(),
            tcp,
            audit,
            tls,
            console_actions: admin.console_actions.is_some_and(|c| *c.get_ref()),
            limits,
            login_delay,
            public_url,
        },
    ))
}

/// Refuses `[admin] console_actions` and `[admin.tls]` without `[admin] address`, where
/// they are served.
fn only_with_address(
    admin: &RawAdmin,
    at: &dyn Fn(Range<usize>, String) -> super::ConfigError,
) -> Result<(), super::ConfigError> {
    if let (Some(c), None) = (&admin.console_actions, &admin.address) {
        return Err(at(
            c.span(),
            "[admin] console_actions is only used with address (the console is served there)"
                .into(),
        ));
    }
    if let (Some(t), None) = (&admin.tls, &admin.address) {
        return Err(at(
            t.span(),
            "[admin.tls] is only used with [admin] address (TLS is served there)".into(),
        ));
    }
    Ok(())
}

/// `[admin] address` with its bearer tokens (read now), if set: on loopback unless
/// `allow_remote`, and remote only with TLS or `allow_remote_without_tls`.
fn tcp_of(
    admin: &RawAdmin,
    abs: &dyn Fn(&Path) -> PathBuf,
    at: &dyn Fn(Range<usize>, String) -> super::ConfigError,
) -> Result<Option<(SocketAddr, Vec<AdminToken>)>, super::ConfigError> {
    let allow_remote = admin.allow_remote.as_ref().is_some_and(|a| *a.get_ref());
    let tokens_span = admin
        .token_file
        .as_ref()
        .map(Spanned::span)
        .or_else(|| admin.tokens.as_ref().map(Spanned::span));
    match (&admin.address, tokens_span) {
        (None, None) => Ok(None),
        (None, Some(span)) => Err(at(
            span,
            "[admin] token_file and [admin.tokens] are only used with address".into(),
        )),
        (Some(a), None) => Err(at(
            a.span(),
            "[admin] address needs token_file or [admin.tokens] (the bearer tokens clients \
             must send)"
                .into(),
        )),
        (Some(a), Some(_)) => {
            loopback_only(a, allow_remote, "admin", at)?;
            if let Some(remote) = admin.allow_remote.as_ref().filter(|r| *r.get_ref()) {
                if admin.tls.is_none() && !admin.allow_remote_without_tls {
                    return Err(at(
                        remote.span(),
                        "[admin] allow_remote = true without [admin.tls]: the admin token and \
                         the console's session cookie would cross the network in clear text; \
                         set [admin.tls] certificate and private_key, or \
                         allow_remote_without_tls = true if something else encrypts the way \
                         (a VPN, an SSH tunnel)"
                            .into(),
                    ));
                }
            }
            let tokens = read_tokens(admin.token_file.as_ref(), admin.tokens.as_ref(), abs, at)?;
            Ok(Some((*a.get_ref(), tokens)))
        }
    }
}

/// `[admin] public_url`: an `http://` or `https://` address of one word, kept without its
/// trailing `/`.
fn public_url(
    admin: &RawAdmin,
    at: &dyn Fn(Range<usize>, String) -> super::ConfigError,
) -> Result<Option<String>, super::ConfigError> {
    let Some(u) = &admin.public_url else {
        return Ok(None);
    };
    let text = u.get_ref().trim_end_matches('/');
    let rest = text
        .strip_prefix("https://")
        .or_else(|| text.strip_prefix("http://"));
    let fine = rest.is_some_and(|r| {
        !r.is_empty()
            && !r.starts_with('/')
            && r.chars()
                .all(|c| c.is_ascii_graphic() && !matches!(c, '"' | '<' | '>' | '\\' | '?' | '#'))
    });
    if !fine {
        return Err(at(
            u.span(),
            format!(
                "[admin] public_url {:?} is not an http:// or https:// address (e.g. \
                 \"https://floodgate.example.org\")",
                u.get_ref()
            ),
        ));
    }
    Ok(Some(text.to_string()))
}

#[cfg(test)]
mod tests {
    use super::super::{Config, ConfigError};
    use std::path::Path;

    const BASE: &str =
        "[[listener]]\naddress = \"127.0.0.1:0\"\n[upstream]\naddress = \"127.0.0.1:25\"\n";

    fn parse(extra: &str) -> Result<Config, ConfigError> {
        Config::parse(Path::new("/etc/fg/f.toml"), &format!("{BASE}{extra}"))
    }

    fn err(extra: &str) -> String {
        parse(extra).unwrap_err().to_string()
    }

    #[test]
    fn defaults() {
        let c = parse("").unwrap();
        assert!(c.metrics.is_none());
        let s = c.admin.socket.unwrap();
        assert!(c.admin.default_socket);
        assert!(s.to_string_lossy().ends_with(".sock"), "{s:?}");
        assert!(c.admin.tcp.is_none());
        // Next to the state snapshot when there is one.
        let c = parse("[store]\npath = \"state/limits\"\n").unwrap();
        assert_eq!(
            c.admin.socket.unwrap(),
            Path::new("/etc/fg/state/floodgate-admin.sock")
        );
        // The same config path gives the same default; another config another one.
        let a = super::default_socket(None, Path::new("/a/f.toml"));
        assert_eq!(a, super::default_socket(None, Path::new("/a/f.toml")));
        assert_ne!(a, super::default_socket(None, Path::new("/b/f.toml")));
    }

    #[test]
    fn explicit_values() {
        let c = parse("[metrics]\naddress = \"[::1]:9465\"\n[admin]\nsocket = \"run/a.sock\"\n")
            .unwrap();
        assert_eq!(c.metrics.unwrap().address, "[::1]:9465".parse().unwrap());
        assert_eq!(c.admin.socket.unwrap(), Path::new("/etc/fg/run/a.sock"));
        assert!(!c.admin.default_socket);
        let c = parse("[metrics]\naddress = \"0.0.0.0:9465\"\nallow_remote = true\n").unwrap();
        assert!(c.metrics.is_some());
        let c = parse("[admin]\nenabled = false\n").unwrap();
        assert!(c.admin.socket.is_none());
        // The audit log: off by default, relative to the config file's directory.
        assert!(parse("").unwrap().admin.audit.is_none());
        let c = parse("[admin]\naudit = \"log/audit.jsonl\"\n").unwrap();
        assert_eq!(c.admin.audit.unwrap(), Path::new("/etc/fg/log/audit.jsonl"));
    }

    #[test]
    fn token_file_is_read() {
        let dir = tempfile::TempDir::new().unwrap();
        let t = dir.path().join("token");
        std::fs::write(&t, "  0123456789abcdefXYZ \n").unwrap();
        let c = parse(&format!(
            "[admin]\naddress = \"127.0.0.1:9466\"\ntoken_file = \"{}\"\n",
            t.display()
        ))
        .unwrap();
        let (addr, tokens) = c.admin.tcp.unwrap();
        assert_eq!(addr.port(), 9466);
        assert_eq!(tokens.len(), 1);
        // Named by the file's stem.
        assert_eq!(tokens[0].name, "token");
        assert_eq!(tokens[0].secret.expose(), "0123456789abcdefXYZ");
        assert_eq!(format!("{:?}", tokens[0].secret), "<hidden>");
        std::fs::write(&t, "short\n").unwrap();
        let e = err(&format!(
            "[admin]\naddress = \"127.0.0.1:9466\"\ntoken_file = \"{}\"\n",
            t.display()
        ));
        assert!(e.starts_with("/etc/fg/f.toml:7:"), "{e}");
        assert!(e.contains("at least 16 characters"), "{e}");
        std::fs::write(&t, "0123456789abcdef 0123456789abcdef\n").unwrap();
        let e = err(&format!(
            "[admin]\naddress = \"127.0.0.1:9466\"\ntoken_file = \"{}\"\n",
            t.display()
        ));
        assert!(e.contains("one word"), "{e}");
    }

    #[test]
    fn console_actions_default_off_and_set_with_address() {
        let dir = tempfile::TempDir::new().unwrap();
        let t = dir.path().join("token");
        std::fs::write(&t, "0123456789abcdefXYZ\n").unwrap();
        let with = |extra: &str| {
            parse(&format!(
                "[admin]\naddress = \"127.0.0.1:9466\"\ntoken_file = \"{}\"\n{extra}",
                t.display()
            ))
            .unwrap()
            .admin
        };
        assert!(!with("").console_actions);
        assert!(!with("console_actions = false\n").console_actions);
        assert!(with("console_actions = true\n").console_actions);
        assert!(!parse("").unwrap().admin.console_actions);
    }

    #[test]
    fn listener_bounds_and_login_delays() {
        use std::time::Duration;
        let c = parse("").unwrap().admin;
        assert_eq!(c.limits, super::ListenerLimits::default());
        assert_eq!(c.limits.max_connections, 64);
        assert_eq!(c.limits.max_per_address, 8);
        assert_eq!(c.login_delay.per_minute, 60);
        assert_eq!(c.login_delay, super::LoginDelay::default());
        let c = parse(
            "[admin]\nmax_connections = 8\nrequest_timeout = \"2s\"\nwrite_timeout = \"500ms\"\n\
             login_base_delay = \"200ms\"\nlogin_max_delay = \"5s\"\nlogin_decay = \"1m\"\n\
             max_connections_per_address = 3\nlogin_failures_per_minute = 10\n",
        )
        .unwrap()
        .admin;
        assert_eq!(c.limits.max_connections, 8);
        assert_eq!(c.limits.max_per_address, 3);
        assert_eq!(c.login_delay.per_minute, 10);
        assert_eq!(c.limits.request_timeout, Duration::from_secs(2));
        assert_eq!(c.limits.write_timeout, Duration::from_millis(500));
        assert_eq!(c.login_delay.base, Duration::from_millis(200));
        assert_eq!(c.login_delay.max, Duration::from_secs(5));
        assert_eq!(c.login_delay.decay, Duration::from_secs(60));
        // Three listeners' worth of descriptors with the metrics address.
        assert_eq!(c.max_descriptors(true), 16);
        // The bounds hold for the metrics address also with the admin API off.
        let c = parse("[admin]\nenabled = false\nmax_connections = 5\n")
            .unwrap()
            .admin;
        assert_eq!(c.limits.max_connections, 5);
        assert_eq!(c.max_descriptors(true), 5);
        assert_eq!(c.max_descriptors(false), 0);
    }

    fn token_file(dir: &tempfile::TempDir) -> std::path::PathBuf {
        let t = dir.path().join("token");
        std::fs::write(&t, "0123456789abcdefXYZ\n").unwrap();
        t
    }

    #[test]
    fn tls_on_the_admin_address() {
        let dir = tempfile::TempDir::new().unwrap();
        let t = token_file(&dir);
        let c = parse(&format!(
            "[admin]\naddress = \"127.0.0.1:9466\"\ntoken_file = \"{}\"\n\
             [admin.tls]\ncertificate = \"certs/a.crt\"\nprivate_key = \"/k/a.key\"\n",
            t.display()
        ))
        .unwrap()
        .admin;
        let tls = c.tls.unwrap();
        assert_eq!(tls.certificate, Path::new("/etc/fg/certs/a.crt"));
        assert_eq!(tls.private_key, Path::new("/k/a.key"));
        assert!(parse("").unwrap().admin.tls.is_none());
    }

    #[test]
    fn a_remote_address_needs_tls_or_the_explicit_opt_out() {
        let dir = tempfile::TempDir::new().unwrap();
        let t = token_file(&dir);
        let admin = |extra: &str| {
            format!(
                "[admin]\naddress = \"0.0.0.0:9466\"\ntoken_file = \"{}\"\nallow_remote = true\n{extra}",
                t.display()
            )
        };
        let e = err(&admin(""));
        assert!(e.starts_with("/etc/fg/f.toml:8:16: "), "{e}");
        assert!(e.contains("allow_remote = true without [admin.tls]"), "{e}");
        assert!(e.contains("allow_remote_without_tls = true"), "{e}");
        let c = parse(&admin("allow_remote_without_tls = true\n")).unwrap();
        assert!(c.admin.tcp.is_some() && c.admin.tls.is_none());
        let c = parse(&admin(
            "[admin.tls]\ncertificate = \"c.pem\"\nprivate_key = \"k.pem\"\n",
        ))
        .unwrap();
        assert!(c.admin.tls.is_some());
        // A loopback address needs neither.
        let c = parse(&format!(
            "[admin]\naddress = \"127.0.0.1:9466\"\ntoken_file = \"{}\"\n",
            t.display()
        ));
        assert!(c.is_ok());
    }

    #[test]
    fn bad_values_name_file_line_and_column() {
        let cases = [
            (
                "[metrics]\naddress = \"10.0.0.1:9465\"\n",
                "6:11",
                "not a loopback address",
            ),
            (
                "[metrics]\naddress = \"nonsense\"\n",
                "6:11",
                "invalid socket address",
            ),
            ("[metrics]\n", "5:1", "missing field `address`"),
            (
                "[metrics]\naddress = \"127.0.0.1:1\"\nport = 3\n",
                "7:1",
                "unknown field `port`",
            ),
            ("[admin]\nsocket = \"\"\n", "6:10", "must not be empty"),
            (
                "[admin]\naddress = \"127.0.0.1:9466\"\n",
                "6:11",
                "needs token_file or [admin.tokens]",
            ),
            (
                "[admin]\ntoken_file = \"t\"\n",
                "6:14",
                "only used with address",
            ),
            (
                "[admin]\naddress = \"192.0.2.1:9466\"\ntoken_file = \"/nonexistent\"\n",
                "6:11",
                "not a loopback address",
            ),
            (
                "[admin]\naddress = \"127.0.0.1:9466\"\ntoken_file = \"/nonexistent/t\"\n",
                "7:14",
                "cannot read",
            ),
            ("[admin]\nenabled = \"yes\"\n", "6:11", "invalid type"),
            (
                "[admin]\nconsole_actions = true\n",
                "6:19",
                "console_actions is only used with address",
            ),
            (
                "[admin]\nconsole_actions = \"yes\"\n",
                "6:19",
                "invalid type",
            ),
            (
                "[admin]\nmax_connections = 0\n",
                "6:19",
                "max_connections must be between 1 and 1024",
            ),
            (
                "[admin]\nmax_connections = 100000\n",
                "6:19",
                "max_connections must be between 1 and 1024",
            ),
            ("[admin]\nmax_connections = -1\n", "6:19", "invalid value"),
            (
                "[admin]\nmax_connections_per_address = 0\n",
                "6:31",
                "max_connections_per_address must be between 1 and 1024",
            ),
            (
                "[admin]\nmax_connections_per_address = 5000\n",
                "6:31",
                "max_connections_per_address must be between 1 and 1024",
            ),
            (
                "[admin]\nmax_connections_per_address = \"few\"\n",
                "6:31",
                "invalid type",
            ),
            (
                "[admin]\nlogin_failures_per_minute = 0\n",
                "6:29",
                "login_failures_per_minute must be between 1 and 100000",
            ),
            (
                "[admin]\nlogin_failures_per_minute = 1000000\n",
                "6:29",
                "login_failures_per_minute must be between 1 and 100000",
            ),
            (
                "[admin]\nlogin_failures_per_minute = -5\n",
                "6:29",
                "invalid value",
            ),
            (
                "[admin]\nrequest_timeout = \"0s\"\n",
                "6:19",
                "request_timeout must be between",
            ),
            (
                "[admin]\nwrite_timeout = \"1h\"\n",
                "6:17",
                "write_timeout must be between",
            ),
            (
                "[admin]\nwrite_timeout = \"soon\"\n",
                "6:17",
                "bad duration",
            ),
            (
                "[admin]\nlogin_base_delay = \"1ms\"\n",
                "6:20",
                "login_base_delay must be between",
            ),
            (
                "[admin]\nlogin_base_delay = \"10s\"\nlogin_max_delay = \"5s\"\n",
                "7:19",
                "login_max_delay must be between 10s",
            ),
            (
                "[admin]\nlogin_decay = \"30d\"\n",
                "6:15",
                "login_decay must be between",
            ),
            (
                "[admin.tls]\ncertificate = \"c\"\nprivate_key = \"k\"\n",
                "5:1",
                "[admin.tls] is only used with [admin] address",
            ),
            (
                "[admin.tls]\ncertificate = \"c\"\n",
                "5:1",
                "missing field `private_key`",
            ),
            (
                "[admin.tls]\ncertificate = \"c\"\nprivate_key = \"k\"\nca = \"x\"\n",
                "8:1",
                "unknown field `ca`",
            ),
            (
                "[admin]\naudit = \"\"\n",
                "6:9",
                "[admin] audit must not be empty",
            ),
            (
                "[admin]\nenabled = false\naudit = \"a.jsonl\"\n",
                "7:9",
                "audit is only used with the admin API",
            ),
            (
                "[admin]\nallow_remote_without_tls = \"yes\"\n",
                "6:28",
                "invalid type",
            ),
        ];
        for (extra, at, what) in cases {
            let e = err(extra);
            assert!(e.contains(what), "{extra}: {e}");
            assert!(
                e.starts_with(&format!("/etc/fg/f.toml:{at}: ")),
                "{extra}: {e}"
            );
            assert!(e.contains(what), "{extra}: {e}");
        }
    }
}
