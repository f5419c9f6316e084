//! The blocks of the README and of every page of the book (`docs/**/*.md`) work pasted as
//! they stand:
//! - every TOML example, merged into the shipped `conf/floodgate.toml` as the book's
//!   "Configuration" says (keys replace, `[[limit]]`s are added, a `[[listener]]` replaces
//!   the one of its name), passes `floodgate check` with the files it names made in a
//!   temporary root;
//! - the worked example's shell blocks (`docs/start/worked-example.md`) run one after the
//!   other in one shell, in a copy of the repository's layout (only the ports are changed,
//!   and `./target/release/floodgate` is this build), and print what the page shows after
//!   each of them: the same lines, with only what differs from run to run (rates, times,
//!   percentages, retry delays) left out of the comparison;
//! - every other shell block is named here with the test that runs it instead, so a new
//!   block cannot go untested unnoticed;
//! - the Postfix `main.cf` block means what it says to Postfix's own `postconf`;
//! - every repository file a page names exists.

use crate::common;

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use common::redis::RedisServer;
use common::*;

/// One fenced block of a page.
struct Block {
    /// The page, from the repository root (`README.md`, `docs/start/run.md`).
    file: String,
    /// Line of the opening fence (1-based).
    line: usize,
    /// The info string (`sh`, `toml`, or empty).
    lang: String,
    text: String,
    /// The page's text between the previous block and this one.
    before: String,
}

/// Every block of every page, in page order.
fn all_blocks() -> Vec<Block> {
    book::pages()
        .into_iter()
        .flat_map(|(file, text)| {
            blocks(&text).into_iter().map(move |b| Block {
                file: file.clone(),
                ..b
            })
        })
        .collect()
}

fn blocks(readme: &str) -> Vec<Block> {
    let mut out = Vec::new();
    let mut open: Option<(usize, String, String)> = None;
    let mut prose = String::new();
    for (i, l) in readme.lines().enumerate() {
        match (&mut open, l.strip_prefix("```")) {
            (None, Some(lang)) => open = Some((i + 1, lang.trim().to_string(), String::new())),
            (Some(_), Some("")) => {
                let (line, lang, text) = open.take().unwrap();
                out.push(Block {
                    file: String::new(),
                    line,
                    lang,
                    text,
                    before: std::mem::take(&mut prose),
                });
            }
            (Some((_, _, text)), _) => {
                text.push_str(l);
                text.push('\n');
            }
            (None, None) => {
                prose.push_str(l);
                prose.push('\n');
            }
        }
    }
    assert!(open.is_none(), "a page ends inside a block");
    out
}

#[test]
fn blocks_are_read_with_their_lines() {
    let b = blocks("a\n```sh\nx\n```\n\n```\ny\n```\n");
    assert_eq!(b.len(), 2);
    assert_eq!(
        (b[0].line, b[0].lang.as_str(), b[0].text.as_str()),
        (2, "sh", "x\n")
    );
    assert_eq!(
        (b[1].line, b[1].lang.as_str(), b[1].before.as_str()),
        (6, "", "\n")
    );
}

// ---------------------------------------------------------------------------------------
// TOML examples

/// Merges `add` into `base` as the book's "Configuration" says.
fn merge(base: &mut toml::Table, add: toml::Table) {
    for (k, v) in add {
        match (base.get_mut(&k), v) {
            (Some(toml::Value::Table(b)), toml::Value::Table(a)) => merge(b, a),
            (Some(toml::Value::Array(b)), toml::Value::Array(a))
                if k == "limit" || k == "listener" =>
            {
                for item in a {
                    let name = item.get("name").cloned();
                    match b
                        .iter_mut()
                        .find(|x| name.is_some() && x.get("name") == name.as_ref())
                    {
                        Some(same) => *same = item,
                        None => b.push(item),
                    }
                }
            }
            (_, v) => {
                base.insert(k, v);
            }
        }
    }
}

#[test]
fn merging_replaces_keys_adds_limits_and_replaces_listeners_by_name() {
    let mut base: toml::Table = toml::from_str(
        "[server]\nhostname = \"a\"\nmax_errors = 3\n[[limit]]\nname = \"x\"\n\
         [[listener]]\nname = \"s\"\naddress = \"1\"\n",
    )
    .unwrap();
    let add: toml::Table = toml::from_str(
        "[server]\nhostname = \"b\"\n[[limit]]\nname = \"y\"\n\
         [[listener]]\nname = \"s\"\naddress = \"2\"\n",
    )
    .unwrap();
    merge(&mut base, add);
    assert_eq!(base["server"]["hostname"].as_str(), Some("b"));
    assert_eq!(base["server"]["max_errors"].as_integer(), Some(3));
    assert_eq!(base["limit"].as_array().unwrap().len(), 2);
    let l = base["listener"].as_array().unwrap();
    assert_eq!((l.len(), l[0]["address"].as_str()), (1, Some("2")));
}

