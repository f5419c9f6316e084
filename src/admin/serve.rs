//! The admin and metrics transports: the admin unix socket (mode 0600), the optional
//! token-guarded admin TCP address, and the metrics TCP address, served by hyper's HTTP/1.1
//! server. One request per connection, read with a time limit and size bounds, answered,
//! closed.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use std::convert::Infallible;
use std::sync::atomic::{AtomicBool, Ordering};

use http_body_util::{BodyExt, LengthLimitError, Limited};
use hyper::body::{Body, Incoming};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, UnixListener};
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use super::api::{metrics_response, AdminState};
use super::http::guard::Guard;
use super::http::{ct_eq, HttpError, Limits, Request, Response};
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
    spawn_accept_loop(
        listener,
        "admin socket",
        Mode::Admin(state),
        Bounds::default(),
        stop,
    );
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
        Bounds::default(),
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
    serve_tcp(
        "metrics address",
        address,
        Mode::Metrics(metrics),
        Bounds::default(),
        stop,
    )
    .await
}

async fn serve_tcp(
    what: &'static str,
    address: std::net::SocketAddr,
    mode: Mode,
    bounds: Bounds,
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
    spawn_accept_loop(listener, what, mode, bounds, stop);
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

/// Time and size bounds of one admin connection.
#[derive(Debug, Clone, Copy)]
struct Bounds {
    /// Time allowed for the whole request, head and body.
    read_timeout: Duration,
    /// Sizes of the head and the body.
    limits: Limits,
}

impl Default for Bounds {
    fn default() -> Self {
        Bounds {
            read_timeout: READ_TIMEOUT,
            limits: Limits::default(),
        }
    }
}

/// Accepts on `listener` until `stop`, serving each connection as `mode` allows, at most
/// [`MAX_CONNS`] at once. An accept error (out of descriptors) backs off instead of spinning.
fn spawn_accept_loop<L: Accept>(
    listener: L,
    what: &'static str,
    mode: Mode,
    bounds: Bounds,
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
                Ok(s) => spawn_conn(s, mode.clone(), bounds, gate.clone()),
                Err(e) => {
                    warn!(error = %e, "{what} accept failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
        }
    });
}

fn spawn_conn<S>(stream: S, mode: Mode, bounds: Bounds, gate: Arc<Semaphore>)
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    tokio::spawn(async move {
        let Ok(_permit) = gate.acquire_owned().await else {
            return;
        };
        if let Err(e) = conn(stream, &mode, bounds).await {
            debug!(error = %e, "admin connection ended with an error");
        }
    });
}

/// Serves one request with hyper (its head read within the time limit and size bounds),
/// then closes. A request hyper could not read is answered here, in JSON (see
/// [`super::http::guard`]).
async fn conn<S>(mut stream: S, mode: &Mode, bounds: Bounds) -> io::Result<()>
where
    S: AsyncRead + AsyncWrite + Unpin + Send,
{
    let deadline = tokio::time::Instant::now() + bounds.read_timeout;
    let answered = AtomicBool::new(false);
    let mut guard = Guard::new(&mut stream, &answered);
    let service = service_fn(|req| async {
        let resp = match read_request(req, bounds.limits.max_body, deadline).await {
            Ok(req) => answer(&req, mode).await,
            Err(resp) => resp,
        };
        answered.store(true, Ordering::Release);
        Ok::<_, Infallible>(resp.into_hyper())
    });
    let served = http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(bounds.read_timeout)
        .keep_alive(false)
        .title_case_headers(true)
        .max_headers(bounds.limits.max_headers)
        .max_header_size(bounds.limits.max_head)
        .serve_connection(TokioIo::new(&mut guard), service)
        .await;
    if answered.load(Ordering::Acquire) {
        return served.map_err(io::Error::other);
    }
    let resp = match (guard.refused(), served) {
        (Some(why), _) => HttpError::Bad(why).into(),
        (None, Ok(())) if !guard.read_any() => return Ok(()),
        (None, Ok(())) => Response::error(400, "request ended early"),
        (None, Err(e)) if e.is_timeout() => Response::error(408, "request not received in time"),
        (None, Err(e)) if e.is_parse_too_large() => HttpError::TooLarge("request head").into(),
        (None, Err(e)) if e.is_parse() => Response::error(400, &format!("bad request: {e}")),
        (None, Err(e)) if e.is_incomplete_message() => Response::error(400, "request ended early"),
        (None, Err(e)) => Response::error(400, &format!("connection error while reading: {e}")),
    };
    stream.write_all(&resp.to_bytes()).await?;
    stream.shutdown().await
}

/// The whole request, its body read within `deadline` and `max_body`; or the answer saying
/// why not.
async fn read_request(
    req: hyper::Request<Incoming>,
    max_body: usize,
    deadline: tokio::time::Instant,
) -> Result<Request, Response> {
    let (parts, body) = req.into_parts();
    if parts.headers.contains_key(hyper::header::TRANSFER_ENCODING) {
        return Err(HttpError::Bad("Transfer-Encoding is not supported").into());
    }
    if body.size_hint().lower() > max_body as u64 {
        return Err(HttpError::TooLarge("body").into());
    }
    let body = match tokio::time::timeout_at(deadline, Limited::new(body, max_body).collect()).await
    {
        Err(_) => return Err(Response::error(408, "request not received in time")),
        Ok(Err(e)) if e.is::<LengthLimitError>() => return Err(HttpError::TooLarge("body").into()),
        Ok(Err(_)) => return Err(Response::error(400, "request ended early")),
        Ok(Ok(collected)) => collected.to_bytes(),
    };
    Request::from_parts(&parts, body.to_vec()).map_err(Response::from)
}

async fn answer(req: &Request, mode: &Mode) -> Response {
    match mode {
        Mode::Admin(state) => state.handle(req).await,
        Mode::Token(state, token, console) => {
            if let Some(r) = console.answer(req).await {
                return r;
            }
            match req.bearer() {
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

#[cfg(test)]
mod tests;
