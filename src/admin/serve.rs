//! The admin and metrics transports: the admin unix socket (mode 0600), the optional
//! token-guarded admin TCP address (with TLS when `[admin.tls]` is set), and the metrics TCP
//! address, served by hyper's HTTP/1.1 server. One request per connection, answered, closed:
//! no connection is kept alive between requests.
//!
//! No client can hold a listener (`slots`): each listener holds at most `[admin]
//! max_connections` connections, of which one client address may have at most
//! `max_connections_per_address` waiting for their request (429 at once beyond); at the
//! bound a new connection takes the place of the oldest waiting one past [`GRACE`] from the
//! address with the most, and when all are being answered new ones wait in the kernel's
//! queue. The TLS handshake and the whole request must arrive within `request_timeout` of
//! the accept (408 past it). A request's body is read only once its head allows it: on the
//! admin address after its credentials were checked (a request without the right token gets
//! its 401 without the body being read), except the console's login form, read within the
//! request timeout; the metrics address reads none. At most [`MAX_HANDLERS`] requests are
//! handled at once, the others waiting for a free handler until their `request_timeout`
//! (503 past it); and once an answer's writing stalls, the client has `write_timeout` to
//! take the rest (`deadline`). Each cut is counted in
//! `floodgate_admin_connections_refused_total`.

mod deadline;
mod slots;

use std::io;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use std::convert::Infallible;
use std::sync::atomic::Ordering;

use http_body_util::{BodyExt, LengthLimitError, Limited};
use hyper::body::{Body, Incoming};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, UnixListener};
use tokio::sync::Semaphore;
use tokio_rustls::TlsAcceptor;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use super::actor::Actor;
use super::api::{metrics_response, AdminState};
use super::console::{Body as BodyUse, Pass};
use super::http::guard::Guard;
use super::http::{HttpError, Limits, Request, Response};
use crate::config::{AdminToken, ListenerLimits};
use deadline::{Flags, Timed};
use slots::{Admitted, Refused, Slot, Slots};

/// The kernel's queue of connections not yet accepted, per TCP listener (as the SMTP
/// listeners'): it absorbs a burst of connections while the accept loop turns idle ones over,
/// or waits for room, at no descriptor's cost (the system's `net.core.somaxconn` caps it).
const BACKLOG: u32 = 1024;

/// How long a connection waiting for its request is safe from being cut to make room
/// (see the module): far longer than a client takes to send its request once connected.
pub const GRACE: Duration = Duration::from_secs(2);

