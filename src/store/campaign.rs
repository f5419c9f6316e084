//! Campaign ledgers: for each value of a message key (`${fingerprint}` band,
//! `${link_domain}`, `${subject_shape}`) that a `restrict_senders` limit counts, who sent a
//! message with it within the limit's period: the sender (the account, or the client
//! address for mail without AUTH), copies, recipients, and what the last copy looked like.
//! When the limit is over, every sender in the ledger is restricted, and the ledger is
//! marked as a campaign that `floodgate campaigns` lists.
//!
//! This file holds the types and the in-memory book; Redis keeps the same ledgers as hashes
//! (`store::redis::campaign`), so that a fleet sees every sender.

use std::collections::HashMap;
use std::sync::Mutex;

/// Most ledgers the in-memory book keeps (the least recently written is dropped first).
pub const MAX_LEDGERS: usize = 100_000;
/// Most senders one ledger keeps (the least recent is dropped first).
pub const MAX_SENDERS: usize = 1_000;
/// How long a campaign stays listed after it was last over.
pub const LISTED_US: i64 = 7 * 86_400 * 1_000_000;

/// One message with a message key value, as the ledger takes it.
#[derive(Clone, Debug, PartialEq)]
pub struct CampaignNote {
    /// The message key's database key (the limit's key for this value).
    pub key: String,
    /// Who sent it: the authenticated account, else the client address.
    pub sender: String,
    /// Its recipients.
    pub recipients: u64,
    /// What the copy looked like, as JSON (`client_ip`, `subject`, `link_domains`): the
    /// last copy's is kept.
    pub info: String,
    /// The limit's period: senders not heard of for longer are forgotten.
    pub period_us: i64,
}

/// One sender of a ledger.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct CampaignSender {
    /// The account, or the client address.
    pub sender: String,
    /// Messages with the key.
    pub copies: u64,
    /// Their recipients.
    pub recipients: u64,
    /// When the last one was seen (µs since the epoch).
    pub last_us: i64,
    /// The last copy's JSON (see [`CampaignNote::info`]).
    pub info: String,
}

/// A ledger marked as a campaign: its limit was over.
#[derive(Clone, Debug, PartialEq)]
pub struct Campaign {
    /// The message key's database key.
    pub key: String,
    /// The limit that was over.
    pub limit: String,
    /// When it was first marked (µs).
    pub since_us: i64,
    /// When it was last marked (µs).
    pub last_us: i64,
    /// The senders within the period, most recent first.
    pub senders: Vec<CampaignSender>,
}

#[derive(Default)]
struct Ledger {
    senders: HashMap<String, CampaignSender>,
    period_us: i64,
    written_us: i64,
    marked: Option<(String, i64, i64)>,
}

impl Ledger {
    fn forget_old(&mut self, now_us: i64) {
        let period = self.period_us;
        self.senders
            .retain(|_, s| now_us.saturating_sub(s.last_us) <= period);
    }

    fn sorted(&self) -> Vec<CampaignSender> {
        let mut v: Vec<CampaignSender> = self.senders.values().cloned().collect();
        v.sort_by(|a, b| b.last_us.cmp(&a.last_us).then(a.sender.cmp(&b.sender)));
        v
    }
}

/// The ledgers of one node (the memory store's, and the Redis store's copy while Redis is
/// down).
#[derive(Default)]
pub struct CampaignBook {
    ledgers: Mutex<HashMap<String, Ledger>>,
}

impl CampaignBook {
    /// Adds `note` at `now_us`; answers the ledger's senders within the period, most
    /// recent first.
    pub fn note(&self, note: &CampaignNote, now_us: i64) -> Vec<CampaignSender> {
        let mut map = self.ledgers.lock().unwrap_or_else(|e| e.into_inner());
        if !map.contains_key(&note.key) && map.len() >= MAX_LEDGERS {
            if let Some(old) = map
                .iter()
                .min_by_key(|(_, l)| l.written_us)
                .map(|(k, _)| k.clone())
            {
                map.remove(&old);
            }
        }
        let l = map.entry(note.key.clone()).or_default();
        l.period_us = note.period_us.max(l.period_us);
        l.written_us = now_us;
        l.forget_old(now_us);
        if !l.senders.contains_key(&note.sender) && l.senders.len() >= MAX_SENDERS {
            if let Some(old) = l
                .senders
                .values()
                .min_by_key(|s| s.last_us)
                .map(|s| s.sender.clone())
            {
                l.senders.remove(&old);
            }
        }
        let s = l
            .senders
            .entry(note.sender.clone())
            .or_insert_with(|| CampaignSender {
                sender: note.sender.clone(),
                copies: 0,
                recipients: 0,
                last_us: now_us,
                info: String::new(),
            });
        s.copies += 1;
        s.recipients += note.recipients;
        s.last_us = now_us;
        s.info = note.info.clone();
        l.sorted()
    }

