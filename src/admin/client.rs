//! The CLI side of the admin verbs: one HTTP request over the admin socket (hyper's
//! HTTP/1.1 client), the answer shown as a table (or as the server's JSON).

use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Empty, Limited};
use hyper_util::rt::TokioIo;
use serde_json::Value;
use tokio::io::{AsyncRead, AsyncWrite};

use super::http::percent_encode;
use crate::figures;

/// How long the CLI waits for floodgate's answer.
const TIMEOUT: Duration = Duration::from_secs(60);
/// How long a verb waits for the admin socket to appear and accept.
pub const CONNECT_WAIT: Duration = Duration::from_secs(5);
/// The largest answer read.
const MAX_ANSWER: usize = 64 << 20;

/// Why an admin verb failed.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// Nothing answers at the socket path.
    #[error("cannot connect to admin socket {path} (waited 5s): {source} — is floodgate running with [admin] socket?")]
    Connect {
        /// The socket path.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The connection broke.
    #[error("admin socket {path}: {source}")]
    Io {
        /// The socket path.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// floodgate's answer could not be understood.
    #[error("admin socket {0}: unreadable answer")]
    Garbled(PathBuf),
    /// floodgate refused the request.
    #[error("{0}")]
    Refused(String),
    /// The socket is served by another user: not floodgate's (or not ours to trust).
    #[error(
        "admin socket {path} is served by uid {uid}, neither this user (uid {me}) nor root, \
         nor (for root) the owner of a directory only it may write that holds the socket: \
         not talking to it (another user may have put a socket there; give --socket or \
         [admin] socket a private path)"
    )]
    Untrusted {
        /// The socket path.
        path: PathBuf,
        /// The user serving it.
        uid: u32,
        /// This process's user.
        me: u32,
    },
}

/// One of the admin verbs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verb {
    /// Report what became of one recipient of a queued message.
    Outcome {
        /// Upstream's queue id.
        queue_id: String,
        /// The recipient.
        recipient: String,
        /// bounced, deferred or sent.
        result: String,
    },
    /// Every limit's reading of a key.
    Inspect(String),
    /// Remove every record of a key.
    Reset(String),
    /// The keys nearest their limits.
    Top {
        /// Only this limit.
        limit: Option<String>,
        /// How many.
        n: usize,
    },
    /// Reload the configuration.
    Reload,
    /// List held messages (all, or those of a key); `wide`: every recipient, not their
    /// count.
    HeldList {
        /// Only the messages held for this key.
        key: Option<String>,
        /// Every recipient listed.
        wide: bool,
    },
    /// One held message's envelope and header section.
    HeldShow(String),
    /// Release (relay) held messages: one id, or every one of a key.
    HeldRelease(HeldTarget),
    /// Delete held messages: one id, or every one of a key.
    HeldDelete(HeldTarget),
    /// List the restricted keys.
    Restricted,
    /// List the campaigns of message keys.
    Campaigns,
    /// One action on every account of a campaign.
    CampaignAct {
        /// The campaign's id.
        id: String,
        /// `release-held`, `delete-held` or `release`.
        op: String,
        /// Why.
        reason: String,
        /// Release mail of accounts still restricted all the same.
        confirm: bool,
    },
    /// End a key's restriction.
    Release {
        /// The key.
        key: String,
        /// Why.
        reason: String,
    },
    /// Restrict a key by hand.
    Restrict {
        /// The key.
        key: String,
        /// A duration or `until_released`.
        duration: String,
        /// Why.
        reason: String,
    },
}

/// Which held messages a release or delete acts on, and why. Who asks is not said: the
/// server reads it off the admin socket (the user of the process that connected).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeldTarget {
    /// One message by id…
    pub id: Option<String>,
    /// …or every message held for this key.
    pub key: Option<String>,
    /// Why.
    pub reason: String,
    /// Release mail of a key that is still restricted all the same (`--confirm`).
    pub confirm: bool,
}

