//! `[store]`: where limit state lives (in memory, or shared on Redis).

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;
use zeroize::Zeroizing;

use super::ConfigDuration;

/// A secret read from the config: `Debug` and `Display` never show it, and
/// it is wiped from memory when dropped.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(Zeroizing<String>);

impl<'de> Deserialize<'de> for Secret {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Secret, D::Error> {
        String::deserialize(d).map(Secret::new)
    }
}

impl Secret {
    /// Wraps a secret.
    pub fn new(s: String) -> Secret {
        Secret(Zeroizing::new(s))
    }

    /// The secret text (hand it only to the code that needs it).
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<hidden>")
    }
}

/// `[store]`.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct StoreConfig {
    /// `memory` or `redis`.
    pub backend: String,
    /// Snapshot path for the memory store.
    pub path: Option<PathBuf>,
    /// How often the memory store is written to `path` (and once more at shutdown).
    pub snapshot_interval: ConfigDuration,
    /// How often idle keys are dropped from the memory store.
    pub expire_interval: ConfigDuration,
    /// Redis: `redis://[user:password@]host:port[/db]` (`rediss://` for TLS).
    pub url: Option<String>,
    /// Redis Cluster seed nodes (`host:port`), instead of `url`.
    pub nodes: Vec<String>,
    /// Redis ACL user name.
    pub username: Option<String>,
    /// Redis password (prefer `password_file` or `password_env`).
    pub password: Option<Secret>,
    /// A file whose first line is the Redis password.
    pub password_file: Option<PathBuf>,
    /// An environment variable holding the Redis password.
    pub password_env: Option<String>,
    /// TLS to Redis.
    pub tls: bool,
    /// PEM CA bundle for Redis' certificate; the system roots when absent.
    pub ca_file: Option<PathBuf>,
    /// Time allowed for one decision, round trip included.
    pub timeout: ConfigDuration,
    /// Time allowed to open a connection to Redis.
    pub connect_timeout: ConfigDuration,
    /// `open` (allow and count locally), `closed` (defer with 451 4.3.0) or
    /// `local` (decide in memory until Redis answers again).
    pub failure_mode: String,
    /// Per-limit failure modes: limit key prefix → mode (longest prefix wins).
    pub failure_modes: BTreeMap<String, String>,
    /// While Redis is down, how often one decision tries it again.
    pub probe_interval: ConfigDuration,
    /// Prefix of every Redis key.
    pub key_prefix: String,
    /// `global` (every key in one cluster slot) or `identity` (a slot per key identity).
    pub hash_tag: String,
    /// Records not updated for this long expire.
    pub idle_ttl: ConfigDuration,
}

impl Default for StoreConfig {
    fn default() -> Self {
        StoreConfig {
            backend: "memory".into(),
            path: None,
            snapshot_interval: ConfigDuration(Duration::from_secs(300)),
            expire_interval: ConfigDuration(Duration::from_secs(600)),
            url: None,
            nodes: Vec::new(),
            username: None,
            password: None,
            password_file: None,
            password_env: None,
            tls: false,
            ca_file: None,
            timeout: ConfigDuration(Duration::from_millis(50)),
            connect_timeout: ConfigDuration(Duration::from_secs(1)),
            failure_mode: "local".into(),
            failure_modes: BTreeMap::new(),
            probe_interval: ConfigDuration(Duration::from_secs(1)),
            key_prefix: "fg:".into(),
            hash_tag: "global".into(),
            idle_ttl: ConfigDuration(Duration::from_secs(30 * 86400)),
        }
    }
}

/// Why `[store]` was refused.
#[derive(Debug, thiserror::Error)]
pub enum StoreConfigError {
    /// A backend other than `memory` or `redis`.
    #[error("store backend {0:?} is not available: use \"memory\" or \"redis\"")]
    Backend(String),
    /// Both `url` and `nodes`.
    #[error("[store] gives both url and nodes: use url for one Redis server, nodes for a cluster")]
    UrlAndNodes,
    /// Redis without `url` or `nodes`.
    #[error("[store] backend = \"redis\" needs url (or nodes for a cluster)")]
    NoUrl,
    /// More than one password source.
    #[error("[store] give at most one of password, password_file and password_env")]
    TwoPasswords,
    /// An unknown `failure_mode`.
    #[error("[store] failure_mode {0:?}: use \"open\", \"closed\" or \"local\"")]
    FailureMode(String),
    /// An unknown mode in `[store.failure_modes]`.
    #[error("[store.failure_modes] {prefix:?} = {mode:?}: use \"open\", \"closed\" or \"local\"")]
    PrefixFailureMode {
        /// The limit key prefix.
        prefix: String,
        /// The mode given for it.
        mode: String,
    },
    /// An unknown `hash_tag`.
    #[error("[store] hash_tag {0:?}: use \"global\" or \"identity\"")]
    HashTag(String),
    /// A `key_prefix` with braces.
    #[error("[store] key_prefix must not contain {{ or }} (they set the cluster hash tag)")]
    KeyPrefixBraces,
    /// A zero `timeout`.
    #[error("[store] timeout must be positive")]
    Timeout,
}

