use proptest::prelude::*;

use super::*;
use crate::smtp::command::parse_command;

fn cmd(line: &str) -> Command {
    parse_command(line.as_bytes()).expect(line)
}

fn ok() -> Reply {
    Reply::new(250, "2.0.0 Ok")
}

fn ehlo_list() -> Reply {
    Reply::multi(
        250,
        [
            "mx.example",
            "PIPELINING",
            "SIZE 50000000",
            "8BITMIME",
            "DSN",
            "SMTPUTF8",
            "CHUNKING",
            "AUTH PLAIN LOGIN",
            "STARTTLS",
        ],
    )
}

fn settings() -> Settings {
    Settings {
        max_recipients: 3,
        max_message_size: 1000,
        max_errors: 5,
        chunking: true,
        auth_without_tls: true,
        ..Settings::default()
    }
}

/// A dialogue after an accepted EHLO.
fn greeted(s: Settings) -> Dialogue {
    let mut d = Dialogue::new(s, false);
    assert_eq!(
        d.on_command(&cmd("EHLO client.example")),
        Step::Ask(Exchange::Ehlo)
    );
    assert!(matches!(
        d.on_upstream(Exchange::Ehlo, &ehlo_list()),
        Heard::Greeted {
            abandoned: false,
            ..
        }
    ));
    d
}

/// A dialogue inside a transaction with `n` accepted recipients.
fn with_recipients(s: Settings, n: usize) -> Dialogue {
    let mut d = greeted(s);
    assert_eq!(
        d.on_command(&cmd("MAIL FROM:<a@b.example>")),
        Step::Ask(Exchange::Mail)
    );
    assert_eq!(d.on_upstream(Exchange::Mail, &ok()), Heard::Accepted);
    for _ in 0..n {
        assert_eq!(
            d.on_command(&cmd("RCPT TO:<c@d.example>")),
            Step::Ask(Exchange::Rcpt)
        );
        assert_eq!(d.on_upstream(Exchange::Rcpt, &ok()), Heard::Accepted);
    }
    d
}

fn refused_with(step: Step) -> (u16, String) {
    match step {
        Step::Refuse { reply, .. } => (reply.code, reply.text()),
        other => panic!("not a refusal: {other:?}"),
    }
}

#[test]
fn mail_needs_helo() {
    let mut d = Dialogue::new(settings(), false);
    let (code, text) = refused_with(d.on_command(&cmd("MAIL FROM:<a@b>")));
    assert_eq!(
        (code, text.as_str()),
        (503, "5.5.1 Send HELO or EHLO first")
    );
}

#[test]
fn refused_helo_does_not_count_as_greeted() {
    let mut d = Dialogue::new(settings(), false);
    d.on_command(&cmd("HELO x"));
    assert_eq!(
        d.on_upstream(Exchange::Helo, &Reply::new(501, "bad")),
        Heard::Refused
    );
    assert!(!d.helo_seen());
    assert_eq!(refused_with(d.on_command(&cmd("MAIL FROM:<a@b>"))).0, 503);
}

#[test]
fn helo_offers_no_extensions() {
    let mut d = greeted(settings());
    assert!(d.offered().chunking);
    assert_eq!(d.on_command(&cmd("HELO x")), Step::Ask(Exchange::Helo));
    assert_eq!(
        d.on_upstream(Exchange::Helo, &ok()),
        Heard::Reset { abandoned: false }
    );
    assert!(!d.ehlo());
    assert_eq!(d.offered(), &Capabilities::default());
    assert!(
        !d.upstream_chunking(),
        "upstream's HELO session takes no BDAT, whatever its earlier EHLO offered"
    );
    assert!(
        !d.upstream_pipelining(),
        "nor pipelined commands (RFC 2920 is an extension of EHLO sessions)"
    );
    // SIZE was not offered after HELO.
    assert_eq!(
        refused_with(d.on_command(&cmd("MAIL FROM:<a@b> SIZE=10"))).0,
        555
    );
}