/// A temporary root with what the book's examples name: `<root>/var/lib/floodgate`,
/// `<root>/run/floodgate` (the package's runtime directory), `<root>/var/spool/floodgate`, `<root>/var/log/postfix.log`,
/// `<root>/etc/floodgate/redis.pass`, the admin token files `<root>/etc/floodgate/admin.token`
/// and `<root>/etc/floodgate/tokens/{alice,backup}`, and the shipped config in `<root>/conf` beside a
/// `certs` link and a `bulk-senders.txt`.
struct Root {
    dir: tempfile::TempDir,
}

impl Root {
    fn new() -> Root {
        let dir = tempfile::tempdir().unwrap();
        let r = dir.path();
        for d in [
            "var/lib/floodgate",
            "run/floodgate",
            "var/spool/floodgate",
            "var/log",
            "etc/floodgate",
            "conf",
        ] {
            fs::create_dir_all(r.join(d)).unwrap();
        }
        fs::write(r.join("var/log/postfix.log"), "").unwrap();
        fs::write(r.join("etc/floodgate/redis.pass"), "a-redis-password\n").unwrap();
        // The admin tokens of the named-tokens example: one each, all different.
        fs::create_dir_all(r.join("etc/floodgate/tokens")).unwrap();
        for (file, token) in [
            ("admin.token", "admin-token-0123456789abcdef"),
            ("tokens/alice", "alice-token-0123456789abcdef"),
            ("tokens/backup", "backup-token-0123456789abcdef"),
        ] {
            fs::write(r.join("etc/floodgate").join(file), format!("{token}\n")).unwrap();
        }
        fs::create_dir_all(r.join("usr/local/bin")).unwrap();
        let pager = r.join("usr/local/bin/page-postmaster");
        fs::write(&pager, "#!/bin/sh\ncat >/dev/null\n").unwrap();
        fs::set_permissions(&pager, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
        fs::write(r.join("conf/bulk-senders.txt"), "192.0.2.10 5000\n").unwrap();
        std::os::unix::fs::symlink(repo_root().join("certs"), r.join("certs")).unwrap();
        Root { dir }
    }

    /// `text` with the absolute paths of the examples moved under the root.
    fn rooted(&self, text: &str) -> String {
        let r = self.dir.path().display().to_string();
        [
            "/var/lib/floodgate",
            "/run/floodgate",
            "/var/spool/floodgate",
            "/var/log/postfix.log",
            "/etc/floodgate",
            "/usr/local/bin/page-postmaster",
        ]
        .iter()
        .fold(text.to_string(), |t, p| t.replace(p, &format!("{r}{p}")))
    }
}

#[test]
fn every_toml_example_passes_check_inside_the_shipped_config() {
    let shipped = fs::read_to_string(repo_root().join("conf/floodgate.toml")).unwrap();
    let examples: Vec<Block> = all_blocks()
        .into_iter()
        .filter(|b| b.lang == "toml")
        .collect();
    assert!(examples.len() >= 10, "{} TOML examples", examples.len());
    let mut failed = Vec::new();
    for b in &examples {
        let root = Root::new();
        let mut config: toml::Table = toml::from_str(&shipped).unwrap();
        // The Redis example's server: a local one with the example's user and password
        // (without TLS: rediss:// becomes redis://).
        let mut text = root.rooted(&b.text);
        let _redis = text.contains("redis.internal").then(|| {
            let r = RedisServer::start_with(&[
                "--user",
                "floodgate",
                "on",
                ">a-redis-password",
                "~*",
                "&*",
                "+@all",
            ]);
            let port = r.url().rsplit(':').next().unwrap().to_string();
            text = text.replace(
                "rediss://floodgate@redis.internal:6380/0",
                &format!("redis://floodgate@127.0.0.1:{port}/0"),
            );
            r
        });
        let add: toml::Table = match toml::from_str(&text) {
            Ok(t) => t,
            Err(e) => {
                failed.push(format!("{}:{}: not TOML: {e}", b.file, b.line));
                continue;
            }
        };
        merge(&mut config, add);
        let path = root.dir.path().join("conf/floodgate.toml");
        fs::write(&path, toml::to_string(&config).unwrap()).unwrap();
        let out = run_with_timeout(
            Command::new(env!("CARGO_BIN_EXE_floodgate"))
                .args(["check", "--config"])
                .arg(&path),
            Duration::from_secs(60),
        );
        if !out.ok() {
            failed.push(format!("{}:{}:\n{}\n{out}", b.file, b.line, b.text));
        }
    }
    assert!(failed.is_empty(), "{}", failed.join("\n\n"));
}

// ---------------------------------------------------------------------------------------
// Shell blocks

/// Why a shell block outside the worked example is not run here: the test that runs what
/// it does. Keyed by the block's first line.
const RUN_ELSEWHERE: &[(&str, &str)] = &[
    (
        "cargo run --release -- demo",
        "tests/operate/demo.rs runs `floodgate demo --once`",
    ),
    (
        "cargo run --release -- run --config conf/floodgate.toml",
        "tests/config/default_config.rs runs the shipped config",
    ),
    (
        "bash .ci/install.sh && cargo test",
        "it is CI itself (.ci/run)",
    ),
    (
        "dpkg -i target/debian/floodgate_*.deb",
        ".ci/package.sh installs the package in a scratch root",
    ),
    (
        "floodgate inspect alice",
        "illustrations of the admin verbs: tests/operate/admin_verbs.rs",
    ),
    (
        "floodgate held list",
        "illustrations with placeholder IDs: tests/contain/hold.rs",
    ),
    (
        "floodgate restricted",
        "illustrations of the incident verbs: tests/contain/restrict.rs",
    ),
    (
        "floodgate outcome 4XyzQ1bCDf",
        "needs a queue id upstream gave: tests/contain/outcomes_ratio.rs",
    ),
    (
        "apt install ./floodgate",
        "the package installed: .ci/package.sh installs it into a scratch root, checks it as root and as the service user, starts it by the init script, relays a message, purges it",
    ),
    (
        "floodgate check --user",
        "checking as another user: tests/config/check_as_root.rs",
    ),
    (
        "mv /var/lib/floodgate/events.jsonl",
        "reopening the event log: tests/operate/log_reopen.rs (rename, SIGUSR1), .ci/package.sh (the package's logrotate file)",
    ),
    (
        "install -m 0755 /usr/share/floodgate/floodgate.init",
        "the recipe without systemd: .ci/package.sh starts, reloads and stops floodgate by the init script",
    ),
    (
        "CONFIG=/etc/floodgate/floodgate.toml",
        "the init script's defaults: .ci/package.sh runs the init script with them",
    ),
    (
        "deluser --system floodgate",
        "after a purge, by hand: .ci/package.sh runs the postrm purge",
    ),
    (
        "cargo install cargo-deb",
        "building the .deb: .ci/package.sh runs this command line",
    ),
    (
        "grep '\"key\":\"alice\"' /var/lib/floodgate/events.jsonl",
        "an event log's own lines replayed unchanged: tests/operate/report.rs (simulate_peaks)",
    ),
    (
        "CARGO_TARGET_DIR=$(mktemp -d) /usr/bin/time",
        "the build time measurement: a fresh release build, too slow for a test",
    ),
];

/// The page of the worked example: its shell blocks run in order.
const WORKED: &str = "docs/start/worked-example.md";

/// The shell blocks of the worked example, in order, each with the output block the
/// page prints right after it (if any).
fn worked_example(all: &[Block]) -> Vec<(&Block, Option<&Block>)> {
    let inside: Vec<&Block> = all.iter().filter(|b| b.file == WORKED).collect();
    assert!(!inside.is_empty(), "{WORKED} has no blocks");
    let mut out = Vec::new();
    for (i, b) in inside.iter().enumerate() {
        if b.lang != "sh" {
            continue;
        }
        let output = inside
            .get(i + 1)
            .filter(|n| n.lang.is_empty() && n.before.trim().is_empty())
            .copied();
        out.push((*b, output));
    }
    out
}

#[test]
fn every_shell_block_is_run_here_or_named_with_its_test() {
    let all = all_blocks();
    let worked: Vec<(String, usize)> = worked_example(&all)
        .iter()
        .map(|(b, _)| (b.file.clone(), b.line))
        .collect();
    assert!(worked.len() >= 6, "{worked:?}");
    for b in all.iter().filter(|b| b.lang == "sh" || b.lang == "bash") {
        if worked.contains(&(b.file.clone(), b.line)) {
            continue;
        }
        let first = b.text.lines().next().unwrap_or("");
        assert!(
            RUN_ELSEWHERE.iter().any(|(k, _)| first.starts_with(k)),
            "{}:{}: a shell block neither run by this test nor named in RUN_ELSEWHERE:\n{}",
            b.file,
            b.line,
            b.text
        );
    }
    // Each entry still names a block.
    for (k, why) in RUN_ELSEWHERE {
        assert!(
            all.iter()
                .any(|b| b.text.lines().next().unwrap_or("").starts_with(k)),
            "RUN_ELSEWHERE names no block starting {k:?} ({why})"
        );
    }
}

/// A line as it is compared: runs of spaces as one, and with `#` for what differs from run
/// to run: numbers with a point, colon, dash or `T` inside (rates such as `9.997`, times such
/// as `2026-11-25T16:32:20.114015Z`, addresses), percentages (`100%`: a rate that decayed
/// meanwhile) and the delay of "try again in N seconds". Whole numbers are compared as
/// printed: counts (`12 events`, the counts of `uniq -c`), limits and periods.
fn shape(line: &str) -> String {
    let chars: Vec<char> = line.trim().chars().collect();
    let mut out = String::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if c.is_ascii_digit() {
            let start = i;
            let mut plain = true;
            while i < chars.len() {
                let joins = ".:-T".contains(chars[i])
                    && chars.get(i + 1).is_some_and(|n| n.is_ascii_digit());
                if chars[i].is_ascii_digit() {
                    i += 1;
                } else if joins {
                    plain = false;
                    i += 1;
                } else {
                    break;
                }
            }
            if !plain && chars.get(i) == Some(&'Z') {
                i += 1;
            }
            let percent = chars.get(i) == Some(&'%');
            let retry = out.ends_with("again in ");
            if plain && !percent && !retry {
                out.extend(&chars[start..i]);
            } else {
                out.push('#');
            }
            continue;
        }
        if c.is_whitespace() {
            if !out.ends_with(' ') {
                out.push(' ');
            }
        } else {
            out.push(c);
        }
        i += 1;
    }
    out
}

