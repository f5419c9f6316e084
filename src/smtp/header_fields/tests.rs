use super::*;
use proptest::prelude::*;

/// The reference: mail-parser with every field of the whole header section parsed.
fn full_parse(msg: &[u8]) -> HeaderFields {
    let head = &msg[..header_end(msg)];
    mail_parser::MessageParser::new()
        .parse_headers(head)
        .map_or_else(HeaderFields::default, |m| fields_of(&m))
}

/// The direct reading of `msg`, when its section is plain and every wanted field simple.
fn quick_reading(msg: &[u8]) -> Option<HeaderFields> {
    let scan = scan(&msg[..header_end(msg)], None)?;
    if !scan.single {
        return None;
    }
    quick(&scan.values)
}

fn fields(from: Option<&str>, id: Option<&str>, subject: Option<&str>) -> HeaderFields {
    HeaderFields {
        from: from.map(str::to_string),
        message_id: id.map(str::to_string),
        subject: subject.map(str::to_string),
    }
}

#[test]
fn reads_from_message_id_and_subject() {
    let m = b"Date: Sat, 21 Nov 2026 10:00:00 +0000\r\nFrom: A <a@example.org>\r\n\
              Subject: =?utf-8?q?hi?=\r\nMessage-ID: <1@x>\r\n\r\nbody\r\n";
    assert_eq!(
        read(m),
        fields(Some("a@example.org"), Some("1@x"), Some("hi"))
    );
    assert_eq!(read(b"\r\nFrom: a@b\r\n"), full_parse(b"\r\nFrom: a@b\r\n"));
    assert_eq!(read(b""), HeaderFields::default());
}

#[test]
fn common_shapes_are_read_directly() {
    let cases: [(&[u8], HeaderFields); 5] = [
        (
            b"From: <foo@harness.test>\r\nTo: <1.foo@harness.test>\r\n\
              Message-Id: <20261126.1234@host.example>\r\nSubject: test message\r\n\r\nx",
            fields(
                Some("foo@harness.test"),
                Some("20261126.1234@host.example"),
                Some("test message"),
            ),
        ),
        (
            b"From: Ann Lee <ann.lee+tag@mail.example.org>\r\n\r\n",
            fields(Some("ann.lee+tag@mail.example.org"), None, None),
        ),
        (
            b"from:   bob@b.example  \r\nSUBJECT:Re: [list] 50% off!\r\n\r\n",
            fields(Some("bob@b.example"), None, Some("Re: [list] 50% off!")),
        ),
        (
            b"Message-ID: <a-b_c@d>\r\n\r\nFrom: body@e\r\n",
            fields(None, Some("a-b_c@d"), None),
        ),
        (b"To: x\r\n\r\n", HeaderFields::default()),
    ];
    for (m, want) in cases {
        assert_eq!(
            quick_reading(m).as_ref(),
            Some(&want),
            "{}",
            m.escape_ascii()
        );
        assert_eq!(full_parse(m), want, "{}", m.escape_ascii());
        assert_eq!(read(m), want);
    }
}

#[test]
fn other_shapes_go_to_mail_parser() {
    for m in [
        &b"From: \"Lee, Ann\" <ann@x.example>\r\n\r\n"[..],
        b"From: Ann (work) <ann@x.example>\r\n\r\n",
        b"From: a@x.example, b@y.example\r\n\r\n",
        b"From: Ann\r\n <ann@x.example>\r\n\r\n",
        b"From: a@b\r\nFrom: c@d\r\n\r\n",
        b"From: =?utf-8?q?Ann?= <ann@x.example>\r\n\r\n",
        b"From: \xc3\x89ve <eve@x.example>\r\n\r\n",
        b"From: Group: a@b;\r\n\r\n",
        b"From:\r\n\r\n",
        b"Message-ID: 1@x\r\n\r\n",
        b"Message-ID: <1@x> (comment)\r\n\r\n",
        b"Message-ID: <\"q\"@x>\r\n\r\n",
        b"Subject: =?utf-8?q?hi?=\r\n\r\n",
        b"Subject: two  spaces\r\n\r\n",
        b"Subject: tab\there\r\n\r\n",
        b"Subject: caf\xc3\xa9\r\n\r\n",
        b"Subject: folded\r\n line\r\n\r\n",
        b"Subject:\r\n\r\n",
    ] {
        assert_eq!(quick_reading(m), None, "{}", m.escape_ascii());
        assert_eq!(read(m), full_parse(m), "{}", m.escape_ascii());
    }
}

