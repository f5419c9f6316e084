//! The hold spool's files through the real binary: held files are private (0600) and the
//! directory must be floodgate's alone; damaged or planted files are set aside to
//! `corrupt/` with a log line and a metric while start-up and listings go on; a spool whose
//! disk is full answers 451 4.3.1 like a spool at its limits, counted the same, leaving
//! nothing half-written.

use crate::common;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use crate::support::send_numbered;
use common::*;
use serde_json::Value;
use tempfile::TempDir;

/// alice's first recipient passes; her later messages are held (at RCPT), or paced with
/// `action = "pace"`.
fn config(rec: &Recorder, dir: &Path, action: &str) -> FloodgateConfig {
    FloodgateConfig::new(rec.addr())
        .identity("xclient")
        .auth_without_tls(true)
        .log_level("info")
        .extra(&format!(
            r#"
[[limit]]
name = "per-user"
when = "authenticated"
key = "${{authenticated_id}}"
count = "recipients"
algorithm = "bucket"
rate = "1 / 1h"
burst = "1"
action = "{action}"

[hold]
dir = "{}"
"#,
            dir.display()
        ))
}

fn held(socket: &Path) -> Vec<Value> {
    let out = admin_verb(socket, &["held", "list", "--json"]);
    assert!(out.ok(), "{out}");
    let v: Value = serde_json::from_str(&out.stdout).unwrap_or_else(|e| panic!("{e}: {out}"));
    v["held"].as_array().cloned().unwrap_or_default()
}

fn body(i: usize) -> Vec<u8> {
    format!("Subject: spool {i}\r\n\r\nline\r\n").into_bytes()
}

fn names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

/// The one line of `/metrics` that starts with `series `.
fn metric(socket: &Path, series: &str) -> String {
    let m = admin_get(socket, "/metrics");
    m.lines()
        .find(|l| l.starts_with(&format!("{series} ")))
        .unwrap_or_else(|| panic!("no {series} in\n{m}"))
        .to_string()
}

/// `text` (a version 2 held file) with `edit` applied to its envelope's lines (through the
/// `body` line), the envelope's length set to match.
fn edited(text: &str, edit: impl Fn(&str) -> String) -> String {
    let (magic, rest) = text.split_once('\n').unwrap();
    let (_, rest) = rest.split_once('\n').unwrap();
    let body_at = rest.find("\nbody ").unwrap() + 1;
    let body_end = body_at + rest[body_at..].find('\n').unwrap() + 1;
    let env = edit(&rest[..body_end]);
    format!(
        "{magic}\nenvelope {}\n{env}{}",
        env.len(),
        &rest[body_end..]
    )
}

