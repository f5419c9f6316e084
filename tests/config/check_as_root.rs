//! `floodgate check` run by root checks as the service's user (the owner of the state
//! directory, or `--user`), says so, and creates nothing: no hold spool made as root, mode
//! 0700, that the service then could not use (the trap of a first install). Run by another
//! user, `--user` naming someone else is refused.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use crate::common::daemon::is_root;
use crate::common::{run_with_timeout, Output};

/// nobody and nogroup on Debian: a user with no rights of its own, as the service's.
const NOBODY: u32 = 65534;

fn check(config: &Path, extra: &[&str]) -> Output {
    run_with_timeout(
        Command::new(env!("CARGO_BIN_EXE_floodgate"))
            .arg("check")
            .arg("--config")
            .arg(config)
            .args(extra)
            .env_remove("RUST_LOG"),
        Duration::from_secs(60),
    )
}

/// Every entry under `dir`, with owner and mode, sorted.
fn listing(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| {
            let e = e.unwrap();
            let m = e.metadata().unwrap();
            format!(
                "{} {} {:o}",
                e.file_name().to_string_lossy(),
                m.uid(),
                m.mode() & 0o7777
            )
        })
        .collect();
    v.sort();
    v
}

/// A config in a directory anyone may enter, its state in `state/` (owned by `owner`):
/// snapshot, event log, hold spool (not made), admin socket.
fn setup(owner: u32) -> (tempfile::TempDir, std::path::PathBuf, std::path::PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let state = dir.path().join("state");
    std::fs::create_dir(&state).unwrap();
    std::fs::set_permissions(&state, std::fs::Permissions::from_mode(0o750)).unwrap();
    std::os::unix::fs::chown(&state, Some(owner), Some(owner)).unwrap();
    let config = dir.path().join("floodgate.toml");
    std::fs::write(
        &config,
        "[[listener]]\naddress = \"127.0.0.1:0\"\n[upstream]\naddress = \"127.0.0.1:25\"\n\
         [store]\npath = \"state/state\"\n[report]\nevents = \"state/events.jsonl\"\n\
         [hold]\ndir = \"state/hold\"\n[admin]\nsocket = \"state/admin.sock\"\n",
    )
    .unwrap();
    std::fs::set_permissions(&config, std::fs::Permissions::from_mode(0o644)).unwrap();
    (dir, config, state)
}

#[test]
fn root_checks_as_the_owner_of_the_state_directory_and_creates_nothing() {
    if !is_root() {
        // Not root: checking as another user is refused, with the reason.
        // SAFETY: geteuid has no preconditions.
        let (_dir, config, _state) = setup(unsafe { libc::geteuid() });
        let out = check(&config, &["--user", "root"]);
        assert!(!out.ok(), "{out}");
        assert!(
            out.stderr.contains("only root can check as another user"),
            "{out}"
        );
        return;
    }
    let (_dir, config, state) = setup(NOBODY);
    let before = listing(&state);
    let out = check(&config, &[]);
    assert!(out.ok(), "{out}");
    let line = format!(
        "checked as: nobody (uid {NOBODY}), owner of {}: the user the service runs as",
        state.display()
    );
    assert!(out.stdout.contains(&line), "{line}\n{out}");
    // Nothing made, nothing given away: the spool is still missing, the directory nobody's.
    assert_eq!(listing(&state), before, "{out}");
    assert!(!state.join("hold").exists());
    assert_eq!(std::fs::metadata(&state).unwrap().uid(), NOBODY);

    // The trap of a first install: a spool made by root. Root's check now says what the
    // service would meet, instead of passing as root.
    std::fs::create_dir(state.join("hold")).unwrap();
    std::fs::set_permissions(state.join("hold"), std::fs::Permissions::from_mode(0o700)).unwrap();
    let out = check(&config, &[]);
    assert!(!out.ok(), "{out}");
    let said = format!(
        "[hold] dir {}: not writable by uid {NOBODY}",
        state.join("hold").display()
    );
    assert!(out.stderr.contains(&said), "{said}\n{out}");
    // --user chooses: as root itself, root's spool passes.
    let out = check(&config, &["--user", "root"]);
    assert!(out.ok(), "{out}");
    assert!(
        out.stdout
            .contains("checked as: root (uid 0), given with --user"),
        "{out}"
    );
    let out = check(&config, &["--user", "no-such-user-here"]);
    assert!(!out.ok(), "{out}");
    assert!(
        out.stderr
            .contains("--user no-such-user-here: no such user"),
        "{out}"
    );

    // Every directory root's: root checks as itself, and still makes no spool.
    let (_dir, config, state) = setup(0);
    let out = check(&config, &[]);
    assert!(out.ok(), "{out}");
    assert!(
        out.stdout.contains("checked as: root (every directory"),
        "{out}"
    );
    assert!(!state.join("hold").exists(), "check made the spool\n{out}");
}
