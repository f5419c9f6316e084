//! The event log for measurement (`[report] events`): one JSON line per evaluation of a
//! limit, in the shape of `floodgate simulate`'s input plus the limit's name, and the key's
//! own limit when the limit's `limit_list` gives it one:
//!
//! ```json
//! {"t":1738324800.123456,"limit":"hermes-per-user","key":"alice","count":1}
//! {"t":1738324800.500000,"limit":"hermes-per-user","key":"newsletter","count":1,"own_limit":5000}
//! {"t":1738324801.000002,"limit":"per-addr","key":"alice","count":1,"unique":"bob@example.org"}
//! ```
//!
//! Containments are logged too, one line each: a key restricted (by a limit or by hand), a
//! message taken to hold, an event deferred by a `defer` limit:
//!
//! ```json
//! {"event":"contained","t":1738324802.000001,"what":"restricted","limit":"per-user","key":"alice"}
//! ```
//!
//! What is logged is what was *offered* to each limit, not what was charged: every store
//! request of every limit (warn-mode limits included), at check time, with the count asked
//! for, whether or not the limit was over, whether upstream later accepted the command, and
//! whatever the limit's mode. For leaky Exim limits that is every attempt (Exim's leaky
//! mode would store only those under the limit); for strict ones the same attempts (which
//! they charge); for limits that reserve (buckets, leaky limits on recipients and bytes)
//! the checked amount, whether the reservation was later committed or released; for
//! `auth_failures` limits each failure when upstream refused the AUTH. Not logged: answers
//! from Exim's per-connection/per-message caches (not evaluations), readonly limits (they
//! add nothing), and concurrency limits (not rates). `unique` values (for per_addr: the
//! recipient address) are logged as they are: protect the file like a mail log.
//!
//! Writing is off the session path: sessions put events on a bounded queue with `try_send`
//! and never wait; a writer thread appends them through a `BufWriter` and flushes whenever
//! the queue is empty. When the queue is full the event is dropped and counted, with a
//! warning at most once a minute. The file is opened for appending (created 0640) and
//! reopened on SIGUSR1 ([`EventLog::reopen`], logrotate's move-then-signal) and on SIGHUP
//! (with a reload, which a broken config refuses: SIGUSR1 reopens whatever the config
//! says); with `max_size` the writer
//! renames a full file to `PATH.1` itself and starts a new one.

use std::fs::{File, OpenOptions};
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, RecvTimeoutError, SyncSender, TrySendError};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tracing::warn;

use super::config::ReportSettings;

use crate::eventlog::Evaluation;

/// The event log's line of a containment (see [`crate::eventlog::Containment`]).
pub fn contained_line(c: &crate::policy::alert::Contained) -> String {
    crate::eventlog::Containment {
        time_us: c.time_us,
        what: c.what.to_string(),
        limit: c.limit.to_string(),
        key: c.key.to_string(),
    }
    .to_line()
}

/// One line to write: an evaluation, or another event already encoded (queued messages and
/// their outcomes: `{"event":"queued",...}`, `{"event":"outcome",...}`; such lines start
/// with `{"event":` so readers of evaluations can skip them).
enum Entry {
    Eval(Evaluation),
    Line(String),
}

struct Shared {
    enabled: AtomicBool,
    /// The queue to the writer thread, made with the log.
    tx: SyncSender<Entry>,
    path: Mutex<Option<PathBuf>>,
    max_size: Mutex<Option<u64>>,
    reopen: AtomicBool,
    queued: AtomicU64,
    written: AtomicU64,
    dropped: AtomicU64,
    /// Seconds (since start) of the last "dropped" warning, -1 before the first.
    last_warn: AtomicI64,
    started: Instant,
}

/// The event log: cheap to feed from sessions, written by its own thread.
#[derive(Clone)]
pub struct EventLog {
    shared: Arc<Shared>,
}

impl EventLog {
    /// An event log following `settings` (off when `events` is unset), its writer thread
    /// started with it. The queue length is fixed here, for the log's life.
    pub fn new(settings: &ReportSettings) -> EventLog {
        let (tx, rx) = sync_channel(settings.queue);
        let log = EventLog {
            shared: Arc::new(Shared {
                enabled: AtomicBool::new(false),
                tx,
                path: Mutex::new(None),
                max_size: Mutex::new(None),
                reopen: AtomicBool::new(false),
                queued: AtomicU64::new(0),
                written: AtomicU64::new(0),
                dropped: AtomicU64::new(0),
                last_warn: AtomicI64::new(-1),
                started: Instant::now(),
            }),
        };
        let shared = log.shared.clone();
        let spawned = std::thread::Builder::new()
            .name("floodgate-events".into())
            .spawn(move || writer(shared, rx));
        if let Err(e) = spawned {
            warn!(error = %e, "cannot start the event log writer");
        }
        log.apply(settings);
        log
    }

