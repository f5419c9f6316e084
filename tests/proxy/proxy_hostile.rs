//! Hostile and odd clients against the real floodgate binary: a byte-at-a-time trickle, a
//! line that never ends, a pipelined flood of recipients, a huge BDAT, garbage instead of a
//! TLS ClientHello, commands sent before the greeting, and an IPv6 listener.
//!
//! Each test also runs a legitimate session at the same time (a "bystander") and checks
//! that its message is delivered: one client's abuse must never cost another its mail.

use crate::common;

use std::net::SocketAddr;
use std::thread;
use std::time::Duration;

use common::*;

/// An honest client whose session spans the hostile one: it connects and starts its
/// transaction first ([`Bystander::open`]), and delivers afterwards ([`Bystander::finish`]).
struct Bystander {
    c: RawClient,
    tag: String,
}

impl Bystander {
    fn open(addr: SocketAddr, tag: &str) -> Bystander {
        let mut c = RawClient::connect_greeted(addr);
        c.ehlo(&format!("{tag}.client.test"));
        let r = c.cmd(&format!("MAIL FROM:<{tag}@client.test>"));
        assert_eq!(r.code, 250, "bystander MAIL: {r:?}");
        let r = c.cmd(&format!("RCPT TO:<{tag}-rcpt@dest.test>"));
        assert_eq!(r.code, 250, "bystander RCPT: {r:?}");
        Bystander { c, tag: tag.into() }
    }

    /// DATA, 250, QUIT, 221; then the message must be upstream.
    fn finish(mut self, rec: &Recorder) {
        let r = self.c.cmd("DATA");
        assert_eq!(r.code, 354, "bystander DATA: {r:?}");
        self.c.send(
            format!(
                "Subject: {}\r\n\r\nan honest message\r\n.\r\nQUIT\r\n",
                self.tag
            )
            .as_bytes(),
        );
        let codes: Vec<u16> = self
            .c
            .replies_until_close()
            .iter()
            .map(|r| r.code)
            .collect();
        assert_eq!(codes, [250, 221], "bystander {}", self.tag);
        // Only this message is awaited: the hostile session may still be open upstream.
        let sender = format!("{}@client.test", self.tag);
        wait_until(
            Duration::from_secs(20),
            "the bystander's message upstream",
            || {
                rec.messages()
                    .iter()
                    .any(|m| m.mail_from == sender)
                    .then_some(())
            },
        );
    }

    /// A whole session at once.
    fn run(addr: SocketAddr, tag: &str, rec: &Recorder) {
        Bystander::open(addr, tag).finish(rec);
    }
}

fn assert_code(r: &Reply, code: u16, enhanced: &str) {
    assert_eq!(
        (r.code, r.enhanced().as_deref()),
        (code, Some(enhanced)),
        "want {code} {enhanced}, got {r:?}"
    );
}

/// Upstream never saw a command containing `needle`.
fn never_relayed(rec: &Recorder, needle: &str) {
    let cmds = rec.commands();
    assert!(
        !cmds.iter().any(|c| c.contains(needle)),
        "{needle:?} reached upstream: {cmds:?}"
    );
}

#[test]
fn a_client_trickling_one_byte_at_a_time_gets_421_at_the_command_timeout() {
    let rec = Recorder::plain();
    let fg = Floodgate::start(&FloodgateConfig::new(rec.addr()).timeout("command", "2s"));
    let addr = fg.addr("plain");
    let trickle = thread::spawn(move || {
        let mut c = RawClient::connect_greeted(addr);
        // 35 bytes at one per 200 ms is about 7 s, well past the 2 s command timeout; the
        // line never ends, so only a whole-command timeout can stop it.
        trickle_until_reply(&mut c, b"EHLO trickle.client.test.example.o")
    });
    // Meanwhile an honest client (well within the 2 s per command) delivers.
    Bystander::run(addr, "honest", &rec);
    let (r, sent, rest) = trickle.join().expect("trickle thread");
    assert_code(&r, 421, "4.4.2");
    assert!(sent > 1, "the 421 came before the trickle started");
    assert!(rest.is_empty(), "bytes after 421: {}", show(&rest));
    never_relayed(&rec, "trickle");
}

