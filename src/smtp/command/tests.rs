use super::*;
use proptest::prelude::*;

fn p(s: &str) -> Result<Command, CommandError> {
    parse_command(s.as_bytes())
}

fn code(s: &[u8]) -> u16 {
    parse_command(s).unwrap_err().reply().code
}

fn wire(s: &str) -> String {
    String::from_utf8(p(s).unwrap().to_wire()).unwrap()
}

#[test]
fn simple_verbs_any_case() {
    assert_eq!(p("data"), Ok(Command::Data));
    assert_eq!(p("RsEt"), Ok(Command::Rset));
    assert_eq!(p("QUIT"), Ok(Command::Quit));
    assert_eq!(p("starttls"), Ok(Command::StartTls));
    assert_eq!(p("NOOP hello there"), Ok(Command::Noop));
    assert_eq!(p("HELP"), Ok(Command::Help));
    assert_eq!(p("HELP mail"), Ok(Command::Help));
    assert_eq!(p("DATA  "), Ok(Command::Data));
}

#[test]
fn no_args_allowed() {
    for s in ["DATA x", "RSET x", "QUIT now", "STARTTLS x"] {
        assert_eq!(code(s.as_bytes()), 501, "{s}");
    }
}

#[test]
fn helo_ehlo() {
    assert_eq!(
        p("EHLO client.example"),
        Ok(Command::Ehlo("client.example".into()))
    );
    assert_eq!(
        p("helo [192.0.2.1]"),
        Ok(Command::Helo("[192.0.2.1]".into()))
    );
    assert_eq!(wire("ehlo x.y"), "EHLO x.y\r\n");
    for s in ["EHLO", "EHLO ", "EHLO a b", "HELO  a"] {
        assert_eq!(code(s.as_bytes()), 501, "{s}");
    }
}

#[test]
fn mail_from() {
    let Command::Mail(m) = p("MAIL FROM:<a@b.example> SIZE=100 body=8BITMIME").unwrap() else {
        panic!()
    };
    assert_eq!(m.sender.as_str(), "a@b.example");
    assert_eq!(
        m.params,
        vec![
            Param {
                keyword: "SIZE".into(),
                value: Some("100".into())
            },
            Param {
                keyword: "BODY".into(),
                value: Some("8BITMIME".into())
            },
        ]
    );
    assert_eq!(
        Param::find(&m.params, "SIZE").unwrap().value.as_deref(),
        Some("100")
    );
    assert_eq!(
        wire("mail from:<a@b.example>  size=100 SMTPUTF8"),
        "MAIL FROM:<a@b.example> SIZE=100 SMTPUTF8\r\n"
    );
}

#[test]
fn mail_from_tolerated_space_and_null() {
    let Command::Mail(m) = p("MAIL FROM: <>").unwrap() else {
        panic!()
    };
    assert!(m.sender.is_null());
    assert_eq!(wire("MAIL FROM: <>"), "MAIL FROM:<>\r\n");
    // Only one space is tolerated.
    assert_eq!(code(b"MAIL FROM:  <>"), 501);
    assert_eq!(code(b"MAIL  FROM:<>"), 501);
    assert_eq!(code(b"MAIL FROM <a@b.c>"), 501);
    assert_eq!(code(b"MAIL FROM:a@b.c"), 501);
    assert_eq!(code(b"MAIL FROM:<a@b.c"), 501);
    assert_eq!(code(b"MAIL FROM:<a@b.c>x"), 501);
    assert_eq!(code(b"MAIL"), 501);
    assert_eq!(code(b"MAIL TO:<a@b.c>"), 501);
}

#[test]
fn rcpt_to() {
    let Command::Rcpt(r) =
        p("rcpt to:<Bob@Example.ORG> NOTIFY=SUCCESS,FAILURE ORCPT=rfc822;bob+2Bx@example.org")
            .unwrap()
    else {
        panic!()
    };
    assert_eq!(r.recipient.normalized(), "bob@example.org");
    assert_eq!(r.params.len(), 2);
    assert_eq!(
        r.params[1].value.as_deref(),
        Some("rfc822;bob+2Bx@example.org")
    );
    assert!(matches!(p("RCPT TO:<postmaster>"), Ok(Command::Rcpt(_))));
    assert_eq!(code(b"RCPT TO:<>"), 553);
    assert_eq!(code(b"RCPT TO:<bob>"), 553);
}

#[test]
fn rcpt_source_route_dropped() {
    assert_eq!(
        wire("RCPT TO:<@hop.example:bob@example.org>"),
        "RCPT TO:<bob@example.org>\r\n"
    );
}

#[test]
fn quoted_local_part_with_gt() {
    let Command::Rcpt(r) = p("RCPT TO:<\"a>b\"@x.org> NOTIFY=NEVER").unwrap() else {
        panic!()
    };
    assert_eq!(r.recipient.local_part(), "a>b");
    assert_eq!(r.params.len(), 1);
}

#[test]
fn utf8_address() {
    let Command::Mail(m) = p("MAIL FROM:<jörg@bücher.example> SMTPUTF8").unwrap() else {
        panic!()
    };
    assert!(!m.sender.is_ascii());
}

