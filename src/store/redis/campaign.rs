//! Campaigns in Redis (see [`crate::store::campaign`] for the grouping and the ledger).
//! Every key lives in one hash slot (tag `{campaigns}`), under the base name
//! `<prefix>{tag}:m:{campaigns}`:
//!
//! * `…g/BAND`: the campaign a band value belongs to (a string, expiring one period and a
//!   second after the band was last seen);
//! * `…l/ID`: a campaign's ledger, a hash: a field `=SENDER` per sender holding
//!   `copies|recipients|last_us|restricted_us|t:r,t:r|info` ([`CampaignSender::encode`]),
//!   the totals `~copies` and `~recipients`, the period `~period`, once found `~limit`,
//!   `~since`, `~last` and `~alerted`; a campaign merged into another holds only
//!   `~alias` (the survivor). It expires one period after its last copy, or
//!   [`LISTED_US`] after its last mark;
//! * `…index`: the found campaigns, a sorted set scored by the last mark;
//! * `…released`: accounts by the time an admin released them (kept
//!   [`RELEASES_KEPT_US`]).
//!
//! One script call notes a message (resolving and merging its bands, noting the sender,
//! answering the campaign with each sender's release time and its last mark); one more marks a found campaign
//! (recording whom it restricted, answering whether its alert is due). The time is the
//! server's (`TIME`), so every node agrees, and every node groups alike.

use std::sync::OnceLock;

use redis::Script;

use super::{unavailable, RedisStore};
use crate::store::campaign::{
    ALIAS_DEPTH, LISTED_US, MAX_SENDERS, RECENT_COPIES, RELEASES_KEPT_US,
};
use crate::store::{
    Campaign, CampaignJoin, CampaignLedger, CampaignSender, MarkAnswer, StoreError,
};

/// The helpers every campaign script starts with: the time, ledger names, following
/// aliases, and the sender text (see [`CampaignSender::encode`]).
const COMMON_LUA: &str = r#"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local base = ARGV[1]
local depth = tonumber(ARGV[2])
local function L(id) return base .. 'l/' .. id end
local function root(id)
  for i = 1, depth do
    local a = redis.call('HGET', L(id), '~alias')
    if not a then return id end
    id = a
  end
  return id
end
local function dec(v)
  local c, r, l, x, rec, info = string.match(v, '^(%d+)|(%d+)|(%-?%d+)|(%-?%d+)|([^|]*)|(.*)$')
  if not c then return nil end
  local recent = {}
  for a, b in string.gmatch(rec, '(%d+):(%d+)') do table.insert(recent, {tonumber(a), tonumber(b)}) end
  return {c = tonumber(c), r = tonumber(r), l = tonumber(l), x = tonumber(x), rec = recent, info = info}
end
local function enc(e)
  local parts = {}
  for i, p in ipairs(e.rec) do parts[i] = string.format('%d:%d', p[1], p[2]) end
  return string.format('%d|%d|%d|%d|', e.c, e.r, e.l, e.x) .. table.concat(parts, ',') .. '|' .. e.info
end
"#;

/// KEYS: the index (for routing). ARGV: base, alias depth, link (`1`/`0`), sender,
/// recipients, info, period µs, recent copies kept, most senders, then the values.
/// Answers `{id, field, value, release time, …}`: the senders (`=SENDER`) and totals.
const JOIN_LUA: &str = r#"
local link = ARGV[3] == '1'
local sender = '=' .. ARGV[4]
local rcpts = tonumber(ARGV[5])
local period = tonumber(ARGV[7])
local keep = tonumber(ARGV[8])
local maxs = tonumber(ARGV[9])
local first = 10
local pms = math.floor(period / 1000) + 1000
local function merge(from, into)
  local all = redis.call('HGETALL', L(from))
  for i = 1, #all, 2 do
    local f, v = all[i], all[i + 1]
    if string.sub(f, 1, 1) == '=' then
      local mine = redis.call('HGET', L(into), f)
      if mine then
        local a, b = dec(mine), dec(v)
        if a and b then
          a.c = a.c + b.c
          a.r = a.r + b.r
          if b.l > a.l then a.l = b.l; a.info = b.info end
          for _, p in ipairs(b.rec) do table.insert(a.rec, p) end
          table.sort(a.rec, function(x, y) return x[1] < y[1] end)
          while #a.rec > keep do table.remove(a.rec, 1) end
          if b.x > a.x then a.x = b.x end
          redis.call('HSET', L(into), f, enc(a))
        end
      elseif redis.call('HLEN', L(into)) < maxs then
        redis.call('HSET', L(into), f, v)
      end
    elseif f == '~copies' or f == '~recipients' then
      redis.call('HINCRBY', L(into), f, v)
    elseif f == '~since' then
      local s = redis.call('HGET', L(into), f)
      if not s or tonumber(v) < tonumber(s) then redis.call('HSET', L(into), f, v) end
    elseif f == '~last' or f == '~alerted' or f == '~period' then
      local s = redis.call('HGET', L(into), f)
      if not s or tonumber(v) > tonumber(s) then redis.call('HSET', L(into), f, v) end
    elseif f == '~limit' then
      redis.call('HSETNX', L(into), f, v)
    end
  end
  redis.call('DEL', L(from))
  redis.call('HSET', L(from), '~alias', into)
  redis.call('PEXPIRE', L(from), pms)
  redis.call('ZREM', KEYS[1], from)
  local last = redis.call('HGET', L(into), '~last')
  if last then
    redis.call('ZADD', KEYS[1], last, into)
    redis.call('PEXPIRE', L(into), math.max(redis.call('PTTL', L(into)), pms))
  end
