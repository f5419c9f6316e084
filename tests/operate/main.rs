//! Operating floodgate: metrics, the admin verbs, alerts, `floodgate report` and `floodgate demo`.

#[path = "../common/mod.rs"]
mod common;
#[path = "../loadkit/mod.rs"]
mod loadkit;

mod admin_bounds;
mod admin_metrics;
mod admin_root;
mod admin_verbs;
mod alerts;
mod audit;
mod console;
mod console_login;
mod demo;
mod log_reopen;
mod prometheus;
mod report;
mod report_html;
