//! The message path end to end against the recording upstream: long lines relayed as they
//! came, LF-only messages (ended by LF "." LF) relayed with CRLF, the smuggling payloads
//! still inside the message under both bare-line-ending modes, and BDAT (CHUNKING) taken
//! from clients and relayed as BDAT or as DATA, with its size and policy limits.

use crate::common;

use common::*;

/// A session through floodgate's plain listener, greeted and EHLO'd; returns the EHLO reply.
fn session(fg: &Floodgate) -> (RawClient, Reply) {
    let mut c = RawClient::connect_greeted(fg.addr("plain"));
    let ehlo = c.ehlo("message.client.test");
    (c, ehlo)
}

fn envelope(c: &mut RawClient) {
    assert_eq!(c.cmd("MAIL FROM:<s@client.test>").code, 250);
    assert_eq!(c.cmd("RCPT TO:<r@dest.test>").code, 250);
}

/// One transaction with DATA: the envelope, DATA's 354, then `wire` (the message and its
/// end-of-data line); returns the reply to the message.
fn data_message(c: &mut RawClient, wire: &[u8]) -> Reply {
    envelope(c);
    assert_eq!(c.cmd("DATA").code, 354);
    c.send(wire);
    c.reply()
}

/// QUIT, then what the recorder received, once it is idle.
fn quit_and_messages(c: &mut RawClient, rec: &Recorder) -> Vec<Message> {
    assert_eq!(c.cmd("QUIT").code, 221);
    rec.wait_idle();
    rec.messages()
}

/// floodgate in front of `upstream`, with `bare_line_endings = "reject"` or the default.
fn mode(upstream: std::net::SocketAddr, reject: bool) -> FloodgateConfig {
    let c = FloodgateConfig::new(upstream);
    if reject {
        c.extra("[smtp]\nbare_line_endings = \"reject\"\n")
    } else {
        c
    }
}

#[test]
fn a_long_line_is_relayed_unchanged_by_default() {
    let rec = Recorder::plain();
    let fg = Floodgate::start(&FloodgateConfig::new(rec.addr()));
    let (mut c, _) = session(&fg);
    envelope(&mut c);
    assert_eq!(c.cmd("DATA").code, 354);
    let mut msg = b"Subject: long\r\n\r\n".to_vec();
    msg.extend((0..5000).map(|i| b'a' + (i % 26) as u8));
    msg.extend_from_slice(b"\r\nshort\r\n");
    let mut wire = msg.clone();
    wire.extend_from_slice(b".\r\n");
    c.send(&wire);
    assert_eq!(c.reply().code, 250);
    let m = quit_and_messages(&mut c, &rec);
    assert_eq!(m.len(), 1);
    assert_eq!(m[0].data, msg, "the long line was changed on the way");
}

#[test]
fn a_line_over_max_text_line_gets_a_content_code_not_500() {
    let rec = Recorder::plain();
    let fg =
        Floodgate::start(&FloodgateConfig::new(rec.addr()).extra("[smtp]\nmax_text_line = 1000\n"));
    let (mut c, _) = session(&fg);
    envelope(&mut c);
    assert_eq!(c.cmd("DATA").code, 354);
    let mut msg = b"Subject: long\r\n\r\n".to_vec();
    msg.extend(std::iter::repeat_n(b'x', 1200));
    msg.extend_from_slice(b"\r\n.\r\n");
    c.send(&msg);
    let r = c.reply();
    assert_eq!(
        (r.code, r.enhanced().as_deref()),
        (554, Some("5.6.0")),
        "{r:?}"
    );
    // The session goes on, and nothing was delivered.
    assert_eq!(c.cmd("NOOP").code, 250);
    assert_eq!(c.cmd("QUIT").code, 221);
    rec.wait_idle();
    assert!(rec.messages().is_empty());
}

/// What `smtplib.sendmail` with bytes and many web applications send: every line, and the
/// end of data, with LF alone.
const LF_ONLY: &[u8] =
    b"From: <s@client.test>\nSubject: lf only\n\nfirst line\n..leading dot\nlast line\n.\n";

