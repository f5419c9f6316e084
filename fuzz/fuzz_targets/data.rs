//! DataDecoder: chunking does not matter (one octet at a time never takes the whole-line
//! fast path, so this compares the two), the body is canonical, and the differential check
//! decode -> encode_data -> decode gives the same body, and the wire form unstuffed (a BDAT
//! chunk upstream) is that body. The line limit varies so the fast
//! path's limit check is reached with short inputs too. The block-wise clean-line check the
//! fast path uses is compared with the same check made line by line.
#![no_main]

use bytes::BytesMut;
use floodgate::smtp::clean_lines::{clean_run, clean_run_by_lines};
use floodgate::smtp::{
    encode_data, unstuffed, unstuffed_runs, BarePolicy, DataDecoder, DataOutcome, LineMode, Wire,
};
use libfuzzer_sys::fuzz_target;

fn decode(
    input: &[u8],
    chunk: usize,
    line: usize,
    bare: BarePolicy,
    max: u64,
) -> (bool, Vec<u8>, DataOutcome, Vec<u8>) {
    decode_with(DataDecoder::new(line, bare, max), input, chunk)
}

fn decode_with(
    mut d: DataDecoder,
    input: &[u8],
    chunk: usize,
) -> (bool, Vec<u8>, DataOutcome, Vec<u8>) {
    let mut body = Vec::new();
    let mut buf = BytesMut::new();
    let mut done = false;
    for piece in input.chunks(chunk.max(1)) {
        buf.extend_from_slice(piece);
        done = d.feed(&mut buf, &mut body);
    }
    if input.is_empty() {
        done = d.feed(&mut buf, &mut body);
    }
    (done, body, d.outcome(), buf.to_vec())
}