/// Sends `bytes` one per 200 ms until floodgate answers; returns the reply, how many bytes
/// went out first, and anything after the reply.
fn trickle_until_reply(c: &mut RawClient, bytes: &[u8]) -> (Reply, usize, Vec<u8>) {
    c.set_read_timeout(Duration::from_millis(200));
    for (i, b) in bytes.iter().enumerate() {
        if c.try_send(&[*b]).is_err() {
            panic!("connection broke after {i} bytes without a reply");
        }
        match c.try_reply() {
            Ok(r) => {
                c.set_read_timeout(REPLY_TIMEOUT);
                let rest = c.drain_until_close();
                return (r, i + 1, rest);
            }
            Err(_) if c.saw_eof() => panic!("closed without a reply after {i} bytes"),
            Err(_) => {}
        }
    }
    panic!("no reply while trickling {} bytes", bytes.len());
}

#[test]
fn a_message_trickled_in_gets_421_at_the_data_timeout_and_is_never_relayed() {
    let rec = Recorder::plain();
    let fg = Floodgate::start(
        &FloodgateConfig::new(rec.addr())
            .timeout("command", "10s")
            .timeout("data", "2s"),
    );
    let mut c = RawClient::connect_greeted(fg.addr("plain"));
    assert_eq!(c.ehlo("slow.test").code, 250);
    assert_eq!(c.cmd("MAIL FROM:<a@slow.test>").code, 250);
    assert_eq!(c.cmd("RCPT TO:<b@dest.test>").code, 250);
    assert_eq!(c.cmd("DATA").code, 354);
    // Each octet comes well within the 10 s command timeout, but the message as a whole
    // (about 8 s at one octet per 200 ms) takes longer than the 2 s DATA timeout.
    let body = b"Subject: trickled\r\n\r\nthis message never ends in time\r\n.\r\n";
    let (r, sent, rest) = trickle_until_reply(&mut c, body);
    assert_code(&r, 421, "4.4.2");
    assert!(sent > 5 && sent < body.len(), "reply after {sent} octets");
    assert!(rest.is_empty(), "bytes after 421: {}", show(&rest));
    rec.wait_idle();
    assert!(
        rec.messages().is_empty(),
        "relayed: {:?}",
        rec.messages().len()
    );
}

#[test]
fn a_session_gets_421_at_the_session_timeout_however_busy_it_is() {
    let rec = Recorder::plain();
    let fg = Floodgate::start(&FloodgateConfig::new(rec.addr()).timeout("session", "2s"));
    let mut c = RawClient::connect_greeted(fg.addr("plain"));
    let t0 = std::time::Instant::now();
    // A NOOP every 100 ms: every command is prompt, the session as a whole is not.
    let reply = loop {
        let r = c.cmd("NOOP");
        if r.code != 250 {
            break r;
        }
        assert!(t0.elapsed() < Duration::from_secs(15), "no session timeout");
        thread::sleep(Duration::from_millis(100));
    };
    assert_code(&reply, 421, "4.4.2");
    assert!(
        reply.text().contains("session too long"),
        "{}",
        reply.text()
    );
    assert!(
        t0.elapsed() >= Duration::from_millis(1500),
        "{:?}",
        t0.elapsed()
    );
}

