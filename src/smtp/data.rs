//! DATA framing (RFC 5321 §4.1.4, §4.5.2): the end-of-data line, dot
//! (un)stuffing, and the SMTP smuggling defence.
//!
//! End of data is CRLF "." CRLF, where the start of DATA counts as
//! following a CRLF. Lines are ended by CRLF; a bare CR (not followed by LF)
//! or a bare LF also ends a line, but such a line is never part of an
//! end-of-data sequence: `\n.\n`, `\r.\r`, `\r\n.\r`, `\n.\r\n` and
//! `.\r\r\n` all keep the stream in DATA.
//!
//! One exception, as Exim makes it: a message whose first line is a header field
//! ended by a bare LF comes from a client that ends every line with LF alone, and
//! such a client ends its message with LF "." LF too. That message is *LF-only*
//! ([`LineMode::LfOnly`]): a "." line begun after a line end that is not a bare CR
//! and ended by LF (bare or CRLF) ends it. A message whose first line ends in CRLF
//! never ends at a bare LF, so the smuggling payloads above stay message text
//! inside it. Either way floodgate re-frames what it relays, so upstream ends the
//! message exactly where floodgate did.
//!
//! The decoded body is always canonical (every line ends in CRLF), so upstream
//! never sees a bare CR or LF whatever the client sent; with
//! [`BarePolicy::Reject`] such messages are also flagged so the session can
//! refuse them.

use std::borrow::Cow;
use std::ops::Range;

use super::clean_lines::clean_run;
use super::reply::Reply;

/// What to do with bare CR / bare LF line endings inside a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BarePolicy {
    /// Flag the message ([`DataOutcome::bare_line_ending`]) so it is refused.
    Reject,
    /// Accept it, writing every bare CR or LF as CRLF.
    Normalize,
}

/// How a message ends its lines, decided by its first line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum LineMode {
    /// The first line has not ended yet.
    #[default]
    Undecided,
    /// Only CRLF "." CRLF ends the message (every message whose first line is not a
    /// header field ended by a bare LF).
    Crlf,
    /// The first line is a header field ended by a bare LF: LF "." LF ends the
    /// message too.
    LfOnly,
}

/// What the decoder saw in one message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct DataOutcome {
    /// Octets of the unstuffed, normalised message (CRLFs included), counted
    /// in full even past `max_size`.
    pub size: u64,
    /// A bare CR or LF was seen and the policy is [`BarePolicy::Reject`].
    pub bare_line_ending: bool,
    /// A bare CR or LF was seen and written as CRLF ([`BarePolicy::Normalize`]).
    pub normalized: bool,
    /// A line was longer than the line limit (CRLF included).
    pub line_too_long: bool,
    /// The message exceeded `max_size`; the body holds only its first octets.
    pub too_big: bool,
    /// The end-of-data line has been consumed.
    pub complete: bool,
    /// How the message ends its lines (decided at the end of its first line).
    pub mode: LineMode,
}

impl DataOutcome {
    /// The reply refusing this message, or `None` if it may be relayed.
    /// Size comes first (552 5.3.4), then bare line endings (550 5.5.2, as
    /// Postfix answers), then over-long lines (554 5.6.0: a content limit,
    /// never the command-syntax 500).
    pub fn rejection(&self) -> Option<Reply> {
        if self.too_big {
            Some(Reply::new(
                552,
                "5.3.4 Message size exceeds fixed maximum message size",
            ))
        } else if self.bare_line_ending {
            Some(Reply::new(550, "5.5.2 Message contains bare <CR> or <LF>"))
        } else if self.line_too_long {
            Some(Reply::new(
                554,
                "5.6.0 Message contains a line longer than the limit",
            ))
        } else {
            None
        }
    }
}

/// How the current line was begun.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum LineStart {
    /// After CRLF or at the start of DATA: "." CRLF here ends the message.
    Clean,
    /// After a bare LF: "." here ends only an LF-only message.
    BareLf,
    /// After a bare CR: "." here is only a (stuffed) line.
    BareCr,
}

/// How a line ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ending {
    /// CRLF, at `input[end - 2..end]`.
    Crlf(usize),
    /// A LF without a CR before it.
    BareLf,
    /// A CR without a LF after it.
    BareCr,
}

