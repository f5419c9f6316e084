//! TLS to Redis against a real TLS-only `redis-server`:
//! the store opened from a config file (`tls = true` or a `rediss://` URL,
//! `ca_file = certs/dev/ca.crt`) decides exactly like the memory store, and
//! `floodgate check` reports the server's version; a wrong CA makes
//! decisions fail with an error (never a hang) and `floodgate check` exit 1.
//!
//! The server listens on TLS only (`--port 0 --tls-port PORT`), so nothing
//! here can pass over plain text by accident.

use floodgate::config::Config;
use floodgate::limit::gcra::GcraSpec;
use floodgate::limit::rate::Rate;
use floodgate::limit::spec::UpdateMode;
use floodgate::limit::unique::UniqueKind;
use floodgate::store::open::{open_store, Opened};
use floodgate::store::redis::FailoverStore;
use floodgate::store::{
    Algorithm, Decision, DecisionResult, LimitRequest, MemoryStore, Store, StoreError,
};
use std::fs::File;
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Bound on any single await: a hang guard, not a speed check.
const HANG: Duration = Duration::from_secs(20);
/// A realistic epoch time (2024), microseconds.
const T0: i64 = 1_718_000_000_123_456;

fn dev_cert(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("certs")
        .join("dev")
        .join(name)
}

fn server_bin() -> String {
    std::env::var("REDIS_SERVER").unwrap_or_else(|_| "redis-server".into())
}

/// A redis-server listening on TLS only, on a free 127.0.0.1 port, killed on drop.
struct TlsRedis {
    child: Child,
    port: u16,
    dir: tempfile::TempDir,
}

impl TlsRedis {
    /// Starts the server (a few attempts, in case another process takes the
    /// free port between probing and binding).
    fn start() -> TlsRedis {
        let ok = Command::new(server_bin())
            .arg("--version")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        assert!(
            ok,
            "redis-server is not installed (run .ci/install.sh, or set REDIS_SERVER)"
        );
        let mut last = String::new();
        for _ in 0..3 {
            match TlsRedis::try_start() {
                Ok(s) => return s,
                Err(log) => last = log,
            }
        }
        panic!("TLS redis-server did not start:\n{last}");
    }

    fn try_start() -> Result<TlsRedis, String> {
        let dir = tempfile::tempdir().expect("temp dir");
        let port = {
            let l = TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
            l.local_addr().unwrap().port()
        };
        let log_path = dir.path().join("redis.log");
        let log = File::create(&log_path).expect("log file");
        let path = |n: &str| dev_cert(n).display().to_string();
        let child = Command::new(server_bin())
            .args(["--port", "0"])
            .args(["--tls-port", &port.to_string()])
            .args(["--bind", "127.0.0.1"])
            .args(["--tls-cert-file", &path("server.crt")])
            .args(["--tls-key-file", &path("server.key")])
            .args(["--tls-ca-cert-file", &path("ca.crt")])
            .args(["--tls-auth-clients", "no"])
            .args(["--save", ""])
            .args(["--appendonly", "no"])
            .args(["--dir", &dir.path().display().to_string()])
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(Stdio::null())
            .spawn()
            .expect("start redis-server");
        let mut server = TlsRedis { child, port, dir };
        // Ready once the log says so and the TLS port takes connections.
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Ok(Some(status)) = server.child.try_wait() {
                return Err(format!("exited with {status}:\n{}", server.log()));
            }
            if server.log().contains("Ready to accept connections")
                && TcpStream::connect(("127.0.0.1", port)).is_ok()
            {
                return Ok(server);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Err(format!("not ready after 10s:\n{}", server.log()))
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("redis.log")).unwrap_or_default()
    }
}

