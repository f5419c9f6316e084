//! The hold spool directory. Blocking file I/O: call it off the event loop
//! (`tokio::task::spawn_blocking`).
//!
//! Files:
//! * `ID.held`: a held message ([`HeldMessage`]), the only files that are listed;
//! * `tmp.ID`: a message being written; renamed to `ID.held` only after its bytes are
//!   fsynced, the directory fsynced after the rename. Left over by a crash, it was never
//!   acknowledged to the client, and is removed when the spool is opened;
//! * `ID.releasing`: a message claimed by a release or delete (renamed from `ID.held`, so two
//!   admins never both act on one message). Left over by a crash, it is put back to
//!   `ID.held` when the spool is opened: a message is never lost, though one whose release
//!   reached upstream just before the crash may then be released twice.

use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::format::{valid_id, HeldMessage};

pub use crate::config::OnExpiry;

/// `[hold]`, validated.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HoldSettings {
    /// The spool directory (absolute, or relative to the config file's directory).
    pub dir: PathBuf,
    /// Most octets of held files together.
    pub max_bytes: u64,
    /// Most held messages.
    pub max_messages: usize,
    /// How long a message stays held.
    pub ttl: Duration,
    /// What happens after `ttl`.
    pub on_expiry: OnExpiry,
}

/// Why the spool could not do something.
#[derive(Debug, thiserror::Error)]
pub enum SpoolError {
    /// The directory does not exist or is not a directory.
    #[error("[hold] dir {0}: no such directory (create it, writable by floodgate)")]
    Missing(PathBuf),
    /// The directory cannot be written.
    #[error("[hold] dir {path}: not writable: {source}")]
    Unwritable {
        /// The directory.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// Holding one more message would pass `max_messages` or `max_bytes`.
    #[error("the hold spool is full ({0})")]
    Full(String),
    /// A file operation failed.
    #[error("hold spool {path}: {source}")]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// No held message has this id.
    #[error("no held message with id {0:?}")]
    NotFound(String),
    /// Another release or delete has the message.
    #[error("held message {0} is being released or deleted by another request")]
    Busy(String),
    /// A held file could not be read.
    #[error("held message {id}: unreadable file: {reason}")]
    Corrupt {
        /// Its id.
        id: String,
        /// Why.
        reason: super::FormatError,
    },
}

/// Writes are serialised so the limits are checked against a stable count.
static WRITE_LOCK: Mutex<()> = Mutex::new(());
/// Makes ids unique within the process.
static SEQUENCE: AtomicU64 = AtomicU64::new(0);

/// The spool directory.
#[derive(Debug)]
pub struct Spool {
    settings: HoldSettings,
}

/// Seconds since the Unix epoch.
pub fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// A new held id: time, process and sequence, so ids sort by time.
pub fn new_id() -> String {
    let t = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    format!(
        "{:x}{:05x}-{:x}-{:x}",
        t.as_secs(),
        t.subsec_micros(),
        std::process::id(),
        SEQUENCE.fetch_add(1, Ordering::Relaxed)
    )
}

impl Spool {
    /// Opens the spool: the directory must exist and be writable (a probe file is written
    /// and removed). Files left by a crash are cleaned up by [`Spool::recover`], once at
    /// start.
    pub fn open(settings: HoldSettings) -> Result<Spool, SpoolError> {
        let dir = &settings.dir;
        if !dir.is_dir() {
            return Err(SpoolError::Missing(dir.clone()));
        }
        let probe = dir.join(format!("tmp.probe-{}", std::process::id()));
        let unwritable = |source| SpoolError::Unwritable {
            path: dir.clone(),
            source,
        };
        File::create(&probe).map_err(unwritable)?;
        fs::remove_file(&probe).map_err(unwritable)?;
        Ok(Spool { settings })
    }

    /// The settings in force.
    pub fn settings(&self) -> &HoldSettings {
        &self.settings
    }

    fn io(&self, path: &Path) -> impl FnOnce(std::io::Error) -> SpoolError {
        let path = path.to_path_buf();
        move |source| SpoolError::Io { path, source }
    }

