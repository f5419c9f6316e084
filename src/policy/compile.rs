//! Compiling `[lists]`, `[[limit]]` and `[auth_failures]` into the [`PolicyModel`]: every
//! value checked, every refusal at its file, line and column.

use std::ops::Range;
use std::time::Duration;

use toml::Spanned;

use super::baseline::{BaselineDef, BaselineSpec, DAY_SECS, DEFAULT_FACTOR};
use super::condition::{Condition, Subject};
use super::lists::{Lists, NamedList};
use super::model::{
    acl_of, stage_of, Action, At, AuthDelay, Counted, DelayKind, LimitDef, MessageKeySettings,
    PolicyModel, RateDef, RestrictDef, DEFAULT_MAX_DELAY, HARD_MAX_DELAY,
};
use super::template::{Template, Var};
use super::Stage;
use crate::config::{parse_duration, Config, ConfigError, LimitConfig};
use crate::limit::bucket::{BucketSpec, Multipliers};
use crate::limit::gcra::GcraSpec;
use crate::limit::spec::{PerMode, UpdateMode};
use crate::limit::LimitSpec;

/// The span of a template/condition character inside a quoted TOML string (best effort:
/// exact unless the string holds escapes).
fn inner(span: Range<usize>, at: usize) -> Range<usize> {
    let s = span.start + 1 + at;
    s..s
}

fn load_lists(config: &Config, at: At<'_>) -> Result<Lists, ConfigError> {
    let mut lists = Lists::default();
    for (name, spanned) in &config.lists {
        let span = spanned.span();
        let cfg = spanned.get_ref();
        let list = match (&cfg.file, &cfg.entries) {
            (Some(file), None) => {
                let path = config.resolve(file.get_ref());
                let text = std::fs::read_to_string(&path).map_err(|e| {
                    at(
                        file.span(),
                        format!("list {name}: cannot read {}: {e}", path.display()),
                    )
                })?;
                NamedList::from_text(&text).map_err(|e| ConfigError::Invalid {
                    path: path.clone(),
                    line: e.line,
                    column: e.column,
                    message: format!("list {name}: {}", e.message),
                })?
            }
            (None, Some(entries)) => {
                let mut l = NamedList::default();
                for (i, e) in entries.get_ref().iter().enumerate() {
                    l.add_line(e.get_ref(), i + 1).map_err(|err| {
                        at(
                            inner(e.span(), err.column.saturating_sub(1)),
                            format!("list {name}: {}", err.message),
                        )
                    })?;
                }
                l.sort();
                l
            }
            _ => {
                return Err(at(
                    span,
                    format!("list {name}: give exactly one of `file` or `entries`"),
                ))
            }
        };
        lists.insert(name, list);
    }
    Ok(lists)
}

fn word(v: &Option<Spanned<String>>) -> Option<(&str, Range<usize>)> {
    v.as_ref().map(|s| (s.get_ref().as_str(), s.span()))
}

fn template(v: &Spanned<String>, what: &str, at: At<'_>) -> Result<Template, ConfigError> {
    Template::parse(v.get_ref())
        .map_err(|e| at(inner(v.span(), e.at), format!("{what}: {}", e.message)))
}

fn duration(v: &Spanned<String>, what: &str, at: At<'_>) -> Result<Duration, ConfigError> {
    parse_duration(v.get_ref()).map_err(|e| at(v.span(), format!("{what}: {e}")))
}

/// Compiles `config`'s `[lists]`, `[[limit]]` and `[auth_failures]`; every error names
/// where it is.
pub fn compile(config: &Config) -> Result<PolicyModel, ConfigError> {
    let at: At<'_> = &|span, message| config.error_at(span, message);
    let identity = super::identity::Identity::compile(&config.identity);
    let mut lists = load_lists(config, at)?;
    lists.set_login_realm(identity.default_realm.clone());
    let mut limits: Vec<LimitDef> = Vec::new();
    for (i, raw) in config.limits.iter().enumerate() {
        let def = compile_limit(raw, i, &lists, at)?;
        if limits.iter().any(|l| l.name == def.name) {
            let span = raw.name.as_ref().map_or(0..0, |n| n.span());
            return Err(at(span, format!("two limits are called {:?}", def.name)));
        }
        limits.push(def);
    }
    let a = &config.auth_failures;
    let auth = AuthDelay {
        enabled: a.enabled,
        base: a.base_delay.0,
        max: a.max_delay.0,
        decay_secs: u32::try_from(a.decay.0.as_secs()).unwrap_or(u32::MAX),
    };
    if auth.max > HARD_MAX_DELAY || auth.base > auth.max {
        return Err(at(
            0..0,
            format!(
                "[auth_failures] base_delay must not exceed max_delay, and max_delay must be at most {}s",
                HARD_MAX_DELAY.as_secs()
            ),
        ));
    }
    if auth.decay_secs == 0 {
        return Err(at(0..0, "[auth_failures] decay must be at least 1s".into()));
    }
    let message_keys = message_key_settings(config, at)?;
    Ok(PolicyModel {
        limits,
        lists,
        auth,
        hostname: config.server.hostname.clone(),
        baselines: Default::default(),
        message_keys,
        identity,
    })
}

