#![cfg_attr(not(test), deny(clippy::too_many_lines))]

//! The floodgate command line: `run`, `demo`, `check`, `simulate`, `report`, and the admin verbs
//! `inspect`, `reset`, `top`, `reload` and `held` (which talk to a running floodgate over its admin
//! socket).

/// mimalloc instead of the system allocator: sessions allocate and free small buffers and
/// tokio's cache-aligned I/O state on every connection, where glibc's malloc (and its
/// memalign path) was about a tenth of floodgate's own CPU time under load.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context;
use clap::{Parser, Subcommand};
use tracing::{info, warn};

use floodgate::admin::api::AdminState;
use floodgate::admin::client::{self, Verb};
use floodgate::admin::{serve, Metrics};
use floodgate::config::{Config, LogFormat};
use floodgate::generation::Generation;
use floodgate::hold::pace::PaceBook;
use floodgate::policy::describe::{describe, warnings};
use floodgate::policy::AllowAll;
use floodgate::policy::RatePolicy;
use floodgate::report::{EventLog, Observers};
use floodgate::server::{build_policy, spawn_store_tasks, InForce, Server, ServerParts};
use floodgate::store::open::{OpenError, Opened};
use tokio_util::sync::CancellationToken;

/// The `--version` line: the version and the kind of build, so that a package carrying a
/// debug build (debug assertions, no optimisation) is told apart from a release build.
const VERSION: &str = if cfg!(debug_assertions) {
    concat!(env!("CARGO_PKG_VERSION"), " (debug build)")
} else {
    concat!(env!("CARGO_PKG_VERSION"), " (release build)")
};

/// An SMTP submission proxy that stops outgoing email floods.
#[derive(Parser)]
#[command(name = "floodgate", version = VERSION, about)]
struct Cli {
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Run the proxy.
    Run {
        /// The config file [default: conf/floodgate.toml when present, else
        /// /etc/floodgate/floodgate.toml].
        #[arg(long, short)]
        config: Option<PathBuf>,
    },
    /// Show the shipped policy at work: floodgate on it, in front of an embedded stand-in
    /// smart host, while a normal user and a stolen account send mail; then keep it all
    /// running to try by hand, until Ctrl-C.
    Demo {
        /// The config file whose policy is shown [default: conf/floodgate.toml when
        /// present, else /etc/floodgate/floodgate.toml].
        #[arg(long, short)]
        config: Option<PathBuf>,
        /// Exit after the scenario and its summary.
        #[arg(long)]
        once: bool,
    },
    /// Validate a config file and print what floodgate understood.
    ///
    /// Run by root, it checks as the service's user (--user, else the owner of the first
    /// existing directory the config writes in: /var/lib/floodgate for the package), says
    /// which, and so neither creates nor changes anything the service then cannot use.
    Check {
        /// The config file [default: conf/floodgate.toml when present, else
        /// /etc/floodgate/floodgate.toml].
        #[arg(long, short)]
        config: Option<PathBuf>,
        /// When run by root: check as this user (the unit's User=) instead of the owner of
        /// the state directory.
        #[arg(long)]
        user: Option<String>,
    },
    /// Replay events (JSON lines) through one limit, without network.
    Simulate {
        /// The limit, in any syntax the config accepts (Exim's included).
        #[arg(long)]
        limit: String,
        /// Events, one JSON object a line; standard input when absent.
        file: Option<PathBuf>,
    },
    /// Measure before limiting: per-key peaks of each limit from the event log, with a
    /// suggested limit above all ordinary usage (keys with their own limit from a
    /// `limit_list` are shown against it instead).
    Report(ReportArgs),
    /// Write the man pages (DIR/man) and shell completions (DIR/completions), for packages.
    #[command(hide = true)]
    GenerateDocs {
        /// Where to write them.
        dir: PathBuf,
    },
    /// Show, for every configured limit, what a running floodgate holds for KEY.
    Inspect {
        /// The key: a user name, an address, a client IP, any key text.
        key: String,
        #[command(flatten)]
        admin: AdminArgs,
    },
    /// Remove every record of KEY for every limit in a running floodgate.
    Reset {
        /// The key.
        key: String,
        #[command(flatten)]
        admin: AdminArgs,
    },
    /// List the keys nearest (or furthest over) their limits, highest first.
    Top {
        /// Only this limit.
        #[arg(long)]
        limit: Option<String>,
        /// How many keys.
        #[arg(short = 'n', default_value_t = 20)]
        n: usize,
        #[command(flatten)]
        admin: AdminArgs,
    },
    /// List the restricted keys of a running floodgate (with Redis: of the fleet), with the
    /// limit, the rate that tripped it, who, why, and the evidence.
    Restricted {
        #[command(flatten)]
        admin: AdminArgs,
    },
    /// List the campaigns of a running floodgate (with Redis: of the fleet): message keys
    /// whose `restrict_senders` limit was over in the last 7 days, their accounts, copies,
    /// recipients and held messages.
    Campaigns {
        #[command(flatten)]
        admin: AdminArgs,
    },
    /// One action on every account of a campaign (its id as `floodgate campaigns` prints
    /// it): release-held or delete-held (all their held mail; mail of an account still
    /// restricted needs --confirm to be released), or release (end every restriction).
    /// Needs --reason; each message and restriction is audited, and the campaign's action.
    Campaign {
        /// The campaign's id (`c:…`).
        id: String,
        /// What to do: release-held, delete-held or release.
        #[arg(value_parser = ["release-held", "delete-held", "release"])]
        op: String,
        /// Why (logged, audited; kept out of released messages' headers unless
        /// `[hold] reason_in_header`).
        #[arg(long)]
        reason: String,
        /// Release mail of accounts that are still restricted all the same.
        #[arg(long)]
        confirm: bool,
        #[command(flatten)]
        admin: AdminArgs,
    },
    /// Print the message keys of a message (`${fingerprint}` bands, `${link_domain}`,
    /// `${subject_shape}`) and the lines the fingerprint left out as not the author's
    /// (forwarded, signature, disclaimer; learnt boilerplate only in a running floodgate),
    /// to see why two messages matched; no floodgate needed.
    Fingerprint {
        /// The message (.eml: header section, blank line, body).
        file: PathBuf,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// End KEY's restriction (fleet-wide with Redis) and reset the tripping limit's records
    /// of KEY, so its next message goes through.
    Release {
        /// The restricted key.
        key: String,
        /// Why (logged and sent with the alert).
        #[arg(long)]
        reason: String,
        #[command(flatten)]
        admin: AdminArgs,
    },
    /// Report what became of RCPT of the message upstream queued as QUEUEID (bounced,
    /// deferred or sent): bounces and deferrals are charged, once, to the key that sent it.
    Outcome {
        /// Upstream's queue id.
        queue_id: String,
        /// The recipient.
        rcpt: String,
        /// bounced, deferred or sent.
        #[arg(value_parser = ["bounced", "deferred", "sent"])]
        result: String,
        #[command(flatten)]
        admin: AdminArgs,
    },
    /// Restrict KEY by hand: every MAIL FROM of a session with KEY is refused.
    Restrict {
        /// The key: a user name, a client IP…
        key: String,
        /// How long: a duration (`24h`) or `until_released`.
        #[arg(long = "for", value_parser = parse_restrict_for)]
        duration: String,
        /// Why (logged and sent with the alert).
        #[arg(long)]
        reason: String,
        #[command(flatten)]
        admin: AdminArgs,
    },
    /// Make a running floodgate reload its configuration (as SIGHUP does).
    Reload {
        #[command(flatten)]
        admin: AdminArgs,
    },
    /// Messages in the hold spool: list, show, release, delete.
    Held {
        #[command(subcommand)]
        verb: HeldCmd,
    },
}

#[derive(Subcommand)]
enum HeldCmd {
    /// List held messages: id, key, limit, sender, how many recipients, size, when, Subject.
    List {
        /// Only the messages held for this key.
        #[arg(long)]
        key: Option<String>,
        /// List every recipient of each message instead of their count.
        #[arg(long)]
        wide: bool,
        #[command(flatten)]
        admin: AdminArgs,
    },
    /// Show one held message's envelope, client and header section.
    Show {
        /// The held message's id.
        id: String,
        #[command(flatten)]
        admin: AdminArgs,
    },
    /// Relay held messages upstream as they would have been relayed; each leaves the
    /// spool only once upstream accepted it for every recipient. Needs --reason; mail of a
    /// key still restricted also needs --confirm.
    Release(HeldReleaseArgs),
    /// Delete held messages.
    Delete(HeldTargetArgs),
}

#[derive(clap::Args)]
struct HeldTargetArgs {
    /// The held message's id.
    #[arg(required_unless_present = "key", conflicts_with = "key")]
    id: Option<String>,
    /// Every message held for this key instead.
    #[arg(long)]
    key: Option<String>,
    /// Why (logged, and written in a released message's trace header); a release needs one.
    #[arg(long, default_value = "")]
    reason: String,
    #[command(flatten)]
    admin: AdminArgs,
}

#[derive(clap::Args)]
struct HeldReleaseArgs {
    #[command(flatten)]
    target: HeldTargetArgs,
    /// Release all the same when the key the mail was held for is still restricted
    /// (otherwise refused, naming the restriction).
    #[arg(long)]
    confirm: bool,
}

impl HeldTargetArgs {
    fn target(self, confirm: bool) -> (AdminArgs, client::HeldTarget) {
        let t = client::HeldTarget {
            id: self.id,
            key: self.key,
            reason: self.reason,
            confirm,
        };
        (self.admin, t)
    }
}

#[derive(clap::Args)]
struct ReportArgs {
    /// The config file (its limits, and `[report] events`) [default: conf/floodgate.toml
    /// when present, else /etc/floodgate/floodgate.toml].
    #[arg(long, short)]
    config: Option<PathBuf>,
    /// The event log; `[report] events` when absent.
    #[arg(long)]
    events: Option<PathBuf>,
    /// Only events from this time: RFC 3339 or a duration back from now (`24h`).
    #[arg(long)]
    since: Option<String>,
    /// Only events before this time: RFC 3339 or a duration back from now.
    #[arg(long)]
    until: Option<String>,
    /// Only this limit.
    #[arg(long)]
    limit: Option<String>,
    /// Keys listed per limit.
    #[arg(long, default_value_t = 10)]
    top: usize,
    /// JSON instead of text.
    #[arg(long)]
    json: bool,
    /// Write the report as one self-contained HTML page with charts to FILE (instead of
    /// the text).
    #[arg(long, value_name = "FILE", conflicts_with = "json")]
    html: Option<PathBuf>,
}

/// How the admin verbs find floodgate, and how they answer.
#[derive(clap::Args)]
struct AdminArgs {
    /// The config file (its [admin] socket is used) [default: conf/floodgate.toml when
    /// present, else /etc/floodgate/floodgate.toml].
    #[arg(long, short)]
    config: Option<PathBuf>,
    /// The admin socket (instead of reading the config).
    #[arg(long)]
    socket: Option<PathBuf>,
    /// Print floodgate's JSON answer instead of a table.
    #[arg(long)]
    json: bool,
}

/// `println!` that hands back the write's error instead of panicking: a reader that closed
/// its end (`floodgate fingerprint FILE | head`) ends the verb quietly (see [`main`]).
macro_rules! outln {
    ($($arg:tt)*) => {
        writeln!(std::io::stdout().lock(), $($arg)*)
    };
}

/// Whether `e` is, or was caused by, a write to a pipe whose reader is gone.
fn is_broken_pipe(e: &anyhow::Error) -> bool {
    e.chain().any(|c| {
        c.downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
    })
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Cmd::Run { config } => config_or_default(config).and_then(run),
        Cmd::Check { config, user } => config_or_default(config).and_then(|c| check(c, user)),
        Cmd::Demo { config, once } => config_or_default(config).and_then(|c| demo(c, once)),
        Cmd::Simulate { limit, file } => simulate(&limit, file),
        Cmd::Report(args) => report(args),
        Cmd::GenerateDocs { dir } => generate_docs(&dir),
        Cmd::Inspect { key, admin } => admin_verb(&admin, Verb::Inspect(key)),
        Cmd::Reset { key, admin } => admin_verb(&admin, Verb::Reset(key)),
        Cmd::Restricted { admin } => admin_verb(&admin, Verb::Restricted),
        Cmd::Campaigns { admin } => admin_verb(&admin, Verb::Campaigns),
        Cmd::Campaign {
            id,
            op,
            reason,
            confirm,
            admin,
        } => admin_verb(
            &admin,
            Verb::CampaignAct {
                id,
                op,
                reason,
                confirm,
            },
        ),
        Cmd::Fingerprint { file, json } => fingerprint(&file, json),
        Cmd::Release { key, reason, admin } => admin_verb(&admin, Verb::Release { key, reason }),
        Cmd::Outcome {
            queue_id,
            rcpt,
            result,
            admin,
        } => admin_verb(
            &admin,
            Verb::Outcome {
                queue_id,
                recipient: rcpt,
                result,
            },
        ),
        Cmd::Restrict {
            key,
            duration,
            reason,
            admin,
        } => admin_verb(
            &admin,
            Verb::Restrict {
                key,
                duration,
                reason,
            },
        ),
        Cmd::Top { limit, n, admin } => admin_verb(&admin, Verb::Top { limit, n }),
        Cmd::Reload { admin } => admin_verb(&admin, Verb::Reload),
        Cmd::Held { verb } => match verb {
            HeldCmd::List { key, wide, admin } => admin_verb(&admin, Verb::HeldList { key, wide }),
            HeldCmd::Show { id, admin } => admin_verb(&admin, Verb::HeldShow(id)),
            HeldCmd::Release(a) => {
                let (admin, t) = a.target.target(a.confirm);
                admin_verb(&admin, Verb::HeldRelease(t))
            }
            HeldCmd::Delete(a) => {
                let (admin, t) = a.target(false);
                admin_verb(&admin, Verb::HeldDelete(t))
            }
        },
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        // The reader of stdout has gone (`| head`): what it wanted, it has.
        Err(e) if is_broken_pipe(&e) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("floodgate: {}", error_text(&e));
            ExitCode::FAILURE
        }
    }
}

