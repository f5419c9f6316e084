//! The hold spool through the real binary and the recording upstream: messages over a
//! `hold` limit are accepted and kept, listed, shown, released with identical octets and
//! the original client's identity, deleted; a full spool defers; held mail survives a
//! restart; concurrent releases deliver once; bad ids, bad spool directories and a
//! missing upstream get clear errors.

use crate::common;

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use crate::support::{content, send_numbered};
use common::*;
use serde_json::Value;
use tempfile::TempDir;

/// alice's first recipient passes; every later message of hers is held (at RCPT).
fn limits(dir: &Path, hold_extra: &str) -> String {
    hold_limit(
        dir,
        "name = \"per-user\"\nwhen = \"authenticated\"\nkey = \"${authenticated_id}\"",
        hold_extra,
    )
}

/// A limit named and scoped by `scope` whose first recipient passes and whose later
/// messages are held (at RCPT), and the spool in `dir`.
fn hold_limit(dir: &Path, scope: &str, hold_extra: &str) -> String {
    format!(
        r#"
[[limit]]
{scope}
count = "recipients"
algorithm = "bucket"
rate = "1 / 1h"
burst = "1"
action = "hold"

[hold]
dir = "{}"
{hold_extra}
"#,
        dir.display()
    )
}

fn config(rec: &Recorder, dir: &Path, hold_extra: &str) -> FloodgateConfig {
    FloodgateConfig::new(rec.addr())
        .identity("xclient")
        .auth_without_tls(true)
        .log_level("info")
        .extra(&limits(dir, hold_extra))
}

fn held(socket: &Path) -> Vec<Value> {
    let out = admin_verb(socket, &["held", "list", "--json"]);
    assert!(out.ok(), "{out}");
    let v: Value = serde_json::from_str(&out.stdout).unwrap_or_else(|e| panic!("{e}: {out}"));
    v["held"].as_array().cloned().unwrap_or_default()
}

/// The body of message `i`: a Subject, and a line starting with '.' (dot-stuffed on the
/// wire) so the octets are checked through stuffing.
fn body(i: usize) -> Vec<u8> {
    format!("Subject: held {i}\r\nFrom: alice@example.org\r\n\r\nline one\r\n.dot line {i}\r\n")
        .into_bytes()
}

/// One authenticated session as alice sending `n` messages, message `i` to `r{i}@…`;
/// returns the final reply of each.
fn send(fg: &Floodgate, n: usize) -> Vec<(u16, String)> {
    send_numbered(fg, n, body)
}