#[test]
fn a_line_that_never_ends_is_refused_once_it_does_and_the_session_goes_on() {
    let rec = Recorder::plain();
    let fg = Floodgate::start(&FloodgateConfig::new(rec.addr()));
    let addr = fg.addr("plain");
    let by = Bystander::open(addr, "honest");
    let mut c = RawClient::connect_greeted(addr);
    c.ehlo("endless.client.test");
    let rss_before = fg.rss_kib();
    let mut line = b"NOOP endless".to_vec();
    line.resize(100 * 1024, b'x');
    c.send(&line);
    // 16 MiB more of the same line: floodgate must throw it away as it comes.
    let more = vec![b'y'; 1024 * 1024];
    for _ in 0..16 {
        c.send(&more);
    }
    // The sends return once the kernel took the bytes; its socket buffers hold far less
    // than 16 MiB, so floodgate has read (and had to drop) most of the line by now.
    if let (Some(before), Some(after)) = (rss_before, fg.rss_kib()) {
        assert!(
            after < before + 8 * 1024,
            "floodgate grew from {before} KiB to {after} KiB on an endless line"
        );
    }
    // Nothing may come back while the line is unfinished; the honest client goes on.
    by.finish(&rec);
    c.send(b"\r\n");
    assert_code(&c.reply(), 500, "5.5.2");
    assert_eq!(c.cmd("NOOP").code, 250);
    let r = c.cmd("MAIL FROM:<endless@client.test>");
    assert_eq!(r.code, 250, "{r:?}");
    assert_eq!(c.cmd("RCPT TO:<e@dest.test>").code, 250);
    assert_eq!(c.cmd("DATA").code, 354);
    c.send(b"Subject: after the long line\r\n\r\nok\r\n.\r\nQUIT\r\n");
    let codes: Vec<u16> = c.replies_until_close().iter().map(|r| r.code).collect();
    assert_eq!(codes, [250, 221]);
    rec.wait_idle();
    assert!(rec
        .messages()
        .iter()
        .any(|m| m.mail_from == "endless@client.test"));
    let longest = rec.commands().iter().map(String::len).max().unwrap_or(0);
    assert!(longest < 2048, "a {longest}-octet line reached upstream");
}

#[test]
fn a_pipelined_flood_of_2000_recipients_is_answered_in_order() {
    let rec = Recorder::start(RecorderOptions {
        reject_rcpt: vec!["reject".into()],
        ..RecorderOptions::default()
    });
    let fg =
        Floodgate::start(&FloodgateConfig::new(rec.addr()).extra("[smtp]\nmax_recipients = 10"));
    let addr = fg.addr("plain");
    let by = Bystander::open(addr, "honest");
    let mut c = RawClient::connect_greeted(addr);
    c.ehlo("flood.client.test");
    assert_eq!(c.cmd("MAIL FROM:<flood@client.test>").code, 250);
    // Recipient 3 is refused by upstream, so exactly the first 11 are relayed (10
    // accepted) and everything after gets floodgate's 452.
    let rcpt = |i: usize| {
        if i == 3 {
            format!("r{i}-reject@dest.test")
        } else {
            format!("r{i}@dest.test")
        }
    };
    let mut burst = Vec::new();
    for i in 0..2000 {
        burst.extend_from_slice(format!("RCPT TO:<{}>\r\n", rcpt(i)).as_bytes());
    }
    c.send(&burst);
    let replies = c.replies(2000);
    for (i, r) in replies.iter().enumerate() {
        let want = match i {
            3 => 550,
            0..=10 => 250,
            _ => 452,
        };
        assert_eq!(r.code, want, "reply {i} of 2000: {r:?}");
        if want == 452 {
            assert_eq!(r.enhanced().as_deref(), Some("4.5.3"), "reply {i}: {r:?}");
        }
    }
    assert_eq!(c.cmd("DATA").code, 354);
    c.send(b"Subject: flood\r\n\r\nten recipients\r\n.\r\nQUIT\r\n");
    let codes: Vec<u16> = c.replies_until_close().iter().map(|r| r.code).collect();
    assert_eq!(codes, [250, 221]);
    by.finish(&rec);
    let m = rec
        .messages()
        .into_iter()
        .find(|m| m.mail_from == "flood@client.test")
        .expect("the flood's message");
    let want: Vec<String> = (0..=10).filter(|&i| i != 3).map(rcpt).collect();
    assert_eq!(m.rcpts, want);
    let relayed = rec
        .commands()
        .iter()
        .filter(|c| c.starts_with("RCPT") && !c.contains("honest"))
        .count();
    assert_eq!(relayed, 11, "RCPTs relayed upstream");
}

