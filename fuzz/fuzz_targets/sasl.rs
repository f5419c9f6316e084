//! SaslObserver: no panics on any mechanism, initial response or lines, and
//! any user name found is bounded, non-empty and free of control characters; its account
//! (the login folded, `[identity]`) is folded once and for all and as long as the login.
#![no_main]

use floodgate::smtp::sasl::MAX_USERNAME;
use floodgate::smtp::{Mechanism, SaslObserver};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&sel, rest)) = data.split_first() else {
        return;
    };
    let mech = [
        Mechanism::Plain,
        Mechanism::Login,
        Mechanism::XOAuth2,
        Mechanism::CramMd5,
    ][usize::from(sel & 3)];
    let mut parts = rest.split(|&b| b == b'\n');
    let first = parts.next().unwrap_or_default();
    let initial = if sel & 4 != 0 {
        std::str::from_utf8(first).ok()
    } else {
        None
    };
    let mut o = SaslObserver::new(mech, initial);
    if initial.is_none() {
        o.client_line(first);
    }
    for line in parts {
        o.client_line(line);
    }
    if let Some(u) = o.username() {
        assert!(!u.is_empty() && u.len() <= MAX_USERNAME);
        assert!(!u.chars().any(char::is_control));
        let id = floodgate::policy::identity::Identity::default();
        let account = id.fold(u);
        assert_eq!(id.fold(&account), account);
        assert_eq!(account.len(), u.len());
        assert!(account.eq_ignore_ascii_case(u));
    }
});
