//! Countermeasures: turning the strongest over limit into a verdict (delay, reply,
//! disconnect), with reply texts from templates.

use std::fmt::Write as _;
use std::time::Duration;

use super::model::{Action, Counted, DelayKind, LimitDef, RateDef};
use super::template::{network_text, Var};
use super::{Facts, Stage, Verdict};
use crate::smtp::reply::Reply;

/// The reading of one limit for one event: its value against the limit in force (a
/// delivery's outcome is another thing: [`crate::outcomes`]).
#[derive(Clone, Debug)]
pub struct Reading {
    /// The rate (`$sender_rate`), bucket level or sessions held.
    pub value: f64,
    /// The limit in force (after any per-key value from a list).
    pub limit: f64,
    /// The limit in force is the key's own value from the limit's `limit_list`.
    pub from_list: bool,
    /// The limit as text (`$sender_rate_limit`).
    pub limit_text: String,
    /// The period as text (`$sender_rate_period`).
    pub period_text: String,
    /// Over the limit.
    pub over: bool,
    /// When the event would pass.
    pub retry_after: Option<Duration>,
}

/// Appends a variable's value for `facts` and an optional outcome.
pub fn var_value(
    v: Var,
    facts: &Facts,
    def: Option<&LimitDef>,
    out_: Option<&Reading>,
    hostname: &str,
    out: &mut String,
) {
    let domain = |a: &Option<String>| {
        a.as_deref()
            .and_then(|a| a.rsplit_once('@'))
            .map(|(_, d)| d.to_lowercase())
            .unwrap_or_default()
    };
    match v {
        // Only a name upstream accepted: a failed AUTH's name is the client's choice.
        Var::User => out.push_str(facts.user.as_deref().unwrap_or("")),
        Var::AuthAttempt => out.push_str(facts.auth_attempt.as_deref().unwrap_or("")),
        Var::ClientIp { v4, v6 } => {
            if let Some(ip) = facts.client_ip {
                network_text(ip, v4, v6, out);
            }
        }
        Var::Helo => out.push_str(facts.helo.as_deref().unwrap_or("")),
        Var::Sender => out.push_str(facts.sender.as_deref().unwrap_or("")),
        Var::SenderDomain => out.push_str(&domain(&facts.sender)),
        Var::Recipient => out.push_str(facts.recipient.as_deref().unwrap_or("")),
        Var::LocalPart => {
            if let Some(r) = facts.recipient_normalized.as_deref() {
                out.push_str(r.rsplit_once('@').map_or(r, |(l, _)| l));
            }
        }
        Var::Domain => out.push_str(&domain(&facts.recipient)),
        Var::HeaderFrom => out.push_str(facts.header_from.as_deref().unwrap_or("")),
        Var::HeaderFromDomain => out.push_str(&domain(&facts.header_from)),
        Var::Listener => out.push_str(&facts.listener),
        Var::MessageSize => {
            let _ = write!(out, "{}", facts.message_size);
        }
        Var::RecipientsCount => {
            let _ = write!(out, "{}", facts.recipients_count);
        }
        Var::SenderRate => {
            if let Some(o) = out_ {
                let _ = write!(out, "{}", round1(o.value));
            }
        }
        Var::SenderRateLimit => {
            if let Some(o) = out_ {
                out.push_str(&o.limit_text);
            }
        }
        Var::SenderRatePeriod => {
            if let Some(o) = out_ {
                out.push_str(&o.period_text);
            }
        }
        Var::RetryAfter => {
            if let Some(d) = out_.and_then(|o| o.retry_after) {
                let _ = write!(out, "{}", d.as_secs_f64().ceil() as u64);
            }
        }
        Var::LimitName => {
            if let Some(d) = def {
                out.push_str(&d.name);
            }
        }
        Var::Hostname => out.push_str(hostname),
        // Known only to the answer of a restricted key (see `restricted_reply`).
        Var::RestrictedSince | Var::RestrictedUntil => {}
        // Outside a key (which expands once per value, see `Template::expand_each`): every
        // value, comma-separated.
        Var::Fingerprint | Var::LinkDomain | Var::SubjectShape => {
            out.push_str(&message_key_values(v, facts).join(","))
        }
    }
}

/// The values of the message key `v` for `facts` (none before the end of data, or when
/// the message has none).
pub fn message_key_values(v: Var, facts: &Facts) -> Vec<String> {
    let Some(k) = facts.message_keys.as_deref() else {
        return Vec::new();
    };
    match v {
        Var::Fingerprint => k.fingerprint.clone(),
        Var::LinkDomain => k.link_domains.clone(),
        Var::SubjectShape => k.subject_shape.iter().cloned().collect(),
        _ => Vec::new(),
    }
}