/// Requests handled at once per listener (at most `max_connections`); more wait for a free
/// handler until their `request_timeout`.
pub const MAX_HANDLERS: usize = 16;

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
    /// The certificate or key of `[admin.tls]` could not be loaded.
    #[error("[admin.tls]: {0}")]
    Tls(#[from] crate::tls::TlsError),
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

/// Who connected: a TCP client's address, or the user id of the process at the other end
/// of the admin socket (`None` when it could not be read).
#[derive(Clone, Copy, Debug)]
enum Peer {
    Tcp(IpAddr),
    Unix(Option<u32>),
}

impl Peer {
    /// The key its connections are counted under per address: the address (IPv6: its
    /// /64); `None` on the admin socket, which has no per-address bound.
    fn key(self) -> Option<IpAddr> {
        match self {
            Peer::Tcp(ip) => Some(super::console::throttle::key_of(ip)),
            Peer::Unix(_) => None,
        }
    }
}

/// What a connection may ask.
#[derive(Clone)]
enum Mode {
    /// Everything (the unix socket: file permissions guard it), done as the peer's user.
    Admin(Arc<AdminState>),
    /// Everything, with `Authorization: Bearer TOKEN` (checked by the console's throttle of
    /// wrong tokens), done as the token's name; and the web console.
    Token(Arc<super::console::Console>),
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
    let bounds = Bounds::from(state.control.config().admin.limits);
    let served = Listener::new(
        "admin socket",
        "socket",
        Mode::Admin(state.clone()),
        bounds,
        state.metrics.clone(),
        None,
    );
    spawn_accept_loop(listener, Arc::new(served), stop);
    Ok(SocketFile(path.to_path_buf()))
}

/// Serves the admin API and the web console on `address` for requests bearing one of
/// `tokens`, with TLS when `[admin.tls]` is set; returns the bound address.
pub async fn serve_admin_tcp(
    address: std::net::SocketAddr,
    tokens: Vec<AdminToken>,
    state: Arc<AdminState>,
    stop: CancellationToken,
) -> Result<std::net::SocketAddr, ServeError> {
    let config = state.control.config();
    let tls = match &config.admin.tls {
        Some(t) => {
            let mut c =
                Arc::unwrap_or_clone(crate::tls::server_config(&t.certificate, &t.private_key)?);
            c.alpn_protocols = vec![b"http/1.1".to_vec()];
            Some(TlsAcceptor::from(Arc::new(c)))
        }
        None => None,
    };
    let console = super::console::Console::start(state.clone(), tokens, stop.clone());
    let listener = Listener::new(
        "admin address",
        "admin",
        Mode::Token(console),
        Bounds::from(config.admin.limits),
        state.metrics.clone(),
        tls,
    );
    serve_tcp(address, listener, stop).await
}

/// Serves `GET /metrics` on `address` within `limits`; returns the bound address.
pub async fn serve_metrics(
    address: std::net::SocketAddr,
    limits: ListenerLimits,
    metrics: Arc<super::Metrics>,
    stop: CancellationToken,
) -> Result<std::net::SocketAddr, ServeError> {
    let listener = Listener::new(
        "metrics address",
        "metrics",
        Mode::Metrics(metrics.clone()),
        Bounds::from(limits),
        metrics,
        None,
    );
    serve_tcp(address, listener, stop).await
}

async fn serve_tcp(
    address: std::net::SocketAddr,
    listener: Listener,
    stop: CancellationToken,
) -> Result<std::net::SocketAddr, ServeError> {
    let what = listener.what;
    let io_err = |source| ServeError::Io {
        what,
        address: address.to_string(),
        source,
    };
    let socket = bind(address).map_err(io_err)?;
    let bound = socket.local_addr().map_err(io_err)?;
    info!(address = %bound, tls = listener.tls.is_some(), "{what} listening");
    spawn_accept_loop(socket, Arc::new(listener), stop);
    Ok(bound)
}

/// Binds `address` with a listen queue of [`BACKLOG`] (tokio's default is 128).
fn bind(address: std::net::SocketAddr) -> io::Result<TcpListener> {
    let socket = if address.is_ipv4() {
        tokio::net::TcpSocket::new_v4()?
    } else {
        tokio::net::TcpSocket::new_v6()?
    };
    socket.set_reuseaddr(true)?;
    socket.bind(address)?;
    socket.listen(BACKLOG)
}

/// A listener the accept loop serves: the admin unix socket or a TCP address.
trait Accept: Send + 'static {
    /// One accepted connection.
    type Conn: AsyncRead + AsyncWrite + Unpin + Send + 'static;
    /// Waits for the next connection; with the client's address when it has one.
    fn next(&self) -> impl std::future::Future<Output = io::Result<(Self::Conn, Peer)>> + Send;
    /// Closes a connection refused at once, after `answer` when given (see [`say_and_close`]).
    fn refuse(conn: Self::Conn, answer: Option<&[u8]>);
    /// Whether the client already sent its whole request head (`tls`: any byte of its
    /// handshake); never waits.
    fn head_ready(conn: &Self::Conn, tls: bool) -> bool {
        use std::os::fd::AsRawFd;
        let fd = Self::fd(conn);
        let mut buf = [0u8; 8 * 1024];
        // SAFETY: `fd` is the open socket of `conn` for the duration of the call; the
        // buffer is valid for its length.
        let n = unsafe {
            libc::recv(
                fd.as_raw_fd(),
                buf.as_mut_ptr().cast(),
                buf.len(),
                libc::MSG_PEEK | libc::MSG_DONTWAIT,
            )
        };
        let Ok(n) = usize::try_from(n) else {
            return false;
        };
        if tls {
            return n > 0;
        }
        buf[..n].windows(4).any(|w| w == b"\r\n\r\n")
    }
    /// The socket of `conn`.
    fn fd(conn: &Self::Conn) -> std::os::fd::BorrowedFd<'_>;
}

