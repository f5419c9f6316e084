//! floodgate as a milter in Postfix's own path: `smtpd_milters` for mail Postfix's `smtpd`
//! receives, `non_smtpd_milters` for mail handed to the local `sendmail`.
//!
//! The protocol itself (packets, negotiation, macros) is [`crate::postfix::milter`], without
//! I/O; this module listens ([`Listener`]), runs one connection per Postfix session
//! ([`conn`]) with the events the limits in force need ([`events`]), and keeps the
//! session's facts and the policy's verdicts ([`session`]), the message assembled from the
//! packets ([`message`]), the messages it holds in Postfix's hold queue ([`held`]), and
//! what `floodgate check` says of milter mode ([`mode`]).

pub mod conn;
pub mod events;
pub mod held;
pub mod message;
pub mod mode;
pub mod session;

use std::os::unix::fs::PermissionsExt;
use std::sync::Arc;

use tokio::net::{TcpListener, UnixListener};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{info, warn};

use crate::config::{Config, MilterConfig, MilterListen};
use crate::policy::identity::Identity;
use crate::policy::model::PolicyModel;
use crate::policy::Policy;

pub use session::Context;

/// Why a milter could not listen.
#[derive(Debug, thiserror::Error)]
pub enum MilterListenError {
    /// `listen` or `mode` is not readable (the config check refuses these first).
    #[error(transparent)]
    Config(#[from] crate::config::MilterConfigError),
    /// The socket could not be made.
    #[error("milter {name}: cannot listen on {listen}: {source}")]
    Bind {
        /// The milter's name.
        name: String,
        /// Where.
        listen: String,
        /// Why.
        source: std::io::Error,
    },
}

/// A bound milter socket.
pub enum Socket {
    /// A unix socket, removed when the listener is dropped.
    Unix(UnixListener, std::path::PathBuf),
    /// A TCP socket.
    Tcp(TcpListener),
}

/// One `[[milter]]`, bound.
pub struct Listener {
    /// Its name.
    pub name: Arc<str>,
    socket: Socket,
}

impl Drop for Listener {
    fn drop(&mut self) {
        if let Socket::Unix(_, path) = &self.socket {
            let _ = std::fs::remove_file(path);
        }
    }
}

/// The context of a connection accepted by the milter of this name, made when it starts
/// (the generation in force then).
pub type ContextOf = Arc<dyn Fn(&Arc<str>) -> Context + Send + Sync>;

impl Listener {
    /// Binds `m` (a relative socket path is taken from `base`); a stale unix socket file
    /// left by an earlier run is replaced. Must be called within a tokio runtime.
    pub fn bind(m: &MilterConfig, base: &std::path::Path) -> Result<Listener, MilterListenError> {
        let name: Arc<str> = m.display_name().into();
        let err = |source| MilterListenError::Bind {
            name: name.to_string(),
            listen: m.listen.get_ref().clone(),
            source,
        };
        let socket = match m.address(base)? {
            MilterListen::Tcp(addr) => {
                let std = std::net::TcpListener::bind(addr).map_err(err)?;
                std.set_nonblocking(true).map_err(err)?;
                Socket::Tcp(TcpListener::from_std(std).map_err(err)?)
            }
            MilterListen::Unix(path) => {
                remove_stale_socket(&path);
                let l = UnixListener::bind(&path).map_err(err)?;
                std::fs::set_permissions(&path, std::fs::Permissions::from_mode(m.mode_bits()?))
                    .map_err(err)?;
                Socket::Unix(l, path)
            }
        };
        Ok(Listener { name, socket })
    }

    /// Where it listens, as Postfix's `smtpd_milters` names it (`unix:/path`,
    /// `inet:IP:PORT`).
    pub fn postfix_address(&self) -> String {
        match &self.socket {
            Socket::Unix(_, p) => format!("unix:{}", p.display()),
            Socket::Tcp(l) => l
                .local_addr()
                .map(|a| format!("inet:{a}"))
                .unwrap_or_default(),
        }
    }

    /// Accepts connections until `stop`, each served by a task of `tracker` with the
    /// context `ctx` gives at its start (the generation in force).
    pub async fn serve(self, ctx: ContextOf, tracker: TaskTracker, stop: CancellationToken) {
        info!(milter = %self.name, address = %self.postfix_address(), "milter listening");
        loop {
            let accepted = tokio::select! {
                _ = stop.cancelled() => return,
                a = self.accept() => a,
            };
            match accepted {
                Ok(Accepted::Unix(s)) => {
                    tracker.spawn(conn::serve(s, ctx(&self.name)));
                }
                Ok(Accepted::Tcp(s)) => {
                    let _ = s.set_nodelay(true);
                    tracker.spawn(conn::serve(s, ctx(&self.name)));
                }
                Err(e) => {
                    warn!(milter = %self.name, error = %e, "milter accept failed");
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                }
            }
        }
    }

    async fn accept(&self) -> std::io::Result<Accepted> {
        match &self.socket {
            Socket::Unix(l, _) => l.accept().await.map(|(s, _)| Accepted::Unix(s)),
            Socket::Tcp(l) => l.accept().await.map(|(s, _)| Accepted::Tcp(s)),
        }
    }
}

enum Accepted {
    Unix(tokio::net::UnixStream),
    Tcp(tokio::net::TcpStream),
}

/// Removes a socket file nobody listens on any more (a path that is no socket is left,
/// and binding then fails with its error).
fn remove_stale_socket(path: &std::path::Path) {
    use std::os::unix::fs::FileTypeExt;
    let is_socket = std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_socket());
    if is_socket && std::os::unix::net::UnixStream::connect(path).is_err() {
        let _ = std::fs::remove_file(path);
    }
}

/// The context of a milter session from the config in force, its limits (`model`), the
/// policy and Postfix's hold queue; `event_log`: the event log is on.
pub fn context(
    config: &Config,
    model: &PolicyModel,
    event_log: bool,
    identity: &Identity,
    policy: Arc<dyn Policy>,
    postfix: Option<Arc<crate::hold::postfix::PostfixHold>>,
    name: &Arc<str>,
) -> Context {
    Context {
        policy,
        identity: identity.clone(),
        max_message_size: config.smtp.max_message_size,
        name: name.clone(),
        postfix,
        wanted: events::wanted(model, event_log),
    }
}
