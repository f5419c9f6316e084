//! Turning a [`Decision`] into the keys and arguments of the decision script,
//! and its reply back into a [`DecisionResult`]. No I/O.

use crate::limit::bucket::{BucketOp, Verdict};
use crate::limit::ewma;
use crate::limit::spec::UpdateMode;
use crate::limit::unique::{bloom_size, UniqueKind};
use crate::store::{Algorithm, Decision, DecisionResult, LimitRequest, LimitResult, StoreError};
use md5::{Digest, Md5};
use std::time::Duration;

/// Largest integer a double (and so a Lua number) holds exactly.
const EXACT_INT: f64 = 9_007_199_254_740_992.0;

/// How Redis key names get their cluster hash tag.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum HashTag {
    /// One tag for every key: any decision fits one slot (one master holds
    /// all limit state; cluster still gives failover).
    #[default]
    Global,
    /// The key's identity: an explicit `{…}` in the key text, else the part
    /// after Exim's `period/per_word/[unique/]`, else the whole key. Limits of
    /// one user share a slot; a decision mixing identities needs explicit
    /// `{…}` tags in its keys when Redis runs as a cluster.
    Identity,
}

impl HashTag {
    /// Parses the config word (`global` or `identity`).
    pub fn parse(word: &str) -> Option<HashTag> {
        match word {
            "global" => Some(HashTag::Global),
            "identity" => Some(HashTag::Identity),
            _ => None,
        }
    }
}

/// The identity part of a limit key, used as its hash tag.
pub fn identity_of(key: &str) -> &str {
    if let Some(open) = key.find('{') {
        if let Some(len) = key[open + 1..].find('}') {
            if len > 0 {
                return &key[open + 1..open + 1 + len];
            }
        }
    }
    let mut parts = key.splitn(3, '/');
    match (parts.next(), parts.next(), parts.next()) {
        (Some(_), Some(_), Some(rest)) => {
            let rest = rest.strip_prefix("unique/").unwrap_or(rest);
            if rest.is_empty() {
                key
            } else {
                rest
            }
        }
        _ => key,
    }
}

/// Names the Redis keys of limit keys.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyNamer {
    prefix: String,
    tag: HashTag,
}

impl KeyNamer {
    /// A namer with `prefix` (must not contain `{` or `}`) and tag mode.
    pub fn new(prefix: &str, tag: HashTag) -> Result<KeyNamer, StoreError> {
        if prefix.contains(['{', '}']) {
            return Err(StoreError::Invalid(format!(
                "key prefix {prefix:?} must not contain braces (they would set the hash tag)"
            )));
        }
        Ok(KeyNamer {
            prefix: prefix.to_string(),
            tag,
        })
    }

    /// The Redis key of record `kind` (`e`, `u`, `g`, `b`, or `s` for a
    /// unique set) of limit key `key`.
    pub fn name(&self, kind: char, key: &str) -> String {
        let tag = match self.tag {
            HashTag::Global => "g",
            HashTag::Identity => identity_of(key),
        };
        let mut s = String::with_capacity(self.prefix.len() + tag.len() + key.len() + 6);
        s.push_str(&self.prefix);
        s.push('{');
        s.push_str(tag);
        s.push_str("}:");
        s.push(kind);
        s.push(':');
        s.push_str(key);
        s
    }

    /// The five Redis keys that can hold state of `key` (four record kinds and the set).
    pub fn all(&self, key: &str) -> [String; 5] {
        ['e', 'u', 'g', 'b', 's'].map(|k| self.name(k, key))
    }
}

/// The two MD5 words Exim's Bloom probes derive from (see
/// [`crate::limit::unique::bloom_probes`]); the script derives the probe
/// positions for whatever size the stored filter has.
pub fn bloom_words(text: &str) -> (u32, u32) {
    let d = Md5::digest(text.as_bytes());
    (
        u32::from_le_bytes([d[0], d[1], d[2], d[3]]),
        u32::from_le_bytes([d[4], d[5], d[6], d[7]]),
    )
}

/// Shortest text that parses back to the same double (Lua's `tonumber`
/// uses strtod, which is exact).
fn num(x: f64) -> String {
    format!("{x:?}")
}

fn finite(what: &str, x: f64) -> Result<f64, StoreError> {
    if x.is_finite() {
        Ok(x)
    } else {
        Err(StoreError::Invalid(format!("{what} is not finite: {x}")))
    }
}

fn exact_int(what: &str, x: f64) -> Result<i64, StoreError> {
    if x.abs() < EXACT_INT {
        Ok(x as i64)
    } else {
        Err(StoreError::Invalid(format!(
            "{what} of {x} ns is beyond the exact range of the Redis store"
        )))
    }
}

/// A decision encoded for the script.
#[derive(Debug, Clone, PartialEq)]
pub struct Encoded {
    /// KEYS: the record key, then the set key, per limit.
    pub keys: Vec<String>,
    /// ARGV.
    pub args: Vec<String>,
}

