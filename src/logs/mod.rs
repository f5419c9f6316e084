//! Log output off the session path.
//!
//! Sessions format a log line and append it to a shared batch (one uncontended lock and a
//! copy); one thread takes the whole batch and writes it in one `write`. The thread is woken
//! once per batch, not once per line: the first line into an empty batch wakes it. A line
//! after a quiet spell (nothing written for [`GATHER`]) is written at once; while lines keep
//! coming the writer writes at most once per [`GATHER`] (sooner when the batch is half full,
//! a flush is asked for or logging stops), gathering what came meanwhile. So at a thousand
//! messages a second the event loops make a few dozen wake-up calls a second for logging
//! instead of one per line, and the writer never spins.
//!
//! A session never waits on stderr: when the batch holds `queue` lines the next ones are
//! dropped and counted ([`DroppedLines`], exposed as `floodgate_log_lines_dropped_total`),
//! as are the lines of a batch whose write failed. So a stalled terminal, pipe or journal
//! costs log lines, never mail.
//!
//! The [`WorkerGuard`] must live as long as logging does: dropping it writes what is still
//! queued (waiting at most about a second) and stops the thread.

use std::io::{self, Write};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use tracing_subscriber::fmt::MakeWriter;

pub mod text;

/// While lines keep coming, the writer writes at most once per this long: short enough that
/// `tail -f` looks immediate, long enough that a busy server's lines go out in a few dozen
/// writes a second. A line after a quiet spell this long is written at once.
pub const GATHER: Duration = Duration::from_millis(20);

/// A batch buffer larger than this is given back after its write, so that one burst does
/// not keep its memory for good.
const KEEP_CAPACITY: usize = 1 << 20;

/// How long dropping the guard waits for the last batch to be written.
const EXIT_WAIT: Duration = Duration::from_secs(1);

#[derive(Debug)]
struct Batch {
    /// Whole lines, in the order they were handed over.
    buf: Vec<u8>,
    /// How many lines `buf` holds.
    lines: usize,
    /// The writer waits for the first line of a batch: the next line wakes it. Otherwise it
    /// is gathering or writing, and only a half-full batch wakes it early.
    asleep: bool,
    /// The guard was dropped: write what is left and stop.
    stop: bool,
    /// A flush is waiting: write what is there without gathering.
    flush: bool,
    /// Callers waiting in [`LogWriter::flush_within`].
    flushers: usize,
    /// Lines accepted since the start.
    accepted: u64,
    /// Lines written out (or dropped by a failed write) since the start.
    done: u64,
}

#[derive(Debug)]
struct Shared {
    batch: Mutex<Batch>,
    wake: Condvar,
    /// Signalled after each write, for [`LogWriter::flush_within`].
    written: Condvar,
    dropped: AtomicU64,
    /// Lines a batch may hold.
    capacity: usize,
    /// Lines at which a gathering writer is woken early.
    high_water: usize,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Batch> {
        self.batch.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Queues one line (or drops and counts it when the batch is full).
    fn push(&self, line: &[u8]) {
        let mut b = self.lock();
        if b.lines >= self.capacity {
            drop(b);
            self.dropped.fetch_add(1, Ordering::Relaxed);
            return;
        }
        b.buf.extend_from_slice(line);
        b.lines += 1;
        b.accepted += 1;
        let wake = std::mem::take(&mut b.asleep) || b.lines == self.high_water;
        drop(b);
        if wake {
            self.wake.notify_one();
        }
    }
}

/// How many log lines were dropped because the queue was full (or their write failed).
#[derive(Clone, Debug)]
pub struct DroppedLines(Arc<Shared>);

impl DroppedLines {
    /// Lines dropped so far.
    pub fn get(&self) -> u64 {
        self.0.dropped.load(Ordering::Relaxed)
    }

