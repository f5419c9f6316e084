//! The ledger itself: the file, appended to and compacted, and its index by queue id and by
//! key.

use std::collections::{HashMap, HashSet, VecDeque};
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use thiserror::Error;

use super::line::{self, Done, How, LedgerEntry, Line, LineError};
use crate::postfix::queue::is_queue_id;

/// Ends kept after their message left the hold queue, so a second release of the same
/// queue id says when and how it ended.
pub const DONE_KEPT: usize = 4096;

/// What went wrong with the ledger.
#[derive(Debug, Error)]
pub enum LedgerError {
    /// Reading or writing its file.
    #[error("{path}: {source}")]
    Io {
        /// The ledger file (or its temporary copy).
        path: PathBuf,
        /// The system's error.
        #[source]
        source: std::io::Error,
    },
    /// Its file does not read.
    #[error("{path}: {source}")]
    Damaged {
        /// The ledger file.
        path: PathBuf,
        /// What is wrong, and where.
        #[source]
        source: LineError,
    },
    /// It holds as many messages as it may.
    #[error(
        "the ledger of Postfix's hold queue holds {0} messages, its most; release or delete some"
    )]
    Full(usize),
    /// The queue id is not one Postfix writes.
    #[error("{0:?} is not a Postfix queue id")]
    BadQueueId(String),
    /// The queue id was recorded already.
    #[error("queue id {0} is held already")]
    Duplicate(String),
    /// floodgate did not hold this queue id (or it ended too long ago to be remembered).
    #[error("queue id {0} is not held by floodgate")]
    NotHeld(String),
    /// The message was released, deleted or went away already.
    #[error("{}", ended_text(.queue_id, *.how, *.time, .by.as_deref()))]
    Ended {
        /// The queue id.
        queue_id: String,
        /// How it ended.
        how: How,
        /// When (seconds since the Unix epoch).
        time: u64,
        /// Who asked for it.
        by: Option<String>,
    },
    /// Another request is releasing or deleting it right now.
    #[error("queue id {0} is being released or deleted by another request")]
    Busy(String),
}

fn ended_text(queue_id: &str, how: How, time: u64, by: Option<&str>) -> String {
    let when = crate::smtp::received::rfc5322_date(i64::try_from(time).unwrap_or(i64::MAX));
    match how {
        How::Gone => format!(
            "queue id {queue_id} left Postfix's hold queue behind floodgate's back (released \
             or deleted with Postfix's own commands; noticed {when})"
        ),
        _ => format!(
            "queue id {queue_id} was {} already ({when}{})",
            how.as_str(),
            by.map(|b| format!(" by {b}")).unwrap_or_default()
        ),
    }
}

impl LedgerError {
    /// Whether the error is about the queue id asked for (it is not held, or no longer),
    /// rather than about the ledger.
    pub fn is_not_held(&self) -> bool {
        matches!(self, LedgerError::NotHeld(_) | LedgerError::Ended { .. })
    }
}

/// The ledger's state in memory.
#[derive(Debug, Default)]
struct State {
    /// Messages held, by queue id.
    held: HashMap<String, LedgerEntry>,
    /// Queue ids held per key.
    by_key: HashMap<String, HashSet<String>>,
    /// Recent ends, by queue id, and their order (oldest first).
    done: HashMap<String, Done>,
    done_order: VecDeque<String>,
    /// Queue ids being released or deleted now.
    claimed: HashSet<String>,
    /// Lines in the file after its first.
    lines: usize,
    /// The file, open for appending.
    file: Option<File>,
}

impl State {
    fn apply(&mut self, l: Line) {
        match l {
            Line::Held(e) => {
                self.forget_done(&e.queue_id);
                self.by_key
                    .entry(e.key.clone())
                    .or_default()
                    .insert(e.queue_id.clone());
                self.held.insert(e.queue_id.clone(), e);
            }
            Line::Done(d) => {
                if let Some(e) = self.held.remove(&d.queue_id) {
                    if let Some(ids) = self.by_key.get_mut(&e.key) {
                        ids.remove(&e.queue_id);
                        if ids.is_empty() {
                            self.by_key.remove(&e.key);
                        }
                    }
                }
                self.forget_done(&d.queue_id);
                self.done_order.push_back(d.queue_id.clone());
                self.done.insert(d.queue_id.clone(), d);
                while self.done_order.len() > DONE_KEPT {
                    if let Some(old) = self.done_order.pop_front() {
                        self.done.remove(&old);
                    }
                }
            }
        }
    }