impl HeldTarget {
    fn query(&self) -> String {
        let mut q = match (&self.id, &self.key) {
            (Some(id), _) => format!("id={}", percent_encode(id)),
            (None, Some(k)) => format!("key={}", percent_encode(k)),
            (None, None) => String::new(),
        };
        q.push_str(&format!("&reason={}", percent_encode(&self.reason)));
        if self.confirm {
            q.push_str("&confirm=true");
        }
        q
    }
}

impl Verb {
    /// Method and target of the request.
    pub fn request(&self) -> (&'static str, String) {
        match self {
            Verb::Inspect(k) => ("GET", format!("/v1/inspect?key={}", percent_encode(k))),
            Verb::Reset(k) => ("POST", format!("/v1/reset?key={}", percent_encode(k))),
            Verb::Top { limit, n } => {
                let mut t = format!("/v1/top?n={n}");
                if let Some(l) = limit {
                    t.push_str("&limit=");
                    t.push_str(&percent_encode(l));
                }
                ("GET", t)
            }
            Verb::Reload => ("POST", "/v1/reload".into()),
            Verb::HeldList { key: None, .. } => ("GET", "/v1/held".into()),
            Verb::HeldList { key: Some(k), .. } => {
                ("GET", format!("/v1/held?key={}", percent_encode(k)))
            }
            Verb::HeldShow(id) => ("GET", format!("/v1/held/show?id={}", percent_encode(id))),
            Verb::HeldRelease(t) => ("POST", format!("/v1/held/release?{}", t.query())),
            Verb::HeldDelete(t) => ("POST", format!("/v1/held/delete?{}", t.query())),
            Verb::Restricted => ("GET", "/v1/restricted".into()),
            Verb::Campaigns => ("GET", "/v1/campaigns".into()),
            Verb::CampaignAct {
                id,
                op,
                reason,
                confirm,
            } => (
                "POST",
                format!(
                    "/v1/campaigns/act?id={}&op={}&reason={}{}",
                    percent_encode(id),
                    percent_encode(op),
                    percent_encode(reason),
                    if *confirm { "&confirm=true" } else { "" }
                ),
            ),
            Verb::Outcome {
                queue_id,
                recipient,
                result,
            } => (
                "POST",
                format!(
                    "/v1/outcome?queue_id={}&recipient={}&result={}",
                    percent_encode(queue_id),
                    percent_encode(recipient),
                    percent_encode(result)
                ),
            ),
            Verb::Release { key, reason } => (
                "POST",
                format!(
                    "/v1/release?key={}&reason={}",
                    percent_encode(key),
                    percent_encode(reason)
                ),
            ),
            Verb::Restrict {
                key,
                duration,
                reason,
            } => (
                "POST",
                format!(
                    "/v1/restrict?key={}&for={}&reason={}",
                    percent_encode(key),
                    percent_encode(duration),
                    percent_encode(reason)
                ),
            ),
        }
    }
}

/// `floodgate campaign ID OP`: what was done to how many, of how many accounts, and what
/// failed.
fn render_campaign_act(id: &str, op: &str, v: &Value) -> String {
    let (field, noun) = match op {
        "release" => ("ended", "restriction"),
        "release-held" => ("released", "held message"),
        _ => ("deleted", "held message"),
    };
    let accounts: Vec<&str> = items(&v["accounts"])
        .iter()
        .filter_map(|a| a.as_str())
        .collect();
    let n = items(&v[field]).len() as u64;
    let mut out = format!(
        "{id}: {} {field}, of its {} ({})\n",
        crate::figures::count(n, noun),
        crate::figures::count(accounts.len() as u64, "account"),
        accounts.join(", ")
    );
    for f in items(&v["failed"]) {
        out.push_str(&format!("  not done: {}\n", f.as_str().unwrap_or("")));
    }
    out
}

