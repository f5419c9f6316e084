use super::*;
use crate::hold::format::{encode_v1, HeldEnvelope};
use crate::hold::FormatError;
use std::os::unix::fs::PermissionsExt;

fn settings(dir: &Path) -> HoldSettings {
    HoldSettings {
        dir: dir.to_path_buf(),
        max_bytes: 1 << 20,
        max_messages: 3,
        ttl: Duration::from_secs(60),
        on_expiry: OnExpiry::Delete,
    }
}

fn open(dir: &Path) -> Spool {
    Spool::open(settings(dir), Counter::default()).unwrap()
}

fn envelope(id: &str, time: u64) -> HeldEnvelope {
    HeldEnvelope {
        id: id.into(),
        key: "alice".into(),
        limit: "l".into(),
        paced: None,
        time,
        client: "127.0.0.1:1000".parse().unwrap(),
        local: None,
        name: None,
        reverse_name: None,
        user: None,
        helo: None,
        proto: "ESMTP".into(),
        tls: None,
        mail: "<a@b>".into(),
        rcpts: vec!["<c@d>".into()],
    }
}

fn msg(id: &str, time: u64) -> HeldMessage {
    HeldMessage::new(envelope(id, time), b"Subject: x\r\n\r\nbody\r\n".to_vec())
}

fn names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

#[test]
fn store_list_claim_remove() {
    let d = tempfile::tempdir().unwrap();
    let s = open(d.path());
    s.store(&msg("a1", 5)).unwrap();
    s.store(&msg("a2", 1)).unwrap();
    let ids: Vec<String> = s
        .list()
        .unwrap()
        .into_iter()
        .map(|m| m.envelope.id)
        .collect();
    assert_eq!(ids, ["a2", "a1"]);
    assert_eq!(s.head("a1").unwrap(), msg("a1", 5).head());
    let (h, section) = s.header_section("a1").unwrap();
    assert_eq!(h.subject.as_deref(), Some("x"));
    assert_eq!(section, b"Subject: x\r\n\r\n");
    assert_eq!(s.claim("a1").unwrap().envelope.id, "a1");
    assert_eq!(s.claimed("a1").unwrap(), msg("a1", 5));
    // Claimed, it is still shown.
    assert_eq!(s.head("a1").unwrap().envelope.id, "a1");
    assert!(matches!(s.claim("a1"), Err(SpoolError::Busy(_))));
    assert!(matches!(s.claim("zz"), Err(SpoolError::NotFound(_))));
    assert!(matches!(s.claim("../x"), Err(SpoolError::NotFound(_))));
    assert!(matches!(s.head("zz"), Err(SpoolError::NotFound(_))));
    assert_eq!(s.usage().unwrap().0, 2);
    s.unclaim("a1").unwrap();
    s.claim("a1").unwrap();
    s.remove_claimed("a1").unwrap();
    assert_eq!(s.usage().unwrap().0, 1);
    assert_eq!(s.expired(60).unwrap().len(), 0);
    assert_eq!(s.expired(61).unwrap().len(), 1);
}

#[test]
fn held_files_are_private_whatever_the_umask() {
    let d = tempfile::tempdir().unwrap();
    let s = open(d.path());
    s.store(&msg("p1", 0)).unwrap();
    let mode = fs::metadata(d.path().join("p1.held"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600, "{mode:o}");
}

#[test]
fn limits_refuse_and_leave_nothing() {
    let d = tempfile::tempdir().unwrap();
    let s = open(d.path());
    for i in 0..3 {
        s.store(&msg(&format!("m{i}"), 0)).unwrap();
    }
    let e = s.store(&msg("m3", 0)).unwrap_err();
    assert!(matches!(e, SpoolError::Full(_)) && e.is_full(), "{e}");
    assert_eq!(fs::read_dir(d.path()).unwrap().count(), 3);
    let mut small = settings(d.path());
    small.max_messages = 100;
    small.max_bytes = 10;
    let s = Spool::open(small, Counter::default()).unwrap();
    assert!(matches!(s.store(&msg("m4", 0)), Err(SpoolError::Full(_))));
    assert_eq!(fs::read_dir(d.path()).unwrap().count(), 3);
}

#[test]
fn a_full_disk_or_quota_is_the_full_case() {
    let p = Path::new("/spool/tmp.x");
    for errno in [libc::ENOSPC, libc::EDQUOT] {
        let e = SpoolError::writing(p, std::io::Error::from_raw_os_error(errno));
        assert!(
            matches!(e, SpoolError::DiskFull { .. }) && e.is_full(),
            "{e}"
        );
        assert!(
            e.to_string()
                .starts_with("the hold spool is full: its disk has no room"),
            "{e}"
        );
    }
    let e = SpoolError::writing(p, std::io::Error::from_raw_os_error(libc::EIO));
    assert!(matches!(e, SpoolError::Io { .. }) && !e.is_full(), "{e}");
}

/// A tmpfs of 64 KiB mounted on a directory for the test's life (root only).
struct Tiny(PathBuf);

impl Tiny {
    fn mount(dir: &Path) -> Option<Tiny> {
        let ok = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", "size=64k,mode=0700", "tmpfs"])
            .arg(dir)
            .status()
            .is_ok_and(|s| s.success());
        ok.then(|| Tiny(dir.to_path_buf()))
    }
}

impl Drop for Tiny {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount").arg(&self.0).status();
    }
}

