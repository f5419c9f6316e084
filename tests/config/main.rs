//! Configuration, `floodgate check`, the command line and the README examples.

#[path = "../common/mod.rs"]
mod common;

mod policy_check;
mod policy_config;
mod baseline_check;
mod default_config;
mod cli;
mod readme_signals;
mod cli_docs;
