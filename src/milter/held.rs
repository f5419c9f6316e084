//! A message held in Postfix's hold queue on floodgate's word (the quarantine answer),
//! told to the log with what the held verbs need to find it: its queue id, limit and key.

use tracing::info;

use super::session::{Context, Held};

/// Notes a message held in Postfix's hold queue.
pub fn record(ctx: &Context, held: Held) {
    info!(
        milter = %ctx.name,
        queue_id = %held.queue_id,
        limit = %held.order.limit,
        key = %held.order.key,
        incident_key = %held.incident_key,
        user = held.user.as_deref().unwrap_or(""),
        client = %held.client.map(|c| c.to_string()).unwrap_or_default(),
        sender = %held.sender,
        recipients = held.recipients.len(),
        size = held.size,
        "message held in Postfix's hold queue"
    );
}