impl Drop for TlsRedis {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Writes a full floodgate config with the given `[store]` body.
fn write_config(dir: &Path, store: &str) -> PathBuf {
    let path = dir.join("floodgate.toml");
    std::fs::write(
        &path,
        format!(
            "[[listener]]\naddress = \"127.0.0.1:0\"\n\n[upstream]\naddress = \"127.0.0.1:2525\"\n\n[store]\n{store}"
        ),
    )
    .unwrap();
    path
}

/// `[store]` for the TLS server: `url_line` says how TLS is asked for.
fn store_section(url_line: &str, ca: &Path) -> String {
    format!(
        "backend = \"redis\"\n{url_line}\nca_file = \"{}\"\ntimeout = \"5s\"\nconnect_timeout = \"5s\"\nfailure_mode = \"closed\"\n",
        ca.display()
    )
}

/// The Redis store the config file opens.
fn open_from(path: &Path) -> Arc<FailoverStore> {
    let config = Config::load(path).unwrap_or_else(|e| panic!("config: {e}"));
    match open_store(&config.store).expect("open_store") {
        Opened::Redis(r) => r,
        Opened::Memory(_) => panic!("backend = redis opened the memory store"),
    }
}

/// Runs `floodgate check --config path` (bounded); (exit code, stdout+stderr).
fn check(path: &Path) -> (Option<i32>, String) {
    let dir = path.parent().unwrap();
    let (out, err) = (dir.join("check.out"), dir.join("check.err"));
    let mut child = Command::new(env!("CARGO_BIN_EXE_floodgate"))
        .args(["check", "--config"])
        .arg(path)
        .stdin(Stdio::null())
        .stdout(File::create(&out).unwrap())
        .stderr(File::create(&err).unwrap())
        .spawn()
        .expect("run floodgate check");
    let deadline = Instant::now() + HANG;
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("floodgate check hung");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let text = format!(
        "{}{}",
        std::fs::read_to_string(out).unwrap(),
        std::fs::read_to_string(err).unwrap()
    );
    (status.code(), text)
}

fn ewma(key: &str, limit: f64, unique: Option<String>) -> LimitRequest {
    LimitRequest {
        key: key.into(),
        algorithm: Algorithm::Ewma {
            limit,
            period_secs: 3600,
            mode: UpdateMode::Leaky,
            unique_kind: UniqueKind::Exact,
        },
        count: 1.0,
        unique,
        blocking: true,
    }
}

fn gcra(key: &str, burst: f64) -> LimitRequest {
    LimitRequest {
        key: key.into(),
        algorithm: Algorithm::Gcra(GcraSpec::new(burst, Rate::new(1.0, 60.0).unwrap()).unwrap()),
        count: 1.0,
        unique: None,
        blocking: true,
    }
}

fn close(a: f64, b: f64) -> bool {
    a == b || (a - b).abs() <= 1e-9 * a.abs().max(b.abs())
}

fn assert_same(step: usize, m: &DecisionResult, r: &DecisionResult) {
    let same = m.refused == r.refused
        && m.limits.len() == r.limits.len()
        && m.limits.iter().zip(&r.limits).all(|(a, b)| {
            a.over == b.over && a.stored == b.stored && a.seen == b.seen && close(a.value, b.value)
        });
    assert!(same, "step {step} differs:\nmemory {m:?}\nredis  {r:?}");
}

/// A short sequence (EWMA with unique recipients, GCRA quota, two identities)
/// gives the same answers on the TLS Redis as on the memory store; some are
/// refused, so the comparison covers both outcomes.
async fn decisions_match_memory(store: &FailoverStore, tag: &str) {
    let memory = MemoryStore::default();
    let mut t = T0;
    let mut refused = 0;
    for step in 0..24 {
        t += 700_000 * (step as i64 % 3);
        let user = step % 2;
        let d = Decision {
            limits: vec![
                ewma(&format!("1h/per_mail/{tag}/u{user}"), 5.0, None),
                ewma(
                    &format!("1h/per_rcpt/{tag}/u{user}"),
                    4.0,
                    Some(format!("rcpt{}@example.org", step % 5)),
                ),
                gcra(&format!("1d/quota/{tag}/u{user}"), 6.0),
            ],
        };
        let r = tokio::time::timeout(HANG, store.decide_with(Some(t), &d))
            .await
            .expect("decision over TLS hung")
            .expect("decision over TLS failed");
        let m = memory.decide_at(t, &d);
        assert_same(step, &m, &r);
        refused += usize::from(r.refused);
    }
    assert!(refused > 0, "the sequence never reached a limit");
    let stats = store.stats();
    assert_eq!(stats.redis_decisions, 24, "{stats:?}");
    assert!(!stats.down && stats.closed_failures == 0, "{stats:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_flag_with_ca_file_decides_like_memory() {
    let server = TlsRedis::start();
    let dir = tempfile::tempdir().unwrap();
    let url = format!("url = \"redis://127.0.0.1:{}\"\ntls = true", server.port);
    let path = write_config(dir.path(), &store_section(&url, &dev_cert("ca.crt")));
    let store = open_from(&path);
    let info = tokio::time::timeout(HANG, store.redis().ping())
        .await
        .expect("ping hung")
        .expect("ping over TLS");
    assert!(info.version.starts_with(char::is_numeric), "{info:?}");
    assert_eq!(info.mode, "standalone");
    decisions_match_memory(&store, "flag").await;
    // The trait path (server clock) goes over TLS too.
    let r = tokio::time::timeout(
        HANG,
        store.decide(&Decision {
            limits: vec![gcra("1d/quota/flag/now", 1.0)],
        }),
    )
    .await
    .expect("decision hung")
    .expect("decision failed");
    assert!(!r.refused);
    assert_eq!(store.stats().redis_decisions, 25);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn localhost_name_matches_the_certificate() {
    let server = TlsRedis::start();
    let dir = tempfile::tempdir().unwrap();
    let url = format!("url = \"redis://localhost:{}\"\ntls = true", server.port);
    let path = write_config(dir.path(), &store_section(&url, &dev_cert("ca.crt")));
    let store = open_from(&path);
    decisions_match_memory(&store, "localhost").await;
}

/// `url = "rediss://..."` together with `tls = true`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rediss_url_and_tls_flag_decide_like_memory() {
    let server = TlsRedis::start();
    let dir = tempfile::tempdir().unwrap();
    let url = format!("url = \"rediss://127.0.0.1:{}\"\ntls = true", server.port);
    let path = write_config(dir.path(), &store_section(&url, &dev_cert("ca.crt")));
    let store = open_from(&path);
    decisions_match_memory(&store, "rediss-flag").await;
}

/// `url = "rediss://..."` (the form `[store] url` documents for TLS) with
/// `ca_file` and without `tls = true`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rediss_url_with_ca_file_decides_like_memory() {
    let server = TlsRedis::start();
    let dir = tempfile::tempdir().unwrap();
    let url = format!("url = \"rediss://127.0.0.1:{}\"", server.port);
    let path = write_config(dir.path(), &store_section(&url, &dev_cert("ca.crt")));
    let store = open_from(&path);
    decisions_match_memory(&store, "rediss").await;
}

#[test]
fn check_reports_redis_version_over_tls() {
    let server = TlsRedis::start();
    let dir = tempfile::tempdir().unwrap();
    let url = format!("url = \"redis://127.0.0.1:{}\"\ntls = true", server.port);
    let path = write_config(dir.path(), &store_section(&url, &dev_cert("ca.crt")));
    let (code, text) = check(&path);
    assert_eq!(code, Some(0), "{text}");
    assert!(text.contains("tls=true"), "{text}");
    assert!(text.contains("store: redis answers: version=7."), "{text}");
    assert!(text.contains("mode=standalone"), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_ca_fails_decisions_without_hanging() {
    let server = TlsRedis::start();
    let dir = tempfile::tempdir().unwrap();
    let url = format!("url = \"redis://127.0.0.1:{}\"\ntls = true", server.port);
    // upstream.crt is a leaf certificate, not the CA that signed Redis' one.
    let path = write_config(dir.path(), &store_section(&url, &dev_cert("upstream.crt")));
    let store = open_from(&path);
    let d = Decision {
        limits: vec![gcra("1d/quota/wrong-ca", 3.0)],
    };
    for _ in 0..3 {
        let r = tokio::time::timeout(HANG, store.decide(&d))
            .await
            .expect("decision with a wrong CA hung");
        assert!(
            matches!(r, Err(StoreError::Unavailable(_))),
            "failure_mode = closed must answer unavailable: {r:?}"
        );
    }
    let stats = store.stats();
    assert_eq!(stats.redis_decisions, 0, "{stats:?}");
    assert!(stats.down && stats.closed_failures == 3, "{stats:?}");
    let err = tokio::time::timeout(HANG, store.redis().ping())
        .await
        .expect("ping with a wrong CA hung")
        .expect_err("ping must fail with a wrong CA");
    let text = err.to_string().to_lowercase();
    assert!(text.contains("certificate"), "unclear error: {err}");
}

#[test]
fn check_with_wrong_ca_exits_1_with_a_clear_message() {
    let server = TlsRedis::start();
    let dir = tempfile::tempdir().unwrap();
    let url = format!("url = \"redis://127.0.0.1:{}\"\ntls = true", server.port);
    let path = write_config(dir.path(), &store_section(&url, &dev_cert("upstream.crt")));
    let (code, text) = check(&path);
    assert_eq!(code, Some(1), "{text}");
    assert!(
        text.contains(&format!("store: redis redis://127.0.0.1:{}", server.port)),
        "{text}"
    );
    assert!(text.to_lowercase().contains("certificate"), "{text}");
}

/// A client without TLS against the TLS-only port fails (no plain-text fallback, no hang).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plain_client_on_tls_port_fails_without_hanging() {
    let server = TlsRedis::start();
    let dir = tempfile::tempdir().unwrap();
    let url = format!("url = \"redis://127.0.0.1:{}\"", server.port);
    let path = write_config(dir.path(), &store_section(&url, &dev_cert("ca.crt")));
    let store = open_from(&path);
    let r = tokio::time::timeout(
        HANG,
        store.decide(&Decision {
            limits: vec![gcra("1d/quota/plain", 3.0)],
        }),
    )
    .await
    .expect("plain-text decision on a TLS port hung");
    assert!(matches!(r, Err(StoreError::Unavailable(_))), "{r:?}");
}
