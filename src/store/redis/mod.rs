//! The Redis (or Valkey) store: every limit of one decision evaluated and
//! applied by one Lua script (`EVALSHA`, reloaded on `NOSCRIPT`), with time
//! from Redis `TIME`, giving the same answers as [`super::MemoryStore`].
//!
//! * [`encode`](mod@encode): decision → script keys and arguments, reply → result.
//! * [`conn`]: connection manager, cluster, TLS, credentials.
//! * [`failover`]: what happens when Redis does not answer (open, closed, local).
//! * `held`: each node's count of held messages per key, published for the others.
//! * [`copy`]: each node's copy of the restricted set, which keeps restrictions in force
//!   while Redis does not answer.
//!
//! Record layout: each record is one string of packed little-endian doubles
//! (read with one `MGET` for the whole decision, written with `SET … PX`),
//! TTL'd by the idle TTL on every write; GCRA records expire when their TAT
//! passes. A key holding anything else (a hash of an older layout) reads as
//! absent and is replaced by the next write.
//!
//! | key | doubles |
//! |---|---|
//! | `P{tag}:e:K` | time (seconds, microseconds), rate |
//! | `P{tag}:u:K` | the same, set creation (seconds), set kind (1 Bloom, 2 exact), Bloom bytes |
//! | `P{tag}:s:K` | (the unique set: Bloom bytes as a string in Exim's bit order, or a Redis set) |
//! | `P{tag}:g:K` | the TAT as seconds, nanoseconds |
//! | `P{tag}:b:K` | last, level, pending, dynamic rate and burst multipliers, as Rspamd's buckets |
//!
//! Cost: one round trip per decision (`EVALSHA`; `SCRIPT LOAD` and a retry
//! only after `NOSCRIPT`); in the script `TIME`, one `MGET` and one `SET`
//! per written record, plus set commands for unique limits.
//!
//! Exactness: EWMA rates and bucket levels are bit-identical to the memory
//! store (same double operations; `math.exp` is the C library's `exp`, as
//! Rust's). GCRA is exact while `|TAT − now|` plus the event weight stays
//! under 2^53 ns (104 days); larger values are refused as invalid.

mod baseline;
mod campaign;
pub mod conn;
pub mod copy;
pub mod encode;
pub mod failover;
mod held;
mod ratio;
mod restrict;
mod scan;

pub use conn::{redact_url, ConnectOptions};
pub use copy::{Recorded, RestrictedCopy};
pub use encode::{HashTag, KeyNamer};
pub use failover::{FailoverStats, FailoverStore, FailureMode, FailurePolicy};

use super::{Decision, DecisionResult, Record, Store, StoreError, StoreFuture, UniqueRecord};
use crate::limit::unique::{UniqueKind, UniqueSet};
use conn::{Conn, Connector};
use encode::{decode, encode};
use redis::Script;
use redis::{ErrorKind, ServerErrorKind, Value};
use std::time::Duration;

/// The decision script (also the body of the guarded decision, see `restrict`).
const DECIDE_LUA: &str = include_str!("decide.lua");

/// Reads every record of one key: four records, then the set's type and content.
const INSPECT_LUA: &str = r#"
local out = redis.call('MGET', KEYS[1], KEYS[2], KEYS[3], KEYS[4])
for i = 1, 4 do if not out[i] then out[i] = '' end end
local t = redis.call('TYPE', KEYS[5])['ok']
out[5] = t
if t == 'string' then out[6] = redis.call('GET', KEYS[5])
elseif t == 'set' then out[6] = redis.call('SMEMBERS', KEYS[5])
else out[6] = '' end
return out
"#;

/// Deletes every record of one key; returns how many records (not sets) went.
const RESET_LUA: &str = r#"
local n = 0
for i = 1, 4 do n = n + redis.call('DEL', KEYS[i]) end
redis.call('DEL', KEYS[5])
if KEYS[6] then n = n + redis.call('DEL', KEYS[6]) end
return n
"#;

/// Settings of a [`RedisStore`].
#[derive(Debug, Clone)]
pub struct RedisOptions {
    /// Where and how to connect.
    pub connect: ConnectOptions,
    /// Time allowed for one decision, round trip included.
    pub timeout: Duration,
    /// Prefix of every key (no braces).
    pub key_prefix: String,
    /// How keys get their cluster hash tag.
    pub hash_tag: HashTag,
    /// Records not written for this long expire (as the memory store's idle TTL).
    pub idle_ttl: Duration,
}

impl Default for RedisOptions {
    fn default() -> Self {
        RedisOptions {
            connect: ConnectOptions {
                connect_timeout: Duration::from_secs(1),
                ..Default::default()
            },
            timeout: Duration::from_millis(50),
            key_prefix: "fg:".into(),
            hash_tag: HashTag::Global,
            idle_ttl: Duration::from_secs(30 * 86400),
        }
    }
}