#[test]
fn a_message_the_disk_has_no_room_for_is_refused_as_full_and_leaves_nothing() {
    // SAFETY: geteuid has no preconditions and cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("not root: no tmpfs to fill; the errno mapping is tested above");
        return;
    }
    let d = tempfile::tempdir().unwrap();
    let _tiny = Tiny::mount(d.path()).expect("mount a tmpfs (root)");
    let mut st = settings(d.path());
    st.max_bytes = 1 << 30;
    let s = Spool::open(st, Counter::default()).unwrap();
    s.store(&msg("fits", 0)).unwrap();
    let mut big = msg("big", 0);
    big.body = vec![b'x'; 200 * 1024];
    let e = s.store(&big).unwrap_err();
    assert!(
        matches!(e, SpoolError::DiskFull { .. }) && e.is_full(),
        "{e}"
    );
    assert_eq!(names(d.path()), ["fits.held"], "nothing half-written");
    // There is room again once it is gone.
    s.store(&msg("next", 0)).unwrap();
}

#[test]
fn crash_leftovers_are_recovered() {
    let d = tempfile::tempdir().unwrap();
    let s = open(d.path());
    s.store(&msg("k1", 0)).unwrap();
    s.claim("k1").unwrap();
    // A write that crashed before its rename.
    fs::write(d.path().join("tmp.k2"), msg("k2", 0).encode()).unwrap();
    assert_eq!(s.list().unwrap().len(), 1);
    let s = open(d.path());
    s.recover().unwrap();
    let ids: Vec<String> = s
        .list()
        .unwrap()
        .into_iter()
        .map(|m| m.envelope.id)
        .collect();
    assert_eq!(ids, ["k1"]);
    assert!(!d.path().join("tmp.k2").exists());
    assert!(d.path().join("k1.held").exists());
}

