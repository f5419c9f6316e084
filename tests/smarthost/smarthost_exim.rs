//! floodgate in front of a real Exim 4.96 (Debian's exim4-daemon-heavy, unpacked by
//! .ci/install-exim.sh), passing the client on with PROXY v2 (`hosts_proxy`; Exim has no
//! XCLIENT). One Exim daemon serves the whole file (tests/common/exim.rs); each test
//! starts its own floodgate and tells its messages apart by envelope sender.
//!
//! Also pinned here, talking to Exim directly: what Exim answers when floodgate's PROXY
//! settings and Exim's disagree, and Exim's own per-host rules behind a proxy (the facts
//! the book's "Deploying in front of Exim" (docs/deployment/exim.md) relies on).

use crate::common;
use crate::common::exim;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use common::*;
use exim::*;

/// How long a relayed message may take to reach Exim's maildir.
const DELIVERY: Duration = Duration::from_secs(30);

/// floodgate in front of Exim's `port`, passing the client on with PROXY v2; AUTH is
/// allowed on the plain listener so tests can show AUTH without TLS on either hop.
fn floodgate_before(ex: &Exim, port: EximPort, extra: &str) -> Floodgate {
    let cfg = FloodgateConfig::new(ex.addr(port))
        .identity("proxy-v2")
        .auth_without_tls(true)
        .log_level("info")
        .extra(extra);
    Floodgate::start(&cfg)
}

/// The PROXY v2 header floodgate would send for a TCP/IPv4 client `src` that connected
/// to `dst` (the wire format of HAProxy's proxy-protocol.txt, section 2.2).
fn proxy_v2(src: SocketAddr, dst: SocketAddr) -> Vec<u8> {
    let (SocketAddr::V4(s), SocketAddr::V4(d)) = (src, dst) else {
        panic!("IPv4 only here");
    };
    let mut h = b"\r\n\r\n\0\r\nQUIT\n".to_vec();
    h.extend_from_slice(&[0x21, 0x11, 0, 12]);
    h.extend_from_slice(&s.ip().octets());
    h.extend_from_slice(&d.ip().octets());
    h.extend_from_slice(&s.port().to_be_bytes());
    h.extend_from_slice(&d.port().to_be_bytes());
    h
}

/// Every Received header's first words (`from ... by ...`), newest first.
fn received(m: &EximMessage) -> Vec<String> {
    m.header("Received")
}

#[test]
fn relayed_message_names_the_real_client_not_floodgate() {
    let ex = Exim::shared();
    let fg = floodgate_before(ex, EximPort::Proxy, "");
    let plain = fg.addr("plain");
    // The client comes from 127.0.0.2; floodgate connects to Exim from 127.0.0.1.
    let out = smtplib(
        plain,
        r#"
s = smtplib.SMTP(HOST, PORT, timeout=30, source_address=("127.0.0.2", 0))
out("client_port", s.sock.getsockname()[1])
s.ehlo("client.test")
s.sendmail("relay@client.test", ["bob@example.test"], b"Subject: relayed\r\n\r\nhello exim\r\n")
s.quit()
"#,
        CLIENT_TIMEOUT,
    );
    assert!(out.ok(), "{out}");
    let client_port = out.field("client_port").expect("client port");
    let msgs = ex.wait_messages_from("relay@client.test", 1, DELIVERY);
    assert_eq!(msgs.len(), 1, "{msgs:?}");
    let m = &msgs[0];
    assert_eq!(m.envelope_to, vec!["bob@example.test"]);
    assert!(m.body().ends_with(b"hello exim\n"), "{}", show(&m.raw));

    // Exim's own Received header names the client: address, port and HELO name.
    let top = &received(m)[0];
    assert!(
        top.starts_with(&format!(
            "from [127.0.0.2] (port={client_port} helo=client.test) by {EXIM_HOSTNAME}"
        )),
        "{top}"
    );
    assert!(!top.contains("127.0.0.1"), "{top}");

    // What Exim's ACLs see: the client as sender_host, floodgate as the proxy, the
    // floodgate listener the client used as proxy_external, Exim's own port as
    // received_port.
    let v = m.vars();
    assert_eq!(v["sender_host_address"], "127.0.0.2", "{v:?}");
    assert_eq!(v["sender_host_port"], client_port, "{v:?}");
    assert_eq!(v["proxy_session"], "yes", "{v:?}");
    assert_eq!(v["proxy_local_address"], "127.0.0.1", "{v:?}");
    assert_eq!(v["proxy_external_address"], "127.0.0.1", "{v:?}");
    assert_eq!(v["proxy_external_port"], plain.port().to_string(), "{v:?}");
    let exim_port = ex.addr(EximPort::Proxy).port().to_string();
    assert_eq!(v["received_port"], exim_port, "{v:?}");
    // No TLS between floodgate and Exim: Exim sees none.
    assert_eq!(v["tls_in_cipher"], "", "{v:?}");

    // Exim's log: the arrival from the client, with floodgate as the proxy (PRX=).
    let arrivals = ex.wait_log(&["<= relay@client.test", "PRX=127.0.0.1"], 1, DELIVERY);
    assert!(
        arrivals[0].contains(&format!("H=(client.test) [127.0.0.2]:{client_port}")),
        "{arrivals:?}"
    );
}

