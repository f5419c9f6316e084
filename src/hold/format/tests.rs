use super::*;
use proptest::prelude::*;

fn envelope() -> HeldEnvelope {
    HeldEnvelope {
        id: "18f-1a-0".into(),
        key: "alice".into(),
        limit: "per_user".into(),
        paced: None,
        time: 1_764_000_000,
        client: "192.0.2.7:50123".parse().unwrap(),
        local: Some("[::1]:587".parse().unwrap()),
        name: Some("laptop.example.org".into()),
        reverse_name: Some("[TEMPUNAVAIL]".into()),
        user: Some("alice".into()),
        helo: Some("laptop.example".into()),
        proto: "ESMTP".into(),
        tls: None,
        mail: "<alice@example.org> BODY=8BITMIME".into(),
        rcpts: vec![
            "<bob@example.net> NOTIFY=NEVER".into(),
            "<c@d.example>".into(),
        ],
    }
}

fn sample() -> HeldMessage {
    HeldMessage::new(envelope(), b"Subject: hi\r\n\r\nline\r\nend\n\r\n".to_vec())
}

#[test]
fn round_trip_and_accessors() {
    let m = sample();
    let bytes = m.encode();
    let text = String::from_utf8_lossy(&bytes).into_owned();
    assert!(
        text.starts_with("floodgate-held 2\nenvelope 308\nid 18f-1a-0\n"),
        "{text}"
    );
    assert!(
        text.contains("\nrcpt <c@d.example>\nsubject hi\nheaders 15\nbody 27\nSubject: hi\r\n"),
        "{text}"
    );
    assert!(text.ends_with("\r\nend\n"), "{text}");
    // The envelope length counts the lines after it through `body`.
    let env_at = text.find("\nid ").unwrap() + 1;
    let body_at = text.find("body 27\n").unwrap() + "body 27\n".len();
    assert_eq!(body_at - env_at, 308);
    assert_eq!(HeldMessage::decode(&bytes), Ok(m.clone()));
    assert_eq!(m.envelope.sender(), "alice@example.org");
    assert_eq!(
        m.envelope.recipients(),
        vec!["bob@example.net", "c@d.example"]
    );
    assert_eq!(m.subject.as_deref(), Some("hi"));
    assert_eq!(m.header_section(), b"Subject: hi\r\n\r\n");
    let h = m.head();
    assert_eq!((h.headers, h.size), (15, 27));
}

#[test]
fn the_subject_is_kept_as_it_was_when_held() {
    // Read from the file, not from the body again: a later parser cannot change it.
    let mut m = sample();
    m.subject = Some("as it was".into());
    let read = HeldMessage::decode(&m.encode()).unwrap();
    assert_eq!(read.subject.as_deref(), Some("as it was"));
    let none = HeldMessage::new(envelope(), b"From: a@b\r\n\r\nno subject\r\n".to_vec());
    assert_eq!(none.subject, None);
    let text = String::from_utf8(none.encode()).unwrap();
    assert!(!text.contains("\nsubject "), "{text}");
    assert_eq!(HeldMessage::decode(text.as_bytes()), Ok(none));
    // Without a blank line the whole body is the header section.
    let all = HeldMessage::new(envelope(), b"Subject: only\r\n".to_vec());
    assert_eq!(all.head().headers, all.head().size);
    assert_eq!(all.subject.as_deref(), Some("only"));
    assert_eq!(HeldMessage::decode(&all.encode()), Ok(all));
}

#[test]
fn paced_messages_say_so() {
    let mut m = sample();
    m.envelope.paced = Some("30/60s messages".into());
    let bytes = m.encode();
    let text = String::from_utf8_lossy(&bytes);
    assert!(
        text.contains("limit per_user\npaced 30/60s messages\ntime "),
        "{text}"
    );
    assert_eq!(HeldMessage::decode(&bytes), Ok(m));
    // Out of its place, the file is not in canonical form.
    let moved = text
        .replace("paced 30/60s messages\n", "")
        .replace("proto ESMTP\n", "proto ESMTP\npaced 30/60s messages\n");
    assert_eq!(
        HeldMessage::decode(moved.as_bytes()),
        Err(FormatError::Value("canonical form"))
    );
}

#[test]
fn files_without_the_client_names_still_read() {
    // As written before the names were kept: no `name` nor `reverse_name` line.
    let mut m = sample();
    m.envelope.name = None;
    m.envelope.reverse_name = None;
    for bytes in [m.encode(), encode_v1(&m)] {
        let text = String::from_utf8_lossy(&bytes);
        assert!(!text.contains("\nname ") && !text.contains("reverse_name"));
        assert_eq!(HeldMessage::decode(&bytes), Ok(m.clone()));
    }
    let named = String::from_utf8_lossy(&sample().encode()).into_owned();
    assert!(named.contains("\nname laptop.example.org\nreverse_name [TEMPUNAVAIL]\n"));
}

