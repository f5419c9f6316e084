//! Restriction of a compromised account through the real binary: a limit with
//! `action = "restrict"` restricts the user; new sessions get the restricted answer (on a
//! second floodgate sharing Redis too); `restricted` lists the user with evidence; `release`
//! lets the next message through; restrictions survive a restart of the memory store and
//! end by themselves with a duration; one alert per restriction and release; bad input.

use crate::common;
use crate::common::redis as redis_server;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use common::restrict::*;
use common::*;
use serde_json::Value;

#[test]
fn sixth_message_restricts_until_released_and_release_lets_mail_through() {
    let rec = Recorder::start(users());
    let dir = tempfile::tempdir().unwrap();
    let alert_file = dir.path().join("alerts.jsonl");
    let fg = start(
        &rec,
        &format!("{}{}", limit("until_released"), alerts(&alert_file)),
    );
    let sock = fg.admin_socket();

    let first = send(fg.addr("plain"), USER, PASSWORD, 7);
    assert_eq!(
        codes(&first),
        [250, 250, 250, 250, 250, 450, 450],
        "{first:?}"
    );
    assert_eq!(rec.messages().len(), 5);
    let text = &first[5].1;
    assert!(text.contains("4.7.1 alice restricted since "), "{text}");
    assert!(
        text.contains(" until released by per-user; call the help desk")
            && !text.contains("until until"),
        "{text}"
    );

    // A new session of the user gets the restricted answer; another user does not.
    let again = send(fg.addr("plain"), USER, PASSWORD, 1);
    assert_eq!(codes(&again), [450], "{again:?}");
    assert_eq!(codes(&send(fg.addr("plain"), "bob", "b0bpass", 1)), [250]);
    assert_eq!(rec.messages().len(), 6);

    // restricted lists the user, with the limit, the rate and the evidence.
    let v = admin_json(&sock, &["restricted"]);
    let list = v["restricted"].as_array().unwrap();
    assert_eq!(list.len(), 1, "{v}");
    let r = &list[0];
    assert_eq!(r["key"], USER);
    assert_eq!(r["limit"], "per-user");
    assert!(r["until"].is_null(), "{r}");
    assert!(r["rate"].as_f64().unwrap() >= 5.0, "{r}");
    assert!(r["by"].as_str().unwrap().contains("per-user"), "{r}");
    check_evidence(&r["evidence"]);
    let table = admin_verb(&sock, &["restricted"]);
    assert!(
        table.ok() && table.stdout.contains("alice") && table.stdout.contains("until released"),
        "{table}"
    );

    // One alert for the restriction, with the evidence.
    let n = wait_notices(&alert_file, "floodgate.restricted", 1);
    assert_eq!(n.len(), 1, "{n:?}");
    assert_eq!(n[0]["key"], USER);
    assert_eq!(n[0]["limit"], "per-user");
    check_evidence(&n[0]["evidence"]);

    // Bad input: release without a restriction, restrict with a bad duration.
    let out = admin_verb(&sock, &["release", "nobody", "--reason", "test"]);
    assert!(
        !out.ok() && out.stderr.contains("\"nobody\" is not restricted"),
        "{out}"
    );
    let out = admin_verb(
        &sock,
        &["restrict", "bob", "--for", "forever", "--reason", "x"],
    );
    assert!(!out.ok() && out.stderr.contains("until_released"), "{out}");
    let out = admin_verb(&sock, &["release", USER]);
    assert!(!out.ok() && out.stderr.contains("--reason"), "{out}");

    // release: the next message goes through (the limit's state was reset too).
    let out = admin_verb(&sock, &["release", USER, "--reason", "password changed"]);
    assert!(out.ok() && out.stdout.contains("released"), "{out}");
    assert_eq!(codes(&send(fg.addr("plain"), USER, PASSWORD, 1)), [250]);
    assert_eq!(rec.messages().len(), 7);
    let n = wait_notices(&alert_file, "floodgate.released", 1);
    assert_eq!(n.len(), 1, "{n:?}");
    assert_eq!(n[0]["reason"], "password changed");
    assert_eq!(n[0]["by"], socket_actor().as_str());
    check_evidence(&n[0]["evidence"]);
    assert!(admin_json(&sock, &["restricted"])["restricted"]
        .as_array()
        .unwrap()
        .is_empty());

    // restrict by hand, then the metrics count both kinds of event.
    let v = admin_json(
        &sock,
        &["restrict", "bob", "--for", "1h", "--reason", "phished"],
    );
    assert_eq!(v["restricted"]["by"], socket_actor().as_str());
    assert!(v["restricted"]["until"].is_string());
    assert_eq!(codes(&send(fg.addr("plain"), "bob", "b0bpass", 1)), [450]);
    wait_notices(&alert_file, "floodgate.restricted", 2);
    assert_eq!(notices(&alert_file, "floodgate.restricted").len(), 2);
    assert_eq!(notices(&alert_file, "floodgate.released").len(), 1);
}

