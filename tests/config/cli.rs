//! The command line: every bad input (config, CLI, simulate events) gets a clear error and a
//! failing exit status; good input gives what the README promises.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

fn floodgate(args: &[&str], stdin: &[u8]) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_floodgate"))
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .env_remove("RUST_LOG")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start floodgate");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(stdin)
        .expect("write stdin");
    child.wait_with_output().expect("wait floodgate")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn temp_config(body: &str) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("bad.toml");
    std::fs::write(&path, body).expect("write config");
    (dir, path)
}

#[test]
fn check_accepts_the_shipped_default_config() {
    let out = floodgate(&["check", "--config", "conf/floodgate.toml"], b"");
    assert!(out.status.success(), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    assert!(stdout.contains("conf/floodgate.toml: OK"), "{stdout}");
    assert!(
        stdout.contains("listener submission: 127.0.0.1:2587 tls=starttls"),
        "{stdout}"
    );
    assert!(
        stdout.contains("listener submissions: 127.0.0.1:2465 tls=implicit"),
        "{stdout}"
    );
    assert!(stdout.contains("upstream: 127.0.0.1:10025"), "{stdout}");
}

#[test]
fn bad_config_names_file_line_and_problem_and_fails() {
    let (_d, path) = temp_config(
        "[[listener]]\naddress = \"127.0.0.1:0\"\ntls = \"sometimes\"\n[upstream]\naddress = \"127.0.0.1:25\"\n",
    );
    let p = path.to_str().unwrap();
    for verb in ["check", "run"] {
        let out = floodgate(&[verb, "--config", p], b"");
        assert_eq!(out.status.code(), Some(1), "{verb}");
        let err = text(&out.stderr);
        assert!(
            err.contains(&format!("{p}:3:7: unknown variant `sometimes`")),
            "{verb}: {err}"
        );
    }
}

#[test]
fn missing_config_file_is_reported() {
    let out = floodgate(&["check", "--config", "/nonexistent/floodgate.toml"], b"");
    assert_eq!(out.status.code(), Some(1));
    let err = text(&out.stderr);
    assert!(
        err.contains("/nonexistent/floodgate.toml: cannot read"),
        "{err}"
    );
}

#[test]
fn unreadable_certificate_is_reported_by_check_and_run() {
    let (_d, path) = temp_config(
        "[[listener]]\naddress = \"127.0.0.1:0\"\ntls = \"implicit\"\n\
         [tls]\ncertificate = \"missing.crt\"\nprivate_key = \"missing.key\"\n\
         [upstream]\naddress = \"127.0.0.1:25\"\n",
    );
    let p = path.to_str().unwrap();
    for verb in ["check", "run"] {
        let out = floodgate(&[verb, "--config", p], b"");
        assert_eq!(out.status.code(), Some(1), "{verb}");
        let err = text(&out.stderr);
        assert!(err.contains("missing.crt"), "{verb}: {err}");
    }
}

#[test]
fn mismatched_key_is_refused() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("certs/dev");
    let (_d, path) = temp_config(&format!(
        "[[listener]]\naddress = \"127.0.0.1:0\"\ntls = \"starttls\"\n\
         [tls]\ncertificate = \"{}\"\nprivate_key = \"{}\"\n\
         [upstream]\naddress = \"127.0.0.1:25\"\n",
        root.join("server.crt").display(),
        root.join("upstream.key").display()
    ));
    let out = floodgate(&["check", "--config", path.to_str().unwrap()], b"");
    assert_eq!(out.status.code(), Some(1));
    let err = text(&out.stderr);
    assert!(err.contains("TLS"), "{err}");
}

#[test]
fn port_in_use_is_reported() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap();
    let (_d, path) = temp_config(&format!(
        "[[listener]]\naddress = \"{addr}\"\n[upstream]\naddress = \"127.0.0.1:25\"\n[server]\nworkers = 1\n"
    ));
    let out = floodgate(&["run", "--config", path.to_str().unwrap()], b"");
    assert_eq!(out.status.code(), Some(1));
    let err = text(&out.stderr);
    assert!(err.contains(&format!("cannot listen on {addr}")), "{err}");
}

#[test]
fn unknown_subcommand_and_missing_arguments_are_usage_errors() {
    let out = floodgate(&["frobnicate"], b"");
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("unrecognized subcommand"));
    let out = floodgate(&["simulate"], b"");
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("--limit"));
}