#[test]
fn held_messages_are_listed_shown_released_and_deleted() {
    let rec = Recorder::start(RecorderOptions::default());
    let spool = TempDir::new().unwrap();
    let fg = Floodgate::start(&config(&rec, spool.path(), ""));
    let sock = fg.admin_socket();
    let replies = send(&fg, 4);
    // The first goes through; the next three are over the limit: held, all answered 250.
    assert!(replies.iter().all(|(c, _)| *c == 250), "{replies:?}");
    rec.wait_events("message", 1);
    assert_eq!(rec.messages().len(), 1, "upstream got only the first");
    let list = held(&sock);
    assert_eq!(list.len(), 3, "{list:?}");
    for (i, m) in list.iter().enumerate() {
        let i = i + 1;
        assert_eq!(m["subject"], format!("held {i}"));
        assert_eq!(
            m["recipients"],
            serde_json::json!([format!("r{i}@example.com")])
        );
        assert_eq!(m["sender"], "alice@example.org");
        assert_eq!(m["key"], USER);
        assert_eq!(m["limit"], "per-user");
        assert!(
            replies[i].1.contains(m["id"].as_str().unwrap()),
            "{replies:?}"
        );
    }
    let text = admin_verb(&sock, &["held", "list"]);
    assert!(text.ok(), "{text}");
    assert!(
        text.stdout.contains("SUBJECT") && text.stdout.contains("held 2"),
        "{text}"
    );
    // The recipients are counted, and listed with --wide.
    assert!(!text.stdout.contains("r3@example.com"), "{text}");
    assert!(text.stdout.contains(" 1 recipient "), "{text}");
    let wide = admin_verb(&sock, &["held", "list", "--wide"]);
    assert!(wide.stdout.contains("r3@example.com"), "{wide}");
    let only = admin_verb(&sock, &["held", "list", "--key", "nobody", "--json"]);
    assert!(only.stdout.contains("\"held\":[]"), "{only}");

    let id1 = list[0]["id"].as_str().unwrap().to_string();
    let id2 = list[1]["id"].as_str().unwrap().to_string();
    let show = admin_verb(&sock, &["held", "show", &id1]);
    assert!(show.ok(), "{show}");
    assert!(show.stdout.contains("Subject: held 1"), "{show}");
    assert!(show.stdout.contains("<r1@example.com>"), "{show}");
    assert!(show.stdout.contains("laptop.test"), "{show}");
    assert!(
        show.stdout.contains("localhost"),
        "the client's name is kept: {show}"
    );

    // Release: upstream gets the held octets with one trace header on top, from the
    // original client (XCLIENT ADDR, HELO and LOGIN).
    let out = admin_verb(&sock, &["held", "release", &id1, "--reason", "checked"]);
    assert!(out.ok(), "{out}");
    assert!(out.stdout.contains(&format!("{id1}: released")), "{out}");
    rec.wait_events("message", 2);
    let msgs = rec.messages();
    assert_eq!(msgs.len(), 2);
    let m = &msgs[1];
    let content = content(m);
    let first_end = content.iter().position(|&b| b == b'\n').unwrap() + 1;
    let trace = String::from_utf8_lossy(&content[..first_end]).to_string();
    assert!(
        trace.starts_with(&format!("X-Floodgate-Released: id={id1}; by="))
            && trace.contains("reason=\"audit ")
            && !trace.contains("checked"),
        "{trace}"
    );
    assert_eq!(
        &content[first_end..],
        &body(1)[..],
        "identical octets after the trace header"
    );
    assert_eq!(m.rcpts, ["r1@example.com"]);
    assert_eq!(m.mail_from, "alice@example.org");
    assert_eq!(m.xclient.get("ADDR").map(String::as_str), Some("127.0.0.1"));
    assert_eq!(
        m.xclient.get("HELO").map(String::as_str),
        Some("laptop.test")
    );
    assert_eq!(m.auth_user.as_deref(), Some(USER));
    // The client's resolved name as the relayed session sent it, not [UNAVAILABLE].
    let live = &msgs[0].xclient;
    assert_eq!(
        live.get("NAME").map(String::as_str),
        Some("localhost"),
        "{live:?}"
    );
    assert_eq!(m.xclient.get("NAME"), live.get("NAME"), "{:?}", m.xclient);
    assert_eq!(m.xclient.get("REVERSE_NAME"), live.get("REVERSE_NAME"));
    assert_eq!(held(&sock).len(), 2);

    // Delete one; a released or deleted id is then unknown, with a clear error.
    let out = admin_verb(&sock, &["held", "delete", &id2]);
    assert!(out.ok(), "{out}");
    let left = held(&sock);
    assert_eq!(left.len(), 1);
    assert_ne!(left[0]["id"], id2.as_str());
    for args in [
        vec!["held", "release", id1.as_str(), "--reason", "checked"],
        vec!["held", "delete", id2.as_str()],
        vec!["held", "show", "no-such-id"],
        vec!["held", "release", "../etc", "--reason", "checked"],
    ] {
        let out = admin_verb(&sock, &args);
        assert!(!out.ok(), "{args:?}: {out}");
        assert!(
            out.stderr.contains("no held message with id"),
            "{args:?}: {out}"
        );
    }
    assert_eq!(rec.messages().len(), 2, "nothing else delivered");

    // Release by key takes the rest.
    let out = admin_verb(
        &sock,
        &["held", "release", "--key", USER, "--reason", "checked"],
    );
    assert!(out.ok(), "{out}");
    rec.wait_events("message", 3);
    assert!(held(&sock).is_empty());
    // The session counts each message once, relayed or held.
    fg.wait_stderr("messages=4 recipients=4", Duration::from_secs(10));
    let log = fg.stderr();
    assert!(log.contains("message held"), "{log}");
    assert!(log.contains("held message released"), "{log}");
    assert!(log.contains("held message deleted"), "{log}");
    let metrics = admin_get(&sock, "/metrics");
    for line in [
        "floodgate_held_messages 0",
        "floodgate_held_bytes 0",
        "floodgate_held_total{event=\"held\"} 3",
        "floodgate_held_total{event=\"released\"} 2",
        "floodgate_held_total{event=\"deleted\"} 1",
        "floodgate_policy_verdicts_total{limit=\"per-user\",action=\"hold\"} 3",
    ] {
        assert!(metrics.contains(line), "{line} not in\n{metrics}");
    }
}

