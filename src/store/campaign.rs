//! Campaign ledgers: one message sent from several accounts, grouped into one campaign.
//!
//! # Grouping
//!
//! A message has several `${fingerprint}` values (one per MinHash band). Bands that occur in
//! one message are linked: the store keeps, per band value seen within the period, the
//! campaign it belongs to, and a message whose bands belong to no campaign starts one whose
//! id is `c:` and its smallest band (stable: the same text gives the same id on every node).
//! A message whose bands belong to two campaigns merges them (union-find): the campaign with
//! more copies survives (then the smaller id), the other's senders and totals are added to
//! it, and it becomes an alias of the survivor, so bands still naming it resolve to the
//! survivor. Spun copies that pairwise share different bands (A–B share one band, B–C
//! another) are thereby one campaign. Other message keys (`${link_domain}`,
//! `${subject_shape}`) are not linked: each value is its own campaign, its id the value.
//!
//! # The ledger
//!
//! Each campaign keeps, per sender (the account, or the client address for mail without
//! AUTH) seen within the period: copies, recipients, the last copy's time and a short JSON
//! of what it looked like (client address, Subject capped at [`SUBJECT_CHARS`] characters,
//! link domains), the times and recipients of its last [`RECENT_COPIES`] copies (the
//! evidence rule reads them against the account's release time), and when this campaign
//! restricted it. The campaign's totals (`~copies`, `~recipients`) count every copy noted,
//! held or refused ones too, and are not reduced when a sender is forgotten.
//!
//! Bounded by design: at most [`MAX_SENDERS`] senders per campaign, [`MAX_CAMPAIGNS`]
//! campaigns and [`MAX_BANDS`] band entries per node (the least recently written go first);
//! bands, senders and unmarked campaigns expire with the period, marked ones
//! [`LISTED_US`] after their last mark (swept every few thousand messages). Measured
//! (`tests/limits/campaign_memory.rs`): about 11.8 KB per campaign with the 72 band entries
//! of a message with a Subject (24 text bands, 48 Subject-joined ones; about 160 bytes
//! each) and one sender, 0.8 KB per further sender. The free text kept per sender is at most about
//! 300 bytes (the capped Subject, up to [`MAX_INFO_DOMAINS`] link domains).
//!
//! This file holds the types and the in-memory book; Redis keeps the same data in one hash
//! slot (`store::redis::campaign`), so that a fleet sees every sender and groups alike.

use std::collections::HashMap;
use std::sync::Mutex;

/// Most campaigns the in-memory book keeps (the least recently written is dropped first).
pub const MAX_CAMPAIGNS: usize = 50_000;
/// Most band entries (band value → campaign) the in-memory book keeps: the bands of
/// 20,000 messages without a Subject (24 each), of 6,600 with one (72 each); the oldest
/// tenth is dropped when full.
pub const MAX_BANDS: usize = 480_000;
/// Most senders one campaign keeps (the least recent is dropped first).
pub const MAX_SENDERS: usize = 1_000;
/// How long a campaign stays listed after it was last over.
pub const LISTED_US: i64 = 7 * 86_400 * 1_000_000;
/// How long a release is remembered for the evidence rule (longer than any listing).
pub const RELEASES_KEPT_US: i64 = LISTED_US + 86_400 * 1_000_000;
/// Longest Subject kept per sender, in characters (as the evidence keeps).
pub const SUBJECT_CHARS: usize = 200;
/// Most link domains kept per sender.
pub const MAX_INFO_DOMAINS: usize = 5;
/// Copies per sender whose time and recipients are kept (the evidence rule's copy count).
pub const RECENT_COPIES: usize = 2;
/// Longest chain of merged campaigns followed to the survivor.
pub const ALIAS_DEPTH: usize = 16;

/// `text` cut to at most `max` characters (an ellipsis marks the cut).
pub fn capped(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        None => text.to_string(),
        Some((at, _)) => {
            let cut = text[..at]
                .char_indices()
                .nth(max.saturating_sub(1))
                .map_or(at, |(i, _)| i);
            format!("{}…", &text[..cut])
        }
    }
}

/// The id of a new campaign of linked `values`: `c:` and the smallest value.
pub fn new_campaign_id(values: &[String]) -> String {
    format!(
        "c:{}",
        values.iter().min().map(String::as_str).unwrap_or_default()
    )
}

