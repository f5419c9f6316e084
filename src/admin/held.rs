//! Held mail's reads for the admin API: a held message as `held list` and `held show`
//! show it, and the messages an id or a key names. Held mail is in one of two places, both
//! read here: floodgate's own hold spool (the proxy's `[hold]`) and Postfix's hold queue
//! (`[postfix]`, for the policy service and the milter). An id says which: the spool's
//! ids have a `-`, Postfix's queue ids are letters and digits only. Every message is listed
//! once, with `where` saying which it is in (`spool` or `postfix`).

use std::sync::Arc;

use serde_json::{json, Value};

use crate::hold::postfix::{HeldInPostfix, LedgerEntry, PostfixError, PostfixHold};
use crate::hold::{HeldHead, Spool, SpoolError};
use crate::postfix::queue::{is_queue_id, Postcat};
use crate::proxy::release::{blocking, HeldError};
use crate::proxy::Shared;

/// Where a held message is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Place {
    /// floodgate's own hold spool.
    Spool,
    /// Postfix's hold queue.
    Postfix,
}

impl Place {
    /// The place of the message `id` (by the id's form): Postfix's hold queue for a queue id
    /// when `[postfix]` is configured, else the spool.
    pub fn of(shared: &Shared, id: &str) -> Place {
        if shared.postfix.is_some() && is_queue_id(id) {
            Place::Postfix
        } else {
            Place::Spool
        }
    }
}

/// Whether any hold is configured (`[hold]` or `[postfix]`).
pub fn any_hold(shared: &Shared) -> bool {
    shared.hold.is_some() || shared.postfix.is_some()
}

/// One message held in Postfix's hold queue as `held list` shows it: the ledger's entry
/// with Postfix's size and recipients still to deliver.
pub fn postfix_summary(h: &HeldInPostfix) -> Value {
    let mut v = entry_json(&h.entry);
    v["size"] = json!(h.message_size);
    v["recipients"] = json!(h.recipients);
    v
}

fn entry_json(e: &LedgerEntry) -> Value {
    json!({
        "id": e.queue_id,
        "key": e.key,
        "limit": e.limit,
        "reason": e.reason,
        "sender": e.sender,
        "recipients": e.recipients,
        "size": e.size,
        "subject": Value::Null,
        "time": e.time,
        "client": e.client.map(|c| c.to_string()),
        "user": e.user,
        "paced": Value::Null,
        "where": "postfix",
    })
}

/// One message held in Postfix's hold queue as `held show` shows it: the ledger's entry and
/// the header section `postcat` printed.
pub fn postfix_detail(e: &LedgerEntry, m: &Postcat) -> Value {
    let mut v = entry_json(e);
    let section = m.header_section.replace('\n', "\r\n");
    v["subject"] = json!(crate::hold::format::subject_of(section.as_bytes()));
    v["mail"] = json!(format!("<{}>", e.sender));
    v["rcpts"] = json!(e
        .recipients
        .iter()
        .map(|r| format!("<{r}>"))
        .collect::<Vec<_>>());
    v["body_size"] = json!(m.body_size);
    v["headers"] = json!(m.header_section);
    v
}

/// Every held message in every hold (or those of `key`), spool first, each with `where`.
pub async fn list_all(shared: &Shared, key: Option<&str>) -> Result<Vec<Value>, HeldError> {
    let mut out = Vec::new();
    if let Some(spool) = shared.hold.clone() {
        let owned = key.map(str::to_string);
        let heads = blocking(move || match owned {
            Some(k) => spool.of_keys(&[&k]),
            None => spool.list(),
        })
        .await?;
        out.extend(heads.iter().map(summary));
    }
    if let Some(pf) = &shared.postfix {
        out.extend(pf.list(key).await?.iter().map(postfix_summary));
    }
    Ok(out)
}

/// The held message `id` as `held show` shows it, from the hold its id names.
pub async fn show_any(shared: &Shared, id: &str) -> Result<Value, HeldError> {
    if let (Place::Postfix, Some(pf)) = (Place::of(shared, id), &shared.postfix) {
        let (e, m) = pf.show(id).await?;
        return Ok(postfix_detail(&e, &m));
    }
    let Some(spool) = shared.hold.clone() else {
        return Err(SpoolError::NotFound(id.to_string()).into());
    };
    let owned = id.to_string();
    let (h, section) = blocking(move || spool.header_section(&owned)).await?;
    Ok(detail(&h, &section))
}

/// The messages `id` or `key` name in Postfix's hold queue, each with its key.
pub async fn select_postfix(
    pf: &Arc<PostfixHold>,
    id: Option<&str>,
    key: Option<&str>,
) -> Result<Vec<(String, String)>, PostfixError> {
    match (id, key) {
        (Some(id), _) => match pf.ledger().get(id) {
            Some(e) => Ok(vec![(e.queue_id, e.key)]),
            None => Err(pf.ledger().why_not_held(id).into()),
        },
        (None, Some(k)) => Ok(pf
            .list(Some(k))
            .await?
            .into_iter()
            .map(|h| (h.entry.queue_id, h.entry.key))
            .collect()),
        (None, None) => Ok(Vec::new()),
    }
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
        "where": "spool",
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
            let k = k.to_string();
            Ok(blocking(move || s.of_keys(&[&k]))
                .await?
                .into_iter()
                .map(|m| (m.envelope.id, m.envelope.key))
                .collect())
        }
        (None, None) => Ok(Vec::new()),
    }
}
