//! Helpers of the restriction tests: a restricting limit, alerts into a file, sessions that
//! send messages, and the notices the alert command wrote.

use std::path::Path;
use std::time::Duration;

use serde_json::Value;

use super::*;

pub fn limit(restrict_for: &str) -> String {
    format!(
        r#"
[[limit]]
name = "per-user"
when = "authenticated"
count = "messages"
key = "${{authenticated_id}}"
rate = "5 / 1h"
burst = "5"
action = "restrict"
restrict_for = "{restrict_for}"
restricted_message = "4.7.1 ${{authenticated_id}} restricted since ${{restricted_since}} until ${{restricted_until}} by ${{limit_name}}; call the help desk"
"#
    )
}

pub fn alerts(file: &Path) -> String {
    format!(
        "\n[alerts]\ncommand = [\"/usr/bin/tee\", \"-a\", \"{}\"]\ncommand_timeout = \"5s\"\n",
        file.display()
    )
}

pub fn users() -> RecorderOptions {
    RecorderOptions {
        users: vec![
            (USER.into(), PASSWORD.into()),
            ("bob".into(), "b0bpass".into()),
        ],
        ..RecorderOptions::default()
    }
}

pub fn start(rec: &Recorder, extra: &str) -> Floodgate {
    Floodgate::start(
        &FloodgateConfig::new(rec.addr())
            .auth_without_tls(true)
            .log_level("info")
            .extra(extra),
    )
}

/// One authenticated session sending `n` one-recipient messages; the MAIL FROM replies.
pub fn send(
    addr: std::net::SocketAddr,
    user: &str,
    password: &str,
    n: usize,
) -> Vec<(u16, String)> {
    let mut c = RawClient::connect_greeted(addr);
    assert_eq!(c.ehlo("client.test").code, 250);
    let token = b64_encode(format!("\0{user}\0{password}").as_bytes());
    assert_eq!(c.cmd(&format!("AUTH PLAIN {token}")).code, 235);
    let mut out = Vec::new();
    for i in 0..n {
        let r = c.cmd("MAIL FROM:<s@example.org>");
        out.push((r.code, r.text()));
        if r.code != 250 {
            continue;
        }
        assert_eq!(c.cmd(&format!("RCPT TO:<r{i}@example.com>")).code, 250);
        assert_eq!(c.cmd("DATA").code, 354);
        c.send(format!("Subject: note {i}\r\n\r\nhi\r\n.\r\n").as_bytes());
        assert_eq!(c.reply().code, 250);
    }
    assert_eq!(c.cmd("QUIT").code, 221);
    out
}

pub fn codes(v: &[(u16, String)]) -> Vec<u16> {
    v.iter().map(|(c, _)| *c).collect()
}

pub fn notices(file: &Path, event: &str) -> Vec<Value> {
    std::fs::read_to_string(file)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|v| v["event"] == event)
        .collect()
}

pub fn wait_notices(file: &Path, event: &str, n: usize) -> Vec<Value> {
    wait_until(Duration::from_secs(20), event, || {
        let v = notices(file, event);
        (v.len() >= n).then_some(v)
    })
}

pub fn check_evidence(ev: &Value) {
    assert_eq!(ev["client_ips"][0], "127.0.0.1", "{ev}");
    assert_eq!(ev["top_recipient_domains"][0][0], "example.com", "{ev}");
    // Six MAIL FROMs, the first five relayed to one recipient each.
    assert!(ev["offered"].as_u64().unwrap() >= 6, "{ev}");
    assert!(ev["messages"].as_u64().unwrap() >= 5, "{ev}");
    assert!(ev["recipients"].as_u64().unwrap() >= 5, "{ev}");
    assert_eq!(ev["offered_by_client"][0][0], "127.0.0.1", "{ev}");
    assert!(ev["refusals"]["upstream"]["rcpt"].is_u64(), "{ev}");
    assert!(ev["refusals"]["upstream"]["data"].is_u64(), "{ev}");
    assert!(ev["refusals"]["floodgate"].is_object(), "{ev}");
    assert!(ev["held"].is_u64(), "{ev}");
    assert!(ev["held_by_node"].is_object(), "{ev}");
    let subjects = ev["subjects"].as_array().unwrap();
    assert!(!subjects.is_empty() && subjects.len() <= 5, "{ev}");
    assert!(
        subjects
            .iter()
            .all(|s| s.as_str().unwrap().starts_with("note ")),
        "{ev}"
    );
}
