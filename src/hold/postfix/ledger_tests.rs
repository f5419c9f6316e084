use super::*;
use crate::hold::postfix::line::MAGIC;

fn entry(id: &str, key: &str, time: u64) -> LedgerEntry {
    LedgerEntry {
        queue_id: id.into(),
        key: key.into(),
        limit: "per_user".into(),
        reason: "too fast".into(),
        time,
        sender: format!("{key}@example.org"),
        recipients: vec!["bob@example.net".into()],
        size: 100,
        client: None,
        user: Some(key.into()),
    }
}

fn done(id: &str, how: How) -> Done {
    Done {
        queue_id: id.into(),
        how,
        time: 1_764_000_500,
        by: Some("root".into()),
    }
}

#[test]
fn what_is_recorded_is_found_by_id_and_key_and_survives_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("postfix-held");
    let l = Ledger::open(&path, 100).unwrap();
    l.record(entry("AAAAA1", "alice", 2)).unwrap();
    l.record(entry("AAAAA2", "alice", 1)).unwrap();
    l.record(entry("BBBBB1", "www-data", 3)).unwrap();
    assert_eq!(l.get("BBBBB1").unwrap().key, "www-data");
    let ids = |v: Vec<LedgerEntry>| v.into_iter().map(|e| e.queue_id).collect::<Vec<_>>();
    assert_eq!(
        ids(l.for_key("alice")),
        ["AAAAA2", "AAAAA1"],
        "oldest first"
    );
    assert_eq!(l.count_for_key("alice"), 2);
    l.claim("AAAAA2").unwrap();
    l.finish(done("AAAAA2", How::Released)).unwrap();
    drop(l);

    let l = Ledger::open(&path, 100).unwrap();
    assert_eq!(ids(l.all()), ["AAAAA1", "BBBBB1"]);
    assert_eq!(ids(l.for_key("alice")), ["AAAAA1"]);
    assert_eq!(
        l.claim("AAAAA2").unwrap_err().to_string(),
        "queue id AAAAA2 was released already (Mon, 24 Nov 2025 16:08:20 +0000 by root)"
    );
    assert_eq!(
        l.claim("CCCCC1").unwrap_err().to_string(),
        "queue id CCCCC1 is not held by floodgate"
    );
}

#[test]
fn a_claim_is_one_request_s_until_it_ends() {
    let dir = tempfile::tempdir().unwrap();
    let l = Ledger::open(&dir.path().join("l"), 10).unwrap();
    l.record(entry("AAAAA1", "alice", 1)).unwrap();
    l.claim("AAAAA1").unwrap();
    assert!(matches!(l.claim("AAAAA1"), Err(LedgerError::Busy(_))));
    l.unclaim("AAAAA1");
    l.claim("AAAAA1").unwrap();
    l.finish(done("AAAAA1", How::Deleted)).unwrap();
    let e = l.claim("AAAAA1").unwrap_err();
    assert!(e.is_not_held());
    assert!(e.to_string().contains("was deleted already"), "{e}");
    l.finish(done("AAAAA1", How::Gone)).unwrap();
    assert!(
        l.claim("AAAAA1")
            .unwrap_err()
            .to_string()
            .contains("deleted"),
        "a second end is not written"
    );
}

#[test]
fn bad_records_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let l = Ledger::open(&dir.path().join("l"), 2).unwrap();
    assert_eq!(
        l.record(entry("ALL", "alice", 1)).unwrap_err().to_string(),
        "\"ALL\" is not a Postfix queue id"
    );
    l.record(entry("AAAAA1", "alice", 1)).unwrap();
    assert_eq!(
        l.record(entry("AAAAA1", "alice", 1))
            .unwrap_err()
            .to_string(),
        "queue id AAAAA1 is held already"
    );
    l.record(entry("AAAAA2", "alice", 1)).unwrap();
    assert!(matches!(
        l.record(entry("AAAAA3", "alice", 1)),
        Err(LedgerError::Full(2))
    ));
}

#[test]
fn a_damaged_file_names_itself_and_the_line() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("l");
    std::fs::write(&path, format!("{MAGIC}\nnonsense\n")).unwrap();
    let e = Ledger::open(&path, 10).unwrap_err().to_string();
    assert!(
        e.starts_with(&format!("{}: line 2: expected", path.display())),
        "{e}"
    );
    let e = Ledger::open(&dir.path().join("no/such/dir/l"), 10).unwrap_err();
    assert!(matches!(e, LedgerError::Io { .. }), "{e}");
}

#[test]
fn the_file_is_compacted_as_it_grows() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("l");
    let l = Ledger::open(&path, 10).unwrap();
    for i in 0..3000 {
        let id = format!("ID{i:06}");
        l.record(entry(&id, "alice", i)).unwrap();
        l.finish(done(&id, How::Gone)).unwrap();
    }
    l.record(entry("KEPT01", "bob", 1)).unwrap();
    let text = std::fs::read_to_string(&path).unwrap();
    let lines = text.lines().count();
    assert!(lines < 2 * (DONE_KEPT + 1) + 1024 + 2, "{lines} lines");
    drop(l);
    let l = Ledger::open(&path, 10).unwrap();
    assert_eq!(l.len(), 1);
    assert!(l.claim("ID002999").unwrap_err().is_not_held());
    let text = std::fs::read_to_string(&path).unwrap();
    assert_eq!(
        text.lines().count(),
        1 + 1 + 3000.min(DONE_KEPT),
        "compacted at open"
    );
}

#[test]
fn a_torn_last_line_is_dropped_at_open() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("l");
    let l = Ledger::open(&path, 10).unwrap();
    l.record(entry("AAAAA1", "alice", 1)).unwrap();
    drop(l);
    let mut f = OpenOptions::new().append(true).open(&path).unwrap();
    f.write_all(b"{\"held\":{\"queue_id\":\"BBB").unwrap();
    drop(f);
    let l = Ledger::open(&path, 10).unwrap();
    assert_eq!(l.len(), 1);
    l.record(entry("BBBBB1", "bob", 2)).unwrap();
    drop(l);
    assert_eq!(Ledger::open(&path, 10).unwrap().len(), 2);
}

#[test]
fn ten_thousand_held_answer_per_key() {
    let dir = tempfile::tempdir().unwrap();
    let l = Ledger::open(&dir.path().join("l"), 20_000).unwrap();
    for i in 0..10_000u64 {
        l.record(entry(&format!("ID{i:06}"), &format!("user{}", i % 500), i))
            .unwrap();
    }
    assert_eq!(l.for_key("user7").len(), 20);
    assert_eq!(l.count_for_key("user499"), 20);
    assert_eq!(l.for_key("nobody").len(), 0);
}
