//! SMTP replies: parsing complete (multi-line) replies from upstream and
//! formatting floodgate's own (RFC 5321 §4.2).

use bytes::{Buf, BytesMut};
use thiserror::Error;

/// Default cap on one reply line, CRLF included. RFC 5321 says 512; real
/// servers stay below that, the slack only tolerates long EHLO/AUTH lines.
pub const DEFAULT_MAX_REPLY_LINE: usize = 4096;
/// Default cap on the number of lines of one reply.
pub const DEFAULT_MAX_REPLY_LINES: usize = 128;

/// An SMTP reply: a three-digit code and the text of each line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reply {
    /// The reply code, 200..=599.
    pub code: u16,
    /// Text of each line, after "ddd-" / "ddd "; possibly empty.
    pub lines: Vec<String>,
}

impl Reply {
    /// A one-line reply. `text` may start with an enhanced status code
    /// ("4.7.1 ..."); it is never checked against the code.
    pub fn new(code: u16, text: impl Into<String>) -> Self {
        Reply {
            code,
            lines: vec![text.into()],
        }
    }

    /// A multi-line reply.
    pub fn multi<I, S>(code: u16, lines: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        Reply {
            code,
            lines: lines.into_iter().map(Into::into).collect(),
        }
    }

    /// The wire form, e.g. `"250-a\r\n250 b\r\n"`.
    ///
    /// Control characters other than TAB in the text (CR and LF above all)
    /// are written as spaces, so no text can break the reply framing. An
    /// empty last line (or a reply without lines) is written as the bare code
    /// (RFC 5321 `Reply-code [ SP textstring ] CRLF`), except for the AUTH
    /// continuation 334, which RFC 4954 writes `"334" SP [base64] CRLF`: its
    /// space is always there, because clients wait for `334 ` before sending
    /// their response. The code is written modulo 1000 with three digits so
    /// the output is always well-formed.
    pub fn to_wire(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.lines.iter().map(|l| l.len() + 6).sum::<usize>() + 6);
        self.write_to(&mut out);
        out
    }

    /// Appends [`to_wire`](Self::to_wire)'s bytes to `out` without an allocation of its own
    /// (the session queues every reply this way).
    pub fn write_to(&self, out: &mut Vec<u8>) {
        let code = self.code % 1000;
        let digits = [
            b'0' + (code / 100) as u8,
            b'0' + (code / 10 % 10) as u8,
            b'0' + (code % 10) as u8,
        ];
        // RFC 4954 §4: a server challenge is `"334" SP [base64] CRLF`, space included
        // even when the challenge is empty.
        let bare_code_allowed = code != 334;
        let n = self.lines.len();
        if n == 0 {
            out.extend_from_slice(&digits);
            if !bare_code_allowed {
                out.push(b' ');
            }
            out.extend_from_slice(b"\r\n");
            return;
        }
        for (i, line) in self.lines.iter().enumerate() {
            let last = i + 1 == n;
            out.extend_from_slice(&digits);
            if last && line.is_empty() && bare_code_allowed {
                out.extend_from_slice(b"\r\n");
                continue;
            }
            out.push(if last { b' ' } else { b'-' });
            let control = |b: u8| b < 0x20 && b != b'\t' || b == 0x7f;
            let text = line.as_bytes();
            if text.iter().any(|&b| control(b)) {
                out.extend(text.iter().map(|&b| if control(b) { b' ' } else { b }));
            } else {
                out.extend_from_slice(text);
            }
            out.extend_from_slice(b"\r\n");
        }
    }

    /// The first digit of the code: 2, 3, 4 or 5.
    pub fn class(&self) -> u8 {
        (self.code / 100) as u8
    }

    /// 2yz (positive completion) or 3yz (positive intermediate, e.g. 354, 334).
    pub fn is_positive(&self) -> bool {
        matches!(self.class(), 2 | 3)
    }

    /// 2yz only: the command succeeded.
    pub fn is_completion(&self) -> bool {
        self.class() == 2
    }

    /// 3yz only: more input is expected (354 for DATA, 334 for AUTH).
    pub fn is_intermediate(&self) -> bool {
        self.class() == 3
    }

    /// 4yz: transient negative.
    pub fn is_transient(&self) -> bool {
        self.class() == 4
    }

    /// 5yz: permanent negative.
    pub fn is_permanent(&self) -> bool {
        self.class() == 5
    }

    /// The enhanced status code (RFC 3463) at the start of the last line.
    pub fn enhanced(&self) -> Option<(u8, u16, u16)> {
        parse_enhanced(self.lines.last()?)
    }

    /// The text of all lines joined by a space (for logs).
    pub fn text(&self) -> String {
        self.lines.join(" ")
    }
}

