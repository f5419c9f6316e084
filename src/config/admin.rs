//! `[metrics]` and `[admin]`: where floodgate exports its counters and answers admin
//! requests. Neither is changed by a reload.

use std::net::SocketAddr;
use std::ops::Range;
use std::path::{Path, PathBuf};

use serde::Deserialize;
use toml::Spanned;

use super::store::Secret;

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
    /// The file holding the bearer token (relative to the config file's directory).
    #[serde(default)]
    pub token_file: Option<Spanned<PathBuf>>,
    /// Allow a non-loopback TCP address.
    #[serde(default)]
    pub allow_remote: bool,
    /// Let the web console on the TCP address release, delete, reset and end restrictions
    /// (default false: the console only shows).
    #[serde(default)]
    pub console_actions: Option<Spanned<bool>>,
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
    /// The token-guarded TCP address, with the token.
    pub tcp: Option<(SocketAddr, Secret)>,
    /// The web console on the TCP address may act (release, delete, reset), not only show.
    pub console_actions: bool,
}

/// The shortest bearer token accepted.
pub const MIN_TOKEN_LEN: usize = 16;

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
    if admin.enabled == Some(false) {
        return Ok((metrics, AdminConfig::default()));
    }
    let socket = match &admin.socket {
        Some(s) if s.get_ref().as_os_str().is_empty() => {
            return Err(at(s.span(), "[admin] socket must not be empty".into()));
        }
        Some(s) => abs(s.get_ref()),
        None => default_socket(state_path, config_path),
    };
    if let (Some(c), None) = (&admin.console_actions, &admin.address) {
        return Err(at(
            c.span(),
            "[admin] console_actions is only used with address (the console is served there)"
                .into(),
        ));
    }
    let tcp = match (&admin.address, &admin.token_file) {
        (None, None) => None,
        (None, Some(t)) => {
            return Err(at(
                t.span(),
                "[admin] token_file is only used with address".into(),
            ))
        }
        (Some(a), None) => {
            return Err(at(
                a.span(),
                "[admin] address needs token_file (the bearer token clients must send)".into(),
            ))
        }
        (Some(a), Some(t)) => {
            loopback_only(a, admin.allow_remote, "admin", at)?;
            let path = abs(t.get_ref());
            let text = std::fs::read_to_string(&path).map_err(|e| {
                at(
                    t.span(),
                    format!("[admin] token_file {}: cannot read: {e}", path.display()),
                )
            })?;
            let token = text.trim();
            if token.len() < MIN_TOKEN_LEN
                || token.chars().any(|c| c.is_whitespace() || c.is_control())
            {
                return Err(at(
                    t.span(),
                    format!(
                        "[admin] token_file {}: the token must be one word of at least {MIN_TOKEN_LEN} characters",
                        path.display()
                    ),
                ));
            }
            Some((*a.get_ref(), Secret::new(token.to_string())))
        }
    };
    Ok((
        metrics,
        AdminConfig {
            socket: Some(socket),
            default_socket: admin.socket.is_none(),
            tcp,
            console_actions: admin.console_actions.is_some_and(|c| *c.get_ref()),
        },
    ))
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
        let (addr, token) = c.admin.tcp.unwrap();
        assert_eq!(addr.port(), 9466);
        assert_eq!(token.expose(), "0123456789abcdefXYZ");
        assert_eq!(format!("{token:?}"), "<hidden>");
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
                "needs token_file",
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
