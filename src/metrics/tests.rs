use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;

use super::*;

/// The value of the sample `series` (name with labels, as rendered).
fn value(text: &str, series: &str) -> Option<String> {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
        .map(str::to_string)
}

/// Family name → type, from the `# TYPE` lines.
fn types(text: &str) -> BTreeMap<String, String> {
    text.lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .map(|l| {
            let (name, kind) = l.split_once(' ').unwrap();
            (name.to_string(), kind.to_string())
        })
        .collect()
}

#[test]
fn counts_restriction_events() {
    let m = Metrics::new();
    m.restriction("restricted");
    m.restriction("restricted");
    m.restriction("released");
    m.restriction("expired");
    m.restriction("user_notice_failed");
    m.restriction("nonsense");
    m.alert_mail("sent");
    m.alert_mail("dropped");
    m.alert_mail("nonsense");
    m.verdict("per-user", "restrict");
    let t = m.render();
    assert!(
        t.contains("floodgate_restrictions_total{event=\"restricted\"} 2"),
        "{t}"
    );
    assert!(
        t.contains("floodgate_restrictions_total{event=\"released\"} 1"),
        "{t}"
    );
    assert!(
        t.contains("floodgate_restrictions_total{event=\"refused\"} 0"),
        "{t}"
    );
    for line in [
        "floodgate_restrictions_total{event=\"expired\"} 1",
        "floodgate_restrictions_total{event=\"user_notified\"} 0",
        "floodgate_restrictions_total{event=\"user_notice_failed\"} 1",
        "floodgate_alert_mail_total{result=\"sent\"} 1",
        "floodgate_alert_mail_total{result=\"failed\"} 0",
        "floodgate_alert_mail_total{result=\"dropped\"} 1",
    ] {
        assert!(t.contains(line), "{line}: {t}");
    }
    assert_eq!(m.restrictions_of("restricted"), 2);
    assert_eq!(m.alert_mail_of("sent"), 1);
    assert_eq!(m.verdicts_of("per-user", "restrict"), 1);
}

#[test]
fn renders_every_family_once_with_type_lines() {
    let m = Arc::new(Metrics::new());
    let l = m.listener("submission");
    let guard = m.session_opened(&l);
    m.commands.inc_by(7);
    m.message_relayed(3, 1200);
    m.verdict("per-user", "defer");
    m.verdict("per-user", "defer");
    m.verdict("per-ip", "warn");
    m.verdict("per-ip", "nonsense");
    m.tls_handshake(Side::Client, true);
    m.tls_handshake(Side::Upstream, false);
    m.auth(false);
    m.connection_refused("max_connections_per_ip");
    m.store_decision(std::time::Duration::from_micros(30), None);
    m.store_decision(std::time::Duration::from_millis(30), Some("unavailable"));
    let t = m.render();
    assert_eq!(
        value(&t, "floodgate_sessions_total{listener=\"submission\"}").as_deref(),
        Some("1")
    );
    assert_eq!(value(&t, "floodgate_sessions_open").as_deref(), Some("1"));
    drop(guard);
    assert_eq!(
        value(&m.render(), "floodgate_sessions_open").as_deref(),
        Some("0")
    );
    assert_eq!(value(&t, "floodgate_commands_total").as_deref(), Some("7"));
    assert_eq!(
        value(&t, "floodgate_recipients_relayed_total").as_deref(),
        Some("3")
    );
    assert_eq!(
        value(
            &t,
            "floodgate_policy_verdicts_total{limit=\"per-user\",action=\"defer\"}"
        )
        .as_deref(),
        Some("2")
    );
    assert_eq!(
        value(
            &t,
            "floodgate_policy_verdicts_total{limit=\"per-ip\",action=\"warn\"}"
        )
        .as_deref(),
        Some("1")
    );
    assert_eq!(
        value(
            &t,
            "floodgate_tls_handshakes_total{side=\"upstream\",result=\"failed\"}"
        )
        .as_deref(),
        Some("1")
    );
    assert_eq!(
        value(
            &t,
            "floodgate_connections_refused_total{cap=\"max_connections_per_ip\"}"
        )
        .as_deref(),
        Some("1")
    );
    assert_eq!(
        value(
            &t,
            "floodgate_store_decision_seconds_bucket{le=\"0.00005\"}"
        )
        .as_deref(),
        Some("1")
    );
    assert_eq!(
        value(&t, "floodgate_store_decision_seconds_count").as_deref(),
        Some("2")
    );
    assert_eq!(
        value(&t, "floodgate_store_errors_total{kind=\"unavailable\"}").as_deref(),
        Some("1")
    );
    // Every family has exactly one TYPE line, and every sample belongs to one.
    let mut types = HashSet::new();
    for l in t.lines().filter(|l| l.starts_with("# TYPE ")) {
        let name = l.split(' ').nth(2).unwrap();
        assert!(types.insert(name.to_string()), "duplicate TYPE {name}");
    }
    for l in t.lines().filter(|l| !l.starts_with('#')) {
        let name = l.split(['{', ' ']).next().unwrap();
        let base = name
            .strip_suffix("_bucket")
            .or_else(|| name.strip_suffix("_sum"))
            .or_else(|| name.strip_suffix("_count"))
            .filter(|b| types.contains(*b))
            .unwrap_or(name);
        assert!(types.contains(base), "sample without TYPE: {l}");
    }
}

