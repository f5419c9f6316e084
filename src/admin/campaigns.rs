//! `GET /v1/campaigns`: the campaigns found in the last 7 days (with Redis: the fleet's;
//! see [`crate::store::campaign`]: a fingerprint's bands grouped into one campaign), each
//! once with its true totals (every copy noted, held ones too), its senders (restricted or
//! not now), the last copy's Subject and link domains, and the held messages of its
//! senders. `POST /v1/campaigns/act?id=ID&op=release-held|delete-held|release&reason=TEXT
//! [&confirm=true]`: one action on the whole campaign (see [`AdminState::campaign_act`]).

use std::collections::HashSet;

use serde_json::{json, Value};

use super::actor::Actor;
use super::api::AdminState;
use super::audit::result_of;
use super::held;
use super::held_act::{HeldAsk, Selection};
use super::http::{Request, Response};
use crate::proxy::release::blocking;
use crate::store::Campaign;

/// One campaign as JSON: `{"limit", "key", "message_key" (the campaign id, as `floodgate
/// inspect` takes it), "since", "last", "copies", "recipients" (the campaign's totals),
/// "subject", "link_domains", "accounts": [{"key", "copies", "recipients", "client_ip",
/// "last", "restricted"}], "held": [held summaries]}`.
pub fn campaign_json(c: &Campaign, restricted: &HashSet<String>, held: &[Value]) -> Value {
    let info = |s: &crate::store::CampaignSender| -> Value {
        serde_json::from_str(&s.info).unwrap_or_default()
    };
    let last = c.senders.first().map(info).unwrap_or_default();
    let accounts: Vec<Value> = c
        .senders
        .iter()
        .map(|s| {
            json!({
                "key": s.sender,
                "copies": s.copies,
                "recipients": s.recipients,
                "client_ip": info(s)["client_ip"],
                "last": crate::time::rfc3339(s.last_us),
                "restricted": restricted.contains(&s.sender),
            })
        })
        .collect();
    let senders: HashSet<&str> = c.senders.iter().map(|s| s.sender.as_str()).collect();
    let held: Vec<&Value> = held
        .iter()
        .filter(|h| h["key"].as_str().is_some_and(|k| senders.contains(k)))
        .collect();
    json!({
        "limit": c.limit,
        "key": c.key,
        "message_key": c.key,
        "since": crate::time::rfc3339(c.since_us),
        "last": crate::time::rfc3339(c.last_us),
        "copies": c.copies,
        "recipients": c.recipients,
        "subject": last["subject"],
        "link_domains": last["link_domains"],
        "accounts": accounts,
        "held": held,
    })
}

/// A campaign-wide action.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CampaignOp {
    /// Release every held message of the campaign's accounts.
    ReleaseHeld,
    /// Delete every held message of the campaign's accounts.
    DeleteHeld,
    /// End the restriction of every account of the campaign that is restricted.
    EndRestrictions,
}

impl CampaignOp {
    /// The operation `op=` names.
    pub fn parse(op: &str) -> Option<CampaignOp> {
        match op {
            "release-held" => Some(CampaignOp::ReleaseHeld),
            "delete-held" => Some(CampaignOp::DeleteHeld),
            "release" => Some(CampaignOp::EndRestrictions),
            _ => None,
        }
    }

    /// Its audit action.
    pub fn action(self) -> &'static str {
        match self {
            CampaignOp::ReleaseHeld => "campaign_held_release",
            CampaignOp::DeleteHeld => "campaign_held_delete",
            CampaignOp::EndRestrictions => "campaign_release",
        }
    }

    /// What was done to each item, in a word.
    pub fn verb(self) -> &'static str {
        match self {
            CampaignOp::ReleaseHeld => "released",
            CampaignOp::DeleteHeld => "deleted",
            CampaignOp::EndRestrictions => "ended",
        }
    }
}

/// What a campaign-wide action did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CampaignDone {
    /// The campaign's accounts.
    pub accounts: Vec<String>,
    /// What it was done to: held message ids, or the accounts whose restriction ended.
    pub done: Vec<String>,
    /// What failed, each in words.
    pub failed: Vec<String>,
}

impl CampaignDone {
    /// The action's result as JSON.
    pub fn json(&self, id: &str, op: CampaignOp) -> Value {
        json!({
            "campaign": id,
            "accounts": self.accounts,
            op.verb(): self.done,
            "failed": self.failed,
        })
    }
}