#[test]
fn a_helo_that_went_upstream_as_ehlo_is_answered_with_the_first_line_alone() {
    let mut d = with_recipients(settings(), 1);
    assert_eq!(d.on_command(&cmd("HELO x")), Step::Ask(Exchange::Helo));
    let heard = d.on_greeting(false, true, &ehlo_list());
    assert_eq!(
        heard,
        Heard::Greeted {
            answer: Reply::new(250, "mx.example"),
            abandoned: true
        }
    );
    assert!(d.helo_seen() && !d.ehlo() && !d.in_transaction());
    assert_eq!(
        d.offered(),
        &Capabilities::default(),
        "the client gets none"
    );
    assert!(
        d.upstream_chunking() && d.upstream_pipelining(),
        "upstream's EHLO session takes them, for floodgate's own commands"
    );
    assert_eq!(
        refused_with(d.on_command(&cmd("MAIL FROM:<a@b> BODY=8BITMIME"))).0,
        555
    );
    // A refusal changes nothing; a HELO relayed as HELO takes no extension, even if its
    // answer looks like a list.
    let mut d = greeted(settings());
    assert_eq!(
        d.on_greeting(false, true, &Reply::new(550, "5.7.1 no")),
        Heard::Refused
    );
    assert!(d.ehlo() && d.upstream_chunking());
    assert_eq!(
        d.on_greeting(false, false, &ehlo_list()),
        Heard::Reset { abandoned: false }
    );
    assert!(!d.upstream_chunking() && !d.upstream_pipelining());
}

#[test]
fn a_client_ehlo_is_greeted_the_same_through_on_greeting() {
    let mut a = greeted(settings());
    let mut b = greeted(settings());
    a.on_command(&cmd("EHLO again"));
    b.on_command(&cmd("EHLO again"));
    assert_eq!(
        a.on_upstream(Exchange::Ehlo, &ehlo_list()),
        b.on_greeting(true, true, &ehlo_list())
    );
    assert_eq!(a.offered(), b.offered());
}

#[test]
fn ehlo_filters_and_caps_the_list() {
    let mut s = settings();
    s.chunking = false;
    s.auth_without_tls = false;
    let d = greeted(s);
    assert_eq!(d.offered().size, Some(1000));
    assert!(!d.offered().chunking, "CHUNKING hidden by [smtp] chunking");
    assert!(d.upstream_chunking(), "what upstream offered is kept apart");
    assert!(d.upstream_pipelining());
    assert!(d.offered().auth.is_empty(), "no AUTH offered without TLS");
    assert!(!d.offered().starttls, "STARTTLS not possible here");
    assert!(d.ehlo());
}

#[test]
fn ehlo_offers_starttls_only_where_it_can_be_done() {
    let mut s = settings();
    s.starttls = true;
    assert!(greeted(s).offered().starttls);
    let mut d = Dialogue::new(s, true);
    d.on_command(&cmd("EHLO x"));
    d.on_upstream(Exchange::Ehlo, &ehlo_list());
    assert!(!d.offered().starttls, "already TLS");
}

#[test]
fn ehlo_ends_an_open_transaction() {
    let mut d = with_recipients(settings(), 1);
    d.on_command(&cmd("EHLO x"));
    assert!(matches!(
        d.on_upstream(Exchange::Ehlo, &ehlo_list()),
        Heard::Greeted {
            abandoned: true,
            ..
        }
    ));
    assert!(!d.in_transaction());
    assert_eq!(d.recipients(), 0);
}

#[test]
fn mail_needs_tls_where_required() {
    let mut s = settings();
    s.require_tls = true;
    let mut d = greeted(s);
    let step = d.on_command(&cmd("MAIL FROM:<a@b>"));
    assert!(matches!(&step, Step::Refuse { note: Some(_), .. }));
    assert_eq!(
        refused_with(step),
        (530, "5.7.0 Must issue a STARTTLS command first".into())
    );
    let mut d = Dialogue::new(s, true);
    d.on_command(&cmd("EHLO x"));
    d.on_upstream(Exchange::Ehlo, &ehlo_list());
    assert_eq!(
        d.on_command(&cmd("MAIL FROM:<a@b>")),
        Step::Ask(Exchange::Mail)
    );
}

