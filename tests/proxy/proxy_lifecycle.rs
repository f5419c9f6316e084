//! floodgate's life cycle and admission, end to end against the recording upstream:
//! graceful (SIGTERM) and fast (SIGINT) shutdown, reload (SIGHUP, including a broken
//! config), the PROXY protocol on listeners (v1, v2, before implicit TLS, trusted and
//! untrusted peers, malformed headers), PROXY v2 towards upstream, and the connection and
//! error caps.
//!
//! Every wait is bounded. No test asserts that something was fast: where speed matters the
//! config makes the slow path impossible within the wait instead (a 60 s grace period with
//! 15–20 s waits).

use crate::common;

use std::net::{IpAddr, SocketAddr, TcpStream};
use std::time::Duration;

use common::*;

/// How long to wait for a log line floodgate writes in reaction to a signal.
const LOG_WAIT: Duration = Duration::from_secs(10);
/// How long floodgate may take to exit once nothing keeps it running.
const EXIT_WAIT: Duration = Duration::from_secs(20);

/// Starts a transaction with one recipient: EHLO, MAIL, RCPT (all 250).
fn begin(c: &mut RawClient, tag: &str) {
    c.ehlo(&format!("{tag}.client.test"));
    let r = c.cmd(&format!("MAIL FROM:<{tag}@client.test>"));
    assert_eq!(r.code, 250, "MAIL: {r:?}");
    let r = c.cmd(&format!("RCPT TO:<{tag}-rcpt@dest.test>"));
    assert_eq!(r.code, 250, "RCPT: {r:?}");
}

/// DATA with a one-line body; returns the final reply.
fn data(c: &mut RawClient, tag: &str) -> Reply {
    let r = c.cmd("DATA");
    assert_eq!(r.code, 354, "DATA: {r:?}");
    c.send(format!("Subject: {tag}\r\n\r\nbody of {tag}\r\n.\r\n").as_bytes());
    c.reply()
}

/// A whole message after the greeting: EHLO, MAIL, RCPT, DATA; asserts the 250.
fn deliver(c: &mut RawClient, tag: &str) {
    begin(c, tag);
    let r = data(c, tag);
    assert_eq!(r.code, 250, "end of data for {tag}: {r:?}");
}

/// QUIT, 221, and the server closes.
fn quit(c: &mut RawClient) {
    let r = c.cmd("QUIT");
    assert_eq!(r.code, 221, "QUIT: {r:?}");
    let rest = c.drain_until_close();
    assert!(rest.is_empty(), "bytes after 221: {}", show(&rest));
}

/// The one recorded message whose sender is `tag@client.test`.
fn message_from(rec: &Recorder, tag: &str) -> Message {
    let sender = format!("{tag}@client.test");
    let all = rec.messages();
    let mut found: Vec<Message> = all
        .iter()
        .filter(|m| m.mail_from == sender)
        .cloned()
        .collect();
    assert_eq!(found.len(), 1, "messages from {sender}: {all:?}");
    found.remove(0)
}

fn assert_code(r: &Reply, code: u16, enhanced: &str) {
    assert_eq!(
        (r.code, r.enhanced().as_deref()),
        (code, Some(enhanced)),
        "want {code} {enhanced}, got {r:?}"
    );
}

/// True if a TCP connection to `addr` is refused (or cannot be made) within 5 s.
fn refuses_connections(addr: SocketAddr) -> bool {
    TcpStream::connect_timeout(&addr, Duration::from_secs(5)).is_err()
}

// ---------------------------------------------------------------------------------------
// Shutdown
// ---------------------------------------------------------------------------------------

