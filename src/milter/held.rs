//! A message held in Postfix's hold queue on floodgate's word (the quarantine answer):
//! recorded in the ledger of Postfix's hold queue (`[postfix]`, [`crate::hold::postfix`])
//! before Postfix is told, so that `floodgate held` lists, shows, releases and deletes it.

use tracing::{info, warn};

use super::session::{Context, Held};
use crate::hold::postfix::{LedgerEntry, LedgerError};

/// Why a hold could not be recorded.
#[derive(Debug, thiserror::Error)]
pub enum HeldError {
    /// Postfix gave no queue id (the `i` macro): the hold could not be found again.
    #[error("no queue id for the held message (Postfix's `i` macro)")]
    NoQueueId,
    /// The ledger refused or failed.
    #[error(transparent)]
    Ledger(#[from] LedgerError),
}

/// Records a message about to be held in Postfix's hold queue: in the ledger when
/// `[postfix]` gives one (else only in the log).
pub fn record(ctx: &Context, held: Held) -> Result<(), HeldError> {
    if held.queue_id.is_empty() {
        return Err(HeldError::NoQueueId);
    }
    info!(
        milter = %ctx.name,
        queue_id = %held.queue_id,
        limit = %held.order.limit,
        key = %held.order.key,
        user = held.user.as_deref().unwrap_or(""),
        client = %held.client.map(|c| c.to_string()).unwrap_or_default(),
        sender = %held.sender,
        recipients = held.recipients.len(),
        size = held.size,
        "message held in Postfix's hold queue"
    );
    let Some(postfix) = &ctx.postfix else {
        warn!(queue_id = %held.queue_id, "no [postfix] section: the held message is not in floodgate's ledger (held verbs will not list it)");
        return Ok(());
    };
    let time = u64::try_from(crate::store::now_micros() / 1_000_000).unwrap_or(0);
    postfix.ledger().record(LedgerEntry {
        queue_id: held.queue_id,
        reason: format!("limit {} for {}", held.order.limit, held.order.key),
        key: held.order.key,
        limit: held.order.limit,
        time,
        sender: held.sender,
        recipients: held.recipients,
        size: held.size,
        client: held.client,
        user: held.user,
    })?;
    Ok(())
}