/// `[message_keys]`: each exempt link domain a domain name (lower-cased).
fn message_key_settings(config: &Config, at: At<'_>) -> Result<MessageKeySettings, ConfigError> {
    let raw = &config.message_keys;
    let mut exempt = Vec::new();
    for d in &raw.exempt_link_domains {
        let v = d
            .get_ref()
            .trim()
            .trim_end_matches('.')
            .to_ascii_lowercase();
        let ok = !v.is_empty()
            && v.len() <= 253
            && v.split('.').all(|l| {
                !l.is_empty()
                    && l.len() <= 63
                    && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
            });
        if !ok {
            return Err(at(
                d.span(),
                format!(
                    "[message_keys] exempt_link_domains: {:?} is not a domain name (write example.org, not a URL or an address)",
                    d.get_ref()
                ),
            ));
        }
        exempt.push(v);
    }
    let budget = match &raw.budget {
        None => MessageKeySettings::DEFAULT_BUDGET,
        Some(b) => {
            let d = b.get_ref().0;
            if !(MessageKeySettings::MIN_BUDGET..=MessageKeySettings::MAX_BUDGET).contains(&d) {
                return Err(at(
                    b.span(),
                    format!(
                        "[message_keys] budget: {}ms is out of range (write from 1ms to 10s; the default is 50ms)",
                        d.as_millis()
                    ),
                ));
            }
            d
        }
    };
    Ok(MessageKeySettings {
        exempt_link_domains: exempt,
        include_automatic: raw.include_automatic,
        budget,
    })
}

/// Whether a key template uses a message key (the limit is then judged at the end of data
/// unless its stage says otherwise, which is an error).
fn on_message(key: Option<&Template>) -> bool {
    key.is_some_and(|k| k.message_keys().next().is_some())
}

/// The words of a limit that say how it counts, each checked: `count`, `stage` and `mode`.
struct Words {
    count: Option<Counted>,
    stage: Option<Stage>,
    mode: Option<UpdateMode>,
}

/// How a limit rates what it counts: what, at which stage, with which algorithm, and how
/// the store is updated.
struct Rated {
    counted: Counted,
    stage: Stage,
    rate: RateDef,
    mode: UpdateMode,
}

/// Compiles one `[[limit]]` (the `index`th, named `limit-N` when it has no name); every
/// refusal names the limit and where it is.
fn compile_limit(
    raw: &LimitConfig,
    index: usize,
    lists: &Lists,
    at: At<'_>,
) -> Result<LimitDef, ConfigError> {
    let anchor = anchor_of(raw);
    let line = match at(anchor.clone(), String::new()) {
        ConfigError::Invalid { line, .. } => line,
        ConfigError::Read { .. } => 0,
    };
    let name = raw
        .name
        .as_ref()
        .map(|n| n.get_ref().clone())
        .unwrap_or_else(|| format!("limit-{}", index + 1));
    let err = |span: Range<usize>, m: String| at(span, format!("limit {name}: {m}"));

    let words = words(raw, &err)?;
    one_rate(raw, &anchor, &err)?;
    let mut key: Option<Template> = match &raw.key {
        Some(k) => Some(template(k, &format!("limit {name}: key"), at)?),
        None => None,
    };
    let Rated {
        counted,
        stage,
        rate,
        mode,
    } = rated(raw, &words, &mut key, &err)?;
    rate_fields(raw, counted, stage, &anchor, &err)?;
    let when = match &raw.when {
        Some(w) => Some(
            Condition::parse(w.get_ref(), &|n| lists.contains(n))
                .map_err(|e| err(inner(w.span(), e.at), format!("when: {}", e.message)))?,
        ),
        None => None,
    };
    let max_delay = max_delay(raw, &err)?;
    let action_span = raw.action.as_ref().map_or(anchor.clone(), |a| a.span());
    let action = action(raw, stage, &rate, max_delay, &action_span, &err)?;
    let restrict = restrict_def(raw, action, &name, key.as_ref(), at, &err)?;
    message_key_rules(
        raw,
        stage,
        key.as_ref(),
        &rate,
        action,
        restrict.as_ref(),
        &err,
    )?;
    action_fields(raw, action, counted, action_span, &err)?;
    let message = match &raw.message {
        Some(m) => Some(template(m, &format!("limit {name}: message"), at)?),
        None => None,
    };
    let code = code(raw, action, &err)?;
    let limit_list = limit_list(raw, lists, &rate, &err)?;
    let baseline = compile_baseline(
        raw,
        &rate,
        mode == UpdateMode::Readonly,
        limit_list.is_some(),
        &err,
    )?;
    Ok(LimitDef {
        baseline,
        name,
        stage,
        counted,
        key,
        rate,
        mode,
        when,
        when_text: raw.when.as_ref().map(|w| w.get_ref().clone()),
        action,
        message,
        code,
        max_delay,
        limit_list,
        line,
        restrict,
    })
}

/// The position of the whole `[[limit]]`: its first field that is present.
fn anchor_of(raw: &LimitConfig) -> Range<usize> {
    [
        raw.name.as_ref().map(|s| s.span()),
        raw.ratelimit.as_ref().map(|s| s.span()),
        raw.rate.as_ref().map(|s| s.span()),
        raw.count.as_ref().map(|s| s.span()),
        raw.max.as_ref().map(|s| s.span()),
        raw.ratio.as_ref().map(|s| s.span()),
    ]
    .into_iter()
    .flatten()
    .min_by_key(|r| r.start)
    .unwrap_or(0..0)
}