#[test]
fn sigterm_lets_a_transaction_finish_refuses_new_connections_and_exits_0_after_quit() {
    let rec = Recorder::plain();
    // A grace period longer than every wait below: whatever happens, happens because the
    // session ended, not because the grace period ran out.
    let mut fg = Floodgate::start(&FloodgateConfig::new(rec.addr()).shutdown_grace("60s"));
    let mut c = RawClient::connect_greeted(fg.addr("plain"));
    begin(&mut c, "midflight");
    let r = c.cmd("DATA");
    assert_eq!(r.code, 354, "{r:?}");
    c.send(b"Subject: midflight\r\n\r\nfirst half, before SIGTERM\r\n");

    fg.signal("TERM");
    fg.wait_stderr("SIGTERM: graceful shutdown", LOG_WAIT);
    // Logged once every accept loop has returned, i.e. the listeners are closed.
    fg.wait_stderr("no longer accepting", LOG_WAIT);
    for l in fg.listeners().to_vec() {
        assert!(
            refuses_connections(l.addr),
            "listener {} still accepts after SIGTERM",
            l.name
        );
    }

    c.send(b"second half, after SIGTERM\r\n.\r\n");
    let r = c.reply();
    assert_eq!(
        r.code, 250,
        "the message in flight must be delivered: {r:?}"
    );
    assert!(
        fg.wait_exit(Duration::ZERO).is_none(),
        "floodgate exited while a session was still open"
    );
    quit(&mut c);
    let status = fg
        .wait_exit(EXIT_WAIT)
        .expect("floodgate did not exit after its last session ended");
    assert!(status.success(), "exit status {status}");

    rec.wait_idle();
    let m = message_from(&rec, "midflight");
    let body = String::from_utf8_lossy(&m.data).into_owned();
    assert!(
        body.contains("first half") && body.contains("second half"),
        "{body:?}"
    );
}

#[test]
fn sigterm_gives_an_idle_session_421_when_the_grace_period_ends() {
    let rec = Recorder::plain();
    let mut fg = Floodgate::start(&FloodgateConfig::new(rec.addr()).shutdown_grace("2s"));
    let mut c = RawClient::connect_greeted(fg.addr("plain"));
    c.ehlo("idle.client.test");
    // Nothing is pending before the signal: NOOP's answer is the last byte so far.
    assert_eq!(c.cmd("NOOP").code, 250);

    fg.signal("TERM");
    fg.wait_stderr("SIGTERM: graceful shutdown", LOG_WAIT);
    let r = c.reply();
    assert_code(&r, 421, "4.3.2");
    let rest = c.drain_until_close();
    assert!(rest.is_empty(), "bytes after 421: {}", show(&rest));
    let status = fg
        .wait_exit(EXIT_WAIT)
        .expect("floodgate did not exit after the grace period");
    assert!(status.success(), "exit status {status}");
    assert!(fg.stderr().contains("shutdown"), "{}", fg.stderr());
}

#[test]
fn sigint_stops_every_session_at_once() {
    let rec = Recorder::plain();
    // 60 s of grace: a 421 within the 15 s reply wait can only come from the fast stop.
    let mut fg = Floodgate::start(&FloodgateConfig::new(rec.addr()).shutdown_grace("60s"));
    let mut idle = RawClient::connect_greeted(fg.addr("plain"));
    idle.ehlo("idle.client.test");
    let mut busy = RawClient::connect_greeted(fg.addr("plain"));
    begin(&mut busy, "interrupted");
    let r = busy.cmd("DATA");
    assert_eq!(r.code, 354);
    busy.send(b"Subject: interrupted\r\n\r\nnever finished\r\n");

    fg.signal("INT");
    fg.wait_stderr("SIGINT: stopping now", LOG_WAIT);
    for c in [&mut idle, &mut busy] {
        let r = c.reply();
        assert_code(&r, 421, "4.3.2");
        let rest = c.drain_until_close();
        assert!(rest.is_empty(), "bytes after 421: {}", show(&rest));
    }
    let status = fg
        .wait_exit(EXIT_WAIT)
        .expect("floodgate did not exit after SIGINT");
    assert!(status.success(), "exit status {status}");
    rec.wait_idle();
    assert!(
        rec.messages().is_empty(),
        "an interrupted message was delivered: {:?}",
        rec.messages()
    );
}

