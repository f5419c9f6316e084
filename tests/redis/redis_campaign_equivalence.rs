//! The same message sequences give the same campaigns on the memory store and on a real
//! Redis (property test): which campaign each message joins (grouping and merges of
//! linked bands), the totals, each sender's copies and recipients, whom a mark restricted,
//! when the alert is due, and the list of found campaigns. Times are each store's own, so
//! they are compared only through what they decide.

use crate::common::redis as redis_server;

use floodgate::store::redis::{ConnectOptions, HashTag, RedisOptions, RedisStore};
use floodgate::store::{CampaignJoin, CampaignLedger, MemoryStore, Store};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use redis_server::RedisServer;
use std::time::Duration;

/// One step: a message (its bands, drawn from a small alphabet so that messages link, its
/// sender and recipients), or a mark of the campaign the last message joined.
#[derive(Clone, Debug)]
enum Step {
    Join {
        bands: Vec<u8>,
        sender: u8,
        recipients: u64,
    },
    Mark {
        restrict_last: bool,
    },
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        4 => (proptest::collection::vec(0u8..12, 1..5), 0u8..5, 1u64..15).prop_map(
            |(bands, sender, recipients)| Step::Join { bands, sender, recipients }
        ),
        1 => any::<bool>().prop_map(|restrict_last| Step::Mark { restrict_last }),
    ]
}

/// A sender as both stores must agree on it: name, copies, recipients, the recipients of
/// its recent copies, whether a mark restricted it.
type SenderView = (String, u64, u64, Vec<u64>, bool);

/// What both stores must agree on in a campaign.
fn view(l: &CampaignLedger) -> (String, u64, u64, Vec<SenderView>) {
    let mut senders: Vec<_> = l
        .senders
        .iter()
        .map(|s| {
            (
                s.sender.clone(),
                s.copies,
                s.recipients,
                s.recent.iter().map(|r| r.1).collect::<Vec<u64>>(),
                s.restricted_us > 0,
            )
        })
        .collect();
    senders.sort();
    (l.id.clone(), l.copies, l.recipients, senders)
}

#[test]
fn memory_and_redis_group_campaigns_alike() {
    let server = RedisServer::start();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let _rt = rt.enter();
    let redis = RedisStore::new(RedisOptions {
        connect: ConnectOptions {
            url: Some(server.url()),
            connect_timeout: Duration::from_secs(5),
            ..Default::default()
        },
        timeout: Duration::from_secs(5),
        hash_tag: HashTag::Identity,
        ..Default::default()
    })
    .unwrap();
    let admin = redis::Client::open(server.url()).unwrap();
    let mut runner = TestRunner::new(Config {
        cases: 32,
        failure_persistence: None,
        ..Config::default()
    });
    let steps = proptest::collection::vec(step(), 1..30);
    let result = runner.run(&steps, |steps| {
        rt.block_on(async {
            let mut con = admin.get_multiplexed_async_connection().await.unwrap();
            let _: () = redis::cmd("FLUSHALL").query_async(&mut con).await.unwrap();
            let memory = MemoryStore::default();
            let mut last: Option<(String, String)> = None;
            for (n, s) in steps.iter().enumerate() {
                match s {
                    Step::Join {
                        bands,
                        sender,
                        recipients,
                    } => {
                        let j = CampaignJoin {
                            values: bands.iter().map(|b| format!("b{b}:{b:016x}")).collect(),
                            link: true,
                            sender: format!("s{sender}"),
                            recipients: *recipients,
                            info: "{}".into(),
                            period_us: 3_600_000_000,
                        };
                        let m = memory.campaign_join(&j).await.unwrap();
                        let r = redis.campaign_join(&j).await.unwrap();
                        prop_assert_eq!(view(&m), view(&r), "step {}: {:?}", n, s);
                        prop_assert_eq!(m.found_us > 0, r.found_us > 0, "step {}", n);
                        last = Some((m.id.clone(), j.sender.clone()));
                    }
                    Step::Mark { restrict_last } => {
                        let Some((id, sender)) = &last else { continue };
                        let who: Vec<String> = if *restrict_last {
                            vec![sender.clone()]
                        } else {
                            Vec::new()
                        };
                        // An hour between alerts: both answer Found, then Quiet.
                        let every = 3_600_000_000;
                        let m = memory.campaign_mark(id, "c", &who, every).await.unwrap();
                        let r = redis.campaign_mark(id, "c", &who, every).await.unwrap();
                        prop_assert_eq!(m, r, "step {}", n);
                    }
                }
            }
            let listed = |l: Vec<floodgate::store::Campaign>| {
                let mut v: Vec<(String, u64, u64)> = l
                    .into_iter()
                    .map(|c| (c.key, c.copies, c.recipients))
                    .collect();
                v.sort();
                v
            };
            prop_assert_eq!(
                listed(memory.campaigns().await.unwrap()),
                listed(redis.campaigns().await.unwrap())
            );
            Ok(())
        })
    });
    if let Err(e) = result {
        panic!("{e}");
    }
}