/// What `floodgate check` reports about the server.
#[derive(Debug, Clone, PartialEq)]
pub struct ServerInfo {
    /// `redis_version` (or Valkey's `valkey_version`) from `INFO server`.
    pub version: String,
    /// `redis_mode`: standalone, cluster or sentinel.
    pub mode: String,
    /// The server's clock, microseconds since the epoch.
    pub time_us: i64,
    /// Local clock minus server clock, microseconds (informative: decisions use the server's).
    pub skew_us: i64,
}

/// The Redis store.
pub struct RedisStore {
    connector: Connector,
    decide: Script,
    inspect: Script,
    reset: Script,
    namer: KeyNamer,
    options: RedisOptions,
    /// The restricted set was non-empty at the last check.
    restrict_hint: std::sync::atomic::AtomicBool,
    /// When the last check was, microseconds since the epoch.
    restrict_hint_at: std::sync::atomic::AtomicI64,
}

impl std::fmt::Debug for RedisStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisStore")
            .field("options", &self.options)
            .finish_non_exhaustive()
    }
}

fn unavailable(e: &redis::RedisError) -> StoreError {
    StoreError::Unavailable(format!("redis: {e}"))
}

/// The first text in a reply (a cluster's per-node map included).
fn first_text(v: &Value) -> String {
    match v {
        Value::BulkString(b) => String::from_utf8_lossy(b).into_owned(),
        Value::SimpleString(s) => s.clone(),
        Value::VerbatimString { text, .. } => text.clone(),
        Value::Map(pairs) => pairs
            .first()
            .map(|(_, v)| first_text(v))
            .unwrap_or_default(),
        Value::Array(a) => a.first().map(first_text).unwrap_or_default(),
        _ => String::new(),
    }
}

/// The bytes of a bulk-string reply item (empty for anything else).
fn bytes_of(v: &Value) -> &[u8] {
    match v {
        Value::BulkString(b) => b,
        _ => &[],
    }
}

fn bad_record(kind: &str) -> StoreError {
    StoreError::Unavailable(format!("stored {kind} record has a bad layout"))
}

impl RedisStore {
    /// A store with `options`; connects on first use. Call it inside a Tokio
    /// runtime (the connection manager is bound to it).
    pub fn new(options: RedisOptions) -> Result<RedisStore, StoreError> {
        let namer = KeyNamer::new(&options.key_prefix, options.hash_tag)?;
        let connector =
            Connector::new(&options.connect, options.timeout).map_err(|e| unavailable(&e))?;
        Ok(RedisStore {
            connector,
            decide: Script::new(DECIDE_LUA),
            inspect: Script::new(INSPECT_LUA),
            reset: Script::new(RESET_LUA),
            namer,
            options,
            restrict_hint: std::sync::atomic::AtomicBool::new(true),
            restrict_hint_at: std::sync::atomic::AtomicI64::new(0),
        })
    }

    /// The options.
    pub fn options(&self) -> &RedisOptions {
        &self.options
    }

    async fn conn(&self) -> Result<Conn, StoreError> {
        self.connector.get().await.map_err(|e| {
            self.connector.failed();
            unavailable(&e)
        })
    }

    /// Runs `fut` under the per-decision timeout, forgetting a broken
    /// cluster connection on failure.
    async fn timed<T>(
        &self,
        fut: impl std::future::Future<Output = Result<T, StoreError>>,
    ) -> Result<T, StoreError> {
        let out = match tokio::time::timeout(self.options.timeout, fut).await {
            Ok(r) => r,
            Err(_) => Err(StoreError::Unavailable(format!(
                "redis: no answer within {:?}",
                self.options.timeout
            ))),
        };
        if matches!(out, Err(StoreError::Unavailable(_))) {
            self.connector.failed();
        }
        out
    }

    /// Applies `decision` at `now_us` (microseconds since the epoch), or at
    /// the Redis server's `TIME` when `None`. An explicit time is for tests
    /// and simulation: nodes that share state must use the server's clock.
    pub async fn decide_at(
        &self,
        now_us: Option<i64>,
        decision: &Decision,
    ) -> Result<DecisionResult, StoreError> {
        if decision.limits.is_empty() {
            return Ok(DecisionResult::default());
        }
        let enc = encode(&self.namer, decision, now_us, self.options.idle_ttl)?;
        match self.eval(&self.decide, &enc).await? {
            Value::BulkString(b) => decode(decision, &b),
            other => Err(StoreError::Unavailable(format!(
                "unexpected reply from the decision script: {other:?}"
            ))),
        }
    }

