//! ReplyParser (+ EHLO parsing and filtering): no panics, chunking does not
//! change the result, and replies re-parse from their wire form.
#![no_main]

use bytes::BytesMut;
use floodgate::smtp::{filter_ehlo, parse_ehlo, EhloFilter, Reply, ReplyParser};
use libfuzzer_sys::fuzz_target;

fn parse(input: &[u8], cut: usize) -> (Vec<Reply>, bool) {
    let mut p = ReplyParser::new();
    let mut buf = BytesMut::from(&input[..cut]);
    let mut out = Vec::new();
    for phase in 0..2 {
        if phase == 1 {
            buf.extend_from_slice(&input[cut..]);
        }
        loop {
            match p.parse(&mut buf) {
                Ok(Some(r)) => out.push(r),
                Ok(None) => break,
                Err(_) => return (out, true),
            }
        }
    }
    (out, false)
}

fn reparse(r: &Reply) -> Reply {
    let wire = r.to_wire();
    let mut p = ReplyParser::with_limits(usize::MAX, usize::MAX);
    let mut buf = BytesMut::from(&wire[..]);
    let back = p
        .parse(&mut buf)
        .expect("own wire form parses")
        .expect("complete");
    assert!(buf.is_empty());
    back
}

fuzz_target!(|data: &[u8]| {
    let Some((&c, input)) = data.split_first() else {
        return;
    };
    let cut = usize::from(c).min(input.len());
    let (whole, err_whole) = parse(input, input.len());
    let (split, err_split) = parse(input, cut);
    assert_eq!(whole, split);
    assert_eq!(err_whole, err_split);
    for r in &whole {
        let clean = r
            .lines
            .iter()
            .all(|l| !l.chars().any(|ch| ch.is_ascii_control() && ch != '\t'));
        if clean {
            assert_eq!(&reparse(r), r);
        }
        let whole = parse_ehlo(r);
        assert_eq!(
            floodgate::smtp::ehlo::pipelining_and_chunking(r),
            (whole.pipelining, whole.chunking)
        );
        // The SIZE a client is offered never exceeds floodgate's own limit.
        let own = u64::from(c) + 1;
        let mut capped = r.clone();
        floodgate::smtp::ehlo::cap_size(&mut capped, own);
        if let Some(n) = parse_ehlo(&capped).size {
            assert!(n >= 1 && n <= own, "SIZE {n} over {own}");
        }
        for bits in 0..8u8 {
            let f = EhloFilter {
                offer_starttls: bits & 1 != 0,
                offer_auth: bits & 2 != 0,
                chunking: bits & 4 != 0,
            };
            let filtered = filter_ehlo(r, &f);
            let again = reparse(&filtered);
            if r.code == 250 {
                // Filtering is idempotent.
                assert_eq!(
                    filter_ehlo(
                        &again,
                        &EhloFilter {
                            offer_starttls: false,
                            ..f
                        }
                    )
                    .lines
                    .len()
                        + usize::from(f.offer_starttls),
                    filtered.lines.len()
                );
            }
        }
    }
});
