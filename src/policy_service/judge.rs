//! One request judged: its session's exchange found (or begun), the transaction of a new
//! `instance` begun, the stage asked through the exchange, Postfix going on heard, and the
//! action chosen.

use std::sync::{Arc, Mutex};
use std::time::Instant;

use tracing::{info, warn};

use crate::exchange::{continued, Act, Exchange};
use crate::hold::postfix::LedgerEntry;
use crate::policy::{Facts, Stage, TakeOrder};
use crate::postfix::policy::{PolicyAction, PolicyRequest};

use super::answer;
use super::facts::{fill, session_of, stage_of};
use super::table::Table;
use super::Context;

/// What the service follows of one client session.
pub struct Followed {
    exchange: Exchange,
    /// The `instance` of the transaction under way.
    instance: Option<String>,
    /// Its recipients Postfix went on with, for the ledger of a held message.
    recipients: Vec<String>,
    /// Header lines already answered with `PREPEND` in this transaction.
    prepended: usize,
}

/// The sessions of one policy service.
pub type Sessions = Arc<Mutex<Table<Followed>>>;

/// The action that answers `req`.
pub async fn judge(ctx: &Context, sessions: &Sessions, req: &PolicyRequest) -> PolicyAction {
    if !req.is_access_policy() {
        warn!(service = %ctx.name, request = req.get("request").unwrap_or(""),
            "policy request that is not request=smtpd_access_policy: answered DUNNO");
        return PolicyAction::Dunno;
    }
    let Some(state) = req.protocol_state() else {
        warn!(service = %ctx.name, state = req.get("protocol_state").unwrap_or(""),
            "policy request without a known protocol_state: answered DUNNO");
        return PolicyAction::Dunno;
    };
    let Some(stage) = stage_of(state) else {
        return PolicyAction::Dunno;
    };
    let session = session_of(req);
    let taken = lock(sessions).take(&session, Instant::now());
    let mut f = taken.unwrap_or_else(|| Followed {
        exchange: Exchange::new(
            ctx.policy.session(),
            Facts {
                listener: ctx.name.clone(),
                ..Facts::default()
            },
        ),
        instance: None,
        recipients: Vec::new(),
        prepended: 0,
    });
    let action = run(ctx, &mut f, req, stage).await;
    let dropped = lock(sessions).put(session, f, Instant::now());
    // Dropped sessions abandon their open transactions (the exchange's drop).
    drop(dropped);
    action
}

fn lock(sessions: &Sessions) -> std::sync::MutexGuard<'_, Table<Followed>> {
    sessions.lock().unwrap_or_else(|e| e.into_inner())
}

/// Asks `stage` for the session `f` and answers.
async fn run(ctx: &Context, f: &mut Followed, req: &PolicyRequest, stage: Stage) -> PolicyAction {
    if !matches!(stage, Stage::Connect | Stage::Helo) {
        let instance = req.instance();
        if f.instance.as_deref() != instance {
            // A new transaction: the one before it ended without END-OF-MESSAGE (RSET, a
            // refused MAIL or recipients, a client gone): nothing of it is charged.
            f.exchange.abandon();
            f.recipients.clear();
            f.prepended = 0;
            f.instance = instance.map(str::to_string);
        }
    }
    fill(f.exchange.facts_mut(), req, &ctx.identity, stage);
    let act = f.exchange.ask_through(stage).await;
    if let Act::Wait(d) = act {
        tokio::time::sleep(d).await;
    }
    if !act.goes_on() {
        let action = answer::action(&act, stage);
        info!(service = %ctx.name, stage = stage.as_str(), user = f.exchange.facts().user.as_deref().unwrap_or(""),
            client = req.get("client_address").unwrap_or(""), action = action.encode().trim_end(),
            "policy refused");
        return action;
    }
    match stage {
        Stage::Mail => {
            f.exchange
                .hear(Stage::Mail, &continued(Stage::Mail, None))
                .await;
        }
        Stage::Rcpt => {
            let rcpt = f.exchange.facts().recipient.clone().unwrap_or_default();
            f.exchange
                .hear(Stage::Rcpt, &continued(Stage::Rcpt, None))
                .await;
            f.recipients.push(rcpt);
        }
        Stage::Message => return message_end(ctx, f, req).await,
        _ => {}
    }
    prepend_next(f).unwrap_or(PolicyAction::Dunno)
}

/// The next header line the policy added and Postfix was not yet told, as `PREPEND`:
/// Postfix takes one action per answer, and adds headers only before the message content
/// arrives (RCPT and DATA), not at END-OF-MESSAGE.
fn prepend_next(f: &mut Followed) -> Option<PolicyAction> {
    let headers = f.exchange.headers();
    let line = headers.get(f.prepended)?;
    f.prepended += 1;
    Some(answer::prepend(line))
}

/// END-OF-MESSAGE that went on: held when a check said so (recorded in the ledger of
/// Postfix's hold queue first, with the queue id Postfix gives here), and heard as queued
/// by Postfix either way: held mail is mail the client sent, charged as the proxy charges
/// it.
async fn message_end(ctx: &Context, f: &mut Followed, req: &PolicyRequest) -> PolicyAction {
    let queue_id = req.non_empty("queue_id");
    let action = match f.exchange.taken().cloned() {
        Some(order) => {
            if let Err(why) = record_hold(ctx, f, req, &order) {
                // A hold the held verbs could not find is not made: deferred instead, the
                // transaction abandoned (nothing charged), the client retrying later.
                warn!(service = %ctx.name, limit = %order.limit, key = %order.key, why = %why,
                    "held message deferred: not recorded in the ledger");
                f.exchange.abandon();
                f.recipients.clear();
                f.prepended = 0;
                return PolicyAction::DeferIfPermit(
                    "4.3.0 floodgate: the message cannot be held now, try again later".into(),
                );
            }
            answer::hold(&order)
        }
        None => PolicyAction::Dunno,
    };
    f.exchange
        .hear(Stage::Message, &continued(Stage::Message, queue_id))
        .await;
    f.recipients.clear();
    f.prepended = 0;
    action
}

/// Records a message about to be held in Postfix's hold queue in the ledger the held verbs
/// read (when `[postfix]` is configured; else only logged, and held); why not when the
/// ledger cannot take it or Postfix named no queue id.
fn record_hold(
    ctx: &Context,
    f: &Followed,
    req: &PolicyRequest,
    order: &TakeOrder,
) -> Result<(), String> {
    let facts = f.exchange.facts();
    let entry = LedgerEntry {
        queue_id: req.non_empty("queue_id").unwrap_or("").to_string(),
        key: order.key.clone(),
        limit: order.limit.clone(),
        reason: format!("held by limit {}", order.limit),
        time: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs()),
        sender: facts.sender.clone().unwrap_or_default(),
        recipients: f.recipients.clone(),
        size: facts.message_size,
        client: facts.client_ip,
        user: facts.user.clone(),
    };
    info!(service = %ctx.name, queue_id = %entry.queue_id, limit = %order.limit, key = %order.key,
        user = entry.user.as_deref().unwrap_or(""), sender = %entry.sender,
        recipients = entry.recipients.len(), size = entry.size, "message held in Postfix's hold queue");
    match &ctx.postfix {
        Some(_) if entry.queue_id.is_empty() => Err("Postfix sent no queue_id".into()),
        Some(hold) => hold.ledger().record(entry).map_err(|e| e.to_string()),
        None => {
            warn!(service = %ctx.name, "held message not in a ledger: no [postfix] section, so the held verbs do not list it (postqueue does)");
            Ok(())
        }
    }
}