/// Parses "c.sss.ddd" at the start of `text`, followed by a space or the end.
fn parse_enhanced(text: &str) -> Option<(u8, u16, u16)> {
    let word = text.split(' ').next()?;
    let mut parts = word.split('.');
    let (c, s, d) = (parts.next()?, parts.next()?, parts.next()?);
    if parts.next().is_some() {
        return None;
    }
    let num = |p: &str, max: usize| -> Option<u16> {
        if p.is_empty() || p.len() > max || !p.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        p.parse().ok()
    };
    let class = num(c, 1)? as u8;
    if !matches!(class, 2 | 4 | 5) {
        return None;
    }
    Some((class, num(s, 3)?, num(d, 3)?))
}

/// Why upstream's reply stream could not be parsed. The stream is then out
/// of sync; the session should answer 421 and close.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum ReplyError {
    /// A line ended in a bare LF or contained a bare CR.
    #[error("reply line not terminated by CRLF")]
    NotCrlf,
    /// The first three octets were not a valid reply code.
    #[error("malformed reply code")]
    BadCode,
    /// The octet after the code was neither SP, '-' nor the line end.
    #[error("malformed reply line separator")]
    BadSeparator,
    /// Lines of one reply carried different codes.
    #[error("reply code {got} in a reply that began with {first}")]
    CodeMismatch {
        /// Code of the first line.
        first: u16,
        /// Code of the offending line.
        got: u16,
    },
    /// A line exceeded the line cap.
    #[error("reply line too long")]
    LineTooLong,
    /// The reply exceeded the line-count cap.
    #[error("reply has too many lines")]
    TooManyLines,
}

/// Incremental parser for replies coming from upstream.
#[derive(Debug, Clone)]
pub struct ReplyParser {
    max_line: usize,
    max_lines: usize,
    code: Option<u16>,
    lines: Vec<String>,
    /// Emptied line strings of replies given back with [`ReplyParser::recycle`].
    spare: Vec<String>,
}

/// Most line strings [`ReplyParser::recycle`] keeps, and the largest it keeps (octets of
/// capacity): enough for the one-line replies of a transaction, never an EHLO's worth.
const SPARE_LINES: usize = 4;
const SPARE_LINE_CAPACITY: usize = 512;

impl Default for ReplyParser {
    fn default() -> Self {
        Self::new()
    }
}

impl ReplyParser {
    /// A parser with the default caps.
    pub fn new() -> Self {
        Self::with_limits(DEFAULT_MAX_REPLY_LINE, DEFAULT_MAX_REPLY_LINES)
    }

    /// A parser with explicit caps: octets per line (CRLF included) and lines
    /// per reply.
    pub fn with_limits(max_line: usize, max_lines: usize) -> Self {
        ReplyParser {
            max_line: max_line.max(6),
            max_lines: max_lines.max(1),
            code: None,
            lines: Vec::new(),
            spare: Vec::new(),
        }
    }

    /// Gives a reply that is no longer needed back to the parser, whose next replies reuse
    /// its line vector and strings instead of allocating (a session relays several replies
    /// per message). Purely an optimisation: parsing is the same with or without it.
    pub fn recycle(&mut self, mut reply: Reply) {
        for mut line in reply.lines.drain(..) {
            if self.spare.len() < SPARE_LINES && line.capacity() <= SPARE_LINE_CAPACITY {
                line.clear();
                self.spare.push(line);
            }
        }
        // Only into an empty parser: a partial multi-line reply keeps its own vector.
        if self.lines.capacity() == 0 && reply.lines.capacity() <= SPARE_LINES {
            self.lines = reply.lines;
        }
    }

