//! DATA: floodgate answers 354 itself, spools the whole message (re-framed, never spliced),
//! checks it, and only then runs DATA upstream with its own dot-stuffing and end-of-data.
//!
//! The spool is the client's input buffer itself while the message's lines are already in
//! the canonical wire form (CRLF endings, stuffed dots, "." CRLF at the end): the decoder
//! checks every line, and the octets relayed are then exactly the ones floodgate would have
//! written (`DataDecoder::held`; property-tested and fuzzed against the copying decoder).
//! A message with any line to change is copied and re-encoded as it is decoded.

use std::borrow::Cow;
use std::sync::OnceLock;

use memchr::memmem::Finder;
use tracing::{info, warn};

use crate::config::BareLineEndings;
use crate::policy::Stage;
use crate::smtp::data::{encode_data, unstuffed, BarePolicy, DataDecoder, DataOutcome, Wire};
use crate::smtp::dialogue::{self, replies};
use crate::smtp::reply::Reply;

use super::client::Wait;
use super::session::{Flow, Judged, Session};
use super::upstream::UpstreamError;

type Handled = Result<Flow, UpstreamError>;

/// The decoder's policy for `[smtp] bare_line_endings`.
pub(super) fn bare_policy(b: BareLineEndings) -> BarePolicy {
    match b {
        BareLineEndings::Reject => BarePolicy::Reject,
        BareLineEndings::Normalize => BarePolicy::Normalize,
    }
}

/// A message spooled whole, as it is relayed.
pub(super) enum Spooled {
    /// From DATA: its dot-stuffed wire form with the end-of-data line.
    Data(Wire),
    /// From BDAT: the message itself, canonical line ends, not stuffed.
    Chunked(Vec<u8>),
}

/// The header parser of [`header_fields`]: From, Message-ID and Subject parsed as
/// mail-parser always parses them, every other field skipped to its end (parsing Date, Received and the rest
/// only to throw them away was most of the cost of reading the header section).
fn header_parser() -> &'static mail_parser::MessageParser {
    static PARSER: std::sync::OnceLock<mail_parser::MessageParser> = std::sync::OnceLock::new();
    PARSER.get_or_init(|| {
        mail_parser::MessageParser::new()
            .header_address(mail_parser::HeaderName::From)
            .header_id(mail_parser::HeaderName::MessageId)
            .header_text(mail_parser::HeaderName::Subject)
            .default_header_ignore()
    })
}

/// The header section (through its blank line, or everything) of a message spooled in its
/// dot-stuffed wire form, unstuffed: borrowed when no line of it starts with '.'.
fn header_section(stuffed: &[u8]) -> std::borrow::Cow<'_, [u8]> {
    let head = &stuffed[..header_end(stuffed)];
    static DOT_LINE: OnceLock<Finder<'static>> = OnceLock::new();
    if !head.starts_with(b".") && finder(&DOT_LINE, b"\r\n.").find(head).is_none() {
        return std::borrow::Cow::Borrowed(head);
    }
    // Every line that starts with '.' here was stuffed: drop that one dot.
    let mut out = Vec::with_capacity(head.len());
    for line in head.split_inclusive(|&b| b == b'\n') {
        out.extend_from_slice(line.strip_prefix(b".").unwrap_or(line));
    }
    std::borrow::Cow::Owned(out)
}

/// The searcher for `needle`, built once into `cell` (building one costs more than a search
/// of a header section).
fn finder(
    cell: &'static OnceLock<Finder<'static>>,
    needle: &'static [u8],
) -> &'static Finder<'static> {
    cell.get_or_init(|| Finder::new(needle))
}

/// The end of the header section: just past its blank line (the first CRLF CRLF), or the
/// end of `msg`.
fn header_end(msg: &[u8]) -> usize {
    static BLANK_LINE: OnceLock<Finder<'static>> = OnceLock::new();
    finder(&BLANK_LINE, b"\r\n\r\n")
        .find(msg)
        .map_or(msg.len(), |p| p + 4)
}

