//! Choosing the worker that serves a new session.
//!
//! Every worker accepts from the same listening socket, and whichever event loop wakes first
//! takes the connection, so left alone the split is chance. Here the worker that accepts a
//! connection picks the one to serve it and hands the connection over if that is another
//! worker. How it picks is the `[server] placement`:
//!
//! - **`even`** (the default): a worker keeps the connection unless another has fewer live
//!   sessions, then the first of the least loaded serves it. So at every accept the counts
//!   differ by at most one, whatever the order of wake-ups, and every core shares the work.
//! - **`pack`**: the first worker, in worker order, whose load is below [`PACK_BELOW`] serves
//!   it. A worker's load is the larger of how busy its loop has been lately (the share of
//!   time it was not waiting for events, weighted over about [`WINDOW`]) and its live
//!   sessions times [`SESSION_FLOOR`]. So while the first loop has time to spare, sessions
//!   stay on it: a loop that is already awake serves more events per wake-up, and the other
//!   cores stay free for the mail server. When every worker is loaded, the least loaded one
//!   serves it (the accepting worker when it is among them). The session floor makes a burst
//!   of long-lived connections spread once a loop holds `PACK_BELOW / SESSION_FLOOR`
//!   sessions, before its loop can show how busy they keep it.
//!
//! The busy share is kept by each worker's runtime hooks (one clock read as the loop goes to
//! sleep and one as it wakes) and read by the accepting worker, so choosing takes no lock.
//! It is also exported as a metric, under either placement.

use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::config::Placement;

/// The span over which a loop's busy share is weighted: long enough to smooth over single
/// events, short enough to follow a change of load within a few dozen connections.
pub const WINDOW: Duration = Duration::from_millis(25);

/// A worker whose load is below this (parts per million of one core) takes new sessions
/// before any later worker does.
pub const PACK_BELOW: u32 = 750_000;

/// The least load a live session counts for (parts per million of one core): a loop packs at
/// most `PACK_BELOW / SESSION_FLOOR` sessions, 16, before later workers are considered.
pub const SESSION_FLOOR: u32 = PACK_BELOW / 16;

const MILLION: u64 = 1_000_000;

/// The busy share after a loop was idle for `idle` and then busy for `busy` nanoseconds,
/// given its share `ppm` before: the span's own share weighted by the span's length against
/// [`WINDOW`] (all of it for a span of a window or more).
pub fn step(ppm: u32, busy: u64, idle: u64) -> u32 {
    let span = busy.saturating_add(idle);
    if span == 0 {
        return ppm;
    }
    let share = (u128::from(busy) * u128::from(MILLION) / u128::from(span)) as i64;
    let window = WINDOW.as_nanos() as u64;
    if span >= window {
        return share as u32;
    }
    let ppm = i64::from(ppm);
    (ppm + (share - ppm) * span as i64 / window as i64) as u32
}

/// A loop's busy share now, `elapsed` nanoseconds after it last went to sleep (`parked`) or
/// woke: sleeping decays it towards 0 and running raises it towards a whole core, each
/// completely within a [`WINDOW`].
pub fn current(ppm: u32, parked: bool, elapsed: u64) -> u32 {
    let window = WINDOW.as_nanos() as u64;
    let elapsed = elapsed.min(window);
    let ppm = u64::from(ppm);
    let now = if parked {
        ppm * (window - elapsed) / window
    } else {
        ppm + (MILLION - ppm.min(MILLION)) * elapsed / window
    };
    now as u32
}

/// Which worker serves a connection just accepted by worker `me` under `placement`, given
/// each worker's `(busy share, live sessions)` in worker order (see the module's
/// documentation).
pub fn pick(
    placement: Placement,
    loads: impl IntoIterator<Item = (u32, usize)>,
    me: usize,
) -> usize {
    match placement {
        Placement::Even => pick_even(loads.into_iter().map(|(_, n)| n), me),
        Placement::Pack => pick_packed(loads, me),
    }
}

