//! `floodgate check` tells the truth: a path floodgate will write that cannot be written, a
//! missing directory or a missing program fails it with the file, line, column and the key
//! at fault, before anything is printed; its report names every section; errors say their
//! I/O cause once; the admin verbs find a config without `--config`.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const HEAD: &str =
    "[[listener]]\naddress = \"127.0.0.1:0\"\n[upstream]\naddress = \"127.0.0.1:25\"\n";

fn floodgate(args: &[&str], cwd: &Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_floodgate"))
        .args(args)
        .current_dir(cwd)
        .env_remove("RUST_LOG")
        .output()
        .expect("run floodgate")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// A directory holding `f.toml` with HEAD and `body`.
fn config(body: &str) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("f.toml");
    std::fs::write(&path, format!("{HEAD}{body}")).expect("write config");
    (dir, path)
}

/// Runs `check` on `body` and returns its error, after asserting that it failed without
/// printing anything on standard output.
fn check_error(body: &str) -> (tempfile::TempDir, String) {
    let (dir, path) = config(body);
    let out = floodgate(&["check", "--config", path.to_str().unwrap()], dir.path());
    assert_eq!(out.status.code(), Some(1), "{body}: {}", text(&out.stdout));
    assert_eq!(text(&out.stdout), "", "{body}: printed before failing");
    let err = text(&out.stderr);
    assert!(!err.contains("TLS material"), "{body}: {err}");
    (dir, err)
}

#[test]
fn check_fails_on_each_unusable_path_with_its_key_line_and_column() {
    // (config after HEAD, line:column of the value, the message after the file's name).
    let cases = [
        (
            "[hold]\ndir = \"var/spool\"\n",
            "6:7",
            "[hold] dir {dir}/var/spool: missing, and its directory {dir}/var: no such directory (create it, writable by floodgate)",
        ),
        (
            "[report]\nevents = \"logs/events.jsonl\"\n",
            "6:10",
            "[report] events {dir}/logs/events.jsonl: its directory {dir}/logs: no such directory (create it, writable by floodgate)",
        ),
        (
            "[store]\npath = \"state/limits\"\n",
            "6:8",
            "[store] path {dir}/state/limits: its directory {dir}/state: no such directory (create it, writable by floodgate)",
        ),
        (
            "[admin]\nsocket = \"run/admin.sock\"\n",
            "6:10",
            "[admin] socket {dir}/run/admin.sock: its directory {dir}/run: no such directory (create it, writable by floodgate)",
        ),
        (
            "[alerts]\ncommand = [\"/nonexistent/page-postmaster\", \"--json\"]\n",
            "6:11",
            "[alerts] command /nonexistent/page-postmaster: no such program",
        ),
        (
            "[store]\nbackend = \"redis\"\nurl = \"redis://127.0.0.1:1\"\npassword_file = \"redis.pw\"\n",
            "8:17",
            "[store] password_file {dir}/redis.pw: no such file",
        ),
    ];
    for (body, at, message) in cases {
        let (dir, err) = check_error(body);
        let dir = dir.path().display().to_string();
        let want = format!(
            "floodgate: {dir}/f.toml:{at}: {}\n",
            message.replace("{dir}", &dir)
        );
        assert_eq!(err, want, "{body}");
    }
}

#[test]
fn check_names_every_unusable_path_at_once() {
    let (dir, err) = check_error(
        "[store]\npath = \"state/limits\"\n[report]\nevents = \"logs/events.jsonl\"\n\
         [admin]\nsocket = \"run/admin.sock\"\n",
    );
    let f = dir.path().join("f.toml");
    let f = f.display();
    let lines: Vec<&str> = err.lines().collect();
    assert_eq!(lines.len(), 3, "{err}");
    assert!(lines[0].starts_with(&format!("floodgate: {f}:6:8: [store] path")));
    assert!(lines[1].starts_with(&format!("{f}:10:10: [admin] socket")));
    assert!(lines[2].starts_with(&format!("{f}:8:10: [report] events")));
}

