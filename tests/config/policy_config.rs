//! Every bad policy value is refused with file:line:column and what is wrong.

use std::path::Path;

use floodgate::generation::Generation;

const HEAD: &str =
    "[[listener]]\naddress = \"127.0.0.1:0\"\n[upstream]\naddress = \"127.0.0.1:2525\"\n";
const FILE: &str = "/etc/floodgate/t.toml";

/// Parses HEAD + `body`; the error must point at the first occurrence of `marker` (the
/// occurrence after `after`, when given) and contain `message`.
fn refused_at(body: &str, marker: &str, message: &str) {
    let text = format!("{HEAD}{body}");
    let e = match Generation::parse(Path::new(FILE), &text) {
        Ok(_) => panic!("accepted:\n{body}"),
        Err(e) => e.to_string(),
    };
    let off = text
        .find(marker)
        .unwrap_or_else(|| panic!("no {marker:?} in the text"));
    let line = text[..off].matches('\n').count() + 1;
    let col = off - text[..off].rfind('\n').map_or(0, |i| i + 1) + 1;
    let want = format!("{FILE}:{line}:{col}: ");
    assert!(e.starts_with(&want), "want {want}… got: {e}");
    assert!(e.contains(message), "want {message:?} in: {e}");
}

fn accepted(body: &str) -> Generation {
    Generation::parse(Path::new(FILE), &format!("{HEAD}{body}")).unwrap_or_else(|e| panic!("{e}"))
}

#[test]
fn words() {
    let base = "[[limit]]\nratelimit = \"10 / 1h\"\n";
    refused_at(
        &format!("{base}stage = \"rpct\"\n"),
        "\"rpct\"",
        "unknown stage \"rpct\"",
    );
    refused_at(
        &format!("{base}action = \"reject\"\n"),
        "\"reject\"",
        "unknown action \"reject\"",
    );
    refused_at(
        &format!("{base}mode = \"strict\"\n"),
        "\"strict\"",
        "write the mode inside the string",
    );
    refused_at(
        "[[limit]]\nrate = \"1 / 1m\"\nburst = \"1\"\ncount = \"mails\"\n",
        "\"mails\"",
        "unknown count \"mails\"",
    );
    refused_at(
        "[[limit]]\nrate = \"1 / 1m\"\nburst = \"1\"\ncount = \"messages\"\nalgorithm = \"leaky\"\n",
        "\"leaky\"",
        "unknown algorithm",
    );
    refused_at(
        "[[limit]]\nrate = \"1 / 1m\"\nburst = \"1\"\ncount = \"messages\"\nmode = \"lazy\"\n",
        "\"lazy\"",
        "unknown mode",
    );
    refused_at(
        &format!("{base}colour = \"red\"\n"),
        "colour",
        "unknown field `colour`",
    );
}

