//! Per-key baselines kept in Redis: saved as one hash per limit, read back whole by another
//! store (another node, or the same after a restart), replaced whole on the next save.

use crate::common::redis as redis_server;

use std::collections::HashMap;
use std::time::Duration;

use floodgate::config::StoreConfig;
use floodgate::store::open::open_store;
use floodgate::store::{BaselineSet, Store};
use redis_server::RedisServer;

/// Bound on any single await in these tests: a hang guard, not a speed check.
const HANG: Duration = Duration::from_secs(20);

fn store(url: String) -> std::sync::Arc<dyn Store> {
    open_store(&StoreConfig {
        backend: "redis".into(),
        url: Some(url),
        ..Default::default()
    })
    .unwrap()
    .as_store()
}

#[tokio::test]
async fn baselines_round_trip_through_redis_and_are_replaced_whole() {
    let server = RedisServer::start();
    let a = store(server.url());
    let b = store(server.url());
    let none = tokio::time::timeout(HANG, b.load_baselines("own"))
        .await
        .unwrap();
    assert_eq!(none.unwrap(), None);
    let set = BaselineSet {
        signature: "p95/14d/86400s".into(),
        computed_us: 1_764_000_000_123_456,
        peaks: HashMap::from([
            ("alice".to_string(), 10.0),
            ("bob@example.org".to_string(), 500.5),
            ("k:with:colons".to_string(), 3.0),
        ]),
    };
    tokio::time::timeout(HANG, a.save_baselines("own", &set))
        .await
        .unwrap()
        .unwrap();
    let got = tokio::time::timeout(HANG, b.load_baselines("own"))
        .await
        .unwrap();
    assert_eq!(got.unwrap(), Some(set));
    // Another limit's set is its own.
    let other = tokio::time::timeout(HANG, b.load_baselines("other"))
        .await
        .unwrap();
    assert_eq!(other.unwrap(), None);
    // The next save replaces the keys: bob is gone.
    let next = BaselineSet {
        signature: "p95/14d/86400s".into(),
        computed_us: 1_764_086_400_000_000,
        peaks: HashMap::from([("alice".to_string(), 12.0)]),
    };
    tokio::time::timeout(HANG, b.save_baselines("own", &next))
        .await
        .unwrap()
        .unwrap();
    let got = tokio::time::timeout(HANG, a.load_baselines("own"))
        .await
        .unwrap();
    assert_eq!(got.unwrap(), Some(next));
}