    fn held_path(&self, id: &str) -> PathBuf {
        self.settings.dir.join(format!("{id}.held"))
    }

    fn claimed_path(&self, id: &str) -> PathBuf {
        self.settings.dir.join(format!("{id}.releasing"))
    }

    fn sync_dir(&self) -> Result<(), SpoolError> {
        File::open(&self.settings.dir)
            .and_then(|d| d.sync_all())
            .map_err(self.io(&self.settings.dir))
    }

    /// Removes temporary files and puts claimed ones back: for the start of the one
    /// floodgate using the directory, never while releases may run.
    pub fn recover(&self) -> Result<(), SpoolError> {
        let dir = &self.settings.dir;
        for entry in fs::read_dir(dir).map_err(self.io(dir))? {
            let entry = entry.map_err(self.io(dir))?;
            let name = entry.file_name();
            let name = name.to_string_lossy();
            if name.starts_with("tmp.") {
                fs::remove_file(entry.path()).map_err(self.io(&entry.path()))?;
            } else if let Some(id) = name.strip_suffix(".releasing") {
                if valid_id(id) {
                    fs::rename(entry.path(), self.held_path(id)).map_err(self.io(&entry.path()))?;
                }
            }
        }
        self.sync_dir()
    }

    /// The ids of held messages with their files' sizes, sorted by id (ids start with the
    /// time they were held, so this is oldest first); claimed ones are included: they are
    /// still held until done. Reads the directory only, not the files.
    pub fn ids(&self) -> Result<Vec<(String, u64)>, SpoolError> {
        let dir = &self.settings.dir;
        let mut out = Vec::new();
        for entry in fs::read_dir(dir).map_err(self.io(dir))? {
            let entry = entry.map_err(self.io(dir))?;
            let name = entry.file_name();
            let name = name.to_string_lossy();
            let id = name
                .strip_suffix(".held")
                .or_else(|| name.strip_suffix(".releasing"));
            if let Some(id) = id.filter(|id| valid_id(id)) {
                // A file gone between the listing and its metadata was just released.
                if let Ok(m) = entry.metadata() {
                    out.push((id.to_string(), m.len()));
                }
            }
        }
        out.sort();
        Ok(out)
    }

    /// How many messages are held, and their files' octets.
    pub fn usage(&self) -> Result<(usize, u64), SpoolError> {
        let ids = self.ids()?;
        Ok((ids.len(), ids.iter().map(|(_, n)| n).sum()))
    }

    /// Writes `m` durably: `Ok` only once its file is fsynced, renamed into place and the
    /// directory fsynced. `Full` when it would pass a limit; nothing is left behind on any
    /// error.
    pub fn store(&self, m: &HeldMessage) -> Result<(), SpoolError> {
        if !valid_id(&m.id) {
            return Err(SpoolError::NotFound(m.id.clone()));
        }
        let bytes = m.encode();
        let _guard = WRITE_LOCK.lock().unwrap_or_else(|e| e.into_inner());
        let (count, used) = self.usage()?;
        if count + 1 > self.settings.max_messages {
            return Err(SpoolError::Full(format!(
                "{count} messages held, max_messages = {}",
                self.settings.max_messages
            )));
        }
        if used + bytes.len() as u64 > self.settings.max_bytes {
            return Err(SpoolError::Full(format!(
                "{used} bytes held, {} more would pass max_bytes = {}",
                bytes.len(),
                self.settings.max_bytes
            )));
        }
        let tmp = self.settings.dir.join(format!("tmp.{}", m.id));
        let written = (|| {
            let mut f = OpenOptions::new().write(true).create_new(true).open(&tmp)?;
            f.write_all(&bytes)?;
            f.sync_all()
        })();
        if let Err(e) = written {
            let _ = fs::remove_file(&tmp);
            return Err(SpoolError::Io {
                path: tmp,
                source: e,
            });
        }
        let target = self.held_path(&m.id);
        if let Err(e) = fs::rename(&tmp, &target) {
            let _ = fs::remove_file(&tmp);
            return Err(SpoolError::Io {
                path: target,
                source: e,
            });
        }
        self.sync_dir()
    }