#[test]
fn simulate_replays_events_and_reports_rates() {
    let events = b"{\"t\": 0, \"key\": \"alice\"}\n{\"t\": 0.5, \"key\": \"alice\"}\n{\"t\": 1, \"key\": \"alice\"}\n";
    let out = floodgate(&["simulate", "--limit", "2 / 1h / strict"], events);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let lines: Vec<serde_json::Value> = text(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).expect("json line"))
        .collect();
    assert_eq!(lines.len(), 3);
    assert_eq!(lines[0]["rate"], 1.0);
    assert_eq!(lines[0]["over"], false);
    assert_eq!(lines[2]["over"], true);
}

fn simulate_lines(spec: &str, events: &str) -> Vec<serde_json::Value> {
    let out = floodgate(&["simulate", "--limit", spec], events.as_bytes());
    assert!(out.status.success(), "{}", text(&out.stderr));
    text(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).expect("json line"))
        .collect()
}

#[test]
fn simulate_tests_an_events_unique_without_unique_in_the_spec() {
    let out = simulate_lines(
        "2 / 1h / per_rcpt / ${authenticated_id}",
        "{\"t\": 0, \"key\": \"alice\", \"unique\": \"x@example.net\"}\n\
         {\"t\": 1, \"key\": \"alice\", \"unique\": \"x@example.net\"}\n\
         {\"t\": 2, \"key\": \"alice\", \"unique\": \"y@example.net\"}\n",
    );
    assert_eq!(out.len(), 3);
    assert_eq!(out[0]["key"], "1h/per_rcpt/unique/alice");
    let seen: Vec<_> = out.iter().map(|o| o["seen"].as_bool()).collect();
    assert_eq!(seen, [Some(false), Some(true), Some(false)]);
    // The repeat adds nothing: two distinct recipients stay under 2, where three
    // events without "unique" reach it.
    let over: Vec<_> = out.iter().map(|o| o["over"].as_bool()).collect();
    assert_eq!(over, [Some(false), Some(false), Some(false)]);
    let out = simulate_lines(
        "2 / 1h / per_rcpt / ${authenticated_id}",
        "{\"t\": 0, \"key\": \"alice\"}\n{\"t\": 1, \"key\": \"alice\"}\n\
         {\"t\": 2, \"key\": \"alice\"}\n",
    );
    assert_eq!(out[0]["key"], "1h/per_rcpt/alice");
    assert_eq!(out[2]["over"], true);
}

#[test]
fn simulate_counts_count_n_per_event_with_per_rcpt() {
    let events = "{\"t\": 0, \"key\": \"k\"}\n{\"t\": 1, \"key\": \"k\"}\n";
    for spec in [
        "10 / 1h / count=3 / per_rcpt",
        "10 / 1h / per_rcpt / count=3",
    ] {
        let out = simulate_lines(spec, events);
        assert_eq!(out[0]["rate"], 3.0, "{spec}");
        let second = out[1]["rate"].as_f64().unwrap();
        assert!((second - 5.99875).abs() < 5e-6, "{spec}: {second}");
    }
}

#[test]
fn simulate_bad_spec_and_bad_event_are_clear() {
    let out = floodgate(&["simulate", "--limit", "10 / 1H"], b"");
    assert_eq!(out.status.code(), Some(1));
    let err = text(&out.stderr);
    assert!(err.contains("\"1H\" is not a time value"), "{err}");

    let out = floodgate(
        &["simulate", "--limit", "10 / 1h"],
        b"{\"t\": 0, \"key\": \"a\"}\n{\"t\": \"soon\"}\n",
    );
    assert_eq!(out.status.code(), Some(1));
    let err = text(&out.stderr);
    assert!(err.contains("line 2"), "{err}");
}

