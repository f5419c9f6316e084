//! Held mail in Postfix's own hold queue (`[postfix]`, the policy service's and the milter's
//! hold), with a real Postfix 3.7 (tests/common/postfix.rs): messages put on hold by
//! Postfix's access table (`HOLD`) and recorded in floodgate's ledger are listed, shown,
//! released once and deleted through `floodgate held …`; one released behind floodgate's
//! back drops out; each action is audited; a missing or failing `postqueue` is a clear
//! error.

use crate::common;

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use common::postfix::{token, PfListener, Postfix, PostfixConfig};
use common::*;
use floodgate::hold::postfix::{Ledger, LedgerEntry};
use serde_json::Value;
use tempfile::TempDir;

/// A Postfix that holds every message for `hold.test` (its access table says `HOLD`).
fn holding_postfix() -> Postfix {
    Postfix::start(
        &PostfixConfig::default().main_cf(
            "smtpd_recipient_restrictions = check_recipient_access inline:{hold.test=HOLD}",
        ),
    )
}

/// Sends one message to Postfix itself (not through floodgate) for `rcpt`.
fn send(pf: &Postfix, rcpt: &str, subject: &str) {
    let mut c = RawClient::connect_greeted(pf.addr(PfListener::Plain));
    assert_eq!(c.ehlo("client.example").code, 250);
    assert_eq!(c.cmd("MAIL FROM:<alice@client.test>").code, 250);
    assert_eq!(c.cmd(&format!("RCPT TO:<{rcpt}>")).code, 250);
    assert_eq!(c.cmd("DATA").code, 354);
    c.send(
        format!(
            "From: <alice@client.test>\r\nTo: <{rcpt}>\r\nSubject: {subject}\r\n\r\nhello\r\n.\r\n"
        )
        .as_bytes(),
    );
    assert_eq!(c.reply().code, 250);
    assert_eq!(c.cmd("QUIT").code, 221);
}

