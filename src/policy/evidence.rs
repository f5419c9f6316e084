//! What a node saw of a key recently, for the notice and listing of a restriction: client
//! addresses, recipient domains, Subjects of the last messages, counts of messages,
//! recipients, refusals and held messages.
//!
//! Bounded per node: at most [`MAX_KEYS`] keys (the least recently seen is forgotten first),
//! [`MAX_ITEMS`] addresses and domains and [`MAX_SUBJECTS`] Subjects (each at most
//! [`MAX_SUBJECT_CHARS`] characters) per key. Counts start when the key is first seen
//! by this node (or after it was forgotten).

use std::collections::{HashMap, VecDeque};
use std::net::IpAddr;
use std::sync::Mutex;

use serde_json::json;

/// Most keys remembered per node.
pub const MAX_KEYS: usize = 10_000;
/// Most client addresses and recipient domains remembered per key.
pub const MAX_ITEMS: usize = 32;
/// Most Subjects remembered per key (the last ones).
pub const MAX_SUBJECTS: usize = 5;
/// Longest Subject kept, in characters.
pub const MAX_SUBJECT_CHARS: usize = 200;

#[derive(Default)]
struct Ring {
    ips: VecDeque<IpAddr>,
    domains: VecDeque<String>,
    subjects: VecDeque<String>,
    messages: u64,
    recipients: u64,
    refusals: u64,
    held: u64,
    first_us: i64,
    last_us: i64,
}

fn push_bounded<T>(q: &mut VecDeque<T>, v: T) {
    if q.len() >= MAX_ITEMS {
        q.pop_front();
    }
    q.push_back(v);
}

