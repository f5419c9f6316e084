use super::*;
use proptest::prelude::*;

const HOUR: i64 = 3_600_000_000;

fn join(bands: &[&str], sender: &str, rcpts: u64) -> CampaignJoin {
    CampaignJoin {
        values: bands.iter().map(|b| b.to_string()).collect(),
        link: true,
        sender: sender.into(),
        recipients: rcpts,
        info: format!("{{\"from\":\"{sender}\"}}"),
        period_us: HOUR,
    }
}

#[test]
fn spun_copies_that_pairwise_share_different_bands_are_one_campaign() {
    let b = CampaignBook::default();
    let l = b.join(&join(&["b1:a", "b2:a"], "s1", 5), 0);
    assert_eq!(l.id, "c:b1:a");
    // Each copy shares one band with the one before and none with the first.
    b.join(&join(&["b2:a", "b3:b"], "s2", 5), 10);
    b.join(&join(&["b3:b", "b4:c"], "s3", 5), 20);
    let l = b.join(&join(&["b4:c", "b5:d"], "s4", 5), 30);
    assert_eq!(l.id, "c:b1:a");
    assert_eq!((l.copies, l.recipients, l.senders.len()), (4, 20, 4));
    assert_eq!(l.senders[0].sender, "s4");
    // An unrelated text is another campaign.
    assert_eq!(b.join(&join(&["b1:z"], "t", 1), 40).id, "c:b1:z");
}

#[test]
fn a_message_linking_two_campaigns_merges_them_into_the_larger() {
    let b = CampaignBook::default();
    b.join(&join(&["b1:a"], "s1", 1), 0);
    b.join(&join(&["b1:a"], "s2", 1), 1);
    b.join(&join(&["b1:y"], "s3", 1), 2);
    let l = b.join(&join(&["b1:y", "b1:a"], "s1", 2), 3);
    assert_eq!(l.id, "c:b1:a", "the campaign with more copies survives");
    assert_eq!((l.copies, l.recipients), (4, 5));
    let s1 = l.senders.iter().find(|s| s.sender == "s1").unwrap();
    assert_eq!((s1.copies, s1.recipients, s1.recent.len()), (2, 3, 2));
    // A band of the absorbed campaign resolves to the survivor.
    assert_eq!(b.join(&join(&["b1:y"], "s4", 1), 4).id, "c:b1:a");
    b.mark("c:b1:y", "campaign", &[], HOUR, 5);
    let c = b.campaigns(6);
    assert_eq!(c.len(), 1);
    assert_eq!((c[0].key.as_str(), c[0].copies), ("c:b1:a", 5));
}

#[test]
fn bands_and_senders_expire_with_the_period_but_totals_stay() {
    let b = CampaignBook::default();
    b.join(&join(&["b1:a"], "s1", 3), 0);
    b.join(&join(&["b1:a", "b2:x"], "s2", 3), HOUR / 2);
    // An hour after s1's copy: s1 is forgotten, the totals keep its copy.
    let l = b.join(&join(&["b2:x"], "s3", 1), HOUR + 10);
    assert_eq!(l.id, "c:b1:a");
    assert_eq!(
        l.senders
            .iter()
            .map(|s| s.sender.as_str())
            .collect::<Vec<_>>(),
        ["s3", "s2"]
    );
    assert_eq!((l.copies, l.recipients), (3, 7));
    // Two periods on, with no write between, the bands no longer link: a new campaign
    // (under the same id when its first band is the same).
    let l = b.join(&join(&["b2:x"], "s4", 1), 4 * HOUR);
    assert_eq!(l.senders.len(), 1);
}

#[test]
fn unlinked_values_are_their_own_campaigns() {
    let b = CampaignBook::default();
    let mut j = join(&["evil.example"], "s1", 1);
    j.link = false;
    assert_eq!(b.join(&j, 0).id, "evil.example");
    j.sender = "s2".into();
    assert_eq!(b.join(&j, 1).senders.len(), 2);
}

#[test]
fn the_alert_is_due_when_found_then_at_most_once_an_interval() {
    let b = CampaignBook::default();
    b.join(&join(&["b1:a"], "s1", 1), 0);
    assert_eq!(b.mark("c:b1:a", "c", &[], HOUR, 10), MarkAnswer::Found);
    assert_eq!(
        b.mark("c:b1:a", "c", &["s1".into()], HOUR, 20),
        MarkAnswer::Quiet
    );
    assert_eq!(
        b.mark("c:b1:a", "c", &[], HOUR, HOUR + 10),
        MarkAnswer::Update
    );
    assert_eq!(b.mark("unknown", "c", &[], HOUR, 30), MarkAnswer::Quiet);
    let c = b.campaigns(HOUR + 20);
    assert_eq!(
        (c[0].since_us, c[0].last_us, c[0].copies),
        (10, HOUR + 10, 1)
    );
    // The sender is forgotten an hour after its copy; its restriction was recorded.
    assert!(c[0].senders.is_empty());
    let b = CampaignBook::default();
    b.join(&join(&["b1:a"], "s1", 1), 0);
    b.mark("c:b1:a", "c", &["s1".into()], HOUR, 20);
    assert_eq!(b.campaigns(30)[0].senders[0].restricted_us, 20);
    assert_eq!(b.join(&join(&["b1:a"], "s2", 1), 40).found_us, 20);
    assert!(b.campaigns(HOUR + 10 + LISTED_US + 1).is_empty());
}

