//! The differential session harness shared by `tests/session_diff.rs` (proptest) and
//! `fuzz/fuzz_targets/session.rs` (cargo-fuzz).
//!
//! For one client byte stream it runs a real floodgate [`Session`] (over a TCP pair on
//! 127.0.0.1) in front of the [`reference::RefServer`] (a listener on 127.0.0.1 started once
//! per process), with the [`policy::Recording`] policy. Then it re-parses the exact bytes
//! upstream received with a fresh reference server and checks that upstream holds exactly
//! the MAILs, RCPTs and messages (sender, recipients, body size, answer) that the policy was
//! told about, that no grammar was bent on the way, and that the client received exactly
//! the queue ids upstream gave (nothing acknowledged that upstream did not accept, every
//! acceptance relayed once).
#![allow(dead_code)] // each user takes a different subset

pub mod policy;
pub mod reference;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use floodgate::config::TlsMode;
use floodgate::generation::Generation;
use floodgate::policy::Stage;
use floodgate::proxy::{ListenerInfo, Session, Shared, Stream};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio::time::timeout;
use tokio_util::sync::CancellationToken;

use policy::{Event, Recording};
use reference::{Envelope, RefServer, GREETING};

/// `[smtp] max_recipients` of the harness config.
pub const MAX_RECIPIENTS: usize = 5;
/// `[smtp] max_message_size` of the harness config (small, so the size limit is reached).
pub const MAX_MESSAGE_SIZE: u64 = 4096;
/// How long one case may take before it counts as a hang.
const CASE_LIMIT: Duration = Duration::from_secs(20);

/// One input: the client's bytes and how everything else behaves.
#[derive(Debug, Clone)]
pub struct Case {
    /// `[smtp] bare_line_endings = "normalize"` instead of `"reject"`.
    pub normalize: bool,
    /// The client writes in pieces of this many bytes, yielding between them.
    pub chunk: usize,
    /// Decision bytes of the reference upstream (refuse a MAIL, RCPT, DATA, message, AUTH).
    pub upstream_script: Vec<u8>,
    /// Decision bytes of the recording policy (local 450, 421 and close).
    pub policy_script: Vec<u8>,
    /// Everything the client sends before closing its side.
    pub client: Vec<u8>,
}

impl Case {
    /// Reads a case from fuzz bytes: flags, upstream script (length-prefixed), policy
    /// script (length-prefixed), then the client stream.
    pub fn from_bytes(data: &[u8]) -> Option<Case> {
        let (&flags, rest) = data.split_first()?;
        let (&ulen, rest) = rest.split_first()?;
        let ulen = usize::from(ulen % 33).min(rest.len());
        let (upstream_script, rest) = rest.split_at(ulen);
        let (&plen, rest) = rest.split_first()?;
        let plen = usize::from(plen % 33).min(rest.len());
        let (policy_script, client) = rest.split_at(plen);
        let sel = usize::from(flags >> 1);
        Some(Case {
            normalize: flags & 1 == 1,
            chunk: if sel == 0 { usize::MAX } else { sel },
            upstream_script: upstream_script.to_vec(),
            policy_script: policy_script.to_vec(),
            client: client.to_vec(),
        })
    }
}

/// What one case relayed (so tests can tell that the property saw real traffic).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Summary {
    /// MAIL commands upstream received.
    pub mails: usize,
    /// RCPT commands upstream received.
    pub rcpts: usize,
    /// DATA commands upstream received.
    pub messages: usize,
    /// Messages upstream accepted with 250.
    pub accepted: usize,
}

/// One case's traffic: what it relayed, the bytes the client received and the bytes
/// upstream received.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Transcript {
    /// What was relayed.
    pub summary: Summary,
    /// Every byte floodgate sent the client.
    pub client: Vec<u8>,
    /// Every byte floodgate sent upstream.
    pub upstream: Vec<u8>,
}

/// What the reference upstream saw on one connection.
struct UpResult {
    capture: Vec<u8>,
    record: reference::Record,
}

/// The per-process parts: runtime, configs, listeners.
pub struct Harness {
    rt: tokio::runtime::Runtime,
    policy: Recording,
    /// `[reject, normalize]`.
    shared: [Arc<Shared>; 2],
    client_listener: TcpListener,
    upstream_script: Arc<Mutex<Vec<u8>>>,
    results: Mutex<mpsc::UnboundedReceiver<UpResult>>,
}

fn certs_dir() -> PathBuf {
    let here = Path::new(env!("CARGO_MANIFEST_DIR"));
    for dir in [here.join("certs/dev"), here.join("../certs/dev")] {
        if dir.join("server.crt").exists() {
            return dir;
        }
    }
    panic!("certs/dev not found from {}", here.display());
}

