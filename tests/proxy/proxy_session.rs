//! Session-level behaviour a client and a postmaster see: the SIZE floodgate advertises,
//! HELP, an upstream that refuses in its greeting, listeners that require TLS and AUTH
//! before MAIL, and the log lines (TLS of the session, refused messages, TLS handshakes).

use crate::common;

use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use common::*;

// ---------------------------------------------------------------------------------------
// A scripted upstream
// ---------------------------------------------------------------------------------------

/// An SMTP upstream on 127.0.0.1 with a given greeting and EHLO reply (none: EHLO is
/// answered 502, as by a server that knows only HELO); every other command
/// gets 250, QUIT 221, except that a MAIL whose sender contains "refused" gets 553 and a
/// RCPT outside a transaction 503, as Postfix answers them. It records the command lines
/// it receives. Accepting stops when it is
/// dropped or after [`SCRIPTED_LIFETIME`].
struct Scripted {
    addr: SocketAddr,
    lines: Arc<Mutex<Vec<String>>>,
    stop: Arc<AtomicBool>,
}

const SCRIPTED_LIFETIME: Duration = Duration::from_secs(120);

impl Scripted {
    fn start(greeting: &str, ehlo: &[&str]) -> Scripted {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        listener.set_nonblocking(true).expect("nonblocking");
        let addr = listener.local_addr().expect("addr");
        let lines = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let greeting = format!("{greeting}\r\n");
        let mut ehlo_reply = String::new();
        for (i, l) in ehlo.iter().enumerate() {
            let sep = if i + 1 == ehlo.len() { ' ' } else { '-' };
            ehlo_reply.push_str(&format!("250{sep}{l}\r\n"));
        }
        let (seen, stopped) = (lines.clone(), stop.clone());
        thread::spawn(move || {
            let until = Instant::now() + SCRIPTED_LIFETIME;
            while !stopped.load(Ordering::Relaxed) && Instant::now() < until {
                match listener.accept() {
                    Ok((conn, _)) => {
                        let (g, e, seen) = (greeting.clone(), ehlo_reply.clone(), seen.clone());
                        thread::spawn(move || {
                            let _ = scripted_session(conn, &g, &e, &seen);
                        });
                    }
                    Err(_) => thread::sleep(Duration::from_millis(10)),
                }
            }
        });
        Scripted { addr, lines, stop }
    }

    fn lines(&self) -> Vec<String> {
        self.lines.lock().expect("lines").clone()
    }
}