fn memory_config(state: &Path, restrict_for: &str) -> String {
    format!(
        "[store]\nbackend = \"memory\"\npath = \"{}\"\n{}",
        state.display(),
        limit(restrict_for)
    )
}

#[test]
fn restriction_survives_a_restart_of_the_memory_store() {
    let rec = Recorder::start(users());
    let dir = tempfile::tempdir().unwrap();
    let state: PathBuf = dir.path().join("state");
    let mut fg = start(&rec, &memory_config(&state, "until_released"));
    assert_eq!(
        codes(&send(fg.addr("plain"), USER, PASSWORD, 6)),
        [250, 250, 250, 250, 250, 450]
    );
    fg.terminate();
    // `check` reads the snapshot and says what stays restricted.
    let out = run_with_timeout(
        Command::new(env!("CARGO_BIN_EXE_floodgate"))
            .args(["check", "--config"])
            .arg(fg.config_path()),
        Duration::from_secs(30),
    );
    assert!(out.ok(), "{out}");
    assert!(
        out.stdout.contains("restricted: alice by per-user"),
        "{out}"
    );
    assert!(
        out.stdout.contains("restrict_for")
            || out
                .stdout
                .contains("is restricted until `floodgate release KEY`"),
        "{out}"
    );
    let fg2 = start(&rec, &memory_config(&state, "until_released"));
    assert_eq!(codes(&send(fg2.addr("plain"), USER, PASSWORD, 1)), [450]);
    assert_eq!(codes(&send(fg2.addr("plain"), "bob", "b0bpass", 1)), [250]);
}

#[test]
fn a_timed_restriction_ends_by_itself() {
    let rec = Recorder::start(users());
    let fg = start(&rec, &limit("2s"));
    let sock = fg.admin_socket();
    let first = send(fg.addr("plain"), USER, PASSWORD, 6);
    assert_eq!(codes(&first), [250, 250, 250, 250, 250, 450]);
    assert!(!first[5].1.contains("until released"), "{first:?}");
    let v = admin_json(&sock, &["restricted"]);
    assert!(v["restricted"][0]["until"].is_string(), "{v}");
    // Released without a verb: listed no more, and MAIL FROM is no longer the restricted
    // answer (the rate limit itself still counts: the reset is the release verb's job).
    wait_until(Duration::from_secs(20), "the restriction to end", || {
        admin_json(&sock, &["restricted"])["restricted"]
            .as_array()
            .unwrap()
            .is_empty()
            .then_some(())
    });
    let mut c = RawClient::connect_greeted(fg.addr("plain"));
    assert_eq!(c.ehlo("client.test").code, 250);
    let token = b64_encode(format!("\0{USER}\0{PASSWORD}").as_bytes());
    assert_eq!(c.cmd(&format!("AUTH PLAIN {token}")).code, 235);
    let r = c.cmd("MAIL FROM:<s@example.org>");
    assert!(!r.text().contains("restricted since"), "{}", r.text());
}

