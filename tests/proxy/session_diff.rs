//! The differential session property as a proptest: for generated client streams (real
//! sessions, pipelining, smuggling payloads, RSET mid-way, AUTH, bad commands, BDAT, random
//! bytes), upstream holds exactly what floodgate counted, framed strictly (see `diff/`).
//! The same harness is the `session` fuzz target.

use crate::diff;

use diff::{Case, Harness};
use std::sync::atomic::{AtomicUsize, Ordering};

use proptest::prelude::*;
use proptest::test_runner::{TestCaseError, TestRunner};

/// Pieces of client input; a case is a few dozen of them back to back.
const TOKENS: &[&[u8]] = &[
    b"EHLO c.test\r\n",
    b"HELO c.test\r\n",
    b"MAIL FROM:<a@c.test>\r\n",
    b"MAIL FROM:<>\r\n",
    b"MAIL FROM:<a@c.test> SIZE=100 BODY=8BITMIME\r\n",
    b"MAIL FROM:<\"odd>name\"@c.test>\r\n",
    b"MAIL FROM:<a@c.test> XFOO=1\r\n",
    b"RCPT TO:<r1@d.test>\r\n",
    b"RCPT TO:<r2@d.test> NOTIFY=NEVER\r\n",
    b"RCPT TO:<Postmaster>\r\n",
    b"RCPT TO:<\"q x\"@d.test>\r\n",
    b"DATA\r\n",
    b"RSET\r\n",
    b"NOOP\r\n",
    b"HELP\r\n",
    b"VRFY someone\r\n",
    b"QUIT\r\n",
    b"STARTTLS\r\n",
    b"XCLIENT ADDR=192.0.2.1\r\n",
    b"FROB nitz\r\n",
    b"AUTH PLAIN AGFsaWNlAHMzY3JldA==\r\n",
    b"AUTH LOGIN\r\nYWxpY2U=\r\nczNjcmV0\r\n",
    b"AUTH PLAIN\r\n*\r\n",
    b"AUTH CRAM-MD5\r\n",
    b"BDAT 12 LAST\r\nRSET\r\nQUIT\r\n",
    b"BDAT 3\r\n",
    b"Subject: hi\r\n\r\nhello\r\n.\r\n",
    b"..a stuffed line\r\n",
    b".an unstuffed line\r\n",
    b"body line\r\n",
    b".\r\n",
    b"\n.\n",
    b"\r.\r",
    b"\r\n.\r",
    b".\r\r\n",
    b"\n.\r\n",
    b"text\nMAIL FROM:<smuggled@evil.test>\r\nRCPT TO:<victim@d.test>\r\nDATA\r\n",
    b"NOOP\n",
    b"NOOP\rX\r\n",
    b"\r\n",
    b"MAIL FROM:<a@c.test>\r\nRCPT TO:<r1@d.test>\r\nRCPT TO:<r2@d.test>\r\nRCPT TO:<r3@d.test>\r\nRCPT TO:<r4@d.test>\r\nRCPT TO:<r5@d.test>\r\nRCPT TO:<r6@d.test>\r\nDATA\r\n",
];

fn token() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        6 => prop::sample::select(TOKENS).prop_map(<[u8]>::to_vec),
        1 => prop::collection::vec(any::<u8>(), 0..12),
        1 => prop::collection::vec(prop::sample::select(b"\r\n.:<>@ AMILRCPTD".to_vec()), 0..16),
        1 => (1usize..1500, any::<u8>()).prop_map(|(n, b)| {
            let mut v = vec![b'a' + b % 26; n];
            v.extend_from_slice(b"\r\n");
            v
        }),
    ]
}

/// Content lines, among them the smuggling sequences.
const BODY: &[&[u8]] = &[
    b"Subject: hi\r\n\r\n",
    b"hello\r\n",
    b"..a stuffed line\r\n",
    b".an unstuffed line\r\n",
    b"\n.\n",
    b"\r.\r",
    b"\r\n.\r",
    b".\r\r\n",
    b"\n.\r\n",
    b"text\nMAIL FROM:<smuggled@evil.test>\r\nRCPT TO:<victim@d.test>\r\nDATA\r\n",
    b"bare\rCR\r\n",
];

