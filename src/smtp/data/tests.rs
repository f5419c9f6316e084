use super::*;
use bytes::BytesMut;
use proptest::prelude::*;

const BIG: u64 = 1 << 30;

/// Feeds `input` whole; returns (done, body, outcome, rest of buffer).
fn decode(input: &[u8], bare: BarePolicy) -> (bool, Vec<u8>, DataOutcome, Vec<u8>) {
    let mut d = DataDecoder::new(1000, bare, BIG);
    let mut buf = BytesMut::from(input);
    let mut body = Vec::new();
    let done = d.feed(&mut buf, &mut body);
    (done, body, d.outcome(), buf.to_vec())
}

fn encode(body: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    encode_data(body, &mut out);
    out
}

#[test]
fn simple_message_and_pipelined_rest() {
    let (done, body, out, rest) =
        decode(b"Subject: x\r\n\r\nhi\r\n.\r\nQUIT\r\n", BarePolicy::Reject);
    assert!(done && out.complete);
    assert_eq!(body, b"Subject: x\r\n\r\nhi\r\n");
    assert_eq!(rest, b"QUIT\r\n");
    assert_eq!(out.size, body.len() as u64);
    assert_eq!(out.rejection(), None);
}

#[test]
fn empty_message() {
    let (done, body, _, rest) = decode(b".\r\nRSET\r\n", BarePolicy::Reject);
    assert!(done);
    assert!(body.is_empty() && rest == b"RSET\r\n");
}

#[test]
fn dot_unstuffing() {
    let (done, body, _, _) = decode(b"..\r\n..x\r\n.y\r\n...\r\n.\r\n", BarePolicy::Reject);
    assert!(done);
    assert_eq!(body, b".\r\n.x\r\ny\r\n..\r\n");
}

/// Each SMTP smuggling payload (SEC Consult 2023) must not end DATA; the
/// "smuggled" command stays part of the message and the stream stays in DATA
/// until the real CRLF.CRLF.
#[test]
fn smuggling_payloads_do_not_end_data() {
    let payloads: [&[u8]; 6] = [
        b"\n.\n",
        b"\r.\r",
        b"\r\n.\r",
        b"\n.\r\n",
        b".\r\r\n",
        b"\r\n.\r\r\n",
    ];
    for p in payloads {
        let mut input = b"hello".to_vec();
        input.extend_from_slice(p);
        input.extend_from_slice(b"MAIL FROM:<evil@x.org>\r\nRCPT TO:<v@y.org>\r\nDATA\r\n");
        for bare in [BarePolicy::Reject, BarePolicy::Normalize] {
            let (done, body, out, rest) = decode(&input, bare);
            assert!(!done, "{p:?} ended DATA");
            assert!(rest.is_empty());
            // The smuggled commands are part of the body, on their own line,
            // and the body has only canonical line ends.
            assert!(
                body.windows(24).any(|w| w == b"\r\nMAIL FROM:<evil@x.org>"),
                "{p:?}"
            );
            assert_canonical(&body);
            match bare {
                BarePolicy::Reject => {
                    assert!(out.bare_line_ending, "{p:?}");
                    assert_eq!(out.rejection().unwrap().code, 550);
                }
                BarePolicy::Normalize => {
                    assert!(out.normalized && !out.bare_line_ending);
                    assert_eq!(out.rejection(), None);
                }
            }
            // ...and the real end arrives later.
            let mut full = input.clone();
            full.extend_from_slice(b"\r\n.\r\nNOOP\r\n");
            let (done, _, _, rest) = decode(&full, bare);
            assert!(done && rest == b"NOOP\r\n", "{p:?}");
        }
    }
}

#[test]
fn smuggling_payload_at_start_of_data() {
    // "." LF right at the start: not an end.
    let (done, _, out, _) = decode(b".\nMAIL FROM:<x@y.z>\r\n", BarePolicy::Reject);
    assert!(!done && out.bare_line_ending);
    // "." CR CR LF right at the start: not an end.
    let (done, _, _, _) = decode(b".\r\r\n", BarePolicy::Reject);
    assert!(!done);
}

