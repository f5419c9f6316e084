//! The admin and metrics transports: the admin unix socket (mode 0600), the optional
//! token-guarded admin TCP address, and the metrics TCP address. One request per
//! connection, read with a time limit and size bounds, answered, closed.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, UnixListener};
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use super::api::{metrics_response, AdminState};
use super::http::{parse_request, Limits, Response};
use crate::config::Secret;

/// Time allowed for a client to send its whole request.
const READ_TIMEOUT: Duration = Duration::from_secs(10);
/// Connections served at once per listener; more wait.
const MAX_CONNS: usize = 16;

/// What to do with a socket found at the admin socket path.
#[derive(Debug, PartialEq, Eq)]
enum Existing {
    /// Leave it and fail: it belongs to this user `uid` that floodgate may not displace.
    Refuse(u32),
    /// A live floodgate (or other process) of this user or root answers there.
    InUse,
    /// Remove it and bind anew; `Some(uid)`: it was another user's (only root does this).
    Replace(Option<u32>),
}

/// The verdict on a socket at the admin path owned by `owner`, `live` when something
/// answers there, served by `server` (its peer's user, when it could be read), for a
/// floodgate running as `me`. Another user's socket is never used: root replaces it (it
/// can, and a squatter must not keep floodgate's admin API from starting); anyone else
/// refuses it by name, since the sticky temporary directory lets nobody else remove it.
fn existing_socket(owner: u32, live: bool, server: Option<io::Result<u32>>, me: u32) -> Existing {
    use super::peer::trusted;
    let server = server.and_then(Result::ok);
    let stranger = [Some(owner), server]
        .into_iter()
        .flatten()
        .find(|&uid| !trusted(uid, me));
    match stranger {
        Some(uid) if me != 0 => Existing::Refuse(uid),
        Some(uid) => Existing::Replace(Some(uid)),
        None if live => Existing::InUse,
        None => Existing::Replace(None),
    }
}

/// Why an admin or metrics listener could not start.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// Something other than a socket sits at the socket path.
    #[error(
        "admin socket {0}: the path exists and is not a socket; remove it or set [admin] socket"
    )]
    NotASocket(PathBuf),
    /// A live process answers on the socket path.
    #[error(
        "admin socket {0}: another process is answering there (is floodgate already running?)"
    )]
    InUse(PathBuf),
    /// Another user's socket (listening or left over) sits at the socket path.
    #[error(
        "admin socket {path}: a socket of uid {uid}, another user, is there; floodgate neither \
         uses nor removes it (set [admin] socket to a private path)"
    )]
    OtherUser {
        /// The socket path.
        path: PathBuf,
        /// Its owner, or the user serving it.
        uid: u32,
    },
    /// Binding or setting up failed.
    #[error("{what} {address}: {source}")]
    Io {
        /// Which listener.
        what: &'static str,
        /// Its address or path.
        address: String,
        /// Why.
        source: io::Error,
    },
}

/// What a connection may ask.
#[derive(Clone)]
enum Mode {
    /// Everything (the unix socket: file permissions guard it).
    Admin(Arc<AdminState>),
    /// Everything, with `Authorization: Bearer TOKEN`; and the web console.
    Token(Arc<AdminState>, Arc<Secret>, Arc<super::console::Console>),
    /// Only `GET /metrics`.
    Metrics(Arc<super::Metrics>),
}

/// Removes the admin socket file when dropped (at exit).
#[derive(Debug)]
pub struct SocketFile(PathBuf);

impl Drop for SocketFile {
    fn drop(&mut self) {
        use std::os::unix::fs::FileTypeExt;
        if std::fs::symlink_metadata(&self.0).is_ok_and(|m| m.file_type().is_socket()) {
            let _ = std::fs::remove_file(&self.0);
        }
    }
}

/// Binds the admin socket at `path` with mode 0600 and serves it until `stop`. A stale
/// socket file (nobody answering) is replaced; a live one or a non-socket is an error, and
/// so is another user's socket unless floodgate runs as root (see `existing_socket`).
/// The socket is bound under a temporary name, given its mode, then renamed into place,
/// so it is never reachable with wider permissions.
pub fn serve_unix(
    path: &Path,
    state: Arc<AdminState>,
    stop: CancellationToken,
) -> Result<SocketFile, ServeError> {
    use std::os::unix::fs::{DirBuilderExt, FileTypeExt, PermissionsExt};
    let io_err = |source| ServeError::Io {
        what: "admin socket",
        address: path.display().to_string(),
        source,
    };
    match std::fs::symlink_metadata(path) {
        Ok(m) if !m.file_type().is_socket() => return Err(ServeError::NotASocket(path.into())),
        Ok(m) => {
            use std::os::unix::fs::MetadataExt;
            let live = std::os::unix::net::UnixStream::connect(path).ok();
            let server = live.as_ref().map(super::peer::peer_uid);
            match existing_socket(m.uid(), live.is_some(), server, super::peer::my_uid()) {
                Existing::Refuse(uid) => {
                    return Err(ServeError::OtherUser {
                        path: path.into(),
                        uid,
                    })
                }
                Existing::InUse => return Err(ServeError::InUse(path.into())),
                Existing::Replace(Some(uid)) => {
                    warn!(path = %path.display(), uid, "replacing another user's socket at the admin socket path");
                }
                Existing::Replace(None) => {
                    info!(path = %path.display(), "replacing a stale admin socket");
                }
            }
            std::fs::remove_file(path).map_err(io_err)?;
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(io_err(e)),
    }
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        if !dir.exists() {
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(dir)
                .map_err(io_err)?;
        }
    }
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(format!(".{}.tmp", std::process::id()));
    let tmp = PathBuf::from(tmp);
    let _ = std::fs::remove_file(&tmp);
    let listener = UnixListener::bind(&tmp).map_err(io_err)?;
    let placed = std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o600))
        .and_then(|()| std::fs::rename(&tmp, path));
    if let Err(e) = placed {
        let _ = std::fs::remove_file(&tmp);
        return Err(io_err(e));
    }
    info!(path = %path.display(), "admin API listening");
    spawn_accept_loop(listener, "admin socket", Mode::Admin(state), stop);
    Ok(SocketFile(path.to_path_buf()))
}

