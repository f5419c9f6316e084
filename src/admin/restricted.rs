//! The admin endpoints of the restricted set: list, release, restrict by hand.
//!
//! | method | path | answer |
//! |---|---|---|
//! | GET | `/v1/restricted` | every restriction in force, with its evidence |
//! | POST | `/v1/release?key=KEY&reason=TEXT` | ends KEY's restriction (404 when none; 400 without a reason) and resets the tripping limit's records of KEY |
//! | POST | `/v1/restrict?key=KEY&for=DURATION\|until_released&reason=TEXT` | restricts KEY by hand |
//!
//! The request's [`Actor`] is the `by` of both: in the log line, the alert and (for a
//! restriction by hand) the restriction itself (`token:NAME`, `user:NAME`).

use serde_json::json;

use super::actor::Actor;
use super::api::AdminState;
use super::http::{Request, Response};
use super::inspect::database_key;
use crate::policy::alert::{restriction_json, restriction_notice};
use crate::store::{RestrictFor, Restriction};
use crate::time::rfc3339;

fn reason_of(req: &Request) -> Result<String, Response> {
    match req.param("reason").map(str::trim) {
        Some(r) if !r.is_empty() => Ok(r.to_string()),
        _ => Err(Response::error(400, "say why: reason=TEXT (--reason)")),
    }
}

impl AdminState {
    fn notify(&self, event: &str, r: &Restriction, by: &str, reason: &str) {
        let host = self.control.config().server.hostname.clone();
        let n = restriction_notice(event, r, by, reason, &host);
        if let Some(o) = &self.observer {
            o.restriction(&n);
        }
        self.metrics.restriction(if event == "floodgate.released" {
            "released"
        } else {
            "restricted"
        });
    }

    /// Makes a restriction's evidence live: what this node has seen of its key up to now
    /// (when it has seen the key; else the evidence recorded at the restriction stays),
    /// with `held` as the hold spool holds for the key now (on every node).
    pub async fn held_into(&self, r: &mut Restriction) {
        if let Some(p) = &self.policy {
            if p.knows(&[&r.key]) {
                r.evidence = p.evidence(&[&r.key]);
            }
            p.set_held(&mut r.evidence, &r.key).await;
        }
    }

    /// Every restriction in force, each with its live evidence (see
    /// [`AdminState::held_into`]).
    pub async fn restrictions_now(&self) -> Result<Vec<Restriction>, crate::store::StoreError> {
        let mut list = self.store.as_store().restrictions().await?;
        for r in &mut list {
            self.held_into(r).await;
        }
        Ok(list)
    }

    /// `GET /v1/restricted`.
    pub(super) async fn restricted(&self) -> Response {
        match self.restrictions_now().await {
            Ok(list) => {
                let v: Vec<_> = list.iter().map(restriction_json).collect();
                Response::json(200, &json!({ "restricted": v }))
            }
            Err(e) => Response::error(503, &e.to_string()),
        }
    }

    /// `POST /v1/release`.
    pub(super) async fn release(&self, req: &Request, who: &Actor) -> Response {
        let Some(key) = req.param("key") else {
            return Response::error(400, "release needs ?key=KEY");
        };
        let reason = match reason_of(req) {
            Ok(r) => r,
            Err(resp) => return resp,
        };
        let store = self.store.as_store();
        let mut r = match store.release(key).await {
            Ok(Some(r)) => r,
            Ok(None) => {
                return Response::error(404, &format!("{key:?} is not restricted"));
            }
            Err(e) => return Response::error(503, &e.to_string()),
        };
        // The tripping limit's records of the key go too, so the next message passes
        // instead of restricting the key again at once.
        let config = self.control.generation();
        let mut keys: Vec<String> = config
            .policy
            .limits
            .iter()
            .filter(|d| d.name == r.limit)
            .filter_map(|d| database_key(d, key))
            .collect();
        keys.dedup();
        let mut removed = 0;
        for k in &keys {
            match store.reset(k).await {
                Ok(n) => removed += n,
                Err(e) => tracing::warn!(error = %e, key = %k, "release: reset failed"),
            }
        }
        let by = who.to_string();
        tracing::info!(key = %key, limit = %r.limit, by = %by, reason = %reason, removed,
            "key released");
        // The notice carries the restriction's evidence with what is held for it now.
        self.held_into(&mut r).await;
        self.notify("floodgate.released", &r, &by, &reason);
        Response::json(
            200,
            &json!({ "released": restriction_json(&r), "reason": reason, "removed": removed }),
        )
    }

    /// `POST /v1/restrict`.
    pub(super) async fn restrict(&self, req: &Request, who: &Actor) -> Response {
        let Some(key) = req.param("key").filter(|k| !k.is_empty()) else {
            return Response::error(400, "restrict needs ?key=KEY");
        };
        let reason = match reason_of(req) {
            Ok(r) => r,
            Err(resp) => return resp,
        };
        let dur = match req.param("for").map(RestrictFor::parse) {
            Some(Ok(d)) => d,
            Some(Err(e)) => return Response::error(400, &e.to_string()),
            None => {
                return Response::error(400, "say how long: for=DURATION|until_released (--for)")
            }
        };
        let evidence = self
            .policy
            .as_ref()
            .map_or(serde_json::Value::Null, |p| p.evidence(&[key]));
        let r = Restriction {
            key: key.to_string(),
            limit: "admin".into(),
            since_us: 0,
            until_us: None,
            rate: None,
            limit_text: String::new(),
            by: who.to_string(),
            reason: reason.clone(),
            evidence,
        };
        match self.store.as_store().restrict(r, dur.micros()).await {
            Ok(mut r) => {
                self.held_into(&mut r).await;
                tracing::info!(key = %key, by = %who, reason = %reason,
                    until = %r.until_us.map_or_else(|| "until_released".into(), rfc3339),
                    "key restricted");
                self.notify("floodgate.restricted", &r, &who.to_string(), &reason);
                Response::json(200, &json!({ "restricted": restriction_json(&r) }))
            }
            Err(e) => Response::error(503, &e.to_string()),
        }
    }
}
