use std::path::Path;

use super::*;
use crate::config::Config;

/// The compiled sections these tests use.
#[derive(Debug)]
struct Compiled {
    policy: crate::policy::model::PolicyModel,
    alerts: Option<AlertSettings>,
}

fn config(extra: &str) -> Result<Compiled, ConfigError> {
    let text = format!(
        r#"
[[listener]]
address = "127.0.0.1:0"

[upstream]
address = "127.0.0.1:25"

[[limit]]
name = "l"
ratelimit = "2 / 10s / per_rcpt / strict / ${{authenticated_id}}"
action = "warn"
{extra}
"#
    );
    let c = Config::parse(Path::new("/etc/floodgate/t.toml"), &text)?;
    Ok(Compiled {
        policy: crate::policy::compile(&c)?,
        alerts: compile(&c)?,
    })
}

fn outcome() -> Reading {
    Reading {
        value: 3.5,
        limit: 2.0,
        from_list: false,
        limit_text: "2".into(),
        period_text: "10s".into(),
        over: true,
        retry_after: None,
    }
}

fn crossing<'a>(
    def: &'a LimitDef,
    key: &'a str,
    o: &'a Reading,
    f: &'a Facts,
    t: i64,
) -> Crossed<'a> {
    Crossed {
        def,
        key,
        outcome: o,
        stage: Stage::Rcpt,
        facts: f,
        time_us: t,
    }
}

const S: i64 = 1_000_000;

#[test]
fn once_per_key_and_period() {
    let c = config("[alerts]\n").unwrap();
    let def = &c.policy.limits[0];
    let (a, mut rx) = Alerter::new(c.alerts.clone());
    let (o, f) = (
        outcome(),
        Facts {
            client_ip: Some("192.0.2.7".parse().unwrap()),
            user: Some("alice".into()),
            ..Facts::default()
        },
    );
    let t0 = 1_700_000_000 * S;
    let first = a
        .crossed(&crossing(def, "alice", &o, &f, t0), "h")
        .expect("alert");
    // The limit's own period (10s) is the default.
    for i in 1..20 {
        assert!(a
            .crossed(&crossing(def, "alice", &o, &f, t0 + i * S / 4), "h")
            .is_none());
    }
    assert!(a
        .crossed(&crossing(def, "bob", &o, &f, t0 + S), "h")
        .is_some());
    assert!(a
        .crossed(&crossing(def, "alice", &o, &f, t0 + 10 * S), "h")
        .is_some());
    assert_eq!(first.key, "alice");
    assert_eq!(first.limit_value, "2");
    assert_eq!(first.client_ip.as_deref(), Some("192.0.2.7"));
    assert_eq!(first.first_at, "2023-11-14T22:13:20.000000Z");
    // The stable shape.
    let v: serde_json::Value = serde_json::from_str(&Notice::Alert(first).to_json()).unwrap();
    let mut keys: Vec<&str> = v.as_object().unwrap().keys().map(String::as_str).collect();
    keys.sort_unstable();
    assert_eq!(
        keys,
        [
            "action",
            "client_ip",
            "event",
            "first_at",
            "host",
            "key",
            "limit",
            "limit_value",
            "period",
            "rate",
            "stage",
            "suppressed",
            "user"
        ]
    );
    assert_eq!(v["event"], "floodgate.alert");
    let mut n = 0;
    while rx.try_recv().is_ok() {
        n += 1;
    }
    assert_eq!(n, 3);
}

#[test]
fn configured_period_and_rate_limit_with_summary() {
    let c = config("[alerts]\nperiod = \"1m\"\nmax_per_minute = 2\n").unwrap();
    let def = &c.policy.limits[0];
    let (a, _rx) = Alerter::new(c.alerts.clone());
    let (o, f) = (outcome(), Facts::default());
    let t0 = 1_700_000_000 * S;
    let mut got = Vec::new();
    for k in 0..5 {
        got.push(a.crossed(&crossing(def, &format!("k{k}"), &o, &f, t0 + k), "h"));
    }
    assert_eq!(got.iter().filter(|g| g.is_some()).count(), 2);
    // Suppressed keys are remembered too: no alert storm once the minute ends.
    assert!(a
        .crossed(&crossing(def, "k4", &o, &f, t0 + 30 * S), "h")
        .is_none());
    assert_eq!(a.tick(t0 + 59 * S, "h"), None);
    let s = a.tick(t0 + 60 * S, "h").expect("summary");
    assert_eq!(s.suppressed, 3);
    assert_eq!(a.tick(t0 + 61 * S, "h"), None);
    // The next minute: new keys alert again; k0 is still within its 1m period.
    assert!(a
        .crossed(&crossing(def, "k0", &o, &f, t0 + 59 * S), "h")
        .is_none());
    let next = a
        .crossed(&crossing(def, "k9", &o, &f, t0 + 62 * S), "h")
        .unwrap();
    assert_eq!(next.suppressed, 0);
}

#[test]
fn suppressed_count_rides_on_the_next_alert() {
    let c = config("[alerts]\nmax_per_minute = 1\n").unwrap();
    let def = &c.policy.limits[0];
    let (a, _rx) = Alerter::new(c.alerts.clone());
    let (o, f) = (outcome(), Facts::default());
    let t0 = 1_700_000_000 * S;
    assert!(a.crossed(&crossing(def, "a", &o, &f, t0), "h").is_some());
    assert!(a
        .crossed(&crossing(def, "b", &o, &f, t0 + 1), "h")
        .is_none());
    assert!(a
        .crossed(&crossing(def, "c", &o, &f, t0 + 2), "h")
        .is_none());
    let next = a
        .crossed(&crossing(def, "d", &o, &f, t0 + 61 * S), "h")
        .unwrap();
    assert_eq!(next.suppressed, 2);
}

