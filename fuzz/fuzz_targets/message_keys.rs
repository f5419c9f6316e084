//! message_keys::compute with every key wanted, and is_automatic: no panics on any bytes,
//! and the keys keep their bounds. The same bytes also go in as an HTML part (the inline
//! CSS and colour parsing, the quote markers), as plain text (the forwarded-message,
//! signature and disclaimer readers, invisible and look-alike folding), and as the
//! boilerplate learner's file.
#![no_main]

use floodgate::message_keys::boilerplate::{Boilerplate, Settings};
use floodgate::message_keys::{
    compute, is_automatic,
    links::MAX_LINK_DOMAINS,
    minhash::{BANDS, SUBJECT_BANDS},
    reading::MAX_TOLD,
    subject::MAX_SHAPE,
    text_bands, Wanted,
};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = is_automatic(data);
    let keys = compute(data, Wanted::ALL, &["example.com".to_string()]);
    // The text's bands, then the Subject-joined ones when there is a Subject shape.
    let joined = if keys.subject_shape.is_some() {
        SUBJECT_BANDS
    } else {
        0
    };
    assert!(keys.fingerprint.is_empty() || keys.fingerprint.len() == BANDS + joined);
    assert!(keys.link_domains.len() <= MAX_LINK_DOMAINS);
    assert!(keys.link_domains.windows(2).all(|w| w[0] < w[1]));
    assert!(keys
        .subject_shape
        .is_none_or(|s| !s.is_empty() && s.len() <= MAX_SHAPE));
    assert!(keys.left_out.len() <= MAX_TOLD);

    let mut html = b"Subject: x\r\nContent-Type: text/html; charset=utf-8\r\n\r\n".to_vec();
    html.extend_from_slice(data);
    let keys = compute(&html, Wanted::ALL, &[]);
    assert!(keys.fingerprint.is_empty() || keys.fingerprint.len() == BANDS + SUBJECT_BANDS);

    let text = String::from_utf8_lossy(data);
    let bands = text_bands(&text);
    assert!(bands.is_empty() || bands.len() == BANDS);

    if let Ok(b) = Boilerplate::from_bytes(data, Settings::default()) {
        let again = Boilerplate::from_bytes(&b.to_bytes(), Settings::default()).unwrap();
        assert_eq!(again.len(), b.len());
    }
});
