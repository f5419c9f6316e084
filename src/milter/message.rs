//! The message of a milter transaction, put together from the header and body packets
//! Postfix sends, bounded by `[smtp] max_message_size`: what the Message stage reads (header
//! From, Subject, `Auto-Submitted:`, the message keys).

/// A message as the milter receives it: header fields one by one, then body chunks.
#[derive(Debug, Default)]
pub struct Assembled {
    /// The header section (each field `Name: value` CRLF, then the blank line once the
    /// body starts) and the body, as far as [`Assembled::max`] allows.
    bytes: Vec<u8>,
    /// Octets seen, kept or not.
    size: u64,
    /// Most octets kept.
    max: usize,
    /// Whether the blank line after the header section is written.
    body_started: bool,
}

impl Assembled {
    /// An empty message that keeps at most `max` octets.
    pub fn new(max: u64) -> Assembled {
        Assembled {
            max: usize::try_from(max).unwrap_or(usize::MAX),
            ..Assembled::default()
        }
    }

    fn keep(&mut self, part: &[u8]) {
        self.size += part.len() as u64;
        let room = self.max.saturating_sub(self.bytes.len());
        self.bytes.extend_from_slice(&part[..part.len().min(room)]);
    }

    /// One header field as Postfix sends it: its value keeps its leading space
    /// (`SMFIP_HDR_LEADSPC`), folded lines are joined by a bare LF, which becomes CRLF.
    pub fn header(&mut self, name: &[u8], value: &[u8]) {
        let mut line = Vec::with_capacity(name.len() + value.len() + 4);
        line.extend_from_slice(name);
        line.push(b':');
        let mut prev = 0u8;
        for &b in value {
            if b == b'\n' && prev != b'\r' {
                line.push(b'\r');
            }
            line.push(b);
            prev = b;
        }
        line.extend_from_slice(b"\r\n");
        self.keep(&line);
    }

    /// A chunk of the body (CRLF line ends, as Postfix sends it).
    pub fn body(&mut self, chunk: &[u8]) {
        if !self.body_started {
            self.body_started = true;
            self.keep(b"\r\n");
        }
        self.keep(chunk);
    }

    /// The end of the message: the blank line is written if no body came.
    pub fn finish(&mut self) {
        if !self.body_started {
            self.body(b"");
        }
    }

    /// The octets kept: the whole message unless it is over the bound.
    pub fn bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// Takes the octets kept, leaving the message empty.
    pub fn take(&mut self) -> Vec<u8> {
        std::mem::take(&mut self.bytes)
    }

    /// The message's size as received (header fields as rebuilt here, body).
    pub fn size(&self) -> u64 {
        self.size
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn header_and_body_make_the_message() {
        let mut m = Assembled::new(1 << 20);
        m.header(b"From", b" a@example.org");
        m.header(b"Subject", b" two\n\tlines");
        m.body(b"hello\r\n");
        m.finish();
        assert_eq!(
            m.bytes(),
            b"From: a@example.org\r\nSubject: two\r\n\tlines\r\n\r\nhello\r\n"
        );
        assert_eq!(m.size(), m.bytes().len() as u64);
        let f = crate::smtp::header_fields::read(m.bytes());
        assert_eq!(f.from.as_deref(), Some("a@example.org"));
    }

    #[test]
    fn no_body_still_ends_the_header() {
        let mut m = Assembled::new(100);
        m.header(b"X", b" y");
        m.finish();
        assert_eq!(m.bytes(), b"X: y\r\n\r\n");
    }

    #[test]
    fn over_the_bound_is_cut_but_counted() {
        let mut m = Assembled::new(10);
        m.header(b"Subject", b" a long subject line");
        m.body(b"and a body\r\n");
        assert_eq!(m.bytes().len(), 10);
        assert_eq!(m.size(), 30 + 2 + 12);
    }

    proptest! {
        /// Whatever arrives, the kept octets are a prefix of the unbounded message, never
        /// longer than the bound, and the size counts everything.
        #[test]
        fn bounded_prefix(
            fields in proptest::collection::vec((proptest::collection::vec(any::<u8>(), 0..8), proptest::collection::vec(any::<u8>(), 0..20)), 0..6),
            body in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..30), 0..4),
            max in 0usize..200,
        ) {
            let mut all = Assembled::new(u64::MAX);
            let mut cut = Assembled::new(max as u64);
            for (n, v) in &fields {
                all.header(n, v);
                cut.header(n, v);
            }
            for c in &body {
                all.body(c);
                cut.body(c);
            }
            all.finish();
            cut.finish();
            prop_assert!(cut.bytes().len() <= max);
            prop_assert!(all.bytes().starts_with(cut.bytes()));
            prop_assert_eq!(all.size(), cut.size());
            prop_assert_eq!(all.size(), all.bytes().len() as u64);
        }
    }
}