#[test]
fn sigint_during_the_grace_period_stops_at_once() {
    let rec = Recorder::plain();
    let mut fg = Floodgate::start(&FloodgateConfig::new(rec.addr()).shutdown_grace("60s"));
    let mut c = RawClient::connect_greeted(fg.addr("plain"));
    c.ehlo("patient.client.test");
    fg.signal("TERM");
    fg.wait_stderr("no longer accepting", LOG_WAIT);
    // Still served during the grace period.
    assert_eq!(c.cmd("NOOP").code, 250);
    fg.signal("INT");
    fg.wait_stderr("SIGINT: stopping now", LOG_WAIT);
    assert_code(&c.reply(), 421, "4.3.2");
    let rest = c.drain_until_close();
    assert!(rest.is_empty(), "bytes after 421: {}", show(&rest));
    let status = fg
        .wait_exit(EXIT_WAIT)
        .expect("floodgate did not exit after SIGINT");
    assert!(status.success(), "exit status {status}");
}

// ---------------------------------------------------------------------------------------
// Reload
// ---------------------------------------------------------------------------------------

#[test]
fn sighup_reloads_the_config_and_refuses_a_broken_one() {
    let rec = Recorder::plain();
    let cfg = FloodgateConfig::new(rec.addr()).extra("[smtp]\nmax_recipients = 3");
    let fg = Floodgate::start(&cfg);

    // A session opened under the old config (3 recipients).
    let mut old = RawClient::connect_greeted(fg.addr("plain"));
    begin(&mut old, "before");

    let mut reloaded = cfg.clone();
    reloaded.extra = "[smtp]\nmax_recipients = 1\n".into();
    fg.write_config(&reloaded.toml());
    fg.signal("HUP");
    fg.wait_stderr("configuration reloaded", LOG_WAIT);

    let mut new = RawClient::connect_greeted(fg.addr("plain"));
    begin(&mut new, "after");
    assert_code(&new.cmd("RCPT TO:<second@dest.test>"), 452, "4.5.3");
    assert_eq!(data(&mut new, "after").code, 250);
    quit(&mut new);

    // The old session is still there and keeps its own config.
    for n in 2..=3 {
        let r = old.cmd(&format!("RCPT TO:<old{n}@dest.test>"));
        assert_eq!(r.code, 250, "old session, recipient {n}: {r:?}");
    }
    assert_code(&old.cmd("RCPT TO:<old4@dest.test>"), 452, "4.5.3");
    assert_eq!(data(&mut old, "before").code, 250);
    quit(&mut old);

    // A broken file is refused; the last good config stays in force.
    let broken = reloaded
        .toml()
        .replace("max_recipients = 1", "max_recipients = \"one\"");
    assert_ne!(broken, reloaded.toml());
    fg.write_config(&broken);
    fg.signal("HUP");
    fg.wait_stderr("new configuration refused", LOG_WAIT);
    let log = fg.stderr();
    let refused = log
        .lines()
        .find(|l| l.contains("new configuration refused"))
        .unwrap_or_default();
    assert!(
        refused.contains("floodgate.toml"),
        "the refusal should name the file: {refused}"
    );
    let mut later = RawClient::connect_greeted(fg.addr("plain"));
    begin(&mut later, "stillone");
    assert_code(&later.cmd("RCPT TO:<second@dest.test>"), 452, "4.5.3");
    assert_eq!(data(&mut later, "stillone").code, 250);
    quit(&mut later);

    rec.wait_idle();
    assert_eq!(
        message_from(&rec, "before").rcpts,
        ["before-rcpt@dest.test", "old2@dest.test", "old3@dest.test"]
    );
    assert_eq!(message_from(&rec, "after").rcpts, ["after-rcpt@dest.test"]);
    assert_eq!(
        message_from(&rec, "stillone").rcpts,
        ["stillone-rcpt@dest.test"]
    );
}