#[test]
fn shapes_mask_what_varies_and_keep_counts() {
    assert_eq!(shape("  9.997  10   100%  "), "# 10 #%");
    assert_eq!(shape("try again in 190 seconds"), "try again in # seconds");
    assert_eq!(shape("     12 \"auth_user\":null"), "12 \"auth_user\":null");
    assert_ne!(
        shape("     12 \"auth_user\":null"),
        shape("10 \"auth_user\":null")
    );
    assert_eq!(
        shape("12 events from 2026-11-25T16:32:20.114015Z to 127.0.0.1"),
        "12 events from # to #"
    );
}

#[test]
fn the_worked_example_runs_as_printed() {
    let all = all_blocks();
    let steps = worked_example(&all);
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    // The repository's layout: the shipped config, certificates, the recorder, the binary.
    fs::create_dir_all(d.join("conf")).unwrap();
    fs::create_dir_all(d.join("tests/upstream")).unwrap();
    fs::create_dir_all(d.join("target/release")).unwrap();
    std::os::unix::fs::symlink(repo_root().join("certs"), d.join("certs")).unwrap();
    std::os::unix::fs::symlink(
        repo_root().join("tests/upstream/recorder.py"),
        d.join("tests/upstream/recorder.py"),
    )
    .unwrap();
    std::os::unix::fs::symlink(
        env!("CARGO_BIN_EXE_floodgate"),
        d.join("target/release/floodgate"),
    )
    .unwrap();
    // Free ports for the page's fixed ones, in the config and in the commands alike.
    let ports: Vec<(String, String)> = ["2587", "2465", "2525", "10025"]
        .iter()
        .map(|p| (p.to_string(), closed_port().port().to_string()))
        .collect();
    let swap = |text: &str| {
        // The example's scratch files (`/tmp/upstream.jsonl`, `/tmp/recorder.out`) in the
        // test's own directory.
        let mut t = text.replace("/tmp/", &format!("{}/", d.display()));
        for (from, to) in &ports {
            t = t
                .replace(&format!("127.0.0.1:{from}"), &format!("127.0.0.1:{to}"))
                .replace(&format!("--port {from}"), &format!("--port {to}"));
        }
        t
    };
    let shipped = fs::read_to_string(repo_root().join("conf/floodgate.toml")).unwrap();
    fs::write(d.join("conf/floodgate.toml"), swap(&shipped)).unwrap();
    let mut script = String::from("exec 2>>\"$STDERR\"\n");
    for (i, (b, _)) in steps.iter().enumerate() {
        script.push_str(&format!("echo '@@step {i}'\n{}\n", swap(&b.text)));
    }
    script.push_str("echo '@@end'\n");
    fs::write(d.join("worked.sh"), &script).unwrap();
    let stderr = d.join("stderr.log");
    let out = run_with_timeout(
        Command::new("timeout")
            .args(["-k", "5", "180", "setsid", "bash", "worked.sh"])
            .current_dir(d)
            .env("STDERR", &stderr)
            .env_remove("RUST_LOG"),
        Duration::from_secs(200),
    );
    let log = fs::read_to_string(&stderr).unwrap_or_default();
    let context = || format!("script:\n{script}\nstdout:\n{}\nstderr:\n{log}", out.stdout);
    assert!(
        out.stdout.contains("@@end"),
        "the example did not finish\n{}",
        context()
    );
    // What each step printed, against the page's output block after it.
    let printed: Vec<&str> = out.stdout.split("@@step ").skip(1).collect();
    assert_eq!(printed.len(), steps.len(), "{}", context());
    let mut compared = 0;
    for ((b, expected), got) in steps.iter().zip(&printed) {
        let Some(expected) = expected else { continue };
        let got: Vec<String> = got.lines().map(shape).collect();
        for want in expected
            .text
            .lines()
            .filter(|l| l.trim() != "..." && !l.trim().is_empty())
        {
            assert!(
                got.contains(&shape(&swap(want))),
                "{}:{}: the line {want:?} was not printed\n{}",
                b.file,
                b.line,
                context()
            );
            compared += 1;
        }
    }
    assert!(compared >= 15, "only {compared} lines compared");
    // The restart kept the state and the last block stopped both processes.
    assert!(
        log.contains("rate limit state loaded keys="),
        "{}",
        context()
    );
    assert!(
        !log.contains("cannot connect to admin socket"),
        "{}",
        context()
    );
}

