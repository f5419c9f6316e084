//! The hold spool's operations for the admin API and the expiry task: list, show, release
//! and delete held messages, each a log event and a metric.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::hold::spool::now_secs;
use crate::hold::{HeldHead, OnExpiry, Spool, SpoolError};
use crate::proxy::release::{relay_held, ReleaseBy};
use crate::proxy::Shared;

/// Runs blocking spool work off the event loop.
pub async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, SpoolError> + Send + 'static,
) -> Result<T, SpoolError> {
    tokio::task::spawn_blocking(f).await.unwrap_or_else(|e| {
        Err(SpoolError::Io {
            path: "hold spool".into(),
            source: std::io::Error::other(e.to_string()),
        })
    })
}

/// Why a release or delete did not happen; the message stays held.
#[derive(Debug, thiserror::Error)]
pub enum HeldError {
    /// The spool refused (unknown id, busy, I/O).
    #[error(transparent)]
    Spool(#[from] SpoolError),
    /// Upstream did not take the message.
    #[error("{0}; the message stays held")]
    Release(#[from] crate::proxy::release::ReleaseError),
}

/// One held message as `held list` shows it: all of it from the file's envelope.
pub fn summary(h: &HeldHead) -> Value {
    let m = &h.envelope;
    json!({
        "id": m.id,
        "key": m.key,
        "limit": m.limit,
        "sender": m.sender(),
        "recipients": m.recipients(),
        "size": h.size,
        "subject": h.subject,
        "time": m.time,
        "client": m.client.ip().to_string(),
        "user": m.user,
        "paced": m.paced,
    })
}

/// One held message as `held show` shows it: envelope, client and header section.
pub fn detail(h: &HeldHead, header_section: &[u8]) -> Value {
    let mut v = summary(h);
    let m = &h.envelope;
    v["mail"] = json!(m.mail);
    v["rcpts"] = json!(m.rcpts);
    v["client_port"] = json!(m.client.port());
    v["helo"] = json!(m.helo);
    v["name"] = json!(m.name);
    v["reverse_name"] = json!(m.reverse_name);
    v["proto"] = json!(m.proto);
    v["tls"] = json!(m.tls);
    v["headers"] = json!(String::from_utf8_lossy(header_section));
    v
}

/// Releases one held message: claimed (so a concurrent release cannot take it), read whole
/// (the only message whose body is read), relayed, removed only after upstream accepted it
/// for every recipient, else given back.
pub async fn release_one(
    shared: &Arc<Shared>,
    spool: &Arc<Spool>,
    id: &str,
    by: &ReleaseBy,
) -> Result<(), HeldError> {
    let s = spool.clone();
    let owned = id.to_string();
    let m = blocking(move || {
        s.claim(&owned)?;
        match s.claimed(&owned) {
            Ok(m) => Ok(m),
            // Set aside: nothing to give back.
            Err(e @ SpoolError::Corrupt { .. }) => Err(e),
            Err(e) => {
                let _ = s.unclaim(&owned);
                Err(e)
            }
        }
    })
    .await?;
    let (key, limit) = (&m.envelope.key, &m.envelope.limit);
    match relay_held(&shared.upstream, &m, by).await {
        Ok(reply) => {
            let s = spool.clone();
            let owned = id.to_string();
            blocking(move || s.remove_claimed(&owned)).await?;
            shared.metrics.hold.released.inc();
            info!(id, key = %key, limit = %limit, by = %by.by, reason = %by.reason,
                upstream = reply.lines.last().map(String::as_str).unwrap_or(""),
                "held message released");
            Ok(())
        }
        Err(e) => {
            let s = spool.clone();
            let owned = id.to_string();
            blocking(move || s.unclaim(&owned)).await?;
            warn!(id, key = %key, error = %e, "held message not released: it stays held");
            Err(e.into())
        }
    }
}

/// Deletes one held message (its envelope is read for the log line, never its body).
pub async fn delete_one(
    shared: &Arc<Shared>,
    spool: &Arc<Spool>,
    id: &str,
    by: &ReleaseBy,
) -> Result<(), HeldError> {
    let s = spool.clone();
    let owned = id.to_string();
    let m = blocking(move || {
        let m = s.claim(&owned)?;
        s.remove_claimed(&owned)?;
        Ok(m)
    })
    .await?;
    shared.metrics.hold.deleted.inc();
    info!(id, key = %m.envelope.key, limit = %m.envelope.limit, by = %by.by,
        reason = %by.reason, "held message deleted");
    Ok(())
}

/// The messages `id` or `key` name, each with the key it was held for: the one id (404
/// when it is not held), or every message held for the key.
pub async fn select_keyed(
    spool: &Arc<Spool>,
    id: Option<&str>,
    key: Option<&str>,
) -> Result<Vec<(String, String)>, SpoolError> {
    match (id, key) {
        (Some(id), _) => {
            let (s, owned) = (spool.clone(), id.to_string());
            let h = blocking(move || s.head(&owned)).await?;
            Ok(vec![(id.to_string(), h.envelope.key)])
        }
        (None, Some(k)) => {
            let s = spool.clone();
            Ok(blocking(move || s.list())
                .await?
                .into_iter()
                .filter(|m| m.envelope.key == k)
                .map(|m| (m.envelope.id, m.envelope.key))
                .collect())
        }
        (None, None) => Ok(Vec::new()),
    }
}

/// Applies the spool's `on_expiry` to every message past its `ttl`, every `every` until
/// `stop` fires; the spool in force is read from `shared` at each round (reloads).
pub async fn expire_loop(
    shared: impl Fn() -> Arc<Shared> + Send + 'static,
    stop: CancellationToken,
) {
    loop {
        let sh = shared();
        let every = sh.hold.as_ref().map_or(Duration::from_secs(60), |s| {
            (s.settings().ttl / 4).clamp(Duration::from_millis(500), Duration::from_secs(60))
        });
        if let Some(spool) = sh.hold.clone() {
            expire_once(&sh, &spool).await;
            crate::proxy::refresh_hold_gauges(&spool, &sh.metrics);
        }
        tokio::select! {
            _ = tokio::time::sleep(every) => {}
            _ = stop.cancelled() => return,
        }
    }
}

/// One round of expiry.
pub async fn expire_once(shared: &Arc<Shared>, spool: &Arc<Spool>) {
    let s = spool.clone();
    // Paced messages are released by the pacer, not expired.
    let expired = match blocking(move || s.expired(now_secs())).await.map(|v| {
        v.into_iter()
            .filter(|m| m.envelope.paced.is_none())
            .collect::<Vec<_>>()
    }) {
        Ok(e) => e,
        Err(e) => {
            warn!(error = %e, "hold spool: cannot look for expired messages");
            return;
        }
    };
    let by = ReleaseBy {
        by: "expiry".into(),
        reason: "ttl passed".into(),
        at: now_secs() as i64,
    };
    for m in expired {
        let m = &m.envelope;
        let done = match spool.settings().on_expiry {
            OnExpiry::Delete => delete_one(shared, spool, &m.id, &by).await,
            OnExpiry::Release => release_one(shared, spool, &m.id, &by).await,
        };
        match done {
            Ok(()) => {
                shared.metrics.hold.expired.inc();
                info!(id = %m.id, key = %m.key, action = spool.settings().on_expiry.as_str(),
                    "held message expired");
            }
            // Set aside (logged and counted) or taken by another request meanwhile.
            Err(HeldError::Spool(
                SpoolError::Busy(_) | SpoolError::NotFound(_) | SpoolError::Corrupt { .. },
            )) => {}
            Err(e) => warn!(id = %m.id, error = %e, "held message expired but stays held"),
        }
    }
}
