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
use crate::smtp::header_fields::{self, header_end, HeaderFields};
use crate::smtp::reply::Reply;

use super::client::Wait;
use super::session::{Flow, Session};
use super::upstream::UpstreamError;

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

impl AsRef<[u8]> for Spooled {
    /// The message as the policy reads it (dot-stuffed as it came with DATA).
    fn as_ref(&self) -> &[u8] {
        match self {
            Spooled::Data(wire) => wire.message(),
            Spooled::Chunked(body) => body,
        }
    }
}

/// The header section (through its blank line, or everything) of a message spooled in its
/// dot-stuffed wire form, unstuffed: borrowed when no line of it starts with '.'.
fn header_section(stuffed: &[u8]) -> std::borrow::Cow<'_, [u8]> {
    let head = &stuffed[..header_end(stuffed)];
    // Built once: building a searcher costs more than a search of a header section.
    static DOT_LINE: OnceLock<Finder<'static>> = OnceLock::new();
    let dot_line = DOT_LINE.get_or_init(|| Finder::new(b"\r\n."));
    if !head.starts_with(b".") && dot_line.find(head).is_none() {
        return std::borrow::Cow::Borrowed(head);
    }
    // Every line that starts with '.' here was stuffed: drop that one dot.
    let mut out = Vec::with_capacity(head.len());
    for line in head.split_inclusive(|&b| b == b'\n') {
        out.extend_from_slice(line.strip_prefix(b".").unwrap_or(line));
    }
    std::borrow::Cow::Owned(out)
}

impl Session {
    /// DATA, the dialogue having allowed it: the data stage, 354, the message spooled.
    pub(super) async fn data(&mut self) -> Result<Flow, UpstreamError> {
        if let Some(flow) = self.judge(Stage::Data).await {
            return Ok(flow);
        }
        self.client.conn.queue(replies::start_data());
        let cfg = self.shared.config().clone();
        let bare = bare_policy(cfg.smtp.bare_line_endings);
        // floodgate's own Received line is part of what is relayed: it counts towards the size.
        self.transaction.received = self.received_header().await;
        let max = cfg.smtp.max_message_size.saturating_sub(
            self.transaction
                .received
                .as_ref()
                .map_or(0, |r| r.len() as u64),
        );
        // The message stays in the input buffer, already in its dot-stuffed wire form, unless
        // one of its lines has to change on the way (then it is copied into `body`).
        let mut decoder = DataDecoder::new(cfg.smtp.max_text_line, bare, max).held();
        let mut body = Vec::new();
        let mut wait = Wait::new(cfg.timeouts.command.0, cfg.timeouts.data.0);
        self.client.conn.set_bulk(true);
        // A size announced with MAIL (and allowed) is room made at once, not grown into.
        let hint = usize::try_from(self.policy.facts.message_size.min(max)).unwrap_or(0);
        self.client.conn.rbuf.reserve(hint.min(1 << 24));
        loop {
            if decoder.feed_held(&mut self.client.conn.rbuf, &mut body) {
                break;
            }
            if let Err(end) = self.client.conn.fill(&mut wait, &self.stop).await {
                // The session ends here: what was held of the message is dropped, not moved.
                self.client.conn.rbuf.clear();
                self.client.conn.set_bulk(false);
                let why = self.read_end(end);
                info!(client = %self.client.ip_text, why, "message abandoned during DATA");
                self.abort_upstream_txn().await?;
                return Ok(Flow::Close);
            }
        }
        // Taken before the read buffer shrinks, so only what follows the message is moved.
        let wire = decoder.take_wire(&mut self.client.conn.rbuf, body);
        self.client.conn.set_bulk(false);
        self.finish_message(decoder.outcome(), Spooled::Data(wire))
            .await
    }

    /// The end of a message, DATA or BDAT, once it is spooled whole: counted, refused if a
    /// limit says so, asked about at the message stage, and relayed with upstream's verdict
    /// going back to the client. A refused message is never relayed: upstream's transaction
    /// is reset.
    pub(super) async fn finish_message(
        &mut self,
        outcome: DataOutcome,
        msg: Spooled,
    ) -> Result<Flow, UpstreamError> {
        self.tally.bytes += outcome.size;
        if let Some(r) = outcome.rejection() {
            self.refuse_message(&r, outcome.size).await?;
            return Ok(Flow::Next);
        }
        self.policy.facts.message_size = outcome.size;
        // Shared with the thread that computes its keys while the session waits.
        let msg = std::sync::Arc::new(msg);
        let message_id = self.read_message_facts(&msg).await;
        if let Some(flow) = self.judge(Stage::Message).await {
            self.tell_transaction("refused by floodgate");
            self.abort_upstream_txn().await?;
            return Ok(flow);
        }
        let received = self.transaction.received.take();
        if let Some(order) = self.transaction.order.take() {
            return self
                .take_message(&msg, order, received.as_deref(), outcome.size)
                .await;
        }
        let reply = match &*msg {
            Spooled::Data(wire) => {
                self.relay_message(wire, outcome.size, received.as_deref())
                    .await
            }
            Spooled::Chunked(body) => self.relay_chunked(body, received.as_deref()).await,
        };
        drop(msg);
        self.relayed(reply?, outcome.size, message_id).await
    }

