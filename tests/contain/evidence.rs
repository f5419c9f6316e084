//! A restriction's evidence is true, through the real binary: `refusals` are upstream's
//! real refusals (its 550s to RCPT) and floodgate's own by limit and action, a warn-only
//! limit that is over counts none; `held` is what the hold spool holds for the key now, in
//! the alert, in `restricted`, in `inspect` and in the release alert, also after some held
//! mail was released. While the key is restricted its held mail is quiet: one
//! `held (restricted)` log line per message, no `rate limit over` line, no alert.

use crate::common;

use common::restrict::*;
use common::*;
use serde_json::{json, Value};

/// The limits: the shipped restricting one (5 messages an hour, then hold), a warn-only
/// limit on recipients that is over from the second recipient, and a `defer` limit of 3
/// recipients an hour.
fn config(alerts_file: &std::path::Path, spool: &std::path::Path) -> String {
    format!(
        r#"{}while_restricted = "hold"

[[limit]]
name = "warn-rcpt"
when = "authenticated"
count = "recipients"
key = "${{authenticated_id}}"
rate = "1 / 1h"
burst = "1"
action = "warn"

[[limit]]
name = "rcpts-per-hour"
when = "authenticated"
count = "recipients"
key = "${{authenticated_id}}"
rate = "3 / 1h"
burst = "3"
action = "defer"
{}
[hold]
dir = "{}"
"#,
        limit("until_released"),
        alerts(alerts_file),
        spool.display()
    )
}

/// What the client saw of one message: the RCPT replies' codes and the end of data's.
struct Sent {
    rcpts: Vec<u16>,
    end: Option<u16>,
}

/// One session sending `n` messages: message i goes first to `refuse{i}@example.com` (the
/// recorder refuses it) when `i < refused`, then to `a{i}@example.com`; a message without
/// an accepted recipient is reset.
fn send_messages(addr: std::net::SocketAddr, n: usize, refused: usize) -> Vec<Sent> {
    let mut c = RawClient::connect_greeted(addr);
    assert_eq!(c.ehlo("client.test").code, 250);
    let token = b64_encode(format!("\0{USER}\0{PASSWORD}").as_bytes());
    assert_eq!(c.cmd(&format!("AUTH PLAIN {token}")).code, 235);
    let mut out = Vec::new();
    for i in 0..n {
        assert_eq!(c.cmd("MAIL FROM:<s@example.org>").code, 250, "message {i}");
        let mut rcpts = Vec::new();
        if i < refused {
            rcpts.push(c.cmd(&format!("RCPT TO:<refuse{i}@example.com>")).code);
        }
        rcpts.push(c.cmd(&format!("RCPT TO:<a{i}@example.com>")).code);
        let end = if rcpts.contains(&250) {
            assert_eq!(c.cmd("DATA").code, 354);
            c.send(format!("Subject: note {i}\r\n\r\nhi\r\n.\r\n").as_bytes());
            Some(c.reply().code)
        } else {
            assert_eq!(c.cmd("RSET").code, 250);
            None
        };
        out.push(Sent { rcpts, end });
    }
    assert_eq!(c.cmd("QUIT").code, 221);
    out
}

fn held_ids(sock: &std::path::Path) -> Vec<String> {
    admin_json(sock, &["held", "list", "--key", USER])["held"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["id"].as_str().unwrap().to_string())
        .collect()
}

fn listed_evidence(sock: &std::path::Path) -> Value {
    let v = admin_json(sock, &["restricted"]);
    let list = v["restricted"].as_array().unwrap();
    assert_eq!(list.len(), 1, "{v}");
    list[0]["evidence"].clone()
}