/// Serves the admin API on `address` for requests bearing `token`; returns the bound
/// address.
pub async fn serve_admin_tcp(
    address: std::net::SocketAddr,
    token: Secret,
    state: Arc<AdminState>,
    stop: CancellationToken,
) -> Result<std::net::SocketAddr, ServeError> {
    let token = Arc::new(token);
    let console = super::console::Console::start(state.clone(), token.clone(), stop.clone());
    serve_tcp(
        "admin address",
        address,
        Mode::Token(state, token, console),
        stop,
    )
    .await
}

/// Serves `GET /metrics` on `address`; returns the bound address.
pub async fn serve_metrics(
    address: std::net::SocketAddr,
    metrics: Arc<super::Metrics>,
    stop: CancellationToken,
) -> Result<std::net::SocketAddr, ServeError> {
    serve_tcp("metrics address", address, Mode::Metrics(metrics), stop).await
}

async fn serve_tcp(
    what: &'static str,
    address: std::net::SocketAddr,
    mode: Mode,
    stop: CancellationToken,
) -> Result<std::net::SocketAddr, ServeError> {
    let io_err = |source| ServeError::Io {
        what,
        address: address.to_string(),
        source,
    };
    let listener = TcpListener::bind(address).await.map_err(io_err)?;
    let bound = listener.local_addr().map_err(io_err)?;
    info!(address = %bound, "{what} listening");
    spawn_accept_loop(listener, what, mode, stop);
    Ok(bound)
}

/// A listener the accept loop serves: the admin unix socket or a TCP address.
trait Accept: Send + 'static {
    /// One accepted connection.
    type Conn: AsyncRead + AsyncWrite + Unpin + Send + 'static;
    /// Waits for the next connection.
    fn next(&self) -> impl std::future::Future<Output = io::Result<Self::Conn>> + Send;
}

impl Accept for UnixListener {
    type Conn = tokio::net::UnixStream;
    async fn next(&self) -> io::Result<Self::Conn> {
        self.accept().await.map(|(s, _)| s)
    }
}

impl Accept for TcpListener {
    type Conn = tokio::net::TcpStream;
    async fn next(&self) -> io::Result<Self::Conn> {
        self.accept().await.map(|(s, _)| s)
    }
}