#[test]
fn rates() {
    refused_at(
        "[[limit]]\nratelimit = \"10 / 1 hour\"\n",
        "\"10 / 1 hour\"",
        "\"1 hour\" is not a time value",
    );
    refused_at(
        "[[limit]]\nratelimit = \"ten / 1h\"\n",
        "\"ten",
        "is not a positive number",
    );
    refused_at(
        "[[limit]]\nname = \"x\"\nratelimit = \"1 / 1h\"\nrate = \"1 / 1m\"\n",
        "\"x\"",
        "give exactly one of",
    );
    refused_at(
        "[[limit]]\nname = \"none\"\n",
        "\"none\"",
        "give exactly one of",
    );
    refused_at(
        "[[limit]]\nrate = \"1 / 1m\"\ncount = \"messages\"\n",
        "\"1 / 1m\"",
        "needs a `burst`",
    );
    refused_at(
        "[[limit]]\nrate = \"1 / 1m\"\nburst = \"3\"\n",
        "\"1 / 1m\"",
        "say what is counted",
    );
    refused_at(
        "[[limit]]\nrate = \"1 / 1w\"\nburst = \"3\"\ncount = \"messages\"\n",
        "\"1 / 1w\"",
        "is not a period",
    );
    refused_at(
        "[[limit]]\nratelimit = \"1 / 1h\"\nburst = \"3\"\n",
        "\"3\"",
        "`burst` goes with `rate`",
    );
    refused_at(
        "[[limit]]\nrate = \"1 / 1m\"\nburst = \"3\"\ncount = \"messages\"\ndynamic = true\n",
        "true",
        "`dynamic` is for algorithm = \"bucket\"",
    );
    refused_at(
        "[[limit]]\nrate = \"1 / 1m\"\nburst = \"3\"\ncount = \"messages\"\nalgorithm = \"bucket\"\nmode = \"strict\"\n",
        "\"strict\"",
        "a bucket reserves and commits",
    );
    refused_at(
        "[[limit]]\nrate = \"1 / 1m\"\nburst = \"3\"\ncount = \"messages\"\nmode = \"readonly\"\n",
        "\"readonly\"",
        "readonly is for Exim",
    );
    refused_at(
        "[[limit]]\nrate = \"1 / 1m\"\nburst = \"3\"\ncount = \"distinct_recipients\"\n",
        "\"distinct_recipients\"",
        "needs `max` (sessions) or an Exim `ratelimit`",
    );
    refused_at("[[limit]]\nmax = 0\n", "0\n", "max must be at least 1");
    refused_at(
        "[[limit]]\nmax = 2\ncount = \"messages\"\n",
        "2\n",
        "`max` is for count = \"sessions\"",
    );
}

#[test]
fn exim_rules() {
    refused_at(
        "[[limit]]\nratelimit = \"10 / 1h / per_addr / leaky\"\nstage = \"mail\"\n",
        "\"10 / 1h / per_addr",
        "must not have /leaky or /strict option, or cannot be used in MAIL ACL",
    );
    refused_at(
        "[[limit]]\nratelimit = \"10 / 1h / per_rcpt\"\ncount = \"bytes\"\n",
        "\"bytes\"",
        "disagrees with the ratelimit string",
    );
    refused_at(
        "[[limit]]\nratelimit = \"10 / 1h / ${authenticated_id}\"\nkey = \"${client_ip}\"\n",
        "\"${client_ip}\"",
        "give the key in one place",
    );
    refused_at(
        "[[limit]]\nratelimit = \"10 / 1h / ${authenticated}\"\n",
        "\"10 / 1h / ${authenticated}",
        "unknown variable `${authenticated}`",
    );
    refused_at(
        "[[limit]]\nratelimit = \"10 / 1h / per_cmd\"\ncount = \"auth_failures\"\nstage = \"mail\"\n",
        "\"mail\"",
        "auth_failures are counted at stage \"auth\"",
    );
}

#[test]
fn templates_and_conditions_point_inside_the_string() {
    refused_at(
        "[[limit]]\nratelimit = \"10 / 1h\"\nkey = \"u-${nope}\"\n",
        "${nope}",
        "unknown variable `${nope}`",
    );
    refused_at(
        "[[limit]]\nratelimit = \"10 / 1h\"\nkey = \"${client_ip/33}\"\n",
        "${client_ip/33}",
        "prefix length `33`",
    );
    refused_at(
        "[[limit]]\nratelimit = \"10 / 1h\"\nmessage = \"4.7.1 over $\"\n",
        "$\"",
        "must be followed by a variable name",
    );
    refused_at(
        "[[limit]]\nratelimit = \"10 / 1h\"\nwhen = \"authenticated && client_ip in nowhere\"\n",
        "nowhere",
        "no list called `nowhere`",
    );
    refused_at(
        "[[limit]]\nratelimit = \"10 / 1h\"\nwhen = \"authenticated & tls\"\n",
        "& tls",
        "unexpected character",
    );
    refused_at(
        "[[limit]]\nratelimit = \"10 / 1h\"\nwhen = \"athenticated\"\n",
        "athenticated",
        "unknown word `athenticated`",
    );
    // Text after == / != is quoted; a bare word is refused at the word.
    refused_at(
        "[[limit]]\nratelimit = \"10 / 1h\"\nwhen = 'authenticated && listener != relay'\n",
        "relay'",
        "`relay` after `!=` is not quoted",
    );
    refused_at(
        "[[limit]]\nratelimit = \"10 / 1h\"\nwhen = \"helo == mail.example.org\"\n",
        "mail.example.org",
        "(`helo == \"mail.example.org\"`)",
    );
    accepted("[[limit]]\nratelimit = \"10 / 1h\"\nwhen = 'helo == \"mail.example.org\"'\n");
}