/// One fact about a key.
#[derive(Clone, Copy, Debug)]
pub enum Fact<'a> {
    /// A MAIL FROM from this client address.
    Mail(Option<IpAddr>),
    /// A RCPT TO to this address.
    Recipient(&'a str),
    /// A message with this Subject reached the end of its data.
    Subject(&'a str),
    /// A refusal by floodgate.
    Refused,
    /// A message floodgate took to hold instead of relaying.
    Held,
}

/// The per-node ring of recent facts per key.
#[derive(Default)]
pub struct Evidence {
    map: Mutex<HashMap<String, Ring>>,
}

impl Evidence {
    /// Notes `fact` about `key` at `now_us`.
    pub fn note(&self, key: &str, fact: Fact<'_>, now_us: i64) {
        if key.is_empty() {
            return;
        }
        let mut map = self.map.lock().unwrap_or_else(|e| e.into_inner());
        if !map.contains_key(key) && map.len() >= MAX_KEYS {
            if let Some(old) = map
                .iter()
                .min_by_key(|(_, r)| r.last_us)
                .map(|(k, _)| k.clone())
            {
                map.remove(&old);
            }
        }
        let r = map.entry(key.to_string()).or_insert_with(|| Ring {
            first_us: now_us,
            ..Ring::default()
        });
        r.last_us = now_us;
        match fact {
            Fact::Mail(ip) => {
                r.messages += 1;
                if let Some(ip) = ip {
                    if !r.ips.contains(&ip) {
                        push_bounded(&mut r.ips, ip);
                    } else if let Some(i) = r.ips.iter().position(|x| *x == ip) {
                        // Most recent last.
                        r.ips.remove(i);
                        r.ips.push_back(ip);
                    }
                }
            }
            Fact::Recipient(rcpt) => {
                r.recipients += 1;
                let d = rcpt
                    .rsplit_once('@')
                    .map_or("", |(_, d)| d)
                    .trim_end_matches('>')
                    .to_ascii_lowercase();
                push_bounded(&mut r.domains, d);
            }
            Fact::Subject(s) => {
                if r.subjects.len() >= MAX_SUBJECTS {
                    r.subjects.pop_front();
                }
                let s: String = s
                    .chars()
                    .filter(|c| !c.is_control())
                    .take(MAX_SUBJECT_CHARS)
                    .collect();
                r.subjects.push_back(s);
            }
            Fact::Refused => r.refusals += 1,
            Fact::Held => r.held += 1,
        }
    }

    /// The evidence about the first of `keys` this node has seen, as JSON: `client_ips`
    /// (most recent last), `top_recipient_domains` (`[domain, count]`, most first, at most
    /// 5), `subjects` (the last ones, most recent last), `messages`, `recipients`,
    /// `refusals`, `held` (messages taken to hold), `since` (RFC 3339).
    pub fn of(&self, keys: &[&str]) -> serde_json::Value {
        let map = self.map.lock().unwrap_or_else(|e| e.into_inner());
        let Some(r) = keys.iter().find_map(|k| map.get(*k)) else {
            return json!({"client_ips": [], "top_recipient_domains": [], "subjects": [], "messages": 0,
                "recipients": 0, "refusals": 0, "held": 0, "since": null});
        };
        let mut counts: HashMap<&str, u64> = HashMap::new();
        for d in &r.domains {
            *counts.entry(d.as_str()).or_default() += 1;
        }
        let mut top: Vec<(&str, u64)> = counts.into_iter().collect();
        top.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
        top.truncate(5);
        json!({
            "client_ips": r.ips.iter().map(|i| i.to_string()).collect::<Vec<_>>(),
            "top_recipient_domains": top,
            "subjects": r.subjects,
            "messages": r.messages,
            "recipients": r.recipients,
            "refusals": r.refusals,
            "held": r.held,
            "since": crate::time::rfc3339(r.first_us),
        })
    }

    /// Brings the `held` count of `stored` (a restriction's evidence) up to this node's
    /// count for the first of `keys` it knows, when that is higher: a release notice carries
    /// the restriction's evidence with the messages held since.
    pub fn update_held(&self, stored: &mut serde_json::Value, keys: &[&str]) {
        let map = self.map.lock().unwrap_or_else(|e| e.into_inner());
        let Some(r) = keys.iter().find_map(|k| map.get(*k)) else {
            return;
        };
        let was = stored
            .get("held")
            .and_then(serde_json::Value::as_u64)
            .unwrap_or(0);
        if let Some(obj) = stored.as_object_mut() {
            obj.insert("held".into(), json!(was.max(r.held)));
        }
    }

    /// How many keys are remembered.
    pub fn len(&self) -> usize {
        self.map.lock().unwrap_or_else(|e| e.into_inner()).len()
    }

    /// Whether no key is remembered.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn collects_and_bounds() {
        let e = Evidence::default();
        let ip: IpAddr = "192.0.2.7".parse().unwrap();
        for i in 0..100 {
            e.note("alice", Fact::Mail(Some(ip)), i);
            e.note("alice", Fact::Recipient(&format!("u{i}@Example.org")), i);
        }
        e.note("alice", Fact::Recipient("x@other.net"), 101);
        e.note("alice", Fact::Refused, 102);
        e.note("alice", Fact::Held, 102);
        e.note("alice", Fact::Held, 102);
        for i in 0..7 {
            e.note(
                "alice",
                Fact::Subject(&format!("s{i}\r\n{}", "x".repeat(300))),
                103,
            );
        }
        let v = e.of(&["nobody", "alice"]);
        assert_eq!(v["messages"], 100);
        assert_eq!(v["recipients"], 101);
        assert_eq!(v["refusals"], 1);
        assert_eq!(v["held"], 2);
        let subjects = v["subjects"].as_array().unwrap();
        assert_eq!(subjects.len(), MAX_SUBJECTS);
        assert!(subjects[0].as_str().unwrap().starts_with("s2x"));
        assert_eq!(
            subjects[4].as_str().unwrap().chars().count(),
            MAX_SUBJECT_CHARS
        );
        assert_eq!(v["client_ips"], json!(["192.0.2.7"]));
        assert_eq!(v["top_recipient_domains"][0][0], "example.org");
        assert_eq!(v["top_recipient_domains"][0][1], (MAX_ITEMS - 1) as u64);
        for i in 0..(MAX_KEYS + 10) {
            e.note(&format!("k{i}"), Fact::Refused, 1_000 + i as i64);
        }
        assert_eq!(e.len(), MAX_KEYS);
        assert_eq!(e.of(&["zzz"])["messages"], 0);
        assert_eq!(e.of(&["zzz"])["held"], 0);
        let mut stored = json!({"messages": 7, "held": 1});
        e.update_held(&mut stored, &["zzz"]);
        assert_eq!(stored, json!({"messages": 7, "held": 1}));
        e.note("k10", Fact::Held, 2_000);
        e.note("k10", Fact::Held, 2_000);
        e.update_held(&mut stored, &["zzz", "k10"]);
        assert_eq!(stored, json!({"messages": 7, "held": 2}));
    }
}
