//! Ratio windows in Redis: one hash per key (`<prefix>{tag}:q:KEY`), fields `n<slot>` and
//! `d<slot>` holding whole counts (see [`crate::store::ratio`]). The slot comes from the
//! server's clock (`TIME`) so every node agrees; slots out of the window are deleted by the
//! next call that finds them, and the hash expires one window after its last write.

use std::sync::OnceLock;

use redis::Script;

use super::{unavailable, RedisStore};
use crate::store::ratio::SLOTS;
use crate::store::{RatioCounts, RatioWindow, StoreError};

/// ARGV: slot length µs, slots kept besides the current one, numerator to add,
/// denominator to add, expiry ms. Answers `{num, den}` over the window.
const RATIO_LUA: &str = r#"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local s = math.floor(now / tonumber(ARGV[1]))
local keep = tonumber(ARGV[2])
local an = tonumber(ARGV[3])
local ad = tonumber(ARGV[4])
if an > 0 then redis.call('HINCRBY', KEYS[1], 'n' .. s, an) end
if ad > 0 then redis.call('HINCRBY', KEYS[1], 'd' .. s, ad) end
if an > 0 or ad > 0 then redis.call('PEXPIRE', KEYS[1], ARGV[5]) end
local all = redis.call('HGETALL', KEYS[1])
local num, den = 0, 0
for i = 1, #all, 2 do
  local f = all[i]
  local slot = tonumber(string.sub(f, 2))
  if slot == nil or slot < s - keep or slot > s then
    redis.call('HDEL', KEYS[1], f)
  elseif string.sub(f, 1, 1) == 'n' then
    num = num + tonumber(all[i + 1])
  else
    den = den + tonumber(all[i + 1])
  end
end
return {num, den}
"#;

static RATIO: OnceLock<Script> = OnceLock::new();

impl RedisStore {
    /// Adds `add` to `key`'s ratio window and answers the counts over it (one script call).
    pub async fn ratio_key(
        &self,
        key: &str,
        window: RatioWindow,
        add: RatioCounts,
    ) -> Result<RatioCounts, StoreError> {
        let name = self.namer.name('q', key);
        let expire_ms = (window.period_us + window.slot_us()) / 1000 + 1000;
        let reply: redis::Value = self
            .timed(async {
                let mut conn = self.conn().await?;
                let mut inv = RATIO
                    .get_or_init(|| Script::new(RATIO_LUA))
                    .prepare_invoke();
                inv.key(&name)
                    .arg(window.slot_us())
                    .arg(SLOTS)
                    .arg(add.num)
                    .arg(add.den)
                    .arg(expire_ms);
                inv.invoke_async(&mut conn)
                    .await
                    .map_err(|e| unavailable(&e))
            })
            .await?;
        let int = |v: Option<&redis::Value>| match v {
            Some(redis::Value::Int(n)) => u64::try_from(*n).ok(),
            _ => None,
        };
        match &reply {
            redis::Value::Array(items) => match (int(items.first()), int(items.get(1))) {
                (Some(num), Some(den)) => Ok(RatioCounts { num, den }),
                _ => Err(StoreError::Unavailable(format!(
                    "unexpected reply from the ratio script: {reply:?}"
                ))),
            },
            _ => Err(StoreError::Unavailable(format!(
                "unexpected reply from the ratio script: {reply:?}"
            ))),
        }
    }
}
