//! Root and the admin socket of a floodgate run by its own user (here: nobody): root may
//! use the verbs on a socket in the service's own directory (as `postsuper` trusts root),
//! not on one another user served from a directory anyone may write; and the audit names
//! the person behind root or the service's user (sudo's `SUDO_USER`, runuser's kept
//! login), with the account that connected: `user:alice (uid 0 via sudo)`.

use crate::common;

use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use common::daemon::{is_root, Daemon};
use common::*;
use serde_json::Value;

const NOBODY: u32 = 65534;

fn verb(socket: &Path, args: &[&str], env: &[(&str, &str)], uid: Option<u32>) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_floodgate"));
    cmd.args(args)
        .arg("--socket")
        .arg(socket)
        .env_remove("SUDO_USER")
        .env_remove("DOAS_USER");
    for (k, v) in env {
        cmd.env(k, v);
    }
    if let Some(uid) = uid {
        cmd.uid(uid).gid(uid);
    }
    run_with_timeout(&mut cmd, Duration::from_secs(30))
}

fn restrict(key: &str) -> [&str; 6] {
    ["restrict", key, "--for", "1h", "--reason", "package test"]
}

fn audit_who(path: &Path, target: &str) -> String {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .find(|v| v["target"] == target)
        .unwrap_or_else(|| panic!("no audit line for {target} in {}", path.display()))["who"]
        .as_str()
        .unwrap()
        .to_string()
}

/// Waits (at most 20 s) for `path` to exist.
fn wait_for(path: &Path) -> bool {
    let deadline = Instant::now() + Duration::from_secs(20);
    while Instant::now() < deadline {
        if path.exists() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    false
}

/// What the audit records for root with no `SUDO_USER`: root, or the person of this
/// session's login uid.
fn root_alone() -> String {
    let login = std::fs::read_to_string("/proc/self/loginuid").unwrap_or_default();
    match login.trim().parse::<u32>() {
        Ok(uid) if uid != u32::MAX && uid != 0 => {
            let name = ::floodgate::admin::peer::user_name(uid);
            let name = if name.starts_with("uid ") {
                format!("uid{uid}")
            } else {
                name
            };
            format!("user:{name} (uid 0 via login)")
        }
        _ => "user:root".into(),
    }
}

#[test]
fn root_uses_the_services_socket_and_the_audit_names_the_person() {
    if !is_root() {
        // Only root can run floodgate as another user; as anyone else the rule is the old
        // one (own user or root), tested in admin_verbs.
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let state = dir.path().join("state");
    std::fs::create_dir(&state).unwrap();
    std::fs::set_permissions(&state, std::fs::Permissions::from_mode(0o750)).unwrap();
    std::os::unix::fs::chown(&state, Some(NOBODY), Some(NOBODY)).unwrap();
    let config = dir.path().join("floodgate.toml");
    std::fs::write(
        &config,
        "[[listener]]\naddress = \"127.0.0.1:0\"\n[upstream]\naddress = \"127.0.0.1:25\"\n\
         [admin]\nsocket = \"state/admin.sock\"\naudit = \"state/audit.jsonl\"\n",
    )
    .unwrap();
    std::fs::set_permissions(&config, std::fs::Permissions::from_mode(0o644)).unwrap();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_floodgate"));
    cmd.arg("run").arg("--config").arg(&config);
    cmd.uid(NOBODY).gid(NOBODY);
    let mut daemon = Daemon::spawn("floodgate", cmd, &dir.path().join("run.out"));
    let (socket, audit) = (state.join("admin.sock"), state.join("audit.jsonl"));
    assert!(
        wait_for(&socket),
        "{}",
        std::fs::read_to_string(dir.path().join("run.out")).unwrap_or_default()
    );

    // sudo: root connects, SUDO_USER names the person.
    let out = verb(&socket, &restrict("bob"), &[("SUDO_USER", "alice")], None);
    assert!(out.ok(), "{out}");
    assert_eq!(audit_who(&audit, "bob"), "user:alice (uid 0 via sudo)");
    // Root alone: root (or its login's person).
    let out = verb(&socket, &restrict("carol"), &[], None);
    assert!(out.ok(), "{out}");
    assert_eq!(audit_who(&audit, "carol"), root_alone());
    // runuser to the service's user from a sudo shell: the service's uid, the person kept.
    let out = verb(
        &socket,
        &restrict("dave"),
        &[("SUDO_USER", "alice")],
        Some(NOBODY),
    );
    assert!(out.ok(), "{out}");
    assert_eq!(
        audit_who(&audit, "dave"),
        format!("user:alice (uid {NOBODY} via sudo)")
    );
    // The restriction itself carries the person as its `by`.
    let out = verb(&socket, &["restricted", "--json"], &[], None);
    assert!(out.ok(), "{out}");
    assert!(out.stdout.contains("user:alice (uid 0 via sudo)"), "{out}");
    // A SUDO_USER that is no user name is not sent: root (or its login) is recorded.
    let out = verb(&socket, &restrict("erin"), &[("SUDO_USER", "x y")], None);
    assert!(out.ok(), "{out}");
    assert_eq!(audit_who(&audit, "erin"), root_alone());
    daemon.stop();

    // A socket of another user in a directory anyone may write: root does not talk to it.
    let shared = dir.path().join("shared");
    std::fs::create_dir(&shared).unwrap();
    std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o1777)).unwrap();
    let squat = shared.join("admin.sock");
    let mut cmd = Command::new("python3");
    cmd.arg("-c")
        .arg(
            "import socket,sys,time\ns=socket.socket(socket.AF_UNIX)\ns.bind(sys.argv[1])\n\
             s.listen(4)\ntime.sleep(30)",
        )
        .arg(&squat)
        .uid(NOBODY)
        .gid(NOBODY);
    let mut squatter = Daemon::spawn("python3 squatter", cmd, &dir.path().join("squat.out"));
    assert!(wait_for(&squat));
    let out = verb(&squat, &restrict("frank"), &[("SUDO_USER", "alice")], None);
    assert!(!out.ok(), "{out}");
    assert!(
        out.stderr.contains(&format!(
            "is served by uid {NOBODY}, neither this user (uid 0) nor root"
        )),
        "{out}"
    );
    squatter.stop();
}
