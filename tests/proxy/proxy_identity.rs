//! How floodgate tells upstream who the client is, against the recording upstream: an
//! XCLIENT upstream does not offer or refuses, and a PROXY v2 header upstream does not
//! expect (or expects and does not get), refuse the client with 421 4.3.5 and relay
//! nothing, unless the operator asked to relay anyway; XCLIENT carries the client's
//! forward-confirmed name and the address it connected to.

use crate::common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use common::*;

const REFUSED_LOG: &str = "upstream did not take the client's identity: refusing the client";

fn assert_refused(r: &Reply) {
    assert_eq!(
        (r.code, r.enhanced().as_deref()),
        (421, Some("4.3.5")),
        "want 421 4.3.5, got {r:?}"
    );
}

/// Sends one message through an already greeted client; returns the end-of-data reply.
fn send_message(c: &mut RawClient, tag: &str) -> Reply {
    let r = c.ehlo("client.test");
    assert_eq!(r.code, 250, "EHLO: {r:?}");
    c.send(
        format!("MAIL FROM:<{tag}@client.test>\r\nRCPT TO:<r@dest.test>\r\nDATA\r\n").as_bytes(),
    );
    let rs = c.replies(3);
    assert_eq!(
        rs.iter().map(|r| r.code).collect::<Vec<_>>(),
        [250, 250, 354],
        "{rs:?}"
    );
    c.send(format!("Subject: {tag}\r\n\r\nbody\r\n.\r\n").as_bytes());
    c.reply()
}

/// One series of floodgate's `/metrics` at `addr` (0 when absent).
pub(crate) fn metric(addr: SocketAddr, series: &str) -> u64 {
    let mut s = TcpStream::connect(addr).expect("connect metrics");
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).expect("metrics answer");
    out.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
        .map_or(0, |v| v.parse().expect("integer"))
}

fn xclient_recorder(opts: RecorderOptions) -> (Recorder, Floodgate) {
    let rec = Recorder::start(opts);
    let fg = Floodgate::start(&FloodgateConfig::new(rec.addr()).identity("xclient"));
    (rec, fg)
}

#[test]
fn xclient_not_offered_refuses_the_client_at_the_greeting() {
    let (rec, fg) = xclient_recorder(RecorderOptions {
        xclient_attrs: Some(String::new()),
        ..RecorderOptions::default()
    });
    let mut c = RawClient::connect(fg.addr("plain"));
    let me = c.local_addr();
    assert_refused(&c.reply());
    assert!(c.is_closed(), "the session must end after the 421");
    fg.wait_stderr(REFUSED_LOG, Duration::from_secs(10));
    let log = fg.stderr();
    let line = log.lines().find(|l| l.contains(REFUSED_LOG)).unwrap();
    assert!(line.contains("ERROR"), "{line}");
    assert!(line.contains(&me.ip().to_string()), "no client in {line}");
    assert!(line.contains("does not offer XCLIENT"), "{line}");
    rec.wait_idle();
    assert!(rec.messages().is_empty());
    let verbs: Vec<String> = rec.commands();
    assert!(
        !verbs
            .iter()
            .any(|c| c.starts_with("MAIL") || c.starts_with("XCLIENT")),
        "{verbs:?}"
    );
}

#[test]
fn xclient_refused_with_550_refuses_the_client_and_relays_nothing() {
    let rec = Recorder::start(RecorderOptions {
        xclient_reply: Some("550 5.7.0 Error: insufficient authorization".into()),
        ..RecorderOptions::default()
    });
    let metrics = closed_port();
    let fg = Floodgate::start(
        &FloodgateConfig::new(rec.addr())
            .identity("xclient")
            .extra(&format!("[metrics]\naddress = \"{metrics}\"\n")),
    );
    let series = "floodgate_upstream_identity_refused_total{reason=\"xclient_refused\"}";
    assert_eq!(metric(metrics, series), 0);
    let mut c = RawClient::connect_greeted(fg.addr("plain"));
    assert_refused(&c.cmd("EHLO client.test"));
    assert!(c.is_closed());
    fg.wait_stderr(REFUSED_LOG, Duration::from_secs(10));
    let log = fg.stderr();
    let line = log.lines().find(|l| l.contains(REFUSED_LOG)).unwrap();
    assert!(
        line.contains("550 5.7.0 Error: insufficient authorization"),
        "upstream's answer missing: {line}"
    );
    rec.wait_idle();
    assert_eq!(rec.events_of("xclient_refused").len(), 1);
    assert!(rec.messages().is_empty());
    let commands = rec.commands();
    assert!(
        !commands.iter().any(|c| c.starts_with("EHLO client.test")),
        "{commands:?}"
    );
    assert_eq!(
        commands.last().map(String::as_str),
        Some("QUIT"),
        "{commands:?}"
    );
    assert_eq!(metric(metrics, series), 1);
}