/// Copies the From and Message-ID fields (with their folded lines) of a plain header section
/// into `out`, which mail-parser then reads instead of the whole section. `None` when the
/// section is anything but plain (a bare CR or LF, a line before the first field, a field
/// name that is not printable ASCII followed by ':', no final CRLF): mail-parser then reads
/// it all, so what is found never depends on this shortcut.
fn wanted_fields(head: &[u8], out: &mut Vec<u8>) -> Option<()> {
    let mut rest = head;
    let mut keep = false;
    let mut first = true;
    while !rest.is_empty() {
        let lf = memchr::memchr(b'\n', rest)?;
        let line = &rest[..=lf];
        let text = line.strip_suffix(b"\r\n")?;
        if memchr::memchr(b'\r', text).is_some() {
            return None;
        }
        if text.is_empty() {
            // The blank line ends the section; a section that starts with it is left to
            // mail-parser.
            return if first { None } else { Some(()) };
        }
        if text[0] == b' ' || text[0] == b'\t' {
            if first {
                return None;
            }
        } else {
            let colon = memchr::memchr(b':', text)?;
            let name = &text[..colon];
            if name.is_empty() || !name.iter().all(|b| (33..=126).contains(b)) {
                return None;
            }
            keep = name.eq_ignore_ascii_case(b"from")
                || name.eq_ignore_ascii_case(b"message-id")
                || name.eq_ignore_ascii_case(b"subject");
        }
        if keep {
            out.extend_from_slice(line);
        }
        first = false;
        rest = &rest[lf + 1..];
    }
    Some(())
}

/// From, Message-ID and Subject of a message, read from its header section only.
fn header_fields(body: &[u8]) -> (Option<String>, Option<String>, Option<String>) {
    let head = &body[..header_end(body)];
    let mut wanted = Vec::new();
    let fields = match wanted_fields(head, &mut wanted) {
        Some(()) if wanted.is_empty() => return (None, None, None),
        Some(()) => {
            wanted.extend_from_slice(b"\r\n");
            &wanted[..]
        }
        None => head,
    };
    let Some(msg) = header_parser().parse_headers(fields) else {
        return (None, None, None);
    };
    let from = msg
        .from()
        .and_then(|a| a.first())
        .and_then(|a| a.address())
        .map(str::to_string);
    let id = msg.message_id().map(str::to_string);
    let subject = msg.subject().map(str::to_string);
    (from, id, subject)
}

impl Session {
    /// DATA, the dialogue having allowed it: the data stage, 354, the message spooled.
    pub(super) async fn data(&mut self) -> Handled {
        match self.judge(Stage::Data).await {
            Judged::Go => {}
            Judged::Answered => return Ok(Flow::Next),
            Judged::Close => return Ok(Flow::Close),
        }
        self.client.queue(replies::start_data());
        let cfg = self.shared.config.clone();
        let bare = bare_policy(cfg.smtp.bare_line_endings);
        // floodgate's own Received line is part of what is relayed: it counts towards the size.
        self.received = self.received_header().await;
        let max = cfg
            .smtp
            .max_message_size
            .saturating_sub(self.received.as_ref().map_or(0, |r| r.len() as u64));
        // The message stays in the input buffer, already in its dot-stuffed wire form, unless
        // one of its lines has to change on the way (then it is copied into `body`).
        let mut decoder = DataDecoder::new(cfg.smtp.max_text_line, bare, max).held();
        let mut body = Vec::new();
        let mut wait = Wait::new(cfg.timeouts.command.0, cfg.timeouts.data.0);
        self.client.set_bulk(true);
        // A size announced with MAIL (and allowed) is room made at once, not grown into.
        let hint = usize::try_from(self.facts.message_size.min(max)).unwrap_or(0);
        self.client.rbuf.reserve(hint.min(1 << 24));
        loop {
            if decoder.feed_held(&mut self.client.rbuf, &mut body) {
                break;
            }
            if let Err(end) = self.client.fill(&mut wait, &self.stop).await {
                // The session ends here: what was held of the message is dropped, not moved.
                self.client.rbuf.clear();
                self.client.set_bulk(false);
                let why = self.read_end(end);
                info!(client = %self.peer.ip(), why, "message abandoned during DATA");
                self.abort_upstream_txn().await?;
                return Ok(Flow::Close);
            }
        }
        // Taken before the read buffer shrinks, so only what follows the message is moved.
        let wire = decoder.take_wire(&mut self.client.rbuf, body);
        self.client.set_bulk(false);
        self.finish_message(decoder.outcome(), Spooled::Data(wire))
            .await
    }