/// `floodgate campaigns`: per campaign a heading line, then its accounts as a table.
fn render_campaigns(v: &Value) -> String {
    let list = items(&v["campaigns"]);
    if list.is_empty() {
        return "no campaigns\n".into();
    }
    let mut out = String::new();
    for c in list {
        out.push_str(&format!(
            "campaign {} (limit {}, since {}): {} copies, {} recipients, {} accounts, Subject {:?}, links {}\n",
            c["message_key"].as_str().unwrap_or(""),
            c["limit"].as_str().unwrap_or(""),
            c["since"].as_str().unwrap_or(""),
            c["copies"].as_u64().unwrap_or(0),
            c["recipients"].as_u64().unwrap_or(0),
            c["accounts"].as_array().map_or(0, Vec::len),
            c["subject"].as_str().unwrap_or(""),
            strings(&c["link_domains"]).join(", "),
        ));
        let rows: Vec<Vec<String>> = items(&c["accounts"])
            .iter()
            .map(|a| {
                vec![
                    a["key"].as_str().unwrap_or("").into(),
                    a["copies"].as_u64().unwrap_or(0).to_string(),
                    a["recipients"].as_u64().unwrap_or(0).to_string(),
                    a["client_ip"].as_str().unwrap_or("").into(),
                    a["last"].as_str().unwrap_or("").into(),
                    yes(&a["restricted"]),
                ]
            })
            .collect();
        out.push_str(&table(
            &[
                "ACCOUNT",
                "COPIES",
                "RECIPIENTS",
                "CLIENT",
                "LAST",
                "RESTRICTED",
            ],
            &rows,
        ));
        let held: Vec<&str> = items(&c["held"])
            .iter()
            .filter_map(|h| h["id"].as_str())
            .collect();
        if !held.is_empty() {
            out.push_str(&format!("held: {}\n", held.join(" ")));
        }
        out.push('\n');
    }
    out
}

/// Sends `verb` to the floodgate at `socket` and returns its JSON answer.
pub fn call(socket: &Path, verb: &Verb) -> Result<Value, ClientError> {
    let io = |source| ClientError::Io {
        path: socket.to_path_buf(),
        source,
    };
    let s = connect_waiting(socket)?;
    // Before a request is sent: nothing, not even the verb, goes to a stranger's socket.
    let (uid, me) = (
        super::peer::peer_uid(&s).map_err(io)?,
        super::peer::my_uid(),
    );
    let root_trusts = me == 0 && served_by_its_directory(socket, uid);
    if !(super::peer::trusted(uid, me) || root_trusts) {
        return Err(ClientError::Untrusted {
            path: socket.to_path_buf(),
            uid,
            me,
        });
    }
    s.set_nonblocking(true).map_err(io)?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(io)?;
    let (method, target) = verb.request();
    let answer = runtime.block_on(async {
        let s = tokio::net::UnixStream::from_std(s)?;
        let invoker = super::invoker::of_this_process().map(|c| c.header_value());
        let headers: Vec<(&str, String)> = invoker
            .into_iter()
            .map(|v| ("Floodgate-Invoker", v))
            .collect();
        tokio::time::timeout(TIMEOUT, exchange_with(s, method, &target, None, &headers))
            .await
            .map_err(|_| {
                std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    format!("no answer within {}s", TIMEOUT.as_secs()),
                )
            })?
    });
    let garbled = || ClientError::Garbled(socket.to_path_buf());
    let (status, body) = match answer {
        Ok(a) => a,
        Err(e) if e.kind() == std::io::ErrorKind::InvalidData => return Err(garbled()),
        Err(e) => return Err(io(e)),
    };
    let value: Value = serde_json::from_slice(&body).map_err(|_| garbled())?;
    if status != 200 {
        let msg = value["error"].as_str().unwrap_or("(no reason given)");
        return Err(ClientError::Refused(format!(
            "floodgate answered {status}: {msg}"
        )));
    }
    Ok(value)
}

