//! `[alerts] mail_to`, `mail_from`, `mail_digest` and `[admin] public_url`: each bad value
//! fails `floodgate check` with the file, line, column and what is wrong; good ones are
//! printed in the `alerts:` lines, and an example address is warned about, not refused.

use std::process::{Command, Output};

const HEAD: &str =
    "[[listener]]\naddress = \"127.0.0.1:0\"\n[upstream]\naddress = \"127.0.0.1:25\"\n";

fn check(body: &str) -> (tempfile::TempDir, Output) {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("f.toml");
    std::fs::write(&path, format!("{HEAD}{body}")).expect("write config");
    let out = Command::new(env!("CARGO_BIN_EXE_floodgate"))
        .args(["check", "--config", path.to_str().unwrap()])
        .current_dir(dir.path())
        .env_remove("RUST_LOG")
        .output()
        .expect("run floodgate");
    (dir, out)
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

#[test]
fn bad_mail_settings_fail_check_at_their_place() {
    // (config after HEAD, line:column of the value, the message).
    let cases = [
        (
            "[alerts]\nmail_to = []\n",
            "6:11",
            "[alerts] mail_to is empty: give at least one address, or remove the key",
        ),
        (
            "[alerts]\nmail_to = [\"postmaster@uni.test\", \"postmaster\"]\n",
            "6:11",
            "[alerts] mail_to: \"postmaster\" is not a mail address (local@domain)",
        ),
        (
            "[alerts]\nmail_to = [\"a@uni.test\\r\\nBcc: b@uni.test\"]\n",
            "6:11",
            "[alerts] mail_to: \"a@uni.test\\r\\nBcc: b@uni.test\" is not a mail address (local@domain)",
        ),
        (
            "[alerts]\nmail_to = [\"a@uni.test\"]\nmail_from = \"floodgate at uni\"\n",
            "7:13",
            "[alerts] mail_from: \"floodgate at uni\" is not a mail address (local@domain)",
        ),
        (
            "[alerts]\nmail_to = [\"a@uni.test\"]\nmail_digest = \"25:00\"\n",
            "7:15",
            "[alerts] mail_digest: \"25:00\" is not a time of day HH:MM (the host's local time, e.g. \"08:00\")",
        ),
        (
            "[alerts]\nmail_to = [\"a@uni.test\"]\nmail_digest = \"8am\"\n",
            "7:15",
            "[alerts] mail_digest: \"8am\" is not a time of day HH:MM (the host's local time, e.g. \"08:00\")",
        ),
        (
            "[alerts]\nmail_digest = \"08:00\"\n",
            "6:15",
            "[alerts] mail_digest needs mail_to (the addresses alert mail goes to)",
        ),
        (
            "[alerts]\nmail_from = \"fg@uni.test\"\n",
            "6:13",
            "[alerts] mail_from needs mail_to (the addresses alert mail goes to)",
        ),
        (
            "[alerts]\nmail_to = \"a@uni.test\"\n",
            "6:11",
            "invalid type: string \"a@uni.test\", expected a sequence",
        ),
        (
            "[admin]\npublic_url = \"floodgate.uni.test\"\n",
            "6:14",
            "[admin] public_url \"floodgate.uni.test\" is not an http:// or https:// address (e.g. \"https://floodgate.example.org\")",
        ),
        (
            "[admin]\npublic_url = \"https://fg.uni.test/a b\"\n",
            "6:14",
            "[admin] public_url \"https://fg.uni.test/a b\" is not an http:// or https:// address (e.g. \"https://floodgate.example.org\")",
        ),
    ];
    for (body, at, message) in cases {
        let (dir, out) = check(body);
        assert_eq!(out.status.code(), Some(1), "{body}: {}", text(&out.stdout));
        let err = text(&out.stderr);
        let file = dir.path().join("f.toml");
        let want = format!("{}:{at}: ", file.display());
        assert!(err.contains(&want), "{body}: want {want:?} in {err}");
        assert!(err.contains(message), "{body}: want {message:?} in {err}");
    }
}

#[test]
fn check_prints_the_mail_settings_and_warns_about_an_example_address() {
    let (_dir, out) = check(
        "[admin]\npublic_url = \"https://fg.uni.test/\"\n\
         [alerts]\nmail_to = [\"postmaster@example.org\", \"ops@uni.test\"]\n\
         mail_from = \"floodgate@uni.test\"\nmail_digest = \"07:30\"\n",
    );
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}{}", text(&out.stderr));
    for want in [
        "alerts: mail_to=postmaster@example.org,ops@uni.test mail_from=floodgate@uni.test \
         mail_digest=07:30 local time public_url=https://fg.uni.test (through [upstream])\n",
        "warning: [alerts] mail_to postmaster@example.org is the example address: change it \
         (mail to example domains reaches nobody)\n",
    ] {
        assert!(stdout.contains(want), "{want:?} not in\n{stdout}");
    }
    assert!(!stdout.contains("ops@uni.test is the example"), "{stdout}");
    let (_dir, out) = check("[alerts]\nwebhook = \"http://127.0.0.1:9/a\"\n");
    let stdout = text(&out.stdout);
    assert!(
        stdout.contains("alerts: mail off (no mail_to)\n"),
        "{stdout}"
    );
    assert!(!stdout.contains("warning"), "{stdout}");
}