// ---------------------------------------------------------------------------------------
// Postfix's main.cf and the files named

#[test]
fn the_postfix_main_cf_block_means_what_it_says() {
    let all = all_blocks();
    let b = all
        .iter()
        .find(|b| {
            b.file == "docs/deployment/postfix.md" && b.before.trim_end().ends_with("`main.cf`:")
        })
        .expect("the main.cf block");
    let dir = tempfile::tempdir().unwrap();
    fs::write(dir.path().join("main.cf"), &b.text).unwrap();
    fs::write(dir.path().join("master.cf"), "").unwrap();
    let out = run_with_timeout(
        Command::new("/usr/sbin/postconf")
            .arg("-c")
            .arg(dir.path())
            .args([
                "-h",
                "mynetworks",
                "smtpd_sasl_path",
                "smtpd_sasl_authenticated_header",
            ])
            .args(["inet_protocols"]),
        Duration::from_secs(30),
    );
    assert!(out.ok(), "{out}");
    assert_eq!(
        out.stdout.lines().collect::<Vec<_>>(),
        ["192.0.2.0/24", "private/auth", "yes", "all"],
        "{out}"
    );
    // No value of the block carries a comment Postfix would keep.
    for l in b.text.lines().filter(|l| !l.trim_start().starts_with('#')) {
        assert!(!l.contains('#'), "{}:{}: {l:?}", b.file, b.line);
    }
}

