//! Following the smart host's log file like `tail -F`: new complete lines are read as they
//! are written; a file renamed away (logrotate) is read to its end and the new file at the
//! path followed from its start; a truncated file is read again from its start; a file
//! that disappears is waited for. The file is polled (no inotify), from a thread of its
//! own; lines go to an async task that reports their outcomes.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use super::logline::Format;
use tokio::sync::mpsc::Receiver;

/// The longest line kept; longer ones are cut there.
pub const MAX_LINE: usize = 64 * 1024;

/// A followed file.
#[derive(Debug)]
pub struct Follower {
    path: PathBuf,
    file: Option<(File, (u64, u64))>,
    offset: u64,
    partial: Vec<u8>,
    /// Whether the next open starts at the end (only the very first one).
    at_end: bool,
    /// Files opened so far.
    pub opened: u64,
}

fn identity(m: &std::fs::Metadata) -> (u64, u64) {
    (m.dev(), m.ino())
}

impl Follower {
    /// Follows `path`; what it holds when first opened is skipped when `from_end`.
    pub fn new(path: &Path, from_end: bool) -> Follower {
        Follower {
            path: path.to_path_buf(),
            file: None,
            offset: 0,
            partial: Vec::new(),
            at_end: from_end,
            opened: 0,
        }
    }

    fn open(&mut self) {
        let Ok(f) = File::open(&self.path) else {
            // Not there at start: whatever appears later is new.
            self.at_end = false;
            return;
        };
        let Ok(m) = f.metadata() else {
            return;
        };
        self.offset = if self.at_end { m.len() } else { 0 };
        self.at_end = false;
        self.partial.clear();
        self.file = Some((f, identity(&m)));
        self.opened += 1;
    }

    /// Reads what is new: complete lines are appended to `out` (without their newline).
    pub fn poll(&mut self, out: &mut Vec<String>) {
        if self.file.is_none() {
            self.open();
        }
        self.drain(out);
        // Renamed away or replaced: the old file was read to its end; the new one next.
        let replaced = match (std::fs::metadata(&self.path), &self.file) {
            (Ok(m), Some((_, id))) => identity(&m) != *id,
            (Ok(_), None) => true,
            (Err(_), _) => false,
        };
        if replaced {
            if !self.partial.is_empty() {
                let rest = std::mem::take(&mut self.partial);
                out.push(String::from_utf8_lossy(&rest).into_owned());
            }
            self.file = None;
            self.open();
            self.drain(out);
        }
    }

    fn drain(&mut self, out: &mut Vec<String>) {
        let Some((f, _)) = self.file.as_mut() else {
            return;
        };
        // Truncated (copytruncate): start again from the top.
        if f.metadata().is_ok_and(|m| m.len() < self.offset) {
            self.offset = 0;
            self.partial.clear();
        }
        if f.seek(SeekFrom::Start(self.offset)).is_err() {
            return;
        }
        let mut buf = [0u8; 64 * 1024];
        loop {
            let n = match f.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => n,
            };
            self.offset += n as u64;
            let mut rest = &buf[..n];
            while let Some(nl) = memchr::memchr(b'\n', rest) {
                self.partial.extend_from_slice(&rest[..nl]);
                let line = std::mem::take(&mut self.partial);
                let line = line.strip_suffix(b"\r").unwrap_or(&line);
                out.push(String::from_utf8_lossy(line).into_owned());
                rest = &rest[nl + 1..];
            }
            let room = MAX_LINE.saturating_sub(self.partial.len());
            self.partial
                .extend_from_slice(&rest[..rest.len().min(room)]);
        }
    }
}

/// Settings of the follower task.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FollowSettings {
    /// The smart host's log file.
    pub path: PathBuf,
    /// Its format.
    pub format: Format,
    /// How often the file is looked at when nothing new was read.
    pub poll: Duration,
}

/// A running follower; dropping it stops it.
pub struct Running {
    stop: Arc<AtomicBool>,
}

impl Drop for Running {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// Starts following `s.path` in a thread of its own: each batch of new lines arrives on the
/// receiver; dropping the [`Running`] (or the receiver) stops the thread.
pub fn start(s: &FollowSettings) -> std::io::Result<(Running, Receiver<Vec<String>>)> {
    let stop = Arc::new(AtomicBool::new(false));
    let (tx, rx) = tokio::sync::mpsc::channel::<Vec<String>>(64);
    let flag = stop.clone();
    let path = s.path.clone();
    let poll = s.poll;
    std::thread::Builder::new()
        .name("floodgate-outcomes".into())
        .spawn(move || {
            let mut f = Follower::new(&path, true);
            while !flag.load(Ordering::Relaxed) {
                let mut lines = Vec::new();
                f.poll(&mut lines);
                if lines.is_empty() {
                    std::thread::sleep(poll);
                } else if tx.blocking_send(lines).is_err() {
                    break;
                }
            }
        })?;
    Ok((Running { stop }, rx))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn append(p: &Path, text: &str) {
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(p)
            .unwrap();
        f.write_all(text.as_bytes()).unwrap();
    }

    fn poll(f: &mut Follower) -> Vec<String> {
        let mut v = Vec::new();
        f.poll(&mut v);
        v
    }

    #[test]
    fn follows_rotation_truncation_and_absence() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("mail.log");
        append(&p, "old history\n");
        let mut f = Follower::new(&p, true);
        assert!(poll(&mut f).is_empty());
        assert_eq!(f.opened, 1);
        append(&p, "one\ntw");
        assert_eq!(poll(&mut f), ["one"]);
        append(&p, "o\r\n");
        assert_eq!(poll(&mut f), ["two"]);
        // Rename rotation: the old file is written to once more, then a new one appears.
        std::fs::rename(&p, dir.path().join("mail.log.1")).unwrap();
        append(&dir.path().join("mail.log.1"), "last of old\nunfinished");
        assert_eq!(poll(&mut f), ["last of old"]);
        append(&p, "first of new\n");
        assert_eq!(poll(&mut f), ["unfinished", "first of new"]);
        assert_eq!(f.opened, 2);
        // Truncation (seen when the file is shorter than what was read: a truncated file
        // that grows past the old length before the next look is not told apart).
        std::fs::write(&p, "").unwrap();
        assert!(poll(&mut f).is_empty());
        append(&p, "after truncation\n");
        assert_eq!(poll(&mut f), ["after truncation"]);
        // Gone, then back.
        std::fs::remove_file(&p).unwrap();
        assert!(poll(&mut f).is_empty());
        append(&p, "back\n");
        assert_eq!(poll(&mut f), ["back"]);
    }

    #[test]
    fn a_file_that_does_not_exist_yet_is_read_from_its_start() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("later.log");
        let mut f = Follower::new(&p, false);
        assert!(poll(&mut f).is_empty());
        append(&p, "a\nb\n");
        assert_eq!(poll(&mut f), ["a", "b"]);
    }

    #[test]
    fn overlong_lines_are_cut() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("x.log");
        std::fs::write(&p, "").unwrap();
        let mut f = Follower::new(&p, true);
        poll(&mut f);
        append(&p, &format!("{}\nshort\n", "x".repeat(MAX_LINE * 2)));
        let got = poll(&mut f);
        assert_eq!(got.len(), 2);
        assert_eq!(got[0].len(), MAX_LINE);
        assert_eq!(got[1], "short");
    }
}
