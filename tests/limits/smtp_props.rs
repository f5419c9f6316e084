//! Whole-session properties of the SMTP core: a client byte stream is cut
//! into commands and DATA messages the same way however it arrives, and the
//! canonical stream floodgate would write upstream parses back into exactly
//! the commands and messages floodgate saw (no smuggling).

use bytes::BytesMut;
use floodgate::smtp::{
    encode_data, parse_command, BarePolicy, Command, DataDecoder, LineEvent, LineFramer,
};
use proptest::prelude::*;

#[derive(Debug, Clone, PartialEq, Eq)]
enum Event {
    Command(Command),
    Refused,
    Message { body: Vec<u8>, bare: bool },
}

/// A minimal reader of a client stream: command lines until DATA, then the
/// message until end-of-data, then commands again.
struct Session {
    framer: LineFramer,
    data: Option<(DataDecoder, Vec<u8>)>,
    buf: BytesMut,
    events: Vec<Event>,
}

impl Session {
    fn new() -> Self {
        Session {
            framer: LineFramer::new(512),
            data: None,
            buf: BytesMut::new(),
            events: Vec::new(),
        }
    }

    fn feed(&mut self, bytes: &[u8]) {
        self.buf.extend_from_slice(bytes);
        loop {
            if let Some((dec, body)) = &mut self.data {
                if !dec.feed(&mut self.buf, body) {
                    return;
                }
                let bare = dec.outcome().bare_line_ending;
                let body = std::mem::take(body);
                self.data = None;
                self.events.push(Event::Message { body, bare });
                continue;
            }
            match self.framer.next_line(&mut self.buf) {
                None => return,
                Some(LineEvent::Line(l)) => match parse_command(&l) {
                    Ok(Command::Data) => {
                        self.events.push(Event::Command(Command::Data));
                        self.data = Some((
                            DataDecoder::new(1000, BarePolicy::Reject, u64::MAX),
                            Vec::new(),
                        ));
                    }
                    Ok(c) => self.events.push(Event::Command(c)),
                    Err(_) => self.events.push(Event::Refused),
                },
                Some(_) => self.events.push(Event::Refused),
            }
        }
    }
}

fn fragment() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        Just(b"MAIL FROM:<a@b.example>\r\n".to_vec()),
        Just(b"RCPT TO:<x@y.example>\r\n".to_vec()),
        Just(b"DATA\r\n".to_vec()),
        Just(b"\r\n.\r\n".to_vec()),
        Just(b"\n.\n".to_vec()),
        Just(b"\r.\r".to_vec()),
        Just(b"\r\n.\r".to_vec()),
        Just(b"\n.\r\n".to_vec()),
        Just(b".\r\r\n".to_vec()),
        Just(b"..".to_vec()),
        Just(b"hello".to_vec()),
        Just(b"\r\n".to_vec()),
        Just(b"\n".to_vec()),
        Just(b"\r".to_vec()),
        Just(b"RSET\r\n".to_vec()),
        proptest::collection::vec(any::<u8>(), 0..6),
    ]
}

fn stream() -> impl Strategy<Value = Vec<u8>> {
    proptest::collection::vec(fragment(), 0..40).prop_map(|v| v.concat())
}

fn run(input: &[u8], cuts: &[usize]) -> Session {
    let mut s = Session::new();
    let mut cuts: Vec<usize> = cuts.iter().map(|&c| c.min(input.len())).collect();
    cuts.sort_unstable();
    let mut prev = 0;
    for c in cuts.into_iter().chain(std::iter::once(input.len())) {
        s.feed(&input[prev..c]);
        prev = c;
    }
    s
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]

    #[test]
    fn any_split_gives_the_same_session(input in stream(), cuts in proptest::collection::vec(0usize..400, 0..12)) {
        let whole = run(&input, &[]);
        let split = run(&input, &cuts);
        prop_assert_eq!(&split.events, &whole.events);
        prop_assert_eq!(split.data.is_some(), whole.data.is_some());
    }

    /// What floodgate counts is what upstream sees: re-framing the accepted
    /// commands and messages canonically and reading that stream again gives
    /// exactly the same commands and message bodies, with no bare line ends.
    #[test]
    fn canonical_stream_reparses_identically(input in stream()) {
        let seen = run(&input, &[]);
        let mut wire = Vec::new();
        let mut relayed = Vec::new();
        for ev in &seen.events {
            match ev {
                Event::Command(c) => { wire.extend_from_slice(&c.to_wire()); relayed.push(ev.clone()); }
                Event::Message { body, .. } => {
                    encode_data(body, &mut wire);
                    relayed.push(Event::Message { body: body.clone(), bare: false });
                }
                Event::Refused => {}
            }
        }
        let upstream = run(&wire, &[]);
        prop_assert_eq!(upstream.events, relayed);
        prop_assert!(upstream.data.is_none() || seen.data.is_some());
        prop_assert!(upstream.buf.is_empty());
    }
}

#[test]
fn smuggled_envelope_stays_inside_the_message() {
    let input = b"MAIL FROM:<a@b.example>\r\nRCPT TO:<x@y.example>\r\nDATA\r\nhi\n.\nMAIL FROM:<evil@z.example>\r\nRCPT TO:<victim@y.example>\r\nDATA\r\nspam\r\n.\r\nQUIT\r\n";
    let s = run(input, &[]);
    let verbs: Vec<&str> = s
        .events
        .iter()
        .map(|e| match e {
            Event::Command(c) => c.verb(),
            Event::Message { .. } => "<message>",
            Event::Refused => "<refused>",
        })
        .collect();
    assert_eq!(verbs, ["MAIL", "RCPT", "DATA", "<message>", "QUIT"]);
    let Event::Message { body, bare } = &s.events[3] else {
        panic!()
    };
    assert!(*bare);
    assert!(body.windows(10).any(|w| w == b"MAIL FROM:"));
}