#[test]
fn planted_and_damaged_files_are_set_aside_and_start_up_and_listing_go_on() {
    let rec = Recorder::start(RecorderOptions::default());
    let spool = TempDir::new().unwrap();
    let cfg = config(&rec, spool.path(), "pace");
    let mut fg = Floodgate::start(&cfg);
    // One relayed, one paced (a paced file is read back at start).
    assert!(send_numbered(&fg, 2, body).iter().all(|r| r.0 == 250));
    fg.terminate();
    let good = names(spool.path());
    assert_eq!(good.len(), 1, "{good:?}");
    let good_path = spool.path().join(&good[0]);
    // Held files are private whatever the umask (this one is 022).
    let mode = std::fs::metadata(&good_path).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600, "{mode:o}");
    let text = std::fs::read_to_string(&good_path).unwrap();
    // A paced file whose body length is near u64::MAX: it wrapped and panicked at start.
    let id = good[0].trim_end_matches(".held");
    let huge = edited(&text, |env| {
        let body = env.lines().find(|l| l.starts_with("body ")).unwrap();
        env.replacen(&format!("id {id}\n"), "id 1-huge\n", 1)
            .replacen(body, "body 18446744073709551613", 1)
    });
    assert!(huge.contains("\nid 1-huge\n"), "{huge}");
    std::fs::write(spool.path().join("1-huge.held"), huge).unwrap();
    // A well-formed file under another message's name.
    std::fs::write(spool.path().join("1-renamed.held"), &text).unwrap();
    // The same in version 1's format.
    let v1 = "floodgate-held 1\nid 1-old\nkey alice\nlimit per-user\npaced 1/3600s recipients\n\
         time 0\nclient 127.0.0.1 1\nproto ESMTP\nmail <a@b>\nrcpt <c@d>\n\
         body 18446744073709551613\nSubject: x\r\n\r\nend\n";
    std::fs::write(spool.path().join("1-old.held"), v1).unwrap();
    // Cut short, and not a held file at all.
    std::fs::write(
        spool.path().join("1-cut.held"),
        &text.as_bytes()[..text.len() / 2],
    )
    .unwrap();
    std::fs::write(spool.path().join("1-junk.held"), b"\x00\x01garbage\xff\n").unwrap();

    let fg = Floodgate::start(&cfg);
    let sock = fg.admin_socket();
    fg.wait_stderr(
        "paced messages waiting in the hold spool",
        Duration::from_secs(10),
    );
    let list = held(&sock);
    assert_eq!(list.len(), 1, "{list:?}");
    assert_eq!(list[0]["subject"], "spool 1");
    assert_eq!(list[0]["paced"], "1/3600s recipients");
    let mut left = vec!["corrupt".to_string(), good[0].clone()];
    left.sort();
    assert_eq!(names(spool.path()), left);
    assert_eq!(
        names(&spool.path().join("corrupt")),
        [
            "1-cut.held",
            "1-huge.held",
            "1-junk.held",
            "1-old.held",
            "1-renamed.held"
        ]
    );
    let log = fg.stderr();
    assert_eq!(
        log.matches("hold spool: unreadable held file moved aside")
            .count(),
        5,
        "{log}"
    );
    for reason in [
        "truncated",
        "not a floodgate held file",
        "is not the file's name",
    ] {
        assert!(log.contains(reason), "{reason}: {log}");
    }
    assert_eq!(
        metric(&sock, "floodgate_held_corrupt_total"),
        "floodgate_held_corrupt_total 5"
    );

    // Planted while running: the next listing sets it aside, and `held show` says why.
    std::fs::write(
        spool.path().join("2-late.held"),
        b"floodgate-held 2\nenvelope 9\n",
    )
    .unwrap();
    let out = admin_verb(&sock, &["held", "show", "2-late"]);
    assert!(!out.ok(), "{out}");
    assert!(
        out.stderr.contains("unreadable file") && out.stderr.contains("moved to corrupt/"),
        "{out}"
    );
    assert_eq!(held(&sock).len(), 1);
    assert_eq!(
        metric(&sock, "floodgate_held_corrupt_total"),
        "floodgate_held_corrupt_total 6"
    );
    assert!(spool.path().join("corrupt/2-late.held").exists());
}

/// Runs `floodgate check` and `floodgate run` on `cfg`; both must refuse with `want`.
fn refused_at_start(cfg: &FloodgateConfig, tmp: &Path, want: &[&str]) {
    let path = tmp.join("floodgate.toml");
    std::fs::write(&path, cfg.toml()).unwrap();
    // `check` run by root checks as the owner of the state directories unless told whom:
    // it is told root, the user `run` runs as here.
    // SAFETY: geteuid has no preconditions and cannot fail.
    let as_root: &[&str] = if unsafe { libc::geteuid() } == 0 {
        &["--user", "root"]
    } else {
        &[]
    };
    for (sub, more) in [("check", as_root), ("run", &[][..])] {
        let out = run_with_timeout(
            Command::new(env!("CARGO_BIN_EXE_floodgate"))
                .arg(sub)
                .args(more)
                .arg("--config")
                .arg(&path),
            Duration::from_secs(20),
        );
        assert!(!out.ok(), "{sub}: {out}");
        for w in want {
            assert!(out.stderr.contains(w), "{sub}: {w:?} not in {out}");
        }
    }
}

