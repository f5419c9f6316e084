//! Criterion benchmarks of outcomes and ratio limits:
//!
//! * `outcomes/parse-*`: one smart host log line read (Postfix, Exim);
//! * `outcomes/follow-file`: lines followed from a file — read, split, parsed and reported
//!   (a realistic mix: one line in four a delivery result, the rest other lines of the
//!   log) — on one core, per line;
//! * `outcomes/report-bounce`: one bounce of an indexed message charged to a ratio window;
//!   `outcomes/report-duplicate`: the same bounce again (a retry);
//! * `ratio/txn-*`: one whole transaction through the policy (MAIL, one RCPT answered,
//!   end of data answered with a queue id), with a rate limit only, and with a bounce ratio
//!   besides it: the difference is the ratio's added latency per transaction.
//!
//! Run: `cargo bench --bench outcomes -- --warm-up-time 1 --measurement-time 3`

use std::hint::black_box;
use std::io::Write;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use floodgate::generation::Generation;
use floodgate::outcomes::follow::Follower;
use floodgate::outcomes::index::Queued;
use floodgate::outcomes::logline::{Format, Kind};
use floodgate::policy::{Facts, Policy, RatePolicy, Stage};
use floodgate::smtp::reply::Reply;
use floodgate::store::MemoryStore;

const POSTFIX: &str = "Nov 25 19:30:01 relay postfix/smtp[2211]: 3F1A2B3C4D: to=<nobody@example.org>, orig_to=<old@example.org>, relay=mx.example.org[192.0.2.7]:25, delay=0.5, delays=0.1/0/0.2/0.2, dsn=5.1.1, status=bounced (host mx.example.org[192.0.2.7] said: 550 5.1.1 <nobody@example.org>: Recipient address rejected: User unknown (in reply to RCPT TO command))";
const POSTFIX_OTHER: &str = "Nov 25 19:30:01 relay postfix/qmgr[88]: 3F1A2B3C4D: from=<a@example.com>, size=300, nrcpt=1 (queue active)";
const EXIM: &str = "2026-11-25 19:30:01 1rOBxk-0003Ab-2Q ** nobody@example.org R=dnslookup T=remote_smtp H=mx.example.org [192.0.2.7]: SMTP error from remote mail server after RCPT TO:<nobody@example.org>: 550 5.1.1 User unknown";

const HEAD: &str = r#"
[[listener]]
address = "127.0.0.1:0"
[upstream]
address = "127.0.0.1:2525"
[[limit]]
name = "per-user"
key = "${authenticated_id}"
count = "messages"
rate = "1000000 / 1h"
burst = "1000000"
"#;

const RATIO: &str = r#"
[[limit]]
name = "bounce-ratio"
key = "${authenticated_id}"
ratio = "bounced_recipients / recipients"
above = 0.3
min_events = 20
period = "1h"
"#;

fn policy(text: &str) -> RatePolicy {
    let cfg = Generation::parse(Path::new("/etc/floodgate/b.toml"), text).expect("config");
    RatePolicy::new(cfg.policy, Arc::new(MemoryStore::default()))
}

fn facts() -> Facts {
    Facts {
        client_ip: Some("192.0.2.10".parse().unwrap()),
        listener: "submission".into(),
        user: Some("alice".into()),
        sender: Some("alice@example.com".into()),
        recipient: Some("bob@example.org".into()),
        recipient_normalized: Some("bob@example.org".into()),
        recipients_count: 1,
        message_size: 2000,
        ..Facts::default()
    }
}

fn bench(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let mut g = c.benchmark_group("outcomes");
    g.throughput(Throughput::Elements(1));
    g.bench_function("parse-postfix", |b| {
        b.iter(|| black_box(Format::Postfix.line(black_box(POSTFIX))))
    });
    g.bench_function("parse-exim", |b| {
        b.iter(|| black_box(Format::Exim.line(black_box(EXIM))))
    });

    let p = policy(&format!("{HEAD}{RATIO}"));
    let mut n = 0u64;
    g.bench_function("report-bounce", |b| {
        b.iter_batched(
            || {
                n += 1;
                let id = format!("Q{n:010}");
                p.queue_index().insert(
                    &id,
                    Queued {
                        keys: vec![("bounce-ratio".into(), "alice".into())],
                        recipients: vec!["nobody@example.org".into()],
                    },
                );
                id
            },
            |id| {
                rt.block_on(floodgate::policy::outcomes::report(
                    &p,
                    &id,
                    "nobody@example.org",
                    None,
                    Kind::Bounced,
                ))
            },
            BatchSize::SmallInput,
        )
    });
    g.bench_function("report-duplicate", |b| {
        b.iter(|| {
            rt.block_on(floodgate::policy::outcomes::report(
                &p,
                "Q0000000001",
                "nobody@example.org",
                None,
                Kind::Bounced,
            ))
        })
    });

    // A log of 100 000 lines, one in four a delivery result of a queued message.
    const LINES: usize = 100_000;
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("mail.log");
    {
        let mut f = std::io::BufWriter::new(std::fs::File::create(&log).unwrap());
        for i in 0..LINES {
            if i % 4 == 0 {
                let id = format!("L{i:09}");
                p.queue_index().insert(
                    &id,
                    Queued {
                        keys: vec![("bounce-ratio".into(), "alice".into())],
                        recipients: vec!["nobody@example.org".into()],
                    },
                );
                writeln!(f, "{}", POSTFIX.replace("3F1A2B3C4D", &id)).unwrap();
            } else {
                writeln!(f, "{POSTFIX_OTHER}").unwrap();
            }
        }
    }
    g.throughput(Throughput::Elements(LINES as u64));
    g.sample_size(10);
    g.bench_function("follow-file", |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                let start = Instant::now();
                let mut f = Follower::new(&log, false);
                let mut lines = Vec::with_capacity(LINES);
                f.poll(&mut lines);
                assert_eq!(lines.len(), LINES);
                rt.block_on(async {
                    for l in &lines {
                        floodgate::policy::outcomes::line(&p, Format::Postfix, l).await;
                    }
                });
                total += start.elapsed();
            }
            total
        })
    });
    g.finish();

    let mut g = c.benchmark_group("ratio");
    g.throughput(Throughput::Elements(1));
    for (name, text) in [
        ("txn-rate-only", HEAD.to_string()),
        ("txn-with-ratio", format!("{HEAD}{RATIO}")),
    ] {
        let p = policy(&text);
        let f = facts();
        let mut n = 0u64;
        g.bench_function(name, |b| {
            b.iter(|| {
                n += 1;
                rt.block_on(async {
                    let mut s = p.session();
                    black_box(s.check(Stage::Mail, &f).await);
                    s.after_upstream(Stage::Mail, &f, &Reply::new(250, "2.1.0 Ok"))
                        .await;
                    black_box(s.check(Stage::Rcpt, &f).await);
                    s.after_upstream(Stage::Rcpt, &f, &Reply::new(250, "2.1.5 Ok"))
                        .await;
                    black_box(s.check(Stage::Message, &f).await);
                    let end = Reply::new(250, format!("2.0.0 Ok: queued as T{n:010}"));
                    s.after_upstream(Stage::Message, &f, &end).await;
                })
            })
        });
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