end
local id
if link then
  local roots, seen = {}, {}
  for i = first, #ARGV do
    local g = redis.call('GET', base .. 'g/' .. ARGV[i])
    if g then
      local r = root(g)
      if not seen[r] and redis.call('EXISTS', L(r)) == 1 then
        seen[r] = true
        table.insert(roots, r)
      end
    end
  end
  if #roots == 0 then
    local m = ARGV[first]
    for i = first + 1, #ARGV do if ARGV[i] < m then m = ARGV[i] end end
    id = root('c:' .. m)
  else
    id = roots[1]
    local best = tonumber(redis.call('HGET', L(id), '~copies') or '0')
    for i = 2, #roots do
      local c = tonumber(redis.call('HGET', L(roots[i]), '~copies') or '0')
      if c > best or (c == best and roots[i] < id) then id = roots[i]; best = c end
    end
    for _, r in ipairs(roots) do
      if r ~= id then merge(r, id) end
    end
  end
  for i = first, #ARGV do redis.call('SET', base .. 'g/' .. ARGV[i], id, 'PX', pms) end
else
  id = ARGV[first]
end
local LK = L(id)
redis.call('HDEL', LK, '~alias')
local all = redis.call('HGETALL', LK)
local n, oldest, oldest_l = 0, nil, nil
for i = 1, #all, 2 do
  local f = all[i]
  if string.sub(f, 1, 1) == '=' then
    local e = dec(all[i + 1])
    if (not e) or now - e.l > period then
      redis.call('HDEL', LK, f)
    elseif f ~= sender then
      n = n + 1
      if not oldest_l or e.l < oldest_l or (e.l == oldest_l and f < oldest) then oldest, oldest_l = f, e.l end
    end
  end
end
local cur = redis.call('HGET', LK, sender)
local e = cur and dec(cur) or nil
if not e then
  e = {c = 0, r = 0, l = now, x = 0, rec = {}, info = ''}
  if n >= maxs and oldest then redis.call('HDEL', LK, oldest) end
end
e.c = e.c + 1
e.r = e.r + rcpts
e.l = now
e.info = ARGV[6]
table.insert(e.rec, {now, rcpts})
while #e.rec > keep do table.remove(e.rec, 1) end
redis.call('HSET', LK, sender, enc(e))
redis.call('HINCRBY', LK, '~copies', 1)
redis.call('HINCRBY', LK, '~recipients', rcpts)
local p = tonumber(redis.call('HGET', LK, '~period') or '0')
if period > p then redis.call('HSET', LK, '~period', string.format('%d', period)) end
if redis.call('PTTL', LK) < pms then redis.call('PEXPIRE', LK, pms) end
local out = {id}
all = redis.call('HGETALL', LK)
for i = 1, #all, 2 do
  local f = all[i]
  if string.sub(f, 1, 1) == '=' then
    local rel = redis.call('ZSCORE', base .. 'released', string.sub(f, 2))
    table.insert(out, f)
    table.insert(out, all[i + 1])
    table.insert(out, rel or '0')
  elseif f == '~copies' or f == '~recipients' or f == '~last' or f == '~limit' then
    table.insert(out, f)
    table.insert(out, all[i + 1])
    table.insert(out, '0')
  end
end
return out
"#;

/// KEYS: the index. ARGV: base, alias depth, id, limit, listed ms, alert interval µs,
/// then the senders it restricted. Answers 2 (found now), 1 (an update is due), 0.
const MARK_LUA: &str = r#"
local id = root(ARGV[3])
local LK = L(id)
if redis.call('EXISTS', LK) == 0 then return 0 end
local nowtxt = string.format('%d', now)
for i = 7, #ARGV do
  local f = '=' .. ARGV[i]
  local v = redis.call('HGET', LK, f)
  local e = v and dec(v) or nil
  if e then e.x = now; redis.call('HSET', LK, f, enc(e)) end
