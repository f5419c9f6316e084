//! The Redis store's pure parts on arbitrary input: decoding a script reply
//! never panics and keeps one result per limit; stored records decode or are
//! refused; key identities are substrings of the key.
#![no_main]

use floodgate::limit::gcra::GcraSpec;
use floodgate::limit::rate::Rate;
use floodgate::limit::spec::UpdateMode;
use floodgate::limit::unique::UniqueKind;
use floodgate::store::redis::encode::{
    decode, decode_bucket, decode_ewma, decode_gcra, decode_unique, identity_of,
};
use floodgate::store::{Algorithm, Decision, LimitRequest};
use libfuzzer_sys::fuzz_target;

fn limit(b: u8) -> LimitRequest {
    let algorithm = match b % 2 {
        0 => Algorithm::Ewma {
            limit: 10.0,
            period_secs: 60,
            mode: UpdateMode::Leaky,
            unique_kind: UniqueKind::Bloom,
        },
        _ => Algorithm::Gcra(GcraSpec::new(3.0, Rate::new(1.0, 1.0).unwrap()).unwrap()),
    };
    LimitRequest {
        key: "k".into(),
        algorithm,
        count: 1.0,
        unique: None,
        blocking: true,
    }
}

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    assert!(text.contains(identity_of(&text)));
    let _ = (
        decode_ewma(data),
        decode_unique(data),
        decode_gcra(data),
        decode_bucket(data),
    );
    let Some((&n, rest)) = data.split_first() else {
        return;
    };
    let decision = Decision {
        limits: (0..n % 4).map(limit).collect(),
    };
    if let Ok(r) = decode(&decision, rest) {
        assert_eq!(r.limits.len(), decision.limits.len());
        assert_eq!(rest.len(), 1 + 17 * decision.limits.len());
    }
});