#[test]
fn scan_keeps_folded_and_repeated_fields() {
    let m = b"Received: from x\r\n\tby y\r\nFrom: A\r\n <a@example.org>\r\nTo: b@c\r\n\
              from: c@d\r\nMessage-Id:\r\n <1@x>\r\n\r\nFrom: body@e\r\n";
    let mut wanted = Vec::new();
    let found = scan(&m[..header_end(m)], Some(&mut wanted)).unwrap();
    assert_eq!(
        wanted,
        b"From: A\r\n <a@example.org>\r\nfrom: c@d\r\nMessage-Id:\r\n <1@x>\r\n"
    );
    let values: [Option<&[u8]>; 3] = [Some(b" c@d"), Some(b""), None];
    assert_eq!((found.values, found.single), (values, false));
    // Without `out`, the same values and nothing copied.
    let alone = scan(&m[..header_end(m)], None).unwrap();
    assert_eq!((alone.values, alone.single), (values, false));
    assert_eq!(read(m), full_parse(m));
    assert_eq!(read(m).message_id.as_deref(), Some("1@x"));
    // Not plain: left to mail-parser whole.
    for odd in [
        &b" folded first\r\nFrom: a@b\r\n\r\n"[..],
        b"From: a@b\n\r\n",
        b"\r\nFrom: a@b\r\n",
    ] {
        assert!(scan(odd, None).is_none());
        assert_eq!(read(odd), full_parse(odd));
    }
    assert_eq!(read(b"Subject: x\r\n\r\n"), fields(None, None, Some("x")));
}

#[test]
fn trim_drops_spaces_and_tabs_at_both_ends() {
    assert_eq!(trim(b" \t a b\t "), b"a b");
    assert_eq!(trim(b" \t "), b"");
    assert_eq!(trim(b""), b"");
}

/// A header field: a name (wanted or not, any case), maybe its colon, and a value of pieces
/// that make simple and awkward shapes alike.
fn field() -> impl Strategy<Value = Vec<u8>> {
    let name = prop_oneof![
        Just("From"),
        Just("from"),
        Just("FROM "),
        Just("Message-ID"),
        Just("Message-Id"),
        Just("Date"),
        Just("Subject"),
        Just("subject"),
        Just("Received"),
        Just("Content-Type"),
        Just("To"),
        Just("Resent-From"),
        Just("X-Other"),
        Just("References"),
        Just("Keywords"),
    ];
    let value = proptest::collection::vec(
        prop_oneof![
            Just(&b" "[..]),
            Just(&b"a@b.example"[..]),
            Just(&b"<"[..]),
            Just(&b">"[..]),
            Just(&b"\""[..]),
            Just(&b"("[..]),
            Just(&b")"[..]),
            Just(&b","[..]),
            Just(&b";"[..]),
            Just(&b":"[..]),
            Just(&b"\r\n "[..]),
            Just(&b"\r\n\t"[..]),
            Just(&b"\n"[..]),
            Just(&b"\r"[..]),
            Just(&b"\t"[..]),
            Just(&b"=?utf-8?q?x_y?="[..]),
            Just(&b"Mon, 1 Jan 2024 00:00:00 +0000"[..]),
            Just(&b"\xc3\xa9"[..]),
            Just(&b"\xff"[..]),
            Just(&b"Name"[..]),
            Just(&b"@"[..]),
            Just(&b"."[..]),
            Just(&b"-"[..]),
            Just(&b"\\"[..]),
            Just(&b"multipart/mixed; boundary=x"[..]),
        ],
        0..8,
    );
    (name, any::<bool>(), value).prop_map(|(n, colon, v)| {
        let mut f = n.as_bytes().to_vec();
        if colon {
            f.push(b':');
        }
        f.extend(v.concat());
        f.extend_from_slice(b"\r\n");
        f
    })
}

/// A word of the characters simple values are made of, and of some they may not hold.
fn word(extra: &'static str) -> impl Strategy<Value = String> + Clone {
    let chars: Vec<char> = "aZ09".chars().chain(extra.chars()).collect::<Vec<_>>();
    proptest::collection::vec(proptest::sample::select(chars), 0..5)
        .prop_map(|c| c.into_iter().collect())
}