#[test]
fn mail_needs_auth_where_required() {
    let mut s = settings();
    s.require_auth = true;
    let mut d = greeted(s);
    assert_eq!(
        refused_with(d.on_command(&cmd("MAIL FROM:<a@b>"))),
        (530, "5.7.0 Authentication required".into())
    );
    assert_eq!(
        d.on_command(&cmd("AUTH PLAIN")),
        Step::Auth(Mechanism::Plain)
    );
    assert_eq!(
        d.on_upstream(Exchange::Auth, &Reply::new(235, "2.7.0 ok")),
        Heard::Accepted
    );
    assert_eq!(
        d.on_command(&cmd("MAIL FROM:<a@b>")),
        Step::Ask(Exchange::Mail)
    );
}

#[test]
fn nested_mail_is_refused() {
    let mut d = with_recipients(settings(), 0);
    assert_eq!(
        refused_with(d.on_command(&cmd("MAIL FROM:<a@b>"))),
        (503, "5.5.1 Nested MAIL command".into())
    );
    // An accept upstream would never give does not reopen it.
    assert_eq!(d.on_upstream(Exchange::Mail, &ok()), Heard::Refused);
}

#[test]
fn refused_mail_opens_no_transaction() {
    let mut d = greeted(settings());
    d.on_command(&cmd("MAIL FROM:<a@b>"));
    assert_eq!(
        d.on_upstream(Exchange::Mail, &Reply::new(550, "no")),
        Heard::Refused
    );
    assert!(!d.in_transaction());
}

#[test]
fn mail_parameters_need_their_extension() {
    let mut d = greeted(settings());
    for ok in [
        "SIZE=10",
        "BODY=8BITMIME",
        "SMTPUTF8",
        "RET=HDRS",
        "ENVID=x",
        "AUTH=<>",
    ] {
        let line = format!("MAIL FROM:<a@b> {ok}");
        assert_eq!(d.on_command(&cmd(&line)), Step::Ask(Exchange::Mail), "{ok}");
    }
    assert_eq!(
        refused_with(d.on_command(&cmd("MAIL FROM:<a@b> FOO=1"))),
        (555, "5.5.4 Unsupported option".into())
    );
    let mut plain = Dialogue::new(settings(), false);
    plain.on_command(&cmd("EHLO x"));
    plain.on_upstream(Exchange::Ehlo, &Reply::multi(250, ["mx", "PIPELINING"]));
    for refused in [
        "SIZE=10",
        "BODY=8BITMIME",
        "SMTPUTF8",
        "RET=HDRS",
        "AUTH=<>",
    ] {
        let line = format!("MAIL FROM:<a@b> {refused}");
        assert_eq!(
            refused_with(plain.on_command(&cmd(&line))).0,
            555,
            "{refused}"
        );
    }
}

#[test]
fn rcpt_parameters_need_dsn() {
    let mut d = with_recipients(settings(), 0);
    assert_eq!(
        d.on_command(&cmd("RCPT TO:<c@d> NOTIFY=NEVER ORCPT=rfc822;c@d")),
        Step::Ask(Exchange::Rcpt)
    );
    assert_eq!(
        refused_with(d.on_command(&cmd("RCPT TO:<c@d> SIZE=1"))).0,
        555
    );
}

#[test]
fn size_over_the_limit_is_552_not_an_error() {
    let mut d = greeted(settings());
    let step = d.on_command(&cmd("MAIL FROM:<a@b> SIZE=1001"));
    assert_eq!(step, Step::Reply(replies::size_over_limit()));
    assert_eq!(
        d.on_command(&cmd("MAIL FROM:<a@b> SIZE=1000")),
        Step::Ask(Exchange::Mail)
    );
    assert_eq!(
        size_hint(&MailFrom {
            sender: crate::smtp::Path::null(),
            params: vec![]
        }),
        0
    );
}

#[test]
fn rcpt_needs_mail() {
    let mut d = greeted(settings());
    assert_eq!(
        refused_with(d.on_command(&cmd("RCPT TO:<c@d>"))),
        (503, "5.5.1 Send MAIL first".into())
    );
    assert_eq!(d.on_upstream(Exchange::Rcpt, &ok()), Heard::Refused);
    assert_eq!(d.recipients(), 0);
}