/// One message with message key values, as the ledger takes it.
#[derive(Clone, Debug, PartialEq)]
pub struct CampaignJoin {
    /// The values: every `${fingerprint}` band of the message (`link`), or one value.
    pub values: Vec<String>,
    /// Whether the values are linked into one campaign (fingerprint bands).
    pub link: bool,
    /// Who sent it: the authenticated account, else the client address.
    pub sender: String,
    /// Its recipients.
    pub recipients: u64,
    /// What the copy looked like, as JSON (`client_ip`, `subject`, `link_domains`), each
    /// field capped ([`SUBJECT_CHARS`], [`MAX_INFO_DOMAINS`]): the last copy's is kept.
    pub info: String,
    /// The period: bands and senders not seen for longer are forgotten.
    pub period_us: i64,
}

/// One sender of a campaign.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CampaignSender {
    /// The account, or the client address.
    pub sender: String,
    /// Copies it sent (within the period of its last one).
    pub copies: u64,
    /// Their recipients.
    pub recipients: u64,
    /// When the last one was seen (µs since the epoch).
    pub last_us: i64,
    /// The last copy's JSON (see [`CampaignJoin::info`]).
    pub info: String,
    /// Its last [`RECENT_COPIES`] copies: (time µs, recipients), oldest first.
    pub recent: Vec<(i64, u64)>,
    /// When this campaign restricted it (0: never).
    pub restricted_us: i64,
    /// When an admin last released it (0: not within [`RELEASES_KEPT_US`]).
    pub released_us: i64,
}

impl CampaignSender {
    /// Adds one copy at `now_us`.
    fn add(&mut self, recipients: u64, info: &str, now_us: i64) {
        self.copies += 1;
        self.recipients += recipients;
        self.last_us = now_us;
        self.info = info.to_string();
        self.recent.push((now_us, recipients));
        if self.recent.len() > RECENT_COPIES {
            self.recent.remove(0);
        }
    }

    /// Adds `other` (the same sender in a campaign merged into this one).
    fn absorb(&mut self, other: CampaignSender) {
        self.copies += other.copies;
        self.recipients += other.recipients;
        if other.last_us > self.last_us {
            self.last_us = other.last_us;
            self.info = other.info;
        }
        self.recent.extend(other.recent);
        self.recent.sort_unstable();
        let extra = self.recent.len().saturating_sub(RECENT_COPIES);
        self.recent.drain(..extra);
        self.restricted_us = self.restricted_us.max(other.restricted_us);
    }

    /// The compact text the Redis ledger keeps: `copies|recipients|last|restricted|t:r,t:r|info`.
    pub fn encode(&self) -> String {
        let recent: Vec<String> = self
            .recent
            .iter()
            .map(|(t, r)| format!("{t}:{r}"))
            .collect();
        format!(
            "{}|{}|{}|{}|{}|{}",
            self.copies,
            self.recipients,
            self.last_us,
            self.restricted_us,
            recent.join(","),
            self.info
        )
    }

    /// Reads [`CampaignSender::encode`]'s text; `None` when malformed.
    pub fn decode(sender: &str, text: &str) -> Option<CampaignSender> {
        let mut p = text.splitn(6, '|');
        let mut n = || p.next()?.parse::<i64>().ok();
        let (copies, recipients, last_us, restricted_us) = (n()?, n()?, n()?, n()?);
        let recent = p
            .next()?
            .split(',')
            .filter(|s| !s.is_empty())
            .map(|s| {
                let (t, r) = s.split_once(':')?;
                Some((t.parse().ok()?, r.parse().ok()?))
            })
            .collect::<Option<Vec<(i64, u64)>>>()?;
        Some(CampaignSender {
            sender: sender.to_string(),
            copies: u64::try_from(copies).ok()?,
            recipients: u64::try_from(recipients).ok()?,
            last_us,
            info: p.next()?.to_string(),
            recent,
            restricted_us,
            released_us: 0,
        })
    }
}

