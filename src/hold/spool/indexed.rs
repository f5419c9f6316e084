//! The spool's [`Index`] kept up to date: before each read the directory's names are
//! listed (no file is opened), messages gone are forgotten and new ones' envelopes read, so
//! a read costs one directory listing plus the files held since the last one; and only
//! the directory's `stat` while nothing was added, renamed or removed in it since.

use std::collections::{BTreeMap, HashSet};
use std::fs;
use std::time::{Duration, SystemTime};

use tracing::warn;

use super::{Spool, SpoolError};
use crate::hold::format::{valid_id, HeldHead};
use crate::hold::index::Index;

impl Spool {
    /// The ids the directory holds now (held or claimed), from its names only.
    fn names(&self) -> Result<HashSet<String>, SpoolError> {
        let dir = &self.settings.dir;
        let mut out = HashSet::new();
        for entry in fs::read_dir(dir).map_err(self.io(dir))? {
            let entry = entry.map_err(self.io(dir))?;
            let name = entry.file_name();
            let name = name.to_string_lossy();
            let id = name
                .strip_suffix(".held")
                .or_else(|| name.strip_suffix(".releasing"));
            if let Some(id) = id.filter(|id| valid_id(id)) {
                out.insert(id.to_string());
            }
        }
        Ok(out)
    }

    /// Runs `f` on the index once it holds exactly the messages the directory holds now. A
    /// new file that does not read is set aside; one that cannot be read now is skipped with
    /// a warning (and tried again at the next read).
    ///
    /// A file added, renamed or removed changes the directory's modification time, so the
    /// listing is skipped while that time is the one of the last listing. File times are
    /// coarse (a clock tick): a change in the same tick as the listing could leave the time
    /// as it was, so the time is trusted only when it was a second older than the listing.
    pub fn indexed<T>(&self, f: impl FnOnce(&Index) -> T) -> Result<T, SpoolError> {
        let mut ix = self.index.lock().unwrap_or_else(|e| e.into_inner());
        let mut synced = self.synced.lock().unwrap_or_else(|e| e.into_inner());
        let dir = &self.settings.dir;
        let mtime = fs::metadata(dir).and_then(|m| m.modified()).ok();
        if mtime.is_some() && *synced == mtime {
            return Ok(f(&ix));
        }
        let listed_at = SystemTime::now();
        let present = self.names()?;
        let gone: Vec<String> = ix
            .ids()
            .filter(|id| !present.contains(*id))
            .map(str::to_string)
            .collect();
        for id in &gone {
            ix.remove(id);
        }
        let mut whole = true;
        let new: Vec<&String> = present.iter().filter(|id| !ix.contains(id)).collect();
        for id in new {
            match self.head(id) {
                Ok(h) => {
                    // The file's size for the spool's usage; either name may hold it now.
                    let len = fs::metadata(self.held_path(id))
                        .or_else(|_| fs::metadata(self.claimed_path(id)))
                        .map_or(0, |m| m.len());
                    ix.insert(h, len);
                }
                // Released or deleted meanwhile; or set aside, logged.
                Err(SpoolError::NotFound(_) | SpoolError::Corrupt { .. }) => {}
                Err(e) => {
                    whole = false;
                    warn!(error = %e, "hold spool: skipping a file");
                }
            }
        }
        let settled = mtime.is_some_and(|m| {
            listed_at
                .duration_since(m)
                .is_ok_and(|d| d >= Duration::from_secs(1))
        });
        *synced = if whole && settled { mtime } else { None };
        Ok(f(&ix))
    }

    /// The envelopes of the messages held under any of `keys`, oldest first, each once,
    /// from the index.
    pub fn of_keys(&self, keys: &[&str]) -> Result<Vec<HeldHead>, SpoolError> {
        self.indexed(|ix| {
            let mut seen = HashSet::new();
            let mut out: Vec<HeldHead> = Vec::new();
            for k in keys {
                for h in ix.of_key(k) {
                    if seen.insert(h.envelope.id.clone()) {
                        out.push((*h).clone());
                    }
                }
            }
            out.sort_by(|a, b| {
                (a.envelope.time, &a.envelope.id).cmp(&(b.envelope.time, &b.envelope.id))
            });
            out
        })
    }

    /// How many held messages count for `key`: held under it, or sent by it as
    /// authenticated user.
    pub fn count_for(&self, key: &str) -> Result<u64, SpoolError> {
        self.indexed(|ix| ix.count_for(key))
    }

    /// The count of every key some held message counts for (see [`Spool::count_for`]).
    pub fn per_key(&self) -> Result<BTreeMap<String, u64>, SpoolError> {
        self.indexed(Index::per_key)
    }

    /// How many messages are held and their files' octets, from the index.
    pub fn indexed_usage(&self) -> Result<(usize, u64), SpoolError> {
        self.indexed(Index::usage)
    }
}