impl AdminState {
    /// `POST /v1/campaigns/act`, asked by `who`.
    pub(super) async fn campaign_request(&self, req: &Request, who: &Actor) -> Response {
        let id = req.param("id").unwrap_or("");
        let Some(op) = req.param("op").and_then(CampaignOp::parse) else {
            let r = Response::error(400, "say what to do: op=release-held|delete-held|release");
            let reason = req.param("reason").map(str::trim).filter(|r| !r.is_empty());
            self.audit(who, "campaign", &json!(id), reason, &result_of(&r));
            return r;
        };
        let reason = req.param("reason").unwrap_or("");
        match self
            .campaign_act(who, id, op, reason, req.param("confirm"))
            .await
        {
            Ok(done) => Response::json(200, &done.json(id, op)),
            Err(r) => r,
        }
    }

    /// Does `op` to the campaign `id` as `who` for `reason` (needed): releases or deletes
    /// every held message of its accounts (a release of mail of an account still
    /// restricted needs `confirm=true`, as `held release` does), or ends every
    /// restriction of its accounts. Each message and each restriction is audited as its
    /// own action is; the campaign's action is one more line (target: its id).
    pub async fn campaign_act(
        &self,
        who: &Actor,
        id: &str,
        op: CampaignOp,
        reason: &str,
        confirm: Option<&str>,
    ) -> Result<CampaignDone, Response> {
        let reason = reason.trim();
        let r = self.campaign_checked(who, id, op, reason, confirm).await;
        let result = match &r {
            Ok(d) if d.failed.is_empty() => "ok".to_string(),
            Ok(d) => format!("error: {} not {}", d.failed.len(), op.verb()),
            Err(resp) => result_of(resp),
        };
        let why = Some(reason).filter(|r| !r.is_empty());
        self.audit(who, op.action(), &json!(id), why, &result);
        r
    }

    /// [`AdminState::campaign_act`] but for its own audit line.
    async fn campaign_checked(
        &self,
        who: &Actor,
        id: &str,
        op: CampaignOp,
        reason: &str,
        confirm: Option<&str>,
    ) -> Result<CampaignDone, Response> {
        if reason.is_empty() {
            return Err(Response::error(400, "say why: reason=TEXT (--reason)"));
        }
        let store = self.store.as_store();
        let list = store
            .campaigns()
            .await
            .map_err(|e| Response::error(503, &e.to_string()))?;
        let Some(c) = list.into_iter().find(|c| c.key == id) else {
            return Err(Response::error(
                404,
                &format!("{id:?} is not a campaign found in the last 7 days"),
            ));
        };
        let accounts: Vec<String> = c.senders.iter().map(|s| s.sender.clone()).collect();
        let mut out = CampaignDone {
            accounts,
            ..CampaignDone::default()
        };
        if op == CampaignOp::EndRestrictions {
            let restricted: HashSet<String> = store
                .restrictions()
                .await
                .map_err(|e| Response::error(503, &e.to_string()))?
                .into_iter()
                .map(|r| r.key)
                .collect();
            for key in out.accounts.iter().filter(|k| restricted.contains(*k)) {
                let q = vec![
                    ("key".to_string(), key.clone()),
                    ("reason".to_string(), reason.to_string()),
                ];
                let req = Request {
                    method: "POST".into(),
                    path: "/v1/release".into(),
                    query: q,
                    headers: Vec::new(),
                    body: Vec::new(),
                };
                let r = self.release(&req, who).await;
                self.audit(who, "release", &json!(key), Some(reason), &result_of(&r));
                if r.status == 200 {
                    out.done.push(key.clone());
                } else {
                    out.failed.push(format!("{key}: {}", result_of(&r)));
                }
            }
            return Ok(out);
        }
        let ids = self.held_of(&out.accounts).await?;
        if ids.is_empty() {
            return Ok(out);
        }
        let ask = HeldAsk {
            release: op == CampaignOp::ReleaseHeld,
            reason,
            confirm,
        };
        let results = self
            .held_ids(who, Selection::Ids(&ids), ask)
            .await
            .map_err(|refusal| refusal.response())?;
        for (id, r) in results {
            match r {
                Ok(()) => out.done.push(id),
                Err(e) => out.failed.push(format!("{id}: {e}")),
            }
        }
        Ok(out)
    }