#[test]
fn version_1_files_are_rewritten_at_start() {
    let d = tempfile::tempdir().unwrap();
    let s = open(d.path());
    let m = msg("old1", 3);
    let old = encode_v1(&m);
    fs::write(d.path().join("old1.held"), &old).unwrap();
    // Before the rewrite, it reads (whole).
    assert_eq!(s.head("old1").unwrap(), m.head());
    s.recover().unwrap();
    assert_eq!(fs::read(d.path().join("old1.held")).unwrap(), m.encode());
    let mode = fs::metadata(d.path().join("old1.held"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600);
    assert_eq!(names(d.path()), ["old1.held"]);
    s.claim("old1").unwrap();
    assert_eq!(s.claimed("old1").unwrap(), m);
}

/// Files as a damaged disk or another program could leave them.
fn plant_damaged(dir: &Path) {
    let good = msg("huge", 0).encode();
    let text = String::from_utf8(good).unwrap();
    // A body length near u64::MAX, the envelope's length kept in step.
    let huge = HeldHead {
        size: u64::MAX - 2,
        ..msg("huge", 0).head()
    }
    .encode();
    let mut bytes = huge;
    bytes.extend_from_slice(b"Subject: x\r\n\r\nbody\r\nend\n");
    fs::write(dir.join("huge.held"), bytes).unwrap();
    // The same as version 1, where it wrapped.
    let v1 = String::from_utf8(encode_v1(&msg("huge1", 0)))
        .unwrap()
        .replacen("body 20", "body 18446744073709551615", 1);
    fs::write(dir.join("huge1.held"), v1).unwrap();
    let cut = msg("cut", 0).encode();
    fs::write(dir.join("cut.held"), &cut[..cut.len() - 7]).unwrap();
    fs::write(
        dir.join("junk.held"),
        b"\x7fELF\x02\x01\x01 not a held file",
    )
    .unwrap();
    fs::write(dir.join("empty.held"), b"").unwrap();
    // A whole file under another message's name.
    fs::write(dir.join("other.held"), msg("good", 0).encode()).unwrap();
    assert!(text.contains("body 20\n"), "{text}");
}

#[test]
fn damaged_files_are_set_aside_and_the_listing_goes_on() {
    let d = tempfile::tempdir().unwrap();
    let corrupt = Counter::default();
    let s = Spool::open(settings(d.path()), corrupt.clone()).unwrap();
    s.store(&msg("good", 0)).unwrap();
    plant_damaged(d.path());
    s.recover().unwrap();
    let ids: Vec<String> = s
        .list()
        .unwrap()
        .into_iter()
        .map(|m| m.envelope.id)
        .collect();
    assert_eq!(ids, ["good"]);
    assert_eq!(names(d.path()), ["corrupt", "good.held"]);
    assert_eq!(
        names(&d.path().join(CORRUPT_DIR)),
        [
            "cut.held",
            "empty.held",
            "huge.held",
            "huge1.held",
            "junk.held",
            "other.held"
        ]
    );
    assert_eq!(corrupt.get(), 6);
    let mode = fs::metadata(d.path().join(CORRUPT_DIR))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o700);
    // Not counted against the limits, listed no more, counted once.
    assert_eq!(s.usage().unwrap().0, 1);
    assert_eq!(s.list().unwrap().len(), 1);
    assert_eq!(corrupt.get(), 6);
    // Planted again under the same name: kept beside the first.
    fs::write(d.path().join("junk.held"), b"junk again").unwrap();
    let e = s.head("junk").unwrap_err();
    assert!(matches!(e, SpoolError::Corrupt { .. }), "{e}");
    assert_eq!(
        e.to_string(),
        format!(
            "held message junk: unreadable file ({}), moved to corrupt/",
            FormatError::Magic
        )
    );
    assert!(d.path().join(CORRUPT_DIR).join("junk.held.1").exists());
    assert_eq!(corrupt.get(), 7);
}

#[test]
fn a_damaged_file_met_by_a_claim_or_a_release_is_set_aside() {
    let d = tempfile::tempdir().unwrap();
    let corrupt = Counter::default();
    let s = Spool::open(settings(d.path()), corrupt.clone()).unwrap();
    fs::write(d.path().join("bad.held"), b"floodgate-held 2\nenvelope 5\n").unwrap();
    assert!(matches!(s.claim("bad"), Err(SpoolError::Corrupt { .. })));
    assert_eq!(names(&d.path().join(CORRUPT_DIR)), ["bad.releasing"]);
    // A body damaged after its envelope: the claim reads the envelope, the release the
    // whole file.
    let m = msg("body", 0);
    let mut bytes = m.encode();
    let n = bytes.len();
    // The header section's blank line, 12 octets into the 20-octet body before `end`.
    bytes[n - 12] = b'X';
    bytes[n - 11] = b'X';
    fs::write(d.path().join("body.held"), &bytes).unwrap();
    assert_eq!(s.claim("body").unwrap(), m.head());
    assert!(matches!(s.claimed("body"), Err(SpoolError::Corrupt { .. })));
    assert_eq!(
        names(&d.path().join(CORRUPT_DIR)),
        ["bad.releasing", "body.releasing"]
    );
    assert_eq!(corrupt.get(), 2);
    assert!(s.list().unwrap().is_empty());
}

#[test]
fn an_unsafe_missing_or_read_only_dir_is_refused() {
    let d = tempfile::tempdir().unwrap();
    let gone = d.path().join("no/spool");
    let e = Spool::open(settings(&gone), Counter::default()).unwrap_err();
    assert!(matches!(e, SpoolError::Dir(DirError::Missing(_))));
    assert!(e.to_string().contains("no such directory"), "{e}");
    fs::set_permissions(d.path(), fs::Permissions::from_mode(0o777)).unwrap();
    let e = Spool::open(settings(d.path()), Counter::default()).unwrap_err();
    assert!(e.to_string().contains("chmod 700"), "{e}");
    // Root writes anywhere: a read-only directory is checked only for other users.
    // SAFETY: geteuid has no preconditions and cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        fs::set_permissions(d.path(), fs::Permissions::from_mode(0o555)).unwrap();
        let e = Spool::open(settings(d.path()), Counter::default()).unwrap_err();
        assert!(matches!(e, SpoolError::Unwritable { .. }), "{e}");
    }
    fs::set_permissions(d.path(), fs::Permissions::from_mode(0o700)).unwrap();
}