/// Reads the limit's `count`, `stage` and `mode` words, refusing unknown ones.
fn words(raw: &LimitConfig, err: At<'_>) -> Result<Words, ConfigError> {
    let count = match word(&raw.count) {
        Some((w, span)) => Some(Counted::parse(w).ok_or_else(|| {
            err(span, format!("unknown count {w:?}: use connections, commands, messages, recipients, distinct_recipients, bytes, auth_failures, sessions, refused_recipients, refused_messages, bounced_recipients or deferred_recipients"))
        })?),
        None => None,
    };
    let stage = match word(&raw.stage) {
        Some((w, span)) => Some(stage_of(w).ok_or_else(|| {
            err(span, format!("unknown stage {w:?}: use connect, helo, auth, mail, rcpt, data, message or command"))
        })?),
        None => None,
    };
    let mode = match word(&raw.mode) {
        Some((w, span)) => Some(match w {
            "leaky" => UpdateMode::Leaky,
            "strict" => UpdateMode::Strict,
            "readonly" => UpdateMode::Readonly,
            _ => {
                return Err(err(
                    span,
                    format!("unknown mode {w:?}: use leaky, strict or readonly"),
                ))
            }
        }),
        None => None,
    };
    Ok(Words { count, stage, mode })
}

/// Checks that the limit gives exactly one rate (`ratelimit`, `rate` with `burst`, `max`
/// or `ratio`), and the ratio's own settings only with `ratio`.
fn one_rate(raw: &LimitConfig, anchor: &Range<usize>, err: At<'_>) -> Result<(), ConfigError> {
    let given = [
        raw.ratelimit.is_some(),
        raw.rate.is_some(),
        raw.max.is_some(),
        raw.ratio.is_some(),
    ];
    if given.iter().filter(|g| **g).count() != 1 {
        return Err(err(
            anchor.clone(),
            "give exactly one of `ratelimit` (Exim syntax), `rate` with `burst`, `max` (sessions at once) or `ratio`".into(),
        ));
    }
    if raw.ratio.is_none() {
        if let Some((k, span)) = super::ratio::stray_key(raw) {
            return Err(err(span, format!("`{k}` goes with `ratio`")));
        }
    }
    Ok(())
}

/// Compiles the limit's one rate, whichever it gives; an Exim `ratelimit` string may set
/// the limit's `key`.
fn rated(
    raw: &LimitConfig,
    words: &Words,
    key: &mut Option<Template>,
    err: At<'_>,
) -> Result<Rated, ConfigError> {
    if let Some(ratio) = &raw.ratio {
        let (counted, stage, ratio) = super::ratio::compile(raw, ratio, words.stage, err)?;
        Ok(Rated {
            counted,
            stage,
            rate: RateDef::Ratio(ratio),
            mode: UpdateMode::Readonly,
        })
    } else if let Some(rl) = &raw.ratelimit {
        exim_rated(raw, rl, words, key, err)
    } else if let Some(max) = &raw.max {
        sessions_rated(max, words, key.as_ref(), err)
    } else {
        burst_rated(raw, words, key.as_ref(), err)
    }
}

/// Compiles an Exim `ratelimit` string: what it counts, at which stage, and its key and
/// `unique=` templates.
fn exim_rated(
    raw: &LimitConfig,
    rl: &Spanned<String>,
    words: &Words,
    key: &mut Option<Template>,
    err: At<'_>,
) -> Result<Rated, ConfigError> {
    let spec =
        LimitSpec::parse(rl.get_ref()).map_err(|e| err(rl.span(), format!("ratelimit: {e}")))?;
    if words.mode.is_some() {
        return Err(err(
            raw.mode.as_ref().map_or(0..0, |m| m.span()),
            "with `ratelimit` write the mode inside the string (/ leaky, / strict, / readonly)"
                .into(),
        ));
    }
    let counted = exim_counted(raw, &spec, words.count, err)?;
    let spec_key_on_message = spec
        .key_text()
        .and_then(|k| Template::parse(k).ok())
        .is_some_and(|t| t.message_keys().next().is_some());
    let stage = words
        .stage
        .unwrap_or(if on_message(key.as_ref()) || spec_key_on_message {
            Stage::Message
        } else {
            counted.default_stage()
        });
    let resolved = spec.resolve(acl_of(stage)).map_err(|e| {
        err(
            rl.span(),
            format!("ratelimit at stage {}: {e}", stage.as_str()),
        )
    })?;
    if let Some(k) = spec.key_text() {
        if key.is_some() {
            return Err(err(
                raw.key.as_ref().map_or(0..0, |k| k.span()),
                format!(
                    "the ratelimit string already has key text {k:?}; give the key in one place"
                ),
            ));
        }
        *key = Some(
            Template::parse(k)
                .map_err(|e| err(rl.span(), format!("ratelimit key {k:?}: {}", e.message)))?,
        );
    }
    let unique = match spec.unique() {
        Some(u) if spec.per_mode() != PerMode::Addr => Some(
            Template::parse(u)
                .map_err(|e| err(rl.span(), format!("ratelimit unique={u:?}: {}", e.message)))?,
        ),
        _ => None,
    };
    let mode = resolved.update;
    Ok(Rated {
        counted,
        stage,
        rate: RateDef::Exim {
            spec,
            resolved,
            unique,
        },
        mode,
    })
}

