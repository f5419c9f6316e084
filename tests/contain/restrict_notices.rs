//! What a restriction tells, through the real binary: a restriction ended by time is
//! alerted once (one `floodgate.released` with `reason = "expired"` and the evidence, on the
//! memory store and across two nodes sharing Redis), logged and counted; `notify_user` mails
//! the user once per restriction through upstream from the null sender; the evidence counts
//! the key's held messages.

use crate::common;
use crate::common::redis as redis_server;

use std::path::Path;
use std::time::Duration;

use common::restrict::*;
use common::*;
use serde_json::Value;

fn check_expired(n: &Value) {
    assert_eq!(n["key"], USER, "{n}");
    assert_eq!(n["limit"], "per-user", "{n}");
    assert_eq!(n["by"], "expiry", "{n}");
    assert_eq!(n["reason"], "expired", "{n}");
    assert!(n["until"].is_string(), "{n}");
    check_evidence(&n["evidence"]);
    assert!(n["evidence"]["held"].is_u64(), "{n}");
}

/// Waits until no restriction is listed, then two more sweeps, so that a second release
/// notice would have been written by now.
fn wait_released(sock: &Path) {
    wait_until(Duration::from_secs(20), "the restriction to end", || {
        admin_json(sock, &["restricted"])["restricted"]
            .as_array()
            .unwrap()
            .is_empty()
            .then_some(())
    });
    std::thread::sleep(Duration::from_millis(2500));
}

#[test]
fn a_timed_restriction_ends_with_one_release_alert_on_the_memory_store() {
    let rec = Recorder::start(users());
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("alerts.jsonl");
    let fg = start(&rec, &format!("{}{}", limit("2s"), alerts(&file)));
    let sock = fg.admin_socket();
    let sent = send(fg.addr("plain"), USER, PASSWORD, 6);
    assert_eq!(codes(&sent), [250, 250, 250, 250, 250, 450], "{sent:?}");
    wait_notices(&file, "floodgate.restricted", 1);
    // Released after 2 s without a verb: exactly one alert, with the evidence.
    let released = wait_notices(&file, "floodgate.released", 1);
    check_expired(&released[0]);
    wait_released(&sock);
    assert_eq!(notices(&file, "floodgate.released").len(), 1);
    fg.wait_stderr("key released", Duration::from_secs(10));
    let metrics = admin_get(&sock, "/metrics");
    for line in [
        "floodgate_restrictions_total{event=\"restricted\"} 1",
        "floodgate_restrictions_total{event=\"expired\"} 1",
        "floodgate_restrictions_total{event=\"released\"} 0",
    ] {
        assert!(metrics.contains(line), "{line} not in\n{metrics}");
    }
    // And the user's mail is no longer answered as restricted.
    let mut c = RawClient::connect_greeted(fg.addr("plain"));
    assert_eq!(c.ehlo("client.test").code, 250);
    let token = b64_encode(format!("\0{USER}\0{PASSWORD}").as_bytes());
    assert_eq!(c.cmd(&format!("AUTH PLAIN {token}")).code, 235);
    let r = c.cmd("MAIL FROM:<s@example.org>");
    assert!(!r.text().contains("restricted since"), "{}", r.text());
}

#[test]
fn a_timed_restriction_shared_by_two_nodes_is_alerted_once() {
    let redis = redis_server::RedisServer::start();
    let rec = Recorder::start(users());
    let dir = tempfile::tempdir().unwrap();
    let (fa, fb) = (dir.path().join("a.jsonl"), dir.path().join("b.jsonl"));
    let store = |file: &Path| {
        format!(
            "[store]\nbackend = \"redis\"\nurl = \"{}\"\ntimeout = \"2s\"\n{}{}",
            redis.url(),
            limit("2s"),
            alerts(file)
        )
    };
    let a = start(&rec, &store(&fa));
    let b = start(&rec, &store(&fb));
    let sent = send(a.addr("plain"), USER, PASSWORD, 6);
    assert_eq!(codes(&sent), [250, 250, 250, 250, 250, 450], "{sent:?}");
    // Refused on b too while it lasts.
    assert_eq!(codes(&send(b.addr("plain"), USER, PASSWORD, 1)), [450]);
    let total =
        || notices(&fa, "floodgate.released").len() + notices(&fb, "floodgate.released").len();
    wait_until(Duration::from_secs(20), "a release notice", || {
        (total() >= 1).then_some(())
    });
    wait_released(&a.admin_socket());
    // Both nodes sweep every second; exactly one of them told of the release.
    assert_eq!(total(), 1);
    let mut all = notices(&fa, "floodgate.released");
    all.extend(notices(&fb, "floodgate.released"));
    check_expired(&all[0]);
    assert_eq!(codes(&send(b.addr("plain"), USER, PASSWORD, 1)), [250]);
}

