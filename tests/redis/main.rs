//! The Redis store against real redis-server processes: equivalence with memory, fleets, TLS, clusters.

#[path = "../common/mod.rs"]
mod common;

mod redis_baseline;
mod redis_campaign;
mod redis_campaign_equivalence;
mod redis_check;
mod redis_equivalence;
mod redis_fleet;
mod redis_logins;
mod redis_ratio;
mod redis_restrict_outage;
mod redis_shared;
mod redis_tls;