fn round1(v: f64) -> f64 {
    (v * 10.0).round() / 10.0
}

/// The delay of a `delay` countermeasure, capped.
pub fn delay_of(def: &LimitDef, kind: DelayKind, o: &Reading) -> Duration {
    let d = match kind {
        DelayKind::Fixed(d) => d,
        DelayKind::Computed => match def.rate {
            // The seed's `delay = ${eval: $sender_rate - $sender_rate_limit}s`.
            RateDef::Exim { .. } => {
                let over = (o.value - o.limit).max(0.0);
                if over.is_finite() {
                    Duration::from_secs(over.round() as u64)
                } else {
                    def.max_delay
                }
            }
            _ => o.retry_after.unwrap_or(def.max_delay),
        },
    };
    d.min(def.max_delay)
}

fn default_code(def: &LimitDef, stage: Stage) -> (u16, &'static str) {
    let connection =
        matches!(def.counted, Counted::Connections | Counted::Sessions) || stage == Stage::Connect;
    match def.action {
        Action::Disconnect => (421, "4.7.0"),
        Action::Deny if stage == Stage::Connect => (554, "5.7.1"),
        Action::Deny => (550, "5.7.1"),
        Action::Restrict => (450, "4.7.1"),
        _ if connection => (421, "4.7.0"),
        _ => match stage {
            Stage::Auth => (454, "4.7.0"),
            Stage::Message => (451, "4.7.1"),
            _ => (450, "4.7.1"),
        },
    }
}

fn starts_with_enhanced(s: &str) -> bool {
    let first = s.split(' ').next().unwrap_or("");
    let parts: Vec<&str> = first.split('.').collect();
    parts.len() == 3
        && parts
            .iter()
            .all(|p| !p.is_empty() && p.len() <= 3 && p.bytes().all(|b| b.is_ascii_digit()))
}

/// The reply text of a refusal (without the code).
pub fn reply_text(
    def: &LimitDef,
    stage: Stage,
    facts: &Facts,
    o: &Reading,
    hostname: &str,
) -> (u16, String) {
    let (code, enhanced) = default_code(def, stage);
    let code = def.code.unwrap_or(code);
    let enhanced = if def.code.is_some() {
        // Keep the enhanced code's class in line with an overridden reply code.
        match code / 100 {
            5 => "5.7.1",
            _ if code == 421 => "4.7.0",
            _ => enhanced,
        }
    } else {
        enhanced
    };
    let body = match &def.message {
        Some(t) => t.expand(|v, out| var_value(v, facts, Some(def), Some(o), hostname, out)),
        None => {
            let what = def.counted.as_str().replace('_', " ");
            let retry = o
                .retry_after
                .filter(|d| !d.is_zero())
                .map(|d| format!(", try again in {} seconds", d.as_secs_f64().ceil() as u64))
                .unwrap_or_else(|| ", try again later".into());
            if facts.user.is_some() {
                format!(
                    "{} sends too many {what}: {} per {}, the limit is {}{retry}",
                    facts.user.as_deref().unwrap_or(""),
                    round1(o.value),
                    o.period_text,
                    o.limit_text
                )
            } else {
                format!("Too many {what} from you{retry}")
            }
        }
    };
    // Reply text is floodgate's own: keep it on one line.
    let body: String = body.chars().filter(|c| *c != '\r' && *c != '\n').collect();
    if starts_with_enhanced(&body) {
        (code, body)
    } else {
        (code, format!("{enhanced} {body}"))
    }
}

/// The verdict of the strongest over limit.
pub fn verdict(
    def: &LimitDef,
    stage: Stage,
    facts: &Facts,
    o: &Reading,
    hostname: &str,
) -> Verdict {
    match def.action {
        // The engine gives a hold, reroute or pace its key (see `Verdict::Take`); without
        // one, go on.
        Action::Warn | Action::Header | Action::Hold | Action::Reroute | Action::Pace => {
            Verdict::Continue
        }
        Action::Delay(kind) => {
            let d = delay_of(def, kind, o);
            if d.is_zero() {
                Verdict::Continue
            } else {
                Verdict::Delay(d)
            }
        }
        Action::Defer | Action::Deny | Action::Disconnect | Action::Restrict => {
            let (code, text) = reply_text(def, stage, facts, o, hostname);
            let reply = Reply::new(code, text);
            if code == 421 || stage == Stage::Connect {
                Verdict::Disconnect(reply)
            } else {
                Verdict::Reply(reply)
            }
        }
    }
}

