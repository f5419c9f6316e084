//! Turning a [`Decision`] into the keys and arguments of the decision script,
//! and its reply back into a [`DecisionResult`]. No I/O.

use crate::limit::bucket::{BucketOp, BucketState, MessageClass};
use crate::limit::ewma::{self, EwmaState};
use crate::limit::spec::UpdateMode;
use crate::limit::unique::{bloom_size, UniqueKind};
use crate::store::eval::{next_count, same_retry};
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

/// Most limits in one decision: the script unpacks every parameter (up to
/// 14 per limit) onto the Lua stack, which holds about 8 000 values.
pub const MAX_LIMITS: usize = 500;

/// A decision encoded for the script.
///
/// ARGV\[2\] packs every number as the script's `struct.unpack` reads it
/// (little endian, no padding; `B` one byte, `d` one IEEE double, so values
/// arrive bit-exact and unparsed); ARGV\[1\] is its format, so that one
/// `struct.unpack` call reads the whole decision:
///
/// * header `<Bddd`: explicit time (1) or Redis `TIME` (0), seconds,
///   microseconds, number of limits;
/// * per limit `<BBd`: algorithm (1 EWMA, 2 GCRA, 3 bucket, 4 same), blocking,
///   count (0 for same); then
///   * EWMA `<ddBBddd`: limit, period, mode (0 leaky, 1 strict, 2 readonly),
///     unique set (0 none, 1 Bloom, 2 exact), the two Bloom words, Bloom size;
///   * GCRA `<ddd`: emission interval, tolerance and increment in ns;
///   * bucket `<ddBBBdddddd`: burst, leak per second, op (0 check, 1 commit,
///     2 cancel), verdict (0 other, 1 ham, 2 spam), dynamic, ham/spam rate
///     factors, ham/spam burst factors, max rate and burst multipliers.
///   * same `<dd`: the earlier EWMA limit it is answered from (counted from
///     1), its own limit. Its KEYS entry is that limit's record key.
#[derive(Debug, Clone, PartialEq)]
pub struct Encoded {
    /// KEYS: the record key of every limit, then the set key of every unique limit.
    pub keys: Vec<String>,
    /// ARGV: the format of the packed decision, the packed decision, the
    /// idle TTL in milliseconds (text), then the unique values.
    pub args: Vec<Vec<u8>>,
}

fn put_d(buf: &mut Vec<u8>, x: f64) {
    buf.extend_from_slice(&x.to_le_bytes());
}

/// Encodes `decision` at `now_us` (`None`: the script reads Redis `TIME`).
pub fn encode(
    namer: &KeyNamer,
    decision: &Decision,
    now_us: Option<i64>,
    idle_ttl: Duration,
) -> Result<Encoded, StoreError> {
    decision.validate()?;
    let n = decision.limits.len();
    if n > MAX_LIMITS {
        return Err(StoreError::Invalid(format!(
            "{n} limits in one decision (the Redis store takes at most {MAX_LIMITS})"
        )));
    }
    let mut keys = Vec::with_capacity(n + 1);
    let mut sets = Vec::new();
    let mut blob = Vec::with_capacity(25 + n * 70);
    let mut layout = String::with_capacity(5 + n * 14);
    layout.push_str("<Bddd");
    let mut args = Vec::with_capacity(3);
    match now_us {
        Some(t) => {
            blob.push(1);
            put_d(&mut blob, t.div_euclid(1_000_000) as f64);
            put_d(&mut blob, t.rem_euclid(1_000_000) as f64);
        }
        None => {
            blob.push(0);
            put_d(&mut blob, 0.0);
            put_d(&mut blob, 0.0);
        }
    }
    put_d(&mut blob, n as f64);
    let ttl = idle_ttl.as_millis().clamp(1, i64::MAX as u128).to_string();
    args.push(Vec::new());
    args.push(Vec::new());
    args.push(ttl.into_bytes());
    for req in &decision.limits {
        layout.push_str(match req.algorithm {
            Algorithm::Ewma { .. } => "BBdddBBddd",
            Algorithm::Gcra(_) => "BBdddd",
            Algorithm::Bucket { .. } => "BBdddBBBdddddd",
            Algorithm::Same { .. } => "BBddd",
        });
        encode_limit(
            namer,
            &decision.limits,
            req,
            &mut keys,
            &mut sets,
            &mut blob,
            &mut args,
        )?;
    }
    keys.append(&mut sets);
    args[0] = layout.into_bytes();
    args[1] = blob;
    Ok(Encoded { keys, args })
}