/// The error and its causes joined by ": ", leaving out a cause whose text the message
/// already carries (a library error that writes its I/O error into its own message and also
/// gives it as its source would otherwise end in the same "(os error N)" twice).
fn error_text(e: &anyhow::Error) -> String {
    let mut text = e.to_string();
    for cause in e.chain().skip(1) {
        let c = cause.to_string();
        if !text.contains(&c) {
            text.push_str(": ");
            text.push_str(&c);
        }
    }
    text
}

/// `--config`, or the config file found without it ([`floodgate::config::default_config`]).
fn config_or_default(config: Option<PathBuf>) -> anyhow::Result<PathBuf> {
    match config {
        Some(c) => Ok(c),
        None => Ok(floodgate::config::default_config()?),
    }
}

/// Installs the log subscriber writing through the log queue; the queue's guard must be
/// kept until exit (dropping it writes what is still queued).
fn init_logs(config: &Config) -> floodgate::logs::LogQueue {
    let queue = floodgate::logs::spawn(std::io::stderr(), config.log.queue);
    let filter = tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| {
        tracing_subscriber::EnvFilter::new(floodgate::tls::log_directives(&config.log.level))
    });
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(false)
        .with_writer(queue.writer.clone());
    match config.log.format {
        // Plain text wherever it goes, its values' control characters escaped.
        LogFormat::Text => builder
            .event_format(floodgate::logs::text::TextFormat)
            .init(),
        LogFormat::Json => builder.json().flatten_event(true).init(),
    }
    queue
}

/// Raises the open-file limit to the hard limit and warns when even that cannot hold
/// `[server] max_connections` sessions (two descriptors each) beside the admin listeners'
/// connections (bounded by `[admin] max_connections` each).
fn check_fd_limit(config: &Config) {
    let max_connections = config.server.max_connections;
    let admin = config.admin.max_descriptors(config.metrics.is_some());
    let needed = floodgate::server::FdLimit::needed(max_connections, admin);
    match floodgate::server::raise_fd_limit() {
        Ok(l) if l.soft < needed => warn!(
            soft = l.soft,
            needed,
            admin,
            "the open-file limit cannot hold [server] max_connections sessions (two descriptors each) \
             beside the admin connections: raise it (LimitNOFILE= in the systemd unit, ulimit -n) \
             or lower max_connections"
        ),
        Ok(l) => info!(limit = l.soft, "open-file limit"),
        Err(e) => warn!(error = %e, "cannot read or raise the open-file limit"),
    }
}

