//! Helpers shared by the engine tests: a relay client's facts at RCPT and upstream's 250.

use floodgate::policy::Facts;
use floodgate::smtp::reply::Reply;

/// The facts of a client from `ip` on the `relay` listener, at RCPT.
pub fn facts(ip: &str) -> Facts {
    Facts {
        client_ip: Some(ip.parse().unwrap()),
        listener: "relay".into(),
        sender: Some("s@example.org".into()),
        recipient: Some("r@example.com".into()),
        recipient_normalized: Some("r@example.com".into()),
        ..Facts::default()
    }
}

/// Upstream's `250 2.0.0 ok`.
pub fn ok() -> Reply {
    Reply::new(250, "2.0.0 ok")
}
