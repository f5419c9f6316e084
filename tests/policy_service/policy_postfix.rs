//! `smtpd_recipient_restrictions = check_policy_service unix:…` (and END-OF-MESSAGE; DATA
//! for a limit at that stage): a compromised SASL account
//! is limited recipient by recipient (`450 4.7.1`), restricted, and its later mail held in
//! Postfix's hold queue; another account's mail flows; floodgate down gets Postfix's
//! `default_action`.

use crate::common;
use crate::support::*;

use common::postfix::{token, Postfix, PostfixConfig};

/// Three recipients an hour per account; more are deferred one by one.
const PER_RECIPIENT: &str = r#"
[[limit]]
name = "per-user-rcpt"
when = "authenticated"
count = "recipients"
key = "${authenticated_id}"
rate = "3 / 1h"
burst = "3"
action = "defer"
"#;

/// Three recipients an hour per account, then restricted, and a restricted account's mail
/// held (the message that crosses the limit too).
const LIMITS: &str = r#"
[[limit]]
name = "per-user-rcpt"
when = "authenticated"
count = "recipients"
key = "${authenticated_id}"
rate = "3 / 1h"
burst = "3"
action = "restrict"
while_restricted = "hold"
"#;

#[test]
fn recipients_over_the_limit_get_450_and_only_accepted_ones_count() {
    let dir = socket_dir();
    let socket = socket_in(&dir);
    let pf = postfix(&socket, "DUNNO");
    let _log = pf.log_on_panic();
    let fg = start_service(&pf, &socket, PER_RECIPIENT);
    let tok = token("policy-rcpt");
    // A transaction abandoned after its recipients (RSET before DATA): nothing charged.
    let mut c = alice(&pf);
    assert_eq!(c.cmd("MAIL FROM:<alice@client.test>").code, 250);
    for i in 0..3 {
        assert_eq!(c.cmd(&format!("RCPT TO:<a{i}-{tok}@dest.test>")).code, 250);
    }
    assert_eq!(c.cmd("RSET").code, 250);
    let rcpts: Vec<String> = (0..5).map(|i| format!("r{i}-{tok}@dest.test")).collect();
    let codes = send(&mut c, "alice@client.test", &rcpts, &tok);
    assert_eq!(
        codes,
        [250, 250, 250, 250, 450, 450, 354, 250],
        "{}",
        fg.stderr()
    );
    let line = pf.wait_log("with floodgate's 450", |l| {
        l.contains("reject: RCPT") && l.contains("450 4.7.1")
    });
    assert!(line.contains("per 1h") || line.contains("4.7.1"), "{line}");
    pf.settle();
    assert_eq!(pf.messages_with(&tok).len(), 3);
    // The limit is used up by the three accepted recipients: the next one is deferred.
    let codes = send(&mut c, "alice@client.test", &rcpts[..1], &tok);
    assert_eq!(codes, [250, 450]);
}

