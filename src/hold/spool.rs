//! The hold spool directory. Blocking file I/O: call it off the event loop
//! (`tokio::task::spawn_blocking`).
//!
//! Files:
//! * `ID.held`: a held message ([`HeldMessage`]), the only files that are listed; created
//!   0600 whatever the umask, in a directory only floodgate's user may write (checked at
//!   [`Spool::open`]);
//! * `tmp.ID`: a message being written; renamed to `ID.held` only after its bytes are
//!   fsynced, the directory fsynced after the rename. Left over by a crash, it was never
//!   acknowledged to the client, and is removed when the spool is opened;
//! * `ID.releasing`: a message claimed by a release or delete (renamed from `ID.held`, so two
//!   admins never both act on one message). Left over by a crash, it is put back to
//!   `ID.held` when the spool is opened: a message is never lost, though one whose release
//!   reached upstream just before the crash may then be released twice;
//! * `corrupt/`: held files that do not read (damaged, or not written by floodgate), moved
//!   there when a listing, a claim or a release meets them, with a log line and
//!   `floodgate_held_corrupt_total`; they are neither listed nor counted against the limits.
//!
//! Claims read each file's envelope only ([`read::head`]); a release reads the whole file
//! of the message it sends. Listing, counting, expiry and pacing read the spool's
//! [`Index`] of envelopes, brought up to date from the directory's
//! names before each read (`indexed`): a file is read once, when it is first listed.

use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tracing::{info, warn};

use super::dir::{self, DirError};
use super::format::{valid_id, HeldHead, HeldMessage, MAGIC_V1};
use super::index::Index;
use super::read::{self, ReadError, Source};
use crate::metrics::Counter;

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
    /// The directory is missing, or its owner or mode is unsafe.
    #[error(transparent)]
    Dir(#[from] DirError),
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
    /// The spool's file system (or the user's quota on it) has no room for the message.
    #[error("the hold spool is full: its disk has no room ({path}: {source})")]
    DiskFull {
        /// The file being written.
        path: PathBuf,
        /// ENOSPC or EDQUOT.
        source: std::io::Error,
    },
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
    /// A held file could not be read; it was moved to `corrupt/`.
    #[error("held message {id}: unreadable file ({reason}), moved to corrupt/")]
    Corrupt {
        /// Its id.
        id: String,
        /// Why.
        reason: super::FormatError,
    },
}

impl SpoolError {
    /// Whether the spool has no room: its limits (`max_messages`, `max_bytes`) or its disk.
    pub fn is_full(&self) -> bool {
        matches!(self, SpoolError::Full(_) | SpoolError::DiskFull { .. })
    }

    /// The error of a write to `path`: [`SpoolError::DiskFull`] when the file system or the
    /// quota has no room, else [`SpoolError::Io`].
    pub fn writing(path: &Path, source: std::io::Error) -> SpoolError {
        let path = path.to_path_buf();
        match source.raw_os_error() {
            Some(libc::ENOSPC | libc::EDQUOT) => SpoolError::DiskFull { path, source },
            _ => SpoolError::Io { path, source },
        }
    }
}

/// Writes are serialised so the limits are checked against a stable count.
static WRITE_LOCK: Mutex<()> = Mutex::new(());
/// Makes ids unique within the process.
static SEQUENCE: AtomicU64 = AtomicU64::new(0);

/// The directory damaged files are moved to, under the spool directory.
pub const CORRUPT_DIR: &str = "corrupt";

/// The spool directory.
#[derive(Debug)]
pub struct Spool {
    settings: HoldSettings,
    /// Files moved to `corrupt/`.
    corrupt: Counter,
    /// The envelopes of held messages, by id, key and user.
    index: Mutex<Index>,
    /// The directory's modification time when the index last matched it, trusted only
    /// when it was at least a second older than that listing (see [`Spool::indexed`]).
    synced: Mutex<Option<SystemTime>>,
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

/// A held file opened for reading, with its length.
struct HeldFile {
    file: File,
    len: u64,
}

impl Source for HeldFile {
    fn size(&self) -> u64 {
        self.len
    }