#[test]
fn values_are_escaped_to_one_line() {
    let mut m = sample();
    m.envelope.key = "a\nb%c é".into();
    m.envelope.user = None;
    m.subject = Some("two\r\nlines".into());
    let bytes = m.encode();
    let text = String::from_utf8_lossy(&bytes);
    assert!(text.contains("\nkey a%0Ab%25c %C3%A9\n"), "{text}");
    assert!(text.contains("\nsubject two%0D%0Alines\n"), "{text}");
    assert_eq!(HeldMessage::decode(&bytes), Ok(m));
}

#[test]
fn bad_files_are_refused_with_a_reason() {
    let good = sample().encode();
    assert_eq!(HeldMessage::decode(b""), Err(FormatError::Magic));
    assert_eq!(
        HeldMessage::decode(b"floodgate-held 3\n"),
        Err(FormatError::Magic)
    );
    // Every strict prefix is refused (a half-written file never reads).
    for cut in 0..good.len() {
        assert!(HeldMessage::decode(&good[..cut]).is_err(), "cut {cut}");
    }
    let mut extra = good.clone();
    extra.push(b'x');
    assert_eq!(HeldMessage::decode(&extra), Err(FormatError::Truncated));
    // Field errors, in a version 1 file (no envelope length to keep in step).
    let text = String::from_utf8_lossy(&encode_v1(&sample())).to_string();
    let swap = |from: &str, to: &str| HeldMessage::decode(text.replacen(from, to, 1).as_bytes());
    assert_eq!(swap("key alice\n", ""), Err(FormatError::Missing("key")));
    assert_eq!(
        swap("key alice\n", "key alice\nkey bob\n"),
        Err(FormatError::Field("key".into()))
    );
    assert_eq!(
        swap("key alice\n", "colour red\n"),
        Err(FormatError::Field("colour".into()))
    );
    // Version 2's fields are unknown to version 1.
    assert_eq!(
        swap("key alice\n", "key alice\nsubject x\n"),
        Err(FormatError::Field("subject".into()))
    );
    assert_eq!(
        swap("time 1764000000", "time x"),
        Err(FormatError::Value("time"))
    );
    assert_eq!(
        swap("time 1764000000", "time 01764000000"),
        Err(FormatError::Value("time"))
    );
    assert_eq!(
        swap("client 192.0.2.7 50123", "client x"),
        Err(FormatError::Value("client"))
    );
    assert_eq!(
        swap("id 18f-1a-0", "id ../x"),
        Err(FormatError::Value("id"))
    );
    assert_eq!(swap("key alice", "key a%zz"), Err(FormatError::Line(3)));
    assert_eq!(swap("key alice", "keyalice"), Err(FormatError::Line(3)));
    assert_eq!(swap("body 27", "body 99"), Err(FormatError::Truncated));
    assert_eq!(swap("body 27", "body x"), Err(FormatError::Value("body")));
    assert_eq!(swap("body 27", "body +27"), Err(FormatError::Value("body")));
    // The same in version 2, with the envelope's length kept in step.
    let v2 = String::from_utf8(good).unwrap();
    let swap2 = |from: &str, to: &str| {
        let t = v2.replacen(from, to, 1);
        let old: i64 = v2.lines().nth(1).unwrap()["envelope ".len()..]
            .parse()
            .unwrap();
        let n = old + to.len() as i64 - from.len() as i64;
        let t = t.replacen(&format!("envelope {old}"), &format!("envelope {n}"), 1);
        HeldMessage::decode(t.as_bytes())
    };
    assert_eq!(swap2("key alice\n", ""), Err(FormatError::Missing("key")));
    assert_eq!(
        swap2("headers 15\n", ""),
        Err(FormatError::Missing("headers"))
    );
    assert_eq!(
        swap2("headers 15", "headers 015"),
        Err(FormatError::Value("headers"))
    );
    assert_eq!(
        swap2("headers 15", "headers 16"),
        Err(FormatError::Value("headers"))
    );
    assert_eq!(
        swap2("subject hi\n", "subject hi\nsubject ho\n"),
        Err(FormatError::Field("subject".into()))
    );
    assert_eq!(swap2("body 27", "body 28"), Err(FormatError::Truncated));
    assert_eq!(
        swap2("body 27", "body 18446744073709551615"),
        Err(FormatError::Truncated)
    );
}