    /// Runs `script` (`EVALSHA`, loaded on `NOSCRIPT`) on encoded keys and arguments, under
    /// the per-decision timeout.
    async fn eval(&self, script: &Script, enc: &encode::Encoded) -> Result<Value, StoreError> {
        // The command is built once, straight from the encoded parts
        // (ScriptInvocation would copy every key and argument twice).
        let mut cmd = redis::cmd("EVALSHA");
        cmd.arg(script.get_hash()).arg(enc.keys.len());
        for k in &enc.keys {
            cmd.arg(k.as_str());
        }
        for a in &enc.args {
            cmd.arg(a.as_slice());
        }
        self.timed(async {
            let mut conn = self.conn().await?;
            match cmd.query_async::<Value>(&mut conn).await {
                Err(e) if e.kind() == ErrorKind::Server(ServerErrorKind::NoScript) => {
                    // First use on this server (or after SCRIPT FLUSH / a restart).
                    script
                        .load_async(&mut conn)
                        .await
                        .map_err(|e| unavailable(&e))?;
                    cmd.query_async::<Value>(&mut conn).await
                }
                other => other,
            }
            .map_err(|e| unavailable(&e))
        })
        .await
    }

    /// Every record stored under `key`, read-only.
    pub async fn inspect_key(&self, key: &str) -> Result<Vec<Record>, StoreError> {
        let keys = self.namer.all(key);
        let reply: Vec<Value> = self
            .timed(async {
                let mut conn = self.conn().await?;
                let mut inv = self.inspect.prepare_invoke();
                for k in &keys {
                    inv.key(k);
                }
                inv.key(self.namer.name('q', key));
                inv.invoke_async(&mut conn)
                    .await
                    .map_err(|e| unavailable(&e))
            })
            .await?;
        if reply.len() != 6 {
            return Err(StoreError::Unavailable("bad inspect reply".into()));
        }
        let mut out = Vec::new();
        let e = bytes_of(&reply[0]);
        if !e.is_empty() {
            out.push(Record::Ewma(
                encode::decode_ewma(e).ok_or_else(|| bad_record("EWMA"))?,
            ));
        }
        let u = bytes_of(&reply[1]);
        if !u.is_empty() {
            let (state, created_s, kind, size) =
                encode::decode_unique(u).ok_or_else(|| bad_record("unique"))?;
            let set = match kind {
                UniqueKind::Bloom => {
                    let mut bits = bytes_of(&reply[5]).to_vec();
                    bits.resize(size, 0);
                    UniqueSet::Bloom(bits.into_boxed_slice())
                }
                UniqueKind::Exact => {
                    let members = match &reply[5] {
                        Value::Array(a) | Value::Set(a) => a
                            .iter()
                            .filter_map(|v| match v {
                                Value::BulkString(b) => {
                                    Some(String::from_utf8_lossy(b).into_owned().into_boxed_str())
                                }
                                _ => None,
                            })
                            .collect(),
                        _ => Default::default(),
                    };
                    UniqueSet::Exact(members)
                }
            };
            out.push(Record::Unique(UniqueRecord {
                state,
                created_s,
                set,
            }));
        }
        let g = bytes_of(&reply[2]);
        if !g.is_empty() {
            out.push(Record::Gcra {
                tat_ns: encode::decode_gcra(g).ok_or_else(|| bad_record("GCRA"))?,
            });
        }
        let b = bytes_of(&reply[3]);
        if !b.is_empty() {
            out.push(Record::Bucket(
                encode::decode_bucket(b).ok_or_else(|| bad_record("bucket"))?,
            ));
        }
        Ok(out)
    }

    /// Removes every record under `key`; returns how many.
    pub async fn reset_key(&self, key: &str) -> Result<usize, StoreError> {
        let keys = self.namer.all(key);
        let n: i64 = self
            .timed(async {
                let mut conn = self.conn().await?;
                let mut inv = self.reset.prepare_invoke();
                for k in &keys {
                    inv.key(k);
                }
                // The ratio window of the key (see `ratio`).
                inv.key(self.namer.name('q', key));
                inv.invoke_async(&mut conn)
                    .await
                    .map_err(|e| unavailable(&e))
            })
            .await?;
        Ok(usize::try_from(n).unwrap_or(0))
    }

