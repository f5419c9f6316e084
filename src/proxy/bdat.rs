//! BDAT (RFC 3030): each chunk is read whole ([`ChunkReader`]) into the message
//! ([`ChunkedBody`]) and answered on its own; the LAST chunk ends the message, which then
//! goes the way of a DATA message (size and content limits, the message stage, relaying).
//! The data stage is asked once per message, at its first chunk. A chunk that is refused is
//! still read off the wire, so nothing inside it is ever taken for a command; a refusal ends
//! the transaction (RFC 3030 §4: the client sends no more chunks, and those already
//! pipelined are answered 503 and skipped).

use tracing::info;

use crate::policy::Stage;
use crate::smtp::bdat::{ChunkReader, ChunkedBody};
use crate::smtp::dialogue::replies;
use crate::smtp::reply::Reply;

use super::client::{ReadEnd, Wait};
use super::data::bare_policy;
use super::relay::Spooled;
use super::session::{Flow, Session};
use super::upstream::UpstreamError;

impl Session {
    /// One `BDAT size [LAST]` and its chunk, the dialogue having allowed it; `first`: the
    /// first chunk of its message.
    pub(super) async fn bdat(
        &mut self,
        size: u64,
        last: bool,
        first: bool,
    ) -> Result<Flow, UpstreamError> {
        let mut body = match self.transaction.chunked.take() {
            Some(body) if !first => body,
            _ => {
                match self.judge(Stage::Data).await {
                    None => {}
                    Some(Flow::Next) => {
                        // The policy's reply is queued: the chunk is read and dropped, and
                        // the transaction ends so later chunks are not asked about again.
                        if let Err(end) = self.read_chunk(size, None).await {
                            return self.chunk_abandoned(end).await;
                        }
                        self.abort_upstream_txn().await?;
                        return Ok(Flow::Next);
                    }
                    Some(Flow::Close) => return Ok(Flow::Close),
                }
                // floodgate's own Received line is part of what is relayed: it counts
                // towards the size, as for DATA.
                self.transaction.received = self.received_line().await;
                let received = self
                    .transaction
                    .received
                    .as_ref()
                    .map_or(0, |r| r.len() as u64);
                let smtp = &self.shared.config().smtp;
                ChunkedBody::new(
                    smtp.max_text_line,
                    bare_policy(smtp.bare_line_endings),
                    smtp.max_message_size.saturating_sub(received),
                )
            }
        };
        if !body.announce(size) {
            info!(client = %self.client.ip_text, size = body.announced(), "message refused: chunks over max_message_size");
            self.count_refused();
            self.abort_upstream_txn().await?;
            let reply = body
                .finish()
                .rejection()
                .unwrap_or_else(replies::chunks_over_limit);
            return self.discard_chunk(size, &reply, false).await;
        }
        if let Err(end) = self.read_chunk(size, Some(&mut body)).await {
            return self.chunk_abandoned(end).await;
        }
        if !last {
            self.transaction.chunked = Some(body);
            self.dialogue.chunk_taken();
            self.client.conn.queue(&replies::chunk_received(size));
            return Ok(Flow::Next);
        }
        let outcome = body.finish();
        self.finish_message(outcome, Spooled::Chunked(body.take_body()))
            .await
    }

    /// Reads a chunk of `size` octets off the client input into `body`, or drops it.
    async fn read_chunk(
        &mut self,
        size: u64,
        mut body: Option<&mut ChunkedBody>,
    ) -> Result<(), ReadEnd> {
        let timeouts = &self.shared.config().timeouts;
        let mut wait = Wait::new(timeouts.command.0, timeouts.data.0);
        let mut reader = ChunkReader::new(size);
        // Reads of message size only for a chunk that is not in the buffer already.
        let bulk = size > self.client.conn.rbuf.len() as u64;
        if bulk {
            self.client.conn.set_bulk(true);
        }
        let res = loop {
            if reader.feed(&mut self.client.conn.rbuf, body.as_deref_mut()) {
                break Ok(());
            }
            if let Err(end) = self.client.conn.fill(&mut wait, &self.stop).await {
                break Err(end);
            }
        };
        if bulk {
            self.client.conn.set_bulk(false);
        }
        res
    }

    /// Reads and drops a chunk (so its octets are never read as commands, RFC 3030 §3),
    /// then queues `reply` for it; `error`: it counts as a protocol error.
    pub(super) async fn discard_chunk(
        &mut self,
        size: u64,
        reply: &Reply,
        error: bool,
    ) -> Result<Flow, UpstreamError> {
        if let Err(end) = self.read_chunk(size, None).await {
            self.read_end(end);
            return Ok(Flow::Close);
        }
        if error {
            return Ok(self.refuse_with(reply));
        }
        self.client.conn.queue(reply);
        Ok(Flow::Next)
    }

    /// The client went away (or timed out) inside a chunk: the message is dropped and
    /// upstream's transaction reset.
    async fn chunk_abandoned(&mut self, end: ReadEnd) -> Result<Flow, UpstreamError> {
        let why = self.read_end(end);
        info!(client = %self.client.ip_text, why, "message abandoned during BDAT");
        if self.dialogue.in_transaction() {
            self.abort_upstream_txn().await?;
        }
        Ok(Flow::Close)
    }
}
