//! `GET /v1/campaigns`: the campaigns found in the last 7 days (with Redis: the fleet's;
//! see [`crate::store::campaign`]: a fingerprint's bands grouped into one campaign), each
//! once with its true totals (every copy noted, held ones too), its senders (restricted or
//! not now), the last copy's Subject and link domains, and the held messages of its
//! senders.

use std::collections::HashSet;

use serde_json::{json, Value};

use super::api::AdminState;
use super::held;
use super::http::Response;
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

impl AdminState {
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
}
