//! Spreading sessions over the workers.
//!
//! Every worker accepts from the same listening socket, and whichever event loop wakes first
//! takes the connection, so the split is left to chance: a burst of connections often lands
//! on one worker, and long-lived sessions (a relay or MUA that keeps its connection) then keep
//! one core busy while another idles. Here each worker counts its live sessions; a worker
//! that accepts a connection while it has more sessions than the least loaded worker hands
//! the connection to that worker instead of serving it. So at every accept the counts differ
//! by at most one, whatever the order of wake-ups.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

/// Live sessions per worker, and how many connections were handed between workers.
#[derive(Debug)]
pub struct WorkerLoads {
    sessions: Vec<AtomicUsize>,
    handoffs: AtomicU64,
}

/// Which worker serves a connection just accepted by worker `me`, given the workers' live
/// session counts in worker order: `me` unless another worker has fewer sessions, then the
/// first of the least loaded. The counts differ by at most one afterwards if they did before.
pub fn pick(loads: impl IntoIterator<Item = usize>, me: usize) -> usize {
    let mut mine = None;
    let mut least: Option<(usize, usize)> = None;
    for (worker, n) in loads.into_iter().enumerate() {
        if worker == me {
            mine = Some(n);
        }
        if least.is_none_or(|(_, fewest)| n < fewest) {
            least = Some((worker, n));
        }
    }
    match (mine, least) {
        (Some(mine), Some((worker, fewest))) if mine > fewest => worker,
        _ => me,
    }
}

impl WorkerLoads {
    /// Counts for `workers` workers, all idle.
    pub fn new(workers: usize) -> Self {
        WorkerLoads {
            sessions: (0..workers.max(1)).map(|_| AtomicUsize::new(0)).collect(),
            handoffs: AtomicU64::new(0),
        }
    }

    /// Live sessions of each worker.
    pub fn sessions(&self) -> Vec<usize> {
        self.sessions
            .iter()
            .map(|n| n.load(Ordering::Relaxed))
            .collect()
    }

    /// Connections accepted by one worker and served by another.
    pub fn handoffs(&self) -> u64 {
        self.handoffs.load(Ordering::Relaxed)
    }

    /// Chooses the worker for a connection worker `me` accepted (see `pick`) and counts the
    /// session there until the returned guard drops.
    pub fn assign(self: &Arc<Self>, me: usize) -> WorkerLoad {
        let loads = self.sessions.iter().map(|n| n.load(Ordering::Relaxed));
        let worker = pick(loads, me);
        if worker != me {
            self.handoffs.fetch_add(1, Ordering::Relaxed);
        }
        self.count(worker)
    }

    /// Counts a session on `worker` until the returned guard drops.
    pub fn count(self: &Arc<Self>, worker: usize) -> WorkerLoad {
        self.sessions[worker].fetch_add(1, Ordering::Relaxed);
        WorkerLoad {
            loads: self.clone(),
            worker,
        }
    }
}

/// One session counted on its worker; dropping it ends the count.
#[derive(Debug)]
pub struct WorkerLoad {
    loads: Arc<WorkerLoads>,
    worker: usize,
}

impl WorkerLoad {
    /// The worker that serves the session.
    pub fn worker(&self) -> usize {
        self.worker
    }
}

impl Drop for WorkerLoad {
    fn drop(&mut self) {
        self.loads.sessions[self.worker].fetch_sub(1, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn keeps_a_connection_unless_another_worker_has_fewer_sessions() {
        assert_eq!(pick([0, 0], 0), 0);
        assert_eq!(pick([0, 0], 1), 1);
        assert_eq!(pick([1, 0], 0), 1);
        assert_eq!(pick([1, 0], 1), 1);
        assert_eq!(pick([3, 3, 2], 0), 2);
        assert_eq!(pick([3, 2, 2], 0), 1);
        assert_eq!(pick([2, 3, 2], 0), 0);
        assert_eq!(pick([5], 0), 0);
        assert_eq!(pick([], 0), 0);
    }

    #[test]
    fn guards_count_sessions_where_they_are_served() {
        let loads = Arc::new(WorkerLoads::new(2));
        let a = loads.assign(0);
        let b = loads.assign(0);
        assert_eq!((a.worker(), b.worker()), (0, 1));
        assert_eq!(loads.sessions(), vec![1, 1]);
        assert_eq!(loads.handoffs(), 1);
        drop(a);
        assert_eq!(loads.sessions(), vec![0, 1]);
        let c = loads.assign(1);
        assert_eq!(c.worker(), 0, "worker 1 is busier, so worker 0 serves it");
        drop((b, c));
        assert_eq!(loads.sessions(), vec![0, 0]);
        assert_eq!(loads.handoffs(), 2);
    }

    proptest! {
        /// Whatever worker wins each accept and whenever sessions end, a new session never
        /// leaves its worker more than one session above the least loaded worker.
        #[test]
        fn counts_stay_within_one_at_every_accept(
            workers in 1usize..6,
            steps in proptest::collection::vec((0usize..6, any::<bool>(), 0usize..64), 1..200),
        ) {
            let loads = Arc::new(WorkerLoads::new(workers));
            let mut live: Vec<WorkerLoad> = Vec::new();
            for (winner, accept, end) in steps {
                if accept || live.is_empty() {
                    let g = loads.assign(winner % workers);
                    let now = loads.sessions();
                    let least = *now.iter().min().unwrap();
                    prop_assert!(now[g.worker()] <= least + 1, "{now:?}");
                    live.push(g);
                } else {
                    live.swap_remove(end % live.len());
                }
                let total: usize = loads.sessions().iter().sum();
                prop_assert_eq!(total, live.len());
            }
        }
    }
}