#[test]
fn address_errors_and_codes() {
    let e = p("MAIL FROM:<a..b@x.org>").unwrap_err();
    assert_eq!(e.reply().code, 553);
    assert_eq!(e.reply().enhanced(), Some((5, 1, 7)));
    let e = p("RCPT TO:<a..b@x.org>").unwrap_err();
    assert_eq!(e.reply().enhanced(), Some((5, 1, 3)));
    let long = format!("RCPT TO:<{}@x.org>", "a".repeat(65));
    assert_eq!(
        p(&long),
        Err(CommandError::Address {
            role: AddressRole::Recipient,
            error: AddressError::LocalPartTooLong
        })
    );
    let long = format!("RCPT TO:<a@{}.org>", "b.".repeat(130));
    assert_eq!(code(long.as_bytes()), 553);
}

#[test]
fn parameter_errors() {
    for s in [
        "MAIL FROM:<> SIZE=",
        "MAIL FROM:<> SIZE=1=2",
        "MAIL FROM:<> =1",
        "MAIL FROM:<> -X",
        "MAIL FROM:<> K_Y=1",
    ] {
        let e = p(s).unwrap_err();
        assert_eq!(e.reply().code, 555, "{s}");
        assert_eq!(e.reply().enhanced(), Some((5, 5, 4)));
    }
}

#[test]
fn control_chars_and_garbage() {
    assert_eq!(code(b"NOOP\0"), 500);
    assert_eq!(code(b"MAIL FROM:<a@b.c>\tSIZE=1"), 500);
    assert_eq!(code(b"RCPT TO:<a\x7f@b.c>"), 500);
    assert_eq!(code(b"\x16\x03\x01"), 500);
    assert_eq!(code(b"MAIL FROM:<\xff@b.c>"), 500);
    assert_eq!(code(b""), 500);
    assert_eq!(code(b" NOOP"), 500);
    assert_eq!(code(b"NO:OP"), 500);
    assert_eq!(parse_command(b"\xc3\xa9"), Err(CommandError::BadVerb));
}

#[test]
fn unknown_verbs() {
    assert_eq!(
        p("xclient ADDR=1.2.3.4"),
        Ok(Command::Unknown("XCLIENT".into()))
    );
    assert_eq!(p("GET / HTTP/1.1"), Ok(Command::Unknown("GET".into())));
    assert_eq!(wire("x-link2state foo"), "X-LINK2STATE\r\n");
}

#[test]
fn vrfy_expn() {
    assert_eq!(p("VRFY bob"), Ok(Command::Vrfy("bob".into())));
    assert_eq!(p("EXPN staff list"), Ok(Command::Expn("staff list".into())));
    assert_eq!(code(b"VRFY"), 501);
    assert_eq!(code(b"EXPN "), 501);
}

#[test]
fn bdat() {
    assert_eq!(
        p("BDAT 100"),
        Ok(Command::Bdat {
            size: 100,
            last: false
        })
    );
    assert_eq!(
        p("bdat 0 last"),
        Ok(Command::Bdat {
            size: 0,
            last: true
        })
    );
    assert_eq!(wire("bdat 7 last"), "BDAT 7 LAST\r\n");
    for s in [
        "BDAT",
        "BDAT x",
        "BDAT -1",
        "BDAT 1 FIRST",
        "BDAT 99999999999999999999999",
        "BDAT +1",
    ] {
        assert_eq!(code(s.as_bytes()), 501, "{s}");
    }
    assert_eq!(
        p("BDAT 18446744073709551615"),
        Ok(Command::Bdat {
            size: u64::MAX,
            last: false
        })
    );
}

#[test]
fn auth() {
    assert_eq!(
        p("auth plain AGJvYgBzZWNyZXQ="),
        Ok(Command::Auth {
            mechanism: "PLAIN".into(),
            initial: Some("AGJvYgBzZWNyZXQ=".into())
        })
    );
    assert_eq!(
        p("AUTH LOGIN"),
        Ok(Command::Auth {
            mechanism: "LOGIN".into(),
            initial: None
        })
    );
    assert_eq!(
        p("AUTH PLAIN ="),
        Ok(Command::Auth {
            mechanism: "PLAIN".into(),
            initial: Some("=".into())
        })
    );
    for s in [
        "AUTH",
        "AUTH PLAIN a b",
        "AUTH PLAIN a!b",
        "AUTH THIS-MECHANISM-IS-TOO-LONG",
        "AUTH P.L",
    ] {
        assert_eq!(code(s.as_bytes()), 501, "{s}");
    }
}

#[test]
fn ends_group_rules() {
    let group_ok = [
        "MAIL FROM:<>",
        "RCPT TO:<a@b.c>",
        "RSET",
        "BDAT 1",
        "AUTH PLAIN AGEAYg==",
        "AUTH EXTERNAL =",
    ];
    for s in group_ok {
        assert!(!p(s).unwrap().ends_group(), "{s}");
    }
    let last = [
        "EHLO a",
        "HELO a",
        "DATA",
        "VRFY a",
        "EXPN a",
        "QUIT",
        "NOOP",
        "STARTTLS",
        "AUTH LOGIN",
        "AUTH LOGIN Ym9i",
        "HELP",
        "XYZZY",
    ];
    for s in last {
        assert!(p(s).unwrap().ends_group(), "{s}");
    }
}

