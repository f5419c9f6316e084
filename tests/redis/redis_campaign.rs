//! A campaign across a fleet: two floodgates sharing Redis group one campaign alike.
//! Eight accounts send spun copies (pairwise sharing different bands), alternating between
//! the nodes: the fourth account's copy trips the limit on whichever node it reaches, the
//! campaign is listed once with its true totals by either node, only the accounts whose
//! own part is evidence are restricted fleet-wide, and a release made on one node keeps
//! the other from restricting the account again for its earlier copies — the same answers
//! as the memory store (`tests/contain/campaign_groups.rs`).

use crate::common;

use common::campaign::*;
use common::redis::RedisServer;
use common::*;

#[test]
fn two_floodgates_group_one_campaign_as_memory_does() {
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let rec = Recorder::start(RecorderOptions {
        users: (1..=8)
            .map(|i| format!("stolen{i}"))
            .map(|u| (u.clone(), password(&u)))
            .collect(),
        ..RecorderOptions::default()
    });
    let extra = format!(
        "{}\n[store]\nbackend = \"redis\"\nurl = \"{}\"\ntimeout = \"500ms\"\n{UNHURRIED_KEYS}",
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
    let run = spun_campaign(&rec, &[&nodes[0], &nodes[1]], 1_000_000);
    let log = format!("{}\n{}", nodes[0].stderr(), nodes[1].stderr());
    check_spun(&run, &log);
    // The other node lists the same campaign.
    let c = admin_json(&nodes[1].admin_socket(), &["campaigns"]);
    let list = c["campaigns"].as_array().unwrap();
    assert_eq!(list.len(), 1, "{c}");
    assert_eq!(list[0]["message_key"], run.campaign["message_key"]);
    assert_eq!(list[0]["copies"], run.copies);
}