#[test]
fn label_values_are_escaped() {
    let m = Metrics::new();
    m.verdict("a\"b\\c\nd", "deny");
    let t = m.render();
    assert!(t.contains("limit=\"a\\\"b\\\\c\\nd\",action=\"deny\"} 1"));
}

#[test]
fn listeners_register_once() {
    let m = Metrics::new();
    let a = m.listener("x");
    let b = m.listener("x");
    m.session_opened(&a);
    m.session_opened(&b);
    let t = m.render();
    let samples: Vec<&str> = t
        .lines()
        .filter(|l| l.starts_with("floodgate_sessions_total{"))
        .collect();
    assert_eq!(samples, ["floodgate_sessions_total{listener=\"x\"} 2"]);
}

/// The families of a fresh registry, with their types and help: the exported contract
/// (dashboards and alert rules query these names).
#[test]
fn families_of_a_fresh_registry() {
    let t = Metrics::new().render();
    let want = [
        ("floodgate_sessions_open", "gauge"),
        ("floodgate_commands_total", "counter"),
        ("floodgate_messages_relayed_total", "counter"),
        ("floodgate_recipients_relayed_total", "counter"),
        ("floodgate_bytes_relayed_total", "counter"),
        ("floodgate_refused_total", "counter"),
        ("floodgate_restrictions_total", "counter"),
        ("floodgate_alert_mail_total", "counter"),
        ("floodgate_upstream_connects_total", "counter"),
        ("floodgate_upstream_errors_total", "counter"),
        ("floodgate_upstream_identity_refused_total", "counter"),
        ("floodgate_store_decisions_total", "counter"),
        ("floodgate_store_errors_total", "counter"),
        ("floodgate_store_decision_seconds", "histogram"),
        ("floodgate_held_messages", "gauge"),
        ("floodgate_held_bytes", "gauge"),
        ("floodgate_held_total", "counter"),
        ("floodgate_held_corrupt_total", "counter"),
        ("floodgate_rerouted_total", "counter"),
        ("floodgate_paced_total", "counter"),
        ("floodgate_paced_waiting", "gauge"),
        ("floodgate_tls_handshakes_total", "counter"),
        ("floodgate_auth_total", "counter"),
        ("floodgate_connections_refused_total", "counter"),
        ("floodgate_admin_connections_refused_total", "counter"),
        ("floodgate_audit_write_errors_total", "counter"),
        ("floodgate_message_keys_budget_exceeded_total", "counter"),
    ];
    let want: BTreeMap<String, String> = want
        .iter()
        .map(|(n, k)| (n.to_string(), k.to_string()))
        .collect();
    assert_eq!(types(&t), want, "{t}");
    // Help lines end with one full stop.
    for l in t.lines().filter(|l| l.starts_with("# HELP ")) {
        assert!(l.ends_with('.') && !l.ends_with(".."), "{l}");
    }
    // Families of known label values start with every series at zero.
    for series in [
        "floodgate_upstream_errors_total{kind=\"tls\"} 0",
        "floodgate_upstream_identity_refused_total{reason=\"bad_greeting\"} 0",
        "floodgate_held_total{event=\"refused\"} 0",
        "floodgate_held_corrupt_total 0",
        "floodgate_rerouted_total{outcome=\"failed\"} 0",
        "floodgate_paced_total{event=\"retry\"} 0",
        "floodgate_tls_handshakes_total{side=\"upstream\",result=\"ok\"} 0",
        "floodgate_auth_total{result=\"success\"} 0",
        "floodgate_connections_refused_total{cap=\"max_connections\"} 0",
        "floodgate_admin_connections_refused_total{listener=\"metrics\",reason=\"write_timeout\"} 0",
        "floodgate_store_errors_total{kind=\"invalid\"} 0",
    ] {
        assert!(t.lines().any(|l| l == series), "{series}\n{t}");
    }
}

