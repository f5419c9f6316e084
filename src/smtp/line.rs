//! CRLF-only line framer for SMTP command lines and SASL responses.
//!
//! SMTP lines end in CRLF and nothing else (RFC 5321 §2.3.8). A relay that
//! accepts other line endings than its upstream does can be made to desync
//! (SMTP smuggling), so this framer reports every bare CR or LF as an error
//! event instead of silently treating it as a line end. It also never keeps
//! more than `max_len` bytes of an unfinished line in the caller's buffer: the
//! excess of an over-long line is discarded as it arrives and the line is
//! reported as [`LineEvent::TooLong`] once its end shows up.

use bytes::{Buf, Bytes, BytesMut};

/// One framed line, or the reason a line could not be used.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LineEvent {
    /// A complete line terminated by CRLF; the CRLF is not included.
    Line(Bytes),
    /// A line longer than the limit (CRLF included); its bytes were discarded.
    TooLong,
    /// A line ended by a bare LF, or containing a CR not followed by LF.
    BareLineEnding,
}

/// Splits a byte stream into CRLF-terminated lines with a hard length cap.
#[derive(Debug, Clone)]
pub struct LineFramer {
    max_len: usize,
    /// True while the bytes of an over-long line are being thrown away.
    discarding: bool,
}

impl LineFramer {
    /// Creates a framer accepting lines of at most `max_len` octets including
    /// the CRLF (at least 2; smaller values are raised to 2).
    pub fn new(max_len: usize) -> Self {
        LineFramer {
            max_len: max_len.max(2),
            discarding: false,
        }
    }

    /// Changes the limit, e.g. to 12288 octets while in an AUTH exchange
    /// (RFC 4954 §4). Takes effect for the line currently being assembled.
    pub fn set_max_len(&mut self, max_len: usize) {
        self.max_len = max_len.max(2);
    }

    /// The current limit in octets including CRLF.
    pub fn max_len(&self) -> usize {
        self.max_len
    }

    /// Forgets any partially discarded over-long line (e.g. after STARTTLS,
    /// when the caller also clears its buffer).
    pub fn reset(&mut self) {
        self.discarding = false;
    }

