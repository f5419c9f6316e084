//! The event log's line schema, without I/O: one type per kind of line, written by the
//! serving floodgate (`report::events`) and read back by `floodgate report`, the
//! baselines' history and `floodgate simulate`, so writer and readers cannot drift apart.
//!
//! An evaluation line (also `simulate`'s input, where `limit` and `own_limit` may be left
//! out):
//!
//! ```json
//! {"t":1738324800.123456,"limit":"per-user","key":"alice","count":1,"own_limit":5000}
//! ```
//!
//! A containment line:
//!
//! ```json
//! {"event":"contained","t":1738324802.000001,"what":"restricted","limit":"per-user","key":"alice"}
//! ```
//!
//! Other lines (`{"event":"message",…}`, `queued`, `outcome`) start with `{"event":` so that
//! readers of evaluations can skip them by their first bytes ([`is_other_event`]).

use std::borrow::Cow;
use std::io::Write as _;

use serde::Deserialize;

/// Longest free-text field of an event-log line, in characters (a Subject, an address,
/// a reason: as the evidence keeps them).
pub const FIELD_CHARS: usize = 200;

/// Largest `t` accepted, in seconds either side of the epoch (about 285,000 years: far
/// beyond any clock, short of the range where microseconds lose precision in an `f64`).
const MAX_T_SECS: f64 = 9.0e12;

/// Why a line is not a valid evaluation or containment.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum LineError {
    /// Not JSON, or not an object of the line's fields (serde's own words).
    #[error("{0}")]
    Shape(String),
    /// `t` is not a usable time.
    #[error("\"t\" must be a finite number of seconds, got {0:e}")]
    Time(f64),
    /// `count` is negative or not finite.
    #[error("\"count\" must be a finite number >= 0, got {0}")]
    Count(f64),
    /// `own_limit` is not a positive finite number.
    #[error("\"own_limit\" must be a finite number > 0, got {0}")]
    OwnLimit(f64),
}

/// `text` as the event log writes a free-text field: at most [`FIELD_CHARS`] characters,
/// a longer one cut and ended with `…`.
pub fn field(text: &str) -> Cow<'_, str> {
    match text.char_indices().nth(FIELD_CHARS) {
        None => text.into(),
        Some((at, _)) => {
            let cut = text[..at]
                .char_indices()
                .nth(FIELD_CHARS - 1)
                .map_or(at, |(i, _)| i);
            format!("{}…", &text[..cut]).into()
        }
    }
}

/// `key` as the event log writes a key or unique value: a longer one than
/// [`FIELD_CHARS`] is cut and given a hash of the whole (`…#` and 16 hex digits), so
/// that two long keys stay two keys for `floodgate report` and `simulate`.
pub fn key_field(key: &str) -> Cow<'_, str> {
    if key.chars().nth(FIELD_CHARS).is_none() {
        return key.into();
    }
    // FNV-1a: stable across runs and versions (the std hasher is not).
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in key.bytes() {
        h = (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3);
    }
    let head: String = key.chars().take(FIELD_CHARS - 18).collect();
    format!("{head}…#{h:016x}").into()
}

/// Whether `line` is an event of another kind than an evaluation (`{"event":…`).
pub fn is_other_event(line: &str) -> bool {
    line.trim_start().starts_with("{\"event\":")
}

/// One evaluation of a limit: what was offered to it, for which key, when.
#[derive(Clone, Debug, PartialEq)]
pub struct Evaluation {
    /// Microseconds since the Unix epoch.
    pub time_us: i64,
    /// The limit's name (absent from `simulate`'s own input).
    pub limit: Option<String>,
    /// The key text (absent: the empty key).
    pub key: Option<String>,
    /// The amount offered (absent: the reader's default, 1 or the spec's `count=`).
    pub count: Option<f64>,
    /// The key's own limit from the limit's `limit_list`, when it has one.
    pub own_limit: Option<f64>,
    /// The unique value, for unique limits.
    pub unique: Option<String>,
}

/// The fields of an evaluation line as they are read.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct EvaluationFields {
    t: f64,
    #[serde(default)]
    limit: Option<String>,
    #[serde(default)]
    key: Option<String>,
    #[serde(default)]
    count: Option<f64>,
    #[serde(default)]
    own_limit: Option<f64>,
    #[serde(default)]
    unique: Option<String>,
}

/// Seconds as read from a line, checked, in microseconds.
fn micros(t: f64) -> Result<i64, LineError> {
    if !t.is_finite() || t.abs() > MAX_T_SECS {
        return Err(LineError::Time(t));
    }
    Ok((t * 1e6).round() as i64)
}

