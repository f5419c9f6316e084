use super::*;
use crate::smtp::command::{parse_command, Command};
use crate::smtp::data::{encode_data, DataDecoder};
use crate::smtp::line::{LineEvent, LineFramer};
use bytes::BytesMut;
use proptest::prelude::*;

const BIG: u64 = 1 << 30;

/// The body and outcome of `chunks` pushed piece by piece (each cut at `cuts`).
fn assemble(chunks: &[&[u8]], bare: BarePolicy, max: u64, line: usize) -> (Vec<u8>, DataOutcome) {
    let mut b = ChunkedBody::new(line, bare, max);
    for c in chunks {
        b.announce(c.len() as u64);
        b.push(c);
    }
    let out = b.finish();
    (b.take_body(), out)
}

/// What normalising does, octet by octet: CRLF stays, a bare CR or LF becomes CRLF.
fn normalized(input: &[u8]) -> Vec<u8> {
    let mut want = Vec::new();
    let mut i = 0;
    while i < input.len() {
        match input[i] {
            b'\r' if input.get(i + 1) == Some(&b'\n') => {
                want.extend_from_slice(b"\r\n");
                i += 2;
                continue;
            }
            b'\r' | b'\n' => want.extend_from_slice(b"\r\n"),
            b => want.push(b),
        }
        i += 1;
    }
    want
}

#[test]
fn chunk_reader_takes_exactly_its_octets() {
    let mut r = ChunkReader::new(5);
    let mut body = ChunkedBody::new(1000, BarePolicy::Reject, BIG);
    let mut buf = BytesMut::from(&b"ab"[..]);
    assert!(!r.feed(&mut buf, Some(&mut body)));
    assert_eq!(r.remaining(), 3);
    buf.extend_from_slice(b"c\r\nXQUIT\r\n");
    assert!(r.feed(&mut buf, Some(&mut body)));
    assert!(r.is_done());
    assert_eq!(body.body(), b"abc\r\n");
    assert_eq!(&buf[..], b"XQUIT\r\n");
    // Skipping a refused chunk.
    let mut skip = ChunkReader::new(3);
    let mut buf = BytesMut::from(&b"xyzRSET\r\n"[..]);
    assert!(skip.feed(&mut buf, None));
    assert_eq!(&buf[..], b"RSET\r\n");
    // BDAT 0: nothing to read.
    assert!(ChunkReader::new(0).feed(&mut BytesMut::new(), None));
    // A huge announced size never takes more than what is there.
    let mut huge = ChunkReader::new(u64::MAX);
    let mut buf = BytesMut::from(&b"12345"[..]);
    assert!(!huge.feed(&mut buf, None));
    assert_eq!((buf.len() as u64, huge.remaining()), (0, u64::MAX - 5));
}

#[test]
fn chunks_join_into_one_canonical_message() {
    // A CRLF cut between two chunks is one line end, not a bare CR then a bare LF.
    let (body, out) = assemble(
        &[b"Subject: x\r", b"\n\r\nhello\r", b"\n"],
        BarePolicy::Reject,
        BIG,
        1000,
    );
    assert_eq!(body, b"Subject: x\r\n\r\nhello\r\n");
    assert_eq!(out.rejection(), None);
    assert!(out.complete && !out.normalized && out.size == body.len() as u64);
    // BDAT content is not dot-stuffed: CRLF "." CRLF is text, kept as it came.
    let (body, out) = assemble(
        &[b"a\r\n.\r\nMAIL FROM:<x@y>\r\n"],
        BarePolicy::Reject,
        BIG,
        1000,
    );
    assert_eq!(body, b"a\r\n.\r\nMAIL FROM:<x@y>\r\n");
    assert_eq!(out.rejection(), None);
    // The empty message (BDAT 0 LAST).
    let (body, out) = assemble(&[b""], BarePolicy::Reject, BIG, 1000);
    assert!(body.is_empty() && out.complete && out.rejection().is_none());
    // A last line without a line end stays so.
    assert_eq!(
        assemble(&[b"a\r\nb"], BarePolicy::Reject, BIG, 1000).0,
        b"a\r\nb"
    );
}

#[test]
fn bare_line_endings_follow_the_policy() {
    let chunks: [&[u8]; 2] = [b"a\nb\rc\r", b""];
    let (body, out) = assemble(&chunks, BarePolicy::Normalize, BIG, 1000);
    assert_eq!(body, b"a\r\nb\r\nc\r\n");
    assert!(out.normalized && out.rejection().is_none());
    let (_, out) = assemble(&chunks, BarePolicy::Reject, BIG, 1000);
    assert!(out.bare_line_ending);
    let r = out.rejection().unwrap();
    assert_eq!((r.code, r.enhanced()), (550, Some((5, 5, 2))));
    // The smuggling payloads in a chunk are text with canonical line ends.
    let (body, _) = assemble(
        &[b"x\n.\nMAIL FROM:<e@x>\r\n"],
        BarePolicy::Normalize,
        BIG,
        1000,
    );
    assert_eq!(body, b"x\r\n.\r\nMAIL FROM:<e@x>\r\n");
}