    /// Takes the next line out of `buf` (consuming bytes from its front), or
    /// `None` if no complete line is there yet.
    ///
    /// A line ends at CRLF. A bare LF (not preceded by CR) also ends the line
    /// but yields [`LineEvent::BareLineEnding`]; a CR not followed by LF inside
    /// a line makes that line `BareLineEnding` when it ends. A line over
    /// `max_len` yields [`LineEvent::TooLong`] once its end finally arrives; the
    /// excess bytes are discarded as they come, so after this returns `None`
    /// `buf` holds at most `max_len - 1` bytes. An over-long line is reported
    /// as `TooLong` even if it also had a bare line ending.
    pub fn next_line(&mut self, buf: &mut BytesMut) -> Option<LineEvent> {
        match memchr::memchr(b'\n', buf) {
            Some(lf) => {
                let line = buf.split_to(lf + 1);
                if std::mem::take(&mut self.discarding) || lf + 1 > self.max_len {
                    return Some(LineEvent::TooLong);
                }
                let crlf = lf > 0 && line[lf - 1] == b'\r';
                if !crlf {
                    return Some(LineEvent::BareLineEnding);
                }
                let content = &line[..lf - 1];
                if content.contains(&b'\r') {
                    return Some(LineEvent::BareLineEnding);
                }
                let mut line = line.freeze();
                line.truncate(lf - 1);
                Some(LineEvent::Line(line))
            }
            None => {
                // Without an LF in the first `max_len` bytes the line cannot
                // fit any more: its LF would sit at index >= max_len.
                if self.discarding || buf.len() >= self.max_len {
                    self.discarding = true;
                    buf.advance(buf.len());
                }
                None
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn lines(framer: &mut LineFramer, input: &[u8]) -> Vec<LineEvent> {
        let mut buf = BytesMut::from(input);
        let mut out = Vec::new();
        while let Some(ev) = framer.next_line(&mut buf) {
            out.push(ev);
        }
        out
    }

    fn line(s: &str) -> LineEvent {
        LineEvent::Line(Bytes::copy_from_slice(s.as_bytes()))
    }

    #[test]
    fn splits_on_crlf_and_keeps_rest() {
        let mut f = LineFramer::new(512);
        let mut buf = BytesMut::from(&b"EHLO a\r\nMAIL FROM:<>\r\nRCPT"[..]);
        assert_eq!(f.next_line(&mut buf), Some(line("EHLO a")));
        assert_eq!(f.next_line(&mut buf), Some(line("MAIL FROM:<>")));
        assert_eq!(f.next_line(&mut buf), None);
        assert_eq!(&buf[..], b"RCPT");
    }

    #[test]
    fn empty_line() {
        let mut f = LineFramer::new(512);
        assert_eq!(lines(&mut f, b"\r\n"), vec![line("")]);
    }

    #[test]
    fn bare_lf_ends_line_as_error() {
        let mut f = LineFramer::new(512);
        assert_eq!(
            lines(&mut f, b"RCPT TO:<a@b>\nQUIT\r\n"),
            vec![LineEvent::BareLineEnding, line("QUIT")]
        );
        assert_eq!(lines(&mut f, b"\n"), vec![LineEvent::BareLineEnding]);
    }

    #[test]
    fn bare_cr_inside_line_is_error() {
        let mut f = LineFramer::new(512);
        assert_eq!(
            lines(&mut f, b"NOOP\rRSET\r\nQUIT\r\n"),
            vec![LineEvent::BareLineEnding, line("QUIT")]
        );
        // CR CR LF: the first CR is bare.
        assert_eq!(
            lines(&mut f, b"NOOP\r\r\n"),
            vec![LineEvent::BareLineEnding]
        );
    }

    #[test]
    fn cr_at_buffer_end_waits() {
        let mut f = LineFramer::new(512);
        let mut buf = BytesMut::from(&b"NOOP\r"[..]);
        assert_eq!(f.next_line(&mut buf), None);
        buf.extend_from_slice(b"\n");
        assert_eq!(f.next_line(&mut buf), Some(line("NOOP")));
    }

    #[test]
    fn exact_limit_fits_one_more_does_not() {
        let mut f = LineFramer::new(6);
        assert_eq!(lines(&mut f, b"ABCD\r\n"), vec![line("ABCD")]);
        assert_eq!(
            lines(&mut f, b"ABCDE\r\nOK\r\n"),
            vec![LineEvent::TooLong, line("OK")]
        );
    }

    #[test]
    fn too_long_discards_as_it_goes() {
        let mut f = LineFramer::new(8);
        let mut buf = BytesMut::new();
        for _ in 0..100 {
            buf.extend_from_slice(b"xxxxxxx");
            assert_eq!(f.next_line(&mut buf), None);
            assert!(buf.len() < 8, "buffer grew to {}", buf.len());
        }
        buf.extend_from_slice(b"\r\nQUIT\r\n");
        assert_eq!(f.next_line(&mut buf), Some(LineEvent::TooLong));
        assert_eq!(f.next_line(&mut buf), Some(line("QUIT")));
    }

    #[test]
    fn too_long_ended_by_bare_lf_is_too_long() {
        let mut f = LineFramer::new(4);
        assert_eq!(
            lines(&mut f, b"abcdefgh\nOK\r\n"),
            vec![LineEvent::TooLong, line("OK")]
        );
    }

    #[test]
    fn set_max_len_raises_limit() {
        let mut f = LineFramer::new(6);
        f.set_max_len(12288);
        assert_eq!(f.max_len(), 12288);
        assert_eq!(lines(&mut f, b"ABCDEFGHIJ\r\n"), vec![line("ABCDEFGHIJ")]);
    }

    #[test]
    fn reset_forgets_discarding() {
        let mut f = LineFramer::new(4);
        let mut buf = BytesMut::from(&b"abcdefgh"[..]);
        assert_eq!(f.next_line(&mut buf), None);
        f.reset();
        let mut buf = BytesMut::from(&b"ok\r\n"[..]);
        assert_eq!(f.next_line(&mut buf), Some(line("ok")));
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        /// Any split of an input into chunks yields the same events.
        #[test]
        fn chunking_does_not_matter(
            input in proptest::collection::vec(
                prop_oneof![Just(b'\r'), Just(b'\n'), Just(b'a'), any::<u8>()], 0..200),
            cuts in proptest::collection::vec(0usize..200, 0..10),
            max in 2usize..40,
        ) {
            let whole = lines(&mut LineFramer::new(max), &input);
            let mut f = LineFramer::new(max);
            let mut buf = BytesMut::new();
            let mut got = Vec::new();
            let mut cuts: Vec<usize> = cuts.into_iter().map(|c| c.min(input.len())).collect();
            cuts.sort_unstable();
            let mut prev = 0;
            for c in cuts.into_iter().chain(std::iter::once(input.len())) {
                buf.extend_from_slice(&input[prev..c]);
                prev = c;
                while let Some(ev) = f.next_line(&mut buf) {
                    got.push(ev);
                }
                prop_assert!(buf.len() < max);
            }
            prop_assert_eq!(got, whole);
        }

        /// Lines that come out never contain CR or LF and respect the cap.
        #[test]
        fn lines_are_clean(input in proptest::collection::vec(any::<u8>(), 0..300), max in 2usize..64) {
            for ev in lines(&mut LineFramer::new(max), &input) {
                if let LineEvent::Line(l) = ev {
                    prop_assert!(!l.contains(&b'\r') && !l.contains(&b'\n'));
                    prop_assert!(l.len() + 2 <= max);
                }
            }
        }
    }
}
