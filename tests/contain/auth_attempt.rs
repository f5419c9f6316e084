//! A failed AUTH names nobody: after a client fails AUTH as `victim` and sends mail, a limit
//! keyed on `${authenticated_id}` counts nothing under `victim`, restricts nobody and mails
//! no notice to victim, and victim's own login sends on; the name tried still counts where
//! it is meant to (the AUTH failure delay, `${auth_attempted_id}` limits). A config that
//! would notify or restrict a tried name is refused.

use std::path::Path;
use std::time::Duration;

use crate::common;
use common::restrict::*;
use common::*;
use serde_json::Value;

const VICTIM: &str = "victim";
const VICTIM_PASSWORD: &str = "v1ctim-pass";

const LIMITS: &str = r#"
[auth_failures]
enabled = true
base_delay = "100ms"
max_delay = "2s"
decay = "10m"

[[limit]]
name = "per-login"
count = "messages"
key = "${authenticated_id}"
rate = "1 / 1h"
burst = "1"
action = "restrict"
restrict_for = "1h"
notify_user = "${authenticated_id}@example.org"

[[limit]]
name = "tried-names"
count = "auth_failures"
key = "${auth_attempted_id}"
rate = "100 / 1h"
burst = "100"
"#;

fn limit<'a>(v: &'a Value, name: &str) -> &'a Value {
    v["limits"]
        .as_array()
        .unwrap()
        .iter()
        .find(|l| l["limit"] == name)
        .unwrap_or_else(|| panic!("no limit {name} in {v}"))
}

/// One message; the MAIL FROM and the end-of-data replies' codes (0 when not reached).
fn message(c: &mut RawClient, i: usize) -> (u16, u16) {
    let m = c.cmd("MAIL FROM:<s@example.org>").code;
    if m != 250 {
        return (m, 0);
    }
    let r = c.cmd(&format!("RCPT TO:<r{i}@example.com>")).code;
    if r != 250 {
        c.cmd("RSET");
        return (m, r);
    }
    assert_eq!(c.cmd("DATA").code, 354);
    c.send(format!("Subject: note {i}\r\n\r\nhi\r\n.\r\n").as_bytes());
    (m, c.reply().code)
}

#[test]
fn a_failed_auth_as_victim_charges_restricts_and_notifies_nobody() {
    let mut opts = users();
    opts.users.push((VICTIM.into(), VICTIM_PASSWORD.into()));
    let rec = Recorder::start(opts);
    let fg = start(&rec, LIMITS);
    let sock = fg.admin_socket();

    // The attacker tries victim's name twice, then sends mail without a login.
    let mut c = RawClient::connect_greeted(fg.addr("plain"));
    assert_eq!(c.ehlo("client.test").code, 250);
    for _ in 0..2 {
        let token = b64_encode(format!("\0{VICTIM}\0wrong").as_bytes());
        assert_eq!(c.cmd(&format!("AUTH PLAIN {token}")).code, 535);
    }
    let sent: Vec<(u16, u16)> = (0..3).map(|i| message(&mut c, i)).collect();
    assert_eq!(c.cmd("QUIT").code, 221);
    // The first message went; the others are over the limit of the unset key (everyone
    // without a login shares it) and deferred, not restricted under anyone's name.
    assert_eq!(sent[0], (250, 250), "{sent:?}");
    assert!(sent[1..].iter().all(|&(m, _)| m == 450), "{sent:?}");

    // Nothing counted under victim, nobody restricted, no notice.
    let v = admin_json(&sock, &["inspect", VICTIM]);
    let per_login = limit(&v, "per-login");
    assert_eq!(per_login["stored"], false, "{v}");
    let restricted = admin_json(&sock, &["restricted"]);
    assert!(
        restricted["restricted"].as_array().unwrap().is_empty(),
        "{restricted}"
    );
    fg.wait_stderr("the restrict key is empty", Duration::from_secs(10));
    // The tried name is counted where it is asked for.
    let tried = limit(&v, "tried-names");
    assert_eq!(tried["stored"], true, "{v}");
    assert!(tried["value"].as_f64().unwrap() >= 1.9, "{v}");
    // The AUTH failure delay keyed on the tried name still doubles.
    let delays: Vec<String> = fg
        .stderr()
        .lines()
        .filter(|l| l.contains("auth failure delay") && l.contains("user=\"victim\""))
        .filter_map(|l| l.split("delay_ms=").nth(1))
        .map(|v| v.split_whitespace().next().unwrap_or("").to_string())
        .collect();
    assert_eq!(delays, vec!["100", "200"]);

    // victim's own login is neither restricted nor over, and is told nothing.
    assert_eq!(
        codes(&send(fg.addr("plain"), VICTIM, VICTIM_PASSWORD, 1)),
        [250]
    );
    std::thread::sleep(Duration::from_millis(500));
    let notices: Vec<_> = rec
        .messages()
        .into_iter()
        .filter(|m| m.mail_from.is_empty())
        .collect();
    assert!(notices.is_empty(), "{notices:?}");
    assert!(!fg.stderr().contains("restriction notice sent"));
    assert_eq!(rec.messages().len(), 2);
}

#[test]
fn notices_and_restrictions_of_a_tried_name_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("f.toml");
    for (body, want) in [
        (
            "count = \"messages\"\nkey = \"${authenticated_id}\"\nrate = \"1 / 1h\"\nburst = \"1\"\naction = \"restrict\"\nnotify_user = \"${auth_attempted_id}@example.org\"",
            "notify_user must not use ${auth_attempted_id}",
        ),
        (
            "count = \"auth_failures\"\nkey = \"${auth_attempted_id}\"\nrate = \"1 / 1h\"\nburst = \"1\"\naction = \"restrict\"",
            "a restriction keyed on ${auth_attempted_id}",
        ),
        (
            "count = \"messages\"\nkey = \"${client_ip}\"\nrate = \"1 / 1h\"\nburst = \"1\"\naction = \"restrict\"\nrestrict_key = \"${auth_attempted_id}\"",
            "a restriction keyed on ${auth_attempted_id}",
        ),
    ] {
        let text = format!(
            "[[listener]]\naddress = \"127.0.0.1:0\"\n[upstream]\naddress = \"127.0.0.1:2525\"\n[[limit]]\nname = \"r\"\n{body}\n"
        );
        let e = floodgate::generation::Generation::parse(Path::new(&path), &text)
            .map(|_| ())
            .unwrap_err()
            .to_string();
        assert!(e.contains(want), "{body}: {e}");
        assert!(e.contains("f.toml:"), "{e}");
    }
    // Keyed on the tried name without restricting: fine (a warn, a delay, a defer).
    let ok = "[[listener]]\naddress = \"127.0.0.1:0\"\n[upstream]\naddress = \"127.0.0.1:2525\"\n[[limit]]\nname = \"r\"\ncount = \"auth_failures\"\nkey = \"${auth_attempted_id}\"\nrate = \"5 / 1h\"\nburst = \"5\"\n";
    assert!(floodgate::generation::Generation::parse(&path, ok).is_ok());
}
