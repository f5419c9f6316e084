//! floodgate as Postfix's policy service (`check_policy_service`) in a real Postfix with
//! Dovecot SASL (tests/common/postfix.rs): limits per recipient, restriction and Postfix's
//! hold queue, `default_action` when floodgate is down, and bad requests.

#[path = "../common/mod.rs"]
mod common;

mod policy_bad_input;
mod policy_postfix;
mod support;