#[test]
fn relay_anyway_only_when_the_operator_says_so() {
    let rec = Recorder::start(RecorderOptions {
        xclient_reply: Some("550 5.7.0 Error: insufficient authorization".into()),
        ..RecorderOptions::default()
    });
    let fg = Floodgate::start(
        &FloodgateConfig::new(rec.addr())
            .identity("xclient")
            .upstream_key("on_identity_refused", "\"relay\""),
    );
    let mut c = RawClient::connect_greeted(fg.addr("plain"));
    assert_eq!(send_message(&mut c, "anyway").code, 250);
    fg.wait_stderr(
        "relaying with floodgate's own address",
        Duration::from_secs(10),
    );
    let m = rec.messages();
    assert_eq!(m.len(), 1);
    assert!(m[0].xclient.is_empty(), "{m:?}");
}

#[test]
fn ipv6_client_in_front_of_an_ipv4_only_upstream_is_refused() {
    if std::net::TcpListener::bind("[::1]:0").is_err() {
        eprintln!("no IPv6 loopback here: skipped");
        return;
    }
    let rec = Recorder::start(RecorderOptions {
        xclient_ipv4_only: true,
        ..RecorderOptions::default()
    });
    let fg = Floodgate::start(
        &FloodgateConfig::new(rec.addr())
            .identity("xclient")
            .listeners(vec![
                ListenerSpec::new("plain", "none"),
                ListenerSpec::new("six", "none").at("[::1]:0"),
            ]),
    );
    // IPv4 clients still go through.
    let mut c = RawClient::connect_greeted(fg.addr("plain"));
    assert_eq!(send_message(&mut c, "four").code, 250);
    assert_eq!(c.cmd("QUIT").code, 221);
    let mut c = RawClient::connect_greeted(fg.addr("six"));
    assert_refused(&c.cmd("EHLO client.test"));
    fg.wait_stderr("Bad ADDR syntax", Duration::from_secs(10));
    rec.wait_idle();
    let m = rec.messages();
    assert_eq!(m.len(), 1, "{m:?}");
    assert_eq!(m[0].mail_from, "four@client.test");
}

#[test]
fn proxy_header_upstream_does_not_expect_is_not_answered_off_by_one() {
    // The recorder without --proxy-protocol reads the header as command lines and answers
    // each with an error, as Postfix (500 5.5.2) and Exim do.
    let rec = Recorder::plain();
    let fg = Floodgate::start(&FloodgateConfig::new(rec.addr()).identity("proxy-v2"));
    let mut c = RawClient::connect(fg.addr("plain"));
    assert_refused(&c.reply());
    assert!(c.is_closed());
    fg.wait_stderr(REFUSED_LOG, Duration::from_secs(10));
    let log = fg.stderr();
    let line = log.lines().find(|l| l.contains(REFUSED_LOG)).unwrap();
    assert!(
        line.contains("answered the PROXY v2 header as SMTP commands"),
        "{line}"
    );
    rec.wait_idle();
    assert!(rec.messages().is_empty());
}

#[test]
fn upstream_that_waits_for_a_proxy_header_is_reported() {
    let rec = Recorder::start(RecorderOptions {
        proxy_protocol: true,
        proxy_missing_reply: Some("503 Command refused, required Proxy negotiation failed".into()),
        ..RecorderOptions::default()
    });
    let fg = Floodgate::start(&FloodgateConfig::new(rec.addr()).identity("xclient"));
    let mut c = RawClient::connect(fg.addr("plain"));
    let r = c.reply();
    assert_refused(&r);
    fg.wait_stderr(REFUSED_LOG, Duration::from_secs(10));
    let log = fg.stderr();
    let line = log.lines().find(|l| l.contains(REFUSED_LOG)).unwrap();
    assert!(line.contains("503 Command refused"), "{line}");
    assert!(line.contains("does it expect a PROXY header"), "{line}");
}

#[test]
fn xclient_carries_the_confirmed_name_and_the_address_connected_to() {
    let (rec, fg) = xclient_recorder(RecorderOptions::default());
    let mut c = RawClient::connect_greeted(fg.addr("plain"));
    assert_eq!(send_message(&mut c, "named").code, 250);
    let x = rec.wait_events("xclient", 1);
    let attrs = &x[0]["attrs"];
    // /etc/hosts names 127.0.0.1 (forward-confirmed: the name leads back to it).
    let name = attrs["NAME"].as_str().unwrap();
    assert!(!name.starts_with('['), "no name for 127.0.0.1: {attrs}");
    assert_eq!(attrs["REVERSE_NAME"].as_str(), Some(name), "{attrs}");
    assert_eq!(attrs["DESTADDR"].as_str(), Some("127.0.0.1"), "{attrs}");
    let port = fg.addr("plain").port().to_string();
    assert_eq!(attrs["DESTPORT"].as_str(), Some(port.as_str()), "{attrs}");
    assert_eq!(attrs["ADDR"].as_str(), Some("127.0.0.1"), "{attrs}");
}

