//! The memory a campaign costs, in bytes (not time): a counting allocator (this thread's
//! allocations only) measures the in-memory campaign book's heap per campaign (the band
//! entries of a message with a Subject, its text's and its Subject-joined ones, and its
//! ledger) and per sender entry, with the free text a copy's info
//! carries at its caps (a 200-character Subject, five link domains). The figures are
//! printed (`cargo test --test limits campaign_memory -- --nocapture`) and bounded, and a
//! 3.4 MB Subject costs a ledger no more than any other.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use floodgate::message_keys::minhash::{BANDS, SUBJECT_BANDS};
use floodgate::store::campaign::{capped, CampaignBook, CampaignJoin, SUBJECT_CHARS};

/// The band values of a message with a Subject.
const VALUES: usize = BANDS + SUBJECT_BANDS;

struct Counting;

thread_local! {
    static LIVE: Cell<isize> = const { Cell::new(0) };
}

fn add(n: isize) {
    // try_with: the thread's slot may be gone while it exits.
    let _ = LIVE.try_with(|c| c.set(c.get() + n));
}

// SAFETY: forwards every call to the system allocator unchanged; only counts.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        add(layout.size() as isize);
        // SAFETY: same contract as the caller's.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        add(-(layout.size() as isize));
        // SAFETY: same contract as the caller's.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        add(new_size as isize - layout.size() as isize);
        // SAFETY: same contract as the caller's.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

fn live() -> isize {
    LIVE.with(Cell::get)
}

/// A copy's info as the engine writes it, its Subject capped from `subject`.
fn info(subject: &str) -> String {
    serde_json::json!({
        "client_ip": "192.0.2.123",
        "sender": "someone.with.a.long.name@example.org",
        "subject": capped(subject, SUBJECT_CHARS),
        "link_domains": ["secure-billing.example", "cdn.example", "a.example", "b.example",
                         "c.example"],
    })
    .to_string()
}

fn join(c: usize, sender: &str, subject: &str) -> CampaignJoin {
    CampaignJoin {
        values: (0..VALUES as u64)
            .map(|b| format!("b{b}:{:016x}", (c as u64) << 8 | b))
            .collect(),
        link: true,
        sender: sender.into(),
        recipients: 5,
        info: info(subject),
        period_us: 3_600_000_000,
    }
}

#[test]
fn campaign_memory_per_campaign_and_per_sender_is_bounded() {
    const N: usize = 2_000;
    let subject = "S".repeat(SUBJECT_CHARS * 2);
    // Campaigns: N texts, one sender each.
    let book = CampaignBook::default();
    let before = live();
    for c in 0..N {
        book.join(
            &join(c, &format!("user{c}@example.org"), &subject),
            c as i64,
        );
    }
    let per_campaign = (live() - before) as f64 / N as f64;
    assert_eq!(book.sizes(), (VALUES * N, N));
    // Senders: more accounts in one campaign (within its bound of senders).
    const S: usize = 900;
    let one = CampaignBook::default();
    one.join(&join(0, "first", &subject), 0);
    let before = live();
    for s in 0..S {
        one.join(
            &join(0, &format!("user{s}@example.org"), &subject),
            s as i64 + 1,
        );
    }
    let per_sender = (live() - before) as f64 / S as f64;
    // A 3.4 MB Subject (the engine caps it before the ledger) costs what any other does:
    // the sender's info is replaced by one of the same size.
    let huge = "x".repeat(3_400_000);
    let before = live();
    one.join(&join(0, "user5@example.org", &huge), S as i64 + 2);
    let huge_cost = live() - before;
    println!(
        "campaign book: {per_campaign:.0} bytes per campaign ({VALUES} band entries, ledger, \
         one sender), {per_sender:.0} bytes per further sender entry; a 3.4 MB Subject: \
         {huge_cost} bytes"
    );
    assert!(per_campaign < 16_384.0, "{per_campaign} bytes per campaign");
    assert!(per_sender < 1_024.0, "{per_sender} bytes per sender");
    assert!(
        huge_cost.abs() < 2_048,
        "{huge_cost} bytes for a huge Subject"
    );
}
