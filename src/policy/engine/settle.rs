//! What the store's answers mean, without I/O: the outcome of each limit, the charges the
//! session keeps, the headers, the limits over, and the verdict (the strongest
//! countermeasure of the limits over).

use super::super::action::{self, header_line};
use super::super::model::{Action, Counted, PolicyModel, RateDef};
use super::super::replay::Replayed;
use super::super::request::apply_result;
use super::super::{Facts, Stage, TakeOrder, TakenAnswer, Verdict};
use super::pending::Pending;
use super::plan::{Class, Eval};
use crate::limit::bucket::{BucketOp, MessageClass};
use crate::limit::ewma::is_over;
use crate::limit::spec::CacheScope;
use crate::smtp::reply::Reply;
use crate::store::{Algorithm, LimitRequest, LimitResult, Restriction};

/// Records the replayed answer `r` of the [`Class::Replay`] limit `j`, and answers the
/// limits of [`Class::Same`]`(j)` from its rate, each against its own limit. Returns whether
/// the event is now refused (`refused`: it already was).
pub(super) fn replayed(evals: &mut [Eval<'_>], j: usize, r: &Replayed, mut refused: bool) -> bool {
    let e = &mut evals[j];
    e.replayed = true;
    e.outcome.value = r.rate;
    e.outcome.over = r.over;
    e.outcome.retry_after = r.retry_after;
    refused |= r.over && e.def.action.blocks();
    // Limits answered from this one's rate (Exim's cache), each with its own m.
    for a in evals.iter_mut().filter(|a| a.class == Class::Same(j)) {
        let o = &mut a.outcome;
        o.value = r.rate;
        o.over = is_over(r.rate, o.limit);
        let blocks = o.over && a.def.action.blocks();
        // The replayed event is charged only if nothing refuses it.
        o.retry_after = r.retry_for(o.limit, !r.over && !blocks && !refused);
        refused |= blocks;
    }
    refused
}

/// Records the store's `results` of the limits at `idx` (in order). Returns whether one of
/// them refuses the event.
pub(super) fn answered(evals: &mut [Eval<'_>], idx: &[usize], results: &[LimitResult]) -> bool {
    let mut refused = false;
    for (&i, r) in idx.iter().zip(results) {
        apply_result(&mut evals[i].outcome, r);
        refused |= r.over && evals[i].def.action.blocks();
    }
    refused
}

/// Whether a limit answered from the session's cache refuses the event.
pub(super) fn cached_refuses(evals: &[Eval<'_>]) -> bool {
    evals
        .iter()
        .any(|e| e.class == Class::Cached && e.outcome.over && e.def.action.blocks())
}

/// What the session keeps of one limit of a check.
#[derive(Debug, PartialEq)]
pub(super) enum Charge {
    /// Remember the rate in the session's Exim cache.
    Remember {
        scope: CacheScope,
        key: String,
        rate: f64,
    },
    /// Charge (or settle a reservation) when upstream answers.
    Pending(Pending),
    /// Commit now, in one decision with the others (auth failures in a bucket).
    CommitNow(LimitRequest),
    /// Keep the concurrency slot of the limit at this index.
    KeepSlot(usize),
}

/// The charges of a check whose answers are in, in order; `refused`: the event is refused.
pub(super) fn charges(evals: &[Eval<'_>], refused: bool, now_us: i64) -> Vec<Charge> {
    let mut out = Vec::new();
    for (i, e) in evals.iter().enumerate() {
        let req = &e.req;
        match e.class {
            Class::Now => {
                if let RateDef::Exim { resolved, .. } = &e.def.rate {
                    out.push(Charge::Remember {
                        scope: resolved.cache,
                        key: req.key.clone(),
                        rate: e.outcome.value,
                    });
                }
            }
            // A dry-run charge is due, over or not, once upstream accepts; Exim's leaky
            // mode stores only an event that is not over (a warn, header or delay limit
            // lets an over event through uncharged).
            Class::DryRun
                if !refused
                    && e.def.counted != Counted::AuthFailures
                    && !e.def.counted.outcome() =>
            {
                out.push(Charge::Pending(Pending::charge(req, now_us)));
            }
            Class::Replay => {
                // Exim remembers the rate it computed, stored or not (a store that could
                // not be read computed none).
                if let (RateDef::Exim { resolved, .. }, true) = (&e.def.rate, e.replayed) {
                    out.push(Charge::Remember {
                        scope: resolved.cache,
                        key: req.key.clone(),
                        rate: e.outcome.value,
                    });
                }
                if !refused && !e.outcome.over {
                    out.push(Charge::Pending(Pending::charge(req, now_us)));
                }
            }
            Class::Reserve if !refused && !e.outcome.over => {
                out.push(Charge::Pending(Pending::reservation(req, now_us)));
            }
            Class::BucketNow if !refused && !e.outcome.over => {
                let mut r = req.clone();
                if let Algorithm::Bucket { op, .. } = &mut r.algorithm {
                    *op = BucketOp::Commit(MessageClass::Other);
                }
                r.blocking = false;
                out.push(Charge::CommitNow(r));
            }
            Class::Slot if !refused => out.push(Charge::KeepSlot(i)),
            _ => {}
        }
    }
    out
}

/// The answer when the store failed closed during the check and a limit of it blocks:
/// 451 4.3.0 (421 and the end of the session at connect). `None` when no limit blocks.
pub(super) fn unavailable(evals: &[Eval<'_>], stage: Stage, hostname: &str) -> Option<Verdict> {
    if !evals.iter().any(|e| e.def.action.blocks()) {
        return None;
    }
    let text = format!("4.3.0 {hostname} Rate limit service unavailable, try again later");
    Some(if stage == Stage::Connect {
        Verdict::Disconnect(Reply::new(421, text))
    } else {
        Verdict::Reply(Reply::new(451, text))
    })
}

/// What the answers of a check say, before the verdict.
#[derive(Debug, Default, PartialEq)]
pub(super) struct Ruling {
    /// Header lines to put on the message: limit name → line.
    pub(super) headers: Vec<(String, String)>,
    /// The limits over, in order (each is counted, logged and told as crossed).
    pub(super) over: Vec<usize>,
    /// The first limit over with the strongest action.
    pub(super) strongest: Option<usize>,
}

/// Judges the answered limits of a check at `stage`.
pub(super) fn judge(evals: &[Eval<'_>], stage: Stage) -> Ruling {
    let mut j = Ruling::default();
    for (i, e) in evals.iter().enumerate() {
        if e.def.action == Action::Header && stage != Stage::Connect {
            j.headers
                .push((e.def.name.clone(), header_line(e.def, &e.outcome)));
        }
        if !e.outcome.over {
            continue;
        }
        j.over.push(i);
        if j.strongest
            .is_none_or(|s| e.def.action.rank() > evals[s].def.action.rank())
        {
            j.strongest = Some(i);
        }
    }
    j
}

/// Whether the event queues behind paced messages of its key: when nothing over is as
/// strong as `pace`, the first `pace` limit whose key has paced messages waiting
/// (`waiting(limit, key)`) takes it. Its index and the order.
pub(super) fn paced_behind(
    evals: &[Eval<'_>],
    strongest: Option<usize>,
    waiting: impl Fn(&str, &str) -> bool,
) -> Option<(usize, Verdict)> {
    if strongest.is_some_and(|s| evals[s].def.action.rank() >= Action::Pace.rank()) {
        return None;
    }
    let (i, e) = evals
        .iter()
        .enumerate()
        .find(|(_, e)| e.def.action == Action::Pace && waiting(&e.def.name, &e.key_text))?;
    let rate = e.def.pace_rate()?;
    Some((
        i,
        Verdict::Take(TakeOrder {
            limit: e.def.name.clone(),
            key: e.key_text.clone(),
            answer: TakenAnswer::Pace(rate),
        }),
    ))
}

/// The verdict of a check.
#[derive(Debug, PartialEq)]
pub(super) struct Answer {
    pub(super) verdict: Verdict,
    /// The message is held because the check restricted its key (`while_restricted =
    /// "hold"`).
    pub(super) held: bool,
}

/// The limit and action that refused the event when `verdict` refuses it (a reply or a
/// disconnection): the strongest limit over with its action, or, when the check
/// restricted the key, the restricting limit with `restrict`. `None` when the event goes
/// on, waits or is taken (held, paced, rerouted).
pub(super) fn refused_by<'e>(
    evals: &'e [Eval<'_>],
    strongest: usize,
    restricted: Option<(usize, &Restriction)>,
    verdict: &Verdict,
) -> Option<(&'e str, &'static str)> {
    if !matches!(verdict, Verdict::Reply(_) | Verdict::Disconnect(_)) {
        return None;
    }
    let s = &evals[strongest];
    match restricted {
        Some((i, _)) if s.def.action == Action::Restrict => {
            Some((evals[i].def.name.as_str(), Action::Restrict.as_str()))
        }
        _ => Some((s.def.name.as_str(), s.def.action.as_str())),
    }
}

/// The verdict of a check whose strongest limit over is `strongest`. `restricted`: the
/// first `restrict` limit over whose key the store took into the restricted set, with the
/// restriction; `restricts`: the model restricts (it keeps evidence).
pub(super) fn answer(
    evals: &[Eval<'_>],
    strongest: usize,
    restricted: Option<(usize, &Restriction)>,
    stage: Stage,
    facts: &Facts,
    model: &PolicyModel,
) -> Answer {
    let s = &evals[strongest];
    if let (Action::Restrict, Some((i, r))) = (s.def.action, restricted) {
        let def = evals[i].def;
        let holds = def.restrict.as_ref().is_some_and(|x| x.hold);
        if holds
            && matches!(
                stage,
                Stage::Mail | Stage::Rcpt | Stage::Data | Stage::Message
            )
        {
            // while_restricted = "hold": the message that tripped it is held too.
            return Answer {
                verdict: Verdict::Take(TakeOrder {
                    limit: r.limit.clone(),
                    key: r.key.clone(),
                    answer: TakenAnswer::Hold,
                }),
                held: true,
            };
        }
        let reply = action::restricted_reply(Some(def), r, facts, &model.hostname);
        let verdict = if stage == Stage::Connect {
            Verdict::Disconnect(reply)
        } else {
            Verdict::Reply(reply)
        };
        return Answer {
            verdict,
            held: false,
        };
    }
    if s.def.action.takes_message() {
        let answer = match s.def.action {
            Action::Reroute => TakenAnswer::Reroute,
            Action::Pace => match s.def.pace_rate() {
                Some(r) => TakenAnswer::Pace(r),
                None => TakenAnswer::Hold,
            },
            _ => TakenAnswer::Hold,
        };
        // A message held by a limit on a message key is held under its sender (the key an
        // incident and a release name), not under the band or domain that tripped it.
        let key = if s
            .def
            .key
            .as_ref()
            .is_some_and(|k| k.message_keys().next().is_some())
        {
            super::restrict::evidence_key(facts)
        } else {
            s.key_text.clone()
        };
        return Answer {
            verdict: Verdict::Take(TakeOrder {
                limit: s.def.name.clone(),
                key,
                answer,
            }),
            held: false,
        };
    }
    Answer {
        verdict: action::verdict(s.def, stage, facts, &s.outcome, &model.hostname),
        held: false,
    }
}

#[cfg(test)]
mod tests {
    use super::super::plan::plan;
    use super::super::testing::{facts, model};
    use super::*;
    use crate::limit::SessionCache;
    use proptest::prelude::*;
    use std::time::Duration;

    /// One `rate`/`burst` limit per action (in order), counted on messages at MAIL.
    fn limits(actions: &[&str]) -> String {
        let mut text = String::new();
        for (i, a) in actions.iter().enumerate() {
            let extra = match *a {
                "delay" => "delay = \"2s\"\n",
                _ => "",
            };
            text.push_str(&format!(
                "[[limit]]\nname = \"l{i}-{a}\"\ncount = \"messages\"\nkey = \"k{i}\"\n\
                 rate = \"5 / 1h\"\nburst = \"5\"\naction = \"{a}\"\n{extra}"
            ));
        }
        text
    }

    fn evals<'m>(m: &'m PolicyModel, over: &[bool]) -> Vec<Eval<'m>> {
        let mut cache = SessionCache::new();
        cache.start_connection();
        let mut evals = plan(m, Stage::Mail, &facts(), &cache, |_| false);
        for (e, &o) in evals.iter_mut().zip(over) {
            e.outcome.over = o;
            e.outcome.value = if o { 6.0 } else { 1.0 };
        }
        evals
    }

    /// The verdict of a check where the limits with these actions answered `over`.
    fn verdict_of(actions: &[&str], over: &[bool]) -> Verdict {
        let m = model(&limits(actions));
        let ev = evals(&m, over);
        match judge(&ev, Stage::Mail).strongest {
            None => Verdict::Continue,
            Some(s) => answer(&ev, s, None, Stage::Mail, &facts(), &m).verdict,
        }
    }

    fn code(v: &Verdict) -> u16 {
        match v {
            Verdict::Reply(r) | Verdict::Disconnect(r) => r.code,
            _ => 0,
        }
    }

    #[test]
    fn nothing_over_goes_on() {
        assert_eq!(
            verdict_of(&["deny", "defer"], &[false, false]),
            Verdict::Continue
        );
    }

    #[test]
    fn warn_and_header_let_the_event_through() {
        assert_eq!(verdict_of(&["warn"], &[true]), Verdict::Continue);
        assert_eq!(verdict_of(&["header"], &[true]), Verdict::Continue);
    }

    #[test]
    fn header_limits_give_their_line_over_or_not() {
        let m = model(&limits(&["header", "defer"]));
        let ev = evals(&m, &[false, true]);
        let j = judge(&ev, Stage::Mail);
        assert_eq!(j.headers.len(), 1);
        assert_eq!(j.headers[0].0, "l0-header");
        assert!(j.headers[0].1.starts_with("X-Floodgate-Rate: l0-header;"));
        assert_eq!(j.over, [1]);
        assert!(judge(&ev, Stage::Connect).headers.is_empty());
    }

    #[test]
    fn delay_waits() {
        assert_eq!(
            verdict_of(&["delay"], &[true]),
            Verdict::Delay(Duration::from_secs(2))
        );
    }

    #[test]
    fn defer_deny_and_disconnect_answer() {
        assert_eq!(code(&verdict_of(&["defer"], &[true])) / 100, 4);
        assert_eq!(code(&verdict_of(&["deny"], &[true])) / 100, 5);
        let v = verdict_of(&["disconnect"], &[true]);
        assert!(
            matches!(&v, Verdict::Disconnect(r) if r.code == 421),
            "{v:?}"
        );
    }

    #[test]
    fn hold_reroute_and_pace_take_the_message() {
        let taken = |a: &str| match verdict_of(&[a], &[true]) {
            Verdict::Take(o) => (o.limit, o.key, o.answer.as_str()),
            v => panic!("{v:?}"),
        };
        assert_eq!(taken("hold"), ("l0-hold".into(), "k0".into(), "hold"));
        assert_eq!(taken("reroute").2, "reroute");
        assert_eq!(taken("pace").2, "pace");
    }

    #[test]
    fn a_restricted_key_gets_the_restricted_answer() {
        let m = model(&limits(&["restrict"]));
        let ev = evals(&m, &[true]);
        let r = Restriction {
            key: "k0".into(),
            limit: "l0-restrict".into(),
            since_us: 0,
            until_us: None,
            rate: Some(6.0),
            limit_text: "5 / 1h".into(),
            by: "limit l0-restrict on mx".into(),
            reason: "rate".into(),
            evidence: serde_json::Value::Null,
        };
        let a = answer(&ev, 0, Some((0, &r)), Stage::Mail, &facts(), &m);
        assert!(!a.held);
        assert_eq!(code(&a.verdict) / 100, 4, "{a:?}");
        // The store could not restrict: the event is deferred as by `defer`.
        let a = answer(&ev, 0, None, Stage::Mail, &facts(), &m);
        assert_eq!(code(&a.verdict) / 100, 4, "{a:?}");
        // while_restricted = "hold": the message that tripped it is held.
        let m = model(&format!(
            "{}while_restricted = \"hold\"\n",
            limits(&["restrict"])
        ));
        let ev = evals(&m, &[true]);
        let a = answer(&ev, 0, Some((0, &r)), Stage::Mail, &facts(), &m);
        assert!(a.held);
        assert!(
            matches!(&a.verdict, Verdict::Take(o) if o.key == "k0" && o.answer == TakenAnswer::Hold)
        );
    }

    #[test]
    fn only_refusing_verdicts_name_their_limit_and_action() {
        let refused = |actions: &[&str], over: &[bool]| -> Option<(String, String)> {
            let m = model(&limits(actions));
            let ev = evals(&m, over);
            let s = judge(&ev, Stage::Mail).strongest?;
            let a = answer(&ev, s, None, Stage::Mail, &facts(), &m);
            refused_by(&ev, s, None, &a.verdict).map(|(l, a)| (l.to_string(), a.to_string()))
        };
        // A warn limit over lets the event through: no refusal, alone or beside a defer.
        assert_eq!(refused(&["warn"], &[true]), None);
        assert_eq!(
            refused(&["warn", "defer"], &[true, true]),
            Some(("l1-defer".into(), "defer".into()))
        );
        assert_eq!(
            refused(&["deny"], &[true]),
            Some(("l0-deny".into(), "deny".into()))
        );
        // Taken or delayed messages are not refused.
        for a in ["hold", "pace", "delay", "header"] {
            assert_eq!(refused(&[a], &[true]), None, "{a}");
        }
    }

    #[test]
    fn the_strongest_action_wins_and_the_first_of_equals() {
        let m = model(&limits(&["warn", "deny", "defer", "deny"]));
        let ev = evals(&m, &[true, true, true, true]);
        let j = judge(&ev, Stage::Mail);
        assert_eq!(j.over, [0, 1, 2, 3]);
        assert_eq!(j.strongest, Some(1));
    }

    #[test]
    fn a_failed_store_defers_only_blocking_checks() {
        let m = model(&limits(&["warn"]));
        assert_eq!(unavailable(&evals(&m, &[false]), Stage::Mail, "mx"), None);
        let m = model(&limits(&["defer"]));
        let ev = evals(&m, &[false]);
        let v = unavailable(&ev, Stage::Mail, "mx").expect("refused");
        assert!(matches!(&v, Verdict::Reply(r) if r.code == 451), "{v:?}");
        let v = unavailable(&ev, Stage::Connect, "mx").expect("refused");
        assert!(
            matches!(&v, Verdict::Disconnect(r) if r.code == 421),
            "{v:?}"
        );
    }

    #[test]
    fn paced_messages_waiting_queue_the_next_behind_them() {
        let m = model(&limits(&["pace", "defer"]));
        let ev = evals(&m, &[false, false]);
        let (i, v) = paced_behind(&ev, None, |l, k| l == "l0-pace" && k == "k0").expect("paced");
        assert_eq!(i, 0);
        assert!(matches!(v, Verdict::Take(o) if o.answer.as_str() == "pace"));
        assert!(paced_behind(&ev, None, |_, _| false).is_none());
        // A stronger limit over answers instead.
        let ev = evals(&m, &[false, true]);
        assert!(paced_behind(&ev, Some(1), |_, _| true).is_none());
    }

    #[test]
    fn refused_events_keep_no_charge() {
        let bucket = |i: usize, a: &str| {
            format!(
                "[[limit]]\nname = \"b{i}\"\ncount = \"messages\"\nalgorithm = \"bucket\"\n\
                 rate = \"5 / 1h\"\nburst = \"5\"\naction = \"{a}\"\n"
            )
        };
        let m = model(&format!("{}{}", bucket(0, "defer"), bucket(1, "warn")));
        let ev = evals(&m, &[false, false]);
        let kept = charges(&ev, false, 7);
        assert_eq!(kept.len(), 2);
        assert!(kept
            .iter()
            .all(|c| matches!(c, Charge::Pending(p) if p.time_us == 7)));
        assert!(charges(&ev, true, 7).is_empty());
        // A limit over keeps no reservation either.
        let ev = evals(&m, &[true, false]);
        assert_eq!(charges(&ev, false, 7).len(), 1);
    }

    #[test]
    fn strict_exim_limits_are_remembered_and_answers_recorded() {
        let m = model(
            "[[limit]]\nname = \"x\"\nratelimit = \"5 / 1h / per_mail / strict / k\"\n\
             action = \"deny\"\n",
        );
        let mut ev = evals(&m, &[false]);
        let result = LimitResult {
            value: 9.0,
            over: true,
            stored: true,
            seen: None,
            retry_after: None,
        };
        assert!(answered(&mut ev, &[0], &[result]));
        assert!(ev[0].outcome.over);
        assert_eq!(ev[0].outcome.value, 9.0);
        assert!(matches!(
            &charges(&ev, true, 0)[..],
            [Charge::Remember { rate, .. }] if *rate == 9.0
        ));
    }

    proptest! {
        /// The verdict comes from a limit over whose action is the strongest of those over
        /// (the first of them), and nothing over means going on.
        #[test]
        fn the_verdict_is_the_strictest_of_its_inputs(
            picks in proptest::collection::vec((0usize..7, any::<bool>()), 1..6),
        ) {
            const ACTIONS: [&str; 7] = ["warn", "header", "delay", "hold", "defer", "deny", "disconnect"];
            let actions: Vec<&str> = picks.iter().map(|(a, _)| ACTIONS[*a]).collect();
            let over: Vec<bool> = picks.iter().map(|(_, o)| *o).collect();
            let m = model(&limits(&actions));
            let ev = evals(&m, &over);
            let j = judge(&ev, Stage::Mail);
            let want_over: Vec<usize> = (0..over.len()).filter(|&i| over[i]).collect();
            prop_assert_eq!(&j.over, &want_over);
            match j.strongest {
                None => prop_assert!(want_over.is_empty()),
                Some(s) => {
                    let top = want_over.iter().map(|&i| ev[i].def.action.rank()).max().unwrap();
                    let first = want_over.iter().copied().find(|&i| ev[i].def.action.rank() == top);
                    prop_assert_eq!(Some(s), first);
                    let v = answer(&ev, s, None, Stage::Mail, &facts(), &m).verdict;
                    let kind = match &v {
                        Verdict::Continue => "warn",
                        Verdict::Delay(_) => "delay",
                        Verdict::Take(_) => "hold",
                        Verdict::Disconnect(_) => "disconnect",
                        Verdict::Reply(r) if r.code / 100 == 5 => "deny",
                        Verdict::Reply(_) => "defer",
                    };
                    let action = ev[s].def.action.as_str();
                    let expected = if action == "header" { "warn" } else { action };
                    prop_assert_eq!(kind, expected, "{:?}", v);
                }
            }
        }
    }
}
