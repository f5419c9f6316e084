//! BDAT framing (RFC 3030): a chunk is exactly the octets its `BDAT size [LAST]` line
//! announces, with no dot-stuffing and no end-of-data line, and a message is its chunks
//! one after the other until the one marked LAST.
//!
//! [`ChunkReader`] takes one chunk's octets off the front of the input and no more, also
//! to skip a refused chunk (its octets are on the wire whatever the reply). [`ChunkedBody`]
//! puts a message together from its chunks under the same rules as DATA: bare CR and LF
//! are written as CRLF or flagged for refusal ([`BarePolicy`]), line length and message
//! size are checked, and the body is canonical whatever the chunk boundaries cut (a CRLF
//! split across two chunks is one line end). Relayed as BDAT or dot-stuffed as DATA
//! ([`crate::smtp::encode_data`]), upstream reads exactly this body.

use super::data::{BarePolicy, DataOutcome};

/// Reads the exact octet count of one BDAT chunk. Also used to skip the chunk of a BDAT
/// that was refused, since its octets are on the wire regardless.
#[derive(Debug, Clone)]
pub struct ChunkReader {
    remaining: u64,
}

impl ChunkReader {
    /// A reader for a chunk of `size` octets (from `Command::Bdat`).
    pub fn new(size: u64) -> Self {
        ChunkReader { remaining: size }
    }

    /// Octets of the chunk not yet read.
    pub fn remaining(&self) -> u64 {
        self.remaining
    }

    /// Whether the whole chunk has been read.
    pub fn is_done(&self) -> bool {
        self.remaining == 0
    }

    /// Takes up to the rest of the chunk from the front of `buf` and hands it to `sink`
    /// (or drops it when `sink` is `None`); bytes after the chunk stay in `buf`. Returns
    /// true when the whole chunk has been read.
    pub fn feed(&mut self, buf: &mut bytes::BytesMut, sink: Option<&mut ChunkedBody>) -> bool {
        let take = usize::try_from(self.remaining).map_or(buf.len(), |r| r.min(buf.len()));
        if let Some(body) = sink {
            body.push(&buf[..take]);
        }
        bytes::Buf::advance(buf, take);
        self.remaining -= take as u64;
        self.remaining == 0
    }
}

/// A message put together from its BDAT chunks: canonical line ends, the unstuffed text
/// (BDAT has no stuffing), and what [`DataOutcome`] reports for DATA.
#[derive(Debug, Clone)]
pub struct ChunkedBody {
    max_line_len: usize,
    bare: BarePolicy,
    max_size: u64,
    /// The last octet taken was a CR whose meaning depends on the next one.
    pending_cr: bool,
    /// Octets of the current line so far.
    col: usize,
    /// Octets announced by the chunks so far (before any normalisation).
    announced: u64,
    body: Vec<u8>,
    out: DataOutcome,
}

impl ChunkedBody {
    /// An empty message: `max_line_len` octets per line including CRLF, the
    /// bare-line-ending policy, and the most octets to keep.
    pub fn new(max_line_len: usize, bare: BarePolicy, max_size: u64) -> Self {
        ChunkedBody {
            max_line_len,
            bare,
            max_size,
            pending_cr: false,
            col: 0,
            announced: 0,
            body: Vec::new(),
            out: DataOutcome::default(),
        }
    }

    /// Counts a chunk of `size` octets announced by a BDAT line. Returns false when the
    /// chunks announced so far add up to more than the size limit (the message is then
    /// refused as too big; its chunks are still read, and dropped).
    pub fn announce(&mut self, size: u64) -> bool {
        self.announced = self.announced.saturating_add(size);
        if self.announced > self.max_size {
            self.out.too_big = true;
        }
        !self.out.too_big
    }

    /// Octets announced by the chunks so far.
    pub fn announced(&self) -> u64 {
        self.announced
    }

    /// Adds octets of a chunk (any piece of it, in order).
    pub fn push(&mut self, mut octets: &[u8]) {
        if self.pending_cr && !octets.is_empty() {
            self.pending_cr = false;
            if octets[0] == b'\n' {
                octets = &octets[1..];
                self.end_line(true);
            } else {
                self.end_line(false);
            }
        }
        while !octets.is_empty() {
            let stop = memchr::memchr2(b'\r', b'\n', octets).unwrap_or(octets.len());
            self.text(&octets[..stop]);
            if stop == octets.len() {
                return;
            }
            if octets[stop] == b'\n' {
                self.end_line(false);
                octets = &octets[stop + 1..];
            } else if stop + 1 == octets.len() {
                // A CR as the last octet: its LF may come with the next piece.
                self.pending_cr = true;
                return;
            } else if octets[stop + 1] == b'\n' {
                self.end_line(true);
                octets = &octets[stop + 2..];
            } else {
                self.end_line(false);
                octets = &octets[stop + 1..];
            }
        }
    }

    /// Ends the message (after its LAST chunk): a CR left at the very end is a bare one,
    /// and a last line without a line end is checked against the line limit as the CRLF
    /// DATA relaying adds would make it.
    pub fn finish(&mut self) -> DataOutcome {
        if std::mem::take(&mut self.pending_cr) {
            self.end_line(false);
        }
        if self.col > 0 && self.col + 2 > self.max_line_len {
            self.out.line_too_long = true;
        }
        self.out.complete = true;
        self.out
    }

    /// What was seen so far.
    pub fn outcome(&self) -> DataOutcome {
        self.out
    }

    /// The message so far (at most the size limit): every line end CRLF, the last line
    /// possibly without one.
    pub fn body(&self) -> &[u8] {
        &self.body
    }

    /// Takes the message out, leaving an empty body.
    pub fn take_body(&mut self) -> Vec<u8> {
        std::mem::take(&mut self.body)
    }

    fn text(&mut self, text: &[u8]) {
        self.col += text.len();
        self.emit(text);
    }

    fn end_line(&mut self, crlf: bool) {
        if !crlf {
            match self.bare {
                BarePolicy::Reject => self.out.bare_line_ending = true,
                BarePolicy::Normalize => self.out.normalized = true,
            }
        }
        if self.col + 2 > self.max_line_len {
            self.out.line_too_long = true;
        }
        self.col = 0;
        self.emit(b"\r\n");
    }

    fn emit(&mut self, bytes: &[u8]) {
        let n = bytes.len() as u64;
        let room = self.max_size.saturating_sub(self.out.size);
        if n > room {
            self.out.too_big = true;
        }
        if !self.out.too_big {
            self.body.extend_from_slice(bytes);
        }
        self.out.size = self.out.size.saturating_add(n);
    }
}

#[cfg(test)]
mod tests;
