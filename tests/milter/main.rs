//! floodgate as a milter in a real Postfix (tests/common/postfix.rs): `smtpd_milters` for
//! SASL submissions, `non_smtpd_milters` for mail local users hand to `sendmail`, and
//! Postfix's `milter_default_action` when floodgate is down.

#[path = "../common/mod.rs"]
mod common;

mod milter_check;
mod milter_local;
mod milter_smtpd;
mod support;