/// Accepts on `listener` until `stop`, serving each connection as `mode` allows, at most
/// [`MAX_CONNS`] at once. An accept error (out of descriptors) backs off instead of spinning.
fn spawn_accept_loop<L: Accept>(
    listener: L,
    what: &'static str,
    mode: Mode,
    stop: CancellationToken,
) {
    tokio::spawn(async move {
        let gate = Arc::new(Semaphore::new(MAX_CONNS));
        loop {
            let accepted = tokio::select! {
                r = listener.next() => r,
                _ = stop.cancelled() => return,
            };
            match accepted {
                Ok(s) => spawn_conn(s, mode.clone(), gate.clone()),
                Err(e) => {
                    warn!(error = %e, "{what} accept failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
        }
    });
}

fn spawn_conn<S>(stream: S, mode: Mode, gate: Arc<Semaphore>)
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    tokio::spawn(async move {
        let Ok(_permit) = gate.acquire_owned().await else {
            return;
        };
        if let Err(e) = conn(stream, &mode).await {
            debug!(error = %e, "admin connection ended with an error");
        }
    });
}

/// Reads one request (bounded in time and size), answers it, closes.
async fn conn<S>(mut stream: S, mode: &Mode) -> io::Result<()>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let limits = Limits::default();
    let mut buf = Vec::with_capacity(1024);
    let read = tokio::time::timeout(READ_TIMEOUT, async {
        loop {
            match parse_request(&buf, &limits) {
                Ok(Some((req, _))) => return Ok(req),
                Ok(None) => {}
                Err(e) => return Err(Response::error(e.status(), &e.to_string())),
            }
            let mut chunk = [0u8; 4096];
            let n = stream.read(&mut chunk).await.map_err(|e| {
                Response::error(400, &format!("connection error while reading: {e}"))
            })?;
            if n == 0 {
                return Err(Response::error(400, "request ended early"));
            }
            buf.extend_from_slice(&chunk[..n]);
        }
    })
    .await;
    let (resp, head) = match read {
        Err(_) => (Response::error(408, "request not received in time"), false),
        Ok(Err(r)) => (r, false),
        Ok(Ok(req)) => (answer(&req, mode).await, req.method == "HEAD"),
    };
    stream.write_all(&resp.to_bytes(head)).await?;
    stream.shutdown().await
}

async fn answer(req: &super::http::Request, mode: &Mode) -> Response {
    match mode {
        Mode::Admin(state) => state.handle(req).await,
        Mode::Token(state, token, console) => {
            if let Some(r) = console.answer(req).await {
                return r;
            }
            let given = req
                .header("authorization")
                .and_then(|v| v.strip_prefix("Bearer "))
                .map(str::trim);
            match given {
                Some(t) if ct_eq(t.as_bytes(), token.expose().as_bytes()) => {
                    state.handle(req).await
                }
                Some(_) => Response::error(401, "wrong bearer token"),
                None => Response::error(401, "missing Authorization: Bearer TOKEN"),
            }
        }
        Mode::Metrics(m) => match (req.path.as_str(), req.method.as_str()) {
            ("/metrics", "GET" | "HEAD") => metrics_response(m),
            ("/metrics", other) => {
                Response::error(405, &format!("/metrics takes GET, HEAD, not {other}"))
            }
            (p, _) => Response::error(404, &format!("no endpoint {p}: try /metrics")),
        },
    }
}

/// Compares in time that depends only on the lengths, never on where the bytes differ.
pub fn ct_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    let diff = a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y));
    // Keep the optimiser from turning the fold into an early exit.
    std::hint::black_box(diff) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn constant_time_compare() {
        assert!(ct_eq(b"abcdef", b"abcdef"));
        assert!(!ct_eq(b"abcdef", b"abcdeg"));
        assert!(!ct_eq(b"abc", b"abcd"));
        assert!(ct_eq(b"", b""));
    }

    #[test]
    fn another_users_socket_is_refused_or_replaced_by_root_only() {
        use Existing::*;
        let ok = |uid| Some(Ok(uid));
        // Our own: stale is replaced, live is a running floodgate.
        assert_eq!(existing_socket(1000, false, None, 1000), Replace(None));
        assert_eq!(existing_socket(1000, true, ok(1000), 1000), InUse);
        // Root's socket is trusted by everyone.
        assert_eq!(existing_socket(0, true, ok(0), 1000), InUse);
        assert_eq!(existing_socket(0, false, None, 1000), Replace(None));
        // Another user's: by file owner or by the process answering, refused by name...
        assert_eq!(existing_socket(4242, false, None, 1000), Refuse(4242));
        assert_eq!(existing_socket(1000, true, ok(4242), 1000), Refuse(4242));
        assert_eq!(existing_socket(4242, true, ok(4242), 1000), Refuse(4242));
        // ... and replaced by root, which can and must not be kept out.
        assert_eq!(
            existing_socket(4242, true, ok(4242), 0),
            Replace(Some(4242))
        );
        assert_eq!(existing_socket(0, true, ok(4242), 0), Replace(Some(4242)));
        // A live socket whose peer cannot be read is judged by its owner.
        let unread = Some(Err(io::Error::other("no peer")));
        assert_eq!(existing_socket(1000, true, unread, 1000), InUse);
    }

    #[tokio::test]
    async fn metrics_listener_answers_only_metrics() {
        let m = Arc::new(super::super::Metrics::new());
        m.commands.add(3);
        let stop = CancellationToken::new();
        let addr = serve_metrics("127.0.0.1:0".parse().unwrap(), m, stop.clone())
            .await
            .unwrap();
        let ask = |req: &'static str| async move {
            let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
            s.write_all(req.as_bytes()).await.unwrap();
            let mut out = Vec::new();
            s.read_to_end(&mut out).await.unwrap();
            super::super::http::parse_response(&out).unwrap()
        };
        let (st, body) = ask("GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n").await;
        assert_eq!(st, 200);
        assert!(String::from_utf8(body)
            .unwrap()
            .contains("\nfloodgate_commands_total 3\n"));
        assert_eq!(ask("GET /v1/top HTTP/1.1\r\n\r\n").await.0, 404);
        assert_eq!(ask("POST /metrics HTTP/1.1\r\n\r\n").await.0, 405);
        assert_eq!(ask("GET /metrics HTTP/1.1\nX: y\r\n\r\n").await.0, 400);
        assert_eq!(ask("GET /metrics HTTP/1.1\r\nX: y\r\n\r\n   ").await.0, 200);
        stop.cancel();
    }
}
