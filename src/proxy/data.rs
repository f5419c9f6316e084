//! DATA: floodgate answers 354 itself, spools the whole message (re-framed, never spliced),
//! checks it, and only then runs DATA upstream with its own dot-stuffing and end-of-data.

use tracing::{info, warn};

use crate::config::BareLineEndings;
use crate::policy::Stage;
use crate::smtp::data::{encode_data, BarePolicy, DataDecoder};
use crate::smtp::reply::Reply;

use super::session::{Flow, Judged, Session};
use super::upstream::UpstreamError;

type Handled = Result<Flow, UpstreamError>;

/// From and Message-ID of a message, read from its header section only.
fn header_fields(body: &[u8]) -> (Option<String>, Option<String>) {
    let end = memchr::memmem::find(body, b"\r\n\r\n")
        .map(|p| p + 4)
        .unwrap_or(body.len());
    let Some(msg) = mail_parser::MessageParser::new().parse_headers(&body[..end]) else {
        return (None, None);
    };
    let from = msg
        .from()
        .and_then(|a| a.first())
        .and_then(|a| a.address())
        .map(str::to_string);
    let id = msg.message_id().map(str::to_string);
    (from, id)
}

impl Session {
    pub(super) async fn data(&mut self) -> Handled {
        if !self.in_txn {
            return Ok(self.refuse(503, "5.5.1 Error: need MAIL command"));
        }
        if self.rcpts.is_empty() {
            return Ok(self.refuse(554, "5.5.1 Error: no valid recipients"));
        }
        match self.judge(Stage::Data).await {
            Judged::Go => {}
            Judged::Answered => return Ok(Flow::Next),
            Judged::Close => return Ok(Flow::Close),
        }
        self.client
            .queue(&Reply::new(354, "End data with <CR><LF>.<CR><LF>"));
        let cfg = self.shared.config.clone();
        let bare = match cfg.smtp.bare_line_endings {
            BareLineEndings::Reject => BarePolicy::Reject,
            BareLineEndings::Normalize => BarePolicy::Normalize,
        };
        let max = cfg.smtp.max_message_size;
        let mut decoder = DataDecoder::new(cfg.smtp.max_text_line, bare, max);
        let hint = usize::try_from(self.facts.message_size.min(max)).unwrap_or(0);
        let mut body = Vec::with_capacity(hint.clamp(4096, 1 << 24));
        let data_deadline = tokio::time::Instant::now() + cfg.timeouts.data.0;
        loop {
            if decoder.feed(&mut self.client.rbuf, &mut body) {
                break;
            }
            let left = data_deadline.saturating_duration_since(tokio::time::Instant::now());
            let idle = left.min(cfg.timeouts.command.0);
            if let Err(end) = self.client.fill(idle, &self.stop).await {
                let why = self.read_end(end);
                info!(client = %self.peer.ip(), why, "message abandoned during DATA");
                self.abort_upstream_txn().await?;
                return Ok(Flow::Close);
            }
        }
        let outcome = decoder.outcome();
        self.tally.bytes += outcome.size;
        let refusal = outcome.rejection();
        if let Some(r) = refusal {
            info!(client = %self.peer.ip(), code = r.code, size = outcome.size, "message refused");
            self.tally.refused += 1;
            self.shared.metrics.refused.inc();
            self.client.queue(&r);
            self.abort_upstream_txn().await?;
            return Ok(Flow::Next);
        }
        self.facts.message_size = outcome.size;
        let (from, message_id) = header_fields(&body);
        self.facts.header_from = from;
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
        let reply = self.relay_message(&body).await?;
        if reply.is_completion() {
            self.tally.messages += 1;
            self.tally.recipients += self.rcpts.len() as u64;
            self.shared
                .metrics
                .message_relayed(self.rcpts.len(), outcome.size);
        }
        info!(
            client = %self.peer.ip(),
            user = self.facts.user.as_deref().unwrap_or(""),
            sender = self.facts.sender.as_deref().unwrap_or(""),
            recipients = self.rcpts.len(),
            size = outcome.size,
            from = self.facts.header_from.as_deref().unwrap_or(""),
            message_id = message_id.as_deref().unwrap_or(""),
            upstream = %reply.lines.last().map(String::as_str).unwrap_or(""),
            code = reply.code,
            "message"
        );
        let answer = self.after_upstream(Stage::Message, reply).await;
        // The transaction ended with upstream's verdict: nothing is left to release.
        self.in_txn = false;
        self.reset_txn();
        match answer {
            Some(answer) => {
                self.client.queue(&answer);
                Ok(Flow::Next)
            }
            None => Ok(Flow::Close),
        }
    }

    /// DATA upstream, the message with floodgate's own framing, and upstream's final reply.
    async fn relay_message(&mut self, body: &[u8]) -> Result<Reply, UpstreamError> {
        let r = self.up()?.command(b"DATA\r\n").await?;
        if r.code != 354 {
            // Upstream refused DATA: its transaction is still open; close it so both agree.
            let reset = self.up()?.command(b"RSET\r\n").await?;
            if !reset.is_completion() {
                warn!(code = reset.code, "upstream refused RSET");
            }
            return Ok(r);
        }
        let headers = self.policy.message_headers();
        let mut wire = Vec::with_capacity(body.len() + body.len() / 64 + 8);
        for h in &headers {
            // Header lines from the policy are floodgate's own text; keep them single lines.
            let clean: String = h.chars().filter(|c| *c != '\r' && *c != '\n').collect();
            wire.extend_from_slice(clean.as_bytes());
            wire.extend_from_slice(b"\r\n");
        }
        encode_data(body, &mut wire);
        let up = self.up()?;
        up.send(&wire).await?;
        up.read_reply().await
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
        Ok(())
    }

    /// BDAT without CHUNKING offered: refuse it, but consume its octets (RFC 3030 §3)
    /// so they are never read as commands.
    pub(super) async fn bdat_refused(&mut self, size: u64) -> Handled {
        let mut left = size;
        let deadline = tokio::time::Instant::now() + self.shared.config.timeouts.data.0;
        loop {
            let take = left.min(self.client.rbuf.len() as u64) as usize;
            let _ = self.client.rbuf.split_to(take);
            left -= take as u64;
            if left == 0 {
                break;
            }
            let idle = deadline
                .saturating_duration_since(tokio::time::Instant::now())
                .min(self.shared.config.timeouts.command.0);
            if let Err(end) = self.client.fill(idle, &self.stop).await {
                self.read_end(end);
                return Ok(Flow::Close);
            }
        }
        Ok(self.refuse(
            502,
            "5.5.1 Error: BDAT not available, CHUNKING is not offered",
        ))
    }
}
