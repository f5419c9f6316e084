//! Per-key baselines kept with the store: for each limit with `baseline = ...`, the peak
//! each key reached per day over its window, summarised to one number per key (the
//! baseline's percentile of its daily peaks), as of one computation.
//!
//! The policy reads them from memory; the store only keeps them so that a restart does not
//! read the whole event log again: the memory store in its snapshot, Redis in one hash per
//! limit (see [`super::redis`]).

use std::collections::HashMap;
use std::sync::Mutex;

use serde::{Deserialize, Serialize};

/// One limit's baselines, as computed at one time.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct BaselineSet {
    /// What they were computed for (percentile, window, counting period): a set computed
    /// for other settings is not used.
    pub signature: String,
    /// When they were computed (µs since the epoch).
    pub computed_us: i64,
    /// Per key text: the percentile of its daily peaks (keys without events are absent).
    pub peaks: HashMap<String, f64>,
}

/// The baseline sets of a store that keeps them in process (the memory store).
#[derive(Debug, Default)]
pub struct BaselineShelf {
    sets: Mutex<HashMap<String, BaselineSet>>,
}

impl BaselineShelf {
    /// Keeps `set` as limit `limit`'s, replacing the one it had.
    pub fn put(&self, limit: &str, set: BaselineSet) {
        self.sets
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(limit.to_string(), set);
    }

    /// Limit `limit`'s set, if one is kept.
    pub fn get(&self, limit: &str) -> Option<BaselineSet> {
        self.sets
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(limit)
            .cloned()
    }

    /// Every set, by limit name.
    pub fn all(&self) -> Vec<(String, BaselineSet)> {
        let mut v: Vec<(String, BaselineSet)> = self
            .sets
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .map(|(k, s)| (k.clone(), s.clone()))
            .collect();
        v.sort_by(|a, b| a.0.cmp(&b.0));
        v
    }
}