/// Writes `answer` if the socket takes it now, reads away what the client already sent (so
/// that closing sends a FIN, not a reset that could destroy the answer), and closes; never
/// waits.
fn say_and_close<S: io::Read + io::Write>(mut s: S, answer: Option<&[u8]>) {
    if let Some(a) = answer {
        let _ = s.write(a);
    }
    let mut sink = [0u8; 4096];
    // Bounded: at most 16 reads (64 KiB), whatever the client sends.
    for _ in 0..16 {
        match s.read(&mut sink) {
            Ok(n) if n > 0 => {}
            _ => break,
        }
    }
}

impl Accept for UnixListener {
    type Conn = tokio::net::UnixStream;
    async fn next(&self) -> io::Result<(Self::Conn, Peer)> {
        let (s, _) = self.accept().await?;
        let uid = super::peer::peer_uid(&s)
            .map_err(|e| debug!(error = %e, "admin socket: cannot read the peer's credentials"))
            .ok();
        Ok((s, Peer::Unix(uid)))
    }

    fn refuse(conn: Self::Conn, answer: Option<&[u8]>) {
        if let Ok(s) = conn.into_std() {
            say_and_close(s, answer);
        }
    }

    fn fd(conn: &Self::Conn) -> std::os::fd::BorrowedFd<'_> {
        use std::os::fd::AsFd;
        conn.as_fd()
    }
}

impl Accept for TcpListener {
    type Conn = tokio::net::TcpStream;
    async fn next(&self) -> io::Result<(Self::Conn, Peer)> {
        let (s, a) = self.accept().await?;
        cap_send_buffer(&s);
        Ok((s, Peer::Tcp(a.ip())))
    }

    fn refuse(conn: Self::Conn, answer: Option<&[u8]>) {
        if let Ok(s) = conn.into_std() {
            say_and_close(s, answer);
        }
    }

    fn fd(conn: &Self::Conn) -> std::os::fd::BorrowedFd<'_> {
        use std::os::fd::AsFd;
        conn.as_fd()
    }
}

/// The send buffer of an admin TCP connection (the kernel doubles it for its bookkeeping).
/// Left to itself Linux grows it up to `net.ipv4.tcp_wmem`'s maximum (4 MiB by default), so
/// clients that do not read could pin that much kernel memory each, and an answer smaller
/// than that would never stall for the write deadline to see.
pub const SEND_BUFFER: usize = 256 * 1024;

