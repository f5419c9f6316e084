//! `action = "reroute"` through the real binary and two recording upstreams: messages over
//! the limit arrive only at the second smart host (`[upstream.high_risk]`), from the real
//! client (XCLIENT ADDR, HELO, LOGIN), with their octets unchanged under one trace header;
//! that host's refusal reaches the client; that host down gives the client a 4xx and the
//! main smart host never gets the message. Bad configurations are refused clearly.

use crate::common;

use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use crate::support::{content, send_numbered};
use common::*;
use floodgate::generation::Generation;

/// alice's first recipient passes; every later message of hers is rerouted (at RCPT).
fn limits(high_risk: SocketAddr) -> String {
    format!(
        r#"
[upstream.high_risk]
address = "{high_risk}"
client_identity = "xclient"
helo_name = "floodgate-hr.test"

[[limit]]
name = "risky"
when = "authenticated"
count = "recipients"
key = "${{authenticated_id}}"
algorithm = "bucket"
rate = "1 / 1h"
burst = "1"
action = "reroute"
"#
    )
}

fn start(main: &Recorder, high_risk: SocketAddr) -> Floodgate {
    Floodgate::start(
        &FloodgateConfig::new(main.addr())
            .identity("xclient")
            .auth_without_tls(true)
            .log_level("info")
            .extra(&limits(high_risk)),
    )
}

fn body(i: usize) -> Vec<u8> {
    format!("Subject: risky {i}\r\nFrom: alice@example.org\r\n\r\nline one\r\n.dot line {i}\r\n")
        .into_bytes()
}

/// One authenticated session as alice sending `n` messages, message `i` to `r{i}@…`;
/// the final reply of each (the session goes on after any of them).
fn send(fg: &Floodgate, n: usize) -> Vec<(u16, String)> {
    send_numbered(fg, n, body)
}

#[test]
fn over_limit_messages_go_only_to_the_high_risk_host_as_the_real_client() {
    let main = Recorder::start(RecorderOptions::default());
    let high = Recorder::start(RecorderOptions::default());
    let fg = start(&main, high.addr());
    let replies = send(&fg, 3);
    assert!(replies.iter().all(|(c, _)| *c == 250), "{replies:?}");
    main.wait_events("message", 1);
    high.wait_events("message", 2);
    let on_main = main.messages();
    assert_eq!(on_main.len(), 1, "the main host got only the first");
    assert_eq!(on_main[0].rcpts, ["r0@example.com"]);
    let on_high = high.messages();
    assert_eq!(
        on_high.len(),
        2,
        "the high-risk host got the two over the limit"
    );
    for (k, m) in on_high.iter().enumerate() {
        let i = k + 1;
        assert_eq!(m.rcpts, [format!("r{i}@example.com")]);
        assert_eq!(m.mail_from, "alice@example.org");
        // The real client, not floodgate.
        assert_eq!(m.xclient.get("ADDR").map(String::as_str), Some("127.0.0.1"));
        assert_eq!(
            m.xclient.get("HELO").map(String::as_str),
            Some("laptop.test")
        );
        assert_eq!(m.auth_user.as_deref(), Some(USER));
        let content = content(m);
        let first_end = content.iter().position(|&b| b == b'\n').unwrap() + 1;
        let trace = String::from_utf8_lossy(&content[..first_end]).to_string();
        assert!(
            trace.starts_with("X-Floodgate-Rerouted: limit=\"risky\"; at="),
            "{trace}"
        );
        assert_eq!(&content[first_end..], &body(i)[..], "identical octets");
    }
    // The client's 250 is the high-risk host's own answer.
    assert!(
        replies[1].1.contains("queued") || replies[1].1.contains("Ok"),
        "{replies:?}"
    );
    // The main host saw the rerouted transactions begin, and reset: never their data.
    let cmds = main.commands();
    let data = |c: &&String| *c == "DATA" || c.starts_with("BDAT ");
    assert_eq!(cmds.iter().filter(data).count(), 1, "{cmds:?}");
    let log = fg.stderr();
    assert!(log.contains("message rerouted"), "{log}");
    let m = admin_get(&fg.admin_socket(), "/metrics");
    for line in [
        "floodgate_rerouted_total{outcome=\"relayed\"} 2",
        "floodgate_rerouted_total{outcome=\"failed\"} 0",
        "floodgate_policy_verdicts_total{limit=\"risky\",action=\"reroute\"} 2",
    ] {
        assert!(m.contains(line), "{line} not in\n{m}");
    }
}

#[test]
fn high_risk_host_down_defers_and_the_main_host_never_gets_the_message() {
    let main = Recorder::start(RecorderOptions::default());
    let fg = start(&main, closed_port());
    let replies = send(&fg, 3);
    let codes: Vec<u16> = replies.iter().map(|r| r.0).collect();
    assert_eq!(codes, [250, 451, 451], "{replies:?}");
    assert!(replies[1].1.contains("4.4.1"), "{replies:?}");
    main.wait_idle();
    assert_eq!(
        main.messages().len(),
        1,
        "the deferred messages went nowhere: the client still has them"
    );
    let log = fg.stderr();
    assert!(log.contains("message not rerouted"), "{log}");
    let m = admin_get(&fg.admin_socket(), "/metrics");
    assert!(
        m.contains("floodgate_rerouted_total{outcome=\"failed\"} 2"),
        "{m}"
    );
}

