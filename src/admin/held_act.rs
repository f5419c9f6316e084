//! The hold spool's actions: release and delete held messages, one by id, every one of a
//! key, or a selection of ids (the console's forms). [`AdminState::held_ids`] is the one
//! code path of all of them: `POST /v1/held/release|delete`, the CLI through the socket,
//! and every console action.
//!
//! * A release needs a reason (`reason=TEXT`, 400 without): it is logged and written in
//!   the released message's trace header. A delete takes one too, optionally.
//! * Releasing mail held for a key that is still restricted sends what the limit stopped:
//!   it needs `confirm=true` (409 without, naming the restriction: since when, by whom,
//!   why).
//! * Each message acted on is one audit line (`target`: its id); a request refused before
//!   any message is touched is one line with the id, key or ids it named.

use std::sync::Arc;

use serde_json::json;

use super::actor::Actor;
use super::api::{held_error, postfix_status, spool_status, AdminState};
use super::audit::{self, result_of};
use super::held;
use super::held::Place;
use super::http::{Request, Response};
use crate::hold::postfix::PostfixError;
use crate::hold::SpoolError;
use crate::policy::alert::restriction_json;
use crate::proxy::release::ReleaseBy;
use crate::proxy::release::{self, HeldError};
use crate::proxy::Shared;
use crate::store::{Restriction, StoreError};
use crate::time::rfc3339;

/// Which held messages an action is on.
#[derive(Clone, Copy, Debug)]
pub enum Selection<'a> {
    /// One message (refused with 404 when it is not held).
    Id(&'a str),
    /// Every message held for the key.
    Key(&'a str),
    /// These messages (a console form's selection); one no longer held fails on its own
    /// and the others go ahead.
    Ids(&'a [String]),
}

impl Selection<'_> {
    /// The audit target of a request refused before any message was touched.
    fn target(&self) -> serde_json::Value {
        match self {
            Selection::Id(v) | Selection::Key(v) => json!(v),
            Selection::Ids(ids) => json!(ids),
        }
    }
}

/// What is asked of the selected held messages.
#[derive(Clone, Copy, Debug)]
pub struct HeldAsk<'a> {
    /// Release them (relay upstream), else delete them.
    pub release: bool,
    /// Why (trimmed; empty is no reason): needed for a release.
    pub reason: &'a str,
    /// `confirm` as sent (`true` | `false`, absent is `false`): a release of mail of a key
    /// still restricted needs `true`.
    pub confirm: Option<&'a str>,
}