/// `floodgate fingerprint FILE`: the message keys of one message, every one computed.
fn fingerprint(file: &std::path::Path, json: bool) -> anyhow::Result<()> {
    use floodgate::message_keys::{compute, is_automatic, Wanted};
    let bytes = std::fs::read(file).with_context(|| format!("cannot read {}", file.display()))?;
    // Line ends as on the wire, whatever the file has.
    let mut message = Vec::with_capacity(bytes.len() + bytes.len() / 40);
    for (i, &b) in bytes.iter().enumerate() {
        if b == b'\n' && (i == 0 || bytes[i - 1] != b'\r') {
            message.push(b'\r');
        }
        message.push(b);
    }
    let all = Wanted {
        fingerprint: true,
        link_domains: true,
        subject_shape: true,
    };
    let keys = compute(&message, all, &[]);
    let head_end = memchr::memmem::find(&message, b"\r\n\r\n").map_or(message.len(), |i| i + 2);
    let automatic = is_automatic(&message[..head_end]);
    if json {
        let v = serde_json::json!({
            "fingerprint": keys.fingerprint,
            "link_domain": keys.link_domains,
            "subject_shape": keys.subject_shape,
            "automatic": automatic,
            "quoted_lines": keys.quoted_lines,
            "left_out": keys.left_out,
        });
        outln!("{}", serde_json::to_string_pretty(&v)?)?;
        return Ok(());
    }
    if keys.quoted_lines > 0 {
        println!("left out: {} quoted line(s)", keys.quoted_lines);
    }
    for t in &keys.left_out {
        println!(
            "left out ({}): {}",
            serde_json::to_value(t.why)?.as_str().unwrap_or(""),
            t.text
        );
    }
    if keys.fingerprint.is_empty() {
        outln!("fingerprint: none (too little text)")?;
    }
    for f in &keys.fingerprint {
        outln!("fingerprint {f}")?;
    }
    for d in &keys.link_domains {
        outln!("link_domain {d}")?;
    }
    match &keys.subject_shape {
        Some(s) => outln!("subject_shape {s}")?,
        None => outln!("subject_shape: none (no Subject)")?,
    }
    if automatic {
        outln!(
            "automatic or list mail: no message keys unless [message_keys] include_automatic = true"
        )?;
    }
    Ok(())
}

/// Opens the store of `[store]`; an error in its settings is given under the section's
/// name, a snapshot that cannot be loaded as it is.
fn open_store(config: &floodgate::config::StoreConfig) -> anyhow::Result<Opened> {
    floodgate::store::open::open_store(config).map_err(|e| match e {
        OpenError::Snapshot(_) => e.into(),
        e => anyhow::Error::new(e).context("[store]"),
    })
}

fn run(path: PathBuf) -> anyhow::Result<()> {
    let generation = Generation::load(&path)?;
    // Declared before the runtime, so dropped after it: the last lines are written at exit.
    let logs = init_logs(&generation.config);
    check_fd_limit(&generation.config);
    // The control plane (signals, reload) runs here; sessions run on the server's workers.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    runtime.block_on(serve_until_stopped(generation, &logs))
}

/// The stop signals of the background jobs, fired once the server has stopped.
struct Stops {
    /// The admin socket, admin address and metrics listeners.
    admin: CancellationToken,
    /// The hold spool's jobs: held counts published, expiry, the pacer.
    hold: CancellationToken,
    /// The sweep of restrictions ended by time.
    sweep: CancellationToken,
    /// The store's expiry and snapshots (the last snapshot is written when it fires).
    store: CancellationToken,
}

/// Runs floodgate on `generation`: the store, the observers, the policy and the server
/// built in the order each needs the others, then the background jobs and the admin
/// listeners; serves until a signal stops the server, then ends the rest.
async fn serve_until_stopped(
    generation: Generation,
    logs: &floodgate::logs::LogQueue,
) -> anyhow::Result<()> {
    let config = generation.config.clone();
    let store = open_store(&config.store)?;
    let metrics = Arc::new(Metrics::new());
    floodgate::store::metered::register_store_figures(&metrics, &store);
    logs.dropped.register_metrics(&metrics);
    // Sessions share the policy, and the policy's notifier and view of the hold spool, and
    // alert mail and its digest, read what sessions share: a circle, broken by this handle
    // made before any of them and filled when the server binds.
    let in_force = InForce::default();
    let observers = Observers::start(
        generation.observer_settings(),
        store.as_store(),
        mail_parts(&store, &metrics, &in_force),
    )
    .await?;
    let paced = Arc::new(PaceBook::default());
    let policy = build_policy(
        &generation,
        store.as_store(),
        metrics.clone(),
        policy_parts(&observers, &paced, &in_force),
    );
    read_back_queued(&generation, &policy, &metrics);
    let _follower = follow_outcomes(&generation, &policy)?;
    let stops = Stops {
        admin: CancellationToken::new(),
        hold: CancellationToken::new(),
        sweep: CancellationToken::new(),
        store: CancellationToken::new(),
    };
    let store_tasks = spawn_store_tasks(&store, &config.store, stops.store.clone());
    let boilerplate_task = config.store.path.as_ref().map(|p| {
        keep_boilerplate(
            policy.clone(),
            boilerplate_path(p),
            config.store.snapshot_interval.0,
            stops.store.clone(),
        )
    });
    for w in warnings(&generation.policy) {
        warn!("{w}");
    }
    let parts = ServerParts {
        metrics: metrics.clone(),
        observers: observers.clone(),
        paced: paced.clone(),
        in_force,
    };
    let server = Server::bind(generation, Arc::new(policy.clone()), parts).await?;
    start_background_jobs(&server, &policy, &metrics, &stops)?;
    let sigs = install_signals()?;
    let state = admin_state(&server, &store, &metrics, &observers, &policy)?;
    // Removed when this returns (at exit).
    let (_socket_file, extra) = serve_admin(&config, state, &stops.admin).await?;
    print_listening(&server, &extra, &logs.writer);
    tokio::spawn(signals(server.control(), sigs, observers.events().clone()));
    server.run().await;
    stops.admin.cancel();
    stops.hold.cancel();
    stops.sweep.cancel();
    if !observers.events().drain(std::time::Duration::from_secs(5)) {
        warn!("event log: not every event was written before exit");
    }
    stops.store.cancel();
    let _ = store_tasks.await;
    if let Some(t) = boilerplate_task {
        let _ = t.await;
    }
    Ok(())
}

/// Where the learnt boilerplate of the fingerprint is kept: beside the store's snapshot,
/// its name with `.boilerplate` added.
fn boilerplate_path(snapshot: &std::path::Path) -> PathBuf {
    let mut name = snapshot.file_name().unwrap_or_default().to_os_string();
    name.push(".boilerplate");
    snapshot.with_file_name(name)
}

/// Loads the boilerplate learnt before a restart from `path` (when there), then writes it
/// there every `interval` and once more when `stop` fires: temporary file, rename.
fn keep_boilerplate(
    policy: RatePolicy,
    path: PathBuf,
    interval: std::time::Duration,
    stop: CancellationToken,
) -> tokio::task::JoinHandle<()> {
    match std::fs::read(&path) {
        Ok(bytes) => match policy.restore_boilerplate(&bytes) {
            Ok(n) => info!(path = %path.display(), blocks = n, "learnt boilerplate loaded"),
            Err(e) => {
                warn!(path = %path.display(), error = %e, "learnt boilerplate not loaded; learning again")
            }
        },
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => warn!(path = %path.display(), error = %e, "cannot read the learnt boilerplate"),
    }
    tokio::spawn(async move {
        let save = |policy: RatePolicy, path: PathBuf| async move {
            let bytes = policy.boilerplate_bytes();
            let written = tokio::task::spawn_blocking(move || -> std::io::Result<()> {
                use std::os::unix::fs::OpenOptionsExt;
                let tmp = path.with_extension("boilerplate.tmp");
                let mut f = std::fs::OpenOptions::new()
                    .write(true)
                    .create(true)
                    .truncate(true)
                    .mode(0o600)
                    .open(&tmp)?;
                f.write_all(&bytes)?;
                f.sync_all()?;
                std::fs::rename(&tmp, &path)
            })
            .await;
            if let Ok(Err(e)) = written {
                warn!(error = %e, "cannot write the learnt boilerplate");
            }
        };
        let mut ticker = tokio::time::interval(interval.max(std::time::Duration::from_secs(1)));
        ticker.tick().await;
        loop {
            tokio::select! {
                _ = stop.cancelled() => break,
                _ = ticker.tick() => save(policy.clone(), path.clone()).await,
            }
        }
        save(policy, path).await;
    })
}

