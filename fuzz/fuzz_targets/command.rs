//! LineFramer + parse_command: framing is independent of how bytes arrive,
//! lines are clean, and every accepted command re-parses from its wire form.
#![no_main]

use bytes::BytesMut;
use floodgate::smtp::{parse_command, LineEvent, LineFramer};
use libfuzzer_sys::fuzz_target;

fn frame(input: &[u8], max: usize, chunk: usize) -> Vec<LineEvent> {
    let mut framer = LineFramer::new(max);
    let mut buf = BytesMut::new();
    let mut out = Vec::new();
    for piece in input.chunks(chunk.max(1)) {
        buf.extend_from_slice(piece);
        while let Some(ev) = framer.next_line(&mut buf) {
            out.push(ev);
        }
        assert!(buf.len() < max.max(2), "framer kept {} bytes", buf.len());
    }
    out
}

fuzz_target!(|data: &[u8]| {
    let (max, chunk, input) = match data {
        [a, b, rest @ ..] => (usize::from(*a) * 4 + 2, usize::from(*b) + 1, rest),
        _ => return,
    };
    let whole = frame(input, max, input.len());
    assert_eq!(frame(input, max, chunk), whole);
    for ev in whole {
        let LineEvent::Line(line) = ev else { continue };
        assert!(!line.contains(&b'\r') && !line.contains(&b'\n'));
        assert!(line.len() + 2 <= max);
        if let Ok(cmd) = parse_command(&line) {
            let wire = cmd.to_wire();
            assert!(wire.ends_with(b"\r\n"));
            let body = &wire[..wire.len() - 2];
            assert!(!body.contains(&b'\r') && !body.contains(&b'\n'));
            assert_eq!(parse_command(body), Ok(cmd));
        } else if let Err(e) = parse_command(&line) {
            let r = e.reply();
            assert!((500..600).contains(&r.code));
        }
    }
});
