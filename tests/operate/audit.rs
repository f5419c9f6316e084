//! Who did what, through the real binary: two named tokens on the admin address and the
//! admin socket act on a key restricted with its mail held; every action's `by` (log line,
//! alert, restriction, trace header) names the token or the user, and the audit log has
//! one line per action with who, target, reason and result. A release without a reason is
//! refused; a release of mail of a key still restricted needs confirmation.

use crate::common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::time::Duration;

use common::restrict::{alerts, notices, wait_notices};
use common::*;
use serde_json::Value;

const ANN: &str = "ann-token-0123456789abcdef";
const BEN: &str = "ben-token-0123456789abcdef";

/// One POST to the admin API with `token`; the status and the JSON answer.
fn post(addr: SocketAddr, token: &str, target: &str) -> (u16, Value) {
    let mut s = TcpStream::connect(addr).expect("connect");
    s.set_read_timeout(Some(REPLY_TIMEOUT)).unwrap();
    write!(
        s,
        "POST {target} HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {token}\r\n\
         Content-Length: 0\r\n\r\n"
    )
    .unwrap();
    let mut raw = String::new();
    s.read_to_string(&mut raw).unwrap();
    let status = raw[9..12].parse().unwrap();
    let body = raw.split_once("\r\n\r\n").map_or("", |(_, b)| b);
    let v = serde_json::from_str(body).unwrap_or_else(|e| panic!("{e}: {raw}"));
    (status, v)
}

fn held_ids(sock: &Path) -> Vec<String> {
    admin_json(sock, &["held", "list"])["held"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["id"].as_str().unwrap().to_string())
        .collect()
}

fn audit_lines(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect()
}

