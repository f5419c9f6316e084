//! message_keys::compute with every key wanted, and is_automatic: no panics on any bytes,
//! and the keys keep their bounds.
#![no_main]

use floodgate::message_keys::{
    compute, is_automatic, links::MAX_LINK_DOMAINS, minhash::BANDS, subject::MAX_SHAPE, Wanted,
};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = is_automatic(data);
    let keys = compute(data, Wanted::ALL, &["example.com".to_string()]);
    assert!(keys.fingerprint.is_empty() || keys.fingerprint.len() == BANDS);
    assert!(keys.link_domains.len() <= MAX_LINK_DOMAINS);
    assert!(keys.link_domains.windows(2).all(|w| w[0] < w[1]));
    assert!(keys.subject_shape.is_none_or(|s| !s.is_empty() && s.len() <= MAX_SHAPE));
});
