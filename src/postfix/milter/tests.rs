use super::*;
use proptest::prelude::*;

fn packet(code: u8, data: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    write_packet(&mut out, code, &[data]);
    out
}

fn parse(code: u8, data: &[u8]) -> Result<Command<'_>, MilterError> {
    Command::parse(Packet { code, data })
}

#[test]
fn packets_are_framed_by_their_length() {
    let mut buf = packet(b'H', b"laptop\0");
    buf.extend(packet(b'T', b""));
    let (p, used) = next_packet(&buf).unwrap().unwrap();
    assert_eq!((p.code, p.data, used), (b'H', &b"laptop\0"[..], 12));
    let (p, used) = next_packet(&buf[12..]).unwrap().unwrap();
    assert_eq!((p.code, p.data.len(), used), (b'T', 0, 5));
    // Incomplete: the length, or the data, not all there yet.
    assert_eq!(next_packet(&buf[..3]), Ok(None));
    assert_eq!(next_packet(&buf[..8]), Ok(None));
}

#[test]
fn bad_lengths_are_refused_before_buffering() {
    assert_eq!(next_packet(&[0, 0, 0, 0]), Err(MilterError::EmptyPacket));
    let huge = ((MAX_DATA + 2) as u32).to_be_bytes();
    assert_eq!(next_packet(&huge), Err(MilterError::TooLong(MAX_DATA + 1)));
    let max = ((MAX_DATA + 1) as u32).to_be_bytes();
    assert_eq!(
        next_packet(&max),
        Ok(None),
        "the largest allowed waits for its data"
    );
}

#[test]
fn postfix_s_commands_are_read() {
    let mut neg = Vec::new();
    for n in [6u32, 0x1ff, 0x1f_ffff] {
        neg.extend_from_slice(&n.to_be_bytes());
    }
    assert_eq!(
        parse(b'O', &neg),
        Ok(Command::Negotiate(Options {
            version: 6,
            actions: 0x1ff,
            steps: 0x1f_ffff
        }))
    );
    let Command::Macros { stage, pairs } = parse(
        b'D',
        b"Mi\0ABC123\0{auth_authen}\0Alice\0{auth_type}\0PLAIN\0",
    )
    .unwrap() else {
        panic!("macros")
    };
    assert_eq!(stage, b'M');
    assert_eq!(macro_value(&pairs, "{auth_authen}"), Some(&b"Alice"[..]));
    assert_eq!(macro_value(&pairs, "auth_type"), Some(&b"PLAIN"[..]));
    assert_eq!(macro_value(&pairs, "i"), Some(&b"ABC123"[..]));
    assert_eq!(macro_value(&pairs, "{i}"), Some(&b"ABC123"[..]));
    assert_eq!(macro_value(&pairs, "j"), None);
    assert_eq!(
        parse(b'C', b"mail.example.net\x004\xc3\x50192.0.2.7\0"),
        Ok(Command::Connect {
            hostname: b"mail.example.net",
            address: ClientAddress::Inet("192.0.2.7".parse().unwrap(), 50_000),
        })
    );
    assert_eq!(
        parse(b'C', b"[2001:db8::1]\x006\x00\x19IPv6:2001:db8::1\0"),
        Ok(Command::Connect {
            hostname: b"[2001:db8::1]",
            address: ClientAddress::Inet("2001:db8::1".parse().unwrap(), 25),
        })
    );
    assert_eq!(
        parse(b'C', b"localhost\0U"),
        Ok(Command::Connect {
            hostname: b"localhost",
            address: ClientAddress::Unknown
        })
    );
    assert_eq!(parse(b'H', b"laptop\0"), Ok(Command::Helo(b"laptop")));
    assert_eq!(
        parse(b'M', b"<alice@example.org>\0SIZE=1234\0"),
        Ok(Command::Mail(vec![
            &b"<alice@example.org>"[..],
            b"SIZE=1234"
        ]))
    );
    assert_eq!(
        parse(b'R', b"<bob@example.com>\0"),
        Ok(Command::Rcpt(vec![&b"<bob@example.com>"[..]]))
    );
    assert_eq!(parse(b'T', b""), Ok(Command::Data));
    assert_eq!(
        parse(b'L', b"Subject\0 Hello\0"),
        Ok(Command::Header {
            name: b"Subject",
            value: b" Hello"
        })
    );
    assert_eq!(parse(b'N', b""), Ok(Command::EndOfHeaders));
    assert_eq!(parse(b'B', b"line\r\n"), Ok(Command::Body(b"line\r\n")));
    assert_eq!(parse(b'E', b""), Ok(Command::EndOfMessage(b"")));
    assert_eq!(parse(b'A', b""), Ok(Command::Abort));
    assert_eq!(parse(b'Q', b""), Ok(Command::Quit));
    assert_eq!(parse(b'K', b""), Ok(Command::QuitNewConnection));
    assert_eq!(parse(b'U', b"FOO bar\0"), Ok(Command::Unknown(b"FOO bar")));
}