#[test]
fn normalize_writes_crlf() {
    let (_, body, out, _) = decode(b"a\nb\rc\r\n.\r\n", BarePolicy::Normalize);
    assert_eq!(body, b"a\r\nb\r\nc\r\n");
    assert!(out.normalized && out.complete);
}

fn assert_canonical(body: &[u8]) {
    for (i, &b) in body.iter().enumerate() {
        if b == b'\r' {
            assert_eq!(body.get(i + 1), Some(&b'\n'), "bare CR at {i}");
        }
        if b == b'\n' {
            assert!(i > 0 && body[i - 1] == b'\r', "bare LF at {i}");
        }
    }
}

#[test]
fn line_length_limit() {
    let mut ok = vec![b'a'; 998];
    ok.extend_from_slice(b"\r\n.\r\n");
    assert!(!decode(&ok, BarePolicy::Reject).2.line_too_long);
    // RFC 5321 §4.5.3.1.6: the dot added for transparency is not counted, so a stuffed
    // 998-octet text line (999 octets on the wire) is fine, and one octet more is not.
    let mut stuffed = vec![b'.'; 999];
    stuffed.extend_from_slice(b"\r\n.\r\n");
    assert!(!decode(&stuffed, BarePolicy::Reject).2.line_too_long);
    let mut long = vec![b'.'; 1000];
    long.extend_from_slice(b"\r\n.\r\n");
    let out = decode(&long, BarePolicy::Reject).2;
    assert!(out.line_too_long);
    // A content limit: 554 5.6.0, never the command-syntax 500.
    let r = out.rejection().unwrap();
    assert_eq!((r.code, r.enhanced()), (554, Some((5, 6, 0))));
}

#[test]
fn a_long_line_under_a_generous_limit_is_text() {
    let mut msg = b"Subject: long\r\n\r\n".to_vec();
    msg.extend(std::iter::repeat_n(b'x', 5000));
    msg.extend_from_slice(b"\r\n.\r\n");
    let mut d = DataDecoder::new(1 << 20, BarePolicy::Reject, BIG).held();
    let mut buf = BytesMut::from(&msg[..]);
    let mut body = Vec::new();
    assert!(d.feed_held(&mut buf, &mut body));
    let out = d.outcome();
    assert!(!out.line_too_long && out.rejection().is_none());
    // Relayed exactly as it came.
    let wire = d.take_wire(&mut buf, body);
    assert!(wire.is_held());
    assert_eq!(wire.as_bytes(), &msg[..]);
}

#[test]
fn an_lf_only_message_ends_at_lf_dot_lf() {
    let input = b"Subject: lf\nFrom: a@b\n\nline one\n..dot\n.\nQUIT\r\n";
    for bare in [BarePolicy::Normalize, BarePolicy::Reject] {
        let (done, body, out, rest) = decode(input, bare);
        assert!(done, "{bare:?}");
        assert_eq!(rest, b"QUIT\r\n");
        assert_eq!(out.mode, LineMode::LfOnly);
        assert_eq!(
            body,
            b"Subject: lf\r\nFrom: a@b\r\n\r\nline one\r\n.dot\r\n"
        );
        match bare {
            BarePolicy::Normalize => assert!(out.normalized && out.rejection().is_none()),
            // Refused at once, not after the data timeout.
            BarePolicy::Reject => assert_eq!(out.rejection().unwrap().code, 550),
        }
    }
    // LF "." CRLF and CRLF "." LF end it too; a bare CR never does.
    for (end, ends) in [
        (&b"\n.\r\n"[..], true),
        (b"\r\n.\n", true),
        (b"\r\n.\r\n", true),
        (b"\r.\r", false),
        (b"\n.\r", false),
        (b"\r.\n", false),
        (b"\n.\r\r\n", false),
    ] {
        let mut input = b"X-A: b\n\nbody".to_vec();
        input.extend_from_slice(end);
        input.extend_from_slice(b"NOOP\r\n");
        let (done, _, out, rest) = decode(&input, BarePolicy::Normalize);
        assert_eq!(done, ends, "{end:?}");
        assert_eq!(out.mode, LineMode::LfOnly);
        if ends {
            assert_eq!(rest, b"NOOP\r\n");
        }
    }
}