fn config(upstream: SocketAddr, normalize: bool) -> Generation {
    let certs = certs_dir();
    let text = format!(
        r#"
[server]
hostname = "floodgate.test"

[timeouts]
command = "10s"
data = "10s"
session = "60s"
upstream_connect = "5s"
upstream_reply = "5s"

[[listener]]
name = "diff"
address = "127.0.0.1:0"
tls = "none"

[tls]
certificate = "{}"
private_key = "{}"
auth_without_tls = true

[upstream]
address = "{upstream}"
tls = "none"
client_identity = "none"

[smtp]
max_recipients = {MAX_RECIPIENTS}
max_message_size = {MAX_MESSAGE_SIZE}
bare_line_endings = "{}"
chunking = false
"#,
        certs.join("server.crt").display(),
        certs.join("server.key").display(),
        if normalize { "normalize" } else { "reject" },
    );
    Generation::parse(Path::new("diff.toml"), &text).expect("harness config")
}

/// The reference upstream: every connection gets the script current when it is accepted.
async fn upstream_loop(
    listener: TcpListener,
    script: Arc<Mutex<Vec<u8>>>,
    tx: mpsc::UnboundedSender<UpResult>,
) {
    loop {
        let Ok((conn, _)) = listener.accept().await else {
            continue;
        };
        let script = script.lock().expect("script").clone();
        tokio::spawn(serve_upstream(conn, script, tx.clone()));
    }
}

async fn serve_upstream(mut conn: TcpStream, script: Vec<u8>, tx: mpsc::UnboundedSender<UpResult>) {
    let _ = conn.set_nodelay(true);
    let mut server = RefServer::new(&script);
    let mut capture = Vec::new();
    let mut buf = vec![0u8; 16 * 1024];
    let mut open = conn.write_all(GREETING).await.is_ok();
    loop {
        let n = match timeout(CASE_LIMIT, conn.read(&mut buf)).await {
            Ok(Ok(n)) if n > 0 => n,
            _ => break,
        };
        capture.extend_from_slice(&buf[..n]);
        let out = server.feed(&buf[..n]);
        if open && !out.is_empty() && conn.write_all(&out).await.is_err() {
            open = false;
        }
        if open && server.closed() {
            let _ = conn.shutdown().await;
            open = false;
        }
    }
    let _ = tx.send(UpResult {
        capture,
        record: server.record,
    });
}

static HARNESS: OnceLock<Harness> = OnceLock::new();