/// Why a release or delete was refused before any message was touched.
#[derive(Debug, thiserror::Error)]
pub enum HeldRefusal {
    /// The configuration has neither `[hold]` nor `[postfix]`.
    #[error(
        "no hold: the configuration has neither a [hold] section (floodgate's own spool) \
         nor a [postfix] section (Postfix's hold queue)"
    )]
    NoSpool,
    /// `confirm` was neither `true` nor `false`.
    #[error("confirm={0:?}: use confirm=true or confirm=false")]
    BadConfirm(String),
    /// A release without a reason.
    #[error(
        "say why: reason=TEXT (--reason); it is logged and written in the released \
         message's trace header"
    )]
    NoReason,
    /// The mail is held for a key that is still restricted, and the release was not
    /// confirmed.
    #[error("{}", still_restricted_text(.0))]
    StillRestricted(Box<Restriction>),
    /// The selection could not be read (an id not held: 404).
    #[error(transparent)]
    Select(#[from] SpoolError),
    /// The selection could not be read in Postfix's hold queue (an id not held: 404).
    #[error(transparent)]
    SelectPostfix(#[from] PostfixError),
    /// The store could not say whether the key is restricted.
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl HeldRefusal {
    /// The admin API's answer to it.
    pub fn response(&self) -> Response {
        match self {
            HeldRefusal::NoSpool => Response::error(404, &self.to_string()),
            HeldRefusal::BadConfirm(_) | HeldRefusal::NoReason => {
                Response::error(400, &self.to_string())
            }
            HeldRefusal::StillRestricted(r) => Response::json(
                409,
                &json!({ "error": self.to_string(), "restricted": restriction_json(r) }),
            ),
            HeldRefusal::Select(e) => Response::error(spool_status(e), &self.to_string()),
            HeldRefusal::SelectPostfix(e) => Response::error(postfix_status(e), &self.to_string()),
            HeldRefusal::Store(_) => Response::error(503, &self.to_string()),
        }
    }
}

/// `confirm=true|false` (false when absent); any other value is refused.
pub fn confirmed(value: Option<&str>) -> Result<bool, HeldRefusal> {
    match value {
        None | Some("false") => Ok(false),
        Some("true") => Ok(true),
        Some(other) => Err(HeldRefusal::BadConfirm(other.to_string())),
    }
}

/// The text refusing a release of mail held for `r.key` while it is restricted.
fn still_restricted_text(r: &Restriction) -> String {
    format!(
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
    )
}

/// Each selected message's id and the result of its release or delete.
pub type HeldResults = Vec<(String, Result<(), HeldError>)>;

impl AdminState {
    /// The restriction in force on any of `keys`, if one is.
    async fn restriction_of_any(&self, keys: &[&str]) -> Result<Option<Restriction>, StoreError> {
        let store = self.store.as_store();
        for k in keys {
            if let Some(r) = store.restricted(&[(*k).to_string()]).await? {
                return Ok(Some(r));
            }
        }
        Ok(None)
    }

    /// The selected messages, each with the key it was held for (`None`: an id of
    /// [`Selection::Ids`] that is no longer held; its action then fails on its own), from
    /// the hold each id names; a key's messages from every hold.
    async fn pick(
        shared: &Shared,
        sel: Selection<'_>,
    ) -> Result<Vec<(String, Option<String>)>, HeldRefusal> {
        match sel {
            Selection::Id(id) => Ok(Self::one(shared, id)
                .await?
                .into_iter()
                .map(|(i, k)| (i, Some(k)))
                .collect()),
            Selection::Key(key) => {
                let mut out = Vec::new();
                if let Some(spool) = &shared.hold {
                    out.extend(held::select_keyed(spool, None, Some(key)).await?);
                }
                if let Some(pf) = &shared.postfix {
                    out.extend(held::select_postfix(pf, None, Some(key)).await?);
                }
                Ok(out.into_iter().map(|(i, k)| (i, Some(k))).collect())
            }
            Selection::Ids(ids) => {
                let mut out = Vec::with_capacity(ids.len());
                for id in ids {
                    let key = match Self::one(shared, id).await {
                        Ok(mut v) => v.pop().map(|(_, k)| k),
                        Err(HeldRefusal::Select(SpoolError::NotFound(_))) => None,
                        Err(HeldRefusal::SelectPostfix(e)) if e.is_not_held() => None,
                        Err(e) => return Err(e),
                    };
                    out.push((id.clone(), key));
                }
                Ok(out)
            }
        }
    }

    /// The message `id` with its key, from the hold its id names.
    async fn one(shared: &Shared, id: &str) -> Result<Vec<(String, String)>, HeldRefusal> {
        match (Place::of(shared, id), &shared.postfix, &shared.hold) {
            (Place::Postfix, Some(pf), _) => Ok(held::select_postfix(pf, Some(id), None).await?),
            (_, _, Some(spool)) => Ok(held::select_keyed(spool, Some(id), None).await?),
            _ => Err(SpoolError::NotFound(id.to_string()).into()),
        }
    }

    /// Releases or deletes the message `id` in the hold its id names.
    async fn act_one(
        shared: &Arc<Shared>,
        id: &str,
        release: bool,
        by: &ReleaseBy,
    ) -> Result<(), HeldError> {
        if let (Place::Postfix, Some(pf)) = (Place::of(shared, id), &shared.postfix) {
            let r = if release {
                pf.release(id, &by.by).await
            } else {
                pf.delete(id, &by.by).await
            };
            return r.map(drop).map_err(HeldError::from);
        }
        let Some(spool) = shared.hold.clone() else {
            return Err(SpoolError::NotFound(id.to_string()).into());
        };
        if release {
            release::release_one(shared, &spool, id, by).await
        } else {
            release::delete_one(shared, &spool, id, by).await
        }
    }

    /// Releases or deletes the held messages `sel` names, as `who`, after the checks of a
    /// release (a reason; `confirm=true` for mail of a key still restricted), with the
    /// result of each message; or the refusal, when none was touched. Every message and
    /// every refusal is an audit line.
    pub async fn held_ids(
        &self,
        who: &Actor,
        sel: Selection<'_>,
        ask: HeldAsk<'_>,
    ) -> Result<HeldResults, HeldRefusal> {
        let action = if ask.release {
            "held_release"
        } else {
            "held_delete"
        };
        let reason = Some(ask.reason.trim()).filter(|r| !r.is_empty());
        let r = self.held_checked(who, sel, ask, reason, action).await;
        if let Err(refusal) = &r {
            let result = result_of(&refusal.response());
            self.audit(who, action, &sel.target(), reason, &result);
        }
        r
    }

    /// [`AdminState::held_ids`] but for the audit line of a refusal.
    async fn held_checked(
        &self,
        who: &Actor,
        sel: Selection<'_>,
        ask: HeldAsk<'_>,
        reason: Option<&str>,
        action: &str,
    ) -> Result<HeldResults, HeldRefusal> {
        let shared = self.control.shared();
        if !held::any_hold(&shared) {
            return Err(HeldRefusal::NoSpool);
        }
        let confirm = confirmed(ask.confirm)?;
        if ask.release && reason.is_none() {
            return Err(HeldRefusal::NoReason);
        }
        let picked = Self::pick(&shared, sel).await?;
        if ask.release && !confirm {
            let mut keys: Vec<&str> = picked.iter().filter_map(|(_, k)| k.as_deref()).collect();
            keys.sort_unstable();
            keys.dedup();
            if let Some(r) = self.restriction_of_any(&keys).await? {
                return Err(HeldRefusal::StillRestricted(Box::new(r)));
            }
        }
        let in_header = shared
            .config()
            .hold
            .as_ref()
            .is_some_and(|h| h.get_ref().reason_in_header);
        let asked_us = crate::store::now_micros();
        let mut results = Vec::with_capacity(picked.len());
        for (n, (id, key)) in picked.into_iter().enumerate() {
            let reference = audit::reference(asked_us, n);
            let by = ReleaseBy {
                by: who.to_string(),
                reason: reason.unwrap_or("").to_string(),
                note: (!in_header).then(|| format!("audit {reference}")),
                at: asked_us.div_euclid(1_000_000),
            };
            let r = Self::act_one(&shared, &id, ask.release, &by).await;
            let result = match &r {
                Ok(()) => "ok".to_string(),
                Err(e) => result_of(&held_error(e)),
            };
            let mut more = vec![("key", json!(key))];
            if ask.release {
                more.push(("ref", json!(reference)));
            }
            self.audit_with(who, action, &json!(id), reason, &result, &more);
            results.push((id, r));
        }
        if results.is_empty() {
            // Nothing held for the key: the request is still on record.
            self.audit(who, action, &sel.target(), reason, "ok");
        }
        if let Some(spool) = &shared.hold {
            crate::proxy::refresh_hold_gauges(spool, &self.metrics);
        }
        Ok(results)
    }

    /// `POST /v1/held/release` (`release`) and `POST /v1/held/delete`, asked by `who`.
    pub(super) async fn held_act(&self, req: &Request, release: bool, who: &Actor) -> Response {
        let (id, key) = (req.param("id"), req.param("key"));
        let sel = match (id, key) {
            (Some(id), None) => Selection::Id(id),
            (None, Some(key)) => Selection::Key(key),
            _ => {
                let r = Response::error(400, "give either ?id=ID or ?key=KEY");
                let action = if release {
                    "held_release"
                } else {
                    "held_delete"
                };
                let reason = req.param("reason").map(str::trim).filter(|r| !r.is_empty());
                self.audit(who, action, &json!(id.or(key)), reason, &result_of(&r));
                return r;
            }
        };
        let ask = HeldAsk {
            release,
            reason: req.param("reason").unwrap_or(""),
            confirm: req.param("confirm"),
        };
        let results = match self.held_ids(who, sel, ask).await {
            Ok(r) => r,
            Err(refusal) => return refusal.response(),
        };
        let verb = if release { "released" } else { "deleted" };
        let mut done = Vec::new();
        let mut failed = Vec::new();
        for (id, r) in results {
            match r {
                Ok(()) => done.push(id),
                Err(e) => failed.push((id, e)),
            }
        }
        if let (Selection::Id(_), Some((_, e))) = (sel, failed.first()) {
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

    #[test]
    fn confirm_is_true_or_false() {
        assert!(!confirmed(None).unwrap());
        assert!(!confirmed(Some("false")).unwrap());
        assert!(confirmed(Some("true")).unwrap());
        let r = confirmed(Some("yes")).unwrap_err().response();
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
        let resp = HeldRefusal::StillRestricted(Box::new(r)).response();
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

    #[test]
    fn refusals_answer_with_their_status() {
        assert_eq!(HeldRefusal::NoSpool.response().status, 404);
        assert_eq!(HeldRefusal::NoReason.response().status, 400);
        let gone = HeldRefusal::Select(SpoolError::NotFound("x".into())).response();
        assert_eq!(gone.status, 404);
        let busy = HeldRefusal::Select(SpoolError::Busy("x".into())).response();
        assert_eq!(busy.status, 409);
        let down = HeldRefusal::Store(StoreError::Unavailable("down".into())).response();
        assert_eq!(down.status, 503);
        let v: Value = serde_json::from_slice(&down.body).unwrap();
        assert!(v["error"].as_str().unwrap().contains("down"), "{v}");
    }
}