/// The smuggling payload is LF "." LF inside a message that began with CRLF lines: that
/// message never ends there, whatever the mode.
#[test]
fn a_crlf_message_never_ends_at_lf_dot_lf() {
    let input = b"Subject: x\r\n\r\nbody\n.\nMAIL FROM:<evil@x.org>\r\n";
    for bare in [BarePolicy::Normalize, BarePolicy::Reject] {
        let (done, body, out, _) = decode(input, bare);
        assert!(!done);
        assert_eq!(out.mode, LineMode::Crlf);
        assert!(body.ends_with(b"\r\nMAIL FROM:<evil@x.org>\r\n"));
    }
}

#[test]
fn only_a_header_field_ended_by_lf_makes_a_message_lf_only() {
    for (first, mode) in [
        (&b"Subject: x\n"[..], LineMode::LfOnly),
        (b"X:\n", LineMode::LfOnly),
        (b"Subject: x\r\n", LineMode::Crlf),
        (b"Subject: x\r", LineMode::Crlf),
        (b"hello\n", LineMode::Crlf),
        (b"\n", LineMode::Crlf),
        (b": no name\n", LineMode::Crlf),
        (b"Sub ject: x\n", LineMode::Crlf),
        (b".Subject: x\n", LineMode::Crlf),
        (b"..Subject: x\n", LineMode::Crlf),
        (b".\n", LineMode::Crlf),
    ] {
        let mut input = first.to_vec();
        input.extend_from_slice(b"next\n");
        let (done, _, out, _) = decode(&input, BarePolicy::Normalize);
        assert!(!done);
        assert_eq!(out.mode, mode, "{first:?}");
        // A first line too long for the fast path is read the same way.
        let mut long = input.clone();
        long.splice(0..0, std::iter::repeat_n(b'X', 200));
        let (_, _, out, _) = decode(&long, BarePolicy::Normalize);
        if first.starts_with(b"Subject") {
            assert_eq!(out.mode, mode, "long {first:?}");
        }
    }
    assert_eq!(
        decode(b"", BarePolicy::Normalize).2.mode,
        LineMode::Undecided
    );
    assert_eq!(
        decode(b"Subject: x", BarePolicy::Normalize).2.mode,
        LineMode::Undecided
    );
    // The empty message ends at once; its mode never needs deciding.
    assert!(decode(b".\r\n", BarePolicy::Reject).0);
}

#[test]
fn size_cap_keeps_counting() {
    let mut d = DataDecoder::new(1000, BarePolicy::Reject, 10);
    let mut buf = BytesMut::from(&b"0123456789abcdef\r\nmore\r\n.\r\n"[..]);
    let mut body = Vec::new();
    assert!(d.feed(&mut buf, &mut body));
    assert_eq!(body, b"0123456789");
    let out = d.outcome();
    assert!(out.too_big);
    assert_eq!(out.size, 24);
    assert_eq!(out.rejection().unwrap().code, 552);
}

#[test]
fn exact_size_is_not_too_big() {
    let mut d = DataDecoder::new(1000, BarePolicy::Reject, 5);
    let mut buf = BytesMut::from(&b"abc\r\n.\r\n"[..]);
    let mut body = Vec::new();
    assert!(d.feed(&mut buf, &mut body));
    assert!(!d.outcome().too_big);
}

#[test]
fn byte_by_byte_and_done_is_sticky() {
    let input = b"a\r\n..b\r\nc\rd\r\n.\r\nNEXT";
    let mut d = DataDecoder::new(1000, BarePolicy::Reject, BIG);
    let mut body = Vec::new();
    let mut buf = BytesMut::new();
    let mut consumed_after_done = 0;
    for &b in input {
        buf.extend_from_slice(&[b]);
        if d.is_done() {
            consumed_after_done += 1;
        }
        d.feed(&mut buf, &mut body);
    }
    assert!(d.is_done());
    assert_eq!(&buf[..], b"NEXT");
    assert_eq!(consumed_after_done, 4);
    assert_eq!(body, b"a\r\n.b\r\nc\r\nd\r\n");
    assert!(d.outcome().bare_line_ending);
    assert!(d.feed(&mut buf, &mut body));
    assert_eq!(&buf[..], b"NEXT");
}

