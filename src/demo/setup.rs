//! The demo's config: the shipped one as it is, with its policy's clock sped up by
//! [`TIME_SCALE`] (every period of a limit divided by it: an hour lasts 10 s, a day 4 min;
//! the limits' numbers and actions stay), its upstream the stand-in smart host, its alerts
//! POSTed to the demo's receiver, its state (snapshot, event log, hold spool, admin socket)
//! in a scratch directory, and its listeners on the shipped addresses or, when those are
//! taken, on free loopback ports.

use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::time::Duration;

use toml::{Table, Value};

use super::DemoError;
use crate::config::parse_duration;

/// How much faster the demo's policy clock runs than the shipped one.
pub const TIME_SCALE: u64 = 360;

/// The demo's config, written, and what the demo needs to know of it.
#[derive(Debug)]
pub struct DemoConfig {
    /// The config file written in the scratch directory.
    pub path: PathBuf,
    /// Each listener: its name, the address it gets, whether it uses TLS from the start.
    pub listeners: Vec<(String, SocketAddr, bool)>,
    /// Listeners moved off their shipped address: name, shipped address, new address.
    pub moved: Vec<(String, String, SocketAddr)>,
    /// The CA the demo's clients trust (`ca.crt` beside `[tls] certificate`).
    pub ca_file: PathBuf,
    /// The admin socket.
    pub socket: PathBuf,
    /// The web console's address and token.
    pub console: (SocketAddr, String),
}

impl DemoConfig {
    /// The first implicit-TLS listener, where the demo's clients submit.
    pub fn submission(&self) -> Option<SocketAddr> {
        self.listeners.iter().find(|l| l.2).map(|l| l.1)
    }
}

fn bad(path: &Path, reason: impl Into<String>) -> DemoError {
    DemoError::Config {
        path: path.to_path_buf(),
        reason: reason.into(),
    }
}

/// A period divided by [`TIME_SCALE`], in whole seconds; `None` when it does not divide.
fn scaled(period: &str) -> Option<String> {
    let d = parse_duration(period.trim()).ok()?;
    let secs = d.as_secs();
    (d.subsec_nanos() == 0 && secs % TIME_SCALE == 0 && secs > 0)
        .then(|| format!("{}s", secs / TIME_SCALE))
}

/// `m / p / ...` (Exim's ratelimit, or `rate`) with its period `p` scaled.
fn scaled_rate(text: &str) -> Option<String> {
    let mut parts = text.splitn(3, '/');
    let m = parts.next()?;
    let p = parts.next()?;
    let mut out = format!("{} / {}", m.trim(), scaled(p)?);
    if let Some(rest) = parts.next() {
        out.push_str(" /");
        out.push_str(rest);
    }
    Some(out)
}

/// Speeds up one `[[limit]]`'s clock: its ratelimit or rate period, its ratio period, a
/// restriction's duration.
fn scale_limit(limit: &mut Table, path: &Path) -> Result<(), DemoError> {
    for key in ["ratelimit", "rate"] {
        if let Some(Value::String(s)) = limit.get(key) {
            let new = scaled_rate(s).ok_or_else(|| {
                bad(
                    path,
                    format!("{key} = {s:?}: its period is not a whole multiple of {TIME_SCALE} s"),
                )
            })?;
            limit.insert(key.into(), Value::String(new));
        }
    }
    for key in ["period", "restrict_for"] {
        if let Some(Value::String(s)) = limit.get(key) {
            if s != "until_released" {
                let new = scaled(s).ok_or_else(|| {
                    bad(
                        path,
                        format!("{key} = {s:?}: not a whole multiple of {TIME_SCALE} s"),
                    )
                })?;
                limit.insert(key.into(), Value::String(new));
            }
        }
    }
    Ok(())
}

/// `addr` when it can be bound now, else a free port of 127.0.0.1.
fn free_or(addr: &str) -> Result<(SocketAddr, bool), DemoError> {
    if let Ok(l) = TcpListener::bind(addr) {
        let a = l
            .local_addr()
            .map_err(DemoError::io(format!("the address of {addr}")))?;
        return Ok((a, false));
    }
    let l = TcpListener::bind("127.0.0.1:0").map_err(DemoError::io("bind 127.0.0.1:0"))?;
    let a = l
        .local_addr()
        .map_err(DemoError::io("the address of 127.0.0.1:0"))?;
    Ok((a, true))
}

fn table<'a>(root: &'a mut Table, name: &str) -> &'a mut Table {
    let v = root
        .entry(name.to_string())
        .or_insert_with(|| Value::Table(Table::new()));
    if !v.is_table() {
        *v = Value::Table(Table::new());
    }
    v.as_table_mut().expect("a table")
}

fn text(p: &Path) -> Value {
    Value::String(p.display().to_string())
}