#[test]
fn a_second_floodgate_on_the_same_port_is_refused() {
    use std::io::BufRead;
    let (_d, first_cfg) = temp_config(
        "[[listener]]\naddress = \"127.0.0.1:0\"\n[upstream]\naddress = \"127.0.0.1:25\"\n",
    );
    let mut first = Command::new(env!("CARGO_BIN_EXE_floodgate"))
        .args(["run", "--config", first_cfg.to_str().unwrap()])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("start floodgate");
    // The reader stays alive to the end: the first floodgate's stdout stays open.
    let mut first_out = std::io::BufReader::new(first.stdout.take().unwrap());
    let mut line = String::new();
    first_out.read_line(&mut line).expect("listening line");
    let addr = line.split_whitespace().nth(2).expect("address").to_string();
    let (_d2, second_cfg) = temp_config(&format!(
        "[[listener]]\naddress = \"{addr}\"\n[upstream]\naddress = \"127.0.0.1:25\"\n"
    ));
    let mut second = Command::new(env!("CARGO_BIN_EXE_floodgate"))
        .args(["run", "--config", second_cfg.to_str().unwrap()])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start the second floodgate");
    // Bounded: a second floodgate that did start would otherwise run forever.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let status = loop {
        if let Some(st) = second.try_wait().expect("wait") {
            break Some(st);
        }
        if std::time::Instant::now() > deadline {
            let _ = second.kill();
            let _ = second.wait();
            break None;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    let first_alive = first.try_wait().expect("wait").is_none();
    let _ = first.kill();
    let _ = first.wait();
    let mut err = String::new();
    std::io::Read::read_to_string(&mut second.stderr.take().unwrap(), &mut err).expect("stderr");
    assert!(first_alive, "the first floodgate exited");
    let status = status.expect("the second floodgate kept running on a port already in use");
    assert_eq!(status.code(), Some(1), "{err}");
    assert!(err.contains(&format!("cannot listen on {addr}")), "{err}");
}

#[test]
fn simulate_reads_events_from_a_file() {
    let (_d, path) = temp_config("{\"t\": 0, \"key\": \"a\"}\n{\"t\": 0, \"key\": \"a\"}\n");
    let out = floodgate(
        &[
            "simulate",
            "--limit",
            "1 / 1h / strict",
            path.to_str().unwrap(),
        ],
        b"",
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    assert_eq!(stdout.lines().count(), 2, "{stdout}");
    assert!(
        stdout.lines().all(|l| l.contains("\"over\":true")),
        "{stdout}"
    );
    let out = floodgate(
        &["simulate", "--limit", "1 / 1h", "/nonexistent/events"],
        b"",
    );
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stderr).contains("cannot open /nonexistent/events"));
}

/// A pipe whose reading end is already closed: every write to the other end fails with
/// EPIPE, as when a reader (`| head`) has gone.
fn pipe_without_reader() -> std::os::fd::OwnedFd {
    use std::os::fd::FromRawFd;
    let mut fds = [0; 2];
    // SAFETY: `fds` has room for the two descriptors pipe(2) writes.
    assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0, "pipe");
    // SAFETY: pipe(2) made both descriptors; each is owned once, here.
    let (read, write) = unsafe {
        (
            std::os::fd::OwnedFd::from_raw_fd(fds[0]),
            std::os::fd::OwnedFd::from_raw_fd(fds[1]),
        )
    };
    drop(read);
    write
}

/// Runs `floodgate args` with its stdout a pipe nobody reads; its exit status and stderr.
fn closed_stdout(args: &[&str]) -> (std::process::ExitStatus, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_floodgate"))
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .env_remove("RUST_LOG")
        .stdin(Stdio::null())
        .stdout(Stdio::from(pipe_without_reader()))
        .stderr(Stdio::piped())
        .output()
        .expect("run floodgate");
    (out.status, text(&out.stderr))
}

#[test]
fn a_closed_stdout_ends_a_verb_quietly() {
    let dir = tempfile::tempdir().unwrap();
    let eml = dir.path().join("m.eml");
    std::fs::write(
        &eml,
        "From: a@example.org\r\nSubject: Invoice 2041\r\n\r\nPlease find the invoice for \
         March attached, and pay it by Friday at https://pay.example.com/x please.\r\n",
    )
    .unwrap();
    let events = dir.path().join("events.jsonl");
    std::fs::write(&events, "{\"t\": 0, \"key\": \"k\"}\n").unwrap();
    let docs = dir.path().join("docs");
    let cases: [&[&str]; 5] = [
        &["fingerprint", eml.to_str().unwrap()],
        &["fingerprint", "--json", eml.to_str().unwrap()],
        &["check", "--config", "conf/floodgate.toml"],
        &["simulate", "--limit", "10 / 1h", events.to_str().unwrap()],
        &["generate-docs", docs.to_str().unwrap()],
    ];
    for args in cases {
        let (status, err) = closed_stdout(args);
        assert!(!err.contains("panicked"), "{args:?}: {err}");
        assert!(status.success(), "{args:?}: {status} {err}");
        assert!(err.is_empty(), "{args:?}: {err}");
    }
}
