use super::*;
use crate::config::Config;
use crate::report::config::{compile, ReportSettings};

/// The limits and the `[report]` of a config file, compiled.
#[derive(Debug)]
struct Loaded {
    policy: Arc<PolicyModel>,
    report: ReportSettings,
}

fn load(path: &Path) -> Result<Loaded, ConfigError> {
    let c = Config::load(path)?;
    Ok(Loaded {
        policy: Arc::new(crate::policy::compile(&c)?),
        report: compile(&c)?,
    })
}

const DAY: i64 = DAY_US;
/// Noon UTC on a day well after the epoch.
const NOW: i64 = 20_000 * DAY + DAY / 2;

fn model(limits: &str) -> Arc<PolicyModel> {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("f.toml");
    std::fs::write(
        &path,
        format!(
            "[[listener]]\naddress = \"127.0.0.1:0\"\n[upstream]\naddress = \"127.0.0.1:25\"\n[report]\nevents = \"{}\"\n{limits}",
            dir.path().join("events.jsonl").display()
        ),
    )
    .unwrap();
    load(&path).unwrap().policy.clone()
}

fn daily(period: &str) -> Arc<PolicyModel> {
    model(&format!(
        "[[limit]]\nname = \"own\"\ncount = \"messages\"\nkey = \"${{authenticated_id}}\"\nrate = \"{period}\"\nburst = \"10\"\nbaseline = \"p95 / 14d\"\nfactor = 5\nfloor = 50\n"
    ))
}

fn line(t_us: i64, limit: &str, key: &str, count: f64) -> String {
    format!(
        "{{\"t\":{}.{:06},\"limit\":\"{limit}\",\"key\":\"{key}\",\"count\":{count}}}\n",
        t_us / 1_000_000,
        t_us % 1_000_000
    )
}

#[test]
fn a_day_limit_takes_each_days_count() {
    let m = daily("10 / 1d");
    let mut log = String::new();
    for d in 1..=14 {
        let day = NOW - d * DAY;
        for i in 0..10 {
            log += &line(day + i * 1_000_000, "own", "quiet", 1.0);
        }
        log += &line(day, "own", "bulk", 500.0);
    }
    // Today and the day before the window are not in the window.
    log += &line(NOW - 15 * DAY, "own", "quiet", 1000.0);
    log += &line(NOW - 1_000_000, "own", "quiet", 1000.0);
    log += "not json\n{\"t\":\"x\"}\n";
    let mut p = DailyPeaks::new(&m, NOW);
    p.read(log.as_bytes()).unwrap();
    assert_eq!(p.skipped, 2);
    let sets = p.finish(NOW);
    let set = &sets["own"];
    assert_eq!(set.peaks["quiet"], 10.0);
    assert_eq!(set.peaks["bulk"], 500.0);
    let def = m.limits[0].baseline.as_ref().unwrap();
    assert_eq!(set.signature, def.signature());
    assert_eq!(def.limit_of(set.peaks.get("quiet").copied()), 50.0);
    assert_eq!(def.limit_of(set.peaks.get("bulk").copied()), 2500.0);
    assert_eq!(def.limit_of(set.peaks.get("new").copied()), 50.0);
}

#[test]
fn a_shorter_period_takes_the_busiest_window_of_the_day() {
    let m = daily("10 / 1h");
    let mut log = String::new();
    let day = NOW.div_euclid(DAY) * DAY - DAY;
    // 30 spread over three hours (10 each), then 25 within one hour.
    for h in 0..3 {
        for i in 0..10 {
            log += &line(day + h * 3_600_000_000 + i * 60_000_000, "own", "k", 1.0);
        }
    }
    for i in 0..25 {
        log += &line(day + 10 * 3_600_000_000 + i * 1_000_000, "own", "k", 1.0);
    }
    let mut p = DailyPeaks::new(&m, NOW);
    p.read(log.as_bytes()).unwrap();
    // One busy day among 14: p95 is the highest day.
    assert_eq!(p.finish(NOW)["own"].peaks["k"], 25.0);
}

#[test]
fn counts_are_summed_and_other_limits_ignored() {
    let m = daily("10 / 1d");
    let day = NOW - DAY;
    let log = line(day, "own", "k", 3.0)
        + &line(day + 1, "own", "k", 4.0)
        + &line(day, "other", "k", 100.0);
    let mut p = DailyPeaks::new(&m, NOW);
    p.read(log.as_bytes()).unwrap();
    assert_eq!(p.events, 2);
    assert_eq!(p.finish(NOW)["own"].peaks["k"], 7.0);
}

