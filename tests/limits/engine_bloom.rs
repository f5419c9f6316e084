//! Exim's Bloom filter bit for bit (exim-ratelimit.md §6). Expected values
//! were computed independently (Python hashlib) from the rules in §6.

use floodgate::limit::spec::UpdateMode;
use floodgate::limit::unique::{bloom_probes, bloom_size, UniqueKind, UniqueSet};
use floodgate::limit::LimitSpec;
use floodgate::store::{Algorithm, Decision, LimitRequest, MemoryStore, Record};

#[test]
fn probes_are_exims() {
    assert_eq!(
        bloom_probes(b"", 40),
        [
            (18, 16),
            (20, 8),
            (22, 4),
            (24, 2),
            (26, 1),
            (27, 128),
            (29, 64),
            (31, 32)
        ]
    );
    // h2's low bits make probes repeat.
    assert_eq!(
        bloom_probes(b"x@example.com", 40),
        [
            (21, 32),
            (21, 32),
            (21, 32),
            (21, 32),
            (13, 32),
            (13, 32),
            (13, 32),
            (5, 32)
        ]
    );
    assert_eq!(
        bloom_probes(b"alice@example.org", 200),
        [
            (199, 8),
            (159, 16),
            (119, 32),
            (79, 64),
            (39, 128),
            (0, 1),
            (160, 2),
            (120, 4)
        ]
    );
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

#[test]
fn overfilled_320_bit_filter() {
    let mut set = UniqueSet::new(UniqueKind::Bloom, 4.0);
    let mut pattern = String::new();
    let mut new = 0;
    for i in 0..150 {
        let seen = set.insert(&format!("user{i}@example.com"));
        pattern.push(if seen { '1' } else { '0' });
        new += usize::from(!seen);
    }
    assert_eq!(new, 98);
    assert_eq!(
        pattern,
        "000000000000000000000000000000000000000000000000100010000000000000000010010001101000001101100010000110111111010111010100111111011111011111111111100111"
    );
    let UniqueSet::Bloom(bits) = &set else {
        panic!()
    };
    assert_eq!(
        hex(bits),
        "fffffffffffffffffeffffffffffffffff7ffffffffffffffffffffeff7fffdffffffffffefffff7"
    );
}

#[test]
fn filter_of_200_bytes() {
    assert_eq!(bloom_size(100.0), 200);
    let mut set = UniqueSet::new(UniqueKind::Bloom, 100.0);
    let new = (0..100)
        .filter(|i| !set.insert(&format!("rcpt{i}@example.net")))
        .count();
    assert_eq!(new, 100);
    let UniqueSet::Bloom(bits) = &set else {
        panic!()
    };
    assert_eq!(hex(bits), "09b73125fb183fc40826699f52631fd44250445710e004058e3b82d16f0149b442463b97a5216c12843fc12f85c2549e806c97c833076b71d3a95b8d6a220554c82e481285088066cd293d92c908513c0351b4a38926324e4902328e522eb150310350d300644c106f3100b030190410a96f3645e07de210163c22a2c5c20a8078371b88c0ad4100900353282982dae800a44086100d82338c1c6880080a807a06f819510104c60c559e81b517c882e0128f3bad418521e040e1a4e013f88c60639321e23f211d10");
}

fn req(spec: &LimitSpec, unique: &str, kind: UniqueKind) -> Decision {
    Decision {
        limits: vec![LimitRequest {
            key: spec.database_key("", "192.0.2.7"),
            algorithm: Algorithm::Ewma {
                limit: spec.limit(),
                period_secs: spec.period_secs(),
                mode: spec.update_mode(),
                unique_kind: kind,
            },
            count: 1.0,
            unique: Some(unique.to_string()),
            blocking: true,
        }],
    }
}

#[test]
fn strict_store_counts_like_the_filter() {
    // Through the store in strict mode, 150 addresses into a 320-bit filter
    // count exactly the filter's 98 new ones.
    let spec = LimitSpec::parse("4/1h/per_addr/strict").unwrap();
    assert_eq!(spec.update_mode(), UpdateMode::Strict);
    let store = MemoryStore::default();
    let mut unseen = 0;
    for i in 0..150 {
        let r = store.decide_at(
            1_000_000 * i,
            &req(&spec, &format!("user{i}@example.com"), UniqueKind::Bloom),
        );
        unseen += usize::from(r.limits[0].seen == Some(false));
    }
    assert_eq!(unseen, 98);
    // An exact set never has false positives.
    let store = MemoryStore::default();
    let exact = (0..150)
        .filter(|i| {
            let r = store.decide_at(
                1_000_000 * i,
                &req(&spec, &format!("user{i}@example.com"), UniqueKind::Exact),
            );
            r.limits[0].seen == Some(false)
        })
        .count();
    assert_eq!(exact, 150);
}

#[test]
fn size_fixed_until_reset() {
    let store = MemoryStore::default();
    let small = LimitSpec::parse("4/10s/per_addr/strict").unwrap();
    let big = LimitSpec::parse("100/10s/per_addr/strict").unwrap();
    let key = small.database_key("", "192.0.2.7");
    let size = |store: &MemoryStore| match &store.inspect_key(&key)[0] {
        Record::Unique(r) => match &r.set {
            UniqueSet::Bloom(b) => (b.len(), r.created_s),
            UniqueSet::Exact(_) => panic!(),
        },
        _ => panic!(),
    };
    store.decide_at(0, &req(&small, "a", UniqueKind::Bloom));
    assert_eq!(size(&store), (40, 0));
    // m changes: the old size stays until the set is replaced.
    store.decide_at(10_000_000, &req(&big, "b", UniqueKind::Bloom));
    assert_eq!(size(&store), (40, 0));
    store.decide_at(11_000_000, &req(&big, "c", UniqueKind::Bloom));
    assert_eq!(size(&store), (200, 11));
}

#[test]
fn leaky_over_does_not_remember() {
    let spec = LimitSpec::parse("2/1h/per_addr").unwrap();
    let store = MemoryStore::default();
    let mut seen = Vec::new();
    for (t, rcpt) in ["a", "b", "c", "c"].iter().enumerate() {
        let r = store.decide_at(t as i64 * 1_000_000, &req(&spec, rcpt, UniqueKind::Bloom));
        seen.push((r.limits[0].seen, r.limits[0].over));
    }
    assert_eq!(
        seen,
        [
            (Some(false), false),
            (Some(false), false),
            (Some(false), true),
            (Some(false), true)
        ]
    );
}

#[test]
fn readonly_does_not_consult_the_set() {
    let store = MemoryStore::default();
    let spec = LimitSpec::parse("3/1h/per_addr").unwrap();
    store.decide_at(0, &req(&spec, "a", UniqueKind::Bloom));
    let ro = LimitSpec::parse("3/1h/per_addr/readonly").unwrap();
    let r = store
        .decide_at(1_000_000, &req(&ro, "a", UniqueKind::Bloom))
        .limits[0];
    assert_eq!((r.seen, r.stored), (None, false));
    assert!(r.value < 1.0 && r.value > 0.999);
}
