use super::*;
use proptest::prelude::*;

/// A request as Postfix 3.7 sends it at RCPT for an authenticated client.
const RCPT: &str = "request=smtpd_access_policy\nprotocol_state=RCPT\nprotocol_name=ESMTP\n\
client_address=192.0.2.7\nclient_name=unknown\nclient_port=50123\n\
reverse_client_name=host.example.net\nhelo_name=laptop\nsender=alice@example.org\n\
recipient=bob@example.com\nrecipient_count=0\nqueue_id=\ninstance=1a2b.67890.0\nsize=1234\n\
etrn_domain=\nstress=\nsasl_method=PLAIN\nsasl_username=Alice\nsasl_sender=\n\
ccert_subject=\nencryption_protocol=TLSv1.3\nencryption_cipher=TLS_AES_256_GCM_SHA384\n\
encryption_keysize=256\npolicy_context=\ncompatibility_level=3.6\nmail_version=3.7.11\n\n";

fn read_all(text: &[u8]) -> Vec<Result<PolicyRequest, PolicyError>> {
    let mut r = RequestReader::default();
    let mut out = Vec::new();
    for line in text.split(|&b| b == b'\n') {
        match r.line(line) {
            Ok(Some(req)) => out.push(Ok(req)),
            Ok(None) => {}
            Err(e) => out.push(Err(e)),
        }
    }
    out
}

#[test]
fn every_known_name_is_at_its_place() {
    for (i, name) in KNOWN.iter().enumerate() {
        assert_eq!(known(name.as_bytes()), Some(i), "{name}");
    }
    assert_eq!(known(b"reverse_client_name"), None);
    assert_eq!(known(b""), None);
}

#[test]
fn a_postfix_request_is_read_whole() {
    let reqs = read_all(RCPT.as_bytes());
    let req = reqs[0].as_ref().unwrap();
    assert!(req.is_access_policy());
    assert_eq!(req.protocol_state(), Some(ProtocolState::Rcpt));
    assert_eq!(req.client_address(), Some("192.0.2.7".parse().unwrap()));
    assert_eq!(req.client_port(), Some(50123));
    assert_eq!(req.client_name(), None, "Postfix's 'unknown' is no name");
    assert_eq!(req.sasl_username(), Some("Alice"));
    assert_eq!(req.recipient_count(), Some(0));
    assert_eq!(req.size(), Some(1234));
    assert_eq!(req.instance(), Some("1a2b.67890.0"));
    assert_eq!(req.get("queue_id"), Some(""));
    assert_eq!(req.non_empty("queue_id"), None);
    assert_eq!(req.get("mail_version"), Some("3.7.11"));
    assert_eq!(req.attributes().count(), 26);
}

#[test]
fn requests_follow_each_other_on_one_connection() {
    let two = format!("{RCPT}{}", RCPT.replace("bob@", "carol@"));
    let reqs = read_all(two.as_bytes());
    assert_eq!(
        reqs.len(),
        3,
        "two requests and the empty tail of the split"
    );
    assert_eq!(
        reqs[1].as_ref().unwrap().get("recipient"),
        Some("carol@example.com")
    );
}

#[test]
fn crlf_line_ends_and_equals_in_values_are_read() {
    let reqs = read_all(b"request=smtpd_access_policy\r\nccert_subject=CN=a,O=b\r\n\r\n");
    let req = reqs[0].as_ref().unwrap();
    assert_eq!(req.get("ccert_subject"), Some("CN=a,O=b"));
}

#[test]
fn unknown_states_and_bad_numbers_are_none() {
    let reqs = read_all(b"protocol_state=BDAT\nclient_address=unknown\nsize=lots\n\n");
    let req = reqs[0].as_ref().unwrap();
    assert_eq!(req.protocol_state(), None);
    assert_eq!(req.client_address(), None);
    assert_eq!(req.size(), None);
    assert_eq!(
        ProtocolState::parse("end-of-message"),
        Some(ProtocolState::EndOfMessage)
    );
    assert_eq!(ProtocolState::parse("EHLO"), Some(ProtocolState::Helo));
}

#[test]
fn bad_lines_are_clear_errors_and_the_next_request_reads() {
    let mut r = RequestReader::default();
    assert_eq!(r.line(b"request=smtpd_access_policy"), Ok(None));
    assert!(r.in_request());
    assert_eq!(
        r.line(b"no equals here"),
        Err(PolicyError::NoEquals("no equals here".into()))
    );
    assert!(!r.in_request(), "an error starts a new request");
    assert_eq!(r.line(b"=value"), Err(PolicyError::EmptyName));
    let long = vec![b'a'; MAX_LINE];
    assert_eq!(r.line(&long), Err(PolicyError::LineTooLong));
    for i in 0..MAX_ATTRIBUTES {
        assert_eq!(r.line(format!("a{i}=x").as_bytes()), Ok(None));
    }
    assert_eq!(r.line(b"one=more"), Err(PolicyError::TooManyAttributes));
    assert_eq!(r.line(b"sender=a@b"), Ok(None));
    let req = r.line(b"").unwrap().unwrap();
    assert_eq!(req.attributes().count(), 1);
    assert_eq!(
        PolicyError::NoEquals("x".into()).to_string(),
        "policy request line without '=': \"x\""
    );
}

