//! `floodgate check` with `[store] backend = "redis"` connects and reports
//! what it found; the password never appears; an unreachable Redis fails.

use crate::common::redis as redis_server;

use redis_server::RedisServer;
use std::process::Command;

fn config(dir: &std::path::Path, store: &str) -> std::path::PathBuf {
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

fn check(path: &std::path::Path) -> (bool, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_floodgate"))
        .args(["check", "--config"])
        .arg(path)
        .output()
        .unwrap();
    (
        out.status.success(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}

#[test]
fn check_reports_redis() {
    let server = RedisServer::start_with(&["--requirepass", "pa55-check-secret"]);
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("pw"), "pa55-check-secret\n").unwrap();
    let path = config(
        dir.path(),
        &format!(
            "backend = \"redis\"\nurl = \"{}\"\npassword_file = \"pw\"\ntimeout = \"2s\"\nfailure_mode = \"closed\"\n",
            server.url()
        ),
    );
    let (ok, text) = check(&path);
    assert!(ok, "{text}");
    assert!(text.contains("store: redis answers: version="), "{text}");
    assert!(text.contains("mode=standalone"), "{text}");
    assert!(text.contains("failure_mode=closed"), "{text}");
    assert!(!text.contains("pa55-check-secret"), "{text}");

    // The password inside the URL is hidden too.
    let path = config(
        dir.path(),
        &format!(
            "backend = \"redis\"\nurl = \"redis://:pa55-check-secret@127.0.0.1:{}\"\ntimeout = \"2s\"\n",
            server.port
        ),
    );
    let (ok, text) = check(&path);
    assert!(ok, "{text}");
    assert!(!text.contains("pa55-check-secret"), "{text}");
    assert!(text.contains(":***@"), "{text}");
}

#[test]
fn check_fails_when_redis_is_unreachable() {
    let mut server = RedisServer::start();
    let port = server.port;
    server.kill();
    let dir = tempfile::tempdir().unwrap();
    let path = config(
        dir.path(),
        &format!("backend = \"redis\"\nurl = \"redis://127.0.0.1:{port}\"\ntimeout = \"1s\"\n"),
    );
    let (ok, text) = check(&path);
    assert!(!ok, "{text}");
    assert!(text.contains("store: redis"), "{text}");
}