#[test]
fn a_full_spool_defers_and_loses_nothing() {
    let rec = Recorder::start(RecorderOptions::default());
    let spool = TempDir::new().unwrap();
    let fg = Floodgate::start(&config(&rec, spool.path(), "max_messages = 2"));
    let replies = send(&fg, 4);
    let codes: Vec<u16> = replies.iter().map(|r| r.0).collect();
    assert_eq!(codes, [250, 250, 250, 451], "{replies:?}");
    assert!(replies[3].1.contains(" 4.3.1 "), "{replies:?}");
    assert_eq!(held(&fg.admin_socket()).len(), 2);
    assert_eq!(
        rec.messages().len(),
        1,
        "the deferred message was not relayed either"
    );
    // The postmaster is told: one floodgate.spool_full alert (in the alert log lines).
    fg.wait_stderr("floodgate.spool_full", Duration::from_secs(10));
    let log = fg.stderr();
    let alerts: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("floodgate::alert") && l.contains("floodgate.spool_full"))
        .collect();
    assert_eq!(alerts.len(), 1, "{log}");
    assert!(alerts[0].contains("max_messages"), "{}", alerts[0]);
    // Only held files in the directory: nothing half-written.
    let names: Vec<String> = std::fs::read_dir(spool.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names.len(), 2);
    assert!(names.iter().all(|n| n.ends_with(".held")), "{names:?}");

    // max_bytes: no room for even one.
    let spool2 = TempDir::new().unwrap();
    let fg2 = Floodgate::start(&config(&rec, spool2.path(), "max_bytes = 100"));
    let codes: Vec<u16> = send(&fg2, 2).iter().map(|r| r.0).collect();
    assert_eq!(codes, [250, 451]);
    assert!(held(&fg2.admin_socket()).is_empty());
    assert_eq!(std::fs::read_dir(spool2.path()).unwrap().count(), 0);
}

#[test]
fn held_mail_survives_a_restart_and_two_releases_deliver_once() {
    let rec = Recorder::start(RecorderOptions::default());
    let spool = TempDir::new().unwrap();
    let cfg = config(&rec, spool.path(), "");
    let mut fg = Floodgate::start(&cfg);
    assert!(send(&fg, 2).iter().all(|r| r.0 == 250));
    let before = held(&fg.admin_socket());
    assert_eq!(before.len(), 1);
    fg.terminate();
    let fg = Floodgate::start(&cfg);
    let sock = fg.admin_socket();
    let after = held(&sock);
    assert_eq!(after, before);
    let id = after[0]["id"].as_str().unwrap().to_string();
    let both: Vec<Output> = std::thread::scope(|s| {
        let a = s.spawn(|| admin_verb(&sock, &["held", "release", &id, "--reason", "checked"]));
        let b = s.spawn(|| admin_verb(&sock, &["held", "release", &id, "--reason", "checked"]));
        vec![a.join().unwrap(), b.join().unwrap()]
    });
    let ok = both.iter().filter(|o| o.ok()).count();
    assert_eq!(ok, 1, "{both:?}");
    let loser = both.iter().find(|o| !o.ok()).unwrap();
    assert!(
        loser.stderr.contains("being released") || loser.stderr.contains("no held message with id"),
        "{loser}"
    );
    rec.wait_events("message", 2);
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(
        rec.messages().len(),
        2,
        "the held message was delivered once"
    );
    assert!(held(&sock).is_empty());
}

