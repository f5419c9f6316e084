//! The shipped `conf/floodgate.toml`, run as it is: its per-IP limit defers the recipient
//! past the limit with 450 4.7.1, its per-user limits count an authenticated user, its
//! state survives a restart through the snapshot, its event log feeds `floodgate report`,
//! and its relative paths are relative to the config file, not to the working directory.
//!
//! Only the addresses are changed in a copy of the file (the listeners on free ports, the
//! upstream on the recorder); the copy sits in `<tmp>/conf/` next to a `<tmp>/certs` link,
//! as the original sits in the repository.

use crate::common;

use std::fs;
use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use common::*;
use floodgate::generation::Generation;

/// The per-IP limit of the shipped config (`ip-recipients`: 10 / 30m / per_rcpt).
const IP_LIMIT: usize = 10;

fn shipped_text() -> String {
    fs::read_to_string(repo_root().join("conf/floodgate.toml")).expect("conf/floodgate.toml")
}

/// Replaces the one line `address = "<from>"` of `text` (each must occur exactly once, so
/// a change to the shipped addresses fails here rather than testing something else).
fn replace_address(text: &str, from: &str, to: &str) -> String {
    let line = format!("address = \"{from}\"");
    assert_eq!(
        text.matches(&line).count(),
        1,
        "{line:?} in conf/floodgate.toml"
    );
    text.replace(&line, &format!("address = \"{to}\""))
}

/// A copy of the shipped config in `<dir>/conf/floodgate.toml` in front of `upstream`,
/// listeners on free ports, with `<dir>/certs` pointing at the repository's certificates.
fn install(dir: &Path, upstream: SocketAddr) -> PathBuf {
    let mut text = shipped_text();
    for port in ["127.0.0.1:2587", "127.0.0.1:2465", "127.0.0.1:2525"] {
        text = replace_address(&text, port, "127.0.0.1:0");
    }
    text = replace_address(&text, "127.0.0.1:10025", &upstream.to_string());
    fs::create_dir(dir.join("conf")).expect("mkdir conf");
    std::os::unix::fs::symlink(repo_root().join("certs"), dir.join("certs")).expect("symlink");
    let config = dir.join("conf/floodgate.toml");
    fs::write(&config, text).expect("write config");
    config
}

/// `floodgate run` on a config file, from working directory `cwd`; killed on drop.
struct Running {
    child: Child,
    listeners: Vec<Listening>,
    stderr: PathBuf,
}

impl Running {
    fn start(config: &Path, cwd: &Path, stderr: PathBuf) -> Running {
        let mut child = Command::new(env!("CARGO_BIN_EXE_floodgate"))
            .args(["run", "--config"])
            .arg(config)
            .current_dir(cwd)
            .env_remove("RUST_LOG")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(fs::File::create(&stderr).expect("stderr file"))
            .spawn()
            .expect("start floodgate");
        let out = child.stdout.take().expect("stdout");
        let (tx, rx) = mpsc::channel();
        thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                let _ = tx.send(line);
            }
        });
        let mut running = Running {
            child,
            listeners: Vec::new(),
            stderr,
        };
        let deadline = Instant::now() + START_TIMEOUT;
        while running.listeners.len() < 3 {
            let left = deadline.saturating_duration_since(Instant::now());
            match rx.recv_timeout(left) {
                Ok(line) => running.listeners.extend(parse_listening(&line)),
                Err(_) => panic!(
                    "floodgate did not print its 3 listening lines within {START_TIMEOUT:?}:\n{}",
                    running.log()
                ),
            }
        }
        running
    }

    fn addr(&self, name: &str) -> SocketAddr {
        self.listeners
            .iter()
            .find(|l| l.name == name)
            .unwrap_or_else(|| panic!("no listener {name}: {:?}", self.listeners))
            .addr
    }

    fn log(&self) -> String {
        thread::sleep(LOG_SETTLE);
        fs::read_to_string(&self.stderr).unwrap_or_default()
    }

    /// SIGTERM, then the exit status (bounded): sessions drain and the state is saved.
    fn terminate(&mut self) -> ExitStatus {
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Ok(Some(st)) = self.child.try_wait() {
                return st;
            }
            assert!(
                Instant::now() < deadline,
                "floodgate did not exit within 20 s of SIGTERM"
            );
            thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = self.child.kill();
        }
        let _ = self.child.wait();
        if thread::panicking() {
            eprintln!("--- floodgate stderr ---\n{}", self.log());
        }
    }
}