/// What alert mail needs: the upstream in force to send through, the metrics it counts
/// in, and the daily digest's facts, read as the admin endpoints read them.
fn mail_parts(
    store: &Opened,
    metrics: &Arc<Metrics>,
    in_force: &InForce,
) -> floodgate::report::mailer::MailParts {
    let shared = in_force.clone();
    floodgate::report::mailer::MailParts {
        transport: Arc::new(floodgate::proxy::notify::UpstreamMailer::new(move || {
            shared.get()
        })),
        metrics: metrics.clone(),
        digest: Arc::new(floodgate::admin::digest::AdminDigest::new(
            store.clone(),
            in_force.clone(),
        )),
    }
}

/// What the policy reports to and reads: the observers, the book of paced messages, and
/// `notify_user` mail and the hold spool through what sessions share in force.
fn policy_parts(
    observers: &Arc<Observers>,
    paced: &Arc<PaceBook>,
    in_force: &InForce,
) -> floodgate::policy::engine::Serving {
    // notify_user mail goes through the upstream in force.
    let shared = in_force.clone();
    let notifier = floodgate::proxy::notify::UpstreamNotifier::new(move || shared.get());
    // The evidence's `held` reads the hold spool in force; with Redis each node publishes
    // its counts for the others.
    floodgate::policy::engine::Serving {
        observer: observers.clone(),
        paced: paced.clone(),
        notifier: Arc::new(notifier),
        held: Arc::new(HeldInForce(in_force.clone())),
    }
}

/// The holds in force for the evidence's `held`: the spool and Postfix's hold queue's
/// ledger of the generation sessions share now.
struct HeldInForce(InForce);

impl floodgate::policy::held::HeldSource for HeldInForce {
    fn spool(&self) -> Option<Arc<floodgate::hold::Spool>> {
        self.0.get().and_then(|s| s.hold.clone())
    }

    fn ledger(&self) -> Option<Arc<floodgate::hold::postfix::Ledger>> {
        self.0
            .get()
            .and_then(|s| s.postfix.as_ref().map(|p| p.ledger().clone()))
    }
}

/// Sizes the index of queued messages whose outcomes are still to come and reads them back
/// from the event log.
fn read_back_queued(generation: &Generation, policy: &RatePolicy, metrics: &Arc<Metrics>) {
    policy
        .queue_index()
        .set_capacity(generation.outcomes.remember);
    policy.queue_index().register_metrics(metrics);
    if let Some(events) = &generation.report.events {
        let r = floodgate::outcomes::journal::rebuild(policy.queue_index(), events);
        if r.queued > 0 || r.bad > 0 {
            info!(
                queued = r.queued,
                outcomes = r.outcomes,
                unreadable = r.bad,
                "queued messages read back from the event log"
            );
        }
    }
}

/// Starts following the smart host's log when `[outcomes] follow` names one; the follower
/// stops when the returned value is dropped.
fn follow_outcomes(
    generation: &Generation,
    policy: &RatePolicy,
) -> anyhow::Result<Option<floodgate::outcomes::follow::Running>> {
    let Some(f) = &generation.outcomes.follow else {
        return Ok(None);
    };
    info!(path = %f.path.display(), format = ?f.format, "following the smart host's log");
    Ok(Some(floodgate::policy::outcomes::follow(
        policy.clone(),
        f.clone(),
    )?))
}

/// Starts the jobs that run beside the sessions: the sweep of restrictions ended by time,
/// the publication of held counts, and for the hold spool its recovery, expiry and the
/// pacer.
fn start_background_jobs(
    server: &Server,
    policy: &RatePolicy,
    metrics: &Arc<Metrics>,
    stops: &Stops,
) -> anyhow::Result<()> {
    // Restrictions ended by time are told (log, metric, alert) by one node each.
    tokio::spawn(floodgate::policy::expiry::run(
        policy.clone(),
        floodgate::policy::expiry::SWEEP_EVERY,
        stops.sweep.clone(),
    ));
    tokio::spawn(floodgate::policy::held::run(
        policy.clone(),
        floodgate::policy::held::PUBLISH_EVERY,
        stops.hold.clone(),
    ));
    start_hold_jobs(server, metrics, &stops.hold)
}

/// The hold spool's jobs: recovery and expiry of the spool in force at start, its paced
/// messages read back before any session, and the pacer.
fn start_hold_jobs(
    server: &Server,
    metrics: &Arc<Metrics>,
    stop: &CancellationToken,
) -> anyhow::Result<()> {
    let shared = server.control().shared();
    if let Some(spool) = shared.hold.clone() {
        spool.recover()?;
        floodgate::proxy::refresh_hold_gauges(&spool, metrics);
        let control = server.control();
        tokio::spawn(floodgate::proxy::held_expiry::expire_loop(
            move || control.shared(),
            stop.clone(),
        ));
        let n = floodgate::proxy::pacer::load(&spool, &shared.paced)?;
        if n > 0 {
            info!(messages = n, "paced messages waiting in the hold spool");
        }
    }
    // The pacer releases paced messages at their limits' rates; it reads the spool in
    // force at each round, so a [hold] added by a reload is paced too.
    let control = server.control();
    tokio::spawn(floodgate::proxy::pacer::pace_loop(
        move || control.shared(),
        shared.paced.clone(),
        stop.clone(),
    ));
    Ok(())
}

/// What the admin endpoints work with, its audit log opened.
fn admin_state(
    server: &Server,
    store: &Opened,
    metrics: &Arc<Metrics>,
    observers: &Arc<Observers>,
    policy: &RatePolicy,
) -> anyhow::Result<Arc<AdminState>> {
    let control = server.control();
    // The names of the users who may vouch for an invoker, read before any request.
    floodgate::admin::invoker::prepare();
    let audit = match &control.config().admin.audit {
        Some(path) => Some(
            floodgate::admin::audit::AuditLog::open(path)
                .map_err(|e| anyhow::anyhow!("[admin] audit {}: {e}", path.display()))?,
        ),
        None => None,
    };
    let observer: Arc<dyn floodgate::policy::alert::Observer> = observers.clone();
    Ok(Arc::new(AdminState {
        control,
        store: store.clone(),
        metrics: metrics.clone(),
        observer: Some(observer),
        policy: Some(policy.clone()),
        audit,
    }))
}

/// Serves the admin socket, the admin address and the metrics address that `config` asks
/// for: the socket file (removed when dropped) and a line naming each for the output.
async fn serve_admin(
    config: &Config,
    state: Arc<AdminState>,
    stop: &CancellationToken,
) -> anyhow::Result<(Option<serve::SocketFile>, Vec<String>)> {
    let admin = &config.admin;
    let socket_file = match &admin.socket {
        Some(path) => match serve::serve_unix(path, state.clone(), stop.clone()) {
            Ok(f) => Some(f),
            Err(e) if admin.default_socket => {
                warn!(error = %e, "no admin socket (set [admin] socket to choose one)");
                None
            }
            Err(e) => return Err(e.into()),
        },
        None => None,
    };
    let mut extra = Vec::new();
    if let Some(path) = socket_file.as_ref().and(admin.socket.as_ref()) {
        extra.push(format!("admin socket {}", path.display()));
    }
    if let Some((address, tokens)) = admin.tcp.clone() {
        let a = serve::serve_admin_tcp(address, tokens, state.clone(), stop.clone()).await?;
        extra.push(format!("admin address {a}"));
    }
    if let Some(m) = &config.metrics {
        let a = serve::serve_metrics(m.address, admin.limits, state.metrics.clone(), stop.clone())
            .await?;
        extra.push(format!("metrics address {a}"));
    }
    Ok((socket_file, extra))
}