    /// Applies (new) settings: a new path, rotation size, on or off. The file is reopened
    /// in every case (SIGHUP after logrotate).
    pub fn apply(&self, settings: &ReportSettings) {
        let s = &self.shared;
        *s.path.lock().unwrap_or_else(|e| e.into_inner()) = settings.events.clone();
        *s.max_size.lock().unwrap_or_else(|e| e.into_inner()) = settings.max_size;
        s.reopen.store(true, Ordering::Release);
        s.enabled
            .store(settings.events.is_some(), Ordering::Release);
    }

    /// Reopens the file at its path (SIGUSR1, after logrotate moved it): the writer
    /// flushes the old file and opens the path anew within a second, with no other change.
    pub fn reopen(&self) {
        self.shared.reopen.store(true, Ordering::Release);
    }

    /// Whether events are being logged.
    pub fn enabled(&self) -> bool {
        self.shared.enabled.load(Ordering::Relaxed)
    }

    /// Queues one event; never blocks (a full queue drops it and counts the drop).
    pub fn record(&self, r: Evaluation) {
        self.send(Entry::Eval(r));
    }

    /// Queues one line that is not an evaluation (it must start with `{"event":`); never
    /// blocks.
    pub fn record_line(&self, line: String) {
        debug_assert!(line.starts_with("{\"event\":"));
        self.send(Entry::Line(line));
    }

    fn send(&self, r: Entry) {
        let s = &self.shared;
        if !s.enabled.load(Ordering::Relaxed) {
            return;
        }
        match s.tx.try_send(r) {
            Ok(()) => {
                s.queued.fetch_add(1, Ordering::Relaxed);
            }
            Err(TrySendError::Full(_)) | Err(TrySendError::Disconnected(_)) => {
                let n = s.dropped.fetch_add(1, Ordering::Relaxed) + 1;
                let now = s.started.elapsed().as_secs() as i64;
                let last = s.last_warn.load(Ordering::Relaxed);
                if (last < 0 || now - last >= 60)
                    && s.last_warn
                        .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
                        .is_ok()
                {
                    warn!(
                        dropped = n,
                        "event log queue full: events dropped (the writer cannot keep up)"
                    );
                }
            }
        }
    }

    /// Events dropped so far.
    pub fn dropped(&self) -> u64 {
        self.shared.dropped.load(Ordering::Relaxed)
    }

    /// Events written so far.
    pub fn written(&self) -> u64 {
        self.shared.written.load(Ordering::Relaxed)
    }