#[test]
fn upstream_outcomes_count_by_kind_and_handshake() {
    let m = Metrics::new();
    m.upstream_connected(None, true);
    m.upstream_connected(Some(UpstreamFailure::Error("tls")), true);
    m.upstream_connected(Some(UpstreamFailure::Error("tls")), false);
    m.upstream_connected(Some(UpstreamFailure::Identity("bad_greeting")), true);
    m.upstream_failed(UpstreamFailure::Error("lost"));
    m.upstream_failed(UpstreamFailure::Error("nonsense"));
    let t = m.render();
    assert_eq!(m.upstream_errors_of("tls"), 2);
    assert_eq!(m.upstream_errors_of("lost"), 1);
    assert_eq!(m.identity_refused_of("bad_greeting"), 1);
    assert_eq!(
        value(&t, "floodgate_upstream_connects_total").as_deref(),
        Some("1")
    );
    for (series, n) in [
        ("{side=\"upstream\",result=\"ok\"}", "1"),
        ("{side=\"upstream\",result=\"failed\"}", "1"),
    ] {
        let series = format!("floodgate_tls_handshakes_total{series}");
        assert_eq!(value(&t, &series).as_deref(), Some(n), "{series}");
    }
}

#[test]
fn readers_write_their_families_once_per_key() {
    let m = Metrics::new();
    let loads = Arc::new(std::sync::atomic::AtomicU64::new(3));
    let l = loads.clone();
    assert!(m.scrape("test", move |s| {
        s.gauges(
            "floodgate_test_gauge",
            "A gauge.",
            "worker",
            [("0", 1), ("1", 2)],
        );
        s.counter(
            "floodgate_test_total",
            "A counter.",
            l.load(std::sync::atomic::Ordering::Relaxed),
        );
        s.counters("floodgate_test_events_total", "Events.", "what", [("a", 5)]);
        s.gauge("floodgate_test_level", "A level.", -1);
    }));
    assert!(!m.scrape("test", |s| s.gauge("floodgate_other", "Other.", 1)));
    loads.store(4, std::sync::atomic::Ordering::Relaxed);
    let t = m.render();
    for line in [
        "# HELP floodgate_test_gauge A gauge.",
        "# TYPE floodgate_test_gauge gauge",
        "floodgate_test_gauge{worker=\"0\"} 1",
        "floodgate_test_gauge{worker=\"1\"} 2",
        "# TYPE floodgate_test_total counter",
        "floodgate_test_total 4",
        "# TYPE floodgate_test_events_total counter",
        "floodgate_test_events_total{what=\"a\"} 5",
        "floodgate_test_level -1",
    ] {
        assert!(t.lines().any(|l| l == line), "{line}\n{t}");
    }
    assert!(!t.contains("floodgate_other"), "{t}");
}

#[test]
fn verdict_series_appear_with_their_first_count_and_survive() {
    let m = Metrics::new();
    assert!(!m.render().contains("floodgate_policy_verdicts_total{"));
    m.verdict("per-user", "deny");
    m.verdict("per-user", "deny");
    m.verdict("per-user", "warn");
    let t = m.render();
    let samples: Vec<&str> = t
        .lines()
        .filter(|l| l.starts_with("floodgate_policy_verdicts_total{"))
        .collect();
    assert_eq!(samples.len(), 2, "{t}");
    assert_eq!(m.verdicts_of("per-user", "deny"), 2);
    assert_eq!(m.verdicts_of("per-user", "defer"), 0);
    assert_eq!(m.verdicts_of("other", "deny"), 0);
}

#[test]
fn admin_refusals_count_by_listener_and_reason() {
    let m = Metrics::new();
    m.admin_connection_refused("admin", "evicted");
    m.admin_connection_refused("admin", "evicted");
    m.admin_connection_refused("metrics", "write_timeout");
    // Outside the lists: not counted, no new series.
    m.admin_connection_refused("smtp", "evicted");
    m.admin_connection_refused("admin", "bored");
    assert_eq!(m.admin_connections_refused_of("admin", "evicted"), 2);
    assert_eq!(
        m.admin_connections_refused_of("metrics", "write_timeout"),
        1
    );
    assert_eq!(m.admin_connections_refused_of("socket", "evicted"), 0);
    assert_eq!(m.admin_connections_refused_of("smtp", "evicted"), 0);
    let t = m.render();
    assert_eq!(
        value(
            &t,
            "floodgate_admin_connections_refused_total{listener=\"admin\",reason=\"evicted\"}"
        )
        .as_deref(),
        Some("2")
    );
    let series = t
        .lines()
        .filter(|l| l.starts_with("floodgate_admin_connections_refused_total{"))
        .count();
    assert_eq!(series, ADMIN_LISTENERS.len() * ADMIN_REFUSALS.len(), "{t}");
    assert!(!t.contains("smtp") && !t.contains("bored"), "{t}");
}
