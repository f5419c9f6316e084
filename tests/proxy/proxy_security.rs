//! The protocol-safety promises, checked end to end against the recording upstream:
//! SMTP smuggling (bare CR/LF end-of-data tricks), STARTTLS command injection, EHLO
//! capability filtering, over-long and bare-LF command lines, and passwords kept out of
//! the log.

use crate::common;

use common::*;

/// The smuggling payloads of SEC Consult's 2023 write-up plus variants: each is put
/// between a message body and a second, hidden envelope.
const SMUGGLING: [&[u8]; 5] = [b"\n.\n", b"\r.\r", b"\r\n.\r", b"\n.\r\n", b".\r\r\n"];

/// Sends one message with `payload` followed by a smuggled MAIL/RCPT/DATA and the real
/// CRLF.CRLF, then QUIT; returns the reply codes up to the close, with texts.
fn smuggle(fg: &Floodgate, payload: &[u8]) -> Vec<Reply> {
    let mut c = RawClient::connect_greeted(fg.addr("plain"));
    c.ehlo("raw.client.test");
    c.send(b"MAIL FROM:<honest@client.test>\r\nRCPT TO:<one@dest.test>\r\nDATA\r\n");
    let codes: Vec<u16> = c.replies(3).iter().map(|r| r.code).collect();
    assert_eq!(codes, [250, 250, 354]);
    let mut msg = b"Subject: smuggle\r\n\r\nbody".to_vec();
    msg.extend_from_slice(payload);
    msg.extend_from_slice(
        b"MAIL FROM:<evil@client.test>\r\nRCPT TO:<victim@dest.test>\r\nDATA\r\n\
          Subject: smuggled\r\n\r\nsmuggled\r\n.\r\nQUIT\r\n",
    );
    c.send(&msg);
    c.replies_until_close()
}

fn assert_no_victim(rec: &Recorder) {
    for m in rec.messages() {
        assert!(
            !m.rcpts.iter().any(|r| r.contains("victim")),
            "smuggled recipient reached upstream: {m:?}"
        );
        assert!(
            !m.bare_lf && !m.bare_cr,
            "bare CR/LF reached upstream: {:?}",
            String::from_utf8_lossy(&m.data)
        );
    }
    assert!(
        !rec.commands()
            .iter()
            .any(|c| c.contains("evil@") || c.contains("victim@")),
        "smuggled command reached upstream: {:?}",
        rec.commands()
    );
}

#[test]
fn smuggling_payloads_are_rejected_whole_under_reject() {
    let rec = Recorder::plain();
    let fg = Floodgate::start(
        &FloodgateConfig::new(rec.addr()).extra("[smtp]\nbare_line_endings = \"reject\""),
    );
    for p in SMUGGLING {
        let replies = smuggle(&fg, p);
        let codes: Vec<u16> = replies.iter().map(|r| r.code).collect();
        assert_eq!(
            codes,
            [550, 221],
            "payload {}: want one 550 5.5.2 for the whole message, then 221; got {replies:?}",
            show(p)
        );
        assert_eq!(
            replies[0].enhanced().as_deref(),
            Some("5.5.2"),
            "{replies:?}"
        );
    }
    rec.wait_idle();
    assert!(rec.messages().is_empty(), "{:?}", rec.messages());
    assert_no_victim(&rec);
}

#[test]
fn smuggling_payloads_under_normalize_deliver_exactly_what_was_acknowledged() {
    // `normalize` is the default: the default config is this mode.
    let rec = Recorder::plain();
    let fg = Floodgate::start(&FloodgateConfig::new(rec.addr()));
    let mut acked = 0;
    for p in SMUGGLING {
        let replies = smuggle(&fg, p);
        let codes: Vec<u16> = replies.iter().map(|r| r.code).collect();
        // One reply for the one message floodgate saw, then QUIT's: a second 250/354 here
        // would mean floodgate itself ended DATA early.
        assert_eq!(codes.len(), 2, "payload {}: {replies:?}", show(p));
        assert_eq!(codes[1], 221, "payload {}: {replies:?}", show(p));
        if codes[0] == 250 {
            acked += 1;
        } else {
            assert!(codes[0] >= 400, "payload {}: {replies:?}", show(p));
        }
    }
    rec.wait_idle();
    let m = rec.messages();
    assert_eq!(
        m.len(),
        acked,
        "upstream holds a message floodgate did not acknowledge"
    );
    for msg in &m {
        assert_eq!(msg.rcpts, ["one@dest.test"]);
        assert_eq!(msg.mail_from, "honest@client.test");
    }
    assert_no_victim(&rec);
}