    /// The end of a message, DATA or BDAT, once it is spooled whole: counted, refused if a
    /// limit says so, asked about at the message stage, and relayed with upstream's verdict
    /// going back to the client. A refused message is never relayed: upstream's transaction
    /// is reset.
    pub(super) async fn finish_message(&mut self, outcome: DataOutcome, msg: Spooled) -> Handled {
        self.tally.bytes += outcome.size;
        let refusal = outcome.rejection();
        if let Some(r) = refusal {
            info!(
                client = %self.peer.ip(),
                user = self.facts.user.as_deref().unwrap_or(""),
                sender = self.facts.sender.as_deref().unwrap_or(""),
                recipients = self.dialogue.recipients(),
                size = outcome.size,
                code = r.code,
                reason = r.text().as_str(),
                "message refused"
            );
            self.tally.refused += 1;
            self.shared.metrics.refused.inc();
            self.client.queue(&r);
            self.abort_upstream_txn().await?;
            return Ok(Flow::Next);
        }
        self.facts.message_size = outcome.size;
        // The header is parsed for the message's log line and for limits that read the
        // header From; with neither, nobody would see the result.
        let (from, message_id, subject) =
            if tracing::enabled!(tracing::Level::INFO) || self.shared.policy.reads_header_from() {
                match &msg {
                    Spooled::Data(wire) => header_fields(&header_section(wire.message())),
                    Spooled::Chunked(body) => header_fields(body),
                }
            } else {
                (None, None, None)
            };
        self.facts.header_from = from;
        self.facts.subject = subject;
        // Ratio limits leave auto-submitted messages out (the policy then reads headers).
        self.facts.auto_submitted = self.shared.policy.reads_header_from()
            && match &msg {
                Spooled::Data(wire) => {
                    crate::smtp::auto_submitted::is_automatic(&header_section(wire.message()))
                }
                Spooled::Chunked(body) => crate::smtp::auto_submitted::is_automatic(body),
            };
        match self.judge(Stage::Message).await {
            Judged::Go => {}
            Judged::Answered => {
                self.abort_upstream_txn().await?;
                return Ok(Flow::Next);
            }
            Judged::Close => {
                self.abort_upstream_txn().await?;
                return Ok(Flow::Close);
            }
        }
        let received = self.received.take();
        if let Some(order) = self.hold.take() {
            if order.answer == crate::policy::TakenAnswer::Reroute {
                return self
                    .reroute_message(&msg, order, received.as_deref(), outcome.size)
                    .await;
            }
            return self
                .hold_message(&msg, order, received.as_deref(), outcome.size)
                .await;
        }
        let reply = match &msg {
            Spooled::Data(wire) => {
                self.relay_message(wire, outcome.size, received.as_deref())
                    .await
            }
            Spooled::Chunked(body) => self.relay_chunked(body, received.as_deref()).await,
        };
        drop(msg);
        let reply = reply?;
        if reply.is_completion() {
            self.tally.messages += 1;
            self.tally.recipients += self.dialogue.recipients() as u64;
            self.shared
                .metrics
                .message_relayed(self.dialogue.recipients(), outcome.size);
        }
        info!(
            client = %self.peer.ip(),
            user = self.facts.user.as_deref().unwrap_or(""),
            sender = self.facts.sender.as_deref().unwrap_or(""),
            recipients = self.dialogue.recipients(),
            size = outcome.size,
            from = self.facts.header_from.as_deref().unwrap_or(""),
            message_id = message_id.as_deref().unwrap_or(""),
            upstream = reply.lines.last().map(String::as_str).unwrap_or(""),
            code = reply.code,
            "message"
        );
        // The transaction ended with upstream's verdict: nothing is left to release.
        let heard = self.dialogue.on_upstream(dialogue::Stage::Message, &reply);
        let answer = self.after_upstream(Stage::Message, reply).await;
        self.heard(heard);
        match answer {
            Some(answer) => {
                self.answer(answer);
                Ok(Flow::Next)
            }
            None => Ok(Flow::Close),
        }
    }

    /// Whether messages go upstream as one `BDAT n LAST`: upstream offered CHUNKING in its
    /// answer to the client's EHLO and `[upstream] chunking` allows it.
    fn bdat_upstream(&self) -> bool {
        self.shared.upstream.chunking() && self.dialogue.upstream_chunking()
    }

    /// floodgate's lines on top of a message: its Received line (already CRLF-ended and
    /// never beginning with '.') and the policy's header lines, each kept to one line, with
    /// a leading '.' stuffed when the message goes as DATA.
    fn top_lines(&mut self, received: Option<&[u8]>, stuffed: bool) -> Vec<u8> {
        let headers = self.policy.message_headers();
        let mut top = Vec::with_capacity(received.map_or(0, <[u8]>::len) + 256 * headers.len());
        top.extend_from_slice(received.unwrap_or_default());
        for h in &headers {
            // Header lines from the policy are floodgate's own text; keep them single lines.
            let start = top.len();
            top.extend(h.bytes().filter(|b| *b != b'\r' && *b != b'\n'));
            if stuffed && top.get(start) == Some(&b'.') {
                top.insert(start, b'.');
            }
            top.extend_from_slice(b"\r\n");
        }
        top
    }

