//! Criterion benchmark of the per-message log line: one `message` event with the fields
//! floodgate's line carries, formatted by `tracing_subscriber`'s default format (no
//! colours) and by floodgate's [`TextFormat`], into a writer that discards it.
//!
//! Run: `cargo bench --bench logline -- --warm-up-time 1 --measurement-time 3`

use std::hint::black_box;
use std::net::IpAddr;

use criterion::{criterion_group, criterion_main, Criterion};
use floodgate::logs::text::TextFormat;

/// The `message` line of a relayed message, as `proxy::data` writes it.
fn message_line(client: IpAddr) {
    tracing::info!(
        client = %client,
        user = "alice@example.org",
        sender = "alice@example.org",
        recipients = 1usize,
        size = 1442u64,
        from = "alice@example.org",
        message_id = "7d5f.0003.0001@harness.test",
        upstream = "2.0.0 Ok: queued as 4dLq1F2kTxz9sWN",
        code = 250u16,
        "message"
    );
}

fn bench(c: &mut Criterion) {
    let client: IpAddr = "192.0.2.7".parse().expect("an address");
    let mut g = c.benchmark_group("logline");
    let default = tracing_subscriber::fmt()
        .with_ansi(false)
        .with_writer(std::io::sink)
        .finish();
    tracing::subscriber::with_default(default, || {
        g.bench_function("default-format", |b| {
            b.iter(|| message_line(black_box(client)))
        });
    });
    let text = tracing_subscriber::fmt()
        .with_ansi(false)
        .event_format(TextFormat)
        .with_writer(std::io::sink)
        .finish();
    tracing::subscriber::with_default(text, || {
        g.bench_function("text-format", |b| {
            b.iter(|| message_line(black_box(client)))
        });
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