impl Harness {
    /// The process-wide harness (built on first use).
    pub fn get() -> &'static Harness {
        HARNESS.get_or_init(Harness::new)
    }

    fn new() -> Harness {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        let policy = Recording::default();
        let upstream_script = Arc::new(Mutex::new(Vec::new()));
        let (tx, rx) = mpsc::unbounded_channel();
        let (client_listener, upstream_addr) = rt.block_on(async {
            let up = TcpListener::bind("127.0.0.1:0")
                .await
                .expect("bind upstream");
            let addr = up.local_addr().expect("upstream addr");
            tokio::spawn(upstream_loop(up, upstream_script.clone(), tx));
            let client = TcpListener::bind("127.0.0.1:0").await.expect("bind client");
            (client, addr)
        });
        let shared = [false, true].map(|normalize| {
            let cfg = Arc::new(config(upstream_addr, normalize));
            let s = floodgate::server::build_shared(cfg, Arc::new(policy.clone()))
                .expect("build shared");
            Arc::new(s)
        });
        Harness {
            rt,
            policy,
            shared,
            client_listener,
            upstream_script,
            results: Mutex::new(rx),
        }
    }

    /// Runs one case and checks the differential property; `Err` says what broke.
    pub fn run(&self, case: &Case) -> Result<Summary, String> {
        let pieces: Vec<&[u8]> = case.client.chunks(case.chunk.max(1)).collect();
        self.run_pieces(case, &pieces).map(|t| t.summary)
    }

    /// Runs one case with the client's bytes written in the pieces that `cuts` (offsets
    /// into `case.client`, in any order; out-of-range and repeated ones are ignored) make,
    /// checks the differential property, and returns what each side received.
    pub fn run_split(&self, case: &Case, cuts: &[usize]) -> Result<Transcript, String> {
        let mut cuts: Vec<usize> = cuts
            .iter()
            .copied()
            .filter(|&c| c > 0 && c < case.client.len())
            .collect();
        cuts.sort_unstable();
        cuts.dedup();
        let mut pieces = Vec::with_capacity(cuts.len() + 1);
        let mut at = 0;
        for c in cuts.into_iter().chain([case.client.len()]) {
            pieces.push(&case.client[at..c]);
            at = c;
        }
        self.run_pieces(case, &pieces)
    }

    fn run_pieces(&self, case: &Case, pieces: &[&[u8]]) -> Result<Transcript, String> {
        let mut results = self.results.lock().expect("one case at a time");
        // Anything left from a case that failed half-way is stale.
        while results.try_recv().is_ok() {}
        *self.upstream_script.lock().expect("script") = case.upstream_script.clone();
        self.policy.reset(&case.policy_script);
        self.rt.block_on(async {
            timeout(CASE_LIMIT, self.run_case(case, pieces, &mut results))
                .await
                .map_err(|_| format!("the case did not finish within {CASE_LIMIT:?}"))?
        })
    }

    async fn run_case(
        &self,
        case: &Case,
        pieces: &[&[u8]],
        results: &mut mpsc::UnboundedReceiver<UpResult>,
    ) -> Result<Transcript, String> {
        let addr = self
            .client_listener
            .local_addr()
            .map_err(|e| e.to_string())?;
        let (client, accepted) =
            tokio::join!(TcpStream::connect(addr), self.client_listener.accept());
        let client = client.map_err(|e| format!("connect: {e}"))?;
        let (server_side, peer) = accepted.map_err(|e| format!("accept: {e}"))?;
        // As floodgate's own accept path does; small pipelined writes must not wait for
        // delayed ACKs.
        let _ = client.set_nodelay(true);
        let _ = server_side.set_nodelay(true);
        let local = server_side.local_addr().map_err(|e| e.to_string())?;
        let shared = self.shared[usize::from(case.normalize)].clone();
        let info = ListenerInfo {
            name: "diff".into(),
            tls: TlsMode::None,
            require_tls: false,
            require_auth: false,
        };
        let session = tokio::spawn(Session::run(
            shared,
            info,
            Stream::Plain(server_side),
            peer,
            Some(local),
            CancellationToken::new(),
        ));
        let (mut rd, mut wr) = client.into_split();
        let writer = async {
            for piece in pieces {
                if wr.write_all(piece).await.is_err() {
                    return;
                }
                tokio::task::yield_now().await;
            }
            let _ = wr.shutdown().await;
        };
        let reader = async {
            let mut out = Vec::new();
            let clean = loop {
                let mut buf = [0u8; 8192];
                match rd.read(&mut buf).await {
                    Ok(0) => break true,
                    Ok(n) => out.extend_from_slice(&buf[..n]),
                    Err(_) => break false,
                }
            };
            (out, clean)
        };
        let ((), (client_out, clean_eof)) = tokio::join!(writer, reader);
        session
            .await
            .map_err(|e| format!("session panicked: {e}"))?;
        let up = results
            .recv()
            .await
            .ok_or("the reference upstream never reported")?;
        let summary = check(case, &up, &self.policy.events(), &client_out, clean_eof)?;
        Ok(Transcript {
            summary,
            client: client_out,
            upstream: up.capture,
        })
    }
}

/// What the policy was told, folded into envelopes and messages.
#[derive(Default, Debug)]
struct Counted {
    mails: Vec<Envelope>,
    rcpts: Vec<Envelope>,
    /// sender, recipients, final code, size.
    messages: Vec<(String, Vec<String>, u16, u64)>,
}

fn is_ok(code: u16) -> bool {
    (200..300).contains(&code)
}

fn counted(events: &[Event]) -> Result<Counted, String> {
    let mut c = Counted::default();
    let mut txn: Option<(String, Vec<String>)> = None;
    for e in events {
        match e {
            Event::After {
                stage: Stage::Mail,
                code,
                sender,
                ..
            } => {
                let path = sender.clone().ok_or("MAIL told without a sender")?;
                c.mails.push(Envelope {
                    path: path.clone(),
                    code: *code,
                });
                if is_ok(*code) {
                    txn = Some((path, Vec::new()));
                }
            }
            Event::After {
                stage: Stage::Rcpt,
                code,
                recipient,
                ..
            } => {
                let path = recipient.clone().ok_or("RCPT told without a recipient")?;
                c.rcpts.push(Envelope {
                    path: path.clone(),
                    code: *code,
                });
                if is_ok(*code) {
                    let t = txn.as_mut().ok_or("RCPT accepted outside a transaction")?;
                    t.1.push(path);
                }
            }
            Event::After {
                stage: Stage::Message,
                code,
                sender,
                recipients_count,
                size,
                ..
            } => {
                let (s, rcpts) = txn.take().ok_or("a message outside a transaction")?;
                if sender.as_deref() != Some(s.as_str()) || *recipients_count != rcpts.len() {
                    return Err(format!(
                        "message facts {sender:?}/{recipients_count} disagree with the \
                         transaction {s:?}/{rcpts:?}"
                    ));
                }
                c.messages.push((s, rcpts, *code, *size));
            }
            Event::Abandoned => txn = None,
            _ => {}
        }
    }
    Ok(c)
}