/// One transaction: MAIL, a few RCPTs, then DATA with content (or RSET), with noise.
fn transaction() -> impl Strategy<Value = Vec<u8>> {
    (
        prop::sample::select(&TOKENS[2..7]),
        prop::collection::vec(prop::sample::select(&TOKENS[7..11]), 1..7),
        prop::collection::vec(
            prop_oneof![
                4 => prop::sample::select(BODY).prop_map(<[u8]>::to_vec),
                1 => (1usize..1100).prop_map(|n| {
                    let mut v = vec![b'x'; n];
                    v.extend_from_slice(b"\r\n");
                    v
                }),
            ],
            0..6,
        ),
        0u8..8,
        prop::collection::vec(token(), 0..2),
    )
        .prop_map(|(mail, rcpts, body, how, noise)| {
            let mut v = mail.to_vec();
            rcpts.iter().for_each(|r| v.extend_from_slice(r));
            v.extend(noise.concat());
            if how == 0 {
                v.extend_from_slice(b"RSET\r\n");
                return v;
            }
            v.extend_from_slice(b"DATA\r\n");
            v.extend(body.concat());
            v.extend_from_slice(b".\r\n");
            v
        })
}

fn case() -> impl Strategy<Value = Case> {
    (
        any::<bool>(),
        prop_oneof![Just(usize::MAX), 1usize..64],
        prop::collection::vec(any::<u8>(), 0..16),
        prop::collection::vec(any::<u8>(), 0..16),
        prop::sample::select(&TOKENS[..2]),
        prop::collection::vec(
            prop_oneof![
                3 => transaction(),
                1 => prop::collection::vec(token(), 0..4).prop_map(|t| t.concat()),
            ],
            0..6,
        ),
    )
        .prop_map(
            |(normalize, chunk, upstream_script, policy_script, helo, parts)| Case {
                normalize,
                chunk,
                upstream_script,
                policy_script,
                client: [helo.to_vec(), parts.concat()].concat(),
            },
        )
}

/// What the generated cases must reach for the property to say something.
const MIN_ACCEPTED: usize = 20;
const MIN_REFUSED: usize = 5;

#[test]
fn upstream_holds_exactly_what_floodgate_counted() {
    let accepted = AtomicUsize::new(0);
    let refused = AtomicUsize::new(0);
    // Rounds of 300 random cases until the generator has reached enough real deliveries and
    // upstream refusals (or the property would hold vacuously): one round almost always
    // does; a thin one (a few in a hundred) is topped up rather than failed, and four thin
    // rounds in a row mean the generator is broken.
    for _ in 0..4 {
        let mut runner = TestRunner::new(ProptestConfig {
            cases: 300,
            failure_persistence: None,
            ..ProptestConfig::default()
        });
        let outcome = runner.run(&case(), |case| {
            let s = Harness::get().run(&case).map_err(TestCaseError::fail)?;
            accepted.fetch_add(s.accepted, Ordering::Relaxed);
            refused.fetch_add(s.messages - s.accepted, Ordering::Relaxed);
            Ok(())
        });
        if let Err(e) = outcome {
            panic!("{e}");
        }
        if accepted.load(Ordering::Relaxed) >= MIN_ACCEPTED
            && refused.load(Ordering::Relaxed) >= MIN_REFUSED
        {
            break;
        }
    }
    let (a, r) = (accepted.into_inner(), refused.into_inner());
    eprintln!("differential: {a} messages accepted, {r} refused by upstream");
    assert!(
        a >= MIN_ACCEPTED && r >= MIN_REFUSED,
        "only {a} accepted / {r} refused messages"
    );
}

/// A full ordinary session, so the property is known to see real messages.
#[test]
fn an_ordinary_pipelined_session_is_relayed_and_counted() {
    let case = Case {
        normalize: false,
        chunk: 7,
        upstream_script: vec![],
        policy_script: vec![],
        client: b"EHLO c.test\r\nMAIL FROM:<a@c.test>\r\nRCPT TO:<r1@d.test>\r\n\
                  RCPT TO:<r2@d.test>\r\nDATA\r\nSubject: x\r\n\r\n..dot\r\n.\r\n\
                  MAIL FROM:<b@c.test>\r\nRCPT TO:<r3@d.test>\r\nDATA\r\nsecond\r\n.\r\nQUIT\r\n"
            .to_vec(),
    };
    let s = Harness::get().run(&case).expect("differential check");
    assert_eq!(
        s,
        diff::Summary {
            mails: 2,
            rcpts: 3,
            messages: 2,
            accepted: 2
        }
    );
}

