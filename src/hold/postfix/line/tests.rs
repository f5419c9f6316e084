use super::*;
use proptest::prelude::*;

fn entry(id: &str, key: &str) -> LedgerEntry {
    LedgerEntry {
        queue_id: id.into(),
        key: key.into(),
        limit: "per_user".into(),
        reason: "4.7.1 alice sends too fast".into(),
        time: 1_764_000_000,
        sender: "alice@example.org".into(),
        recipients: vec!["bob@example.net".into(), "carol@example.com".into()],
        size: 2048,
        client: Some("192.0.2.7".parse().unwrap()),
        user: Some("alice".into()),
    }
}

#[test]
fn a_ledger_reads_back_what_was_written() {
    let lines = vec![
        Line::Held(entry("4Q9kTq1wXMz7Lf", "alice")),
        Line::Held(LedgerEntry {
            client: None,
            user: None,
            sender: String::new(),
            ..entry("ABC123", "www-data")
        }),
        Line::Done(Done {
            queue_id: "ABC123".into(),
            how: How::Released,
            time: 1_764_000_100,
            by: Some("root".into()),
        }),
    ];
    let text = encode(&lines);
    assert!(
        text.starts_with("floodgate-postfix-held 1\n{\"held\":{\"queue_id\":\"4Q9kTq1wXMz7Lf\"")
    );
    assert_eq!(parse(text.as_bytes()).unwrap(), lines);
}

#[test]
fn a_write_cut_short_is_left_out() {
    let whole = encode(&[Line::Held(entry("ABC123", "alice"))]);
    let cut = &whole.as_bytes()[..whole.len() - 10];
    assert_eq!(parse(cut).unwrap(), vec![]);
    assert_eq!(parse(b"").unwrap(), vec![]);
    assert_eq!(
        parse(b"floodgate-postf").unwrap(),
        vec![],
        "the first line cut short"
    );
}

#[test]
fn bad_files_give_clear_errors() {
    assert_eq!(
        parse(b"floodgate-held 2\n").unwrap_err().to_string(),
        "not a floodgate Postfix hold ledger (first line \"floodgate-held 2\", expected \"floodgate-postfix-held 1\")"
    );
    let e = parse(b"floodgate-postfix-held 1\n{\"held\":{}}\n").unwrap_err();
    assert!(
        e.to_string()
            .starts_with("line 2: missing field `queue_id`"),
        "{e}"
    );
    let bad_id = encode(&[Line::Held(entry("-d ALL", "alice"))]);
    assert_eq!(
        parse(bad_id.as_bytes()).unwrap_err().to_string(),
        "line 2: \"-d ALL\" is not a Postfix queue id"
    );
    let e = parse(b"floodgate-postfix-held 1\n\n{\"done\":{\"queue_id\":\"ABC123\",\"how\":\"eaten\",\"time\":1,\"by\":null}}\n").unwrap_err();
    assert!(
        e.to_string().starts_with("line 3: unknown variant `eaten`"),
        "{e}"
    );
    let e = parse(b"floodgate-postfix-held 1\n\xff\n").unwrap_err();
    assert_eq!(e.to_string(), "line 2: not UTF-8");
    let e = parse(b"floodgate-postfix-held 1\n{\"held\":{\"queue_id\":\"ABC123\",\"extra\":1}}\n")
        .unwrap_err();
    assert!(
        e.to_string().starts_with("line 2: unknown field `extra`"),
        "{e}"
    );
}

#[test]
fn an_overlong_line_is_damage() {
    let long = format!("\"{}\"", "x".repeat(MAX_LINE));
    assert_eq!(
        parse_line(&long, 7).unwrap_err().to_string(),
        format!("line 7: longer than {MAX_LINE} octets")
    );
}

fn any_entry() -> impl Strategy<Value = LedgerEntry> {
    (
        "[0-9A-Za-z]{5,20}",
        "\\PC{0,30}",
        "\\PC{0,20}",
        "\\PC{0,60}",
        any::<u64>(),
        "\\PC{0,40}",
        prop::collection::vec("\\PC{0,40}", 0..5),
        any::<u64>(),
        prop::option::of(any::<std::net::IpAddr>()),
        prop::option::of("\\PC{0,20}"),
    )
        .prop_filter("ALL is no queue id", |t| !t.0.eq_ignore_ascii_case("all"))
        .prop_map(
            |(queue_id, key, limit, reason, time, sender, recipients, size, client, user)| {
                LedgerEntry {
                    queue_id,
                    key,
                    limit,
                    reason,
                    time,
                    sender,
                    recipients,
                    size,
                    client,
                    user,
                }
            },
        )
}

fn any_line() -> impl Strategy<Value = Line> {
    prop_oneof![
        any_entry().prop_map(Line::Held),
        (
            "[0-9A-Za-z]{5,20}",
            prop_oneof![Just(How::Released), Just(How::Deleted), Just(How::Gone)],
            any::<u64>(),
            prop::option::of("\\PC{0,20}")
        )
            .prop_filter("ALL is no queue id", |t| !t.0.eq_ignore_ascii_case("all"))
            .prop_map(|(queue_id, how, time, by)| Line::Done(Done {
                queue_id,
                how,
                time,
                by
            })),
    ]
}

proptest! {
    #[test]
    fn written_lines_read_back(lines in prop::collection::vec(any_line(), 0..8)) {
        let text = encode(&lines);
        prop_assert_eq!(text.matches('\n').count(), lines.len() + 1, "one line each");
        prop_assert_eq!(parse(text.as_bytes()).unwrap(), lines);
    }

    #[test]
    fn any_cut_reads_the_whole_lines_before_it(lines in prop::collection::vec(any_line(), 1..5), cut in any::<prop::sample::Index>()) {
        let text = encode(&lines);
        let at = cut.index(text.len() + 1);
        let read = parse(&text.as_bytes()[..at]).unwrap();
        prop_assert!(read.len() <= lines.len());
        prop_assert_eq!(&read[..], &lines[..read.len()]);
    }

    #[test]
    fn any_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..400)) {
        let mut text = MAGIC.as_bytes().to_vec();
        text.push(b'\n');
        text.extend_from_slice(&bytes);
        let _ = parse(&text);
        let _ = parse(&bytes);
    }
}
