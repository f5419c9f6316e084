//! Connections to Redis: one reconnecting connection manager for a single
//! server, or a cluster connection made on first use and remade after errors.

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::cluster::ClusterClient;
use redis::cluster_async::ClusterConnection;
use redis::{Client, IntoConnectionInfo, RedisError, TlsCertificates};
use std::fmt;
use std::sync::Mutex;
use std::time::Duration;
use zeroize::Zeroizing;

/// Where and how to connect.
#[derive(Clone, Default)]
pub struct ConnectOptions {
    /// `redis://host:port[/db]` (or `rediss://` for TLS) of a single server.
    pub url: Option<String>,
    /// Cluster seed nodes (`host:port` or URLs); used instead of `url` when not empty.
    pub nodes: Vec<String>,
    /// ACL user name.
    pub username: Option<String>,
    /// Password (never logged: `Debug` hides it).
    pub password: Option<Zeroizing<String>>,
    /// Use TLS (turns `redis://` into `rediss://`).
    pub tls: bool,
    /// PEM CA bundle for the server certificate instead of the system roots.
    pub ca_pem: Option<Vec<u8>>,
    /// Time allowed to open a connection.
    pub connect_timeout: Duration,
}

impl fmt::Debug for ConnectOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ConnectOptions")
            .field("url", &self.url.as_deref().map(redact_url))
            .field("nodes", &self.nodes)
            .field("username", &self.username)
            .field("password", &self.password.as_ref().map(|_| "<hidden>"))
            .field("tls", &self.tls)
            .field("ca_pem", &self.ca_pem.as_ref().map(Vec::len))
            .field("connect_timeout", &self.connect_timeout)
            .finish()
    }
}

/// `url` with any password replaced by `***`, for logs and `check`.
pub fn redact_url(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_string();
    };
    match rest.split_once('@') {
        Some((cred, host)) => match cred.split_once(':') {
            Some((user, _)) => format!("{scheme}://{user}:***@{host}"),
            None => format!("{scheme}://***@{host}"),
        },
        None => url.to_string(),
    }
}

/// Normalises one address: adds the scheme, switches to `rediss` for TLS.
fn with_scheme(addr: &str, tls: bool) -> String {
    let addr = addr.trim();
    let rest = addr
        .strip_prefix("redis://")
        .or_else(|| addr.strip_prefix("rediss://"));
    match (rest, tls) {
        (Some(r), true) => format!("rediss://{r}"),
        (Some(_), false) => addr.to_string(),
        (None, true) => format!("rediss://{addr}"),
        (None, false) => format!("redis://{addr}"),
    }
}

fn certs(opts: &ConnectOptions) -> TlsCertificates {
    TlsCertificates {
        client_tls: None,
        root_cert: opts.ca_pem.clone(),
    }
}

/// A live connection of either kind, cheap to clone.
#[derive(Clone)]
pub enum Conn {
    /// One server behind a reconnecting manager.
    Single(ConnectionManager),
    /// A cluster.
    Cluster(ClusterConnection),
}

/// Hands out connections.
pub enum Connector {
    /// A single server: the manager reconnects by itself.
    Single(ConnectionManager),
    /// A cluster: connected lazily, dropped after an error so the next call
    /// rediscovers the topology.
    Cluster {
        /// The client with seed nodes and credentials.
        client: Box<ClusterClient>,
        /// The current connection.
        conn: Mutex<Option<ClusterConnection>>,
        /// Serialises reconnects.
        connecting: tokio::sync::Mutex<()>,
    },
}