/// One wanted field of a simple or nearly simple shape.
fn near_simple() -> impl Strategy<Value = String> {
    let addr = || {
        (word("._+-!#"), word(".-_"), any::<bool>()).prop_map(|(l, d, at)| {
            if at {
                format!("{l}@{d}")
            } else {
                format!("{l}{d}")
            }
        })
    };
    let name = proptest::collection::vec(word("'.-\""), 0..3).prop_map(|w| w.join(" "));
    let pad = prop_oneof![Just(""), Just(" "), Just("  "), Just("\t")];
    prop_oneof![
        (pad.clone(), addr(), pad.clone()).prop_map(|(a, v, b)| format!("From:{a}{v}{b}")),
        (name, pad.clone(), addr()).prop_map(|(n, p, v)| format!("From: {n}{p}<{v}>")),
        (pad.clone(), addr()).prop_map(|(p, v)| format!("Message-ID:{p}<{v}>")),
        (pad, proptest::collection::vec(word("!%[]:;'=?()<>"), 0..4))
            .prop_map(|(p, w)| format!("Subject:{p}{}", w.join(" "))),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// Plain sections (CRLF lines, every field named and followed by ':') are read as a
    /// full parse reads them, with or without the direct reading.
    #[test]
    fn plain_sections_read_what_a_full_parse_reads(
        fields in proptest::collection::vec(field(), 1..8),
    ) {
        let plain: Vec<Vec<u8>> = fields
            .into_iter()
            .filter(|f| {
                let text = &f[..f.len() - 2];
                let named = text
                    .iter()
                    .position(|&b| b == b':')
                    .is_some_and(|c| c > 0 && text[..c].iter().all(|b| (33..=126).contains(b)));
                // Folded lines are plain; a bare CR or LF is not.
                let bare = text.iter().enumerate().any(|(i, &b)| match b {
                    b'\r' => text.get(i + 1) != Some(&b'\n')
                        || !matches!(text.get(i + 2), Some(b' ' | b'\t')),
                    b'\n' => i == 0 || text[i - 1] != b'\r',
                    _ => false,
                });
                named && !bare
            })
            .collect();
        prop_assume!(!plain.is_empty());
        let mut m = plain.concat();
        m.extend_from_slice(b"\r\nbody\r\n");
        prop_assert!(scan(&m[..header_end(&m)], None).is_some());
        prop_assert_eq!(read(&m), full_parse(&m));
    }

    /// Reading only the wanted fields, directly or by mail-parser, never changes what is read.
    #[test]
    fn same_answer_as_parsing_every_field(
        fields in proptest::collection::vec(field(), 0..8),
        body in proptest::collection::vec(any::<u8>(), 0..20),
    ) {
        let mut m = fields.concat();
        m.extend_from_slice(b"\r\n");
        m.extend(body);
        prop_assert_eq!(read(&m), full_parse(&m));
    }

    /// Fields at the edge of the simple shapes: where the direct reading answers, it is the
    /// full parse's answer, and whatever is read is the full parse's answer.
    #[test]
    fn direct_reading_is_mail_parsers(
        wanted in proptest::collection::vec(near_simple(), 1..4),
        other in any::<bool>(),
    ) {
        let mut m = String::new();
        if other {
            m.push_str("Date: Mon, 1 Jan 2024 00:00:00 +0000\r\n");
        }
        for f in &wanted {
            m.push_str(f);
            m.push_str("\r\n");
        }
        m.push_str("\r\nbody\r\n");
        let m = m.as_bytes();
        if let Some(direct) = quick_reading(m) {
            prop_assert_eq!(&direct, &full_parse(m), "{}", m.escape_ascii());
        }
        prop_assert_eq!(read(m), full_parse(m));
    }

    /// Simple shapes are always read directly (and so are read as mail-parser reads them).
    #[test]
    fn simple_shapes_are_read_directly(
        local in "[a-z0-9][a-z0-9._+-]{0,8}",
        domain in "[a-z0-9][a-z0-9.-]{0,8}",
        name in proptest::collection::vec("[A-Za-z0-9]{1,6}", 0..3),
        subject in proptest::collection::vec("[!-~&&[^=]]{1,6}", 1..4),
    ) {
        let addr = format!("{local}@{domain}");
        let from = if name.is_empty() { format!("<{addr}>") } else { format!("{} <{addr}>", name.join(" ")) };
        let m = format!(
            "From: {from}\r\nMessage-ID: <{addr}>\r\nSubject: {}\r\n\r\n",
            subject.join(" ")
        );
        let direct = quick_reading(m.as_bytes());
        prop_assert!(direct.is_some(), "{}", m);
        prop_assert_eq!(direct.unwrap(), full_parse(m.as_bytes()), "{}", m);
    }
}
