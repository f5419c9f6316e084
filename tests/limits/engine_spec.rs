//! Exim limit-string parsing (exim-ratelimit.md §1–3) and every error
//! message of §11; Rspamd-style bucket strings.

use floodgate::limit::bucket::BucketSpec;
use floodgate::limit::gcra::GcraSpec;
use floodgate::limit::rate::Rate;
use floodgate::limit::spec::{Acl, CacheScope, CountSource, PerMode, UpdateMode, PER_ADDR_UNIQUE};
use floodgate::limit::{LimitSpec, SpecError};

fn err(text: &str) -> String {
    LimitSpec::parse(text).unwrap_err().to_string()
}

fn acl_err(text: &str, acl: Acl) -> String {
    LimitSpec::parse(text)
        .unwrap()
        .resolve(acl)
        .unwrap_err()
        .to_string()
}

#[test]
fn section_11_messages() {
    assert_eq!(err(""), "sender rate limit not set");
    assert_eq!(err("   "), "sender rate limit not set");
    assert_eq!(err("x/1h"), "\"x\" is not a positive number");
    assert_eq!(err("-1/1h"), "\"-1\" is not a positive number");
    assert_eq!(err("4 k/1h"), "\"4 k\" is not a positive number");
    assert_eq!(err("4"), "\"NULL\" is not a time value");
    assert_eq!(err("4/3600"), "\"3600\" is not a time value");
    assert_eq!(err("4/1.5h"), "\"1.5h\" is not a time value");
    assert_eq!(err("4/0s"), "\"0s\" is not a time value");
    assert_eq!(
        err("4/1h/count=abc"),
        "\"count=abc\" is not a positive number"
    );
    assert_eq!(
        err("4/1h/count=-1"),
        "\"count=-1\" is not a positive number"
    );
    assert_eq!(err("4/1h/per_rcpt/per_mail"), "conflicting per_* options");
    assert_eq!(err("4/1h/per_rcpt/per_rcpt"), "conflicting per_* options");
    assert_eq!(err("4/1h/per_byte/per_mail"), "conflicting per_* options");
    assert_eq!(err("4/1h/leaky/strict"), "conflicting update modes");
    assert_eq!(err("4/1h/readonly/strict"), "conflicting update modes");
    assert_eq!(
        acl_err("4/1h/per_rcpt/leaky", Acl::Mail),
        "\"per_rcpt\" must not have /leaky or /strict option, or cannot be used in MAIL ACL"
    );
    assert_eq!(
        acl_err("4/1h/per_addr/strict", Acl::Data),
        "\"per_rcpt\" must not have /leaky or /strict option, or cannot be used in DATA ACL"
    );
    assert_eq!(
        acl_err("4/1h/per_byte/strict", Acl::Connect),
        "\"per_mail\" must not have /leaky or /strict option, or cannot be used in connection ACL"
    );
    assert_eq!(
        acl_err("4/1h/per_conn/leaky", Acl::NotSmtpStart),
        "\"per_conn\" must not have /leaky or /strict option, or cannot be used in non-SMTP-start ACL"
    );
    assert_eq!(
        acl_err("4/1h/per_mail/leaky", Acl::Helo),
        "\"per_mail\" must not have /leaky or /strict option, or cannot be used in EHLO or HELO ACL"
    );
}

#[test]
fn errors_in_item_order() {
    // limit first, then period, then options; conflicts only after all items.
    assert!(matches!(
        LimitSpec::parse("x/3600"),
        Err(SpecError::BadLimit(_))
    ));
    assert!(matches!(
        LimitSpec::parse("4/3600/count=x"),
        Err(SpecError::BadPeriod(_))
    ));
    assert!(matches!(
        LimitSpec::parse("4/1h/per_rcpt/per_mail/count=x"),
        Err(SpecError::BadCount(_))
    ));
    assert!(matches!(
        LimitSpec::parse("4/1h/leaky/strict/per_rcpt/per_mail"),
        Err(SpecError::ConflictingPer)
    ));
}