    /// The ids of the messages held for any of `accounts`, oldest first.
    async fn held_of(&self, accounts: &[String]) -> Result<Vec<String>, Response> {
        let Ok((_, spool)) = self.spool() else {
            return Ok(Vec::new());
        };
        let s = spool.clone();
        let all = blocking(move || s.list())
            .await
            .map_err(|e| Response::error(500, &e.to_string()))?;
        let accounts: HashSet<&str> = accounts.iter().map(String::as_str).collect();
        Ok(all
            .into_iter()
            .filter(|h| accounts.contains(h.envelope.key.as_str()))
            .map(|h| h.envelope.id)
            .collect())
    }

    /// `GET /v1/campaigns`.
    pub(super) async fn campaigns(&self) -> Response {
        match self.campaign_list().await {
            Ok(v) => Response::json(200, &json!({ "campaigns": v })),
            Err(e) => Response::error(503, &e.to_string()),
        }
    }

    /// The campaigns as [`campaign_json`] gives them, most recently over first.
    pub async fn campaign_list(&self) -> Result<Vec<Value>, crate::store::StoreError> {
        let store = self.store.as_store();
        let list = store.campaigns().await?;
        let restricted: HashSet<String> = store
            .restrictions()
            .await?
            .into_iter()
            .map(|r| r.key)
            .collect();
        // The spool's messages, when there is one (a campaign's senders' held mail).
        let held: Vec<Value> = match self.spool() {
            Ok((_, spool)) if !list.is_empty() => {
                let s = spool.clone();
                match blocking(move || s.list()).await {
                    Ok(all) => all.iter().map(held::summary).collect(),
                    Err(_) => Vec::new(),
                }
            }
            _ => Vec::new(),
        };
        Ok(list
            .iter()
            .map(|c| campaign_json(c, &restricted, &held))
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::CampaignSender;

    #[test]
    fn a_campaign_names_its_senders_and_their_held_mail() {
        let s = |who: &str, last: i64| CampaignSender {
            sender: who.into(),
            copies: 2,
            recipients: 10,
            last_us: last,
            info: json!({"client_ip": "192.0.2.7", "subject": format!("from {who}"),
                "link_domains": ["evil.example"]})
            .to_string(),
            ..CampaignSender::default()
        };
        // The totals count copies of senders no longer listed (or restricted before).
        let c = Campaign {
            key: "c:b3:ab".into(),
            limit: "campaign".into(),
            since_us: 1_000_000,
            last_us: 2_000_000,
            copies: 7,
            recipients: 31,
            senders: vec![s("bob", 9), s("alice", 5)],
        };
        let restricted: HashSet<String> = ["bob".to_string()].into();
        let held = [
            json!({"id": "h1", "key": "alice"}),
            json!({"id": "h2", "key": "carol"}),
        ];
        let v = campaign_json(&c, &restricted, &held);
        assert_eq!(v["copies"], 7);
        assert_eq!(v["recipients"], 31);
        assert_eq!(v["subject"], "from bob");
        assert_eq!(v["message_key"], "c:b3:ab");
        assert_eq!(v["accounts"][0]["restricted"], true);
        assert_eq!(v["accounts"][1]["restricted"], false);
        assert_eq!(v["held"].as_array().unwrap().len(), 1);
        assert_eq!(v["held"][0]["id"], "h1");
    }

    #[test]
    fn campaign_operations_by_name() {
        for (name, op) in [
            ("release-held", CampaignOp::ReleaseHeld),
            ("delete-held", CampaignOp::DeleteHeld),
            ("release", CampaignOp::EndRestrictions),
        ] {
            assert_eq!(CampaignOp::parse(name), Some(op));
        }
        assert_eq!(CampaignOp::parse("Release"), None);
        assert_eq!(CampaignOp::parse(""), None);
        let d = CampaignDone {
            accounts: vec!["a".into(), "b".into()],
            done: vec!["h1".into()],
            failed: vec![],
        };
        let v = d.json("c:x", CampaignOp::DeleteHeld);
        assert_eq!(v["deleted"][0], "h1");
        assert_eq!(v["accounts"][1], "b");
        assert_eq!(v["campaign"], "c:x");
    }
}