fuzz_target!(|data: &[u8]| {
    let (flags, chunk, line, input) = match data {
        // 255: RFC 5321's 1000; otherwise a short limit, 2 to 256 octets.
        [a, b, c, rest @ ..] => (
            *a,
            usize::from(*b) + 1,
            if *c == 255 { 1000 } else { usize::from(*c) + 2 },
            rest,
        ),
        _ => return,
    };
    let bare = if flags & 1 == 0 {
        BarePolicy::Reject
    } else {
        BarePolicy::Normalize
    };
    let max = if flags & 2 == 0 {
        u64::MAX
    } else {
        u64::from(flags >> 2) * 8
    };
    for skip in [0, 1, 2] {
        let from = &input[skip.min(input.len())..];
        assert_eq!(clean_run(from, line), clean_run_by_lines(from, line));
    }
    let whole = decode(input, input.len(), line, bare, max);
    assert_eq!(decode(input, chunk, line, bare, max), whole);
    assert_eq!(decode(input, 1, line, bare, max), whole);
    // The stuffed decoder (what the session spools) agrees on everything but the body.
    let stuffed = decode_with(DataDecoder::new(line, bare, max).stuffed(), input, chunk);
    assert_eq!(
        (stuffed.0, stuffed.2, &stuffed.3),
        (whole.0, whole.2, &whole.3)
    );
    // The held decoder (what the session relays from) agrees too, and its wire form is the
    // stuffed body with the end-of-data line.
    let held = decode_held(input, chunk, line, bare, max);
    assert_eq!((held.0, held.2), (whole.0, whole.2));
    if let Some(wire) = &held.1 {
        assert_eq!(&held.3, &whole.3);
        if !whole.2.too_big {
            let mut want = stuffed.1.clone();
            want.extend_from_slice(b".\r\n");
            assert_eq!(wire.as_bytes(), &want[..]);
            if wire.is_held() {
                // Held means uncopied: the client's own octets, the start of its input.
                assert!(input.starts_with(wire.as_bytes()));
            }
            // Unstuffed (what a BDAT chunk upstream carries), the wire form is the message
            // the plain decoder gave, run by run or joined, and the decoder's size is its
            // length (the session relays a wire form of that length unsearched).
            let runs: Vec<u8> = unstuffed_runs(wire.message()).collect::<Vec<_>>().concat();
            assert_eq!(runs, whole.1);
            assert_eq!(&*unstuffed(wire.message()), &whole.1[..]);
            assert_eq!(whole.1.len() as u64, whole.2.size);
        }
    }
    let (done, body, out, rest) = whole;
    if done {
        let used = &input[..input.len() - rest.len()];
        match out.mode {
            LineMode::LfOnly => assert!(
                used.ends_with(b"\n.\n") || used.ends_with(b"\n.\r\n"),
                "LF-only message ended elsewhere"
            ),
            _ => assert!(
                used == b".\r\n" || used.ends_with(b"\r\n.\r\n"),
                "CRLF message ended elsewhere than CRLF . CRLF"
            ),
        }
        if out.mode == LineMode::LfOnly {
            let first = used.iter().position(|&b| b == b'\n').unwrap();
            assert!(first > 0 && used[first - 1] != b'\r');
            assert!(used[..first].contains(&b':') && !used.starts_with(b"."));
        }
    }
    assert!(body.len() as u64 <= max);
    assert_eq!(out.too_big, out.size > max);
    assert!(out.size >= body.len() as u64);
    if done {
        assert_eq!(rest.len() + consumed_len(input, &rest), input.len());
    } else {
        assert!(rest.is_empty());
    }
    // The body never carries a bare CR or LF.
    for (i, &b) in body.iter().enumerate() {
        if b == b'\r' && body.get(i + 1) != Some(&b'\n') && i + 1 != body.len() {
            panic!("bare CR in body");
        }
        if b == b'\n' {
            assert!(i > 0 && body[i - 1] == b'\r', "bare LF in body");
        }
    }
    if out.too_big {
        return;
    }
    // Differential: the canonical stream floodgate writes upstream decodes
    // to exactly the body floodgate counted.
    let mut wire = Vec::new();
    encode_data(&body, &mut wire);
    // ... and its body is that wire form without the end-of-data line.
    let mut spooled = stuffed.1;
    if !spooled.is_empty() && !spooled.ends_with(b"\r\n") {
        spooled.extend_from_slice(b"\r\n");
    }
    spooled.extend_from_slice(b".\r\n");
    assert_eq!(spooled, wire);
    let (done2, body2, out2, rest2) = decode(&wire, wire.len(), 1000, BarePolicy::Reject, u64::MAX);
    assert!(done2 && rest2.is_empty());
    assert!(!out2.bare_line_ending && !out2.normalized);
    let mut want = body;
    if !want.is_empty() && !want.ends_with(b"\r\n") {
        want.extend_from_slice(b"\r\n");
    }
    assert_eq!(body2, want);
    if done {
        assert_eq!(out2.size, out.size);
    }
});

/// Fed as the session feeds it: the buffer keeps the held message; once done, the rest of
/// the input follows it in the buffer and the wire form is taken off.
fn decode_held(
    input: &[u8],
    chunk: usize,
    line: usize,
    bare: BarePolicy,
    max: u64,
) -> (bool, Option<Wire>, DataOutcome, Vec<u8>) {
    let mut d = DataDecoder::new(line, bare, max).held();
    let mut body = Vec::new();
    let mut buf = BytesMut::new();
    let mut fed = 0;
    loop {
        let piece = &input[fed..input.len().min(fed + chunk.max(1))];
        buf.extend_from_slice(piece);
        fed += piece.len();
        if d.feed_held(&mut buf, &mut body) {
            buf.extend_from_slice(&input[fed..]);
            let wire = d.take_wire(&mut buf, body);
            return (true, Some(wire), d.outcome(), buf.to_vec());
        }
        if fed == input.len() {
            return (false, None, d.outcome(), Vec::new());
        }
    }
}

fn consumed_len(input: &[u8], rest: &[u8]) -> usize {
    assert!(input.ends_with(rest));
    input.len() - rest.len()
}