    /// A message over a limit of the data itself (size, line length, bare line endings):
    /// logged, counted, told to the event log, answered with `refusal`, and upstream's
    /// transaction reset.
    async fn refuse_message(&mut self, refusal: &Reply, size: u64) -> Result<(), UpstreamError> {
        info!(
            client = %self.client.ip_text,
            user = self.policy.facts.user.as_deref().unwrap_or(""),
            sender = self.policy.facts.sender.as_deref().unwrap_or(""),
            recipients = self.dialogue.recipients(),
            size = size,
            code = refusal.code,
            reason = refusal.text().as_str(),
            "message refused"
        );
        self.tally.refused += 1;
        self.shared.metrics.refused.inc();
        self.tell_transaction(&format!("refused {}", refusal.code));
        self.client.conn.queue(refusal);
        self.abort_upstream_txn().await
    }

    /// Reads what the policy and the message's log line need from the message into the
    /// facts (header From, Subject, Auto-Submitted, message keys); the Message-ID is handed
    /// back for the log line.
    async fn read_message_facts(&mut self, msg: &std::sync::Arc<Spooled>) -> Option<String> {
        // The header is parsed for the message's log line and for limits that read the
        // header From; with neither, nobody would see the result.
        let fields =
            if tracing::enabled!(tracing::Level::INFO) || self.shared.policy.reads_header_from() {
                match &**msg {
                    Spooled::Data(wire) => header_fields::read(&header_section(wire.message())),
                    Spooled::Chunked(body) => header_fields::read(body),
                }
            } else {
                HeaderFields::default()
            };
        self.policy.facts.header_from = fields.from;
        self.policy.facts.subject = fields.subject;
        // Ratio limits leave auto-submitted messages out (the policy then reads headers).
        self.policy.facts.auto_submitted = self.shared.policy.reads_header_from()
            && match &**msg {
                Spooled::Data(wire) => {
                    crate::smtp::auto_submitted::is_automatic(&header_section(wire.message()))
                }
                Spooled::Chunked(body) => crate::smtp::auto_submitted::is_automatic(body),
            };
        // The message keys, when some limit is keyed on one (else nothing is computed).
        let null_sender = self.policy.facts.sender.as_deref() == Some("");
        let facts = &self.policy.facts;
        let account = facts
            .user
            .clone()
            .or_else(|| facts.client_ip.map(|ip| ip.to_string()));
        // Computed off this worker (see `Policy::message_keys`): the session waits, the
        // worker serves the other sessions meanwhile.
        let shared: crate::policy::SharedMessage = msg.clone();
        self.policy.facts.message_keys = self
            .shared
            .policy
            .message_keys(shared, null_sender, account)
            .await
            .map(std::sync::Arc::new);
        fields.message_id
    }

    /// A message floodgate takes instead of relaying it, as `order` says: rerouted to the
    /// second smart host, or written to the hold spool (held or paced).
    async fn take_message(
        &mut self,
        msg: &Spooled,
        order: crate::policy::HoldOrder,
        received: Option<&[u8]>,
        size: u64,
    ) -> Result<Flow, UpstreamError> {
        self.tell_transaction(match order.answer {
            crate::policy::TakenAnswer::Reroute => "rerouted",
            crate::policy::TakenAnswer::Pace(_) => "paced",
            crate::policy::TakenAnswer::Hold => "held",
        });
        if order.answer == crate::policy::TakenAnswer::Reroute {
            return self.reroute_message(msg, order, received, size).await;
        }
        self.hold_message(msg, order, received, size).await
    }

    /// Upstream's verdict on a relayed message: counted, told to the event log, logged,
    /// heard by the dialogue and the policy, and passed on to the client.
    async fn relayed(
        &mut self,
        reply: Reply,
        size: u64,
        message_id: Option<String>,
    ) -> Result<Flow, UpstreamError> {
        if reply.is_completion() {
            self.tally.messages += 1;
            self.tally.recipients += self.dialogue.recipients() as u64;
            self.shared
                .metrics
                .message_relayed(self.dialogue.recipients(), size);
        }
        let verdict = if reply.is_completion() {
            "relayed"
        } else {
            "refused upstream"
        };
        self.tell_transaction(&format!("{verdict} {}", reply.code));
        info!(
            client = %self.client.ip_text,
            user = self.policy.facts.user.as_deref().unwrap_or(""),
            sender = self.policy.facts.sender.as_deref().unwrap_or(""),
            recipients = self.dialogue.recipients(),
            size = size,
            from = self.policy.facts.header_from.as_deref().unwrap_or(""),
            message_id = message_id.as_deref().unwrap_or(""),
            upstream = reply.lines.last().map(String::as_str).unwrap_or(""),
            code = reply.code,
            "message"
        );
        // The transaction ended with upstream's verdict: nothing is left to release.
        let heard = self
            .dialogue
            .on_upstream(dialogue::Exchange::Message, &reply);
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
        let headers = self.policy.session.message_headers();
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
    use crate::smtp::header_fields;
    use proptest::prelude::*;

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

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]

        /// The unstuffed header section of the stuffed spool is the plain message's header
        /// section, so its fields read the same.
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
            prop_assert_eq!(
                header_fields::read(&super::header_section(&stuffed)),
                header_fields::read(&plain)
            );
        }
    }
}