#[test]
fn check_fails_on_a_directory_this_user_cannot_write() {
    let (dir, path) =
        config("[hold]\ndir = \"spool\"\n[report]\nevents = \"spool/events.jsonl\"\n");
    let spool = dir.path().join("spool");
    std::fs::create_dir(&spool).unwrap();
    let bin = env!("CARGO_BIN_EXE_floodgate");
    let p = path.to_str().unwrap();
    use std::os::unix::fs::PermissionsExt;
    let set = |p: &Path, mode| std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode));
    // SAFETY: geteuid has no preconditions.
    let out = if unsafe { libc::geteuid() } == 0 {
        // Root may write anywhere: check as nobody, who may read the config but not write
        // in the root-owned spool.
        set(dir.path(), 0o755).unwrap();
        set(&path, 0o644).unwrap();
        Command::new("setpriv")
            .args([
                "--reuid=65534",
                "--regid=65534",
                "--clear-groups",
                bin,
                "check",
                "--config",
                p,
            ])
            .output()
            .expect("setpriv")
    } else {
        set(&spool, 0o555).unwrap();
        Command::new(bin)
            .args(["check", "--config", p])
            .output()
            .expect("run floodgate")
    };
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert_eq!(text(&out.stdout), "");
    let f = path.display();
    let s = spool.display();
    assert!(
        err.starts_with(&format!(
            "floodgate: {f}:8:10: [report] events {s}/events.jsonl: its directory {s}: not writable by uid "
        )),
        "{err}"
    );
    assert!(
        err.contains(&format!("\n{f}:6:7: [hold] dir {s}: not writable by uid ")),
        "{err}"
    );
    assert_eq!(
        err.matches("Permission denied (os error 13)").count(),
        2,
        "{err}"
    );
    set(&spool, 0o755).unwrap();
}

#[test]
fn check_prints_nothing_before_an_unreachable_redis() {
    // Port 1 on loopback: nothing listens there, the connection is refused at once.
    let (_dir, err) = check_error(
        "[store]\nbackend = \"redis\"\nurl = \"redis://127.0.0.1:1\"\ntimeout = \"2s\"\n",
    );
    assert!(err.contains("redis"), "{err}");
}

#[test]
fn check_names_every_section() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let sections = [
        "listener ",
        "tls:",
        "upstream:",
        "server:",
        "smtp:",
        "timeouts:",
        "store:",
        "report:",
        "alerts:",
        "hold:",
        "metrics:",
        "admin:",
        "outcomes:",
        "log:",
        "auth_failures:",
    ];
    // The shipped config, and one with every optional section absent.
    let (_d, bare) = config("");
    for path in [root.join("conf/floodgate.toml"), bare] {
        let out = floodgate(&["check", "--config", path.to_str().unwrap()], root);
        let stdout = text(&out.stdout);
        assert!(out.status.success(), "{}", text(&out.stderr));
        for s in sections {
            assert!(
                stdout.lines().any(|l| l.starts_with(s)),
                "{}: no {s:?} line in\n{stdout}",
                path.display()
            );
        }
    }
    let out = floodgate(&["check", "--config", "conf/floodgate.toml"], root);
    let stdout = text(&out.stdout);
    assert!(stdout.contains("\nlist relay_hosts: "), "{stdout}");
    assert!(stdout.contains("\nlimit user-messages-hour: "), "{stdout}");
    assert!(
        stdout.contains("\nlog: level=info format=text queue=65536\n"),
        "{stdout}"
    );
    assert!(
        stdout.contains("\nadmin: socket=conf/floodgate-admin.sock (default) address=(none)"),
        "{stdout}"
    );
    assert!(stdout.contains("\nmetrics: off"), "{stdout}");
    assert!(
        stdout.contains("\noutcomes: follow=(none) remember=100000"),
        "{stdout}"
    );
}

#[test]
fn an_io_error_is_said_once() {
    let tmp = tempfile::tempdir().unwrap();
    let out = floodgate(
        &["check", "--config", "/nonexistent/floodgate.toml"],
        tmp.path(),
    );
    let err = text(&out.stderr);
    assert_eq!(
        err,
        "floodgate: /nonexistent/floodgate.toml: cannot read: No such file or directory (os error 2)\n"
    );
}

#[test]
fn admin_verbs_without_config_use_conf_here_else_the_installed_one() {
    let tmp = tempfile::tempdir().unwrap();
    let out = floodgate(&["reload"], tmp.path());
    assert_eq!(out.status.code(), Some(1));
    let err = text(&out.stderr);
    if Path::new("/etc/floodgate/floodgate.toml").exists() {
        // The installed config was used: whatever went wrong is not a missing config.
        assert!(!err.contains("no config file"), "{err}");
    } else {
        assert_eq!(
            err,
            "floodgate: no config file: none of conf/floodgate.toml, /etc/floodgate/floodgate.toml exists (a relative path is taken from the working directory); give --config FILE\n"
        );
    }
    // With conf/floodgate.toml in the working directory, that one: its socket is asked.
    std::fs::create_dir(tmp.path().join("conf")).unwrap();
    std::fs::write(
        tmp.path().join("conf/floodgate.toml"),
        format!("{HEAD}[admin]\nsocket = \"nobody-here.sock\"\n"),
    )
    .unwrap();
    for args in [&["reload"][..], &["held", "list"], &["restricted"]] {
        let out = floodgate(args, tmp.path());
        assert_eq!(out.status.code(), Some(1));
        let err = text(&out.stderr);
        assert!(err.contains("conf/nobody-here.sock"), "{args:?}: {err}");
    }
}