/// A random token for the console, from the system's random source.
fn token() -> Result<String, DemoError> {
    use std::io::Read;
    let mut raw = [0u8; 16];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut raw))
        .map_err(DemoError::io("reading /dev/urandom"))?;
    Ok(raw.iter().map(|b| format!("{b:02x}")).collect())
}

/// Writes a file readable by its owner only.
fn write_private(path: &Path, contents: &str) -> Result<(), DemoError> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .and_then(|mut f| f.write_all(contents.as_bytes()))
        .map_err(DemoError::io(format!("writing {}", path.display())))
}

/// Derives the demo's config from `shipped` and writes it, with its hold spool, into
/// `dir` (a private directory), the upstream being `upstream` and alerts going to
/// `webhook`.
pub fn write(
    shipped: &Path,
    dir: &Path,
    upstream: SocketAddr,
    webhook: &str,
) -> Result<DemoConfig, DemoError> {
    let source = std::fs::read_to_string(shipped)
        .map_err(DemoError::io(format!("reading {}", shipped.display())))?;
    let mut root: Table = source
        .parse()
        .map_err(|e: toml::de::Error| bad(shipped, e.message().to_string()))?;
    let base = std::path::absolute(shipped.parent().unwrap_or(Path::new("."))).map_err(
        DemoError::io(format!("the directory of {}", shipped.display())),
    )?;
    let absolute = |p: &str| -> PathBuf {
        let p = Path::new(p);
        if p.is_absolute() {
            p.to_path_buf()
        } else {
            base.join(p)
        }
    };

    let ca_file = keep_tls(&mut root, shipped, &absolute)?;
    let (listeners, moved) = listeners_on_free_ports(&mut root, shipped)?;
    stand_in_upstream(&mut root, upstream);
    let (socket, console) = state_in(&mut root, dir)?;
    alerts_to(&mut root, shipped, webhook)?;
    keep_lists(&mut root, &absolute);
    faster_policy(&mut root, shipped)?;

    // Quiet logs (the demo prints what happens) and no name lookups on loopback.
    table(&mut root, "log").insert("level".into(), "warn".into());
    table(&mut root, "server").insert("resolve_client_names".into(), Value::Boolean(false));

    let path = dir.join("floodgate.toml");
    let written = toml::to_string(&root).map_err(|e| bad(shipped, e.to_string()))?;
    write_private(&path, &written)?;
    Ok(DemoConfig {
        path,
        listeners,
        moved,
        ca_file,
        socket,
        console,
    })
}

/// `[tls]`: the certificate stays the shipped one, wherever the demo's config is written.
/// Returns the CA the demo's clients trust (`ca.crt` beside the certificate).
fn keep_tls(
    root: &mut Table,
    shipped: &Path,
    absolute: &dyn Fn(&str) -> PathBuf,
) -> Result<PathBuf, DemoError> {
    let tls = table(root, "tls");
    let mut ca_file = None;
    for key in ["certificate", "private_key"] {
        let Some(Value::String(p)) = tls.get(key) else {
            return Err(bad(shipped, format!("[tls] {key} is needed by the demo")));
        };
        let p = absolute(p);
        if key == "certificate" {
            ca_file = Some(p.with_file_name("ca.crt"));
        }
        tls.insert(key.into(), text(&p));
    }
    let ca_file = ca_file.expect("certificate read above");
    if !ca_file.exists() {
        return Err(bad(
            shipped,
            format!(
                "the demo's clients trust {}, which does not exist",
                ca_file.display()
            ),
        ));
    }
    Ok(ca_file)
}

/// Each listener of the demo: its name, its address, whether it uses TLS from the start.
type Listeners = Vec<(String, SocketAddr, bool)>;
/// Listeners moved off their shipped address: name, shipped address, new address.
type Moved = Vec<(String, String, SocketAddr)>;

/// `[[listener]]`: the shipped addresses, or free loopback ports when taken. Returns each
/// listener (name, address, implicit TLS) and those moved (name, shipped address, new).
fn listeners_on_free_ports(
    root: &mut Table,
    shipped: &Path,
) -> Result<(Listeners, Moved), DemoError> {
    let mut listeners = Vec::new();
    let mut moved = Vec::new();
    let Some(Value::Array(list)) = root.get_mut("listener") else {
        return Err(bad(shipped, "no [[listener]]"));
    };
    for l in list.iter_mut() {
        let Some(l) = l.as_table_mut() else { continue };
        let name = l
            .get("name")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string();
        let shipped_addr = l
            .get("address")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string();
        let (addr, was_taken) = free_or(&shipped_addr)?;
        if was_taken {
            moved.push((name.clone(), shipped_addr, addr));
        }
        // The demo plays without a PROXY header.
        l.insert("proxy_protocol".into(), Value::Boolean(false));
        l.insert("address".into(), Value::String(addr.to_string()));
        let implicit = l.get("tls").and_then(Value::as_str) == Some("implicit");
        listeners.push((name, addr, implicit));
    }
    Ok((listeners, moved))
}