    /// Connects (if needed), checks the server answers and reads its
    /// version, mode and clock. Used by `floodgate check` and the
    /// failover probe.
    pub async fn ping(&self) -> Result<ServerInfo, StoreError> {
        self.timed(async {
            let mut conn = self.conn().await?;
            // A cluster answers INFO from every master: any one will do.
            let info: Value = redis::cmd("INFO")
                .arg("server")
                .query_async(&mut conn)
                .await
                .map_err(|e| unavailable(&e))?;
            let info = first_text(&info);
            let (secs, micros): (i64, i64) = redis::cmd("TIME")
                .query_async(&mut conn)
                .await
                .map_err(|e| unavailable(&e))?;
            let get = |name: &str| {
                info.lines()
                    .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
                    .map(|v| v.trim().to_string())
            };
            let time_us = secs * 1_000_000 + micros;
            Ok(ServerInfo {
                version: get("valkey_version")
                    .or_else(|| get("redis_version"))
                    .unwrap_or_else(|| "unknown".into()),
                mode: get("redis_mode")
                    .or_else(|| get("server_mode"))
                    .unwrap_or_else(|| "unknown".into()),
                time_us,
                skew_us: super::now_micros() - time_us,
            })
        })
        .await
    }
}

impl Store for RedisStore {
    fn decide<'a>(&'a self, decision: &'a Decision) -> StoreFuture<'a, DecisionResult> {
        Box::pin(self.decide_at(None, decision))
    }

    fn inspect<'a>(&'a self, key: &'a str) -> StoreFuture<'a, Vec<Record>> {
        Box::pin(self.inspect_key(key))
    }

    fn reset<'a>(&'a self, key: &'a str) -> StoreFuture<'a, usize> {
        Box::pin(self.reset_key(key))
    }

    fn may_restrict(&self) -> bool {
        self.restrict_hint()
    }

    fn restricted<'a>(&'a self, keys: &'a [String]) -> StoreFuture<'a, Option<super::Restriction>> {
        Box::pin(self.restricted_keys(keys))
    }

    fn restrict<'a>(
        &'a self,
        r: super::Restriction,
        dur: Option<i64>,
    ) -> StoreFuture<'a, super::Restriction> {
        Box::pin(async move { self.restrict_key(&r, dur).await })
    }

    fn release<'a>(&'a self, key: &'a str) -> StoreFuture<'a, Option<super::Restriction>> {
        Box::pin(self.release_key(key))
    }

    fn restrictions(&self) -> StoreFuture<'_, Vec<super::Restriction>> {
        Box::pin(self.restriction_list())
    }

    fn decide_unless_restricted<'a>(
        &'a self,
        keys: &'a [String],
        decision: &'a Decision,
    ) -> StoreFuture<'a, super::Guarded> {
        Box::pin(self.decide_guarded(keys, decision))
    }

    fn restrict_once<'a>(
        &'a self,
        r: super::Restriction,
        dur: Option<i64>,
    ) -> StoreFuture<'a, (super::Restriction, bool)> {
        Box::pin(async move { self.restrict_key_once(&r, dur).await })
    }

    fn expire_restrictions(&self) -> StoreFuture<'_, Vec<super::Restriction>> {
        Box::pin(self.sweep_restrictions())
    }

    fn ratio<'a>(
        &'a self,
        key: &'a str,
        window: super::RatioWindow,
        add: super::RatioCounts,
    ) -> StoreFuture<'a, super::RatioCounts> {
        Box::pin(self.ratio_key(key, window, add))
    }

    fn campaign_join<'a>(
        &'a self,
        join: &'a super::CampaignJoin,
    ) -> StoreFuture<'a, super::CampaignLedger> {
        Box::pin(self.campaign_join_values(join))
    }

    fn campaign_mark<'a>(
        &'a self,
        id: &'a str,
        limit: &'a str,
        restricted: &'a [String],
        every_us: i64,
    ) -> StoreFuture<'a, super::MarkAnswer> {
        Box::pin(self.campaign_mark_id(id, limit, restricted, every_us))
    }

    fn campaigns(&self) -> StoreFuture<'_, Vec<super::Campaign>> {
        Box::pin(self.campaign_list())
    }

    fn save_baselines<'a>(
        &'a self,
        limit: &'a str,
        set: &'a super::BaselineSet,
    ) -> StoreFuture<'a, ()> {
        Box::pin(self.save_baseline_set(limit, set))
    }

    fn load_baselines<'a>(&'a self, limit: &'a str) -> StoreFuture<'a, Option<super::BaselineSet>> {
        Box::pin(self.load_baseline_set(limit))
    }

    fn shares_state(&self) -> bool {
        true
    }

    fn publish_held<'a>(
        &'a self,
        node: &'a str,
        counts: &'a [(String, u64)],
        gone: &'a [String],
        ttl: std::time::Duration,
    ) -> StoreFuture<'a, ()> {
        Box::pin(self.publish_held_counts(node, counts, gone, ttl))
    }

    fn held_counts<'a>(&'a self, key: &'a str) -> StoreFuture<'a, Vec<(String, u64)>> {
        Box::pin(self.held_counts_of(key))
    }
}