#[test]
fn a_spool_directory_others_may_write_or_own_is_refused_at_start() {
    let rec = Recorder::start(RecorderOptions::default());
    let tmp = TempDir::new().unwrap();
    let dir = tmp.path().join("hold");
    std::fs::create_dir(&dir).unwrap();
    let shown = dir.display().to_string();
    for mode in [0o770, 0o777, 0o1777] {
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(mode)).unwrap();
        refused_at_start(
            &config(&rec, &dir, "hold"),
            tmp.path(),
            &[
                "[hold] dir",
                "writable by its group or by other users",
                &format!("chmod 700 {shown}"),
            ],
        );
    }
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).unwrap();
    // SAFETY: geteuid has no preconditions and cannot fail.
    if unsafe { libc::geteuid() } == 0 {
        // Owned by another user (nobody): floodgate runs as root here.
        std::os::unix::fs::chown(&dir, Some(65534), None).unwrap();
        refused_at_start(
            &config(&rec, &dir, "hold"),
            tmp.path(),
            &[
                "[hold] dir",
                "not by root that floodgate runs as",
                &format!("chown root {shown}"),
            ],
        );
        std::os::unix::fs::chown(&dir, Some(0), None).unwrap();
    }
    // Put right, it starts.
    let fg = Floodgate::start(&config(&rec, &dir, "hold"));
    assert!(held(&fg.admin_socket()).is_empty());
}

/// A tmpfs mounted on a directory, unmounted when dropped.
struct Mounted(PathBuf);

impl Drop for Mounted {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.0).status();
    }
}

#[test]
fn a_full_disk_defers_with_4_3_1_counts_as_refused_and_leaves_nothing() {
    // SAFETY: geteuid has no preconditions and cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("not root: cannot mount a tmpfs; the errno mapping is a unit test");
        return;
    }
    let rec = Recorder::start(RecorderOptions::default());
    let tmp = TempDir::new().unwrap();
    let dir = tmp.path().join("hold");
    std::fs::create_dir(&dir).unwrap();
    let status = Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=64k,mode=0700", "tmpfs"])
        .arg(&dir)
        .status()
        .unwrap();
    assert!(
        status.success(),
        "mount a 64 KiB tmpfs on {}",
        dir.display()
    );
    let _mounted = Mounted(dir.clone());
    let fg = Floodgate::start(&config(&rec, &dir, "hold"));
    let sock = fg.admin_socket();
    // The first is relayed, the second (200 KiB: more than the disk has, far less than
    // max_bytes) is refused, the third (small) is held.
    let replies = send_numbered(&fg, 3, |i| {
        let mut b = body(i);
        if i == 1 {
            b.extend(std::iter::repeat_n(b"0123456789abcdefghijklmnopqrstu\r\n", 6400).flatten());
        }
        b
    });
    let codes: Vec<u16> = replies.iter().map(|r| r.0).collect();
    assert_eq!(codes, [250, 451, 250], "{replies:?}");
    assert!(
        replies[1].1.contains("4.3.1") && replies[1].1.contains("Insufficient system storage"),
        "{replies:?}"
    );
    fg.wait_stderr("message not held: deferred", Duration::from_secs(10));
    let log = fg.stderr();
    assert!(log.contains("its disk has no room"), "{log}");
    assert_eq!(
        metric(&sock, "floodgate_held_total{event=\"refused\"}"),
        "floodgate_held_total{event=\"refused\"} 1"
    );
    // Nothing half-written: the held one only.
    let files = names(&dir);
    assert_eq!(files.len(), 1, "{files:?}");
    assert!(files[0].ends_with(".held"), "{files:?}");
    let list = held(&sock);
    assert_eq!(list.len(), 1);
    assert_eq!(list[0]["subject"], "spool 2");
    assert_eq!(
        rec.messages().len(),
        1,
        "the refused message was not relayed"
    );
}