/// The answer to a join: the campaign the message belongs to, as it is after the message.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CampaignLedger {
    /// The campaign's id (the value a limit on `${fingerprint}` counts under).
    pub id: String,
    /// Every copy noted, since the campaign began.
    pub copies: u64,
    /// Their recipients.
    pub recipients: u64,
    /// The senders within the period, most recent first (with their release times).
    pub senders: Vec<CampaignSender>,
    /// When a limit last found it (its last mark, µs; 0: never).
    pub found_us: i64,
}

/// A campaign marked as found: its limit was over.
#[derive(Clone, Debug, PartialEq)]
pub struct Campaign {
    /// The campaign's id.
    pub key: String,
    /// The limit that was over.
    pub limit: String,
    /// When it was first marked (µs).
    pub since_us: i64,
    /// When it was last marked (µs).
    pub last_us: i64,
    /// Every copy noted.
    pub copies: u64,
    /// Their recipients.
    pub recipients: u64,
    /// The senders within the period, most recent first.
    pub senders: Vec<CampaignSender>,
}

/// What a mark answers: whether the campaign's alert is due now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MarkAnswer {
    /// First found: its one alert.
    Found,
    /// Found before, its last alert at least the interval ago: an update.
    Update,
    /// No alert now.
    Quiet,
}

/// The mark of a found campaign.
#[derive(Clone, Debug, PartialEq)]
struct Mark {
    limit: String,
    since_us: i64,
    last_us: i64,
    alerted_us: i64,
}

#[derive(Default)]
struct Ledger {
    /// Merged into this campaign.
    alias: Option<String>,
    senders: HashMap<String, CampaignSender>,
    copies: u64,
    recipients: u64,
    period_us: i64,
    written_us: i64,
    mark: Option<Mark>,
}

impl Ledger {
    fn forget_old(&mut self, now_us: i64) {
        let period = self.period_us;
        self.senders
            .retain(|_, s| now_us.saturating_sub(s.last_us) <= period);
    }

    fn sorted(&self, released: &HashMap<String, i64>) -> Vec<CampaignSender> {
        let mut v: Vec<CampaignSender> = self
            .senders
            .values()
            .map(|s| CampaignSender {
                released_us: released.get(&s.sender).copied().unwrap_or(0),
                ..s.clone()
            })
            .collect();
        v.sort_by(|a, b| b.last_us.cmp(&a.last_us).then(a.sender.cmp(&b.sender)));
        v
    }

    fn expired(&self, now_us: i64) -> bool {
        let kept = match &self.mark {
            Some(_) if self.alias.is_none() => LISTED_US.max(self.period_us),
            _ => self.period_us,
        };
        now_us.saturating_sub(
            self.written_us
                .max(self.mark.as_ref().map_or(0, |m| m.last_us)),
        ) > kept
    }

    fn note(&mut self, j: &CampaignJoin, now_us: i64) {
        self.period_us = self.period_us.max(j.period_us);
        self.written_us = now_us;
        self.forget_old(now_us);
        if !self.senders.contains_key(&j.sender) && self.senders.len() >= MAX_SENDERS {
            if let Some(old) = self
                .senders
                .values()
                .min_by_key(|s| s.last_us)
                .map(|s| s.sender.clone())
            {
                self.senders.remove(&old);
            }
        }
        self.senders
            .entry(j.sender.clone())
            .or_insert_with(|| CampaignSender {
                sender: j.sender.clone(),
                ..CampaignSender::default()
            })
            .add(j.recipients, &j.info, now_us);
        self.copies += 1;
        self.recipients += j.recipients;
    }

    /// Adds `other`'s senders, totals and mark (a campaign merged into this one).
    fn absorb(&mut self, other: Ledger) {
        for (k, s) in other.senders {
            let room = self.senders.len() < MAX_SENDERS;
            match self.senders.get_mut(&k) {
                Some(mine) => mine.absorb(s),
                None if room => {
                    self.senders.insert(k, s);
                }
                None => {}
            }
        }
        self.copies += other.copies;
        self.recipients += other.recipients;
        self.period_us = self.period_us.max(other.period_us);
        self.mark = match (self.mark.take(), other.mark) {
            (Some(a), Some(b)) => Some(Mark {
                limit: a.limit,
                since_us: a.since_us.min(b.since_us),
                last_us: a.last_us.max(b.last_us),
                alerted_us: a.alerted_us.max(b.alerted_us),
            }),
            (a, b) => a.or(b),
        };
    }
}