/// notify_user: one short mail per restriction, from <>, to the address the template gives,
/// saying what happened and what the user's mail program is told.
#[test]
fn notify_user_mails_the_user_once_per_restriction() {
    let rec = Recorder::start(users());
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("alerts.jsonl");
    let fg = start(
        &rec,
        &format!(
            "{}notify_user = \"${{authenticated_id}}@example.org\"\n{}",
            limit("until_released"),
            alerts(&file)
        ),
    );
    let sock = fg.admin_socket();
    let notices_sent = || -> Vec<Message> {
        rec.messages()
            .into_iter()
            .filter(|m| m.mail_from.is_empty())
            .collect()
    };
    let sent = send(fg.addr("plain"), USER, PASSWORD, 7);
    assert_eq!(
        codes(&sent),
        [250, 250, 250, 250, 250, 450, 450],
        "{sent:?}"
    );
    // A new session is refused too; still one restriction, so still one notice.
    assert_eq!(codes(&send(fg.addr("plain"), USER, PASSWORD, 1)), [450]);
    let first = wait_until(Duration::from_secs(20), "the notice", || {
        let n = notices_sent();
        (!n.is_empty()).then_some(n)
    });
    fg.wait_stderr("restriction notice sent", Duration::from_secs(10));
    assert_eq!(first.len(), 1, "{first:?}");
    let m = &first[0];
    assert_eq!(m.mail_from, "", "the null sender");
    assert_eq!(m.rcpts, ["alice@example.org"]);
    assert_eq!(m.auth_user, None, "floodgate's own mail, not the user's");
    let text = String::from_utf8_lossy(&m.data).into_owned();
    for want in [
        "To: <alice@example.org>\r\n",
        "Auto-Submitted: auto-generated\r\n",
        "Subject: Your account alice is restricted from sending mail\r\n",
        "Restricted until: until the postmaster releases it\r\n",
        "Limit:            per-user, 5 / 1h",
        "450 4.7.1 alice restricted since ",
        "by per-user; call the help desk\r\n",
    ] {
        assert!(text.contains(want), "{want:?} not in\n{text}");
    }
    let metrics = admin_get(&sock, "/metrics");
    assert!(
        metrics.contains("floodgate_restrictions_total{event=\"user_notified\"} 1"),
        "{metrics}"
    );

    // Released, then restricted again: a second restriction, a second notice.
    let out = admin_verb(&sock, &["release", USER, "--reason", "password changed"]);
    assert!(out.ok(), "{out}");
    let again = send(fg.addr("plain"), USER, PASSWORD, 6);
    assert_eq!(codes(&again), [250, 250, 250, 250, 250, 450], "{again:?}");
    wait_until(Duration::from_secs(20), "the second notice", || {
        (notices_sent().len() == 2).then_some(())
    });
    assert_eq!(notices(&file, "floodgate.restricted").len(), 2);
    // Upstream got the user's ten messages and the two notices, nothing else.
    assert_eq!(rec.messages().len(), 12);
}

/// A notice that cannot be sent is logged and counted; the session goes on.
#[test]
fn a_notice_upstream_refuses_is_logged_and_counted() {
    let rec = Recorder::start(RecorderOptions {
        reject_rcpt: vec!["nobody@".into()],
        ..users()
    });
    let fg = start(
        &rec,
        &format!(
            "{}notify_user = \"nobody@example.org\"\n",
            limit("until_released")
        ),
    );
    let sent = send(fg.addr("plain"), USER, PASSWORD, 7);
    assert_eq!(
        codes(&sent),
        [250, 250, 250, 250, 250, 450, 450],
        "{sent:?}"
    );
    fg.wait_stderr("restriction notice not sent", Duration::from_secs(20));
    let metrics = admin_get(&fg.admin_socket(), "/metrics");
    assert!(
        metrics.contains("floodgate_restrictions_total{event=\"user_notice_failed\"} 1"),
        "{metrics}"
    );
    assert_eq!(rec.messages().len(), 5);
}