    /// A message taken in BDAT chunks, relayed as one `BDAT n LAST` when upstream takes
    /// it, else as DATA with floodgate's dot-stuffing and end-of-data line; with upstream's
    /// final reply. `body` has canonical line ends and no stuffing; `received`, floodgate's
    /// Received line, goes on top.
    async fn relay_chunked(
        &mut self,
        body: &[u8],
        received: Option<&[u8]>,
    ) -> Result<Reply, UpstreamError> {
        if self.bdat_upstream() {
            let top = self.top_lines(received, false);
            return self.relay_bdat(&top, body).await;
        }
        let mut plain = self.top_lines(received, false);
        let message: &[u8] = if plain.is_empty() {
            body
        } else {
            plain.extend_from_slice(body);
            &plain
        };
        if let Some(refused) = self.open_upstream_data().await? {
            return Ok(refused);
        }
        let mut out = Vec::with_capacity(message.len() + message.len() / 64 + 5);
        encode_data(message, &mut out);
        self.up()?.command(&out).await
    }

    /// A message taken with DATA, relayed with upstream's final reply: as one `BDAT n LAST`
    /// when upstream takes it (the message unstuffed, uncopied unless a line of it begins
    /// with '.'), else DATA and the message with floodgate's own framing. `wire` is the
    /// message in its dot-stuffed wire form with its end-of-data line, as the decoder handed
    /// it over, and `size` the message's size as the decoder counted it ([`DataOutcome`]);
    /// `received`, floodgate's Received line, goes on top.
    async fn relay_message(
        &mut self,
        wire: &Wire,
        size: u64,
        received: Option<&[u8]>,
    ) -> Result<Reply, UpstreamError> {
        if self.bdat_upstream() {
            let top = self.top_lines(received, false);
            // `size` counts the message without its stuffing dots: a wire form of that
            // length has none, and is not searched for them.
            let message = if wire.message().len() as u64 == size {
                Cow::Borrowed(wire.message())
            } else {
                unstuffed(wire.message())
            };
            return self.relay_bdat(&top, &message).await;
        }
        if let Some(refused) = self.open_upstream_data().await? {
            return Ok(refused);
        }
        // floodgate's lines go on top of the message as it came: two parts of one write, so
        // the message is not copied behind them.
        let top = self.top_lines(received, true);
        let mut parts = [
            std::io::IoSlice::new(&top),
            std::io::IoSlice::new(wire.as_bytes()),
        ];
        self.up()?.send_parts(&mut parts).await?;
        self.up()?.read_reply().await
    }

    /// Sends `top` and then `message` upstream as one `BDAT n LAST` chunk, in one write with
    /// the command, and returns upstream's final reply. A refused chunk fails upstream's
    /// transaction (RFC 3030 §4); RSET then makes sure it is over there as it is here.
    async fn relay_bdat(&mut self, top: &[u8], message: &[u8]) -> Result<Reply, UpstreamError> {
        let command = format!("BDAT {} LAST\r\n", top.len() + message.len());
        let mut parts = [
            std::io::IoSlice::new(command.as_bytes()),
            std::io::IoSlice::new(top),
            std::io::IoSlice::new(message),
        ];
        let up = self.up()?;
        up.send_parts(&mut parts).await?;
        let r = up.read_reply().await?;
        if !r.is_completion() {
            self.reset_after_upstream_refusal().await?;
        }
        Ok(r)
    }

    /// Sends DATA upstream; `Some(reply)` when upstream refused it (its transaction, still
    /// open there, is then closed with RSET so both sides agree), `None` on 354.
    async fn open_upstream_data(&mut self) -> Result<Option<Reply>, UpstreamError> {
        let r = self.up()?.command(b"DATA\r\n").await?;
        if r.code != 354 {
            self.reset_after_upstream_refusal().await?;
            return Ok(Some(r));
        }
        self.up()?.recycle(r);
        Ok(None)
    }