#[test]
fn auth_plain_login_and_cram_md5_reach_exim_through_floodgate() {
    let ex = Exim::shared();
    let fg = floodgate_before(ex, EximPort::Proxy, "");
    // Submission with STARTTLS towards floodgate, as a mail client would; Exim decides
    // every AUTH. A recipient outside Exim's local domains needs it.
    let out = smtplib(
        fg.addr("submission"),
        r#"
def send(mech, sender, initial=True):
    s = smtplib.SMTP(HOST, PORT, timeout=30)
    s.starttls(context=ctx())
    s.ehlo("client.test")
    out(mech + "_offered", s.esmtp_features.get("auth", ""))
    s.user, s.password = USER, PASSWORD
    method = {"PLAIN": s.auth_plain, "LOGIN": s.auth_login, "CRAM-MD5": s.auth_cram_md5}[mech]
    code, _ = s.auth(mech, method, initial_response_ok=initial)
    out(mech, code)
    s.sendmail(sender, ["carol@elsewhere.test"], b"Subject: auth\r\n\r\nhi\r\n")
    s.quit()
send("PLAIN", "auth-plain@client.test")
send("LOGIN", "auth-login@client.test", initial=False)
send("CRAM-MD5", "auth-cram@client.test")

# A wrong password is Exim's 535; relaying without AUTH is Exim's 550.
s = smtplib.SMTP(HOST, PORT, timeout=30)
s.starttls(context=ctx())
s.ehlo("client.test")
try:
    s.user, s.password = USER, "wrong"
    s.auth("PLAIN", s.auth_plain)
    out("wrong", "accepted")
except smtplib.SMTPAuthenticationError as e:
    out("wrong", "%d %s" % (e.smtp_code, e.smtp_error.decode()))
try:
    s.sendmail("auth-none@client.test", ["carol@elsewhere.test"], b"Subject: x\r\n\r\nx\r\n")
    out("unauthenticated", "accepted")
except smtplib.SMTPRecipientsRefused as e:
    code, text = e.recipients["carol@elsewhere.test"]
    out("unauthenticated", "%d %s" % (code, text.decode()))
s.quit()
"#,
        CLIENT_TIMEOUT,
    );
    assert!(out.ok(), "{out}");
    for mech in ["PLAIN", "LOGIN", "CRAM-MD5"] {
        let offered = out.field(&format!("{mech}_offered")).unwrap_or_default();
        assert!(
            offered.split(' ').any(|m| m == mech),
            "{mech}: {offered}\n{out}"
        );
        assert_eq!(out.field(mech).as_deref(), Some("235"), "{out}");
    }
    let wrong = out.field("wrong").unwrap_or_default();
    assert!(wrong.starts_with("535"), "{wrong}\n{out}");
    let unauth = out.field("unauthenticated").unwrap_or_default();
    assert!(
        unauth.starts_with("550 relay not permitted"),
        "{unauth}\n{out}"
    );

    for (sender, driver) in [
        ("auth-plain@client.test", "plain"),
        ("auth-login@client.test", "login"),
        ("auth-cram@client.test", "cram"),
    ] {
        let m = &ex.wait_messages_from(sender, 1, DELIVERY)[0];
        assert_eq!(m.var("authenticated_id"), EXIM_USER, "{}", m.head());
        assert_eq!(m.var("received_protocol"), "esmtpa", "{}", m.head());
        // The Received header names the client hop's protocol as Exim saw it.
        assert!(received(m)[0].contains("with esmtpa"), "{}", m.head());
        ex.wait_log(
            &[&format!("<= {sender}"), &format!("A={driver}:{EXIM_USER}")],
            1,
            DELIVERY,
        );
    }
    assert!(ex.messages_from("auth-none@client.test").is_empty());
}

