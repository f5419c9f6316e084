//! Containing a compromised account: restrictions, the hold spool, pacing, rerouting, outcome signals.

#[path = "../common/mod.rs"]
mod common;

mod hold;
mod pace;
mod restrict;
mod restrict_fold;
mod restrict_notices;
mod reroute;
mod outcomes_ratio;
