//! Operating floodgate: metrics, the admin verbs, alerts and `floodgate report`.

#[path = "../common/mod.rs"]
mod common;

mod admin_metrics;
mod admin_verbs;
mod alerts;
mod console;
mod prometheus;
mod report;
mod report_html;