/// What an Exim `ratelimit` string counts: what its `per_*` option says, or the `count`
/// given when it may add to that (auth failures, upstream's outcomes).
fn exim_counted(
    raw: &LimitConfig,
    spec: &LimitSpec,
    explicit: Option<Counted>,
    err: At<'_>,
) -> Result<Counted, ConfigError> {
    let from_per = if spec.unique().is_some() && spec.per_mode() != PerMode::Addr {
        Counted::Distinct
    } else {
        match spec.per_mode() {
            PerMode::Conn => Counted::Connections,
            PerMode::Cmd => Counted::Commands,
            PerMode::Mail => Counted::Messages,
            PerMode::Rcpt => Counted::Recipients,
            PerMode::Addr => Counted::DistinctRecipients,
            PerMode::Byte => Counted::Bytes,
        }
    };
    Ok(match explicit {
        None => from_per,
        Some(c) if c == from_per => c,
        Some(c @ Counted::AuthFailures)
            if spec.per_mode() == PerMode::Cmd || spec.per_option().is_none() =>
        {
            c
        }
        // Charged one by one when upstream answers (or reports) them.
        Some(c)
            if c.outcome() && (spec.per_mode() == PerMode::Cmd || spec.per_option().is_none()) =>
        {
            c
        }
        Some(c) => {
            return Err(err(
                raw.count.as_ref().map_or(0..0, |c| c.span()),
                format!(
                    "count = {:?} disagrees with the ratelimit string, which counts {} (with `ratelimit` the per_* option says what is counted; only \"auth_failures\" and upstream's outcomes (refused_*, bounced_recipients, deferred_recipients) may be added, with per_cmd or no per_* option)",
                    c.as_str(),
                    from_per.as_str()
                ),
            ))
        }
    })
}

/// Compiles `max`: sessions at once, from MAIL when the key names the user, else from the
/// connection.
fn sessions_rated(
    max: &Spanned<i64>,
    words: &Words,
    key: Option<&Template>,
    err: At<'_>,
) -> Result<Rated, ConfigError> {
    let counted = words.count.unwrap_or(Counted::Sessions);
    if counted != Counted::Sessions {
        return Err(err(
            max.span(),
            "`max` is for count = \"sessions\" (sessions at once)".into(),
        ));
    }
    let n = u64::try_from(*max.get_ref())
        .ok()
        .filter(|n| *n >= 1)
        .ok_or_else(|| err(max.span(), "max must be at least 1".into()))?;
    let uses_user = key.is_some_and(|k| k.vars().any(|v| v == Var::User));
    let stage = words.stage.unwrap_or(if uses_user {
        Stage::Mail
    } else {
        Stage::Connect
    });
    Ok(Rated {
        counted,
        stage,
        rate: RateDef::Concurrency(n),
        mode: UpdateMode::Strict,
    })
}

/// Compiles `rate` with `burst`: what is counted (which must be said), at which stage, the
/// algorithm and its update mode.
fn burst_rated(
    raw: &LimitConfig,
    words: &Words,
    key: Option<&Template>,
    err: At<'_>,
) -> Result<Rated, ConfigError> {
    let rate_s = raw.rate.as_ref().expect("checked above");
    let burst = raw.burst.as_ref().ok_or_else(|| {
        err(
            rate_s.span(),
            "`rate` needs a `burst` (how many events at once)".into(),
        )
    })?;
    let counted = words.count.ok_or_else(|| {
        err(
            rate_s.span(),
            "with `rate`, say what is counted: count = \"messages\", \"recipients\", ...".into(),
        )
    })?;
    if matches!(
        counted,
        Counted::Sessions | Counted::DistinctRecipients | Counted::Distinct
    ) {
        return Err(err(
            raw.count.as_ref().map_or(0..0, |c| c.span()),
            format!(
                "count = {:?} needs `max` (sessions) or an Exim `ratelimit` (distinct values)",
                counted.as_str()
            ),
        ));
    }
    let stage = words.stage.unwrap_or(if on_message(key) {
        Stage::Message
    } else {
        counted.default_stage()
    });
    let rate = burst_algorithm(raw, rate_s, burst, err)?;
    let mode = words.mode.unwrap_or(UpdateMode::Leaky);
    if mode == UpdateMode::Readonly {
        return Err(err(
            raw.mode.as_ref().map_or(0..0, |m| m.span()),
            "readonly is for Exim `ratelimit` limits".into(),
        ));
    }
    if mode == UpdateMode::Strict && matches!(rate, RateDef::Bucket(_)) {
        return Err(err(
            raw.mode.as_ref().map_or(0..0, |m| m.span()),
            "a bucket reserves and commits; strict is for gcra and ratelimit".into(),
        ));
    }
    Ok(Rated {
        counted,
        stage,
        rate,
        mode,
    })
}

