//! What a node saw of a key recently, for the notice and listing of a restriction: client
//! addresses, recipient domains, Subjects of the last messages, counts of messages,
//! recipients and refusals.
//!
//! An account's logins as the client typed them (`ALICE`, `Alice`), when the `[identity]`
//! fold changed them, are kept too: the key is the folded account, the spellings are the
//! evidence of how it was used.
//!
//! Refusals are of two kinds, never mixed: upstream's (its 4xx or 5xx to a RCPT and to the
//! end of data) and floodgate's own, by limit and action (`defer`, `deny`, `disconnect`, or
//! `restricted` for a MAIL FROM of a restricted key). A limit whose action lets the event
//! through (`warn`, `header`, `delay`) or takes the message (`hold`, `pace`, `reroute`)
//! refuses nothing. What is held is not counted here: it is what the hold spool holds now
//! (see [`super::held`]).
//!
//! Bounded per node: at most [`MAX_KEYS`] keys (the least recently seen is forgotten first),
//! [`MAX_ITEMS`] addresses and domains and [`MAX_SUBJECTS`] Subjects (each at most
//! [`MAX_SUBJECT_CHARS`] characters) per key, [`MAX_REFUSING`] limits named in the refusals.
//! Counts start when the key is first seen by this node (or after it was forgotten).

use std::collections::{BTreeMap, HashMap, VecDeque};
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
/// Most spellings of a login remembered per key (the last ones).
pub const MAX_LOGINS: usize = 8;
/// Most limits (with their actions) named in a key's refusals; later ones are not named.
pub const MAX_REFUSING: usize = 64;

#[derive(Default)]
struct Ring {
    ips: VecDeque<IpAddr>,
    domains: VecDeque<String>,
    subjects: VecDeque<String>,
    logins: VecDeque<String>,
    messages: u64,
    recipients: u64,
    /// Upstream's refusals of recipients.
    upstream_rcpt: u64,
    /// Upstream's refusals at the end of data.
    upstream_data: u64,
    /// floodgate's refusals: limit → action → count.
    own: BTreeMap<String, BTreeMap<String, u64>>,
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
    /// A MAIL FROM of an account whose login the client typed this way (when the fold
    /// changed it).
    Login(&'a str),
    /// floodgate refused the event: the limit that did and the action it took (its
    /// `action`, or `restricted` for a restricted key).
    Refused {
        /// The limit's name.
        limit: &'a str,
        /// The action.
        action: &'a str,
    },
    /// Upstream refused a recipient (4xx or 5xx to RCPT).
    UpstreamRefusedRecipient,
    /// Upstream refused a message (4xx or 5xx to the end of data).
    UpstreamRefusedMessage,
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
            Fact::Refused { limit, action } => {
                let named = r.own.values().map(BTreeMap::len).sum::<usize>();
                let known = r.own.get(limit).is_some_and(|a| a.contains_key(action));
                if known || named < MAX_REFUSING {
                    *r.own
                        .entry(limit.to_string())
                        .or_default()
                        .entry(action.to_string())
                        .or_default() += 1;
                }
            }
            Fact::Login(typed) => {
                if let Some(i) = r.logins.iter().position(|l| l == typed) {
                    r.logins.remove(i);
                } else if r.logins.len() >= MAX_LOGINS {
                    r.logins.pop_front();
                }
                let typed: String = typed
                    .chars()
                    .filter(|c| !c.is_control())
                    .take(MAX_SUBJECT_CHARS)
                    .collect();
                r.logins.push_back(typed);
            }
            Fact::UpstreamRefusedRecipient => r.upstream_rcpt += 1,
            Fact::UpstreamRefusedMessage => r.upstream_data += 1,
        }
    }

    /// The evidence about the first of `keys` this node has seen, as JSON: `client_ips`
    /// (most recent last), `top_recipient_domains` (`[domain, count]`, most first, at most
    /// 5), `subjects` (the last ones, most recent last), `logins` (the spellings the
    /// client typed of the key's account where they differ from it, most recent last), `messages`, `recipients`,
    /// `refusals` (`{"upstream": {"rcpt": N, "data": N}, "floodgate": {LIMIT: {ACTION: N}}}`),
    /// `held` and `held_by_node` (0 and `{}` here: the caller sets what the hold spool
    /// holds, see [`super::held::HeldNow::set_in`]), `since` (RFC 3339).
    pub fn of(&self, keys: &[&str]) -> serde_json::Value {
        let map = self.map.lock().unwrap_or_else(|e| e.into_inner());
        let Some(r) = keys.iter().find_map(|k| map.get(*k)) else {
            return json!({"client_ips": [], "top_recipient_domains": [], "subjects": [], "logins": [], "messages": 0,
                "recipients": 0, "refusals": refusals_json(0, 0, &BTreeMap::new()),
                "held": 0, "held_by_node": {}, "since": null});
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
            "logins": r.logins,
            "messages": r.messages,
            "recipients": r.recipients,
            "refusals": refusals_json(r.upstream_rcpt, r.upstream_data, &r.own),
            "held": 0,
            "held_by_node": {},
            "since": crate::time::rfc3339(r.first_us),
        })
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