/// Encodes `decision` at `now_us` (`None`: the script reads Redis `TIME`).
pub fn encode(
    namer: &KeyNamer,
    decision: &Decision,
    now_us: Option<i64>,
    idle_ttl: Duration,
) -> Result<Encoded, StoreError> {
    let mut keys = Vec::with_capacity(decision.limits.len() * 2);
    let mut args = Vec::with_capacity(3 + decision.limits.len() * 12);
    match now_us {
        Some(t) => {
            args.push(t.div_euclid(1_000_000).to_string());
            args.push(t.rem_euclid(1_000_000).to_string());
        }
        None => {
            args.push(String::new());
            args.push(String::new());
        }
    }
    args.push(idle_ttl.as_millis().clamp(1, i64::MAX as u128).to_string());
    for req in &decision.limits {
        encode_limit(namer, req, &mut keys, &mut args)?;
    }
    Ok(Encoded { keys, args })
}

fn encode_limit(
    namer: &KeyNamer,
    req: &LimitRequest,
    keys: &mut Vec<String>,
    args: &mut Vec<String>,
) -> Result<(), StoreError> {
    let count = finite("count", req.count)?;
    let blocking = if req.blocking { "1" } else { "0" };
    match &req.algorithm {
        Algorithm::Ewma {
            limit,
            period_secs,
            mode,
            unique_kind,
        } => {
            if *period_secs == 0 {
                return Err(StoreError::Invalid("EWMA period of 0 seconds".into()));
            }
            let kind = if req.unique.is_some() { 'u' } else { 'e' };
            keys.push(namer.name(kind, &req.key));
            keys.push(namer.name('s', &req.key));
            let mode = match mode {
                UpdateMode::Leaky => "l",
                UpdateMode::Strict => "s",
                UpdateMode::Readonly => "r",
            };
            args.extend([
                "E".into(),
                blocking.into(),
                num(count),
                num(*limit),
                period_secs.to_string(),
                mode.into(),
            ]);
            match &req.unique {
                None => args.extend(["-", "", "0", "0", "0"].map(String::from)),
                Some(value) => {
                    let (h1, h2) = bloom_words(value);
                    let flag = match unique_kind {
                        UniqueKind::Bloom => "b",
                        UniqueKind::Exact => "x",
                    };
                    args.extend([
                        flag.into(),
                        value.clone(),
                        h1.to_string(),
                        h2.to_string(),
                        bloom_size(*limit).to_string(),
                    ]);
                }
            }
        }
        Algorithm::Gcra(spec) => {
            keys.push(namer.name('g', &req.key));
            keys.push(namer.name('s', &req.key));
            // The same integers as GcraSpec::evaluate.
            let t = spec.emission_ns();
            let tau = exact_int("burst", (spec.burst * t).round())?;
            let inc = exact_int("weight", (count.max(0.0) * t).round())?;
            args.extend([
                "G".into(),
                blocking.into(),
                num(count),
                num(t),
                tau.to_string(),
                inc.to_string(),
            ]);
        }
        Algorithm::Bucket { spec, op } => {
            keys.push(namer.name('b', &req.key));
            keys.push(namer.name('s', &req.key));
            let (op, verdict) = match op {
                BucketOp::Check => ("c", "o"),
                BucketOp::Commit(Verdict::Ham) => ("m", "h"),
                BucketOp::Commit(Verdict::Spam) => ("m", "s"),
                BucketOp::Commit(Verdict::Other) => ("m", "o"),
                BucketOp::Cancel => ("x", "o"),
            };
            let m = spec.dynamic.unwrap_or_default();
            args.extend([
                "B".into(),
                blocking.into(),
                num(count),
                num(spec.burst),
                num(spec.rate.per_second()),
                op.into(),
                verdict.into(),
                if spec.dynamic.is_some() { "1" } else { "0" }.into(),
                num(m.ham_factor_rate),
                num(m.spam_factor_rate),
                num(m.ham_factor_burst),
                num(m.spam_factor_burst),
                num(m.max_rate_mult),
                num(m.max_bucket_mult),
            ]);
        }
    }
    Ok(())
}

/// One element of the script's reply.
#[derive(Debug, Clone, PartialEq)]
pub enum Item {
    /// An integer.
    Int(i64),
    /// A string.
    Text(String),
}

fn bad(what: &str) -> StoreError {
    StoreError::Unavailable(format!("unexpected reply from the decision script: {what}"))
}

fn float(item: &Item) -> Result<f64, StoreError> {
    match item {
        Item::Text(s) => parse_float(s).ok_or_else(|| bad(s)),
        Item::Int(i) => Ok(*i as f64),
    }
}

/// Parses C's `%.17g` output (including `inf`, `-inf`, `nan`, `-nan`).
pub fn parse_float(s: &str) -> Option<f64> {
    if s.contains("nan") {
        return Some(f64::NAN);
    }
    s.parse().ok()
}