/// Prints the `listening` lines (scripts read them), then the admin and metrics addresses
/// in `extra`, once what start-up logged is out.
fn print_listening(server: &Server, extra: &[String], log: &floodgate::logs::LogWriter) {
    // One write for all the lines: a script that reads only the first line and closes the
    // pipe must not find a later line failing. A stdout nobody reads any more is not a
    // reason to stop serving.
    let mut text = String::new();
    for (name, addr, tls) in server.local_addrs() {
        text.push_str(&format!("listening {name} {addr} {}\n", tls.as_str()));
        info!(listener = %name, address = %addr, tls = tls.as_str(), "listening");
    }
    for (name, address) in server.milter_addrs() {
        text.push_str(&format!("milter {name} {address}\n"));
    }
    for line in extra {
        text.push_str(line);
        text.push('\n');
    }
    // What start-up logged is out before floodgate says it is listening.
    log.flush_within(std::time::Duration::from_secs(1));
    let mut out = std::io::stdout().lock();
    if let Err(e) = out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        warn!(error = %e, "cannot write the listening lines to stdout");
    }
}

/// How long floodgate may take to come up in the demo.
const DEMO_START: std::time::Duration = std::time::Duration::from_secs(30);
/// How long the demo's scenario may take.
const DEMO_PLAY: std::time::Duration = std::time::Duration::from_secs(150);

/// `floodgate demo`: the stand-in smart host, the alert receiver and the scenario run on a
/// thread of their own; floodgate runs here, as `run` runs it, on the demo's config in a
/// scratch directory (removed at exit). With `once`, the scenario ends floodgate (SIGTERM)
/// after its summary.
fn demo(shipped: PathBuf, once: bool) -> anyhow::Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    use std::sync::mpsc;

    let dir = std::env::temp_dir().join(format!("floodgate-demo-{}", std::process::id()));
    std::fs::DirBuilder::new()
        .mode(0o700)
        .create(&dir)
        .with_context(|| format!("cannot create the demo's directory {}", dir.display()))?;
    let scratch = ScratchDir(dir.clone());
    let (ready_tx, ready_rx) = mpsc::channel();
    let (done_tx, done_rx) = mpsc::channel();
    let side = std::thread::Builder::new()
        .name("demo".into())
        .spawn(move || demo_side(&shipped, &dir, once, &ready_tx, &done_tx))
        .context("cannot start the demo's thread")?;
    let config = match ready_rx.recv() {
        Ok(c) => c,
        Err(_) => {
            return match side.join() {
                Ok(r) => r.and(Err(anyhow::anyhow!(
                    "the demo stopped before floodgate started"
                ))),
                Err(_) => Err(anyhow::anyhow!("the demo's thread panicked")),
            }
        }
    };
    let served = run(config);
    let played = done_rx.try_recv();
    drop(scratch);
    served?;
    match played {
        Ok(r) => r,
        Err(_) if once => Err(anyhow::anyhow!(
            "floodgate stopped before the scenario ended"
        )),
        Err(_) => Ok(()),
    }
}

/// A directory removed with everything in it when dropped.
struct ScratchDir(PathBuf);

impl Drop for ScratchDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Asks this process to stop as SIGTERM does (floodgate drains and exits).
fn stop_floodgate() {
    // SAFETY: kill and getpid have no preconditions; a signal to ourselves is handled by
    // the handlers `run` installed before the admin socket the demo waited for.
    unsafe {
        libc::kill(libc::getpid(), libc::SIGTERM);
    }
}

/// The demo's own thread: starts the stand-in and the receiver, writes the config (sent on
/// `ready`), plays the scenario once floodgate is up, prints the summary (the result sent
/// on `done`), then keeps serving until the process ends, or with `once` stops floodgate.
fn demo_side(
    shipped: &std::path::Path,
    dir: &std::path::Path,
    once: bool,
    ready: &std::sync::mpsc::Sender<PathBuf>,
    done: &std::sync::mpsc::Sender<anyhow::Result<()>>,
) -> anyhow::Result<()> {
    use floodgate::demo::{alerts, scenario, setup, sink};
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .context("cannot start the demo's async runtime")?;
    let (sink, receiver) = runtime.block_on(async {
        Ok::<_, floodgate::demo::DemoError>((sink::start().await?, alerts::start().await?))
    })?;
    let config = setup::write(shipped, dir, sink.addr, &receiver.url())
        .with_context(|| format!("cannot make the demo's config from {}", shipped.display()))?;
    let Some(submission) = config.submission() else {
        anyhow::bail!(
            "{}: the demo needs an implicit-TLS listener",
            shipped.display()
        );
    };
    outln!("floodgate demo: the policy of {}", shipped.display())?;
    outln!(
        "  its clock runs {}x faster for the demo (limits and actions as shipped): an hour of \
         the policy lasts {} s, a day {} s",
        setup::TIME_SCALE,
        setup::demo_hour().as_secs(),
        setup::demo_hour().as_secs() * 24
    )?;
    outln!(
        "  stand-in smart host {} (accepts any user with password {})",
        sink.addr,
        sink::PASSWORD
    )?;
    outln!("  postmaster alerts to {}", receiver.url())?;
    outln!(
        "  state, event log, hold spool and admin socket in {}",
        dir.display()
    )?;
    for (name, shipped_addr, addr) in &config.moved {
        outln!("  listener {name}: {shipped_addr} is taken, using {addr}")?;
    }
    let tls = floodgate::demo::client::tls(&config.ca_file)?;
    let _ = ready.send(config.path.clone());

    let played = runtime.block_on(async {
        scenario::wait_for(&config.socket, submission, DEMO_START).await?;
        // The narration only: a closed stdout must not stop the scenario.
        let _ = outln!(
            "\nThe scenario: {} sends normal mail while the stolen account {} sprays invoices.\n",
            scenario::NORMAL_USER,
            scenario::STOLEN_USER
        );
        tokio::time::timeout(
            DEMO_PLAY,
            scenario::play(submission, tls, sink.queued.clone()),
        )
        .await
        .map_err(|_| floodgate::demo::DemoError::Timeout("the scenario took too long".into()))?
    });
    // Alerts are delivered off the session path: give the last ones a moment.
    std::thread::sleep(std::time::Duration::from_secs(1));
    sink.queued.print_tally();
    let result = played.map_err(anyhow::Error::from).and_then(|p| {
        let standing = scenario::standing(&config.socket)?;
        floodgate::demo::summary::print(&p, &standing, &receiver.received());
        if !standing
            .restricted
            .iter()
            .any(|k| k == scenario::STOLEN_USER)
        {
            anyhow::bail!("the stolen account was not restricted");
        }
        Ok(())
    });
    if once {
        let _ = done.send(result);
        stop_floodgate();
        return Ok(());
    }
    if let Err(e) = &result {
        eprintln!("floodgate demo: {}", error_text(e));
    }
    floodgate::demo::summary::print_try(&config, submission);
    let _ = done.send(result);
    // Serve the stand-in and the receiver until the process ends (Ctrl-C stops floodgate).
    runtime.block_on(std::future::pending::<()>());
    Ok(())
}

/// The signals floodgate handles, registered before the `listening` lines are printed so
/// that a SIGHUP sent as soon as floodgate is up is never fatal (the default action).
struct Signals {
    term: tokio::signal::unix::Signal,
    int: tokio::signal::unix::Signal,
    hup: tokio::signal::unix::Signal,
    usr1: tokio::signal::unix::Signal,
}

fn install_signals() -> anyhow::Result<Signals> {
    use tokio::signal::unix::{signal, SignalKind};
    Ok(Signals {
        term: signal(SignalKind::terminate()).context("cannot handle SIGTERM")?,
        int: signal(SignalKind::interrupt()).context("cannot handle SIGINT")?,
        hup: signal(SignalKind::hangup()).context("cannot handle SIGHUP")?,
        usr1: signal(SignalKind::user_defined1()).context("cannot handle SIGUSR1")?,
    })
}

