use super::*;
use crate::policy::alert::{Alert, Suppressed};
use proptest::prelude::*;

fn settings(url: Option<&str>) -> MailSettings {
    MailSettings {
        to: vec!["postmaster@uni.test".into(), "ops@uni.test".into()],
        from: None,
        digest: None,
        public_url: url.map(str::to_string),
    }
}

const NOW: i64 = 1_764_091_060_500_000;

fn restricted(key: &str, subject: &str) -> Notice {
    Notice::Restriction(serde_json::json!({
        "event": "floodgate.restricted", "key": key, "limit": "user-recipients-day",
        "since": "2025-11-25T17:17:40Z", "until": null, "rate": 1012.04,
        "limit_value": "1000 / 1d", "by": "limit user-recipients-day on mx", "reason": "rate",
        "host": "mx.uni.test",
        "evidence": {"client_ips": ["192.0.2.7", "2001:db8::1"],
            "offered_by_client": [["192.0.2.7", 38], ["2001:db8::1", 2]],
            "top_recipient_domains": [["gmail.example", 700], ["yahoo.example", 300]],
            "subjects": [subject], "offered": 40, "messages": 39, "recipients": 1012,
            "refusals": {"upstream": {"rcpt": 2, "data": 0},
                         "floodgate": {"user-recipients-day": {"defer": 1}}},
            "held": 2, "since": "2025-11-25T09:00:00Z", "first_over": "2025-11-25T17:10:00Z"}
    }))
}

fn text_of(m: &OutMail) -> String {
    String::from_utf8(m.message.clone()).unwrap()
}

fn head_of(text: &str) -> &str {
    &text[..text.find("\r\n\r\n").unwrap() + 2]
}

#[test]
fn a_restriction_mail_has_the_headers_the_evidence_and_the_link() {
    let m = notice_mail(
        &restricted("alice", "Invoice 42"),
        &settings(Some("https://fg.uni.test")),
        "mx.uni.test",
        NOW,
    );
    assert_eq!(m.to, ["postmaster@uni.test", "ops@uni.test"]);
    let text = text_of(&m);
    let head = head_of(&text);
    for want in [
        "From: floodgate <MAILER-DAEMON@mx.uni.test>\r\n",
        "To: <postmaster@uni.test>, <ops@uni.test>\r\n",
        "Subject: floodgate: alice restricted (user-recipients-day)\r\n",
        "Date: Tue, 25 Nov 2025 17:17:40 +0000\r\n",
        "Auto-Submitted: auto-generated\r\n",
        "MIME-Version: 1.0\r\n",
        "Content-Type: text/plain; charset=utf-8\r\n",
    ] {
        assert!(head.contains(want), "{want:?} not in\n{head}");
    }
    assert!(head.contains("Message-ID: <floodgate.alert.1764091060500000."));
    for want in [
        "floodgate on mx.uni.test restricted the key alice:",
        "Key:     alice\r\n",
        "Limit:   user-recipients-day\r\n",
        "Rate:    1012 against 1000 / 1d\r\n",
        "Since:   2025-11-25T17:17:40Z\r\n",
        "Ends:    when released\r\n",
        "By:      limit user-recipients-day on mx\r\n",
        "Reason:  rate\r\n",
        "Console: https://fg.uni.test/console/key?k=alice\r\n",
        "What this node saw of the key since 2025-11-25T09:00:00Z:\r\n",
        "  Messages:   39 relayed, 40 offered\r\n",
        "  Recipients: 1012 relayed\r\n",
        "  Held now:   2 messages\r\n",
        "  Refusals:   floodgate refused 1 event (user-recipients-day 1 deferred); \
         upstream refused 2 recipients\r\n",
        "  First over: 2025-11-25T17:10:00Z\r\n",
        "  Client addresses (messages offered):\r\n    192.0.2.7    38 messages\r\n    \
         2001:db8::1   2 messages\r\n",
        "    gmail.example  700 recipients\r\n",
        "  Subjects:\r\n    Invoice 42\r\n",
    ] {
        assert!(text.contains(want), "{want:?} not in\n{text}");
    }
    // No console link without public_url.
    let plain = text_of(&notice_mail(
        &restricted("alice", "x"),
        &settings(None),
        "mx.uni.test",
        NOW,
    ));
    assert!(!plain.contains("Console:"), "{plain}");
    // No JSON, no word said twice in a row, no run of spaces inside a sentence.
    for line in text.split("\r\n") {
        assert!(!line.contains(['{', '}', '"']), "{line:?}");
        let words: Vec<&str> = line.split_whitespace().collect();
        assert!(words.windows(2).all(|w| w[0] != w[1]), "{line:?}");
        // Alignment pads a label (`Key:     alice`) and a list item's name only.
        let inner = line.trim_start();
        let list_item = line.starts_with("    ");
        let label = inner.split("  ").next().is_some_and(|l| l.ends_with(':'));
        if !list_item && !label {
            assert!(!inner.contains("  "), "{line:?}");
        }
    }
}