#[test]
fn name_lookups_can_be_turned_off() {
    let rec = Recorder::plain();
    let fg = Floodgate::start(
        &FloodgateConfig::new(rec.addr())
            .identity("xclient")
            .server("resolve_client_names", "false"),
    );
    let mut c = RawClient::connect_greeted(fg.addr("plain"));
    assert_eq!(send_message(&mut c, "anon").code, 250);
    let x = rec.wait_events("xclient", 1);
    assert_eq!(x[0]["attrs"]["NAME"].as_str(), Some("[UNAVAILABLE]"));
    assert_eq!(
        x[0]["attrs"]["REVERSE_NAME"].as_str(),
        Some("[UNAVAILABLE]")
    );
}

fn received_floodgate(rec: &Recorder, show_user: bool) -> Floodgate {
    Floodgate::start(
        &FloodgateConfig::new(rec.addr())
            .identity("proxy-v2")
            .extra(&format!(
                "[smtp]\nadd_received = true\nreceived_show_user = {show_user}\nmax_message_size = 2000\n"
            )),
    )
}

fn swaks_to(addr: SocketAddr, extra: &[&str]) -> Output {
    let a = addr.to_string();
    let mut args = vec![
        "--server",
        &a,
        "--from",
        "s@client.test",
        "--to",
        "r@dest.test",
        "--helo",
        "swaks.client.test",
    ];
    args.extend_from_slice(extra);
    swaks(&args)
}

#[test]
fn received_line_names_the_client_hop_and_its_tls() {
    let rec = Recorder::start(RecorderOptions {
        proxy_protocol: true,
        ..RecorderOptions::default()
    });
    let fg = received_floodgate(&rec, true);
    let ca = ca_file().to_string_lossy().into_owned();
    let out = swaks_to(
        fg.addr("submission"),
        &[
            "--tls",
            "--tls-verify",
            "--tls-ca-path",
            &ca,
            "--auth",
            "PLAIN",
            "--auth-user",
            USER,
            "--auth-password",
            PASSWORD,
        ],
    );
    assert!(out.ok(), "{out}");
    let m = rec.messages();
    assert_eq!(m.len(), 1);
    let data = String::from_utf8_lossy(&m[0].data).into_owned();
    let head = data.split("\r\n\r\n").next().unwrap();
    let first: Vec<&str> = head.split("\r\n").take(5).collect();
    assert!(
        first[0].starts_with("Received: from swaks.client.test (localhost [127.0.0.1])"),
        "{data}"
    );
    assert!(
        first[1].starts_with("\t(using TLSv1.") && first[1].contains(" with cipher TLS_"),
        "{data}"
    );
    assert_eq!(
        first[2],
        format!("\t(Authenticated sender: {USER})"),
        "{data}"
    );
    assert_eq!(
        first[3], "\tby floodgate.test (floodgate) with ESMTPSA;",
        "{data}"
    );
    assert!(
        first[4].starts_with('\t') && first[4].ends_with(" +0000"),
        "{data}"
    );
}

#[test]
fn received_line_without_tls_or_user_and_counted_in_the_size() {
    let rec = Recorder::start(RecorderOptions {
        proxy_protocol: true,
        ..RecorderOptions::default()
    });
    let fg = received_floodgate(&rec, false);
    let mut c = RawClient::connect_greeted(fg.addr("plain"));
    assert_eq!(send_message(&mut c, "small").code, 250);
    let m = rec.messages();
    let data = String::from_utf8_lossy(&m[0].data).into_owned();
    assert!(
        data.starts_with("Received: from client.test (localhost [127.0.0.1])\r\n\tby floodgate.test (floodgate) with ESMTP;\r\n\t"),
        "{data}"
    );
    let received = data.find("Subject:").unwrap();
    // A message that fits max_message_size alone but not with the Received line is refused:
    // what floodgate relays never exceeds the limit.
    let body = "x".repeat(2000 - received - "Subject: big\r\n\r\n".len() - 2 + 1);
    c.send(b"MAIL FROM:<big@client.test>\r\nRCPT TO:<r@dest.test>\r\nDATA\r\n");
    assert_eq!(c.replies(3)[2].code, 354);
    c.send(format!("Subject: big\r\n\r\n{body}\r\n.\r\n").as_bytes());
    let r = c.reply();
    assert_eq!(r.code, 552, "{r:?}");
    assert_eq!(rec.messages().len(), 1);
}