#[test]
fn encode_stuffs_and_terminates() {
    assert_eq!(encode(b""), b".\r\n");
    assert_eq!(encode(b"a\r\n"), b"a\r\n.\r\n");
    assert_eq!(encode(b"a"), b"a\r\n.\r\n");
    assert_eq!(encode(b".a\r\n.\r\n"), b"..a\r\n..\r\n.\r\n");
    assert_eq!(encode(b"."), b"..\r\n.\r\n");
    // Bare line endings never reach the wire.
    assert_eq!(encode(b"x\n.\ny\r.\r"), b"x\r\n..\r\ny\r\n..\r\n.\r\n");
}

fn chunked_decode(
    input: &[u8],
    cuts: &[usize],
    bare: BarePolicy,
    max: u64,
) -> (bool, Vec<u8>, DataOutcome, Vec<u8>) {
    chunked_decode_with(DataDecoder::new(1000, bare, max), input, cuts)
}

fn chunked_decode_with(
    mut d: DataDecoder,
    input: &[u8],
    cuts: &[usize],
) -> (bool, Vec<u8>, DataOutcome, Vec<u8>) {
    let mut body = Vec::new();
    let mut buf = BytesMut::new();
    let mut done = false;
    for (piece, _) in pieces(input, cuts) {
        buf.extend_from_slice(piece);
        done = d.feed(&mut buf, &mut body);
    }
    (done, body, d.outcome(), buf.to_vec())
}

/// `input` cut at `cuts` (any order, clamped to its length): each piece with what follows it.
fn pieces<'a>(input: &'a [u8], cuts: &[usize]) -> Vec<(&'a [u8], &'a [u8])> {
    let mut cuts: Vec<usize> = cuts.iter().map(|&c| c.min(input.len())).collect();
    cuts.sort_unstable();
    cuts.push(input.len());
    let mut prev = 0;
    cuts.into_iter()
        .map(|c| {
            let piece = (&input[prev..c], &input[c..]);
            prev = c;
            piece
        })
        .collect()
}

fn smtpish() -> impl Strategy<Value = Vec<u8>> {
    proptest::collection::vec(
        prop_oneof![
            3 => Just(b'\r'), 3 => Just(b'\n'), 3 => Just(b'.'), 3 => Just(b'a'), 1 => any::<u8>()
        ],
        0..120,
    )
}

/// Mostly whole lines ended by CRLF (what real mail is), with the odd dot, bare CR or LF.
fn lineish() -> impl Strategy<Value = Vec<u8>> {
    proptest::collection::vec(
        prop_oneof![
            6 => Just(&b"\r\n"[..]), 4 => Just(&b"ab"[..]), 2 => Just(&b"."[..]),
            1 => Just(&b"\r"[..]), 1 => Just(&b"\n"[..]), 1 => Just(&b"xyzxyzxyz"[..])
        ],
        0..60,
    )
    .prop_map(|parts| parts.concat())
}

