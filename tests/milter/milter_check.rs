//! `floodgate check` on a config with only `[[milter]]`: valid without `[[listener]]` or
//! `[upstream]`, milter mode named, the limits it cannot see warned about; a `listen` it
//! cannot read refused with its line.

use std::process::Command;
use std::time::Duration;

use crate::common::run_with_timeout;

fn check(text: &str) -> crate::common::Output {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("floodgate.toml");
    std::fs::write(&path, text).unwrap();
    run_with_timeout(
        Command::new(env!("CARGO_BIN_EXE_floodgate"))
            .args(["check", "--config"])
            .arg(&path),
        Duration::from_secs(30),
    )
}

#[test]
fn check_names_milter_mode_and_what_it_cannot_see() {
    let out = check(
        r#"
[[milter]]
name = "postfix"
listen = "unix:/run/floodgate/milter.sock"

[[limit]]
name = "auth-failures"
count = "auth_failures"
key = "${client_ip}"
rate = "5 / 1h"
burst = "5"

[[limit]]
name = "per-user"
when = "authenticated"
count = "recipients"
key = "${authenticated_id}"
rate = "100 / 1h"
burst = "100"
action = "restrict"
while_restricted = "hold"
"#,
    );
    assert!(out.ok(), "{out}");
    assert!(
        out.stdout
            .contains("milter postfix: unix:/run/floodgate/milter.sock mode=0660 (milter mode"),
        "{out}"
    );
    assert!(
        out.stdout
            .contains("warning: milter mode: limit auth-failures (line 7) counts AUTH attempts"),
        "{out}"
    );
    assert!(!out.stdout.contains("limit per-user (line"), "{out}");
}

#[test]
fn check_refuses_a_listen_it_cannot_read() {
    let out = check("[[milter]]\nlisten = \"localhost:8891\"\n");
    assert!(!out.ok(), "{out}");
    assert!(
        out.stderr.contains("floodgate.toml:2:10: ")
            && out.stderr.contains("neither unix:/path nor IP:PORT"),
        "{out}"
    );
    let out = check("[[milter]]\nlisten = \"unix:/tmp/m.sock\"\nmode = \"rw\"\n");
    assert!(
        !out.ok() && out.stderr.contains("not an octal permission"),
        "{out}"
    );
    // Neither a listener nor a milter: nothing to serve.
    let out = check("[upstream]\naddress = \"127.0.0.1:25\"\n");
    assert!(
        !out.ok()
            && out
                .stderr
                .contains("[[policy_service]] or [[milter]] is needed"),
        "{out}"
    );
}