#[test]
fn malformed_commands_are_clear_errors() {
    assert_eq!(parse(b'Z', b""), Err(MilterError::UnknownCommand('Z')));
    let cases: [(u8, &[u8], &str); 11] = [
        (
            b'O',
            &[0, 0, 0, 6, 0, 0],
            "malformed milter negotiation command: fewer than three numbers",
        ),
        (b'D', b"", "malformed milter macro command: no stage"),
        (
            b'D',
            b"Mi\0",
            "malformed milter macro command: a name without its value",
        ),
        (
            b'D',
            b"Mi\0x",
            "malformed milter macro command: a string without its NUL",
        ),
        (
            b'C',
            b"host\x004\x00\x19not-an-ip\0",
            "malformed milter connect command: not a host name, family, port and address",
        ),
        (
            b'C',
            b"host\x004\x00\x192001:db8::1\0",
            "malformed milter connect command: not a host name, family, port and address",
        ),
        (
            b'C',
            b"host\0X",
            "malformed milter connect command: not a host name, family, port and address",
        ),
        (
            b'H',
            b"a\0b\0",
            "malformed milter helo command: another number of strings",
        ),
        (b'M', b"", "malformed milter mail command: no address"),
        (
            b'L',
            b"Subject\0",
            "malformed milter header command: another number of strings",
        ),
        (
            b'T',
            b"x",
            "malformed milter data command: data where there is none",
        ),
    ];
    for (code, data, text) in cases {
        assert_eq!(
            parse(code, data).unwrap_err().to_string(),
            text,
            "{}",
            code as char
        );
    }
}

#[test]
fn answers_follow_the_agreed_no_reply_steps() {
    let rcpt = Command::Rcpt(vec![b"<a@b>"]);
    assert!(rcpt.wants_answer(0));
    assert!(!rcpt.wants_answer(steps::NO_REPLY_RCPT));
    let header = Command::Header {
        name: b"a",
        value: b"b",
    };
    assert!(!header.wants_answer(steps::NO_REPLY_HEADER));
    assert!(!Command::Abort.wants_answer(0));
    assert!(!Command::Macros {
        stage: b'C',
        pairs: vec![]
    }
    .wants_answer(0));
    assert!(Command::EndOfMessage(b"").wants_answer(u32::MAX));
}

#[test]
fn responses_are_written_as_packets() {
    let mut out = Vec::new();
    Response::Continue.encode(&mut out).unwrap();
    assert_eq!(out, [0, 0, 0, 1, b'c']);
    out.clear();
    Response::ReplyCode("450 4.7.1 alice sends too fast")
        .encode(&mut out)
        .unwrap();
    assert_eq!(&out[4..], b"y450 4.7.1 alice sends too fast\0");
    assert_eq!(
        u32::from_be_bytes([out[0], out[1], out[2], out[3]]) as usize,
        out.len() - 4
    );
    out.clear();
    Response::Quarantine("floodgate: limit campaign")
        .encode(&mut out)
        .unwrap();
    assert_eq!(&out[4..], b"qfloodgate: limit campaign\0");
    out.clear();
    Response::AddHeader {
        name: "X-Floodgate",
        value: "over limit",
    }
    .encode(&mut out)
    .unwrap();
    assert_eq!(&out[4..], b"hX-Floodgate\0over limit\0");
    out.clear();
    let lists = [
        (MacroStage::Mail, "{auth_authen} i"),
        (MacroStage::EndOfMessage, "i"),
    ];
    let o = Options {
        version: 6,
        actions: 0x121,
        steps: 0x80,
    };
    Response::Negotiate(o, &lists).encode(&mut out).unwrap();
    let (p, _) = next_packet(&out).unwrap().unwrap();
    assert_eq!(p.code, b'O');
    assert_eq!(&p.data[..12], &[0, 0, 0, 6, 0, 0, 1, 0x21, 0, 0, 0, 0x80]);
    assert_eq!(&p.data[12..16], &[0, 0, 0, 2]);
    assert_eq!(&p.data[16..32], b"{auth_authen} i\0");
    assert_eq!(&p.data[32..], b"\0\0\0\x05i\0");
}

#[test]
fn responses_that_would_break_the_protocol_are_refused() {
    let mut out = Vec::new();
    for bad in [
        Response::ReplyCode("250 ok"),
        Response::ReplyCode("450"),
        Response::ReplyCode("450 a\r\n250 b"),
        Response::Quarantine("a\0b"),
        Response::AddHeader {
            name: "Bad Name",
            value: "v",
        },
        Response::AddHeader {
            name: "",
            value: "v",
        },
        Response::AddHeader {
            name: "X",
            value: "a\nb",
        },
    ] {
        assert!(bad.encode(&mut out).is_err(), "{bad:?}");
    }
    assert!(out.is_empty(), "nothing written for a refused response");
}