/// A client on IPv6 reaches an IPv4-only Exim: the PROXY v2 header carries the IPv6
/// address, which Exim takes as the client's.
#[test]
fn ipv6_client_is_named_by_an_ipv4_exim() {
    let ex = Exim::shared();
    let cfg = FloodgateConfig::new(ex.addr(EximPort::Proxy))
        .identity("proxy-v2")
        .log_level("info")
        .listeners(vec![ListenerSpec::new("v6", "none").at("[::1]:0")]);
    let fg = Floodgate::start(&cfg);
    let v6 = fg.addr("v6");
    let mut c = RawClient::connect_greeted(v6);
    let client_port = c.local_addr().port();
    c.ehlo("six.client.test");
    assert_eq!(c.cmd("MAIL FROM:<ipv6@client.test>").code, 250);
    assert_eq!(c.cmd("RCPT TO:<bob@example.test>").code, 250);
    assert_eq!(c.cmd("DATA").code, 354);
    c.send(b"Subject: six\r\n\r\nover v6\r\n.\r\n");
    assert_eq!(c.reply().code, 250);
    assert_eq!(c.cmd("QUIT").code, 221);
    let m = &ex.wait_messages_from("ipv6@client.test", 1, DELIVERY)[0];
    assert_eq!(m.var("sender_host_address"), "::1", "{}", m.head());
    assert_eq!(m.var("sender_host_port"), client_port.to_string());
    assert_eq!(m.var("proxy_external_address"), "::1");
    assert_eq!(m.var("proxy_external_port"), v6.port().to_string());
    assert_eq!(m.var("proxy_local_address"), "127.0.0.1");
    assert!(
        received(m)[0].starts_with(&format!(
            "from [::1] (port={client_port} helo=six.client.test)"
        )),
        "{}",
        m.head()
    );
}

/// AUTH PLAIN without an initial response, byte by byte: Exim's empty challenge, then
/// the credentials on their own line, decided by Exim.
#[test]
fn auth_plain_without_initial_response_raw() {
    let ex = Exim::shared();
    let fg = floodgate_before(ex, EximPort::Proxy, "");
    let mut c = RawClient::connect_greeted(fg.addr("plain"));
    c.ehlo("client.test");
    let challenge = c.cmd("AUTH PLAIN");
    assert_eq!(challenge.code, 334, "{challenge:?}");
    assert_eq!(challenge.lines, vec![String::new()], "{challenge:?}");
    let token = b64_encode(format!("\0{EXIM_USER}\0{EXIM_PASSWORD}").as_bytes());
    let r = c.cmd(&token);
    assert_eq!(r.code, 235, "{r:?}");
    assert_eq!(c.cmd("MAIL FROM:<auth-raw@client.test>").code, 250);
    assert_eq!(c.cmd("RCPT TO:<carol@elsewhere.test>").code, 250);
    assert_eq!(c.cmd("DATA").code, 354);
    c.send(b"Subject: raw auth\r\n\r\nhi\r\n.\r\n");
    assert_eq!(c.reply().code, 250);
    assert_eq!(c.cmd("QUIT").code, 221);
    let m = &ex.wait_messages_from("auth-raw@client.test", 1, DELIVERY)[0];
    assert_eq!(m.var("authenticated_id"), EXIM_USER, "{}", m.head());
}