/// Microseconds since the epoch as RFC 3339 UTC text (whole seconds).
pub fn utc_text(us: i64) -> String {
    let secs = us.div_euclid(1_000_000);
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// What `${restricted_until}` gives for a restriction without an end.
pub const UNTIL_RELEASED: &str = "released";

/// The answer to a MAIL FROM of a restricted key: the restricting limit's
/// `restricted_code` and `restricted_message` when `def` is that limit (still configured),
/// else 450 with the default text.
pub fn restricted_reply(
    def: Option<&LimitDef>,
    r: &crate::store::Restriction,
    facts: &Facts,
    hostname: &str,
) -> Reply {
    let rdef = def.and_then(|d| d.restrict.as_ref());
    let code = rdef.map_or(super::model::DEFAULT_RESTRICTED_CODE, |d| d.code);
    // "until ${restricted_until}" reads "until released" for a restriction without an end.
    let until = r
        .until_us
        .map_or_else(|| UNTIL_RELEASED.to_string(), utc_text);
    let body = match rdef.and_then(|d| d.message.as_ref()) {
        Some(t) => t.expand(|v, out| match v {
            Var::RestrictedSince => out.push_str(&utc_text(r.since_us)),
            Var::RestrictedUntil => out.push_str(&until),
            Var::LimitName => out.push_str(&r.limit),
            other => var_value(other, facts, def, None, hostname, out),
        }),
        None => format!(
            "{} is restricted since {} ({}), until {until}; contact your postmaster",
            r.key,
            utc_text(r.since_us),
            r.limit
        ),
    };
    let body: String = body.chars().filter(|c| *c != '\r' && *c != '\n').collect();
    let enhanced = if code / 100 == 5 { "5.7.1" } else { "4.7.1" };
    if starts_with_enhanced(&body) {
        Reply::new(code, body)
    } else {
        Reply::new(code, format!("{enhanced} {body}"))
    }
}

/// The `X-Floodgate-Rate` header line for a `header` limit.
pub fn header_line(def: &LimitDef, o: &Reading) -> String {
    format!(
        "X-Floodgate-Rate: {}; rate={}; limit={}; period={}; over={}",
        def.name,
        round1(o.value),
        o.limit_text,
        o.period_text,
        if o.over { "yes" } else { "no" }
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn utc_text_is_rfc3339() {
        assert_eq!(utc_text(0), "1970-01-01T00:00:00Z");
        assert_eq!(utc_text(951_782_400_000_000), "2000-02-29T00:00:00Z");
        assert_eq!(utc_text(1_764_091_060_500_000), "2025-11-25T17:17:40Z");
    }

    /// After a failed AUTH as `victim`, `${authenticated_id}` is empty; the tried name is
    /// only `${auth_attempted_id}`.
    #[test]
    fn a_failed_auth_name_is_not_the_user() {
        let value = |v: Var, f: &Facts| {
            let mut s = String::new();
            var_value(v, f, None, None, "mx.example", &mut s);
            s
        };
        let failed = Facts {
            auth_attempt: Some("victim".into()),
            auth_succeeded: false,
            ..Facts::default()
        };
        assert_eq!(value(Var::User, &failed), "");
        assert_eq!(value(Var::AuthAttempt, &failed), "victim");
        let ok = Facts {
            user: Some("alice".into()),
            auth_attempt: Some("alice".into()),
            auth_succeeded: true,
            ..Facts::default()
        };
        assert_eq!(value(Var::User, &ok), "alice");
        assert_eq!(value(Var::AuthAttempt, &ok), "alice");
        // Logged in as alice, then a failed AUTH as victim: still alice.
        let both = Facts {
            auth_attempt: Some("victim".into()),
            ..ok
        };
        assert_eq!(value(Var::User, &both), "alice");
        assert_eq!(value(Var::AuthAttempt, &both), "victim");
    }

    #[test]
    fn enhanced_detection() {
        assert!(starts_with_enhanced("4.7.1 slow down"));
        assert!(!starts_with_enhanced("slow down"));
        assert!(!starts_with_enhanced("4.7 x"));
    }

    #[test]
    fn the_default_restricted_answer_says_until_released_once() {
        let mut r = crate::store::Restriction {
            key: "alice".into(),
            limit: "per-user".into(),
            since_us: 0,
            until_us: None,
            rate: None,
            limit_text: String::new(),
            by: "admin".into(),
            reason: "x".into(),
            evidence: serde_json::Value::Null,
        };
        let text = restricted_reply(None, &r, &Facts::default(), "mx")
            .lines
            .join(" ");
        assert!(
            text.contains("(per-user), until released; contact"),
            "{text}"
        );
        assert!(!text.contains("until until"), "{text}");
        r.until_us = Some(86_400_000_000);
        let text = restricted_reply(None, &r, &Facts::default(), "mx")
            .lines
            .join(" ");
        assert!(text.contains("until 1970-01-02T00:00:00Z;"), "{text}");
    }
}