#[test]
fn starttls_injection_is_never_executed() {
    let rec = Recorder::plain();
    let fg = Floodgate::start(&FloodgateConfig::new(rec.addr()));
    let out = smtplib(
        fg.addr("submission"),
        r#"
class Raw:
    def __init__(self, sock):
        self.sock, self.buf = sock, b""
    def reply(self):
        while True:
            lines = self.buf.split(b"\r\n")
            for i, line in enumerate(lines[:-1]):
                if len(line) < 4 or line[3:4] == b" ":
                    n = len(b"\r\n".join(lines[: i + 1])) + 2
                    r, self.buf = self.buf[:n], self.buf[n:]
                    return r
            chunk = self.sock.recv(65536)
            if not chunk:
                raise EOFError("closed, have %r" % self.buf)
            self.buf += chunk

for n, inj in enumerate([b"RSET\r\n", b"MAIL FROM:<inject@client.test>\r\n",
                         b"RSET\r\nMAIL FROM:<inject@client.test>\r\nRCPT TO:<inject@dest.test>\r\n"]):
    s = socket.create_connection((HOST, PORT), timeout=15)
    c = Raw(s)
    c.reply()
    s.sendall(b"EHLO py.client.test\r\n")
    c.reply()
    s.sendall(b"STARTTLS\r\n" + inj)
    try:
        r = c.reply()
    except (EOFError, ConnectionError):
        out("case%d" % n, "dropped")
        continue
    if not r.startswith(b"220"):
        out("case%d" % n, "refused " + r.decode(errors="replace").strip())
        continue
    if c.buf:
        out("case%d" % n, "plaintext-after-220 %r" % c.buf)
        continue
    try:
        t = ctx().wrap_socket(s, server_hostname="localhost")
    except (ssl.SSLError, ConnectionError, OSError):
        out("case%d" % n, "dropped")
        continue
    c = Raw(t)
    # The first reply after the handshake must be EHLO's: an injected command's reply
    # would come first.
    t.sendall(b"EHLO py.client.test\r\n")
    ehlo = c.reply()
    if not (ehlo.startswith(b"250-") or ehlo.startswith(b"250 ")) or b"2.0.0" in ehlo.split(b"\r\n")[0]:
        out("case%d" % n, "injected-reply %r" % ehlo)
        continue
    t.sendall(b"MAIL FROM:<legit%d@client.test>\r\nRCPT TO:<r@dest.test>\r\nDATA\r\n" % n)
    rs = [c.reply() for _ in range(3)]
    t.sendall(b"Subject: after tls\r\n\r\nok\r\n.\r\nQUIT\r\n")
    rs += [c.reply(), c.reply()]
    out("case%d" % n, "tls-ok " + " ".join(x[:3].decode() for x in rs))
"#,
        CLIENT_TIMEOUT,
    );
    assert!(out.ok(), "{out}");
    let mut delivered = 0;
    for n in 0..3 {
        let got = out.field(&format!("case{n}")).unwrap_or_default();
        // Either the injected bytes are discarded and the TLS session works normally, or
        // floodgate drops the connection (the stricter policy); nothing else.
        match got.as_str() {
            "tls-ok 250 250 354 250 221" => delivered += 1,
            "dropped" => {}
            other => panic!("case {n}: {other}\n{out}"),
        }
    }
    rec.wait_idle();
    assert!(
        !rec.commands().iter().any(|c| c.contains("inject@")),
        "injected command reached upstream: {:?}",
        rec.commands()
    );
    let m = rec.messages();
    assert_eq!(m.len(), delivered);
    for msg in &m {
        assert!(msg.mail_from.starts_with("legit"));
        assert_eq!(msg.rcpts, ["r@dest.test"]);
    }
}

/// Keywords floodgate must never pass on from upstream.
const NEVER: [&str; 3] = ["XCLIENT", "X-FOO", "XFORWARD"];

