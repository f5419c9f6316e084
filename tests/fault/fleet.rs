//! The fault suite: a fleet as users deploy it, run through the faults of a bad day.
//!
//! Two floodgates share one real Redis (with an append-only file, so a restarted Redis
//! comes back with its data) in front of one real private Postfix with Dovecot SASL. Each
//! node has its own hold spool; node B's is a 96 KiB tmpfs, so it fills. Alerts go to a
//! command that appends them to a file. Four normal users send a message every few seconds;
//! two compromised accounts spray five-recipient messages and retry every refusal. One
//! limit restricts an account past 100 recipients (fleet-wide) and holds what it sends
//! next.
//!
//! While the traffic runs: node A is killed with SIGKILL and restarted; Redis is killed
//! and restarted three times, the fleet running under `failure_mode` local, then open, then
//! closed (each change a rolling restart, SIGTERM then start); node A reloads a broken
//! config and then a good one; node B's spool fills; Postfix is stopped for 30 s. Then the
//! compromised accounts' held mail is released with `floodgate held release --key`.
//!
//! The books must balance exactly: every attempt answered 250 is delivered once per
//! accepted recipient or is still held (nothing lost, nothing doubled), no refused attempt
//! is delivered, each compromised account got at most the limit's 100 recipients out
//! before its restriction and nothing after it until the release, no normal user was held
//! or refused for good, and both nodes list both restrictions. The figures are printed and
//! written to `target/tmp/fault-figures.txt`.

use std::collections::HashSet;
use std::fmt::Write as _;
use std::fs;
use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use crate::common::postfix::{PfListener, Postfix, PostfixConfig};
use crate::common::redis::RedisServer;
use crate::common::{admin_verb, Floodgate, FloodgateConfig, ListenerSpec};
use crate::ledger::{self, Window};
use crate::traffic::{Attempt, Class, Client, End};

/// Recipients an account may send (fleet-wide) before it is restricted.
const LIMIT: usize = 100;
/// The normal users (Dovecot accounts).
const NORMAL: [&str; 4] = ["nora", "nils", "nina", "noah"];
/// The compromised accounts.
const COMPROMISED: [&str; 2] = ["carl", "cleo"];
/// Size of node B's spool filesystem.
const SMALL_SPOOL: &str = "96k";

fn password(user: &str) -> String {
    format!("{user}-pw-7")
}

/// A free port on 127.0.0.1 (bound, then released for floodgate to bind).
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("bind 127.0.0.1:0")
        .port()
}

/// A tmpfs of `size` mounted on `dir` (mode 0700), unmounted on drop.
struct Tmpfs(PathBuf);

impl Tmpfs {
    fn mount(dir: &Path, size: &str) -> Tmpfs {
        fs::create_dir_all(dir).expect("mkdir spool");
        let out = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size},mode=0700")])
            .arg("tmpfs")
            .arg(dir)
            .output()
            .expect("run mount");
        assert!(
            out.status.success(),
            "the fault suite mounts a small tmpfs as node B's spool and must run as root: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        Tmpfs(dir.to_path_buf())
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

/// One node's config: the listener on `port`, the shared Redis under `mode`, the limit,
/// the spool at `spool`, alerts appended to `alerts`.
fn node_config(
    pf: &Postfix,
    port: u16,
    redis: &RedisServer,
    mode: &str,
    spool: &Path,
    alerts: &Path,
) -> FloodgateConfig {
    let listener = ListenerSpec::new("plain", "none").at(&format!("127.0.0.1:{port}"));
    pf.floodgate_config(PfListener::Plain)
        .listeners(vec![listener])
        .log_level("info")
        .shutdown_grace("1s")
        .extra(&format!(
            r#"
[store]
backend = "redis"
url = "{url}"
timeout = "300ms"
connect_timeout = "300ms"
probe_interval = "200ms"
failure_mode = "{mode}"

[[limit]]
name = "per-user-recipients"
when = "authenticated"
count = "recipients"
key = "${{authenticated_id}}"
rate = "{LIMIT} / 1h"
burst = "{LIMIT}"
action = "restrict"
restrict_for = "until_released"
while_restricted = "hold"

[hold]
dir = "{spool}"

[alerts]
command = ["/usr/bin/tee", "-a", "{alerts}"]
command_timeout = "5s"
"#,
            url = redis.url(),
            spool = spool.display(),
            alerts = alerts.display(),
        ))
}

/// A node of the fleet: its process, its config's parts, its files.
struct Node {
    name: &'static str,
    fg: Floodgate,
    port: u16,
    spool: PathBuf,
    alerts: PathBuf,
}

impl Node {
    fn start(name: &'static str, pf: &Postfix, redis: &RedisServer, spool: PathBuf) -> Node {
        let port = free_port();
        let alerts = spool.with_extension("alerts.jsonl");
        let fg = Floodgate::start(&node_config(pf, port, redis, "local", &spool, &alerts));
        Node {
            name,
            fg,
            port,
            spool,
            alerts,
        }
    }

    fn addr(&self) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.port))
    }

    /// Rewrites the config with failure mode `mode` and restarts gracefully (SIGTERM,
    /// then start).
    fn restart_with(&mut self, pf: &Postfix, redis: &RedisServer, mode: &str) {
        let cfg = node_config(pf, self.port, redis, mode, &self.spool, &self.alerts);
        self.fg.write_config(&cfg.toml());
        self.fg.terminate();
        self.fg.restart();
    }

    fn verb(&self, args: &[&str]) -> serde_json::Value {
        let mut a = args.to_vec();
        a.push("--json");
        let out = admin_verb(&self.fg.admin_socket(), &a);
        assert!(out.ok(), "{}: floodgate {args:?}: {out}", self.name);
        serde_json::from_str(&out.stdout).unwrap_or_else(|e| panic!("{e}: {out}"))
    }

    /// The tags of the messages its spool holds.
    fn held_tags(&self) -> Vec<String> {
        let v = self.verb(&["held", "list"]);
        v["held"]
            .as_array()
            .unwrap_or_else(|| panic!("{}: held list: {v}", self.name))
            .iter()
            .filter_map(|m| m["subject"].as_str())
            .filter_map(|s| s.strip_prefix("fault ").map(str::to_string))
            .collect()
    }

    /// The keys it lists as restricted.
    fn restricted(&self) -> Vec<String> {
        let v = self.verb(&["restricted"]);
        v["restricted"]
            .as_array()
            .unwrap_or_else(|| panic!("{}: restricted: {v}", self.name))
            .iter()
            .filter_map(|r| r["key"].as_str().map(str::to_string))
            .collect()
    }
}

