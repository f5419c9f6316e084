//! The restricted set in Redis: one hash (`<prefix>{tag}:r:restricted`), field the restricted
//! key, value `{"since_us":…,"until_us":…,"r":RESTRICTION}` (the restriction as JSON, wrapped
//! as sent so the script never re-encodes it), and a sorted set of the timed ones by end time
//! (`<prefix>{tag}:r:{restricted}until`, same hash slot). Times come from the server's clock
//! (`TIME`) so every node agrees on when a restriction began and ends. An expired entry no
//! longer restricts; it stays until a sweep ([`RedisStore::sweep_restrictions`], run by every
//! node) removes it and answers it to that one node, which tells of the release.
//!
//! Every release is remembered for [`RELEASES_KEPT_US`] in a third key (a sorted set of keys
//! by release time, `<prefix>{tag}:r:{restricted}released`): a restriction a node made while
//! it could not reach Redis is recorded later ([`RedisStore::record_restriction`]) only if
//! the key was not released since it began.
//!
//! The check is folded into the MAIL stage's decision when there is one
//! ([`RedisStore::decide_guarded`]): one script call checks the candidate keys and, only when
//! none is restricted, applies the decision.

use std::sync::OnceLock;

use redis::Script;

use super::copy::Recorded;
use super::{unavailable, RedisStore};
use crate::store::{Decision, Guarded, Restriction, StoreError};

/// Check: KEYS[1] the set; ARGV are candidate keys; answers `{restriction or "", entries
/// in the set}`: the first restriction in force among them, and the set's size (for the
/// empty-set hint). Expired entries are left for the sweep, which tells of them.
const CHECK_LUA: &str = r#"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
for i = 1, #ARGV do
  local v = redis.call('HGET', KEYS[1], ARGV[i])
  if v then
    local u = cjson.decode(v).until_us
    if not (type(u) == 'number' and u <= now) then
      return {v, redis.call('HLEN', KEYS[1])}
    end
  end
end
return {'', redis.call('HLEN', KEYS[1])}
"#;