/// `postqueue -j` of `pf`: each message's queue id, queue and first recipient.
fn queue(pf: &Postfix) -> Vec<(String, String, String)> {
    let out = run_with_timeout(
        Command::new("/usr/sbin/postqueue")
            .arg("-c")
            .arg(pf.dir().join("conf"))
            .arg("-j"),
        Duration::from_secs(30),
    );
    assert!(out.ok(), "{out}");
    out.stdout
        .lines()
        .map(|l| {
            let v: Value = serde_json::from_str(l).unwrap();
            (
                v["queue_id"].as_str().unwrap().to_string(),
                v["queue_name"].as_str().unwrap().to_string(),
                v["recipients"][0]["address"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

/// Waits (at most 30 s) until the hold queue has `n` messages; their queue ids by recipient.
fn wait_held(pf: &Postfix, n: usize) -> Vec<(String, String)> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let held: Vec<(String, String)> = queue(pf)
            .into_iter()
            .filter(|(_, q, _)| q == "hold")
            .map(|(id, _, r)| (r, id))
            .collect();
        if held.len() >= n {
            return held;
        }
        assert!(
            Instant::now() < deadline,
            "{} held, not {n}\n{}",
            held.len(),
            pf.logs()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn entry(queue_id: &str, key: &str, rcpt: &str) -> LedgerEntry {
    LedgerEntry {
        queue_id: queue_id.into(),
        key: key.into(),
        limit: "per-user".into(),
        reason: "4.7.1 too fast".into(),
        time: 1_764_000_000,
        sender: "alice@client.test".into(),
        recipients: vec![rcpt.into()],
        size: 0,
        client: Some("127.0.0.1".parse().unwrap()),
        user: Some(key.into()),
    }
}

fn verb(socket: &Path, args: &[&str]) -> Output {
    run_with_timeout(
        Command::new(env!("CARGO_BIN_EXE_floodgate"))
            .args(args)
            .arg("--socket")
            .arg(socket),
        Duration::from_secs(60),
    )
}

fn audit_lines(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[test]
fn held_verbs_work_on_postfix_s_hold_queue_and_release_each_message_once() {
    let pf = holding_postfix();
    let _log = pf.log_on_panic();
    let tok = token("pfq");
    let rcpt = |n: usize| format!("r{n}-{tok}@hold.test");
    for n in 0..3 {
        send(&pf, &rcpt(n), &format!("{tok} {n}"));
    }
    let held = wait_held(&pf, 3);
    let id = |n: usize| held.iter().find(|(r, _)| *r == rcpt(n)).unwrap().1.clone();
    let state = TempDir::new().unwrap();
    let ledger_path = state.path().join("postfix-held");
    {
        let l = Ledger::open(&ledger_path, 100).unwrap();
        l.record(entry(&id(0), "alice", &rcpt(0))).unwrap();
        l.record(entry(&id(1), "alice", &rcpt(1))).unwrap();
        l.record(entry(&id(2), "bob", &rcpt(2))).unwrap();
    }
    let audit = state.path().join("audit.jsonl");
    let fg = Floodgate::start(&pf.floodgate_config(PfListener::Plain).extra(&format!(
        "[postfix]\nconfig_directory = \"{}\"\nledger = \"{}\"\n\n[admin]\nsocket = \"admin.sock\"\naudit = \"{}\"\n",
        pf.dir().join("conf").display(),
        ledger_path.display(),
        audit.display()
    )));
    let sock = fg.admin_socket();

    let list = verb(&sock, &["held", "list", "--json"]);
    assert!(list.ok(), "{list}");
    let v: Value = serde_json::from_str(&list.stdout).unwrap();
    let rows = v["held"].as_array().unwrap();
    assert_eq!(rows.len(), 3, "{v}");
    assert!(rows.iter().all(|r| r["where"] == "postfix"), "{v}");
    let of_bob = verb(&sock, &["held", "list", "--key", "bob", "--json"]);
    let v: Value = serde_json::from_str(&of_bob.stdout).unwrap();
    assert_eq!(v["held"][0]["id"], id(2).as_str(), "{v}");
    assert_eq!(v["held"].as_array().unwrap().len(), 1, "{v}");
    assert!(
        v["held"][0]["size"].as_u64().unwrap() > 0,
        "Postfix's size: {v}"
    );

    let show = verb(&sock, &["held", "show", &id(0)]);
    assert!(show.ok(), "{show}");
    assert!(show.stdout.contains(&format!("Subject: {tok} 0")), "{show}");
    assert!(show.stdout.contains("per-user"), "{show}");

    // Released: delivered once; a second release is refused, saying when and by whom.
    let out = verb(
        &sock,
        &["held", "release", &id(0), "--reason", "checked by hand"],
    );
    assert!(out.ok(), "{out}");
    assert!(
        out.stdout.contains(&format!("{}: released", id(0))),
        "{out}"
    );
    pf.wait_messages(&format!("{tok} 0"), 1);
    let again = verb(&sock, &["held", "release", &id(0), "--reason", "twice"]);
    assert!(!again.ok(), "{again}");
    assert!(
        again
            .stderr
            .contains(&format!("queue id {} was released already", id(0))),
        "{again}"
    );

    // Deleted: gone from the queue, never delivered.
    let out = verb(&sock, &["held", "delete", &id(1), "--reason", "spam"]);
    assert!(out.ok(), "{out}");
    assert!(!queue(&pf).iter().any(|(q, _, _)| *q == id(1)));

    // Released behind floodgate's back: it drops out of the list, and a release says so.
    let by_hand = run_with_timeout(
        Command::new("/usr/sbin/postsuper")
            .arg("-c")
            .arg(pf.dir().join("conf"))
            .args(["-H", &id(2)]),
        Duration::from_secs(30),
    );
    assert!(by_hand.ok(), "{by_hand}");
    let flush = run_with_timeout(
        Command::new("/usr/sbin/postqueue")
            .arg("-c")
            .arg(pf.dir().join("conf"))
            .args(["-i", &id(2)]),
        Duration::from_secs(30),
    );
    assert!(flush.ok(), "{flush}");
    let list = verb(&sock, &["held", "list", "--json"]);
    assert!(list.stdout.contains("\"held\":[]"), "{list}");
    let late = verb(&sock, &["held", "release", &id(2), "--reason", "late"]);
    assert!(
        !late.ok()
            && late
                .stderr
                .contains("released or deleted with Postfix's own commands"),
        "{late}"
    );

    pf.settle();
    assert_eq!(
        pf.messages_with(&format!("{tok} 0")).len(),
        1,
        "released once"
    );
    assert_eq!(pf.messages_with(&format!("{tok} 1")).len(), 0, "deleted");
    assert_eq!(
        pf.messages_with(&format!("{tok} 2")).len(),
        1,
        "released by hand"
    );

    let lines = audit_lines(&audit);
    let of = |action: &str, target: &str| -> Vec<&Value> {
        lines
            .iter()
            .filter(|l| l["action"] == action && l["target"] == target)
            .collect()
    };
    let rel = of("held_release", &id(0));
    assert_eq!(rel.len(), 2, "{lines:?}");
    assert_eq!(rel[0]["result"], "ok");
    assert_eq!(rel[0]["reason"], "checked by hand");
    assert_ne!(
        rel[1]["result"], "ok",
        "the second release is on record, refused"
    );
    let del = of("held_delete", &id(1));
    assert_eq!(
        (del.len(), &del[0]["result"]),
        (1, &Value::from("ok")),
        "{lines:?}"
    );
}

#[test]
fn a_missing_or_failing_postqueue_is_a_clear_error() {
    let state = TempDir::new().unwrap();
    let ledger_path = state.path().join("postfix-held");
    Ledger::open(&ledger_path, 10)
        .unwrap()
        .record(entry("ABCDEF1234", "alice", "bob@example.net"))
        .unwrap();
    for (postqueue, says) in [
        (
            "/nonexistent/postqueue",
            "/nonexistent/postqueue -c /etc/postfix -j: cannot run it",
        ),
        (
            "/bin/false",
            "/bin/false -c /etc/postfix -j: exit status: 1",
        ),
    ] {
        let fg = Floodgate::start(&FloodgateConfig::new("127.0.0.1:9".parse().unwrap()).extra(
            &format!(
                "[postfix]\npostqueue = \"{postqueue}\"\nledger = \"{}\"\n",
                ledger_path.display()
            ),
        ));
        let out = verb(&fg.admin_socket(), &["held", "list"]);
        assert!(!out.ok(), "{out}");
        assert!(out.stderr.contains(says), "{out}");
    }
}