#[test]
fn countermeasures() {
    let base = "[[limit]]\nratelimit = \"10 / 1h\"\n";
    refused_at(
        &format!("{base}action = \"delay\"\n"),
        "\"delay\"",
        "needs `delay`",
    );
    refused_at(
        &format!("{base}action = \"delay\"\ndelay = \"soon\"\n"),
        "\"soon\"",
        "bad duration",
    );
    refused_at(
        &format!("{base}action = \"delay\"\ndelay = \"40s\"\n"),
        "\"40s\"",
        "longer than max_delay (30s)",
    );
    refused_at(
        &format!("{base}action = \"delay\"\ndelay = \"1s\"\nmax_delay = \"10m\"\n"),
        "\"10m\"",
        "at most 120s",
    );
    refused_at(
        &format!("{base}delay = \"1s\"\n"),
        "\"1s\"",
        "`delay` goes with action = \"delay\"",
    );
    refused_at(
        &format!("{base}code = 550\n"),
        "550",
        "does not fit action \"defer\"",
    );
    refused_at(
        &format!("{base}action = \"deny\"\ncode = 451\n"),
        "451",
        "does not fit action \"deny\"",
    );
    refused_at(
        &format!("{base}action = \"disconnect\"\ncode = 450\n"),
        "450",
        "does not fit",
    );
    refused_at(
        "[[limit]]\nname = \"a\"\nratelimit = \"1 / 1h\"\n[[limit]]\nname = \"a\"\nratelimit = \"2 / 1h\"\n",
        "\"a\"\nratelimit = \"2",
        "two limits are called \"a\"",
    );
    refused_at(
        "[auth_failures]\nmax_delay = \"5m\"\n",
        "[[listener]]",
        "max_delay must be at most 120s",
    );
    refused_at(
        "[auth_failures]\nbase_delay = \"often\"\n",
        "\"often\"",
        "bad duration",
    );
}

#[test]
fn lists() {
    refused_at(
        "[lists]\nbulk = { entries = [\"10.0.0.0/8 5\", \"10.0.0.0/99 7\"] }\n",
        "10.0.0.0/99",
        "list bulk: \"10.0.0.0/99\" has a bad prefix length",
    );
    refused_at(
        "[lists]\nbulk = { entries = [\"a b c\"] }\n",
        "c\"]",
        "unexpected \"c\"",
    );
    refused_at(
        "[lists]\nbulk = { file = \"x\", entries = [] }\n",
        "{ file",
        "give exactly one of `file` or `entries`",
    );
    refused_at(
        "[lists]\nbulk = { file = \"does-not-exist.txt\" }\n",
        "\"does-not-exist.txt\"",
        "list bulk: cannot read /etc/floodgate/does-not-exist.txt",
    );
    refused_at(
        "[lists]\nbulk = { entries = [\"10.0.0.0/8 many\"] }\n[[limit]]\nratelimit = \"10 / 1h\"\nlimit_list = \"bulk\"\n",
        "\"bulk\"\n",
        "has the value \"many\", which is not a limit",
    );
    refused_at(
        "[[limit]]\nratelimit = \"10 / 1h\"\nlimit_list = \"bulk\"\n",
        "\"bulk\"",
        "no list called \"bulk\"",
    );
    refused_at(
        "[lists]\nbulk = { entries = [] }\n[[limit]]\nratelimit = \"10 / 1h\"\nlimit_list = \"bulk\"\nlimit_by = \"ip\"\n",
        "\"ip\"",
        "limit_by \"ip\" is not one of",
    );
    refused_at(
        "[lists]\nbulk = { entries = [], colour = 1 }\n",
        "colour",
        "unknown field `colour`",
    );
}