#[test]
fn the_fuzz_seeds_read() {
    let seed = include_bytes!("../../../fuzz/corpus/held_file/seed-sample");
    let m = HeldMessage::decode(seed).unwrap();
    assert_eq!(m.envelope.user.as_deref(), Some("alé"));
    assert_eq!(m.envelope.recipients(), vec!["c@d", "e@f"]);
    assert_eq!(encode_v1(&m), seed);
    let named = include_bytes!("../../../fuzz/corpus/held_file/seed-named");
    let m = HeldMessage::decode(named).unwrap();
    assert_eq!(m.envelope.name.as_deref(), Some("client.example.org"));
    assert_eq!(m.envelope.reverse_name.as_deref(), Some("[TEMPUNAVAIL]"));
    assert_eq!(encode_v1(&m), named);
    let v2 = include_bytes!("../../../fuzz/corpus/held_file/seed-v2");
    let m2 = HeldMessage::decode(v2).unwrap();
    assert_eq!(m2, m);
    assert_eq!(m2.encode(), v2);
}

#[test]
fn ids() {
    assert!(valid_id("18f-1a-0"));
    for bad in ["", "-x", "a/b", "..", "a.b", "a b", &"x".repeat(65)] {
        assert!(!valid_id(bad), "{bad:?}");
    }
}

#[test]
fn header_sections() {
    assert_eq!(header_section_len(b"A: b\r\n\r\nbody"), 8);
    assert_eq!(header_section_len(b"A: b\r\n"), 6);
    assert!(is_header_section(b"A: b\r\n\r\n", 12));
    assert!(is_header_section(b"A: b\r\n", 6));
    // Cut before its blank line, or past it.
    assert!(!is_header_section(b"A: b", 12));
    assert!(!is_header_section(b"A: b\r\n\r\nbo", 12));
}

fn text() -> impl Strategy<Value = String> {
    proptest::string::string_regex("[ -~\\n\\r%é\\x00]{0,12}").unwrap()
}

/// Addresses as the spool keeps them: IP and port (no IPv6 flow or scope).
fn addr() -> impl Strategy<Value = SocketAddr> {
    (any::<IpAddr>(), any::<u16>()).prop_map(|(ip, port)| SocketAddr::new(ip, port))
}

fn held() -> impl Strategy<Value = HeldMessage> {
    (
        "[a-z0-9][a-z0-9-]{0,20}",
        (
            text(),
            text(),
            any::<u64>(),
            addr(),
            proptest::option::of(text()),
        ),
        (
            proptest::option::of(addr()),
            proptest::option::of(text()),
            proptest::option::of(text()),
            proptest::option::of(text()),
        ),
        (proptest::option::of(text()), proptest::option::of(text())),
        (text(), proptest::collection::vec(text(), 0..4)),
        proptest::collection::vec(any::<u8>(), 0..64),
        proptest::option::of(text()),
    )
        .prop_map(
            |(
                id,
                (key, limit, time, client, paced),
                (local, user, helo, tls),
                (name, reverse_name),
                (mail, rcpts),
                body,
                subject,
            )| {
                HeldMessage {
                    envelope: HeldEnvelope {
                        id,
                        key,
                        limit,
                        paced,
                        time,
                        client,
                        local,
                        name,
                        reverse_name,
                        user,
                        helo,
                        proto: "ESMTP".into(),
                        tls,
                        mail,
                        rcpts,
                    },
                    subject,
                    body,
                }
            },
        )
}

proptest! {
    /// Whatever is written reads back the same, in either version.
    #[test]
    fn encode_decode_round_trip(m in held()) {
        let bytes = m.encode();
        prop_assert_eq!(HeldMessage::decode(&bytes), Ok(m.clone()));
        let old = encode_v1(&m);
        let read = HeldMessage::decode(&old).unwrap();
        prop_assert_eq!(&read.envelope, &m.envelope);
        prop_assert_eq!(&read.body, &m.body);
    }

    /// A file cut short never reads.
    #[test]
    fn damaged_files_never_read_as_whole(m in held(), cut in any::<prop::sample::Index>()) {
        let bytes = m.encode();
        let at = cut.index(bytes.len());
        prop_assert!(HeldMessage::decode(&bytes[..at]).is_err());
    }

    /// Arbitrary bytes never panic; what reads writes back to the same bytes.
    #[test]
    fn arbitrary_bytes(data in proptest::collection::vec(any::<u8>(), 0..200)) {
        let mut input = MAGIC.as_bytes().to_vec();
        input.push(b'\n');
        input.extend(data);
        if let Ok(m) = HeldMessage::decode(&input) {
            prop_assert_eq!(m.encode(), input);
        }
    }
}
