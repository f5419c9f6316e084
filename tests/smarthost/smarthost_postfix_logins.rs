//! One account, one key, in front of a real Postfix 3.7 with Dovecot SASL (whose default
//! `auth_username_format = %Lu` takes `ALICE`, `Alice` and `alice` as one user): floodgate
//! folds the login the same way (`[identity] login_fold = "lowercase"`, the default), so a
//! limit per `${authenticated_id}` counts every spelling together, the restriction is of
//! `alice` and holds whichever spelling comes next, and the admin verbs find `alice`
//! however it is typed. With `login_fold = "exact"` the spellings stay apart.

use crate::common;

use std::sync::OnceLock;

use common::postfix::{b64, send_small_message, token, PfListener, Postfix, PostfixConfig};
use common::*;
use serde_json::Value;
use tempfile::TempDir;

fn postfix() -> &'static Postfix {
    static PF: OnceLock<Postfix> = OnceLock::new();
    Postfix::shared(&PF, || PostfixConfig::default().sasl())
}

/// Logs in as `login` (Dovecot's password check), sends one message carrying `tok`, and
/// answers the codes of MAIL, RCPT, DATA and the end of data.
fn send_as(fg: &Floodgate, login: &str, tok: &str) -> Vec<u16> {
    let mut c = RawClient::connect_greeted(fg.addr("plain"));
    c.ehlo("client.example");
    let r = c.cmd(&format!(
        "AUTH PLAIN {}",
        b64(&format!("\0{login}\0{PASSWORD}"))
    ));
    assert_eq!(r.code, 235, "{login}: {r:?}");
    let codes = send_small_message(&mut c, tok);
    assert_eq!(c.cmd("QUIT").code, 221);
    codes
}

#[test]
fn every_spelling_of_a_login_is_counted_restricted_and_released_as_one_account() {
    let pf = postfix();
    let _log = pf.log_on_panic();
    let dir = TempDir::new().unwrap();
    let events = dir.path().join("events.jsonl");
    let cfg = pf.floodgate_config(PfListener::Plain).extra(&format!(
        r#"
[report]
events = "{}"

[[limit]]
name = "per-user"
when = "authenticated"
count = "messages"
key = "${{authenticated_id}}"
rate = "4 / 1h"
burst = "4"
action = "restrict"
restrict_for = "until_released"
"#,
        events.display()
    ));
    let fg = Floodgate::start(&cfg);
    let tok = token("logins");
    // Four messages, four spellings: one account's four.
    for (i, login) in ["alice", "ALICE", "Alice", "aLiCe"].iter().enumerate() {
        let codes = send_as(&fg, login, &format!("{tok}-{i}"));
        assert_eq!(codes, [250, 250, 354, 250], "{login}");
    }
    // The fifth, in yet another spelling, is over the account's limit: restricted.
    assert_eq!(send_as(&fg, "ALIce", &format!("{tok}-4"))[0], 450);
    // Restricted is the account, whichever spelling comes next.
    for login in ["Alice", "alice"] {
        assert_eq!(send_as(&fg, login, &format!("{tok}-x"))[0], 450, "{login}");
    }
    let sock = fg.admin_socket();
    let restricted = admin_json(&sock, &["restricted"]);
    let keys: Vec<&str> = restricted["restricted"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["key"].as_str().unwrap())
        .collect();
    assert_eq!(keys, ["alice"], "{restricted}");
    // The evidence keeps the spellings typed.
    let logins = &restricted["restricted"][0]["evidence"]["logins"];
    for typed in ["ALICE", "Alice", "aLiCe"] {
        assert!(
            logins.as_array().unwrap().iter().any(|l| l == typed),
            "{typed} not in {logins}"
        );
    }
    // The key page of the account however it is typed: inspect ALICE reads alice.
    let inspect = admin_json(&sock, &["inspect", "ALICE"]);
    assert_eq!(inspect["key"], "alice", "{inspect}");
    assert_eq!(inspect["restriction"]["key"], "alice", "{inspect}");
    // `release ALICE` ends alice's restriction (and resets its count).
    let out = admin_verb(&sock, &["release", "ALICE", "--reason", "password changed"]);
    assert!(out.ok(), "{out}");
    let restricted = admin_json(&sock, &["restricted"]);
    assert!(
        restricted["restricted"].as_array().unwrap().is_empty(),
        "{restricted}"
    );
    assert_eq!(
        send_as(&fg, "ALICE", &format!("{tok}-5")),
        [250, 250, 354, 250]
    );
    pf.settle();
    assert_eq!(pf.messages_with(&tok).len(), 5);
    assert!(pf.messages_with(&format!("{tok}-x")).is_empty());
    // The event log: the account as user, the spelling as auth_login where it differs.
    let text = std::fs::read_to_string(&events).unwrap();
    let lines: Vec<Value> = text
        .lines()
        .filter(|l| l.starts_with("{\"event\":\"message\""))
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert!(!lines.is_empty(), "{text}");
    for l in &lines {
        assert_eq!(l["user"], "alice", "{l}");
        assert_eq!(l["key"], "alice", "{l}");
    }
    let typed: Vec<&str> = lines
        .iter()
        .filter_map(|l| l["auth_login"].as_str())
        .collect();
    assert!(
        typed.contains(&"ALICE") && typed.contains(&"aLiCe"),
        "{typed:?}"
    );
    assert!(lines.iter().any(|l| l["auth_login"].is_null()), "{text}");
    // The info log line names both.
    fg.wait_stderr("login=\"ALICE\"", std::time::Duration::from_secs(5));
}

#[test]
fn with_login_fold_exact_each_spelling_has_its_own_count() {
    let pf = postfix();
    let _log = pf.log_on_panic();
    let cfg = pf.floodgate_config(PfListener::Plain).extra(
        r#"
[identity]
login_fold = "exact"

[[limit]]
name = "per-user"
when = "authenticated"
count = "messages"
key = "${authenticated_id}"
rate = "2 / 1h"
burst = "2"
action = "defer"
"#,
    );
    let fg = Floodgate::start(&cfg);
    let tok = token("exact");
    for login in ["ALICE", "ALICE", "alice", "alice"] {
        assert_eq!(send_as(&fg, login, &tok), [250, 250, 354, 250], "{login}");
    }
    // Each spelling's third is over its own limit.
    for login in ["ALICE", "alice"] {
        assert_eq!(send_as(&fg, login, &tok)[0], 450, "{login}");
    }
    pf.settle();
    assert_eq!(pf.messages_with(&tok).len(), 4);
}