/// One message to `rcpt` on the plain relay listener, without AUTH; returns the RCPT reply
/// (the message is sent and must be accepted when the RCPT is).
fn relay_one(addr: SocketAddr, rcpt: &str) -> Reply {
    let mut c = RawClient::connect_greeted(addr);
    c.ehlo("app.example.org");
    assert_eq!(c.cmd("MAIL FROM:<app@example.org>").code, 250);
    let r = c.cmd(&format!("RCPT TO:<{rcpt}>"));
    if r.code == 250 {
        assert_eq!(c.cmd("DATA").code, 354);
        c.send(b"Subject: report\r\n\r\nnightly report\r\n.\r\n");
        let end = c.reply();
        assert_eq!(end.code, 250, "end of data: {}", end.text());
    }
    assert_eq!(c.cmd("QUIT").code, 221);
    r
}

/// `floodgate <args> --config CONFIG`, from `cwd`; stdout, or the test fails with stderr.
fn verb(args: &[&str], config: &Path, cwd: &Path) -> String {
    let out = run_with_timeout(
        Command::new(env!("CARGO_BIN_EXE_floodgate"))
            .args(args)
            .arg("--config")
            .arg(config)
            .current_dir(cwd)
            .env_remove("RUST_LOG"),
        Duration::from_secs(30),
    );
    assert!(out.ok(), "floodgate {args:?}: {}", out.stderr);
    out.stdout
}

/// The value (rate now) of `limit` in `inspect --json`'s answer.
fn inspected(json: &str, limit: &str) -> f64 {
    let v: serde_json::Value = serde_json::from_str(json).unwrap_or_else(|e| panic!("{e}: {json}"));
    v["limits"]
        .as_array()
        .and_then(|ls| ls.iter().find(|l| l["limit"] == limit))
        .and_then(|l| l["value"].as_f64())
        .unwrap_or_else(|| panic!("no value for {limit} in {json}"))
}

#[test]
fn shipped_config_defers_past_the_limit_and_keeps_state_across_a_restart() {
    let rec = Recorder::plain();
    let dir = tempfile::tempdir().expect("tempdir");
    let config = install(dir.path(), rec.addr());
    // Started from another directory: every relative path must follow the config file.
    let elsewhere = tempfile::tempdir().expect("tempdir");
    let mut fg = Running::start(&config, elsewhere.path(), dir.path().join("fg1.stderr"));
    let relay = fg.addr("relay");

    // The first IP_LIMIT recipients pass; the next is deferred with the rate and a retry time.
    for i in 1..=IP_LIMIT {
        let r = relay_one(relay, &format!("user{i}@example.net"));
        assert_eq!(r.code, 250, "recipient {i}: {}", r.text());
    }
    let r = relay_one(relay, "user11@example.net");
    assert_eq!(r.code, 450, "recipient 11: {}", r.text());
    assert_eq!(r.enhanced().as_deref(), Some("4.7.1"), "{}", r.text());
    let text = r.text();
    assert!(
        text.contains("too many recipients from 127.0.0.1: 11 per 30m, the limit is 10"),
        "{text}"
    );
    assert!(text.contains("try again in "), "{text}");
    assert_eq!(
        rec.messages().len(),
        IP_LIMIT,
        "upstream got only what passed"
    );

    // The admin verbs find the running floodgate through the same config.
    let table = verb(
        &["inspect", "--json", "127.0.0.1"],
        &config,
        elsewhere.path(),
    );
    let before = inspected(&table, "ip-recipients");
    assert!(before > 9.9 && before < 10.0, "{table}");
    let top = verb(&["top"], &config, elsewhere.path());
    assert!(top.contains("30m/per_rcpt/127.0.0.1"), "{top}");

    assert!(fg.terminate().success(), "{}", fg.log());
    drop(fg);
    // The snapshot and the event log are next to the config file.
    assert!(dir.path().join("conf/floodgate.state").is_file());
    assert!(dir.path().join("conf/floodgate-events.jsonl").is_file());
    assert!(!elsewhere.path().join("floodgate.state").exists());

    // A new process loads the snapshot: the key is still at its limit.
    let fg = Running::start(&config, elsewhere.path(), dir.path().join("fg2.stderr"));
    assert!(
        fg.log().contains("rate limit state loaded keys="),
        "{}",
        fg.log()
    );
    let table = verb(
        &["inspect", "--json", "127.0.0.1"],
        &config,
        elsewhere.path(),
    );
    let after = inspected(&table, "ip-recipients");
    assert!(after > 9.0 && after <= before, "{before} then {table}");
    let r = relay_one(fg.addr("relay"), "user12@example.net");
    assert_eq!(r.code, 450, "after the restart: {}", r.text());
    assert_eq!(r.enhanced().as_deref(), Some("4.7.1"));
    assert_eq!(rec.messages().len(), IP_LIMIT);

    // The event log has every evaluation, refused ones included.
    let report = verb(&["report"], &config, elsewhere.path());
    assert!(
        report
            .contains("limit ip-recipients (exim 10, period 30m, action defer): 12 events, 1 keys"),
        "{report}"
    );
}