/// How far the first line looks like a header field (RFC 5322 §2.2: a name of
/// printable ASCII other than ':', then ':').
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum FirstLine {
    /// This many octets of a field name so far.
    Name(usize),
    /// Name and ':' seen.
    Field,
    /// Not a header field.
    Other,
}

impl FirstLine {
    fn scan(mut self, text: &[u8]) -> FirstLine {
        for &b in text {
            self = match self {
                FirstLine::Name(n) if b == b':' && n > 0 => FirstLine::Field,
                FirstLine::Name(n) if (33..=126).contains(&b) && b != b':' => {
                    FirstLine::Name(n + 1)
                }
                FirstLine::Name(_) => FirstLine::Other,
                done => return done,
            };
        }
        self
    }
}

/// Streaming decoder for the body of one DATA command.
#[derive(Debug, Clone)]
pub struct DataDecoder {
    max_line_len: usize,
    bare: BarePolicy,
    max_size: u64,
    start: LineStart,
    /// Raw octets of the current line so far (a stuffing dot included).
    col: usize,
    /// The current line began with '.', which was removed.
    dot_first: bool,
    /// The previous octet was a CR whose meaning is not known yet.
    pending_cr: bool,
    /// Write the dot-stuffed wire form instead of the message ([`DataDecoder::stuffed`]).
    stuffed: bool,
    /// The wire form written so far is, octet for octet, the input consumed so far: it is
    /// left where it is instead of being copied ([`DataDecoder::held`]).
    mirror: bool,
    /// While mirroring: octets at the front of the input that are decoded but not consumed.
    scanned: usize,
    /// While mirroring: the wire form so far is the first `held` octets of the input.
    held: usize,
    /// The first line so far, while [`DataOutcome::mode`] is undecided.
    first: FirstLine,
    out: DataOutcome,
}

/// A message's dot-stuffed wire form with floodgate's end-of-data line, as
/// [`DataDecoder::take_wire`] hands it over.
#[derive(Debug)]
pub enum Wire {
    /// The client's own octets, split off its input buffer uncopied: every line of the
    /// message came as CRLF-ended text, stuffed as RFC 5321 says (what honest clients send).
    Held(bytes::BytesMut),
    /// Decoded into a buffer of its own (a line was normalised or unstuffed differently
    /// from how it came). Holds the end-of-data line too.
    Copied(Vec<u8>),
}

impl Wire {
    /// The octets to send after upstream's 354: message, then "." CRLF.
    pub fn as_bytes(&self) -> &[u8] {
        match self {
            Wire::Held(b) => b,
            Wire::Copied(v) => v,
        }
    }

    /// The message without the end-of-data line.
    pub fn message(&self) -> &[u8] {
        let all = self.as_bytes();
        &all[..all.len().saturating_sub(3)]
    }

    /// Whether the message was taken from the input buffer uncopied.
    pub fn is_held(&self) -> bool {
        matches!(self, Wire::Held(_))
    }
}

impl DataDecoder {
    /// A decoder for one message: `max_line_len` octets per line including
    /// CRLF (1000 per RFC 5321), the bare-line-ending policy, and the most
    /// octets to put into the body.
    pub fn new(max_line_len: usize, bare: BarePolicy, max_size: u64) -> Self {
        DataDecoder {
            max_line_len,
            bare,
            max_size,
            start: LineStart::Clean,
            col: 0,
            dot_first: false,
            pending_cr: false,
            stuffed: false,
            mirror: false,
            scanned: 0,
            held: 0,
            first: FirstLine::Name(0),
            out: DataOutcome::default(),
        }
    }

    /// Makes the decoder append the message already dot-stuffed for relaying: what
    /// [`encode_data`] would write for the decoded message, without its end-of-data line.
    /// One pass and one copy fewer per relayed message; sizes, limits and flags in
    /// [`DataOutcome`] still describe the message itself (stuffing dots are not counted).
    pub fn stuffed(mut self) -> Self {
        self.stuffed = true;
        self
    }

    /// Makes the decoder (already [`stuffed`](Self::stuffed)) leave the message in the
    /// input buffer for as long as its wire form is the input itself, which is the case
    /// when every line ends in CRLF and every leading dot is a stuffing dot: fed through
    /// [`feed_held`](Self::feed_held), nothing is consumed and nothing copied until
    /// [`take_wire`](Self::take_wire) splits the message off. At the first line whose wire
    /// form differs, what was held is copied into the body and decoding goes on as
    /// [`feed`](Self::feed) does.
    pub fn held(mut self) -> Self {
        self.stuffed = true;
        self.mirror = true;
        self
    }