    fn forget_done(&mut self, id: &str) {
        if self.done.remove(id).is_some() {
            self.done_order.retain(|d| d != id);
        }
    }

    /// The lines a compacted file holds: every message held, then the recent ends.
    fn compacted(&self) -> Vec<Line> {
        let mut held: Vec<&LedgerEntry> = self.held.values().collect();
        held.sort_by(|a, b| (a.time, &a.queue_id).cmp(&(b.time, &b.queue_id)));
        held.into_iter()
            .cloned()
            .map(Line::Held)
            .chain(
                self.done_order
                    .iter()
                    .filter_map(|id| self.done.get(id))
                    .cloned()
                    .map(Line::Done),
            )
            .collect()
    }
}

/// The ledger of messages floodgate told Postfix to hold: an append-only file, compacted,
/// and an index of it in memory. Every change is written (and flushed to the system) before
/// it is in the index, so a crash loses nothing the ledger answered for.
#[derive(Debug)]
pub struct Ledger {
    path: PathBuf,
    max: usize,
    state: Mutex<State>,
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> LedgerError + '_ {
    move |source| LedgerError::Io {
        path: path.to_path_buf(),
        source,
    }
}

impl Ledger {
    /// Opens the ledger at `path` (created, mode 0600, when missing; its directory must
    /// exist), holding at most `max` messages, and compacts it.
    pub fn open(path: &Path, max: usize) -> Result<Ledger, LedgerError> {
        let text = match std::fs::read(path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
            Err(e) => return Err(io(path)(e)),
        };
        let lines = line::parse(&text).map_err(|source| LedgerError::Damaged {
            path: path.to_path_buf(),
            source,
        })?;
        let mut state = State::default();
        for l in lines {
            state.apply(l);
        }
        let ledger = Ledger {
            path: path.to_path_buf(),
            max: max.max(1),
            state: Mutex::new(state),
        };
        ledger.compact()?;
        Ok(ledger)
    }

    /// Where its file is.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Records a message floodgate told (or is about to tell) Postfix to hold. Call it
    /// before answering `HOLD` (or quarantine); on an error answer with a temporary failure
    /// instead, so nothing is held that the ledger does not know.
    pub fn record(&self, entry: LedgerEntry) -> Result<(), LedgerError> {
        if !is_queue_id(&entry.queue_id) {
            return Err(LedgerError::BadQueueId(entry.queue_id));
        }
        let mut s = self.lock();
        if s.held.contains_key(&entry.queue_id) {
            return Err(LedgerError::Duplicate(entry.queue_id));
        }
        if s.held.len() >= self.max {
            return Err(LedgerError::Full(self.max));
        }
        self.append(&mut s, Line::Held(entry))
    }

    /// The message held under `queue_id`, if it is.
    pub fn get(&self, queue_id: &str) -> Option<LedgerEntry> {
        self.lock().held.get(queue_id).cloned()
    }

    /// Every message held for `key`, oldest first.
    pub fn for_key(&self, key: &str) -> Vec<LedgerEntry> {
        let s = self.lock();
        let mut v: Vec<LedgerEntry> = s
            .by_key
            .get(key)
            .into_iter()
            .flatten()
            .filter_map(|id| s.held.get(id).cloned())
            .collect();
        v.sort_by(|a, b| (a.time, &a.queue_id).cmp(&(b.time, &b.queue_id)));
        v
    }

    /// How many messages are held for `key`.
    pub fn count_for_key(&self, key: &str) -> usize {
        self.lock().by_key.get(key).map_or(0, HashSet::len)
    }

