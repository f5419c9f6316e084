//! The shipped `conf/floodgate.toml`, run as it is: its per-IP limit defers the recipient
//! past the limit with 450 4.7.1, its per-user limits count an authenticated user, its
//! state survives a restart through the snapshot, its event log feeds `floodgate report`,
//! and its relative paths are relative to the config file, not to the working directory.
//! Its daily recipient limit contains a stolen account: restricted until released, its
//! further mail held in the spool next to the config, the postmaster alerted.
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
    install_text(dir, upstream, shipped_text())
}

/// [`install`] with `text` instead of the shipped config as it is.
fn install_text(dir: &Path, upstream: SocketAddr, mut text: String) -> PathBuf {
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
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_floodgate"));
        cmd.args(["run", "--config"]).arg(config);
        Running::spawn(cmd, cwd, stderr)
    }

    /// `floodgate run` started by `sh -c "ulimit …; exec floodgate run --config CONFIG"`:
    /// `ulimit` sets the open-file limits it starts with.
    fn start_with_ulimit(ulimit: &str, config: &Path, cwd: &Path, stderr: PathBuf) -> Running {
        let mut cmd = Command::new("sh");
        cmd.arg("-c")
            .arg(format!("{ulimit} && exec \"$0\" run --config \"$1\""))
            .arg(env!("CARGO_BIN_EXE_floodgate"))
            .arg(config);
        Running::spawn(cmd, cwd, stderr)
    }

    fn spawn(mut cmd: Command, cwd: &Path, stderr: PathBuf) -> Running {
        let mut child = cmd
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
        client_mail(&rec).len(),
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
    assert_eq!(client_mail(&rec).len(), IP_LIMIT);

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
        "action=restrict when=\"authenticated\"; when over: the key \"${authenticated_id} (the limit's key)\" is restricted until `floodgate release KEY` ends it; while restricted the key's messages are taken (250) and held in the [hold] spool",
        "hold: dir=conf/hold ",
        "alerts: period=(each limit's)",
        "alerts: mail_to=postmaster@example.org ",
        "limit ip-recipients: stage=rcpt key=\"${sender_host_address}\" ratelimit m=10 per 30m",
        "auth_failures: delay 1000ms doubling",
    ] {
        assert!(out.contains(want), "{want:?} in:\n{out}");
    }
    // The one warning: the example postmaster address, to be changed.
    let warnings: Vec<&str> = out.lines().filter(|l| l.contains("warning:")).collect();
    assert_eq!(
        warnings,
        [
            "warning: [alerts] mail_to postmaster@example.org is the example address: change it \
          (mail to example domains reaches nobody)"
        ],
        "{out}"
    );
}

/// The shipped config with its clock 1800 times faster: every ratelimit period of an hour
/// lasts 2 seconds and of a day 48 seconds; the limits' numbers and actions stay as shipped.
fn shipped_text_fast() -> String {
    let mut scaled = 0;
    let lines: Vec<String> = shipped_text()
        .lines()
        .map(|l| {
            if !l.starts_with("ratelimit = ") {
                return l.to_string();
            }
            scaled += 1;
            l.replace("/ 1h /", "/ 2s /").replace("/ 1d /", "/ 48s /")
        })
        .collect();
    assert_eq!(scaled, 5, "the shipped config's ratelimit lines");
    lines.join("\n")
}

/// A stolen account sprays 50 recipients a message (a refused sender or recipients: RSET, a
/// short pause, on), for at most 60 s, until 2500 of them
/// were accepted (relayed, or held once it is restricted); prints how many were.
const SPRAY: &str = r#"
deadline = time.time() + 60
accepted = 0
s = smtplib.SMTP(HOST, PORT, timeout=30)
s.starttls(context=ctx())
s.login(USER, PASSWORD)
n = 0
while accepted < 2500 and time.time() < deadline:
    n += 1
    to = ["victim%d@example.net" % (n * 50 + i) for i in range(50)]
    msg = "From: <alice@example.org>\r\nSubject: invoice %d\r\n\r\npay now\r\n" % n
    try:
        refused = s.sendmail("alice@example.org", to, msg)
        accepted += len(to) - len(refused)
    except (smtplib.SMTPRecipientsRefused, smtplib.SMTPSenderRefused):
        s.rset()
        time.sleep(0.05)
