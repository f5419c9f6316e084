//! Per-key baselines in Redis: one hash per limit (`<prefix>{tag}:r:baseline/LIMIT`) with
//! the fields `@signature` and `@computed_us`, and `k:KEY` = the key's peak percentile.
//! Replaced whole (`DEL` and `HSET` in one `MULTI`), read whole (`HGETALL`).

use std::collections::HashMap;

use super::{unavailable, RedisStore};
use crate::store::{BaselineSet, StoreError};

impl RedisStore {
    fn baseline_name(&self, limit: &str) -> String {
        self.namer.name('r', &format!("baseline/{limit}"))
    }

    /// Replaces limit `limit`'s baselines.
    pub async fn save_baseline_set(
        &self,
        limit: &str,
        set: &BaselineSet,
    ) -> Result<(), StoreError> {
        let name = self.baseline_name(limit);
        let mut fields: Vec<(String, String)> = Vec::with_capacity(set.peaks.len() + 2);
        fields.push(("@signature".into(), set.signature.clone()));
        fields.push(("@computed_us".into(), set.computed_us.to_string()));
        for (k, v) in &set.peaks {
            fields.push((format!("k:{k}"), v.to_string()));
        }
        self.timed(async {
            let mut conn = self.conn().await?;
            redis::pipe()
                .atomic()
                .del(&name)
                .ignore()
                .hset_multiple(&name, &fields)
                .ignore()
                .query_async::<()>(&mut conn)
                .await
                .map_err(|e| unavailable(&e))
        })
        .await
    }

    /// Limit `limit`'s baselines as last saved; `None` when there are none (or they do not
    /// have the layout above).
    pub async fn load_baseline_set(&self, limit: &str) -> Result<Option<BaselineSet>, StoreError> {
        let name = self.baseline_name(limit);
        let all: HashMap<String, String> = self
            .timed(async {
                let mut conn = self.conn().await?;
                redis::cmd("HGETALL")
                    .arg(&name)
                    .query_async(&mut conn)
                    .await
                    .map_err(|e| unavailable(&e))
            })
            .await?;
        Ok(parse_fields(all))
    }
}

/// The set in a hash's fields; `None` without a signature and a time.
fn parse_fields(all: HashMap<String, String>) -> Option<BaselineSet> {
    let signature = all.get("@signature")?.clone();
    let computed_us = all.get("@computed_us")?.parse().ok()?;
    let peaks = all
        .iter()
        .filter_map(|(f, v)| {
            let k = f.strip_prefix("k:")?;
            let p: f64 = v.parse().ok()?;
            (p.is_finite() && p >= 0.0).then(|| (k.to_string(), p))
        })
        .collect();
    Some(BaselineSet {
        signature,
        computed_us,
        peaks,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_round_trip_and_junk_is_skipped() {
        let mut all = HashMap::new();
        assert_eq!(parse_fields(all.clone()), None);
        all.insert("@signature".to_string(), "p95/14d/86400".to_string());
        all.insert("@computed_us".to_string(), "1700000000000000".to_string());
        all.insert("k:alice".to_string(), "10".to_string());
        all.insert("k:bob".to_string(), "-1".to_string());
        all.insert("k:carol".to_string(), "x".to_string());
        all.insert("other".to_string(), "5".to_string());
        let s = parse_fields(all).unwrap();
        assert_eq!(s.signature, "p95/14d/86400");
        assert_eq!(s.computed_us, 1_700_000_000_000_000);
        assert_eq!(s.peaks, HashMap::from([("alice".to_string(), 10.0)]));
    }
}
