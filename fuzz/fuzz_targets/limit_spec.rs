//! Fuzz target: Exim limit strings and Rspamd rate/burst strings.
//!
//! Checks that parsing never panics, that an accepted Exim spec prints to a
//! form that parses back to the same meaning, that resolving it for every
//! ACL never panics, and that one evaluation through the store is sane.
#![no_main]

use floodgate::limit::bucket::BucketSpec;
use floodgate::limit::rate::{parse_burst, Rate};
use floodgate::limit::spec::Acl;
use floodgate::limit::unique::UniqueKind;
use floodgate::limit::LimitSpec;
use floodgate::store::{Algorithm, Decision, LimitRequest, MemoryStore};
use libfuzzer_sys::fuzz_target;

const ACLS: [Acl; 23] = [
    Acl::Rcpt,
    Acl::Mail,
    Acl::Predata,
    Acl::Mime,
    Acl::Dkim,
    Acl::Data,
    Acl::Prdr,
    Acl::NotSmtp,
    Acl::Auth,
    Acl::Atrn,
    Acl::Connect,
    Acl::Etrn,
    Acl::Expn,
    Acl::Helo,
    Acl::MailAuth,
    Acl::NotSmtpStart,
    Acl::NotQuit,
    Acl::Quit,
    Acl::StartTls,
    Acl::WellKnown,
    Acl::Vrfy,
    Acl::Delivery,
    Acl::Unknown,
];

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let _ = Rate::parse(text);
    let _ = parse_burst(text);
    let _ = BucketSpec::parse_simple(text);
    let Ok(spec) = LimitSpec::parse(text) else {
        return;
    };
    let printed = spec.to_string();
    let again = LimitSpec::parse(&printed).expect("printed spec parses");
    assert_eq!(
        again.database_key("k", "ip"),
        spec.database_key("k", "ip"),
        "{printed}"
    );
    assert_eq!(again.update_mode(), spec.update_mode());
    assert_eq!(again.unique(), spec.unique());
    assert_eq!(again.period_secs(), spec.period_secs());
    assert_eq!(again.limit().to_bits(), spec.limit().to_bits());
    for acl in ACLS {
        let a = format!("{:?}", spec.resolve(acl));
        let b = format!("{:?}", again.resolve(acl));
        assert_eq!(a, b, "{printed} in {acl:?}");
    }
    let store = MemoryStore::default();
    let d = Decision {
        limits: vec![LimitRequest {
            key: spec.database_key("k", "ip"),
            algorithm: Algorithm::Ewma {
                limit: spec.limit(),
                period_secs: spec.period_secs(),
                mode: spec.update_mode(),
                unique_kind: UniqueKind::Bloom,
            },
            count: spec.default_count(),
            unique: spec.unique().map(str::to_string),
            blocking: true,
        }],
    };
    for t in [0, 1, 1_000_000] {
        let r = store.decide_at(t, &d);
        assert!(r.limits[0].value >= 0.0 || r.limits[0].value.is_nan());
    }
});
