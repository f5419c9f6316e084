//! The facts of the daily alert digest, read as the admin endpoints read them: the
//! restrictions in the store, the held messages in the spool counted per key, and the keys
//! nearest their limits (as `top` ranks them); and `POST /v1/alerts/digest`, which sends the
//! digest now.

use std::collections::BTreeMap;

use serde_json::json;

use super::api::{AdminState, MAX_SCAN};
use super::http::Response;
use super::inspect::TopBuilder;
use crate::policy::alert::restriction_json;
use crate::proxy::Shared;
use crate::report::digest::{
    DigestError, DigestFacts, DigestSource, FactsFuture, TopLine, TOP_KEYS,
};
use crate::server::InForce;
use crate::store::now_micros;
use crate::store::open::Opened;

/// The digest's facts, read as the admin endpoints read them: from the store and from what
/// sessions share in force (its hold spool and limits). Made before the server, which fills
/// `in_force` when it binds.
pub struct AdminDigest {
    store: Opened,
    in_force: InForce,
}

impl AdminDigest {
    /// The digest of `store` and of what `in_force` holds once the server is bound.
    pub fn new(store: Opened, in_force: InForce) -> AdminDigest {
        AdminDigest { store, in_force }
    }
}

impl DigestSource for AdminDigest {
    fn facts(&self) -> FactsFuture<'_> {
        Box::pin(async move {
            let shared = self
                .in_force
                .get()
                .ok_or_else(|| DigestError("not serving yet".into()))?;
            digest_facts(&self.store, &shared).await
        })
    }
}

/// The facts of the digest now.
async fn digest_facts(opened: &Opened, shared: &Shared) -> Result<DigestFacts, DigestError> {
    let store = opened.as_store();
    let restricted = store
        .restrictions()
        .await
        .map_err(|e| DigestError(format!("restrictions: {e}")))?
        .iter()
        .map(restriction_json)
        .collect();
    let mut held = Vec::new();
    if let Some(spool) = shared.hold.clone() {
        let all = crate::proxy::release::blocking(move || spool.list())
            .await
            .map_err(|e| DigestError(format!("held messages: {e}")))?;
        let mut per_key: BTreeMap<String, u64> = BTreeMap::new();
        for m in &all {
            *per_key.entry(m.envelope.key.clone()).or_default() += 1;
        }
        held = per_key.into_iter().collect();
        held.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    }
    let config = &shared.generation;
    let mut top = TopBuilder::new(&config.policy, now_micros(), None, TOP_KEYS);
    match opened {
        Opened::Memory(m) => m.for_each_record(|k, r| top.add(k, r)),
        Opened::Redis(f) => {
            let (records, _) = f
                .redis()
                .scan_records(MAX_SCAN)
                .await
                .map_err(|e| DigestError(format!("top keys: {e}")))?;
            for (k, r) in records {
                top.add(&k, r);
            }
        }
    }
    let top = top
        .finish()
        .into_iter()
        .filter(|e| e.reading.stored && e.reading.value > 0.0)
        .map(|e| TopLine {
            key: e.key,
            limit: e.reading.limit,
            value: e.reading.value,
            limit_value: e.reading.limit_value,
            period: e.reading.period,
        })
        .collect();
    Ok(DigestFacts {
        restricted,
        held,
        top,
    })
}

impl AdminState {
    /// `POST /v1/alerts/digest`: makes and sends the daily digest now.
    pub(super) async fn digest_now(&self) -> Response {
        let Some(o) = self.control.observers() else {
            return Response::error(404, "no alerts here");
        };
        match o.digest_now().await {
            Ok(answer) => Response::json(200, &json!({ "sent": true, "upstream": answer })),
            Err(e) => Response::error(502, &e.to_string()),
        }
    }
}
