use super::*;

const GOOD: &str = r#"
[[listener]]
address = "127.0.0.1:0"
tls = "starttls"

[tls]
certificate = "certs/dev/server.crt"
private_key = "certs/dev/server.key"

[upstream]
address = "127.0.0.1:2525"
client_identity = "xclient"
"#;

fn err(text: &str) -> String {
    Config::parse(Path::new("/etc/floodgate/test.toml"), text)
        .unwrap_err()
        .to_string()
}

#[test]
fn good_config_with_defaults() {
    let c = Config::parse(Path::new("/etc/floodgate/f.toml"), GOOD).unwrap();
    assert_eq!(c.listeners.len(), 1);
    assert_eq!(*c.listeners[0].tls.get_ref(), TlsMode::Starttls);
    assert_eq!(
        c.tls.clone().unwrap().certificate,
        PathBuf::from("/etc/floodgate/certs/dev/server.crt")
    );
    assert_eq!(c.upstream.client_identity, ClientIdentity::Xclient);
    assert_eq!(c.smtp.max_command_line, 2048);
    assert_eq!(c.timeouts.command.0, Duration::from_secs(300));
    assert_eq!(c.upstream_server_name(), "127.0.0.1");
}

#[test]
fn unknown_key_names_line() {
    let e = err(&format!("{GOOD}\n[smtp]\nmax_comand_line = 600\n"));
    assert!(e.starts_with("/etc/floodgate/test.toml:15:"), "{e}");
    assert!(e.contains("unknown field `max_comand_line`"), "{e}");
}

#[test]
fn bad_enum_names_line() {
    let e = err(&GOOD.replace("\"xclient\"", "\"xclent\""));
    assert!(e.starts_with("/etc/floodgate/test.toml:12:"), "{e}");
    assert!(e.contains("unknown variant `xclent`"), "{e}");
}

#[test]
fn placement_is_even_or_pack() {
    let ok = |text: &str| Config::parse(Path::new("/etc/floodgate/f.toml"), text).unwrap();
    assert_eq!(ok(GOOD).server.placement, Placement::Even);
    let packed = GOOD.replace("[upstream]", "[server]\nplacement = \"pack\"\n[upstream]");
    assert_eq!(ok(&packed).server.placement, Placement::Pack);
    let e = err(&GOOD.replace("[upstream]", "[server]\nplacement = \"tight\"\n[upstream]"));
    assert!(
        e.contains("unknown variant `tight`, expected `even` or `pack`"),
        "{e}"
    );
}

#[test]
fn bad_duration() {
    let e = err(&format!("{GOOD}\n[timeouts]\ncommand = \"5 minutes\"\n"));
    assert!(e.starts_with("/etc/floodgate/test.toml:15:"), "{e}");
    assert!(e.contains("bad duration"), "{e}");
}

#[test]
fn bad_address() {
    let e = err(&GOOD.replace("127.0.0.1:0", "127.0.0.1"));
    assert!(e.starts_with("/etc/floodgate/test.toml:3:"), "{e}");
    assert!(e.contains("invalid socket address"), "{e}");
}

#[test]
fn bad_upstream() {
    let e = err(&GOOD.replace("127.0.0.1:2525", "smarthost"));
    assert!(e.starts_with("/etc/floodgate/test.toml:11:"), "{e}");
    assert!(e.contains("not host:port"), "{e}");
}

#[test]
fn tls_listener_without_certificate() {
    let text = "[[listener]]\naddress = \"127.0.0.1:0\"\ntls = \"implicit\"\n[upstream]\naddress = \"127.0.0.1:25\"\n";
    let e = err(text);
    assert!(e.starts_with("/etc/floodgate/test.toml:3:"), "{e}");
    assert!(e.contains("no [tls] section"), "{e}");
}

#[test]
fn missing_listener() {
    let e = err("[upstream]\naddress = \"127.0.0.1:25\"\n");
    assert!(e.contains("at least one [[listener]]"), "{e}");
}

#[test]
fn bad_trusted_proxy() {
    let e = err(&format!(
        "[server]\ntrusted_proxies = [\"10.0.0.0/40\"]\n{GOOD}"
    ));
    assert!(e.starts_with("/etc/floodgate/test.toml:2:"), "{e}");
    assert!(e.contains("bad prefix length"), "{e}");
}

#[test]
fn unavailable_store() {
    let e = err(&format!("{GOOD}\n[store]\nbackend = \"etcd\"\n"));
    assert!(e.contains("store backend \"etcd\" is not available"), "{e}");
    let e = err(&format!("{GOOD}\n[store]\nbackend = \"redis\"\n"));
    assert!(e.contains("needs url"), "{e}");
}

