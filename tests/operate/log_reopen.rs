//! logrotate's move-then-signal: after the event log is renamed and floodgate gets SIGUSR1,
//! new lines go to a new file at the configured path (the old one keeps what it had); the
//! audit log, opened for each line, follows a rename with no signal at all. The config is
//! not reloaded: a SIGUSR1 reopens even while the file on disk is broken.

use crate::common;

use std::path::Path;
use std::time::{Duration, Instant};

use common::*;

fn restrict(socket: &Path, key: &str) {
    let out = admin_verb(
        socket,
        &["restrict", key, "--for", "1h", "--reason", "rotation test"],
    );
    assert!(out.ok(), "{out}");
}

/// Waits (at most 20 s) until `path` holds a line with `needle`.
fn wait_line(path: &Path, needle: &str) -> bool {
    let deadline = Instant::now() + Duration::from_secs(20);
    while Instant::now() < deadline {
        if std::fs::read_to_string(path).is_ok_and(|t| t.contains(needle)) {
            return true;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    false
}

#[test]
fn sigusr1_reopens_the_event_log_and_the_audit_log_follows_a_rename() {
    let cfg = FloodgateConfig::new(closed_port()).extra(
        "[report]\nevents = \"events.jsonl\"\n\
         [admin]\nsocket = \"admin.sock\"\naudit = \"audit.jsonl\"\n",
    );
    let fg = Floodgate::start(&cfg);
    let socket = fg.admin_socket();
    let dir = socket.parent().unwrap().to_path_buf();
    let (events, audit) = (dir.join("events.jsonl"), dir.join("audit.jsonl"));

    restrict(&socket, "before-rotation");
    assert!(
        wait_line(&events, "\"key\":\"before-rotation\""),
        "{}",
        fg.stderr()
    );
    std::fs::rename(&events, dir.join("events.jsonl.1")).unwrap();
    std::fs::rename(&audit, dir.join("audit.jsonl.1")).unwrap();
    // A broken config on disk: a reload would be refused, the reopen is not.
    let config = dir.join("floodgate.toml");
    let good = std::fs::read_to_string(&config).unwrap();
    std::fs::write(&config, "this is not toml [").unwrap();
    // SAFETY: kill sends a signal to floodgate's process; no memory is involved.
    assert_eq!(
        unsafe { libc::kill(fg.pid() as libc::pid_t, libc::SIGUSR1) },
        0
    );
    // The writer opens the path anew (within a second, by itself).
    let deadline = Instant::now() + Duration::from_secs(20);
    while !events.exists() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(events.exists(), "no new event log\n{}", fg.stderr());
    restrict(&socket, "after-rotation");
    assert!(
        wait_line(&events, "\"key\":\"after-rotation\""),
        "{}",
        fg.stderr()
    );
    let old = std::fs::read_to_string(dir.join("events.jsonl.1")).unwrap();
    assert!(
        old.contains("before-rotation") && !old.contains("after-rotation"),
        "{old}"
    );
    let new = std::fs::read_to_string(&events).unwrap();
    assert!(!new.contains("before-rotation"), "{new}");
    // The audit log: the new file has the new action only.
    let a = std::fs::read_to_string(&audit).unwrap();
    assert!(
        a.contains("after-rotation") && !a.contains("before-rotation"),
        "{a}"
    );
    let a1 = std::fs::read_to_string(dir.join("audit.jsonl.1")).unwrap();
    assert!(a1.contains("before-rotation"), "{a1}");
    assert!(
        fg.stderr().contains("SIGUSR1: event log reopened"),
        "{}",
        fg.stderr()
    );
    std::fs::write(&config, good).unwrap();
}