/// Writes `{"t":SECONDS.MICROS` (the opening of every line's object and its time).
fn push_time(out: &mut Vec<u8>, time_us: i64) {
    let sign = if time_us < 0 { "-" } else { "" };
    let a = time_us.unsigned_abs();
    let _ = write!(out, "\"t\":{sign}{}.{:06}", a / 1_000_000, a % 1_000_000);
}

/// A JSON number: integers without a fraction, anything not finite as 0.
fn push_number(out: &mut Vec<u8>, v: f64) {
    if v.fract() == 0.0 && v.abs() < 1e15 {
        let _ = write!(out, "{}", v as i64);
    } else if v.is_finite() {
        let _ = write!(out, "{v}");
    } else {
        out.push(b'0');
    }
}

/// A JSON string (serde's escaping).
fn push_text(out: &mut Vec<u8>, text: &str) {
    let _ = serde_json::to_writer(&mut *out, text);
}

impl Evaluation {
    /// Reads one evaluation line: its fields, its time, count and own limit in range.
    /// Unknown fields are refused (a misspelt `count` would otherwise count 1).
    pub fn parse(line: &str) -> Result<Evaluation, LineError> {
        let f: EvaluationFields =
            serde_json::from_str(line).map_err(|e| LineError::Shape(e.to_string()))?;
        let time_us = micros(f.t)?;
        if let Some(c) = f.count.filter(|c| !c.is_finite() || *c < 0.0) {
            return Err(LineError::Count(c));
        }
        if let Some(m) = f.own_limit.filter(|m| !m.is_finite() || *m <= 0.0) {
            return Err(LineError::OwnLimit(m));
        }
        Ok(Evaluation {
            time_us,
            limit: f.limit,
            key: f.key,
            count: f.count,
            own_limit: f.own_limit,
            unique: f.unique,
        })
    }

    /// The JSON line (without the newline), every text field capped ([`key_field`],
    /// [`field`]).
    pub fn to_line(&self, out: &mut Vec<u8>) {
        out.push(b'{');
        push_time(out, self.time_us);
        if let Some(l) = &self.limit {
            out.extend_from_slice(b",\"limit\":");
            push_text(out, &field(l));
        }
        if let Some(k) = &self.key {
            out.extend_from_slice(b",\"key\":");
            push_text(out, &key_field(k));
        }
        if let Some(c) = self.count {
            out.extend_from_slice(b",\"count\":");
            push_number(out, c);
        }
        if let Some(m) = self.own_limit {
            out.extend_from_slice(b",\"own_limit\":");
            push_number(out, m);
        }
        if let Some(u) = &self.unique {
            out.extend_from_slice(b",\"unique\":");
            push_text(out, &key_field(u));
        }
        out.push(b'}');
    }
}

/// A key contained: restricted (by a limit or by hand), a message taken to hold, an
/// event deferred by a `defer` limit.
#[derive(Clone, Debug, PartialEq)]
pub struct Containment {
    /// Microseconds since the Unix epoch.
    pub time_us: i64,
    /// `restricted`, `held` or `defer`.
    pub what: String,
    /// The limit that contained it ("" when by hand).
    pub limit: String,
    /// The key contained.
    pub key: String,
}

/// The fields of a containment line as they are read.
#[derive(Deserialize)]
struct ContainmentFields {
    event: String,
    t: f64,
    what: String,
    #[serde(default)]
    limit: String,
    key: String,
}

impl Containment {
    /// Reads one containment line (`{"event":"contained",…}`); `None` for any other line.
    pub fn parse(line: &str) -> Option<Containment> {
        let f: ContainmentFields = serde_json::from_str(line).ok()?;
        if f.event != "contained" {
            return None;
        }
        Some(Containment {
            time_us: micros(f.t).ok()?,
            what: f.what,
            limit: f.limit,
            key: f.key,
        })
    }