    /// Marks `key`'s ledger as a campaign of `limit` at `now_us`.
    pub fn mark(&self, key: &str, limit: &str, now_us: i64) {
        let mut map = self.ledgers.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(l) = map.get_mut(key) {
            let since = l.marked.as_ref().map_or(now_us, |m| m.1);
            l.marked = Some((limit.to_string(), since, now_us));
        }
    }

    /// The ledgers marked within [`LISTED_US`] of `now_us`, most recently marked first.
    pub fn campaigns(&self, now_us: i64) -> Vec<Campaign> {
        let mut map = self.ledgers.lock().unwrap_or_else(|e| e.into_inner());
        let mut out = Vec::new();
        for (key, l) in map.iter_mut() {
            let Some((limit, since, last)) = l.marked.clone() else {
                continue;
            };
            if now_us.saturating_sub(last) > LISTED_US {
                continue;
            }
            l.forget_old(now_us);
            out.push(Campaign {
                key: key.clone(),
                limit,
                since_us: since,
                last_us: last,
                senders: l.sorted(),
            });
        }
        out.sort_by(|a, b| b.last_us.cmp(&a.last_us).then(a.key.cmp(&b.key)));
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn note(key: &str, sender: &str, rcpts: u64) -> CampaignNote {
        CampaignNote {
            key: key.into(),
            sender: sender.into(),
            recipients: rcpts,
            info: format!("{{\"from\":\"{sender}\"}}"),
            period_us: 3_600_000_000,
        }
    }

    #[test]
    fn senders_are_counted_and_forgotten_after_the_period() {
        let b = CampaignBook::default();
        assert_eq!(b.note(&note("k", "a", 5), 0).len(), 1);
        let s = b.note(&note("k", "a", 5), 10);
        assert_eq!((s[0].copies, s[0].recipients), (2, 10));
        let s = b.note(&note("k", "b", 1), 20);
        assert_eq!(
            s.iter().map(|s| s.sender.as_str()).collect::<Vec<_>>(),
            ["b", "a"]
        );
        // Another key is another ledger.
        assert_eq!(b.note(&note("j", "c", 1), 30).len(), 1);
        // An hour and more after a's last copy, only the new sender and b... b too is old.
        let s = b.note(&note("k", "d", 1), 3_600_000_011);
        assert_eq!(
            s.iter().map(|s| s.sender.as_str()).collect::<Vec<_>>(),
            ["d", "b"]
        );
    }

    #[test]
    fn only_marked_ledgers_are_campaigns() {
        let b = CampaignBook::default();
        b.note(&note("k", "a", 5), 0);
        b.note(&note("j", "b", 5), 0);
        assert!(b.campaigns(1).is_empty());
        b.mark("k", "campaign", 5);
        b.mark("k", "campaign", 7);
        b.mark("unknown", "campaign", 7);
        let c = b.campaigns(10);
        assert_eq!(c.len(), 1);
        assert_eq!(
            (c[0].key.as_str(), c[0].since_us, c[0].last_us),
            ("k", 5, 7)
        );
        assert_eq!(c[0].senders[0].sender, "a");
        assert!(b.campaigns(7 + LISTED_US + 1).is_empty());
    }

    #[test]
    fn a_ledger_keeps_at_most_its_bound_of_senders() {
        let b = CampaignBook::default();
        for i in 0..(MAX_SENDERS as i64 + 10) {
            b.note(&note("k", &format!("s{i}"), 1), i);
        }
        let s = b.note(&note("k", "last", 1), 1_000_000);
        assert_eq!(s.len(), MAX_SENDERS);
        assert_eq!(s[0].sender, "last");
        assert!(!s.iter().any(|s| s.sender == "s0"));
    }
}
