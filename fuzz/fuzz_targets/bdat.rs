//! BDAT framing: any client stream, cut into commands by the line framer and parser, with
//! each BDAT's chunk read by a `ChunkReader` into a `ChunkedBody` as the session does.
//! However the stream is read, the commands, messages and leftover are the same; a chunk
//! reader never takes more than its chunk; a message's body is canonical (no bare CR or LF)
//! and, dot-stuffed as DATA, reads back as exactly that body.
#![no_main]

use bytes::BytesMut;
use floodgate::smtp::{
    encode_data, parse_command, BarePolicy, ChunkReader, ChunkedBody, Command, DataDecoder,
    DataOutcome, LineEvent, LineFramer,
};
use libfuzzer_sys::fuzz_target;

type Run = (Vec<String>, Vec<(Vec<u8>, DataOutcome)>, Vec<u8>);

fn run(input: &[u8], read: usize, bare: BarePolicy, max: u64, line: usize) -> Run {
    let mut framer = LineFramer::new(512);
    let mut buf = BytesMut::new();
    let mut commands = Vec::new();
    let mut messages = Vec::new();
    let mut chunk: Option<(ChunkReader, bool)> = None;
    let mut body = ChunkedBody::new(line, bare, max);
    for piece in input.chunks(read.max(1)) {
        buf.extend_from_slice(piece);
        loop {
            if let Some((reader, last)) = chunk.as_mut() {
                let before = (buf.len() as u64, reader.remaining());
                let done = reader.feed(&mut buf, Some(&mut body));
                let taken = before.0 - buf.len() as u64;
                assert!(taken <= before.1, "a chunk reader took more than its chunk");
                assert_eq!(reader.remaining(), before.1 - taken);
                if !done {
                    assert!(buf.is_empty());
                    break;
                }
                if *last {
                    let out = body.finish();
                    messages.push((body.take_body(), out));
                    body = ChunkedBody::new(line, bare, max);
                }
                chunk = None;
            }
            match framer.next_line(&mut buf) {
                None => break,
                Some(LineEvent::Line(l)) => match parse_command(&l) {
                    Ok(Command::Bdat { size, last }) => {
                        body.announce(size);
                        commands.push(format!("BDAT {size} {last}"));
                        chunk = Some((ChunkReader::new(size), last));
                    }
                    Ok(c) => commands.push(c.verb().to_string()),
                    Err(_) => commands.push("error".into()),
                },
                Some(e) => commands.push(format!("{e:?}")),
            }
        }
    }
    (commands, messages, buf.to_vec())
}

fuzz_target!(|data: &[u8]| {
    let (flags, read, input) = match data {
        [a, b, rest @ ..] => (*a, usize::from(*b) + 1, rest),
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
    let line = if flags & 4 == 0 { 1000 } else { 64 };
    let whole = run(input, input.len(), bare, max, line);
    assert_eq!(run(input, read, bare, max, line), whole);
    assert_eq!(run(input, 1, bare, max, line), whole);
    for (body, out) in &whole.1 {
        assert!(out.complete);
        assert!(body.len() as u64 <= max);
        if out.too_big {
            continue;
        }
        assert_eq!(out.size, body.len() as u64);
        for (i, &b) in body.iter().enumerate() {
            if b == b'\r' {
                assert_eq!(body.get(i + 1), Some(&b'\n'), "bare CR in a chunked body");
            }
            if b == b'\n' {
                assert!(i > 0 && body[i - 1] == b'\r', "bare LF in a chunked body");
            }
        }
        // Relayed as DATA, it reads back whole: nothing in it ends DATA early.
        let mut wire = Vec::new();
        encode_data(body, &mut wire);
        let mut d = DataDecoder::new(usize::MAX, BarePolicy::Reject, u64::MAX);
        let mut buf = BytesMut::from(&wire[..]);
        let mut back = Vec::new();
        assert!(d.feed(&mut buf, &mut back));
        assert!(buf.is_empty());
        let mut want = body.clone();
        if !want.is_empty() && !want.ends_with(b"\r\n") {
            want.extend_from_slice(b"\r\n");
        }
        assert_eq!(back, want);
    }
});
