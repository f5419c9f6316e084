//! Tests of the test harness itself: the helpers in `tests/common` and the recording
//! upstream (`tests/upstream/recorder.py`) driven directly, without floodgate. If these
//! fail, the floodgate tests in the other `proxy_*.rs` files cannot be trusted.

use crate::common;

use common::*;
use proptest::prelude::*;

#[test]
fn parse_listening_reads_name_address_and_mode() {
    let l = parse_listening("listening submission 127.0.0.1:40123 starttls\n").unwrap();
    assert_eq!(
        (l.name.as_str(), l.addr.to_string(), l.tls.as_str()),
        ("submission", "127.0.0.1:40123".into(), "starttls")
    );
    let l = parse_listening("listening [::1]:0 [::1]:587 implicit").unwrap();
    assert_eq!((l.name.as_str(), l.addr.port()), ("[::1]:0", 587));
    assert!(parse_listening("listening submission nonsense none").is_none());
    assert!(parse_listening("started 127.0.0.1:1 none").is_none());
    assert!(parse_listening("listening 127.0.0.1:1").is_none());
}

#[test]
fn b64_matches_known_vectors() {
    // RFC 4648 section 10.
    for (plain, enc) in [
        ("", ""),
        ("f", "Zg=="),
        ("fo", "Zm8="),
        ("foo", "Zm9v"),
        ("foobar", "Zm9vYmFy"),
    ] {
        assert_eq!(b64_encode(plain.as_bytes()), enc);
        assert_eq!(b64_decode(enc), plain.as_bytes());
    }
}

#[test]
fn parse_reply_handles_multiline_partial_and_garbage() {
    let (r, n) = parse_reply(b"250-a.test\r\n250-PIPELINING\r\n250 SIZE 10\r\nNEXT")
        .unwrap()
        .unwrap();
    assert_eq!(n, 41);
    assert_eq!(r.code, 250);
    assert_eq!(r.keywords(), vec!["PIPELINING", "SIZE"]);
    assert!(parse_reply(b"250-a.test\r\n250 SIZ").is_none());
    assert!(parse_reply(b"\x00\xffgarbage\r\n").unwrap().is_err());
    let (r, _) = parse_reply(b"421 4.4.1 upstream down\r\n")
        .unwrap()
        .unwrap();
    assert_eq!((r.code, r.enhanced().as_deref()), (421, Some("4.4.1")));
    let (r, _) = parse_reply(b"220 host ESMTP\r\n").unwrap().unwrap();
    assert_eq!(r.enhanced(), None);
    let (r, _) = parse_reply(b"354\r\n").unwrap().unwrap();
    assert_eq!((r.code, r.lines.len()), (354, 1));
}

#[test]
fn config_renders_the_contract_keys_as_valid_toml() {
    let cfg = FloodgateConfig::new("127.0.0.1:2525".parse().unwrap())
        .identity("xclient")
        .extra("[smtp]\nbare_line_endings = \"reject\"");
    let v: toml::Value = toml::from_str(&cfg.toml()).expect("valid TOML");
    assert_eq!(v["upstream"]["address"].as_str(), Some("127.0.0.1:2525"));
    assert_eq!(v["upstream"]["client_identity"].as_str(), Some("xclient"));
    let ls = v["listener"].as_array().unwrap();
    let modes: Vec<_> = ls.iter().map(|l| l["tls"].as_str().unwrap()).collect();
    assert_eq!(modes, ["none", "starttls", "implicit"]);
    assert!(std::path::Path::new(v["tls"]["certificate"].as_str().unwrap()).is_file());
    assert!(std::path::Path::new(v["tls"]["private_key"].as_str().unwrap()).is_file());
    assert!(std::path::Path::new(v["upstream"]["ca_file"].as_str().unwrap()).is_file());
    assert_eq!(v["smtp"]["bare_line_endings"].as_str(), Some("reject"));
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn b64_round_trips(data in proptest::collection::vec(any::<u8>(), 0..200)) {
        let text = b64_encode(&data);
        prop_assert_eq!(text.len(), data.len().div_ceil(3) * 4);
        prop_assert_eq!(b64_decode(&text), data);
    }

    #[test]
    fn parse_reply_reads_back_what_was_rendered(
        code in 200u16..600,
        texts in proptest::collection::vec("[ -~]{0,40}", 1..6),
        tail in proptest::collection::vec(any::<u8>(), 0..20),
    ) {
        let mut raw = Vec::new();
        for (i, t) in texts.iter().enumerate() {
            let sep = if i + 1 == texts.len() { ' ' } else { '-' };
            raw.extend_from_slice(format!("{code}{sep}{t}\r\n").as_bytes());
        }
        let len = raw.len();
        raw.extend_from_slice(&tail);
        let (r, n) = parse_reply(&raw).unwrap().unwrap();
        prop_assert_eq!(n, len);
        prop_assert_eq!(r.code, code);
        prop_assert_eq!(&r.lines, &texts);
        // Any strict prefix is incomplete, never a different reply.
        for cut in 0..len {
            prop_assert!(parse_reply(&raw[..cut]).is_none());
        }
    }
}

#[test]
fn recorder_greets_and_advertises_everything_floodgate_must_filter() {
    let rec = Recorder::with_starttls();
    let mut c = RawClient::connect_greeted(rec.addr());
    let kw = c.ehlo("client.test").keywords();
    for k in [
        "PIPELINING",
        "SIZE",
        "8BITMIME",
        "SMTPUTF8",
        "DSN",
        "ENHANCEDSTATUSCODES",
        "AUTH",
        "STARTTLS",
        "XCLIENT",
        "CHUNKING",
        "X-FOO",
    ] {
        assert!(kw.contains(&k.to_string()), "{k} missing from {kw:?}");
    }
    assert_eq!(c.cmd("QUIT").code, 221);
    assert!(c.is_closed());
    rec.wait_idle();
}