/// The policy service's `main.cf` lines (`docs/deployment/postfix-policy.md`) are read by
/// Postfix's `postconf` without a warning, name floodgate's socket in the recipient and
/// end-of-data restriction lists (not in the data list, which the page adds only for limits
/// at that stage), fall back to `DUNNO`, and let Postfix close an idle connection before
/// floodgate does.
#[test]
fn the_policy_service_main_cf_block_means_what_it_says() {
    let all = all_blocks();
    let b = all
        .iter()
        .find(|b| {
            b.file == "docs/deployment/postfix-policy.md" && b.text.contains("check_policy_service")
        })
        .expect("the policy service's main.cf block");
    let dir = tempfile::tempdir().unwrap();
    fs::write(dir.path().join("main.cf"), &b.text).unwrap();
    fs::write(dir.path().join("master.cf"), "").unwrap();
    let params = [
        "smtpd_recipient_restrictions",
        "smtpd_data_restrictions",
        "smtpd_end_of_data_restrictions",
        "smtpd_policy_service_default_action",
        "smtpd_policy_service_timeout",
        "smtpd_policy_service_max_idle",
        "smtpd_policy_service_max_ttl",
    ];
    let out = run_with_timeout(
        Command::new("/usr/sbin/postconf")
            .arg("-c")
            .arg(dir.path())
            .arg("-h")
            .args(params),
        Duration::from_secs(30),
    );
    assert!(out.ok() && out.stderr.trim().is_empty(), "{out}");
    let values: Vec<&str> = out.stdout.lines().collect();
    assert_eq!(values.len(), params.len(), "{out}");
    for list in [values[0], values[2]] {
        assert!(
            list.ends_with("check_policy_service unix:private/floodgate"),
            "{list:?}: floodgate is not the list's last check"
        );
    }
    assert!(!values[1].contains("floodgate"), "{out}");
    assert_eq!(values[3], "DUNNO", "{out}");
    let secs = |v: &str| -> u64 { v.strip_suffix('s').unwrap().parse().unwrap() };
    assert!(secs(values[4]) > 0, "{out}");
    let idle = floodgate::policy_service::conn::IDLE.as_secs();
    assert!(
        secs(values[5]) < idle,
        "max_idle {}: Postfix keeps an idle connection longer than floodgate ({idle} s)",
        values[5]
    );
    assert!(secs(values[6]) >= secs(values[5]), "{out}");
    // No value carries a comment Postfix would keep.
    for l in b.text.lines() {
        assert!(!l.contains('#'), "{}:{}: {l:?}", b.file, b.line);
    }
}

