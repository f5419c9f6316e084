//! Configuration, `floodgate check`, the command line and the examples of the README and the book.

#[path = "../common/mod.rs"]
mod common;

mod alert_mail;
mod baseline_check;
mod check_as_root;
mod check_paths;
mod cli;
mod cli_docs;
mod config_reference;
mod default_config;
mod docs_book;
mod package_config;
mod policy_check;
mod policy_config;
mod readme_blocks;
mod readme_signals;