#[test]
fn ids_are_unique_and_valid() {
    let a = new_id();
    let b = new_id();
    assert_ne!(a, b);
    assert!(valid_id(&a) && valid_id(&b), "{a} {b}");
}

/// Octets this thread has read through read(2) and pread(2) so far.
fn rchar() -> u64 {
    let io = fs::read_to_string("/proc/thread-self/io").unwrap();
    io.lines()
        .find_map(|l| l.strip_prefix("rchar: "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap()
}

/// `n` held messages of `body` octets each, written straight into a spool: the octets read
/// by a listing and by an expiry pass, against the files' and the envelopes' octets.
fn reads(n: usize, body: usize) -> (u64, u64, u64, u64) {
    let d = tempfile::tempdir().unwrap();
    let mut st = settings(d.path());
    st.max_messages = usize::MAX;
    st.max_bytes = u64::MAX;
    let s = Spool::open(st, Counter::default()).unwrap();
    let (mut files, mut envelopes) = (0, 0);
    for i in 0..n {
        let mut b = format!("Subject: message {i}\r\nFrom: a@example.org\r\n\r\n").into_bytes();
        b.resize(body, b'x');
        let mut e = envelope(&format!("m{i:06}"), 1000);
        e.key = format!("user{i:06}");
        let m = HeldMessage::new(e, b);
        let bytes = m.encode();
        files += bytes.len() as u64;
        envelopes += m.head().encode().len() as u64;
        fs::write(d.path().join(format!("m{i:06}.held")), bytes).unwrap();
    }
    let r0 = rchar();
    assert_eq!(s.list().unwrap().len(), n);
    let r1 = rchar();
    assert_eq!(s.expired(2000).unwrap().len(), n);
    let r2 = rchar();
    println!(
        "{n} held messages of {body} body octets ({files} file octets, {envelopes} envelope \
         octets): a listing read {} octets, an expiry pass {}",
        r1 - r0,
        r2 - r1
    );
    (files, envelopes, r1 - r0, r2 - r1)
}

/// A listing and an expiry pass of 10,000 held messages read their envelopes (and the
/// 4-octet `end` of each file), not their bodies.
#[test]
fn listing_and_expiry_read_envelopes_only() {
    let (files, envelopes, listing, expiry) = reads(10_000, 8 * 1024);
    // The envelopes, each file's `end`, and the two reads of the counter itself.
    let most = envelopes + 4 * 10_000 + 4096;
    assert!(listing <= most, "{listing} > {most}");
    assert!(expiry <= most, "{expiry} > {most}");
    assert!(files > 10 * most, "the bodies are what is not read");
}

/// The index reads each file once: a second listing and a key's messages read no file; a
/// file removed or added behind the spool's back is followed at the next read.
#[test]
fn the_index_reads_a_file_once_and_follows_the_directory() {
    let d = tempfile::tempdir().unwrap();
    let mut st = settings(d.path());
    st.max_messages = 1000;
    let s = Spool::open(st, Counter::default()).unwrap();
    for i in 0..200u64 {
        let mut e = envelope(&format!("m{i:03}"), 1000 + i);
        e.key = if i % 10 == 0 {
            "bob".into()
        } else {
            format!("u{i}")
        };
        e.user = Some(e.key.clone());
        let m = HeldMessage::new(e, vec![b'x'; 4096]);
        fs::write(d.path().join(format!("m{i:03}.held")), m.encode()).unwrap();
    }
    assert_eq!(s.list().unwrap().len(), 200);
    // Reading the counter reads the counter's file: that much, and no envelope more.
    let (c0, c1) = (rchar(), rchar());
    let envelope_len = msg("m000", 1).head().encode().len() as u64;
    let r0 = rchar();
    assert_eq!(s.list().unwrap().len(), 200);
    let bob = s.of_keys(&["bob"]).unwrap();
    assert_eq!(s.count_for("bob").unwrap(), 20);
    let read = rchar() - r0;
    assert!(read < (c1 - c0) + envelope_len, "{read} octets read");
    let times: Vec<u64> = bob.iter().map(|h| h.envelope.time).collect();
    assert_eq!(times, (0..20).map(|i| 1000 + i * 10).collect::<Vec<_>>());
    // Gone by hand, and one more written by hand.
    fs::remove_file(d.path().join("m000.held")).unwrap();
    let mut e = envelope("n001", 5000);
    e.key = "bob".into();
    fs::write(
        d.path().join("n001.held"),
        HeldMessage::new(e, vec![]).encode(),
    )
    .unwrap();
    let bob = s.of_keys(&["bob"]).unwrap();
    assert_eq!(bob.len(), 20);
    assert_eq!(bob[0].envelope.id, "m010");
    assert_eq!(bob[19].envelope.id, "n001");
    assert_eq!(s.indexed_usage().unwrap(), s.usage().unwrap());
    assert_eq!(s.per_key().unwrap()["bob"], 20);
}

/// Sets the modification time of `dir` to `ago` before now.
fn age_dir(dir: &Path, ago: Duration) {
    let t = SystemTime::now() - ago;
    let f = fs::File::open(dir).unwrap();
    f.set_modified(t).unwrap();
}

/// A directory unchanged since a listing a second after its last change is not listed
/// again; any file added, renamed or removed after it is followed at the next read, and a
/// directory changed within the second of its listing is listed again every time.
#[test]
fn a_settled_directory_is_not_listed_again_and_every_change_is_followed() {
    let d = tempfile::tempdir().unwrap();
    let mut st = settings(d.path());
    st.max_messages = 1000;
    let s = Spool::open(st, Counter::default()).unwrap();
    for i in 0..3u64 {
        fs::write(
            d.path().join(format!("m{i:03}.held")),
            msg(&format!("m{i:03}"), 1000 + i).encode(),
        )
        .unwrap();
    }
    // Changed just now: listed, and not trusted.
    assert_eq!(s.list().unwrap().len(), 3);
    assert_eq!(*s.synced.lock().unwrap(), None);
    // Settled: listed once more, then trusted.
    age_dir(d.path(), Duration::from_secs(5));
    assert_eq!(s.list().unwrap().len(), 3);
    let settled = *s.synced.lock().unwrap();
    assert!(settled.is_some());
    assert_eq!(s.list().unwrap().len(), 3);
    // Removed by hand, added by hand, renamed: each followed.
    fs::remove_file(d.path().join("m000.held")).unwrap();
    assert_eq!(s.list().unwrap().len(), 2);
    age_dir(d.path(), Duration::from_secs(5));
    fs::write(d.path().join("n001.held"), msg("n001", 5000).encode()).unwrap();
    let ids: Vec<String> = s
        .list()
        .unwrap()
        .into_iter()
        .map(|h| h.envelope.id)
        .collect();
    assert!(ids.contains(&"n001".to_string()), "{ids:?}");
    age_dir(d.path(), Duration::from_secs(5));
    s.list().unwrap();
    fs::rename(d.path().join("m001.held"), d.path().join("m001.x")).unwrap();
    assert_eq!(s.list().unwrap().len(), 2);
}

/// The same with a full spool at the default limits (10,000 messages of 100 KiB: about
/// 1 GiB of files):
/// `cargo test --lib hold::spool::tests::full_spool_reads -- --ignored --nocapture` prints
/// the figures. Ignored by default: it writes 1 GiB.
#[test]
#[ignore]
fn full_spool_reads() {
    let (files, envelopes, listing, expiry) = reads(10_000, 100 * 1024);
    let most = envelopes + 4 * 10_000 + 4096;
    assert!(
        listing <= most && expiry <= most,
        "{listing} {expiry} > {most}"
    );
    assert!(files > 1_000_000_000, "{files}");
}

#[test]
fn verify_judges_the_spool_and_creates_nothing() {
    let d = tempfile::tempdir().unwrap();
    // Missing: passes (run makes it), and is still missing.
    let missing = d.path().join("hold");
    Spool::verify(&settings(&missing)).unwrap();
    assert!(!missing.exists());
    // Present and private: passes, no probe left behind.
    std::fs::create_dir(&missing).unwrap();
    std::fs::set_permissions(&missing, std::fs::Permissions::from_mode(0o700)).unwrap();
    Spool::verify(&settings(&missing)).unwrap();
    assert_eq!(std::fs::read_dir(&missing).unwrap().count(), 0);
    // Writable by others: refused, as open refuses it.
    std::fs::set_permissions(&missing, std::fs::Permissions::from_mode(0o770)).unwrap();
    let e = Spool::verify(&settings(&missing)).unwrap_err();
    assert!(e.to_string().contains("chmod 700"), "{e}");
}
