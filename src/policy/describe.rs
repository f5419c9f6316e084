//! What `floodgate check` prints about the policy, and the pitfalls it warns about
//! (exim-ratelimit.md): a limit ≤ 1 refuses every event, an unknown option silently becomes
//! key text, and `1h` and `60m` are different keys.

use super::model::{Action, Counted, LimitDef, PolicyModel, RateDef, RestrictDef};
use super::Stage;
use crate::hold::pace::PaceUnit;
use crate::limit::spec::{CacheScope, LimitSpec, Resolved, UpdateMode};

/// One line per limit: stage, key, rate and burst, what is counted, mode, countermeasure.
pub fn describe(model: &PolicyModel) -> Vec<String> {
    let mut out = vec![model.identity.describe()];
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

/// One limit's line: its head (stage, key, rate, what is counted, mode, action), then its
/// limit list, baseline, condition, restriction and what its action does with a message.
fn describe_limit(d: &LimitDef) -> String {
    let key = d
        .key
        .as_ref()
        .map_or("${sender_host_address}".to_string(), |k| {
            k.text().to_string()
        });
    let mut s = head(d, &key);
    if let Some((l, by)) = &d.limit_list {
        s.push_str(&format!(" per-key-limit-from={l} by={}", by.as_str()));
    }
    if let Some(b) = &d.baseline {
        let configured = match &d.rate {
            RateDef::Exim { spec, .. } => spec.limit(),
            RateDef::Gcra(g) => g.burst,
            RateDef::Bucket(b) => b.burst,
            RateDef::Concurrency(n) => *n as f64,
            RateDef::Ratio(_) => 0.0,
        };
        s.push_str(&format!(
            " baseline={:?}: {}",
            b.spec.text(),
            b.describe(configured)
        ));
    }
    if let Some(w) = &d.when_text {
        s.push_str(&format!(" when={w:?}"));
    }
    if let Some(r) = &d.restrict {
        s.push_str(&restriction(r, &key));
    }
    s.push_str(&taken(d));
    s
}

/// The head of a limit's line: name, stage, key, rate, what is counted and the mode (a
/// ratio counts both sides of its expression and stores nothing), action.
fn head(d: &LimitDef, key: &str) -> String {
    let rate = rate_text(&d.rate);
    if matches!(d.rate, RateDef::Ratio(_)) {
        format!(
            "limit {}: stage={} key={:?} {} action={}",
            d.name,
            d.stage.as_str(),
            key,
            rate,
            d.action.as_str()
        )
    } else {
        format!(
            "limit {}: stage={} key={:?} {} counts={} mode={} action={}",
            d.name,
            d.stage.as_str(),
            key,
            rate,
            d.counted.as_str(),
            mode_word(d.mode),
            d.action.as_str()
        )
    }
}

/// A limit's rate: the algorithm and its figures.
fn rate_text(rate: &RateDef) -> String {
    match rate {
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
        RateDef::Ratio(r) => format!(
            "ratio {} / {} over {}s, over when above {} with at least {} {} (counts kept per key in {}s slots: an event counts for {}s to {}s){}",
            r.num.as_str(),
            r.den.as_str(),
            r.period_secs,
            r.above,
            r.min_events,
            r.den.as_str(),
            r.window().slot_us() / 1_000_000,
            r.period_secs,
            r.period_secs + (r.window().slot_us() / 1_000_000) as u64,
            if r.include_automatic {
                "; null-sender and auto-submitted messages count"
            } else {
                "; null-sender and auto-submitted messages left out"
            }
        ),
    }
}

/// What a restriction does, for how long, and whom it tells; `key` is the limit's key.
fn restriction(r: &RestrictDef, key: &str) -> String {
    let mut s = String::new();
    // With restrict_senders the message key itself is never restricted: the accounts
    // that sent it are (each under its login, else its client address).
    let rkey = match &r.key {
        _ if r.senders => format!(
            "each account that sent the message key {key} within the limit's period (keyed by its login, else its client address; never {key} itself)"
        ),
        Some(t) => format!("the key {:?}", t.text()),
        None => format!("the key {:?}", format!("{key} (the limit's key)")),
    };
    let whose = if r.senders {
        "the account's"
    } else {
        "the key's"
    };
    let each = if r.senders { "account" } else { "key" };
    let how_long = match r.duration {
        crate::store::RestrictFor::UntilReleased => {
            "until `floodgate release KEY` ends it".to_string()
        }
        f => format!(
            "for {} (then released automatically, logged, counted and alerted once as floodgate.released by expiry)",
            f.text()
        ),
    };
    if r.hold {
        s.push_str(&format!(
            "; when over: {rkey} is restricted {how_long}; while restricted {whose} messages are taken (250) and held in the [hold] spool, not relayed (while_restricted=hold); restrictions outlive restarts and reloads"
        ));
    } else {
        s.push_str(&format!(
            "; when over: {rkey} is restricted {how_long}; while restricted each MAIL FROM of the {each} gets {} {} (while_restricted=defer); restrictions outlive restarts and reloads",
            r.code,
            r.message
                .as_ref()
                .map_or("(the default text)".to_string(), |m| format!("{:?}", m.text()))
        ));
    }
    if let Some(n) = &r.notify {
        s.push_str(&format!(
            "; each restriction is told once by a short mail to {:?} (notify_user), sent through upstream from the null sender <>, saying since, until, the limit and the restricted answer",
            n.text()
        ));
    }
    s
}

/// What the limit's action does with a message it takes (reroute, pace); empty for the
/// others.
fn taken(d: &LimitDef) -> String {
    let mut s = String::new();
    match d.action {
        Action::Reroute => s.push_str(
            "; when over: the message is taken from the client and, at the end of its data, relayed to the second smart host [upstream.high_risk] with the client's identity, not to [upstream]; that host's answer goes to the client (down: 4xx, the client keeps the message)",
        ),
        Action::Pace => {
            if let Some(r) = d.pace_rate() {
                s.push_str(&format!(
                    "; when over: the message is taken (250) and kept in the [hold] spool, then released automatically to [upstream] at the limit's rate ({r}: one message every {} per key{}), oldest first; while a key has paced messages waiting, its later messages queue behind them; a failed release is retried with backoff; paced messages outlive restarts",
                    crate::figures::seconds(r.interval(1.0)),
                    match r.unit() {
                        PaceUnit::Messages => "",
                        PaceUnit::Recipients => ", times its recipients",
                        PaceUnit::Bytes => ", times its octets",
                    }
                ));
            }
        }
        _ => {}
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
    w.extend(answered_from_an_earlier_stage(model));
    w
}

/// The Exim limits that read and write a rate record (auth-failure limits keep their own),
/// in config order, each with the record's database key as written (the key template's
/// text stands for its expansion: the same text gives the same record).
fn records(model: &PolicyModel) -> Vec<(&LimitDef, &LimitSpec, &Resolved, String)> {
    model
        .limits
        .iter()
        .filter_map(|d| match &d.rate {
            RateDef::Exim { spec, resolved, .. } if d.counted != Counted::AuthFailures => {
                let key = d.key.as_ref().map(|t| t.text()).unwrap_or("");
                Some((d, spec, resolved, spec.database_key(key, key)))
            }
            _ => None,
        })
        .collect()
}

/// Where a stage falls in the life of a cache: only a limit checked at an earlier stage
/// within the same message (MAIL to end of message) or connection can fill the cache a
/// later one reads. `Command` runs at every command: no fixed place.
fn cache_order(scope: CacheScope, stage: Stage) -> Option<u8> {
    let order = match stage {
        Stage::Connect => 0,
        Stage::Helo => 1,
        Stage::Auth => 2,
        Stage::Mail => 3,
        Stage::Rcpt => 4,
        Stage::Data => 5,
        Stage::Message => 6,
        Stage::Command => return None,
    };
    match scope {
        CacheScope::Connection => Some(order),
        CacheScope::Message if order >= 3 => Some(order),
        _ => None,
    }
}

/// Exim test 0038's pitfall: a limit on the same record and cache as one checked at an
/// earlier stage of the same message (or connection) is answered from that one's cached
/// rate and never adds its own count — per_byte in DATA after per_mail in MAIL never counts
/// a byte. Harmless when both count the same thing, so only different counts are reported.
fn answered_from_an_earlier_stage(model: &PolicyModel) -> Vec<String> {
    let mut w = Vec::new();
    let exim = records(model);
    for (b, _, b_res, b_key) in &exim {
        let Some(b_at) = cache_order(b_res.cache, b.stage) else {
            continue;
        };
        let earlier = exim.iter().find(|(a, _, a_res, a_key)| {
            a_key == b_key
                && a_res.cache == b_res.cache
                && a_res.count != b_res.count
                && (a.when_text.is_none() || a.when_text == b.when_text)
                && cache_order(a_res.cache, a.stage).is_some_and(|a_at| a_at < b_at)
        });
        if let Some((a, _, _, key)) = earlier {
            let scope = match b_res.cache {
                CacheScope::Connection => "connection",
                _ => "message",
            };
            w.push(format!(
                "limit {} (line {}) reads the same record ({key}) as limit {} (line {}), checked earlier in the same {scope} at {}: as in Exim, it is answered from that cached rate and never adds its own count; give it another period text or key to count separately",
                b.name,
                b.line,
                a.name,
                a.line,
                a.stage.as_str()
            ));
        }
    }
    w
}

/// Two Exim limits of one stage on the same record and cache: the later one is answered
/// from the earlier one's rate (Exim's cache). When the earlier one is leaky with a lower
/// m, it stops storing once over, so the rate stays near its m and the later limit can
/// never be reached — the usual "warn before defer" written in the wrong order.
fn capped_by_a_leaky_twin(model: &PolicyModel) -> Vec<String> {
    let mut w = Vec::new();
    let exim = records(model);
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
                && b.limit_list.is_none()
                && a.baseline.is_none()
                && b.baseline.is_none();
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

#[cfg(test)]
mod tests {
    use super::*;

    fn model(body: &str) -> PolicyModel {
        let text = format!(
            "[[listener]]\naddress = \"127.0.0.1:0\"\n[upstream]\naddress = \"127.0.0.1:2525\"\n\
             [hold]\ndir = \"/var/lib/floodgate/hold\"\n{body}"
        );
        let c = crate::config::Config::parse(std::path::Path::new("/etc/floodgate/t.toml"), &text)
            .unwrap_or_else(|e| panic!("{e}"));
        super::super::compile(&c).unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn restrict_senders_says_the_senders_are_restricted_not_the_message_key() {
        let m = model(
            "[[limit]]\nname = \"campaign\"\nkey = \"${fingerprint}\"\n\
             ratelimit = \"3 / 1h / per_mail / unique=${authenticated_id}\"\n\
             action = \"hold\"\nrestrict_senders = true\n",
        );
        let line = describe(&m)
            .into_iter()
            .find(|l| l.starts_with("limit campaign"))
            .unwrap();
        assert!(
            line.contains("each account that sent the message key ${fingerprint}"),
            "{line}"
        );
        assert!(line.contains("never ${fingerprint} itself"), "{line}");
        assert!(!line.contains("the key \"${fingerprint}"), "{line}");
        assert!(line.contains("MAIL FROM of the account gets"), "{line}");
    }

    #[test]
    fn a_restricting_limit_names_its_key() {
        let m = model(
            "[[limit]]\nname = \"per-user\"\nratelimit = \"3 / 1h / per_mail / ${authenticated_id}\"\n\
             action = \"restrict\"\n",
        );
        let line = describe(&m)
            .into_iter()
            .find(|l| l.starts_with("limit per-user"))
            .unwrap();
        assert!(
            line.contains("the key \"${authenticated_id} (the limit's key)\" is restricted"),
            "{line}"
        );
        assert!(line.contains("MAIL FROM of the key gets"), "{line}");
    }

    #[test]
    fn the_identity_fold_is_described_first() {
        let m = model("[identity]\nlogin_fold = \"exact\"\n");
        assert!(describe(&m)[0].starts_with("identity: login_fold=exact"));
    }
}