/// The algorithm of a `rate` with `burst`: GCRA, or a bucket (optionally `dynamic`).
fn burst_algorithm(
    raw: &LimitConfig,
    rate_s: &Spanned<String>,
    burst: &Spanned<String>,
    err: At<'_>,
) -> Result<RateDef, ConfigError> {
    let algo = word(&raw.algorithm).map_or("gcra", |(w, _)| w);
    Ok(match algo {
        "gcra" => {
            if raw.dynamic.is_some() {
                return Err(err(
                    raw.dynamic.as_ref().map_or(0..0, |d| d.span()),
                    "`dynamic` is for algorithm = \"bucket\"".into(),
                ));
            }
            RateDef::Gcra(
                GcraSpec::parse(burst.get_ref(), rate_s.get_ref()).map_err(|e| {
                    err(
                        rate_s.span().start.min(burst.span().start)..burst.span().end,
                        format!("rate/burst: {e}"),
                    )
                })?,
            )
        }
        "bucket" => {
            let mut b = BucketSpec::parse(burst.get_ref(), rate_s.get_ref())
                .map_err(|e| err(rate_s.span(), format!("rate/burst: {e}")))?;
            if b.burst <= 0.0 || !b.burst.is_finite() {
                return Err(err(burst.span(), "burst must be positive".into()));
            }
            if raw.dynamic.as_ref().is_some_and(|d| *d.get_ref()) {
                b.dynamic = Some(Multipliers::default());
            }
            RateDef::Bucket(b)
        }
        other => {
            return Err(err(
                raw.algorithm.as_ref().map_or(0..0, |a| a.span()),
                format!("unknown algorithm {other:?}: use gcra or bucket"),
            ))
        }
    })
}

/// Checks the fields that go with one rate only: auth failures counted at `auth`,
/// `algorithm` and `burst` only with `rate`.
fn rate_fields(
    raw: &LimitConfig,
    counted: Counted,
    stage: Stage,
    anchor: &Range<usize>,
    err: At<'_>,
) -> Result<(), ConfigError> {
    if counted == Counted::AuthFailures && stage != Stage::Auth {
        return Err(err(
            raw.stage.as_ref().map_or(anchor.clone(), |s| s.span()),
            "auth_failures are counted at stage \"auth\"".into(),
        ));
    }
    if raw.algorithm.is_some() && raw.rate.is_none() {
        return Err(err(
            raw.algorithm.as_ref().map_or(0..0, |a| a.span()),
            "`algorithm` goes with `rate` and `burst`".into(),
        ));
    }
    if raw.burst.is_some() && raw.rate.is_none() {
        return Err(err(
            raw.burst.as_ref().map_or(0..0, |a| a.span()),
            "`burst` goes with `rate`".into(),
        ));
    }
    Ok(())
}

/// The limit's `max_delay` (at most [`HARD_MAX_DELAY`]), else the default.
fn max_delay(raw: &LimitConfig, err: At<'_>) -> Result<Duration, ConfigError> {
    let Some(d) = &raw.max_delay else {
        return Ok(DEFAULT_MAX_DELAY);
    };
    let v = duration(d, "max_delay", err)?;
    if v > HARD_MAX_DELAY {
        return Err(err(
            d.span(),
            format!(
                "max_delay may be at most {}s (clients give up after 5 minutes)",
                HARD_MAX_DELAY.as_secs()
            ),
        ));
    }
    Ok(v)
}

/// Compiles the limit's `action` (`defer` when not given) with what it needs: a delay, a
/// stage where it can take a message, a rate to pace at.
fn action(
    raw: &LimitConfig,
    stage: Stage,
    rate: &RateDef,
    max_delay: Duration,
    action_span: &Range<usize>,
    err: At<'_>,
) -> Result<Action, ConfigError> {
    let action_word = word(&raw.action).map_or("defer", |(w, _)| w);
    Ok(match action_word {
        "warn" => Action::Warn,
        "header" => Action::Header,
        "delay" => delay_action(raw, max_delay, action_span, err)?,
        "hold" | "reroute" | "pace" => {
            taking_action(action_word, stage, rate, action_span.clone(), err)?
        }
        "defer" => Action::Defer,
        "deny" => Action::Deny,
        "disconnect" => Action::Disconnect,
        "restrict" => Action::Restrict,
        other => {
            return Err(err(
                action_span.clone(),
                format!(
                    "unknown action {other:?}: use warn, header, delay, hold, reroute, pace, defer, deny, disconnect or restrict"
                ),
            ))
        }
    })
}

/// `action = "delay"` with its `delay`: a duration up to `max_delay`, or `computed`.
fn delay_action(
    raw: &LimitConfig,
    max_delay: Duration,
    action_span: &Range<usize>,
    err: At<'_>,
) -> Result<Action, ConfigError> {
    let d = raw.delay.as_ref().ok_or_else(|| {
        err(
            action_span.clone(),
            "action = \"delay\" needs `delay` (a duration such as \"2s\", or \"computed\")".into(),
        )
    })?;
    if d.get_ref() == "computed" {
        return Ok(Action::Delay(DelayKind::Computed));
    }
    let v = duration(d, "delay", err)?;
    if v > max_delay {
        return Err(err(
            d.span(),
            format!("delay is longer than max_delay ({}s)", max_delay.as_secs()),
        ));
    }
    Ok(Action::Delay(DelayKind::Fixed(v)))
}

/// The actions that take a message (`hold`, `reroute`, `pace`): only at a stage with one,
/// and `pace` only for a limit with a rate to release at.
fn taking_action(
    action_word: &str,
    stage: Stage,
    rate: &RateDef,
    action_span: Range<usize>,
    err: At<'_>,
) -> Result<Action, ConfigError> {
    let with_message = matches!(
        stage,
        Stage::Mail | Stage::Rcpt | Stage::Data | Stage::Message
    );
    if action_word == "hold" {
        if !with_message {
            return Err(err(
                action_span,
                "action = \"hold\" holds a message: it is for limits at the mail, rcpt, data or message stage".into(),
            ));
        }
        return Ok(Action::Hold);
    }
    if !with_message {
        return Err(err(
            action_span,
            format!("action = \"{action_word}\" takes a message: it is for limits at the mail, rcpt, data or message stage"),
        ));
    }
    if action_word == "reroute" {
        return Ok(Action::Reroute);
    }
    if matches!(rate, RateDef::Concurrency(_)) {
        return Err(err(
            action_span,
            "action = \"pace\" releases at the limit's rate: it is for rate limits, not sessions at once".into(),
        ));
    }
    if matches!(rate, RateDef::Ratio(_)) {
        return Err(err(
            action_span,
            "action = \"pace\" releases at the limit's rate: a ratio limit has none (use hold, reroute, defer or restrict)".into(),
        ));
    }
    Ok(Action::Pace)
}

