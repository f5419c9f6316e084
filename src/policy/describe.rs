//! What `floodgate check` prints about the policy, and the pitfalls it warns about
//! (exim-ratelimit.md): a limit ≤ 1 refuses every event, an unknown option silently becomes
//! key text, and `1h` and `60m` are different keys.

use super::model::{Counted, LimitDef, PolicyModel, RateDef};
use crate::limit::spec::UpdateMode;

/// One line per limit: stage, key, rate and burst, what is counted, mode, countermeasure.
pub fn describe(model: &PolicyModel) -> Vec<String> {
    let mut out = Vec::new();
    for (name, n) in model.lists.summary() {
        out.push(format!("list {name}: {n} entries"));
    }
    for d in &model.limits {
        out.push(describe_limit(d));
    }
    let a = &model.auth;
    out.push(if a.enabled {
        format!(
            "auth_failures: delay {}ms doubling per recent failure, max {}ms, decay {}s (per client IP and per user name)",
            a.base.as_millis(),
            a.max.as_millis(),
            a.decay_secs
        )
    } else {
        "auth_failures: off".into()
    });
    out
}

fn describe_limit(d: &LimitDef) -> String {
    let rate = match &d.rate {
        RateDef::Exim { spec, .. } => format!(
            "ratelimit m={} per {} ({}s, EWMA, burst ~m)",
            spec.limit_text(),
            spec.period_text(),
            spec.period_secs()
        ),
        RateDef::Gcra(g) => format!(
            "gcra rate={}/{}s burst={}",
            g.rate.amount(),
            g.rate.period_secs(),
            g.burst
        ),
        RateDef::Bucket(b) => format!(
            "bucket rate={}/{}s burst={}{}",
            b.rate.amount(),
            b.rate.period_secs(),
            b.burst,
            if b.dynamic.is_some() { " dynamic" } else { "" }
        ),
        RateDef::Concurrency(n) => format!("max {n} at once"),
    };
    let key = d
        .key
        .as_ref()
        .map_or("${sender_host_address}".to_string(), |k| {
            k.text().to_string()
        });
    let mut s = format!(
        "limit {}: stage={} key={:?} {} counts={} mode={} action={}",
        d.name,
        d.stage.as_str(),
        key,
        rate,
        d.counted.as_str(),
        mode_word(d.mode),
        d.action.as_str()
    );
    if let Some((l, by)) = &d.limit_list {
        s.push_str(&format!(" per-key-limit-from={l} by={}", by.as_str()));
    }
    if let Some(w) = &d.when_text {
        s.push_str(&format!(" when={w:?}"));
    }
    s
}

fn mode_word(m: UpdateMode) -> &'static str {
    match m {
        UpdateMode::Leaky => "leaky",
        UpdateMode::Strict => "strict",
        UpdateMode::Readonly => "readonly",
    }
}

/// Warnings about pitfalls, one line each.
pub fn warnings(model: &PolicyModel) -> Vec<String> {
    let mut w = Vec::new();
    let mut periods: Vec<(u32, String, String)> = Vec::new();
    for d in &model.limits {
        let RateDef::Exim { spec, .. } = &d.rate else {
            continue;
        };
        if spec.limit() <= 1.0 {
            w.push(format!(
                "limit {} (line {}): m = {} refuses every event (Exim is over when rate >= m, and one event already makes the rate 1)",
                d.name,
                d.line,
                spec.limit_text()
            ));
        }
        // The key is the non-option items joined with `/`: look at each again.
        for item in spec.key_text().unwrap_or("").split('/') {
            let plain = !item.is_empty()
                && !item.contains('$')
                && item
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'=' || b == b'-');
            if plain {
                w.push(format!(
                    "limit {} (line {}): {:?} is not an option, so it is key text (a typo? the key no longer defaults to the client IP)",
                    d.name, d.line, item
                ));
            }
        }
        let p = spec.period_secs();
        let text = spec.period_text().to_string();
        // Warn once per spelling: the first limit with a new text for a known time.
        let known = periods.iter().any(|(_, t, _)| *t == text);
        if let Some((_, other_text, other)) = periods
            .iter()
            .find(|(s, t, _)| *s == p && *t != text)
            .filter(|_| !known)
        {
            w.push(format!(
                "limit {} (line {}): period {:?} is the same time as {:?} in limit {} but a different key: they count separately",
                d.name, d.line, text, other_text, other
            ));
        }
        periods.push((p, text, d.name.clone()));
    }
    w.extend(capped_by_a_leaky_twin(model));
    w
}

/// Two Exim limits of one stage on the same record and cache: the later one is answered
/// from the earlier one's rate (Exim's cache). When the earlier one is leaky with a lower
/// m, it stops storing once over, so the rate stays near its m and the later limit can
/// never be reached — the usual "warn before defer" written in the wrong order.
fn capped_by_a_leaky_twin(model: &PolicyModel) -> Vec<String> {
    let mut w = Vec::new();
    let exim: Vec<_> = model
        .limits
        .iter()
        .filter_map(|d| match &d.rate {
            RateDef::Exim { spec, resolved, .. } if d.counted != Counted::AuthFailures => {
                let key = d.key.as_ref().map(|t| t.text()).unwrap_or("");
                Some((d, spec, resolved, spec.database_key(key, key)))
            }
            _ => None,
        })
        .collect();
    for (i, (a, a_spec, a_res, a_key)) in exim.iter().enumerate() {
        if a_res.update != UpdateMode::Leaky {
            continue;
        }
        for (b, b_spec, b_res, b_key) in &exim[i + 1..] {
            let twin = a.stage == b.stage
                && a_key == b_key
                && a_res.cache == b_res.cache
                && a.when_text == b.when_text
                && a.limit_list.is_none()
                && b.limit_list.is_none();
            if twin && a_spec.limit() < b_spec.limit() {
                w.push(format!(
                    "limit {} (line {}) shares its record with limit {} (line {}) and is answered from its rate; {} is leaky and stops counting once over m = {}, so {} (m = {}) is never reached: make {} strict or list {} first",
                    b.name,
                    b.line,
                    a.name,
                    a.line,
                    a.name,
                    a_spec.limit_text(),
                    b.name,
                    b_spec.limit_text(),
                    a.name,
                    b.name
                ));
            }
        }
    }
    w
}