#[test]
fn an_lf_only_message_ends_at_lf_dot_lf_and_is_relayed_with_crlf() {
    let rec = Recorder::plain();
    let fg = Floodgate::start(&FloodgateConfig::new(rec.addr()));
    let (mut c, _) = session(&fg);
    envelope(&mut c);
    assert_eq!(c.cmd("DATA").code, 354);
    c.send(LF_ONLY);
    // Answered at LF "." LF (the raw client's read limit would fail a hang).
    assert_eq!(c.reply().code, 250);
    let m = quit_and_messages(&mut c, &rec);
    assert_eq!(m.len(), 1);
    assert!(!m[0].bare_lf && !m[0].bare_cr);
    assert_eq!(
        m[0].data,
        b"From: <s@client.test>\r\nSubject: lf only\r\n\r\nfirst line\r\n.leading dot\r\nlast line\r\n"
    );
    assert!(
        m[0].bdat,
        "one BDAT chunk: the message with CRLF lines, unstuffed"
    );
}

#[test]
fn an_lf_only_message_under_reject_is_refused_at_once() {
    let rec = Recorder::plain();
    let fg = Floodgate::start(&mode(rec.addr(), true));
    let (mut c, _) = session(&fg);
    envelope(&mut c);
    assert_eq!(c.cmd("DATA").code, 354);
    c.send(LF_ONLY);
    let r = c.reply();
    assert_eq!(
        (r.code, r.enhanced().as_deref()),
        (550, Some("5.5.2")),
        "{r:?}"
    );
    assert_eq!(c.cmd("QUIT").code, 221);
    rec.wait_idle();
    assert!(rec.messages().is_empty());
}

#[test]
fn python_smtplib_sends_an_lf_only_message_through() {
    let rec = Recorder::plain();
    let fg = Floodgate::start(&FloodgateConfig::new(rec.addr()));
    let addr = fg.addr("plain");
    let script = format!(
        "import smtplib\n\
         s = smtplib.SMTP('127.0.0.1', {}, timeout=20)\n\
         s.sendmail('s@client.test', ['r@dest.test'], b'Subject: py\\n\\nhello\\n.\\n')\n\
         s.quit()\n",
        addr.port()
    );
    let out = python(&script, &[], std::time::Duration::from_secs(30));
    assert_eq!(out.code, Some(0), "{out:?}");
    rec.wait_idle();
    let m = rec.messages();
    assert_eq!(m.len(), 1);
    assert!(!m[0].bare_lf);
    assert!(
        m[0].data.starts_with(b"Subject: py\r\n\r\nhello\r\n"),
        "{}",
        show(&m[0].data)
    );
}

/// A message that began with CRLF lines and then carries LF "." LF and a second envelope:
/// under both modes the payload stays inside it, and the hidden envelope never reaches
/// upstream.
#[test]
fn lf_dot_lf_inside_a_crlf_message_is_smuggling_in_both_modes() {
    for reject in [false, true] {
        let rec = Recorder::plain();
        let fg = Floodgate::start(&mode(rec.addr(), reject));
        let (mut c, _) = session(&fg);
        envelope(&mut c);
        assert_eq!(c.cmd("DATA").code, 354);
        c.send(
            b"Subject: smuggle\r\n\r\nbody\n.\nMAIL FROM:<evil@client.test>\r\n\
              RCPT TO:<victim@dest.test>\r\nDATA\r\nsmuggled\r\n.\r\nQUIT\r\n",
        );
        let codes: Vec<u16> = c.replies_until_close().iter().map(|r| r.code).collect();
        assert_eq!(
            codes,
            [if reject { 550 } else { 250 }, 221],
            "reject={reject}"
        );
        rec.wait_idle();
        for m in rec.messages() {
            assert_eq!(m.rcpts, ["r@dest.test"]);
            assert!(!m.bare_lf && !m.bare_cr);
        }
        assert!(
            !rec.commands()
                .iter()
                .any(|l| l.contains("evil@") || l.contains("victim@")),
            "reject={reject}: {:?}",
            rec.commands()
        );
    }
}