#[test]
fn releases_are_answered_with_the_senders() {
    let b = CampaignBook::default();
    b.join(&join(&["b1:a"], "s1", 1), 0);
    b.released("s1", 5);
    let l = b.join(&join(&["b1:a"], "s2", 1), 10);
    let s1 = l.senders.iter().find(|s| s.sender == "s1").unwrap();
    assert_eq!(s1.released_us, 5);
}

#[test]
fn a_campaign_keeps_at_most_its_bound_of_senders() {
    let b = CampaignBook::default();
    for i in 0..(MAX_SENDERS as i64 + 10) {
        b.join(&join(&["b1:a"], &format!("s{i}"), 1), i);
    }
    let l = b.join(&join(&["b1:a"], "last", 1), 1_000_000);
    assert_eq!(l.senders.len(), MAX_SENDERS);
    assert_eq!(l.senders[0].sender, "last");
    assert_eq!(l.copies, MAX_SENDERS as u64 + 11);
    assert!(!l.senders.iter().any(|s| s.sender == "s0"));
}

#[test]
fn texts_are_capped_in_characters() {
    assert_eq!(capped("short", 200), "short");
    let long = "é".repeat(3_000_000);
    let c = capped(&long, SUBJECT_CHARS);
    assert_eq!(c.chars().count(), SUBJECT_CHARS);
    assert!(c.ends_with('…'));
    assert_eq!(capped("abcdef", 3), "ab…");
}

#[test]
fn a_sender_is_encoded_and_decoded() {
    let s = CampaignSender {
        sender: "alice".into(),
        copies: 3,
        recipients: 12,
        last_us: 1_765_000_000_123_456,
        info: "{\"subject\":\"a|b\"}".into(),
        recent: vec![(1_765_000_000_000_001, 5), (1_765_000_000_123_456, 7)],
        restricted_us: 9,
        released_us: 0,
    };
    assert_eq!(CampaignSender::decode("alice", &s.encode()), Some(s));
    let empty = CampaignSender {
        sender: "b".into(),
        ..CampaignSender::default()
    };
    assert_eq!(CampaignSender::decode("b", &empty.encode()), Some(empty));
    for bad in ["", "1|2|3", "x|1|1|1||", "1|1|1|1|5|", "1|1|1|1|a:b|"] {
        assert_eq!(CampaignSender::decode("b", bad), None, "{bad:?}");
    }
}

proptest! {
    /// Decoding never panics, and what encodes decodes to itself.
    #[test]
    fn sender_text_round_trips(copies in 0u64..1_000_000, t in 0i64..i64::MAX / 2,
                               info in ".{0,40}", junk in ".{0,60}") {
        let _ = CampaignSender::decode("x", &junk);
        let s = CampaignSender {
            sender: "x".into(),
            copies,
            recipients: copies * 2,
            last_us: t,
            info,
            recent: vec![(t, copies)],
            restricted_us: t / 2,
            released_us: 0,
        };
        prop_assert_eq!(CampaignSender::decode("x", &s.encode()), Some(s));
    }

    /// However copies chain their bands, every message that shares a band with an earlier
    /// one of the group lands in the same campaign.
    #[test]
    fn chained_copies_are_one_campaign(n in 2usize..30, width in 1usize..4) {
        let b = CampaignBook::default();
        let mut ids = std::collections::HashSet::new();
        for i in 0..n {
            let bands: Vec<String> = (i..i + width + 1).map(|k| format!("b{k}:x")).collect();
            let refs: Vec<&str> = bands.iter().map(String::as_str).collect();
            ids.insert(b.join(&join(&refs, &format!("s{i}"), 1), i as i64).id);
        }
        prop_assert_eq!(ids.len(), 1);
        prop_assert_eq!(b.sizes().1, 1);
    }
}

#[test]
fn what_expired_is_swept_without_waiting_for_the_bounds() {
    let b = CampaignBook::default();
    for i in 0..10 {
        b.join(&join(&[&format!("b1:{i}")], "s", 1), 0);
    }
    assert_eq!(b.sizes(), (10, 10));
    // Two periods later, the sweep on the next thousands of joins drops them.
    for k in 0..SWEEP_EVERY as i64 {
        b.join(&join(&["b1:new"], "s", 1), 3 * HOUR + k);
    }
    assert_eq!(b.sizes(), (1, 1));
}
