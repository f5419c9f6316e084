//! Campaign ledgers in Redis (see [`crate::store::campaign`]): one hash per message key
//! value (`<prefix>{tag}:m:KEY`), a field per sender holding
//! `{"copies","recipients","last_us","info"}` as JSON, and the fields `~limit`, `~since`
//! and `~last` once the ledger is marked as a campaign. A sorted set
//! (`<prefix>{tag}:M:campaigns`, scored by the last mark) lists the marked ledgers. The time
//! is the server's (`TIME`), so every node agrees; senders not heard of within the period are
//! deleted by the next write, and the hash expires one period after its last write (or
//! [`LISTED_US`] after its last mark).

use std::sync::OnceLock;

use redis::Script;

use super::{unavailable, RedisStore};
use crate::store::campaign::LISTED_US;
use crate::store::{Campaign, CampaignNote, CampaignSender, StoreError};

/// KEYS: the ledger. ARGV: sender, recipients, info JSON, period µs. Answers the ledger's
/// fields (HGETALL) after the note.
const NOTE_LUA: &str = r#"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local period = tonumber(ARGV[4])
local cur = redis.call('HGET', KEYS[1], ARGV[1])
local e = {copies = 0, recipients = 0}
if cur then e = cjson.decode(cur) end
e.copies = e.copies + 1
e.recipients = e.recipients + tonumber(ARGV[2])
e.last_us = now
e.info = ARGV[3]
redis.call('HSET', KEYS[1], ARGV[1], cjson.encode(e))
local all = redis.call('HGETALL', KEYS[1])
local out = {}
for i = 1, #all, 2 do
  local f = all[i]
  if string.sub(f, 1, 1) ~= '~' then
    local s = cjson.decode(all[i + 1])
    if now - tonumber(s.last_us) > period then
      redis.call('HDEL', KEYS[1], f)
    else
      table.insert(out, f)
      table.insert(out, all[i + 1])
    end
  else
    table.insert(out, f)
    table.insert(out, all[i + 1])
  end
end
local ttl = redis.call('PTTL', KEYS[1])
local want = math.floor(period / 1000) + 1000
if ttl < want then redis.call('PEXPIRE', KEYS[1], want) end
return out
"#;

/// KEYS: the ledger, the index. ARGV: the ledger's key text, the limit, listed ms.
const MARK_LUA: &str = r#"
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
redis.call('HSETNX', KEYS[1], '~since', now)
redis.call('HSET', KEYS[1], '~limit', ARGV[2], '~last', now)
redis.call('PEXPIRE', KEYS[1], ARGV[3])
redis.call('ZADD', KEYS[2], now, ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now - tonumber(ARGV[3]) * 1000)
return 1
"#;

static NOTE: OnceLock<Script> = OnceLock::new();
static MARK: OnceLock<Script> = OnceLock::new();

/// Most campaigns listed.
const MAX_LISTED: isize = 1_000;

/// The senders and marks of a ledger's HGETALL (field, value, field, value…).
fn read_ledger(fields: &[(String, String)]) -> (Vec<CampaignSender>, Option<(String, i64, i64)>) {
    let mut senders = Vec::new();
    let (mut limit, mut since, mut last) = (None, 0, 0);
    for (f, v) in fields {
        match f.as_str() {
            "~limit" => limit = Some(v.clone()),
            "~since" => since = v.parse().unwrap_or(0),
            "~last" => last = v.parse().unwrap_or(0),
            _ => {
                let Ok(mut s) = serde_json::from_str::<serde_json::Value>(v) else {
                    continue;
                };
                let n = |k: &str| s[k].as_f64().unwrap_or(0.0);
                senders.push(CampaignSender {
                    sender: f.clone(),
                    copies: n("copies") as u64,
                    recipients: n("recipients") as u64,
                    last_us: n("last_us") as i64,
                    info: s["info"].take().as_str().unwrap_or("").to_string(),
                });
            }
        }
    }
    senders.sort_by(|a, b| b.last_us.cmp(&a.last_us).then(a.sender.cmp(&b.sender)));
    (senders, limit.map(|l| (l, since, last)))
}

fn pairs(v: redis::Value) -> Result<Vec<(String, String)>, StoreError> {
    let items: Vec<String> = redis::from_redis_value(v).map_err(|e| {
        StoreError::Unavailable(format!("unexpected reply from the campaign ledger: {e}"))
    })?;
    Ok(items
        .chunks(2)
        .filter_map(|c| Some((c.first()?.clone(), c.get(1)?.clone())))
        .collect())
}

impl RedisStore {
    fn index_name(&self) -> String {
        self.namer.name('M', "campaigns")
    }

    /// Adds one message to its ledger (one script call).
    pub async fn campaign_note_key(
        &self,
        note: &CampaignNote,
    ) -> Result<Vec<CampaignSender>, StoreError> {
        let name = self.namer.name('m', &note.key);
        let reply: redis::Value = self
            .timed(async {
                let mut conn = self.conn().await?;
                let mut inv = NOTE.get_or_init(|| Script::new(NOTE_LUA)).prepare_invoke();
                inv.key(&name)
                    .arg(&note.sender)
                    .arg(note.recipients)
                    .arg(&note.info)
                    .arg(note.period_us);
                inv.invoke_async(&mut conn)
                    .await
                    .map_err(|e| unavailable(&e))
            })
            .await?;
        Ok(read_ledger(&pairs(reply)?).0)
    }

    /// Marks a ledger as a campaign of `limit`.
    pub async fn campaign_mark_key(&self, key: &str, limit: &str) -> Result<(), StoreError> {
        let name = self.namer.name('m', key);
        let index = self.index_name();
        let _: redis::Value = self
            .timed(async {
                let mut conn = self.conn().await?;
                let mut inv = MARK.get_or_init(|| Script::new(MARK_LUA)).prepare_invoke();
                inv.key(&name)
                    .key(&index)
                    .arg(key)
                    .arg(limit)
                    .arg(LISTED_US / 1000);
                inv.invoke_async(&mut conn)
                    .await
                    .map_err(|e| unavailable(&e))
            })
            .await?;
        Ok(())
    }

    /// The marked ledgers, most recently marked first (at most 1,000).
    pub async fn campaign_list(&self) -> Result<Vec<Campaign>, StoreError> {
        let index = self.index_name();
        let keys: Vec<String> = self
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
        for key in keys {
            let name = self.namer.name('m', &key);
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
            let (senders, mark) = read_ledger(&pairs(v)?);
            if let Some((limit, since_us, last_us)) = mark {
                out.push(Campaign {
                    key,
                    limit,
                    since_us,
                    last_us,
                    senders,
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
    fn ledgers_are_read_with_their_marks() {
        let f = |a: &str, b: &str| (a.to_string(), b.to_string());
        let (s, mark) = read_ledger(&[
            f(
                "alice",
                r#"{"copies":2,"recipients":10,"last_us":5,"info":"{}"}"#,
            ),
            f("~limit", "campaign"),
            f(
                "bob",
                r#"{"copies":1,"recipients":5,"last_us":9,"info":"x"}"#,
            ),
            f("~since", "3"),
            f("~last", "9"),
            f("broken", "not json"),
        ]);
        assert_eq!(
            s.iter()
                .map(|s| (s.sender.as_str(), s.copies))
                .collect::<Vec<_>>(),
            [("bob", 1), ("alice", 2)]
        );
        assert_eq!(s[1].recipients, 10);
        assert_eq!(mark, Some(("campaign".to_string(), 3, 9)));
        assert_eq!(read_ledger(&[]).1, None);
    }
}