/// If floodgate advertises CHUNKING it must implement BDAT: check it end to end.
fn chunking_works_if_offered(fg: &Floodgate, rec: &Recorder, keywords: &[String]) {
    if !keywords.contains(&"CHUNKING".to_string()) {
        return;
    }
    let before = rec.messages().len();
    let mut c = RawClient::connect_greeted(fg.addr("plain"));
    c.ehlo("raw.client.test");
    c.send(b"MAIL FROM:<a@client.test>\r\nRCPT TO:<b@dest.test>\r\nBDAT 7 LAST\r\nab\r\ncd\n");
    let codes: Vec<u16> = c.replies(3).iter().map(|r| r.code).collect();
    assert_eq!(
        codes,
        [250, 250, 250],
        "CHUNKING advertised but BDAT failed"
    );
    let m = rec.messages();
    assert_eq!(m.len(), before + 1);
    // A bare LF in a chunk never reaches upstream raw: written as CRLF (the default
    // `bare_line_endings = "normalize"`).
    assert_eq!(m[before].data, b"ab\r\ncd\r\n");
}

#[test]
fn ehlo_is_filtered_and_starttls_auth_follow_the_listener() {
    let rec = Recorder::with_starttls(); // upstream even offers STARTTLS: never passed on
    let fg = Floodgate::start(&FloodgateConfig::new(rec.addr()));

    let mut c = RawClient::connect_greeted(fg.addr("submission"));
    let kw = c.ehlo("raw.client.test").keywords();
    assert!(kw.contains(&"STARTTLS".into()), "starttls listener: {kw:?}");
    assert!(!kw.contains(&"AUTH".into()), "AUTH before TLS: {kw:?}");
    for k in ["PIPELINING", "SIZE", "8BITMIME", "ENHANCEDSTATUSCODES"] {
        assert!(kw.contains(&k.to_string()), "{k} missing: {kw:?}");
    }
    for k in NEVER {
        assert!(!kw.contains(&k.to_string()), "{k} leaked: {kw:?}");
    }
    // HELO works too and carries no capability list.
    assert_eq!(c.cmd("HELO raw.client.test").code, 250);

    let mut c = RawClient::connect_greeted(fg.addr("plain"));
    let kw = c.ehlo("raw.client.test").keywords();
    assert!(
        !kw.contains(&"STARTTLS".into()),
        "plain listener offers STARTTLS: {kw:?}"
    );
    assert!(!kw.contains(&"AUTH".into()), "AUTH without TLS: {kw:?}");
    for k in NEVER {
        assert!(!kw.contains(&k.to_string()), "{k} leaked: {kw:?}");
    }
    chunking_works_if_offered(&fg, &rec, &kw);

    let out = smtplib(
        fg.addr("submission"),
        r#"
with smtplib.SMTP(HOST, PORT, timeout=20) as s:
    s.ehlo()
    s.starttls(context=ctx())
    s.ehlo()
    out("after_starttls", " ".join(sorted(k.upper() for k in s.esmtp_features)))
with smtplib.SMTP_SSL(HOST, int(sys.argv[6]), timeout=20, context=ctx()) as s:
    s.ehlo()
    out("implicit", " ".join(sorted(k.upper() for k in s.esmtp_features)))
"#
        .replace(
            "int(sys.argv[6])",
            &fg.addr("submissions").port().to_string(),
        )
        .as_str(),
        CLIENT_TIMEOUT,
    );
    assert!(out.ok(), "{out}");
    for field in ["after_starttls", "implicit"] {
        let kw: Vec<String> = out
            .field(field)
            .unwrap()
            .split(' ')
            .map(str::to_string)
            .collect();
        assert!(
            kw.contains(&"AUTH".into()),
            "{field}: no AUTH under TLS: {kw:?}"
        );
        assert!(
            !kw.contains(&"STARTTLS".into()),
            "{field}: STARTTLS under TLS: {kw:?}"
        );
        for k in NEVER {
            assert!(!kw.contains(&k.to_string()), "{field}: {k} leaked: {kw:?}");
        }
    }
}

#[test]
fn overlong_command_line_gets_500_5_5_2_and_the_session_goes_on() {
    let rec = Recorder::plain();
    let fg = Floodgate::start(&FloodgateConfig::new(rec.addr()));
    let mut c = RawClient::connect_greeted(fg.addr("plain"));
    c.ehlo("raw.client.test");
    let long_noop = format!("NOOP {}", "x".repeat(3000));
    let r = c.cmd(&long_noop);
    assert_eq!(
        (r.code, r.enhanced().as_deref()),
        (500, Some("5.5.2")),
        "{}",
        r.text()
    );
    let long_mail = format!("MAIL FROM:<{}@client.test>", "a".repeat(3000));
    let r = c.cmd(&long_mail);
    assert_eq!(
        (r.code, r.enhanced().as_deref()),
        (500, Some("5.5.2")),
        "{}",
        r.text()
    );
    // Still in sync: a normal transaction works.
    assert_eq!(c.cmd("NOOP").code, 250);
    assert_eq!(c.cmd("MAIL FROM:<a@client.test>").code, 250);
    assert_eq!(c.cmd("RCPT TO:<b@dest.test>").code, 250);
    assert_eq!(c.cmd("DATA").code, 354);
    c.send(b"Subject: after long\r\n\r\nx\r\n.\r\n");
    assert_eq!(c.reply().code, 250);
    assert_eq!(c.cmd("QUIT").code, 221);
    assert_eq!(rec.messages().len(), 1);
    assert!(
        rec.commands().iter().all(|l| l.len() < 2048),
        "an over-long line reached upstream"
    );
}

