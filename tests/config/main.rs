//! Configuration, `floodgate check`, the command line and the README examples.

#[path = "../common/mod.rs"]
mod common;

mod alert_mail;
mod baseline_check;
mod check_as_root;
mod check_paths;
mod cli;
mod cli_docs;
mod default_config;
mod package_config;
mod policy_check;
mod policy_config;
mod readme_blocks;
mod readme_signals;