/// Checks what goes with the action: `delay` only with `delay`, and a sessions limit only
/// warning, deferring, denying or disconnecting.
fn action_fields(
    raw: &LimitConfig,
    action: Action,
    counted: Counted,
    action_span: Range<usize>,
    err: At<'_>,
) -> Result<(), ConfigError> {
    if raw.delay.is_some() && !matches!(action, Action::Delay(_)) {
        return Err(err(
            raw.delay.as_ref().map_or(0..0, |d| d.span()),
            "`delay` goes with action = \"delay\"".into(),
        ));
    }
    if counted == Counted::Sessions
        && !matches!(
            action,
            Action::Warn | Action::Defer | Action::Disconnect | Action::Deny
        )
    {
        return Err(err(
            action_span,
            "a sessions limit can warn, defer, deny or disconnect".into(),
        ));
    }
    Ok(())
}

/// The limit's reply `code`, which must fit its action (defer 4xx, deny 5xx, disconnect
/// 421).
fn code(raw: &LimitConfig, action: Action, err: At<'_>) -> Result<Option<u16>, ConfigError> {
    let Some(c) = &raw.code else {
        return Ok(None);
    };
    let v = *c.get_ref();
    let ok = match action {
        Action::Defer => (400..500).contains(&v),
        Action::Deny => (500..600).contains(&v),
        Action::Disconnect => v == 421,
        _ => false,
    };
    if !ok {
        return Err(err(
            c.span(),
            format!(
                "code {v} does not fit action {:?} (defer: 4xx, deny: 5xx, disconnect: 421)",
                action.as_str()
            ),
        ));
    }
    Ok(Some(v as u16))
}

/// The limit's `limit_list` (a list of numbers in `[lists]`) and the `limit_by` subject
/// that looks it up.
fn limit_list(
    raw: &LimitConfig,
    lists: &Lists,
    rate: &RateDef,
    err: At<'_>,
) -> Result<Option<(String, Subject)>, ConfigError> {
    let Some(l) = &raw.limit_list else {
        if let Some(b) = &raw.limit_by {
            return Err(err(b.span(), "limit_by goes with limit_list".into()));
        }
        return Ok(None);
    };
    let lname = l.get_ref();
    let list = lists
        .get(lname)
        .ok_or_else(|| err(l.span(), format!("no list called {lname:?} in [lists]")))?;
    if matches!(rate, RateDef::Concurrency(_)) {
        return Err(err(l.span(), "limit_list is for rate limits".into()));
    }
    if let Some(bad) = list.values().find(|v| {
        v.parse::<f64>()
            .map_or(true, |x| !(x >= 0.0 && x.is_finite()))
    }) {
        return Err(err(
            l.span(),
            format!("list {lname:?} has the value {bad:?}, which is not a limit (a number)"),
        ));
    }
    let by = match &raw.limit_by {
        Some(b) => super::condition::Subject::parse_word(b.get_ref())
            .ok_or_else(|| err(b.span(), format!("limit_by {:?} is not one of client_ip, user, user_domain, sender, sender_domain, recipient, recipient_domain, helo, header_from, listener", b.get_ref())))?,
        None => Subject::ClientIp,
    };
    Ok(Some((lname.clone(), by)))
}