/// The guarded decision: the decision script as a function, run only when none of the
/// candidate keys is restricted. KEYS: the decision's keys, then the set; ARGV: the
/// decision's arguments, then the candidate keys, then their number. Answers
/// `{1, restriction, entries}` (nothing applied) or `{0, the decision's reply, entries}`.
const GUARD_HEAD: &str = "local function decide()\n";
const GUARD_TAIL: &str = r#"
end
local set = KEYS[#KEYS]
local nk = tonumber(ARGV[#ARGV])
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
for i = #ARGV - nk, #ARGV - 1 do
  local v = redis.call('HGET', set, ARGV[i])
  if v then
    local u = cjson.decode(v).until_us
    if not (type(u) == 'number' and u <= now) then
      return {1, v, redis.call('HLEN', set)}
    end
  end
end
return {0, decide(), redis.call('HLEN', set)}
"#;

/// How long "the set was empty" is believed without asking again (see
/// [`RedisStore::restrict_hint`]).
const HINT_US: i64 = 1_000_000;

/// Restrict: KEYS[1] the set, KEYS[2] the until index; ARGV[1] key, ARGV[2] restriction
/// JSON, ARGV[3] duration in µs or "", ARGV[4] "1" to keep a restriction in force instead
/// of replacing it. Answers `{restriction as stored, 1 if made now}`.
const RESTRICT_LUA: &str = r#"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
if ARGV[4] == '1' then
  local old = redis.call('HGET', KEYS[1], ARGV[1])
  if old then
    local u = cjson.decode(old).until_us
    if not (type(u) == 'number' and u <= now) then return {old, 0} end
  end
end
local u = 'null'
if ARGV[3] ~= '' then
  local until_us = now + tonumber(ARGV[3])
  u = string.format('%d', until_us)
  redis.call('ZADD', KEYS[2], u, ARGV[1])
else
  redis.call('ZREM', KEYS[2], ARGV[1])
end
local v = '{"since_us":' .. string.format('%d', now) .. ',"until_us":' .. u .. ',"r":' .. ARGV[2] .. '}'
redis.call('HSET', KEYS[1], ARGV[1], v)
return {v, 1}
"#;

/// Release: ARGV[1] key; answers the restriction removed (nil if none in force; an
/// expired one is left for the sweep). The release is remembered (KEYS[3]) either way: a
/// restriction made before it on a node cut off from Redis is not recorded after it.
const RELEASE_LUA: &str = r#"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
redis.call('ZADD', KEYS[3], string.format('%d', now), ARGV[1])
local v = redis.call('HGET', KEYS[1], ARGV[1])
if not v then return false end
local u = cjson.decode(v).until_us
if type(u) == 'number' and u <= now then return false end
redis.call('HDEL', KEYS[1], ARGV[1])
redis.call('ZREM', KEYS[2], ARGV[1])
return v
"#;

/// List: every restriction in force.
const LIST_LUA: &str = r#"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local all = redis.call('HGETALL', KEYS[1])
local out = {}
for i = 1, #all, 2 do
  local u = cjson.decode(all[i + 1]).until_us
  if not (type(u) == 'number' and u <= now) then
    out[#out + 1] = all[i + 1]
  end
end
return out
"#;

/// Record: a restriction made on a node while Redis could not be written, with its own
/// times. ARGV[1] key, ARGV[2] restriction JSON, ARGV[3] since (µs), ARGV[4] until (µs) or
/// "". Answers `{"kept", restriction in force}` (left as it is), `{"released", release
/// time}` (the key was released at or after since), `{"expired", ""}` (until has passed), or
/// `{"recorded", restriction as stored}`.
const RECORD_LUA: &str = r#"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local old = redis.call('HGET', KEYS[1], ARGV[1])
if old then
  local u = cjson.decode(old).until_us
  if not (type(u) == 'number' and u <= now) then return {'kept', old} end
end
local rel = redis.call('ZSCORE', KEYS[3], ARGV[1])
if rel and tonumber(rel) >= tonumber(ARGV[3]) then return {'released', rel} end
local u = 'null'
if ARGV[4] ~= '' then
  if tonumber(ARGV[4]) <= now then return {'expired', ''} end
  u = ARGV[4]
  redis.call('ZADD', KEYS[2], u, ARGV[1])
else
  redis.call('ZREM', KEYS[2], ARGV[1])
end
local v = '{"since_us":' .. ARGV[3] .. ',"until_us":' .. u .. ',"r":' .. ARGV[2] .. '}'
redis.call('HSET', KEYS[1], ARGV[1], v)
return {'recorded', v}
"#;

/// How long a release is remembered against restrictions recorded late (7 days, in µs):
/// longer than any outage a node rides out with its local copy.
pub const RELEASES_KEPT_US: i64 = 7 * 86_400 * 1_000_000;

/// Sweep: removes up to ARGV[1] restrictions whose until has passed (found by the until
/// index) and answers them, and forgets releases older than ARGV[2] µs. Atomic: each expired
/// restriction is answered to one caller only, however many nodes sweep.
const SWEEP_LUA: &str = r#"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', string.format('(%d', now - tonumber(ARGV[2])))
local due = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', string.format('%d', now),
  'LIMIT', 0, tonumber(ARGV[1]))
local out = {}
for _, k in ipairs(due) do
  redis.call('ZREM', KEYS[2], k)
  local v = redis.call('HGET', KEYS[1], k)
  if v then
    local u = cjson.decode(v).until_us
    if type(u) == 'number' and u <= now then
      redis.call('HDEL', KEYS[1], k)
      out[#out + 1] = v
    elseif type(u) == 'number' then
      redis.call('ZADD', KEYS[2], string.format('%d', u), k)
    end
  end
end
return out
"#;

/// Restrictions one sweep ends at most (the next sweep takes the rest).
const SWEEP_MAX: usize = 1000;

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
static SWEEP: OnceLock<Script> = OnceLock::new();
static RECORD: OnceLock<Script> = OnceLock::new();
static GUARDED: OnceLock<Script> = OnceLock::new();

/// The guarded decision script: the decision script wrapped as a function after the check.
fn guarded_script() -> &'static Script {
    GUARDED.get_or_init(|| Script::new(&format!("{GUARD_HEAD}{}{GUARD_TAIL}", super::DECIDE_LUA)))
}

fn bulk_text(v: &redis::Value) -> Option<String> {
    match v {
        redis::Value::BulkString(b) => Some(String::from_utf8_lossy(b).into_owned()),
        _ => None,
    }
}

impl RedisStore {
    fn set_name(&self) -> String {
        self.namer.name('r', "restricted")
    }

    /// The index of timed restrictions by end time (same hash slot as the set).
    fn until_name(&self) -> String {
        self.namer.name('r', "{restricted}until")
    }

    /// Releases by time (same hash slot as the set).
    fn released_name(&self) -> String {
        self.namer.name('r', "{restricted}released")
    }

    async fn run(&self, script: &Script, args: &[&str]) -> Result<redis::Value, StoreError> {
        let keys = [self.set_name(), self.until_name(), self.released_name()];
        self.timed(async {
            let mut conn = self.conn().await?;
            let mut inv = script.prepare_invoke();
            inv.key(&keys[0]).key(&keys[1]).key(&keys[2]);
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
        match items.first().and_then(bulk_text) {
            Some(t) if !t.is_empty() => parse(&t).map(Some),
            _ => Ok(None),
        }
    }

    /// Whether the restricted set and every key of a decision can be named in one script
    /// call: always on one server; on a cluster only with the global hash tag (one slot).
    pub fn folds_restricted(&self) -> bool {
        self.options.connect.nodes.is_empty()
            || self.options.hash_tag == super::encode::HashTag::Global
    }

    /// Checks `keys` against the restricted set and, when none is restricted, applies
    /// `decision`, in one script call (see [`crate::store::Store::decide_unless_restricted`]).
    /// On a cluster with per-identity hash tags the two are separate calls.
    pub async fn decide_guarded(
        &self,
        keys: &[String],
        decision: &Decision,
    ) -> Result<Guarded, StoreError> {
        if keys.is_empty() || decision.limits.is_empty() || !self.folds_restricted() {
            if let Some(r) = self.restricted_keys(keys).await? {
                return Ok(Guarded::Restricted(r));
            }
            return self.decide_at(None, decision).await.map(Guarded::Decided);
        }
        let mut enc = super::encode::encode(&self.namer, decision, None, self.options.idle_ttl)?;
        enc.keys.push(self.set_name());
        for k in keys {
            enc.args.push(k.as_bytes().to_vec());
        }
        enc.args.push(keys.len().to_string().into_bytes());
        let reply = self.eval(guarded_script(), &enc).await?;
        let redis::Value::Array(items) = reply else {
            return Err(StoreError::Unavailable(format!(
                "unexpected reply from the guarded decision: {reply:?}"
            )));
        };
        if let Some(redis::Value::Int(n)) = items.get(2) {
            self.set_hint(*n > 0);
        }
        match (items.first(), items.get(1)) {
            (Some(redis::Value::Int(1)), Some(v)) => {
                let t = bulk_text(v).unwrap_or_default();
                parse(&t).map(Guarded::Restricted)
            }
            (Some(redis::Value::Int(0)), Some(redis::Value::BulkString(b))) => {
                super::encode::decode(decision, b).map(Guarded::Decided)
            }
            _ => Err(StoreError::Unavailable(format!(
                "unexpected reply from the guarded decision: {items:?}"
            ))),
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

    async fn restrict_with(
        &self,
        r: &Restriction,
        dur: Option<i64>,
        keep: bool,
    ) -> Result<(Restriction, bool), StoreError> {
        let json = serde_json::to_string(r).map_err(|e| StoreError::Invalid(e.to_string()))?;
        let d = dur.map(|d| d.to_string()).unwrap_or_default();
        self.set_hint(true);
        let keep = if keep { "1" } else { "0" };
        let reply = self
            .run(script(&RESTRICT, RESTRICT_LUA), &[&r.key, &json, &d, keep])
            .await?;
        match &reply {
            redis::Value::Array(items) => match (items.first().and_then(bulk_text), items.get(1)) {
                (Some(t), Some(redis::Value::Int(made))) => Ok((parse(&t)?, *made == 1)),
                _ => Err(StoreError::Unavailable(format!(
                    "unexpected reply from the restrict script: {reply:?}"
                ))),
            },
            other => Err(StoreError::Unavailable(format!(
                "unexpected reply from the restrict script: {other:?}"
            ))),
        }
    }

    /// Restricts `r.key` from the server's now for `dur` µs (`None`: until released).
    pub async fn restrict_key(
        &self,
        r: &Restriction,
        dur: Option<i64>,
    ) -> Result<Restriction, StoreError> {
        self.restrict_with(r, dur, false).await.map(|(r, _)| r)
    }

    /// Restricts `r.key` unless a restriction of it is in force; answers the one in force
    /// and whether this call made it.
    pub async fn restrict_key_once(
        &self,
        r: &Restriction,
        dur: Option<i64>,
    ) -> Result<(Restriction, bool), StoreError> {
        self.restrict_with(r, dur, true).await
    }

    /// Ends the restriction of `key`; `None` when it had none in force.
    pub async fn release_key(&self, key: &str) -> Result<Option<Restriction>, StoreError> {
        let r = match self.run(script(&RELEASE, RELEASE_LUA), &[key]).await? {
            redis::Value::BulkString(b) => parse(&String::from_utf8_lossy(&b)).map(Some)?,
            _ => None,
        };
        if r.is_some() {
            // The campaigns (another hash slot) learn of the release for their evidence
            // rule; the release stands if this fails (the campaign may restrict it again).
            if let Err(e) = self.campaign_released(key).await {
                tracing::warn!(error = %e, key, "campaigns not told of a release");
            }
        }
        Ok(r)
    }

    /// Every restriction in force, by key.
    pub async fn restriction_list(&self) -> Result<Vec<Restriction>, StoreError> {
        let mut out = Vec::new();
        if let redis::Value::Array(items) = self.run(script(&LIST, LIST_LUA), &[]).await? {
            for v in items {
                if let Some(t) = bulk_text(&v) {
                    out.push(parse(&t)?);
                }
            }
        }
        out.sort_by(|a, b| a.key.cmp(&b.key));
        Ok(out)
    }

    /// Records `r`, a restriction made while Redis could not be written, with its own times
    /// (see `RECORD_LUA` and [`Recorded`] for when it is not).
    pub async fn record_restriction(&self, r: &Restriction) -> Result<Recorded, StoreError> {
        let json = serde_json::to_string(r).map_err(|e| StoreError::Invalid(e.to_string()))?;
        let since = r.since_us.to_string();
        let until = r.until_us.map(|u| u.to_string()).unwrap_or_default();
        self.set_hint(true);
        let reply = self
            .run(
                script(&RECORD, RECORD_LUA),
                &[&r.key, &json, &since, &until],
            )
            .await?;
        let bad = || {
            StoreError::Unavailable(format!(
                "unexpected reply from the record script: {reply:?}"
            ))
        };
        let redis::Value::Array(items) = &reply else {
            return Err(bad());
        };
        let word = items.first().and_then(bulk_text).ok_or_else(bad)?;
        let text = items.get(1).and_then(bulk_text).unwrap_or_default();
        match word.as_str() {
            "recorded" => parse(&text).map(Recorded::Recorded),
            "kept" => parse(&text).map(Recorded::Kept),
            "released" => Ok(Recorded::Released(
                text.parse::<f64>().map_or(0, |t| t as i64),
            )),
            "expired" => Ok(Recorded::Expired),
            _ => Err(bad()),
        }
    }

    /// Removes the restrictions whose time is over and answers them: each to one caller
    /// only, whichever node sweeps first. Releases older than `RELEASES_KEPT_US` are
    /// forgotten.
    pub async fn sweep_restrictions(&self) -> Result<Vec<Restriction>, StoreError> {
        let max = SWEEP_MAX.to_string();
        let kept = RELEASES_KEPT_US.to_string();
        let mut out = Vec::new();
        if let redis::Value::Array(items) =
            self.run(script(&SWEEP, SWEEP_LUA), &[&max, &kept]).await?
        {
            for v in items {
                if let Some(t) = bulk_text(&v) {
                    match parse(&t) {
                        Ok(r) => out.push(r),
                        Err(e) => {
                            tracing::warn!(error = %e, "an expired restriction is unreadable")
                        }
                    }
                }
            }
        }
        Ok(out)
    }
}