#[test]
fn size_and_line_limits() {
    // Announced chunks over the limit: too big at once, nothing more kept.
    let mut b = ChunkedBody::new(1000, BarePolicy::Reject, 10);
    assert!(b.announce(6));
    b.push(b"12345\n");
    assert!(!b.announce(6));
    assert_eq!(b.announced(), 12);
    let out = b.finish();
    assert!(out.too_big);
    let r = out.rejection().unwrap();
    assert_eq!((r.code, r.enhanced()), (552, Some((5, 3, 4))));
    // Exactly the limit is fine; normalising past it is too big.
    let (_, out) = assemble(&[b"12345678\r\n"], BarePolicy::Reject, 10, 1000);
    assert!(!out.too_big);
    let (_, out) = assemble(&[b"123456789\n"], BarePolicy::Normalize, 10, 1000);
    assert!(out.too_big && out.size == 11);
    // Line limit, CRLF included, also for a last line without its CRLF.
    let line = [b'x'; 998];
    assert!(
        !assemble(&[&line, b"\r\n"], BarePolicy::Reject, BIG, 1000)
            .1
            .line_too_long
    );
    assert!(
        !assemble(&[&line], BarePolicy::Reject, BIG, 1000)
            .1
            .line_too_long
    );
    let out = assemble(&[&line, b"x\r\n"], BarePolicy::Reject, BIG, 1000).1;
    assert!(out.line_too_long);
    assert_eq!(out.rejection().unwrap().code, 554);
    assert!(
        assemble(&[&line, b"x"], BarePolicy::Reject, BIG, 1000)
            .1
            .line_too_long
    );
}

/// Commands seen, messages ended by LAST (body, outcome), and octets left unread.
type Stream = (Vec<String>, Vec<(Vec<u8>, DataOutcome)>, usize);

/// Client input run through the command framer and parser as the session does: each
/// BDAT's chunk is read by a `ChunkReader` into the message, every other line is a
/// command. Returns the commands (in wire form), the messages (body, outcome) ended by
/// LAST, and the octets left when the input ran out.
fn run_stream(input: &[u8], cuts: &[usize], bare: BarePolicy, max: u64) -> Stream {
    let mut framer = LineFramer::new(512);
    let mut buf = BytesMut::new();
    let mut commands = Vec::new();
    let mut messages = Vec::new();
    let mut chunk: Option<(ChunkReader, bool)> = None;
    let mut body = ChunkedBody::new(1000, bare, max);
    let mut cuts: Vec<usize> = cuts.iter().map(|&c| c.min(input.len())).collect();
    cuts.sort_unstable();
    cuts.push(input.len());
    let mut fed = 0;
    for cut in cuts {
        buf.extend_from_slice(&input[fed..cut]);
        fed = cut;
        loop {
            if let Some((reader, last)) = chunk.as_mut() {
                if !reader.feed(&mut buf, Some(&mut body)) {
                    break;
                }
                if *last {
                    let out = body.finish();
                    messages.push((body.take_body(), out));
                    body = ChunkedBody::new(1000, bare, max);
                }
                chunk = None;
            }
            match framer.next_line(&mut buf) {
                None => break,
                Some(LineEvent::Line(l)) => match parse_command(&l) {
                    Ok(Command::Bdat { size, last }) => {
                        body.announce(size);
                        commands.push(format!("BDAT {size}{}", if last { " LAST" } else { "" }));
                        chunk = Some((ChunkReader::new(size), last));
                    }
                    Ok(c) => commands.push(c.verb().to_string()),
                    Err(_) => commands.push("error".into()),
                },
                Some(_) => commands.push("bad line".into()),
            }
        }
    }
    (commands, messages, buf.len())
}

#[test]
fn commands_inside_a_chunk_are_never_commands() {
    let input = b"BDAT 20\r\nRSET\r\nQUIT\r\nDATA\r\n\r\nBDAT 3 LAST\r\nabcNOOP\r\n";
    let (commands, messages, left) = run_stream(input, &[], BarePolicy::Reject, BIG);
    assert_eq!(commands, ["BDAT 20", "BDAT 3 LAST", "NOOP"]);
    assert_eq!(messages.len(), 1);
    assert_eq!(messages[0].0, b"RSET\r\nQUIT\r\nDATA\r\n\r\nabc");
    assert_eq!(left, 0);
}

