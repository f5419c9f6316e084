//! The hold spool's actions in the admin API: release and delete held messages, one by id
//! or every one of a key.
//!
//! * A release needs a reason (`reason=TEXT`, 400 without): it is logged and written in
//!   the released message's trace header. A delete takes one too, optionally.
//! * Releasing mail held for a key that is still restricted sends what the limit stopped:
//!   it needs `confirm=true` (409 without, naming the restriction: since when, by whom,
//!   why).
//! * Each message acted on is one audit line (`target`: its id); a request refused before
//!   any message is touched is one line with the id or key it named.

use serde_json::json;

use super::actor::Actor;
use super::api::{held_error, AdminState};
use super::audit::result_of;
use super::held;
use super::http::{Request, Response};
use crate::policy::alert::restriction_json;
use crate::proxy::release::ReleaseBy;
use crate::store::Restriction;
use crate::time::rfc3339;

/// `confirm=true|false` of a request (false when absent); any other value is refused.
fn confirmed(req: &Request) -> Result<bool, Response> {
    match req.param("confirm") {
        None | Some("false") => Ok(false),
        Some("true") => Ok(true),
        Some(other) => Err(Response::error(
            400,
            &format!("confirm={other:?}: use confirm=true or confirm=false"),
        )),
    }
}

/// The 409 answer to a release of mail held for `r.key` while it is restricted.
pub fn still_restricted(r: &Restriction) -> Response {
    let msg = format!(
        "{} is still restricted (since {}, by {}: {}): its held mail is what the limit \
         stopped; release the restriction first, or release the mail all the same with \
         confirm=true (--confirm)",
        r.key,
        rfc3339(r.since_us),
        r.by,
        if r.reason.is_empty() {
            "no reason given"
        } else {
            &r.reason
        }
    );
    Response::json(
        409,
        &json!({ "error": msg, "restricted": restriction_json(r) }),
    )
}

impl AdminState {
    /// The restriction in force on any of `keys`, if one is.
    async fn restriction_of_any(&self, keys: &[&str]) -> Result<Option<Restriction>, Response> {
        let store = self.store.as_store();
        for k in keys {
            match store.restricted(&[(*k).to_string()]).await {
                Ok(Some(r)) => return Ok(Some(r)),
                Ok(None) => {}
                Err(e) => return Err(Response::error(503, &e.to_string())),
            }
        }
        Ok(None)
    }

    /// `POST /v1/held/release` (`release`) and `POST /v1/held/delete`, asked by `who`.
    pub(super) async fn held_act(&self, req: &Request, release: bool, who: &Actor) -> Response {
        let action = if release {
            "held_release"
        } else {
            "held_delete"
        };
        let reason = req.param("reason").map(str::trim).filter(|r| !r.is_empty());
        let (id, key) = (req.param("id"), req.param("key"));
        let named = json!(id.or(key));
        let refuse = |r: Response| {
            self.audit(who, action, &named, reason, &result_of(&r));
            r
        };
        let (shared, spool) = match self.spool() {
            Ok(s) => s,
            Err(r) => return refuse(r),
        };
        if id.is_some() == key.is_some() {
            return refuse(Response::error(400, "give either ?id=ID or ?key=KEY"));
        }
        let confirm = match confirmed(req) {
            Ok(c) => c,
            Err(r) => return refuse(r),
        };
        if release && reason.is_none() {
            return refuse(Response::error(
                400,
                "say why: reason=TEXT (--reason); it is logged and written in the released \
                 message's trace header",
            ));
        }
        let picked = match held::select_keyed(&spool, id, key).await {
            Ok(p) => p,
            Err(e) => return refuse(held_error(&e.into())),
        };
        if release && !confirm {
            let mut keys: Vec<&str> = picked.iter().map(|(_, k)| k.as_str()).collect();
            keys.sort_unstable();
            keys.dedup();
            match self.restriction_of_any(&keys).await {
                Ok(Some(r)) => return refuse(still_restricted(&r)),
                Ok(None) => {}
                Err(resp) => return refuse(resp),
            }
        }
        let by = ReleaseBy {
            by: who.to_string(),
            reason: reason.unwrap_or("").to_string(),
            at: crate::hold::spool::now_secs() as i64,
        };
        let mut done = Vec::new();
        let mut failed = Vec::new();
        for (id, _) in &picked {
            let r = if release {
                held::release_one(&shared, &spool, id, &by).await
            } else {
                held::delete_one(&shared, &spool, id, &by).await
            };
            match r {
                Ok(()) => {
                    self.audit(who, action, &json!(id), reason, "ok");
                    done.push(id.clone());
                }
                Err(e) => {
                    let result = result_of(&held_error(&e));
                    self.audit(who, action, &json!(id), reason, &result);
                    failed.push((id.clone(), e));
                }
            }
        }
        if picked.is_empty() {
            // Nothing held for the key: the request is still on record.
            self.audit(who, action, &named, reason, "ok");
        }
        crate::proxy::refresh_hold_gauges(&spool, &self.metrics);
        let verb = if release { "released" } else { "deleted" };
        if let (Some(_), Some((_, e))) = (id, failed.first()) {
            return held_error(e);
        }
        if !failed.is_empty() {
            let why: Vec<String> = failed.iter().map(|(i, e)| format!("{i}: {e}")).collect();
            return Response::error(
                502,
                &format!(
                    "{} {verb}, {} not: {}",
                    done.len(),
                    failed.len(),
                    why.join("; ")
                ),
            );
        }
        Response::json(200, &json!({ verb: done }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;

    fn req(query: &[(&str, &str)]) -> Request {
        Request {
            method: "POST".into(),
            path: "/v1/held/release".into(),
            query: query
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            headers: Vec::new(),
            body: Vec::new(),
        }
    }

    #[test]
    fn confirm_is_true_or_false() {
        assert!(!confirmed(&req(&[])).unwrap());
        assert!(!confirmed(&req(&[("confirm", "false")])).unwrap());
        assert!(confirmed(&req(&[("confirm", "true")])).unwrap());
        let r = confirmed(&req(&[("confirm", "yes")])).unwrap_err();
        assert_eq!(r.status, 400);
        let v: Value = serde_json::from_slice(&r.body).unwrap();
        assert!(
            v["error"].as_str().unwrap().contains("use confirm=true"),
            "{v}"
        );
    }

    #[test]
    fn the_refusal_names_the_restriction() {
        let r = Restriction {
            key: "bob".into(),
            limit: "per-user".into(),
            since_us: 1_735_787_045_000_000,
            until_us: None,
            rate: Some(12.0),
            limit_text: "10 / 1h".into(),
            by: "token:alice".into(),
            reason: "phished".into(),
            evidence: Value::Null,
        };
        let resp = still_restricted(&r);
        assert_eq!(resp.status, 409);
        let v: Value = serde_json::from_slice(&resp.body).unwrap();
        let e = v["error"].as_str().unwrap();
        assert!(
            e.starts_with("bob is still restricted (since 2025-01-02T03:04:05"),
            "{e}"
        );
        assert!(e.contains("by token:alice: phished"), "{e}");
        assert!(e.contains("confirm=true (--confirm)"), "{e}");
        assert_eq!(v["restricted"]["key"], "bob");
    }
}