#[test]
fn named_tokens_and_socket_users_are_recorded_with_every_action() {
    let rec = Recorder::start(common::restrict::users());
    let dir = tempfile::TempDir::new().unwrap();
    let d = dir.path();
    std::fs::write(d.join("ann.token"), format!("{ANN}\n")).unwrap();
    std::fs::write(d.join("ben"), format!("{BEN}\n")).unwrap();
    std::fs::create_dir(d.join("hold")).unwrap();
    let (audit, alert_file) = (d.join("audit.jsonl"), d.join("alerts.jsonl"));
    let addr = closed_port();
    let extra = format!(
        r#"
[[limit]]
name = "per-user"
when = "authenticated"
count = "messages"
key = "${{authenticated_id}}"
rate = "2 / 1h"
burst = "2"
action = "restrict"
restrict_for = "until_released"
while_restricted = "hold"

[hold]
dir = "{hold}"

[admin]
socket = "admin.sock"
address = "{addr}"
token_file = "{ann}"
audit = "{audit}"

[admin.tokens]
ben = "{ben}"
{alerts}"#,
        hold = d.join("hold").display(),
        ann = d.join("ann.token").display(),
        ben = d.join("ben").display(),
        audit = audit.display(),
        alerts = alerts(&alert_file),
    );
    let fg = common::restrict::start(&rec, &extra);
    let sock = fg.admin_socket();
    let me = socket_actor();

    // alice trips the limit: restricted, her later messages held.
    let sent = common::restrict::send(fg.addr("plain"), USER, PASSWORD, 5);
    assert!(sent.iter().all(|(c, _)| *c == 250), "{sent:?}");
    wait_notices(&alert_file, "floodgate.restricted", 1);
    let relayed = rec.messages().len();
    let ids = held_ids(&sock);
    assert!(ids.len() >= 2, "{ids:?}");
    assert_eq!(
        std::fs::read_to_string(&audit).unwrap(),
        "",
        "created empty"
    );

    // Token "ann" (the token file's stem): a release without a reason is refused.
    let release = format!("/v1/held/release?id={}", ids[0]);
    let (status, v) = post(addr, ANN, &release);
    assert_eq!(status, 400, "{v}");
    assert!(v["error"].as_str().unwrap().contains("say why"), "{v}");
    // With one, still refused while alice is restricted: since when, by whom.
    let (status, v) = post(addr, ANN, &format!("{release}&reason=checked"));
    assert_eq!(status, 409, "{v}");
    let e = v["error"].as_str().unwrap();
    assert!(e.starts_with("alice is still restricted (since 20"), "{e}");
    assert!(
        e.contains("by limit per-user on ") && e.contains("confirm=true"),
        "{e}"
    );
    assert_eq!(v["restricted"]["key"], "alice");
    assert_eq!(held_ids(&sock).len(), ids.len(), "nothing released");
    // A bad confirm value is refused; confirm=true releases.
    let (status, v) = post(addr, ANN, &format!("{release}&reason=checked&confirm=yes"));
    assert_eq!(status, 400, "{v}");
    let (status, v) = post(addr, ANN, &format!("{release}&reason=checked&confirm=true"));
    assert_eq!(status, 200, "{v}");
    rec.wait_events("message", relayed + 1);
    let trace = String::from_utf8_lossy(&rec.messages()[relayed].data).to_string();
    // The reason stays in the audit log; the header names the audit line.
    let prefix = format!(
        "X-Floodgate-Released: id={}; by=\"token:ann\"; reason=\"audit ",
        ids[0]
    );
    assert!(trace.starts_with(&prefix), "{trace}");
    let reference = trace[prefix.len()..].split('"').next().unwrap().to_string();
    assert!(!trace.contains("checked"), "{trace}");

    // Token "ben" deletes the next one, and restricts bob by hand.
    let (status, v) = post(
        addr,
        BEN,
        &format!("/v1/held/delete?id={}&reason=spam", ids[1]),
    );
    assert_eq!(status, 200, "{v}");
    let (status, v) = post(addr, BEN, "/v1/restrict?key=bob&for=1h&reason=phished");
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["restricted"]["by"], "token:ben");

    // Ending alice's restriction needs a reason too; over the socket, as this user.
    let (status, v) = post(addr, ANN, "/v1/release?key=alice");
    assert_eq!(status, 400, "{v}");
    let out = admin_verb(&sock, &["release", USER, "--reason", "password changed"]);
    assert!(out.ok(), "{out}");
    // The CLI's held release: a reason is required, as the server says.
    if let Some(id) = ids.get(2) {
        let out = admin_verb(&sock, &["held", "release", id]);
        assert!(!out.ok() && out.stderr.contains("say why"), "{out}");
    }

    // The audit log: one line per action, in order, with who, target, reason and result.
    let lines = audit_lines(&audit);
    let seen: Vec<(String, String, Value, Value, String)> = lines
        .iter()
        .map(|l| {
            let result = l["result"].as_str().unwrap();
            let result = result.split(':').next().unwrap().to_string();
            (
                l["who"].as_str().unwrap().to_string(),
                l["action"].as_str().unwrap().to_string(),
                l["target"].clone(),
                l["reason"].clone(),
                result,
            )
        })
        .collect();
    let mut want = vec![
        (
            "token:ann",
            "held_release",
            Value::from(ids[0].as_str()),
            Value::Null,
            "refused",
        ),
        (
            "token:ann",
            "held_release",
            ids[0].as_str().into(),
            "checked".into(),
            "refused",
        ),
        (
            "token:ann",
            "held_release",
            ids[0].as_str().into(),
            "checked".into(),
            "refused",
        ),
        (
            "token:ann",
            "held_release",
            ids[0].as_str().into(),
            "checked".into(),
            "ok",
        ),
        (
            "token:ben",
            "held_delete",
            ids[1].as_str().into(),
            "spam".into(),
            "ok",
        ),
        (
            "token:ben",
            "restrict",
            "bob".into(),
            "phished".into(),
            "ok",
        ),
        (
            "token:ann",
            "release",
            "alice".into(),
            Value::Null,
            "refused",
        ),
        (
            me.as_str(),
            "release",
            "alice".into(),
            "password changed".into(),
            "ok",
        ),
    ];
    if let Some(id) = ids.get(2) {
        want.push((
            me.as_str(),
            "held_release",
            id.as_str().into(),
            Value::Null,
            "refused",
        ));
    }
    let want: Vec<_> = want
        .into_iter()
        .map(|(w, a, t, r, res)| (w.to_string(), a.to_string(), t, r, res.to_string()))
        .collect();
    assert_eq!(seen, want, "{lines:#?}");
    for l in &lines {
        assert!(l["time"].as_str().unwrap().ends_with('Z'), "{l}");
    }
    assert!(lines[1]["result"]
        .as_str()
        .unwrap()
        .starts_with("refused: alice is still restricted"));
    // The release's line keeps the reason, its key, and the reference the trace header
    // names; the delete's line its key.
    assert_eq!(lines[3]["ref"], reference.as_str(), "{:#}", lines[3]);
    assert_eq!(lines[3]["key"], "alice", "{:#}", lines[3]);
    assert_eq!(lines[4]["key"], "alice", "{:#}", lines[4]);
    assert!(lines[4]["ref"].is_null(), "{:#}", lines[4]);
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&audit).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);

    // The alerts and the log lines carry the same `by`.
    let released = wait_notices(&alert_file, "floodgate.released", 1);
    assert_eq!(released[0]["by"], me.as_str(), "{released:?}");
    let restricted = wait_notices(&alert_file, "floodgate.restricted", 2);
    assert!(restricted[0]["by"]
        .as_str()
        .unwrap()
        .starts_with("limit per-user on "));
    assert_eq!(restricted[1]["by"], "token:ben");
    assert_eq!(notices(&alert_file, "floodgate.released").len(), 1);
    fg.wait_stderr("key released", Duration::from_secs(10));
    let log = fg.stderr();
    let logged = |what: &str, by: &str| log.lines().any(|l| l.contains(what) && l.contains(by));
    assert!(logged("held message released", "token:ann"), "{log}");
    assert!(logged("held message deleted", "token:ben"), "{log}");
    assert!(logged("key restricted", "token:ben"), "{log}");
    assert!(logged("key released", &me), "{log}");
    // The restriction record names its maker.
    let list = admin_json(&sock, &["restricted"]);
    assert_eq!(list["restricted"][0]["key"], "bob");
    assert_eq!(list["restricted"][0]["by"], "token:ben");
}