    fn read_at(&self, offset: u64, buf: &mut [u8]) -> std::io::Result<()> {
        self.file.read_exact_at(buf, offset)
    }
}

/// `read` when the file's id is `id`, its name: a file under another message's name (copied
/// or planted) does not read.
fn named<T>(
    id: &str,
    read: Result<T, ReadError>,
    id_of: impl Fn(&T) -> &str,
) -> Result<T, ReadError> {
    match read {
        Ok(v) if id_of(&v) != id => Err(super::FormatError::Misnamed(id_of(&v).to_string()).into()),
        other => other,
    }
}

/// Creates `path` for writing, 0600 whatever the umask; never over an existing file.
fn create_private(path: &Path) -> std::io::Result<File> {
    OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
}

impl Spool {
    /// Opens the spool: the directory, created (mode 0700) when it is missing and its parent
    /// is there, must be owned by floodgate's effective user and
    /// be writable by no one else ([`DirError`] says how to fix it), and be writable (a probe
    /// file is written and removed). Files left by a crash are cleaned up by
    /// [`Spool::recover`], once at start. `corrupt` counts the files set aside.
    pub fn open(settings: HoldSettings, corrupt: Counter) -> Result<Spool, SpoolError> {
        dir::create_missing(&settings.dir)?;
        Spool::verify(&settings)?;
        Ok(Spool {
            settings,
            corrupt,
            index: Mutex::default(),
            synced: Mutex::default(),
        })
    }

    /// Checks the spool as [`Spool::open`] would, creating nothing: a missing directory
    /// passes (`open` makes it; `floodgate check` judges its parent with the config's
    /// paths); an existing one must pass [`dir::check`] and take a file (a probe is
    /// written and removed).
    pub fn verify(settings: &HoldSettings) -> Result<(), SpoolError> {
        let dir = &settings.dir;
        if !dir.exists() {
            return Ok(());
        }
        dir::check(dir)?;
        let probe = dir.join(format!("tmp.probe-{}", std::process::id()));
        let unwritable = |source| SpoolError::Unwritable {
            path: dir.clone(),
            source,
        };
        create_private(&probe).map_err(unwritable)?;
        fs::remove_file(&probe).map_err(unwritable)?;
        Ok(())
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

    /// Removes temporary files, puts claimed ones back and rewrites version 1 files in the
    /// current format (so listings read their envelopes only): for the start of the one
    /// floodgate using the directory, never while releases may run. A file that does not
    /// read is set aside; one that cannot be rewritten stays as it is (it still reads).
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
        let mut rewritten = 0;
        for (id, _) in self.ids()? {
            match self.rewrite_v1(&id) {
                Ok(true) => rewritten += 1,
                Ok(false) | Err(SpoolError::NotFound(_) | SpoolError::Corrupt { .. }) => {}
                Err(e) => warn!(id = %id, error = %e,
                    "hold spool: cannot rewrite a version 1 file; it stays as it is"),
            }
        }
        if rewritten > 0 {
            info!(
                files = rewritten,
                "hold spool: version 1 files rewritten in the current format"
            );
        }
        self.sync_dir()
    }

