//! The figures the pages show that come from more than one source, each read by one
//! function here, so that a better source (an exact counter, an index of the hold spool)
//! changes that function and no page: a key's held mail, every key's held count, and what
//! a key delivered before its containment.

use std::collections::HashMap;

use serde_json::Value;

use super::html;
use super::state::Console;
use crate::hold::HeldHead;
use crate::proxy::release::blocking;

/// What a key relayed before it was contained.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Delivered {
    /// Messages.
    pub messages: u64,
    /// Their recipients.
    pub recipients: u64,
    /// Whether the figure counts only what was relayed before the containment
    /// (`delivered_before` of the evidence); else it is every message this node saw of
    /// the key up to then (the evidence's `messages` and `recipients`).
    pub exact: bool,
}

/// What the key of a restriction with `evidence` delivered before its containment: the
/// evidence's `delivered_before` (`{"messages", "recipients"}`) when it has one, else the
/// messages and recipients it saw up to the restriction; `None` without either.
pub fn delivered_before(evidence: &Value) -> Option<Delivered> {
    let n = |v: &Value| v.as_u64();
    let d = &evidence["delivered_before"];
    if let (Some(messages), Some(recipients)) = (n(&d["messages"]), n(&d["recipients"])) {
        return Some(Delivered {
            messages,
            recipients,
            exact: true,
        });
    }
    Some(Delivered {
        messages: n(&evidence["messages"])?,
        recipients: n(&evidence["recipients"])?,
        exact: false,
    })
}

impl Delivered {
    /// The figure in words, for a page (HTML).
    pub fn words(&self) -> String {
        let plural =
            |n: u64, one: &str, many: &str| format!("{n} {}", if n == 1 { one } else { many });
        let what = format!(
            "{} to {}",
            plural(self.messages, "message", "messages"),
            plural(self.recipients, "recipient", "recipients")
        );
        if self.exact {
            format!("{what} relayed")
        } else {
            format!(
                "{what} <span class=\"muted\">(seen up to the restriction, refused ones \
                 included)</span>"
            )
        }
    }
}

/// The messages held for `key` now, oldest first (empty without a hold spool), or why
/// they could not be read (escaped).
pub async fn held_of(c: &Console, key: &str) -> Result<Vec<HeldHead>, String> {
    let Some(spool) = c.state.control.shared().hold.clone() else {
        return Ok(Vec::new());
    };
    let k = key.to_string();
    blocking(move || spool.of_keys(&[&k]))
        .await
        .map_err(|e| html::text(&e.to_string(), 300))
}

/// How many messages are held now for each key: in the hold spool, and in Postfix's hold
/// queue (its ledger); empty without either.
pub async fn held_counts(c: &Console) -> Result<HashMap<String, usize>, String> {
    let shared = c.state.control.shared();
    let mut counts = match shared.hold.clone() {
        Some(spool) => blocking(move || {
            spool.indexed(|ix| {
                let mut counts: HashMap<String, usize> = HashMap::new();
                for h in ix.all() {
                    *counts.entry(h.envelope.key.clone()).or_default() += 1;
                }
                counts
            })
        })
        .await
        .map_err(|e| html::text(&e.to_string(), 300))?,
        None => HashMap::new(),
    };
    if let Some(pf) = &shared.postfix {
        for e in pf.ledger().all() {
            *counts.entry(e.key).or_default() += 1;
        }
    }
    Ok(counts)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn delivered_before_prefers_the_exact_figure() {
        let exact = json!({"messages": 40, "recipients": 400,
            "delivered_before": {"messages": 12, "recipients": 111}});
        assert_eq!(
            delivered_before(&exact),
            Some(Delivered {
                messages: 12,
                recipients: 111,
                exact: true
            })
        );
        let seen = json!({"messages": 1, "recipients": 5});
        let d = delivered_before(&seen).unwrap();
        assert!(!d.exact);
        assert!(
            d.words().starts_with("1 message to 5 recipients"),
            "{}",
            d.words()
        );
        assert_eq!(delivered_before(&json!({})), None);
        assert_eq!(delivered_before(&Value::Null), None);
        assert_eq!(exact_words(), "12 messages to 111 recipients relayed");
    }

    fn exact_words() -> String {
        Delivered {
            messages: 12,
            recipients: 111,
            exact: true,
        }
        .words()
    }
}