// ---------------------------------------------------------------------------------------
// PROXY protocol on listeners
// ---------------------------------------------------------------------------------------

/// A PROXY v2 header (PROXY command, TCP over the addresses' family) built by hand from
/// the HAProxy spec: signature, version 2 / command PROXY, family, length, addresses,
/// ports, then `tlv` as TLV bytes.
fn proxy_v2(src: SocketAddr, dst: SocketAddr, tlv: &[u8]) -> Vec<u8> {
    let mut h = b"\r\n\r\n\x00\r\nQUIT\n".to_vec();
    h.push(0x21);
    let mut body = Vec::new();
    match (src.ip(), dst.ip()) {
        (IpAddr::V4(s), IpAddr::V4(d)) => {
            h.push(0x11);
            body.extend_from_slice(&s.octets());
            body.extend_from_slice(&d.octets());
        }
        (IpAddr::V6(s), IpAddr::V6(d)) => {
            h.push(0x21);
            body.extend_from_slice(&s.octets());
            body.extend_from_slice(&d.octets());
        }
        _ => panic!("mixed families"),
    }
    body.extend_from_slice(&src.port().to_be_bytes());
    body.extend_from_slice(&dst.port().to_be_bytes());
    body.extend_from_slice(tlv);
    h.extend_from_slice(&(body.len() as u16).to_be_bytes());
    h.extend_from_slice(&body);
    h
}

/// A PROXY v2 LOCAL header (a health check: the socket's address counts).
fn proxy_v2_local() -> Vec<u8> {
    let mut h = b"\r\n\r\n\x00\r\nQUIT\n".to_vec();
    h.extend_from_slice(&[0x20, 0x00, 0x00, 0x00]);
    h
}

fn sa(s: &str) -> SocketAddr {
    s.parse().unwrap()
}

/// A floodgate with PROXY-enabled plain and implicit-TLS listeners, XCLIENT upstream.
fn proxy_floodgate(rec: &Recorder, trusted: &[&str]) -> Floodgate {
    Floodgate::start(
        &FloodgateConfig::new(rec.addr())
            .identity("xclient")
            .trusted_proxies(trusted)
            .listeners(vec![
                ListenerSpec::new("plain", "none").with_proxy_protocol(),
                ListenerSpec::new("submissions", "implicit").with_proxy_protocol(),
            ]),
    )
}

/// Connects, sends `header` before anything else, expects the greeting, sends a message.
fn deliver_behind(addr: SocketAddr, header: &[u8], tag: &str) {
    let mut c = RawClient::connect(addr);
    c.send(header);
    let g = c.reply();
    assert_eq!(g.code, 220, "greeting after the header for {tag}: {g:?}");
    deliver(&mut c, tag);
    quit(&mut c);
}

