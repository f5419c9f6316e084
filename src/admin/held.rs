//! The hold spool's reads for the admin API: a held message as `held list` and `held show`
//! show it, and the messages an id or a key names.

use std::sync::Arc;

use serde_json::{json, Value};

use crate::hold::{HeldHead, Spool, SpoolError};
use crate::proxy::release::blocking;

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