#[test]
fn bdat_is_refused_only_after_its_octets_and_nothing_inside_runs() {
    let rec = Recorder::plain();
    // CHUNKING not offered: BDAT is refused (with CHUNKING on, see tests/proxy_message.rs).
    let fg =
        Floodgate::start(&FloodgateConfig::new(rec.addr()).extra("[smtp]\nchunking = false\n"));
    let addr = fg.addr("plain");
    let by = Bystander::open(addr, "honest");

    // A small chunk full of commands: one 502 after the chunk, then the next command.
    let mut c = RawClient::connect_greeted(addr);
    c.ehlo("bdat.client.test");
    assert_eq!(c.cmd("MAIL FROM:<bdat@client.test>").code, 250);
    assert_eq!(c.cmd("RCPT TO:<b@dest.test>").code, 250);
    let chunk = b"RSET\r\nMAIL FROM:<inside@client.test>\r\nQUIT\r\n";
    let mut wire = format!("BDAT {}\r\n", chunk.len()).into_bytes();
    wire.extend_from_slice(chunk);
    wire.extend_from_slice(b"NOOP\r\n");
    c.send(&wire);
    assert_code(&c.reply(), 502, "5.5.1");
    assert_eq!(c.reply().code, 250, "NOOP after the chunk");
    // The RSET inside the chunk did not run: the transaction is still open.
    assert_eq!(c.cmd("DATA").code, 354);
    c.send(b"Subject: bdat\r\n\r\nafter a refused chunk\r\n.\r\nQUIT\r\n");
    let codes: Vec<u16> = c.replies_until_close().iter().map(|r| r.code).collect();
    assert_eq!(codes, [250, 221]);

    // A 1 GB chunk of which 256 KiB (all commands) arrive before the client hangs up: no
    // reply at all (the chunk never ended), and nothing inside ran.
    let mut c = RawClient::connect_greeted(addr);
    c.ehlo("bigbdat.client.test");
    c.send(b"BDAT 1000000000\r\n");
    let inner = b"MAIL FROM:<inside2@client.test>\r\nRCPT TO:<x@dest.test>\r\nQUIT\r\n";
    let mut sent = 0;
    while sent < 256 * 1024 {
        c.send(inner);
        sent += inner.len();
    }
    c.shutdown_write();
    let got = c.drain_until_close();
    assert!(got.is_empty(), "reply inside the chunk: {}", show(&got));

    by.finish(&rec);
    never_relayed(&rec, "inside");
    let m: Vec<Message> = rec
        .messages()
        .into_iter()
        .filter(|m| m.mail_from == "bdat@client.test")
        .collect();
    assert_eq!(m.len(), 1);
    assert_eq!(m[0].rcpts, ["b@dest.test"]);
    // Taken with DATA after the refused BDAT; upstream offers CHUNKING, so it went as BDAT.
    assert_eq!(m[0].data, b"Subject: bdat\r\n\r\nafter a refused chunk\r\n");
}

#[test]
fn garbage_instead_of_a_client_hello_closes_only_that_connection() {
    let rec = Recorder::plain();
    let fg = Floodgate::start(&FloodgateConfig::new(rec.addr()));
    let by = Bystander::open(fg.addr("plain"), "honest");
    let tls = fg.addr("submissions");
    let cases: [(&str, &[u8]); 3] = [
        ("plain SMTP", b"EHLO plain.on.tls.test\r\n"),
        ("HTTP", b"GET / HTTP/1.1\r\nHost: x\r\n\r\n"),
        (
            "broken handshake record",
            b"\x16\x03\x01\x00\x08\x01\x00\x00\x04garbagegarbage",
        ),
    ];
    for (what, bytes) in cases {
        let mut c = RawClient::connect(tls);
        let _ = c.try_send(bytes);
        let got = c.drain_until_close();
        // At most a TLS alert record (content type 21); never SMTP.
        assert!(
            got.is_empty() || got[0] == 0x15,
            "{what}: got {}",
            show(&got)
        );
    }
    // The implicit-TLS listener still works for a real client.
    let out = smtplib(
        tls,
        r#"
with smtplib.SMTP_SSL(HOST, PORT, timeout=20, context=ctx()) as s:
    s.ehlo("real.tls.client.test")
    s.sendmail("realtls@client.test", ["r@dest.test"], "Subject: tls\r\n\r\nhi\r\n")
out("sent", "yes")
"#,
        CLIENT_TIMEOUT,
    );
    assert_eq!(out.field("sent").as_deref(), Some("yes"), "{out}");
    by.finish(&rec);
    assert!(rec
        .messages()
        .iter()
        .any(|m| m.mail_from == "realtls@client.test"));
    // No upstream session was opened for the garbage connections.
    assert_eq!(rec.events_of("session_start").len(), 2);
}