#[test]
fn list_file_errors_name_the_list_file() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("bulk.txt"),
        "# hosts\n10.0.0.0/8 500\n  192.0.2.0/33 9\n",
    )
    .unwrap();
    let cfg = dir.path().join("f.toml");
    std::fs::write(
        &cfg,
        format!("{HEAD}[lists]\nbulk = {{ file = \"bulk.txt\" }}\n"),
    )
    .unwrap();
    let e = Generation::load(&cfg).unwrap_err().to_string();
    let want = format!("{}:3:3: list bulk:", dir.path().join("bulk.txt").display());
    assert!(e.starts_with(&want), "{e}");
    // A good file loads, relative to the config's directory.
    std::fs::write(dir.path().join("bulk.txt"), "10.0.0.0/8 500\n").unwrap();
    let c = Generation::load(&cfg).unwrap();
    assert_eq!(c.policy.lists.summary(), vec![("bulk".to_string(), 1)]);
}

#[test]
fn defaults_are_understood() {
    let c = accepted(
        "[lists]\ntrusted = { entries = [\"10.0.0.0/8\"] }\n\
         [[limit]]\nname = \"u\"\nratelimit = \"1000 / 1d / per_rcpt / strict / ${authenticated_id}\"\nwhen = \"authenticated && !(client_ip in trusted)\"\n\
         [[limit]]\nname = \"b\"\ncount = \"bytes\"\nrate = \"10m / 1h\"\nburst = \"20m\"\n\
         [[limit]]\nname = \"c\"\nmax = 10\nkey = \"${authenticated_id}\"\n",
    );
    let l = &c.policy.limits;
    assert_eq!(l.len(), 3);
    assert_eq!(l[0].stage.as_str(), "rcpt");
    assert_eq!(l[0].action.as_str(), "defer");
    assert_eq!(l[1].stage.as_str(), "message");
    // A per-user concurrency limit is taken when the user is known: at MAIL.
    assert_eq!(l[2].stage.as_str(), "mail");
    assert_eq!(l[0].line, 8);
}

#[test]
fn identity_values_are_refused_where_they_are_written() {
    refused_at(
        "[identity]\nlogin_fold = \"upper\"\n",
        "\"upper\"",
        "unknown variant `upper`, expected `lowercase` or `exact`",
    );
    refused_at(
        "[identity]\ndefault_realm = \"@example.org\"\n",
        "\"@example.org\"",
        "[identity] default_realm \"@example.org\" is not a domain: a realm is what follows the @",
    );
    refused_at(
        "[identity]\ndefault_realm = \"exa mple.org\"\n",
        "\"exa mple.org\"",
        "only ASCII letters, digits, hyphens and dots",
    );
    refused_at(
        "[identity]\nrealm = \"example.org\"\n",
        "realm",
        "unknown field `realm`",
    );
}

#[test]
fn identity_is_compiled_into_the_policy() {
    let c = accepted("[identity]\nlogin_fold = \"exact\"\ndefault_realm = \"Example.org\"\n");
    let id = &c.policy.identity;
    assert_eq!(id.fold("Alice"), "Alice@Example.org");
    let c = accepted("[identity]\ndefault_realm = \"Example.org\"\n");
    assert_eq!(c.policy.identity.fold("Alice"), "alice@example.org");
    assert_eq!(accepted("").policy.identity.fold("ALICE"), "alice");
}