fn encode_limit(
    namer: &KeyNamer,
    limits: &[LimitRequest],
    req: &LimitRequest,
    keys: &mut Vec<String>,
    sets: &mut Vec<String>,
    blob: &mut Vec<u8>,
    values: &mut Vec<Vec<u8>>,
) -> Result<(), StoreError> {
    let blocking = u8::from(req.blocking);
    let count = match req.algorithm {
        // Ignored: Exim's cached answer counts nothing.
        Algorithm::Same { .. } => 0.0,
        _ => finite("count", req.count)?,
    };
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
            blob.extend_from_slice(&[1, blocking]);
            put_d(blob, count);
            put_d(blob, *limit);
            put_d(blob, f64::from(*period_secs));
            blob.push(match mode {
                UpdateMode::Leaky => 0,
                UpdateMode::Strict => 1,
                UpdateMode::Readonly => 2,
            });
            match &req.unique {
                None => {
                    blob.push(0);
                    blob.extend_from_slice(&[0; 24]);
                }
                Some(value) => {
                    let (h1, h2) = bloom_words(value);
                    blob.push(match unique_kind {
                        UniqueKind::Bloom => 1,
                        UniqueKind::Exact => 2,
                    });
                    put_d(blob, f64::from(h1));
                    put_d(blob, f64::from(h2));
                    put_d(blob, bloom_size(*limit) as f64);
                    sets.push(namer.name('s', &req.key));
                    values.push(value.as_bytes().to_vec());
                }
            }
        }
        Algorithm::Gcra(spec) => {
            keys.push(namer.name('g', &req.key));
            // The same integers as GcraSpec::evaluate.
            let t = spec.emission_ns();
            let tau = exact_int("burst", (spec.burst * t).round())?;
            let inc = exact_int("weight", (count.max(0.0) * t).round())?;
            blob.extend_from_slice(&[2, blocking]);
            put_d(blob, count);
            put_d(blob, t);
            put_d(blob, tau as f64);
            put_d(blob, inc as f64);
        }
        Algorithm::Bucket { spec, op } => {
            keys.push(namer.name('b', &req.key));
            let (op, verdict) = match op {
                BucketOp::Check => (0, 0),
                BucketOp::Commit(MessageClass::Ham) => (1, 1),
                BucketOp::Commit(MessageClass::Spam) => (1, 2),
                BucketOp::Commit(MessageClass::Other) => (1, 0),
                BucketOp::Cancel => (2, 0),
            };
            let m = spec.dynamic.unwrap_or_default();
            blob.extend_from_slice(&[3, blocking]);
            put_d(blob, count);
            put_d(blob, spec.burst);
            put_d(blob, spec.rate.per_second());
            blob.extend_from_slice(&[op, verdict, u8::from(spec.dynamic.is_some())]);
            for x in [
                m.ham_factor_rate,
                m.spam_factor_rate,
                m.ham_factor_burst,
                m.spam_factor_burst,
                m.max_rate_mult,
                m.max_bucket_mult,
            ] {
                put_d(blob, x);
            }
        }
        Algorithm::Same { of, limit } => {
            // `of` is an earlier EWMA request (validated). Its record key stands in for
            // this request's own: read by the MGET, never written, in `of`'s hash slot.
            let target = limits
                .get(*of)
                .ok_or_else(|| StoreError::Invalid(format!("no limit {of} to answer from")))?;
            let kind = if target.unique.is_some() { 'u' } else { 'e' };
            keys.push(namer.name(kind, &target.key));
            blob.extend_from_slice(&[4, blocking]);
            put_d(blob, count);
            // The script counts limits from 1.
            put_d(blob, (*of + 1) as f64);
            put_d(blob, *limit);
        }
    }
    Ok(())
}

/// Bytes of the reply per limit: flags, value, extra.
const REPLY_LIMIT: usize = 17;