#[test]
fn per_user_limit_exim_receives_only_what_floodgate_accepted() {
    let ex = Exim::shared();
    let fg = floodgate_before(
        ex,
        EximPort::Proxy,
        r#"
[[limit]]
name = "per-user"
when = "authenticated"
count = "recipients"
key = "${authenticated_id}"
algorithm = "bucket"
rate = "3 / 1h"
burst = "3"
action = "defer"
"#,
    );
    let out = smtplib(
        fg.addr("submission"),
        r#"
s = smtplib.SMTP(HOST, PORT, timeout=30)
s.starttls(context=ctx())
s.login(USER, PASSWORD)
rcpts = ["limited%d@elsewhere.test" % i for i in range(1, 6)]
refused = s.sendmail("peruser@client.test", rcpts, b"Subject: limited\r\n\r\nhi\r\n")
for r in rcpts:
    out(r, "%d" % refused[r][0] if r in refused else "ok")
try:
    s.sendmail("peruser@client.test", ["limited6@elsewhere.test"], b"Subject: t\r\n\r\nhi\r\n")
    out("second", "ok")
except smtplib.SMTPRecipientsRefused as e:
    out("second", "%d" % e.recipients["limited6@elsewhere.test"][0])
s.quit()
"#,
        CLIENT_TIMEOUT,
    );
    assert!(out.ok(), "{out}");
    for i in 1..=3 {
        let r = format!("limited{i}@elsewhere.test");
        assert_eq!(out.field(&r).as_deref(), Some("ok"), "{out}");
    }
    for i in 4..=5 {
        let r = format!("limited{i}@elsewhere.test");
        assert_eq!(out.field(&r).as_deref(), Some("450"), "{out}");
    }
    assert_eq!(out.field("second").as_deref(), Some("450"), "{out}");

    // floodgate answers DATA only after Exim has, so by now Exim has seen all it will.
    let msgs = ex.wait_messages_from("peruser@client.test", 1, DELIVERY);
    assert_eq!(msgs.len(), 1, "{msgs:?}");
    assert_eq!(
        msgs[0].envelope_to,
        vec![
            "limited1@elsewhere.test",
            "limited2@elsewhere.test",
            "limited3@elsewhere.test"
        ]
    );
    assert_eq!(ex.log_lines(&["<= peruser@client.test"]).len(), 1);
    // The refused recipients never reached Exim, not even as a RCPT it refused.
    for i in 4..=6 {
        let r = format!("limited{i}@elsewhere.test");
        assert!(ex.log_lines(&[&r]).is_empty(), "{}", ex.mainlog());
    }
}