/// Why the Redis password could not be had.
#[derive(Debug, thiserror::Error)]
pub enum PasswordError {
    /// `password_file` could not be read.
    #[error("{}: cannot read the Redis password: {source}", path.display())]
    File {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// `password_env` names a variable that is not set.
    #[error("environment variable {0} (the Redis password) is not set")]
    Env(String),
}

fn mode_ok(word: &str) -> bool {
    matches!(word, "open" | "closed" | "local")
}

impl StoreConfig {
    /// Checks the section and makes paths absolute against `base`.
    pub fn validate(mut self, base: &Path) -> Result<StoreConfig, StoreConfigError> {
        let abs = |p: PathBuf| if p.is_absolute() { p } else { base.join(p) };
        self.path = self.path.map(abs);
        self.password_file = self.password_file.map(abs);
        self.ca_file = self.ca_file.map(abs);
        match self.backend.as_str() {
            "memory" => return Ok(self),
            "redis" => {}
            other => return Err(StoreConfigError::Backend(other.to_string())),
        }
        if self.url.is_some() && !self.nodes.is_empty() {
            return Err(StoreConfigError::UrlAndNodes);
        }
        if self.url.is_none() && self.nodes.is_empty() {
            return Err(StoreConfigError::NoUrl);
        }
        // A rediss:// address means TLS whatever `tls` says, so the CA bundle applies.
        let rediss = |a: &str| {
            a.get(..9)
                .is_some_and(|p| p.eq_ignore_ascii_case("rediss://"))
        };
        if self.url.as_deref().is_some_and(rediss) || self.nodes.iter().any(|n| rediss(n)) {
            self.tls = true;
        }
        let secrets = [
            self.password.is_some(),
            self.password_file.is_some(),
            self.password_env.is_some(),
        ];
        if secrets.iter().filter(|&&s| s).count() > 1 {
            return Err(StoreConfigError::TwoPasswords);
        }
        if !mode_ok(&self.failure_mode) {
            return Err(StoreConfigError::FailureMode(self.failure_mode));
        }
        for (prefix, mode) in &self.failure_modes {
            if !mode_ok(mode) {
                return Err(StoreConfigError::PrefixFailureMode {
                    prefix: prefix.clone(),
                    mode: mode.clone(),
                });
            }
        }
        if !matches!(self.hash_tag.as_str(), "global" | "identity") {
            return Err(StoreConfigError::HashTag(self.hash_tag));
        }
        if self.key_prefix.contains(['{', '}']) {
            return Err(StoreConfigError::KeyPrefixBraces);
        }
        if self.timeout.0.is_zero() {
            return Err(StoreConfigError::Timeout);
        }
        Ok(self)
    }

    /// The Redis password from `password`, `password_file` or `password_env`.
    pub fn resolve_password(&self) -> Result<Option<Secret>, PasswordError> {
        if let Some(p) = &self.password {
            return Ok(Some(p.clone()));
        }
        if let Some(path) = &self.password_file {
            let text = Zeroizing::new(std::fs::read_to_string(path).map_err(|source| {
                PasswordError::File {
                    path: path.clone(),
                    source,
                }
            })?);
            let line = text.lines().next().unwrap_or("").trim_end_matches('\r');
            return Ok(Some(Secret::new(line.to_string())));
        }
        if let Some(var) = &self.password_env {
            let v = std::env::var(var).map_err(|_| PasswordError::Env(var.clone()))?;
            return Ok(Some(Secret::new(v)));
        }
        Ok(None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn redis() -> StoreConfig {
        StoreConfig {
            backend: "redis".into(),
            url: Some("redis://127.0.0.1:1".into()),
            ..Default::default()
        }
    }

    #[test]
    fn validation() {
        let base = Path::new("/etc/fg");
        assert!(redis().validate(base).is_ok());
        let mut c = redis();
        c.nodes = vec!["a:1".into()];
        assert!(c.validate(base).unwrap_err().to_string().contains("both"));
        let mut c = redis();
        c.url = None;
        assert!(c
            .validate(base)
            .unwrap_err()
            .to_string()
            .contains("needs url"));
        let mut c = redis();
        c.failure_mode = "maybe".into();
        assert!(c.validate(base).is_err());
        let mut c = redis();
        c.failure_modes.insert("1h/".into(), "nope".into());
        assert!(c.validate(base).is_err());
        let mut c = redis();
        c.hash_tag = "x".into();
        assert!(c.validate(base).is_err());
        let mut c = redis();
        c.key_prefix = "{x}".into();
        assert!(c.validate(base).is_err());
        let mut c = redis();
        c.password = Some(Secret::new("a".into()));
        c.password_env = Some("X".into());
        assert!(c
            .validate(base)
            .unwrap_err()
            .to_string()
            .contains("at most one"));
        let mut c = redis();
        c.password_file = Some("pw".into());
        assert_eq!(
            c.validate(base).unwrap().password_file,
            Some(PathBuf::from("/etc/fg/pw"))
        );
        let c = StoreConfig {
            backend: "etcd".into(),
            ..Default::default()
        };
        assert!(c.validate(base).is_err());
    }

    #[test]
    fn password_sources_and_debug() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("pw");
        std::fs::write(&f, "s3cret-file\nignored\n").unwrap();
        let mut c = redis();
        c.password_file = Some(f);
        assert_eq!(
            c.resolve_password().unwrap().unwrap().expose(),
            "s3cret-file"
        );
        let mut c = redis();
        c.password = Some(Secret::new("s3cret-inline".into()));
        assert!(!format!("{c:?}").contains("s3cret"));
        let mut c = redis();
        c.password_env = Some("FLOODGATE_TEST_SURELY_UNSET_VAR".into());
        assert!(c.resolve_password().is_err());
        assert_eq!(redis().resolve_password().unwrap(), None);
    }
}