#[test]
fn too_many_recipients_is_452_not_an_error() {
    let mut d = with_recipients(settings(), 3);
    assert_eq!(
        d.on_command(&cmd("RCPT TO:<c@d>")),
        Step::Reply(replies::too_many_recipients())
    );
    assert_eq!(d.on_upstream(Exchange::Rcpt, &ok()), Heard::Refused);
    assert_eq!(d.recipients(), 3);
}

#[test]
fn refused_rcpt_is_not_counted() {
    let mut d = with_recipients(settings(), 1);
    d.on_command(&cmd("RCPT TO:<x@y>"));
    assert_eq!(
        d.on_upstream(Exchange::Rcpt, &Reply::new(550, "no")),
        Heard::Refused
    );
    assert_eq!(d.recipients(), 1);
}

#[test]
fn data_needs_mail() {
    let mut d = greeted(settings());
    assert_eq!(refused_with(d.on_command(&Command::Data)).0, 503);
}

#[test]
fn data_needs_a_recipient() {
    let mut d = with_recipients(settings(), 0);
    assert_eq!(
        refused_with(d.on_command(&Command::Data)),
        (554, "5.5.1 No valid recipients".into())
    );
    let mut d = with_recipients(settings(), 1);
    assert_eq!(d.on_command(&Command::Data), Step::Data);
}

#[test]
fn data_after_bdat_is_refused() {
    let mut d = with_recipients(settings(), 1);
    assert_eq!(d.on_command(&cmd("BDAT 10")), Step::Chunk { first: true });
    d.chunk_taken();
    assert_eq!(
        d.on_command(&cmd("BDAT 10 LAST")),
        Step::Chunk { first: false }
    );
    assert_eq!(
        refused_with(d.on_command(&Command::Data)),
        (
            503,
            "5.5.1 DATA after BDAT: one message is sent one way".into()
        )
    );
}

#[test]
fn bdat_needs_chunking_offered() {
    let mut s = settings();
    s.chunking = false;
    let mut d = Dialogue::new(s, false);
    d.on_command(&cmd("EHLO x"));
    d.on_upstream(Exchange::Ehlo, &ehlo_list());
    assert!(!d.offered().chunking);
    assert_eq!(
        d.on_command(&cmd("BDAT 5 LAST")),
        Step::Discard {
            reply: replies::bdat_not_offered(),
            error: true
        }
    );
}

#[test]
fn bdat_outside_a_transaction_is_skipped_without_an_error() {
    let mut d = greeted(settings());
    assert_eq!(
        d.on_command(&cmd("BDAT 5")),
        Step::Discard {
            reply: replies::send_mail_first(),
            error: false
        }
    );
    let mut d = with_recipients(settings(), 0);
    assert_eq!(
        d.on_command(&cmd("BDAT 5")),
        Step::Discard {
            reply: replies::no_valid_recipients(),
            error: false
        }
    );
}

#[test]
fn message_verdict_ends_the_transaction() {
    let mut d = with_recipients(settings(), 2);
    assert_eq!(d.on_command(&Command::Data), Step::Data);
    assert_eq!(
        d.on_upstream(Exchange::Message, &Reply::new(554, "no")),
        Heard::Reset { abandoned: false }
    );
    assert!(!d.in_transaction());
    assert_eq!(
        d.on_command(&cmd("MAIL FROM:<a@b>")),
        Step::Ask(Exchange::Mail)
    );
}

#[test]
fn rset_is_relayed_and_abandons_the_transaction() {
    let mut d = with_recipients(settings(), 1);
    d.on_command(&cmd("BDAT 3"));
    d.chunk_taken();
    assert_eq!(d.on_command(&Command::Rset), Step::Relay(Exchange::Rset));
    assert_eq!(
        d.on_upstream(Exchange::Rset, &ok()),
        Heard::Reset { abandoned: true }
    );
    assert!(!d.chunks_under_way());
    assert_eq!(d.on_command(&Command::Rset), Step::Relay(Exchange::Rset));
    assert_eq!(
        d.on_upstream(Exchange::Rset, &ok()),
        Heard::Reset { abandoned: false }
    );
}

#[test]
fn noop_vrfy_expn_are_relayed_and_change_nothing() {
    let mut d = with_recipients(settings(), 1);
    for c in ["NOOP", "VRFY x", "EXPN x"] {
        assert_eq!(d.on_command(&cmd(c)), Step::Relay(Exchange::Other), "{c}");
        assert_eq!(d.on_upstream(Exchange::Other, &ok()), Heard::Refused);
    }
    assert!(d.in_transaction());
    assert_eq!(d.recipients(), 1);
}

