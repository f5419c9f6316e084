//! Which milter events and macros floodgate asks Postfix for, from the limits in force,
//! without I/O. Every event Postfix leaves out, and every event whose answer it need not
//! wait for, is a round trip Postfix saves on each message.
//!
//! * **Connect** and **HELO** always come (the client's address, whether the mail is from
//!   the local `sendmail`, the HELO name and `{tls_version}`); their answer is awaited only
//!   when a limit at that stage can refuse or delay (`defer`, `deny`, `disconnect`,
//!   `restrict`, `delay`); a limit that warns, adds a header or takes the message at its
//!   end counts without Postfix waiting.
//! * **MAIL** always comes (the sender, the login); its answer is awaited only when a limit
//!   at that stage can refuse or delay. A restricted key's mail is refused there too, and a
//!   restriction can be made at any time (`floodgate restrict`, the console): when Postfix
//!   does not wait, that refusal is owed and given at the next event it waits for (RCPT
//!   when a limit restricts, else the end of the message; see [`super::conn`]).
//! * **RCPT** always comes (its recipients are the held message's and the event log's); it
//!   is answered when a limit at that stage can refuse or delay, or a limit restricts.
//! * **DATA** comes only when a limit is at that stage, answered as connect and HELO are.
//! * The **header fields** come when something reads the message's header (a limit at the
//!   `message` stage, the header From, the Subject for a restriction's evidence or the
//!   event log, `Auto-Submitted:` for ratio and outcome limits, message keys); the **body**
//!   when the message is read whole (a limit at the `message` stage, bytes counted, message
//!   keys) or may be held (its size is in the ledger). Neither is ever waited for.
//! * **End of message** is always answered: the hold, the header fields added, the queue id.
//!
//! The macros are only those read: `{tls_version}` at HELO, `{auth_authen}` at MAIL, the
//! queue id `i` at the end of the message. Postfix sends no macro of a stage left out of
//! the lists, and none of an event left out.

use crate::policy::model::{Action, Counted, PolicyModel};
use crate::policy::Stage;
use crate::postfix::milter::{actions, steps, MacroStage, Wanted};

/// The macros read, by stage.
pub const MACROS: &[(MacroStage, &str)] = &[
    (MacroStage::Helo, "{tls_version}"),
    (MacroStage::Mail, "{auth_authen}"),
    (MacroStage::EndOfMessage, "i"),
];

/// The steps asked whatever the limits: no end-of-headers and no unknown commands, no
/// answer awaited for header fields, body chunks and the events left out anyway, header
/// values as sent.
pub const ALWAYS: u32 = steps::NO_REPLY_HEADER
    | steps::NO_END_OF_HEADERS
    | steps::NO_REPLY_END_OF_HEADERS
    | steps::NO_REPLY_BODY
    | steps::NO_UNKNOWN
    | steps::NO_REPLY_UNKNOWN
    | steps::HEADER_LEADING_SPACE;

/// What floodgate asks in the negotiation for `model`'s limits; `event_log`: the event log
/// is on (its message lines carry the Subject).
pub fn wanted(model: &PolicyModel, event_log: bool) -> Wanted<'static> {
    let mut s = ALWAYS;
    if !answers_at(model, Stage::Connect) {
        s |= steps::NO_REPLY_CONNECT;
    }
    if !answers_at(model, Stage::Helo) {
        s |= steps::NO_REPLY_HELO;
    }
    if !answers_at(model, Stage::Mail) {
        s |= steps::NO_REPLY_MAIL;
    }
    if !answers_at(model, Stage::Rcpt) && !model.restricts() {
        s |= steps::NO_REPLY_RCPT;
    }
    if !model.limits.iter().any(|d| d.stage == Stage::Data) {
        s |= steps::NO_DATA | steps::NO_REPLY_DATA;
    } else if !answers_at(model, Stage::Data) {
        s |= steps::NO_REPLY_DATA;
    }
    let body = reads_body(model);
    if !body {
        s |= steps::NO_BODY;
        if !event_log && !reads_header(model) {
            s |= steps::NO_HEADERS;
        }
    }
    Wanted {
        needed_actions: 0,
        optional_actions: actions::ADD_HEADERS | actions::QUARANTINE | actions::SET_MACRO_LIST,
        steps: s,
        macros: MACROS,
    }
}