#[test]
fn the_high_risk_hosts_refusal_reaches_the_client() {
    let main = Recorder::start(RecorderOptions::default());
    let high = Recorder::start(RecorderOptions {
        reject_rcpt: vec!["r1@".into()],
        ..RecorderOptions::default()
    });
    let fg = start(&main, high.addr());
    let replies = send(&fg, 3);
    let codes: Vec<u16> = replies.iter().map(|r| r.0).collect();
    assert_eq!(codes, [250, 550, 250], "{replies:?}");
    assert!(replies[1].1.contains("5.1.1"), "{replies:?}");
    high.wait_events("message", 1);
    assert_eq!(high.messages()[0].rcpts, ["r2@example.com"]);
    assert_eq!(main.messages().len(), 1);
    let m = admin_get(&fg.admin_socket(), "/metrics");
    assert!(
        m.contains("floodgate_rerouted_total{outcome=\"refused\"} 1"),
        "{m}"
    );
}

#[test]
fn check_explains_reroute() {
    let main = Recorder::start(RecorderOptions::default());
    let cfg = FloodgateConfig::new(main.addr()).extra(&limits("127.0.0.1:2626".parse().unwrap()));
    let dir = tempfile::TempDir::new().unwrap();
    let path = dir.path().join("f.toml");
    std::fs::write(&path, cfg.toml()).unwrap();
    let out = run_with_timeout(
        std::process::Command::new(env!("CARGO_BIN_EXE_floodgate"))
            .args(["check", "--config"])
            .arg(&path),
        Duration::from_secs(20),
    );
    assert!(out.ok(), "{out}");
    assert!(
        out.stdout
            .contains("upstream.high_risk: 127.0.0.1:2626 tls=none client_identity=xclient"),
        "{out}"
    );
    assert!(out.stdout.contains("helo=floodgate-hr.test"), "{out}");
    assert!(
        out.stdout.contains("action=reroute")
            && out.stdout.contains("relayed to the second smart host"),
        "{out}"
    );
}

const HEAD: &str =
    "[[listener]]\naddress = \"127.0.0.1:0\"\n[upstream]\naddress = \"127.0.0.1:2525\"\n";

fn refused(body: &str, message: &str) {
    let e = match Generation::parse(Path::new("/etc/floodgate/t.toml"), &format!("{HEAD}{body}")) {
        Ok(_) => panic!("accepted:\n{body}"),
        Err(e) => e.to_string(),
    };
    assert!(e.starts_with("/etc/floodgate/t.toml:"), "{e}");
    assert!(e.contains(message), "want {message:?} in: {e}");
}

const REROUTE: &str =
    "[[limit]]\nname = \"r\"\nrate = \"1 / 1m\"\nburst = \"1\"\ncount = \"messages\"\naction = \"reroute\"\n";

#[test]
fn bad_reroute_configurations_are_refused() {
    refused(
        REROUTE,
        "has action = \"reroute\" but there is no [upstream.high_risk] section",
    );
    refused(
        "[upstream.high_risk]\naddress = \"nowhere\"\n",
        "[upstream.high_risk] address \"nowhere\" is not host:port",
    );
    refused(
        "[upstream.high_risk]\naddress = \"127.0.0.1:1\"\n[upstream.high_risk.high_risk]\naddress = \"127.0.0.1:2\"\n",
        "cannot have a high_risk section of its own",
    );
    refused(
        "[upstream.high_risk]\naddress = \"127.0.0.1:1\"\ncolour = \"red\"\n",
        "unknown field `colour`",
    );
    refused(
        "[upstream.high_risk]\naddress = \"127.0.0.1:1\"\n[[limit]]\nname = \"r\"\nstage = \"connect\"\nrate = \"1 / 1m\"\nburst = \"1\"\ncount = \"connections\"\naction = \"reroute\"\n",
        "action = \"reroute\" takes a message",
    );
    // With the second host, the same limit is fine, and the keys are [upstream]'s.
    let c = Generation::parse(
        Path::new("/etc/floodgate/t.toml"),
        &format!("{HEAD}[upstream.high_risk]\naddress = \"[::1]:2626\"\ntls = \"starttls\"\nclient_identity = \"proxy-v2\"\nserver_name = \"hr.example\"\nca_file = \"ca.pem\"\non_identity_refused = \"relay\"\n{REROUTE}"),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let h = c.config.upstream.high_risk.as_ref().unwrap();
    assert_eq!(h.address.get_ref(), "[::1]:2626");
    assert_eq!(
        h.ca_file.as_deref(),
        Some(Path::new("/etc/floodgate/ca.pem"))
    );
}

#[test]
fn bad_pace_configurations_are_refused() {
    refused(
        "[[limit]]\nname = \"p\"\nrate = \"30 / 1m\"\nburst = \"1\"\ncount = \"messages\"\naction = \"pace\"\n",
        "has action = \"pace\" but there is no [hold] section",
    );
    refused(
        "[hold]\ndir = \"/tmp\"\n[[limit]]\nname = \"p\"\nmax = 2\nkey = \"${authenticated_id}\"\naction = \"pace\"\n",
        "action = \"pace\" releases at the limit's rate: it is for rate limits",
    );
    refused(
        "[hold]\ndir = \"/tmp\"\n[[limit]]\nname = \"p\"\nstage = \"helo\"\nrate = \"30 / 1m\"\nburst = \"1\"\ncount = \"commands\"\naction = \"pace\"\n",
        "action = \"pace\" takes a message",
    );
}