#[test]
fn upstream_down_during_release_keeps_the_message() {
    let rec = Recorder::start(RecorderOptions::default());
    let spool = TempDir::new().unwrap();
    let fg = Floodgate::start(&config(&rec, spool.path(), ""));
    assert!(send(&fg, 2).iter().all(|r| r.0 == 250));
    let sock = fg.admin_socket();
    let id = held(&sock)[0]["id"].as_str().unwrap().to_string();
    drop(rec);
    let out = admin_verb(&sock, &["held", "release", &id, "--reason", "checked"]);
    assert!(!out.ok(), "{out}");
    assert!(
        out.stderr.contains("cannot connect to upstream") && out.stderr.contains("stays held"),
        "{out}"
    );
    let list = held(&sock);
    assert_eq!(list.len(), 1);
    assert_eq!(list[0]["id"], id.as_str());
}

#[test]
fn ttl_expiry_deletes_held_mail() {
    let rec = Recorder::start(RecorderOptions::default());
    let spool = TempDir::new().unwrap();
    let fg = Floodgate::start(&config(&rec, spool.path(), "ttl = \"1s\""));
    assert!(send(&fg, 2).iter().all(|r| r.0 == 250));
    fg.wait_stderr("held message expired", Duration::from_secs(20));
    assert!(held(&fg.admin_socket()).is_empty());
    assert_eq!(rec.messages().len(), 1);
}

#[test]
fn ttl_expiry_can_release() {
    let rec = Recorder::start(RecorderOptions::default());
    let spool = TempDir::new().unwrap();
    let extra = "ttl = \"1s\"\non_expiry = \"release\"";
    let fg = Floodgate::start(&config(&rec, spool.path(), extra));
    assert!(send(&fg, 2).iter().all(|r| r.0 == 250));
    rec.wait_events("message", 2);
    let m = &rec.messages()[1];
    assert!(content(m).starts_with(b"X-Floodgate-Released: "), "{m:?}");
    assert!(String::from_utf8_lossy(&m.data).contains("by=\"expiry\""));
    assert!(held(&fg.admin_socket()).is_empty());
}

#[test]
fn a_missing_or_read_only_spool_directory_is_refused_at_start() {
    let rec = Recorder::start(RecorderOptions::default());
    let tmp = TempDir::new().unwrap();
    for (dir, want) in [
        // Missing, and so is its parent: floodgate creates the spool, not the path to it.
        (tmp.path().join("no/spool"), "no such directory"),
        // Not writable even by root.
        (Path::new("/sys").to_path_buf(), "not writable"),
    ] {
        let cfg = config(&rec, &dir, "");
        let path = tmp.path().join("floodgate.toml");
        std::fs::write(&path, cfg.toml()).unwrap();
        for sub in ["check", "run"] {
            let out = run_with_timeout(
                Command::new(env!("CARGO_BIN_EXE_floodgate"))
                    .arg(sub)
                    .arg("--config")
                    .arg(&path),
                Duration::from_secs(20),
            );
            assert!(!out.ok(), "{sub}: {out}");
            assert!(
                out.stderr.contains("[hold] dir") && out.stderr.contains(want),
                "{sub}: {out}"
            );
        }
    }
}

