//! Listing the records under the store's key prefix (for `floodgate top`): `SCAN` with a
//! `MATCH` on the prefix, bounded, then one `MGET` per batch. Read-only.

use super::{bytes_of, encode, unavailable, RedisStore};
use crate::limit::unique::UniqueSet;
use crate::store::{Record, StoreError, UniqueRecord};
use redis::Value;

/// Keys asked per `SCAN` step.
const BATCH: usize = 1000;

impl RedisStore {
    /// The limit key and record kind of a Redis key name, if it is one of this store's
    /// record keys (sets and foreign keys give `None`).
    fn parse_name(&self, name: &str) -> Option<(char, String)> {
        let rest = name.strip_prefix(self.options.key_prefix.as_str())?;
        let rest = rest.strip_prefix('{')?;
        // The tag may itself contain "}:"; try each place and keep the one the namer
        // would have produced.
        for (i, _) in rest.match_indices("}:") {
            let after = &rest[i + 2..];
            let mut chars = after.chars();
            let (Some(kind), Some(':')) = (chars.next(), chars.next()) else {
                continue;
            };
            if !matches!(kind, 'e' | 'u' | 'g' | 'b') {
                continue;
            }
            let key = &after[2..];
            if self.namer.name(kind, key) == name {
                return Some((kind, key.to_string()));
            }
        }
        None
    }

    /// Every record under the key prefix, reading at most `max` keys; the flag is false
    /// when the scan stopped at `max` before the end. Unique sets are not read (a record's
    /// rate does not need them): unique records come back with an empty set.
    pub async fn scan_records(
        &self,
        max: usize,
    ) -> Result<(Vec<(String, Record)>, bool), StoreError> {
        let mut conn = self.conn().await?;
        let pattern = format!("{}{{*", escape_glob(&self.options.key_prefix));
        let mut cursor: u64 = 0;
        let mut seen = 0usize;
        let mut out = Vec::new();
        loop {
            let (next, names): (u64, Vec<String>) = redis::cmd("SCAN")
                .arg(cursor)
                .arg("MATCH")
                .arg(&pattern)
                .arg("COUNT")
                .arg(BATCH)
                .query_async(&mut conn)
                .await
                .map_err(|e| unavailable(&e))?;
            let parsed: Vec<(String, char, String)> = names
                .into_iter()
                .filter_map(|n| self.parse_name(&n).map(|(k, key)| (n, k, key)))
                .collect();
            seen += parsed.len();
            if !parsed.is_empty() {
                let mut mget = redis::cmd("MGET");
                for (n, _, _) in &parsed {
                    mget.arg(n);
                }
                let values: Vec<Value> = mget
                    .query_async(&mut conn)
                    .await
                    .map_err(|e| unavailable(&e))?;
                for ((_, kind, key), v) in parsed.into_iter().zip(values) {
                    if let Some(rec) = decode_record(kind, bytes_of(&v)) {
                        out.push((key, rec));
                    }
                }
            }
            cursor = next;
            if cursor == 0 {
                return Ok((out, true));
            }
            if seen >= max {
                return Ok((out, false));
            }
        }
    }
}

/// A record from its stored bytes (`None` for an empty or foreign value).
fn decode_record(kind: char, b: &[u8]) -> Option<Record> {
    if b.is_empty() {
        return None;
    }
    Some(match kind {
        'e' => Record::Ewma(encode::decode_ewma(b)?),
        'u' => {
            let (state, created_s, _, _) = encode::decode_unique(b)?;
            Record::Unique(UniqueRecord {
                state,
                created_s,
                set: UniqueSet::Exact(Default::default()),
            })
        }
        'g' => Record::Gcra {
            tat_ns: encode::decode_gcra(b)?,
        },
        'b' => Record::Bucket(encode::decode_bucket(b)?),
        _ => return None,
    })
}

/// Escapes the glob characters of `SCAN … MATCH`.
fn escape_glob(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '\\') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::redis::{HashTag, RedisOptions};

    #[tokio::test]
    async fn names_parse_back() {
        for tag in [HashTag::Global, HashTag::Identity] {
            let s = RedisStore::new(RedisOptions {
                hash_tag: tag,
                ..Default::default()
            })
            .unwrap();
            for key in ["1h/per_rcpt/alice", "gcra/x/a}:e:b", "bucket/b/{t}x", "k"] {
                for kind in ['e', 'u', 'g', 'b'] {
                    let name = s.namer.name(kind, key);
                    assert_eq!(s.parse_name(&name), Some((kind, key.to_string())), "{name}");
                }
                assert_eq!(s.parse_name(&s.namer.name('s', key)), None);
            }
            assert_eq!(s.parse_name("other:{g}:e:x"), None);
        }
        assert_eq!(escape_glob("a*b?[c]\\"), "a\\*b\\?\\[c\\]\\\\");
    }
}
