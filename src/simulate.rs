//! `floodgate simulate --limit SPEC [FILE]`: replays events through one limit.
//!
//! Input: JSON lines `{"t": <seconds>, "key": "<text>", "count": <n>, "unique": "<text>"}`.
//! Each line is one evaluation of the limit (no session caching). `t` is
//! rounded to the nearest microsecond; `key` is the expanded key text, or
//! the client IP when the spec has no key text; `count` defaults to the
//! limit's `count=`, else 1 (as in Exim's RCPT ACL, where `per_rcpt` leaves a
//! `count=` in force); `unique` is the value tested against the key's unique
//! set: Exim expands `unique=` per evaluation, so an event's `unique` puts
//! unique counting in force for that event (its database key has `unique/`)
//! whether or not the spec has `unique=`. Blank lines are skipped.
//!
//! Output: one JSON line per event:
//! `{"t":..,"key":"<database key>","rate":..,"over":..,"stored":..}` plus
//! `"seen"` for unique limits and `"retry_after"` (seconds) when over.
//!
//! SPEC is an Exim `ratelimit` string, or `gcra: burst=<n>, rate=<r>` /
//! `bucket: burst=<n>, rate=<r>` with Rspamd-style values (`rate=10 / 1min`).
//! For GCRA and buckets `"rate"` is the level in events.

use crate::limit::bucket::{BucketOp, BucketSpec};
use crate::limit::gcra::GcraSpec;
use crate::limit::rate::{parse_burst, Rate, RateError};
use crate::limit::unique::UniqueKind;
use crate::limit::{LimitSpec, SpecError};
use crate::store::{Algorithm, Decision, LimitRequest, MemoryConfig, MemoryStore};
use serde::Serialize;
use std::io::{BufRead, Write};

/// Why a simulation stopped.
#[derive(Debug, thiserror::Error)]
pub enum SimulateError {
    /// The Exim limit string is invalid (Exim's message).
    #[error("error in ratelimit \"{spec}\": {error}")]
    Spec {
        /// The spec text.
        spec: String,
        /// Exim's error.
        error: SpecError,
    },
    /// A gcra:/bucket: spec is invalid.
    #[error("error in limit \"{spec}\": {detail}")]
    Bucket {
        /// The spec text.
        spec: String,
        /// What is wrong.
        detail: String,
    },
    /// An input line is not a valid event.
    #[error("line {line}: {detail}")]
    Input {
        /// 1-based line number.
        line: usize,
        /// What is wrong.
        detail: String,
    },
    /// Reading input or writing output failed.
    #[error("i/o error: {0}")]
    Io(#[from] std::io::Error),
}

#[derive(Serialize)]
struct Output<'a> {
    t: f64,
    key: &'a str,
    rate: f64,
    over: bool,
    stored: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    seen: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    retry_after: Option<f64>,
}

/// A limit ready to simulate.
enum Sim {
    Exim(LimitSpec),
    Other { algorithm: Algorithm },
}

fn bucket_args(spec: &str, body: &str) -> Result<(f64, Rate), SimulateError> {
    let err = |detail: String| SimulateError::Bucket {
        spec: spec.to_string(),
        detail,
    };
    let (mut burst, mut rate) = (None, None);
    for part in body.split(',') {
        let (name, value) = part
            .split_once('=')
            .ok_or_else(|| err(format!("\"{}\" is not name=value", part.trim())))?;
        let re = |e: RateError| err(e.to_string());
        match name.trim() {
            "burst" => burst = Some(parse_burst(value.trim()).map_err(re)?),
            "rate" => rate = Some(Rate::parse(value.trim().trim_matches('"')).map_err(re)?),
            other => {
                return Err(err(format!(
                    "unknown setting \"{other}\" (expected burst and rate)"
                )))
            }
        }
    }
    match (burst, rate) {
        (Some(b), Some(r)) => Ok((b, r)),
        _ => Err(err("both burst= and rate= are needed".into())),
    }
}