/// Where a limit may use the message keys (`${fingerprint}`, `${link_domain}`,
/// `${subject_shape}`): in its key, one of them, at the message stage, and in nothing that
/// names one value per event (`unique=`, `restrict_key`, `notify_user`). A `restrict`
/// limit keyed on one restricts its senders (`restrict_senders`) or its `restrict_key`,
/// never the message key itself; `restrict_senders` is for limits keyed on one.
fn message_key_rules(
    raw: &LimitConfig,
    stage: Stage,
    key: Option<&Template>,
    rate: &RateDef,
    action: Action,
    restrict: Option<&RestrictDef>,
    err: At<'_>,
) -> Result<(), ConfigError> {
    let key_span = || {
        [&raw.key, &raw.ratelimit]
            .into_iter()
            .flatten()
            .next()
            .map_or(0..0, |v| v.span())
    };
    let keyed: Vec<Var> = key.map(|k| k.message_keys().collect()).unwrap_or_default();
    if keyed.len() > 1 {
        return Err(err(
            key_span(),
            "a key takes at most one message key (${fingerprint}, ${link_domain} or ${subject_shape}): each has many values".into(),
        ));
    }
    if let Some(v) = keyed.first() {
        let name = var_name(*v);
        if matches!(rate, RateDef::Concurrency(_) | RateDef::Ratio(_)) {
            return Err(err(
                key_span(),
                format!("${{{name}}} is for rate limits (ratelimit, or rate with burst)"),
            ));
        }
        if stage != Stage::Message {
            return Err(err(
                raw.stage.as_ref().map_or_else(key_span, |s| s.span()),
                format!(
                    "${{{name}}} exists only at the end of data: a limit keyed on it is judged at stage \"message\" (leave `stage` out or write stage = \"message\"), not {:?}",
                    stage.as_str()
                ),
            ));
        }
    }
    if let RateDef::Exim {
        unique: Some(u), ..
    } = rate
    {
        if let Some(v) = u.message_keys().next() {
            return Err(err(
                key_span(),
                format!(
                    "unique=${{{}}}: a message key has many values; count distinct senders (unique=${{authenticated_id}}) under a key of it instead",
                    var_name(v)
                ),
            ));
        }
    }
    let Some(r) = restrict else {
        return Ok(());
    };
    for (t, field) in [(&r.key, &raw.restrict_key), (&r.notify, &raw.notify_user)] {
        if let Some(v) = t.as_ref().and_then(|t| t.message_keys().next()) {
            return Err(err(
                field.as_ref().map_or(0..0, |f| f.span()),
                format!(
                    "${{{}}} names a message, not someone to restrict or tell",
                    var_name(v)
                ),
            ));
        }
    }
    if r.senders && keyed.is_empty() {
        return Err(err(
            raw.restrict_senders.as_ref().map_or(0..0, |s| s.span()),
            "restrict_senders is for limits keyed on a message key (key = \"${fingerprint}\", \"${link_domain}\" or \"${subject_shape}\")".into(),
        ));
    }
    if action == Action::Restrict && !r.senders && r.key.is_none() && !keyed.is_empty() {
        return Err(err(
            key_span(),
            "a restriction of a message key would stop nobody: give restrict_senders = true (every account that sent it) or a restrict_key".into(),
        ));
    }
    Ok(())
}

/// The config name of a variable.
fn var_name(v: Var) -> &'static str {
    Var::NAMES
        .iter()
        .find(|(_, x)| *x == v)
        .map_or("?", |(n, _)| n)
}

/// Whether a template reads the name a client tried in AUTH.
fn attempted(t: &Template) -> bool {
    t.vars().any(|v| v == Var::AuthAttempt)
}

/// The restriction settings of a limit: only with `action = "restrict"`. Neither the
/// restricted key nor `notify_user` may be built from a name a client merely tried in AUTH.
fn restrict_def(
    raw: &LimitConfig,
    action: Action,
    name: &str,
    limit_key: Option<&Template>,
    at: At<'_>,
    err: At<'_>,
) -> Result<Option<RestrictDef>, ConfigError> {
    let spans = [
        raw.restrict_key
            .as_ref()
            .map(|v| ("restrict_key", v.span())),
        raw.restrict_for
            .as_ref()
            .map(|v| ("restrict_for", v.span())),
        raw.while_restricted
            .as_ref()
            .map(|v| ("while_restricted", v.span())),
        raw.restricted_code
            .as_ref()
            .map(|v| ("restricted_code", v.span())),
        raw.restricted_message
            .as_ref()
            .map(|v| ("restricted_message", v.span())),
        raw.notify_user.as_ref().map(|v| ("notify_user", v.span())),
    ];
    let senders = raw.restrict_senders.as_ref().is_some_and(|s| *s.get_ref());
    if action != Action::Restrict && !senders {
        if let Some((k, span)) = spans.into_iter().flatten().next() {
            return Err(err(
                span,
                format!("`{k}` goes with action = \"restrict\" or restrict_senders = true"),
            ));
        }
        return Ok(None);
    }
    let mut def = RestrictDef {
        senders,
        ..RestrictDef::default()
    };
    if let Some(k) = &raw.restrict_key {
        def.key = Some(template(k, &format!("limit {name}: restrict_key"), at)?);
    }
    if let Some(f) = &raw.restrict_for {
        def.duration = crate::store::RestrictFor::parse(f.get_ref())
            .map_err(|e| err(f.span(), e.to_string()))?;
    }
    if let Some(w) = &raw.while_restricted {
        match w.get_ref().as_str() {
            "defer" => {}
            // That [hold] exists is checked with the other sections (`cross_checks.rs`).
            "hold" => def.hold = true,
            other => {
                return Err(err(
                    w.span(),
                    format!("while_restricted {other:?}: use \"defer\" or \"hold\""),
                ))
            }
        }
    }
    if let Some(c) = &raw.restricted_code {
        def.code = restricted_code(c, err)?;
    }
    if let Some(m) = &raw.restricted_message {
        def.message = Some(template(
            m,
            &format!("limit {name}: restricted_message"),
            at,
        )?);
    }
    if let Some(n) = &raw.notify_user {
        def.notify = Some(notify_user(n, name, at, err)?);
    }
    if def.key.as_ref().or(limit_key).is_some_and(attempted) {
        let span = [&raw.restrict_key, &raw.key, &raw.ratelimit]
            .into_iter()
            .flatten()
            .next()
            .map_or(0..0, |v| v.span());
        return Err(err(
            span,
            "a restriction keyed on ${auth_attempted_id} would let any client restrict the \
             name it tries, someone else's account: restrict ${authenticated_id} or \
             ${client_ip} (give restrict_key)"
                .into(),
        ));
    }
    Ok(Some(def))
}