#[test]
fn a_release_an_alert_and_a_suppression_have_their_own_subjects() {
    let s = settings(None);
    let mut v = match restricted("bob", "x") {
        Notice::Restriction(v) => v,
        _ => unreachable!(),
    };
    v["event"] = "floodgate.released".into();
    v["by"] = "admin".into();
    let m = notice_mail(&Notice::Restriction(v), &s, "mx", NOW);
    assert_eq!(m.subject, "floodgate: bob released (admin)");
    let text = text_of(&m);
    for want in [
        "released the key bob: its restriction ended and the records of the limit \
         user-recipients-day for it were reset, so it may send mail again.",
        "Its held mail was not released: 2 messages still held (release or delete them: \
         floodgate held list --key bob).",
    ] {
        assert!(text.contains(want), "{want:?} not in\n{text}");
    }
    assert!(!text.contains("Ends:"), "{text}");
    let a = Alert {
        event: "floodgate.alert".into(),
        limit: "per-user".into(),
        key: "carol".into(),
        rate: 101.24,
        limit_value: "100".into(),
        period: "1h".into(),
        action: "warn".into(),
        stage: "mail".into(),
        first_at: "2025-01-31T12:00:00Z".into(),
        client_ip: Some("192.0.2.9".into()),
        user: Some("carol".into()),
        host: "mx".into(),
        suppressed: 4,
    };
    let m = notice_mail(
        &Notice::Alert(a),
        &settings(Some("http://127.0.0.1:8080")),
        "mx",
        NOW,
    );
    assert_eq!(m.subject, "floodgate: carol over per-user");
    let text = text_of(&m);
    for want in [
        "Rate:       101.2 against 100 per 1h\r\n",
        "Action:     warn, at the mail stage\r\n",
        "Client:     192.0.2.9\r\n",
        "Suppressed: 4 alerts before this one (max_per_minute)\r\n",
        "Console:    http://127.0.0.1:8080/console/key?k=carol\r\n",
    ] {
        assert!(text.contains(want), "{want:?} not in\n{text}");
    }
    let m = notice_mail(
        &Notice::Suppressed(Suppressed {
            event: "floodgate.alert.suppressed".into(),
            suppressed: 7,
            from: "a".into(),
            to: "b".into(),
            host: "mx".into(),
        }),
        &s,
        "mx",
        NOW,
    );
    assert_eq!(m.subject, "floodgate: 7 alerts suppressed");
}

#[test]
fn a_mail_from_setting_names_the_sender() {
    let mut s = settings(None);
    s.from = Some("floodgate@uni.test".into());
    let text = text_of(&notice_mail(&restricted("a", "b"), &s, "mx", NOW));
    assert!(
        text.contains("From: floodgate <floodgate@uni.test>\r\n"),
        "{text}"
    );
}

#[test]
fn keys_and_subjects_cannot_inject_header_fields() {
    let key = "alice\r\nBcc: victim@example.net\r\n\r\nbody";
    let m = notice_mail(
        &restricted(key, "Hi\nBcc: other@x\r\n.\r\nQUIT"),
        &settings(Some("https://fg.uni.test")),
        "mx\r\nX-Evil: 1",
        NOW,
    );
    let text = text_of(&m);
    let head = head_of(&text);
    // Every header line is a field or a folded continuation; none is Bcc or X-Evil.
    for line in head.trim_end().split("\r\n") {
        assert!(
            line.starts_with(' ') || line.contains(": "),
            "{line:?} in\n{head}"
        );
        assert!(
            !line.starts_with("Bcc") && !line.starts_with("X-Evil"),
            "{head}"
        );
    }
    // Bare CR or LF nowhere; every line of the body is the text's own.
    assert!(!text.replace("\r\n", "").contains(['\r', '\n']));
    assert!(!text.contains("\r\n.\r\n"));
    assert!(!text.contains("\r\nBcc:"));
    assert!(text.contains("console/key?k=alice%0D%0ABcc%3A%20victim%40example.net"));
}

#[test]
fn bidi_and_format_characters_are_shown_in_fields_and_body() {
    let m = notice_mail(
        &restricted("invoice\u{202e}fdp.exe\u{200b}", "Pay \u{2067}now\u{85}"),
        &settings(None),
        "mx",
        NOW,
    );
    let text = text_of(&m);
    assert!(
        !text.contains(['\u{202e}', '\u{200b}', '\u{2067}', '\u{85}']),
        "{text}"
    );
    assert!(text.contains("invoice\\u{202e}fdp.exe\\u{200b}"), "{text}");
    assert!(text.contains("Pay \\u{2067}now\\u{85}"), "{text}");
    assert_eq!(one_line("a\tb\r\nc\u{202e}"), "a b  c\\u{202e}");
}

#[test]
fn long_and_non_ascii_fields_are_folded_and_encoded() {
    let f = header_field("Subject", "floodgate: Jürgen restricted (per-user)");
    assert!(f.starts_with("Subject: =?utf-8?B?"), "{f}");
    assert!(f.is_ascii());
    let long = "word ".repeat(60);
    let f = header_field("Subject", &long);
    for line in f.trim_end().split("\r\n") {
        assert!(line.len() <= 78, "{line:?}");
    }
    assert_eq!(
        f.replace("\r\n", "").trim_end(),
        format!("Subject: {}", long.trim_end())
    );
    let f = header_field("Subject", &"é".repeat(300));
    for line in f.trim_end().split("\r\n") {
        assert!(line.len() <= 78, "{line:?}");
    }
}