    /// RSET after upstream refused DATA or the message's chunk, so both sides agree the
    /// transaction is over; a refused RSET is only logged (upstream's refusal is the answer).
    async fn reset_after_upstream_refusal(&mut self) -> Result<(), UpstreamError> {
        let reset = self.up()?.command(b"RSET\r\n").await?;
        if !reset.is_completion() {
            warn!(code = reset.code, "upstream refused RSET");
        }
        Ok(())
    }

    /// Ends the upstream transaction after floodgate refused a message (RSET, reply
    /// swallowed), so upstream never delivers what floodgate refused.
    pub(super) async fn abort_upstream_txn(&mut self) -> Result<(), UpstreamError> {
        self.reset_txn();
        let r = self.up()?.command(b"RSET\r\n").await?;
        if !r.is_completion() {
            return Err(UpstreamError::Protocol(format!(
                "upstream refused RSET with {}",
                r.code
            )));
        }
        self.up()?.recycle(r);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::header_fields;
    use proptest::prelude::*;

    /// What `header_fields` answered before it skipped the other fields: mail-parser with
    /// every field parsed.
    fn full_parse(body: &[u8]) -> (Option<String>, Option<String>, Option<String>) {
        let end = memchr::memmem::find(body, b"\r\n\r\n")
            .map(|p| p + 4)
            .unwrap_or(body.len());
        let Some(msg) = mail_parser::MessageParser::new().parse_headers(&body[..end]) else {
            return (None, None, None);
        };
        let from = msg
            .from()
            .and_then(|a| a.first())
            .and_then(|a| a.address())
            .map(str::to_string);
        (
            from,
            msg.message_id().map(str::to_string),
            msg.subject().map(str::to_string),
        )
    }

    #[test]
    fn header_section_unstuffs_only_the_header() {
        use super::header_section;
        assert_eq!(&*header_section(b"A: b\r\n\r\n..x\r\n"), b"A: b\r\n\r\n");
        assert!(matches!(
            header_section(b"A: b\r\n\r\n..x\r\n"),
            std::borrow::Cow::Borrowed(_)
        ));
        assert_eq!(&*header_section(b"..A: b\r\n\r\n..x\r\n"), b".A: b\r\n\r\n");
        assert_eq!(
            &*header_section(b"From: a\r\n ..b\r\n..\r\nX"),
            b"From: a\r\n ..b\r\n.\r\nX"
        );
        assert_eq!(&*header_section(b""), b"");
    }

    #[test]
    fn reads_from_and_message_id() {
        let m = b"Date: Sat, 21 Nov 2026 10:00:00 +0000\r\nFrom: A <a@example.org>\r\n\
                  Subject: =?utf-8?q?hi?=\r\nMessage-ID: <1@x>\r\n\r\nbody\r\n";
        assert_eq!(
            header_fields(m),
            (
                Some("a@example.org".into()),
                Some("1@x".into()),
                Some("hi".into())
            )
        );
        assert_eq!(
            header_fields(b"\r\nFrom: a@b\r\n"),
            full_parse(b"\r\nFrom: a@b\r\n")
        );
        assert_eq!(header_fields(b""), (None, None, None));
    }

    #[test]
    fn shortcut_keeps_folded_and_repeated_fields() {
        let m = b"Received: from x\r\n\tby y\r\nFrom: A\r\n <a@example.org>\r\nTo: b@c\r\n\
                  from: c@d\r\nMessage-Id:\r\n <1@x>\r\n\r\nFrom: body@e\r\n";
        let mut wanted = Vec::new();
        assert!(super::wanted_fields(&m[..super::header_end(m)], &mut wanted).is_some());
        assert_eq!(
            wanted,
            b"From: A\r\n <a@example.org>\r\nfrom: c@d\r\nMessage-Id:\r\n <1@x>\r\n"
        );
        assert_eq!(header_fields(m), full_parse(m));
        assert_eq!(header_fields(m).1.as_deref(), Some("1@x"));
        // Not plain: left to mail-parser whole.
        for odd in [
            &b" folded first\r\nFrom: a@b\r\n\r\n"[..],
            b"From: a@b\n\r\n",
            b"\r\nFrom: a@b\r\n",
        ] {
            assert!(super::wanted_fields(odd, &mut Vec::new()).is_none());
            assert_eq!(header_fields(odd), full_parse(odd));
        }
        assert_eq!(
            header_fields(b"Subject: x\r\n\r\n"),
            (None, None, Some("x".into()))
        );
        assert_eq!(header_fields(b"To: x\r\n\r\n"), (None, None, None));
    }

    fn field() -> impl Strategy<Value = Vec<u8>> {
        let name = prop_oneof![
            Just("From"),
            Just("from"),
            Just("FROM "),
            Just("Message-ID"),
            Just("Message-Id"),
            Just("Date"),
            Just("Subject"),
            Just("Received"),
            Just("Content-Type"),
            Just("To"),
            Just("Resent-From"),
            Just("X-Other"),
            Just("References"),
            Just("Keywords"),
        ];
        let value = proptest::collection::vec(
            prop_oneof![
                Just(&b" "[..]),
                Just(&b"a@b.example"[..]),
                Just(&b"<"[..]),
                Just(&b">"[..]),
                Just(&b"\""[..]),
                Just(&b"("[..]),
                Just(&b")"[..]),
                Just(&b","[..]),
                Just(&b";"[..]),
                Just(&b":"[..]),
                Just(&b"\r\n "[..]),
                Just(&b"\r\n\t"[..]),
                Just(&b"\n"[..]),
                Just(&b"\r"[..]),
                Just(&b"=?utf-8?q?x_y?="[..]),
                Just(&b"Mon, 1 Jan 2024 00:00:00 +0000"[..]),
                Just(&b"\xc3\xa9"[..]),
                Just(&b"\xff"[..]),
                Just(&b"Name"[..]),
                Just(&b"@"[..]),
                Just(&b"multipart/mixed; boundary=x"[..]),
            ],
            0..8,
        );
        (name, any::<bool>(), value).prop_map(|(n, colon, v)| {
            let mut f = n.as_bytes().to_vec();
            if colon {
                f.push(b':');
            }
            f.extend(v.concat());
            f.extend_from_slice(b"\r\n");
            f
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]

        /// The unstuffed header section of the stuffed spool is the plain message's header
        /// section, so From and Message-ID read the same.
        #[test]
        fn header_section_of_stuffed_is_plain_header(
            lines in proptest::collection::vec(
                proptest::collection::vec(prop_oneof![Just(b'.'), Just(b'a'), Just(b':'), Just(b' ')], 0..6),
                0..8,
            ),
        ) {
            let mut plain = Vec::new();
            for l in &lines {
                plain.extend_from_slice(l);
                plain.extend_from_slice(b"\r\n");
            }
            let mut stuffed = Vec::new();
            crate::smtp::data::encode_data(&plain, &mut stuffed);
            stuffed.truncate(stuffed.len() - 3);
            let end = memchr::memmem::find(&plain, b"\r\n\r\n").map(|p| p + 4).unwrap_or(plain.len());
            prop_assert_eq!(&*super::header_section(&stuffed), &plain[..end]);
            prop_assert_eq!(header_fields(&super::header_section(&stuffed)), header_fields(&plain));
        }

        /// Plain sections (CRLF lines, every field named and followed by ':') go through
        /// the shortcut, and it reads what parsing every field reads.
        #[test]
        fn shortcut_reads_what_a_full_parse_reads(
            fields in proptest::collection::vec(field(), 1..8),
        ) {
            let plain: Vec<Vec<u8>> = fields
                .into_iter()
                .filter(|f| {
                    let text = &f[..f.len() - 2];
                    let named = text
                        .iter()
                        .position(|&b| b == b':')
                        .is_some_and(|c| c > 0 && text[..c].iter().all(|b| (33..=126).contains(b)));
                    // Folded lines are plain; a bare CR or LF is not.
                    let bare = text.iter().enumerate().any(|(i, &b)| match b {
                        b'\r' => text.get(i + 1) != Some(&b'\n')
                            || !matches!(text.get(i + 2), Some(b' ' | b'\t')),
                        b'\n' => i == 0 || text[i - 1] != b'\r',
                        _ => false,
                    });
                    named && !bare
                })
                .collect();
            prop_assume!(!plain.is_empty());
            let mut m = plain.concat();
            m.extend_from_slice(b"\r\nbody\r\n");
            let mut wanted = Vec::new();
            prop_assert!(super::wanted_fields(&m[..super::header_end(&m)], &mut wanted).is_some());
            prop_assert_eq!(header_fields(&m), full_parse(&m));
        }

        /// Skipping the other fields never changes what is read from From and Message-ID.
        #[test]
        fn same_answer_as_parsing_every_field(
            fields in proptest::collection::vec(field(), 0..8),
            body in proptest::collection::vec(any::<u8>(), 0..20),
        ) {
            let mut m = fields.concat();
            m.extend_from_slice(b"\r\n");
            m.extend(body);
            prop_assert_eq!(header_fields(&m), full_parse(&m));
        }
    }
}
