//! Each node's count of held messages per key: one hash per key
//! (`<prefix>{tag}:r:held/KEY`), a field per node (its name) holding `COUNT UNTIL_US`, the
//! count and until when it is believed (the publishing node's clock, microseconds since the
//! epoch). The hash expires when no node has written it for the time a count is believed.

use std::time::Duration;

use super::{unavailable, RedisStore};
use crate::store::StoreError;

impl RedisStore {
    fn held_name(&self, key: &str) -> String {
        self.namer.name('r', &format!("held/{key}"))
    }

    /// Publishes node `node`'s `counts`, believed for `ttl`, and withdraws its counts of
    /// the keys in `gone`.
    pub async fn publish_held_counts(
        &self,
        node: &str,
        counts: &[(String, u64)],
        gone: &[String],
        ttl: Duration,
    ) -> Result<(), StoreError> {
        if counts.is_empty() && gone.is_empty() {
            return Ok(());
        }
        let until = crate::store::now_micros().saturating_add(ttl.as_micros() as i64);
        let secs = ttl.as_secs().max(1) as i64;
        let mut pipe = redis::pipe();
        for (key, n) in counts {
            let name = self.held_name(key);
            pipe.hset(&name, node, format!("{n} {until}"))
                .ignore()
                .expire(&name, secs)
                .ignore();
        }
        for key in gone {
            pipe.hdel(self.held_name(key), node).ignore();
        }
        self.timed(async {
            let mut conn = self.conn().await?;
            pipe.query_async::<()>(&mut conn)
                .await
                .map_err(|e| unavailable(&e))
        })
        .await
    }

    /// Each node's count for `key` that is still believed.
    pub async fn held_counts_of(&self, key: &str) -> Result<Vec<(String, u64)>, StoreError> {
        let name = self.held_name(key);
        let all: Vec<(String, String)> = self
            .timed(async {
                let mut conn = self.conn().await?;
                redis::cmd("HGETALL")
                    .arg(&name)
                    .query_async(&mut conn)
                    .await
                    .map_err(|e| unavailable(&e))
            })
            .await?;
        Ok(believed(all, crate::store::now_micros()))
    }
}

/// The counts of `fields` (node, `COUNT UNTIL_US`) still believed at `now_us`; a field
/// that does not read so is skipped.
fn believed(fields: Vec<(String, String)>, now_us: i64) -> Vec<(String, u64)> {
    let mut out: Vec<(String, u64)> = fields
        .into_iter()
        .filter_map(|(node, v)| {
            let (n, until) = v.split_once(' ')?;
            let n: u64 = n.parse().ok()?;
            let until: i64 = until.parse().ok()?;
            (until >= now_us).then_some((node, n))
        })
        .collect();
    out.sort();
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_counts_still_believed_are_read() {
        let f = |n: &str, v: &str| (n.to_string(), v.to_string());
        let fields = vec![
            f("mx2", "3 2000"),
            f("mx1", "2 1000"),
            f("old", "9 999"),
            f("junk", "x 5000"),
            f("half", "4"),
        ];
        assert_eq!(
            believed(fields, 1000),
            [("mx1".to_string(), 2), ("mx2".to_string(), 3)]
        );
    }
}