    /// Rewrites `ID.held` in the current format when it is a version 1 file; `Ok(false)`
    /// when it is not one.
    fn rewrite_v1(&self, id: &str) -> Result<bool, SpoolError> {
        let path = self.held_path(id);
        let mut first = [0u8; MAGIC_V1.len() + 1];
        let src = self.open_file(id, &path)?;
        if src.len < first.len() as u64
            || src.file.read_exact_at(&mut first, 0).is_err()
            || first[..MAGIC_V1.len()] != *MAGIC_V1.as_bytes()
        {
            return Ok(false);
        }
        let m = self.decoded(
            id,
            &path,
            named(id, read::message(&src), |m| &m.envelope.id),
        )?;
        let tmp = self.settings.dir.join(format!("tmp.{id}"));
        self.write_durably(&tmp, &m.encode())?;
        if let Err(e) = fs::rename(&tmp, &path) {
            let _ = fs::remove_file(&tmp);
            return Err(SpoolError::Io {
                path: path.clone(),
                source: e,
            });
        }
        Ok(true)
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

    /// Writes `bytes` to the new file `path` (0600) and fsyncs it; on any error the file is
    /// removed.
    fn write_durably(&self, path: &Path, bytes: &[u8]) -> Result<(), SpoolError> {
        let written = (|| {
            let mut f = create_private(path)?;
            f.write_all(bytes)?;
            f.sync_all()
        })();
        written.map_err(|e| {
            let _ = fs::remove_file(path);
            SpoolError::writing(path, e)
        })
    }

    /// Writes `m` durably: `Ok` only once its file is fsynced, renamed into place and the
    /// directory fsynced. `Full` when it would pass a limit, `DiskFull` when the disk or
    /// quota has no room; nothing is left behind on any error.
    pub fn store(&self, m: &HeldMessage) -> Result<(), SpoolError> {
        let id = &m.envelope.id;
        if !valid_id(id) {
            return Err(SpoolError::NotFound(id.clone()));
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
        let tmp = self.settings.dir.join(format!("tmp.{id}"));
        self.write_durably(&tmp, &bytes)?;
        let target = self.held_path(id);
        if let Err(e) = fs::rename(&tmp, &target) {
            let _ = fs::remove_file(&tmp);
            return Err(SpoolError::writing(&target, e));
        }
        // Not durable: the client is told to try again, so the file must not stay to be
        // released as well.
        if let Err(e) = self.sync_dir() {
            let _ = fs::remove_file(&target);
            return Err(e);
        }
        Ok(())
    }

    fn open_file(&self, id: &str, path: &Path) -> Result<HeldFile, SpoolError> {
        // Non-blocking: a FIFO planted under a held name opens at once (and reads empty).
        let opened = OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(path)
            .and_then(|file| {
                let len = file.metadata()?.len();
                Ok(HeldFile { file, len })
            });
        opened.map_err(|e| {
            if e.kind() == std::io::ErrorKind::NotFound {
                SpoolError::NotFound(id.to_string())
            } else {
                SpoolError::Io {
                    path: path.to_path_buf(),
                    source: e,
                }
            }
        })
    }

    /// What reading the file at `path` gave: a file that does not read is set aside.
    fn decoded<T>(
        &self,
        id: &str,
        path: &Path,
        read: Result<T, ReadError>,
    ) -> Result<T, SpoolError> {
        match read {
            Ok(v) => Ok(v),
            Err(ReadError::Io(source)) => Err(SpoolError::Io {
                path: path.to_path_buf(),
                source,
            }),
            Err(ReadError::Format(reason)) => {
                self.set_aside(id, path, &reason);
                Err(SpoolError::Corrupt {
                    id: id.to_string(),
                    reason,
                })
            }
        }
    }

    /// Moves a file that does not read to `corrupt/` (never over another one there), with a
    /// log line and a count. A file already gone (claimed, released, set aside by another
    /// reader) is left to whoever has it.
    fn set_aside(&self, id: &str, path: &Path, reason: &super::FormatError) {
        let aside = self.settings.dir.join(CORRUPT_DIR);
        if let Err(e) = fs::DirBuilder::new().mode(0o700).create(&aside) {
            if e.kind() != std::io::ErrorKind::AlreadyExists {
                warn!(id, path = %path.display(), error = %e, reason = %reason,
                    "hold spool: unreadable held file, and corrupt/ cannot be made: it stays");
                return;
            }
        }
        let name = path.file_name().unwrap_or_default().to_string_lossy();
        let target = (0..1000)
            .map(|n| match n {
                0 => aside.join(&*name),
                n => aside.join(format!("{name}.{n}")),
            })
            .find(|p| !p.exists());
        let Some(target) = target else {
            warn!(id, path = %path.display(), reason = %reason,
                "hold spool: unreadable held file, and corrupt/ has no free name for it: it stays");
            return;
        };
        match fs::rename(path, &target) {
            Ok(()) => {
                self.corrupt.inc();
                warn!(id, reason = %reason, moved_to = %target.display(),
                    "hold spool: unreadable held file moved aside");
                let _ = self.sync_dir();
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => warn!(id, path = %path.display(), error = %e, reason = %reason,
                "hold spool: unreadable held file cannot be moved aside: it stays"),
        }
    }

    /// Reads `ID.held`, else `ID.releasing`, with `what` (which checks the file's id).
    fn read_either<T>(
        &self,
        id: &str,
        what: impl Fn(&HeldFile) -> Result<T, ReadError>,
    ) -> Result<T, SpoolError> {
        if !valid_id(id) {
            return Err(SpoolError::NotFound(id.to_string()));
        }
        let mut path = self.held_path(id);
        let src = match self.open_file(id, &path) {
            Err(SpoolError::NotFound(_)) => {
                path = self.claimed_path(id);
                self.open_file(id, &path)?
            }
            other => other?,
        };
        self.decoded(id, &path, what(&src))
    }

    /// One held message's envelope (claimed or not), reading nothing of its body.
    pub fn head(&self, id: &str) -> Result<HeldHead, SpoolError> {
        self.read_either(id, |f| named(id, read::head(f), |h| &h.envelope.id))
    }

    /// One held message's envelope and header section (claimed or not), for `held show`.
    pub fn header_section(&self, id: &str) -> Result<(HeldHead, Vec<u8>), SpoolError> {
        self.read_either(id, |f| {
            named(id, read::header_section(f), |(h, _)| &h.envelope.id)
        })
    }

    /// One held message whole (claimed or not): its envelope and every octet of its body,
    /// for the console's message page and its download.
    pub fn message(&self, id: &str) -> Result<HeldMessage, SpoolError> {
        self.read_either(id, |f| named(id, read::message(f), |m| &m.envelope.id))
    }

    /// Every held message's envelope, oldest first, reading no body: the listing, expiry
    /// and pacing all read this. A file that does not read is set aside; one that cannot be
    /// read now is skipped with a warning.
    pub fn list(&self) -> Result<Vec<HeldHead>, SpoolError> {
        self.indexed(|ix| ix.all().iter().map(|h| (**h).clone()).collect())
    }

    /// Claims a held message for a release or delete: only one request gets it. Returns its
    /// envelope; a release then reads the message with [`Spool::claimed`].
    pub fn claim(&self, id: &str) -> Result<HeldHead, SpoolError> {
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
        let read = self.open_file(id, &to).and_then(|src| {
            let read = named(id, read::head(&src), |h| &h.envelope.id);
            self.decoded(id, &to, read)
        });
        match read {
            Ok(h) => Ok(h),
            // Set aside: nothing to give back.
            Err(e @ SpoolError::Corrupt { .. }) => Err(e),
            Err(e) => {
                let _ = self.unclaim(id);
                Err(e)
            }
        }
    }

    /// The whole message of a claimed id, for its release. A file that does not read is set
    /// aside; on any other error the message is still claimed (give it back with
    /// [`Spool::unclaim`]).
    pub fn claimed(&self, id: &str) -> Result<HeldMessage, SpoolError> {
        let path = self.claimed_path(id);
        let src = self.open_file(id, &path)?;
        self.decoded(
            id,
            &path,
            named(id, read::message(&src), |m| &m.envelope.id),
        )
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

    /// Held messages whose `ttl` has passed at `now` (seconds since the epoch): their
    /// envelopes.
    pub fn expired(&self, now: u64) -> Result<Vec<HeldHead>, SpoolError> {
        let ttl = self.settings.ttl.as_secs();
        Ok(self
            .list()?
            .into_iter()
            .filter(|m| m.envelope.time.saturating_add(ttl) <= now)
            .collect())
    }
}

mod indexed;

#[cfg(test)]
mod tests;
