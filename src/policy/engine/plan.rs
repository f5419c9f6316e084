//! The plan of a check, without I/O: which limits apply at a stage, the key and request of
//! each, how each is asked ([`Class`]), and the decisions the store is asked.

use super::super::action::{message_key_values, var_value, Reading};
use super::super::concurrency::SlotGuard;
use super::super::model::{Counted, LimitDef, PolicyModel, RateDef};
use super::super::request::request;
use super::super::{Facts, Stage};
use crate::limit::ewma::is_over;
use crate::limit::gcra::GcraSpec;
use crate::limit::rate::Rate;
use crate::limit::spec::UpdateMode;
use crate::limit::SessionCache;
use crate::store::{Algorithm, Decision, LimitRequest};
use smallvec::SmallVec;

/// How a limit is asked in a check.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Class {
    /// From the Exim session cache; nothing is asked.
    Cached,
    /// Decided and stored now.
    Now,
    /// Checked now without storing; charged on upstream's acceptance.
    DryRun,
    /// Leaky Exim on recipients or bytes: replayed over the stored record and this
    /// session's pending events; charged on upstream's acceptance.
    Replay,
    /// Bucket check that reserves; settled on upstream's answer.
    Reserve,
    /// Bucket check, committed at once.
    BucketNow,
    /// Concurrency slot.
    Slot,
    /// A ratio, read from its window.
    Ratio,
    /// Answered from the earlier Exim limit at this index of the check, which has the same
    /// database key and cache (Exim's cache, exim-ratelimit.md §4 step 1): its rate against
    /// this limit's own m; nothing is counted or remembered.
    Same(usize),
}

/// One applicable limit of a check: what is asked, and (once answered) its outcome.
pub(super) struct Eval<'m> {
    pub(super) def: &'m LimitDef,
    pub(super) class: Class,
    /// The store key.
    pub(super) key: String,
    /// The key text (for the observer).
    pub(super) key_text: String,
    pub(super) req: LimitRequest,
    pub(super) outcome: Reading,
    /// The concurrency slot taken ([`Class::Slot`]).
    pub(super) slot: Option<SlotGuard>,
    /// A [`Class::Replay`] that computed its rate (the store could be read): a rate Exim
    /// would remember.
    pub(super) replayed: bool,
}

/// The sentinel of a dry run: always over, never written (its weight exceeds its burst).
pub(super) fn sentinel() -> LimitRequest {
    LimitRequest {
        key: "floodgate/dry-run".into(),
        algorithm: Algorithm::Gcra(
            GcraSpec::new(1.0, Rate::new(1.0, 1.0).expect("rate")).expect("spec"),
        ),
        count: 2.0,
        unique: None,
        blocking: true,
    }
}

/// Whether `def` applies at `stage` to `facts`.
pub(super) fn applies(def: &LimitDef, stage: Stage, facts: &Facts, model: &PolicyModel) -> bool {
    def.stage == stage
        && def
            .when
            .as_ref()
            .is_none_or(|c| c.eval(facts, &model.lists))
}

/// The key text of `def` for `facts`: its key template expanded, else the client address.
/// A key on a message key has its first value here (see [`key_texts`]).
pub(super) fn key_text(def: &LimitDef, facts: &Facts, model: &PolicyModel) -> String {
    key_texts(def, facts, model)
        .into_iter()
        .next()
        .unwrap_or_default()
}

/// The key texts of `def` for `facts`: one, or with a message key in the key template
/// (`${fingerprint}`, `${link_domain}`, `${subject_shape}`) one per value of it, none when
/// the message has none (the limit then does not count the message).
/// One key text is kept inline: a check of limits without message keys (every command's)
/// allocates no list for it.
pub(super) fn key_texts(
    def: &LimitDef,
    facts: &Facts,
    model: &PolicyModel,
) -> SmallVec<[String; 1]> {
    let vars = |v, out: &mut String| var_value(v, facts, Some(def), None, &model.hostname, out);
    match &def.key {
        Some(t) => match t.message_keys().next() {
            Some(mk) => t
                .expand_each(mk, &message_key_values(mk, facts), vars)
                .into(),
            None => smallvec::smallvec![t.expand(vars)],
        },
        None => smallvec::smallvec![facts.client_ip.map(|i| i.to_string()).unwrap_or_default()],
    }
}