out("accepted", accepted)
s.quit()
"#;

/// One more message of the stolen account, to one recipient; prints the end of data's code.
const ONE_MORE: &str = r#"
s = smtplib.SMTP(HOST, PORT, timeout=30)
s.starttls(context=ctx())
s.login(USER, PASSWORD)
code, _ = s.docmd("MAIL FROM:<alice@example.org>")
assert code == 250, code
code, _ = s.docmd("RCPT TO:<friend@example.net>")
assert code == 250, code
code, _ = s.data("Subject: after\r\n\r\nstill at it\r\n")
out("data", code)
s.quit()
"#;

#[test]
fn shipped_config_restricts_a_stolen_account_and_holds_its_further_mail() {
    let rec = Recorder::plain();
    let dir = tempfile::tempdir().expect("tempdir");
    let config = install_text(dir.path(), rec.addr(), shipped_text_fast());
    let fg = Running::start(&config, dir.path(), dir.path().join("fg.stderr"));
    let submission = fg.addr("submission");

    let out = smtplib(submission, SPRAY, Duration::from_secs(90));
    assert!(out.ok(), "spray: {}\n{}", out.stdout, out.stderr);
    let relayed: usize = client_mail(&rec).iter().map(|m| m.rcpts.len()).sum();
    let accepted: usize = out
        .stdout
        .lines()
        .find_map(|l| l.strip_prefix("accepted="))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or_else(|| panic!("no count: {}", out.stdout));
    // The daily limit (1000 recipients, less what decayed meanwhile) stopped the relaying:
    // what was accepted after it was held, not relayed.
    assert!(
        relayed >= 1000 && relayed < accepted,
        "{relayed} recipients relayed of {accepted} accepted"
    );

    // Restricted until released, by the daily recipient limit, with its evidence.
    let restricted = verb(&["restricted", "--json"], &config, dir.path());
    let r: serde_json::Value = serde_json::from_str(&restricted).expect("json");
    let entry = r["restricted"]
        .as_array()
        .and_then(|l| l.iter().find(|e| e["key"] == USER))
        .unwrap_or_else(|| panic!("{USER} not restricted: {restricted}"));
    assert_eq!(entry["limit"], "user-recipients-day", "{restricted}");
    assert!(entry["until"].is_null(), "until released: {restricted}");

    // Its further mail is taken (250) and held, not relayed: the spool is next to the config,
    // created by floodgate with mode 0700.
    let held_before = held_for(&config, dir.path());
    assert!(
        held_before >= 1,
        "the message that tripped the limit is held"
    );
    let messages_before = client_mail(&rec).len();
    let out = smtplib(submission, ONE_MORE, Duration::from_secs(30));
    assert!(out.ok(), "one more: {}\n{}", out.stdout, out.stderr);
    assert!(out.stdout.contains("data=250"), "{}", out.stdout);
    assert_eq!(
        client_mail(&rec).len(),
        messages_before,
        "nothing more relayed"
    );
    assert_eq!(held_for(&config, dir.path()), held_before + 1);
    let spool = dir.path().join("conf/hold");
    let mode = fs::metadata(&spool).expect("conf/hold").permissions();
    assert_eq!(
        std::os::unix::fs::PermissionsExt::mode(&mode) & 0o7777,
        0o700
    );

    // The postmaster is told: the alert of the restriction, in floodgate's log, and by
    // mail to the shipped (example) address through the smart host, from the null sender.
    let log = fg.log();
    assert!(
        log.contains("floodgate.restricted") && log.contains("user-recipients-day"),
        "{log}"
    );
    let subject = format!("Subject: floodgate: {USER} restricted (user-recipients-day)\r\n");
    let mail = wait_until(
        Duration::from_secs(20),
        "the restriction's alert mail",
        || {
            rec.messages().into_iter().find(|m| {
                m.mail_from.is_empty() && String::from_utf8_lossy(&m.data).contains(&subject)
            })
        },
    );
    assert_eq!(mail.rcpts, ["postmaster@example.org"]);
    let text = String::from_utf8_lossy(&mail.data);
    assert!(
        text.contains("Auto-Submitted: auto-generated\r\n"),
        "{text}"
    );
    assert!(text.contains("Limit:  user-recipients-day\r\n"), "{text}");
}

