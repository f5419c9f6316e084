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
use super::held::HeldReader;
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
    held: &HeldReader,
    hostname: &str,
) -> Result<usize, StoreError> {
    let gone = store.expire_restrictions().await?;
    for mut r in gone.iter().cloned() {
        metrics.restriction("expired");
        info!(key = %r.key, limit = %r.limit, by = EXPIRY_BY, reason = EXPIRY_REASON,
            since = %crate::time::rfc3339(r.since_us),
            until = %r.until_us.map(crate::time::rfc3339).unwrap_or_default(),
            "key released");
        // The restriction's evidence, with what is held for the key now.
        held.now(&r.key, hostname).await.set_in(&mut r.evidence);
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

    /// A spool in `dir` holding one message of alice's.
    fn held_spool(dir: &std::path::Path) -> crate::hold::Spool {
        let settings = crate::hold::HoldSettings {
            dir: dir.to_path_buf(),
            max_bytes: 1 << 20,
            max_messages: 10,
            ttl: Duration::from_secs(60),
            on_expiry: crate::hold::OnExpiry::Delete,
        };
        let spool = crate::hold::Spool::open(settings, Default::default()).unwrap();
        let envelope = crate::hold::HeldEnvelope {
            id: crate::hold::spool::new_id(),
            key: "alice".into(),
            limit: "per-user".into(),
            paced: None,
            time: 0,
            client: "192.0.2.1:1000".parse().unwrap(),
            local: None,
            name: None,
            reverse_name: None,
            user: Some("alice".into()),
            helo: None,
            proto: "ESMTP".into(),
            tls: None,
            mail: "<a@b>".into(),
            rcpts: vec!["<c@d>".into()],
        };
        let m = crate::hold::HeldMessage::new(envelope, b"Subject: x\r\n\r\nbody\r\n".to_vec());
        spool.store(&m).unwrap();
        spool
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
        // One message held for alice in this node's spool.
        let dir = tempfile::tempdir().unwrap();
        let spool = Arc::new(held_spool(dir.path()));
        let held = HeldReader::new(
            Arc::new(MemoryStore::default()),
            Some(Arc::new(move || Some(spool.clone()))),
        );
        let n = sweep(&store, Some(&obs), &metrics, &held, "mx")
            .await
            .unwrap();
        assert_eq!(n, 1);
        // A second sweep finds nothing more: one notice per release.
        assert_eq!(
            sweep(&store, Some(&obs), &metrics, &held, "mx")
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
        assert_eq!(n["evidence"]["held_by_node"], serde_json::json!({"mx": 1}));
        assert_eq!(metrics.restrictions_of("expired"), 1);
        assert_eq!(store.restricted_set().list(now).len(), 1);
    }
}