/// Whether the socket at `socket` lies in a directory owned by `uid`, the user serving it,
/// that no other user may write (not a shared directory such as /tmp, where anyone may put
/// a socket): root trusts floodgate's user there, as it is the service's own directory
/// (`/run/floodgate`).
fn served_by_its_directory(socket: &Path, uid: u32) -> bool {
    use std::os::unix::fs::MetadataExt;
    let dir = match socket.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let socket_owner = std::fs::symlink_metadata(socket).map(|m| m.uid());
    match std::fs::metadata(dir) {
        Ok(m) => {
            super::peer::owns_private_dir(uid, m.uid(), m.mode())
                && socket_owner.is_ok_and(|o| o == uid)
        }
        Err(_) => false,
    }
}

/// Connects to the admin socket, waiting up to [`CONNECT_WAIT`] while it is not there yet
/// or nobody accepts on it: a floodgate started a moment ago binds its listeners, then
/// serves the socket, so a verb run right after `floodgate run &` finds it once it can
/// answer (and its listeners take mail).
fn connect_waiting(socket: &Path) -> Result<UnixStream, ClientError> {
    let deadline = std::time::Instant::now() + CONNECT_WAIT;
    loop {
        match UnixStream::connect(socket) {
            Ok(s) => return Ok(s),
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::NotFound | std::io::ErrorKind::ConnectionRefused
                ) && std::time::Instant::now() < deadline =>
            {
                std::thread::sleep(Duration::from_millis(100));
            }
            Err(source) => {
                return Err(ClientError::Connect {
                    path: socket.to_path_buf(),
                    source,
                })
            }
        }
    }
}

/// Sends one request over `io`, a connected stream (the admin socket, or the admin TCP
/// address with its bearer `token`), and returns the answer's status and body. An answer
/// that is not HTTP, or a body over 64 MiB, is an `InvalidData` error.
pub async fn exchange<S>(
    io: S,
    method: &str,
    target: &str,
    token: Option<&str>,
) -> std::io::Result<(u16, Bytes)>
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    exchange_with(io, method, target, token, &[]).await
}

/// [`exchange`] with more header fields (`name`, `value`).
pub async fn exchange_with<S>(
    io: S,
    method: &str,
    target: &str,
    token: Option<&str>,
    headers: &[(&str, String)],
) -> std::io::Result<(u16, Bytes)>
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    use hyper::header;
    let garbled = |e: &dyn std::fmt::Display| {
        std::io::Error::new(std::io::ErrorKind::InvalidData, e.to_string())
    };
    let fail = |e: hyper::Error| {
        if e.is_parse() || e.is_parse_status() {
            garbled(&e)
        } else {
            std::io::Error::other(e)
        }
    };
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(io))
        .await
        .map_err(fail)?;
    let driver = tokio::spawn(conn);
    let mut req = hyper::Request::builder()
        .method(hyper::Method::from_bytes(method.as_bytes()).map_err(|e| garbled(&e))?)
        .uri(target)
        .header(header::HOST, "floodgate")
        .header(header::CONNECTION, "close");
    if let Some(token) = token {
        req = req.header(header::AUTHORIZATION, format!("Bearer {token}"));
    }
    for (name, value) in headers {
        req = req.header(*name, value.as_str());
    }
    let req = req
        .body(Empty::<Bytes>::new())
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))?;
    let answer = sender.send_request(req).await.map_err(fail)?;
    let status = answer.status().as_u16();
    let body = Limited::new(answer.into_body(), MAX_ANSWER)
        .collect()
        .await
        .map_err(|e| match e.downcast::<hyper::Error>() {
            Ok(e) => fail(*e),
            Err(e) => garbled(&e),
        })?
        .to_bytes();
    driver.abort();
    Ok((status, body))
}

fn num(v: &Value) -> String {
    v.as_f64()
        .map_or_else(|| "-".into(), figures::three_decimals)
}

fn until(v: &Value) -> String {
    match v.as_f64() {
        None => "never".into(),
        Some(s) if s <= 0.0 => "now".into(),
        Some(s) => figures::duration(s.ceil() as u64),
    }
}