/// Fuzz bytes map onto cases without panicking, and short inputs are skipped.
#[test]
fn fuzz_bytes_decode_to_cases() {
    assert!(Case::from_bytes(b"").is_none());
    let c = Case::from_bytes(b"\x03\x02ab\x01cEHLO x\r\n").expect("case");
    assert!(c.normalize);
    assert_eq!(c.chunk, 1);
    assert_eq!(c.upstream_script, b"ab");
    assert_eq!(c.policy_script, b"c");
    assert_eq!(c.client, b"EHLO x\r\n");
}

/// Offsets into the client stream, as fractions (so they fit any length).
fn cut_points() -> impl Strategy<Value = Vec<prop::sample::Index>> {
    prop::collection::vec(any::<prop::sample::Index>(), 0..24)
}

/// How the client's bytes arrive never changes what floodgate does: the stream written in
/// one piece, one byte at a time (every byte boundary a split), and cut at random points
/// gives the same replies to the client and the same bytes upstream.
#[test]
fn split_points_change_neither_replies_nor_upstream_bytes() {
    let mut runner = TestRunner::new(ProptestConfig {
        cases: 200,
        failure_persistence: None,
        ..ProptestConfig::default()
    });
    let accepted = AtomicUsize::new(0);
    let outcome = runner.run(&(case(), cut_points()), |(case, cuts)| {
        let h = Harness::get();
        let len = case.client.len().max(1);
        let whole = h.run_split(&case, &[]).map_err(TestCaseError::fail)?;
        let every: Vec<usize> = (1..case.client.len()).collect();
        let bytes = h.run_split(&case, &every).map_err(TestCaseError::fail)?;
        let cuts: Vec<usize> = cuts.iter().map(|i| i.index(len)).collect();
        let random = h.run_split(&case, &cuts).map_err(TestCaseError::fail)?;
        for (how, t) in [("byte by byte", &bytes), ("cut at random", &random)] {
            prop_assert_eq!(
                String::from_utf8_lossy(&t.client),
                String::from_utf8_lossy(&whole.client),
                "replies differ {}",
                how
            );
            prop_assert_eq!(
                String::from_utf8_lossy(&t.upstream),
                String::from_utf8_lossy(&whole.upstream),
                "upstream bytes differ {}",
                how
            );
        }
        accepted.fetch_add(whole.summary.accepted, Ordering::Relaxed);
        Ok(())
    });
    if let Err(e) = outcome {
        panic!("{e}");
    }
    // Messages were relayed, so the transcripts compared hold real traffic.
    let a = accepted.into_inner();
    eprintln!("split points: {a} messages accepted");
    assert!(a >= 3, "only {a} messages accepted in 200 cases");
}

/// The transcripts compared above are real traffic: an ordinary pipelined session written
/// byte by byte relays its message and is told so.
#[test]
fn a_session_written_byte_by_byte_is_relayed_whole() {
    let client = b"EHLO c.test\r\nMAIL FROM:<a@c.test>\r\nRCPT TO:<r1@d.test>\r\n\
                   DATA\r\nSubject: x\r\n\r\n..dot\r\n.\r\nQUIT\r\n"
        .to_vec();
    let case = Case {
        normalize: false,
        chunk: usize::MAX,
        upstream_script: vec![],
        policy_script: vec![],
        client: client.clone(),
    };
    let every: Vec<usize> = (1..client.len()).collect();
    let t = Harness::get()
        .run_split(&case, &every)
        .expect("byte by byte");
    assert_eq!(t.summary.accepted, 1);
    let up = String::from_utf8_lossy(&t.upstream);
    assert!(up.contains("MAIL FROM:<a@c.test>\r\n"), "{up}");
    // One BDAT chunk (the reference offers CHUNKING): the message unstuffed.
    assert!(
        up.contains("BDAT 20 LAST\r\nSubject: x\r\n\r\n.dot\r\n"),
        "{up}"
    );
    let replies = String::from_utf8_lossy(&t.client);
    assert!(replies.starts_with("220 "), "{replies}");
    assert!(replies.contains("queued as REF"), "{replies}");
    assert!(
        replies.ends_with("221 2.0.0 Bye\r\n") || replies.contains("\r\n221 "),
        "{replies}"
    );
}