#[test]
fn limit_numbers() {
    let m = |t: &str| LimitSpec::parse(&format!("{t}/1h")).unwrap().limit();
    assert_eq!(m("10"), 10.0);
    assert_eq!(m("10K"), 10240.0);
    assert_eq!(m("2m"), 2.0 * 1024.0 * 1024.0);
    assert_eq!(m("1G"), 1024.0 * 1024.0 * 1024.0);
    assert_eq!(m("1.5k"), 1536.0);
    assert_eq!(m("1e2"), 100.0);
    assert_eq!(m("0x10"), 16.0);
    assert_eq!(m(""), 0.0);
    assert_eq!(m("inf"), f64::INFINITY);
    assert!(m("nan").is_nan());
    assert!(LimitSpec::parse("10kk/1h").is_err());
    assert!(LimitSpec::parse("10x/1h").is_err());
    let s = LimitSpec::parse(" 10K / 8h30m ").unwrap();
    assert_eq!(s.limit_text(), "10K");
    assert_eq!((s.period_text(), s.period_secs()), ("8h30m", 30600));
}

#[test]
fn options_and_keys() {
    let s = LimitSpec::parse("4/1h/a/per_rcpt/b").unwrap();
    assert_eq!(s.key_text(), Some("a/b"));
    assert_eq!(s.per_option(), Some(PerMode::Rcpt));
    let s = LimitSpec::parse("4/1h/LeAkY/Per_Rcpt").unwrap();
    assert_eq!(s.update_mode(), UpdateMode::Leaky);
    assert_eq!(s.key_text(), None);
    // A typo becomes the key.
    assert_eq!(
        LimitSpec::parse("4/1h/leakey").unwrap().key_text(),
        Some("leakey")
    );
    // key= has no meaning.
    assert_eq!(
        LimitSpec::parse("4/1h/key=1.2.3.4").unwrap().key_text(),
        Some("key=1.2.3.4")
    );
    // // is a slash; trailing / adds nothing; an empty item is kept.
    assert_eq!(
        LimitSpec::parse("4/1h/a//b/").unwrap().key_text(),
        Some("a/b")
    );
    assert_eq!(LimitSpec::parse("4/1h/ /x").unwrap().key_text(), Some("/x"));
    // Templates stay opaque.
    let s = LimitSpec::parse("1000 / 1d / per_rcpt / strict / ${authenticated_id}").unwrap();
    assert_eq!(s.key_text(), Some("${authenticated_id}"));
    assert_eq!(s.update_mode(), UpdateMode::Strict);
    assert_eq!(s.database_key("alice", "192.0.2.1"), "1d/per_rcpt/alice");
    let s = LimitSpec::parse("10/1h/per_mail/unique=${local_part}@${domain}").unwrap();
    assert_eq!(s.unique(), Some("${local_part}@${domain}"));
    // A slash inside a template variable is the variable's, written plain or doubled.
    let net =
        LimitSpec::parse("3 / 1h / per_mail / unique=${client_ip/24/64} / ${authenticated_id}")
            .unwrap();
    assert_eq!(net.unique(), Some("${client_ip/24/64}"));
    assert_eq!(net.key_text(), Some("${authenticated_id}"));
    let doubled =
        LimitSpec::parse("3/1h/per_mail/unique=${client_ip//24//64}/${authenticated_id}").unwrap();
    assert_eq!(doubled.unique(), net.unique());
    assert_eq!(
        LimitSpec::parse(&net.to_string()).unwrap().unique(),
        net.unique()
    );
    // Only a closed variable of name characters and slashes holds its slashes: an unclosed
    // `${` is plain text, and the printed spec reads back the same.
    let open = LimitSpec::parse("100 / 2d / per_rcpt / pt / strict /d${authentd_idu").unwrap();
    assert_eq!(open.key_text(), Some("pt/d${authentd_idu"));
    let again = LimitSpec::parse(&open.to_string()).unwrap();
    assert_eq!(again.key_text(), open.key_text());
    assert_eq!(again.database_key("k", ""), open.database_key("k", ""));
    // Outside a variable a slash still separates: `$x/y` is two items.
    assert_eq!(
        LimitSpec::parse("4/1h/${a}/b").unwrap().key_text(),
        Some("${a}/b")
    );
    assert_eq!(
        s.database_key("", "192.0.2.1"),
        "1h/per_mail/unique/192.0.2.1"
    );
    let s = LimitSpec::parse("10/1h/unique=A=B").unwrap();
    assert_eq!(s.unique(), Some("A=B"));
    assert_eq!(
        LimitSpec::parse("3/1h/per_addr").unwrap().unique(),
        Some(PER_ADDR_UNIQUE)
    );
    // noupdate overrides leaky/strict.
    assert_eq!(
        LimitSpec::parse("4/1h/strict/noupdate")
            .unwrap()
            .update_mode(),
        UpdateMode::Readonly
    );
    assert_eq!(
        LimitSpec::parse("4/1h/readonly/noupdate")
            .unwrap()
            .update_mode(),
        UpdateMode::Readonly
    );
}