    /// What was seen so far.
    pub fn outcome(&self) -> DataOutcome {
        self.out
    }

    /// Whether the end-of-data line has been consumed.
    pub fn is_done(&self) -> bool {
        self.out.complete
    }

    /// Consumes bytes from the front of `buf` until end of data (the line
    /// "." CRLF) or until `buf` is exhausted. Appends the unstuffed message
    /// (lines ending in CRLF) to `body`, but never more than `max_size`
    /// octets in total (beyond that it keeps reading and only counts).
    /// Returns true when end-of-data was consumed; bytes after it stay in
    /// `buf`. Once done, further calls consume nothing and return true.
    pub fn feed(&mut self, buf: &mut bytes::BytesMut, body: &mut Vec<u8>) -> bool {
        let (used, done) = self.feed_slice(buf, body);
        bytes::Buf::advance(buf, used);
        done
    }

    /// [`feed`](Self::feed) for a [`held`](Self::held) decoder: the message stays at the
    /// front of `buf` while it can (then `body` is untouched); once it cannot, `body` gets
    /// the wire form so far and input is consumed as [`feed`](Self::feed) consumes it.
    /// Returns true when end-of-data was read; then [`take_wire`](Self::take_wire).
    pub fn feed_held(&mut self, buf: &mut bytes::BytesMut, body: &mut Vec<u8>) -> bool {
        if !self.mirror {
            return self.feed(buf, body);
        }
        let (used, done) = self.feed_from(buf, self.scanned, body);
        if self.mirror {
            self.scanned = used;
        } else {
            bytes::Buf::advance(buf, used);
            self.scanned = 0;
        }
        done
    }

    /// Once [`feed_held`](Self::feed_held) returned true: the wire form with the
    /// end-of-data line, split off the front of `buf` when it was held there (bytes after
    /// it stay in `buf`), or `body` with "." CRLF appended.
    pub fn take_wire(&mut self, buf: &mut bytes::BytesMut, mut body: Vec<u8>) -> Wire {
        if self.mirror {
            let scanned = std::mem::take(&mut self.scanned);
            self.held = 0;
            // Complete, the held octets end with the end-of-data line itself; incomplete
            // (an abandoned message), they are only dropped.
            return Wire::Held(buf.split_to(scanned.min(buf.len())));
        }
        // The decoder's output always ends in CRLF (or is empty): only "." CRLF is missing.
        body.extend_from_slice(b".\r\n");
        Wire::Copied(body)
    }

    /// Like [`feed`](Self::feed) on a plain slice: returns the number of
    /// octets consumed and whether end-of-data was reached.
    pub fn feed_slice(&mut self, input: &[u8], body: &mut Vec<u8>) -> (usize, bool) {
        self.feed_from(input, 0, body)
    }

    /// Decodes `input` from `start`; returns where it stopped and whether end-of-data was
    /// reached. While mirroring, `input` is the whole input from the message's first octet,
    /// so the wire form so far is `input[..self.held]`.
    fn feed_from(&mut self, input: &[u8], start: usize, body: &mut Vec<u8>) -> (usize, bool) {
        if self.out.complete {
            return (start, true);
        }
        let mut i = start;
        while i < input.len() {
            if !self.pending_cr && self.col == 0 {
                // Whole clean lines are written as they came, in one copy (see
                // `smtp::clean_lines`).
                let run = clean_run(&input[i..], self.max_line_len);
                if run > 0 {
                    if self.out.mode == LineMode::Undecided {
                        // The first line ended in CRLF.
                        self.out.mode = LineMode::Crlf;
                    }
                    self.put(input, i..i + run, body);
                    self.start = LineStart::Clean;
                    i += run;
                    continue;
                }
            }
            if self.pending_cr {
                self.pending_cr = false;
                if input[i] == b'\n' {
                    i += 1;
                    if self.end_line(input, Ending::Crlf(i), body) {
                        return (i, true);
                    }
                } else {
                    // A bare CR ends the line; the byte is read again below.
                    self.end_line(input, Ending::BareCr, body);
                }
                continue;
            }
            if self.col == 0 && input[i] == b'.' {
                // A leading dot is never data: it is either stuffing or the
                // end-of-data line.
                self.dot_first = true;
                self.col = 1;
                // A first line starting with '.' is not read as a header field.
                self.first = FirstLine::Other;
                i += 1;
                continue;
            }
            let rest = &input[i..];
            let stop = memchr::memchr2(b'\r', b'\n', rest).unwrap_or(rest.len());
            if self.stuffed
                && self.dot_first
                && self.col == 1
                && rest.first() == Some(&b'.')
                && self.out.size < self.max_size
            {
                // The line's text starts with '.' (it came as ".."): stuffed again, with
                // the dot that came first. Only while there is room, as the text itself;
                // not counted in the size.
                self.put_dot(input, i, body);
            }
            if self.out.mode == LineMode::Undecided {
                self.first = self.first.scan(&rest[..stop]);
            }
            self.put(input, i..i + stop, body);
            self.col += stop;
            i += stop;
            if i == input.len() {
                break;
            }
            i += 1;
            if input[i - 1] == b'\r' {
                self.pending_cr = true;
            } else if self.end_line(input, Ending::BareLf, body) {
                return (i, true);
            }
        }
        (i, false)
    }

