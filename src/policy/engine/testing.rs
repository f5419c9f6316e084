//! Helpers of the engine's unit tests: a compiled model from `[[limit]]` text, and facts.

use super::super::model::PolicyModel;
use super::super::Facts;

/// The compiled policy of a config made of a listener, an upstream, a high-risk upstream, a
/// hold spool and `limits`.
pub(super) fn model(limits: &str) -> PolicyModel {
    let text = format!(
        "[[listener]]\naddress = \"127.0.0.1:0\"\n[upstream]\naddress = \"127.0.0.1:2525\"\n\
         [upstream.high_risk]\naddress = \"127.0.0.1:2526\"\n\
         [hold]\ndir = \"/var/lib/floodgate/hold\"\n{limits}"
    );
    let c = crate::config::Config::parse(std::path::Path::new("/etc/floodgate/t.toml"), &text)
        .unwrap_or_else(|e| panic!("{e}"));
    super::super::compile(&c).unwrap_or_else(|e| panic!("{e}"))
}

/// An authenticated client's facts at RCPT.
pub(super) fn facts() -> Facts {
    Facts {
        client_ip: Some("192.0.2.7".parse().unwrap()),
        listener: "relay".into(),
        user: Some("alice@example.org".into()),
        sender: Some("alice@example.org".into()),
        recipient: Some("r@example.com".into()),
        recipient_normalized: Some("r@example.com".into()),
        ..Facts::default()
    }
}