/// A message in three chunks, with a chunk boundary inside a CRLF, a bare LF, and
/// CRLF "." CRLF as text (BDAT has no stuffing).
fn bdat_message(c: &mut RawClient) -> Vec<Reply> {
    let chunks: [&[u8]; 3] = [
        b"From: <s@client.test>\r\nSubject: chunks\r",
        b"\n\r\nline\none\r\n.\r\nMAIL FROM:<inside@client.test>\r\n",
        b"the end\r\n",
    ];
    let mut wire = Vec::new();
    for (i, ch) in chunks.iter().enumerate() {
        let last = if i == chunks.len() - 1 { " LAST" } else { "" };
        wire.extend_from_slice(format!("BDAT {}{last}\r\n", ch.len()).as_bytes());
        wire.extend_from_slice(ch);
    }
    c.send(&wire);
    c.replies(3)
}

const BDAT_RELAYED: &[u8] = b"From: <s@client.test>\r\nSubject: chunks\r\n\r\nline\r\none\r\n.\r\nMAIL FROM:<inside@client.test>\r\nthe end\r\n";

#[test]
fn bdat_is_offered_and_relayed_as_bdat_when_upstream_offers_chunking() {
    let rec = Recorder::plain();
    let fg = Floodgate::start(&FloodgateConfig::new(rec.addr()));
    let (mut c, ehlo) = session(&fg);
    assert!(ehlo.keywords().iter().any(|k| k == "CHUNKING"), "{ehlo:?}");
    envelope(&mut c);
    let r = bdat_message(&mut c);
    assert_eq!(
        r.iter().map(|r| r.code).collect::<Vec<_>>(),
        [250, 250, 250],
        "{r:?}"
    );
    assert!(r[0].text().contains("octets received"), "{r:?}");
    // A DATA transaction on the same session still works.
    assert_eq!(
        data_message(&mut c, b"Subject: then data\r\n\r\nx\r\n.\r\n").code,
        250
    );
    let m = quit_and_messages(&mut c, &rec);
    assert_eq!(m.len(), 2);
    assert!(
        m[0].bdat,
        "relayed as DATA although upstream offers CHUNKING"
    );
    assert_eq!(m[0].data, BDAT_RELAYED);
    assert!(!m[0].bare_lf && !m[0].bare_cr);
    assert!(m[1].bdat, "a DATA message goes upstream as BDAT too");
    assert_eq!(m[1].data, b"Subject: then data\r\n\r\nx\r\n");
    never_a_command(&rec, "inside@");
}

#[test]
fn a_data_message_goes_upstream_as_one_bdat_last_as_the_message_is() {
    let rec = Recorder::plain();
    let fg = Floodgate::start(&FloodgateConfig::new(rec.addr()));
    let (mut c, _) = session(&fg);
    // Lines beginning with '.' come stuffed; upstream gets them as the message has them.
    let stuffed: &[u8] = b"Subject: dots\r\n\r\n..one\r\nplain\r\n...\r\n..\r\nlast\r\n.\r\n";
    let dots: &[u8] = b"Subject: dots\r\n\r\n.one\r\nplain\r\n..\r\n.\r\nlast\r\n";
    let plain: &[u8] = b"Subject: plain\r\n\r\nno line begins with a dot\r\n";
    for wire in [stuffed, &[plain, b".\r\n"].concat()] {
        assert_eq!(data_message(&mut c, wire).code, 250);
    }
    let m = quit_and_messages(&mut c, &rec);
    assert_eq!(m.len(), 2);
    assert!(
        m.iter().all(|m| m.bdat),
        "relayed as DATA although upstream offers CHUNKING"
    );
    assert_eq!(m[0].data, dots);
    assert_eq!(m[1].data, plain);
    let commands = rec.commands();
    assert!(!commands.iter().any(|l| l == "DATA"), "{commands:?}");
    let bdat: Vec<&String> = commands.iter().filter(|l| l.starts_with("BDAT")).collect();
    assert_eq!(
        bdat,
        [
            &format!("BDAT {} LAST", dots.len()),
            &format!("BDAT {} LAST", plain.len())
        ]
    );
}

