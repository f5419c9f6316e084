//! What a node saw of a key, for the notice and listing of a restriction: client
//! addresses with the messages each offered, recipient domains with the recipients relayed
//! to each, Subjects of the last messages, counts of messages offered and relayed, of
//! recipients relayed and of refusals, and when the key was first over a limit.
//!
//! An account's logins as the client typed them (`ALICE`, `Alice`), when the `[identity]`
//! fold changed them, are kept too: the key is the folded account, the spellings are the
//! evidence of how it was used.
//!
//! What the figures count:
//! * `offered`: messages the key began (MAIL FROM), refused or not; `offered_by_client`
//!   splits them by client address;
//! * `messages`, `recipients`: messages upstream accepted at the end of their data, and
//!   their recipients (those upstream accepted at RCPT): what was relayed. Held, paced,
//!   rerouted and refused messages are not in them;
//! * `top_recipient_domains`: the recipients relayed to each domain;
//! * refusals of two kinds, never mixed: upstream's (its 4xx or 5xx to a RCPT and to the
//!   end of data) and floodgate's own, by limit and action (`defer`, `deny`, `disconnect`,
//!   or `restricted` for a MAIL FROM of a restricted key). A limit whose action lets the
//!   event through (`warn`, `header`, `delay`) or takes the message (`hold`, `pace`,
//!   `reroute`) refuses nothing. What is held is not counted here: it is what the hold
//!   spool holds now (see [`super::held`]).
//!
//! Every count is exact (a counter per key, per address, per domain), within these bounds
//! per node: at most [`MAX_KEYS`] keys (the least recently seen is forgotten first); per key
//! [`MAX_CLIENTS`] client addresses and [`MAX_DOMAINS`] recipient domains counted one by one
//! (the first ones seen; later ones are counted together in `offered_by_other_clients` and
//! `recipients_other_domains`), the last [`MAX_ITEMS`] addresses listed in `client_ips`,
//! [`MAX_SUBJECTS`] Subjects (each at most [`MAX_SUBJECT_CHARS`] characters),
//! [`MAX_REFUSING`] limits named in the refusals. Counts start when the key is first seen
//! by this node (or after it was forgotten).

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::net::IpAddr;
use std::sync::Mutex;

use serde_json::json;

/// Most keys remembered per node.
pub const MAX_KEYS: usize = 10_000;
/// Most client addresses listed per key (the last ones) in `client_ips`.
pub const MAX_ITEMS: usize = 32;
/// Most client addresses counted one by one per key.
pub const MAX_CLIENTS: usize = 64;
/// Most recipient domains counted one by one per key.
pub const MAX_DOMAINS: usize = 100;
/// Most recipient domains shown in `top_recipient_domains`.
pub const TOP_DOMAINS: usize = 10;
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
    /// MAIL FROMs per client address.
    by_client: HashMap<IpAddr, u64>,
    /// MAIL FROMs from addresses past [`MAX_CLIENTS`].
    other_clients: u64,
    /// Relayed recipients per domain.
    domains: HashMap<String, u64>,
    /// Relayed recipients at domains past [`MAX_DOMAINS`].
    other_domains: u64,
    subjects: VecDeque<String>,
    logins: VecDeque<String>,
    offered: u64,
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
    /// When a limit was first over for the key.
    first_over_us: Option<i64>,
}

/// Adds one to `name`'s count in `map` when it is counted or there is room; else to `other`.
fn count_bounded<K: std::hash::Hash + Eq>(
    map: &mut HashMap<K, u64>,
    other: &mut u64,
    name: K,
    n: u64,
    max: usize,
) {
    if let Some(c) = map.get_mut(&name) {
        *c += n;
    } else if map.len() < max {
        map.insert(name, n);
    } else {
        *other += n;
    }
}

/// The pairs of `map`, most first (then by name), at most `max`.
fn most_first<K: ToString>(map: &HashMap<K, u64>, max: usize) -> Vec<(String, u64)> {
    let mut v: Vec<(String, u64)> = map.iter().map(|(k, n)| (k.to_string(), *n)).collect();
    v.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    v.truncate(max);
    v
}

/// The domain of a recipient address, lowercased.
fn domain_of(rcpt: &str) -> String {
    rcpt.rsplit_once('@')
        .map_or("", |(_, d)| d)
        .trim_end_matches('>')
        .to_ascii_lowercase()
}