/// The limits of `model` a check at `stage` asks, in config order, each classified.
/// `cache` is the session's Exim cache (read only); `holds_slot` says whether the session
/// already holds the concurrency slot of a limit (by name): such a limit is not asked again.
pub(super) fn plan<'m>(
    model: &'m PolicyModel,
    stage: Stage,
    facts: &Facts,
    cache: &SessionCache,
    holds_slot: impl Fn(&str) -> bool,
) -> Vec<Eval<'m>> {
    let mut evals: Vec<Eval<'m>> = Vec::new();
    for def in &model.limits {
        if !applies(def, stage, facts, model) {
            continue;
        }
        if matches!(def.rate, RateDef::Concurrency(_)) && holds_slot(&def.name) {
            continue;
        }
        // One evaluation per key text: a key on a message key counts the message once under
        // each of its values.
        for key_text in key_texts(def, facts, model) {
            let e = planned(def, model, stage, facts, cache, &evals, key_text);
            evals.push(e);
        }
    }
    evals
}

/// The evaluation of `def` under `key_text`, classified against the evaluations `earlier`
/// in the same check.
fn planned<'m>(
    def: &'m LimitDef,
    model: &'m PolicyModel,
    stage: Stage,
    facts: &Facts,
    cache: &SessionCache,
    earlier: &[Eval<'m>],
    key_text: String,
) -> Eval<'m> {
    let (mut req, mut outcome) = request(def, model, stage, facts, &key_text);
    let class = match &def.rate {
        RateDef::Concurrency(_) => Class::Slot,
        RateDef::Ratio(_) => Class::Ratio,
        // Upstream's outcomes are charged when they happen: would one more be over?
        _ if def.counted.outcome() => {
            req.count = 1.0;
            Class::DryRun
        }
        _ if def.counted == Counted::AuthFailures => {
            // Before an AUTH exchange: would one more failure be over?
            req.count = 1.0;
            if matches!(req.algorithm, Algorithm::Bucket { .. }) {
                Class::BucketNow
            } else {
                Class::DryRun
            }
        }
        RateDef::Bucket(_) if def.counted.reserved() || def.counted == Counted::Messages => {
            Class::Reserve
        }
        RateDef::Bucket(_) => Class::BucketNow,
        RateDef::Exim { resolved, .. } => {
            if let Some(rate) = cache.get(resolved.cache, &req.key) {
                outcome.value = rate;
                outcome.over = is_over(rate, outcome.limit);
                Class::Cached
            } else if let Some(j) = earlier.iter().position(|e| {
                // An earlier limit of this check already puts the key in the cache
                // (a cached one would have answered above).
                matches!(e.class, Class::Now | Class::Replay)
                    && e.key == req.key
                    && matches!(&e.def.rate, RateDef::Exim { resolved: r, .. }
                        if r.cache == resolved.cache)
            }) {
                Class::Same(j)
            } else if def.mode == UpdateMode::Leaky && def.counted.reserved() {
                Class::Replay
            } else {
                Class::Now
            }
        }
        RateDef::Gcra(_) if def.mode == UpdateMode::Leaky && def.counted.reserved() => {
            Class::DryRun
        }
        RateDef::Gcra(_) => Class::Now,
    };
    Eval {
        def,
        class,
        key: req.key.clone(),
        key_text,
        req,
        outcome,
        slot: None,
        replayed: false,
    }
}

/// Whether the observer is told of `e` as the check plans it: evaluations only (cached
/// answers and concurrency slots are not; auth failures are told when they happen).
pub(super) fn told_as_planned(e: &Eval<'_>) -> bool {
    !matches!(
        e.class,
        Class::Cached | Class::Same(_) | Class::Slot | Class::Ratio
    ) && e.def.counted != Counted::AuthFailures
        && !e.def.counted.outcome()
}

/// Whether the observer is told of `e` once the restricted set let a MAIL stage on.
pub(super) fn told_after_guard(e: &Eval<'_>) -> bool {
    !matches!(e.class, Class::Cached | Class::Same(_) | Class::Slot)
        && e.def.counted != Counted::AuthFailures
}

