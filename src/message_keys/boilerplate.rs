//! Text that is boilerplate for this organisation, learnt from its ordinary traffic: a
//! block (one line of text as the reader sees it: a paragraph in HTML, a line in plain
//! text) that many accounts send on several days is a footer, a disclaimer, a meeting
//! invitation's dial-in block or a web application's template, and is left out of the
//! fingerprint.
//!
//! A campaign is the opposite pattern: many accounts within an hour. A block becomes
//! boilerplate only when at least [`Settings::min_accounts`] accounts sent it on at least
//! [`Settings::min_days`] distinct days within [`Settings::window_days`]; a run caught in its
//! first hour never gets there.
//!
//! The learner is a bounded table, pure: time comes in as a day number ([`day_of`]), no
//! clock is read, nothing is written. Each block keeps its accounts as a 128-bit sketch (an
//! account sets the bit its hash picks: the count of bits set is the number of distinct
//! accounts while they are few, a little under it by collisions) and the days it was seen in
//! the last 32 as bits. When the table is full, the entries not seen within the window go
//! first, then those with the fewest accounts.

use siphasher::sip::SipHasher13;
use std::collections::HashMap;
use std::hash::Hasher;

/// A line of fewer words is not learnt (and never left out as boilerplate).
pub const MIN_BLOCK_WORDS: usize = 3;

/// The key of account hashes.
const ACCOUNT_KEY: (u64, u64) = (0x6163_636f_756e_7431, 0x626f_696c_6572_706c);

/// The first bytes of the learner's file.
const MAGIC: &[u8; 8] = b"FGBOIL1\n";

/// The bytes of one entry in the file.
const ENTRY_BYTES: usize = 8 + 16 + 4 + 4;

/// When a block is boilerplate, and how much is kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Settings {
    /// Distinct accounts that must have sent a block (default 5).
    pub min_accounts: u32,
    /// Distinct days on which it must have been sent (default 3).
    pub min_days: u32,
    /// Days after which a block not seen again is forgotten (default 30, at most 32).
    pub window_days: u32,
    /// Blocks kept at most (default 200,000: about 10 MB).
    pub capacity: usize,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            min_accounts: 5,
            min_days: 3,
            window_days: 30,
            capacity: 200_000,
        }
    }
}

/// What is known of one block.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Entry {
    /// The accounts' sketch.
    accounts: u128,
    /// Bit `k` set: seen on day `last_day − k`.
    days: u32,
    /// The last day it was seen.
    last_day: u32,
}

impl Entry {
    /// The distinct days it was seen among the `window` days up to `today`.
    fn days_within(&self, today: u32, window: u32) -> u32 {
        let age = today.saturating_sub(self.last_day);
        if age >= window.min(32) {
            return 0;
        }
        let keep = window.min(32) - age;
        let mask = if keep >= 32 {
            u32::MAX
        } else {
            (1u32 << keep) - 1
        };
        (self.days & mask).count_ones()
    }
}

/// The learner's file was not one it wrote.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum BoilerplateError {
    /// It does not start as the learner's files do.
    #[error("not a boilerplate file (bad magic)")]
    Magic,
    /// Its length does not match the entries it announces.
    #[error("boilerplate file truncated or padded: {0} bytes")]
    Length(usize),
}

/// The day number (days since 1970-01-01, UTC) of a Unix time in seconds.
pub fn day_of(unix_seconds: u64) -> u32 {
    u32::try_from(unix_seconds / 86_400).unwrap_or(u32::MAX)
}

/// The hash of one account name (authenticated id, or client address without AUTH).
pub fn account_hash(account: &str) -> u64 {
    let mut h = SipHasher13::new_with_keys(ACCOUNT_KEY.0, ACCOUNT_KEY.1);
    h.write(account.as_bytes());
    h.finish()
}

/// The organisation's boilerplate, learnt.
#[derive(Debug, Clone, Default)]
pub struct Boilerplate {
    entries: HashMap<u64, Entry>,
    settings: Settings,
}