fn parse_sim(spec: &str) -> Result<Sim, SimulateError> {
    let trimmed = spec.trim_start();
    if let Some(body) = trimmed.strip_prefix("gcra:") {
        let (burst, rate) = bucket_args(spec, body)?;
        let g = GcraSpec::new(burst, rate).ok_or_else(|| SimulateError::Bucket {
            spec: spec.to_string(),
            detail: "burst and rate must be positive".into(),
        })?;
        return Ok(Sim::Other {
            algorithm: Algorithm::Gcra(g),
        });
    }
    if let Some(body) = trimmed.strip_prefix("bucket:") {
        let (burst, rate) = bucket_args(spec, body)?;
        let spec = BucketSpec {
            burst,
            rate,
            dynamic: None,
        };
        return Ok(Sim::Other {
            algorithm: Algorithm::Bucket {
                spec,
                op: BucketOp::Check,
            },
        });
    }
    LimitSpec::parse(spec)
        .map(Sim::Exim)
        .map_err(|error| SimulateError::Spec {
            spec: spec.to_string(),
            error,
        })
}

/// Runs the simulation: reads events from `input`, writes one JSON line per
/// event to `output`.
pub fn run(spec: &str, input: impl BufRead, mut output: impl Write) -> Result<(), SimulateError> {
    let sim = parse_sim(spec)?;
    let store = MemoryStore::new(MemoryConfig {
        shards: 1,
        ..MemoryConfig::default()
    });
    for (n, line) in input.lines().enumerate() {
        let line_no = n + 1;
        let line = line?;
        // Queued messages and their outcomes in an event log are not events to simulate.
        if line.trim().is_empty() || crate::eventlog::is_other_event(&line) {
            continue;
        }
        let bad = |detail: String| SimulateError::Input {
            line: line_no,
            detail,
        };
        let ev = crate::eventlog::Evaluation::parse(&line).map_err(|e| bad(e.to_string()))?;
        let now_us = ev.time_us;
        let key_text = ev.key.unwrap_or_default();
        let (db_key, algorithm, count, unique) = match &sim {
            Sim::Exim(s) => {
                // An event's `unique` is what the spec's `unique=` expanded to for
                // this evaluation; without one the spec's own text is used.
                let with_unique;
                let (s, unique) = match (&ev.unique, s.unique()) {
                    (Some(u), None) => {
                        with_unique = s.with_unique(u);
                        (&with_unique, Some(u.clone()))
                    }
                    (Some(u), Some(_)) => (s, Some(u.clone())),
                    (None, own) => (s, own.map(str::to_string)),
                };
                let algorithm = Algorithm::Ewma {
                    limit: s.limit(),
                    period_secs: s.period_secs(),
                    mode: s.update_mode(),
                    unique_kind: UniqueKind::Bloom,
                };
                let count = ev.count.unwrap_or_else(|| s.rcpt_count());
                (
                    s.database_key(&key_text, &key_text),
                    algorithm,
                    count,
                    unique,
                )
            }
            Sim::Other { algorithm } => {
                if ev.unique.is_some() {
                    return Err(bad("\"unique\" applies to Exim limits only".into()));
                }
                (
                    key_text.clone(),
                    algorithm.clone(),
                    ev.count.unwrap_or(1.0),
                    None,
                )
            }
        };
        let decision = Decision {
            limits: vec![LimitRequest {
                key: db_key,
                algorithm,
                count,
                unique,
                blocking: true,
            }],
        };
        let result = store.decide_at(now_us, &decision);
        let r = &result.limits[0];
        let out = Output {
            t: now_us as f64 / 1e6,
            key: &decision.limits[0].key,
            rate: r.value,
            over: r.over,
            stored: r.stored,
            seen: r.seen,
            retry_after: if r.over {
                r.retry_after.map(|d| d.as_secs_f64())
            } else {
                None
            },
        };
        serde_json::to_writer(&mut output, &out).map_err(std::io::Error::from)?;
        output.write_all(b"\n")?;
    }
    output.flush()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn sim(spec: &str, input: &str) -> Vec<serde_json::Value> {
        let mut out = Vec::new();
        run(spec, input.as_bytes(), &mut out).unwrap();
        String::from_utf8(out)
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }

    fn rates(out: &[serde_json::Value]) -> Vec<f64> {
        out.iter().map(|o| o["rate"].as_f64().unwrap()).collect()
    }

    fn events(times: &[f64], extra: &str) -> String {
        times
            .iter()
            .map(|t| format!("{{\"t\": {t}, \"key\": \"k\"{extra}}}\n"))
            .collect()
    }

    #[test]
    fn event_unique_is_tested_without_unique_in_the_spec() {
        // TV11's recipients through a plain per_rcpt spec: the same seen/over as per_addr.
        let input: String = ["x", "x", "y", "x", "z", "z", "w", "w"]
            .iter()
            .enumerate()
            .map(|(t, u)| format!("{{\"t\": {t}, \"key\": \"k\", \"unique\": \"{u}\"}}\n"))
            .collect();
        let out = sim("3/1h/per_rcpt", &input);
        let seen: Vec<bool> = out.iter().map(|o| o["seen"].as_bool().unwrap()).collect();
        assert_eq!(seen, [false, true, false, true, false, true, false, false]);
        let over: Vec<bool> = out.iter().map(|o| o["over"].as_bool().unwrap()).collect();
        assert_eq!(over, [false, false, false, false, false, false, true, true]);
        assert_eq!(out[0]["key"], "1h/per_rcpt/unique/k");
        let addr = sim("3/1h/per_addr", &input);
        assert_eq!(rates(&out), rates(&addr));
        // Without "unique" the spec's own (non-unique) record is used.
        let out = sim("3/1h/per_rcpt", &events(&[0.0, 1.0], ""));
        assert_eq!(out[0]["key"], "1h/per_rcpt/k");
        assert!(out[0].get("seen").is_none());
        // TV1's second rate: the repeat counts.
        assert!((out[1]["rate"].as_f64().unwrap() - 1.99958).abs() < 5e-6);
    }

    #[test]
    fn count_with_per_rcpt_counts_n_per_event() {
        // TV10: 3.0, 5.99875, 8.99667, 11.99375 (over), whichever comes first.
        for spec in ["10/1h/per_rcpt/count=3", "10/1h/count=3/per_rcpt"] {
            let out = sim(spec, &events(&[0.0, 1.0, 2.0, 3.0], ""));
            let r = rates(&out);
            assert_eq!(r[0], 3.0, "{spec}");
            assert!((r[1] - 5.99875).abs() < 5e-6, "{spec}: {r:?}");
            assert!((r[3] - 11.99375).abs() < 5e-6, "{spec}: {r:?}");
            assert_eq!(out[3]["over"], true, "{spec}");
        }
        // An event's own count still wins; readonly counts nothing.
        let out = sim("10/1h/count=3/per_rcpt", &events(&[0.0], ", \"count\": 1"));
        assert_eq!(out[0]["rate"], 1.0);
        let out = sim("10/1h/count=3/per_rcpt/readonly", &events(&[0.0], ""));
        assert_eq!(out[0]["rate"], 0.0);
        // per_byte after count= takes the message size, unknown here: 1.
        let out = sim("10/1h/count=3/per_byte", &events(&[0.0], ""));
        assert_eq!(out[0]["rate"], 1.0);
    }

    proptest! {
        /// An event's unique through a spec without unique= behaves exactly like the same
        /// spec with a unique= item: same key, rates, verdicts and seen flags.
        #[test]
        fn event_unique_equals_a_unique_item(
            evs in proptest::collection::vec((0u32..5000, 0u8..4), 1..40),
            m in 1u8..8,
            strict in any::<bool>(),
        ) {
            let mut t = 0u64;
            let input: String = evs.iter().map(|(dt, u)| {
                t += u64::from(*dt);
                format!("{{\"t\": {}, \"key\": \"k\", \"unique\": \"u{u}\"}}\n", t as f64 / 1000.0)
            }).collect();
            let mode = if strict { "strict" } else { "leaky" };
            let plain = sim(&format!("{m}/1m/per_rcpt/{mode}"), &input);
            let item = sim(&format!("{m}/1m/per_rcpt/{mode}/unique=x"), &input);
            prop_assert_eq!(plain, item);
        }

        /// `count=N` with per_rcpt, in either order, is the same as events of count N.
        #[test]
        fn count_item_equals_event_count(
            times in proptest::collection::vec(0u32..100_000, 1..30),
            n in 0u8..5,
        ) {
            let mut t = 0u64;
            let times: Vec<f64> = times.iter().map(|d| { t += u64::from(*d); t as f64 / 1000.0 }).collect();
            let want = sim("10/1h/per_rcpt", &events(&times, &format!(", \"count\": {n}")));
            for spec in [format!("10/1h/per_rcpt/count={n}"), format!("10/1h/count={n}/per_rcpt")] {
                prop_assert_eq!(&sim(&spec, &events(&times, "")), &want);
            }
        }
    }
}