/// One fact about a key.
#[derive(Clone, Copy, Debug)]
pub enum Fact<'a> {
    /// A MAIL FROM from this client address.
    Mail(Option<IpAddr>),
    /// Upstream accepted a message at the end of its data, with these recipients.
    Relayed(&'a [String]),
    /// A limit was over for the key.
    Over,
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

/// What this node saw of each key.
#[derive(Default)]
pub struct Evidence {
    map: Mutex<HashMap<String, Ring>>,
}

impl Ring {
    fn mail(&mut self, ip: Option<IpAddr>) {
        self.offered += 1;
        let Some(ip) = ip else {
            return;
        };
        count_bounded(
            &mut self.by_client,
            &mut self.other_clients,
            ip,
            1,
            MAX_CLIENTS,
        );
        // Most recent last.
        if let Some(i) = self.ips.iter().position(|x| *x == ip) {
            self.ips.remove(i);
        } else if self.ips.len() >= MAX_ITEMS {
            self.ips.pop_front();
        }
        self.ips.push_back(ip);
    }

    fn relayed(&mut self, rcpts: &[String]) {
        self.messages += 1;
        self.recipients += rcpts.len() as u64;
        for r in rcpts {
            count_bounded(
                &mut self.domains,
                &mut self.other_domains,
                domain_of(r),
                1,
                MAX_DOMAINS,
            );
        }
    }

    fn refused(&mut self, limit: &str, action: &str) {
        let named = self.own.values().map(BTreeMap::len).sum::<usize>();
        let known = self.own.get(limit).is_some_and(|a| a.contains_key(action));
        if known || named < MAX_REFUSING {
            *self
                .own
                .entry(limit.to_string())
                .or_default()
                .entry(action.to_string())
                .or_default() += 1;
        }
    }

    fn login(&mut self, typed: &str) {
        if let Some(i) = self.logins.iter().position(|l| l == typed) {
            self.logins.remove(i);
        } else if self.logins.len() >= MAX_LOGINS {
            self.logins.pop_front();
        }
        self.logins.push_back(shown(typed));
    }
}

/// Text kept for people: no controls, at most [`MAX_SUBJECT_CHARS`] characters.
fn shown(s: &str) -> String {
    s.chars()
        .filter(|c| !c.is_control())
        .take(MAX_SUBJECT_CHARS)
        .collect()
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
            Fact::Mail(ip) => r.mail(ip),
            Fact::Relayed(rcpts) => r.relayed(rcpts),
            Fact::Over => {
                r.first_over_us.get_or_insert(now_us);
            }
            Fact::Subject(s) => {
                if r.subjects.len() >= MAX_SUBJECTS {
                    r.subjects.pop_front();
                }
                r.subjects.push_back(shown(s));
            }
            Fact::Refused { limit, action } => r.refused(limit, action),
            Fact::Login(typed) => r.login(typed),
            Fact::UpstreamRefusedRecipient => r.upstream_rcpt += 1,
            Fact::UpstreamRefusedMessage => r.upstream_data += 1,
        }
    }

    /// Whether this node has seen any of `keys`.
    pub fn knows(&self, keys: &[&str]) -> bool {
        let map = self.map.lock().unwrap_or_else(|e| e.into_inner());
        keys.iter().any(|k| map.contains_key(*k))
    }

    /// The evidence about the first of `keys` this node has seen, as JSON: `client_ips`
    /// (most recent last), `offered_by_client` (`[address, messages offered]`, most first)
    /// and `offered_by_other_clients`, `top_recipient_domains` (`[domain, recipients
    /// relayed]`, most first, at most [`TOP_DOMAINS`]), `recipient_domains` (how many
    /// domains are counted one by one) and `recipients_other_domains`, `subjects` (the last
    /// ones, most recent last), `logins` (the spellings the client typed of the key's account
    /// where they differ from it, most recent last), `offered`, `messages`, `recipients`,
    /// `refusals` (`{"upstream": {"rcpt": N, "data": N}, "floodgate": {LIMIT: {ACTION:
    /// N}}}`), `held` and `held_by_node` (0 and `{}` here: the caller sets what the hold
    /// spool holds, see [`super::held::HeldNow::set_in`]), `since` (RFC 3339) and
    /// `first_over` (RFC 3339, or null: when a limit was first over for the key).
    pub fn of(&self, keys: &[&str]) -> serde_json::Value {
        let map = self.map.lock().unwrap_or_else(|e| e.into_inner());
        let empty = Ring::default();
        let found = keys.iter().find_map(|k| map.get(*k));
        let r = found.unwrap_or(&empty);
        json!({
            "client_ips": r.ips.iter().map(|i| i.to_string()).collect::<Vec<_>>(),
            "offered_by_client": most_first(&r.by_client, MAX_CLIENTS),
            "offered_by_other_clients": r.other_clients,
            "top_recipient_domains": most_first(&r.domains, TOP_DOMAINS),
            "recipient_domains": r.domains.len(),
            "recipients_other_domains": r.other_domains,
            "subjects": r.subjects,
            "logins": r.logins,
            "offered": r.offered,
            "messages": r.messages,
            "recipients": r.recipients,
            "refusals": refusals_json(r.upstream_rcpt, r.upstream_data, &r.own),
            "held": 0,
            "held_by_node": {},
            "since": found.map(|r| crate::time::rfc3339(r.first_us)),
            "first_over": r.first_over_us.map(crate::time::rfc3339),
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
        let other: IpAddr = "192.0.2.8".parse().unwrap();
        for i in 0..100 {
            e.note(
                "alice",
                Fact::Mail(Some(if i % 4 == 0 { other } else { ip })),
                i,
            );
            let rcpts = [format!("u{i}@Example.org"), format!("v{i}@other.net>")];
            e.note("alice", Fact::Relayed(&rcpts), i);
        }
        e.note("alice", Fact::Mail(None), 100);
        e.note("alice", Fact::Relayed(&["x@other.net".to_string()]), 101);
        for i in 0..7 {
            e.note(
                "alice",
                Fact::Subject(&format!("s{i}\r\n{}", "x".repeat(300))),
                103,
            );
        }
        let v = e.of(&["nobody", "alice"]);
        assert_eq!(v["offered"], 101);
        assert_eq!(v["messages"], 101);
        assert_eq!(v["recipients"], 201);
        assert_eq!(v["held"], 0);
        assert_eq!(v["held_by_node"], json!({}));
        assert_eq!(v["first_over"], json!(null));
        let subjects = v["subjects"].as_array().unwrap();
        assert_eq!(subjects.len(), MAX_SUBJECTS);
        assert!(subjects[0].as_str().unwrap().starts_with("s2x"));
        assert_eq!(
            subjects[4].as_str().unwrap().chars().count(),
            MAX_SUBJECT_CHARS
        );
        // The most recent last, each once; counted exactly.
        assert_eq!(v["client_ips"], json!(["192.0.2.8", "192.0.2.7"]));
        assert_eq!(
            v["offered_by_client"],
            json!([["192.0.2.7", 75], ["192.0.2.8", 25]])
        );
        assert_eq!(v["logins"], json!([]));
        assert_eq!(
            v["top_recipient_domains"],
            json!([["other.net", 101], ["example.org", 100]])
        );
        assert_eq!(v["recipient_domains"], 2);
        e.note("alice", Fact::Over, 200);
        e.note("alice", Fact::Over, 300);
        assert_eq!(e.of(&["alice"])["first_over"], crate::time::rfc3339(200));
        for i in 0..(MAX_KEYS + 10) {
            e.note(
                &format!("k{i}"),
                Fact::UpstreamRefusedRecipient,
                1_000 + i as i64,
            );
        }
        assert_eq!(e.len(), MAX_KEYS);
        assert!(!e.knows(&["alice"]) && e.knows(&["zzz", "k20"]));
        assert_eq!(e.of(&["zzz"])["messages"], 0);
        assert_eq!(e.of(&["zzz"])["since"], json!(null));
        assert_eq!(
            e.of(&["zzz"])["refusals"],
            json!({"upstream": {"rcpt": 0, "data": 0}, "floodgate": {}})
        );
    }

    #[test]
    fn addresses_and_domains_past_their_bounds_are_counted_together() {
        let e = Evidence::default();
        for i in 0..(MAX_CLIENTS + 6) {
            let ip: IpAddr = format!("10.0.{}.{}", i / 200, i % 200).parse().unwrap();
            e.note("bob", Fact::Mail(Some(ip)), i as i64);
        }
        let rcpts: Vec<String> = (0..(MAX_DOMAINS + 9))
            .map(|i| format!("a@d{i}.example"))
            .collect();
        e.note("bob", Fact::Relayed(&rcpts), 1);
        e.note("bob", Fact::Relayed(&rcpts[..3]), 2);
        let v = e.of(&["bob"]);
        assert_eq!(v["offered"], (MAX_CLIENTS + 6) as u64);
        assert_eq!(
            v["offered_by_client"].as_array().unwrap().len(),
            MAX_CLIENTS
        );
        assert_eq!(v["offered_by_other_clients"], 6);
        assert_eq!(v["client_ips"].as_array().unwrap().len(), MAX_ITEMS);
        assert_eq!(v["recipients"], (MAX_DOMAINS + 12) as u64);
        assert_eq!(v["recipient_domains"], MAX_DOMAINS);
        assert_eq!(v["recipients_other_domains"], 9);
        let top = v["top_recipient_domains"].as_array().unwrap();
        assert_eq!(top.len(), TOP_DOMAINS);
        assert_eq!(top[0], json!(["d0.example", 2]));
        assert_eq!(top[3], json!(["d10.example", 1]));
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