#[test]
fn database_keys() {
    let k = |t: &str| LimitSpec::parse(t).unwrap().database_key("K", "10.0.0.1");
    assert_eq!(k("4/1h/per_rcpt/A"), "1h/per_rcpt/K");
    assert_eq!(k("4/1h/per_rcpt"), "1h/per_rcpt/10.0.0.1");
    assert_eq!(k("4/60m/per_rcpt"), "60m/per_rcpt/10.0.0.1");
    assert_eq!(k("4/1h/per_byte"), "1h/per_mail/10.0.0.1");
    assert_eq!(k("4/1h"), "1h/per_mail/10.0.0.1");
    assert_eq!(k("4/1h/per_addr"), "1h/per_rcpt/unique/10.0.0.1");
    assert_eq!(k("4/1h/per_cmd/strict"), "1h/per_cmd/10.0.0.1");
    assert_eq!(k("99/1h/per_conn/count=7"), "1h/per_conn/10.0.0.1");
    assert_eq!(
        LimitSpec::parse("4/1h").unwrap().database_key("", ""),
        "1h/per_mail/"
    );
}

#[test]
fn counts_in_item_order() {
    let c = |t: &str, acl| LimitSpec::parse(t).unwrap().resolve(acl).unwrap().count;
    assert_eq!(
        c("0/1h/per_byte/count=5", Acl::Data),
        CountSource::Fixed(5.0)
    );
    assert_eq!(
        c("0/1h/count=5/per_byte", Acl::Data),
        CountSource::MessageSize
    );
    assert_eq!(c("0/1h/per_rcpt", Acl::Rcpt), CountSource::Fixed(1.0));
    assert_eq!(c("0/1h/per_rcpt", Acl::Data), CountSource::RecipientsCount);
    assert_eq!(
        c("0/1h/count=5/per_rcpt", Acl::Rcpt),
        CountSource::Fixed(5.0)
    );
    assert_eq!(c("0/1h/count=", Acl::Rcpt), CountSource::Fixed(0.0));
    assert_eq!(
        c("0/1h/count=5/readonly", Acl::Rcpt),
        CountSource::Fixed(0.0)
    );
    assert_eq!(
        LimitSpec::parse("0/1h/count=2.5").unwrap().count(),
        Some(2.5)
    );
    assert!(LimitSpec::parse("0/1h/count=5k").is_err());
    // One RCPT ACL evaluation: count= in force whatever per_rcpt's place.
    let rc = |t: &str| LimitSpec::parse(t).unwrap().rcpt_count();
    assert_eq!(rc("10/1h/count=3/per_rcpt"), 3.0);
    assert_eq!(rc("10/1h/per_rcpt/count=3"), 3.0);
    assert_eq!(rc("10/1h/per_rcpt"), 1.0);
    assert_eq!(rc("10/1h/count=3/per_byte"), 1.0);
    assert_eq!(rc("10/1h/per_byte/count=3"), 3.0);
    assert_eq!(rc("10/1h/count=3/readonly"), 0.0);
}

#[test]
fn with_unique_is_a_unique_item() {
    let s = LimitSpec::parse("10/1h/per_rcpt/${authenticated_id}").unwrap();
    let u = s.with_unique("x@example.net");
    assert_eq!(u.unique(), Some("x@example.net"));
    assert_eq!(u.database_key("alice", ""), "1h/per_rcpt/unique/alice");
    assert_eq!(
        u,
        LimitSpec::parse("10/1h/per_rcpt/${authenticated_id}/unique=x@example.net").unwrap()
    );
    assert_eq!(s.database_key("alice", ""), "1h/per_rcpt/alice");
}