#[test]
fn after_a_helo_a_message_goes_with_data_whatever_an_earlier_ehlo_offered() {
    // The HELO goes upstream as HELO ([upstream] always_ehlo = false).
    let rec = Recorder::plain();
    let fg =
        Floodgate::start(&FloodgateConfig::new(rec.addr()).upstream_key("always_ehlo", "false"));
    let (mut c, ehlo) = session(&fg);
    assert!(ehlo.keywords().iter().any(|k| k == "CHUNKING"), "{ehlo:?}");
    assert_eq!(c.cmd("HELO again.client.test").code, 250);
    assert_eq!(
        data_message(&mut c, b"Subject: after helo\r\n\r\n..dot\r\n.\r\n").code,
        250
    );
    let m = quit_and_messages(&mut c, &rec);
    assert_eq!(m.len(), 1);
    assert!(!m[0].bdat, "BDAT in a session upstream knows as HELO");
    assert_eq!(m[0].data, b"Subject: after helo\r\n\r\n..dot\r\n");
    assert!(rec.commands().iter().any(|l| l == "HELO again.client.test"));
}

#[test]
fn a_helo_clients_message_goes_as_bdat_in_floodgates_ehlo_session() {
    let rec = Recorder::plain();
    let fg = Floodgate::start(&FloodgateConfig::new(rec.addr()));
    let mut c = RawClient::connect_greeted(fg.addr("plain"));
    let r = c.cmd("HELO old.client.test");
    assert_eq!((r.code, r.lines.len()), (250, 1), "{r:?}");
    assert_eq!(
        data_message(&mut c, b"Subject: helo\r\n\r\n..dot\r\n.\r\n").code,
        250
    );
    let m = quit_and_messages(&mut c, &rec);
    assert_eq!(m.len(), 1);
    assert!(
        m[0].bdat,
        "DATA although upstream's EHLO session offers CHUNKING"
    );
    assert_eq!(m[0].data, b"Subject: helo\r\n\r\n.dot\r\n");
    let commands = rec.commands();
    assert!(
        commands.iter().any(|l| l == "EHLO old.client.test"),
        "{commands:?}"
    );
    assert!(
        !commands.iter().any(|l| l.starts_with("HELO")),
        "{commands:?}"
    );
}

#[test]
fn with_upstream_chunking_off_every_message_goes_with_data() {
    let rec = Recorder::plain();
    let fg = Floodgate::start(&FloodgateConfig::new(rec.addr()).upstream_key("chunking", "false"));
    let (mut c, ehlo) = session(&fg);
    assert!(
        ehlo.keywords().iter().any(|k| k == "CHUNKING"),
        "clients are still offered CHUNKING ([smtp] chunking): {ehlo:?}"
    );
    envelope(&mut c);
    let r = bdat_message(&mut c);
    assert!(r.iter().all(|r| r.code == 250), "{r:?}");
    assert_eq!(
        data_message(&mut c, b"Subject: data\r\n\r\n..dot\r\n.\r\n").code,
        250
    );
    let m = quit_and_messages(&mut c, &rec);
    assert_eq!(m.len(), 2);
    assert!(
        m.iter().all(|m| !m.bdat),
        "BDAT upstream although chunking = false"
    );
    assert_eq!(m[0].data, BDAT_RELAYED.to_vec().replace_dot_lines());
    assert_eq!(m[1].data, b"Subject: data\r\n\r\n..dot\r\n");
    assert!(!rec.commands().iter().any(|l| l.starts_with("BDAT")));
}

#[test]
fn a_chunk_upstream_refuses_is_its_answer_and_its_transaction_is_reset() {
    // The recorder refuses a message over 50 MiB (552); floodgate takes up to 60 MiB here.
    let rec = Recorder::plain();
    let fg = Floodgate::start(
        &FloodgateConfig::new(rec.addr()).extra("[smtp]\nmax_message_size = 62914560\n"),
    );
    let (mut c, _) = session(&fg);
    envelope(&mut c);
    assert_eq!(c.cmd("DATA").code, 354);
    let line = [b'x'; 998];
    let mut wire = b"Subject: big\r\n\r\n".to_vec();
    while wire.len() <= 52 * 1024 * 1024 {
        wire.extend_from_slice(&line);
        wire.extend_from_slice(b"\r\n");
    }
    wire.extend_from_slice(b".\r\n");
    c.send(&wire);
    let r = c.reply();
    assert_eq!(r.code, 552, "upstream's refusal is the answer: {r:?}");
    // The session goes on: the next message is relayed.
    assert_eq!(
        data_message(&mut c, b"Subject: small\r\n\r\nx\r\n.\r\n").code,
        250
    );
    let m = quit_and_messages(&mut c, &rec);
    assert_eq!(m.len(), 1);
    assert_eq!(m[0].data, b"Subject: small\r\n\r\nx\r\n");
    let commands = rec.commands();
    let refused = commands
        .iter()
        .position(|l| {
            l.strip_prefix("BDAT ")
                .and_then(|rest| rest.split(' ').next()?.parse::<usize>().ok())
                .is_some_and(|size| size > 52 * 1024 * 1024)
        })
        .expect("the big message went as BDAT");
    assert_eq!(commands[refused + 1], "RSET", "{commands:?}");
}