#[test]
fn upstream_that_refuses_every_command_for_want_of_a_proxy_header_is_reported() {
    // As Exim 4.96 with floodgate in hosts_proxy and no header sent: a 220 after its wait,
    // then 503 to everything. Whether floodgate's own EHLO or the client's meets the 503,
    // the client gets 421 4.3.5, never the 503 as its answer.
    for identity in ["xclient", "none"] {
        let rec = Recorder::start(RecorderOptions {
            proxy_protocol: true,
            proxy_missing_503: true,
            ..RecorderOptions::default()
        });
        let fg = Floodgate::start(&FloodgateConfig::new(rec.addr()).identity(identity));
        let mut c = RawClient::connect(fg.addr("plain"));
        let first = c.reply();
        let r = if identity == "none" {
            assert_eq!(first.code, 220, "{first:?}");
            c.cmd("EHLO client.test")
        } else {
            first
        };
        assert_refused(&r);
        assert!(c.is_closed(), "{identity}");
        fg.wait_stderr(REFUSED_LOG, Duration::from_secs(10));
        let log = fg.stderr();
        let line = log.lines().find(|l| l.contains(REFUSED_LOG)).unwrap();
        assert!(
            line.contains("it expects a PROXY header"),
            "{identity}: {line}"
        );
    }
}

/// Upstream's command lines of each of its sessions, in session order.
fn commands_by_session(rec: &Recorder) -> Vec<Vec<String>> {
    let mut by: std::collections::BTreeMap<u64, Vec<String>> = Default::default();
    for e in rec.events_of("command") {
        let session = e["session"].as_u64().expect("session id");
        let line = e["line"].as_str().expect("command line").to_string();
        by.entry(session).or_default().push(line);
    }
    by.into_values().collect()
}

/// Three client sessions through floodgate, one message each; every message arrives with
/// the client's address.
fn three_sessions(rec: &Recorder, fg: &Floodgate) {
    for tag in ["one", "two", "three"] {
        let mut c = RawClient::connect_greeted(fg.addr("plain"));
        assert_eq!(send_message(&mut c, tag).code, 250, "{tag}");
        assert_eq!(c.cmd("QUIT").code, 221);
    }
    rec.wait_idle();
    let m = rec.messages();
    assert_eq!(m.len(), 3, "{m:?}");
    for m in &m {
        assert_eq!(
            m.xclient.get("ADDR").map(String::as_str),
            Some("127.0.0.1"),
            "{m:?}"
        );
    }
}

#[test]
fn later_connections_send_xclient_before_any_ehlo_of_floodgates_own() {
    let rec = Recorder::plain();
    let fg = Floodgate::start(&FloodgateConfig::new(rec.addr()).identity("xclient"));
    three_sessions(&rec, &fg);
    let s = commands_by_session(&rec);
    assert_eq!(s.len(), 3, "{s:?}");
    // The first connection learns what upstream offers with floodgate's own EHLO.
    assert!(
        s[0][0].starts_with("EHLO ") && s[0][0] != "EHLO client.test",
        "{s:?}"
    );
    assert!(s[0][1].starts_with("XCLIENT "), "{s:?}");
    // The later ones open with XCLIENT: the only EHLO is the client's, after it.
    for later in &s[1..] {
        assert!(later[0].starts_with("XCLIENT "), "{s:?}");
        assert_eq!(later[1], "EHLO client.test", "{s:?}");
        assert_eq!(
            later.iter().filter(|c| c.starts_with("EHLO ")).count(),
            1,
            "{s:?}"
        );
    }
    assert!(rec.events_of("xclient_refused").is_empty());
}

#[test]
fn an_upstream_that_wants_ehlo_before_xclient_gets_it_after_one_refusal() {
    let rec = Recorder::start(RecorderOptions {
        xclient_after_ehlo: true,
        ..RecorderOptions::default()
    });
    let fg = Floodgate::start(&FloodgateConfig::new(rec.addr()).identity("xclient"));
    three_sessions(&rec, &fg);
    let s = commands_by_session(&rec);
    assert_eq!(s.len(), 3, "{s:?}");
    let own_ehlo = s[0][0].clone();
    assert!(
        own_ehlo.starts_with("EHLO ") && own_ehlo != "EHLO client.test",
        "{s:?}"
    );
    // The second connection tries XCLIENT first, is refused, and says EHLO before trying
    // again; the client never sees the refusal.
    assert!(s[1][0].starts_with("XCLIENT "), "{s:?}");
    assert_eq!(s[1][1], own_ehlo, "{s:?}");
    assert!(s[1][2].starts_with("XCLIENT "), "{s:?}");
    assert_eq!(s[1][3], "EHLO client.test", "{s:?}");
    // From then on this upstream gets EHLO first, as at the start.
    assert_eq!(s[2][0], own_ehlo, "{s:?}");
    assert!(s[2][1].starts_with("XCLIENT "), "{s:?}");
    assert_eq!(rec.events_of("xclient_refused").len(), 1);
}