fn bad(what: &str) -> StoreError {
    StoreError::Unavailable(format!("unexpected reply from the decision script: {what}"))
}

/// Reads little-endian doubles from `bytes`, which must hold exactly `N`.
fn doubles<const N: usize>(bytes: &[u8]) -> Option<[f64; N]> {
    if bytes.len() != 8 * N {
        return None;
    }
    let mut out = [0.0; N];
    for (x, c) in out.iter_mut().zip(bytes.chunks_exact(8)) {
        *x = f64::from_le_bytes(c.try_into().ok()?);
    }
    Some(out)
}

fn secs(d: f64) -> Option<Duration> {
    (d.is_finite() && d >= 0.0).then(|| Duration::from_secs_f64(d.min(1e12)))
}

/// Decodes the script's reply for `decision`: one byte `refused`, then per
/// limit a flags byte (1 over, 2 stored, 4 seen known, 8 seen, 16 extra
/// known) and two little-endian doubles, value and extra.
pub fn decode(decision: &Decision, reply: &[u8]) -> Result<DecisionResult, StoreError> {
    let n = decision.limits.len();
    if reply.len() != 1 + REPLY_LIMIT * n {
        return Err(bad(&format!("{} bytes for {n} limits", reply.len())));
    }
    let refused = match reply[0] {
        0 => false,
        1 => true,
        b => return Err(bad(&format!("refused byte {b}"))),
    };
    let mut limits: Vec<LimitResult> = Vec::with_capacity(n);
    for (req, r) in decision
        .limits
        .iter()
        .zip(reply[1..].chunks_exact(REPLY_LIMIT))
    {
        let flags = r[0];
        if flags >= 32 {
            return Err(bad(&format!("flags {flags}")));
        }
        let [value, extra] = doubles::<2>(&r[1..]).ok_or_else(|| bad("short limit"))?;
        let over = flags & 1 != 0;
        let stored = flags & 2 != 0;
        let seen = (flags & 4 != 0).then_some(flags & 8 != 0);
        let extra = (flags & 16 != 0).then_some(extra);
        let retry_after = match &req.algorithm {
            Algorithm::Ewma {
                limit, period_secs, ..
            } => match extra {
                // Not over.
                None => Some(Duration::ZERO),
                Some(base) => {
                    ewma::retry_after_secs(base, next_count(req, seen), *limit, *period_secs)
                        .and_then(secs)
                }
            },
            Algorithm::Gcra(_) => {
                extra.map(|ns| Duration::from_nanos(if ns > 0.0 { ns as u64 } else { 0 }))
            }
            Algorithm::Bucket { .. } => extra.and_then(|ms| secs(ms / 1000.0)),
            Algorithm::Same { of, limit } => {
                match (extra, decision.limits.get(*of), limits.get(*of)) {
                    (None, _, _) => Some(Duration::ZERO),
                    (Some(base), Some(of_req), Some(of_res)) => {
                        same_retry(base, of_req, of_res.seen, *limit)
                    }
                    // Not an earlier limit: the script never answers so (encode refuses it).
                    (Some(_), _, _) => return Err(bad(&format!("limit answered from {of}"))),
                }
            }
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

/// A stored EWMA record (`<ddd`: seconds, microseconds, rate).
pub fn decode_ewma(bytes: &[u8]) -> Option<EwmaState> {
    let [ts, tu, rate] = doubles::<3>(bytes)?;
    Some(EwmaState {
        time_us: (ts as i64)
            .saturating_mul(1_000_000)
            .saturating_add(tu as i64),
        rate,
    })
}

/// A stored unique-EWMA record (`<dddddd`: seconds, microseconds, rate,
/// set creation in seconds, set kind 1 Bloom / 2 exact, Bloom bytes):
/// the EWMA state, creation time, kind and Bloom size.
pub fn decode_unique(bytes: &[u8]) -> Option<(EwmaState, i64, UniqueKind, usize)> {
    let [_, _, _, cr, k, n] = doubles::<6>(bytes)?;
    let state = decode_ewma(&bytes[..24])?;
    let kind = match k as u8 {
        1 => UniqueKind::Bloom,
        2 => UniqueKind::Exact,
        _ => return None,
    };
    // A Bloom filter size is a small whole number of bytes.
    if !(0.0..=1e9).contains(&n) {
        return None;
    }
    Some((state, cr as i64, kind, n as usize))
}

/// A stored GCRA record (`<dd`: TAT seconds and nanoseconds) as the TAT in ns.
pub fn decode_gcra(bytes: &[u8]) -> Option<i64> {
    let [s, n] = doubles::<2>(bytes)?;
    Some(
        (s as i64)
            .saturating_mul(1_000_000_000)
            .saturating_add(n as i64),
    )
}

/// A stored bucket record (`<ddddd`: last, level, pending, dynamic rate and burst).
pub fn decode_bucket(bytes: &[u8]) -> Option<BucketState> {
    let [l, b, p, dr, db] = doubles::<5>(bytes)?;
    Some(BucketState {
        last_ms: l,
        level: b,
        pending: p,
        dyn_rate: dr as u32,
        dyn_burst: db as u32,
    })
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

        /// Any reply bytes decode to one result per limit or to an error.
        #[test]
        fn decode_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..80), n in 0usize..4) {
            let d = Decision { limits: (0..n).map(|i| gcra(&format!("k{i}"))).collect() };
            if let Ok(r) = decode(&d, &bytes) {
                prop_assert_eq!(r.limits.len(), n);
            }
        }

        /// Values and flags come back exactly as the script packs them.
        #[test]
        fn decode_reads_what_the_script_packs(
            value in any::<f64>(), extra in any::<f64>(), flags in 0u8..32, refused in any::<bool>()
        ) {
            let d = Decision { limits: vec![gcra("k")] };
            let mut reply = vec![u8::from(refused), flags];
            reply.extend_from_slice(&value.to_le_bytes());
            reply.extend_from_slice(&extra.to_le_bytes());
            let r = decode(&d, &reply).unwrap();
            prop_assert_eq!(r.refused, refused);
            let l = r.limits[0];
            prop_assert_eq!(l.value.to_bits(), value.to_bits());
            prop_assert_eq!(l.over, flags & 1 != 0);
            prop_assert_eq!(l.stored, flags & 2 != 0);
            prop_assert_eq!(l.seen, (flags & 4 != 0).then_some(flags & 8 != 0));
            prop_assert_eq!(l.retry_after.is_some(), flags & 16 != 0);
        }

        /// Stored records decode only from their exact layout, bit-exact.
        #[test]
        fn records_decode_exactly(
            xs in proptest::collection::vec(any::<f64>(), 0..8),
            secs in 0i64..4_000_000_000, micros in 0i64..1_000_000, rate in any::<f64>()
        ) {
            let raw: Vec<u8> = xs.iter().flat_map(|x| x.to_le_bytes()).collect();
            prop_assert_eq!(decode_gcra(&raw).is_some(), xs.len() == 2);
            prop_assert_eq!(decode_bucket(&raw).is_some(), xs.len() == 5);
            prop_assert_eq!(decode_ewma(&raw).is_some(), xs.len() == 3);
            if xs.len() != 6 {
                prop_assert!(decode_unique(&raw).is_none());
            }
            let mut e = Vec::new();
            for x in [secs as f64, micros as f64, rate] {
                e.extend_from_slice(&x.to_le_bytes());
            }
            let st = decode_ewma(&e).unwrap();
            prop_assert_eq!(st.time_us, secs * 1_000_000 + micros);
            prop_assert_eq!(st.rate.to_bits(), rate.to_bits());
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
    fn decode_checks_length_and_bytes() {
        let d = Decision::default();
        assert!(decode(&d, &[]).is_err());
        assert!(decode(&d, &[2]).is_err());
        assert_eq!(decode(&d, &[0]).unwrap(), DecisionResult::default());
        let one = Decision {
            limits: vec![gcra("k")],
        };
        let mut reply = vec![0u8; 1 + REPLY_LIMIT];
        assert!(decode(&one, &reply).is_ok());
        reply[1] = 32;
        assert!(decode(&one, &reply).is_err());
        assert!(decode(&one, &reply[..REPLY_LIMIT]).is_err());
    }

    /// The argument layout the script unpacks: header, then per limit the
    /// common part and the algorithm's own; keys in limit order, set keys
    /// and unique values last.
    #[test]
    fn encoded_layout() {
        let namer = KeyNamer::new("fg:", HashTag::Global).unwrap();
        let unique = LimitRequest {
            key: "1h/per_rcpt/unique/a".into(),
            algorithm: Algorithm::Ewma {
                limit: 10.0,
                period_secs: 3600,
                mode: UpdateMode::Strict,
                unique_kind: UniqueKind::Exact,
            },
            count: 1.5,
            unique: Some("bob".into()),
            blocking: false,
        };
        let d = Decision {
            limits: vec![unique, gcra("g")],
        };
        let t = 1_718_000_000_123_456;
        let e = encode(&namer, &d, Some(t), Duration::from_secs(60)).unwrap();
        assert_eq!(
            e.keys,
            [
                "fg:{g}:u:1h/per_rcpt/unique/a",
                "fg:{g}:g:g",
                "fg:{g}:s:1h/per_rcpt/unique/a"
            ]
        );
        assert_eq!(e.args[0], b"<BdddBBdddBBdddBBdddd");
        assert_eq!(e.args[2], b"60000");
        assert_eq!(e.args[3], b"bob");
        let blob = &e.args[1];
        assert_eq!(blob.len(), 25 + (10 + 42) + (10 + 24));
        let d_at = |i: usize| f64::from_le_bytes(blob[i..i + 8].try_into().unwrap());
        assert_eq!(blob[0], 1);
        assert_eq!(d_at(1), 1_718_000_000.0);
        assert_eq!(d_at(9), 123_456.0);
        assert_eq!(d_at(17), 2.0);
        // EWMA: algo, blocking, count, limit, period, mode, unique kind, words, size.
        assert_eq!(&blob[25..27], &[1, 0]);
        assert_eq!(d_at(27), 1.5);
        assert_eq!(d_at(35), 10.0);
        assert_eq!(d_at(43), 3600.0);
        assert_eq!(&blob[51..53], &[1, 2]);
        let (h1, h2) = bloom_words("bob");
        assert_eq!(d_at(53), f64::from(h1));
        assert_eq!(d_at(61), f64::from(h2));
        assert_eq!(d_at(69), bloom_size(10.0) as f64);
        // GCRA: algo, blocking, count, then emission, tolerance, increment.
        assert_eq!(&blob[77..79], &[2, 1]);
        assert_eq!(blob.len(), 79 + 8 + 24);
        let none = encode(&namer, &d, None, Duration::ZERO).unwrap();
        assert_eq!(none.args[1][0], 0);
        assert_eq!(none.args[2], b"1");
    }

    #[test]
    fn too_many_limits_are_refused() {
        let namer = KeyNamer::new("fg:", HashTag::Global).unwrap();
        let d = Decision {
            limits: (0..=MAX_LIMITS).map(|i| gcra(&i.to_string())).collect(),
        };
        assert!(matches!(
            encode(&namer, &d, None, Duration::ZERO),
            Err(StoreError::Invalid(_))
        ));
    }

    fn ewma_req(key: &str, mode: UpdateMode, unique: Option<&str>) -> LimitRequest {
        LimitRequest {
            key: key.into(),
            algorithm: Algorithm::Ewma {
                limit: 10.0,
                period_secs: 3600,
                mode,
                unique_kind: UniqueKind::Bloom,
            },
            count: 2.0,
            unique: unique.map(str::to_string),
            blocking: true,
        }
    }

    fn same(of: usize, limit: f64) -> LimitRequest {
        LimitRequest {
            key: "own".into(),
            algorithm: Algorithm::Same { of, limit },
            count: f64::NAN,
            unique: None,
            blocking: true,
        }
    }

    /// A same limit: its key is the earlier limit's record key (same slot), its count is
    /// ignored (even when not finite), then `of` counted from 1 and its own limit.
    #[test]
    fn same_layout() {
        let namer = KeyNamer::new("fg:", HashTag::Identity).unwrap();
        let d = Decision {
            limits: vec![
                gcra("g"),
                ewma_req("1h/per_rcpt/unique/alice", UpdateMode::Strict, Some("x")),
                same(1, 4.5),
            ],
        };
        let e = encode(&namer, &d, Some(1_000_000), Duration::from_secs(1)).unwrap();
        assert_eq!(
            e.keys,
            [
                "fg:{g}:g:g",
                "fg:{alice}:u:1h/per_rcpt/unique/alice",
                "fg:{alice}:u:1h/per_rcpt/unique/alice",
                "fg:{alice}:s:1h/per_rcpt/unique/alice",
            ]
        );
        assert_eq!(e.args[0], b"<BdddBBddddBBdddBBdddBBddd");
        let blob = &e.args[1];
        let tail = &blob[blob.len() - 26..];
        assert_eq!(&tail[..2], &[4, 1]);
        let d_at = |i: usize| f64::from_le_bytes(tail[i..i + 8].try_into().unwrap());
        assert_eq!((d_at(2), d_at(10), d_at(18)), (0.0, 2.0, 4.5));
    }

    #[test]
    fn invalid_same_is_not_encoded() {
        let namer = KeyNamer::new("fg:", HashTag::Global).unwrap();
        for limits in [
            vec![same(0, 1.0)],
            vec![gcra("g"), same(0, 1.0)],
            vec![ewma_req("k", UpdateMode::Leaky, None), same(3, 1.0)],
        ] {
            let d = Decision { limits };
            assert!(matches!(
                encode(&namer, &d, None, Duration::ZERO),
                Err(StoreError::Invalid(_))
            ));
        }
    }

    /// The retry of an over same limit: from the base the script sends, the earlier
    /// limit's period and next count (0 after a seen unique value or for readonly), and
    /// its own m.
    #[test]
    fn same_retry_from_reply() {
        let reply = |seen: u8, extra: f64| {
            let mut r = vec![1u8];
            // The earlier limit: stored, seen flags, rate 6.
            r.push(2 + seen);
            r.extend_from_slice(&6.0f64.to_le_bytes());
            r.extend_from_slice(&0.0f64.to_le_bytes());
            // The alias: over, extra known.
            r.push(1 + 16);
            r.extend_from_slice(&6.0f64.to_le_bytes());
            r.extend_from_slice(&extra.to_le_bytes());
            r
        };
        let d = Decision {
            limits: vec![
                ewma_req("1h/per_rcpt/unique/k", UpdateMode::Strict, Some("v")),
                same(0, 4.0),
            ],
        };
        let fresh = decode(&d, &reply(4, 6.0)).unwrap();
        let alias = fresh.limits[1];
        assert!(alias.over && !alias.stored && alias.seen.is_none());
        // 3600 · ln(6 / (4 - 2)).
        let want = 3600.0 * 3.0f64.ln();
        assert!((alias.retry_after.unwrap().as_secs_f64() - want).abs() < 1e-6);
        // Seen before: the next attempt adds nothing, 3600 · ln(6 / 4).
        let seen = decode(&d, &reply(4 + 8, 6.0)).unwrap();
        let want = 3600.0 * 1.5f64.ln();
        assert!((seen.limits[1].retry_after.unwrap().as_secs_f64() - want).abs() < 1e-6);
        // Not over: zero.
        let mut under = reply(4, 0.0);
        under[18] = 0;
        let r = decode(&d, &under).unwrap();
        assert_eq!(r.limits[1].retry_after, Some(Duration::ZERO));
        // A same limit whose `of` is not earlier cannot come back from the script.
        let bad = Decision {
            limits: vec![ewma_req("k", UpdateMode::Strict, None), same(5, 4.0)],
        };
        assert!(decode(&bad, &reply(4, 6.0)).is_err());
    }

    fn gcra(key: &str) -> LimitRequest {
        use crate::limit::gcra::GcraSpec;
        use crate::limit::rate::Rate;
        LimitRequest {
            key: key.into(),
            algorithm: Algorithm::Gcra(GcraSpec::new(3.0, Rate::new(1.0, 1.0).unwrap()).unwrap()),
            count: 1.0,
            unique: None,
            blocking: true,
        }
    }
}