#[test]
fn acl_resolution() {
    let r = |t: &str, acl| LimitSpec::parse(t).unwrap().resolve(acl).unwrap();
    // No per_* option: no ACL check at all.
    let x = r("10/1h", Acl::Connect);
    assert_eq!(
        (x.update, x.cache, x.forced_readonly),
        (UpdateMode::Leaky, CacheScope::Message, false)
    );
    // per_rcpt in MAIL is forced readonly (without leaky/strict it is no error).
    let x = r("10/1h/per_rcpt", Acl::Mail);
    assert_eq!(
        (x.update, x.count, x.cache),
        (
            UpdateMode::Readonly,
            CountSource::Fixed(0.0),
            CacheScope::Command
        )
    );
    // leaky/noupdate is how to write it where per_* forces readonly.
    assert_eq!(
        r("10/1h/per_rcpt/leaky/noupdate", Acl::Mail).update,
        UpdateMode::Readonly
    );
    assert_eq!(r("10/1h/per_rcpt", Acl::Rcpt).cache, CacheScope::Command);
    assert_eq!(r("10/1h/per_rcpt", Acl::Data).cache, CacheScope::Message);
    assert_eq!(r("10/1h/per_conn", Acl::Rcpt).cache, CacheScope::Connection);
    assert_eq!(r("10/1h/per_cmd", Acl::Quit).cache, CacheScope::Command);
    assert_eq!(r("10/1h/per_addr", Acl::Rcpt).update, UpdateMode::Leaky);
    assert_eq!(r("10/1h/per_addr", Acl::Data).update, UpdateMode::Readonly);
    assert_eq!(
        r("10/1h/per_conn", Acl::NotSmtp).update,
        UpdateMode::Readonly
    );
    assert_eq!(
        r("10/1h/per_mail/strict", Acl::Prdr).update,
        UpdateMode::Strict
    );
}

#[test]
fn display_reparses() {
    for text in [
        "4/1h/per_rcpt/leaky/a//b",
        "10K/8h30m/per_byte/count=3/strict",
        "3/1h/per_addr/${authenticated_id}",
        "5/1d/unique=${sender_address}/readonly/noupdate",
        "5/1d/count=5/per_rcpt",
        "5/1d/count=5/per_byte/count=7",
        "3/1h/ /unique=x",
        "3/1h/ ",
        "3/1h/ /x",
    ] {
        let s = LimitSpec::parse(text).unwrap();
        let again = LimitSpec::parse(&s.to_string()).unwrap();
        assert_eq!(
            again.database_key("k", "ip"),
            s.database_key("k", "ip"),
            "{text}"
        );
        assert_eq!(again.update_mode(), s.update_mode());
        assert_eq!(again.count(), s.count());
        assert_eq!(again.unique(), s.unique());
        assert_eq!(again.limit_text(), s.limit_text());
        for acl in [Acl::Rcpt, Acl::Mail, Acl::Data, Acl::Connect] {
            assert_eq!(again.resolve(acl), s.resolve(acl), "{text} in {acl:?}");
        }
    }
}

#[test]
fn rspamd_strings() {
    let b = BucketSpec::parse("100", "10 / 1min").unwrap();
    assert_eq!(b.burst, 100.0);
    assert!((b.rate.per_second() - 10.0 / 60.0).abs() < 1e-15);
    let b = BucketSpec::parse_simple("2 / 5m").unwrap();
    assert_eq!((b.burst, b.rate.per_second()), (2.0, 2.0 / 300.0));
    assert!(BucketSpec::parse("1k", "1 / 1d").is_ok());
    assert!(BucketSpec::parse("0", "1 / 1d").is_err());
    let g = GcraSpec::new(5.0, Rate::parse("100 / 1h").unwrap()).unwrap();
    assert_eq!(g.emission_ns(), 36e9);
    assert_eq!(GcraSpec::parse("5", "100 / 1h").unwrap(), g);
    assert!(GcraSpec::parse("0", "100 / 1h").is_err());
}