end
local answer = 0
if redis.call('HSETNX', LK, '~since', nowtxt) == 1 then
  redis.call('HSET', LK, '~limit', ARGV[4], '~alerted', nowtxt)
  answer = 2
else
  local a = tonumber(redis.call('HGET', LK, '~alerted') or '0')
  if now - a >= tonumber(ARGV[6]) then
    redis.call('HSET', LK, '~alerted', nowtxt)
    answer = 1
  end
end
redis.call('HSET', LK, '~last', nowtxt)
if redis.call('PTTL', LK) < tonumber(ARGV[5]) then redis.call('PEXPIRE', LK, ARGV[5]) end
redis.call('ZADD', KEYS[1], now, id)
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - tonumber(ARGV[5]) * 1000)
return answer
"#;

/// KEYS: the released set. ARGV: the account, kept µs.
const RELEASED_LUA: &str = r#"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
redis.call('ZADD', KEYS[1], now, ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - tonumber(ARGV[2]))
return 1
"#;

static JOIN: OnceLock<Script> = OnceLock::new();
static MARK: OnceLock<Script> = OnceLock::new();
static RELEASED: OnceLock<Script> = OnceLock::new();

/// Most campaigns listed.
const MAX_LISTED: isize = 1_000;

/// The campaign of a ledger's fields (field, value, release time…): its senders (most
/// recent first), totals and mark.
fn read_ledger(id: &str, fields: &[(String, String, i64)]) -> (CampaignLedger, Option<Mark>) {
    let mut l = CampaignLedger {
        id: id.to_string(),
        ..CampaignLedger::default()
    };
    let (mut limit, mut since, mut last) = (None, 0, 0);
    for (f, v, released) in fields {
        match f.as_str() {
            "~copies" => l.copies = v.parse().unwrap_or(0),
            "~recipients" => l.recipients = v.parse().unwrap_or(0),
            "~limit" => limit = Some(v.clone()),
            "~since" => since = v.parse().unwrap_or(0),
            "~last" => last = v.parse().unwrap_or(0),
            _ => {
                let Some(name) = f.strip_prefix('=') else {
                    continue;
                };
                if let Some(mut s) = CampaignSender::decode(name, v) {
                    s.released_us = *released;
                    l.senders.push(s);
                }
            }
        }
    }
    l.senders
        .sort_by(|a, b| b.last_us.cmp(&a.last_us).then(a.sender.cmp(&b.sender)));
    if limit.is_some() {
        l.found_us = last;
    }
    (l, limit.map(|limit| Mark { limit, since, last }))
}

/// A found campaign's mark as read.
#[derive(Debug, PartialEq)]
struct Mark {
    limit: String,
    since: i64,
    last: i64,
}

fn texts(v: redis::Value, what: &str) -> Result<Vec<String>, StoreError> {
    redis::from_redis_value(v)
        .map_err(|e| StoreError::Unavailable(format!("unexpected reply from the {what}: {e}")))
}

impl RedisStore {
    /// The base name of every campaign key (one hash slot).
    fn campaign_base(&self) -> String {
        self.namer.name('m', "{campaigns}")
    }

    /// Notes one message in its campaign (one script call; see the module doc).
    pub async fn campaign_join_values(
        &self,
        join: &CampaignJoin,
    ) -> Result<CampaignLedger, StoreError> {
        if join.values.is_empty() {
            return Err(StoreError::Invalid("a campaign note without values".into()));
        }
        let base = self.campaign_base();
        let index = format!("{base}index");
        let reply: redis::Value = self
            .timed(async {
                let mut conn = self.conn().await?;
                let script = JOIN.get_or_init(|| Script::new(&format!("{COMMON_LUA}{JOIN_LUA}")));
                let mut inv = script.prepare_invoke();
                inv.key(&index)
                    .arg(&base)
                    .arg(ALIAS_DEPTH)
                    .arg(if join.link { "1" } else { "0" })
                    .arg(&join.sender)
                    .arg(join.recipients)
                    .arg(&join.info)
                    .arg(join.period_us)
                    .arg(RECENT_COPIES)
                    .arg(MAX_SENDERS);
                for v in &join.values {
                    inv.arg(v);
                }
                inv.invoke_async(&mut conn)
                    .await
                    .map_err(|e| unavailable(&e))
            })
            .await?;
        let items = texts(reply, "campaign note")?;
        let Some((id, rest)) = items.split_first() else {
            return Err(StoreError::Unavailable(
                "empty reply from the campaign note".into(),
            ));
        };
        let fields: Vec<(String, String, i64)> = rest
            .chunks(3)
            .filter_map(|c| {
                let rel = c.get(2)?.parse::<f64>().unwrap_or(0.0) as i64;
                Some((c.first()?.clone(), c.get(1)?.clone(), rel))
            })
            .collect();
        Ok(read_ledger(id, &fields).0)
    }