/// The messages upstream got from clients: without floodgate's own alert mail (from the
/// null sender).
fn client_mail(rec: &Recorder) -> Vec<common::Message> {
    rec.messages()
        .into_iter()
        .filter(|m| !m.mail_from.is_empty())
        .collect()
}

/// Messages held for the stolen account, from `floodgate held list --json`.
fn held_for(config: &Path, cwd: &Path) -> usize {
    let list = verb(&["held", "list", "--json", "--key", USER], config, cwd);
    let v: serde_json::Value = serde_json::from_str(&list).expect("json");
    v["held"].as_array().map_or(0, Vec::len)
}

/// The hard open-file limit of this test process (inherited by what it starts).
fn hard_open_files() -> u64 {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit only writes the struct we pass.
    assert_eq!(unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) }, 0);
    lim.rlim_max
}

/// `LimitNOFILE=` of the shipped systemd unit.
fn unit_open_files() -> u64 {
    let unit = fs::read_to_string(repo_root().join("conf/floodgate.service")).unwrap();
    unit.lines()
        .find_map(|l| l.strip_prefix("LimitNOFILE="))
        .expect("LimitNOFILE= in conf/floodgate.service")
        .trim()
        .parse()
        .expect("a number")
}

/// Descriptors the shipped config needs: two per session, one per admin connection, room
/// for listeners and files (as floodgate counts them at start).
fn shipped_needs() -> u64 {
    let dir = tempfile::tempdir().unwrap();
    let conf = install(dir.path(), closed_port());
    let c = Generation::load(&conf).unwrap_or_else(|e| panic!("{e}"));
    let c = &c.config;
    floodgate::server::FdLimit::needed(
        c.server.max_connections,
        c.admin.max_descriptors(c.metrics.is_some()),
    )
}

#[test]
fn shipped_sessions_fit_the_units_open_file_limit() {
    let needs = shipped_needs();
    let unit = unit_open_files();
    assert!(
        needs <= unit,
        "shipped config needs {needs} descriptors, the unit grants {unit}"
    );
    // And a common interactive hard limit, where the README's first commands run.
    assert!(needs <= 20_000, "shipped config needs {needs} descriptors");
}

#[test]
fn floodgate_raises_its_soft_open_file_limit_before_it_warns() {
    let needs = shipped_needs();
    let hard = hard_open_files();
    let dir = tempfile::tempdir().unwrap();
    let conf = install(dir.path(), closed_port());
    if hard >= needs {
        // A low soft limit under a hard one that fits: raised, no warning.
        let mut fg = Running::start_with_ulimit(
            "ulimit -S -n 1024",
            &conf,
            dir.path(),
            dir.path().join("raised.log"),
        );
        let log = fg.log();
        assert!(
            log.contains(&format!("open-file limit limit={hard}")),
            "soft limit not raised to {hard}:\n{log}"
        );
        assert!(!log.contains("cannot hold"), "{log}");
        fg.terminate();
    } else {
        eprintln!("hard open-file limit {hard} < {needs}: the raise is not tried here");
    }
    // A hard limit that cannot hold the sessions: one warning naming both numbers.
    let mut fg = Running::start_with_ulimit(
        "ulimit -n 4096",
        &conf,
        dir.path(),
        dir.path().join("short.log"),
    );
    let log = fg.log();
    assert_eq!(
        log.matches("cannot hold [server] max_connections").count(),
        1,
        "{log}"
    );
    assert!(log.contains("soft=4096"), "{log}");
    assert!(log.contains(&format!("needed={needs}")), "{log}");
    fg.terminate();
}