#[test]
fn proxy_headers_from_a_trusted_peer_set_the_client_address() {
    let rec = Recorder::plain();
    let fg = proxy_floodgate(&rec, &["127.0.0.1/32"]);
    let addr = fg.addr("plain");
    deliver_behind(addr, b"PROXY TCP4 192.0.2.7 127.0.0.1 5555 25\r\n", "v1");
    deliver_behind(
        addr,
        b"PROXY TCP6 2001:db8::7 2001:db8::1 5556 25\r\n",
        "v1six",
    );
    deliver_behind(
        addr,
        &proxy_v2(sa("198.51.100.9:40000"), sa("127.0.0.1:587"), &[]),
        "v2",
    );
    // A TLV (type 0x04 NOOP, 3 octets) after the addresses is skipped.
    deliver_behind(
        addr,
        &proxy_v2(
            sa("[2001:db8::5]:40001"),
            sa("[2001:db8::1]:587"),
            &[0x04, 0x00, 0x03, 1, 2, 3],
        ),
        "v2six",
    );
    deliver_behind(addr, &proxy_v2_local(), "local");

    rec.wait_idle();
    let want = [
        ("v1", "192.0.2.7", "5555"),
        ("v1six", "IPV6:2001:db8::7", "5556"),
        ("v2", "198.51.100.9", "40000"),
        ("v2six", "IPV6:2001:db8::5", "40001"),
        ("local", "127.0.0.1", ""),
    ];
    for (tag, ip, port) in want {
        let m = message_from(&rec, tag);
        assert_eq!(
            m.xclient.get("ADDR").map(String::as_str),
            Some(ip),
            "{tag}: {m:?}"
        );
        if !port.is_empty() {
            assert_eq!(
                m.xclient.get("PORT").map(String::as_str),
                Some(port),
                "{tag}: {m:?}"
            );
        }
    }
    assert!(
        !rec.commands().iter().any(|c| c.starts_with("PROXY")),
        "a PROXY line reached upstream: {:?}",
        rec.commands()
    );
}

#[test]
fn proxy_header_comes_before_the_tls_handshake_on_an_implicit_listener() {
    let rec = Recorder::plain();
    let fg = proxy_floodgate(&rec, &["127.0.0.1/32"]);
    let v1 = b"PROXY TCP4 203.0.113.50 127.0.0.1 6000 465\r\n".to_vec();
    let v2 = proxy_v2(sa("203.0.113.51:6001"), sa("127.0.0.1:465"), &[]);
    let hex = |b: &[u8]| b.iter().map(|x| format!("{x:02x}")).collect::<String>();
    let body = format!(
        r#"
class Behind(smtplib.SMTP_SSL):
    """SMTP_SSL that writes a PROXY header on the TCP connection before the handshake."""
    header = b""
    def _get_socket(self, host, port, timeout):
        s = socket.create_connection((host, port), timeout)
        s.sendall(self.header)
        return self.context.wrap_socket(s, server_hostname=self._host)

for tag, header in (("tlsv1", "{}"), ("tlsv2", "{}")):
    Behind.header = bytes.fromhex(header)
    with Behind(HOST, PORT, timeout=20, context=ctx()) as s:
        s.ehlo("behind.client.test")
        s.sendmail(tag + "@client.test", ["r@dest.test"], "Subject: %s\r\n\r\nhi\r\n" % tag)
    out(tag, "sent")
"#,
        hex(&v1),
        hex(&v2)
    );
    let out = smtplib(fg.addr("submissions"), &body, CLIENT_TIMEOUT);
    assert!(out.ok(), "{out}");
    assert_eq!(out.field("tlsv1").as_deref(), Some("sent"), "{out}");
    assert_eq!(out.field("tlsv2").as_deref(), Some("sent"), "{out}");
    rec.wait_idle();
    for (tag, ip) in [("tlsv1", "203.0.113.50"), ("tlsv2", "203.0.113.51")] {
        let m = message_from(&rec, tag);
        assert_eq!(m.xclient.get("ADDR").map(String::as_str), Some(ip), "{m:?}");
    }
}