/// Serves the signals: SIGTERM drains, SIGINT stops, SIGHUP reloads (and reopens the event
/// log), SIGUSR1 reopens the event log only (logrotate; the audit log is opened for each
/// line, so it follows a move by itself).
async fn signals(control: floodgate::server::Control, mut s: Signals, events: EventLog) {
    loop {
        tokio::select! {
            _ = s.term.recv() => {
                info!("SIGTERM: graceful shutdown");
                control.shutdown();
            }
            _ = s.int.recv() => {
                info!("SIGINT: stopping now");
                control.stop_now();
            }
            _ = s.usr1.recv() => {
                events.reopen();
                info!("SIGUSR1: event log reopened");
            }
            _ = s.hup.recv() => match control.reload() {
                Ok(()) => info!("SIGHUP: configuration reloaded"),
                Err(e) => warn!(error = %e, "SIGHUP: new configuration refused; the old one stays in force"),
            },
        }
    }
}

/// `floodgate check`: everything that can refuse the config runs before anything is
/// printed, and the report is written only once all of it passed, so "OK" is never followed
/// by an error.
fn check(path: PathBuf, user: Option<String>) -> anyhow::Result<()> {
    let checked_as = check_as_service_user(&path, user.as_deref())?;
    let generation = Arc::new(Generation::load(&path)?);
    let config = generation.config.clone();
    let path_warnings = config.check_paths()?;
    floodgate::server::check_shared(generation.clone(), Arc::new(AllowAll))
        .map_err(|e| located_shared_error(&config, e))?;
    if let Some(t) = &config.admin.tls {
        floodgate::tls::server_config(&t.certificate, &t.private_key)
            .with_context(|| format!("{}: [admin.tls]", path.display()))?;
    }
    let mut out = Vec::new();
    writeln!(out, "{}: OK", path.display())?;
    if let Some(line) = checked_as {
        writeln!(out, "{line}")?;
    }
    check_listeners(&generation, &mut out)?;
    check_hold(&generation, &mut out)?;
    check_tls_and_admin(&config, &mut out)?;
    check_upstream(&config, &mut out)?;
    check_server_smtp_timeouts(&config, &mut out)?;
    check_store_section(&config, &mut out)?;
    check_report_and_alerts(&generation, &mut out)?;
    check_other_sections(&generation, &mut out)?;
    check_restricted(&generation, &mut out)?;
    for line in describe(&generation.policy) {
        writeln!(out, "{line}")?;
    }
    for w in warnings(&generation.policy) {
        writeln!(out, "warning: {w}")?;
    }
    for w in floodgate::milter::mode::warnings(&config, &generation.policy) {
        writeln!(out, "warning: milter mode: {w}")?;
    }
    for w in path_warnings {
        writeln!(out, "warning: {w}")?;
    }
    let mut stdout = std::io::stdout().lock();
    stdout.write_all(&out)?;
    stdout.flush()?;
    Ok(())
}

/// `floodgate check` run by root: reads the config only to find the service's user
/// (`--user`, else the owner of the config's first state directory) and becomes it before
/// anything is checked (the config read again as that user), so the check is the
/// service's and creates nothing as root; the line saying as whom. `None` when not root
/// (where `--user` naming another user is refused).
fn check_as_service_user(path: &Path, user: Option<&str>) -> anyhow::Result<Option<String>> {
    use floodgate::config::run_as;
    // SAFETY: geteuid has no preconditions and cannot fail.
    let me = unsafe { libc::geteuid() };
    if me != 0 {
        if let Some(u) = run_as::choose(user, &[])?.filter(|u| u.uid != me) {
            anyhow::bail!(
                "--user {}: only root can check as another user (this is uid {me})",
                u.name
            );
        }
        return Ok(None);
    }
    let config = Config::load(path)?;
    let Some(u) = run_as::choose(user, &config.state_directories())? else {
        return Ok(Some(
            "checked as: root (every directory the config writes in is root's; give --user \
             to check as the service's user)"
                .into(),
        ));
    };
    u.become_it()?;
    Ok(Some(format!(
        "checked as: {} (uid {}), {}: the user the service runs as (give --user to choose)",
        u.name, u.uid, u.why
    )))
}

/// `floodgate check`: each listener, the modes they make, each policy service with what its
/// limits need that Postfix's policy requests do not carry, and each milter.
fn check_listeners(generation: &Generation, out: &mut Vec<u8>) -> anyhow::Result<()> {
    let config = &generation.config;
    let mut modes = Vec::new();
    if !config.listeners.is_empty() {
        modes.push("proxy (SMTP in front of [upstream])");
    }
    if !config.policy_services.is_empty() {
        modes.push("Postfix policy service (check_policy_service: no message content)");
    }
    if !config.milters.is_empty() {
        modes.push("Postfix milter (smtpd_milters, non_smtpd_milters)");
    }
    writeln!(out, "mode: {}", modes.join(", "))?;
    for (p, listen) in &config.policy_services {
        let at = match listen {
            floodgate::config::PolicyListen::Unix(path, mode) => {
                format!("unix:{} mode={mode:04o}", path.display())
            }
            floodgate::config::PolicyListen::Tcp(addr) => format!("inet:{addr}"),
        };
        writeln!(
            out,
            "policy_service {}: {at} ({})",
            p.display_name(),
            floodgate::policy_service::blind::restriction_lists(&generation.policy)
        )?;
    }
    if !config.policy_services.is_empty() {
        for w in floodgate::policy_service::blind::blind_spots(&generation.policy) {
            writeln!(out, "warning: policy service: {w}")?;
        }
    }
    for line in floodgate::milter::mode::describe(config) {
        writeln!(out, "{line}")?;
    }
    for l in &config.listeners {
        writeln!(
            out,
            "listener {}: {} tls={} proxy_protocol={} require_tls={} require_auth={}",
            l.display_name(),
            l.address,
            l.tls.get_ref().as_str(),
            l.proxy_protocol,
            l.require_tls,
            l.require_auth
        )?;
    }
    Ok(())
}

/// `floodgate check`: the hold spool, and pacing when a limit paces.
fn check_hold(generation: &Generation, out: &mut Vec<u8>) -> anyhow::Result<()> {
    if let Some(h) = &generation.hold {
        writeln!(
            out,
            "hold: dir={} max_messages={} max_bytes={} ttl={}s on_expiry={} (held messages are answered 250 once on disk and relayed only by `floodgate held release`{})",
            h.dir.display(),
            h.max_messages,
            h.max_bytes,
            h.ttl.as_secs(),
            h.on_expiry.as_str(),
            if h.on_expiry == floodgate::hold::OnExpiry::Release {
                " or when their ttl passes"
            } else {
                "; deleted when their ttl passes"
            }
        )?;
        if generation
            .policy
            .limits
            .iter()
            .any(|l| l.action == floodgate::policy::model::Action::Pace)
        {
            writeln!(
                out,
                "hold: paced messages (action = \"pace\") are released automatically at their limit's rate, oldest first per key, retried with backoff when upstream fails; they do not expire"
            )?;
        }
    }
    if let Some(p) = &generation.postfix {
        writeln!(
            out,
            "postfix: hold queue of config_directory={} through {} -j, {} -q, {} -H/-d (each at most {}s); ledger={} max_held={}",
            p.config_directory.display(),
            p.postqueue.display(),
            p.postcat.display(),
            p.postsuper.display(),
            p.command_timeout.as_secs(),
            p.ledger.display(),
            p.max_held
        )?;
    }
    Ok(())
}

/// `floodgate check`: `[tls]`, the admin address and the admin listeners' limits.
fn check_tls_and_admin(config: &Config, out: &mut Vec<u8>) -> anyhow::Result<()> {
    if let Some(t) = &config.tls {
        writeln!(
            out,
            "tls: certificate={} key={} auth_without_tls={}",
            t.certificate.display(),
            t.private_key.display(),
            t.auth_without_tls
        )?;
    }
    if let Some((address, tokens)) = &config.admin.tcp {
        let a = &config.admin;
        let names: Vec<&str> = tokens.iter().map(|t| t.name.as_str()).collect();
        writeln!(
            out,
            "admin address: {address} tokens={} tls={} console_actions={} login_base_delay={:?} login_max_delay={:?}",
            names.join(","),
            a.tls.is_some(),
            a.console_actions,
            a.login_delay.base,
            a.login_delay.max
        )?;
    }
    let l = &config.admin.limits;
    writeln!(
        out,
        "admin listeners: max_connections={} each, request_timeout={:?} write_timeout={:?}",
        l.max_connections, l.request_timeout, l.write_timeout
    )?;
    Ok(())
}