/// `[upstream]`: the stand-in, plain SMTP; it learns nothing of the client (no XCLIENT).
fn stand_in_upstream(root: &mut Table, upstream: SocketAddr) {
    let mut up = Table::new();
    up.insert("address".into(), Value::String(upstream.to_string()));
    up.insert("tls".into(), "none".into());
    up.insert("client_identity".into(), "none".into());
    if let Some(Value::Table(old)) = root.get("upstream") {
        if let Some(h) = old.get("helo_name") {
            up.insert("helo_name".into(), h.clone());
        }
        if old.contains_key("high_risk") {
            let mut risky = Table::new();
            risky.insert("address".into(), Value::String(upstream.to_string()));
            up.insert("high_risk".into(), Value::Table(risky));
        }
    }
    root.insert("upstream".into(), Value::Table(up));
}

/// State in the scratch directory `dir`: the store, the event log, the hold spool, the
/// admin socket and the console (a free loopback port, a new token). Returns the socket
/// and the console's address and token.
fn state_in(root: &mut Table, dir: &Path) -> Result<(PathBuf, (SocketAddr, String)), DemoError> {
    let mut store = Table::new();
    store.insert("backend".into(), "memory".into());
    store.insert("path".into(), text(&dir.join("floodgate.state")));
    root.insert("store".into(), Value::Table(store));
    table(root, "report").insert("events".into(), text(&dir.join("events.jsonl")));
    let hold_dir = dir.join("hold");
    {
        use std::os::unix::fs::DirBuilderExt;
        std::fs::DirBuilder::new()
            .mode(0o700)
            .create(&hold_dir)
            .map_err(DemoError::io(format!("creating {}", hold_dir.display())))?;
    }
    table(root, "hold").insert("dir".into(), text(&hold_dir));
    let socket = dir.join("admin.sock");
    let (console_addr, _) = free_or("127.0.0.1:0")?;
    let console_token = token()?;
    let token_file = dir.join("admin.token");
    write_private(&token_file, &console_token)?;
    let mut admin = Table::new();
    admin.insert("socket".into(), text(&socket));
    admin.insert("address".into(), Value::String(console_addr.to_string()));
    admin.insert("token_file".into(), text(&token_file));
    admin.insert("console_actions".into(), Value::Boolean(true));
    root.insert("admin".into(), Value::Table(admin));
    // Neither the smart host's log nor a metrics port of the shipped config is the demo's.
    root.remove("outcomes");
    root.remove("metrics");
    Ok((socket, (console_addr, console_token)))
}

/// `[alerts]`: to the demo's receiver `webhook`, with the shipped settings otherwise.
fn alerts_to(root: &mut Table, shipped: &Path, webhook: &str) -> Result<(), DemoError> {
    let alerts = table(root, "alerts");
    alerts.remove("command");
    alerts.remove("ca_file");
    alerts.insert("webhook".into(), Value::String(webhook.to_string()));
    if let Some(Value::String(p)) = alerts.get("period") {
        let p = scaled(p).ok_or_else(|| bad(shipped, "[alerts] period does not scale"))?;
        alerts.insert("period".into(), Value::String(p));
    }
    Ok(())
}

/// `[lists]`: list files stay where the shipped config has them.
fn keep_lists(root: &mut Table, absolute: &dyn Fn(&str) -> PathBuf) {
    if let Some(Value::Table(lists)) = root.get_mut("lists") {
        for (_, l) in lists.iter_mut() {
            if let Some(Value::String(f)) = l.get("file") {
                let f = absolute(f);
                if let Some(t) = l.as_table_mut() {
                    t.insert("file".into(), text(&f));
                }
            }
        }
    }
}

/// The policy: the shipped limits and actions, on the faster clock.
fn faster_policy(root: &mut Table, shipped: &Path) -> Result<(), DemoError> {
    if let Some(Value::Array(limits)) = root.get_mut("limit") {
        for l in limits.iter_mut().filter_map(Value::as_table_mut) {
            scale_limit(l, shipped)?;
        }
    }
    if let Some(Value::Table(a)) = root.get_mut("auth_failures") {
        if let Some(Value::String(d)) = a.get("decay") {
            if let Some(d) = scaled(d) {
                a.insert("decay".into(), Value::String(d));
            }
        }
    }
    Ok(())
}

/// How long an hour of the shipped policy lasts in the demo.
pub fn demo_hour() -> Duration {
    Duration::from_secs(3600 / TIME_SCALE)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn periods_are_divided_and_the_rest_kept() {
        assert_eq!(scaled("1h").as_deref(), Some("10s"));
        assert_eq!(scaled("1d").as_deref(), Some("240s"));
        assert_eq!(scaled("7s"), None);
        assert_eq!(
            scaled_rate("1000 / 1d / per_rcpt / ${client_ip/24}").as_deref(),
            Some("1000 / 240s / per_rcpt / ${client_ip/24}")
        );
        assert_eq!(scaled_rate("10 / 30m").as_deref(), Some("10 / 5s"));
    }
}