/// Fed one octet at a time: never a whole line in one call, so every octet goes through
/// the per-octet path and none through the whole-line fast path.
fn octet_by_octet(d: DataDecoder, input: &[u8]) -> (bool, Vec<u8>, DataOutcome, Vec<u8>) {
    let cuts: Vec<usize> = (1..input.len()).collect();
    chunked_decode_with(d, input, &cuts)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// The whole-line fast path gives exactly what the per-octet path gives: same body,
    /// outcome and leftover, for any line limit, size cap and mode.
    #[test]
    fn fast_path_is_the_per_octet_path(input in prop_oneof![lineish(), smtpish()],
                                       tail in any::<bool>(), normalize in any::<bool>(),
                                       stuffed in any::<bool>(), line in 2usize..24,
                                       max in 0u64..200) {
        let bare = if normalize { BarePolicy::Normalize } else { BarePolicy::Reject };
        let mut input = input;
        if tail {
            input.extend_from_slice(b"\r\n.\r\nQUIT\r\n");
        }
        let mut d = DataDecoder::new(line, bare, max);
        if stuffed {
            d = d.stuffed();
        }
        let whole = chunked_decode_with(d.clone(), &input, &[]);
        prop_assert_eq!(octet_by_octet(d, &input), whole);
    }

    /// Any split of the input gives the same body, outcome and leftover.
    #[test]
    fn chunking_does_not_matter(input in smtpish(), cuts in proptest::collection::vec(0usize..120, 0..8),
                                normalize in any::<bool>(), max in 0u64..150) {
        let bare = if normalize { BarePolicy::Normalize } else { BarePolicy::Reject };
        let mut d = DataDecoder::new(1000, bare, max);
        let mut body = Vec::new();
        let mut buf = BytesMut::from(&input[..]);
        let done = d.feed(&mut buf, &mut body);
        let whole = (done, body, d.outcome(), buf.to_vec());
        prop_assert_eq!(chunked_decode(&input, &cuts, bare, max), whole);
    }

    /// encode_data then decoding gives back the body (normalised, with a final CRLF).
    #[test]
    fn encode_then_decode(body in smtpish()) {
        let wire = encode(&body);
        let (done, back, out, rest) = decode(&wire, BarePolicy::Reject);
        prop_assert!(done);
        prop_assert!(rest.is_empty());
        prop_assert!(!out.bare_line_ending);
        let mut want = Vec::new();
        // Normalise the original the way encode_data does.
        let mut i = 0;
        while i < body.len() {
            match body[i] {
                b'\r' if body.get(i + 1) == Some(&b'\n') => { want.extend_from_slice(b"\r\n"); i += 2; continue; }
                b'\r' | b'\n' => want.extend_from_slice(b"\r\n"),
                b => want.push(b),
            }
            i += 1;
        }
        if !want.is_empty() && !want.ends_with(b"\r\n") { want.extend_from_slice(b"\r\n"); }
        prop_assert_eq!(back, want);
    }

    /// Decoding, re-encoding and decoding again is stable, and the decoded
    /// body is always canonical.
    #[test]
    fn decode_encode_decode(input in smtpish(), normalize in any::<bool>()) {
        let bare = if normalize { BarePolicy::Normalize } else { BarePolicy::Reject };
        let (_, body, _, _) = decode(&input, bare);
        assert_canonical(&body);
        let (done, again, out, rest) = decode(&encode(&body), bare);
        prop_assert!(done && rest.is_empty() && !out.bare_line_ending && !out.normalized);
        // An unfinished last line gets its CRLF from encode_data.
        let mut want = body;
        if !want.is_empty() && !want.ends_with(b"\r\n") { want.extend_from_slice(b"\r\n"); }
        prop_assert_eq!(again, want);
    }

    /// The stuffed decoder writes exactly what encode_data writes for the plain decoder's
    /// body (less the end-of-data line), with the same outcome and leftover, however the
    /// input is split.
    #[test]
    fn stuffed_is_decode_then_encode(input in smtpish(), cuts in proptest::collection::vec(0usize..120, 0..8),
                                     normalize in any::<bool>(), max in 0u64..150, tail in any::<bool>()) {
        let bare = if normalize { BarePolicy::Normalize } else { BarePolicy::Reject };
        let mut input = input;
        if tail {
            input.extend_from_slice(b"\r\n.\r\n");
        }
        let (done, plain, out, rest) = chunked_decode(&input, &[], bare, max);
        let (sdone, stuffed, sout, srest) =
            chunked_decode_with(DataDecoder::new(1000, bare, max).stuffed(), &input, &cuts);
        prop_assert_eq!((sdone, sout, srest), (done, out, rest));
        if !out.too_big {
            let mut got = stuffed;
            if !got.is_empty() && !got.ends_with(b"\r\n") {
                got.extend_from_slice(b"\r\n");
            }
            got.extend_from_slice(b".\r\n");
            prop_assert_eq!(got, encode(&plain));
        }
    }
}

/// Any text after a first line ending in CRLF: what is consumed (if the message ended)
/// ends with CRLF "." CRLF.
fn after_crlf_first_line() -> impl Strategy<Value = Vec<u8>> {
    (
        prop_oneof![
            Just(&b"Subject: x\r\n"[..]),
            Just(&b"\r\n"[..]),
            Just(&b"a\r\n"[..])
        ],
        prop_oneof![lineish(), smtpish()],
    )
        .prop_map(|(first, rest)| [first, &rest[..]].concat())
}

