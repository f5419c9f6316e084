//! Building the configured store: `[store] backend = "memory"` or `"redis"`.

use super::redis::{
    ConnectOptions, FailoverStore, FailureMode, FailurePolicy, HashTag, RedisOptions, RedisStore,
};
use super::{MemoryConfig, MemoryStore, SnapshotError, Store, StoreError};
use crate::config::StoreConfig;
use std::sync::Arc;
use zeroize::Zeroizing;

/// Why the configured store could not be built.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    /// A setting cannot be used (unknown word, unreadable password or CA file).
    #[error("[store]: {0}")]
    Config(String),
    /// The Redis password could not be read.
    #[error("[store]: {0}")]
    Password(#[from] crate::config::PasswordError),
    /// The store refused its settings.
    #[error("[store]: {0}")]
    Store(#[from] StoreError),
    /// The memory store's snapshot could not be loaded (never silently reset).
    #[error(transparent)]
    Snapshot(#[from] SnapshotError),
}

/// The store the configuration names, with its concrete kind kept.
#[derive(Debug, Clone)]
pub enum Opened {
    /// The in-process store.
    Memory(Arc<MemoryStore>),
    /// Redis behind its failure mode.
    Redis(Arc<FailoverStore>),
}

impl Opened {
    /// As the trait object the policy uses.
    pub fn as_store(&self) -> Arc<dyn Store> {
        match self {
            Opened::Memory(m) => m.clone(),
            Opened::Redis(r) => r.clone(),
        }
    }
}

/// Redis settings from the config (reads the password and CA file).
pub fn redis_options(config: &StoreConfig) -> Result<RedisOptions, OpenError> {
    let password = config
        .resolve_password()?
        .map(|s| Zeroizing::new(s.expose().to_string()));
    let ca_pem = match &config.ca_file {
        Some(p) => Some(std::fs::read(p).map_err(|e| {
            OpenError::Config(format!("{}: cannot read the CA file: {e}", p.display()))
        })?),
        None => None,
    };
    let hash_tag = HashTag::parse(&config.hash_tag)
        .ok_or_else(|| OpenError::Config(format!("hash_tag {:?}", config.hash_tag)))?;
    Ok(RedisOptions {
        connect: ConnectOptions {
            url: config.url.clone(),
            nodes: config.nodes.clone(),
            username: config.username.clone(),
            password,
            tls: config.tls,
            ca_pem,
            connect_timeout: config.connect_timeout.0,
        },
        timeout: config.timeout.0,
        key_prefix: config.key_prefix.clone(),
        hash_tag,
        idle_ttl: config.idle_ttl.0,
    })
}

/// The failure policy from the config.
pub fn failure_policy(config: &StoreConfig) -> Result<FailurePolicy, OpenError> {
    let mode = |w: &str| {
        FailureMode::parse(w).ok_or_else(|| {
            OpenError::Config(format!("failure mode {w:?}: use open, closed or local"))
        })
    };
    Ok(FailurePolicy {
        default: mode(&config.failure_mode)?,
        overrides: config
            .failure_modes
            .iter()
            .map(|(p, m)| Ok((p.clone(), mode(m)?)))
            .collect::<Result<_, OpenError>>()?,
    })
}

/// Builds the configured store: the memory store (loading its snapshot when `path` names
/// one), or Redis behind its failure mode. Redis is not contacted here (the first
/// decision connects), so floodgate starts even while Redis is down; use
/// [`RedisStore::ping`] to check it.
pub fn open_store(config: &StoreConfig) -> Result<Opened, OpenError> {
    match config.backend.as_str() {
        "memory" => Ok(Opened::Memory(open_memory(config)?)),
        "redis" => {
            let redis = RedisStore::new(redis_options(config)?)?;
            Ok(Opened::Redis(Arc::new(FailoverStore::new(
                Arc::new(redis),
                failure_policy(config)?,
                config.probe_interval.0,
            ))))
        }
        other => Err(OpenError::Config(format!("backend {other:?}"))),
    }
}

/// The memory store of `config`, its snapshot loaded when there is one.
fn open_memory(config: &StoreConfig) -> Result<Arc<MemoryStore>, SnapshotError> {
    let store = Arc::new(MemoryStore::new(MemoryConfig {
        idle_ttl: config.idle_ttl.0,
        ..MemoryConfig::default()
    }));
    if let Some(path) = &config.path {
        if let Some(n) = store.load_snapshot_if_present(path)? {
            // Logged under the server's target, beside the line that the state was saved.
            tracing::info!(target: "floodgate::server", keys = n, path = %path.display(),
                "rate limit state loaded");
        }
    }
    Ok(store)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn memory_and_redis_open_without_network() {
        assert!(matches!(
            open_store(&StoreConfig::default()).unwrap(),
            Opened::Memory(_)
        ));
        let mut c = StoreConfig {
            backend: "redis".into(),
            url: Some("redis://127.0.0.1:1".into()),
            ..Default::default()
        };
        c.failure_modes.insert("1h/".into(), "closed".into());
        let Opened::Redis(r) = open_store(&c).unwrap() else {
            panic!("not redis")
        };
        assert_eq!(r.policy().mode_for("1h/x"), FailureMode::Closed);
        assert_eq!(r.policy().mode_for("1d/x"), FailureMode::Local);
        c.password_env = Some("FLOODGATE_TEST_SURELY_UNSET_VAR".into());
        assert!(open_store(&c).is_err());
    }
}
