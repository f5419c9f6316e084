//! Fuzz target: a campaign sender as the Redis ledger keeps it
//! (`copies|recipients|last|restricted|t:r,t:r|info`), and free text capped.
//!
//! Checks that decoding never panics, that what decodes encodes to a text that decodes
//! to the same sender, and that capping keeps at most the characters asked.
#![no_main]

use floodgate::store::campaign::capped;
use floodgate::store::CampaignSender;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Some(s) = CampaignSender::decode("fuzz", text) {
        assert_eq!(CampaignSender::decode("fuzz", &s.encode()), Some(s), "{text:?}");
    }
    let c = capped(text, 16);
    assert!(c.chars().count() <= 16, "{c:?}");
    if text.chars().count() <= 16 {
        assert_eq!(c, text);
    }
});