/// An LF-only message: a header field, then LF-ended lines (dot-stuffed with LF), then
/// LF "." LF; with the plain body it stands for.
fn lf_only_message() -> impl Strategy<Value = (Vec<u8>, Vec<u8>)> {
    proptest::collection::vec(
        proptest::collection::vec(
            prop_oneof![Just(b'.'), Just(b'a'), Just(b':'), Just(b' ')],
            0..8,
        ),
        0..10,
    )
    .prop_map(|lines| {
        let mut wire = b"Subject: lf\n".to_vec();
        let mut plain = b"Subject: lf\r\n".to_vec();
        for l in lines {
            if l.first() == Some(&b'.') {
                wire.push(b'.');
            }
            wire.extend_from_slice(&l);
            wire.push(b'\n');
            plain.extend_from_slice(&l);
            plain.extend_from_slice(b"\r\n");
        }
        wire.extend_from_slice(b".\n");
        (wire, plain)
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// A message whose first line ends in CRLF ends nowhere but at CRLF "." CRLF, whatever
    /// bare CRs and LFs follow (the smuggling payloads among them), in both modes and
    /// however the input is split.
    #[test]
    fn a_crlf_message_ends_only_at_crlf_dot_crlf(input in after_crlf_first_line(),
                                                 cuts in proptest::collection::vec(0usize..140, 0..6),
                                                 normalize in any::<bool>()) {
        let bare = if normalize { BarePolicy::Normalize } else { BarePolicy::Reject };
        let (done, _, out, rest) = chunked_decode(&input, &cuts, bare, BIG);
        prop_assert_eq!(out.mode, LineMode::Crlf);
        if done {
            let used = &input[..input.len() - rest.len()];
            prop_assert!(used.ends_with(b"\r\n.\r\n"), "ended at {:?}", used);
        }
    }

    /// An LF-only message ends exactly at its LF "." LF, in both modes, and reads as its
    /// lines with CRLF; the text after it is left for the command loop.
    #[test]
    fn an_lf_only_message_ends_at_its_lf_dot_lf((wire, plain) in lf_only_message(),
                                               cuts in proptest::collection::vec(0usize..140, 0..6),
                                               normalize in any::<bool>()) {
        let bare = if normalize { BarePolicy::Normalize } else { BarePolicy::Reject };
        let mut input = wire.clone();
        input.extend_from_slice(b"QUIT\r\n");
        let (done, body, out, rest) = chunked_decode(&input, &cuts, bare, BIG);
        prop_assert!(done);
        prop_assert_eq!(out.mode, LineMode::LfOnly);
        prop_assert_eq!(rest, b"QUIT\r\n".to_vec());
        prop_assert_eq!(&body, &plain);
        prop_assert_eq!(out.rejection().is_some(), !normalize);
        // Held, it is copied and re-framed: the wire form is the plain body, stuffed.
        let (hdone, wire_form, _, _) = held_decode(DataDecoder::new(1000, bare, BIG), &input, &cuts);
        prop_assert!(hdone);
        let wire_form = wire_form.unwrap();
        prop_assert!(!wire_form.is_held());
        prop_assert_eq!(wire_form.as_bytes(), &encode(&plain)[..]);
    }
}

#[test]
fn stuffed_keeps_leading_dots_stuffed() {
    let mut d = DataDecoder::new(1000, BarePolicy::Reject, BIG).stuffed();
    let mut buf = BytesMut::from(&b"..a\r\n...\r\n.b\r\nc\r\n.\r\nMAIL"[..]);
    let mut body = Vec::new();
    assert!(d.feed(&mut buf, &mut body));
    assert_eq!(body, b"..a\r\n...\r\nb\r\nc\r\n");
    assert_eq!(d.outcome().size, 14);
    assert_eq!(&buf[..], b"MAIL");
}

/// Feeds `input` to a held decoder split at `cuts`, as the session does (the buffer keeps
/// what is held); returns (done, wire form if done, outcome, rest of buffer if done).
fn held_decode(
    d: DataDecoder,
    input: &[u8],
    cuts: &[usize],
) -> (bool, Option<Wire>, DataOutcome, Vec<u8>) {
    let mut d = d.held();
    let mut body = Vec::new();
    let mut buf = BytesMut::new();
    for (piece, after) in pieces(input, cuts) {
        buf.extend_from_slice(piece);
        if d.feed_held(&mut buf, &mut body) {
            // Further input goes to the buffer, after the message.
            buf.extend_from_slice(after);
            let wire = d.take_wire(&mut buf, body);
            return (true, Some(wire), d.outcome(), buf.to_vec());
        }
    }
    (false, None, d.outcome(), Vec::new())
}

#[test]
fn held_leaves_an_honest_message_in_place() {
    let input = b"Subject: x\r\n\r\n..dot\r\nline\r\n.\r\nQUIT\r\n";
    let (done, wire, out, rest) = held_decode(
        DataDecoder::new(1000, BarePolicy::Reject, BIG),
        input,
        &[3, 17, 30],
    );
    assert!(done);
    let wire = wire.unwrap();
    assert!(wire.is_held());
    assert_eq!(wire.as_bytes(), &input[..input.len() - 6]);
    assert_eq!(wire.message(), b"Subject: x\r\n\r\n..dot\r\nline\r\n");
    assert_eq!(out.size, 26);
    assert_eq!(rest, b"QUIT\r\n");
    // The empty message is its end-of-data line.
    let (_, wire, _, rest) = held_decode(
        DataDecoder::new(1000, BarePolicy::Reject, BIG),
        b".\r\nRSET\r\n",
        &[],
    );
    let wire = wire.unwrap();
    assert!(wire.is_held());
    assert_eq!((wire.as_bytes(), wire.message()), (&b".\r\n"[..], &b""[..]));
    assert_eq!(rest, b"RSET\r\n");
}

#[test]
fn held_copies_from_the_first_line_that_changes() {
    let d = || DataDecoder::new(1000, BarePolicy::Normalize, BIG);
    // A leading dot that is not a stuffing dot is dropped: from there on, a copy.
    let (_, wire, _, _) = held_decode(d(), b"a\r\n.b\r\nc\r\n.\r\n", &[]);
    let wire = wire.unwrap();
    assert!(!wire.is_held());
    assert_eq!(wire.as_bytes(), b"a\r\nb\r\nc\r\n.\r\n");
    // A bare LF is written as CRLF.
    let (_, wire, out, _) = held_decode(d(), b"a\r\nb\nc\r\n.\r\n", &[5]);
    let wire = wire.unwrap();
    assert!(!wire.is_held() && out.normalized);
    assert_eq!(wire.as_bytes(), b"a\r\nb\r\nc\r\n.\r\n");
    // Past the size limit only the first octets are kept (the message is refused).
    let (_, wire, out, rest) = held_decode(
        DataDecoder::new(1000, BarePolicy::Reject, 4),
        b"abc\r\ndef\r\n.\r\nX",
        &[],
    );
    // (The copy holds only the first 4 octets, as the stuffed decoder's body would.)
    assert!(out.too_big && !wire.unwrap().is_held());
    assert_eq!(rest, b"X");
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// Held or copied, the wire form is what the stuffed decoder writes (with "." CRLF),
    /// with the same outcome and leftover, however the input is split; and an input made
    /// only of CRLF lines with stuffed dots is never copied.
    #[test]
    fn held_is_the_stuffed_wire_form(input in prop_oneof![lineish(), smtpish()],
                                     cuts in proptest::collection::vec(0usize..140, 0..8),
                                     normalize in any::<bool>(), line in 2usize..24,
                                     max in 0u64..200, tail in any::<bool>()) {
        let bare = if normalize { BarePolicy::Normalize } else { BarePolicy::Reject };
        let mut input = input;
        if tail {
            input.extend_from_slice(b"\r\n.\r\nQUIT\r\n");
        }
        let d = DataDecoder::new(line, bare, max);
        let (done, stuffed, out, rest) = chunked_decode_with(d.clone().stuffed(), &input, &[]);
        let (hdone, wire, hout, hrest) = held_decode(d, &input, &cuts);
        prop_assert_eq!((hdone, hout), (done, out));
        if let Some(wire) = wire {
            prop_assert_eq!(&hrest, &rest);
            let mut want = stuffed;
            want.extend_from_slice(b".\r\n");
            if !out.too_big {
                prop_assert_eq!(wire.as_bytes(), &want[..]);
            }
            let end = input.len() - hrest.len();
            let honest = input[..end].split_inclusive(|&b| b == b'\n').all(|l| {
                l.ends_with(b"\r\n")
                    && !l[..l.len() - 2].contains(&b'\r')
                    && !l[..l.len() - 2].contains(&b'\n')
                    && (!l.starts_with(b".") || l.starts_with(b"..") || l == b".\r\n")
            });
            if honest && !out.too_big {
                prop_assert!(wire.is_held());
                prop_assert_eq!(wire.as_bytes(), &input[..end]);
            }
        }
    }
}

fn unstuff(wire: &[u8]) -> Vec<u8> {
    let runs = unstuffed_runs(wire).collect::<Vec<_>>().concat();
    // The runs joined are what `unstuffed` gives, borrowed when there is only one.
    let joined = unstuffed(wire);
    assert_eq!(&*joined, &runs[..]);
    assert_eq!(
        matches!(joined, std::borrow::Cow::Borrowed(_)),
        unstuffed_runs(wire).count() == 1
    );
    runs
}

#[test]
fn unstuffed_runs_take_out_only_stuffing_dots() {
    assert_eq!(unstuffed_runs(b"").collect::<Vec<_>>(), vec![&b""[..]]);
    assert_eq!(
        unstuffed_runs(b"A: b\r\n\r\nhello\r\n").collect::<Vec<_>>(),
        vec![&b"A: b\r\n\r\nhello\r\n"[..]],
        "no line begins with '.': one run, the input itself"
    );
    assert_eq!(
        unstuffed_runs(b"..a\r\n..\r\nx.y\r\n...\r\n").collect::<Vec<_>>(),
        vec![&b".a\r\n"[..], b".\r\nx.y\r\n", b"..\r\n"]
    );
    assert_eq!(unstuff(b"..\r\n"), b".\r\n");
    assert_eq!(unstuff(b"a\r\n.."), b"a\r\n.", "an unfinished last line");
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// The stuffed wire form of any message, unstuffed run by run, is that message: what the
    /// plain decoder gives from the same input.
    #[test]
    fn unstuffed_runs_are_the_message(input in prop_oneof![lineish(), smtpish()],
                                      normalize in any::<bool>(), held in any::<bool>()) {
        let bare = if normalize { BarePolicy::Normalize } else { BarePolicy::Reject };
        let mut input = input;
        input.extend_from_slice(b"\r\n.\r\n");
        let (done, plain, out, _) = chunked_decode(&input, &[], bare, BIG);
        prop_assert!(done);
        // The size the decoder counts is the message without its stuffing dots, so a wire
        // form of that length has none (the session relays it without searching it).
        prop_assert_eq!(plain.len() as u64, out.size);
        let d = DataDecoder::new(1000, bare, BIG);
        let wire = if held {
            held_decode(d, &input, &[]).1.expect("the message ended")
        } else {
            let mut buf = BytesMut::from(&input[..]);
            let mut d = d.stuffed();
            let mut body = Vec::new();
            prop_assert!(d.feed(&mut buf, &mut body));
            d.take_wire(&mut buf, body)
        };
        prop_assert_eq!(unstuff(wire.message()), plain.clone());
        // Every run but the last ends a line, and no run is split inside a line's text.
        let runs: Vec<_> = unstuffed_runs(wire.message()).collect();
        for run in &runs[..runs.len() - 1] {
            prop_assert!(run.ends_with(b"\r\n"));
        }
        // The message is sent uncopied exactly when no line of it begins with '.'.
        let whole = runs.len() == 1 && runs[0].len() == wire.message().len();
        prop_assert_eq!(whole, !wire.message().starts_with(b".")
            && memchr::memmem::find(wire.message(), b"\r\n.").is_none());
    }

    /// Unstuffing undoes `encode_data` for any body (which it first makes canonical).
    #[test]
    fn unstuffing_undoes_encode_data(body in smtpish()) {
        let wire = encode(&body);
        let message = &wire[..wire.len() - 3];
        let (_, plain, _, _) = decode(&wire, BarePolicy::Normalize);
        prop_assert_eq!(unstuff(message), plain);
    }
}