impl Connector {
    /// Builds the connector; no network traffic yet (the first decision or
    /// [`Connector::get`] connects).
    pub fn new(opts: &ConnectOptions, response_timeout: Duration) -> Result<Connector, RedisError> {
        if !opts.nodes.is_empty() {
            let nodes: Vec<String> = opts
                .nodes
                .iter()
                .map(|n| with_scheme(n, opts.tls))
                .collect();
            let mut b = ClusterClient::builder(nodes)
                .connection_timeout(opts.connect_timeout)
                .response_timeout(response_timeout)
                .retries(1);
            if let Some(u) = &opts.username {
                b = b.username(u);
            }
            if let Some(p) = &opts.password {
                b = b.password(p.as_str());
            }
            if opts.tls {
                b = b.tls(redis::TlsMode::Secure).certs(certs(opts));
            }
            return Ok(Connector::Cluster {
                client: Box::new(b.build()?),
                conn: Mutex::new(None),
                connecting: tokio::sync::Mutex::new(()),
            });
        }
        let url = with_scheme(opts.url.as_deref().unwrap_or("127.0.0.1:6379"), opts.tls);
        let mut info = url.as_str().into_connection_info()?;
        let mut settings = info.redis_settings().clone();
        if let Some(u) = &opts.username {
            settings = settings.set_username(u);
        }
        if let Some(p) = &opts.password {
            settings = settings.set_password(p.as_str());
        }
        info = info.set_redis_settings(settings);
        let client = if opts.tls && opts.ca_pem.is_some() {
            Client::build_with_tls(info, certs(opts))?
        } else {
            Client::open(info)?
        };
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(opts.connect_timeout))
            .set_response_timeout(Some(response_timeout))
            .set_number_of_retries(1)
            .set_min_delay(Duration::from_millis(10))
            .set_max_delay(Duration::from_millis(500));
        Ok(Connector::Single(ConnectionManager::new_lazy_with_config(
            client, config,
        )?))
    }

    /// A connection (connecting the cluster first if needed).
    pub async fn get(&self) -> Result<Conn, RedisError> {
        match self {
            Connector::Single(m) => Ok(Conn::Single(m.clone())),
            Connector::Cluster {
                client,
                conn,
                connecting,
            } => {
                if let Some(c) = lock(conn).clone() {
                    return Ok(Conn::Cluster(c));
                }
                let _g = connecting.lock().await;
                if let Some(c) = lock(conn).clone() {
                    return Ok(Conn::Cluster(c));
                }
                let c = client.get_async_connection().await?;
                *lock(conn) = Some(c.clone());
                Ok(Conn::Cluster(c))
            }
        }
    }

    /// Forgets a cluster connection after an error (a single server's
    /// manager reconnects by itself).
    pub fn failed(&self) {
        if let Connector::Cluster { conn, .. } = self {
            *lock(conn) = None;
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl redis::aio::ConnectionLike for Conn {
    fn req_packed_command<'a>(
        &'a mut self,
        cmd: &'a redis::Cmd,
    ) -> redis::RedisFuture<'a, redis::Value> {
        match self {
            Conn::Single(c) => c.req_packed_command(cmd),
            Conn::Cluster(c) => c.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        cmd: &'a redis::Pipeline,
        offset: usize,
        count: usize,
    ) -> redis::RedisFuture<'a, Vec<redis::Value>> {
        match self {
            Conn::Single(c) => c.req_packed_commands(cmd, offset, count),
            Conn::Cluster(c) => c.req_packed_commands(cmd, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Conn::Single(c) => c.get_db(),
            Conn::Cluster(c) => c.get_db(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls() {
        assert_eq!(with_scheme("h:1", false), "redis://h:1");
        assert_eq!(with_scheme("h:1", true), "rediss://h:1");
        assert_eq!(with_scheme("redis://h:1", true), "rediss://h:1");
        assert_eq!(with_scheme("rediss://h:1", false), "rediss://h:1");
        assert_eq!(redact_url("redis://u:pw@h:1/0"), "redis://u:***@h:1/0");
        assert_eq!(redact_url("redis://:pw@h:1"), "redis://:***@h:1");
        assert_eq!(redact_url("redis://h:1"), "redis://h:1");
    }

    #[test]
    fn debug_hides_password() {
        let o = ConnectOptions {
            url: Some("redis://u:secret1@h:1".into()),
            password: Some(Zeroizing::new("secret2".into())),
            ..Default::default()
        };
        let s = format!("{o:?}");
        assert!(!s.contains("secret"), "{s}");
    }
}