    /// Next complete reply from the front of `buf`, `None` if incomplete.
    ///
    /// Complete lines are consumed from `buf` as they are read, so a partial
    /// multi-line reply is held inside the parser. After an error the parser
    /// is reset, but the stream should be considered broken.
    pub fn parse(&mut self, buf: &mut BytesMut) -> Result<Option<Reply>, ReplyError> {
        let r = self.parse_inner(buf);
        if r.is_err() {
            self.code = None;
            self.lines.clear();
        }
        r
    }

    fn parse_inner(&mut self, buf: &mut BytesMut) -> Result<Option<Reply>, ReplyError> {
        loop {
            let Some(end) = self.line_end(buf)? else {
                return Ok(None);
            };
            let (code, last, text) = parse_line(&buf[..end])?;
            let mut line = self.spare.pop().unwrap_or_default();
            push_lossy(&mut line, text);
            buf.advance(end + 2);
            match self.code {
                None => {
                    self.code = Some(code);
                    // The first line of a multi-line reply (an EHLO list, most often): room
                    // for a list's lines at once rather than by doubling.
                    if !last {
                        self.lines.reserve(MULTI_LINE_RESERVE.min(self.max_lines));
                    }
                }
                Some(first) if first != code => {
                    return Err(ReplyError::CodeMismatch { first, got: code })
                }
                Some(_) => {}
            }
            if self.lines.len() >= self.max_lines {
                return Err(ReplyError::TooManyLines);
            }
            self.lines.push(line);
            if last {
                let code = self.code.take().unwrap_or(code);
                return Ok(Some(Reply {
                    code,
                    lines: std::mem::take(&mut self.lines),
                }));
            }
        }
    }

    /// Where the first line of `buf` ends: the offset of its CR, which an LF follows. `None`
    /// while the line is incomplete.
    fn line_end(&self, buf: &[u8]) -> Result<Option<usize>, ReplyError> {
        // A line without its end yet: too long already, or wait for more.
        let incomplete = || {
            if buf.len() >= self.max_line {
                Err(ReplyError::LineTooLong)
            } else {
                Ok(None)
            }
        };
        // One scan for the first CR or LF: a CR followed by LF ends the line, as nearly
        // every line does.
        match memchr::memchr2(b'\r', b'\n', buf) {
            Some(cr) if buf[cr] == b'\r' && buf.get(cr + 1) == Some(&b'\n') => {
                if cr + 2 > self.max_line {
                    return Err(ReplyError::LineTooLong);
                }
                Ok(Some(cr))
            }
            // A CR last in the buffer, its LF yet to come.
            Some(cr) if cr + 1 == buf.len() && buf[cr] == b'\r' => incomplete(),
            None => incomplete(),
            // A bare LF, or a CR inside the line: the line is judged once its LF is here.
            Some(_) => match memchr::memchr(b'\n', buf) {
                None => incomplete(),
                Some(lf) if lf + 1 > self.max_line => Err(ReplyError::LineTooLong),
                Some(_) => Err(ReplyError::NotCrlf),
            },
        }
    }
}

/// Lines reserved at the first line of a multi-line reply: a typical EHLO list's.
const MULTI_LINE_RESERVE: usize = 12;

/// Appends `text` to `out`, invalid UTF-8 replaced as `String::from_utf8_lossy` does
/// (checked with `from_utf8` first: replies are nearly always ASCII).
fn push_lossy(out: &mut String, text: &[u8]) {
    match std::str::from_utf8(text) {
        Ok(t) => out.push_str(t),
        Err(_) => out.push_str(&String::from_utf8_lossy(text)),
    }
}