/// Paths under the repository's top-level directories that a page names.
fn named_paths(readme: &str) -> Vec<String> {
    let mut out = Vec::new();
    for word in readme.split(|c: char| c.is_whitespace() || "`()[],;\"'".contains(c)) {
        let word = word.trim_end_matches(['.', ':']);
        let top = [
            "src/", "tests/", "conf/", "certs/", "benches/", "fuzz/", ".ci/", "docs/",
        ];
        if top.iter().any(|t| word.starts_with(t)) && word.len() > 5 {
            out.push(word.split(':').next().unwrap().to_string());
        }
    }
    out.sort();
    out.dedup();
    out
}

/// Whether `pattern` (a path, with `*` standing for any part of one name) matches a file
/// under `root`.
fn exists(root: &Path, pattern: &str) -> bool {
    let mut dirs = vec![PathBuf::from(root)];
    for part in pattern.split('/').filter(|p| !p.is_empty()) {
        let mut next = Vec::new();
        for d in &dirs {
            if !part.contains('*') {
                let p = d.join(part);
                if p.exists() {
                    next.push(p);
                }
                continue;
            }
            let (pre, post) = part.split_once('*').unwrap();
            for e in fs::read_dir(d).into_iter().flatten().flatten() {
                let n = e.file_name().to_string_lossy().to_string();
                if n.starts_with(pre) && n.ends_with(post.trim_start_matches('*')) {
                    next.push(e.path());
                }
            }
        }
        dirs = next;
    }
    !dirs.is_empty()
}

#[test]
fn every_file_a_page_names_exists() {
    let root = repo_root();
    let shipped = fs::read_to_string(root.join("conf/floodgate.toml")).unwrap();
    let all: String = book::pages().into_iter().map(|(_, text)| text).collect();
    let named = named_paths(&all);
    assert!(named.len() > 30, "{named:?}");
    let missing: Vec<&String> = named
        .iter()
        .filter(|p| !exists(&root, p))
        // What floodgate writes next to the shipped config when it runs.
        .filter(|p| {
            let name = p.strip_prefix("conf/").unwrap_or("");
            name.is_empty() || !shipped.contains(name)
        })
        .collect();
    assert!(
        missing.is_empty(),
        "the README or the book names files that are not there: {missing:?}"
    );
}

#[test]
fn named_paths_and_patterns_are_read_as_meant() {
    let found =
        named_paths("see `tests/smarthost/smarthost_postfix*.rs`, (conf/x.toml) and src/a.rs:12.");
    assert_eq!(
        found,
        [
            "conf/x.toml",
            "src/a.rs",
            "tests/smarthost/smarthost_postfix*.rs"
        ]
    );
    let root = repo_root();
    assert!(exists(&root, "tests/smarthost/smarthost_postfix*.rs"));
    assert!(!exists(&root, "tests/smarthost_postfix*.rs"));
}