impl Boilerplate {
    /// An empty learner.
    pub fn new(settings: Settings) -> Boilerplate {
        Boilerplate {
            entries: HashMap::new(),
            settings,
        }
    }

    /// Its settings.
    pub fn settings(&self) -> Settings {
        self.settings
    }

    /// Blocks known.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether no block is known.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Whether `block` is boilerplate on day `today`.
    pub fn is_boilerplate(&self, block: u64, today: u32) -> bool {
        self.entries.get(&block).is_some_and(|e| {
            e.accounts.count_ones() >= self.settings.min_accounts
                && e.days_within(today, self.settings.window_days) >= self.settings.min_days
        })
    }

    /// Records that the account of hash `account` sent `blocks` (block hashes, see
    /// [`crate::message_keys::MessageKeys::blocks`]) on day `today`.
    pub fn observe(&mut self, account: u64, today: u32, blocks: &[u64]) {
        let bit = 1u128 << (account % 128);
        for &b in blocks {
            if !self.entries.contains_key(&b) && self.entries.len() >= self.settings.capacity {
                self.evict(today);
            }
            let e = self.entries.entry(b).or_insert(Entry {
                accounts: 0,
                days: 0,
                last_day: today,
            });
            if today > e.last_day {
                let shift = today - e.last_day;
                e.days = if shift >= 32 { 0 } else { e.days << shift };
                e.last_day = today;
            }
            let age = e.last_day - today.min(e.last_day);
            if age < 32 {
                e.days |= 1 << age;
            }
            e.accounts |= bit;
        }
    }

    /// Makes room for a tenth of the capacity: the entries seen last before the window
    /// first, then those with the fewest accounts and the oldest.
    fn evict(&mut self, today: u32) {
        let window = self.settings.window_days;
        self.entries
            .retain(|_, e| today.saturating_sub(e.last_day) < window);
        let target = self.settings.capacity - self.settings.capacity.div_ceil(10);
        if self.entries.len() <= target {
            return;
        }
        let mut ranked: Vec<(u32, u32, u64)> = self
            .entries
            .iter()
            .map(|(&k, e)| (e.accounts.count_ones(), e.last_day, k))
            .collect();
        ranked.sort_unstable();
        let drop = self.entries.len() - target;
        for &(_, _, k) in &ranked[..drop] {
            self.entries.remove(&k);
        }
    }