#[test]
fn redis_store_keys() {
    let text = format!(
        "{GOOD}\n[store]\nbackend = \"redis\"\nurl = \"redis://127.0.0.1:6380\"\ntimeout = \"20ms\"\n\
         failure_mode = \"closed\"\npassword_file = \"pw\"\nkey_prefix = \"fl:\"\n\
         [store.failure_modes]\n\"1h/per_rcpt/\" = \"open\"\n"
    );
    let c = Config::parse(Path::new("/etc/floodgate/f.toml"), &text).unwrap();
    assert_eq!(c.store.backend, "redis");
    assert_eq!(c.store.timeout.0, Duration::from_millis(20));
    assert_eq!(c.store.failure_mode, "closed");
    assert_eq!(c.store.failure_modes["1h/per_rcpt/"], "open");
    assert_eq!(
        c.store.password_file,
        Some(PathBuf::from("/etc/floodgate/pw"))
    );
    let e = err(&format!(
        "{GOOD}\n[store]\nbackend = \"redis\"\nurl = \"redis://x:1\"\nfailure_mode = \"maybe\"\n"
    ));
    assert!(e.contains("failure_mode"), "{e}");
}

#[test]
fn syntax_error() {
    let e = err("[[listener]\n");
    assert!(e.starts_with("/etc/floodgate/test.toml:1:"), "{e}");
}

#[test]
fn small_limits_refused() {
    let e = err(&format!("{GOOD}\n[smtp]\nmax_command_line = 100\n"));
    assert!(e.contains("at least 512"), "{e}");
}

#[test]
fn message_defaults_take_long_lines_lf_only_mail_and_bdat() {
    let c = Config::parse(Path::new("/etc/floodgate/f.toml"), GOOD).unwrap();
    assert_eq!(c.smtp.max_text_line, DEFAULT_MAX_TEXT_LINE);
    assert!(c.smtp.max_text_line > 1000);
    assert_eq!(c.smtp.bare_line_endings, BareLineEndings::Normalize);
    assert!(c.smtp.chunking);
    let text = format!(
        "{GOOD}\n[smtp]\nmax_text_line = 1000\nbare_line_endings = \"reject\"\nchunking = false\n"
    );
    let c = Config::parse(Path::new("/etc/floodgate/f.toml"), &text).unwrap();
    assert_eq!(c.smtp.max_text_line, 1000);
    assert_eq!(c.smtp.bare_line_endings, BareLineEndings::Reject);
    assert!(!c.smtp.chunking);
}

#[test]
fn upstream_chunking_is_on_unless_turned_off_and_must_be_a_boolean() {
    let c = Config::parse(Path::new("/etc/floodgate/f.toml"), GOOD).unwrap();
    assert!(c.upstream.chunking);
    let c = Config::parse(
        Path::new("/etc/floodgate/f.toml"),
        &format!("{GOOD}chunking = false\n"),
    )
    .unwrap();
    assert!(!c.upstream.chunking);
    let e = err(&format!("{GOOD}chunking = \"auto\"\n"));
    assert!(e.starts_with("/etc/floodgate/test.toml:13:12:"), "{e}");
    assert!(e.contains("expected a boolean"), "{e}");
}

#[test]
fn upstream_pipelining_is_on_unless_turned_off_and_must_be_a_boolean() {
    let c = Config::parse(Path::new("/etc/floodgate/f.toml"), GOOD).unwrap();
    assert!(c.upstream.pipelining);
    let c = Config::parse(
        Path::new("/etc/floodgate/f.toml"),
        &format!("{GOOD}pipelining = false\n"),
    )
    .unwrap();
    assert!(!c.upstream.pipelining);
    let e = err(&format!("{GOOD}pipelining = 1\n"));
    assert!(e.starts_with("/etc/floodgate/test.toml:13:14:"), "{e}");
    assert!(e.contains("expected a boolean"), "{e}");
}

#[test]
fn upstream_always_ehlo_is_on_unless_turned_off_and_must_be_a_boolean() {
    let c = Config::parse(Path::new("/etc/floodgate/f.toml"), GOOD).unwrap();
    assert!(c.upstream.always_ehlo);
    let c = Config::parse(
        Path::new("/etc/floodgate/f.toml"),
        &format!("{GOOD}always_ehlo = false\n"),
    )
    .unwrap();
    assert!(!c.upstream.always_ehlo);
    let e = err(&format!("{GOOD}always_ehlo = \"yes\"\n"));
    assert!(e.starts_with("/etc/floodgate/test.toml:13:15:"), "{e}");
    assert!(e.contains("expected a boolean"), "{e}");
}