/// `floodgate check`: `[upstream]` and its high-risk smart host.
fn check_upstream(config: &Config, out: &mut Vec<u8>) -> anyhow::Result<()> {
    let u = &config.upstream;
    writeln!(
        out,
        "upstream: {} tls={} client_identity={} on_identity_refused={} chunking={} server_name={} helo={}",
        u.address.get_ref(),
        u.tls.as_str(),
        u.client_identity.as_str(),
        u.on_identity_refused.as_str(),
        u.chunking,
        config.upstream_server_name(),
        config.helo_name()
    )?;
    if let Some(h) = &u.high_risk {
        writeln!(
            out,
            "upstream.high_risk: {} tls={} client_identity={} chunking={} server_name={} helo={} (messages of reroute limits are relayed here at the end of data, with the client's identity; its answer goes to the client, 451 when it cannot be reached)",
            h.address.get_ref(),
            h.tls.as_str(),
            h.client_identity.as_str(),
            h.chunking,
            floodgate::config::server_name_of(h),
            h.helo_name.as_deref().unwrap_or_else(|| config.helo_name())
        )?;
    }
    Ok(())
}

/// `floodgate check`: `[server]`, `[smtp]` and `[timeouts]`.
fn check_server_smtp_timeouts(config: &Config, out: &mut Vec<u8>) -> anyhow::Result<()> {
    let s = &config.server;
    writeln!(
        out,
        "server: hostname={} max_connections={} per_ip={} max_errors={} shutdown_grace={} resolve_client_names={}",
        s.hostname,
        s.max_connections,
        s.max_connections_per_ip,
        s.max_errors,
        s.shutdown_grace,
        s.resolve_client_names
    )?;
    let m = &config.smtp;
    writeln!(
        out,
        "smtp: command_line={} text_line={} auth_line={} message_size={} recipients={} bare_line_endings={} chunking={} add_received={} received_show_user={}",
        m.max_command_line,
        m.max_text_line,
        m.max_auth_line,
        m.max_message_size,
        m.max_recipients,
        m.bare_line_endings.as_str(),
        m.chunking,
        m.add_received,
        m.received_show_user
    )?;
    let t = &config.timeouts;
    writeln!(
        out,
        "timeouts: command={} data={} session={} tls_handshake={} upstream_connect={} upstream_reply={} client_name_lookup={}",
        t.command,
        t.data,
        t.session,
        t.tls_handshake,
        t.upstream_connect,
        t.upstream_reply,
        t.client_name_lookup
    )?;
    Ok(())
}

/// `floodgate check`: `[store]`, and the store itself reached.
fn check_store_section(config: &Config, out: &mut Vec<u8>) -> anyhow::Result<()> {
    let st = &config.store;
    writeln!(
        out,
        "store: backend={} path={} snapshot_interval={} expire_interval={} idle_ttl={}",
        st.backend,
        st.path
            .as_ref()
            .map_or("(none)".into(), |p| p.display().to_string()),
        st.snapshot_interval,
        st.expire_interval,
        st.idle_ttl
    )?;
    check_store(&config.store, out)?;
    Ok(())
}

/// `floodgate check`: the event log and `[alerts]` (and their mail).
fn check_report_and_alerts(generation: &Generation, out: &mut Vec<u8>) -> anyhow::Result<()> {
    if let Some(e) = &generation.report.events {
        writeln!(
            out,
            "report: events={} max_size={} queue={}",
            e.display(),
            generation
                .report
                .max_size
                .map_or("(none)".into(), |s| s.to_string()),
            generation.report.queue
        )?;
    }
    if let Some(a) = &generation.alerts {
        writeln!(
            out,
            "alerts: period={} max_per_minute={} max_keys={} webhook={} command={}",
            a.period
                .map_or("(each limit's)".into(), |p| format!("{}s", p.as_secs_f64())),
            a.max_per_minute,
            a.max_keys,
            a.webhook.as_ref().map_or("(none)".into(), |u| format!(
                "{}://{}:{}{}",
                if u.tls { "https" } else { "http" },
                u.host,
                u.port,
                u.path
            )),
            a.command
                .as_ref()
                .map_or("(none)".into(), |c| format!("{c:?}"))
        )?;
        match &a.mail {
            Some(m) => {
                writeln!(
                    out,
                    "alerts: mail_to={} mail_from={} mail_digest={} public_url={} (through [upstream])",
                    m.to.join(","),
                    m.from.as_deref().unwrap_or("(MAILER-DAEMON@host name)"),
                    m.digest.map_or("(none)".into(), |t| t.strftime("%H:%M local time").to_string()),
                    m.public_url.as_deref().unwrap_or("(none: no link to the console)"),
                )?;
                for addr in m.example_recipients() {
                    writeln!(
                        out,
                        "warning: [alerts] mail_to {addr} is the example address: change it \
                         (mail to example domains reaches nobody)"
                    )?;
                }
            }
            None => writeln!(out, "alerts: mail off (no mail_to)")?,
        }
    }
    Ok(())
}

/// An error building what sessions share (certificates, upstream's roots, the hold spool),
/// placed at the config value it comes from.
fn located_shared_error(config: &Config, e: floodgate::server::ServerError) -> anyhow::Error {
    use floodgate::server::ServerError;
    use floodgate::tls::TlsError;
    let (section, key) = match &e {
        ServerError::Tls(TlsError::Pem { path, .. }) => {
            if config.tls.as_ref().is_some_and(|t| &t.private_key == path) {
                ("tls", "private_key")
            } else if config.tls.as_ref().is_some_and(|t| &t.certificate == path) {
                ("tls", "certificate")
            } else {
                ("upstream", "ca_file")
            }
        }
        ServerError::Tls(TlsError::NoRoots) => ("upstream", "ca_file"),
        ServerError::Tls(TlsError::Rustls(_)) if config.tls.is_some() => ("tls", "certificate"),
        ServerError::Hold(_) => ("hold", "dir"),
        _ => return e.into(),
    };
    let label = format!("[{section}] {key}");
    let text = e.to_string();
    let message = if text.starts_with(&label) {
        text
    } else {
        format!("{label}: {text}")
    };
    config
        .error_at(config.key_span(section, key), message)
        .into()
}

/// The sections the report above does not show otherwise: the ones absent from the config
/// (said to be off), and `[metrics]`, `[admin]`, `[outcomes]`, `[message_keys]` and `[log]`.
fn check_other_sections(generation: &Generation, out: &mut impl Write) -> anyhow::Result<()> {
    let config = &generation.config;
    if config.tls.is_none() {
        writeln!(out, "tls: none (no [tls]: listeners offer no TLS)")?;
    }
    if generation.hold.is_none() {
        writeln!(out, "hold: off (no [hold]: limits cannot hold or pace)")?;
    }
    if generation.report.events.is_none() {
        writeln!(
            out,
            "report: off (no [report] events: nothing for `floodgate report`)"
        )?;
    }
    if generation.alerts.is_none() {
        writeln!(out, "alerts: off")?;
    }
    match &config.metrics {
        Some(m) => writeln!(out, "metrics: address={} path=/metrics", m.address)?,
        None => writeln!(
            out,
            "metrics: off (no [metrics]; GET /metrics is on the admin socket)"
        )?,
    }
    let a = &config.admin;
    match &a.socket {
        Some(socket) => writeln!(
            out,
            "admin: socket={}{} address={} console_actions={} audit={}",
            socket.display(),
            if a.default_socket { " (default)" } else { "" },
            a.tcp
                .as_ref()
                .map_or("(none)".into(), |(addr, _)| addr.to_string()),
            a.console_actions,
            a.audit
                .as_ref()
                .map_or("(none)".into(), |p| p.display().to_string())
        )?,
        None => writeln!(
            out,
            "admin: off ([admin] enabled = false: the admin verbs cannot reach this floodgate)"
        )?,
    }
    let o = &generation.outcomes;
    match &o.follow {
        Some(f) => writeln!(
            out,
            "outcomes: follow={} format={} poll={}ms remember={}",
            f.path.display(),
            format!("{:?}", f.format).to_lowercase(),
            f.poll.as_millis(),
            o.remember
        )?,
        None => writeln!(
            out,
            "outcomes: follow=(none) remember={} (outcomes come only from `floodgate outcome`)",
            o.remember
        )?,
    }
    let policy = &generation.policy;
    let w = policy.wanted_message_keys();
    let mk = &policy.message_keys;
    if w == floodgate::message_keys::Wanted::default() {
        writeln!(out, "message keys: not computed (no limit is keyed on one)")?;
    } else {
        let names: Vec<&str> = [
            (w.fingerprint, "fingerprint"),
            (w.link_domains, "link_domain"),
            (w.subject_shape, "subject_shape"),
        ]
        .into_iter()
        .filter_map(|(on, n)| on.then_some(n))
        .collect();
        writeln!(
            out,
            "message keys: {} at the end of data; exempt_link_domains={} include_automatic={} budget={}ms",
            names.join(", "),
            if mk.exempt_link_domains.is_empty() {
                "(none)".to_string()
            } else {
                mk.exempt_link_domains.join(",")
            },
            mk.include_automatic,
            mk.budget.as_millis()
        )?;
    }
    let l = &config.log;
    writeln!(
        out,
        "log: level={} format={} queue={}",
        l.level,
        match l.format {
            LogFormat::Text => "text",
            LogFormat::Json => "json",
        },
        l.queue
    )?;
    Ok(())
}

