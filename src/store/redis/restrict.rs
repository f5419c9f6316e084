//! The restricted set in Redis: one hash (`<prefix>{tag}:r:restricted`), field the restricted
//! key, value `{"since_us":…,"until_us":…,"r":RESTRICTION}` (the restriction as JSON, wrapped
//! as sent so the script never re-encodes it). Times come from the server's clock (`TIME`) so every
//! node agrees on when a restriction began and ends; an expired entry is deleted by the
//! first check or listing that finds it.

use std::sync::OnceLock;

use redis::Script;

use super::{unavailable, RedisStore};
use crate::store::{Restriction, StoreError};

/// Check: ARGV are candidate keys; answers `{restriction or "", entries in the set}`: the
/// first restriction in force among them, and the set's size (for the empty-set hint).
const CHECK_LUA: &str = r#"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
for i = 1, #ARGV do
  local v = redis.call('HGET', KEYS[1], ARGV[i])
  if v then
    local u = cjson.decode(v).until_us
    if type(u) == 'number' and u <= now then
      redis.call('HDEL', KEYS[1], ARGV[i])
    else
      return {v, redis.call('HLEN', KEYS[1])}
    end
  end
end
return {'', redis.call('HLEN', KEYS[1])}
"#;

/// How long "the set was empty" is believed without asking again (see
/// [`RedisStore::restrict_hint`]).
const HINT_US: i64 = 1_000_000;

/// Restrict: ARGV[1] key, ARGV[2] restriction JSON, ARGV[3] duration in µs or "".
/// Answers the restriction as stored.
const RESTRICT_LUA: &str = r#"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local u = 'null'
if ARGV[3] ~= '' then u = string.format('%d', now + tonumber(ARGV[3])) end
local v = '{"since_us":' .. string.format('%d', now) .. ',"until_us":' .. u .. ',"r":' .. ARGV[2] .. '}'
redis.call('HSET', KEYS[1], ARGV[1], v)
return v
"#;

/// Release: ARGV[1] key; answers the restriction removed (nil if none in force).
const RELEASE_LUA: &str = r#"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local v = redis.call('HGET', KEYS[1], ARGV[1])
if not v then return false end
redis.call('HDEL', KEYS[1], ARGV[1])
local u = cjson.decode(v).until_us
if type(u) == 'number' and u <= now then return false end
return v
"#;

/// List: every restriction in force (expired ones deleted).
const LIST_LUA: &str = r#"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local all = redis.call('HGETALL', KEYS[1])
local out = {}
for i = 1, #all, 2 do
  local u = cjson.decode(all[i + 1]).until_us
  if type(u) == 'number' and u <= now then
    redis.call('HDEL', KEYS[1], all[i])
  else
    out[#out + 1] = all[i + 1]
  end
end
return out
"#;

#[derive(serde::Deserialize)]
struct Stored {
    since_us: i64,
    until_us: Option<i64>,
    r: Restriction,
}

fn parse(json: &str) -> Result<Restriction, StoreError> {
    let s: Stored = serde_json::from_str(json).map_err(|e| {
        StoreError::Unavailable(format!("stored restriction has a bad layout: {e}"))
    })?;
    let mut r = s.r;
    r.since_us = s.since_us;
    r.until_us = s.until_us;
    Ok(r)
}

fn script(cell: &'static OnceLock<Script>, lua: &str) -> &'static Script {
    cell.get_or_init(|| Script::new(lua))
}

static CHECK: OnceLock<Script> = OnceLock::new();
static RESTRICT: OnceLock<Script> = OnceLock::new();
static RELEASE: OnceLock<Script> = OnceLock::new();
static LIST: OnceLock<Script> = OnceLock::new();

impl RedisStore {
    fn set_name(&self) -> String {
        self.namer.name('r', "restricted")
    }

    async fn run(&self, script: &Script, args: &[&str]) -> Result<redis::Value, StoreError> {
        let name = self.set_name();
        self.timed(async {
            let mut conn = self.conn().await?;
            let mut inv = script.prepare_invoke();
            inv.key(&name);
            for a in args {
                inv.arg(*a);
            }
            inv.invoke_async(&mut conn)
                .await
                .map_err(|e| unavailable(&e))
        })
        .await
    }

    /// The restriction in force on the first of `keys` that has one (one script call).
    pub async fn restricted_keys(
        &self,
        keys: &[String],
    ) -> Result<Option<Restriction>, StoreError> {
        if keys.is_empty() {
            return Ok(None);
        }
        let args: Vec<&str> = keys.iter().map(String::as_str).collect();
        let reply = self.run(script(&CHECK, CHECK_LUA), &args).await?;
        let redis::Value::Array(items) = reply else {
            return Err(StoreError::Unavailable(format!(
                "unexpected reply from the restriction check: {reply:?}"
            )));
        };
        let len = match items.get(1) {
            Some(redis::Value::Int(n)) => *n,
            _ => 1,
        };
        self.set_hint(len > 0);
        match items.first() {
            Some(redis::Value::BulkString(b)) if !b.is_empty() => {
                parse(&String::from_utf8_lossy(b)).map(Some)
            }
            _ => Ok(None),
        }
    }

    fn set_hint(&self, nonempty: bool) {
        self.restrict_hint
            .store(nonempty, std::sync::atomic::Ordering::Relaxed);
        self.restrict_hint_at.store(
            crate::store::now_micros(),
            std::sync::atomic::Ordering::Relaxed,
        );
    }

    /// Whether a check could find a restriction, without a round trip: true when the set was
    /// non-empty at the last check, or the last check is older than a second. Used only
    /// while no limit restricts (then a restriction by hand on another node is seen within
    /// a second); with a restricting limit every MAIL FROM is checked.
    pub fn restrict_hint(&self) -> bool {
        use std::sync::atomic::Ordering::Relaxed;
        self.restrict_hint.load(Relaxed)
            || crate::store::now_micros() - self.restrict_hint_at.load(Relaxed) > HINT_US
    }

    /// Restricts `r.key` from the server's now for `dur` µs (`None`: until released).
    pub async fn restrict_key(
        &self,
        r: &Restriction,
        dur: Option<i64>,
    ) -> Result<Restriction, StoreError> {
        let json = serde_json::to_string(r).map_err(|e| StoreError::Invalid(e.to_string()))?;
        let d = dur.map(|d| d.to_string()).unwrap_or_default();
        self.set_hint(true);
        match self
            .run(script(&RESTRICT, RESTRICT_LUA), &[&r.key, &json, &d])
            .await?
        {
            redis::Value::BulkString(b) => parse(&String::from_utf8_lossy(&b)),
            other => Err(StoreError::Unavailable(format!(
                "unexpected reply from the restrict script: {other:?}"
            ))),
        }
    }

    /// Ends the restriction of `key`; `None` when it had none in force.
    pub async fn release_key(&self, key: &str) -> Result<Option<Restriction>, StoreError> {
        match self.run(script(&RELEASE, RELEASE_LUA), &[key]).await? {
            redis::Value::BulkString(b) => parse(&String::from_utf8_lossy(&b)).map(Some),
            _ => Ok(None),
        }
    }

    /// Every restriction in force, by key.
    pub async fn restriction_list(&self) -> Result<Vec<Restriction>, StoreError> {
        let mut out = Vec::new();
        if let redis::Value::Array(items) = self.run(script(&LIST, LIST_LUA), &[]).await? {
            for v in items {
                if let redis::Value::BulkString(b) = v {
                    out.push(parse(&String::from_utf8_lossy(&b))?);
                }
            }
        }
        out.sort_by(|a, b| a.key.cmp(&b.key));
        Ok(out)
    }
}