#[test]
fn hold_settings_are_checked() {
    let rec = Recorder::start(RecorderOptions::default());
    let tmp = TempDir::new().unwrap();
    let base = FloodgateConfig::new(rec.addr()).toml();
    let cases = [
        (
            "[[limit]]\nname = \"h\"\nstage = \"mail\"\nratelimit = \"1 / 1h / per_mail\"\naction = \"hold\"\n",
            "has action = \"hold\" but there is no [hold] section",
        ),
        (
            "[[limit]]\nname = \"h\"\nstage = \"connect\"\ncount = \"connections\"\nrate = \"1 / 1h\"\nburst = \"1\"\naction = \"hold\"\n[hold]\ndir = \"/tmp\"\n",
            "for limits at the mail, rcpt, data or message stage",
        ),
        ("[hold]\ndir = \"/tmp\"\non_expiry = \"bounce\"\n", "unknown variant `bounce`"),
        ("[hold]\ndir = \"/tmp\"\nmax_messages = 0\n", "at least 1"),
        ("[hold]\ndir = \"/tmp\"\ncolour = 1\n", "unknown field `colour`"),
        ("[hold]\nmax_bytes = 5\n", "missing field `dir`"),
    ];
    for (extra, want) in cases {
        let path = tmp.path().join("floodgate.toml");
        std::fs::write(&path, format!("{base}\n{extra}")).unwrap();
        let out = run_with_timeout(
            Command::new(env!("CARGO_BIN_EXE_floodgate"))
                .arg("check")
                .arg("--config")
                .arg(&path),
            Duration::from_secs(20),
        );
        assert!(!out.ok(), "{extra}: {out}");
        assert!(out.stderr.contains(want), "{extra}: {out}");
    }
    let path = tmp.path().join("floodgate.toml");
    let check = |dir: &Path| {
        std::fs::write(
            &path,
            format!(
                "{base}\n[hold]\ndir = \"{}\"\nttl = \"2d\"\n",
                dir.display()
            ),
        )
        .unwrap();
        run_with_timeout(
            Command::new(env!("CARGO_BIN_EXE_floodgate"))
                .arg("check")
                .arg("--config")
                .arg(&path),
            Duration::from_secs(20),
        )
    };
    // A directory anyone may write (held mail could be planted there) is refused.
    let out = check(Path::new("/tmp"));
    assert!(!out.ok(), "{out}");
    assert!(
        out.stderr
            .contains("[hold] dir /tmp: writable by its group or by other users")
            && out.stderr.contains("chmod 700 /tmp"),
        "{out}"
    );
    let private = tmp.path().join("hold");
    std::fs::create_dir(&private).unwrap();
    let out = check(&private);
    assert!(out.ok(), "{out}");
    assert!(
        out.stdout
            .contains(&format!("hold: dir={}", private.display()))
            && out.stdout.contains("ttl=172800s"),
        "{out}"
    );
}

#[test]
fn a_bdat_message_is_held_and_released_with_the_same_octets() {
    let rec = Recorder::start(RecorderOptions::default());
    let spool = TempDir::new().unwrap();
    let fg = Floodgate::start(&config(&rec, spool.path(), ""));
    assert_eq!(send(&fg, 1)[0].0, 250);
    let mut c = RawClient::connect_greeted(fg.addr("plain"));
    assert_eq!(c.ehlo("laptop.test").code, 250);
    let token = b64_encode(format!("\0{USER}\0{PASSWORD}").as_bytes());
    assert_eq!(c.cmd(&format!("AUTH PLAIN {token}")).code, 235);
    assert_eq!(c.cmd("MAIL FROM:<alice@example.org>").code, 250);
    assert_eq!(c.cmd("RCPT TO:<chunked@example.com>").code, 250);
    let msg = b"Subject: chunked\r\n\r\n.starts with a dot\r\nend\r\n";
    let (a, b) = msg.split_at(20);
    c.send(format!("BDAT {}\r\n", a.len()).as_bytes());
    c.send(a);
    assert_eq!(c.reply().code, 250);
    c.send(format!("BDAT {} LAST\r\n", b.len()).as_bytes());
    c.send(b);
    let r = c.reply();
    assert_eq!(r.code, 250, "{r:?}");
    assert!(r.text().contains("queued as"), "{r:?}");
    assert_eq!(c.cmd("QUIT").code, 221);
    let sock = fg.admin_socket();
    let list = held(&sock);
    assert_eq!(list.len(), 1);
    assert_eq!(list[0]["subject"], "chunked");
    assert_eq!(list[0]["size"], msg.len());
    assert_eq!(rec.messages().len(), 1);
    let id = list[0]["id"].as_str().unwrap();
    assert!(admin_verb(&sock, &["held", "release", id, "--reason", "checked"]).ok());
    rec.wait_events("message", 2);
    let content = content(&rec.messages()[1]);
    let first_end = content.iter().position(|&b| b == b'\n').unwrap() + 1;
    assert!(content.starts_with(b"X-Floodgate-Released: "));
    assert_eq!(&content[first_end..], &msg[..]);
}