/// A restriction's `restricted_code`: a 4xx (not 421) or 5xx code.
fn restricted_code(c: &Spanned<i64>, err: At<'_>) -> Result<u16, ConfigError> {
    let v = *c.get_ref();
    if !(400..600).contains(&v) || v == 421 {
        return Err(err(
            c.span(),
            format!("restricted_code {v}: use a 4xx (not 421) or 5xx code"),
        ));
    }
    Ok(v as u16)
}

/// A restriction's `notify_user`: a template of the address told, never empty nor built
/// from a name a client merely tried in AUTH.
fn notify_user(
    n: &Spanned<String>,
    name: &str,
    at: At<'_>,
    err: At<'_>,
) -> Result<Template, ConfigError> {
    if n.get_ref().trim().is_empty() {
        return Err(err(
            n.span(),
            "notify_user is empty: give an address or a template such as \"${authenticated_id}\""
                .into(),
        ));
    }
    let t = template(n, &format!("limit {name}: notify_user"), at)?;
    if attempted(&t) {
        return Err(err(
            n.span(),
            "notify_user must not use ${auth_attempted_id}: that is a name a client tried, \
             not its account, and the notice would go to an address the client chose \
             (use ${authenticated_id})"
                .into(),
        ));
    }
    Ok(t)
}

/// Compiles a limit's `baseline`, `factor` and `floor`. `configured` is the limit's own
/// m or burst (the default floor); `has_list` says whether it has a `limit_list`.
fn compile_baseline(
    raw: &LimitConfig,
    rate: &RateDef,
    readonly: bool,
    has_list: bool,
    err: At<'_>,
) -> Result<Option<BaselineDef>, ConfigError> {
    let Some(text) = &raw.baseline else {
        let stray = [
            raw.factor.as_ref().map(|v| ("factor", v.span())),
            raw.floor.as_ref().map(|v| ("floor", v.span())),
        ]
        .into_iter()
        .flatten()
        .next();
        return match stray {
            Some((k, span)) => Err(err(span, format!("`{k}` goes with `baseline`"))),
            None => Ok(None),
        };
    };
    let spec = BaselineSpec::parse(text.get_ref()).map_err(|e| err(text.span(), e.to_string()))?;
    let (configured, period_secs) = match rate {
        RateDef::Exim { spec, .. } if spec.unique().is_some() => {
            return Err(err(
                text.span(),
                "baseline counts amounts per day; a limit on distinct values (per_addr, unique=) has none to count"
                    .into(),
            ))
        }
        RateDef::Exim { spec, .. } => (spec.limit(), f64::from(spec.period_secs())),
        RateDef::Gcra(g) => (g.burst, g.rate.period_secs()),
        RateDef::Bucket(b) => (b.burst, b.rate.period_secs()),
        RateDef::Concurrency(_) => {
            return Err(err(
                text.span(),
                "baseline is for rate limits (ratelimit or rate/burst), not for sessions at once (max)"
                    .into(),
            ))
        }
        RateDef::Ratio(_) => {
            return Err(err(
                text.span(),
                "baseline is for rate limits (ratelimit or rate/burst), not for ratio limits (ratio)"
                    .into(),
            ))
        }
    };
    if readonly {
        return Err(err(
            text.span(),
            "a readonly limit logs no events, so it has no history for a baseline".into(),
        ));
    }
    if has_list {
        return Err(err(
            text.span(),
            "baseline and limit_list both give per-key limits: use one".into(),
        ));
    }
    let window_secs = period_secs.round() as i64;
    if window_secs > DAY_SECS {
        return Err(err(
            text.span(),
            format!(
                "baseline needs a period of at most 1d (daily peaks), this limit's is {}",
                crate::figures::period_text(period_secs)
            ),
        ));
    }
    let factor = match &raw.factor {
        Some(f) if !(f.get_ref().is_finite() && *f.get_ref() > 0.0) => {
            return Err(err(
                f.span(),
                format!("factor must be a number above 0, got {}", f.get_ref()),
            ))
        }
        Some(f) => *f.get_ref(),
        None => DEFAULT_FACTOR,
    };
    let floor = match &raw.floor {
        Some(f) if !(f.get_ref().is_finite() && *f.get_ref() >= 0.0) => {
            return Err(err(
                f.span(),
                format!("floor must be a number of 0 or more, got {}", f.get_ref()),
            ))
        }
        Some(f) if *f.get_ref() == 0.0 && !matches!(rate, RateDef::Exim { .. }) => {
            return Err(err(
                f.span(),
                "floor = 0 needs a ratelimit limit (m = 0 refuses a key without history); a rate/burst limit cannot hold 0: give a floor above 0"
                    .into(),
            ))
        }
        Some(f) => *f.get_ref(),
        None => configured,
    };
    Ok(Some(BaselineDef::new(
        spec,
        factor,
        floor,
        window_secs.max(1),
    )))
}

/// The compiled policy of a configuration that serves only inside Postfix's path (a policy
/// service, no listener), with a hold spool and `limits`: for the unit tests of the Postfix
/// front ends.
#[cfg(test)]
pub(crate) fn postfix_path_model(limits: &str) -> PolicyModel {
    let text = format!(
        "[[policy_service]]\nlisten = \"127.0.0.1:10031\"\n[hold]\ndir = \"/var/lib/fg/hold\"\n{limits}"
    );
    let c = Config::parse(std::path::Path::new("/t.toml"), &text).unwrap_or_else(|e| panic!("{e}"));
    compile(&c).unwrap_or_else(|e| panic!("{e}"))
}
