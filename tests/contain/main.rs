//! Containing a compromised account: restrictions, the hold spool, pacing, rerouting, outcome signals.

#[path = "../common/mod.rs"]
mod common;

mod auth_attempt;
mod campaign;
mod campaign_corpus;
mod campaign_groups;
mod evidence;
mod hold;
mod hold_spool;
mod outcomes_forged;
mod outcomes_ratio;
mod pace;
mod reroute;
mod restrict;
mod restrict_fold;
mod restrict_notices;
mod support;