/// A per-client-IP hold limit (the first recipient passes) with its spool in `dir`.
fn per_ip_hold(dir: &Path) -> String {
    hold_limit(dir, "name = \"per-ip\"\nkey = \"${client_ip}\"", "")
}

/// A HELO client, one command at a time, sends two messages through `fg`: the first is
/// relayed, the second held; the held one is released. Waits until upstream has both.
fn helo_client_sends_two_and_the_held_one_is_released(fg: &Floodgate, rec: &Recorder) {
    let mut c = RawClient::connect_greeted(fg.addr("plain"));
    let r = c.cmd("HELO printer.test");
    assert_eq!((r.code, r.lines.len()), (250, 1), "{r:?}");
    for i in 0..2 {
        assert_eq!(c.cmd("MAIL FROM:<scanner@example.org>").code, 250);
        assert_eq!(c.cmd(&format!("RCPT TO:<r{i}@example.com>")).code, 250);
        assert_eq!(c.cmd("DATA").code, 354);
        c.send(format!("Subject: printed {i}\r\n\r\nscan\r\n.\r\n").as_bytes());
        assert_eq!(c.reply().code, 250);
    }
    assert_eq!(c.cmd("QUIT").code, 221);
    let sock = fg.admin_socket();
    let list = held(&sock);
    assert_eq!(list.len(), 1, "{list:?}");
    let out = admin_verb(
        &sock,
        &[
            "held",
            "release",
            list[0]["id"].as_str().unwrap(),
            "--reason",
            "checked",
        ],
    );
    assert!(out.ok(), "{out}");
    rec.wait_events("message", 2);
}

#[test]
fn a_helo_clients_held_message_is_released_as_its_session_went_upstream() {
    for (always_ehlo, esmtp) in [("true", true), ("false", false)] {
        let rec = Recorder::start(RecorderOptions::default());
        let spool = TempDir::new().unwrap();
        let fg = Floodgate::start(
            &FloodgateConfig::new(rec.addr())
                .identity("xclient")
                .upstream_key("always_ehlo", always_ehlo)
                .extra(&per_ip_hold(spool.path())),
        );
        helo_client_sends_two_and_the_held_one_is_released(&fg, &rec);
        let msgs = rec.messages();
        for m in &msgs {
            let what = format!("always_ehlo = {always_ehlo}: {m:?}");
            assert_eq!(m.esmtp, esmtp, "{what}");
            assert_eq!(m.bdat, esmtp, "BDAT only in an EHLO session: {what}");
            assert_eq!(m.helo.as_deref(), Some("printer.test"), "{what}");
            assert_eq!(
                m.xclient.get("PROTO").map(String::as_str),
                Some("SMTP"),
                "{what}"
            );
        }
        let content = content(&msgs[1]);
        let first_end = content.iter().position(|&b| b == b'\n').unwrap() + 1;
        assert_eq!(&content[first_end..], b"Subject: printed 1\r\n\r\nscan\r\n");
    }
}