/// Sleeps until `secs` after `t0`.
fn at(t0: Instant, secs: f64) {
    let when = t0 + Duration::from_secs_f64(secs);
    let now = Instant::now();
    if when > now {
        thread::sleep(when - now);
    }
}

/// The faults' windows, in seconds since the traffic began.
struct Timeline {
    t0: Instant,
    windows: Vec<Window>,
}

impl Timeline {
    fn now(&self) -> f64 {
        self.t0.elapsed().as_secs_f64()
    }

    /// Waits until `secs` and returns the time a fault begun then began.
    fn begin(&self, secs: f64) -> f64 {
        at(self.t0, secs);
        self.now()
    }

    /// Records `fault` as in force from `began` until now.
    fn record(&mut self, fault: &str, began: f64) {
        self.windows.push(Window {
            fault: fault.to_string(),
            from: began,
            to: self.now(),
        });
    }
}

#[test]
fn a_fleet_under_faults_loses_nothing_doubles_nothing_and_contains_both_accounts() {
    let started = Instant::now();
    let mut pfc = PostfixConfig::default().sasl();
    pfc.users = NORMAL
        .iter()
        .chain(COMPROMISED.iter())
        .map(|u| (u.to_string(), password(u)))
        .collect();
    let mut pf = Postfix::start(&pfc);
    let mut redis = RedisServer::start_with(&["--appendonly", "yes", "--appendfsync", "always"]);

    let work = tempfile::TempDir::new().expect("tempdir");
    let spool_a = work.path().join("spool-a");
    fs::create_dir_all(&spool_a).expect("mkdir");
    fs::set_permissions(
        &spool_a,
        std::os::unix::fs::PermissionsExt::from_mode(0o700),
    )
    .expect("chmod");
    let spool_b = work.path().join("spool-b");
    let _tmpfs = Tmpfs::mount(&spool_b, SMALL_SPOOL);
    let mut nodes = [
        Node::start("A", &pf, &redis, spool_a),
        Node::start("B", &pf, &redis, spool_b),
    ];

    // The traffic.
    let t0 = Instant::now();
    let stop = Arc::new(AtomicBool::new(false));
    let drain_until = Arc::new(Mutex::new(None));
    let ledger = Arc::new(Mutex::new(Vec::<Attempt>::new()));
    let run = format!("f{}", std::process::id());
    let clients: Vec<_> = NORMAL
        .iter()
        .map(|u| (u, Class::Normal))
        .chain(COMPROMISED.iter().map(|u| (u, Class::Compromised)))
        .map(|(u, class)| {
            Client {
                nodes: nodes.iter().map(Node::addr).collect(),
                user: u.to_string(),
                password: password(u),
                class,
                run: run.clone(),
                t0,
                stop: stop.clone(),
                drain_until: drain_until.clone(),
                ledger: ledger.clone(),
            }
            .run()
        })
        .collect();

    // The faults.
    let mut tl = Timeline {
        t0,
        windows: Vec::new(),
    };
    let b = tl.begin(15.0);
    nodes[0].fg.kill_hard();
    at(t0, 18.0);
    nodes[0].fg.restart();
    tl.record("node A killed (SIGKILL), restarted", b);
    for (mode, restart_at, outage_at) in [
        ("local", None, 21.0),
        ("open", Some(32.0), 37.0),
        ("closed", Some(48.0), 53.0),
    ] {
        if let Some(secs) = restart_at {
            let b = tl.begin(secs);
            for n in nodes.iter_mut() {
                n.restart_with(&pf, &redis, mode);
            }
            tl.record(
                &format!("rolling restart (SIGTERM) into failure_mode {mode}"),
                b,
            );
        }
        let b = tl.begin(outage_at);
        redis.kill();
        at(t0, outage_at + 8.0);
        redis.restart();
        tl.record(
            &format!("Redis killed, restarted 8 s later (failure_mode {mode})"),
            b,
        );
    }
    let b = tl.begin(64.0);
    let good = fs::read_to_string(nodes[0].fg.config_path()).expect("config");
    nodes[0]
        .fg
        .write_config(&good.replace("[[limit]]", "[[limit]]\nrate = ["));
    nodes[0].fg.sighup();
    nodes[0]
        .fg
        .wait_stderr("new configuration refused", Duration::from_secs(10));
    at(t0, 68.0);
    nodes[0].fg.write_config(&good);
    nodes[0].fg.sighup();
    nodes[0]
        .fg
        .wait_stderr("configuration reloaded", Duration::from_secs(10));
    tl.record("node A reloads a broken config, then the good one", b);
    let b = tl.begin(71.0);
    pf.stop_master();
    at(t0, 101.0);
    pf.start_master();
    tl.record("Postfix stopped for 30 s", b);
    at(t0, 110.0);
    stop.store(true, Ordering::SeqCst);
    let traffic_ended = tl.now();
    *drain_until.lock().unwrap() = Some(Instant::now() + Duration::from_secs(40));
    for c in clients {
        c.join().expect("client thread");
    }
    let attempts = ledger.lock().unwrap().clone();

    let mut failures_early = Vec::new();
    // The spool of B filled: when it first answered 4.3.1 (from the books).
    let full: Vec<f64> = attempts
        .iter()
        .filter(|a| {
            a.node == 1 && matches!(&a.end, End::Refused { enhanced, .. } if enhanced == "4.3.1")
        })
        .map(|a| a.started)
        .collect();
    if let (Some(first), Some(last)) = (
        full.iter().cloned().reduce(f64::min),
        full.iter().cloned().reduce(f64::max),
    ) {
        tl.windows.push(Window {
            fault: format!("node B's spool full ({SMALL_SPOOL} tmpfs)"),
            from: first,
            to: last,
        });
    }

    // A spool that fills says what it is (451 4.3.1, the mail system is full), not a local
    // error in processing.
    if full.is_empty() {
        failures_early.push(format!(
            "node B's {SMALL_SPOOL} spool never answered 451 4.3.1 (full): {:?}",
            attempts
                .iter()
                .filter(|a| a.node == 1 && matches!(a.end, End::Refused { stage: "end", .. }))
                .map(|a| a.end.label())
                .collect::<HashSet<_>>()
        ));
    }

    // Before the release: what went out directly.
    pf.settle();
    let before = ledger::deliveries(&pf.maildir());
    let mut figures = String::new();
    let mut failures = failures_early;
    for user in COMPROMISED {
        let out: usize = attempts
            .iter()
            .filter(|a| a.user == user)
            .filter_map(|a| before.get(&a.tag))
            .map(Vec::len)
            .sum();
        let _ = writeln!(
            figures,
            "{user}: {out} recipients delivered before the release (limit {LIMIT})"
        );
        if out > LIMIT {
            failures.push(format!(
                "{user} got {out} recipients out, more than the limit's {LIMIT}"
            ));
        }
    }
    for n in &nodes {
        let listed = n.restricted();
        let _ = writeln!(figures, "node {} lists restricted: {listed:?}", n.name);
        for user in COMPROMISED {
            if !listed.iter().any(|k| k == user) {
                failures.push(format!(
                    "node {} does not list {user} as restricted",
                    n.name
                ));
            }
        }
        for user in NORMAL {
            if listed.iter().any(|k| k == user) {
                failures.push(format!("node {} restricted the normal user {user}", n.name));
            }
        }
    }
    let mut held_before = 0;
    for n in &nodes {
        let tags = n.held_tags();
        held_before += tags.len();
        for t in &tags {
            if NORMAL.iter().any(|u| t.starts_with(&format!("{run}-{u}-"))) {
                failures.push(format!("node {} holds a normal user's message {t}", n.name));
            }
        }
    }

    // The release, by the verb, on both nodes.
    let release_began = Instant::now();
    for n in &nodes {
        for user in COMPROMISED {
            n.verb(&[
                "held",
                "release",
                "--key",
                user,
                "--reason",
                "fault suite",
                "--confirm",
            ]);
        }
    }
    let release_took = release_began.elapsed();
    pf.settle();
    let got = ledger::deliveries(&pf.maildir());
    let still_held: HashSet<String> = nodes.iter().flat_map(Node::held_tags).collect();
    let books = ledger::balance(&attempts, &got, &still_held);

    // Normal users: no 5xx, every message accepted in the end, nothing held.
    for a in attempts.iter().filter(|a| a.class == Class::Normal) {
        if let End::Refused { code, .. } = &a.end {
            if *code >= 500 {
                failures.push(format!("normal user refused for good: {a:?}"));
            }
        }
    }
    let mut unsent: Vec<String> = Vec::new();
    for user in NORMAL {
        let mine: Vec<&Attempt> = attempts.iter().filter(|a| a.user == user).collect();
        let last = mine.iter().map(|a| a.message).max().unwrap_or(0);
        for m in 0..=last {
            if !mine
                .iter()
                .any(|a| a.message == m && a.end == End::Accepted)
            {
                unsent.push(format!("{user} message {m}"));
            }
        }
    }
    if !unsent.is_empty() {
        failures.push(format!("normal messages never accepted: {unsent:?}"));
    }
    for (what, list) in [
        ("lost", &books.lost),
        ("duplicated", &books.duplicated),
        ("refused yet delivered", &books.refused_delivered),
        ("delivered to a recipient never accepted", &books.phantom),
    ] {
        if !list.is_empty() {
            failures.push(format!(
                "{} {what}: {:?}",
                list.len(),
                &list[..list.len().min(10)]
            ));
        }
    }
    for n in &nodes {
        let log = n.fg.stderr();
        if log.contains("panicked") {
            failures.push(format!("node {} panicked", n.name));
        }
    }

    // The postmaster was told of each restriction, and of no normal user's.
    let restricted_alerts: Vec<serde_json::Value> = nodes
        .iter()
        .flat_map(|n| {
            fs::read_to_string(&n.alerts)
                .unwrap_or_default()
                .lines()
                .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
                .filter(|v| v["event"] == "floodgate.restricted")
                .collect::<Vec<_>>()
        })
        .collect();
    for user in COMPROMISED {
        if !restricted_alerts.iter().any(|v| v["key"] == user) {
            failures.push(format!("no floodgate.restricted alert for {user}"));
        }
    }
    for user in NORMAL {
        if restricted_alerts.iter().any(|v| v["key"] == user) {
            failures.push(format!(
                "a floodgate.restricted alert for the normal user {user}"
            ));
        }
    }
    let alerts: Vec<String> = nodes
        .iter()
        .map(|n| {
            let text = fs::read_to_string(&n.alerts).unwrap_or_default();
            format!(
                "node {}: {} alert(s), {} restriction(s)",
                n.name,
                text.lines().count(),
                text.matches("\"floodgate.restricted\"").count()
            )
        })
        .collect();
    let _ = writeln!(
        figures,
        "attempts {:?}; answered 250: {} ({} recipients); delivered copies: {}; \
         still held: {} recipients; lost: {}; duplicated: {}; refused yet delivered: {}; \
         cut after the message: {} ({} recipients delivered)",
        books.attempts,
        books.accepted,
        books.accepted_rcpts,
        books.delivered,
        books.held_rcpts,
        books.lost.len(),
        books.duplicated.len(),
        books.refused_delivered.len(),
        books.uncertain.0,
        books.uncertain.1,
    );
    let _ = writeln!(
        figures,
        "held before the release: {held_before} messages; released in {:.1}s; alerts: {}",
        release_took.as_secs_f64(),
        alerts.join("; ")
    );
    let _ = writeln!(
        figures,
        "traffic {traffic_ended:.0}s, whole run {:.0}s",
        started.elapsed().as_secs_f64()
    );
    let _ = write!(
        figures,
        "per fault, what clients were told:\n{}",
        ledger::fault_table(&attempts, &tl.windows)
    );
    println!("---- fault suite figures ----\n{figures}");
    let out = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/tmp");
    let _ = fs::create_dir_all(&out);
    let _ = fs::write(out.join("fault-figures.txt"), &figures);
    assert!(
        failures.is_empty(),
        "the fault suite found {} problem(s):\n{}\n\n{figures}",
        failures.len(),
        failures.join("\n")
    );
}
