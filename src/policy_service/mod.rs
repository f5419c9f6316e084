//! Postfix's SMTP access policy delegation (`check_policy_service`): a thin executor of
//! [`crate::exchange`] on the codec of [`crate::postfix::policy`].
//!
//! * [`facts`]: a request read as the policy's facts and stage;
//! * [`judge`]: one request judged through its session's exchange;
//! * [`answer`]: the access action for the exchange's act;
//! * [`blind`]: what a limit needs that the requests do not carry, for `floodgate check`;
//! * [`table`]: the client sessions followed, bounded in number and idle time;
//! * [`conn`]: one connection from Postfix, many requests on it.
//!
//! Postfix asks at the stages whose restrictions name the service. Each request belongs to
//! a client session (its `client_address` and `client_port`) and, from MAIL on, to one
//! transaction (its `instance`). The first request of a session or transaction also asks
//! the stages before it ([`crate::exchange::Exchange::ask_through`]), so a `mail` limit
//! applies with the service only in `smtpd_recipient_restrictions`. Postfix going on from a
//! recipient floodgate let through is heard as its acceptance; charges wait in the policy
//! and are committed at END-OF-MESSAGE, and a transaction that ends without one (a new
//! `instance`, the session gone idle) is abandoned: nothing of it is charged.

pub mod answer;
pub mod blind;
pub mod conn;
pub mod facts;
pub mod judge;
pub mod table;

use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use tokio::net::{TcpListener, UnixListener};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{info, warn};

use crate::config::{PolicyListen, PolicyServiceConfig};
use crate::policy::identity::Identity;
use crate::policy::Policy;

/// What a connection of the service works with: the generation in force when it started.
#[derive(Clone)]
pub struct Context {
    /// The policy asked.
    pub policy: Arc<dyn Policy>,
    /// How logins fold into accounts.
    pub identity: Identity,
    /// The service's name (the listener name the policy sees).
    pub name: Arc<str>,
    /// Postfix's hold queue and its ledger, when `[postfix]` is configured.
    pub postfix: Option<Arc<crate::hold::postfix::PostfixHold>>,
}

/// Gives a connection its [`Context`] when it starts, from the generation in force.
pub type ContextFn = Arc<dyn Fn(&Arc<str>) -> Context + Send + Sync>;

/// A policy service that could not listen.
#[derive(Debug, thiserror::Error)]
pub enum PolicyListenError {
    /// The socket could not be bound or given its mode.
    #[error("[[policy_service]] {name}: cannot listen on {listen}: {source}")]
    Bind {
        /// The service's name.
        name: String,
        /// Its `listen`.
        listen: String,
        /// Why.
        source: std::io::Error,
    },
}

enum Socket {
    Unix(UnixListener, PathBuf),
    Tcp(TcpListener),
}

/// One bound `[[policy_service]]`, with the sessions it follows.
pub struct Listener {
    /// Its name.
    pub name: Arc<str>,
    socket: Socket,
    sessions: judge::Sessions,
}

impl Drop for Listener {
    fn drop(&mut self) {
        if let Socket::Unix(_, path) = &self.socket {
            let _ = std::fs::remove_file(path);
        }
    }
}

impl Listener {
    /// Binds `p` where it listens (`listen`, resolved when the config was read); a unix
    /// socket left by an earlier run is replaced, and the new one gets its `mode`.
    pub fn bind(
        p: &PolicyServiceConfig,
        listen: &PolicyListen,
    ) -> Result<Listener, PolicyListenError> {
        let name: Arc<str> = p.display_name().into();
        let err = |source| PolicyListenError::Bind {
            name: name.to_string(),
            listen: p.listen.get_ref().clone(),
            source,
        };
        let socket = match listen {
            PolicyListen::Tcp(addr) => {
                let std = std::net::TcpListener::bind(addr).map_err(err)?;
                std.set_nonblocking(true).map_err(err)?;
                Socket::Tcp(TcpListener::from_std(std).map_err(err)?)
            }
            PolicyListen::Unix(path, mode) => {
                if std::fs::symlink_metadata(path).is_ok_and(|m| {
                    use std::os::unix::fs::FileTypeExt;
                    m.file_type().is_socket()
                }) {
                    std::fs::remove_file(path).map_err(err)?;
                }
                let std = std::os::unix::net::UnixListener::bind(path).map_err(err)?;
                use std::os::unix::fs::PermissionsExt;
                std::fs::set_permissions(path, std::fs::Permissions::from_mode(*mode))
                    .map_err(err)?;
                std.set_nonblocking(true).map_err(err)?;
                Socket::Unix(UnixListener::from_std(std).map_err(err)?, path.clone())
            }
        };
        Ok(Listener {
            name,
            socket,
            sessions: Arc::new(Mutex::new(table::Table::new(
                table::MAX_SESSIONS,
                table::IDLE,
            ))),
        })
    }

    /// Where it listens, as `check_policy_service` names it (`unix:/path`, `inet:a:p`).
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
    /// context `ctx` gives when it starts (the generation in force).
    pub async fn serve(self, ctx: ContextFn, tracker: TaskTracker, stop: CancellationToken) {
        info!(service = %self.name, address = %self.postfix_address(), "policy service listening");
        let expiry = tracker.spawn(expire(self.sessions.clone(), stop.clone()));
        loop {
            let accepted = tokio::select! {
                _ = stop.cancelled() => break,
                a = self.accept(&ctx, &stop) => a,
            };
            match accepted {
                Ok(conn) => {
                    tracker.spawn(conn);
                }
                Err(e) => {
                    warn!(service = %self.name, error = %e, "policy service accept failed");
                    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                }
            }
        }
        let _ = expiry.await;
    }

    /// The next connection, as the future that serves it.
    async fn accept(
        &self,
        ctx: &ContextFn,
        stop: &CancellationToken,
    ) -> std::io::Result<std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>> {
        let (c, s, stop) = (ctx(&self.name), self.sessions.clone(), stop.clone());
        Ok(match &self.socket {
            Socket::Unix(l, _) => {
                let (stream, _) = l.accept().await?;
                Box::pin(conn::serve(stream, c, s, stop))
            }
            Socket::Tcp(l) => {
                let (stream, _) = l.accept().await?;
                let _ = stream.set_nodelay(true);
                Box::pin(conn::serve(stream, c, s, stop))
            }
        })
    }
}

/// Drops the sessions idle too long, once a minute, until `stop`.
async fn expire(sessions: judge::Sessions, stop: CancellationToken) {
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep(std::time::Duration::from_secs(60)) => {}
        }
        let dropped = sessions
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .expire(std::time::Instant::now());
        drop(dropped);
    }
}