#[test]
fn eightbitmime_smtputf8_and_size_through_floodgate() {
    let ex = Exim::shared();
    let fg = floodgate_before(ex, EximPort::Proxy, "");
    let mut c = RawClient::connect_greeted(fg.addr("plain"));
    let ehlo = c.ehlo("client.test");
    let kw = ehlo.keywords();
    for want in ["8BITMIME", "SMTPUTF8", "PIPELINING"] {
        assert!(kw.iter().any(|k| k == want), "{want} missing: {ehlo:?}");
    }
    // SIZE: never more than Exim takes.
    let size: u64 = ehlo
        .lines
        .iter()
        .find_map(|l| l.strip_prefix("SIZE "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no SIZE value: {ehlo:?}"));
    assert!(size > 0 && size <= EXIM_SIZE_LIMIT, "SIZE {size}: {ehlo:?}");

    // An internationalised address and an 8-bit body arrive byte for byte.
    let body = "Subject: 8bit\r\n\r\nGr\u{fc}\u{df}e aus K\u{f6}ln \u{2603}\r\n";
    assert_eq!(
        c.cmd("MAIL FROM:<j\u{f6}rg@client.test> SMTPUTF8 BODY=8BITMIME")
            .code,
        250
    );
    assert_eq!(c.cmd("RCPT TO:<zo\u{eb}@example.test>").code, 250);
    assert_eq!(c.cmd("DATA").code, 354);
    c.send(format!("{body}.\r\n").as_bytes());
    let r = c.reply();
    assert_eq!(r.code, 250, "{r:?}");

    // A declared size over Exim's limit is refused at MAIL.
    let r = c.cmd(&format!(
        "MAIL FROM:<toobig@client.test> SIZE={}",
        EXIM_SIZE_LIMIT + 1
    ));
    assert_eq!(r.code, 552, "{r:?}");
    assert_eq!(c.cmd("QUIT").code, 221);

    let m = &ex.wait_messages_from("j\u{f6}rg@client.test", 1, DELIVERY)[0];
    assert_eq!(m.envelope_to, vec!["zo\u{eb}@example.test"]);
    assert_eq!(m.var("received_protocol"), "utf8esmtp", "{}", m.head());
    let want = "Gr\u{fc}\u{df}e aus K\u{f6}ln \u{2603}\n";
    assert_eq!(show(m.body()), show(want.as_bytes()));
    assert!(ex.messages_from("toobig@client.test").is_empty());
}

#[test]
fn two_hundred_pipelined_recipients_arrive_in_one_message() {
    let ex = Exim::shared();
    let fg = floodgate_before(ex, EximPort::Proxy, "");
    let mut c = RawClient::connect_greeted(fg.addr("plain"));
    c.ehlo("client.test");
    let rcpts: Vec<String> = (1..=200)
        .map(|i| format!("pipe{i:03}@example.test"))
        .collect();
    let mut batch = String::from("MAIL FROM:<pipelined@client.test>\r\n");
    for r in &rcpts {
        batch.push_str(&format!("RCPT TO:<{r}>\r\n"));
    }
    batch.push_str("DATA\r\n");
    c.send(batch.as_bytes());
    let replies = c.replies(202);
    assert!(replies[..201].iter().all(|r| r.code == 250), "{replies:?}");
    assert_eq!(replies[201].code, 354, "{:?}", replies[201]);
    c.send(b"Subject: many\r\n\r\nto two hundred\r\n.\r\nQUIT\r\n");
    assert_eq!(c.reply().code, 250);
    assert_eq!(c.reply().code, 221);

    let msgs = ex.wait_messages_from("pipelined@client.test", 1, DELIVERY);
    assert_eq!(msgs.len(), 1, "one delivery for all recipients: {msgs:?}");
    assert_eq!(msgs[0].envelope_to, rcpts);
}

#[test]
fn upstream_starttls_gives_exim_a_cipher() {
    let ex = Exim::shared();
    let cfg = FloodgateConfig::new(ex.addr(EximPort::Proxy))
        .identity("proxy-v2")
        .upstream_tls("starttls")
        .log_level("info");
    let fg = Floodgate::start(&cfg);
    let out = swaks(&[
        "--server",
        &fg.addr("plain").to_string(),
        "--from",
        "tls-upstream@client.test",
        "--to",
        "bob@example.test",
    ]);
    assert!(out.ok(), "{out}");
    let m = &ex.wait_messages_from("tls-upstream@client.test", 1, DELIVERY)[0];
    let cipher = m.var("tls_in_cipher");
    assert!(cipher.starts_with("TLS"), "{}", m.head());
    assert_eq!(m.var("sender_host_address"), "127.0.0.1");
    assert_eq!(m.var("proxy_session"), "yes");
    assert!(received(m)[0].contains("with esmtps"), "{}", m.head());
}

#[test]
fn exim_as_a_client_of_floodgate() {
    let ex = Exim::shared();
    let fg = floodgate_before(ex, EximPort::Proxy, "");
    let submission = fg.addr("submission");
    // Injected straight into Exim (the port without hosts_proxy); Exim's smtp transport
    // then sends it to floodgate's STARTTLS listener (TLS required), floodgate relays it
    // back to Exim's PROXY port, and Exim delivers it locally.
    let mut c = RawClient::connect_greeted(ex.addr(EximPort::Plain));
    c.ehlo("injector.test");
    assert_eq!(c.cmd("MAIL FROM:<exim-client@client.test>").code, 250);
    assert_eq!(
        c.cmd(&format!("RCPT TO:<dave@{VIA_FLOODGATE_DOMAIN}>"))
            .code,
        250
    );
    assert_eq!(c.cmd("DATA").code, 354);
    c.send(
        format!(
            "X-Floodgate-Port: {}\r\nSubject: from exim\r\n\r\nvia floodgate\r\n.\r\n",
            submission.port()
        )
        .as_bytes(),
    );
    assert_eq!(c.reply().code, 250);
    assert_eq!(c.cmd("QUIT").code, 221);

    let m = &ex.wait_messages_from("exim-client@client.test", 1, DELIVERY)[0];
    assert_eq!(m.envelope_to, vec![format!("dave@{VIA_FLOODGATE_DOMAIN}")]);
    assert_eq!(
        m.header("X-Exim-Client"),
        vec![EXIM_HOSTNAME.to_string()],
        "{}",
        m.head()
    );
    // The second arrival came through floodgate, from Exim's smtp transport.
    assert_eq!(m.var("proxy_session"), "yes", "{}", m.head());
    assert_eq!(
        m.var("proxy_external_port"),
        submission.port().to_string(),
        "{}",
        m.head()
    );
    assert!(
        received(m)[0].starts_with("from [127.0.0.1] (port="),
        "{}",
        m.head()
    );
    assert!(received(m)[0].contains(&format!("helo={EXIM_HOSTNAME}")));
    // Exim's delivery log names floodgate's port and the TLS it negotiated with it.
    let out = ex.wait_log(
        &[
            &format!("=> dave@{VIA_FLOODGATE_DOMAIN}"),
            &format!("[127.0.0.1]:{}", submission.port()),
        ],
        1,
        DELIVERY,
    );
    assert!(out[0].contains(" X=TLS"), "{out:?}");
}

// ---------------------------------------------------------------------------------------
// Exim's own behaviour behind a proxy, pinned (straight to Exim, no floodgate)
// ---------------------------------------------------------------------------------------

/// Reads from `s` until EOF (or a read error), bounded by [`REPLY_TIMEOUT`] per read.
fn read_to_close(s: &mut TcpStream) -> String {
    s.set_read_timeout(Some(REPLY_TIMEOUT)).unwrap();
    let mut all = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        match s.read(&mut chunk) {
            Ok(0) => break,
            Ok(n) => all.extend_from_slice(&chunk[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => break,
            Err(e) => panic!(
                "no close within {REPLY_TIMEOUT:?} ({e}); have {}",
                show(&all)
            ),
        }
    }
    String::from_utf8_lossy(&all).into_owned()
}

/// A PROXY v2 header sent to a port that does not expect one: Exim greets, reads the
/// header's signature as SMTP lines (two empty lines, a NUL line, then `QUIT`) and closes.
/// A sender that then writes EHLO reads `500 unrecognized command` as its answer.
#[test]
fn exim_reads_an_unexpected_proxy_header_as_commands_and_quits() {
    let ex = Exim::shared();
    let addr = ex.addr(EximPort::Plain);
    let mut s = TcpStream::connect(addr).unwrap();
    let header = proxy_v2("192.0.2.7:40000".parse().unwrap(), addr);
    s.write_all(&header).unwrap();
    let replies = read_to_close(&mut s);
    let lines: Vec<&str> = replies.split_terminator("\r\n").collect();
    assert_eq!(lines.len(), 5, "{replies:?}");
    assert!(lines[0].starts_with(&format!("220 {EXIM_HOSTNAME} ESMTP Exim 4.96")));
    assert_eq!(
        lines[1..],
        [
            "500 unrecognized command",
            "500 unrecognized command",
            "501 NUL characters are not allowed in SMTP commands",
            "221 exim.test closing connection",
        ],
        "{replies:?}"
    );
    ex.wait_log(
        &["SMTP syntax error in \"\"", "unrecognized command"],
        1,
        DELIVERY,
    );
}

/// A port with `hosts_proxy` for the sender's address and no header: Exim waits for the
/// header (`proxy_protocol_timeout`, 3 s by default), then greets, and refuses every
/// command but QUIT with 503.
#[test]
fn exim_without_the_expected_proxy_header_refuses_every_command() {
    let ex = Exim::shared();
    let started = Instant::now();
    let mut c = RawClient::connect_greeted(ex.addr(EximPort::Proxy));
    let waited = started.elapsed();
    for cmd in ["EHLO floodgate.test", "MAIL FROM:<x@client.test>", "NOOP"] {
        let r = c.cmd(cmd);
        assert_eq!(
            r.text(),
            "503 Command refused, required Proxy negotiation failed\r\n",
            "{cmd}"
        );
    }
    assert_eq!(c.cmd("QUIT").code, 221);
    eprintln!("greeting came after {waited:?} (proxy_protocol_timeout)");
}

/// `smtp_accept_max_per_host` is checked when the connection is accepted, before the
/// PROXY header is read: it counts floodgate's address, not the clients'.
#[test]
fn exim_counts_floodgate_for_smtp_accept_max_per_host() {
    // A daemon of its own: the other tests' connections from 127.0.0.1 would count too.
    let ex = &Exim::start();
    let fg = floodgate_before(ex, EximPort::OnePerHost, "");
    let plain = fg.addr("plain");
    // Two different clients at once: 127.0.0.2 holds its session open...
    let out = smtplib(
        plain,
        r#"
first = smtplib.SMTP(HOST, PORT, timeout=30, source_address=("127.0.0.2", 0))
out("first", first.ehlo("one.test")[0])
second = smtplib.SMTP(timeout=30, source_address=("127.0.0.3", 0))
try:
    code, msg = second.connect(HOST, PORT)
    out("second", "%d %s" % (code, msg.decode()))
except smtplib.SMTPResponseException as e:
    out("second", "%d %s" % (e.smtp_code, e.smtp_error.decode()))
except (smtplib.SMTPServerDisconnected, ConnectionError) as e:
    out("second", "closed %r" % e)
first.quit()
"#,
        CLIENT_TIMEOUT,
    );
    assert!(out.ok(), "{out}");
    assert_eq!(out.field("first").as_deref(), Some("250"), "{out}");
    let second = out.field("second").unwrap_or_default();
    assert!(second.starts_with("421 "), "second client: {out}");
    // ...and Exim refused floodgate's second connection, naming floodgate's address.
    let refused = ex.wait_log(
        &[
            "Connection from [127.0.0.1]:",
            &format!("I=[127.0.0.1]:{}", ex.addr(EximPort::OnePerHost).port()),
            "refused: too many connections from that IP address",
        ],
        1,
        DELIVERY,
    );
    assert!(!refused[0].contains("127.0.0.3"), "{refused:?}");
    eprintln!("second client got: {second}");
}

/// floodgate's side of the three ways its settings and Exim's can disagree: each is
/// recognised, the client gets 421 4.3.5 (never one of Exim's replies as the answer to its
/// own command) and the session ends before any of its commands could reach Exim as
/// floodgate's; an error names the setting to fix.
#[test]
fn misconfigured_identity_towards_exim_refuses_the_client() {
    let ex = Exim::shared();
    // (client_identity, Exim port, what floodgate's error says)
    let cases = [
        // Exim 4.96 has no XCLIENT: relaying as floodgate would make every client look local.
        ("xclient", EximPort::Plain, "XCLIENT"),
        // A header Exim does not expect is read as commands (500, 500, 501, 221).
        (
            "proxy-v2",
            EximPort::Plain,
            "PROXY v2 header as SMTP commands",
        ),
        // No header where Exim expects one: 503 to every command after the greeting.
        ("none", EximPort::Proxy, "expects a PROXY header"),
    ];
    for (identity, port, says) in cases {
        let cfg = FloodgateConfig::new(ex.addr(port))
            .identity(identity)
            .log_level("info");
        let fg = Floodgate::start(&cfg);
        let mut c = RawClient::connect(fg.addr("plain"));
        let mut r = c.reply();
        if r.code == 220 {
            r = c.cmd("EHLO client.test");
        }
        assert_eq!(
            (r.code, r.enhanced().as_deref()),
            (421, Some("4.3.5")),
            "{identity} to {port:?}: {r:?}\n{}",
            fg.stderr()
        );
        // floodgate closes after its 421: no later command can reach Exim.
        assert!(
            c.replies_until_close().is_empty(),
            "{identity}: more after the 421"
        );
        fg.wait_stderr("upstream did not take the client's identity", DELIVERY);
        let log = fg.stderr();
        assert!(log.contains(says), "{identity}: {says:?} not in\n{log}");
    }
}