#[test]
fn commands_sent_before_the_greeting_are_answered_in_order() {
    let rec = Recorder::plain();
    let fg = Floodgate::start(&FloodgateConfig::new(rec.addr()));
    let addr = fg.addr("plain");
    let by = Bystander::open(addr, "honest");
    let mut c = RawClient::connect(addr);
    c.send(
        b"EHLO early.client.test\r\nMAIL FROM:<early@client.test>\r\n\
          RCPT TO:<e@dest.test>\r\nDATA\r\n",
    );
    let codes: Vec<u16> = c.replies(5).iter().map(|r| r.code).collect();
    assert_eq!(codes, [220, 250, 250, 250, 354]);
    c.send(b"Subject: early\r\n\r\ntoo eager\r\n.\r\nQUIT\r\n");
    let codes: Vec<u16> = c.replies_until_close().iter().map(|r| r.code).collect();
    assert_eq!(codes, [250, 221]);
    by.finish(&rec);
    // floodgate answers QUIT itself and then closes upstream with its own QUIT: wait for
    // both upstream sessions to end before reading what upstream saw.
    rec.wait_events("session_end", 2);

    let m = rec
        .messages()
        .into_iter()
        .find(|m| m.mail_from == "early@client.test")
        .expect("the early client's message");
    let seen: Vec<String> = rec
        .events_of("command")
        .iter()
        .filter(|e| e["session"].as_u64() == Some(m.session))
        .map(|e| e["line"].as_str().unwrap_or_default().to_string())
        .collect();
    assert_eq!(
        seen,
        [
            "EHLO early.client.test",
            "MAIL FROM:<early@client.test>",
            "RCPT TO:<e@dest.test>",
            &format!("BDAT {} LAST", m.data.len()),
            "QUIT"
        ]
    );
}

#[test]
fn an_ipv6_listener_relays_a_message() {
    if std::net::TcpListener::bind("[::1]:0").is_err() {
        eprintln!("note: ::1 is not available here; skipping the IPv6 listener test");
        return;
    }
    let rec = Recorder::plain();
    let fg = Floodgate::start(
        &FloodgateConfig::new(rec.addr())
            .identity("xclient")
            .listeners(vec![
                ListenerSpec::new("plain", "none"),
                ListenerSpec::new("six", "none").at("[::1]:0"),
            ]),
    );
    let six = fg.addr("six");
    assert!(six.is_ipv6(), "{six}");
    let by = Bystander::open(fg.addr("plain"), "honest");
    let mut c = RawClient::connect_greeted(six);
    c.ehlo("six.client.test");
    assert_eq!(c.cmd("MAIL FROM:<six@client.test>").code, 250);
    assert_eq!(c.cmd("RCPT TO:<s@dest.test>").code, 250);
    assert_eq!(c.cmd("DATA").code, 354);
    c.send(b"Subject: v6\r\n\r\nover ::1\r\n.\r\nQUIT\r\n");
    let codes: Vec<u16> = c.replies_until_close().iter().map(|r| r.code).collect();
    assert_eq!(codes, [250, 221]);
    by.finish(&rec);
    let m = rec
        .messages()
        .into_iter()
        .find(|m| m.mail_from == "six@client.test")
        .expect("the IPv6 client's message");
    assert_eq!(
        m.xclient.get("ADDR").map(String::as_str),
        Some("IPV6:::1"),
        "{m:?}"
    );
}