#[test]
fn negotiation_takes_what_both_sides_have() {
    let lists = [(MacroStage::Mail, "{auth_authen}")];
    let wanted = Wanted {
        needed_actions: actions::QUARANTINE,
        optional_actions: actions::ADD_HEADERS,
        steps: steps::NO_REPLY_HEADER | steps::NO_UNKNOWN | steps::HEADER_LEADING_SPACE,
        macros: &lists,
    };
    // Postfix 3.x offers everything.
    let a = negotiate(
        Options {
            version: 6,
            actions: 0x1ff,
            steps: 0x1f_ffff,
        },
        &wanted,
    )
    .unwrap();
    assert_eq!(a.options.version, 6);
    assert_eq!(
        a.options.actions,
        actions::QUARANTINE | actions::ADD_HEADERS | actions::SET_MACRO_LIST
    );
    assert_eq!(a.options.steps, wanted.steps);
    assert_eq!(a.macros, &lists);
    // An older MTA: version 2, no macro lists, no v6 steps.
    let a = negotiate(
        Options {
            version: 2,
            actions: 0x3f,
            steps: 0x7f,
        },
        &wanted,
    )
    .unwrap();
    assert_eq!(a.options.version, 2);
    assert_eq!(
        a.options.actions,
        actions::QUARANTINE | actions::ADD_HEADERS
    );
    assert_eq!(a.options.steps, 0);
    assert!(a.macros.is_empty());
    assert_eq!(
        negotiate(
            Options {
                version: 1,
                actions: 0x3f,
                steps: 0
            },
            &wanted
        ),
        Err(MilterError::OldVersion(1))
    );
    let e = negotiate(
        Options {
            version: 6,
            actions: actions::ADD_HEADERS,
            steps: 0,
        },
        &wanted,
    );
    assert_eq!(e, Err(MilterError::MissingActions(actions::QUARANTINE)));
    assert_eq!(
        e.unwrap_err().to_string(),
        "the MTA does not offer the milter action(s) 0x20 floodgate needs"
    );
}

proptest! {
    #[test]
    fn any_bytes_frame_and_parse_without_panic(buf in prop::collection::vec(any::<u8>(), 0..300)) {
        let mut rest = &buf[..];
        while let Ok(Some((p, used))) = next_packet(rest) {
            prop_assert!(used >= 5 && used <= rest.len());
            let _ = Command::parse(p);
            rest = &rest[used..];
        }
    }

    #[test]
    fn any_command_data_parses_without_panic(code in any::<u8>(), data in prop::collection::vec(any::<u8>(), 0..100)) {
        if let Ok(c) = Command::parse(Packet { code, data: &data }) {
            let _ = c.wants_answer(0);
        }
    }

    #[test]
    fn written_packets_read_back(code in any::<u8>(), data in prop::collection::vec(any::<u8>(), 0..2000)) {
        let buf = packet(code, &data);
        let (p, used) = next_packet(&buf).unwrap().unwrap();
        prop_assert_eq!(used, buf.len());
        prop_assert_eq!(p.code, code);
        prop_assert_eq!(p.data, &data[..]);
    }

    #[test]
    fn macros_read_back(pairs in prop::collection::vec(("[a-z_{}]{1,12}", "[ -~]{0,30}"), 0..10)) {
        let mut data = vec![b'M'];
        for (n, v) in &pairs {
            data.extend_from_slice(n.as_bytes());
            data.push(0);
            data.extend_from_slice(v.as_bytes());
            data.push(0);
        }
        let Command::Macros { stage, pairs: back } = parse(b'D', &data).unwrap() else {
            panic!("macros")
        };
        prop_assert_eq!(stage, b'M');
        prop_assert_eq!(back.len(), pairs.len());
        for ((n, v), (bn, bv)) in pairs.iter().zip(back) {
            prop_assert_eq!(n.as_bytes(), bn);
            prop_assert_eq!(v.as_bytes(), bv);
        }
    }

    #[test]
    fn negotiation_never_asks_for_what_is_not_offered(v in 0u32..10, a in any::<u32>(), s in any::<u32>()) {
        let wanted = Wanted { needed_actions: 0, optional_actions: 0x1ff, steps: u32::MAX, macros: &[] };
        if let Ok(agreed) = negotiate(Options { version: v, actions: a, steps: s }, &wanted) {
            prop_assert!(agreed.options.version <= v && agreed.options.version <= VERSION);
            prop_assert_eq!(agreed.options.actions & !a, 0);
            prop_assert_eq!(agreed.options.steps & !s, 0);
        } else {
            prop_assert!(v < OLDEST_VERSION);
        }
    }
}
