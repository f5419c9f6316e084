//! A campaign across a fleet: two floodgates sharing Redis see one ledger per message key.
//! Six stolen accounts send copies of one template, alternating between the nodes; the
//! fourth account's copy trips the limit on whichever node it reaches, all six accounts are
//! restricted fleet-wide (those that only ever used the other node included), at most three
//! copies went out, and either node's `floodgate campaigns` lists all six accounts.

use crate::common;

use common::campaign::*;
use common::redis::RedisServer;
use common::*;

#[test]
fn two_floodgates_share_a_campaign_ledger() {
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let stolen: Vec<String> = (1..=6).map(|i| format!("stolen{i}")).collect();
    let rec = Recorder::start(RecorderOptions {
        users: stolen.iter().map(|u| (u.clone(), password(u))).collect(),
        ..RecorderOptions::default()
    });
    let extra = format!(
        "{}\n[store]\nbackend = \"redis\"\nurl = \"{}\"\ntimeout = \"500ms\"\n",
        readme_policy(dir.path()),
        redis.url()
    );
    let start = || {
        Floodgate::start(
            &FloodgateConfig::new(rec.addr())
                .auth_without_tls(true)
                .log_level("info")
                .extra(&extra),
        )
    };
    let nodes = [start(), start()];
    let mut rng = Rng(42);
    for (i, user) in stolen.iter().enumerate() {
        let node = &nodes[i % 2];
        let rcpts: Vec<String> = (0..5).map(|r| format!("v{i}{r}@example.net")).collect();
        let (code, _) = send(node.addr("plain"), user, &rcpts, &phishing(&mut rng, i));
        assert_eq!(code, 250, "{user}");
    }
    let out = rec.messages().len();
    assert!(out <= 3, "{out} copies relayed");
    for node in &nodes {
        let v = admin_json(&node.admin_socket(), &["restricted"]);
        let mut keys: Vec<&str> = v["restricted"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["key"].as_str().unwrap())
            .collect();
        keys.sort();
        assert_eq!(
            keys,
            stolen.iter().map(String::as_str).collect::<Vec<_>>(),
            "{v}"
        );
        let c = admin_json(&node.admin_socket(), &["campaigns"]);
        let list = c["campaigns"].as_array().unwrap();
        assert!(!list.is_empty(), "{c}");
        let accounts = list[0]["accounts"].as_array().unwrap();
        assert_eq!(accounts.len(), 6, "{c}");
    }
}