fn never_a_command(rec: &Recorder, needle: &str) {
    assert!(
        !rec.commands().iter().any(|l| l.contains(needle)),
        "{needle} reached upstream as a command: {:?}",
        rec.commands()
    );
}

#[test]
fn bdat_is_relayed_as_dot_stuffed_data_when_upstream_lacks_chunking() {
    let rec = Recorder::start(RecorderOptions {
        no_chunking: true,
        ..RecorderOptions::default()
    });
    let fg = Floodgate::start(&FloodgateConfig::new(rec.addr()));
    let (mut c, ehlo) = session(&fg);
    assert!(ehlo.keywords().iter().any(|k| k == "CHUNKING"), "{ehlo:?}");
    envelope(&mut c);
    let r = bdat_message(&mut c);
    assert_eq!(
        r.iter().map(|r| r.code).collect::<Vec<_>>(),
        [250, 250, 250]
    );
    let m = quit_and_messages(&mut c, &rec);
    assert_eq!(m.len(), 1);
    assert!(!m[0].bdat);
    // The "." line was stuffed: upstream reads it as text, and the message whole.
    assert_eq!(m[0].data, BDAT_RELAYED.to_vec().replace_dot_lines());
    never_a_command(&rec, "inside@");
}

/// The DATA wire form of a plain message's lines: a leading "." doubled.
trait DotLines {
    fn replace_dot_lines(self) -> Vec<u8>;
}

impl DotLines for Vec<u8> {
    fn replace_dot_lines(self) -> Vec<u8> {
        let mut out = Vec::new();
        for line in self.split_inclusive(|&b| b == b'\n') {
            if line.starts_with(b".") {
                out.push(b'.');
            }
            out.extend_from_slice(line);
        }
        out
    }
}

#[test]
fn bdat_rules_zero_last_mixing_and_no_transaction() {
    let rec = Recorder::plain();
    let fg = Floodgate::start(&FloodgateConfig::new(rec.addr()));
    let (mut c, _) = session(&fg);
    // No MAIL: 503, and the chunk's octets are not commands.
    c.send(b"BDAT 6\r\nQUIT\r\nNOOP\r\n");
    let r = c.replies(2);
    assert_eq!((r[0].code, r[1].code), (503, 250), "{r:?}");
    // BDAT 0 LAST alone is an (empty) message.
    envelope(&mut c);
    assert_eq!(c.cmd("BDAT 0 LAST").code, 250);
    // DATA after a BDAT chunk is refused; the BDAT transaction goes on.
    envelope(&mut c);
    c.send(b"BDAT 3\r\nabc");
    assert_eq!(c.reply().code, 250);
    assert_eq!(c.cmd("DATA").code, 503);
    c.send(b"BDAT 2 LAST\r\nd\n");
    assert_eq!(c.reply().code, 250);
    let m = quit_and_messages(&mut c, &rec);
    assert_eq!(m.len(), 2);
    assert_eq!(m[0].data, b"");
    assert_eq!(m[1].data, b"abcd\r\n");
}