#[test]
fn memory_is_bounded() {
    let c = config("[alerts]\nmax_keys = 3\nmax_per_minute = 1000\n").unwrap();
    let def = &c.policy.limits[0];
    let (a, _rx) = Alerter::new(c.alerts.clone());
    let (o, f) = (outcome(), Facts::default());
    let t0 = 1_700_000_000 * S;
    for k in 0..50 {
        a.crossed(&crossing(def, &format!("k{k}"), &o, &f, t0 + k), "h");
        assert!(a.remembered() <= 3);
    }
    // Expired entries are swept first.
    a.crossed(&crossing(def, "late", &o, &f, t0 + 3600 * S), "h");
    assert_eq!(a.remembered(), 1);
}

#[test]
fn off_when_disabled_or_absent() {
    assert_eq!(config("").unwrap().alerts, None);
    assert_eq!(config("[alerts]\nenabled = false\n").unwrap().alerts, None);
    let c = config("").unwrap();
    let (a, _rx) = Alerter::new(c.alerts.clone());
    let (o, f) = (outcome(), Facts::default());
    assert!(a
        .crossed(&crossing(&c.policy.limits[0], "k", &o, &f, S), "h")
        .is_none());
}

#[test]
fn config_errors_name_line_and_column() {
    let cases = [
        ("[alerts]\nperiod = \"soon\"\n", "period"),
        ("[alerts]\nmax_per_minute = 0\n", "max_per_minute"),
        ("[alerts]\nmax_keys = -1\n", "max_keys"),
        ("[alerts]\nwebhook = \"ftp://x/\"\n", "webhook"),
        ("[alerts]\ncommand = []\n", "command"),
        ("[alerts]\ncommand = [\"notify\"]\n", "absolute"),
        ("[alerts]\nca_file = \"missing.pem\"\n", "ca_file"),
        ("[alerts]\nwebhook_timeout = \"0s\"\n", "webhook_timeout"),
        ("[alerts]\nbogus = 1\n", "bogus"),
    ];
    for (extra, word) in cases {
        let e = config(extra).unwrap_err().to_string();
        // The [alerts] section is on line 12 of the test config, its first key on 13.
        assert!(e.starts_with("/etc/floodgate/t.toml:13:"), "{extra}: {e}");
        assert!(e.contains(word), "{extra}: {e}");
    }
}

#[test]
fn settings_are_read() {
    let c = config(
        "[alerts]\nperiod = \"2s\"\nwebhook = \"http://127.0.0.1:9/h\"\ncommand = [\"/bin/cat\", \"-\"]\ncommand_timeout = \"3s\"\n",
    )
    .unwrap();
    let a = c.alerts.unwrap();
    assert_eq!(a.period, Some(Duration::from_secs(2)));
    assert_eq!(a.webhook.unwrap().port, 9);
    assert_eq!(a.command.unwrap(), vec!["/bin/cat", "-"]);
    assert_eq!(a.command_timeout, Duration::from_secs(3));
}

#[test]
fn campaign_notices_are_held_to_the_minute_budget() {
    let c = config("[alerts]\nmax_per_minute = 3\n").unwrap();
    let (a, mut rx) = Alerter::new(c.alerts.clone());
    let notice = |k: usize| serde_json::json!({"event": "floodgate.campaign", "key": k});
    let queued = (0..400).filter(|&k| a.restriction(&notice(k))).count();
    assert_eq!(queued, 3);
    let mut n = 0;
    while rx.try_recv().is_ok() {
        n += 1;
    }
    assert_eq!(n, 3);
    // The summary of the 397 others comes when the window ends.
    let later = crate::store::now_micros() + 61 * S;
    let s = a.tick(later, "h").expect("summary");
    assert_eq!(s.suppressed, 397);
    assert!(matches!(rx.try_recv(), Ok(Notice::Suppressed(_))));
}

#[test]
fn each_kind_has_its_own_budget_so_a_flood_never_silences_a_restriction() {
    let c = config("[alerts]\nmax_per_minute = 2\n").unwrap();
    let def = &c.policy.limits[0];
    let (a, mut rx) = Alerter::new(c.alerts.clone());
    let (o, f) = (outcome(), Facts::default());
    let now = crate::store::now_micros();
    // Five crossings: two alerts, three suppressed.
    let alerts = (0..5)
        .filter(|k| {
            a.crossed(&crossing(def, &format!("k{k}"), &o, &f, now + k), "h")
                .is_some()
        })
        .count();
    assert_eq!(alerts, 2);
    // A campaign flood: two told, the rest suppressed.
    let campaign = |k: usize| serde_json::json!({"event": "floodgate.campaign", "key": k});
    assert_eq!((0..10).filter(|&k| a.restriction(&campaign(k))).count(), 2);
    // The restriction after both floods is still told, within its own budget.
    let restricted = serde_json::json!({"event": "floodgate.restricted", "key": "alice"});
    assert!(a.restriction(&restricted));
    let released = serde_json::json!({"event": "floodgate.released", "key": "alice"});
    assert!(a.restriction(&released));
    assert!(
        !a.restriction(&restricted),
        "the third of its kind in the minute"
    );
    let mut n = 0;
    while rx.try_recv().is_ok() {
        n += 1;
    }
    assert_eq!(n, 2 + 2 + 2);
    // One summary of every kind's suppressed notices when the windows end.
    let s = a.tick(now + 61 * S, "h").expect("summary");
    assert_eq!(s.suppressed, 3 + 8 + 1);
    assert_eq!(a.tick(now + 62 * S, "h"), None);
}