    fn read(&self, id: &str, path: &Path) -> Result<HeldMessage, SpoolError> {
        let bytes = fs::read(path).map_err(|e| {
            if e.kind() == std::io::ErrorKind::NotFound {
                SpoolError::NotFound(id.to_string())
            } else {
                SpoolError::Io {
                    path: path.to_path_buf(),
                    source: e,
                }
            }
        })?;
        HeldMessage::decode(&bytes).map_err(|reason| SpoolError::Corrupt {
            id: id.to_string(),
            reason,
        })
    }

    /// One held message (claimed or not).
    pub fn get(&self, id: &str) -> Result<HeldMessage, SpoolError> {
        if !valid_id(id) {
            return Err(SpoolError::NotFound(id.to_string()));
        }
        match self.read(id, &self.held_path(id)) {
            Err(SpoolError::NotFound(_)) => self.read(id, &self.claimed_path(id)),
            other => other,
        }
    }

    /// Every held message, oldest first; unreadable files are skipped with a warning.
    pub fn list(&self) -> Result<Vec<HeldMessage>, SpoolError> {
        let mut out = Vec::new();
        for (id, _) in self.ids()? {
            match self.get(&id) {
                Ok(m) => out.push(m),
                // Released or deleted meanwhile.
                Err(SpoolError::NotFound(_)) => {}
                Err(e) => tracing::warn!(error = %e, "hold spool: skipping a file"),
            }
        }
        out.sort_by(|a, b| (a.time, &a.id).cmp(&(b.time, &b.id)));
        Ok(out)
    }

    /// Claims a held message for a release or delete: only one request gets it.
    pub fn claim(&self, id: &str) -> Result<HeldMessage, SpoolError> {
        if !valid_id(id) {
            return Err(SpoolError::NotFound(id.to_string()));
        }
        let (from, to) = (self.held_path(id), self.claimed_path(id));
        if let Err(e) = fs::rename(&from, &to) {
            if e.kind() == std::io::ErrorKind::NotFound {
                return Err(if to.exists() {
                    SpoolError::Busy(id.to_string())
                } else {
                    SpoolError::NotFound(id.to_string())
                });
            }
            return Err(SpoolError::Io {
                path: from,
                source: e,
            });
        }
        match self.read(id, &to) {
            Ok(m) => Ok(m),
            Err(e) => {
                let _ = self.unclaim(id);
                Err(e)
            }
        }
    }

    /// Gives a claimed message back to the spool (its release failed).
    pub fn unclaim(&self, id: &str) -> Result<(), SpoolError> {
        let from = self.claimed_path(id);
        fs::rename(&from, self.held_path(id)).map_err(self.io(&from))?;
        self.sync_dir()
    }

    /// Removes a claimed message for good (released or deleted).
    pub fn remove_claimed(&self, id: &str) -> Result<(), SpoolError> {
        let path = self.claimed_path(id);
        fs::remove_file(&path).map_err(self.io(&path))?;
        self.sync_dir()
    }

