//! Ending restrictions by time. Every node sweeps the store's restricted set every
//! [`SWEEP_EVERY`]; each restriction whose `until` has passed is answered to one sweeper only
//! (the memory store's own, or whichever node of a Redis fleet sweeps it first), which logs
//! it (`key released`, `by = "expiry"`), counts it
//! (`floodgate_restrictions_total{event="expired"}`) and sends the `floodgate.released`
//! alert with `"by": "expiry"` and `"reason": "expired"` on the alert channels. A restriction
//! stops refusing at its `until` whether or not it was swept yet.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use super::alert::{restriction_notice, Observer};
use super::evidence::Evidence;
use crate::metrics::Metrics;
use crate::store::{Store, StoreError};

/// How often each node sweeps.
pub const SWEEP_EVERY: Duration = Duration::from_secs(1);

/// Who ends a restriction by time, as notices and logs say.
pub const EXPIRY_BY: &str = "expiry";
/// Why, as notices say.
pub const EXPIRY_REASON: &str = "expired";

/// One sweep: ends every restriction over by now and tells of each. Returns how many ended.
pub async fn sweep(
    store: &dyn Store,
    observer: Option<&Arc<dyn Observer>>,
    metrics: &Metrics,
    evidence: &Evidence,
    hostname: &str,
) -> Result<usize, StoreError> {
    let gone = store.expire_restrictions().await?;
    for mut r in gone.iter().cloned() {
        metrics.restriction("expired");
        info!(key = %r.key, limit = %r.limit, by = EXPIRY_BY, reason = EXPIRY_REASON,
            since = %crate::time::rfc3339(r.since_us),
            until = %r.until_us.map(crate::time::rfc3339).unwrap_or_default(),
            "key released");
        // The restriction's evidence, with the messages held since.
        evidence.update_held(&mut r.evidence, &[r.key.as_str()]);
        if let Some(o) = observer {
            o.restriction(&restriction_notice(
                "floodgate.released",
                &r,
                EXPIRY_BY,
                EXPIRY_REASON,
                hostname,
            ));
        }
    }
    Ok(gone.len())
}

/// What [`run`] sweeps: a policy whose store ends restrictions by time (the
/// [`RatePolicy`](super::RatePolicy) does, through [`sweep`]).
pub trait Sweeper: Send + Sync + 'static {
    /// One sweep; how many restrictions ended.
    fn sweep(&self) -> impl Future<Output = Result<usize, StoreError>> + Send;
}

/// Sweeps `policy`'s store every `every` until `stop` fires; a failed sweep is tried again
/// at the next round (logged when sweeping starts failing and when it works again, not at
/// every round of an outage).
pub async fn run<P: Sweeper>(policy: P, every: Duration, stop: CancellationToken) {
    let mut failing = false;
    loop {
        tokio::select! {
            _ = tokio::time::sleep(every) => {}
            _ = stop.cancelled() => return,
        }
        match policy.sweep().await {
            Ok(_) if failing => {
                failing = false;
                info!("the restricted set can be swept again");
            }
            Ok(_) => {}
            Err(e) if !failing => {
                failing = true;
                warn!(error = %e, "cannot sweep the restricted set for expired restrictions");
            }
            Err(_) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{MemoryStore, Restriction};
    use std::sync::Mutex;

    #[derive(Default)]
    struct Seen(Mutex<Vec<serde_json::Value>>);

    impl Observer for Seen {
        fn evaluated(&self, _: &super::super::alert::Evaluated<'_>) {}
        fn crossed(&self, _: &super::super::alert::Crossed<'_>) {}
        fn restriction(&self, notice: &serde_json::Value) {
            self.0.lock().unwrap().push(notice.clone());
        }
    }

    fn r(key: &str) -> Restriction {
        Restriction {
            key: key.into(),
            limit: "per-user".into(),
            since_us: 0,
            until_us: None,
            rate: Some(6.0),
            limit_text: "5 / 1h".into(),
            by: "limit per-user on mx".into(),
            reason: "rate".into(),
            evidence: serde_json::json!({"held": 0}),
        }
    }

    #[tokio::test]
    async fn each_expired_restriction_is_told_once() {
        let store = MemoryStore::default();
        let now = crate::store::now_micros();
        store.restricted_set().insert(r("alice"), Some(1), now - 10);
        store.restricted_set().insert(r("bob"), None, now - 10);
        let seen = Arc::new(Seen::default());
        let obs: Arc<dyn Observer> = seen.clone();
        let metrics = Metrics::new();
        let evidence = Evidence::default();
        evidence.note("alice", super::super::evidence::Fact::Held, now);
        let n = sweep(&store, Some(&obs), &metrics, &evidence, "mx")
            .await
            .unwrap();
        assert_eq!(n, 1);
        // A second sweep finds nothing more: one notice per release.
        assert_eq!(
            sweep(&store, Some(&obs), &metrics, &evidence, "mx")
                .await
                .unwrap(),
            0
        );
        let notices = seen.0.lock().unwrap().clone();
        assert_eq!(notices.len(), 1);
        let n = &notices[0];
        assert_eq!(n["event"], "floodgate.released");
        assert_eq!(n["key"], "alice");
        assert_eq!(n["by"], "expiry");
        assert_eq!(n["reason"], "expired");
        assert_eq!(n["evidence"]["held"], 1, "{n}");
        assert_eq!(metrics.restrictions_of("expired"), 1);
        assert_eq!(store.restricted_set().list(now).len(), 1);
    }
}