#[test]
fn a_compromised_account_is_restricted_and_held_while_another_flows() {
    let dir = socket_dir();
    let socket = socket_in(&dir);
    let pf = postfix(&socket, "DUNNO");
    let _log = pf.log_on_panic();
    let fg = start_service(&pf, &socket, LIMITS);
    let tok = token("policy-hold");
    let rcpts: Vec<String> = (0..5).map(|i| format!("r{i}-{tok}@dest.test")).collect();

    // Five recipients: the fourth crosses the limit and restricts the account; its
    // message is accepted by Postfix into the hold queue (HOLD at END-OF-MESSAGE).
    let mut c = alice(&pf);
    let first = format!("{tok}-first");
    let codes = send(&mut c, "alice@client.test", &rcpts, &first);
    assert_eq!(
        codes,
        [250, 250, 250, 250, 250, 250, 354, 250],
        "{}",
        fg.stderr()
    );
    // A later message of the restricted account: held too.
    let later = format!("{tok}-later");
    let codes = send(&mut c, "alice@client.test", &rcpts[..1], &later);
    assert_eq!(codes, [250, 250, 354, 250], "{}", fg.stderr());
    assert_eq!(c.cmd("QUIT").code, 221);

    // The other account's mail flows.
    let mut b = login(&pf, SECOND.0, SECOND.1);
    let other: Vec<String> = (0..2).map(|i| format!("b{i}-{tok}@dest.test")).collect();
    let bob = format!("{tok}-bob");
    assert_eq!(
        send(&mut b, "bob@client.test", &other, &bob),
        [250, 250, 250, 354, 250]
    );
    assert_eq!(pf.wait_messages(&bob, 2).len(), 2);

    let held = wait_queue(&pf, "held alice's two messages", |q| {
        q.iter().filter(|m| m.queue_name == "hold").count() == 2
    });
    let held: Vec<&Queued> = held.iter().filter(|m| m.queue_name == "hold").collect();
    assert!(
        held.iter().all(|m| m.sender == "alice@client.test"),
        "{held:?}"
    );
    assert!(pf.messages_with(&first).is_empty());
    assert!(pf.messages_with(&later).is_empty());
    pf.wait_log("holding on floodgate's word", |l| {
        l.contains("hold: END-OF-MESSAGE") && l.contains("floodgate: held by limit per-user-rcpt")
    });
    assert!(
        fg.stderr().contains("message held in Postfix's hold queue"),
        "{}",
        fg.stderr()
    );

    // Both are in the ledger under alice, with their queue ids; each released once.
    let list = verb(&fg, &["held", "list", "--key", "alice", "--json"]);
    assert!(list.ok(), "{list}");
    let v: serde_json::Value = serde_json::from_str(&list.stdout).unwrap();
    let rows = v["held"].as_array().unwrap();
    assert_eq!(rows.len(), 2, "{v}");
    for m in &held {
        let out = verb(
            &fg,
            &["held", "release", &m.id, "--reason", "checked", "--confirm"],
        );
        assert!(out.ok(), "{out}");
        let again = verb(
            &fg,
            &["held", "release", &m.id, "--reason", "twice", "--confirm"],
        );
        assert!(!again.ok(), "{again}");
    }
    // `postsuper -H` moves a released message to the deferred queue; a flush delivers it
    // now instead of at the next queue run.
    let flush = std::process::Command::new("/usr/sbin/postqueue")
        .arg("-c")
        .arg(pf.dir().join("conf"))
        .arg("-f")
        .status()
        .expect("postqueue -f");
    assert!(flush.success());
    pf.wait_messages(&tok, 8);
    pf.settle();
    assert_eq!(pf.messages_with(&first).len(), 5);
    assert_eq!(pf.messages_with(&later).len(), 1);
    assert_eq!(pf.messages_with(&tok).len(), 8);
}

/// Two messages an hour per account, checked at DATA.
const PER_MESSAGE_AT_DATA: &str = r#"
[[limit]]
name = "per-user-data"
when = "authenticated"
stage = "data"
count = "messages"
key = "${authenticated_id}"
rate = "2 / 1h"
burst = "2"
action = "defer"
"#;

/// A limit at the `data` stage: with `check_policy_service` in `smtpd_data_restrictions`
/// the third message is refused at DATA, before its content; without that list (the
/// book's two lists) floodgate asks the limit at END-OF-MESSAGE, and the third message is
/// refused there. Either way two messages are delivered, and `floodgate check` names the
/// list the limit wants.
#[test]
fn a_data_limit_refuses_at_data_or_without_that_list_at_the_end() {
    for at_data in [true, false] {
        let dir = socket_dir();
        let socket = socket_in(&dir);
        let mut cfg = PostfixConfig::default()
            .sasl()
            .policy_service(&format!("unix:{}", socket.display()), "DUNNO");
        if at_data {
            cfg = cfg.policy_at_data();
        }
        let pf = Postfix::start(&cfg);
        let _log = pf.log_on_panic();
        let fg = start_service(&pf, &socket, PER_MESSAGE_AT_DATA);
        let tok = token(if at_data { "policy-data" } else { "policy-eod" });
        let rcpt = vec![format!("d-{tok}@dest.test")];
        let mut c = alice(&pf);
        for _ in 0..2 {
            assert_eq!(
                send(&mut c, "alice@client.test", &rcpt, &tok),
                [250, 250, 354, 250]
            );
        }
        let third = send(&mut c, "alice@client.test", &rcpt, &tok);
        let refused_at = if at_data {
            vec![250, 250, 450]
        } else {
            vec![250, 250, 354, 450]
        };
        assert_eq!(third, refused_at, "at_data {at_data}: {}", fg.stderr());
        // The refused transaction's queue file goes with it.
        assert_eq!(c.cmd("RSET").code, 250);
        pf.settle();
        assert_eq!(pf.messages_with(&tok).len(), 2, "at_data {at_data}");
        let check = crate::common::run_with_timeout(
            std::process::Command::new(env!("CARGO_BIN_EXE_floodgate"))
                .args(["check", "--config"])
                .arg(fg.config_path()),
            std::time::Duration::from_secs(30),
        );
        assert!(
            check.stdout.contains(
                "smtpd_data_restrictions for the limits at stage = \"data\" (per-user-data)"
            ),
            "{check}"
        );
    }
}

