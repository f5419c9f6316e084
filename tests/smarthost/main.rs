//! floodgate in front of real smart hosts: a private Postfix (with Dovecot SASL) and Exim.

#[path = "../common/mod.rs"]
mod common;

mod smarthost_exim;
mod smarthost_identity;
mod smarthost_postfix;
mod smarthost_postfix_alert_mail;
mod smarthost_postfix_hold;
mod smarthost_postfix_logins;
mod smarthost_postfix_mail;
mod smarthost_postfix_message;
mod smarthost_postfix_outcomes;
mod smarthost_postfix_queue;
mod smarthost_postfix_reroute;
mod smarthost_postfix_restrict;
