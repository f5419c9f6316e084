//! What a front end does with the policy's verdicts: before the command goes on ([`Act`]) and
//! once the answer of what came after is heard ([`After`]).

use std::time::Duration;

use crate::policy::{TakeOrder, Verdict};
use crate::smtp::reply::Reply;

/// What the front end does with the command it asked about.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Act {
    /// Let it go on (relay it; answer `DUNNO`; `SMFIR_CONTINUE`).
    Go,
    /// Wait this long, then go on.
    Wait(Duration),
    /// Refuse the command with this reply; the session goes on.
    Refuse(Reply),
    /// Answer with this reply (a 421) and end the session.
    Close(Reply),
    /// Go on, and take the transaction's message at its end (hold, pace, reroute) instead of
    /// passing it on; the order is kept by the exchange too ([`super::Exchange::taken`]).
    Take(TakeOrder),
}

impl Act {
    /// The act for `verdict`.
    pub fn of(verdict: Verdict) -> Act {
        match verdict {
            Verdict::Continue => Act::Go,
            Verdict::Delay(d) => Act::Wait(d),
            Verdict::Reply(r) => Act::Refuse(r),
            Verdict::Disconnect(r) => Act::Close(r),
            Verdict::Take(o) => Act::Take(o),
        }
    }

    /// Whether the command goes on (at once, after a wait, or to be taken at its end).
    pub fn goes_on(&self) -> bool {
        matches!(self, Act::Go | Act::Wait(_) | Act::Take(_))
    }
}

/// What the front end does with the answer of what came after a command that went on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum After {
    /// Pass the answer on as it is.
    Pass,
    /// Wait this long, then pass the answer on; when the wait is cut short (the client went
    /// away, floodgate stops), pass it on and end the session.
    WaitThenPass(Duration),
    /// Answer this instead: the answer heard was not a completion, so replacing it hides no
    /// change of state.
    Replace(Reply),
    /// Answer this (a 421) instead of the answer heard, and end the session.
    Close(Reply),
}

impl After {
    /// The after-act for `verdict` on `heard`: a reply or disconnect replaces only an answer
    /// that did not complete anything (floodgate never hides a success that changed the
    /// state of the MTA in front of it).
    pub fn of(verdict: Verdict, heard: &Reply) -> After {
        let replaceable = !heard.is_completion() && !heard.is_intermediate();
        match verdict {
            Verdict::Delay(d) => After::WaitThenPass(d),
            Verdict::Reply(r) if replaceable => After::Replace(r),
            Verdict::Disconnect(r) if replaceable => After::Close(r),
            _ => After::Pass,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::TakenAnswer;
    use proptest::prelude::*;

    fn verdict_strategy() -> impl Strategy<Value = Verdict> {
        prop_oneof![
            Just(Verdict::Continue),
            (0u64..10_000).prop_map(|ms| Verdict::Delay(Duration::from_millis(ms))),
            (400u16..600).prop_map(|c| Verdict::Reply(Reply::new(c, "4.7.1 slow down"))),
            Just(Verdict::Disconnect(Reply::new(421, "4.7.0 bye"))),
            Just(Verdict::Take(TakeOrder {
                limit: "l".into(),
                key: "k".into(),
                answer: TakenAnswer::Hold,
            })),
        ]
    }

    #[test]
    fn each_verdict_has_its_act() {
        assert_eq!(Act::of(Verdict::Continue), Act::Go);
        let r = Reply::new(450, "4.7.1 later");
        assert_eq!(Act::of(Verdict::Reply(r.clone())), Act::Refuse(r));
        assert!(!Act::of(Verdict::Disconnect(Reply::new(421, "x"))).goes_on());
    }

    proptest! {
        /// A completion heard is never replaced nor cut: whatever the verdict, it is passed
        /// on (possibly after a wait).
        #[test]
        fn a_completion_is_never_hidden(v in verdict_strategy(), code in 200u16..300) {
            let after = After::of(v, &Reply::new(code, "ok"));
            prop_assert!(matches!(after, After::Pass | After::WaitThenPass(_)));
        }

        /// A refusal heard is replaced exactly when the policy answers with its own reply.
        #[test]
        fn a_refusal_is_replaced_only_by_a_reply(v in verdict_strategy(), code in 400u16..600) {
            let replaces = matches!(v, Verdict::Reply(_) | Verdict::Disconnect(_));
            let after = After::of(v, &Reply::new(code, "no"));
            prop_assert_eq!(replaces, matches!(after, After::Replace(_) | After::Close(_)));
        }

        /// Only a refusal or a disconnect stops the command.
        #[test]
        fn goes_on_unless_refused(v in verdict_strategy()) {
            let stops = matches!(v, Verdict::Reply(_) | Verdict::Disconnect(_));
            prop_assert_eq!(Act::of(v).goes_on(), !stops);
        }
    }
}