impl Drop for Scripted {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

fn scripted_session(
    conn: TcpStream,
    greeting: &str,
    ehlo: &str,
    seen: &Mutex<Vec<String>>,
) -> std::io::Result<()> {
    conn.set_nonblocking(false)?;
    conn.set_read_timeout(Some(Duration::from_secs(30)))?;
    let mut w = conn.try_clone()?;
    let mut r = BufReader::new(conn);
    w.write_all(greeting.as_bytes())?;
    let mut line = Vec::new();
    let mut in_txn = false;
    // Bounded: at most this many commands per session.
    for _ in 0..1000 {
        line.clear();
        if r.read_until(b'\n', &mut line)? == 0 {
            return Ok(());
        }
        let text = String::from_utf8_lossy(&line).trim_end().to_string();
        seen.lock().expect("lines").push(text.clone());
        let verb = text.split(' ').next().unwrap_or("").to_ascii_uppercase();
        match verb.as_str() {
            "EHLO" if ehlo.is_empty() => {
                w.write_all(b"502 5.5.2 Error: command not recognized\r\n")?
            }
            "EHLO" => {
                in_txn = false;
                w.write_all(ehlo.as_bytes())?
            }
            "QUIT" => {
                w.write_all(b"221 2.0.0 Bye\r\n")?;
                return Ok(());
            }
            "MAIL" if text.contains("refused") => {
                w.write_all(b"553 5.7.1 <refused@client.test>: Sender address rejected\r\n")?
            }
            "MAIL" => {
                in_txn = true;
                w.write_all(b"250 2.1.0 Ok\r\n")?
            }
            "RCPT" if !in_txn => w.write_all(b"503 5.5.1 Error: need MAIL command\r\n")?,
            "RSET" | "HELO" => {
                in_txn = false;
                w.write_all(b"250 2.0.0 Ok\r\n")?
            }
            _ => w.write_all(b"250 2.0.0 Ok\r\n")?,
        }
    }
    Ok(())
}

fn size_line(r: &Reply) -> Option<String> {
    r.lines
        .iter()
        .skip(1)
        .find(|l| l.to_ascii_uppercase().starts_with("SIZE"))
        .cloned()
}

// ---------------------------------------------------------------------------------------
// EHLO SIZE
// ---------------------------------------------------------------------------------------

#[test]
fn ehlo_size_is_the_smaller_of_upstreams_limit_and_floodgates() {
    const OWN: u64 = 1_048_576;
    let smtp = format!("[smtp]\nmax_message_size = {OWN}\n");
    // The recorder advertises SIZE 52428800: floodgate's smaller limit wins.
    let rec = Recorder::plain();
    let fg = Floodgate::start(&FloodgateConfig::new(rec.addr()).extra(&smtp));
    let mut c = RawClient::connect_greeted(fg.addr("plain"));
    let r = c.ehlo("client.test");
    assert_eq!(size_line(&r).as_deref(), Some("SIZE 1048576"), "{r:?}");
    // A size over floodgate's limit is refused at MAIL.
    let r = c.cmd("MAIL FROM:<a@client.test> SIZE=2000000");
    assert_eq!(
        (r.code, r.enhanced().as_deref()),
        (552, Some("5.3.4")),
        "{r:?}"
    );
    let r = c.cmd("MAIL FROM:<a@client.test> SIZE=1000");
    assert_eq!(r.code, 250, "{r:?}");
    drop(fg);

    // Upstream with SIZE and no number (no limit), SIZE 0 (the same), and a smaller SIZE.
    for (upstream, want) in [
        ("SIZE", "SIZE 1048576"),
        ("SIZE 0", "SIZE 1048576"),
        ("SIZE 1000", "SIZE 1000"),
    ] {
        let up = Scripted::start(
            "220 scripted.test ESMTP",
            &["scripted.test", "PIPELINING", upstream, "8BITMIME"],
        );
        let fg = Floodgate::start(&FloodgateConfig::new(up.addr).extra(&smtp));
        let mut c = RawClient::connect_greeted(fg.addr("plain"));
        let r = c.ehlo("client.test");
        assert_eq!(
            size_line(&r).as_deref(),
            Some(want),
            "upstream {upstream}: {r:?}"
        );
        assert!(r.keywords().contains(&"8BITMIME".to_string()), "{r:?}");
    }

    // No SIZE upstream: none for the client, and SIZE= is refused as unoffered.
    let up = Scripted::start("220 scripted.test ESMTP", &["scripted.test", "PIPELINING"]);
    let fg = Floodgate::start(&FloodgateConfig::new(up.addr).extra(&smtp));
    let mut c = RawClient::connect_greeted(fg.addr("plain"));
    let r = c.ehlo("client.test");
    assert_eq!(size_line(&r), None, "{r:?}");
    assert_eq!(c.cmd("MAIL FROM:<a@client.test> SIZE=10").code, 555);
}

// ---------------------------------------------------------------------------------------
// MAIL with the first RCPT ([upstream] pipelining)
// ---------------------------------------------------------------------------------------

/// The command lines upstream received from MAIL on (its EHLO and any XCLIENT before them
/// left out).
fn from_mail(up: &Scripted) -> Vec<String> {
    let lines = up.lines();
    let first = lines
        .iter()
        .position(|l| !l.starts_with("EHLO"))
        .unwrap_or(lines.len());
    lines[first..].to_vec()
}

#[test]
fn mail_goes_upstream_with_the_first_rcpt_where_upstream_pipelines() {
    let up = Scripted::start("220 scripted.test ESMTP", &["scripted.test", "PIPELINING"]);
    let fg = Floodgate::start(&FloodgateConfig::new(up.addr));
    let mut c = RawClient::connect_greeted(fg.addr("plain"));
    c.ehlo("client.test");
    // floodgate answers the MAIL; upstream has not seen it, and after RSET never does.
    let r = c.cmd("MAIL FROM:<a@client.test>");
    assert_eq!(
        r.text(),
        "250 2.1.0 Ok\r\n",
        "floodgate's own answer: {r:?}"
    );
    assert_eq!(c.cmd("RSET").code, 250);
    assert_eq!(from_mail(&up), ["RSET"]);
    // MAIL then RCPT: upstream gets both, in that order, and answers both.
    assert_eq!(c.cmd("MAIL FROM:<a@client.test>").code, 250);
    let r = c.cmd("RCPT TO:<b@remote.test>");
    assert_eq!(r.code, 250, "{r:?}");
    assert_eq!(c.cmd("RCPT TO:<c@remote.test>").code, 250);
    assert_eq!(c.cmd("DATA").code, 354);
    c.send(b"Subject: t\r\n\r\nbody\r\n.\r\n");
    assert_eq!(c.reply().code, 250);
    assert_eq!(
        from_mail(&up)[1..4],
        [
            "MAIL FROM:<a@client.test>",
            "RCPT TO:<b@remote.test>",
            "RCPT TO:<c@remote.test>"
        ]
    );
    // A NOOP between MAIL and RCPT takes the MAIL with it.
    assert_eq!(c.cmd("MAIL FROM:<d@client.test>").code, 250);
    assert_eq!(c.cmd("NOOP").code, 250);
    assert_eq!(c.cmd("RCPT TO:<b@remote.test>").code, 250);
    let lines = from_mail(&up);
    assert_eq!(
        lines[lines.len() - 3..],
        [
            "MAIL FROM:<d@client.test>",
            "NOOP",
            "RCPT TO:<b@remote.test>"
        ]
    );
}

#[test]
fn a_helo_client_is_relayed_in_an_ehlo_session_and_answered_as_helo() {
    let up = Scripted::start(
        "220 scripted.test ESMTP",
        &["scripted.test greets you", "PIPELINING", "SIZE 1000"],
    );
    let fg = Floodgate::start(&FloodgateConfig::new(up.addr));
    let mut c = RawClient::connect_greeted(fg.addr("plain"));
    // HELO's one-line answer: EHLO's first line, not its list.
    let r = c.cmd("HELO client.test");
    assert_eq!(r.text(), "250 scripted.test greets you\r\n", "{r:?}");
    assert_eq!(up.lines(), ["EHLO client.test"]);
    // No extension for the client, though upstream offered SIZE.
    assert_eq!(c.cmd("MAIL FROM:<a@client.test> SIZE=10").code, 555);
    // floodgate's MAIL goes with the first RCPT, as for an EHLO client.
    let r = c.cmd("MAIL FROM:<a@client.test>");
    assert_eq!(
        r.text(),
        "250 2.1.0 Ok\r\n",
        "floodgate's own answer: {r:?}"
    );
    assert_eq!(up.lines(), ["EHLO client.test"]);
    assert_eq!(c.cmd("RCPT TO:<b@remote.test>").code, 250);
    assert_eq!(c.cmd("DATA").code, 354);
    c.send(b"Subject: t\r\n\r\nbody\r\n.\r\n");
    assert_eq!(c.reply().code, 250);
    assert_eq!(
        up.lines()[1..4],
        [
            "MAIL FROM:<a@client.test>",
            "RCPT TO:<b@remote.test>",
            "DATA"
        ]
    );
    // A second HELO starts over the same way.
    assert_eq!(c.cmd("HELO again.test").code, 250);
    assert_eq!(
        up.lines().last().map(String::as_str),
        Some("EHLO again.test")
    );
}

#[test]
fn a_mail_declaring_a_size_over_the_announced_one_waits_for_upstream() {
    let up = Scripted::start(
        "220 scripted.test ESMTP",
        &["scripted.test", "PIPELINING", "SIZE 1000"],
    );
    let fg = Floodgate::start(&FloodgateConfig::new(up.addr));
    let mut c = RawClient::connect_greeted(fg.addr("plain"));
    c.ehlo("client.test");
    assert_eq!(c.cmd("MAIL FROM:<a@client.test> SIZE=1000").code, 250);
    assert_eq!(c.cmd("RSET").code, 250);
    assert_eq!(c.cmd("MAIL FROM:<a@client.test> SIZE=1001").code, 250);
    assert_eq!(c.cmd("RSET").code, 250);
    // The first went with nothing (dropped at RSET), the second at once.
    assert_eq!(
        from_mail(&up),
        ["RSET", "MAIL FROM:<a@client.test> SIZE=1001", "RSET"]
    );
}

#[test]
fn a_sender_refused_upstream_is_the_answer_to_the_first_rcpt() {
    let up = Scripted::start("220 scripted.test ESMTP", &["scripted.test", "PIPELINING"]);
    let fg = Floodgate::start(&FloodgateConfig::new(up.addr).log_level("info"));
    let mut c = RawClient::connect_greeted(fg.addr("plain"));
    c.ehlo("client.test");
    assert_eq!(c.cmd("MAIL FROM:<refused@client.test>").code, 250);
    let r = c.cmd("RCPT TO:<b@remote.test>");
    assert_eq!(
        (r.code, r.enhanced().as_deref()),
        (553, Some("5.7.1")),
        "upstream's answer to the MAIL, not its 503 to the RCPT: {r:?}"
    );
    // The transaction has ended: no more recipients, no DATA, and a new MAIL works.
    assert_eq!(c.cmd("RCPT TO:<c@remote.test>").code, 503);
    assert_eq!(c.cmd("DATA").code, 503);
    assert_eq!(c.cmd("MAIL FROM:<a@client.test>").code, 250);
    assert_eq!(c.cmd("RCPT TO:<c@remote.test>").code, 250);
    assert_eq!(c.cmd("DATA").code, 354);
    c.send(b"Subject: t\r\n\r\nbody\r\n.\r\n");
    assert_eq!(c.reply().code, 250);
    let lines = from_mail(&up);
    assert_eq!(
        lines[..4],
        [
            "MAIL FROM:<refused@client.test>",
            "RCPT TO:<b@remote.test>",
            "MAIL FROM:<a@client.test>",
            "RCPT TO:<c@remote.test>"
        ]
    );
    c.cmd("QUIT");
    let log = fg.stderr();
    assert!(
        log.lines().any(
            |l| l.contains("sender refused upstream after MAIL was answered")
                && l.contains("sender=\"refused@client.test\"")
                && l.contains("code=553")
        ),
        "{log}"
    );
}

#[test]
fn mail_waits_for_upstream_without_pipelining_or_ehlo_or_when_turned_off() {
    let refused_at_mail = |up: &Scripted, fg: &Floodgate, helo: &str| {
        let mut c = RawClient::connect_greeted(fg.addr("plain"));
        if helo == "EHLO" {
            c.ehlo("client.test");
        } else {
            assert_eq!(c.cmd("HELO client.test").code, 250);
        }
        let r = c.cmd("MAIL FROM:<refused@client.test>");
        assert_eq!(
            (r.code, r.enhanced().as_deref()),
            (553, Some("5.7.1")),
            "{r:?}"
        );
        assert!(from_mail(up)
            .iter()
            .any(|l| l == "MAIL FROM:<refused@client.test>"));
    };
    // Upstream does not offer PIPELINING.
    let up = Scripted::start("220 scripted.test ESMTP", &["scripted.test", "8BITMIME"]);
    let fg = Floodgate::start(&FloodgateConfig::new(up.addr));
    refused_at_mail(&up, &fg, "EHLO");
    // It does, but the client's HELO went upstream as HELO ([upstream] always_ehlo =
    // false): upstream's session takes no extension.
    let up = Scripted::start("220 scripted.test ESMTP", &["scripted.test", "PIPELINING"]);
    let fg = Floodgate::start(&FloodgateConfig::new(up.addr).upstream_key("always_ehlo", "false"));
    refused_at_mail(&up, &fg, "HELO");
    assert!(up.lines().iter().any(|l| l == "HELO client.test"));
    assert!(!up.lines().iter().any(|l| l.starts_with("EHLO")));
    // It does, and [upstream] pipelining = false.
    let fg = Floodgate::start(&FloodgateConfig::new(up.addr).upstream_key("pipelining", "false"));
    refused_at_mail(&up, &fg, "EHLO");
    // It does not know EHLO at all: floodgate's EHLO for the HELO client is answered 502
    // and the HELO goes after it.
    let up = Scripted::start("220 scripted.test SMTP", &[]);
    let fg = Floodgate::start(&FloodgateConfig::new(up.addr));
    refused_at_mail(&up, &fg, "HELO");
    assert_eq!(up.lines()[..2], ["EHLO client.test", "HELO client.test"]);
}

// ---------------------------------------------------------------------------------------
// HELP
// ---------------------------------------------------------------------------------------

/// The verbs of floodgate's one-line 214 answer.
fn help_verbs(c: &mut RawClient) -> Vec<String> {
    let r = c.cmd("HELP");
    assert_eq!(
        (r.code, r.enhanced().as_deref()),
        (214, Some("2.0.0")),
        "{r:?}"
    );
    assert_eq!(r.lines.len(), 1, "{r:?}");
    let text = &r.lines[0];
    let list = text
        .split_once(": ")
        .unwrap_or_else(|| panic!("no list in {r:?}"))
        .1;
    list.split(' ').map(str::to_string).collect()
}

#[test]
fn help_is_answered_by_floodgate_with_what_it_accepts() {
    let rec = Recorder::plain();
    let fg = Floodgate::start(&FloodgateConfig::new(rec.addr()).auth_without_tls(true));
    // A STARTTLS listener before TLS: STARTTLS is listed; BDAT (CHUNKING is not offered)
    // and XCLIENT never are.
    let mut c = RawClient::connect_greeted(fg.addr("submission"));
    let before = help_verbs(&mut c);
    assert!(before.contains(&"STARTTLS".to_string()), "{before:?}");
    assert!(
        !before.contains(&"AUTH".to_string()),
        "before EHLO: {before:?}"
    );
    let r = c.ehlo("client.test");
    assert!(r.keywords().contains(&"AUTH".to_string()), "{r:?}");
    let verbs = help_verbs(&mut c);
    for want in [
        "EHLO", "HELO", "STARTTLS", "AUTH", "MAIL", "RCPT", "DATA", "QUIT",
    ] {
        assert!(
            verbs.contains(&want.to_string()),
            "{want} missing: {verbs:?}"
        );
    }
    assert_eq!(
        verbs.contains(&"BDAT".to_string()),
        r.keywords().contains(&"CHUNKING".to_string()),
        "BDAT listed exactly when CHUNKING is offered: {verbs:?} / {r:?}"
    );
    for hidden in ["XCLIENT", "XFORWARD", "ETRN"] {
        assert!(!verbs.contains(&hidden.to_string()), "{verbs:?}");
    }
    // A plain listener offers no STARTTLS.
    let mut p = RawClient::connect_greeted(fg.addr("plain"));
    p.ehlo("client.test");
    assert!(!help_verbs(&mut p).contains(&"STARTTLS".to_string()));
    assert_eq!(p.cmd("QUIT").code, 221);
    assert_eq!(c.cmd("QUIT").code, 221);
    rec.wait_idle();
    let relayed: Vec<String> = rec
        .commands()
        .into_iter()
        .filter(|l| l.to_ascii_uppercase().starts_with("HELP"))
        .collect();
    assert!(relayed.is_empty(), "HELP went upstream: {relayed:?}");
}

// ---------------------------------------------------------------------------------------
// An upstream that refuses in its greeting
// ---------------------------------------------------------------------------------------

#[test]
fn an_upstream_greeting_421_is_passed_on_and_the_session_closed() {
    let up = Scripted::start("421 4.3.2 scripted.test Service not available", &["x"]);
    let fg = Floodgate::start(&FloodgateConfig::new(up.addr).log_level("info"));
    let mut c = RawClient::connect(fg.addr("plain"));
    let r = c.reply();
    assert_eq!(r.code, 421, "{r:?}");
    assert_eq!(r.lines, ["4.3.2 scripted.test Service not available"]);
    let rest = c.replies_until_close();
    assert!(rest.is_empty(), "replies after upstream's 421: {rest:?}");
    fg.wait_stderr(
        "upstream refused the session in its greeting",
        Duration::from_secs(10),
    );
    let log = fg.stderr();
    let line = log
        .lines()
        .find(|l| l.contains("upstream refused the session in its greeting"))
        .expect("line");
    assert!(
        line.contains("client=127.0.0.1") && line.contains("code=421"),
        "{line}"
    );
    assert!(
        line.contains("upstream=\"4.3.2 scripted.test Service not available\""),
        "{line}"
    );
}

#[test]
fn an_upstream_greeting_554_is_passed_on_and_floodgate_waits_for_quit() {
    let up = Scripted::start("554 5.3.2 scripted.test No SMTP service here", &["x"]);
    let fg = Floodgate::start(&FloodgateConfig::new(up.addr).log_level("info"));
    let mut c = RawClient::connect(fg.addr("plain"));
    let r = c.reply();
    assert_eq!(
        (r.code, r.lines.clone()),
        (
            554,
            vec!["5.3.2 scripted.test No SMTP service here".to_string()]
        )
    );
    for cmd in ["EHLO client.test", "MAIL FROM:<a@client.test>", "HELP"] {
        let r = c.cmd(cmd);
        assert_eq!(
            (r.code, r.enhanced().as_deref()),
            (503, Some("5.5.1")),
            "{cmd}: {r:?}"
        );
        assert!(!r.text().contains("Error"), "{r:?}");
    }
    assert_eq!(c.cmd("QUIT").code, 221);
    assert!(c.replies_until_close().is_empty());
    // Nothing but floodgate's own QUIT ever reached upstream.
    let lines = up.lines();
    assert!(
        lines.iter().all(|l| l.eq_ignore_ascii_case("QUIT")),
        "upstream got {lines:?}"
    );
}

// ---------------------------------------------------------------------------------------
// require_tls, require_auth
// ---------------------------------------------------------------------------------------

#[test]
fn listeners_requiring_tls_and_auth_refuse_mail_with_530_until_both() {
    let rec = Recorder::plain();
    let fg = Floodgate::start(&FloodgateConfig::new(rec.addr()).listeners(vec![
        ListenerSpec::new("plain", "none"),
        ListenerSpec::new("submission", "starttls").requiring(true, true),
        ListenerSpec::new("submissions", "implicit").requiring(true, true),
        ListenerSpec::new("tlsonly", "starttls").requiring(true, false),
    ]));
    // Before STARTTLS: TLS first.
    let mut c = RawClient::connect_greeted(fg.addr("submission"));
    c.ehlo("client.test");
    let r = c.cmd("MAIL FROM:<early@client.test>");
    assert_eq!(r.code, 530, "{r:?}");
    assert_eq!(r.lines, ["5.7.0 Must issue a STARTTLS command first"]);
    assert_eq!(c.cmd("QUIT").code, 221);

    // After STARTTLS without AUTH: authentication first; after AUTH the message goes.
    let script = r#"
def attempt(s, tag):
    code, msg = s.mail("%s@client.test" % tag)
    out(tag, "%d %s" % (code, msg.decode()))
    if code == 250:
        s.rcpt("rcpt@dest.test")
        s.data("Subject: %s\r\n\r\nbody\r\n" % tag)
s = smtplib.SMTP(HOST, PORT, timeout=20)
s.starttls(context=ctx()); s.ehlo("client.test")
attempt(s, "noauth"); s.rset()
s.login(USER, PASSWORD)
attempt(s, "authed"); s.quit()
"#;
    let out = smtplib(fg.addr("submission"), script, CLIENT_TIMEOUT);
    assert!(out.ok(), "{out}");
    assert_eq!(
        out.field("noauth").as_deref(),
        Some("530 5.7.0 Authentication required"),
        "{out}"
    );
    assert_eq!(
        out.field("authed").as_deref().map(|s| &s[..3]),
        Some("250"),
        "{out}"
    );

    // Implicit TLS: require_tls is met from the start, AUTH is still needed.
    let script = r#"
s = smtplib.SMTP_SSL(HOST, PORT, timeout=20, context=ctx())
s.ehlo("client.test")
code, msg = s.mail("implicit-noauth@client.test"); out("noauth", "%d %s" % (code, msg.decode()))
s.rset(); s.login(USER, PASSWORD)
code, msg = s.mail("implicit@client.test"); out("authed", "%d" % code)
s.rcpt("rcpt@dest.test"); s.data("Subject: implicit\r\n\r\nbody\r\n"); s.quit()
"#;
    let out = smtplib(fg.addr("submissions"), script, CLIENT_TIMEOUT);
    assert!(out.ok(), "{out}");
    assert_eq!(
        out.field("noauth").as_deref(),
        Some("530 5.7.0 Authentication required"),
        "{out}"
    );
    assert_eq!(out.field("authed").as_deref(), Some("250"), "{out}");

    // TLS only: after STARTTLS, MAIL goes without AUTH.
    let script = r#"
s = smtplib.SMTP(HOST, PORT, timeout=20)
s.starttls(context=ctx()); s.ehlo("client.test")
code, msg = s.mail("tlsonly@client.test"); out("mail", "%d" % code); s.quit()
"#;
    let out = smtplib(fg.addr("tlsonly"), script, CLIENT_TIMEOUT);
    assert_eq!(out.field("mail").as_deref(), Some("250"), "{out}");

    // A listener without requirements relays as before.
    let mut p = RawClient::connect_greeted(fg.addr("plain"));
    p.ehlo("client.test");
    assert_eq!(p.cmd("MAIL FROM:<plain@client.test>").code, 250);
    assert_eq!(p.cmd("QUIT").code, 221);

    rec.wait_idle();
    let senders: Vec<String> = rec.messages().iter().map(|m| m.mail_from.clone()).collect();
    assert_eq!(senders, ["authed@client.test", "implicit@client.test"]);
    let refused_reached_upstream = rec
        .commands()
        .iter()
        .any(|l| l.contains("early@") || l.contains("noauth@"));
    assert!(!refused_reached_upstream, "{:?}", rec.commands());
}

#[test]
fn check_prints_the_listener_requirements_and_refuses_a_wrong_type() {
    let dir = tempfile::TempDir::new().expect("tempdir");
    let path = dir.path().join("floodgate.toml");
    let base = format!(
        "[[listener]]\nname = \"sub\"\naddress = \"127.0.0.1:0\"\ntls = \"starttls\"\n\
         require_tls = true\nrequire_auth = true\n\n\
         [[listener]]\nname = \"relay\"\naddress = \"127.0.0.1:0\"\n\n\
         [tls]\ncertificate = \"{}\"\nprivate_key = \"{}\"\n\n\
         [upstream]\naddress = \"127.0.0.1:2525\"\nclient_identity = \"proxy-v2\"\n\n\
         [smtp]\nbare_line_endings = \"normalize\"\n",
        dev_cert("server.crt").display(),
        dev_cert("server.key").display()
    );
    std::fs::write(&path, &base).expect("write");
    let out = run_with_timeout(
        Command::new(env!("CARGO_BIN_EXE_floodgate"))
            .args(["check", "--config"])
            .arg(&path),
        Duration::from_secs(30),
    );
    assert!(out.ok(), "{out}");
    let text = out.text();
    assert!(
        text.contains(
            "listener sub: 127.0.0.1:0 tls=starttls proxy_protocol=false require_tls=true require_auth=true"
        ),
        "{text}"
    );
    assert!(
        text.contains("listener relay: 127.0.0.1:0 tls=none proxy_protocol=false require_tls=false require_auth=false"),
        "{text}"
    );
    // The config's words, not Rust's names for them.
    assert!(text.contains("client_identity=proxy-v2"), "{text}");
    assert!(text.contains("bare_line_endings=normalize"), "{text}");
    assert!(
        text.contains("on_identity_refused=refuse chunking=true"),
        "{text}"
    );
    assert!(
        text.contains("chunking=true add_received=false received_show_user=false"),
        "{text}"
    );
    assert!(text.contains("resolve_client_names=true"), "{text}");
    assert!(text.contains("client_name_lookup=5s"), "{text}");
    for debug_word in [
        "ProxyV2",
        "Xclient",
        "Normalize",
        "Reject",
        "Starttls",
        "Refuse",
        "Relay",
    ] {
        assert!(!text.contains(debug_word), "{debug_word} in {text}");
    }

    std::fs::write(
        &path,
        base.replace("require_auth = true", "require_auth = \"yes\""),
    )
    .expect("write");
    let out = run_with_timeout(
        Command::new(env!("CARGO_BIN_EXE_floodgate"))
            .args(["check", "--config"])
            .arg(&path)
            .stdin(Stdio::null()),
        Duration::from_secs(30),
    );
    assert!(!out.ok(), "{out}");
    let text = out.text();
    assert!(text.contains("floodgate.toml:6:"), "{text}");
    assert!(text.contains("expected a boolean"), "{text}");
}

// ---------------------------------------------------------------------------------------
// Log lines
// ---------------------------------------------------------------------------------------

/// The `session` log line of the session on listener `name`.
fn session_line(log: &str, name: &str) -> String {
    let tag = format!("listener={name} ");
    log.lines()
        .find(|l| l.contains(" session client=") && l.contains(&tag))
        .unwrap_or_else(|| panic!("no session line for {name} in:\n{log}"))
        .to_string()
}

#[test]
fn the_session_line_names_the_tls_of_starttls_and_implicit_sessions() {
    let rec = Recorder::plain();
    let fg = Floodgate::start(&FloodgateConfig::new(rec.addr()).log_level("info"));
    let ca = ca_file();
    let ca = ca.to_str().expect("utf-8");
    let starttls = fg.addr("submission").to_string();
    let implicit = fg.addr("submissions").to_string();
    let plain = fg.addr("plain").to_string();
    for args in [
        vec!["--server", &starttls, "-tls", "--tls-ca-path", ca],
        vec![
            "--server",
            &implicit,
            "--tls-on-connect",
            "--tls-ca-path",
            ca,
        ],
        vec!["--server", &plain],
    ] {
        let mut all = args.clone();
        all.extend(["--from", "a@client.test", "--to", "b@dest.test"]);
        let out = swaks(&all);
        assert!(out.ok(), "{out}");
    }
    fg.wait_stderr_count(" session client=", 3, Duration::from_secs(10));
    let log = fg.stderr();
    for name in ["submission", "submissions"] {
        let line = session_line(&log, name);
        assert!(line.contains("tls=\"TLSv1_"), "{name}: {line}");
        assert!(!line.contains("tls=\"no\""), "{name}: {line}");
    }
    let line = session_line(&log, "plain");
    assert!(line.contains("tls=\"no\""), "{line}");
}

#[test]
fn a_refused_message_is_logged_with_its_sender_user_and_reason_and_upstream_is_quoted() {
    let rec = Recorder::plain();
    let fg = Floodgate::start(
        &FloodgateConfig::new(rec.addr())
            .log_level("info")
            .auth_without_tls(true)
            .extra("[smtp]\nmax_message_size = 2048\n"),
    );
    let mut c = RawClient::connect_greeted(fg.addr("plain"));
    c.ehlo("client.test");
    let token = b64_encode(format!("\0{USER}\0{PASSWORD}").as_bytes());
    assert_eq!(c.cmd(&format!("AUTH PLAIN {token}")).code, 235);
    // One message that goes through, for the `message` line.
    assert_eq!(c.cmd("MAIL FROM:<small@client.test>").code, 250);
    assert_eq!(c.cmd("RCPT TO:<b@dest.test>").code, 250);
    assert_eq!(c.cmd("DATA").code, 354);
    assert_eq!(c.cmd("Subject: small\r\n\r\nbody\r\n.").code, 250);
    // One over max_message_size.
    assert_eq!(c.cmd("MAIL FROM:<big@client.test>").code, 250);
    assert_eq!(c.cmd("RCPT TO:<b@dest.test>").code, 250);
    assert_eq!(c.cmd("DATA").code, 354);
    let mut body = b"Subject: big\r\n\r\n".to_vec();
    while body.len() < 4096 {
        body.extend_from_slice(b"a line of a message that is too big for this floodgate\r\n");
    }
    body.extend_from_slice(b".\r\n");
    c.send(&body);
    let r = c.reply();
    assert_eq!(r.code, 552, "{r:?}");
    assert_eq!(c.cmd("QUIT").code, 221);
    fg.wait_stderr(" message refused ", Duration::from_secs(10));
    let log = fg.stderr();
    let refused = log
        .lines()
        .find(|l| l.contains(" message refused "))
        .expect("line");
    for want in [
        "client=127.0.0.1",
        "user=\"alice\"",
        "sender=\"big@client.test\"",
        "recipients=1",
        "code=552",
        "reason=\"5.3.4 ",
    ] {
        assert!(refused.contains(want), "{want} missing: {refused}");
    }
    let message = log
        .lines()
        .find(|l| l.contains(" message client="))
        .expect("message line");
    assert!(message.contains("upstream=\"2.0.0 "), "{message}");
    assert!(
        message.contains("sender=\"small@client.test\""),
        "{message}"
    );
}

/// Runs `openssl s_client` against `addr` sending `sni` as the server name, with `input`
/// on stdin; returns its output.
fn s_client(addr: SocketAddr, sni: &str, input: &str) -> Output {
    let mut cmd = Command::new("openssl");
    // -quiet also ignores the end of stdin: the session ends with floodgate's 221.
    cmd.args([
        "s_client",
        "-connect",
        &addr.to_string(),
        "-servername",
        sni,
    ])
    .args([
        "-CAfile",
        ca_file().to_str().expect("utf-8"),
        "-crlf",
        "-quiet",
    ]);
    run_with_input(&mut cmd, input.as_bytes(), Duration::from_secs(30))
}

/// Runs `cmd` with `input` on stdin (then closed), for at most `limit`.
fn run_with_input(cmd: &mut Command, input: &[u8], limit: Duration) -> Output {
    let dir = tempfile::TempDir::new().expect("tempdir");
    let (out_path, err_path) = (dir.path().join("stdout"), dir.path().join("stderr"));
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(std::fs::File::create(&out_path).expect("stdout file"))
        .stderr(std::fs::File::create(&err_path).expect("stderr file"))
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {cmd:?}: {e}"));
    if let Some(mut stdin) = child.stdin.take() {
        let _ = stdin.write_all(input);
    }
    let deadline = Instant::now() + limit;
    let status = loop {
        if let Ok(Some(status)) = child.try_wait() {
            break Some(status);
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        thread::sleep(Duration::from_millis(20));
    };
    let read = |p: &std::path::Path| {
        String::from_utf8_lossy(&std::fs::read(p).unwrap_or_default()).into_owned()
    };
    Output {
        code: status.and_then(|s| s.code()),
        stdout: read(&out_path),
        stderr: read(&err_path),
        timed_out: status.is_none(),
    }
}

#[test]
fn an_ip_address_as_sni_is_served_quietly_and_failed_handshakes_name_the_client() {
    let rec = Recorder::plain();
    // rustls's own warnings on: the IP sent as SNI is seen (so the client really sends it).
    let loud = Floodgate::start(&FloodgateConfig::new(rec.addr()).log_level("info,rustls=warn"));
    let out = s_client(
        loud.addr("submissions"),
        "127.0.0.1",
        "EHLO client.test\nQUIT\n",
    );
    assert!(out.stdout.contains("221"), "{out}");
    loud.wait_stderr(" session client=", Duration::from_secs(10));
    assert!(
        loud.stderr().contains("Illegal SNI"),
        "the client did not send an IP as SNI:\n{}",
        loud.stderr()
    );
    drop(loud);

    // The default: the handshake succeeds, no client-less rustls line.
    let fg = Floodgate::start(&FloodgateConfig::new(rec.addr()).log_level("info"));
    let out = s_client(
        fg.addr("submissions"),
        "127.0.0.1",
        "EHLO client.test\nQUIT\n",
    );
    assert!(out.stdout.contains("221"), "{out}");
    fg.wait_stderr(" session client=", Duration::from_secs(10));
    let log = fg.stderr();
    assert!(!log.contains("Illegal SNI"), "{log}");
    let line = session_line(&log, "submissions");
    assert!(line.contains("tls=\"TLSv1_"), "{line}");

    // A client that is not speaking TLS on the implicit port: one line naming it.
    let mut c = RawClient::connect(fg.addr("submissions"));
    c.send(b"EHLO not-tls.client.test\r\n");
    let _ = c.drain_until_close();
    fg.wait_stderr("TLS handshake failed", Duration::from_secs(10));
    let log = fg.stderr();
    let failed = log
        .lines()
        .find(|l| l.contains("TLS handshake failed"))
        .expect("line");
    let port = c.local_addr().port();
    for want in [
        "client=127.0.0.1".to_string(),
        format!("port={port}"),
        "listener=submissions".to_string(),
        "error=".to_string(),
    ] {
        assert!(failed.contains(&want), "{want} missing: {failed}");
    }
}