#[test]
fn help_lists_what_the_session_accepts() {
    let mut d = Dialogue::new(settings(), false);
    let Step::Reply(r) = d.on_command(&Command::Help) else {
        panic!()
    };
    assert_eq!(
        r.text(),
        "2.0.0 Commands accepted: EHLO HELO MAIL RCPT DATA RSET NOOP VRFY EXPN HELP QUIT"
    );
    let mut s = settings();
    s.starttls = true;
    let mut d = greeted(s);
    let Step::Reply(r) = d.on_command(&Command::Help) else {
        panic!()
    };
    assert!(
        r.text().contains("STARTTLS AUTH MAIL RCPT DATA BDAT"),
        "{}",
        r.text()
    );
}

#[test]
fn quit_closes() {
    let mut d = with_recipients(settings(), 1);
    assert_eq!(d.on_command(&Command::Quit), Step::Quit);
}

#[test]
fn unknown_verbs_are_errors_and_proxy_closes() {
    let mut d = Dialogue::new(settings(), false);
    assert_eq!(
        refused_with(d.on_command(&Command::Unknown("ETRN".into()))),
        (502, "5.5.1 Command not recognized".into())
    );
    assert_eq!(
        d.on_command(&Command::Unknown("PROXY".into())),
        Step::ProxyHeader
    );
}

#[test]
fn starttls_only_where_available() {
    let mut d = Dialogue::new(settings(), false);
    assert_eq!(
        refused_with(d.on_command(&Command::StartTls)),
        (502, "5.5.1 STARTTLS not available on this port".into())
    );
}

#[test]
fn starttls_once() {
    let mut s = settings();
    s.starttls = true;
    let mut d = Dialogue::new(s, true);
    assert_eq!(
        refused_with(d.on_command(&Command::StartTls)),
        (554, "5.5.1 TLS already active".into())
    );
}

#[test]
fn starttls_not_inside_a_transaction() {
    let mut s = settings();
    s.starttls = true;
    let mut d = with_recipients(s, 0);
    assert_eq!(
        refused_with(d.on_command(&Command::StartTls)),
        (503, "5.5.1 MAIL transaction in progress".into())
    );
}

#[test]
fn starttls_not_after_auth() {
    let mut s = settings();
    s.starttls = true;
    let mut d = greeted(s);
    d.on_command(&cmd("AUTH PLAIN"));
    d.on_upstream(Exchange::Auth, &Reply::new(235, "ok"));
    assert_eq!(
        refused_with(d.on_command(&Command::StartTls)),
        (503, "5.5.1 Already authenticated".into())
    );
}

#[test]
fn tls_forgets_the_greeting() {
    let mut s = settings();
    s.starttls = true;
    let mut d = greeted(s);
    assert_eq!(d.on_command(&Command::StartTls), Step::StartTls);
    assert!(!d.tls_started());
    assert!(d.tls && !d.helo_seen());
    assert_eq!(d.offered(), &Capabilities::default());
    assert_eq!(refused_with(d.on_command(&cmd("MAIL FROM:<a@b>"))).0, 503);
    assert!(!d.starttls_available());
}

#[test]
fn auth_needs_ehlo() {
    let mut d = Dialogue::new(settings(), false);
    assert_eq!(
        refused_with(d.on_command(&cmd("AUTH PLAIN"))),
        (503, "5.5.1 Send EHLO first".into())
    );
}

#[test]
fn auth_once() {
    let mut d = greeted(settings());
    d.on_command(&cmd("AUTH LOGIN"));
    assert_eq!(
        d.on_upstream(Exchange::Auth, &Reply::new(235, "ok")),
        Heard::Accepted
    );
    assert!(d.authenticated());
    assert_eq!(
        refused_with(d.on_command(&cmd("AUTH PLAIN"))),
        (503, "5.5.1 Already authenticated".into())
    );
}

