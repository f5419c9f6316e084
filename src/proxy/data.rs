//! DATA: floodgate answers 354 itself, spools the whole message (re-framed, never spliced),
//! checks it, and only then runs DATA upstream with its own dot-stuffing and end-of-data.
//!
//! The spool is the client's input buffer itself while the message's lines are already in
//! the canonical wire form (CRLF endings, stuffed dots, "." CRLF at the end): the decoder
//! checks every line, and the octets relayed are then exactly the ones floodgate would have
//! written (`DataDecoder::held`; property-tested and fuzzed against the copying decoder).
//! A message with any line to change is copied and re-encoded as it is decoded.

use std::sync::OnceLock;

use memchr::memmem::Finder;
use tracing::info;

use crate::config::BareLineEndings;
use crate::policy::Stage;
use crate::smtp::data::{BarePolicy, DataDecoder, DataOutcome};
use crate::smtp::dialogue::{self, replies};
use crate::smtp::header_fields::{self, header_end, HeaderFields};
use crate::smtp::reply::Reply;

use super::client::Wait;
use super::received;
use super::relay::{self, Spooled};
use super::session::{Flow, Session};
use super::upstream::UpstreamError;

/// The decoder's policy for `[smtp] bare_line_endings`.
pub(super) fn bare_policy(b: BareLineEndings) -> BarePolicy {
    match b {
        BareLineEndings::Reject => BarePolicy::Reject,
        BareLineEndings::Normalize => BarePolicy::Normalize,
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
        self.transaction.received = self.received_line().await;
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
        let hint = usize::try_from(self.exchange.facts().message_size.min(max)).unwrap_or(0);
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
        self.exchange.facts_mut().message_size = outcome.size;
        // Shared with the thread that computes its keys while the session waits.
        let msg = std::sync::Arc::new(msg);
        let message_id = self.read_message_facts(&msg).await;
        // A message refused here ends its transaction in the exchange, which forgets its
        // facts: the event log's line names its sender and subject all the same.
        let f = self.exchange.facts();
        let (sender, subject) = (f.sender.clone(), f.subject.clone());
        if let Some(flow) = self.judge(Stage::Message).await {
            let sender = sender.as_deref().unwrap_or("");
            self.tell_line("refused by floodgate", sender, subject.as_deref());
            self.abort_upstream_txn().await?;
            return Ok(flow);
        }
        let received = self.transaction.received.take();
        if let Some(order) = self.exchange.taken().cloned() {
            return self
                .take_message(&msg, order, received.as_deref(), outcome.size)
                .await;
        }
        let headers = self.exchange.headers();
        let how = relay::Relay {
            received: received.as_deref(),
            headers: &headers,
            bdat: self.bdat_upstream(),
        };
        let reply = relay::message(self.up()?, &msg, outcome.size, &how).await;
        drop(msg);
        self.relayed(reply?, outcome.size, message_id).await
    }

    /// A message over a limit of the data itself (size, line length, bare line endings):
    /// logged, counted, told to the event log, answered with `refusal`, and upstream's
    /// transaction reset.
    async fn refuse_message(&mut self, refusal: &Reply, size: u64) -> Result<(), UpstreamError> {
        info!(
            client = %self.client.ip_text,
            user = self.exchange.facts().user.as_deref().unwrap_or(""),
            sender = self.exchange.facts().sender.as_deref().unwrap_or(""),
            recipients = self.dialogue.recipients(),
            size = size,
            code = refusal.code,
            reason = refusal.text().as_str(),
            "message refused"
        );
        self.count_refused();
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
        let reads_headers = self.shared.policy.reads_header_from();
        let facts = self.exchange.facts_mut();
        facts.header_from = fields.from;
        facts.subject = fields.subject;
        // Ratio limits leave auto-submitted messages out (the policy then reads headers).
        facts.auto_submitted = reads_headers
            && match &**msg {
                Spooled::Data(wire) => {
                    crate::smtp::auto_submitted::is_automatic(&header_section(wire.message()))
                }
                Spooled::Chunked(body) => crate::smtp::auto_submitted::is_automatic(body),
            };
        // The message keys, when some limit is keyed on one (else nothing is computed).
        let null_sender = self.exchange.facts().sender.as_deref() == Some("");
        let facts = self.exchange.facts();
        let account = facts
            .user
            .clone()
            .or_else(|| facts.client_ip.map(|ip| ip.to_string()));
        // Computed off this worker (see `Policy::message_keys`): the session waits, the
        // worker serves the other sessions meanwhile.
        let shared: crate::policy::SharedMessage = msg.clone();
        let keys = self
            .shared
            .policy
            .message_keys(shared, null_sender, account)
            .await;
        self.exchange.facts_mut().message_keys = keys.map(std::sync::Arc::new);
        fields.message_id
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
            user = self.exchange.facts().user.as_deref().unwrap_or(""),
            sender = self.exchange.facts().sender.as_deref().unwrap_or(""),
            recipients = self.dialogue.recipients(),
            size = size,
            from = self.exchange.facts().header_from.as_deref().unwrap_or(""),
            message_id = message_id.as_deref().unwrap_or(""),
            upstream = reply.lines.last().map(String::as_str).unwrap_or(""),
            code = reply.code,
            "message"
        );
        // The transaction ended with upstream's verdict: nothing is left to release.
        match self
            .hear(Stage::Message, dialogue::Exchange::Message, reply)
            .await
        {
            Some((answer, _)) => {
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

    /// floodgate's Received line for the message that starts now, when `[smtp]
    /// add_received` asks for one.
    pub(super) async fn received_line(&mut self) -> Option<Vec<u8>> {
        let ehlo = self.dialogue.ehlo();
        received::line(
            self.shared.config(),
            &mut self.client,
            self.exchange.facts(),
            ehlo,
        )
        .await
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