#[test]
fn compute_reads_the_rotated_file_first_and_refuses_a_missing_log() {
    let m = daily("10 / 1d");
    let dir = tempfile::tempdir().unwrap();
    let events = dir.path().join("events.jsonl");
    let e = compute(&m, &events, NOW).unwrap_err();
    assert_eq!(e.kind(), std::io::ErrorKind::NotFound);
    std::fs::write(&events, "").unwrap();
    let (sets, _) = compute(&m, &events, NOW).unwrap();
    assert!(sets["own"].peaks.is_empty());
    let mut rotated = String::new();
    for i in 0..40 {
        rotated += &line(NOW - 2 * DAY + i, "own", "k", 1.0);
    }
    std::fs::write(dir.path().join("events.jsonl.1"), rotated).unwrap();
    std::fs::write(&events, line(NOW - 2 * DAY + 100, "own", "k", 2.0)).unwrap();
    let (sets, skipped) = compute(&m, &events, NOW).unwrap();
    assert_eq!(skipped, 0);
    assert_eq!(sets["own"].peaks["k"], 42.0);
}

#[tokio::test]
async fn the_keeper_installs_saves_and_reuses_todays_set() {
    let dir = tempfile::tempdir().unwrap();
    let events = dir.path().join("events.jsonl");
    let now = crate::store::now_micros();
    let mut log = String::new();
    for i in 0..30 {
        log += &line(now - DAY + i, "own", "alice", 1.0);
    }
    std::fs::write(&events, log).unwrap();
    let path = dir.path().join("f.toml");
    std::fs::write(
        &path,
        format!(
            "[[listener]]\naddress = \"127.0.0.1:0\"\n[upstream]\naddress = \"127.0.0.1:25\"\n[report]\nevents = \"{}\"\n[[limit]]\nname = \"own\"\ncount = \"messages\"\nkey = \"${{authenticated_id}}\"\nrate = \"10 / 1d\"\nburst = \"10\"\nbaseline = \"p95 / 14d\"\nfactor = 2\nfloor = 5\n",
            events.display()
        ),
    )
    .unwrap();
    let config = load(&path).unwrap();
    let store = Arc::new(crate::store::MemoryStore::default());
    let _keeper = BaselineKeeper::start(
        config.policy.clone(),
        config.report.events.clone(),
        store.clone(),
    )
    .await;
    let def = config.policy.limits[0].baseline.clone().unwrap();
    let installed = config.policy.baselines.get("own").unwrap();
    let saved = store.baseline_shelf().get("own").unwrap();
    assert_eq!(*installed, saved);
    assert_eq!(saved.signature, def.signature());
    assert_eq!(saved.peaks["alice"], 30.0);
    assert_eq!(config.policy.baselines.limit("own", &def, "alice"), 60.0);
    assert_eq!(config.policy.baselines.limit("own", &def, "bob"), 5.0);
    // A restart today finds the saved set and does not read the log (it is gone).
    std::fs::remove_file(&events).unwrap();
    let again = load(&path).unwrap();
    let _k2 = BaselineKeeper::start(
        again.policy.clone(),
        again.report.events.clone(),
        store.clone(),
    )
    .await;
    assert_eq!(*again.policy.baselines.get("own").unwrap(), saved);
    // A reload adopts the set into the new generation at once.
    let next = load(&path).unwrap();
    _k2.reload(&next.policy, next.report.events.clone());
    assert_eq!(*next.policy.baselines.get("own").unwrap(), saved);
    // Computing again without a log keeps the values in force.
    _k2.refresh().await;
    assert_eq!(*next.policy.baselines.get("own").unwrap(), saved);
    assert_eq!(store.baseline_shelf().get("own").unwrap(), saved);
}

#[test]
fn snapshot_keeps_the_sets() {
    let store = crate::store::MemoryStore::default();
    let set = BaselineSet {
        signature: "p95/14d/86400s".into(),
        computed_us: 1_700_000_000_000_000,
        peaks: HashMap::from([("alice".to_string(), 10.0), ("bob".to_string(), 500.0)]),
    };
    store.baseline_shelf().put("own", set.clone());
    let bytes = store.snapshot_bytes();
    let back = crate::store::MemoryStore::default();
    assert_eq!(back.load_snapshot_bytes(Path::new("s"), &bytes).unwrap(), 1);
    assert_eq!(back.baseline_shelf().get("own"), Some(set));
}

#[test]
fn a_baseline_needs_the_event_log() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("f.toml");
    std::fs::write(
        &path,
        "[[listener]]\naddress = \"127.0.0.1:0\"\n[upstream]\naddress = \"127.0.0.1:25\"\n[[limit]]\nname = \"own\"\ncount = \"messages\"\nrate = \"10 / 1d\"\nburst = \"10\"\nbaseline = \"p95 / 14d\"\n",
    )
    .unwrap();
    let e = load(&path).unwrap_err().to_string();
    assert!(
        e.contains(
            "limit own: baseline reads each key's history from the event log: set [report] events"
        ),
        "{e}"
    );
    assert!(e.contains(":10:"), "{e}");
}
