//! `floodgate simulate --limit SPEC [FILE]`: replays events through one limit.
//!
//! Input: JSON lines `{"t": <seconds>, "key": "<text>", "count": <n>, "unique": "<text>"}`.
//! Each line is one evaluation of the limit (no session caching). `t` is
//! rounded to the nearest microsecond; `key` is the expanded key text, or
//! the client IP when the spec has no key text; `count` defaults to the
//! limit's `count=`, else 1; `unique` is the value tested against the key's
//! unique set (the spec needs `unique=` or `per_addr`). Blank lines are skipped.
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
use serde::{Deserialize, Serialize};
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

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Event {
    t: f64,
    #[serde(default)]
    key: Option<String>,
    #[serde(default)]
    count: Option<f64>,
    #[serde(default)]
    unique: Option<String>,
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
        if line.trim().is_empty() {
            continue;
        }
        let bad = |detail: String| SimulateError::Input {
            line: line_no,
            detail,
        };
        let ev: Event = serde_json::from_str(&line).map_err(|e| bad(e.to_string()))?;
        if !ev.t.is_finite() || ev.t.abs() > 9.0e12 {
            return Err(bad(format!(
                "\"t\" must be a finite number of seconds, got {}",
                ev.t
            )));
        }
        if let Some(c) = ev.count {
            if c.is_nan() || c < 0.0 || c.is_infinite() {
                return Err(bad(format!(
                    "\"count\" must be a finite number >= 0, got {c}"
                )));
            }
        }
        let now_us = (ev.t * 1e6).round() as i64;
        let key_text = ev.key.unwrap_or_default();
        let (db_key, algorithm, count, unique) = match &sim {
            Sim::Exim(s) => {
                if ev.unique.is_some() && s.unique().is_none() {
                    return Err(bad(
                        "\"unique\" given but the limit has no unique= or per_addr".into(),
                    ));
                }
                let unique = s
                    .unique()
                    .map(|u| ev.unique.clone().unwrap_or_else(|| u.to_string()));
                let algorithm = Algorithm::Ewma {
                    limit: s.limit(),
                    period_secs: s.period_secs(),
                    mode: s.update_mode(),
                    unique_kind: UniqueKind::Bloom,
                };
                let count = ev.count.unwrap_or_else(|| s.count().unwrap_or(1.0));
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