    /// Held messages whose `ttl` has passed at `now` (seconds since the epoch).
    pub fn expired(&self, now: u64) -> Result<Vec<HeldMessage>, SpoolError> {
        let ttl = self.settings.ttl.as_secs();
        Ok(self
            .list()?
            .into_iter()
            .filter(|m| m.time.saturating_add(ttl) <= now)
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(dir: &Path) -> HoldSettings {
        HoldSettings {
            dir: dir.to_path_buf(),
            max_bytes: 1 << 20,
            max_messages: 3,
            ttl: Duration::from_secs(60),
            on_expiry: OnExpiry::Delete,
        }
    }

    fn msg(id: &str, time: u64) -> HeldMessage {
        HeldMessage {
            id: id.into(),
            key: "alice".into(),
            limit: "l".into(),
            paced: None,
            time,
            client: "127.0.0.1:1000".parse().unwrap(),
            local: None,
            name: None,
            reverse_name: None,
            user: None,
            helo: None,
            proto: "ESMTP".into(),
            tls: None,
            mail: "<a@b>".into(),
            rcpts: vec!["<c@d>".into()],
            body: b"Subject: x\r\n\r\nbody\r\n".to_vec(),
        }
    }

    #[test]
    fn store_list_claim_remove() {
        let d = tempfile::tempdir().unwrap();
        let s = Spool::open(settings(d.path())).unwrap();
        s.store(&msg("a1", 5)).unwrap();
        s.store(&msg("a2", 1)).unwrap();
        let ids: Vec<String> = s.list().unwrap().into_iter().map(|m| m.id).collect();
        assert_eq!(ids, ["a2", "a1"]);
        assert_eq!(s.claim("a1").unwrap().id, "a1");
        assert!(matches!(s.claim("a1"), Err(SpoolError::Busy(_))));
        assert!(matches!(s.claim("zz"), Err(SpoolError::NotFound(_))));
        assert!(matches!(s.claim("../x"), Err(SpoolError::NotFound(_))));
        assert_eq!(s.usage().unwrap().0, 2);
        s.unclaim("a1").unwrap();
        s.claim("a1").unwrap();
        s.remove_claimed("a1").unwrap();
        assert_eq!(s.usage().unwrap().0, 1);
        assert_eq!(s.expired(60).unwrap().len(), 0);
        assert_eq!(s.expired(61).unwrap().len(), 1);
    }

    #[test]
    fn limits_refuse_and_leave_nothing() {
        let d = tempfile::tempdir().unwrap();
        let s = Spool::open(settings(d.path())).unwrap();
        for i in 0..3 {
            s.store(&msg(&format!("m{i}"), 0)).unwrap();
        }
        assert!(matches!(s.store(&msg("m3", 0)), Err(SpoolError::Full(_))));
        assert_eq!(fs::read_dir(d.path()).unwrap().count(), 3);
        let mut small = settings(d.path());
        small.max_messages = 100;
        small.max_bytes = 10;
        let s = Spool::open(small).unwrap();
        assert!(matches!(s.store(&msg("m4", 0)), Err(SpoolError::Full(_))));
        assert_eq!(fs::read_dir(d.path()).unwrap().count(), 3);
    }

    #[test]
    fn crash_leftovers_are_recovered() {
        let d = tempfile::tempdir().unwrap();
        let s = Spool::open(settings(d.path())).unwrap();
        s.store(&msg("k1", 0)).unwrap();
        s.claim("k1").unwrap();
        // A write that crashed before its rename.
        fs::write(d.path().join("tmp.k2"), msg("k2", 0).encode()).unwrap();
        assert_eq!(s.list().unwrap().len(), 1);
        let s = Spool::open(settings(d.path())).unwrap();
        s.recover().unwrap();
        let ids: Vec<String> = s.list().unwrap().into_iter().map(|m| m.id).collect();
        assert_eq!(ids, ["k1"]);
        assert!(!d.path().join("tmp.k2").exists());
        assert!(d.path().join("k1.held").exists());
    }

    #[test]
    fn missing_or_read_only_dir_is_refused() {
        let d = tempfile::tempdir().unwrap();
        let gone = d.path().join("nope");
        let e = Spool::open(settings(&gone)).unwrap_err();
        assert!(matches!(e, SpoolError::Missing(_)));
        assert!(e.to_string().contains("no such directory"), "{e}");
        // Root writes anywhere: a read-only directory is checked only for other users.
        if unsafe { libc::geteuid() } != 0 {
            use std::os::unix::fs::PermissionsExt;
            fs::set_permissions(d.path(), fs::Permissions::from_mode(0o555)).unwrap();
            let e = Spool::open(settings(d.path())).unwrap_err();
            assert!(matches!(e, SpoolError::Unwritable { .. }), "{e}");
            fs::set_permissions(d.path(), fs::Permissions::from_mode(0o755)).unwrap();
        }
    }

    #[test]
    fn ids_are_unique_and_valid() {
        let a = new_id();
        let b = new_id();
        assert_ne!(a, b);
        assert!(valid_id(&a) && valid_id(&b), "{a} {b}");
    }
}
