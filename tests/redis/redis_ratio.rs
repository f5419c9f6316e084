//! Ratio windows on a real Redis: two stores (two floodgate nodes) add to one window and
//! read the same counts as the memory store given the same additions; a reset removes the
//! window; slots out of the window are forgotten (a 12-second window, slots of 1 s).

use crate::common::redis as redis_server;

use std::sync::Arc;
use std::time::Duration;

use floodgate::store::redis::{ConnectOptions, RedisOptions, RedisStore};
use floodgate::store::{MemoryStore, RatioCounts, RatioWindow, Store};
use redis_server::RedisServer;

fn store(url: String) -> Arc<dyn Store> {
    Arc::new(
        RedisStore::new(RedisOptions {
            connect: ConnectOptions {
                url: Some(url),
                connect_timeout: Duration::from_millis(500),
                ..Default::default()
            },
            timeout: Duration::from_millis(2000),
            ..Default::default()
        })
        .unwrap(),
    )
}

fn add(num: u64, den: u64) -> RatioCounts {
    RatioCounts { num, den }
}

#[tokio::test]
async fn two_nodes_share_one_window_like_the_memory_store() {
    let server = RedisServer::start();
    let (a, b) = (store(server.url()), store(server.url()));
    let mem = MemoryStore::default();
    let w = RatioWindow::from_secs(3600);
    let steps = [add(0, 5), add(1, 0), add(2, 7), add(0, 0), add(3, 1)];
    for (i, s) in steps.iter().enumerate() {
        let node = if i % 2 == 0 { &a } else { &b };
        let got = node.ratio("ratio/r/alice", w, *s).await.unwrap();
        let want = mem.ratio("ratio/r/alice", w, *s).await.unwrap();
        assert_eq!(got, want, "step {i}");
    }
    assert_eq!(
        a.ratio("ratio/r/alice", w, add(0, 0)).await.unwrap(),
        add(6, 13)
    );
    assert_eq!(
        b.ratio("ratio/r/bob", w, add(0, 0)).await.unwrap(),
        add(0, 0)
    );
    // A reset (release of a restriction) removes the window.
    assert!(a.reset("ratio/r/alice").await.unwrap() >= 1);
    assert_eq!(
        b.ratio("ratio/r/alice", w, add(0, 0)).await.unwrap(),
        add(0, 0)
    );
}

#[tokio::test]
async fn old_slots_leave_the_window() {
    let server = RedisServer::start();
    let a = store(server.url());
    let w = RatioWindow::from_secs(12);
    assert_eq!(a.ratio("ratio/r/k", w, add(1, 2)).await.unwrap(), add(1, 2));
    // Counted for at least the period (12 s), at most one slot (1 s) more.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let mut seen = add(1, 2);
    while seen != add(0, 0) {
        assert!(std::time::Instant::now() < deadline, "never forgotten");
        tokio::time::sleep(Duration::from_millis(250)).await;
        seen = a.ratio("ratio/r/k", w, add(0, 0)).await.unwrap();
    }
}