#[test]
fn refusals_and_held_are_what_happened() {
    let rec = Recorder::start(RecorderOptions {
        reject_rcpt: vec!["refuse".into()],
        ..users()
    });
    let dir = tempfile::tempdir().unwrap();
    let spool = dir.path().join("hold");
    std::fs::create_dir(&spool).unwrap();
    let file = dir.path().join("alerts.jsonl");
    let fg = start(&rec, &config(&file, &spool));
    let sock = fg.admin_socket();

    let sent = send_messages(fg.addr("plain"), 8, 3);
    // The sixth message restricts the key and is held; so are the next ones.
    for m in &sent[5..] {
        assert_eq!((m.rcpts.as_slice(), m.end), (&[250][..], Some(250)));
    }
    // Before: upstream refused refuse0..2; floodgate deferred recipients over 3 an hour.
    let relayed = sent[..5].iter().filter(|m| m.end == Some(250)).count();
    let upstream_refused = sent
        .iter()
        .flat_map(|s| &s.rcpts)
        .filter(|c| **c == 550)
        .count();
    let deferred = sent
        .iter()
        .flat_map(|s| &s.rcpts)
        .filter(|c| **c == 450)
        .count();
    let refusals = json!({
        "upstream": {"rcpt": upstream_refused, "data": 0},
        "floodgate": {"rcpts-per-hour": {"defer": deferred}},
    });
    assert_eq!(upstream_refused, 3);
    assert!(deferred > 0);
    assert_eq!(rec.messages().len(), relayed);

    // The restriction's alert: nothing was held yet when it was made.
    let made = wait_notices(&file, "floodgate.restricted", 1);
    let ev = &made[0]["evidence"];
    assert_eq!(ev["refusals"], refusals, "{ev}");
    assert_eq!(ev["held"], 0, "{ev}");

    // Three held now: restricted, inspect and the spool agree, by node.
    let host = made[0]["host"].as_str().unwrap().to_string();
    let ids = held_ids(&sock);
    assert_eq!(ids.len(), 3);
    let ev = listed_evidence(&sock);
    assert_eq!(ev["refusals"], refusals, "{ev}");
    assert_eq!(ev["held"], 3, "{ev}");
    assert_eq!(ev["held_by_node"], json!({ host.clone(): 3 }), "{ev}");
    let inspected = admin_json(&sock, &["inspect", USER]);
    assert_eq!(inspected["restriction"]["evidence"], ev, "{inspected}");
    let table = admin_verb(&sock, &["restricted"]);
    assert!(
        table.stdout.contains(&format!(
            "refused by upstream 3 (rcpt 3, data 0), by floodgate rcpts-per-hour defer {deferred}, held 3"
        )),
        "{table}"
    );

    // One released by id (the key still restricted: confirmed): two held, everywhere.
    let out = admin_verb(
        &sock,
        &[
            "held",
            "release",
            &ids[0],
            "--reason",
            "checked",
            "--confirm",
        ],
    );
    assert!(out.ok(), "{out}");
    assert_eq!(held_ids(&sock).len(), 2);
    assert_eq!(listed_evidence(&sock)["held"], 2);
    let out = admin_verb(&sock, &["release", USER, "--reason", "checked"]);
    assert!(out.ok(), "{out}");
    let released = wait_notices(&file, "floodgate.released", 1);
    let ev = &released[0]["evidence"];
    assert_eq!(ev["held"], 2, "{ev}");
    assert_eq!(ev["held_by_node"], json!({ host: 2 }), "{ev}");
    assert_eq!(ev["refusals"], refusals, "{ev}");

    // Quiet while contained: after the restriction, one `held (restricted)` line per held
    // message and no limit told anything; the warn limit alerted once, before.
    let log = fg.stderr();
    let (before, after) = log.split_once("key restricted").expect("restricted line");
    assert!(before.contains("rate limit over"), "{before}");
    assert_eq!(after.matches("held (restricted)").count(), 3, "{after}");
    assert!(!after.contains("rate limit over"), "{after}");
    let warned = notices(&file, "floodgate.alert")
        .into_iter()
        .filter(|n| n["limit"] == "warn-rcpt")
        .count();
    assert_eq!(warned, 1);
}

/// With Redis, `held` is fleet-wide: two nodes, each with its own spool, hold a restricted
/// user's messages; each lists the sum once the other has published its count.
#[test]
fn held_is_summed_over_the_nodes_sharing_redis() {
    let redis = crate::common::redis::RedisServer::start();
    let rec = Recorder::start(users());
    let dir = tempfile::tempdir().unwrap();
    let node = |name: &str| {
        let spool = dir.path().join(format!("hold-{name}"));
        std::fs::create_dir(&spool).unwrap();
        let extra = format!(
            "[store]\nbackend = \"redis\"\nurl = \"{}\"\ntimeout = \"2s\"\n{}\
             while_restricted = \"hold\"\n[hold]\ndir = \"{}\"\n",
            redis.url(),
            limit("until_released"),
            spool.display()
        );
        start(&rec, &extra)
    };
    let (a, b) = (node("a"), node("b"));
    // Five relayed through a; the sixth restricts alice; three held on a, two on b.
    assert_eq!(codes(&send(a.addr("plain"), USER, PASSWORD, 8)), [250; 8]);
    assert_eq!(codes(&send(b.addr("plain"), USER, PASSWORD, 2)), [250; 2]);
    assert_eq!(rec.messages().len(), 5);
    let held_on = |n: &Floodgate| {
        admin_json(&n.admin_socket(), &["held", "list", "--key", USER])["held"]
            .as_array()
            .unwrap()
            .len()
    };
    assert_eq!((held_on(&a), held_on(&b)), (3, 2));
    for n in [&a, &b] {
        let ev = wait_until(
            std::time::Duration::from_secs(30),
            "the other node's count",
            || {
                let ev = listed_evidence(&n.admin_socket());
                (ev["held"] == 5).then_some(ev)
            },
        );
        // Both nodes call themselves floodgate.test: one name, the sum of both.
        assert_eq!(ev["held_by_node"], json!({"floodgate.test": 5}), "{ev}");
    }
}