    /// Marks campaign `id` as found (one script call); answers whether its alert is due.
    pub async fn campaign_mark_id(
        &self,
        id: &str,
        limit: &str,
        restricted: &[String],
        every_us: i64,
    ) -> Result<MarkAnswer, StoreError> {
        let base = self.campaign_base();
        let index = format!("{base}index");
        let n: i64 = self
            .timed(async {
                let mut conn = self.conn().await?;
                let script = MARK.get_or_init(|| Script::new(&format!("{COMMON_LUA}{MARK_LUA}")));
                let mut inv = script.prepare_invoke();
                inv.key(&index)
                    .arg(&base)
                    .arg(ALIAS_DEPTH)
                    .arg(id)
                    .arg(limit)
                    .arg(LISTED_US / 1000)
                    .arg(every_us);
                for s in restricted {
                    inv.arg(s);
                }
                inv.invoke_async(&mut conn)
                    .await
                    .map_err(|e| unavailable(&e))
            })
            .await?;
        Ok(match n {
            2 => MarkAnswer::Found,
            1 => MarkAnswer::Update,
            _ => MarkAnswer::Quiet,
        })
    }

    /// Remembers that an admin released `key` now (for the campaigns' evidence rule).
    pub async fn campaign_released(&self, key: &str) -> Result<(), StoreError> {
        let name = format!("{}released", self.campaign_base());
        let _: i64 = self
            .timed(async {
                let mut conn = self.conn().await?;
                let mut inv = RELEASED
                    .get_or_init(|| Script::new(RELEASED_LUA))
                    .prepare_invoke();
                inv.key(&name).arg(key).arg(RELEASES_KEPT_US);
                inv.invoke_async(&mut conn)
                    .await
                    .map_err(|e| unavailable(&e))
            })
            .await?;
        Ok(())
    }

    /// The found campaigns, most recently marked first (at most 1,000).
    pub async fn campaign_list(&self) -> Result<Vec<Campaign>, StoreError> {
        let base = self.campaign_base();
        let index = format!("{base}index");
        let ids: Vec<String> = self
            .timed(async {
                let mut conn = self.conn().await?;
                redis::cmd("ZREVRANGE")
                    .arg(&index)
                    .arg(0)
                    .arg(MAX_LISTED - 1)
                    .query_async(&mut conn)
                    .await
                    .map_err(|e| unavailable(&e))
            })
            .await?;
        let mut out = Vec::new();
        for id in ids {
            let name = format!("{base}l/{id}");
            let v: redis::Value = self
                .timed(async {
                    let mut conn = self.conn().await?;
                    redis::cmd("HGETALL")
                        .arg(&name)
                        .query_async(&mut conn)
                        .await
                        .map_err(|e| unavailable(&e))
                })
                .await?;
            let items = texts(v, "campaign ledger")?;
            let fields: Vec<(String, String, i64)> = items
                .chunks(2)
                .filter_map(|c| Some((c.first()?.clone(), c.get(1)?.clone(), 0)))
                .collect();
            let (l, mark) = read_ledger(&id, &fields);
            if let Some(m) = mark {
                out.push(Campaign {
                    key: id,
                    limit: m.limit,
                    since_us: m.since,
                    last_us: m.last,
                    copies: l.copies,
                    recipients: l.recipients,
                    senders: l.senders,
                });
            }
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ledgers_are_read_with_their_totals_and_marks() {
        let f = |a: &str, b: &str, r: i64| (a.to_string(), b.to_string(), r);
        let (l, mark) = read_ledger(
            "c:b1:a",
            &[
                f("=alice", "2|10|5|0|4:5,5:5|{}", 0),
                f("~limit", "campaign", 0),
                f("=bob", "1|5|9|7|9:5|x", 3),
                f("~since", "3", 0),
                f("~last", "9", 0),
                f("~copies", "4", 0),
                f("~recipients", "20", 0),
                f("=broken", "not a sender", 0),
                f("stray", "1|1|1|1||", 0),
            ],
        );
        assert_eq!(
            l.senders
                .iter()
                .map(|s| (s.sender.as_str(), s.copies, s.released_us))
                .collect::<Vec<_>>(),
            [("bob", 1, 3), ("alice", 2, 0)]
        );
        assert_eq!((l.copies, l.recipients, l.found_us), (4, 20, 9));
        assert_eq!(l.senders[0].restricted_us, 7);
        assert_eq!(
            mark,
            Some(Mark {
                limit: "campaign".into(),
                since: 3,
                last: 9
            })
        );
        assert_eq!(read_ledger("x", &[]).1, None);
    }
}