/// Reports the store; for Redis, connects and reports what it found (an
/// unreachable Redis fails the check).
fn check_store(store: &floodgate::config::StoreConfig, out: &mut impl Write) -> anyhow::Result<()> {
    use floodgate::store::open::{open_store, Opened};
    use floodgate::store::redis::redact_url;
    if store.backend != "redis" {
        return Ok(());
    }
    let target = match &store.url {
        Some(u) => redact_url(u),
        None => format!("cluster {}", store.nodes.join(",")),
    };
    writeln!(
        out,
        "store: redis {target} tls={} timeout={} failure_mode={} key_prefix={} hash_tag={}",
        store.tls, store.timeout, store.failure_mode, store.key_prefix, store.hash_tag
    )?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    runtime.block_on(async {
        let Opened::Redis(failover) = open_store(store)? else {
            anyhow::bail!("store backend is not redis");
        };
        match failover.redis().ping().await {
            Ok(info) => {
                writeln!(
                    out,
                    "store: redis answers: version={} mode={} clock skew={}us",
                    info.version, info.mode, info.skew_us
                )?;
                Ok(())
            }
            Err(e) => anyhow::bail!("store: redis {target}: {e}"),
        }
    })
}

fn simulate(limit: &str, file: Option<PathBuf>) -> anyhow::Result<()> {
    let stdout = std::io::stdout();
    let out = std::io::BufWriter::new(stdout.lock());
    match file {
        Some(f) => {
            let input =
                std::fs::File::open(&f).with_context(|| format!("cannot open {}", f.display()))?;
            floodgate::simulate::run(limit, std::io::BufReader::new(input), out)?;
        }
        None => floodgate::simulate::run(limit, std::io::stdin().lock(), out)?,
    }
    Ok(())
}

/// Writes the man pages and completions of this command line into `dir`.
fn generate_docs(dir: &std::path::Path) -> anyhow::Result<()> {
    use clap::CommandFactory;
    let files = floodgate::docs::generate(&Cli::command(), dir)?;
    outln!("wrote {} files into {}", files.len(), dir.display())?;
    Ok(())
}

fn report(a: ReportArgs) -> anyhow::Result<()> {
    use floodgate::report::{analyze, render};
    use floodgate::time;
    let config = config_or_default(a.config)?;
    let generation = Generation::load(&config)?;
    let path = match a.events.or_else(|| generation.report.events.clone()) {
        Some(p) => p,
        None => anyhow::bail!(
            "no event log: give --events PATH or set [report] events in {}",
            config.display()
        ),
    };
    let now = floodgate::store::now_micros();
    let at = |t: &Option<String>, what: &str| -> anyhow::Result<Option<i64>> {
        t.as_deref()
            .map(|s| time::parse_time_arg(s, now).with_context(|| format!("--{what}")))
            .transpose()
    };
    let opts = analyze::Options {
        since_us: at(&a.since, "since")?,
        until_us: at(&a.until, "until")?,
        limit: a.limit,
        top: a.top,
    };
    let file =
        std::fs::File::open(&path).with_context(|| format!("cannot open {}", path.display()))?;
    let mut r = analyze::analyze(
        &generation.policy,
        &path.display().to_string(),
        std::io::BufReader::new(file),
        &opts,
    )?;
    r.baselines = floodgate::report::baseline::summarise(
        &generation.policy,
        &path,
        opts.until_us.unwrap_or(now),
        opts.top,
    )
    .with_context(|| format!("baselines from {}", path.display()))?;
    let mut out = std::io::stdout().lock();
    if let Some(html) = &a.html {
        let file = std::fs::File::open(&path)
            .with_context(|| format!("cannot open {}", path.display()))?;
        let charts = floodgate::report::html::collect(
            &generation.policy,
            &path.display().to_string(),
            std::io::BufReader::new(file),
            &opts,
            &r,
        )?;
        std::fs::write(html, floodgate::report::html::page(&r, &charts))
            .with_context(|| format!("cannot write {}", html.display()))?;
        writeln!(
            out,
            "floodgate report: {} limit(s), {} events: wrote {}",
            r.limits.len(),
            r.events,
            html.display()
        )?;
    } else if a.json {
        serde_json::to_writer_pretty(&mut out, &r)?;
        writeln!(out)?;
    } else {
        out.write_all(render::text(&r).as_bytes())?;
    }
    out.flush()?;
    Ok(())
}

/// Runs one admin verb against a running floodgate and prints the answer.
/// What stays restricted, when the memory store's snapshot can be read; a restriction by a
/// limit that is no longer configured is named as such (it is not freed by its removal).
fn check_restricted(generation: &Generation, out: &mut impl Write) -> anyhow::Result<()> {
    let config = &generation.config;
    if config.store.backend != "memory" {
        return Ok(());
    }
    let Some(path) = &config.store.path else {
        return Ok(());
    };
    let store = floodgate::store::MemoryStore::default();
    match store.load_snapshot_if_present(path) {
        Ok(Some(_)) => {}
        Ok(None) => return Ok(()),
        Err(e) => {
            writeln!(out, "restricted: cannot read the snapshot: {e}")?;
            return Ok(());
        }
    }
    let now = floodgate::store::now_micros();
    for r in store.restricted_set().list(now) {
        let known =
            r.limit == "admin" || generation.policy.limits.iter().any(|d| d.name == r.limit);
        writeln!(
            out,
            "restricted: {} by {} since {} until {}{}",
            r.key,
            r.limit,
            floodgate::time::rfc3339(r.since_us),
            r.until_us
                .map_or("released".into(), floodgate::time::rfc3339),
            if known {
                ""
            } else {
                " (its limit is no longer configured: it stays restricted until released)"
            }
        )?;
    }
    Ok(())
}

/// `--for`: a duration or `until_released`, checked before anything is sent.
fn parse_restrict_for(text: &str) -> Result<String, floodgate::store::RestrictForError> {
    floodgate::store::RestrictFor::parse(text).map(|_| text.trim().to_string())
}

fn admin_verb(args: &AdminArgs, verb: Verb) -> anyhow::Result<()> {
    let socket = match &args.socket {
        Some(s) => s.clone(),
        None => {
            let config = config_or_default(args.config.clone())?;
            let generation = Generation::load(&config)?;
            generation.config.admin.socket.clone().ok_or_else(|| {
                anyhow::anyhow!(
                    "{}: the admin API is off ([admin] enabled = false)",
                    config.display()
                )
            })?
        }
    };
    let answer = client::call(&socket, &verb)?;
    let mut out = std::io::stdout().lock();
    if args.json {
        writeln!(out, "{answer}")?;
    } else {
        write!(out, "{}", client::render(&verb, &answer))?;
    }
    Ok(())
}