#[test]
fn failed_auth_is_not_authenticated() {
    let mut d = greeted(settings());
    d.on_command(&cmd("AUTH PLAIN"));
    assert_eq!(
        d.on_upstream(Exchange::Auth, &Reply::new(535, "no")),
        Heard::Refused
    );
    assert!(!d.authenticated());
}

#[test]
fn auth_not_inside_a_transaction() {
    let mut d = with_recipients(settings(), 0);
    assert_eq!(
        refused_with(d.on_command(&cmd("AUTH PLAIN"))),
        (503, "5.5.1 MAIL transaction in progress".into())
    );
}

#[test]
fn auth_needs_tls_unless_allowed_without() {
    let mut s = settings();
    s.auth_without_tls = false;
    let mut d = greeted(s);
    assert_eq!(
        refused_with(d.on_command(&cmd("AUTH PLAIN"))),
        (
            538,
            "5.7.11 Encryption required for requested authentication mechanism".into()
        )
    );
}

#[test]
fn auth_only_with_an_offered_readable_mechanism() {
    let mut d = greeted(settings());
    assert_eq!(
        d.on_command(&cmd("AUTH login")),
        Step::Auth(Mechanism::Login)
    );
    for m in ["AUTH CRAM-MD5", "AUTH GSSAPI"] {
        assert_eq!(
            refused_with(d.on_command(&cmd(m))),
            (504, "5.5.4 Unrecognized authentication type".into()),
            "{m}"
        );
    }
}

#[test]
fn errors_close_at_the_cap() {
    let mut d = Dialogue::new(settings(), false);
    for _ in 0..4 {
        assert!(!d.count_error());
    }
    assert!(d.count_error());
    assert_eq!(d.errors, 5);
}

#[test]
fn xclient_is_due_once_and_only_when_configured() {
    let mut d = Dialogue::new(settings(), false);
    assert!(!d.xclient_due());
    let mut s = settings();
    s.xclient = true;
    let mut d = Dialogue::new(s, false);
    assert!(d.xclient_due());
    assert!(!d.xclient_due());
    let mut d = Dialogue::new(s, false);
    d.xclient_settled();
    assert!(!d.xclient_due());
}

#[test]
fn refused_session_answers_only_quit() {
    let mut d = Dialogue::new(settings(), false);
    d.refuse_session();
    for c in ["EHLO x", "MAIL FROM:<a@b>", "NOOP", "RSET"] {
        assert_eq!(
            refused_with(d.on_command(&cmd(c))),
            (503, "5.5.1 Session refused, send QUIT".into()),
            "{c}"
        );
    }
    assert_eq!(refused_with(d.on_bad_line(replies::line_too_long())).0, 503);
    assert_eq!(d.on_command(&Command::Quit), Step::Close(replies::bye()));
    let mut open = Dialogue::new(settings(), false);
    assert_eq!(
        refused_with(open.on_bad_line(replies::line_too_long())),
        (500, "5.5.2 Line too long".into())
    );
}

/// Commands of a session, with the ones that matter for the rules more likely.
fn command() -> impl Strategy<Value = Command> {
    prop_oneof![
        Just("EHLO x"),
        Just("HELO x"),
        Just("MAIL FROM:<a@b>"),
        Just("MAIL FROM:<a@b> SIZE=5000"),
        Just("MAIL FROM:<a@b> BODY=8BITMIME"),
        Just("RCPT TO:<c@d>"),
        Just("RCPT TO:<c@d> NOTIFY=NEVER"),
        Just("DATA"),
        Just("BDAT 3"),
        Just("BDAT 3 LAST"),
        Just("RSET"),
        Just("NOOP"),
        Just("HELP"),
        Just("VRFY x"),
        Just("STARTTLS"),
        Just("AUTH PLAIN"),
        Just("AUTH CRAM-MD5"),
        Just("ETRN x"),
        Just("QUIT"),
    ]
    .prop_map(cmd)
}

/// Upstream's answers: accept, refuse, or something odd.
fn answer() -> impl Strategy<Value = Reply> {
    prop_oneof![
        Just(ehlo_list()),
        Just(ok()),
        Just(Reply::new(235, "ok")),
        Just(Reply::new(251, "will forward")),
        Just(Reply::new(452, "later")),
        Just(Reply::new(550, "no")),
        Just(Reply::new(503, "sequence")),
    ]
}