#[test]
fn a_restriction_on_one_node_refuses_on_another_sharing_redis() {
    let redis = redis_server::RedisServer::start();
    let rec = Recorder::start(users());
    let store = format!(
        "[store]\nbackend = \"redis\"\nurl = \"{}\"\ntimeout = \"2s\"\n{}",
        redis.url(),
        limit("until_released")
    );
    let a = start(&rec, &store);
    let b = start(&rec, &store);
    // b first sees alice as anyone else.
    assert_eq!(codes(&send(b.addr("plain"), USER, PASSWORD, 1)), [250]);
    // a restricts her (the limit is shared too: 1 message already counted on b).
    let sent = send(a.addr("plain"), USER, PASSWORD, 5);
    assert_eq!(codes(&sent), [250, 250, 250, 250, 450], "{sent:?}");
    // b refuses her next transaction, in the same session state as any new one.
    let on_b = send(b.addr("plain"), USER, PASSWORD, 1);
    assert_eq!(codes(&on_b), [450], "{on_b:?}");
    assert!(on_b[0].1.contains("restricted since"), "{on_b:?}");
    // Listed from either node; released from b, a lets the next message through.
    let v = admin_json(&b.admin_socket(), &["restricted"]);
    assert_eq!(v["restricted"][0]["key"], USER, "{v}");
    let out = admin_verb(
        &b.admin_socket(),
        &["release", USER, "--reason", "reset by b"],
    );
    assert!(out.ok(), "{out}");
    assert_eq!(codes(&send(a.addr("plain"), USER, PASSWORD, 1)), [250]);

    // A node whose config restricts nothing still enforces a restriction by hand made on
    // another node (it looks again at least every second while the set is empty).
    let plain = format!(
        "[store]\nbackend = \"redis\"\nurl = \"{}\"\ntimeout = \"2s\"\n",
        redis.url()
    );
    let c = start(&rec, &plain);
    assert_eq!(codes(&send(c.addr("plain"), "bob", "b0bpass", 1)), [250]);
    let out = admin_verb(
        &a.admin_socket(),
        &[
            "restrict",
            "bob",
            "--for",
            "until_released",
            "--reason",
            "phished",
        ],
    );
    assert!(out.ok(), "{out}");
    wait_until(Duration::from_secs(20), "c to refuse bob", || {
        (codes(&send(c.addr("plain"), "bob", "b0bpass", 1)) == [450]).then_some(())
    });
}

/// `while_restricted = "hold"`: the message that trips the limit and every later message
/// of the restricted user are taken (250) and held, never relayed; `restricted` and
/// `held list` name the user and the limit.
#[test]
fn while_restricted_hold_takes_and_holds_the_users_mail() {
    let rec = Recorder::start(users());
    let dir = tempfile::tempdir().unwrap();
    let spool = dir.path().join("hold");
    std::fs::create_dir(&spool).unwrap();
    let fg = start(
        &rec,
        &format!(
            "{}while_restricted = \"hold\"\n\n[hold]\ndir = \"{}\"\n",
            limit("until_released"),
            spool.display()
        ),
    );
    let sock = fg.admin_socket();
    // send() asserts 250 for each message it gets to send; the MAIL FROM codes come back.
    let first = send(fg.addr("plain"), USER, PASSWORD, 7);
    assert_eq!(codes(&first), [250; 7], "{first:?}");
    let again = send(fg.addr("plain"), USER, PASSWORD, 1);
    assert_eq!(codes(&again), [250], "{again:?}");
    // Upstream got the five under the limit; the sixth (which tripped it) and the rest
    // are held for alice under the restricting limit.
    assert_eq!(rec.messages().len(), 5);
    let out = admin_verb(&sock, &["held", "list", "--json"]);
    assert!(out.ok(), "{out}");
    let v: Value = serde_json::from_str(&out.stdout).unwrap();
    let held = v["held"].as_array().unwrap();
    assert_eq!(held.len(), 3, "{v}");
    assert!(
        held.iter()
            .all(|m| m["key"] == USER && m["limit"] == "per-user"),
        "{v}"
    );
    let r = admin_json(&sock, &["restricted"]);
    assert_eq!(r["restricted"][0]["key"], USER, "{r}");
    // Another user is neither restricted nor held.
    assert_eq!(codes(&send(fg.addr("plain"), "bob", "b0bpass", 1)), [250]);
    assert_eq!(rec.messages().len(), 6);
}