#[test]
fn bdat_over_max_message_size_gets_552_and_nothing_is_delivered() {
    let rec = Recorder::plain();
    let fg = Floodgate::start(
        &FloodgateConfig::new(rec.addr()).extra("[smtp]\nmax_message_size = 1000\n"),
    );
    let (mut c, _) = session(&fg);
    envelope(&mut c);
    // 600 + 600 octets: the second chunk makes the message too big. Its octets (holding
    // commands) are read and dropped; a chunk pipelined after it gets 503.
    let mut wire = b"BDAT 600\r\n".to_vec();
    wire.extend(std::iter::repeat_n(b'a', 600));
    wire.extend_from_slice(b"BDAT 600\r\n");
    let mut inner = b"RSET\r\nMAIL FROM:<inside@client.test>\r\n".to_vec();
    inner.resize(600, b'b');
    wire.extend_from_slice(&inner);
    wire.extend_from_slice(b"BDAT 1 LAST\r\nzNOOP\r\n");
    c.send(&wire);
    let r = c.replies(4);
    assert_eq!(r[0].code, 250, "{r:?}");
    assert_eq!(
        (r[1].code, r[1].enhanced().as_deref()),
        (552, Some("5.3.4")),
        "{r:?}"
    );
    assert_eq!((r[2].code, r[3].code), (503, 250), "{r:?}");
    assert_eq!(c.cmd("QUIT").code, 221);
    rec.wait_idle();
    assert!(rec.messages().is_empty(), "{:?}", rec.messages());
    never_a_command(&rec, "inside@");
    // Upstream's transaction was reset.
    assert!(
        rec.commands().iter().any(|l| l == "RSET"),
        "{:?}",
        rec.commands()
    );
}

#[test]
fn a_bdat_message_refused_by_policy_is_never_delivered() {
    let rec = Recorder::plain();
    let fg = Floodgate::start(&FloodgateConfig::new(rec.addr()).extra(
        r#"
[[limit]]
name = "per-from"
count = "messages"
stage = "message"
key = "${header_from}"
algorithm = "bucket"
rate = "1 / 1h"
burst = "1"
action = "defer"
"#,
    ));
    let (mut c, _) = session(&fg);
    for want in [250, 451] {
        envelope(&mut c);
        let r = bdat_message(&mut c);
        assert_eq!(
            r.iter().map(|r| r.code).collect::<Vec<_>>(),
            [250, 250, want],
            "{r:?}"
        );
    }
    // The session goes on after the refusal.
    envelope(&mut c);
    assert_eq!(c.cmd("RSET").code, 250);
    let m = quit_and_messages(&mut c, &rec);
    assert_eq!(m.len(), 1, "a refused message reached upstream");
    assert!(m[0].bdat);
}

#[test]
fn bdat_in_lf_only_chunks_is_normalized_or_refused() {
    for reject in [false, true] {
        let rec = Recorder::start(RecorderOptions {
            no_chunking: true,
            ..RecorderOptions::default()
        });
        let fg = Floodgate::start(&mode(rec.addr(), reject));
        let (mut c, _) = session(&fg);
        envelope(&mut c);
        let chunk = b"Subject: lf\n\nx\n.\nMAIL FROM:<inside@client.test>\n";
        let mut wire = format!("BDAT {} LAST\r\n", chunk.len()).into_bytes();
        wire.extend_from_slice(chunk);
        c.send(&wire);
        let r = c.reply();
        assert_eq!(r.code, if reject { 550 } else { 250 }, "{r:?}");
        let m = quit_and_messages(&mut c, &rec);
        assert_eq!(m.len(), usize::from(!reject));
        if let Some(m) = m.first() {
            assert!(!m.bare_lf && !m.bare_cr);
            assert_eq!(
                m.data,
                b"Subject: lf\r\n\r\nx\r\n..\r\nMAIL FROM:<inside@client.test>\r\n"
            );
        }
        never_a_command(&rec, "inside@");
    }
}

#[test]
fn chunking_off_hides_it_and_refuses_bdat() {
    let rec = Recorder::plain();
    let fg =
        Floodgate::start(&FloodgateConfig::new(rec.addr()).extra("[smtp]\nchunking = false\n"));
    let (mut c, ehlo) = session(&fg);
    assert!(!ehlo.keywords().iter().any(|k| k == "CHUNKING"), "{ehlo:?}");
    envelope(&mut c);
    c.send(b"BDAT 6 LAST\r\nQUIT\r\nNOOP\r\n");
    let r = c.replies(2);
    assert_eq!((r[0].code, r[1].code), (502, 250), "{r:?}");
}