/// Whether the MAIL stage's restricted-set check can ride on its storing decision: there is
/// one, and no store call comes before it (no replay, no dry run).
pub(super) fn folds_restricted(evals: &[Eval<'_>]) -> bool {
    evals
        .iter()
        .any(|e| matches!(e.class, Class::Now | Class::Reserve | Class::BucketNow))
        && !evals
            .iter()
            .any(|e| matches!(e.class, Class::Replay | Class::DryRun))
}

/// The dry run of a check: the indices of its [`Class::DryRun`] limits and the decision
/// asking them (each with the session's own pending count on its key added, as `pending`
/// says, then the sentinel). `None` when there is none.
pub(super) fn dry_run(
    evals: &[Eval<'_>],
    pending: impl Fn(&str) -> f64,
) -> Option<(Vec<usize>, Decision)> {
    let dry: Vec<usize> = (0..evals.len())
        .filter(|&i| evals[i].class == Class::DryRun)
        .collect();
    if dry.is_empty() {
        return None;
    }
    let mut d = Decision::default();
    for &i in &dry {
        let mut r = evals[i].req.clone();
        r.count += pending(&r.key);
        if let Algorithm::Ewma { mode, .. } = &mut r.algorithm {
            *mode = UpdateMode::Leaky;
        }
        d.limits.push(r);
    }
    d.limits.push(sentinel());
    Some((dry, d))
}

/// The decision that stores: the indices of the limits decided now (and of those answered
/// from one of them, as [`Algorithm::Same`] in the same decision) and the decision. When
/// `refused` (a limit already refused the event) the sentinel makes it all-or-nothing:
/// strict limits still charge, nothing else does. `None` when there is none.
pub(super) fn storing(evals: &[Eval<'_>], refused: bool) -> Option<(Vec<usize>, Decision)> {
    let now: Vec<usize> = (0..evals.len())
        .filter(|&i| match evals[i].class {
            Class::Now | Class::Reserve | Class::BucketNow => true,
            Class::Same(j) => evals[j].class == Class::Now,
            _ => false,
        })
        .collect();
    if now.is_empty() {
        return None;
    }
    let mut d = Decision::default();
    for &i in &now {
        let mut req = evals[i].req.clone();
        if let Class::Same(j) = evals[i].class {
            // Answered by the store from j's fresh rate, in the same decision (so a
            // refusal it causes is all-or-nothing like any other).
            let of = now.iter().position(|&k| k == j).expect("earlier limit");
            req.algorithm = Algorithm::Same {
                of,
                limit: evals[i].outcome.limit,
            };
            req.unique = None;
        }
        d.limits.push(req);
    }
    if refused {
        d.limits.push(sentinel());
    }
    Some((now, d))
}

/// The keys of a session that a restriction can name: the user, the client address, and the
/// restrict key of every restricting limit as this session expands it.
pub(super) fn restrict_candidates(model: &PolicyModel, facts: &Facts) -> Vec<String> {
    let mut keys: Vec<String> = Vec::with_capacity(2);
    if let Some(u) = &facts.user {
        keys.push(u.clone());
    }
    if let Some(ip) = facts.client_ip {
        keys.push(ip.to_string());
    }
    for def in &model.limits {
        let Some(r) = &def.restrict else { continue };
        let t = r.key.as_ref().or(def.key.as_ref());
        let Some(t) = t else { continue };
        let k = t.expand(|v, out| var_value(v, facts, Some(def), None, &model.hostname, out));
        if !k.is_empty() && !keys.contains(&k) {
            keys.push(k);
        }
    }
    keys
}

#[cfg(test)]
mod tests {
    use super::super::testing::{facts, model};
    use super::*;
    use proptest::prelude::*;

    fn classes(m: &PolicyModel, stage: Stage, cache: &SessionCache) -> Vec<(String, Class)> {
        plan(m, stage, &facts(), cache, |_| false)
            .into_iter()
            .map(|e| (e.def.name.clone(), e.class))
            .collect()
    }

    fn fresh() -> SessionCache {
        let mut c = SessionCache::new();
        c.start_connection();
        c
    }

    #[test]
    fn only_limits_of_the_stage_whose_condition_holds_apply() {
        let m = model(
            r#"
[[limit]]
name = "mail"
ratelimit = "5 / 1h / per_mail / k"
[[limit]]
name = "rcpt"
ratelimit = "5 / 1h / per_rcpt / strict / k"
[[limit]]
name = "anonymous"
ratelimit = "5 / 1h / per_rcpt / strict / a"
when = "!authenticated"
"#,
        );
        let got = classes(&m, Stage::Rcpt, &fresh());
        assert_eq!(got, [("rcpt".to_string(), Class::Now)]);
    }

    #[test]
    fn each_kind_of_limit_gets_its_class() {
        let m = model(
            r#"
[[limit]]
name = "exim-strict"
ratelimit = "5 / 1h / per_rcpt / strict / k"
[[limit]]
name = "exim-leaky"
ratelimit = "5 / 1h / per_rcpt / leaky / l"
[[limit]]
name = "gcra-leaky"
count = "recipients"
rate = "5 / 1h"
burst = "5"
[[limit]]
name = "gcra-strict"
count = "recipients"
rate = "5 / 1h"
burst = "5"
mode = "strict"
[[limit]]
name = "bucket"
count = "recipients"
algorithm = "bucket"
rate = "5 / 1h"
burst = "5"
[[limit]]
name = "bucket-commands"
count = "commands"
stage = "rcpt"
algorithm = "bucket"
rate = "5 / 1h"
burst = "5"
"#,
        );
        let got = classes(&m, Stage::Rcpt, &fresh());
        let want = [
            ("exim-strict", Class::Now),
            ("exim-leaky", Class::Replay),
            ("gcra-leaky", Class::DryRun),
            ("gcra-strict", Class::Now),
            ("bucket", Class::Reserve),
            ("bucket-commands", Class::BucketNow),
        ];
        let want: Vec<(String, Class)> = want.iter().map(|(n, c)| (n.to_string(), *c)).collect();
        assert_eq!(got, want);
    }

    #[test]
    fn same_key_and_cache_is_answered_from_the_first() {
        let m = model(
            r#"
[[limit]]
name = "minute"
ratelimit = "2 / 1m / per_cmd / leaky / k"
stage = "mail"
[[limit]]
name = "minute-tight"
ratelimit = "1 / 1m / per_cmd / leaky / k"
stage = "mail"
"#,
        );
        let got = classes(&m, Stage::Mail, &fresh());
        assert_eq!(got[1].1, Class::Same(0));
        // Once the rate is in the session's cache, both answer from it.
        let evals = plan(&m, Stage::Mail, &facts(), &fresh(), |_| false);
        let RateDef::Exim { resolved, .. } = &evals[0].def.rate else {
            panic!("an Exim limit");
        };
        let mut cache = fresh();
        cache.remember(resolved.cache, &evals[0].key, 1.5);
        let evals = plan(&m, Stage::Mail, &facts(), &cache, |_| false);
        assert!(evals.iter().all(|e| e.class == Class::Cached));
        assert!(!evals[0].outcome.over && evals[1].outcome.over);
        assert_eq!(evals[1].outcome.value, 1.5);
    }

    #[test]
    fn a_held_concurrency_slot_is_not_asked_again() {
        let m = model(
            r#"
[[limit]]
name = "sessions"
count = "sessions"
max = 2
"#,
        );
        let got = classes(&m, Stage::Connect, &fresh());
        assert_eq!(got, [("sessions".to_string(), Class::Slot)]);
        let evals = plan(&m, Stage::Connect, &facts(), &fresh(), |n| n == "sessions");
        assert!(evals.is_empty());
    }

    #[test]
    fn auth_failures_ask_whether_one_more_would_be_over() {
        let m = model(
            r#"
[[limit]]
name = "fails"
count = "auth_failures"
rate = "3 / 1h"
burst = "3"
"#,
        );
        let evals = plan(&m, Stage::Auth, &facts(), &fresh(), |_| false);
        assert_eq!(evals[0].class, Class::DryRun);
        assert_eq!(evals[0].req.count, 1.0);
        assert!(!told_as_planned(&evals[0]) && !told_after_guard(&evals[0]));
    }

    #[test]
    fn the_dry_run_adds_pending_counts_and_the_sentinel() {
        let m = model(
            r#"
[[limit]]
name = "gcra-leaky"
count = "recipients"
rate = "5 / 1h"
burst = "5"
"#,
        );
        let evals = plan(&m, Stage::Rcpt, &facts(), &fresh(), |_| false);
        let (idx, d) = dry_run(&evals, |_| 2.0).expect("a dry run");
        assert_eq!(idx, [0]);
        assert_eq!(d.limits.len(), 2);
        assert_eq!(d.limits[0].count, 3.0);
        assert_eq!(d.limits[1], sentinel());
        assert!(storing(&evals, false).is_none());
        assert!(!folds_restricted(&evals));
    }

    #[test]
    fn the_storing_decision_answers_same_keys_in_it() {
        let m = model(
            r#"
[[limit]]
name = "minute"
ratelimit = "2 / 1m / per_cmd / strict / k"
stage = "mail"
[[limit]]
name = "minute-tight"
ratelimit = "1 / 1m / per_cmd / strict / k"
stage = "mail"
"#,
        );
        let evals = plan(&m, Stage::Mail, &facts(), &fresh(), |_| false);
        let (idx, d) = storing(&evals, false).expect("a decision");
        assert_eq!(idx, [0, 1]);
        assert!(matches!(
            d.limits[1].algorithm,
            Algorithm::Same { of: 0, limit } if limit == 1.0
        ));
        let (_, refused) = storing(&evals, true).expect("a decision");
        assert_eq!(refused.limits.last(), Some(&sentinel()));
        assert!(folds_restricted(&evals));
        assert!(dry_run(&evals, |_| 0.0).is_none());
    }

    #[test]
    fn restrict_candidates_are_user_address_and_restrict_keys() {
        let m = model(
            r#"
[[limit]]
name = "per-sender"
count = "messages"
key = "${sender_address}"
rate = "5 / 1h"
burst = "5"
action = "restrict"
"#,
        );
        assert_eq!(
            restrict_candidates(&m, &facts()),
            ["alice@example.org", "192.0.2.7"]
        );
        let f = Facts {
            user: None,
            sender: Some("bob@example.net".into()),
            ..facts()
        };
        assert_eq!(
            restrict_candidates(&m, &f),
            ["192.0.2.7", "bob@example.net"]
        );
    }

    proptest! {
        /// The storing decision holds one request per limit decided now (and per limit
        /// answered from one of them), in order, and the sentinel exactly when refused.
        #[test]
        fn storing_holds_the_limits_decided_now(
            kinds in proptest::collection::vec(0u8..4, 1..6),
            refused in any::<bool>(),
        ) {
            let mut text = String::new();
            for (i, k) in kinds.iter().enumerate() {
                let spec = match k {
                    0 => format!("ratelimit = \"5 / 1h / per_rcpt / strict / k{i}\""),
                    1 => format!("ratelimit = \"5 / 1h / per_rcpt / leaky / k{i}\""),
                    2 => format!("key = \"k{i}\"\ncount = \"recipients\"\nrate = \"5 / 1h\"\nburst = \"5\""),
                    _ => format!("key = \"k{i}\"\ncount = \"recipients\"\nalgorithm = \"bucket\"\nrate = \"5 / 1h\"\nburst = \"5\""),
                };
                text.push_str(&format!("[[limit]]\nname = \"l{i}\"\n{spec}\n"));
            }
            let m = model(&text);
            let evals = plan(&m, Stage::Rcpt, &facts(), &fresh(), |_| false);
            prop_assert_eq!(evals.len(), kinds.len());
            let stored = kinds.iter().filter(|&&k| k == 0 || k == 3).count();
            match storing(&evals, refused) {
                None => prop_assert_eq!(stored, 0),
                Some((idx, d)) => {
                    prop_assert_eq!(idx.len(), stored);
                    prop_assert_eq!(d.limits.len(), stored + usize::from(refused));
                    prop_assert_eq!(d.limits.last() == Some(&sentinel()), refused);
                    prop_assert!(idx.windows(2).all(|w| w[0] < w[1]));
                }
            }
        }
    }
}