/// The queue ids in the client's replies, in order.
fn queue_ids(out: &[u8]) -> Vec<String> {
    let text = String::from_utf8_lossy(out);
    text.match_indices("queued as REF")
        .map(|(i, m)| {
            let digits: String = text[i + m.len()..]
                .chars()
                .take_while(char::is_ascii_digit)
                .collect();
            format!("REF{digits}")
        })
        .collect()
}

/// Every client reply line is `ddd`, `ddd text` or `ddd-text`, ended by CRLF.
fn well_formed_replies(out: &[u8], clean_eof: bool) -> Result<(), String> {
    let mut rest = out;
    while !rest.is_empty() {
        let Some(end) = rest.windows(2).position(|w| w == b"\r\n") else {
            if clean_eof {
                return Err(format!(
                    "unterminated reply line {:?}",
                    String::from_utf8_lossy(rest)
                ));
            }
            return Ok(());
        };
        let line = &rest[..end];
        let ok = line.len() >= 3
            && line[..3].iter().all(u8::is_ascii_digit)
            && matches!(line.get(3), None | Some(b' ') | Some(b'-'))
            && !line.contains(&b'\r')
            && !line.contains(&b'\n');
        if !ok {
            return Err(format!(
                "malformed reply line {:?}",
                String::from_utf8_lossy(line)
            ));
        }
        rest = &rest[end + 2..];
    }
    Ok(())
}

fn check(
    case: &Case,
    up: &UpResult,
    events: &[Event],
    client_out: &[u8],
    clean_eof: bool,
) -> Result<Summary, String> {
    // Re-parse the exact upstream bytes, in one piece, with a fresh strict parser.
    let mut again = RefServer::new(&case.upstream_script);
    again.feed(&up.capture);
    let rec = &again.record;
    if rec != &up.record {
        return Err("re-parsing the upstream stream in one piece gave another record".into());
    }
    if !rec.violations.is_empty() {
        return Err(format!("upstream stream violations: {:?}", rec.violations));
    }
    if !again.pending().is_empty() {
        return Err(format!(
            "upstream stream ends inside a line: {:?}",
            String::from_utf8_lossy(again.pending())
        ));
    }
    let c = counted(events)?;
    if rec.mails != c.mails {
        return Err(format!(
            "MAIL upstream {:?} != counted {:?}",
            rec.mails, c.mails
        ));
    }
    if rec.rcpts != c.rcpts {
        return Err(format!(
            "RCPT upstream {:?} != counted {:?}",
            rec.rcpts, c.rcpts
        ));
    }
    if rec.messages.len() != c.messages.len() {
        return Err(format!(
            "{} DATA upstream, {} messages counted",
            rec.messages.len(),
            c.messages.len()
        ));
    }
    for (m, (sender, rcpts, code, size)) in rec.messages.iter().zip(&c.messages) {
        if &m.sender != sender || &m.rcpts != rcpts || m.code != *code {
            return Err(format!(
                "upstream message {m:?} != counted {sender:?} {rcpts:?} {code}"
            ));
        }
        if m.rcpts.len() > MAX_RECIPIENTS {
            return Err(format!("{} recipients relayed", m.rcpts.len()));
        }
        if let Some(body) = &m.body {
            if body.len() as u64 != *size || *size > MAX_MESSAGE_SIZE {
                return Err(format!(
                    "upstream body of {} octets, counted {size}",
                    body.len()
                ));
            }
        }
    }
    well_formed_replies(client_out, clean_eof)?;
    if clean_eof {
        let given: Vec<String> = rec
            .messages
            .iter()
            .filter_map(|m| m.queue_id.clone())
            .collect();
        let told = queue_ids(client_out);
        if given != told {
            return Err(format!(
                "upstream accepted {given:?}, the client was told {told:?}"
            ));
        }
    }
    Ok(Summary {
        mails: rec.mails.len(),
        rcpts: rec.rcpts.len(),
        messages: rec.messages.len(),
        accepted: rec.messages.iter().filter(|m| m.code == 250).count(),
    })
}
