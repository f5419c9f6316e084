//! Fuzz target: the `Floodgate-Invoker` header of an admin request.
//!
//! Checks that reading it never panics, that an accepted claim writes back to a value that
//! reads to the same claim, and that only root or floodgate's own user turn a claim into
//! the recorded actor (anyone else's claim leaves the peer as it is).
#![no_main]

use floodgate::admin::actor::Actor;
use floodgate::admin::invoker::{vouched_by, Claim};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(c) = Claim::parse(text) {
        assert_eq!(Claim::parse(&c.header_value()), Ok(c));
    }
    let vouchers = [(0, "root".to_string()), (994, "floodgate".to_string())];
    let stranger = Actor::User("mallory".into());
    assert_eq!(
        vouched_by(&stranger, Some(text), &vouchers).unwrap(),
        stranger
    );
    match vouched_by(&Actor::User("root".into()), Some(text), &vouchers) {
        Ok(Actor::Invoker { uid, .. }) => assert_eq!(uid, 0),
        Ok(other) => panic!("root's claim became {other:?}"),
        Err(_) => assert!(Claim::parse(text).is_err()),
    }
});