#[test]
fn bad_message_keys_are_named() {
    let e = err(&format!("{GOOD}\n[smtp]\nmax_text_line = 999\n"));
    assert!(e.contains("max_text_line must be at least 1000"), "{e}");
    let e = err(&format!("{GOOD}\n[smtp]\nchunking = \"yes\"\n"));
    assert!(e.starts_with("/etc/floodgate/test.toml:15:"), "{e}");
    assert!(e.contains("expected a boolean"), "{e}");
    let e = err(&format!("{GOOD}\n[smtp]\nbare_line_endings = \"strip\"\n"));
    assert!(e.contains("unknown variant `strip`"), "{e}");
}

#[test]
fn zero_max_message_size_is_refused() {
    let e = err(&format!("{GOOD}\n[smtp]\nmax_message_size = 0\n"));
    assert!(e.contains("max_message_size must be at least 1"), "{e}");
}

#[test]
fn listener_requirements_default_off_and_read_as_booleans() {
    let c = Config::parse(Path::new("/etc/floodgate/f.toml"), GOOD).unwrap();
    assert!(!c.listeners[0].require_tls && !c.listeners[0].require_auth);
    let text = GOOD.replace(
        "tls = \"starttls\"\n",
        "tls = \"starttls\"\nrequire_tls = true\nrequire_auth = true\n",
    );
    let c = Config::parse(Path::new("/etc/floodgate/f.toml"), &text).unwrap();
    assert!(c.listeners[0].require_tls && c.listeners[0].require_auth);
}

#[test]
fn listener_requirements_of_the_wrong_type_name_their_line() {
    for (key, value) in [
        ("require_tls", "\"yes\""),
        ("require_auth", "1"),
        ("require_tls", "\"true\""),
    ] {
        let e = err(&GOOD.replace(
            "tls = \"starttls\"\n",
            &format!("tls = \"starttls\"\n{key} = {value}\n"),
        ));
        assert!(e.starts_with("/etc/floodgate/test.toml:5:"), "{e}");
        assert!(e.contains("expected a boolean"), "{e}");
    }
}

#[test]
fn requirements_no_client_could_meet_are_refused() {
    let plain = |keys: &str, auth_without_tls: bool| {
        format!(
            "[[listener]]\nname = \"relay\"\naddress = \"127.0.0.1:0\"\n{keys}\n\
             [tls]\ncertificate = \"c.crt\"\nprivate_key = \"c.key\"\nauth_without_tls = {auth_without_tls}\n\
             [upstream]\naddress = \"127.0.0.1:25\"\n"
        )
    };
    let e = err(&plain("require_tls = true", true));
    assert!(
        e.contains("listener relay has require_tls = true but tls = \"none\""),
        "{e}"
    );
    let e = err(&plain("require_auth = true", false));
    assert!(
        e.contains("listener relay has require_auth = true but tls = \"none\""),
        "{e}"
    );
    assert!(e.contains("auth_without_tls = false"), "{e}");
    assert!(e.starts_with("/etc/floodgate/test.toml:1:"), "{e}");
    // AUTH in the clear allowed: require_auth can be met on a plain listener.
    let c = Config::parse(
        Path::new("/etc/f.toml"),
        &plain("require_auth = true", true),
    )
    .unwrap();
    assert!(c.listeners[0].require_auth);
}

#[test]
fn log_queue_defaults_and_bounds() {
    let c = Config::parse(Path::new("/etc/floodgate/f.toml"), GOOD).unwrap();
    assert_eq!(c.log.queue, 65_536);
    let c = Config::parse(
        Path::new("/etc/floodgate/f.toml"),
        &format!("{GOOD}\n[log]\nqueue = 1\n"),
    )
    .unwrap();
    assert_eq!(c.log.queue, 1);
    for bad in ["0", "16777217"] {
        let e = err(&format!("{GOOD}\n[log]\nqueue = {bad}\n"));
        assert!(
            e.contains("[log] queue must be between 1 and 16777216"),
            "{e}"
        );
    }
    let e = err(&format!("{GOOD}\n[log]\nqueue = -5\n"));
    assert!(e.starts_with("/etc/floodgate/test.toml:"), "{e}");
    let e = err(&format!("{GOOD}\n[log]\nqueue = \"big\"\n"));
    assert!(e.contains("invalid type"), "{e}");
}