    /// Makes the count part of the exposition, as `floodgate_log_lines_dropped_total`.
    pub fn register_metrics(&self, metrics: &crate::metrics::Metrics) {
        let dropped = self.clone();
        metrics.scrape("log", move |w| {
            w.counter(
                "floodgate_log_lines_dropped_total",
                "Log lines dropped because the log queue was full (the writer could not keep up).",
                dropped.get(),
            );
        });
    }
}

/// The sessions' side of the log queue: each `write` is one line (as the `tracing` fmt
/// layer writes each event whole), queued for the writer thread. Never blocks on the output.
#[derive(Clone, Debug)]
pub struct LogWriter(Arc<Shared>);

impl LogWriter {
    /// Waits until every line queued before the call is written (or its write failed), at
    /// most `within`; false if that did not happen in time. For the moments whose lines must
    /// be out before floodgate says anything else (its start-up, before the `listening`
    /// lines on stdout).
    pub fn flush_within(&self, within: Duration) -> bool {
        let shared = &self.0;
        let deadline = Instant::now() + within;
        let mut b = shared.lock();
        let target = b.accepted;
        b.flushers += 1;
        let mut in_time = true;
        while b.done < target {
            let now = Instant::now();
            if now >= deadline {
                in_time = false;
                break;
            }
            b.flush = true;
            shared.wake.notify_one();
            b = shared
                .written
                .wait_timeout(b, deadline - now)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
        b.flushers -= 1;
        in_time
    }
}

impl Write for &LogWriter {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0.push(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl Write for LogWriter {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        (&*self).write(buf)
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl<'a> MakeWriter<'a> for LogWriter {
    type Writer = &'a LogWriter;

    fn make_writer(&'a self) -> Self::Writer {
        self
    }
}

/// Writes what is still queued and stops the writer thread when dropped.
#[derive(Debug)]
pub struct WorkerGuard {
    shared: Arc<Shared>,
    done: mpsc::Receiver<()>,
    thread: Option<JoinHandle<()>>,
}

impl Drop for WorkerGuard {
    fn drop(&mut self) {
        self.shared.lock().stop = true;
        self.shared.wake.notify_one();
        // An output that never takes the last batch must not hold up the exit.
        if self.done.recv_timeout(EXIT_WAIT).is_ok() {
            if let Some(t) = self.thread.take() {
                let _ = t.join();
            }
        }
    }
}

/// The log queue: what a `tracing_subscriber::fmt` layer writes to, its writer thread and
/// its count of dropped lines.
#[derive(Debug)]
pub struct LogQueue {
    /// Hands each line to the queue.
    pub writer: LogWriter,
    /// Flushes and stops the writer thread when dropped.
    pub guard: WorkerGuard,
    /// The count of dropped lines.
    pub dropped: DroppedLines,
}

/// Starts the writer thread (`floodgate-log`) that writes queued lines to `out`, with room
/// for `queue` lines (at least one).
///
/// # Panics
/// When the operating system cannot start a thread.
pub fn spawn<W: Write + Send + 'static>(out: W, queue: usize) -> LogQueue {
    let capacity = queue.max(1);
    let shared = Arc::new(Shared {
        batch: Mutex::new(Batch {
            buf: Vec::new(),
            lines: 0,
            asleep: true,
            stop: false,
            flush: false,
            flushers: 0,
            accepted: 0,
            done: 0,
        }),
        wake: Condvar::new(),
        written: Condvar::new(),
        dropped: AtomicU64::new(0),
        capacity,
        high_water: (capacity / 2).max(1),
    });
    let (done_tx, done) = mpsc::channel();
    let for_thread = shared.clone();
    let thread = std::thread::Builder::new()
        .name("floodgate-log".into())
        .spawn(move || {
            write_batches(&for_thread, out);
            let _ = done_tx.send(());
        })
        .expect("cannot start the log writer thread");
    LogQueue {
        writer: LogWriter(shared.clone()),
        dropped: DroppedLines(shared.clone()),
        guard: WorkerGuard {
            shared,
            done,
            thread: Some(thread),
        },
    }
}

/// The writer thread: sleeps until a line comes, gathers a batch while lines keep coming,
/// writes it in one go; returns once stopped with nothing left.
fn write_batches<W: Write>(shared: &Shared, mut out: W) {
    let mut spare: Vec<u8> = Vec::new();
    let mut last_write: Option<Instant> = None;
    let mut b = shared.lock();
    loop {
        while b.lines == 0 && !b.stop {
            b.asleep = true;
            b = shared.wake.wait(b).unwrap_or_else(PoisonError::into_inner);
        }
        if b.lines == 0 {
            return;
        }
        // Busy (the last write was less than GATHER ago): wait for the rest of that span.
        if let Some(until) = last_write.map(|t| t + GATHER) {
            while !b.stop && !b.flush && b.lines < shared.high_water {
                let now = Instant::now();
                if now >= until {
                    break;
                }
                b = shared
                    .wake
                    .wait_timeout(b, until - now)
                    .unwrap_or_else(PoisonError::into_inner)
                    .0;
            }
        }
        b.flush = false;
        std::mem::swap(&mut b.buf, &mut spare);
        let lines = std::mem::take(&mut b.lines);
        drop(b);
        if out.write_all(&spare).and_then(|()| out.flush()).is_err() {
            shared.dropped.fetch_add(lines as u64, Ordering::Relaxed);
        }
        let now = Instant::now();
        last_write = Some(now);
        spare.clear();
        if spare.capacity() > KEEP_CAPACITY {
            spare = Vec::new();
        }
        b = shared.lock();
        b.done += lines as u64;
        if b.flushers > 0 {
            shared.written.notify_all();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Condvar, Mutex};

    /// Whether the gate is open, and what went through it.
    type GateState = Mutex<(bool, Vec<u8>)>;

    /// An output that takes nothing until it is opened, then records everything.
    #[derive(Clone, Default)]
    struct Gated(Arc<(GateState, Condvar)>);

    impl Gated {
        fn open(&self) {
            self.0 .0.lock().unwrap().0 = true;
            self.0 .1.notify_all();
        }
        fn text(&self) -> String {
            String::from_utf8(self.0 .0.lock().unwrap().1.clone()).unwrap()
        }
    }

    impl Write for Gated {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            let (lock, cv) = &*self.0;
            let mut g = cv.wait_while(lock.lock().unwrap(), |g| !g.0).unwrap();
            g.1.extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    fn lines_through(queue: usize, n: usize, out: &Gated, gate_open: bool) -> u64 {
        if gate_open {
            out.open();
        }
        let q = spawn(out.clone(), queue);
        let sub = tracing_subscriber::fmt()
            .with_writer(q.writer.clone())
            .with_ansi(false)
            .finish();
        tracing::subscriber::with_default(sub, || {
            for i in 0..n {
                tracing::info!(i, client = "192.0.2.1", "message");
            }
        });
        let dropped = q.dropped.get();
        out.open();
        drop(q);
        dropped
    }

    #[test]
    fn every_line_is_written_whole_when_the_queue_has_room() {
        let out = Gated::default();
        let dropped = lines_through(4096, 2000, &out, true);
        assert_eq!(dropped, 0);
        let text = out.text();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 2000);
        for (i, l) in lines.iter().enumerate() {
            assert!(
                l.ends_with(&format!("message i={i} client=\"192.0.2.1\"")),
                "{l}"
            );
        }
    }

    #[test]
    fn a_full_queue_drops_lines_and_counts_each_one() {
        // The output is stalled while the lines are produced: the queue of 4 fills, the
        // thread blocks on its first write, and the rest is dropped.
        let out = Gated::default();
        let dropped = lines_through(4, 500, &out, false);
        let written = out.text().lines().count() as u64;
        assert!(
            dropped > 0 && written > 0,
            "{written} written, {dropped} dropped"
        );
        assert_eq!(written + dropped, 500);
        // What was written is whole lines, in order.
        let text = out.text();
        let mut last = None;
        for l in text.lines() {
            let i: usize = l
                .split("i=")
                .nth(1)
                .and_then(|r| r.split(' ').next())
                .and_then(|v| v.parse().ok())
                .unwrap_or_else(|| panic!("torn line {l:?}"));
            assert!(last.is_none_or(|p| p < i), "{l}");
            last = Some(i);
        }
    }

    #[test]
    fn dropping_the_guard_writes_what_is_queued() {
        let out = Gated::default();
        out.open();
        let mut q = spawn(out.clone(), 1000);
        for i in 0..100 {
            q.writer
                .write_all(format!("line {i}\n").as_bytes())
                .unwrap();
        }
        let dropped = q.dropped.get();
        drop(q);
        assert_eq!(dropped, 0);
        assert_eq!(out.text().lines().count(), 100);
    }

    /// An output that counts its `write` calls (and records what they wrote).
    #[derive(Clone, Default)]
    struct Counting(Arc<Mutex<(usize, Vec<u8>)>>);

    impl Write for Counting {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            let mut g = self.0.lock().unwrap();
            g.0 += 1;
            g.1.extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn lines_queued_during_a_write_go_out_together_in_the_next() {
        // The first line's write is held until every other line is queued: those are
        // written in one more write, not one each.
        let out = Gated::default();
        let writes = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        struct Tally(Gated, Arc<std::sync::atomic::AtomicUsize>);
        impl Write for Tally {
            fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
                self.1.fetch_add(1, Ordering::SeqCst);
                self.0.write(buf)
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let mut q = spawn(Tally(out.clone(), writes.clone()), 1000);
        q.writer.write_all(b"line 0\n").unwrap();
        let t0 = std::time::Instant::now();
        while writes.load(Ordering::SeqCst) == 0 {
            assert!(
                t0.elapsed() < Duration::from_secs(10),
                "the writer never wrote"
            );
            std::thread::sleep(Duration::from_millis(1));
        }
        for i in 1..300 {
            q.writer
                .write_all(format!("line {i}\n").as_bytes())
                .unwrap();
        }
        out.open();
        drop(q.guard);
        assert_eq!(q.dropped.get(), 0);
        let text = out.text();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 300);
        assert!(lines
            .iter()
            .enumerate()
            .all(|(i, l)| *l == format!("line {i}")));
        assert_eq!(writes.load(Ordering::SeqCst), 2);
    }

    #[test]
    fn a_burst_of_lines_is_written_in_few_writes() {
        let out = Counting::default();
        let q = spawn(out.clone(), 65536);
        let sub = tracing_subscriber::fmt()
            .with_writer(q.writer.clone())
            .with_ansi(false)
            .finish();
        tracing::subscriber::with_default(sub, || {
            for i in 0..2000 {
                tracing::info!(i, "message");
            }
        });
        drop(q);
        let g = out.0.lock().unwrap();
        assert_eq!(String::from_utf8_lossy(&g.1).lines().count(), 2000);
        // One write per line would be 2000; a batch is everything queued while the writer
        // gathers or writes.
        assert!(g.0 <= 200, "{} writes for 2000 lines", g.0);
    }

    #[test]
    fn a_flush_returns_once_every_earlier_line_is_written() {
        let out = Counting::default();
        let mut q = spawn(out.clone(), 1000);
        // A busy writer: the lines after the first wait for the end of a gathering span,
        // unless a flush asks for them.
        for i in 0..100 {
            q.writer
                .write_all(format!("line {i}\n").as_bytes())
                .unwrap();
        }
        assert!(q.writer.flush_within(Duration::from_secs(10)));
        let text = String::from_utf8(out.0.lock().unwrap().1.clone()).unwrap();
        assert_eq!(text.lines().count(), 100);
        // Nothing queued: at once.
        assert!(q.writer.flush_within(Duration::ZERO));
    }

    #[test]
    fn a_flush_gives_up_on_a_stalled_output() {
        let out = Gated::default();
        let mut q = spawn(out.clone(), 1000);
        q.writer.write_all(b"stuck\n").unwrap();
        assert!(!q.writer.flush_within(Duration::from_millis(50)));
        out.open();
        assert!(q.writer.flush_within(Duration::from_secs(10)));
        assert_eq!(out.text(), "stuck\n");
    }

    #[test]
    fn lines_of_a_failed_write_are_counted_as_dropped() {
        struct Broken;
        impl Write for Broken {
            fn write(&mut self, _: &[u8]) -> std::io::Result<usize> {
                Err(std::io::ErrorKind::BrokenPipe.into())
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let mut q = spawn(Broken, 100);
        for i in 0..40 {
            q.writer
                .write_all(format!("line {i}\n").as_bytes())
                .unwrap();
        }
        let dropped = q.dropped.clone();
        drop(q);
        assert_eq!(dropped.get(), 40);
    }

    #[test]
    fn log_lines_dropped_reads_the_attached_queue() {
        /// The value of the sample `series` (name with labels, as rendered).
        fn value(text: &str, series: &str) -> Option<String> {
            text.lines()
                .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
                .map(str::to_string)
        }
        let m = crate::metrics::Metrics::new();
        // A queue of one line in front of a writer that is stuck in its first write: the
        // next line waits in the queue, every later one is dropped.
        struct Stalled {
            entered: std::sync::mpsc::Sender<()>,
            gate: std::sync::mpsc::Receiver<()>,
        }
        impl Write for Stalled {
            fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
                let _ = self.entered.send(());
                let _ = self.gate.recv();
                Ok(b.len())
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let (entered, stuck) = std::sync::mpsc::channel();
        let (release, gate) = std::sync::mpsc::channel();
        let mut q = spawn(Stalled { entered, gate }, 1);
        q.dropped.register_metrics(&m);
        assert_eq!(
            value(&m.render(), "floodgate_log_lines_dropped_total").as_deref(),
            Some("0")
        );
        q.writer.write_all(b"first\n").unwrap();
        stuck
            .recv_timeout(std::time::Duration::from_secs(10))
            .expect("the writer thread takes the first line");
        for _ in 0..10 {
            q.writer.write_all(b"line\n").unwrap();
        }
        assert_eq!(q.dropped.get(), 9);
        assert_eq!(
            value(&m.render(), "floodgate_log_lines_dropped_total").as_deref(),
            Some("9")
        );
        drop(release);
    }
}