    /// Finishes the current line. Returns true if it was the end-of-data line.
    fn end_line(&mut self, input: &[u8], ending: Ending, body: &mut Vec<u8>) -> bool {
        let crlf = matches!(ending, Ending::Crlf(_));
        if self.dot_first && self.col == 1 && self.ends_data(ending) {
            self.out.complete = true;
            return true;
        }
        if self.out.mode == LineMode::Undecided {
            self.out.mode = if ending == Ending::BareLf && self.first == FirstLine::Field {
                LineMode::LfOnly
            } else {
                LineMode::Crlf
            };
        }
        if !crlf {
            match self.bare {
                BarePolicy::Reject => self.out.bare_line_ending = true,
                BarePolicy::Normalize => self.out.normalized = true,
            }
        }
        // RFC 5321 §4.5.3.1.6: the limit does not count the dot added for transparency.
        let text_len = self.col - usize::from(self.dot_first);
        if text_len + 2 > self.max_line_len {
            self.out.line_too_long = true;
        }
        match ending {
            // Mirroring, the whole input is at hand and this CRLF is in it.
            Ending::Crlf(end) if self.mirror => self.put(input, end - 2..end, body),
            _ => {
                // A CRLF the input has not got here (a bare ending), or one that may have
                // begun in an earlier input (not mirroring): written as such.
                if self.mirror {
                    self.unmirror(input, body);
                }
                self.emit(b"\r\n", body);
            }
        }
        self.start = match ending {
            Ending::Crlf(_) => LineStart::Clean,
            Ending::BareLf => LineStart::BareLf,
            Ending::BareCr => LineStart::BareCr,
        };
        self.col = 0;
        self.dot_first = false;
        false
    }

    /// Whether a line that is only "." (its text empty after the dot), begun as
    /// `self.start` says and ended by `ending`, is the end-of-data line. CRLF "." CRLF
    /// always is; in an LF-only message a "." line ended by LF and begun after a LF is
    /// too. A bare CR is never part of an end of data, and the first line of a message
    /// never ends it with a bare LF (its mode is not known yet).
    fn ends_data(&self, ending: Ending) -> bool {
        match (self.start, ending) {
            (LineStart::Clean, Ending::Crlf(_)) => true,
            (LineStart::Clean | LineStart::BareLf, Ending::Crlf(_) | Ending::BareLf) => {
                self.out.mode == LineMode::LfOnly
            }
            _ => false,
        }
    }

    /// Writes the message octets `input[range]` to the wire form. While mirroring, octets
    /// that continue the held wire form (and fit within the size limit) are only counted.
    fn put(&mut self, input: &[u8], range: Range<usize>, body: &mut Vec<u8>) {
        if range.is_empty() {
            // Nothing written (a line's text may be empty after its dot): nothing to match.
            return;
        }
        if self.mirror {
            let n = range.len() as u64;
            if range.start == self.held && n <= self.max_size.saturating_sub(self.out.size) {
                self.held = range.end;
                self.out.size += n;
                return;
            }
            self.unmirror(input, body);
        }
        self.emit(&input[range], body);
    }