#[test]
fn verbs() {
    assert_eq!(p("mail from:<>").unwrap().verb(), "MAIL");
    assert_eq!(p("xyzzy").unwrap().verb(), "UNKNOWN");
    assert_eq!(p("xyzzy").unwrap(), Command::Unknown("XYZZY".into()));
}

#[test]
fn framer_error_replies() {
    assert_eq!(CommandError::LineTooLong.reply().code, 500);
    assert_eq!(
        CommandError::AuthLineTooLong.reply().enhanced(),
        Some((5, 5, 6))
    );
    assert_eq!(
        CommandError::BareLineEnding.reply().enhanced(),
        Some((5, 5, 2))
    );
}

// ---- property tests ----

fn atom() -> impl Strategy<Value = String> {
    "[a-zA-Z0-9!#$%&'*+/=?^_`{|}~-]{1,8}"
}

fn local_part() -> impl Strategy<Value = String> {
    prop_oneof![
        proptest::collection::vec(atom(), 1..4).prop_map(|v| v.join(".")),
        "[ a-zA-Z0-9@<>.,]{0,10}".prop_map(|s| format!("\"{s}\"")),
        Just("jörg".to_string()),
    ]
}

fn domain() -> impl Strategy<Value = String> {
    prop_oneof![
        proptest::collection::vec("[a-zA-Z0-9]([a-zA-Z0-9-]{0,6}[a-zA-Z0-9])?", 1..4)
            .prop_map(|v| v.join(".")),
        Just("[192.0.2.7]".to_string()),
        Just("[IPv6:2001:db8::7]".to_string()),
        Just("bücher.example".to_string()),
    ]
}

fn path(role: AddressRole) -> impl Strategy<Value = Path> {
    let mailbox = (local_part(), domain()).prop_map(|(l, d)| format!("{l}@{d}"));
    let text = match role {
        AddressRole::Sender => prop_oneof![Just(String::new()), mailbox].boxed(),
        AddressRole::Recipient => prop_oneof![Just("Postmaster".to_string()), mailbox].boxed(),
    };
    text.prop_map(move |t| Path::parse(&t, role).unwrap())
}

fn params() -> impl Strategy<Value = Vec<Param>> {
    proptest::collection::vec(
        (
            "[A-Z0-9][A-Z0-9-]{0,8}",
            proptest::option::of("[!-<>-~]{1,10}"),
        )
            .prop_map(|(keyword, value)| Param { keyword, value }),
        0..4,
    )
}

fn command() -> impl Strategy<Value = Command> {
    let token = "[!-~]{1,20}";
    prop_oneof![
        token.prop_map(Command::Helo),
        token.prop_map(Command::Ehlo),
        (path(AddressRole::Sender), params())
            .prop_map(|(sender, params)| Command::Mail(MailFrom { sender, params })),
        (path(AddressRole::Recipient), params())
            .prop_map(|(recipient, params)| Command::Rcpt(RcptTo { recipient, params })),
        Just(Command::Data),
        (any::<u64>(), any::<bool>()).prop_map(|(size, last)| Command::Bdat { size, last }),
        Just(Command::Rset),
        Just(Command::Noop),
        Just(Command::Quit),
        Just(Command::Help),
        "[!-~][ -~]{0,20}[!-~]".prop_map(Command::Vrfy),
        "[!-~]{1,20}".prop_map(Command::Expn),
        Just(Command::StartTls),
        (
            "[A-Z0-9_-]{1,20}",
            proptest::option::of("[A-Za-z0-9+/=]{1,40}")
        )
            .prop_map(|(mechanism, initial)| Command::Auth { mechanism, initial }),
        "X[A-Z0-9-]{1,10}".prop_map(Command::Unknown),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn wire_round_trip(cmd in command()) {
        let w = cmd.to_wire();
        prop_assert!(w.ends_with(b"\r\n"));
        prop_assert!(!w[..w.len() - 2].contains(&b'\r') && !w[..w.len() - 2].contains(&b'\n'));
        let back = parse_command(&w[..w.len() - 2]);
        prop_assert_eq!(back, Ok(cmd));
    }

    /// Whatever is accepted re-parses from its wire form to the same command.
    #[test]
    fn accepted_is_canonical(line in proptest::collection::vec(
        prop_oneof![Just(b' '), Just(b'<'), Just(b'>'), Just(b':'), Just(b'@'), Just(b'='), any::<u8>()], 0..80),
        verb in prop_oneof![Just("MAIL FROM:"), Just("RCPT TO:"), Just("AUTH "), Just("BDAT "), Just("EHLO "), Just("")]) {
        let mut input = verb.as_bytes().to_vec();
        input.extend_from_slice(&line);
        if let Ok(cmd) = parse_command(&input) {
            let w = cmd.to_wire();
            prop_assert_eq!(parse_command(&w[..w.len() - 2]), Ok(cmd));
        }
    }
}