fn int(item: &Item) -> Result<i64, StoreError> {
    match item {
        Item::Int(i) => Ok(*i),
        Item::Text(s) => s.parse().map_err(|_| bad(s)),
    }
}

fn secs(d: f64) -> Option<Duration> {
    (d.is_finite() && d >= 0.0).then(|| Duration::from_secs_f64(d.min(1e12)))
}

/// Decodes the script's reply for `decision`.
pub fn decode(decision: &Decision, reply: &[Item]) -> Result<DecisionResult, StoreError> {
    if reply.len() != 1 + 5 * decision.limits.len() {
        return Err(bad(&format!("{} items", reply.len())));
    }
    let refused = int(&reply[0])? != 0;
    let mut limits = Vec::with_capacity(decision.limits.len());
    for (req, r) in decision.limits.iter().zip(reply[1..].chunks_exact(5)) {
        let value = float(&r[0])?;
        let over = int(&r[1])? != 0;
        let stored = int(&r[2])? != 0;
        let seen = match int(&r[3])? {
            -1 => None,
            n => Some(n != 0),
        };
        let extra = match &r[4] {
            Item::Text(s) if s.is_empty() => None,
            other => Some(float(other)?),
        };
        let retry_after = match &req.algorithm {
            Algorithm::Ewma {
                limit,
                period_secs,
                mode,
                ..
            } => match extra {
                // Not over.
                None => Some(Duration::ZERO),
                Some(base) => {
                    let count = if *mode == UpdateMode::Readonly || seen == Some(true) {
                        0.0
                    } else {
                        req.count
                    };
                    ewma::retry_after_secs(base, count, *limit, *period_secs).and_then(secs)
                }
            },
            Algorithm::Gcra(_) => {
                extra.map(|ns| Duration::from_nanos(if ns > 0.0 { ns as u64 } else { 0 }))
            }
            Algorithm::Bucket { .. } => extra.and_then(|ms| secs(ms / 1000.0)),
        };
        limits.push(LimitResult {
            value,
            over,
            stored,
            seen,
            retry_after,
        });
    }
    Ok(DecisionResult { refused, limits })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::limit::unique::bloom_probes;
    use proptest::prelude::*;

    /// The script's probe formula, in Rust.
    fn lua_probes(text: &str, size: usize) -> Vec<(usize, u8)> {
        let (h1, h2) = bloom_words(text);
        let mut h = u64::from(h1);
        (0..8)
            .map(|_| {
                let p = ((h / 8) as usize % size, 1u8 << (h % 8));
                h = (h + u64::from(h2)) % (1 << 32);
                p
            })
            .collect()
    }

    proptest! {
        #[test]
        fn probes_match_engine(text in ".{0,40}", size in 1usize..5000) {
            prop_assert_eq!(lua_probes(&text, size), bloom_probes(text.as_bytes(), size).to_vec());
        }

        #[test]
        fn num_round_trips(x in any::<f64>().prop_filter("finite", |x| x.is_finite())) {
            prop_assert_eq!(num(x).parse::<f64>().unwrap().to_bits(), x.to_bits());
        }

        #[test]
        fn identity_is_a_substring(key in ".{0,40}") {
            prop_assert!(key.contains(identity_of(&key)));
        }
    }

    #[test]
    fn identities() {
        assert_eq!(identity_of("1h/per_rcpt/unique/alice"), "alice");
        assert_eq!(identity_of("1h/per_mail/alice/x"), "alice/x");
        assert_eq!(identity_of("a{tag}b"), "tag");
        assert_eq!(identity_of("a{}b"), "a{}b");
        assert_eq!(identity_of("plain"), "plain");
        let n = KeyNamer::new("fg:", HashTag::Identity).unwrap();
        assert_eq!(n.name('e', "1h/per_mail/bob"), "fg:{bob}:e:1h/per_mail/bob");
        let g = KeyNamer::new("fg:", HashTag::Global).unwrap();
        assert_eq!(g.name('g', "k"), "fg:{g}:g:k");
        assert!(KeyNamer::new("a{", HashTag::Global).is_err());
    }

    #[test]
    fn floats_parse_c_output() {
        assert_eq!(parse_float("inf"), Some(f64::INFINITY));
        assert_eq!(parse_float("-inf"), Some(f64::NEG_INFINITY));
        assert!(parse_float("-nan").unwrap().is_nan());
        assert_eq!(parse_float("1.5"), Some(1.5));
        assert_eq!(parse_float("x"), None);
    }

    #[test]
    fn decode_checks_length() {
        let d = Decision::default();
        assert!(decode(&d, &[]).is_err());
        assert_eq!(
            decode(&d, &[Item::Int(0)]).unwrap(),
            DecisionResult::default()
        );
    }
}
