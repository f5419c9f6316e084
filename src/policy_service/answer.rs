//! The access action that answers a request, from the exchange's act, without I/O.

use crate::exchange::Act;
use crate::policy::{Stage, TakeOrder};
use crate::postfix::policy::PolicyAction;
use crate::smtp::reply::Reply;

/// The action for `act` at `stage`. A refusal defers with `DEFER_IF_PERMIT` and the
/// limit's text (Postfix answers 450 with the enhanced code the text starts with, unless a
/// later restriction rejects anyway); a 5xx is a `REJECT` with its text; a 421 (the session
/// ends) is passed as `421 text`, which makes Postfix disconnect. A message to take is
/// `HOLD` at END-OF-MESSAGE (see [`hold`]) and `DUNNO` before it; a wait has been waited
/// already.
pub fn action(act: &Act, stage: Stage) -> PolicyAction {
    match act {
        Act::Go | Act::Wait(_) => PolicyAction::Dunno,
        Act::Take(order) if stage == Stage::Message => hold(order),
        Act::Take(_) => PolicyAction::Dunno,
        Act::Refuse(r) | Act::Close(r) => refusal(r),
    }
}

/// `HOLD` for a message `order` takes: Postfix keeps it whole in its hold queue, where it
/// has a queue id the held verbs find it by; the text is in Postfix's log line.
pub fn hold(order: &TakeOrder) -> PolicyAction {
    PolicyAction::Hold(format!(
        "floodgate: held by limit {} for {}",
        order.limit, order.key
    ))
}

/// The action that refuses with `reply`.
pub fn refusal(reply: &Reply) -> PolicyAction {
    let text = reply.lines.join(" ");
    match reply.code {
        421 => PolicyAction::Code(421, text),
        400..=499 => PolicyAction::DeferIfPermit(text),
        500..=599 => PolicyAction::Reject(text),
        // Not a refusal code: defer rather than let through what the policy refused.
        _ => PolicyAction::DeferIfPermit(text),
    }
}

/// `PREPEND` for a header line the policy adds (`name: value`).
pub fn prepend(line: &str) -> PolicyAction {
    PolicyAction::Prepend(line.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::TakenAnswer;
    use proptest::prelude::*;

    #[test]
    fn refusals_keep_the_limit_text() {
        let r = Reply::new(450, "4.7.1 alice sends too fast");
        assert_eq!(
            action(&Act::Refuse(r), Stage::Rcpt).encode(),
            "action=DEFER_IF_PERMIT 4.7.1 alice sends too fast\n\n"
        );
        let r = Reply::new(550, "5.7.1 no more");
        assert_eq!(
            action(&Act::Refuse(r), Stage::Rcpt).encode(),
            "action=REJECT 5.7.1 no more\n\n"
        );
        let r = Reply::new(421, "4.7.0 closing");
        assert_eq!(
            action(&Act::Close(r), Stage::Mail).encode(),
            "action=421 4.7.0 closing\n\n"
        );
    }

    #[test]
    fn hold_only_at_the_end_of_the_message() {
        let order = TakeOrder {
            limit: "burst".into(),
            key: "alice".into(),
            answer: TakenAnswer::Hold,
        };
        let take = Act::Take(order);
        assert_eq!(action(&take, Stage::Rcpt), PolicyAction::Dunno);
        assert_eq!(
            action(&take, Stage::Message).encode(),
            "action=HOLD floodgate: held by limit burst for alice\n\n"
        );
        assert_eq!(
            prepend("X-Flood: 1").encode(),
            "action=PREPEND X-Flood: 1\n\n"
        );
    }

    proptest! {
        /// Every refusal answers one well-formed action line that never lets the mail
        /// through.
        #[test]
        fn a_refusal_is_one_line_and_refuses(code in 0u16..1000, text in "\\PC{0,200}") {
            let a = refusal(&Reply::new(code, text));
            prop_assert!(!matches!(a, PolicyAction::Dunno | PolicyAction::Ok));
            let wire = a.encode();
            prop_assert!(wire.starts_with("action="));
            prop_assert_eq!(wire.matches('\n').count(), 2);
        }
    }
}