/// Joins between two sweeps of what expired.
const SWEEP_EVERY: u64 = 4_096;

#[derive(Default)]
struct Book {
    /// Band value → (campaign id, until µs).
    bands: HashMap<String, (String, i64)>,
    ledgers: HashMap<String, Ledger>,
    /// Account → when an admin released it.
    released: HashMap<String, i64>,
    /// Joins so far (every [`SWEEP_EVERY`]th sweeps).
    joins: u64,
}

impl Book {
    /// Every [`SWEEP_EVERY`] joins: drops the bands, campaigns and releases that expired,
    /// so memory follows the period and not only the bounds.
    fn sweep(&mut self, now_us: i64) {
        self.joins += 1;
        if self.joins % SWEEP_EVERY != 0 {
            return;
        }
        self.bands.retain(|_, (_, until)| *until >= now_us);
        self.ledgers.retain(|_, l| !l.expired(now_us));
        self.released
            .retain(|_, t| now_us.saturating_sub(*t) <= RELEASES_KEPT_US);
    }

    /// The campaign `id` stands for now (following merges).
    fn root(&self, mut id: String) -> String {
        for _ in 0..ALIAS_DEPTH {
            match self.ledgers.get(&id).and_then(|l| l.alias.clone()) {
                Some(a) => id = a,
                None => break,
            }
        }
        id
    }

    /// Makes room for one more campaign: drops expired ones, then the least recently
    /// written.
    fn room_for_ledger(&mut self, now_us: i64) {
        if self.ledgers.len() < MAX_CAMPAIGNS {
            return;
        }
        self.ledgers.retain(|_, l| !l.expired(now_us));
        if self.ledgers.len() >= MAX_CAMPAIGNS {
            if let Some(old) = self
                .ledgers
                .iter()
                .min_by_key(|(_, l)| l.written_us)
                .map(|(k, _)| k.clone())
            {
                self.ledgers.remove(&old);
            }
        }
    }

    /// Makes room for `n` more bands: drops expired ones, then the oldest tenth.
    fn room_for_bands(&mut self, n: usize, now_us: i64) {
        if self.bands.len() + n <= MAX_BANDS {
            return;
        }
        self.bands.retain(|_, (_, until)| *until >= now_us);
        if self.bands.len() + n > MAX_BANDS {
            let mut untils: Vec<i64> = self.bands.values().map(|(_, u)| *u).collect();
            untils.sort_unstable();
            let at = (untils.len() / 10)
                .max(n)
                .min(untils.len().saturating_sub(1));
            if let Some(&cut) = untils.get(at) {
                self.bands.retain(|_, (_, until)| *until > cut);
            }
        }
        if self.released.len() > MAX_BANDS / 10 {
            self.released
                .retain(|_, t| now_us.saturating_sub(*t) <= RELEASES_KEPT_US);
        }
    }

    /// The campaign the join's message belongs to, merging the campaigns its bands link.
    fn resolve(&mut self, j: &CampaignJoin, now_us: i64) -> String {
        if !j.link {
            return j.values.first().cloned().unwrap_or_default();
        }
        let mut roots: Vec<String> = Vec::new();
        for v in &j.values {
            if let Some((id, until)) = self.bands.get(v) {
                if *until >= now_us {
                    let r = self.root(id.clone());
                    if self.ledgers.contains_key(&r) && !roots.contains(&r) {
                        roots.push(r);
                    }
                }
            }
        }
        let id = if roots.is_empty() {
            self.root(new_campaign_id(&j.values))
        } else {
            let survivor = roots
                .iter()
                .max_by(|a, b| {
                    let ca = self.ledgers.get(*a).map_or(0, |l| l.copies);
                    let cb = self.ledgers.get(*b).map_or(0, |l| l.copies);
                    ca.cmp(&cb).then(b.cmp(a))
                })
                .cloned()
                .unwrap_or_default();
            for r in roots.iter().filter(|r| **r != survivor) {
                if let Some(mut other) = self.ledgers.remove(r) {
                    let absorbed = std::mem::take(&mut other);
                    self.ledgers.insert(
                        r.clone(),
                        Ledger {
                            alias: Some(survivor.clone()),
                            period_us: absorbed.period_us,
                            written_us: now_us,
                            ..Ledger::default()
                        },
                    );
                    if let Some(s) = self.ledgers.get_mut(&survivor) {
                        s.absorb(absorbed);
                    }
                }
            }
            survivor
        };
        self.room_for_bands(j.values.len(), now_us);
        // As Redis keeps them: the period and a second.
        let until = now_us.saturating_add(j.period_us).saturating_add(1_000_000);
        for v in &j.values {
            self.bands.insert(v.clone(), (id.clone(), until));
        }
        id
    }
}

