//! The limit maths and the engine without network: Exim vectors, Bloom filters, stores, properties.

#[path = "../common/mod.rs"]
mod common;

mod campaign_memory;
mod engine_bloom;
mod engine_props;
mod engine_spec;
mod engine_store;
mod engine_vectors;
mod graded_engine;
mod policy_baseline;
mod policy_compare;
mod policy_engine;
mod policy_samekey;
mod smtp_props;
mod support;