/// Sets [`SEND_BUFFER`] on `s`; a failure leaves the system's default, which still works.
fn cap_send_buffer(s: &tokio::net::TcpStream) {
    use std::os::fd::AsRawFd;
    let size = libc::c_int::try_from(SEND_BUFFER).unwrap_or(libc::c_int::MAX);
    // SAFETY: `s` is an open socket for the duration of the call; the option value is a
    // c_int read from a valid pointer whose length is passed with it.
    let rc = unsafe {
        libc::setsockopt(
            s.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_SNDBUF,
            std::ptr::from_ref(&size).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if rc != 0 {
        debug!(error = %io::Error::last_os_error(), "cannot cap an admin connection's send buffer");
    }
}

/// Time, size and number bounds of one listener's connections.
#[derive(Debug, Clone, Copy)]
struct Bounds {
    /// Connections held at once (see [`slots`]).
    max_connections: usize,
    /// Connections of one client address waiting for their request at once.
    max_per_address: usize,
    /// Time allowed for the TLS handshake and the whole request (head and body), from the
    /// accept; also the longest wait for a free handler.
    request_timeout: Duration,
    /// Time allowed for the rest of an answer once writing it stalls (see [`deadline`]).
    write_timeout: Duration,
    /// Sizes of the head and the body.
    limits: Limits,
}

impl From<ListenerLimits> for Bounds {
    fn from(l: ListenerLimits) -> Self {
        Bounds {
            max_connections: l.max_connections,
            max_per_address: l.max_per_address,
            request_timeout: l.request_timeout,
            write_timeout: l.write_timeout,
            limits: Limits::default(),
        }
    }
}

impl Default for Bounds {
    fn default() -> Self {
        Bounds::from(ListenerLimits::default())
    }
}

/// One listener: what it serves, its bounds, and the connections and handlers it has.
struct Listener {
    /// Its name in log lines.
    what: &'static str,
    /// Its `listener` label (one of [`crate::metrics::ADMIN_LISTENERS`]).
    label: &'static str,
    mode: Mode,
    bounds: Bounds,
    metrics: Arc<super::Metrics>,
    tls: Option<TlsAcceptor>,
    /// The connections held.
    slots: Arc<Slots>,
    /// Requests being handled at once.
    handlers: Arc<Semaphore>,
}

impl Listener {
    fn new(
        what: &'static str,
        label: &'static str,
        mode: Mode,
        bounds: Bounds,
        metrics: Arc<super::Metrics>,
        tls: Option<TlsAcceptor>,
    ) -> Listener {
        Listener {
            what,
            label,
            mode,
            bounds,
            metrics,
            tls,
            slots: Slots::new(bounds.max_connections, bounds.max_per_address, GRACE),
            handlers: Arc::new(Semaphore::new(MAX_HANDLERS.min(bounds.max_connections))),
        }
    }

    /// Counts a connection cut for `reason` (one of [`crate::metrics::ADMIN_REFUSALS`]).
    fn refused(&self, reason: &'static str) {
        self.metrics.admin_connection_refused(self.label, reason);
        debug!(listener = self.what, reason, "admin connection cut");
    }

    /// Counts a connection refused at its accept, and the answer it gets before it is
    /// closed (none over TLS, whose handshake has not happened).
    fn refusal(&self, why: Refused) -> Option<Vec<u8>> {
        let (reason, mut r) = match why {
            Refused::Address => (
                "per_address",
                Response::error(
                    429,
                    "too many connections from your address are waiting to send their \
                     request: send the request at once, or try again",
                ),
            ),
            Refused::Full => (
                "full",
                Response::error(503, "the admin listener is full: try again"),
            ),
        };
        self.refused(reason);
        r.headers.push(("Retry-After", "1".into()));
        self.tls.is_none().then(|| r.to_bytes())
    }
}

/// Accepts on `socket` until `stop`, while the listener has room for another connection
/// or holds one still waiting for its request (see [`slots`]): when every held connection
/// is being answered it waits, connections queueing in the kernel, until one ends. A
/// connection refused at its accept is answered (429 or 503) and closed at once. An accept
/// error (out of descriptors) backs off instead of spinning.
fn spawn_accept_loop<L: Accept>(socket: L, listener: Arc<Listener>, stop: CancellationToken) {
    tokio::spawn(async move {
        loop {
            tokio::select! {
                () = listener.slots.room() => {}
                () = stop.cancelled() => return,
            }
            let accepted = tokio::select! {
                r = socket.next() => r,
                () = stop.cancelled() => return,
            };
            match accepted {
                Ok((stream, peer)) => match listener.slots.admit(peer.key(), Instant::now(), || {
                    L::head_ready(&stream, listener.tls.is_some())
                }) {
                    Ok((slot, admitted)) => {
                        tokio::spawn(serve_conn(stream, peer, slot, listener.clone()));
                        if admitted == Admitted::Evicted {
                            listener.refused("evicted");
                            // Let the cut connection's task close it before the next accept:
                            // a burst must not pile up connections cut but still open.
                            tokio::task::yield_now().await;
                        }
                    }
                    Err(why) => L::refuse(stream, listener.refusal(why).as_deref()),
                },
                Err(e) => {
                    warn!(error = %e, "{} accept failed", listener.what);
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
        }
    });
}

/// Serves one connection until it ends or the listener cuts it to make room (then the
/// stream is dropped: closed).
async fn serve_conn<S>(stream: S, peer: Peer, slot: Slot, listener: Arc<Listener>)
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let flags = Flags::default();
    let l = &*listener;
    let served = tokio::select! {
        r = serve_stream(stream, peer, &slot, l, &flags) => r,
        () = slot.cut().cancelled() => return,
    };
    if flags.timed_out.load(Ordering::Relaxed) {
        l.refused("write_timeout");
    }
    if let Err(e) = served {
        debug!(error = %e, "admin connection ended with an error");
    }
}

/// The TLS handshake when the listener has TLS, then the request.
async fn serve_stream<S>(
    stream: S,
    peer: Peer,
    slot: &Slot,
    l: &Listener,
    flags: &Flags,
) -> io::Result<()>
where
    S: AsyncRead + AsyncWrite + Unpin + Send,
{
    let deadline = tokio::time::Instant::now() + l.bounds.request_timeout;
    let stream = Timed::new(stream, l.bounds.write_timeout, flags);
    let Some(acceptor) = &l.tls else {
        return conn(stream, peer, slot, l, deadline, flags).await;
    };
    match tokio::time::timeout_at(deadline, acceptor.accept(stream)).await {
        Err(_) => {
            l.refused("request_timeout");
            Ok(())
        }
        Ok(Err(e)) => {
            // A plain-HTTP request on the TLS address fails here too.
            l.refused("tls_handshake");
            debug!(listener = l.what, client = ?peer, error = %e, "admin TLS handshake failed");
            Ok(())
        }
        Ok(Ok(tls)) => conn(tls, peer, slot, l, deadline, flags).await,
    }
}

/// Serves one request with hyper (its head read by `deadline` and within the size bounds),
/// then closes. A request hyper could not read is answered here, in JSON (see
/// [`super::http::guard`]).
async fn conn<S>(
    mut stream: S,
    peer: Peer,
    slot: &Slot,
    l: &Listener,
    deadline: tokio::time::Instant,
    flags: &Flags,
) -> io::Result<()>
where
    S: AsyncRead + AsyncWrite + Unpin + Send,
{
    let answered = &flags.answering;
    let mut guard = Guard::new(&mut stream, answered);
    let service = service_fn(|req| async {
        let resp = handle(req, peer, slot, l, deadline).await;
        answered.store(true, Ordering::Release);
        Ok::<_, Infallible>(resp.into_hyper())
    });
    let head_time = deadline
        .saturating_duration_since(tokio::time::Instant::now())
        .max(Duration::from_millis(1));
    let served = http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(head_time)
        .keep_alive(false)
        .title_case_headers(true)
        .max_headers(l.bounds.limits.max_headers)
        .max_header_size(l.bounds.limits.max_head)
        .serve_connection(TokioIo::new(&mut guard), service)
        .await;
    if answered.load(Ordering::Acquire) {
        drain(&mut stream).await;
        return served.map_err(io::Error::other);
    }
    let resp = match (guard.refused(), served) {
        (Some(why), _) => HttpError::Bad(why).into(),
        (None, Ok(())) if !guard.read_any() => return Ok(()),
        (None, Ok(())) => Response::error(400, "request ended early"),
        (None, Err(e)) if e.is_timeout() => {
            l.refused("request_timeout");
            Response::error(408, "request not received in time")
        }
        (None, Err(e)) if e.is_parse_too_large() => HttpError::TooLarge("request head").into(),
        (None, Err(e)) if e.is_parse() => Response::error(400, &format!("bad request: {e}")),
        (None, Err(e)) if e.is_incomplete_message() => Response::error(400, "request ended early"),
        (None, Err(e)) => Response::error(400, &format!("connection error while reading: {e}")),
    };
    answered.store(true, Ordering::Release);
    stream.write_all(&resp.to_bytes()).await?;
    stream.shutdown().await
}

/// Reads away, without waiting, what the client sent that was not read (a body left
/// unread): closing a socket with unread bytes sends a reset, which can destroy the answer
/// on its way. At most 64 KiB.
async fn drain<S: AsyncRead + Unpin>(stream: &mut S) {
    use tokio::io::AsyncReadExt;
    let mut sink = [0u8; 4096];
    for _ in 0..16 {
        match tokio::time::timeout(Duration::ZERO, stream.read(&mut sink)).await {
            Ok(Ok(n)) if n > 0 => {}
            _ => return,
        }
    }
}

/// What a request's head lets it do next, by listener: the admin address asks the console
/// (credentials first, see [`super::console::Console::gate`]); the admin socket's requests
/// are its owner's (file permissions guard it) and have their body read; the metrics
/// address takes no body and never reads one.
fn gate(head: &Request, mode: &Mode, peer: Peer) -> Result<(BodyUse, Pass), Response> {
    match mode {
        Mode::Token(console) => console.gate(head, client_ip(peer)),
        Mode::Admin(_) => Ok((BodyUse::Cleared, Pass::default())),
        Mode::Metrics(_) => Ok((BodyUse::Skip, Pass::default())),
    }
}

/// The client address of a request on the admin address. A TCP connection always has one;
/// without one, every such request would share one throttle entry.
fn client_ip(peer: Peer) -> IpAddr {
    match peer {
        Peer::Tcp(ip) => ip,
        Peer::Unix(_) => IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED),
    }
}

/// The answer to one request whose head arrived: what its head allows (see [`gate`]), its
/// body read by `deadline` when needed (the connection still counted as waiting while an
/// unauthenticated login form's body comes), then a free handler waited for until
/// `deadline` (503 past it), then the endpoint's answer. The handler is free again before
/// the answer is written.
async fn handle(
    req: hyper::Request<Incoming>,
    peer: Peer,
    slot: &Slot,
    l: &Listener,
    deadline: tokio::time::Instant,
) -> Response {
    let (parts, body) = req.into_parts();
    let head = head_of(&parts, &body, l.bounds.limits.max_body);
    let next = head.and_then(|head| Ok((gate(&head, &l.mode, peer)?, head)));
    let ((reading, pass), head) = match next {
        Ok(n) => n,
        Err(r) => {
            slot.answering();
            return r;
        }
    };
    if reading != BodyUse::Form {
        slot.answering();
    } else if !slot.may_wait_for_body() {
        slot.answering();
        l.refused("per_address");
        let mut r = Response::error(
            429,
            "too many connections from your address are waiting to send their request: \
             send the form at once, or try again",
        );
        r.headers.push(("Retry-After", "1".into()));
        return r;
    }
    let req = if reading == BodyUse::Skip {
        head
    } else {
        match read_body(head, body, l.bounds.limits.max_body, deadline).await {
            Ok(req) => req,
            Err(resp) => {
                if resp.status == 408 {
                    l.refused("request_timeout");
                }
                return resp;
            }
        }
    };
    slot.answering();
    let Ok(Ok(_handler)) =
        tokio::time::timeout_at(deadline, l.handlers.clone().acquire_owned()).await
    else {
        l.refused("busy");
        let mut r = Response::error(503, "the admin listener is busy: try again");
        r.headers.push(("Retry-After", "1".into()));
        return r;
    };
    answer(&req, &l.mode, peer, pass).await
}

/// The request as its head gives it (no body yet); or the answer saying why it cannot be
/// taken: a `Transfer-Encoding` or a `Content-Length` past `max_body`.
fn head_of(
    parts: &hyper::http::request::Parts,
    body: &Incoming,
    max_body: usize,
) -> Result<Request, Response> {
    if parts.headers.contains_key(hyper::header::TRANSFER_ENCODING) {
        return Err(HttpError::Bad("Transfer-Encoding is not supported").into());
    }
    if body.size_hint().lower() > max_body as u64 {
        return Err(HttpError::TooLarge("body").into());
    }
    Request::from_parts(parts, Vec::new()).map_err(Response::from)
}

/// `head` with its body, read within `deadline` and `max_body`; or the answer saying why
/// not.
async fn read_body(
    mut head: Request,
    body: Incoming,
    max_body: usize,
    deadline: tokio::time::Instant,
) -> Result<Request, Response> {
    head.body = match tokio::time::timeout_at(deadline, Limited::new(body, max_body).collect())
        .await
    {
        Err(_) => return Err(Response::error(408, "request not received in time")),
        Ok(Err(e)) if e.is::<LengthLimitError>() => return Err(HttpError::TooLarge("body").into()),
        Ok(Err(_)) => return Err(Response::error(400, "request ended early")),
        Ok(Ok(collected)) => collected.to_bytes().to_vec(),
    };
    Ok(head)
}

/// The actor of a request on the admin socket: the peer's user, by name (`getpwuid_r`, off
/// the event loop: the user database may be remote).
async fn socket_actor(uid: u32) -> Actor {
    let name = tokio::task::spawn_blocking(move || super::peer::user_name(uid))
        .await
        .unwrap_or_else(|_| format!("uid {uid}"));
    Actor::User(name)
}

async fn answer(req: &Request, mode: &Mode, peer: Peer, pass: Pass) -> Response {
    match mode {
        Mode::Admin(state) => match peer {
            Peer::Unix(Some(uid)) => state.handle(req, &socket_actor(uid).await).await,
            // Nobody to record the request under: refused rather than done anonymously.
            Peer::Unix(None) | Peer::Tcp(_) => Response::error(
                500,
                "the admin socket could not read who is asking (its peer credentials)",
            ),
        },
        Mode::Token(console) => console.respond(req, client_ip(peer), pass).await,
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
