//! Listeners, admission (connection caps, PROXY header, implicit TLS), signals, reload and
//! shutdown. Protocol details live in `proxy` and `smtp`.

mod balance;
mod fdlimit;
mod limits;

pub use balance::{WorkerLoad, WorkerLoads};
pub use fdlimit::{raise_fd_limit, FdLimit};
pub use limits::{ConnCounter, ConnGuard, Refusal};

use std::net::SocketAddr;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use arc_swap::ArcSwap;
use bytes::BytesMut;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio::time::{timeout, Instant};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{debug, error, info, warn};

use crate::config::StoreConfig;
use crate::config::{ClientIdentity, Config, ConfigError, TlsMode};
use crate::generation::Generation;
use crate::hold::pace::PaceBook;
use crate::metrics::{ListenerMetrics, Metrics, Side};
use crate::policy::engine::Serving;
use crate::policy::{Policy, RatePolicy};
use crate::proxy::{ListenerInfo, Session, Shared, Stream, UpstreamSettings};
use crate::report::Observers;
use crate::smtp::dialogue::replies;
use crate::smtp::proxy_header::{parse_proxy_header, V2_MAX, V2_SIGNATURE};
use crate::store::open::Opened;
use crate::store::Store;

/// Why the server could not start.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    /// A listener address could not be bound.
    #[error("cannot listen on {address}: {source}")]
    Bind {
        /// The configured address.
        address: SocketAddr,
        /// Why.
        source: std::io::Error,
    },
    /// TLS material could not be loaded.
    #[error(transparent)]
    Tls(#[from] crate::tls::TlsError),
    /// The hold spool cannot be used.
    #[error(transparent)]
    Hold(#[from] crate::hold::SpoolError),
    /// A `[[milter]]` cannot listen.
    #[error(transparent)]
    Milter(#[from] crate::milter::MilterListenError),
    /// The ledger of Postfix's hold queue cannot be used.
    #[error("[postfix] ledger: {0}")]
    PostfixLedger(#[from] crate::hold::postfix::LedgerError),
    /// A `[[policy_service]]` cannot listen.
    #[error(transparent)]
    PolicyService(#[from] crate::policy_service::PolicyListenError),
}

/// Why a reload was refused (the generation in force stays).
#[derive(Debug, thiserror::Error)]
pub enum ReloadError {
    /// The config file could not be read, or a section of it was refused.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// What sessions share could not be built from it (certificates, hold spool).
    #[error(transparent)]
    Server(#[from] ServerError),
}

/// Builds what sessions share from a generation (certificates loaded, upstream prepared),
/// with a metrics registry and a book of paced messages of its own.
pub fn build_shared(
    generation: Arc<Generation>,
    policy: Arc<dyn Policy>,
) -> Result<Shared, ServerError> {
    build_shared_with(generation, policy, Arc::new(Metrics::new()), Arc::default())
}

/// What `floodgate check` builds of [`build_shared`]: everything but the hold spool, which
/// is checked without being created ([`crate::hold::Spool::verify`]): a check makes no
/// directory.
pub fn check_shared(
    generation: Arc<Generation>,
    policy: Arc<dyn Policy>,
) -> Result<(), ServerError> {
    if let Some(h) = &generation.hold {
        crate::hold::Spool::verify(h)?;
    }
    build(
        generation,
        policy,
        Arc::new(Metrics::new()),
        Arc::default(),
        false,
    )
    .map(drop)
}

/// [`build_shared`] reporting to `metrics`, its paced messages in `paced` (one book across
/// reloads: paced messages keep waiting in the same queues).
pub fn build_shared_with(
    generation: Arc<Generation>,
    policy: Arc<dyn Policy>,
    metrics: Arc<Metrics>,
    paced: Arc<PaceBook>,
) -> Result<Shared, ServerError> {
    build(generation, policy, metrics, paced, true)
}

/// [`build_shared_with`], the hold spool opened (and made when missing) when `open_hold`.
fn build(
    generation: Arc<Generation>,
    policy: Arc<dyn Policy>,
    metrics: Arc<Metrics>,
    paced: Arc<PaceBook>,
    open_hold: bool,
) -> Result<Shared, ServerError> {
    let config = &generation.config;
    let tls = match &config.tls {
        Some(t) => Some(tokio_rustls::TlsAcceptor::from(crate::tls::server_config(
            &t.certificate,
            &t.private_key,
        )?)),
        None => None,
    };
    let upstream = UpstreamSettings::from_config(config)?;
    let names = Arc::new(crate::proxy::names::NameResolver::new(
        config.timeouts.client_name_lookup.0,
    ));
    let hold = match generation.hold.as_ref().filter(|_| open_hold) {
        Some(h) => Some(Arc::new(crate::hold::Spool::open(
            h.clone(),
            metrics.hold.corrupt.clone(),
        )?)),
        None => None,
    };
    let postfix = match generation.postfix.as_ref().filter(|_| open_hold) {
        Some(p) => Some(Arc::new(crate::hold::postfix::PostfixHold::open(
            p.clone(),
        )?)),
        None => None,
    };
    let high_risk = UpstreamSettings::high_risk(config)?;
    Ok(Shared {
        generation,
        upstream,
        tls,
        policy,
        metrics,
        names,
        hold,
        postfix,
        high_risk,
        paced,
    })
}

/// The rate-limit policy of a running floodgate: `generation`'s limits over `store`, its
/// verdicts and store decisions counted in `metrics`, with every part of `parts`.
pub fn build_policy(
    generation: &Generation,
    store: Arc<dyn Store>,
    metrics: Arc<Metrics>,
    parts: Serving,
) -> RatePolicy {
    let store = Arc::new(crate::store::metered::MeteredStore::new(
        store,
        metrics.clone(),
    ));
    RatePolicy::serving(generation.policy.clone(), store, metrics, parts)
}

/// What sessions share in force, for the parts built before the server that read it once
/// it runs. Sessions share the policy, and the policy's notifier and its view of the hold
/// spool read what sessions share: this handle is made first, given to those parts, and
/// filled by [`Server::bind`]. Until then it holds nothing. Give each server its own.
#[derive(Clone, Default)]
pub struct InForce(Arc<OnceLock<Arc<ArcSwap<Shared>>>>);

impl InForce {
    /// What sessions share now; `None` before the server is bound.
    pub fn get(&self) -> Option<Arc<Shared>> {
        self.0.get().map(|s| s.load_full())
    }
}

/// What a server is built with besides its generation and policy.
pub struct ServerParts {
    /// The metrics registry sessions report to.
    pub metrics: Arc<Metrics>,
    /// The event log and the alerts: every reload hands them their part of the new
    /// generation before the policy takes its limits.
    pub observers: Arc<Observers>,
    /// The paced messages waiting (the book the policy reads).
    pub paced: Arc<PaceBook>,
    /// Filled with what sessions share.
    pub in_force: InForce,
}

/// Starts the store's background tasks: for the memory store, idle expiry and periodic
/// snapshots when `[store] path` is set (with a last one when `stop` fires); Redis expires
/// keys by TTL itself. Await the handle after `stop` for the last snapshot to be written.
pub fn spawn_store_tasks(
    store: &Opened,
    cfg: &StoreConfig,
    stop: CancellationToken,
) -> tokio::task::JoinHandle<()> {
    let Opened::Memory(store) = store else {
        return tokio::spawn(async {});
    };
    let store = store.clone();
    let expiry = tokio::spawn(crate::store::run_expiry(
        store.clone(),
        cfg.expire_interval.0,
        stop.clone(),
    ));
    let snap = cfg.path.clone().map(|path| {
        tokio::spawn(crate::store::run_snapshots(
            store,
            path,
            cfg.snapshot_interval.0,
            stop,
        ))
    });
    tokio::spawn(async move {
        let _ = expiry.await;
        if let Some(s) = snap {
            match s.await {
                Ok(Err(e)) => warn!(error = %e, "final state snapshot failed"),
                Ok(Ok(())) => info!("rate limit state saved"),
                Err(_) => {}
            }
        }
    })
}

/// One listener of the config, bound once per worker.
struct Bound {
    /// One descriptor per worker, all for the same listening socket.
    sockets: Vec<std::net::TcpListener>,
    address: SocketAddr,
    info: ListenerInfo,
    proxy_protocol: bool,
    metrics: ListenerMetrics,
}

/// A running floodgate: bound listeners and the state sessions share.
pub struct Server {
    bound: Vec<Bound>,
    /// The `[[milter]]` sockets, served on the runtime that runs the server.
    milters: Vec<crate::milter::Listener>,
    /// The `[[policy_service]]` sockets, served on the runtime that runs the server.
    policy_services: Vec<crate::policy_service::Listener>,
    workers: usize,
    shared: Arc<ArcSwap<Shared>>,
    observers: Arc<Observers>,
    conns: Arc<ConnCounter>,
    loads: Arc<WorkerLoads>,
    /// Stops accepting (graceful shutdown starts).
    accepting: CancellationToken,
    /// Ends every session now.
    force: CancellationToken,
}

/// Handles to stop a running server from elsewhere (signals, tests).
#[derive(Clone)]
pub struct Control {
    accepting: CancellationToken,
    force: CancellationToken,
    grace: Duration,
    shared: Arc<ArcSwap<Shared>>,
    observers: Arc<Observers>,
}

impl Control {
    /// Graceful stop: no new sessions; running ones may finish within the grace period,
    /// then get 421 4.3.2.
    pub fn shutdown(&self) {
        self.accepting.cancel();
        let force = self.force.clone();
        let grace = self.grace;
        tokio::spawn(async move {
            tokio::time::sleep(grace).await;
            force.cancel();
        });
    }

    /// Fast stop: every session gets 421 4.3.2 now.
    pub fn stop_now(&self) {
        self.accepting.cancel();
        self.force.cancel();
    }

    /// Re-reads the config file and compiles a new generation; on success new sessions use
    /// it, on failure the generation in force stays. Listener addresses, the number of
    /// workers and the placement of sessions on them are not changed by a reload.
    ///
    /// The policy object (and with it the rate-limit store) stays the same; it is handed the
    /// new limits and lists, which every later check uses, in running sessions too. The
    /// observers take theirs first, so the per-key baselines are carried into the new limits
    /// before any check reads them. Any error (config, lists, certificates) refuses the
    /// whole reload.
    pub fn reload(&self) -> Result<(), ReloadError> {
        let cur = self.shared.load_full();
        let generation = Arc::new(Generation::load(&cur.config().path)?);
        let shared = build_shared_with(
            generation.clone(),
            cur.policy.clone(),
            cur.metrics.clone(),
            cur.paced.clone(),
        )?;
        for w in crate::policy::describe::warnings(&generation.policy) {
            warn!("{w}");
        }
        self.observers.reload(generation.observer_settings());
        cur.policy.reload(generation.policy.clone());
        self.shared.store(Arc::new(shared));
        Ok(())
    }

    /// The configuration in force.
    pub fn config(&self) -> Arc<Config> {
        self.shared.load().config().clone()
    }

    /// The generation in force: the config and what was compiled from it.
    pub fn generation(&self) -> Arc<Generation> {
        self.shared.load().generation.clone()
    }

    /// What sessions share now (config, upstream, hold spool).
    pub fn shared(&self) -> Arc<Shared> {
        self.shared.load_full()
    }

    /// The event log and the alerts.
    pub fn observers(&self) -> Option<Arc<Observers>> {
        Some(self.observers.clone())
    }
}

impl Server {
    /// Binds every listener of the generation's config, once per worker.
    pub async fn bind(
        generation: Generation,
        policy: Arc<dyn Policy>,
        parts: ServerParts,
    ) -> Result<Server, ServerError> {
        let ServerParts {
            metrics,
            observers,
            paced,
            in_force,
        } = parts;
        let generation = Arc::new(generation);
        let config = generation.config.clone();
        let shared = build_shared_with(generation, policy, metrics.clone(), paced)?;
        let shared = Arc::new(ArcSwap::from_pointee(shared));
        let workers = match config.server.workers {
            0 => std::thread::available_parallelism().map_or(1, |n| n.get()),
            n => n,
        };
        let mut bound = Vec::new();
        for l in &config.listeners {
            let err = |source| ServerError::Bind {
                address: l.address,
                source,
            };
            // One listening socket, shared by every worker through duplicated descriptors:
            // each worker's event loop accepts from it, so an idle worker takes the next
            // connection. (Not SO_REUSEPORT: that would let a second floodgate silently share
            // the port instead of failing with "address in use".)
            let first = bind_listener(l.address).map_err(err)?;
            let address = first.local_addr().map_err(err)?;
            let std = first.into_std().map_err(err)?;
            let mut sockets = Vec::with_capacity(workers);
            for _ in 1..workers {
                sockets.push(std.try_clone().map_err(err)?);
            }
            sockets.push(std);
            bound.push(Bound {
                sockets,
                address,
                info: ListenerInfo {
                    name: l.display_name().into(),
                    tls: *l.tls.get_ref(),
                    require_tls: l.require_tls,
                    require_auth: l.require_auth,
                },
                proxy_protocol: l.proxy_protocol,
                metrics: metrics.listener(&l.display_name()),
            });
        }
        let milters = config
            .milters
            .iter()
            .map(|m| crate::milter::Listener::bind(m, config.base_dir()))
            .collect::<Result<Vec<_>, _>>()?;
        let policy_services = config
            .policy_services
            .iter()
            .map(|(p, listen)| crate::policy_service::Listener::bind(p, listen))
            .collect::<Result<Vec<_>, _>>()?;
        let loads = Arc::new(WorkerLoads::new(workers, config.server.placement));
        register_worker_metrics(&metrics, &loads);
        let _ = in_force.0.set(shared.clone());
        Ok(Server {
            bound,
            milters,
            policy_services,
            workers,
            shared,
            observers,
            conns: Arc::new(ConnCounter::default()),
            loads,
            accepting: CancellationToken::new(),
            force: CancellationToken::new(),
        })
    }

    /// The bound addresses with their listener names and TLS modes, in config order.
    pub fn local_addrs(&self) -> Vec<(Arc<str>, SocketAddr, TlsMode)> {
        self.bound
            .iter()
            .map(|b| (b.info.name.clone(), b.address, b.info.tls))
            .collect()
    }

    /// The metrics registry sessions report to.
    pub fn metrics(&self) -> Arc<Metrics> {
        self.shared.load().metrics.clone()
    }

    /// The `[[milter]]` sockets, by name, as Postfix's `smtpd_milters` names them.
    pub fn milter_addrs(&self) -> Vec<(Arc<str>, String)> {
        self.milters
            .iter()
            .map(|m| (m.name.clone(), m.postfix_address()))
            .collect()
    }

    /// The number of worker threads.
    pub fn workers(&self) -> usize {
        self.workers
    }

    /// A handle to stop or reload this server.
    pub fn control(&self) -> Control {
        let grace = self.shared.load().config().server.shutdown_grace.0;
        Control {
            accepting: self.accepting.clone(),
            force: self.force.clone(),
            grace,
            shared: self.shared.clone(),
            observers: self.observers.clone(),
        }
    }

    /// Runs the workers until stopped, then waits for every session to end. Each worker is
    /// an OS thread with a single-threaded event loop that accepts from the shared listening
    /// sockets: a session never changes thread, so no cross-thread wake-ups on the hot path.
    pub async fn run(mut self) {
        let milters = self.start_milters();
        let policy_services = self.start_policy_services();
        let mut done = Vec::new();
        let mut closed = Vec::new();
        let (inboxes, receivers): (Vec<_>, Vec<_>) =
            (0..self.workers).map(|_| mpsc::unbounded_channel()).unzip();
        let balance = Arc::new(Balance {
            loads: self.loads.clone(),
            inboxes,
        });
        for (w, inbox) in receivers.into_iter().enumerate() {
            let mut listeners = Vec::new();
            for b in &self.bound {
                listeners.push((
                    b.sockets[w].try_clone(),
                    b.info.clone(),
                    b.proxy_protocol,
                    b.metrics.clone(),
                ));
            }
            let (tx, rx) = tokio::sync::oneshot::channel::<()>();
            done.push(rx);
            let (closed_tx, closed_rx) = tokio::sync::oneshot::channel::<()>();
            closed.push(closed_rx);
            let shared = self.shared.clone();
            let conns = self.conns.clone();
            let force = self.force.clone();
            let stop = self.accepting.clone();
            let ctx = WorkerCtx {
                id: w,
                shared,
                conns,
                force,
                stop,
                balance: balance.clone(),
            };
            let spawned = std::thread::Builder::new()
                .name(format!("floodgate-w{w}"))
                .spawn(move || {
                    worker(ctx, listeners, inbox, closed_tx);
                    let _ = tx.send(());
                });
            if let Err(e) = spawned {
                error!(error = %e, worker = w, "cannot start a worker thread");
            }
        }
        drop(self.bound);
        drop(balance);
        // Every worker has closed its listening descriptors: only then is the port closed.
        for rx in closed {
            let _ = rx.await;
        }
        info!(
            sessions = self.conns.total(),
            "no longer accepting; waiting for sessions"
        );
        for rx in done {
            let _ = rx.await;
        }
        tokio::select! {
            _ = async { milters.wait().await; policy_services.wait().await } => {}
            _ = self.force.cancelled() => {}
        }
        info!("all sessions ended");
    }

    /// Serves the `[[milter]]` sockets on this runtime until the server stops accepting;
    /// each connection takes the generation in force when it starts. The tracker is
    /// closed: waiting on it waits for the milter connections to end.
    fn start_milters(&mut self) -> TaskTracker {
        let tracker = TaskTracker::new();
        let shared = self.shared.clone();
        let ctx: crate::milter::ContextOf = Arc::new(move |name: &Arc<str>| {
            let s = shared.load();
            crate::milter::context(
                s.config(),
                &s.generation.policy,
                s.generation.report.events.is_some(),
                &s.generation.policy.identity,
                s.policy.clone(),
                s.postfix.clone(),
                name,
            )
        });
        for m in self.milters.drain(..) {
            let (t, stop, ctx) = (tracker.clone(), self.accepting.clone(), ctx.clone());
            tracker.spawn(m.serve(ctx, t, stop));
        }
        tracker.close();
        tracker
    }

    /// The `[[policy_service]]` sockets, by name, as `check_policy_service` names them.
    pub fn policy_service_addrs(&self) -> Vec<(Arc<str>, String)> {
        self.policy_services
            .iter()
            .map(|p| (p.name.clone(), p.postfix_address()))
            .collect()
    }

    /// Serves the `[[policy_service]]` sockets on this runtime until the server stops
    /// accepting; each connection takes the generation in force when it starts (a reload
    /// swaps the policy's limits as for the proxy). The tracker is closed: waiting on it
    /// waits for the connections to end.
    fn start_policy_services(&mut self) -> TaskTracker {
        let tracker = TaskTracker::new();
        let shared = self.shared.clone();
        let ctx: crate::policy_service::ContextFn = Arc::new(move |name: &Arc<str>| {
            let s = shared.load();
            crate::policy_service::Context {
                policy: s.policy.clone(),
                identity: s.generation.policy.identity.clone(),
                name: name.clone(),
                postfix: s.postfix.clone(),
            }
        });
        for p in self.policy_services.drain(..) {
            let (t, stop, ctx) = (tracker.clone(), self.accepting.clone(), ctx.clone());
            tracker.spawn(p.serve(ctx, t, stop));
        }
        tracker.close();
        tracker
    }
}

/// Makes the workers' session counts and busy shares part of the exposition.
fn register_worker_metrics(metrics: &Metrics, loads: &Arc<WorkerLoads>) {
    let loads = loads.clone();
    metrics.scrape("workers", move |w| {
        w.gauges(
            "floodgate_worker_sessions",
            "Sessions open now, by worker thread.",
            "worker",
            loads
                .sessions()
                .into_iter()
                .enumerate()
                .map(|(i, n)| (i.to_string(), i64::try_from(n).unwrap_or(i64::MAX))),
        );
        w.gauges(
            "floodgate_worker_busy_ratio",
            "How busy each worker thread's event loop has been lately: the share of time it \
             was not waiting for events, weighted over about 25 ms.",
            "worker",
            loads
                .busy()
                .into_iter()
                .enumerate()
                .map(|(i, ppm)| (i.to_string(), f64::from(ppm) / 1e6)),
        );
        w.counter(
            "floodgate_worker_handoffs_total",
            "Connections accepted by one worker and served by another.",
            loads.handoffs(),
        );
    });
}

type WorkerListener = (
    std::io::Result<std::net::TcpListener>,
    ListenerInfo,
    bool,
    ListenerMetrics,
);

/// What a worker thread needs besides its listening sockets.
struct WorkerCtx {
    id: usize,
    shared: Arc<ArcSwap<Shared>>,
    conns: Arc<ConnCounter>,
    force: CancellationToken,
    stop: CancellationToken,
    balance: Arc<Balance>,
}

/// Session counts and the inboxes through which workers hand connections to each other
/// (see [`balance`]).
struct Balance {
    loads: Arc<WorkerLoads>,
    inboxes: Vec<mpsc::UnboundedSender<Handoff>>,
}

/// A connection accepted by one worker for another to serve.
struct Handoff {
    /// Index of the listener it came in on.
    listener: usize,
    tcp: std::net::TcpStream,
    peer: SocketAddr,
    /// Counts the session on the receiving worker.
    load: WorkerLoad,
}

/// One worker: its own runtime, its own sockets, its own sessions.
fn worker(
    w: WorkerCtx,
    listeners: Vec<WorkerListener>,
    inbox: mpsc::UnboundedReceiver<Handoff>,
    closed: tokio::sync::oneshot::Sender<()>,
) {
    let id = w.id;
    // The thread runs from here without an unpark: count it awake, so the time until its
    // loop first sleeps is busy and the time before it started is not.
    w.balance.loads.woken(id);
    let (parking, waking) = (w.balance.loads.clone(), w.balance.loads.clone());
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .on_thread_park(move || parking.parking(id))
        .on_thread_unpark(move || waking.woken(id))
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            error!(error = %e, worker = id, "cannot start a worker runtime");
            return;
        }
    };
    rt.block_on(async move {
        let tracker = TaskTracker::new();
        // The sessions of this worker watch a child of the shared token: a token is a mutex
        // that every check of it takes, and one shared by both workers' sessions would have
        // its cache line passed between the cores at every poll. Cancelling the parent
        // cancels every child.
        let force = w.force.child_token();
        let stop = w.stop.child_token();
        let mut ctxs = Vec::new();
        let mut sockets = Vec::new();
        for (index, (socket, info, proxy_protocol, listener_metrics)) in
            listeners.into_iter().enumerate()
        {
            let ctx = Arc::new(AcceptCtx {
                worker: id,
                listener: index,
                shared: w.shared.clone(),
                conns: w.conns.clone(),
                tracker: tracker.clone(),
                force: force.clone(),
                balance: w.balance.clone(),
                info,
                proxy_protocol,
                metrics: listener_metrics,
            });
            match socket.and_then(TcpListener::from_std) {
                Ok(l) => sockets.push((l, ctx.clone())),
                Err(e) => {
                    error!(error = %e, worker = id, listener = %ctx.info.name, "cannot use listener socket");
                }
            }
            ctxs.push(ctx);
        }
        let mut loops = Vec::new();
        for (listener, ctx) in sockets {
            loops.push(tokio::spawn(accept_loop(listener, ctx, stop.clone())));
        }
        loops.push(tokio::spawn(inbox_loop(inbox, ctxs, stop.clone())));
        drop(w);
        // Ends with the runtime, after the last session: the draining ones quit too.
        tokio::spawn(pacemaker());
        for l in loops {
            let _ = l.await;
        }
        let _ = closed.send(());
        tracker.close();
        debug!(worker = id, sessions = tracker.len(), "worker stopped accepting");
        tracker.wait().await;
    });
}

/// How often a worker's [`pacemaker`] ticks: below every timeout of the relay path.
const PACEMAKER_TICK: Duration = Duration::from_secs(1);

/// Keeps a timer due within [`PACEMAKER_TICK`] on the worker's timer wheel, for the
/// worker's life.
///
/// tokio's timer driver promises to wake at its earliest timer; a timer registered earlier
/// than that promise makes it write to the event loop's eventfd, even from the loop's own
/// thread, which also ends the next `epoll_wait` at once. A session registers such timers
/// when it begins and ends (the upstream connect timeout, the two-second wait for QUIT's
/// 221 are earlier than every idle timeout already armed), so a worker serving one
/// message per connection made a `write` and a spurious wake-up per connection. With a
/// tick always due within a second, no timer of a second or more is earlier than the
/// promise; the tick itself costs one wake-up a second.
async fn pacemaker() {
    let mut tick = tokio::time::interval(PACEMAKER_TICK);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
    }
}

fn bind_listener(address: SocketAddr) -> std::io::Result<TcpListener> {
    let socket = if address.is_ipv4() {
        tokio::net::TcpSocket::new_v4()?
    } else {
        tokio::net::TcpSocket::new_v6()?
    };
    socket.set_reuseaddr(true)?;
    socket.bind(address)?;
    socket.listen(1024)
}

struct AcceptCtx {
    /// The worker this context belongs to.
    worker: usize,
    /// The listener's index in the config.
    listener: usize,
    shared: Arc<ArcSwap<Shared>>,
    conns: Arc<ConnCounter>,
    tracker: TaskTracker,
    force: CancellationToken,
    balance: Arc<Balance>,
    info: ListenerInfo,
    proxy_protocol: bool,
    metrics: ListenerMetrics,
}

async fn accept_loop(listener: TcpListener, ctx: Arc<AcceptCtx>, stop: CancellationToken) {
    loop {
        let accepted = tokio::select! {
            r = listener.accept() => r,
            _ = stop.cancelled() => return,
        };
        match accepted {
            Ok((tcp, peer)) => {
                let load = ctx.balance.loads.assign(ctx.worker);
                if load.worker() == ctx.worker {
                    serve(tcp, peer, load, ctx.clone());
                } else {
                    hand_off(tcp, peer, load, &ctx);
                }
            }
            Err(e) => {
                // Out of descriptors and similar: back off instead of spinning.
                error!(error = %e, listener = %ctx.info.name, "accept failed");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
}

/// Starts the session of a connection on this worker.
fn serve(tcp: TcpStream, peer: SocketAddr, load: WorkerLoad, ctx: Arc<AcceptCtx>) {
    // Boxed: a session's state is large, and the runtime moves a task's future whole each
    // time it stores it (spawned, finished, its output taken); a box is moved as a pointer.
    ctx.tracker.clone().spawn(Box::pin(async move {
        admit(tcp, peer, &ctx).await;
        drop(load);
    }));
}

/// Sends a connection to the worker `load` counts it on; if that worker no longer takes
/// connections (it is stopping), serves it here.
fn hand_off(tcp: TcpStream, peer: SocketAddr, load: WorkerLoad, ctx: &Arc<AcceptCtx>) {
    let tcp = match tcp.into_std() {
        Ok(t) => t,
        Err(e) => {
            warn!(client = %peer.ip(), error = %e, "cannot pass a connection to another worker");
            return;
        }
    };
    let target = load.worker();
    let handoff = Handoff {
        listener: ctx.listener,
        tcp,
        peer,
        load,
    };
    if let Err(mpsc::error::SendError(back)) = ctx.balance.inboxes[target].send(handoff) {
        drop(back.load);
        let load = ctx.balance.loads.count(ctx.worker);
        match TcpStream::from_std(back.tcp) {
            Ok(tcp) => serve(tcp, back.peer, load, ctx.clone()),
            Err(e) => warn!(client = %back.peer.ip(), error = %e, "cannot take back a connection"),
        }
    }
}

/// Serves the connections other workers hand to this one, until floodgate stops accepting;
/// those already sent by then are still served.
async fn inbox_loop(
    mut inbox: mpsc::UnboundedReceiver<Handoff>,
    ctxs: Vec<Arc<AcceptCtx>>,
    stop: CancellationToken,
) {
    let take = |h: Handoff| {
        let Some(ctx) = ctxs.get(h.listener) else {
            return;
        };
        match TcpStream::from_std(h.tcp) {
            Ok(tcp) => serve(tcp, h.peer, h.load, ctx.clone()),
            Err(e) => {
                warn!(client = %h.peer.ip(), error = %e, "cannot take a connection from another worker")
            }
        }
    };
    loop {
        let next = tokio::select! {
            h = inbox.recv() => h,
            _ = stop.cancelled() => break,
        };
        match next {
            Some(h) => take(h),
            None => return,
        }
    }
    inbox.close();
    while let Ok(h) = inbox.try_recv() {
        take(h);
    }
}

async fn admit(tcp: TcpStream, mut peer: SocketAddr, ctx: &AcceptCtx) {
    let _ = tcp.set_nodelay(true);
    let shared = ctx.shared.load_full();
    let cfg = shared.config().clone();
    // Only a PROXY v2 header and XCLIENT (DESTADDR, DESTPORT) towards upstream need the
    // local address: no syscall otherwise.
    let mut local = if cfg.upstream.client_identity != ClientIdentity::None {
        tcp.local_addr().ok()
    } else {
        None
    };
    let mut tcp = tcp;
    if ctx.proxy_protocol
        && cfg
            .server
            .trusted_proxies
            .iter()
            .any(|c| c.contains(peer.ip()))
    {
        // A connection waiting for its PROXY header holds a place under the total cap
        // (not under the per-IP cap: that belongs to the real client, named by the
        // header, and a load balancer's address would hit it at once), so slow or
        // silent headers cannot open descriptors without bound.
        let Ok(waiting) = ctx
            .conns
            .admit(peer.ip(), cfg.server.max_connections, usize::MAX)
        else {
            let text = replies::too_many_connections(&cfg.server.hostname).to_wire();
            info!(proxy = %peer, reason = ?Refusal::Total, "connection refused");
            let _ = timeout(Duration::from_secs(5), async {
                let _ = tcp.write_all(&text).await;
                let _ = tcp.shutdown().await;
            })
            .await;
            return;
        };
        let header = read_proxy_header(&mut tcp, cfg.timeouts.proxy_header.0).await;
        drop(waiting);
        match header {
            Ok(Some((src, dst))) => {
                peer = src;
                // The address the client connected to is the balancer's, as its header
                // says: that is what a PROXY v2 header towards upstream passes on.
                if let (Some(_), Some(dst)) = (local, dst) {
                    local = Some(dst);
                }
            }
            Ok(None) => {}
            Err(why) => {
                warn!(proxy = %peer, why, "bad PROXY header; closing");
                return;
            }
        }
    }
    let guard = ctx.conns.admit(
        peer.ip(),
        cfg.server.max_connections,
        cfg.server.max_connections_per_ip,
    );
    let Some(stream) = client_stream(tcp, peer, &shared, &cfg, ctx).await else {
        return;
    };
    let _guard = match guard {
        Ok(g) => g,
        Err(why) => {
            let host = &cfg.server.hostname;
            let text = match why {
                Refusal::Total => replies::too_many_connections(host),
                Refusal::PerIp => replies::too_many_connections_from(host, peer.ip()),
            }
            .to_wire();
            info!(client = %peer.ip(), reason = ?why, "connection refused");
            shared.metrics.connection_refused(why.label());
            let mut stream = stream;
            let _ = timeout(Duration::from_secs(5), async {
                let _ = stream.write_all(&text).await;
                let _ = stream.shutdown().await;
            })
            .await;
            return;
        }
    };
    let _open = shared.metrics.session_opened(&ctx.metrics);
    Session::run(
        shared,
        ctx.info.clone(),
        stream,
        peer,
        local,
        ctx.force.clone(),
    )
    .await;
}

/// The client's stream on this listener: the TCP stream itself, or on an implicit-TLS
/// listener the TLS session once its handshake is done (`None` when it failed or timed
/// out, logged here: no session line follows).
async fn client_stream(
    tcp: TcpStream,
    peer: SocketAddr,
    shared: &Shared,
    cfg: &Config,
    ctx: &AcceptCtx,
) -> Option<Stream> {
    if ctx.info.tls != TlsMode::Implicit {
        return Some(Stream::Plain(tcp));
    }
    let acceptor = shared.tls.clone()?;
    let hs = timeout(cfg.timeouts.tls_handshake.0, acceptor.accept(tcp)).await;
    shared
        .metrics
        .tls_handshake(Side::Client, matches!(hs, Ok(Ok(_))));
    match hs {
        Ok(Ok(tls)) => Some(Stream::ServerTls(Box::new(tls))),
        Ok(Err(e)) => {
            info!(client = %peer.ip(), port = peer.port(), listener = %ctx.info.name, error = %e, "TLS handshake failed");
            None
        }
        Err(_) => {
            info!(client = %peer.ip(), port = peer.port(), listener = %ctx.info.name, "TLS handshake timed out");
            None
        }
    }
}

/// Reads a PROXY v1/v2 header byte-exactly (never past its end): the client's address and
/// the one it connected to. `Ok(None)`: a LOCAL or UNKNOWN header, keep the socket's
/// addresses.
async fn read_proxy_header(
    tcp: &mut TcpStream,
    limit: Duration,
) -> Result<Option<(SocketAddr, Option<SocketAddr>)>, &'static str> {
    let deadline = Instant::now() + limit;
    let mut buf = BytesMut::with_capacity(256);
    loop {
        match parse_proxy_header(&buf) {
            Ok(Some((h, used))) => {
                debug_assert_eq!(used, buf.len());
                return Ok(h.source.map(|src| (src, h.destination)));
            }
            Ok(None) => {}
            Err(_) => return Err("malformed PROXY header"),
        }
        if buf.len() >= V2_MAX {
            return Err("PROXY header too long");
        }
        // Read one byte at a time for v1 and up to the announced length for v2, so no SMTP
        // byte (or TLS ClientHello) after the header is consumed here.
        let want = proxy_bytes_wanted(&buf) as u64;
        let n = match timeout(
            deadline.saturating_duration_since(Instant::now()),
            (&mut *tcp).take(want).read_buf(&mut buf),
        )
        .await
        {
            Err(_) => return Err("timed out waiting for the PROXY header"),
            Ok(Err(_)) => return Err("connection error while reading the PROXY header"),
            Ok(Ok(0)) => return Err("connection closed before the PROXY header"),
            Ok(Ok(n)) => n,
        };
        debug_assert!(n as u64 <= want);
    }
}

/// How many bytes can safely be read next without reading past the header.
fn proxy_bytes_wanted(buf: &[u8]) -> usize {
    const V2_SIG: &[u8; 12] = &V2_SIGNATURE;
    if buf.is_empty() {
        return 1; // the first byte tells v1 ("P") from v2 ("\r")
    }
    if buf.len() < 16 {
        if !V2_SIG.starts_with(&buf[..buf.len().min(12)]) {
            return 1; // v1: byte by byte up to CRLF
        }
        return 16 - buf.len();
    }
    if buf.starts_with(V2_SIG) {
        let len = u16::from_be_bytes([buf[14], buf[15]]) as usize;
        return (16 + len).saturating_sub(buf.len()).max(1);
    }
    1
}

#[cfg(test)]
mod tests {
    use super::proxy_bytes_wanted;

    #[test]
    fn proxy_reads_never_overrun() {
        assert_eq!(proxy_bytes_wanted(b""), 1);
        assert_eq!(proxy_bytes_wanted(b"P"), 1);
        assert_eq!(proxy_bytes_wanted(b"\r"), 15);
        assert_eq!(proxy_bytes_wanted(b"\r\n\r\n"), 12);
        let mut v2 = b"\r\n\r\n\0\r\nQUIT\n\x21\x11\x00\x0c".to_vec();
        assert_eq!(proxy_bytes_wanted(&v2), 12);
        v2.extend_from_slice(&[0; 5]);
        assert_eq!(proxy_bytes_wanted(&v2), 7);
    }
}