    /// The JSON line (without the newline), every text field capped.
    pub fn to_line(&self) -> String {
        let mut out = b"{\"event\":\"contained\",".to_vec();
        push_time(&mut out, self.time_us);
        out.extend_from_slice(b",\"what\":");
        push_text(&mut out, &field(&self.what));
        out.extend_from_slice(b",\"limit\":");
        push_text(&mut out, &field(&self.limit));
        out.extend_from_slice(b",\"key\":");
        push_text(&mut out, &key_field(&self.key));
        out.push(b'}');
        String::from_utf8(out).unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn eval(t: i64, key: &str) -> Evaluation {
        Evaluation {
            time_us: t,
            limit: Some("per-user".into()),
            key: Some(key.into()),
            count: Some(1.0),
            own_limit: None,
            unique: None,
        }
    }

    #[test]
    fn writes_the_documented_shape() {
        let mut out = Vec::new();
        eval(1_738_324_800_123_456, "alice").to_line(&mut out);
        assert_eq!(
            String::from_utf8(out).unwrap(),
            r#"{"t":1738324800.123456,"limit":"per-user","key":"alice","count":1}"#
        );
        let c = Containment {
            time_us: 1_738_324_802_000_001,
            what: "restricted".into(),
            limit: "per-user".into(),
            key: "alice".into(),
        };
        assert_eq!(
            c.to_line(),
            r#"{"event":"contained","t":1738324802.000001,"what":"restricted","limit":"per-user","key":"alice"}"#
        );
        assert_eq!(Containment::parse(&c.to_line()), Some(c));
    }

    #[test]
    fn times_before_the_epoch_keep_their_microseconds() {
        let mut out = Vec::new();
        eval(-1_500_000, "a").to_line(&mut out);
        let line = String::from_utf8(out).unwrap();
        assert!(line.starts_with(r#"{"t":-1.500000,"#), "{line}");
        assert_eq!(Evaluation::parse(&line).unwrap().time_us, -1_500_000);
    }

    #[test]
    fn simulates_input_reads_without_limit() {
        let e = Evaluation::parse(r#"{"t": 12.5, "key": "alice", "count": 1, "unique": "x@y"}"#)
            .unwrap();
        assert_eq!(e.time_us, 12_500_000);
        assert_eq!(e.limit, None);
        assert_eq!(e.unique.as_deref(), Some("x@y"));
    }

    #[test]
    fn bad_lines_say_what_is_wrong() {
        let err = |l: &str| Evaluation::parse(l).unwrap_err().to_string();
        assert_eq!(
            err(r#"{"t":1e300}"#),
            "\"t\" must be a finite number of seconds, got 1e300"
        );
        assert_eq!(
            err(r#"{"t":1,"count":-1}"#),
            "\"count\" must be a finite number >= 0, got -1"
        );
        assert_eq!(
            err(r#"{"t":1,"own_limit":0}"#),
            "\"own_limit\" must be a finite number > 0, got 0"
        );
        assert!(err(r#"{"t":1,"cout":2}"#).contains("unknown field `cout`"));
        assert!(err(r#"{"key":"a"}"#).contains("missing field `t`"));
        assert!(err("not json").contains("expected"));
        assert_eq!(Containment::parse(r#"{"event":"queued","t":1}"#), None);
        assert_eq!(
            Containment::parse(r#"{"event":"contained","t":"x","what":"held","key":"a"}"#),
            None
        );
    }

    #[test]
    fn long_fields_are_capped_and_long_keys_stay_apart() {
        let long = "x".repeat(5000);
        assert_eq!(field(&long).chars().count(), FIELD_CHARS);
        let a = key_field(&format!("{long}a")).into_owned();
        let b = key_field(&format!("{long}b")).into_owned();
        assert_ne!(a, b);
        assert_eq!(a.chars().count(), FIELD_CHARS);
        assert!(is_other_event(r#"  {"event":"message"}"#));
        assert!(!is_other_event(r#"{"t":1}"#));
    }

    proptest! {
        #[test]
        fn every_written_evaluation_reads_back(
            t in -(1i64 << 53)..(1i64 << 53),
            key in "\\PC{0,40}",
            limit in proptest::option::of("[a-z-]{1,20}"),
            count in proptest::option::of(0u32..1_000_000),
            own in proptest::option::of(1u32..1_000_000),
            unique in proptest::option::of("\\PC{0,40}"),
        ) {
            let e = Evaluation {
                time_us: t,
                limit,
                key: Some(key),
                count: count.map(f64::from),
                own_limit: own.map(f64::from),
                unique,
            };
            let mut out = Vec::new();
            e.to_line(&mut out);
            let back = Evaluation::parse(std::str::from_utf8(&out).unwrap()).unwrap();
            // Seconds with six decimals through an f64 (about 285 years either side of
            // the epoch here): within a microsecond.
            prop_assert!((back.time_us - e.time_us).abs() <= 1);
            prop_assert_eq!(back.key, e.key);
            prop_assert_eq!(back.limit, e.limit);
            prop_assert_eq!(back.count, e.count);
            prop_assert_eq!(back.own_limit, e.own_limit);
            prop_assert_eq!(back.unique, e.unique);
        }

        #[test]
        fn no_line_panics_the_reader(line in "\\PC{0,200}") {
            let _ = Evaluation::parse(&line);
            let _ = Containment::parse(&line);
        }
    }
}
