//! A message held in Postfix's hold queue on floodgate's word (the quarantine answer):
//! recorded before Postfix is told, with what the held verbs need to find it (queue id,
//! limit, key).

use tracing::info;

use super::session::{Context, Held};

/// Why a hold could not be recorded.
#[derive(Debug, thiserror::Error)]
pub enum HeldError {
    /// Postfix gave no queue id (the `i` macro): the hold could not be found again.
    #[error("no queue id for the held message (Postfix's `i` macro)")]
    NoQueueId,
}

/// Records a message about to be held in Postfix's hold queue.
pub fn record(ctx: &Context, held: Held) -> Result<(), HeldError> {
    if held.queue_id.is_empty() {
        return Err(HeldError::NoQueueId);
    }
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
    Ok(())
}