fn exchange() -> impl Strategy<Value = Exchange> {
    prop_oneof![
        Just(Exchange::Helo),
        Just(Exchange::Ehlo),
        Just(Exchange::Auth),
        Just(Exchange::Mail),
        Just(Exchange::Rcpt),
        Just(Exchange::Message),
        Just(Exchange::Rset),
        Just(Exchange::Other),
    ]
}

fn check_invariants(d: &Dialogue) -> Result<(), TestCaseError> {
    prop_assert!(d.recipients() <= d.settings.max_recipients);
    prop_assert!(d.in_transaction() || d.recipients() == 0);
    prop_assert!(d.in_transaction() || !d.chunks_under_way());
    prop_assert!(!d.in_transaction() || d.helo_seen());
    // A client that said HELO (or nothing yet) is offered no extension.
    prop_assert!(d.ehlo() || d.offered() == &Capabilities::default());
    Ok(())
}

proptest! {
    /// A driver that follows the steps, with upstream answering at random: no panic, and
    /// no step that breaks the rules.
    #[test]
    fn following_the_steps_keeps_the_rules(
        tls in any::<bool>(),
        starttls in any::<bool>(),
        turns in proptest::collection::vec((command(), answer(), any::<bool>()), 0..60),
    ) {
        let mut s = settings();
        s.starttls = starttls;
        let mut d = Dialogue::new(s, tls);
        for (c, reply, last_taken) in turns {
            let before = d.clone();
            match d.on_command(&c) {
                Step::Ask(exchange) | Step::Relay(exchange) => {
                    if exchange == Exchange::Rcpt {
                        prop_assert!(before.in_transaction());
                        prop_assert!(before.recipients() < s.max_recipients);
                    }
                    if exchange == Exchange::Mail {
                        prop_assert!(before.helo_seen() && !before.in_transaction());
                    }
                    let heard = d.on_upstream(exchange, &reply);
                    if exchange == Exchange::Rcpt && reply.is_completion() {
                        prop_assert_eq!(heard, Heard::Accepted);
                        prop_assert_eq!(d.recipients(), before.recipients() + 1);
                    }
                }
                Step::Data => {
                    prop_assert!(before.in_transaction() && before.recipients() > 0);
                    d.on_upstream(Exchange::Message, &reply);
                    prop_assert!(!d.in_transaction());
                }
                Step::Chunk { first } => {
                    prop_assert!(before.in_transaction() && before.recipients() > 0);
                    prop_assert_eq!(first, !before.chunks_under_way());
                    if last_taken {
                        d.on_upstream(Exchange::Message, &reply);
                    } else {
                        d.chunk_taken();
                    }
                }
                Step::Auth(_) => {
                    prop_assert!(before.helo_seen() && !before.authenticated());
                    prop_assert!(!before.in_transaction());
                    d.on_upstream(Exchange::Auth, &reply);
                }
                Step::StartTls => {
                    prop_assert!(!before.tls && !before.in_transaction());
                    prop_assert!(!d.tls_started());
                }
                Step::Refuse { reply, .. } => {
                    prop_assert!(reply.code >= 500);
                    d.count_error();
                }
                Step::Discard { reply, .. } | Step::Reply(reply) | Step::Close(reply) => {
                    prop_assert!(reply.code >= 200);
                }
                Step::Quit | Step::ProxyHeader => {}
            }
            check_invariants(&d)?;
        }
    }

    /// Any order of calls, steps ignored: the invariants hold all the same.
    #[test]
    fn any_calls_keep_the_invariants(
        calls in proptest::collection::vec(
            prop_oneof![
                command().prop_map(Ok),
                (exchange(), answer(), any::<bool>()).prop_map(Err),
            ],
            0..80,
        ),
    ) {
        let mut d = Dialogue::new(settings(), false);
        for call in calls {
            match call {
                Ok(c) => { d.on_command(&c); }
                // A HELO relayed upstream as EHLO, or any exchange as the driver hands it.
                Err((Exchange::Helo, reply, true)) => { d.on_greeting(false, true, &reply); }
                Err((exchange, reply, _)) => { d.on_upstream(exchange, &reply); }
            }
            d.chunk_taken();
            check_invariants(&d)?;
        }
    }
}
