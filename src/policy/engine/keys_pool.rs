//! The message-key pool: a few threads of their own compute message keys, off the
//! sessions' async workers, so that no message, however crafted, holds up another client's
//! greeting or commands.
//!
//! The pool has [`threads`] threads, started at its first job, each at a lower scheduling
//! priority than the workers (nice 10 on Linux): a busy pool yields the cores to the
//! sessions. A job waits for one of as many permits as there are threads, asynchronously:
//! while every thread is busy, the sessions whose messages wait queue on the permits (at
//! most one message per session) and their workers serve the other sessions meanwhile.
//! The threads end when the pool is dropped.

use std::panic::AssertUnwindSafe;
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use tokio::sync::{oneshot, Semaphore};

/// One piece of work for a thread of the pool.
type Job = Box<dyn FnOnce() + Send>;

/// Threads of the pool on this machine: half its cores, at least one, so that the sessions'
/// workers always have cores the pool leaves them.
pub(super) fn threads() -> usize {
    std::thread::available_parallelism()
        .map_or(1, std::num::NonZeroUsize::get)
        .div_ceil(2)
}

/// A pool of threads for message keys (see the module documentation).
pub(super) struct KeysPool {
    threads: usize,
    /// Where jobs go; the threads are started with it.
    jobs: OnceLock<Option<Sender<Job>>>,
    /// One per thread: a job holds one from when it is queued until it is done.
    permits: Arc<Semaphore>,
}

impl KeysPool {
    /// A pool of `threads` threads (at least one), started at its first job.
    pub(super) fn new(threads: usize) -> KeysPool {
        let threads = threads.max(1);
        KeysPool {
            threads,
            jobs: OnceLock::new(),
            permits: Arc::new(Semaphore::new(threads)),
        }
    }

    /// Runs `work` on a thread of the pool once one is free, waiting asynchronously until
    /// then; its result, or `None` when the pool's threads could not be started or `work`
    /// panicked.
    pub(super) async fn run<T: Send + 'static>(
        &self,
        work: impl FnOnce() -> T + Send + 'static,
    ) -> Option<T> {
        let permit = self.permits.clone().acquire_owned().await.ok()?;
        let (tx, rx) = oneshot::channel();
        let job: Job = Box::new(move || {
            let out = work();
            drop(permit);
            let _ = tx.send(out);
        });
        self.jobs
            .get_or_init(|| self.start())
            .as_ref()?
            .send(job)
            .ok()?;
        rx.await.ok()
    }

    /// Starts the threads; `None` when not one could be.
    fn start(&self) -> Option<Sender<Job>> {
        let (tx, rx) = channel::<Job>();
        let rx = Arc::new(Mutex::new(rx));
        let mut started = 0;
        for i in 0..self.threads {
            let rx = rx.clone();
            let spawned = std::thread::Builder::new()
                .name(format!("floodgate-keys-{i}"))
                .spawn(move || serve(&rx));
            match spawned {
                Ok(_) => started += 1,
                Err(e) => tracing::warn!(error = %e, "cannot start a message-key thread"),
            }
        }
        (started > 0).then_some(tx)
    }
}

/// A thread of the pool: jobs one after the other until the pool is dropped.
fn serve(jobs: &Mutex<Receiver<Job>>) {
    lower_priority();
    loop {
        // The lock is held only while waiting for the next job, not while running it.
        let job = jobs.lock().unwrap_or_else(|e| e.into_inner()).recv();
        let Ok(job) = job else { return };
        // A panic drops the job's permit and its answer: the session gets no keys.
        let _ = std::panic::catch_unwind(AssertUnwindSafe(job));
    }
}

/// Makes the calling thread yield to the sessions' workers: nice 10 (Linux, where nice is
/// per thread); elsewhere nothing.
fn lower_priority() {
    #[cfg(target_os = "linux")]
    {
        // SAFETY: gettid and setpriority take and return plain integers.
        let tid = unsafe { libc::syscall(libc::SYS_gettid) };
        if let Ok(tid) = libc::id_t::try_from(tid) {
            // SAFETY: as above; a failure leaves the priority as it was.
            let _ = unsafe { libc::setpriority(libc::PRIO_PROCESS, tid, 10) };
        }
    }
}

/// The CPU time the calling thread has used: the clock of a message's budget, so that time
/// the thread spends waiting for a core is not charged to the message.
pub(super) fn thread_cpu_time() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid timespec for the call to write.
    if unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) } != 0 {
        return Duration::ZERO;
    }
    Duration::new(
        u64::try_from(ts.tv_sec).unwrap_or(0),
        u32::try_from(ts.tv_nsec).unwrap_or(0),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn jobs_run_on_the_pool_threads_and_answer() {
        let pool = KeysPool::new(2);
        let name = pool
            .run(|| std::thread::current().name().map(str::to_string))
            .await;
        assert!(name.flatten().unwrap().starts_with("floodgate-keys-"));
        let sums = futures_join(&pool).await;
        assert_eq!(sums, vec![Some(0), Some(1), Some(2), Some(3)]);
    }

    async fn futures_join(pool: &KeysPool) -> Vec<Option<u64>> {
        let (a, b, c, d) = tokio::join!(
            pool.run(|| 0u64),
            pool.run(|| 1u64),
            pool.run(|| 2u64),
            pool.run(|| 3u64)
        );
        vec![a, b, c, d]
    }

    #[tokio::test]
    async fn a_panicking_job_answers_none_and_the_pool_goes_on() {
        let pool = KeysPool::new(1);
        assert_eq!(pool.run(|| -> u8 { panic!("job") }).await, None);
        assert_eq!(pool.run(|| 7u8).await, Some(7));
        assert_eq!(pool.permits.available_permits(), 1);
    }

    #[test]
    fn the_cpu_clock_moves_with_work() {
        let before = thread_cpu_time();
        let mut x = 0u64;
        for _ in 0..100_000_000 {
            x = std::hint::black_box(x.wrapping_add(1));
            if thread_cpu_time() > before {
                break;
            }
        }
        assert!(thread_cpu_time() > before);
        assert!(threads() >= 1);
    }
}