/// Lays out rows under a header, columns padded to their widest cell.
fn table(header: &[&str], rows: &[Vec<String>]) -> String {
    let mut w: Vec<usize> = header.iter().map(|h| h.len()).collect();
    for r in rows {
        for (i, c) in r.iter().enumerate() {
            w[i] = w[i].max(c.chars().count());
        }
    }
    let line = |cells: Vec<&str>| {
        let mut s = String::new();
        for (i, c) in cells.iter().enumerate() {
            if i + 1 == cells.len() {
                s.push_str(c);
            } else {
                s.push_str(&format!("{c:<width$}  ", width = w[i]));
            }
        }
        s.trim_end().to_string() + "\n"
    };
    let mut out = line(header.to_vec());
    for r in rows {
        out.push_str(&line(r.iter().map(String::as_str).collect()));
    }
    out
}

fn yes(v: &Value) -> String {
    if v.as_bool() == Some(true) {
        "yes"
    } else {
        "no"
    }
    .into()
}

/// The elements of an array in an answer (none when absent).
fn items(v: &Value) -> &[Value] {
    v.as_array().map(Vec::as_slice).unwrap_or_default()
}

/// The strings of an array in an answer (none when absent).
fn strings(v: &Value) -> Vec<&str> {
    items(v).iter().filter_map(Value::as_str).collect()
}

/// The human-readable form of an answer to `verb`.
pub fn render(verb: &Verb, v: &Value) -> String {
    match verb {
        Verb::Inspect(_) => render_inspect(v),
        Verb::Reset(k) => {
            let n = v["removed"].as_u64().unwrap_or(0);
            format!("{k}: removed {n} record{}\n", if n == 1 { "" } else { "s" })
        }
        Verb::Top { .. } => render_top(v),
        Verb::Reload => "configuration reloaded\n".into(),
        Verb::HeldList { wide, .. } => render_held_list(v, *wide),
        Verb::HeldShow(_) => render_held_show(v),
        Verb::HeldRelease(_) => render_held_done(v, true),
        Verb::HeldDelete(_) => render_held_done(v, false),
        Verb::Campaigns => render_campaigns(v),
        Verb::CampaignAct { id, op, .. } => render_campaign_act(id, op, v),
        Verb::Restricted => render_restricted(v),
        Verb::Release { key, .. } => format!("{key}: released\n"),
        Verb::Outcome { .. } => format!(
            "{} {}: {} ({})\n",
            v["queue_id"].as_str().unwrap_or(""),
            v["recipient"].as_str().unwrap_or(""),
            v["result"].as_str().unwrap_or(""),
            v["counted"].as_str().unwrap_or("")
        ),
        Verb::Restrict { key, .. } => format!(
            "{key}: restricted until {}\n",
            v["restricted"]["until"].as_str().unwrap_or("released")
        ),
    }
}

/// `inspect`: a key's reading for every limit, its restriction and baselines.
fn render_inspect(v: &Value) -> String {
    let rows: Vec<Vec<String>> = items(&v["limits"])
        .iter()
        .map(|l| {
            vec![
                l["limit"].as_str().unwrap_or("").into(),
                l["algorithm"].as_str().unwrap_or("").into(),
                l["key"].as_str().unwrap_or("(not stored)").into(),
                num(&l["value"]),
                num(&l["limit_value"]),
                l["period"].as_str().unwrap_or("").into(),
                yes(&l["over"]),
                until(&l["until_under_secs"]),
            ]
        })
        .collect();
    if rows.is_empty() {
        return "no limits are configured\n".into();
    }
    let mut out = table(
        &[
            "LIMIT",
            "ALGORITHM",
            "DATABASE KEY",
            "VALUE",
            "LIMIT",
            "PER",
            "OVER",
            "UNDER IN",
        ],
        &rows,
    );
    let r = &v["restriction"];
    if r.is_object() {
        out.push_str(&format!(
            "restricted by {} since {} ({}): {}\n",
            r["limit"].as_str().unwrap_or(""),
            r["since"].as_str().unwrap_or(""),
            r["until"]
                .as_str()
                .map_or_else(|| "until released".into(), |u| format!("until {u}")),
            evidence_summary(&r["evidence"])
        ));
    }
    out.push_str(&inspect_baselines(v));
    out
}