    /// Waits (at most `limit`) until every queued event is written and flushed.
    pub fn drain(&self, limit: Duration) -> bool {
        let deadline = Instant::now() + limit;
        let s = &self.shared;
        while s.written.load(Ordering::Acquire) < s.queued.load(Ordering::Acquire) {
            if Instant::now() >= deadline {
                return false;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        true
    }
}

struct Output {
    w: BufWriter<File>,
    size: u64,
    path: PathBuf,
}

fn open(path: &Path) -> std::io::Result<Output> {
    use std::os::unix::fs::OpenOptionsExt;
    let f = OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o640)
        .open(path)?;
    let size = f.metadata().map(|m| m.len()).unwrap_or(0);
    Ok(Output {
        w: BufWriter::with_capacity(64 * 1024, f),
        size,
        path: path.to_path_buf(),
    })
}

fn reopen(shared: &Shared, out: &mut Option<Output>) {
    if let Some(o) = out.as_mut() {
        let _ = o.w.flush();
    }
    *out = None;
    let path = shared
        .path
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .clone();
    if let Some(p) = path {
        match open(&p) {
            Ok(o) => *out = Some(o),
            Err(e) => warn!(path = %p.display(), error = %e, "cannot open the event log"),
        }
    }
}

fn rotate(out: &mut Option<Output>) {
    let Some(o) = out.as_mut() else { return };
    let _ = o.w.flush();
    let path = o.path.clone();
    let mut old = path.clone().into_os_string();
    old.push(".1");
    if let Err(e) = std::fs::rename(&path, &old) {
        warn!(path = %path.display(), error = %e, "cannot rotate the event log");
        return;
    }
    match open(&path) {
        Ok(n) => *out = Some(n),
        Err(e) => {
            warn!(path = %path.display(), error = %e, "cannot open the event log");
            *out = None;
        }
    }
}

fn writer(shared: Arc<Shared>, rx: Receiver<Entry>) {
    let mut out: Option<Output> = None;
    let mut line = Vec::with_capacity(256);
    let mut last_attempt = Instant::now();
    loop {
        let first = match rx.recv_timeout(Duration::from_secs(1)) {
            Ok(r) => Some(r),
            Err(RecvTimeoutError::Timeout) => None,
            Err(RecvTimeoutError::Disconnected) => break,
        };
        let want_reopen = shared.reopen.swap(false, Ordering::AcqRel);
        // A file that could not be opened is retried every 10 s.
        if want_reopen
            || (out.is_none()
                && shared.enabled.load(Ordering::Relaxed)
                && last_attempt.elapsed() >= Duration::from_secs(10))
        {
            last_attempt = Instant::now();
            reopen(&shared, &mut out);
        }
        let max = *shared.max_size.lock().unwrap_or_else(|e| e.into_inner());
        let mut n = 0u64;
        let mut next = first;
        while let Some(r) = next {
            n += 1;
            if let Some(o) = out.as_mut() {
                line.clear();
                match r {
                    Entry::Eval(r) => r.to_line(&mut line),
                    Entry::Line(l) => line.extend_from_slice(l.as_bytes()),
                }
                line.push(b'\n');
                if let Err(e) = o.w.write_all(&line) {
                    warn!(error = %e, "cannot write the event log");
                } else {
                    o.size += line.len() as u64;
                }
                if max.is_some_and(|m| o.size >= m) {
                    rotate(&mut out);
                }
            }
            next = rx.try_recv().ok();
        }
        if let Some(o) = out.as_mut() {
            if let Err(e) = o.w.flush() {
                warn!(error = %e, "cannot write the event log");
            }
        }
        shared.written.fetch_add(n, Ordering::AcqRel);
    }
    if let Some(o) = out.as_mut() {
        let _ = o.w.flush();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(t: i64, key: &str, unique: Option<&str>) -> Evaluation {
        Evaluation {
            time_us: t,
            limit: Some("l\"1".into()),
            key: Some(key.into()),
            count: Some(1.0),
            own_limit: None,
            unique: unique.map(str::to_string),
        }
    }

    #[test]
    fn line_shape() {
        let mut v = Vec::new();
        rec(1_738_324_800_000_042, "al\nice", Some("b@x")).to_line(&mut v);
        assert_eq!(
            String::from_utf8(v).unwrap(),
            r#"{"t":1738324800.000042,"limit":"l\"1","key":"al\nice","count":1,"unique":"b@x"}"#
        );
        let mut v = Vec::new();
        Evaluation {
            count: Some(2.5),
            ..rec(5, "k", None)
        }
        .to_line(&mut v);
        assert_eq!(
            String::from_utf8(v).unwrap(),
            r#"{"t":0.000005,"limit":"l\"1","key":"k","count":2.5}"#
        );
        let mut v = Vec::new();
        Evaluation {
            own_limit: Some(500.0),
            ..rec(5, "k", Some("b@x"))
        }
        .to_line(&mut v);
        assert_eq!(
            String::from_utf8(v).unwrap(),
            r#"{"t":0.000005,"limit":"l\"1","key":"k","count":1,"own_limit":500,"unique":"b@x"}"#
        );
    }

    #[test]
    fn writes_reopens_and_rotates() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("events.jsonl");
        let settings = ReportSettings {
            events: Some(path.clone()),
            max_size: Some(4096),
            queue: 1024,
        };
        let log = EventLog::new(&settings);
        for i in 0..10 {
            log.record(rec(i, "k", None));
        }
        assert!(log.drain(Duration::from_secs(10)));
        assert_eq!(std::fs::read_to_string(&path).unwrap().lines().count(), 10);
        // logrotate: move the file away, then HUP (apply) reopens a new one.
        let moved = dir.path().join("moved");
        std::fs::rename(&path, &moved).unwrap();
        log.apply(&settings);
        log.record(rec(11, "k", None));
        assert!(log.drain(Duration::from_secs(10)));
        assert_eq!(std::fs::read_to_string(&path).unwrap().lines().count(), 1);
        assert_eq!(std::fs::read_to_string(&moved).unwrap().lines().count(), 10);
        // Rotation by size: 4096 bytes of lines go to events.jsonl.1.
        for i in 0..200 {
            log.record(rec(100 + i, "a-longer-key-text", None));
        }
        assert!(log.drain(Duration::from_secs(10)));
        let rotated = dir.path().join("events.jsonl.1");
        let old = std::fs::read_to_string(&rotated).unwrap();
        let cur = std::fs::read_to_string(&path).unwrap();
        assert!(old.len() >= 4096, "{}", old.len());
        assert_eq!(log.dropped(), 0);
        for l in old.lines().chain(cur.lines()) {
            serde_json::from_str::<serde_json::Value>(l).unwrap();
        }
    }

    #[test]
    fn full_queue_drops_and_counts() {
        let dir = tempfile::tempdir().unwrap();
        let log = EventLog::new(&ReportSettings {
            events: Some(dir.path().join("e")),
            max_size: None,
            queue: 1,
        });
        // Far more than the writer can take at once through a queue of one: some drop,
        // none blocks, every event is either written or counted.
        for i in 0..2000 {
            log.record(rec(i, "k", None));
        }
        assert!(log.drain(Duration::from_secs(10)));
        assert_eq!(log.written() + log.dropped(), 2000);
    }

    #[test]
    fn off_records_nothing() {
        let log = EventLog::new(&ReportSettings::default());
        assert!(!log.enabled());
        log.record(rec(1, "k", None));
        assert_eq!(log.written() + log.dropped(), 0);
    }
}
