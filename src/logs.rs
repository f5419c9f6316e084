//! Log output off the session path.
//!
//! Sessions format a log line into a buffer and hand it to a bounded queue; one thread
//! drains the queue and writes what it took in one `write` per batch (a buffered writer
//! flushed whenever the queue is empty). A session never waits on stderr: when the queue is
//! full the line is dropped and counted ([`DroppedLines`], exposed as
//! `floodgate_log_lines_dropped_total`), so a stalled terminal, pipe or journal costs log
//! lines, never mail.
//!
//! The [`WorkerGuard`] must live as long as logging does: dropping it writes what is still
//! queued (waiting at most about a second) and stops the thread.

use std::io::{BufWriter, Write};

use tracing_appender::non_blocking::{ErrorCounter, NonBlocking, NonBlockingBuilder};

pub use tracing_appender::non_blocking::WorkerGuard;

/// Bytes gathered before the writer thread writes them out (it also writes whenever the
/// queue runs empty).
const WRITE_BUFFER: usize = 64 * 1024;

/// How many log lines were dropped because the queue was full.
#[derive(Clone, Debug)]
pub struct DroppedLines(ErrorCounter);

impl DroppedLines {
    /// Lines dropped so far.
    pub fn get(&self) -> u64 {
        self.0.dropped_lines() as u64
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

/// The writer side of the log queue: what a `tracing_subscriber::fmt` layer writes to.
#[derive(Debug)]
pub struct LogQueue {
    /// Hands each line to the queue (one `write_all` per event, as the fmt layer does).
    pub writer: NonBlocking,
    /// Flushes and stops the writer thread when dropped.
    pub guard: WorkerGuard,
    /// The count of dropped lines.
    pub dropped: DroppedLines,
}

/// Starts the writer thread that writes queued lines to `out`, with room for `queue` lines
/// (at least one).
pub fn spawn<W: Write + Send + 'static>(out: W, queue: usize) -> LogQueue {
    let (writer, guard) = NonBlockingBuilder::default()
        .lossy(true)
        .buffered_lines_limit(queue.max(1))
        .thread_name("floodgate-log")
        .finish(BufWriter::with_capacity(WRITE_BUFFER, out));
    let dropped = DroppedLines(writer.error_counter());
    LogQueue {
        writer,
        guard,
        dropped,
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