#[test]
fn recorder_records_a_pipelined_raw_message_byte_exactly() {
    let rec = Recorder::plain();
    let mut c = RawClient::connect_greeted(rec.addr());
    c.ehlo("raw.test");
    c.send(b"MAIL FROM:<a@x.test>\r\nRCPT TO:<b@y.test>\r\nRCPT TO:<c@y.test>\r\nDATA\r\n");
    let codes: Vec<u16> = c.replies(4).iter().map(|r| r.code).collect();
    assert_eq!(codes, [250, 250, 250, 354]);
    c.send(b"Subject: raw\r\n\r\n..dot\r\nend\r\n.\r\nQUIT\r\n");
    let r = c.replies_until_close();
    assert_eq!((r[0].code, r[1].code, r.len()), (250, 221, 2));
    let m = rec.messages();
    assert_eq!(m.len(), 1);
    assert_eq!(m[0].rcpts, ["b@y.test", "c@y.test"]);
    assert_eq!(m[0].data, b"Subject: raw\r\n\r\n..dot\r\nend\r\n");
    assert!(!m[0].bare_lf && !m[0].bare_cr && !m[0].tls);
}

#[test]
fn recorder_treats_smuggling_sequences_as_content() {
    let rec = Recorder::plain();
    for payload in [&b"\n.\n"[..], b"\r.\r", b"\r\n.\r", b"\n.\r\n", b".\r\r\n"] {
        let mut c = RawClient::connect_greeted(rec.addr());
        c.ehlo("raw.test");
        c.send(b"MAIL FROM:<a@x.test>\r\nRCPT TO:<b@y.test>\r\nDATA\r\n");
        assert_eq!(c.replies(3)[2].code, 354);
        let mut msg = b"Subject: s\r\n\r\nbody".to_vec();
        msg.extend_from_slice(payload);
        msg.extend_from_slice(b"MAIL FROM:<evil@x.test>\r\nRCPT TO:<victim@y.test>\r\nDATA\r\nsmuggled\r\n.\r\nQUIT\r\n");
        c.send(&msg);
        let r = c.replies_until_close();
        assert_eq!(r.iter().map(|r| r.code).collect::<Vec<_>>(), [250, 221]);
    }
    let m = rec.messages();
    assert_eq!(m.len(), 5);
    assert!(m
        .iter()
        .all(|m| m.rcpts == ["b@y.test"] && (m.bare_lf || m.bare_cr)));
}

#[test]
fn recorder_works_with_swaks_starttls_and_auth() {
    let rec = Recorder::with_starttls();
    let addr = rec.addr().to_string();
    let ca = ca_file();
    let out = swaks(&[
        "--server",
        &addr,
        "--from",
        "s@x.test",
        "--to",
        "r@y.test",
        "--helo",
        "swaks.test",
        "--tls",
        "--tls-verify",
        "--tls-ca-path",
        ca.to_str().unwrap(),
        "-a",
        "PLAIN",
        "-au",
        USER,
        "-ap",
        PASSWORD,
        "--pipeline",
    ]);
    assert!(out.ok(), "{out}");
    let m = rec.messages();
    assert_eq!(m.len(), 1, "{out}");
    assert!(m[0].tls);
    assert_eq!(m[0].auth_user.as_deref(), Some(USER));
    assert_eq!(m[0].helo.as_deref(), Some("swaks.test"));
}

#[test]
fn recorder_works_with_smtplib_and_reports_faults() {
    let rec = Recorder::start(RecorderOptions {
        reject_rcpt: vec!["bad".into()],
        ..RecorderOptions::default()
    });
    let out = smtplib(
        rec.addr(),
        r#"
with smtplib.SMTP(HOST, PORT, timeout=20) as s:
    s.login(USER, PASSWORD)
    refused = s.sendmail("a@x.test", ["ok@y.test", "bad@y.test"], "Subject: p\r\n\r\nhello\r\n")
    out("refused", sorted(refused))
"#,
        CLIENT_TIMEOUT,
    );
    assert!(out.ok(), "{out}");
    assert_eq!(out.field("refused").as_deref(), Some("['bad@y.test']"));
    assert_eq!(rec.messages()[0].rcpts, ["ok@y.test"]);

    let dead = Recorder::start(RecorderOptions {
        fault: "die-mid-data".into(),
        fault_after: 100,
        ..RecorderOptions::default()
    });
    let mut c = RawClient::connect_greeted(dead.addr());
    c.ehlo("raw.test");
    c.send(b"MAIL FROM:<a@x.test>\r\nRCPT TO:<b@y.test>\r\nDATA\r\n");
    assert_eq!(c.replies(3)[2].code, 354);
    c.send(&[b'x'; 300]);
    assert!(c.replies_until_close().is_empty());
    dead.wait_idle();
    assert!(dead.messages().is_empty());
}

#[test]
fn recorder_self_test_passes() {
    // tests/upstream/selftest.py drives the recorder with swaks, smtplib and raw sockets
    // through every feature and fault the floodgate tests rely on.
    let out = run_with_timeout(
        std::process::Command::new("python3").arg(repo_root().join("tests/upstream/selftest.py")),
        std::time::Duration::from_secs(180),
    );
    assert!(out.ok(), "{out}");
    assert!(out.stdout.contains(" passed, 0 failed"), "{out}");
}