/// The baseline lines of `inspect`: one per limit with a baseline.
fn inspect_baselines(v: &Value) -> String {
    let mut out = String::new();
    for l in items(&v["limits"]) {
        let b = &l["baseline"];
        if b.is_object() {
            let peak = if b["peak"].is_null() {
                "no history".to_string()
            } else {
                format!("daily peak {}", num(&b["peak"]))
            };
            out.push_str(&format!(
                "{}: baseline {}: {peak}, limit max({}, {} x peak) = {} (computed {})\n",
                l["limit"].as_str().unwrap_or(""),
                b["baseline"].as_str().unwrap_or(""),
                num(&b["floor"]),
                num(&b["factor"]),
                num(&l["limit_value"]),
                b["computed"].as_str().unwrap_or("not yet"),
            ));
        }
    }
    out
}

/// `top`: the keys nearest their limits.
fn render_top(v: &Value) -> String {
    let rows: Vec<Vec<String>> = items(&v["entries"])
        .iter()
        .map(|e| {
            vec![
                e["key"].as_str().unwrap_or("").into(),
                e["limit"].as_str().unwrap_or("").into(),
                num(&e["value"]),
                num(&e["limit_value"]),
                format!("{:.0}%", e["ratio"].as_f64().unwrap_or(0.0) * 100.0),
                yes(&e["over"]),
                until(&e["until_under_secs"]),
            ]
        })
        .collect();
    let mut out = if rows.is_empty() {
        "no keys stored\n".to_string()
    } else {
        table(
            &[
                "DATABASE KEY",
                "LIMIT",
                "VALUE",
                "LIMIT",
                "OF LIMIT",
                "OVER",
                "UNDER IN",
            ],
            &rows,
        )
    };
    if v["partial"].as_bool() == Some(true) {
        out.push_str("(partial: the store holds more keys than were scanned)\n");
    }
    out
}

/// `held list`: one row per held message, its recipients counted (`wide`: listed).
fn render_held_list(v: &Value, wide: bool) -> String {
    let rows: Vec<Vec<String>> = items(&v["held"])
        .iter()
        .map(|m| {
            let rcpts: Vec<&str> = strings(&m["recipients"]);
            let rcpts = if wide {
                rcpts.join(",")
            } else {
                crate::figures::count(rcpts.len() as u64, "recipient")
            };
            vec![
                m["id"].as_str().unwrap_or("").into(),
                m["key"].as_str().unwrap_or("").into(),
                m["limit"].as_str().unwrap_or("").into(),
                match m["paced"].as_str() {
                    Some(rate) => format!("paced {rate}"),
                    None => "held".into(),
                },
                m["sender"].as_str().unwrap_or("").into(),
                rcpts,
                num(&m["size"]),
                crate::smtp::received::rfc5322_date(m["time"].as_i64().unwrap_or(0)),
                m["subject"].as_str().unwrap_or("").into(),
            ]
        })
        .collect();
    if rows.is_empty() {
        return "no held messages\n".into();
    }
    table(
        &[
            "ID",
            "KEY",
            "LIMIT",
            "STATE",
            "SENDER",
            "RECIPIENTS",
            "SIZE",
            "HELD AT",
            "SUBJECT",
        ],
        &rows,
    )
}

/// `held show`: one held message's envelope, client and header section.
fn render_held_show(v: &Value) -> String {
    let text = |k: &str| v[k].as_str().unwrap_or("").to_string();
    let rcpts: Vec<&str> = strings(&v["rcpts"]);
    let mut out = String::new();
    for (name, value) in [
        ("id", text("id")),
        ("key", text("key")),
        ("limit", text("limit")),
        (
            "state",
            match v["paced"].as_str() {
                Some(rate) => format!("paced (released automatically at {rate})"),
                None => "held".into(),
            },
        ),
        (
            "held at",
            crate::smtp::received::rfc5322_date(v["time"].as_i64().unwrap_or(0)),
        ),
        (
            "client",
            format!("{} port {}", text("client"), num(&v["client_port"])),
        ),
        ("name", text("name")),
        ("user", text("user")),
        ("helo", text("helo")),
        ("tls", text("tls")),
        ("mail from", text("mail")),
        ("rcpt to", rcpts.join(", ")),
        ("size", num(&v["size"])),
    ] {
        out.push_str(&format!("{name:<10} {value}\n"));
    }
    out.push('\n');
    out.push_str(&text("headers").replace("\r\n", "\n"));
    out
}

