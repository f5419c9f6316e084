//! Real `redis-server` processes for tests: one server, or a three-master
//! cluster, on free loopback ports in temporary directories, stopped on drop.
//!
//! Reached as `common::redis`.

#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The server binary (`REDIS_SERVER` overrides; `.ci/install.sh` installs it).
fn server_bin() -> String {
    std::env::var("REDIS_SERVER").unwrap_or_else(|_| "redis-server".into())
}

/// Panics with a clear message when redis-server is missing: tests that need
/// it must not pass silently.
fn require_redis() {
    let ok = Command::new(server_bin())
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .map(|s| s.success())
        .unwrap_or(false);
    assert!(
        ok,
        "redis-server is not installed (run .ci/install.sh, or set REDIS_SERVER): \
         the Redis store tests need a real server"
    );
}

/// A free loopback port (and, for cluster nodes, port + 10000 free too).
fn free_port(with_bus: bool) -> u16 {
    for _ in 0..200 {
        let l = TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
        let port = l.local_addr().unwrap().port();
        drop(l);
        if port == 6379 {
            continue;
        }
        if with_bus {
            if port > 55535 {
                continue;
            }
            if TcpListener::bind(("127.0.0.1", port + 10000)).is_err() {
                continue;
            }
        }
        return port;
    }
    panic!("no free loopback port found");
}

/// Sends one inline command and returns the raw reply (bounded wait).
pub fn raw_command(port: u16, cmd: &str) -> Option<String> {
    let addr = ("127.0.0.1", port);
    let mut s = TcpStream::connect(addr).ok()?;
    s.set_read_timeout(Some(Duration::from_millis(500))).ok()?;
    s.write_all(format!("{cmd}\r\n").as_bytes()).ok()?;
    let mut buf = vec![0u8; 16384];
    let n = s.read(&mut buf).ok()?;
    Some(String::from_utf8_lossy(&buf[..n]).into_owned())
}

/// One redis-server process.
pub struct RedisServer {
    child: Option<Child>,
    /// Its port on 127.0.0.1.
    pub port: u16,
    dir: tempfile::TempDir,
    extra: Vec<String>,
}

impl RedisServer {
    /// Starts a plain server (no persistence).
    pub fn start() -> RedisServer {
        RedisServer::start_with(&[])
    }

    /// Starts a server with extra arguments (`["--requirepass", "x"]`).
    pub fn start_with(extra: &[&str]) -> RedisServer {
        require_redis();
        let dir = tempfile::tempdir().expect("temp dir");
        let mut s = RedisServer {
            child: None,
            port: free_port(extra.contains(&"--cluster-enabled")),
            dir,
            extra: extra.iter().map(|s| s.to_string()).collect(),
        };
        s.spawn();
        s
    }

    fn spawn(&mut self) {
        let log = std::fs::File::create(self.dir.path().join("redis.log")).expect("log file");
        let child = Command::new(server_bin())
            .args(["--port", &self.port.to_string()])
            .args(["--bind", "127.0.0.1"])
            .args(["--save", ""])
            .args(["--appendonly", "no"])
            .args(["--dir", &self.dir.path().display().to_string()])
            .args(&self.extra)
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(Stdio::null())
            .spawn()
            .expect("start redis-server");
        self.child = Some(child);
        self.wait_ready();
    }

    fn wait_ready(&self) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Some(r) = raw_command(self.port, "PING") {
                if r.starts_with("+PONG") || r.starts_with("-NOAUTH") {
                    return;
                }
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let log = std::fs::read_to_string(self.dir.path().join("redis.log")).unwrap_or_default();
        panic!("redis-server on port {} did not start:\n{log}", self.port);
    }

    /// `redis://127.0.0.1:port`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// The working directory.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// Kills the server at once (SIGKILL), as a crash would.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Starts it again on the same port, empty.
    pub fn restart(&mut self) {
        self.kill();
        self.spawn();
    }

    /// Whether the process is running.
    pub fn running(&self) -> bool {
        self.child.is_some()
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Three masters forming a Redis Cluster.
pub struct RedisCluster {
    /// The nodes.
    pub nodes: Vec<RedisServer>,
}

impl RedisCluster {
    /// Starts three cluster-enabled servers and joins them (`redis-cli --cluster create`).
    pub fn start() -> RedisCluster {
        let nodes: Vec<RedisServer> = (0..3)
            .map(|_| {
                RedisServer::start_with(&[
                    "--cluster-enabled",
                    "yes",
                    "--cluster-config-file",
                    "nodes.conf",
                    "--cluster-node-timeout",
                    "2000",
                ])
            })
            .collect();
        let addrs: Vec<String> = nodes
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.port))
            .collect();
        let out = Command::new("redis-cli")
            .args(["--cluster", "create"])
            .args(&addrs)
            .args(["--cluster-replicas", "0", "--cluster-yes"])
            .stdin(Stdio::null())
            .output()
            .expect("run redis-cli --cluster create (redis-tools)");
        assert!(
            out.status.success(),
            "redis-cli --cluster create failed: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let ok = nodes.iter().all(|n| {
                raw_command(n.port, "CLUSTER INFO").is_some_and(|r| r.contains("cluster_state:ok"))
            });
            if ok {
                break;
            }
            assert!(Instant::now() < deadline, "cluster did not become ok");
            std::thread::sleep(Duration::from_millis(50));
        }
        RedisCluster { nodes }
    }

    /// `127.0.0.1:port` of every node.
    pub fn addrs(&self) -> Vec<String> {
        self.nodes
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.port))
            .collect()
    }
}