#[test]
fn actions_are_written_as_access_actions() {
    assert_eq!(PolicyAction::Dunno.encode(), "action=DUNNO\n\n");
    assert_eq!(PolicyAction::Ok.encode(), "action=OK\n\n");
    assert_eq!(
        PolicyAction::DeferIfPermit("4.7.1 alice sends too fast".into()).encode(),
        "action=DEFER_IF_PERMIT 4.7.1 alice sends too fast\n\n"
    );
    assert_eq!(
        PolicyAction::Code(450, "4.7.1 slow down".into()).encode(),
        "action=450 4.7.1 slow down\n\n"
    );
    assert_eq!(
        PolicyAction::Code(250, "x".into()).encode(),
        "action=400 x\n\n"
    );
    assert_eq!(
        PolicyAction::Hold("floodgate: held by limit campaign".into()).encode(),
        "action=HOLD floodgate: held by limit campaign\n\n"
    );
    assert_eq!(
        PolicyAction::Prepend("X-Floodgate: over".into()).encode(),
        "action=PREPEND X-Floodgate: over\n\n"
    );
    assert_eq!(
        PolicyAction::Reject(String::new()).encode(),
        "action=REJECT\n\n"
    );
}

#[test]
fn action_texts_cannot_break_the_protocol() {
    // A newline in a text would end the answer early and start a forged one.
    let forged = PolicyAction::Warn("a\n\naction=OK\r\nb".into()).encode();
    assert_eq!(forged, "action=WARN a action=OK b\n\n");
    let long = PolicyAction::Reject("é".repeat(MAX_TEXT)).encode();
    assert!(long.len() <= "action=REJECT \n\n".len() + MAX_TEXT);
    assert!(long.ends_with("é\n\n"));
}

/// One request: `name=value` lines, then the empty line.
fn request_text<'a>(attrs: impl Iterator<Item = (&'a str, &'a str)>) -> String {
    let mut text: String = attrs.map(|(n, v)| format!("{n}={v}\n")).collect();
    text.push('\n');
    text
}

proptest! {
    #[test]
    fn any_bytes_never_panic_and_errors_reset(lines in prop::collection::vec(prop::collection::vec(any::<u8>(), 0..40), 0..50)) {
        let mut r = RequestReader::default();
        for l in &lines {
            let l: Vec<u8> = l.iter().copied().filter(|&b| b != b'\n').collect();
            match r.line(&l) {
                Ok(Some(req)) => prop_assert!(req.attributes().count() <= MAX_ATTRIBUTES),
                Ok(None) => prop_assert!(r.in_request()),
                Err(_) => prop_assert!(!r.in_request()),
            }
        }
    }

    #[test]
    fn attributes_read_back_as_written(attrs in prop::collection::vec(("[a-z_]{1,20}", "[ -~]{0,60}"), 1..30)) {
        let text = request_text(attrs.iter().map(|(n, v)| (n.as_ref(), v.as_str())));
        let reqs = read_all(text.as_bytes());
        let req = reqs[0].as_ref().unwrap();
        let back: Vec<(String, String)> =
            req.attributes().map(|(n, v)| (n.to_string(), v.to_string())).collect();
        prop_assert_eq!(back, attrs);
    }

    /// Whether a name is one floodgate reads or not, its value is the last one given.
    #[test]
    fn the_last_value_of_a_name_is_found(
        attrs in prop::collection::vec((prop::sample::select(vec!["sender", "recipient", "size", "instance", "x_other", "y"]), "[ -~]{0,20}"), 1..20),
    ) {
        let text = request_text(attrs.iter().map(|(n, v)| (*n, v.as_str())));
        let reqs = read_all(text.as_bytes());
        let req = reqs[0].as_ref().unwrap();
        for name in ["sender", "recipient", "size", "instance", "x_other", "y", "queue_id"] {
            let last = attrs.iter().rev().find(|(n, _)| *n == name).map(|(_, v)| v.as_str());
            prop_assert_eq!(req.get(name), last);
        }
    }

    #[test]
    fn encoded_actions_are_one_line_and_an_empty_one(text in "\\PC{0,600}", code in 0u16..1000) {
        for a in [PolicyAction::Reject(text.clone()), PolicyAction::Code(code, text.clone())] {
            let e = a.encode();
            prop_assert!(e.ends_with("\n\n"));
            prop_assert_eq!(e.matches('\n').count(), 2);
            prop_assert!(!e.contains('\r'));
        }
    }
}
