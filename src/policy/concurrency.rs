//! Concurrency limits: sessions at once per key, counted in this process (a fleet sharing a
//! Redis store still counts sessions per floodgate instance).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// Live session counts per key.
#[derive(Debug, Default)]
pub struct Slots {
    map: Mutex<HashMap<String, u64>>,
}

/// A held slot; dropping it frees the slot.
#[derive(Debug)]
pub struct SlotGuard {
    slots: Arc<Slots>,
    key: String,
}

impl Slots {
    /// Takes a slot under `key` if fewer than `max` are held; `Err(held)` otherwise.
    pub fn acquire(self: &Arc<Self>, key: &str, max: u64) -> Result<SlotGuard, u64> {
        let mut map = self.map.lock().unwrap_or_else(|e| e.into_inner());
        let n = map.entry(key.to_string()).or_insert(0);
        if *n >= max {
            return Err(*n);
        }
        *n += 1;
        Ok(SlotGuard {
            slots: self.clone(),
            key: key.to_string(),
        })
    }

    /// Slots held under `key`.
    pub fn held(&self, key: &str) -> u64 {
        let map = self.map.lock().unwrap_or_else(|e| e.into_inner());
        map.get(key).copied().unwrap_or(0)
    }
}

impl Drop for SlotGuard {
    fn drop(&mut self) {
        let mut map = self.slots.map.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(n) = map.get_mut(&self.key) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                map.remove(&self.key);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_are_counted_and_freed() {
        let s = Arc::new(Slots::default());
        let a = s.acquire("k", 2).unwrap();
        let b = s.acquire("k", 2).unwrap();
        assert_eq!(s.acquire("k", 2).unwrap_err(), 2);
        assert!(s.acquire("other", 2).is_ok());
        drop(a);
        assert_eq!(s.held("k"), 1);
        let _c = s.acquire("k", 2).unwrap();
        drop(b);
        assert_eq!(s.held("k"), 1);
    }
}