    /// The learner as bytes (for its file beside the store's snapshot).
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(MAGIC.len() + 8 + self.entries.len() * ENTRY_BYTES);
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&(self.entries.len() as u64).to_le_bytes());
        let mut keys: Vec<&u64> = self.entries.keys().collect();
        keys.sort_unstable();
        for k in keys {
            let e = &self.entries[k];
            out.extend_from_slice(&k.to_le_bytes());
            out.extend_from_slice(&e.accounts.to_le_bytes());
            out.extend_from_slice(&e.days.to_le_bytes());
            out.extend_from_slice(&e.last_day.to_le_bytes());
        }
        out
    }

    /// A learner from [`Boilerplate::to_bytes`]'s bytes (at most `settings.capacity`
    /// entries are kept: the first ones).
    pub fn from_bytes(bytes: &[u8], settings: Settings) -> Result<Boilerplate, BoilerplateError> {
        let rest = bytes.strip_prefix(MAGIC).ok_or(BoilerplateError::Magic)?;
        let (count, rest) = rest
            .split_first_chunk::<8>()
            .ok_or(BoilerplateError::Length(bytes.len()))?;
        let count = u64::from_le_bytes(*count);
        if Some(rest.len() as u64) != count.checked_mul(ENTRY_BYTES as u64) {
            return Err(BoilerplateError::Length(bytes.len()));
        }
        let mut entries = HashMap::new();
        for chunk in rest.chunks_exact(ENTRY_BYTES).take(settings.capacity) {
            let (k, r) = chunk.split_at(8);
            let (a, r) = r.split_at(16);
            let (d, l) = r.split_at(4);
            let le64 = |b: &[u8]| u64::from_le_bytes(b.try_into().unwrap_or([0; 8]));
            let le32 = |b: &[u8]| u32::from_le_bytes(b.try_into().unwrap_or([0; 4]));
            entries.insert(
                le64(k),
                Entry {
                    accounts: u128::from_le_bytes(a.try_into().unwrap_or([0; 16])),
                    days: le32(d),
                    last_day: le32(l),
                },
            );
        }
        Ok(Boilerplate { entries, settings })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const DAY: u32 = 20_000;

    #[test]
    fn many_accounts_on_several_days_make_boilerplate() {
        let mut b = Boilerplate::new(Settings::default());
        // Five accounts within one day: a campaign's pattern, not boilerplate.
        for a in 0..10 {
            b.observe(account_hash(&format!("user{a}")), DAY, &[7]);
        }
        assert!(!b.is_boilerplate(7, DAY));
        b.observe(account_hash("user1"), DAY + 1, &[7]);
        assert!(!b.is_boilerplate(7, DAY + 1));
        b.observe(account_hash("user2"), DAY + 3, &[7]);
        assert!(b.is_boilerplate(7, DAY + 3));
        // Forgotten once the days fall out of the window.
        assert!(!b.is_boilerplate(7, DAY + 40));
        // Many days but one account: a personal signature, not the organisation's.
        for d in 0..10 {
            b.observe(account_hash("solo"), DAY + d, &[9]);
        }
        assert!(!b.is_boilerplate(9, DAY + 9));
        assert!(!b.is_boilerplate(12345, DAY));
    }

    #[test]
    fn the_table_stays_bounded_and_keeps_what_counts() {
        let settings = Settings {
            capacity: 1000,
            ..Settings::default()
        };
        let mut b = Boilerplate::new(settings);
        for d in 0..3 {
            for a in 0..5 {
                b.observe(account_hash(&format!("u{a}")), DAY + d, &[1]);
            }
        }
        for i in 0..10_000u64 {
            b.observe(i, DAY + 3, &[1_000 + i]);
            assert!(b.len() <= 1000);
        }
        assert!(b.is_boilerplate(1, DAY + 3));
    }

    #[test]
    fn bytes_round_trip_and_bad_files_are_named() {
        let mut b = Boilerplate::new(Settings::default());
        for i in 0..50u64 {
            b.observe(i, DAY + (i % 4) as u32, &[i % 7, 100 + i]);
        }
        let bytes = b.to_bytes();
        let back = Boilerplate::from_bytes(&bytes, Settings::default()).unwrap();
        assert_eq!(back.entries, b.entries);
        assert_eq!(
            Boilerplate::from_bytes(b"nope", Settings::default()).unwrap_err(),
            BoilerplateError::Magic
        );
        assert_eq!(
            Boilerplate::from_bytes(&bytes[..bytes.len() - 1], Settings::default()).unwrap_err(),
            BoilerplateError::Length(bytes.len() - 1)
        );
        assert_eq!(
            BoilerplateError::Magic.to_string(),
            "not a boilerplate file (bad magic)"
        );
    }

    proptest! {
        /// Any bytes: an error or a learner, never a panic; a learner's bytes read back.
        #[test]
        fn any_bytes_load_or_fail(tail in prop::collection::vec(any::<u8>(), 0..400)) {
            let mut bytes = MAGIC.to_vec();
            bytes.extend_from_slice(&tail);
            if let Ok(b) = Boilerplate::from_bytes(&bytes, Settings::default()) {
                prop_assert_eq!(Boilerplate::from_bytes(&b.to_bytes(), Settings::default()).unwrap().entries, b.entries);
            }
            let _ = Boilerplate::from_bytes(&tail, Settings::default());
        }
    }
}