#[test]
fn bare_lf_or_cr_in_a_command_is_refused_and_never_forwarded() {
    let rec = Recorder::plain();
    let fg = Floodgate::start(&FloodgateConfig::new(rec.addr()));
    // Whether floodgate splits at the bare LF/CR or refuses the whole line, the MAIL
    // must not be accepted: the RCPT that follows then gets no 250 and DATA no 354.
    for bad in [
        &b"MAIL FROM:<bare@client.test>\nRCPT TO:<b@dest.test>\r\n"[..],
        b"MAIL FROM:<bare@client.test>\rRCPT TO:<b@dest.test>\r\n",
        b"MAIL FROM:<bare@client.test>\n",
    ] {
        let mut c = RawClient::connect_greeted(fg.addr("plain"));
        c.ehlo("raw.client.test");
        c.send(bad);
        c.send(b"RCPT TO:<b@dest.test>\r\nDATA\r\nQUIT\r\n");
        let replies = c.replies_until_close();
        assert!(
            replies.len() >= 2,
            "{}: want a refusal then 221: {replies:?}",
            show(bad)
        );
        assert_eq!(replies[0].class(), 5, "{}: {replies:?}", show(bad));
        assert!(
            !replies.iter().any(|r| r.code == 250 || r.code == 354),
            "{}: something was accepted: {replies:?}",
            show(bad)
        );
        assert_eq!(
            replies.last().unwrap().code,
            221,
            "{}: {replies:?}",
            show(bad)
        );
    }
    rec.wait_idle();
    assert!(
        !rec.commands().iter().any(|l| l.contains("bare@")),
        "{:?}",
        rec.commands()
    );
    assert!(
        !rec.events_of("command").iter().any(|e| e["bare"] == true),
        "a bare CR/LF command line reached upstream"
    );
}

#[test]
fn auth_passwords_never_appear_in_the_log() {
    let password = "Zebra-Pass-5512";
    let wrong = "Wrong-Pass-8841";
    let rec = Recorder::start(RecorderOptions {
        users: vec![("bob".into(), password.into())],
        ..RecorderOptions::default()
    });
    let fg = Floodgate::start(&FloodgateConfig::new(rec.addr()).log_level("trace"));
    let addr = fg.addr("submission").to_string();
    let ca = ca_file();
    let base = [
        "--server",
        addr.as_str(),
        "--from",
        "bob@client.test",
        "--to",
        "r@dest.test",
        "--tls",
        "--tls-verify",
        "--tls-ca-path",
        ca.to_str().unwrap(),
        "-au",
        "bob",
    ];
    for (mech, pw, ok) in [
        ("PLAIN", password, true),
        ("LOGIN", password, true),
        ("PLAIN", wrong, false),
        ("LOGIN", wrong, false),
    ] {
        let mut args = base.to_vec();
        args.extend(["-a", mech, "-ap", pw]);
        let out = swaks(&args);
        assert_eq!(out.ok(), ok, "AUTH {mech} {pw}: {out}");
    }
    assert_eq!(rec.messages().len(), 2);
    let log = fg.stderr();
    assert!(
        !log.trim().is_empty(),
        "floodgate logged nothing at trace level"
    );
    let mut secrets = Vec::new();
    for pw in [password, wrong] {
        secrets.push(pw.to_string());
        secrets.push(b64_encode(pw.as_bytes()));
        secrets.push(b64_encode(format!("\0bob\0{pw}").as_bytes()));
        secrets.push(b64_encode(format!("bob\0bob\0{pw}").as_bytes()));
    }
    for s in &secrets {
        assert!(
            !log.contains(s.as_str()),
            "log contains secret {s:?}:\n{log}"
        );
    }
}