#[test]
fn bad_restrict_settings_are_clear_config_errors() {
    let cases = [
        (
            "restrict_for = \"forever\"",
            "restrict_for \"forever\": use a duration",
        ),
        ("restrict_for = \"0s\"", "must last longer than zero"),
        ("while_restricted = \"hold\"", "needs [hold]"),
        ("while_restricted = \"drop\"", "while_restricted \"drop\""),
        ("restricted_code = 250", "restricted_code 250"),
        ("restricted_code = 421", "restricted_code 421"),
        ("restricted_message = \"${nope}\"", "restricted_message"),
        ("restrict_key = \"${nope}\"", "restrict_key"),
    ];
    let dir = tempfile::tempdir().unwrap();
    for (line, want) in cases {
        let cfg = format!(
            "[[listener]]\naddress = \"127.0.0.1:0\"\ntls = \"none\"\n[upstream]\naddress = \"127.0.0.1:25\"\n[[limit]]\nname = \"x\"\nrate = \"5 / 1h\"\nburst = \"5\"\ncount = \"messages\"\naction = \"restrict\"\n{line}\n"
        );
        let path = dir.path().join("f.toml");
        std::fs::write(&path, cfg).unwrap();
        let out = run_with_timeout(
            Command::new(env!("CARGO_BIN_EXE_floodgate"))
                .args(["check", "--config"])
                .arg(&path),
            Duration::from_secs(30),
        );
        assert!(!out.ok(), "{line}: {out}");
        assert!(out.stderr.contains(want), "{line}: want {want:?} in {out}");
    }
    // A restrict setting on a limit that does not restrict.
    let path = dir.path().join("g.toml");
    std::fs::write(
        &path,
        "[[listener]]\naddress = \"127.0.0.1:0\"\ntls = \"none\"\n[upstream]\naddress = \"127.0.0.1:25\"\n[[limit]]\nname = \"x\"\nrate = \"5 / 1h\"\nburst = \"5\"\ncount = \"messages\"\nrestrict_for = \"1h\"\n",
    )
    .unwrap();
    let out = run_with_timeout(
        Command::new(env!("CARGO_BIN_EXE_floodgate"))
            .args(["check", "--config"])
            .arg(&path),
        Duration::from_secs(30),
    );
    assert!(
        !out.ok()
            && out
                .stderr
                .contains("`restrict_for` goes with action = \"restrict\""),
        "{out}"
    );
}

#[test]
fn redis_down_while_checking_follows_the_failure_mode_and_is_logged() {
    let mut redis = redis_server::RedisServer::start();
    let rec = Recorder::start(users());
    let start_mode = |mode: &str| {
        start(
            &rec,
            &format!(
                "[store]\nbackend = \"redis\"\nurl = \"{}\"\ntimeout = \"300ms\"\n\
                 connect_timeout = \"300ms\"\nfailure_mode = \"{mode}\"\n{}",
                redis.url(),
                limit("until_released")
            ),
        )
    };
    let closed = start_mode("closed");
    let open = start_mode("open");
    assert_eq!(codes(&send(closed.addr("plain"), USER, PASSWORD, 1)), [250]);
    assert_eq!(codes(&send(open.addr("plain"), USER, PASSWORD, 1)), [250]);
    redis.kill();
    // closed: the restricted set cannot be read, MAIL FROM gets 451 4.3.0.
    let r = send(closed.addr("plain"), USER, PASSWORD, 1);
    assert_eq!(codes(&r), [451], "{r:?}");
    assert!(r[0].1.contains("4.3.0"), "{r:?}");
    closed.wait_stderr("restricted set not readable", Duration::from_secs(10));
    // open: the message goes on (the limits fail open too).
    assert_eq!(codes(&send(open.addr("plain"), USER, PASSWORD, 1)), [250]);
    open.wait_stderr("restricted set not readable", Duration::from_secs(10));
}