/// One session behind a PROXY header from `ip`, as alice: `n` messages to `rcpts`; the end
/// of data's replies.
fn send_from(addr: std::net::SocketAddr, ip: &str, n: usize, rcpts: &[&str]) -> Vec<u16> {
    let mut c = RawClient::connect(addr);
    c.send(format!("PROXY TCP4 {ip} 127.0.0.1 40000 25\r\n").as_bytes());
    assert_eq!(c.reply().code, 220);
    assert_eq!(c.ehlo("client.test").code, 250);
    let token = b64_encode(format!("\0{USER}\0{PASSWORD}").as_bytes());
    assert_eq!(c.cmd(&format!("AUTH PLAIN {token}")).code, 235);
    let mut ends = Vec::new();
    for i in 0..n {
        assert_eq!(c.cmd("MAIL FROM:<s@example.org>").code, 250);
        for r in rcpts {
            assert_eq!(c.cmd(&format!("RCPT TO:<{r}>")).code, 250);
        }
        assert_eq!(c.cmd("DATA").code, 354);
        c.send(format!("Subject: note {i}\r\n\r\nhi\r\n.\r\n").as_bytes());
        ends.push(c.reply().code);
    }
    assert_eq!(c.cmd("QUIT").code, 221);
    ends
}

/// The body of an admin API answer on the socket, and its status line.
fn api(sock: &std::path::Path, target: &str) -> (String, String) {
    let a = admin_get(sock, target);
    let (head, body) = a.split_once("\r\n\r\n").expect("an HTTP answer");
    (
        head.lines().next().unwrap_or("").to_string(),
        body.to_string(),
    )
}