/// `held release` or `held delete`: the ids released (`release`) or deleted.
fn render_held_done(v: &Value, release: bool) -> String {
    let (verb, list) = if release {
        ("released", &v["released"])
    } else {
        ("deleted", &v["deleted"])
    };
    let ids: Vec<&str> = strings(list);
    if ids.is_empty() {
        return format!("no held messages {verb}\n");
    }
    ids.iter().map(|i| format!("{i}: {verb}\n")).collect()
}

/// `restricted`: one row per restricted key, with its evidence.
fn render_restricted(v: &Value) -> String {
    let rows: Vec<Vec<String>> = items(&v["restricted"])
        .iter()
        .map(|r| {
            let ev = &r["evidence"];
            // Each address with the messages it offered, most first.
            let mut ips: Vec<String> = items(&ev["offered_by_client"])
                .iter()
                .map(|p| format!("{} ({})", p[0].as_str().unwrap_or(""), num(&p[1])))
                .collect();
            if ips.is_empty() {
                ips = strings(&ev["client_ips"])
                    .into_iter()
                    .map(str::to_string)
                    .collect();
            }
            vec![
                r["key"].as_str().unwrap_or("").into(),
                r["limit"].as_str().unwrap_or("").into(),
                r["since"].as_str().unwrap_or("").into(),
                r["until"].as_str().unwrap_or("until released").into(),
                num(&r["rate"]),
                r["by"].as_str().unwrap_or("").into(),
                r["reason"].as_str().unwrap_or("").into(),
                format!(
                    "{}; ips {}",
                    evidence_summary(ev),
                    if ips.is_empty() {
                        "-".into()
                    } else {
                        ips.join(",")
                    }
                ),
            ]
        })
        .collect();
    if rows.is_empty() {
        return "nobody is restricted\n".into();
    }
    table(
        &[
            "KEY", "LIMIT", "SINCE", "UNTIL", "RATE", "BY", "REASON", "EVIDENCE",
        ],
        &rows,
    )
}