fn refusals_json(
    rcpt: u64,
    data: u64,
    own: &BTreeMap<String, BTreeMap<String, u64>>,
) -> serde_json::Value {
    json!({"upstream": {"rcpt": rcpt, "data": data}, "floodgate": own})
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
        assert_eq!(v["held"], 0);
        assert_eq!(v["held_by_node"], json!({}));
        let subjects = v["subjects"].as_array().unwrap();
        assert_eq!(subjects.len(), MAX_SUBJECTS);
        assert!(subjects[0].as_str().unwrap().starts_with("s2x"));
        assert_eq!(
            subjects[4].as_str().unwrap().chars().count(),
            MAX_SUBJECT_CHARS
        );
        assert_eq!(v["client_ips"], json!(["192.0.2.7"]));
        assert_eq!(v["logins"], json!([]));
        assert_eq!(v["top_recipient_domains"][0][0], "example.org");
        assert_eq!(v["top_recipient_domains"][0][1], (MAX_ITEMS - 1) as u64);
        for i in 0..(MAX_KEYS + 10) {
            e.note(
                &format!("k{i}"),
                Fact::UpstreamRefusedRecipient,
                1_000 + i as i64,
            );
        }
        assert_eq!(e.len(), MAX_KEYS);
        assert_eq!(e.of(&["zzz"])["messages"], 0);
        assert_eq!(
            e.of(&["zzz"])["refusals"],
            json!({"upstream": {"rcpt": 0, "data": 0}, "floodgate": {}})
        );
    }

    #[test]
    fn refusals_split_upstream_from_floodgate_by_limit_and_action() {
        let e = Evidence::default();
        for _ in 0..3 {
            e.note("bob", Fact::UpstreamRefusedRecipient, 1);
        }
        e.note("bob", Fact::UpstreamRefusedMessage, 2);
        for _ in 0..4 {
            e.note(
                "bob",
                Fact::Refused {
                    limit: "user-recipients-hour",
                    action: "defer",
                },
                3,
            );
        }
        e.note(
            "bob",
            Fact::Refused {
                limit: "user-recipients-hour",
                action: "restricted",
            },
            4,
        );
        let v = e.of(&["bob"]);
        assert_eq!(
            v["refusals"],
            json!({
                "upstream": {"rcpt": 3, "data": 1},
                "floodgate": {"user-recipients-hour": {"defer": 4, "restricted": 1}},
            })
        );
    }

    #[test]
    fn the_limits_named_in_refusals_are_bounded() {
        let e = Evidence::default();
        for i in 0..(MAX_REFUSING + 5) {
            let limit = format!("l{i}");
            e.note(
                "carol",
                Fact::Refused {
                    limit: &limit,
                    action: "deny",
                },
                i as i64,
            );
        }
        // A limit already named goes on counting.
        e.note(
            "carol",
            Fact::Refused {
                limit: "l0",
                action: "deny",
            },
            100,
        );
        let v = e.of(&["carol"]);
        let own = v["refusals"]["floodgate"].as_object().unwrap();
        assert_eq!(own.len(), MAX_REFUSING);
        assert_eq!(own["l0"]["deny"], 2);
        assert!(!own.contains_key(&format!("l{}", MAX_REFUSING)));
    }

    #[test]
    fn logins_as_typed_are_kept_once_each_most_recent_last_and_bounded() {
        let e = Evidence::default();
        for typed in ["ALICE", "Alice", "ALICE"] {
            e.note("alice", Fact::Login(typed), 1);
        }
        assert_eq!(e.of(&["alice"])["logins"], json!(["Alice", "ALICE"]));
        for i in 0..20 {
            e.note("alice", Fact::Login(&format!("A{i}\u{202e}")), 2);
        }
        let v = e.of(&["alice"]);
        let logins = v["logins"].as_array().unwrap();
        assert_eq!(logins.len(), MAX_LOGINS);
        assert_eq!(logins[MAX_LOGINS - 1], "A19\u{202e}");
        assert_eq!(e.of(&["nobody"])["logins"], json!([]));
    }
}