#[test]
fn shipped_config_limits_authenticated_users_by_name() {
    let rec = Recorder::plain();
    let dir = tempfile::tempdir().expect("tempdir");
    let config = install(dir.path(), rec.addr());
    let fg = Running::start(&config, dir.path(), dir.path().join("fg.stderr"));
    let addr = fg.addr("submission").to_string();
    let ca = ca_file();
    let out = swaks(&[
        "--server",
        &addr,
        "-tls",
        "--tls-ca-path",
        ca.to_str().unwrap(),
        "-a",
        "PLAIN",
        "-au",
        USER,
        "-ap",
        PASSWORD,
        "--from",
        "alice@example.org",
        "--to",
        "b@example.net,c@example.net",
    ]);
    assert!(out.ok(), "swaks: {}\n{}", out.stdout, out.stderr);
    let table = verb(&["inspect", "--json", USER], &config, dir.path());
    for (limit, want) in [
        ("user-messages-hour", 1.0),
        ("user-messages-day", 1.0),
        ("user-recipients-hour", 2.0),
        ("user-recipients-day", 2.0),
    ] {
        let got = inspected(&table, limit);
        assert!(
            (got - want).abs() < 0.01,
            "{limit}: {got}, want {want}\n{table}"
        );
    }
    // The per-IP limit is for clients without AUTH: nothing counted for this one.
    let table = verb(&["inspect", "--json", "127.0.0.1"], &config, dir.path());
    assert_eq!(inspected(&table, "ip-recipients"), 0.0, "{table}");
}

#[test]
fn shipped_config_paths_are_relative_to_the_config_file() {
    let conf = repo_root().join("conf");
    let c = Generation::load(&conf.join("floodgate.toml")).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        c.config.store.path.as_deref(),
        Some(conf.join("floodgate.state").as_path())
    );
    assert_eq!(
        c.report.events.as_deref(),
        Some(conf.join("floodgate-events.jsonl").as_path())
    );
    // A relative config path gives paths relative to the same directory.
    let c = Generation::parse(Path::new("conf/floodgate.toml"), &shipped_text()).unwrap();
    assert_eq!(
        c.config.store.path.as_deref(),
        Some(Path::new("conf/floodgate.state"))
    );
    assert_eq!(
        c.report.events.as_deref(),
        Some(Path::new("conf/floodgate-events.jsonl"))
    );
    // A list file too: found next to the config, whatever the working directory is.
    let dir = tempfile::tempdir().expect("tempdir");
    fs::write(dir.path().join("hosts.txt"), "192.0.2.25 500\n").expect("write list");
    let text = "[[listener]]\naddress = \"127.0.0.1:0\"\n[upstream]\naddress = \"127.0.0.1:25\"\n\
                [lists]\nhosts = { file = \"hosts.txt\" }\n";
    let c = Generation::parse(&dir.path().join("f.toml"), text).unwrap_or_else(|e| panic!("{e}"));
    let list = c.policy.lists.get("hosts").expect("list hosts");
    assert_eq!(
        list.lookup_ip("192.0.2.25".parse().unwrap()),
        Some(Some("500"))
    );
}

#[test]
fn check_prints_the_shipped_default_policy() {
    let out = verb(&["check"], Path::new("conf/floodgate.toml"), &repo_root());
    for want in [
        "store: backend=memory path=conf/floodgate.state",
        "report: events=conf/floodgate-events.jsonl",
        "limit user-messages-hour: stage=mail key=\"${authenticated_id}\" ratelimit m=100 per 1h",
        "limit user-recipients-day: stage=rcpt key=\"${authenticated_id}\" ratelimit m=1000 per 1d",
        "limit ip-recipients: stage=rcpt key=\"${sender_host_address}\" ratelimit m=10 per 30m",
        "auth_failures: delay 1000ms doubling",
    ] {
        assert!(out.contains(want), "{want:?} in:\n{out}");
    }
    assert!(!out.contains("warning:"), "{out}");
}