/// Parses one reply line without CRLF into (code, is_last, text).
fn parse_line(line: &[u8]) -> Result<(u16, bool, &[u8]), ReplyError> {
    if line.len() < 3 {
        return Err(ReplyError::BadCode);
    }
    let (d0, d1, d2) = (line[0], line[1], line[2]);
    if !(b'2'..=b'5').contains(&d0) || !(b'0'..=b'5').contains(&d1) || !d2.is_ascii_digit() {
        return Err(ReplyError::BadCode);
    }
    let code = u16::from(d0 - b'0') * 100 + u16::from(d1 - b'0') * 10 + u16::from(d2 - b'0');
    let (last, text) = match line.get(3) {
        None => (true, &[][..]),
        Some(b' ') => (true, &line[4..]),
        Some(b'-') => (false, &line[4..]),
        Some(_) => return Err(ReplyError::BadSeparator),
    };
    Ok((code, last, text))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn parse_all(input: &[u8]) -> Result<Vec<Reply>, ReplyError> {
        let mut p = ReplyParser::new();
        let mut buf = BytesMut::from(input);
        let mut out = Vec::new();
        while let Some(r) = p.parse(&mut buf)? {
            out.push(r);
        }
        Ok(out)
    }

    #[test]
    fn control_characters_in_a_line_go_out_as_spaces() {
        let r = Reply {
            code: 550,
            lines: vec![
                "a\x00b\x1bc\x7fd\te".to_string(),
                "plain text".to_string(),
                "\r\n".to_string(),
            ],
        };
        assert_eq!(
            r.to_wire(),
            b"550-a b c d\te\r\n550-plain text\r\n550   \r\n".to_vec()
        );
        let mut out = b"x".to_vec();
        Reply::new(250, "ok").write_to(&mut out);
        assert_eq!(out, b"x250 ok\r\n");
    }

    #[test]
    fn single_and_multi_line() {
        let got =
            parse_all(b"220 mx ESMTP\r\n250-mx\r\n250-PIPELINING\r\n250 SIZE 10\r\n").unwrap();
        assert_eq!(got[0], Reply::new(220, "mx ESMTP"));
        assert_eq!(got[1], Reply::multi(250, ["mx", "PIPELINING", "SIZE 10"]));
    }

    #[test]
    fn invalid_utf8_is_replaced_as_lossy() {
        let got = parse_all(b"250-a\xffb\r\n250 \xc3\xa9\xc3\r\n").unwrap();
        assert_eq!(
            got,
            vec![Reply::multi(250, ["a\u{FFFD}b", "\u{e9}\u{FFFD}"])]
        );
    }

    #[test]
    fn recycled_strings_start_empty() {
        let mut p = ReplyParser::new();
        p.recycle(Reply::multi(250, ["long text here", "more"]));
        let mut buf = BytesMut::from(&b"250 ok\r\n"[..]);
        assert_eq!(p.parse(&mut buf), Ok(Some(Reply::new(250, "ok"))));
    }

    #[test]
    fn code_only_line() {
        assert_eq!(parse_all(b"250\r\n").unwrap(), vec![Reply::new(250, "")]);
    }

    #[test]
    fn incomplete_reply_waits_and_resumes() {
        let mut p = ReplyParser::new();
        let mut buf = BytesMut::from(&b"250-a\r\n250 b"[..]);
        assert_eq!(p.parse(&mut buf), Ok(None));
        buf.extend_from_slice(b"\r\n354 go\r\n");
        assert_eq!(p.parse(&mut buf), Ok(Some(Reply::multi(250, ["a", "b"]))));
        assert_eq!(p.parse(&mut buf), Ok(Some(Reply::new(354, "go"))));
        assert!(buf.is_empty());
    }

    #[test]
    fn errors() {
        assert_eq!(parse_all(b"250 ok\n"), Err(ReplyError::NotCrlf));
        assert_eq!(parse_all(b"250 o\rk\r\n"), Err(ReplyError::NotCrlf));
        assert_eq!(parse_all(b"25 ok\r\n"), Err(ReplyError::BadCode));
        assert_eq!(parse_all(b"199 ok\r\n"), Err(ReplyError::BadCode));
        assert_eq!(parse_all(b"2x0 ok\r\n"), Err(ReplyError::BadCode));
        assert_eq!(parse_all(b"260 ok\r\n"), Err(ReplyError::BadCode));
        assert_eq!(parse_all(b"250_ok\r\n"), Err(ReplyError::BadSeparator));
        assert_eq!(
            parse_all(b"250-a\r\n251 b\r\n"),
            Err(ReplyError::CodeMismatch {
                first: 250,
                got: 251
            })
        );
        let long = format!("250 {}\r\n", "x".repeat(5000));
        assert_eq!(parse_all(long.as_bytes()), Err(ReplyError::LineTooLong));
        let unterminated = format!("250 {}", "x".repeat(5000));
        assert_eq!(
            parse_all(unterminated.as_bytes()),
            Err(ReplyError::LineTooLong)
        );
        let many = "250-x\r\n".repeat(200);
        assert_eq!(parse_all(many.as_bytes()), Err(ReplyError::TooManyLines));
    }

    #[test]
    fn wire_form() {
        assert_eq!(Reply::new(250, "2.0.0 Ok").to_wire(), b"250 2.0.0 Ok\r\n");
        assert_eq!(
            Reply::multi(250, ["a", "b"]).to_wire(),
            b"250-a\r\n250 b\r\n"
        );
        assert_eq!(Reply::new(250, "").to_wire(), b"250\r\n");
        assert_eq!(
            Reply::multi(250, Vec::<String>::new()).to_wire(),
            b"250\r\n"
        );
        assert_eq!(
            Reply::new(550, "evil\r\n250 injected").to_wire(),
            b"550 evil  250 injected\r\n"
        );
    }

    #[test]
    fn empty_auth_continuation_keeps_its_space() {
        // RFC 4954: `"334" SP [base64] CRLF`; s-nail waits for "334 " after AUTH PLAIN.
        assert_eq!(Reply::new(334, "").to_wire(), b"334 \r\n");
        assert_eq!(
            Reply::multi(334, Vec::<String>::new()).to_wire(),
            b"334 \r\n"
        );
        assert_eq!(
            Reply::new(334, "VXNlcm5hbWU6").to_wire(),
            b"334 VXNlcm5hbWU6\r\n"
        );
        // As Postfix sends it, parsed and written again: the space survives.
        let relayed = parse_all(b"334 \r\n").unwrap();
        assert_eq!(relayed, vec![Reply::new(334, "")]);
        assert_eq!(relayed[0].to_wire(), b"334 \r\n");
        // And a server that forgot the space gets it added on the way to the client.
        assert_eq!(parse_all(b"334\r\n").unwrap()[0].to_wire(), b"334 \r\n");
        // Other codes keep RFC 5321's bare form.
        assert_eq!(Reply::new(354, "").to_wire(), b"354\r\n");
        assert_eq!(Reply::new(235, "").to_wire(), b"235\r\n");
    }

    #[test]
    fn classes_and_enhanced() {
        let r = Reply::new(451, "4.7.1 slow down");
        assert_eq!(r.class(), 4);
        assert!(r.is_transient() && !r.is_positive() && !r.is_permanent());
        assert_eq!(r.enhanced(), Some((4, 7, 1)));
        assert!(Reply::new(354, "go").is_positive());
        assert!(Reply::new(354, "go").is_intermediate());
        assert!(!Reply::new(354, "go").is_completion());
        assert!(Reply::new(250, "").is_completion());
        assert!(Reply::new(554, "5.7.1 no").is_permanent());
        assert_eq!(
            Reply::multi(250, ["x", "2.1.0 ok"]).enhanced(),
            Some((2, 1, 0))
        );
        assert_eq!(Reply::new(250, "2.1.0").enhanced(), Some((2, 1, 0)));
        assert_eq!(Reply::new(250, "3.1.0 x").enhanced(), None);
        assert_eq!(Reply::new(250, "2.1 x").enhanced(), None);
        assert_eq!(Reply::new(250, "2.1000.0 x").enhanced(), None);
        assert_eq!(Reply::new(250, "2.1.0.1 x").enhanced(), None);
        assert_eq!(Reply::new(250, "ok").enhanced(), None);
        assert_eq!(Reply::multi(250, ["2.1.0 x", "y"]).text(), "2.1.0 x y");
    }

    fn reply_strategy() -> impl Strategy<Value = Reply> {
        (200u16..=559, proptest::collection::vec("[ -~]{0,40}", 1..6))
            .prop_filter("valid code", |(c, _)| (c / 10) % 10 <= 5)
            .prop_map(|(code, lines)| Reply { code, lines })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        #[test]
        fn wire_round_trip(r in reply_strategy()) {
            // An empty last line is written as "ddd" and read back as empty.
            let got = parse_all(&r.to_wire()).unwrap();
            prop_assert_eq!(got, vec![r]);
        }

        #[test]
        fn chunking_does_not_matter(rs in proptest::collection::vec(reply_strategy(), 1..4),
                                    cut in 0usize..400) {
            let wire: Vec<u8> = rs.iter().flat_map(|r| r.to_wire()).collect();
            let cut = cut.min(wire.len());
            let mut p = ReplyParser::new();
            let mut buf = BytesMut::from(&wire[..cut]);
            let mut got = Vec::new();
            while let Some(r) = p.parse(&mut buf).unwrap() { got.push(r); }
            buf.extend_from_slice(&wire[cut..]);
            while let Some(r) = p.parse(&mut buf).unwrap() { got.push(r); }
            prop_assert_eq!(got, rs);
        }

        /// Replies given back with `recycle` (whatever their lines) never change what is
        /// parsed next, invalid UTF-8 included.
        #[test]
        fn recycling_does_not_matter(rs in proptest::collection::vec(reply_strategy(), 1..6),
                                     junk in proptest::collection::vec(any::<u8>(), 0..40)) {
            let mut wire: Vec<u8> = rs.iter().flat_map(|r| r.to_wire()).collect();
            wire.extend_from_slice(b"250 ");
            wire.extend_from_slice(&junk.iter().map(|&b| if b == b'\r' || b == b'\n' { b'x' } else { b }).collect::<Vec<_>>());
            wire.extend_from_slice(b"\r\n");
            let plain = parse_all(&wire).unwrap();
            let mut p = ReplyParser::new();
            let mut buf = BytesMut::from(&wire[..]);
            let mut got = Vec::new();
            while let Some(r) = p.parse(&mut buf).unwrap() {
                got.push(r.clone());
                p.recycle(r);
            }
            prop_assert_eq!(got, plain);
        }

        /// Every reply's last line is the code followed by SP or CRLF, and a 334 always
        /// by SP (RFC 4954), whatever its text.
        #[test]
        fn last_line_separator(code in 200u16..=559, lines in proptest::collection::vec("[ -~]{0,8}", 0..4)) {
            let wire = Reply { code, lines }.to_wire();
            let body = &wire[..wire.len() - 2];
            let start = body.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
            let last = &body[start..];
            prop_assert!(last.len() == 3 || last[3] == b' ', "{:?}", String::from_utf8_lossy(&wire));
            if code == 334 {
                prop_assert_eq!(last.get(3), Some(&b' '));
            }
        }

        #[test]
        fn never_panics(input in proptest::collection::vec(any::<u8>(), 0..300)) {
            let _ = parse_all(&input);
        }

        /// The one scan for CR or LF ends and judges each line as reading up to its LF and
        /// then checking the CR before it does, whatever the bytes, the line cap and the
        /// points where the stream is cut.
        #[test]
        fn line_ends_are_judged_as_by_the_lf(
            input in proptest::collection::vec(
                prop_oneof![Just(b'\r'), Just(b'\n'), Just(b'2'), Just(b'5'), Just(b'-'), Just(b' '), Just(b'x')],
                0..60),
            max_line in 6usize..20,
            cuts in proptest::collection::vec(0usize..60, 0..4),
        ) {
            let mut cuts: Vec<usize> = cuts.into_iter().filter(|&c| c <= input.len()).collect();
            cuts.sort_unstable();
            cuts.push(input.len());
            let p = ReplyParser::with_limits(max_line, 8);
            let mut buf = BytesMut::new();
            let mut from = 0;
            for cut in cuts {
                buf.extend_from_slice(&input[from..cut]);
                from = cut;
                loop {
                    let expected = line_end_by_lf(max_line, &buf);
                    prop_assert_eq!(p.line_end(&buf), expected.clone());
                    match expected {
                        Ok(Some(end)) => buf.advance(end + 2),
                        _ => break,
                    }
                }
                if p.line_end(&buf).is_err() {
                    break;
                }
            }
        }
    }

    /// How a line's end was found before the one scan: the first LF, then the CR before it.
    fn line_end_by_lf(max_line: usize, buf: &[u8]) -> Result<Option<usize>, ReplyError> {
        let Some(lf) = buf.iter().position(|&b| b == b'\n') else {
            if buf.len() >= max_line {
                return Err(ReplyError::LineTooLong);
            }
            return Ok(None);
        };
        if lf + 1 > max_line {
            return Err(ReplyError::LineTooLong);
        }
        if lf == 0 || buf[lf - 1] != b'\r' || buf[..lf - 1].contains(&b'\r') {
            return Err(ReplyError::NotCrlf);
        }
        Ok(Some(lf - 1))
    }
}