/// Floodgate down: Postfix's `default_action = DUNNO` lets mail through as if floodgate
/// were not asked (logged by Postfix), nothing refused or lost; once floodgate runs, its
/// limits apply again.
#[test]
fn floodgate_down_gets_the_default_action_and_nothing_is_lost() {
    let dir = socket_dir();
    let socket = socket_in(&dir);
    let pf = postfix(&socket, "DUNNO");
    let _log = pf.log_on_panic();
    let tok = token("policy-down");
    let mut c = alice(&pf);
    let rcpts: Vec<String> = (0..5).map(|i| format!("d{i}-{tok}@dest.test")).collect();
    assert_eq!(
        send(&mut c, "alice@client.test", &rcpts, &tok),
        [250, 250, 250, 250, 250, 250, 354, 250]
    );
    pf.wait_log("that the policy service is down", |l| {
        l.contains("problem talking to server") || l.contains("connect to")
    });
    assert_eq!(pf.wait_messages(&tok, 5).len(), 5);
    drop(c);

    let fg = start_service(&pf, &socket, PER_RECIPIENT);
    let tok2 = token("policy-up");
    let rcpts: Vec<String> = (0..4).map(|i| format!("u{i}-{tok2}@dest.test")).collect();
    let mut c = alice(&pf);
    let codes = send(&mut c, "alice@client.test", &rcpts, &tok2);
    assert_eq!(
        codes,
        [250, 250, 250, 250, 450, 354, 250],
        "{}",
        fg.stderr()
    );
    assert_eq!(pf.wait_messages(&tok2, 3).len(), 3);
}

/// A hold the ledger cannot take (here: `[postfix] max_held = 1`, one held already) is not
/// made: the message is deferred at END-OF-MESSAGE (`450 4.3.0`), so no message sits in
/// Postfix's hold queue that the held verbs cannot find, and nothing of it is delivered.
#[test]
fn a_hold_the_ledger_cannot_take_is_deferred_not_lost() {
    let dir = socket_dir();
    let socket = socket_in(&dir);
    let pf = postfix(&socket, "DUNNO");
    let _log = pf.log_on_panic();
    // The line before the limits still belongs to the [postfix] table start_service writes.
    let fg = start_service(&pf, &socket, &format!("max_held = 1\n{LIMITS}"));
    let tok = token("policy-full");
    let rcpts: Vec<String> = (0..5).map(|i| format!("r{i}-{tok}@dest.test")).collect();
    let mut c = alice(&pf);
    let first = format!("{tok}-first");
    assert_eq!(
        send(&mut c, "alice@client.test", &rcpts, &first),
        [250, 250, 250, 250, 250, 250, 354, 250],
        "{}",
        fg.stderr()
    );
    let later = format!("{tok}-later");
    let codes = send(&mut c, "alice@client.test", &rcpts[..1], &later);
    assert_eq!(codes, [250, 250, 354, 450], "{}", fg.stderr());
    assert_eq!(c.cmd("QUIT").code, 221);
    pf.wait_log("the deferral", |l| {
        l.contains("END-OF-MESSAGE") && l.contains("4.3.0") && l.contains("cannot be held now")
    });
    assert!(
        fg.stderr()
            .contains("held message deferred: not recorded in the ledger"),
        "{}",
        fg.stderr()
    );
    let q = wait_queue(&pf, "the first message held", |q| {
        q.iter().filter(|m| m.queue_name == "hold").count() == 1
    });
    assert_eq!(
        q.iter().filter(|m| m.queue_name == "hold").count(),
        1,
        "{q:?}"
    );
    let list = verb(&fg, &["held", "list", "--key", "alice", "--json"]);
    assert!(list.ok(), "{list}");
    let v: serde_json::Value = serde_json::from_str(&list.stdout).unwrap();
    assert_eq!(v["held"].as_array().unwrap().len(), 1, "{v}");
    // The deferred message never entered Postfix's queue; the held one waits in it.
    assert!(q.iter().all(|m| m.queue_name == "hold"), "{q:?}");
    assert!(pf.messages_with(&later).is_empty());
    assert!(pf.messages_with(&first).is_empty());
}