    /// Every message held, oldest first.
    pub fn all(&self) -> Vec<LedgerEntry> {
        let s = self.lock();
        let mut v: Vec<LedgerEntry> = s.held.values().cloned().collect();
        v.sort_by(|a, b| (a.time, &a.queue_id).cmp(&(b.time, &b.queue_id)));
        v
    }

    /// How many messages are held.
    pub fn len(&self) -> usize {
        self.lock().held.len()
    }

    /// Whether no message is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Why `queue_id` is not held: when and how it ended, or that floodgate never held it
    /// (or it ended too long ago to be remembered).
    pub fn why_not_held(&self, queue_id: &str) -> LedgerError {
        match self.lock().done.get(queue_id) {
            Some(d) => LedgerError::Ended {
                queue_id: queue_id.to_string(),
                how: d.how,
                time: d.time,
                by: d.by.clone(),
            },
            None => LedgerError::NotHeld(queue_id.to_string()),
        }
    }

    /// Claims `queue_id` for a release or a delete: its entry, unless it is not held, has
    /// ended (the error says when and how) or another request has claimed it. Follow with
    /// [`finish`](Self::finish) or [`unclaim`](Self::unclaim).
    pub fn claim(&self, queue_id: &str) -> Result<LedgerEntry, LedgerError> {
        let mut s = self.lock();
        let Some(e) = s.held.get(queue_id).cloned() else {
            drop(s);
            return Err(self.why_not_held(queue_id));
        };
        if !s.claimed.insert(queue_id.to_string()) {
            return Err(LedgerError::Busy(queue_id.to_string()));
        }
        Ok(e)
    }

    /// Gives up a claim whose release or delete failed; the message stays held.
    pub fn unclaim(&self, queue_id: &str) {
        self.lock().claimed.remove(queue_id);
    }

    /// Ends a held message: released, deleted, or gone behind floodgate's back. Any claim on
    /// it ends too. An id that is not held is not an error (it ended already).
    pub fn finish(&self, done: Done) -> Result<(), LedgerError> {
        let mut s = self.lock();
        s.claimed.remove(&done.queue_id);
        if !s.held.contains_key(&done.queue_id) {
            return Ok(());
        }
        self.append(&mut s, Line::Done(done))
    }

    /// Rewrites the file with one line per message held and the recent ends (a new file
    /// renamed over the old one, so a crash leaves one or the other whole).
    pub fn compact(&self) -> Result<(), LedgerError> {
        let mut s = self.lock();
        self.rewrite(&mut s)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn rewrite(&self, s: &mut State) -> Result<(), LedgerError> {
        let lines = s.compacted();
        let text = line::encode(&lines);
        let mut tmp = self.path.clone().into_os_string();
        tmp.push(".new");
        let tmp = PathBuf::from(tmp);
        let _ = std::fs::remove_file(&tmp);
        let mut f = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&tmp)
            .map_err(io(&tmp))?;
        f.write_all(text.as_bytes()).map_err(io(&tmp))?;
        f.sync_all().map_err(io(&tmp))?;
        std::fs::rename(&tmp, &self.path).map_err(io(&self.path))?;
        if let Some(dir) = self.path.parent() {
            if let Ok(d) = File::open(dir) {
                let _ = d.sync_all();
            }
        }
        s.file = Some(
            OpenOptions::new()
                .append(true)
                .open(&self.path)
                .map_err(io(&self.path))?,
        );
        s.lines = lines.len();
        Ok(())
    }

    /// Writes `l` at the end of the file, then applies it; compacts when the file has grown
    /// to more than twice what it holds.
    fn append(&self, s: &mut State, l: Line) -> Result<(), LedgerError> {
        if s.file.is_none() {
            self.rewrite(s)?;
        }
        let text = l.encode();
        let file = s.file.as_mut().expect("opened above");
        if let Err(e) = file.write_all(text.as_bytes()) {
            s.file = None;
            return Err(io(&self.path)(e));
        }
        s.apply(l);
        s.lines += 1;
        if s.lines > 2 * (s.held.len() + s.done.len()) + 1024 {
            self.rewrite(s)?;
        }
        Ok(())
    }
}

#[cfg(test)]
#[path = "ledger_tests.rs"]
mod tests;