/// Whether a limit at `stage` can refuse or delay the event there (a limit that only
/// counts, warns, adds a header or takes the message at its end never does).
fn answers_at(model: &PolicyModel, stage: Stage) -> bool {
    model
        .limits
        .iter()
        .any(|d| d.stage == stage && (d.action.blocks() || matches!(d.action, Action::Delay(_))))
}

/// Whether the message is read whole: a limit at the `message` stage (its condition may
/// read anything of it), counting bytes or keyed on a message key; or held by a limit (the
/// ledger records its size).
fn reads_body(model: &PolicyModel) -> bool {
    model.limits.iter().any(|d| {
        d.stage == Stage::Message || d.counted == Counted::Bytes || d.action.takes_message()
    }) || model.restricts()
        || !model.wanted_message_keys().is_none()
}

/// Whether the policy reads the message's header: the header From, a restriction's
/// evidence (the Subject), `Auto-Submitted:` for ratio and outcome limits.
fn reads_header(model: &PolicyModel) -> bool {
    model.reads_header_from() || model.restricts() || model.follows_outcomes()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    use crate::policy::postfix_path_model as model;

    const PER_RCPT: &str = "[[limit]]\nname = \"r\"\nratelimit = \"100 / 1h / per_rcpt / strict\"\naction = \"warn\"\n";

    #[test]
    fn a_warning_recipient_limit_waits_only_for_the_end() {
        let w = wanted(&model(PER_RCPT), false);
        for s in [
            steps::NO_REPLY_CONNECT,
            steps::NO_REPLY_HELO,
            steps::NO_REPLY_MAIL,
            steps::NO_REPLY_RCPT,
            steps::NO_DATA,
            steps::NO_HEADERS,
            steps::NO_BODY,
        ] {
            assert_ne!(w.steps & s, 0, "step 0x{s:x} not asked");
        }
        for s in [steps::NO_MAIL, steps::NO_RCPT, steps::NO_CONNECT] {
            assert_eq!(w.steps & s, 0, "step 0x{s:x} asked");
        }
        assert_eq!(w.macros, MACROS);
    }

    #[test]
    fn a_deferring_recipient_limit_is_waited_for_at_rcpt() {
        let w = wanted(
            &model("[[limit]]\nname = \"r\"\nratelimit = \"100 / 1h / per_rcpt / strict\"\naction = \"defer\"\n"),
            false,
        );
        assert_eq!(w.steps & steps::NO_REPLY_RCPT, 0);
        assert_ne!(w.steps & steps::NO_REPLY_CONNECT, 0);
    }

    #[test]
    fn a_warning_data_limit_gets_the_event_unanswered() {
        let w = wanted(
            &model("[[limit]]\nname = \"d\"\nstage = \"data\"\ncount = \"messages\"\nkey = \"${client_ip}\"\nrate = \"5 / 1m\"\nburst = \"5\"\naction = \"warn\"\n"),
            false,
        );
        assert_eq!(w.steps & steps::NO_DATA, 0);
        assert_ne!(w.steps & steps::NO_REPLY_DATA, 0);
    }

    #[test]
    fn the_event_log_wants_the_header_only() {
        let w = wanted(&model(PER_RCPT), true);
        assert_eq!(w.steps & steps::NO_HEADERS, 0);
        assert_ne!(w.steps & steps::NO_BODY, 0);
    }

    #[test]
    fn message_limits_and_keys_want_the_whole_message() {
        for limits in [
            "[[limit]]\nname = \"m\"\nstage = \"message\"\ncount = \"messages\"\nkey = \"${authenticated_id}\"\nrate = \"5 / 1h\"\nburst = \"5\"\naction = \"defer\"\n",
            "[[limit]]\nname = \"f\"\nkey = \"${fingerprint}\"\nratelimit = \"3 / 1h / per_mail\"\naction = \"hold\"\n",
            "[[limit]]\nname = \"b\"\nstage = \"message\"\ncount = \"bytes\"\nkey = \"${authenticated_id}\"\nrate = \"1000000 / 1h\"\nburst = \"1000000\"\naction = \"defer\"\n",
        ] {
            let w = wanted(&model(limits), false);
            assert_eq!(w.steps & (steps::NO_HEADERS | steps::NO_BODY), 0, "{limits}");
        }
    }

    #[test]
    fn stages_with_limits_are_answered() {
        let w = wanted(
            &model(
                "[[limit]]\nname = \"c\"\nstage = \"connect\"\nkey = \"${client_ip}\"\ncount = \"messages\"\nrate = \"5 / 1m\"\nburst = \"5\"\naction = \"defer\"\n\
                 [[limit]]\nname = \"h\"\nstage = \"helo\"\nkey = \"${client_ip}\"\ncount = \"messages\"\nrate = \"5 / 1m\"\nburst = \"5\"\naction = \"defer\"\n\
                 [[limit]]\nname = \"d\"\nstage = \"data\"\nkey = \"${client_ip}\"\ncount = \"messages\"\nrate = \"5 / 1m\"\nburst = \"5\"\naction = \"defer\"\n",
            ),
            false,
        );
        for s in [
            steps::NO_REPLY_CONNECT,
            steps::NO_REPLY_HELO,
            steps::NO_DATA,
            steps::NO_REPLY_DATA,
        ] {
            assert_eq!(w.steps & s, 0, "step 0x{s:x} asked");
        }
        // No limit at RCPT and none restricts: RCPT is not waited for.
        assert_ne!(w.steps & steps::NO_REPLY_RCPT, 0);
    }

    #[test]
    fn a_restricting_limit_waits_for_rcpt_and_reads_the_message() {
        let w = wanted(
            &model(
                "[[limit]]\nname = \"m\"\nstage = \"mail\"\ncount = \"messages\"\nkey = \"${authenticated_id}\"\nrate = \"5 / 1h\"\nburst = \"5\"\naction = \"restrict\"\nwhile_restricted = \"hold\"\n",
            ),
            false,
        );
        assert_eq!(
            w.steps & (steps::NO_REPLY_RCPT | steps::NO_HEADERS | steps::NO_BODY),
            0
        );
    }

    proptest! {
        /// Whatever the limits, connect, HELO, MAIL and RCPT come, the end of the message
        /// is answered, a stage with a refusing limit is answered, and only what a step
        /// names is asked.
        #[test]
        fn the_events_come_and_refusing_stages_are_answered(
            stage in proptest::sample::select(vec!["connect", "helo", "mail", "rcpt", "data", "message"]),
            log in any::<bool>(),
        ) {
            let w = wanted(&model(&format!(
                "[[limit]]\nname = \"x\"\nstage = \"{stage}\"\nkey = \"${{client_ip}}\"\ncount = \"messages\"\nrate = \"5 / 1m\"\nburst = \"5\"\naction = \"defer\"\n"
            )), log);
            prop_assert_eq!(w.steps & (steps::NO_MAIL | steps::NO_RCPT | steps::NO_CONNECT | steps::NO_HELO), 0);
            let answered = match stage {
                "connect" => steps::NO_REPLY_CONNECT,
                "helo" => steps::NO_REPLY_HELO,
                "mail" => steps::NO_REPLY_MAIL,
                "rcpt" => steps::NO_REPLY_RCPT,
                "data" => steps::NO_REPLY_DATA,
                _ => 0,
            };
            prop_assert_eq!(w.steps & answered, 0);
            prop_assert_eq!(w.steps & ALWAYS, ALWAYS);
            prop_assert_eq!(w.steps & !0x1f_ffff, 0);
        }
    }
}