/// while_restricted = "hold": the release alert counts the messages held for the key.
#[test]
fn the_release_alert_counts_the_held_messages() {
    let rec = Recorder::start(users());
    let dir = tempfile::tempdir().unwrap();
    let spool = dir.path().join("hold");
    std::fs::create_dir(&spool).unwrap();
    let file = dir.path().join("alerts.jsonl");
    let fg = start(
        &rec,
        &format!(
            "{}while_restricted = \"hold\"\n{}\n[hold]\ndir = \"{}\"\n",
            limit("until_released"),
            alerts(&file),
            spool.display()
        ),
    );
    let sock = fg.admin_socket();
    assert_eq!(codes(&send(fg.addr("plain"), USER, PASSWORD, 8)), [250; 8]);
    // Five relayed, three held: the one that tripped the limit and two more.
    assert_eq!(rec.messages().len(), 5);
    let restricted = wait_notices(&file, "floodgate.restricted", 1);
    assert_eq!(restricted[0]["evidence"]["held"], 0, "{}", restricted[0]);
    let out = admin_verb(&sock, &["release", USER, "--reason", "checked"]);
    assert!(out.ok(), "{out}");
    let released = wait_notices(&file, "floodgate.released", 1);
    let ev = &released[0]["evidence"];
    assert_eq!(ev["held"], 3, "{ev}");
    check_evidence(ev);
    let listed = admin_json(&sock, &["held", "list"]);
    assert_eq!(listed["held"].as_array().unwrap().len(), 3, "{listed}");
}

fn check_config(dir: &Path, limit_lines: &str) -> Output {
    let cfg = format!(
        "[[listener]]\naddress = \"127.0.0.1:0\"\ntls = \"none\"\n[upstream]\naddress = \"127.0.0.1:25\"\n[[limit]]\nname = \"x\"\nrate = \"5 / 1h\"\nburst = \"5\"\ncount = \"messages\"\nkey = \"${{authenticated_id}}\"\n{limit_lines}\n"
    );
    let path = dir.join("f.toml");
    std::fs::write(&path, cfg).unwrap();
    run_with_timeout(
        std::process::Command::new(env!("CARGO_BIN_EXE_floodgate"))
            .args(["check", "--config"])
            .arg(&path),
        Duration::from_secs(30),
    )
}

#[test]
fn notify_user_is_checked_and_explained() {
    let dir = tempfile::tempdir().unwrap();
    for (lines, want) in [
        (
            "notify_user = \"${authenticated_id}\"",
            "`notify_user` goes with action = \"restrict\"",
        ),
        (
            "action = \"restrict\"\nnotify_user = \"${nope}\"",
            "limit x: notify_user",
        ),
        (
            "action = \"restrict\"\nnotify_user = \" \"",
            "notify_user is empty",
        ),
        (
            "action = \"restrict\"\nnotify_user = 5",
            "f.toml:13:15: invalid type: integer `5`, expected a string",
        ),
    ] {
        let out = check_config(dir.path(), lines);
        assert!(!out.ok(), "{lines}: {out}");
        assert!(out.stderr.contains(want), "{lines}: want {want:?} in {out}");
    }
    let out = check_config(
        dir.path(),
        "action = \"restrict\"\nrestrict_for = \"2s\"\nnotify_user = \"${authenticated_id}@example.org\"",
    );
    assert!(out.ok(), "{out}");
    assert!(
        out.stdout
            .contains("for 2s (then released automatically, logged, counted and alerted once"),
        "{out}"
    );
    assert!(
        out.stdout.contains(
            "each restriction is told once by a short mail to \"${authenticated_id}@example.org\" (notify_user)"
        ),
        "{out}"
    );
}