    /// Writes the stuffing dot of a line whose text starts with '.', which is the dot the
    /// line came with, just before `at` (not counted in the size).
    fn put_dot(&mut self, input: &[u8], at: usize, body: &mut Vec<u8>) {
        if self.mirror {
            // Mirroring, the whole input is at hand, so the line's first dot is in it.
            if at > 0 && at - 1 == self.held {
                self.held = at;
                return;
            }
            self.unmirror(input, body);
        }
        body.push(b'.');
    }

    /// Ends mirroring: the wire form so far, `input[..held]`, is copied into `body`.
    fn unmirror(&mut self, input: &[u8], body: &mut Vec<u8>) {
        body.extend_from_slice(&input[..self.held]);
        self.mirror = false;
        self.held = 0;
    }

    fn emit(&mut self, bytes: &[u8], body: &mut Vec<u8>) {
        let n = bytes.len() as u64;
        let room = self.max_size.saturating_sub(self.out.size);
        if n > room {
            self.out.too_big = true;
        }
        let take = n.min(room) as usize;
        body.extend_from_slice(&bytes[..take]);
        self.out.size = self.out.size.saturating_add(n);
    }
}

/// Dot-stuffs `body` into `out` and appends the end-of-data line; if `body`
/// does not end in CRLF, a CRLF is added first. Any bare CR or LF in `body`
/// is written as CRLF, so the output can never contain an end-of-data
/// sequence an upstream might read differently.
pub fn encode_data(body: &[u8], out: &mut Vec<u8>) {
    out.reserve(body.len() + body.len() / 64 + 5);
    let mut at_start = true;
    let mut i = 0;
    while i < body.len() {
        if at_start && body[i] == b'.' {
            out.push(b'.');
        }
        let rest = &body[i..];
        let stop = memchr::memchr2(b'\r', b'\n', rest).unwrap_or(rest.len());
        out.extend_from_slice(&rest[..stop]);
        i += stop;
        if i == body.len() {
            at_start = false;
            break;
        }
        // CRLF counts as one line end; a bare CR or LF becomes one too.
        if body[i] == b'\r' && body.get(i + 1) == Some(&b'\n') {
            i += 2;
        } else {
            i += 1;
        }
        out.extend_from_slice(b"\r\n");
        at_start = true;
    }
    if !at_start {
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(b".\r\n");
}

/// The message a dot-stuffed wire form carries, as the runs of octets between its stuffing
/// dots: `wire` is a message in the form [`encode_data`] and [`DataDecoder::stuffed`] write,
/// without its end-of-data line, where every line that begins with '.' begins with one dot
/// more than the message has. Concatenated, the runs are the message itself, what a
/// `BDAT ... LAST` chunk carries. A message with no line beginning with '.' is one run, the
/// whole of `wire`, so it is sent as it is, uncopied.
pub fn unstuffed_runs(wire: &[u8]) -> UnstuffedRuns<'_> {
    UnstuffedRuns {
        rest: wire.strip_prefix(b".").unwrap_or(wire),
        done: false,
    }
}

/// The message a dot-stuffed wire form carries (given without its end-of-data line):
/// `wire` itself when no line of it begins with '.', else the [`unstuffed_runs`] joined.
pub fn unstuffed(wire: &[u8]) -> Cow<'_, [u8]> {
    let mut runs = unstuffed_runs(wire);
    let first = runs.next().unwrap_or_default();
    match runs.next() {
        None => Cow::Borrowed(first),
        Some(second) => {
            let mut all = Vec::with_capacity(wire.len());
            all.extend_from_slice(first);
            all.extend_from_slice(second);
            runs.for_each(|run| all.extend_from_slice(run));
            Cow::Owned(all)
        }
    }
}

/// The iterator of [`unstuffed_runs`].
#[derive(Debug, Clone)]
pub struct UnstuffedRuns<'a> {
    /// What is left, its leading stuffing dot (if any) already taken off.
    rest: &'a [u8],
    done: bool,
}

impl<'a> Iterator for UnstuffedRuns<'a> {
    type Item = &'a [u8];

    fn next(&mut self) -> Option<&'a [u8]> {
        if self.done {
            return None;
        }
        match memchr::memmem::find(self.rest, b"\r\n.") {
            Some(at) => {
                // The run ends with the line's CRLF; the next line's first dot is stuffing.
                let (run, rest) = self.rest.split_at(at + 2);
                self.rest = &rest[1..];
                Some(run)
            }
            None => {
                self.done = true;
                Some(self.rest)
            }
        }
    }
}

#[cfg(test)]
mod tests;
