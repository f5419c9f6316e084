//! Rerouting a message (`action = "reroute"`): floodgate takes the transaction from the
//! client as a hold does (the main smart host never gets the message: its transaction is
//! reset, see `taken`), then, at the end of data, relays it synchronously to the second smart host,
//! `[upstream.high_risk]`, through the release path: a new session with the client's
//! identity (XCLIENT or PROXY v2, as configured for that host), the same envelope and
//! octets, and one trace header. The client gets that host's answer: its 250 once it has
//! the message, its refusal, or a 451 when it cannot be reached. Nothing is written to
//! disk, so nothing is lost: until the 250 the client still has the message.

use tracing::{info, warn};

use crate::hold::spool::now_secs;
use crate::hold::HeldEnvelope;
use crate::policy::TakeOrder;
use crate::smtp::reply::Reply;

use super::envelope::Named;
use super::release::{relay_with_trace, reroute_header, ReleaseError};
use super::session::Shared;

/// The client's answer when the second smart host refused a step: its own reply when it
/// gave one that refuses (4xx or 5xx), else a 451.
fn refusal_answer(answer: Option<&Reply>, hostname: &str) -> Reply {
    match answer {
        Some(r) if (400..600).contains(&r.code) => r.clone(),
        _ => unavailable(hostname),
    }
}

fn unavailable(hostname: &str) -> Reply {
    Reply::new(
        451,
        format!("4.4.1 {hostname} High-risk relay not available, try again later"),
    )
}

/// Relays the message of envelope `m` and octets `body` to the second smart host: `Ok`
/// with its answer once it has the message; `Err` with the client's refusal (its own, or a
/// 451 when it cannot be reached).
pub(super) async fn reroute(
    shared: &Shared,
    order: &TakeOrder,
    m: &HeldEnvelope,
    body: &[u8],
    who: &Named<'_>,
) -> Result<Reply, Reply> {
    let host = &shared.config().server.hostname;
    let Some(settings) = shared.high_risk.as_ref() else {
        // The exchange keeps no order to reroute without the second smart host.
        return Err(unavailable(host));
    };
    let recipients = m.rcpts.len();
    let trace = reroute_header(&order.limit, now_secs() as i64);
    let metrics = &shared.metrics;
    match relay_with_trace(settings, m, body, &trace).await {
        Ok(reply) => {
            metrics.graded.rerouted.inc();
            info!(
                client = %who.client,
                user = who.user,
                sender = who.sender,
                recipients,
                size = who.size,
                limit = %order.limit,
                key = %order.key,
                high_risk = settings.address(),
                upstream = reply.lines.last().map(String::as_str).unwrap_or(""),
                code = reply.code,
                "message rerouted"
            );
            metrics.message_relayed(recipients, who.size);
            Ok(reply)
        }
        Err(e) => {
            let reply = match &e {
                ReleaseError::Refused { answer, .. } => {
                    metrics.graded.reroute_refused.inc();
                    refusal_answer(answer.as_deref(), host)
                }
                ReleaseError::Upstream(_) => {
                    metrics.graded.reroute_failed.inc();
                    unavailable(host)
                }
            };
            warn!(
                client = %who.client,
                user = who.user,
                limit = %order.limit,
                key = %order.key,
                high_risk = settings.address(),
                error = %e,
                code = reply.code,
                "message not rerouted: refused to the client"
            );
            metrics.refused.inc();
            Err(reply)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refusals_keep_the_high_risk_hosts_answer() {
        let r = Reply::new(550, "5.1.1 no such user".to_string());
        assert_eq!(refusal_answer(Some(&r), "fg"), r);
        let t = Reply::new(452, "4.5.3 too many".to_string());
        assert_eq!(refusal_answer(Some(&t), "fg"), t);
        // A greeting that is not 220 but not a refusal either, or no reply at all.
        for odd in [Some(Reply::new(250, "ok".to_string())), None] {
            let a = refusal_answer(odd.as_ref(), "fg");
            assert_eq!(a.code, 451);
            assert!(a.text().contains("4.4.1 fg"), "{}", a.text());
        }
    }
}