/// `even`: `me` unless another worker has fewer sessions, then the first of the least
/// loaded. The counts differ by at most one afterwards if they did before.
fn pick_even(sessions: impl IntoIterator<Item = usize>, me: usize) -> usize {
    let mut mine = None;
    let mut least: Option<(usize, usize)> = None;
    for (worker, n) in sessions.into_iter().enumerate() {
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

/// `pack`: the first worker with room, else the least loaded (`me` on a tie).
fn pick_packed(loads: impl IntoIterator<Item = (u32, usize)>, me: usize) -> usize {
    let mut least: Option<(usize, u32)> = None;
    let mut mine = None;
    for (worker, (busy, sessions)) in loads.into_iter().enumerate() {
        let floor = u32::try_from(sessions)
            .unwrap_or(u32::MAX)
            .saturating_mul(SESSION_FLOOR);
        let load = busy.max(floor);
        if load < PACK_BELOW {
            return worker;
        }
        if worker == me {
            mine = Some(load);
        }
        if least.is_none_or(|(_, l)| load < l) {
            least = Some((worker, load));
        }
    }
    match (least, mine) {
        (Some((_, l)), Some(m)) if m <= l => me,
        (Some((worker, _)), _) => worker,
        (None, _) => me,
    }
}

/// How busy one worker's loop has been: written only by that worker's runtime hooks.
#[derive(Debug, Default)]
struct Busy {
    /// The weighted busy share, parts per million, as of the last time the loop slept.
    ppm: AtomicU32,
    /// When the loop last went to sleep, nanoseconds since [`WorkerLoads`]' epoch.
    parked_at: AtomicU64,
    /// When the loop last woke, likewise.
    woke_at: AtomicU64,
}

/// Live sessions and busy shares per worker, and how many connections were handed between
/// workers.
#[derive(Debug)]
pub struct WorkerLoads {
    placement: Placement,
    sessions: Vec<AtomicUsize>,
    busy: Vec<Busy>,
    epoch: Instant,
    handoffs: AtomicU64,
}

impl WorkerLoads {
    /// Counts for `workers` workers, all idle, placing sessions by `placement`.
    pub fn new(workers: usize, placement: Placement) -> Self {
        WorkerLoads {
            placement,
            sessions: (0..workers.max(1)).map(|_| AtomicUsize::new(0)).collect(),
            busy: (0..workers.max(1)).map(|_| Busy::default()).collect(),
            epoch: Instant::now(),
            handoffs: AtomicU64::new(0),
        }
    }

    fn now(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }

    /// Worker `worker`'s loop is about to wait for events: the busy span since it woke ends.
    /// Called from that worker's thread only (its runtime's park hook).
    pub fn parking(&self, worker: usize) {
        let Some(b) = self.busy.get(worker) else {
            return;
        };
        let now = self.now();
        let woke = b.woke_at.load(Ordering::Relaxed);
        let parked = b.parked_at.load(Ordering::Relaxed);
        let ppm = step(
            b.ppm.load(Ordering::Relaxed),
            now.saturating_sub(woke),
            woke.saturating_sub(parked),
        );
        b.ppm.store(ppm, Ordering::Relaxed);
        b.parked_at.store(now, Ordering::Relaxed);
    }

    /// Worker `worker`'s loop woke. Called from that worker's thread only (its runtime's
    /// unpark hook).
    pub fn woken(&self, worker: usize) {
        if let Some(b) = self.busy.get(worker) {
            b.woke_at.store(self.now(), Ordering::Relaxed);
        }
    }

    /// Each worker's busy share now, parts per million of one core.
    pub fn busy(&self) -> Vec<u32> {
        let now = self.now();
        self.busy.iter().map(|b| Self::busy_at(b, now)).collect()
    }

    fn busy_at(b: &Busy, now: u64) -> u32 {
        let parked = b.parked_at.load(Ordering::Relaxed);
        let woke = b.woke_at.load(Ordering::Relaxed);
        let ppm = b.ppm.load(Ordering::Relaxed);
        if parked >= woke {
            current(ppm, true, now.saturating_sub(parked))
        } else {
            current(ppm, false, now.saturating_sub(woke))
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
        // Only packing reads the busy shares (and the clock).
        let now = (self.placement == Placement::Pack).then(|| self.now());
        let loads = self.busy.iter().zip(&self.sessions).map(|(b, n)| {
            let busy = now.map_or(0, |now| Self::busy_at(b, now));
            (busy, n.load(Ordering::Relaxed))
        });
        let worker = pick(self.placement, loads, me);
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

    const MS: u64 = 1_000_000;

    fn pack(loads: impl IntoIterator<Item = (u32, usize)>, me: usize) -> usize {
        pick(Placement::Pack, loads, me)
    }

    fn even(sessions: impl IntoIterator<Item = usize>, me: usize) -> usize {
        pick(
            Placement::Even,
            sessions.into_iter().map(|n| (900_000, n)),
            me,
        )
    }

    #[test]
    fn even_keeps_a_connection_unless_another_worker_has_fewer_sessions() {
        assert_eq!(even([0, 0], 0), 0);
        assert_eq!(even([0, 0], 1), 1);
        assert_eq!(even([1, 0], 0), 1);
        assert_eq!(even([1, 0], 1), 1);
        assert_eq!(even([3, 3, 2], 0), 2);
        assert_eq!(even([3, 2, 2], 0), 1);
        assert_eq!(even([2, 3, 2], 0), 0);
        assert_eq!(even([5], 0), 0);
        assert_eq!(even([], 0), 0);
    }

    #[test]
    fn even_guards_count_sessions_where_they_are_served() {
        let loads = Arc::new(WorkerLoads::new(2, Placement::Even));
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

    fn idle(sessions: usize) -> (u32, usize) {
        (0, sessions)
    }

    #[test]
    fn pack_fills_the_first_worker_with_room() {
        assert_eq!(pack([idle(0), idle(0)], 0), 0);
        assert_eq!(
            pack([idle(0), idle(0)], 1),
            0,
            "even when another worker accepted"
        );
        assert_eq!(pack([idle(15), idle(0)], 0), 0);
        assert_eq!(pack([idle(16), idle(0)], 0), 1, "16 sessions fill a loop");
        assert_eq!(pack([(749_999, 3), idle(0)], 0), 0);
        assert_eq!(pack([(750_000, 3), idle(0)], 0), 1, "a busy loop is full");
        assert_eq!(pack([(900_000, 1), (800_000, 2), idle(5)], 0), 2);
        assert_eq!(pack([idle(5)], 0), 0);
        assert_eq!(pack([], 0), 0);
    }

    #[test]
    fn pack_spreads_by_load_once_every_worker_is_full() {
        assert_eq!(pack([idle(17), idle(16)], 0), 1);
        assert_eq!(
            pack([idle(16), idle(16)], 1),
            1,
            "a tie keeps the accepting worker"
        );
        assert_eq!(pack([idle(16), idle(16)], 0), 0);
        assert_eq!(
            pack([(950_000, 2), (800_000, 30)], 0),
            0,
            "30 sessions outweigh 95 %"
        );
        assert_eq!(pack([(950_000, 2), (800_000, 3)], 0), 1);
    }

    #[test]
    fn the_busy_share_follows_the_loop() {
        // A span of a window or more is all that counts.
        assert_eq!(step(0, 30 * MS, 0), 1_000_000);
        assert_eq!(step(1_000_000, 10 * MS, 15 * MS), 400_000);
        // A shorter span counts for its length against the window.
        assert_eq!(step(0, 5 * MS, 0), 200_000);
        assert_eq!(step(500_000, MS / 2, MS / 2), 500_000);
        assert_eq!(step(123, 0, 0), 123);
        // A loop busy half of the time settles at half, from either side.
        let (mut up, mut down) = (0, 1_000_000);
        for _ in 0..1000 {
            up = step(up, 100_000, 100_000);
            down = step(down, 100_000, 100_000);
        }
        assert!((490_000..=510_000).contains(&up), "{up}");
        assert!((490_000..=510_000).contains(&down), "{down}");
        // Between spans, sleeping lowers it and running raises it, within a window.
        assert_eq!(current(800_000, true, 0), 800_000);
        assert_eq!(current(800_000, true, 5 * MS), 640_000);
        assert_eq!(current(800_000, true, 100 * MS), 0);
        assert_eq!(current(800_000, false, 5 * MS), 840_000);
        assert_eq!(current(800_000, false, 100 * MS), 1_000_000);
    }

    #[test]
    fn hooks_measure_the_loop() {
        let loads = WorkerLoads::new(2, Placement::Pack);
        assert_eq!(loads.busy(), vec![0, 0]);
        // A loop that woke and has not slept since is counted busier the longer it runs.
        loads.woken(0);
        std::thread::sleep(Duration::from_millis(30));
        assert_eq!(loads.busy()[0], 1_000_000);
        loads.parking(0);
        assert_eq!(loads.busy()[1], 0);
        // Asleep long enough, it is idle again.
        std::thread::sleep(Duration::from_millis(30));
        assert_eq!(loads.busy()[0], 0);
        // A loop that starts (or wakes) after a long idle and sleeps at once was not busy:
        // the time before its wake counts as idle.
        std::thread::sleep(Duration::from_millis(30));
        loads.woken(1);
        loads.parking(1);
        assert!(loads.busy()[1] < 10_000, "{}", loads.busy()[1]);
    }

    #[test]
    fn pack_guards_count_sessions_where_they_are_served() {
        let loads = Arc::new(WorkerLoads::new(2, Placement::Pack));
        let guards: Vec<_> = (0..20).map(|_| loads.assign(0)).collect();
        assert_eq!(loads.sessions(), vec![16, 4]);
        assert_eq!(loads.handoffs(), 4);
        assert!(guards[..16].iter().all(|g| g.worker() == 0));
        assert!(guards[16..].iter().all(|g| g.worker() == 1));
        drop(guards);
        assert_eq!(loads.sessions(), vec![0, 0]);
        let counted = loads.count(1);
        assert_eq!((counted.worker(), loads.sessions()), (1, vec![0, 1]));
    }

    proptest! {
        /// Whatever worker wins each accept and whenever sessions end, a new session never
        /// leaves its worker more than one session above the least loaded worker.
        #[test]
        fn even_counts_stay_within_one_at_every_accept(
            workers in 1usize..6,
            steps in proptest::collection::vec((0usize..6, any::<bool>(), 0usize..64), 1..200),
        ) {
            let loads = Arc::new(WorkerLoads::new(workers, Placement::Even));
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

        /// The chosen worker is the first with room, or, when none has room, one of the
        /// least loaded.
        #[test]
        fn picks_the_first_with_room_else_the_least_loaded(
            loads in proptest::collection::vec((0u32..=1_000_000, 0usize..40), 1..6),
            me in 0usize..6,
        ) {
            let me = me % loads.len();
            let load = |(busy, n): (u32, usize)| busy.max(n as u32 * SESSION_FLOOR);
            let got = pack(loads.iter().copied(), me);
            match loads.iter().position(|&l| load(l) < PACK_BELOW) {
                Some(first) => prop_assert_eq!(got, first),
                None => {
                    let least = loads.iter().map(|&l| load(l)).min().unwrap();
                    prop_assert_eq!(load(loads[got]), least);
                    if load(loads[me]) == least {
                        prop_assert_eq!(got, me);
                    }
                }
            }
        }

        /// The busy share stays a share of one core, whatever the spans.
        #[test]
        fn the_busy_share_stays_within_one_core(
            spans in proptest::collection::vec((0u64..100 * MS, 0u64..100 * MS), 1..50),
            parked in any::<bool>(),
            elapsed in 0u64..u64::MAX,
        ) {
            let mut ppm = 0;
            for (busy, idle) in spans {
                ppm = step(ppm, busy, idle);
                prop_assert!(ppm <= 1_000_000);
            }
            prop_assert!(current(ppm, parked, elapsed) <= 1_000_000);
        }

        /// Idle loops are filled one after another, 16 sessions each, and once all are full
        /// the counts stay within one of each other.
        #[test]
        fn idle_loops_fill_in_order_then_even_out(workers in 1usize..5, sessions in 0usize..120) {
            let loads = Arc::new(WorkerLoads::new(workers, Placement::Pack));
            let _guards: Vec<_> = (0..sessions).map(|_| loads.assign(0)).collect();
            let counts = loads.sessions();
            prop_assert_eq!(counts.iter().sum::<usize>(), sessions);
            if sessions <= 16 * workers {
                for (w, &n) in counts.iter().enumerate() {
                    prop_assert_eq!(n, sessions.saturating_sub(16 * w).min(16));
                }
            } else {
                let (lo, hi) = (counts.iter().min().unwrap(), counts.iter().max().unwrap());
                prop_assert!(hi - lo <= 1, "{counts:?}");
            }
        }
    }
}