/// A restriction's evidence in one line: messages and recipients relayed, messages offered,
/// refusals (upstream's, then floodgate's by limit and action) and what is held now (by
/// node when more than one holds).
pub fn evidence_summary(ev: &Value) -> String {
    let count = |v: &Value| v.as_u64().unwrap_or(0);
    let upstream = &ev["refusals"]["upstream"];
    let mut own = Vec::new();
    if let Some(limits) = ev["refusals"]["floodgate"].as_object() {
        for (limit, actions) in limits {
            for (action, n) in actions.as_object().into_iter().flatten() {
                own.push(format!("{limit} {action} {}", count(n)));
            }
        }
    }
    let mut out = format!(
        "{} msgs relayed to {} rcpts ({} offered), refused by upstream {} (rcpt {}, data {}), \
         by floodgate {}",
        count(&ev["messages"]),
        count(&ev["recipients"]),
        count(&ev["offered"]),
        count(&upstream["rcpt"]) + count(&upstream["data"]),
        count(&upstream["rcpt"]),
        count(&upstream["data"]),
        if own.is_empty() {
            "0".to_string()
        } else {
            own.join(", ")
        }
    );
    out.push_str(&format!(", held {}", count(&ev["held"])));
    let nodes: Vec<String> = ev["held_by_node"]
        .as_object()
        .into_iter()
        .flatten()
        .map(|(n, c)| format!("{n} {}", count(c)))
        .collect();
    if nodes.len() > 1 {
        out.push_str(&format!(" ({})", nodes.join(", ")));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn requests_are_encoded() {
        assert_eq!(
            Verb::Inspect("a b@c/d".into()).request(),
            ("GET", "/v1/inspect?key=a%20b%40c%2Fd".into())
        );
        assert_eq!(
            Verb::Top {
                limit: Some("x".into()),
                n: 3
            }
            .request()
            .1,
            "/v1/top?n=3&limit=x"
        );
        let act = |confirm| Verb::CampaignAct {
            id: "c:b3:ab".into(),
            op: "release-held".into(),
            reason: "checked & fine".into(),
            confirm,
        };
        assert_eq!(
            act(true).request(),
            (
                "POST",
                "/v1/campaigns/act?id=c%3Ab3%3Aab&op=release-held&reason=checked%20%26%20fine\
                 &confirm=true"
                    .into()
            )
        );
        assert!(!act(false).request().1.contains("confirm"));
    }

    #[test]
    fn a_campaign_action_in_words() {
        let v = serde_json::json!({"campaign": "c:x", "accounts": ["s1", "s2"],
            "deleted": ["h1", "h2", "h3"], "failed": ["h4: busy"]});
        assert_eq!(
            render_campaign_act("c:x", "delete-held", &v),
            "c:x: 3 held messages deleted, of its 2 accounts (s1, s2)\n  not done: h4: busy\n"
        );
        let v = serde_json::json!({"accounts": ["s1"], "ended": ["s1"], "failed": []});
        assert_eq!(
            render_campaign_act("c:x", "release", &v),
            "c:x: 1 restriction ended, of its 1 account (s1)\n"
        );
    }

    #[test]
    fn tables() {
        let v = json!({"limits": [{"limit": "per-user", "algorithm": "ewma",
            "key": "1h/per_rcpt/alice", "value": 12.5, "limit_value": 10.0, "period": "1h",
            "over": true, "until_under_secs": 803.2}]});
        let t = render(&Verb::Inspect("alice".into()), &v);
        assert!(t.starts_with("LIMIT     ALGORITHM  DATABASE KEY"), "{t}");
        assert!(
            t.contains("per-user  ewma       1h/per_rcpt/alice  12.500  10"),
            "{t}"
        );
        assert!(t.contains("yes   13m24s"), "{t}");
        let r = render(&Verb::Reset("alice".into()), &json!({"removed": 1}));
        assert_eq!(r, "alice: removed 1 record\n");
    }

    #[test]
    fn connect_error_says_what_to_do() {
        let e = call(Path::new("/nonexistent/floodgate.sock"), &Verb::Reload).unwrap_err();
        let s = e.to_string();
        assert!(s.contains("/nonexistent/floodgate.sock"), "{s}");
        assert!(
            s.contains("is floodgate running with [admin] socket?"),
            "{s}"
        );
    }

    #[test]
    fn held_list_counts_recipients_unless_wide() {
        let rcpts: Vec<String> = (0..25).map(|i| format!("r{i}@example.net")).collect();
        let v = json!({"held": [
            {"id": "1-a", "key": "alice", "limit": "per-user", "sender": "a@example.org",
             "recipients": rcpts, "size": 120, "time": 0, "subject": "hi"},
            {"id": "1-b", "key": "alice", "limit": "per-user", "sender": "a@example.org",
             "recipients": ["one@example.net"], "size": 99, "time": 0, "subject": "hi"},
        ]});
        let list = |wide| render(&Verb::HeldList { key: None, wide }, &v);
        let short = list(false);
        assert!(
            short.contains(" 25 recipients ") && short.contains(" 1 recipient "),
            "{short}"
        );
        assert!(!short.contains("r24@example.net"), "{short}");
        assert!(short.lines().all(|l| l.len() < 150), "{short}");
        let wide = list(true);
        assert!(
            wide.contains("r0@example.net,r1@example.net") && wide.contains("r24@example.net"),
            "{wide}"
        );
    }
}