#[test]
fn a_helo_clients_message_is_released_with_helo_to_an_upstream_that_refuses_ehlo() {
    let rec = Recorder::start(RecorderOptions {
        no_ehlo: true,
        ..RecorderOptions::default()
    });
    let spool = TempDir::new().unwrap();
    let fg = Floodgate::start(&FloodgateConfig::new(rec.addr()).extra(&per_ip_hold(spool.path())));
    helo_client_sends_two_and_the_held_one_is_released(&fg, &rec);
    for m in rec.messages() {
        assert!(!m.esmtp && !m.bdat, "{m:?}");
        assert_eq!(m.helo.as_deref(), Some("printer.test"), "{m:?}");
    }
    // Each session: EHLO refused, then the client's HELO.
    let hellos: Vec<String> = rec
        .commands()
        .into_iter()
        .filter(|l| l.starts_with("EHLO") || l.starts_with("HELO"))
        .collect();
    assert_eq!(
        hellos,
        [
            "EHLO printer.test",
            "HELO printer.test",
            "EHLO printer.test",
            "HELO printer.test"
        ]
    );
}

#[test]
fn a_recipient_refused_at_release_keeps_the_message_held() {
    let rec = Recorder::start(RecorderOptions::default());
    let spool = TempDir::new().unwrap();
    let mut fg = Floodgate::start(&config(&rec, spool.path(), ""));
    assert!(send(&fg, 2).iter().all(|r| r.0 == 250));
    fg.terminate();
    // The same spool in front of an upstream that now refuses that recipient.
    let refusing = Recorder::start(RecorderOptions {
        reject_rcpt: vec!["r1@".into()],
        ..RecorderOptions::default()
    });
    let fg = Floodgate::start(&config(&refusing, spool.path(), ""));
    let sock = fg.admin_socket();
    let id = held(&sock)[0]["id"].as_str().unwrap().to_string();
    let out = admin_verb(&sock, &["held", "release", &id, "--reason", "checked"]);
    assert!(!out.ok(), "{out}");
    assert!(
        out.stderr.contains("RCPT TO:<r1@example.com>")
            && out.stderr.contains("550")
            && out.stderr.contains("stays held"),
        "{out}"
    );
    assert_eq!(held(&sock).len(), 1);
    assert!(refusing.messages().is_empty());
}

#[test]
fn a_spool_that_cannot_be_written_defers_with_451() {
    let rec = Recorder::start(RecorderOptions::default());
    let parent = TempDir::new().unwrap();
    let dir = parent.path().join("spool");
    std::fs::create_dir(&dir).unwrap();
    let fg = Floodgate::start(&config(&rec, &dir, ""));
    // The directory goes away under the running floodgate: nothing can be written.
    std::fs::remove_dir(&dir).unwrap();
    let replies = send(&fg, 2);
    assert_eq!(replies[0].0, 250);
    assert_eq!(replies[1].0, 451, "{replies:?}");
    assert!(replies[1].1.contains(" 4.3.0 "), "{replies:?}");
    assert_eq!(
        rec.messages().len(),
        1,
        "the deferred message was not relayed"
    );
    fg.wait_stderr("message not held: deferred", Duration::from_secs(10));
    assert!(!dir.exists(), "nothing was written anywhere");
}

#[test]
fn held_verbs_refuse_bad_arguments_clearly() {
    let run = |args: &[&str]| {
        run_with_timeout(
            Command::new(env!("CARGO_BIN_EXE_floodgate"))
                .args(args)
                .args(["--socket", "/nonexistent/floodgate.sock"]),
            Duration::from_secs(20),
        )
    };
    let none = run(&["held", "release"]);
    assert!(!none.ok() && none.stderr.contains("required"), "{none}");
    let both = run(&["held", "delete", "some-id", "--key", "alice"]);
    assert!(
        !both.ok() && both.stderr.contains("cannot be used with"),
        "{both}"
    );
    let unknown = run(&["held", "frobnicate"]);
    assert!(
        !unknown.ok() && unknown.stderr.contains("unrecognized subcommand"),
        "{unknown}"
    );
    // Well-formed, but nothing is running there.
    let down = run(&["held", "list"]);
    assert!(
        !down.ok() && down.stderr.contains("cannot connect to admin socket"),
        "{down}"
    );
}