#[test]
fn proxy_header_from_an_untrusted_peer_is_refused_with_421() {
    let rec = Recorder::plain();
    let fg = proxy_floodgate(&rec, &["192.0.2.0/24"]);
    let mut c = RawClient::connect(fg.addr("plain"));
    // Sent at once, as a load balancer would. Honouring it would let anyone choose their
    // address; treating it as a command would count every client behind the balancer as
    // the balancer: floodgate refuses it with 421 and closes.
    c.send(b"PROXY TCP4 192.0.2.7 127.0.0.1 5555 25\r\nMAIL FROM:<x@client.test>\r\n");
    let g = c.reply();
    assert_eq!(g.code, 220, "{g:?}");
    let r = c.reply();
    assert_eq!(r.code, 421, "the PROXY line must get 421: {r:?}");
    assert!(
        r.text().contains("4.7.0")
            && r.text()
                .contains("PROXY header not accepted from 127.0.0.1"),
        "{r:?}"
    );
    let rest = c.drain_until_close();
    assert!(rest.is_empty(), "nothing after the 421: {}", show(&rest));
    // A legitimate session on the same listener still delivers.
    let mut ok = RawClient::connect(fg.addr("plain"));
    assert_eq!(ok.reply().code, 220);
    deliver(&mut ok, "untrusted-bystander");
    quit(&mut ok);
    rec.wait_idle();
    let m = message_from(&rec, "untrusted-bystander");
    assert_eq!(
        m.xclient.get("ADDR").map(String::as_str),
        Some("127.0.0.1"),
        "{m:?}"
    );
    assert!(
        !rec.commands()
            .iter()
            .any(|c| c.starts_with("PROXY") || c.contains("x@client.test")),
        "the refused session reached upstream: {:?}",
        rec.commands()
    );
}

#[test]
fn malformed_proxy_header_from_a_trusted_peer_closes_the_connection() {
    let rec = Recorder::plain();
    let fg = proxy_floodgate(&rec, &["127.0.0.1/32"]);
    let mut bad_version = proxy_v2(sa("192.0.2.1:1"), sa("192.0.2.2:2"), &[]);
    bad_version[12] = 0x31;
    let mut short_block = proxy_v2(sa("192.0.2.1:1"), sa("192.0.2.2:2"), &[]);
    short_block.truncate(16 + 4);
    short_block[14..16].copy_from_slice(&4u16.to_be_bytes());
    let cases: [(&str, &[u8]); 6] = [
        ("v1 bad address", b"PROXY TCP4 not-an-ip 127.0.0.1 1 2\r\n"),
        ("v1 bad protocol", b"PROXY TCP9 192.0.2.1 127.0.0.1 1 2\r\n"),
        ("v1 bare LF", b"PROXY TCP4 192.0.2.1 127.0.0.1 1 2\n"),
        ("not PROXY at all", b"EHLO no.header.test\r\n"),
        ("v2 version 3", &bad_version),
        ("v2 address block too short", &short_block),
    ];
    for (what, header) in cases {
        let mut c = RawClient::connect(fg.addr("plain"));
        // The peer may already be gone when the write happens; that is fine.
        let _ = c.try_send(header);
        let got = c.drain_until_close();
        assert!(
            got.is_empty(),
            "{what}: floodgate answered instead of closing: {}",
            show(&got)
        );
    }
    // The listener still serves a good header.
    deliver_behind(
        fg.addr("plain"),
        b"PROXY TCP4 192.0.2.8 127.0.0.1 5555 25\r\n",
        "good",
    );
    rec.wait_idle();
    assert_eq!(
        rec.events_of("session_start").len(),
        1,
        "an upstream session was opened for a malformed header"
    );
    assert_eq!(
        message_from(&rec, "good")
            .xclient
            .get("ADDR")
            .map(String::as_str),
        Some("192.0.2.8")
    );
}

// ---------------------------------------------------------------------------------------
// PROXY v2 towards upstream
// ---------------------------------------------------------------------------------------