/// A message cut into BDAT chunks at `cuts`, as a client sends it.
fn bdat_wire(message: &[u8], cuts: &[usize]) -> Vec<u8> {
    let mut cuts: Vec<usize> = cuts.iter().map(|&c| c.min(message.len())).collect();
    cuts.sort_unstable();
    cuts.dedup();
    let mut wire = Vec::new();
    let mut prev = 0;
    for c in cuts.into_iter().chain([message.len()]) {
        if c < prev {
            continue;
        }
        wire.extend_from_slice(format!("BDAT {}\r\n", c - prev).as_bytes());
        wire.extend_from_slice(&message[prev..c]);
        prev = c;
    }
    wire.extend_from_slice(b"BDAT 0 LAST\r\n");
    wire
}

fn octets() -> impl Strategy<Value = Vec<u8>> {
    proptest::collection::vec(
        prop_oneof![
            3 => Just(b'\r'), 3 => Just(b'\n'), 3 => Just(b'.'), 3 => Just(b'a'), 1 => any::<u8>()
        ],
        0..150,
    )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// However the message is cut into chunks and the chunks into reads, the body and
    /// outcome are the same, the body is the normalised message, and under Normalize no
    /// bare CR or LF is left.
    #[test]
    fn chunk_boundaries_do_not_matter(message in octets(),
                                      chunk_cuts in proptest::collection::vec(0usize..150, 0..6),
                                      read_cuts in proptest::collection::vec(0usize..400, 0..8),
                                      normalize in any::<bool>(), max in prop_oneof![Just(BIG), 0u64..200]) {
        let bare = if normalize { BarePolicy::Normalize } else { BarePolicy::Reject };
        let whole = assemble(&[&message], bare, max, 1000);
        let wire = bdat_wire(&message, &chunk_cuts);
        let (commands, messages, left) = run_stream(&wire, &read_cuts, bare, max);
        prop_assert_eq!(left, 0);
        prop_assert!(commands.iter().all(|c| c.starts_with("BDAT ")), "{:?}", commands);
        prop_assert_eq!(messages.len(), 1);
        prop_assert_eq!(&messages[0].1, &whole.1);
        let want = normalized(&message);
        prop_assert_eq!(whole.1.size, want.len() as u64);
        prop_assert_eq!(whole.1.too_big, want.len() as u64 > max);
        if !whole.1.too_big {
            prop_assert_eq!(&messages[0].0, &want);
        }
        prop_assert_eq!(whole.1.normalized || whole.1.bare_line_ending, want != message);
    }

    /// Relayed as DATA (dot-stuffed by `encode_data`), a chunked message reads back as
    /// exactly its body: no line of it, "." or a smuggling payload, ends DATA early.
    #[test]
    fn relayed_as_data_it_reads_back_whole(message in octets(), normalize in any::<bool>()) {
        let bare = if normalize { BarePolicy::Normalize } else { BarePolicy::Reject };
        let (body, _) = assemble(&[&message], bare, BIG, 1000);
        let mut wire = Vec::new();
        encode_data(&body, &mut wire);
        wire.extend_from_slice(b"QUIT\r\n");
        let mut d = DataDecoder::new(1000, BarePolicy::Reject, BIG);
        let mut buf = BytesMut::from(&wire[..]);
        let mut back = Vec::new();
        prop_assert!(d.feed(&mut buf, &mut back));
        prop_assert_eq!(&buf[..], b"QUIT\r\n");
        prop_assert!(!d.outcome().bare_line_ending);
        let mut want = body;
        if !want.is_empty() && !want.ends_with(b"\r\n") {
            want.extend_from_slice(b"\r\n");
        }
        prop_assert_eq!(back, want);
    }

    /// Whatever the client sends, a chunk reader never takes more than its chunk, and what
    /// the stream leaves unread is only an unfinished line or chunk.
    #[test]
    fn any_stream_is_framed_the_same_however_it_is_read(
        input in proptest::collection::vec(prop_oneof![
            Just(&b"BDAT 3\r\n"[..]), Just(&b"BDAT 0 LAST\r\n"[..]), Just(&b"BDAT 2 LAST\r\n"[..]),
            Just(&b"NOOP\r\n"[..]), Just(&b"\r\n"[..]), Just(&b"."[..]), Just(&b"\n"[..]),
            Just(&b"ab"[..]), Just(&b"BDAT x\r\n"[..]),
        ], 0..30).prop_map(|p| p.concat()),
        cuts in proptest::collection::vec(0usize..300, 0..8),
    ) {
        let whole = run_stream(&input, &[], BarePolicy::Normalize, BIG);
        prop_assert_eq!(run_stream(&input, &cuts, BarePolicy::Normalize, BIG), whole);
    }
}