/// Every figure of a restriction is what upstream and the spool show: messages and
/// recipients relayed and the recipients per domain are the recording upstream's, the
/// messages offered per client address are the MAIL FROMs each address sent, held is the
/// spool's count; the same in `restricted --json`, `inspect` and the text of `restricted`.
/// What was delivered before the restriction is upstream's messages, and its CSV lists
/// upstream's recipients; the key's messages page back to the first.
#[test]
fn figures_are_what_upstream_and_the_spool_show() {
    let rec = Recorder::start(users());
    let dir = tempfile::tempdir().unwrap();
    let spool = dir.path().join("hold");
    std::fs::create_dir(&spool).unwrap();
    let events = dir.path().join("events.jsonl");
    let extra = format!(
        "{}while_restricted = \"hold\"\n[hold]\ndir = \"{}\"\n[report]\nevents = \"{}\"\n",
        limit("until_released"),
        spool.display(),
        events.display()
    );
    let fg = Floodgate::start(
        &FloodgateConfig::new(rec.addr())
            .auth_without_tls(true)
            .identity("xclient")
            .trusted_proxies(&["127.0.0.1/32"])
            .listeners(vec![
                ListenerSpec::new("plain", "none").with_proxy_protocol()
            ])
            .extra(&extra),
    );
    let (addr, sock) = (fg.addr("plain"), fg.admin_socket());
    let three = ["a@gmail.test", "b@gmx.test", "c@Gmail.test"];
    // Five relayed (the limit's 5 an hour), the sixth restricts alice and is held, as
    // are the next two.
    assert_eq!(send_from(addr, "192.0.2.1", 2, &three), [250; 2]);
    assert_eq!(send_from(addr, "192.0.2.2", 2, &["d@mail.test"]), [250; 2]);
    assert_eq!(
        send_from(addr, "192.0.2.3", 2, &["e@mail.test", "f@gmail.test"]),
        [250; 2]
    );
    assert_eq!(send_from(addr, "192.0.2.1", 2, &three), [250; 2]);
    rec.wait_idle();

    // The truth: upstream's messages and recipients, the spool's count.
    let got = rec.messages();
    assert_eq!(got.len(), 5);
    let rcpts: Vec<String> = got.iter().flat_map(|m| m.rcpts.clone()).collect();
    let mut per_domain: std::collections::BTreeMap<String, u64> = Default::default();
    for r in &rcpts {
        let d = r.rsplit_once('@').unwrap().1.to_ascii_lowercase();
        *per_domain.entry(d).or_default() += 1;
    }
    let mut want_domains: Vec<(String, u64)> = per_domain.into_iter().collect();
    want_domains.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    let held = held_ids(&sock).len();
    assert_eq!(held, 3);

    let ev = listed_evidence(&sock);
    assert_eq!(ev["messages"], got.len(), "{ev}");
    assert_eq!(ev["recipients"], rcpts.len(), "{ev}");
    assert_eq!(ev["top_recipient_domains"], json!(want_domains), "{ev}");
    assert_eq!(ev["held"], held, "{ev}");
    // Every MAIL FROM each address sent, held ones included.
    assert_eq!(ev["offered"], 8, "{ev}");
    assert_eq!(
        ev["offered_by_client"],
        json!([["192.0.2.1", 4], ["192.0.2.2", 2], ["192.0.2.3", 2]]),
        "{ev}"
    );
    let inspected = admin_json(&sock, &["inspect", USER]);
    assert_eq!(inspected["restriction"]["evidence"], ev, "{inspected}");
    let table = admin_verb(&sock, &["restricted"]);
    assert!(
        table.stdout.contains(&format!(
            "5 msgs relayed to {} rcpts (8 offered)",
            rcpts.len()
        )) && table
            .stdout
            .contains("ips 192.0.2.1 (4),192.0.2.2 (2),192.0.2.3 (2)"),
        "{table}"
    );

    // Delivered before containment: upstream's five messages, its recipients as CSV.
    let (status, body) = api(&sock, "/v1/delivered?key=alice");
    assert!(status.contains(" 200 "), "{status} {body}");
    let d: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(d["messages"], 5, "{d}");
    assert_eq!(d["recipients"], rcpts.len(), "{d}");
    assert_eq!(d["complete"], true, "{d}");
    let (_, csv) = api(&sock, "/v1/delivered?key=alice&format=csv");
    let mut listed: Vec<&str> = csv
        .lines()
        .skip(1)
        .map(|l| l.rsplit(',').next().unwrap())
        .collect();
    let mut want: Vec<&str> = rcpts.iter().map(String::as_str).collect();
    listed.sort_unstable();
    want.sort_unstable();
    assert_eq!(listed, want, "{csv}");
    assert!(csv.starts_with("time,sender,recipient\r\n"), "{csv}");
    // Bad queries say what is wrong.
    for (target, says) in [
        (
            "/v1/delivered?key=alice&format=xml",
            "format must be json or csv",
        ),
        ("/v1/delivered?key=bob", "\\\"bob\\\" is not restricted"),
        ("/v1/delivered", "delivered needs ?key=KEY"),
        (
            "/v1/messages?key=alice&page=0",
            "page must be a whole number from 1",
        ),
        (
            "/v1/messages?key=alice&page=x",
            "page must be a whole number from 1",
        ),
    ] {
        let (status, body) = api(&sock, target);
        assert!(status.contains(" 4"), "{target}: {status}");
        assert!(body.contains(says), "{target}: {body}");
    }
    // The key's messages, newest first, all on page 1; page 2 is empty.
    let (_, body) = api(&sock, "/v1/messages?key=alice&page=1");
    let m: Value = serde_json::from_str(&body).unwrap();
    let verdicts: Vec<&str> = m["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x["verdict"].as_str().unwrap())
        .collect();
    assert_eq!(
        verdicts.iter().filter(|v| v.starts_with("relayed")).count(),
        5
    );
    assert_eq!(verdicts.iter().filter(|v| **v == "held").count(), 3);
    assert_eq!(m["more"], false, "{m}");
    let (_, body) = api(&sock, "/v1/messages?key=alice&page=2");
    assert!(body.contains("\"messages\":[]"), "{body}");
}