#[test]
fn proxy_v2_identity_tells_upstream_the_client_address_and_port() {
    let rec = Recorder::start(RecorderOptions {
        proxy_protocol: true,
        ..RecorderOptions::default()
    });
    let fg = Floodgate::start(
        &FloodgateConfig::new(rec.addr())
            .identity("proxy-v2")
            .trusted_proxies(&["127.0.0.1/32"])
            .listeners(vec![
                ListenerSpec::new("plain", "none"),
                ListenerSpec::new("behind", "none").with_proxy_protocol(),
            ]),
    );
    let mut c = RawClient::connect_greeted(fg.addr("plain"));
    let me = c.local_addr();
    deliver(&mut c, "direct");
    quit(&mut c);
    rec.wait_idle();
    deliver_behind(
        fg.addr("behind"),
        b"PROXY TCP4 192.0.2.7 127.0.0.1 5555 25\r\n",
        "relayed",
    );
    rec.wait_idle();

    let proxies = rec.events_of("proxy");
    assert_eq!(proxies.len(), 2, "{proxies:?}");
    for p in &proxies {
        assert!(p.get("error").is_none(), "upstream could not parse: {p}");
        assert_eq!(p["command"], "PROXY", "{p}");
        assert_eq!(p["family"], "TCP4", "{p}");
    }
    assert_eq!(proxies[0]["src"], me.to_string().as_str());
    assert_eq!(proxies[0]["dst"], fg.addr("plain").to_string().as_str());
    assert_eq!(proxies[1]["src"], "192.0.2.7:5555");
    // Behind a balancer the client connected to the balancer's address, as its header says.
    assert_eq!(proxies[1]["dst"], "127.0.0.1:25");
    // Both messages went through sessions that began with the header.
    for tag in ["direct", "relayed"] {
        let m = message_from(&rec, tag);
        assert!(
            proxies
                .iter()
                .any(|p| p["session"].as_u64() == Some(m.session)),
            "{tag}: no PROXY header in its upstream session"
        );
        assert!(m.xclient.is_empty(), "XCLIENT was sent too: {m:?}");
    }
}

// ---------------------------------------------------------------------------------------
// Caps
// ---------------------------------------------------------------------------------------

#[test]
fn per_ip_cap_refuses_the_third_connection_until_one_closes() {
    let rec = Recorder::plain();
    let fg =
        Floodgate::start(&FloodgateConfig::new(rec.addr()).server("max_connections_per_ip", "2"));
    let addr = fg.addr("plain");
    let mut a = RawClient::connect_greeted(addr);
    let mut b = RawClient::connect_greeted(addr);
    let mut c = RawClient::connect(addr);
    assert_code(&c.reply(), 421, "4.7.0");
    let rest = c.drain_until_close();
    assert!(rest.is_empty(), "bytes after 421: {}", show(&rest));

    // The first two are unharmed.
    deliver(&mut a, "first");
    b.ehlo("second.client.test");
    quit(&mut b);

    // Once the second session has ended (floodgate frees its place right after), a new
    // connection is admitted; until then it may still be refused.
    let mut d = wait_until(
        Duration::from_secs(10),
        "a new session to be admitted",
        || {
            let mut d = RawClient::connect(addr);
            let r = d.reply();
            match r.code {
                220 => Some(d),
                421 => None,
                _ => panic!("unexpected greeting {r:?}"),
            }
        },
    );
    deliver(&mut d, "fourth");
    quit(&mut d);
    quit(&mut a);
    rec.wait_idle();
    message_from(&rec, "first");
    message_from(&rec, "fourth");
}

#[test]
fn max_errors_closes_the_session_with_421() {
    let rec = Recorder::plain();
    let fg = Floodgate::start(&FloodgateConfig::new(rec.addr()).server("max_errors", "3"));
    let mut c = RawClient::connect_greeted(fg.addr("plain"));
    c.ehlo("clumsy.client.test");
    // Three bad commands and a good one pipelined: the good one must never run.
    c.send(b"FROB\r\nMAIL TO:<x@y.test>\r\nXYZZY plugh\r\nNOOP\r\n");
    let replies = c.replies_until_close();
    assert_eq!(replies.len(), 4, "{replies:?}");
    for r in &replies[..3] {
        assert_eq!(r.class(), 5, "{replies:?}");
    }
    assert_code(&replies[3], 421, "4.7.0");
    rec.wait_idle();
    assert!(
        !rec.commands().iter().any(|c| c == "NOOP"),
        "{:?}",
        rec.commands()
    );
}
