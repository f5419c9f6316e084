//! One account, one key across a fleet: two floodgates sharing one real redis-server fold
//! the login where they learn it, so `ALICE` on one node and `Alice` on the other are one
//! account in Redis: one count, one restriction that both nodes enforce on every spelling,
//! one `floodgate release` (typed in yet another spelling) that ends it everywhere.

use crate::common;

use common::redis::RedisServer;
use common::restrict::{codes, send};
use common::*;

#[test]
fn two_nodes_count_and_restrict_every_spelling_as_one_account() {
    let redis = RedisServer::start();
    // The recording upstream stands in for a back-end that takes every spelling.
    let rec = Recorder::start(RecorderOptions {
        users: ["alice", "ALICE", "Alice", "aLiCe"]
            .iter()
            .map(|u| (u.to_string(), PASSWORD.to_string()))
            .collect(),
        ..RecorderOptions::default()
    });
    let extra = format!(
        "[store]\nbackend = \"redis\"\nurl = \"{}\"\n{}",
        redis.url(),
        common::restrict::limit("until_released")
    );
    let nodes = [
        common::restrict::start(&rec, &extra),
        common::restrict::start(&rec, &extra),
    ];
    // Five messages (the limit's burst) in four spellings over both nodes.
    let plan = [("ALICE", 0, 2), ("Alice", 1, 2), ("aLiCe", 0, 1)];
    for (login, node, n) in plan {
        let got = send(nodes[node].addr("plain"), login, PASSWORD, n);
        assert_eq!(codes(&got), vec![250; n], "{login} on node {node}: {got:?}");
    }
    // The sixth, on either node and in any spelling, is the account's: restricted.
    assert_eq!(
        codes(&send(nodes[1].addr("plain"), "alice", PASSWORD, 1)),
        [450]
    );
    assert_eq!(
        codes(&send(nodes[0].addr("plain"), "ALICE", PASSWORD, 1)),
        [450]
    );
    for node in &nodes {
        let r = admin_json(&node.admin_socket(), &["restricted"]);
        let keys: Vec<&str> = r["restricted"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x["key"].as_str().unwrap())
            .collect();
        assert_eq!(keys, ["alice"], "{r}");
    }
    let out = admin_verb(
        &nodes[1].admin_socket(),
        &["release", "Alice", "--reason", "password changed"],
    );
    assert!(out.ok(), "{out}");
    assert_eq!(
        codes(&send(nodes[0].addr("plain"), "aLiCe", PASSWORD, 1)),
        [250]
    );
    // Upstream got six messages, all of them after the back-end's own 235.
    assert_eq!(rec.wait_events("message", 6).len(), 6);
    assert_eq!(rec.messages().len(), 6);
}