proptest! {
    /// Whatever a key or subject holds, the header section is fields and continuations
    /// only, in ASCII, and the message has CRLF lines only.
    #[test]
    fn any_key_gives_a_clean_header(key in "\\PC{0,60}|[\\r\\n a-z:]{0,40}", subject in ".{0,80}") {
        let m = notice_mail(&restricted(&key, &subject), &settings(Some("https://x.test")), "mx", NOW);
        let text = String::from_utf8(m.message).unwrap();
        let head = head_of(&text);
        prop_assert!(head.is_ascii());
        for line in head.trim_end().split("\r\n") {
            prop_assert!(line.starts_with(' ') || line.contains(": "), "{:?}", line);
            prop_assert!(line.len() <= 998);
        }
        prop_assert!(!text.replace("\r\n", "").contains(['\r', '\n']));
    }
}

#[test]
fn a_full_spool_has_its_own_mail() {
    let notice = Notice::Restriction(serde_json::json!({
        "event": "floodgate.spool_full", "host": "mx.uni.test", "dir": "/var/lib/floodgate/hold",
        "max_messages": 2, "max_bytes": 1_073_741_824u64,
        "error": "hold spool full: 2 messages (max_messages 2)",
        "limit": "per-user", "key": "alice\r\nBcc: x@y",
    }));
    let m = notice_mail(&notice, &settings(None), "mx.uni.test", NOW);
    let text = text_of(&m);
    let head = head_of(&text);
    assert!(
        head.contains("Subject: floodgate: hold spool full on mx.uni.test\r\n"),
        "{head}"
    );
    assert!(!head.contains("Bcc:"), "{head}");
    for want in [
        "deferred it (451)",
        "/var/lib/floodgate/hold",
        "2 messages, 1073741824 bytes",
        "hold spool full: 2 messages",
        "(limit per-user)",
    ] {
        assert!(text.contains(want), "{want:?} not in\n{text}");
    }
    // Not a restriction's mail.
    assert!(!text.contains("restricted the key"), "{text}");
    let failed = Notice::Restriction(serde_json::json!({"event": "floodgate.spool_failed"}));
    let m = notice_mail(&failed, &settings(None), "mx", NOW);
    assert!(text_of(&m).contains("Subject: floodgate: hold spool not writable on mx"));
}

#[test]
fn a_campaign_has_its_own_mail_naming_every_account() {
    let notice = Notice::Restriction(serde_json::json!({
        "event": "floodgate.campaign", "limit": "campaign", "key": "1h/per_mail/unique/b3:ab",
        "message_key": "b3:ab", "rate": 4.0, "limit_value": "3 / 1h",
        "subject": "Your invoice #0 is overdue", "link_domains": ["secure-billing.example"],
        "copies": 4, "recipients": 20, "host": "mx", "by": "limit campaign on mx",
        "accounts": [
            {"key": "stolen1", "copies": 1, "recipients": 5, "client_ip": "192.0.2.1", "restricted": true},
            {"key": "stolen2\r\nBcc: x@y", "copies": 1, "recipients": 5, "client_ip": "192.0.2.2", "restricted": true},
        ],
    }));
    let m = notice_mail(&notice, &settings(Some("https://fg.uni.test")), "mx", NOW);
    let text = text_of(&m);
    let head = head_of(&text);
    assert!(
        head.contains("Subject: floodgate: campaign from 2 accounts (campaign)\r\n"),
        "{head}"
    );
    assert!(!head.contains("Bcc:"), "{head}");
    for want in [
        "one message sent from 2 accounts",
        "b3:ab",
        "secure-billing.example",
        "Copies:      4 copies to 20 recipients\r\n",
        "  stolen1            1 copy to 5 recipients from 192.0.2.1, restricted now\r\n",
        "https://fg.uni.test/console/key?k=stolen1",
    ] {
        assert!(text.contains(want), "{want:?} not in\n{text}");
    }
    assert!(!text.contains("restricted the key"), "{text}");
}

#[test]
fn a_campaign_update_names_its_true_count() {
    let notice = Notice::Restriction(serde_json::json!({
        "event": "floodgate.campaign", "update": true, "limit": "campaign",
        "message_key": "c:b3:ab", "copies": 400, "recipients": 400, "account_count": 400,
        "accounts": [{"key": "a1", "copies": 1, "recipients": 1, "restricted": false},
                     {"key": "a2", "copies": 1, "recipients": 1, "restricted": false}],
    }));
    let m = notice_mail(&notice, &settings(None), "mx", NOW);
    let text = text_of(&m);
    assert!(
        head_of(&text)
            .contains("Subject: floodgate: campaign from 400 accounts (campaign), update\r\n"),
        "{text}"
    );
    assert!(text.contains("  and 398 more"), "{text}");
}