/// The campaigns of one node (the memory store's, and the Redis store's while Redis is
/// down).
#[derive(Default)]
pub struct CampaignBook {
    book: Mutex<Book>,
}

impl CampaignBook {
    /// Notes `j`'s message at `now_us` in the campaign it belongs to (grouping its bands);
    /// answers that campaign.
    pub fn join(&self, j: &CampaignJoin, now_us: i64) -> CampaignLedger {
        let mut b = self.book.lock().unwrap_or_else(|e| e.into_inner());
        b.sweep(now_us);
        let id = b.resolve(j, now_us);
        if !b.ledgers.contains_key(&id) {
            b.room_for_ledger(now_us);
        }
        let book = &mut *b;
        let l = book.ledgers.entry(id.clone()).or_default();
        l.alias = None;
        l.note(j, now_us);
        CampaignLedger {
            id,
            copies: l.copies,
            recipients: l.recipients,
            senders: l.sorted(&book.released),
            found_us: l.mark.as_ref().map_or(0, |m| m.last_us),
        }
    }

    /// Marks campaign `id` as found by `limit` at `now_us`, records that it restricted
    /// `restricted`, and answers whether its alert is due (`every_us` after the last).
    pub fn mark(
        &self,
        id: &str,
        limit: &str,
        restricted: &[String],
        every_us: i64,
        now_us: i64,
    ) -> MarkAnswer {
        let mut b = self.book.lock().unwrap_or_else(|e| e.into_inner());
        let id = b.root(id.to_string());
        let Some(l) = b.ledgers.get_mut(&id) else {
            return MarkAnswer::Quiet;
        };
        for k in restricted {
            if let Some(s) = l.senders.get_mut(k) {
                s.restricted_us = now_us;
            }
        }
        match &mut l.mark {
            None => {
                l.mark = Some(Mark {
                    limit: limit.to_string(),
                    since_us: now_us,
                    last_us: now_us,
                    alerted_us: now_us,
                });
                MarkAnswer::Found
            }
            Some(m) => {
                m.last_us = now_us;
                if now_us.saturating_sub(m.alerted_us) >= every_us {
                    m.alerted_us = now_us;
                    MarkAnswer::Update
                } else {
                    MarkAnswer::Quiet
                }
            }
        }
    }

    /// Remembers that an admin released `key` at `now_us`.
    pub fn released(&self, key: &str, now_us: i64) {
        let mut b = self.book.lock().unwrap_or_else(|e| e.into_inner());
        b.released.insert(key.to_string(), now_us);
    }

    /// The campaigns marked within [`LISTED_US`] of `now_us`, most recently marked first.
    pub fn campaigns(&self, now_us: i64) -> Vec<Campaign> {
        let mut b = self.book.lock().unwrap_or_else(|e| e.into_inner());
        let book = &mut *b;
        let mut out = Vec::new();
        for (key, l) in book.ledgers.iter_mut() {
            let Some(m) = l.mark.clone().filter(|_| l.alias.is_none()) else {
                continue;
            };
            if now_us.saturating_sub(m.last_us) > LISTED_US {
                continue;
            }
            l.forget_old(now_us);
            out.push(Campaign {
                key: key.clone(),
                limit: m.limit,
                since_us: m.since_us,
                last_us: m.last_us,
                copies: l.copies,
                recipients: l.recipients,
                senders: l.sorted(&book.released),
            });
        }
        out.sort_by(|a, b| b.last_us.cmp(&a.last_us).then(a.key.cmp(&b.key)));
        out
    }

    /// Band entries and campaigns held now (for the memory figure).
    pub fn sizes(&self) -> (usize, usize) {
        let b = self.book.lock().unwrap_or_else(|e| e.into_inner());
        (b.bands.len(), b.ledgers.len())
    }
}

#[cfg(test)]
mod tests;
