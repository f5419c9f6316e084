//! Soak: mixed load at a steady, modest rate through the real binary,
//! with floodgate's memory and descriptors sampled into a CSV curve.
//!
//! Every session is one of: a plain message (1-3 recipients, sometimes two messages), a
//! STARTTLS + AUTH PLAIN submission, a sender under a low rate limit (2 a minute: MAIL is
//! deferred with 450 most of the time), a transaction reset with RSET before the real one,
//! a client that drops the connection in the middle of DATA, bad commands (5xx), a wrong
//! password (535 from upstream) and AUTH before TLS (538). Message sizes vary from a few
//! hundred bytes to 120 KB, with dot-stuffed lines. Every reply is checked; anything
//! unexpected is counted as an error.
//!
//! At the end: no errors; every message acknowledged with 250 is in the recorder exactly
//! once, and nothing else is (no aborted or deferred message leaked); floodgate's RSS at the
//! end is at most max(1.5 x, +20 MiB) of its RSS after warm-up; its descriptors are back to
//! the pre-load baseline within 30 s of the load stopping; nothing panicked.
//!
//! Parameters (environment):
//! * `FLOODGATE_SOAK_SECS` load duration, default 60 (what `cargo test` runs);
//!   e.g. `FLOODGATE_SOAK_SECS=1800 cargo test --test soak -- --nocapture` for 30 minutes.
//! * `FLOODGATE_SOAK_RATE` sessions started per second, default 20.
//! * `FLOODGATE_SOAK_SAMPLE_SECS` sampling period, default 10.
//! * `FLOODGATE_SOAK_SEED` the session mix's random seed, default fixed.
//!
//! The CSV (`elapsed_s,rss_kib,fds,sessions,accepted,deferred,aborted,errors`) is written
//! to `target/tmp/soak-<secs>s-<pid>.csv`; its path and the figures are printed on stderr
//! (visible without `--nocapture`).

use crate::common;
use crate::loadkit;

use std::collections::HashMap;
use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{
    b64_encode, Floodgate, FloodgateConfig, ListenerSpec, Recorder, RecorderOptions, Reply,
    PASSWORD, USER,
};
use loadkit::{
    dev_connector, fd_count, fd_listing, raise_nofile, report, rss_kib, settled_fds, Smtp,
};
use tokio::sync::Semaphore;
use tokio::task::JoinSet;
use tokio::time::Instant;
use tokio_rustls::TlsConnector;

/// Sessions in progress at most (the rate is far below this unless floodgate stalls).
const IN_FLIGHT: usize = 256;
/// RSS growth allowed after warm-up: the end may be this factor above the warm RSS...
const RSS_FACTOR: f64 = 1.5;
/// ...or this many KiB above it, whichever is larger.
const RSS_SLACK_KIB: u64 = 20 * 1024;

/// The policy part of floodgate's config: a low limit for one sender domain, and short
/// AUTH failure delays (every soak client comes from 127.0.0.1).
const POLICY: &str = r#"
[[limit]]
name = "soak-limited"
when = 'sender_domain == "limited.test"'
count = "messages"
key = "${sender_address}"
rate = "2 / 1m"
burst = "2"
action = "defer"

[auth_failures]
enabled = true
base_delay = "50ms"
max_delay = "200ms"
decay = "1m"
"#;

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// A small deterministic generator (xorshift64*), so a run's mix can be repeated.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    /// Uniform in `lo..hi`.
    fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next() % (hi - lo)
    }
}

/// What happened, counted across sessions.
#[derive(Default)]
struct Counts {
    sessions: AtomicU64,
    accepted: AtomicU64,
    deferred: AtomicU64,
    refused: AtomicU64,
    aborted: AtomicU64,
    errors: AtomicU64,
    /// Tokens of the messages acknowledged with 250.
    tokens: Mutex<Vec<String>>,
    /// The first errors, for the failure message.
    first_errors: Mutex<Vec<String>>,
    /// Sessions per kind.
    kinds: Mutex<HashMap<&'static str, u64>>,
}

impl Counts {
    fn error(&self, e: String) {
        self.errors.fetch_add(1, Ordering::Relaxed);
        let mut first = self.first_errors.lock().expect("lock");
        if first.len() < 20 {
            first.push(e);
        }
    }
}

/// Where floodgate listens and what a session needs.
struct Ctx {
    plain: SocketAddr,
    submission: SocketAddr,
    tls: TlsConnector,
    counts: Counts,
}

type Step = Result<(), String>;

fn want(what: &str, r: std::io::Result<Reply>, codes: &[u16]) -> Result<Reply, String> {
    match r {
        Ok(r) if codes.contains(&r.code) => Ok(r),
        Ok(r) => Err(format!("{what}: wanted {codes:?}, got {r:?}")),
        Err(e) => Err(format!("{what}: {e}")),
    }
}

/// A message body of about `size` bytes carrying `token`, with some dot-led lines.
fn body(token: &str, size: usize, rng: &mut Rng) -> String {
    let mut b = format!(
        "From: soak@example.org\r\nTo: rcpt@example.net\r\nSubject: soak {token}\r\n\
         X-Soak-Id: {token}\r\n\r\n"
    );
    let mut n = 0u64;
    while b.len() < size {
        n += 1;
        let len = rng.range(10, 78) as usize;
        if rng.range(0, 20) == 0 {
            b.push('.'); // dot-stuffed on the wire
        }
        let fill = (b'a' + (n % 26) as u8) as char;
        b.extend(std::iter::repeat_n(fill, len));
        b.push_str("\r\n");
    }
    b
}

fn message_size(rng: &mut Rng) -> usize {
    match rng.range(0, 100) {
        0..=79 => rng.range(300, 3_000) as usize,
        80..=97 => rng.range(3_000, 30_000) as usize,
        _ => rng.range(30_000, 120_000) as usize,
    }
}

/// Dot-stuffs `body` and appends the end-of-data line.
fn wire(body: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(body.len() + 16);
    for line in body.split_inclusive("\r\n") {
        if line.starts_with('.') {
            out.push(b'.');
        }
        out.extend_from_slice(line.as_bytes());
    }
    out.extend_from_slice(b".\r\n");
    out
}

/// One transaction from MAIL to the end of data. Returns `false` when MAIL was deferred.
async fn transaction(
    c: &mut Smtp,
    ctx: &Ctx,
    sender: &str,
    token: &str,
    rng: &mut Rng,
) -> Result<bool, String> {
    let mail = want(
        "MAIL",
        c.cmd(&format!("MAIL FROM:<{sender}>")).await,
        &[250, 450],
    )?;
    if mail.code == 450 {
        ctx.counts.deferred.fetch_add(1, Ordering::Relaxed);
        return Ok(false);
    }
    for r in 0..rng.range(1, 4) {
        want(
            "RCPT",
            c.cmd(&format!("RCPT TO:<r{r}@example.net>")).await,
            &[250],
        )?;
    }
    want("DATA", c.cmd("DATA").await, &[354])?;
    let size = message_size(rng);
    c.send(&wire(&body(token, size, rng)))
        .await
        .map_err(|e| format!("body: {e}"))?;
    want("end of data", c.reply().await, &[250])?;
    ctx.counts.accepted.fetch_add(1, Ordering::Relaxed);
    ctx.counts
        .tokens
        .lock()
        .expect("lock")
        .push(token.to_string());
    Ok(true)
}

async fn greet(addr: SocketAddr, i: u64) -> Result<Smtp, String> {
    let mut c = Smtp::connect(addr)
        .await
        .map_err(|e| format!("connect: {e}"))?;
    want("greeting", c.reply().await, &[220])?;
    want("EHLO", c.cmd(&format!("EHLO soak-{i}.test")).await, &[250])?;
    Ok(c)
}

async fn secure(c: &mut Smtp, ctx: &Ctx, i: u64) -> Step {
    if let Some(r) = c
        .starttls(&ctx.tls)
        .await
        .map_err(|e| format!("STARTTLS: {e}"))?
    {
        return Err(format!("STARTTLS: {r:?}"));
    }
    want(
        "EHLO after TLS",
        c.cmd(&format!("EHLO soak-{i}.test")).await,
        &[250],
    )?;
    Ok(())
}

async fn quit(mut c: Smtp) -> Step {
    want("QUIT", c.cmd("QUIT").await, &[221])?;
    Ok(())
}

fn auth_plain(user: &str, password: &str) -> String {
    format!(
        "AUTH PLAIN {}",
        b64_encode(format!("\0{user}\0{password}").as_bytes())
    )
}

/// Session number `i`: picks its kind and runs it.
async fn session(ctx: Arc<Ctx>, i: u64, seed: u64) {
    let mut rng = Rng::new(seed ^ i.wrapping_mul(0xA24B_AED4_963E_E407));
    let pick = rng.range(0, 100);
    let kind = match pick {
        0..=29 => "plain",
        30..=49 => "tls-auth",
        50..=59 => "limited",
        60..=69 => "rset",
        70..=79 => "abort-mid-data",
        80..=89 => "bad-commands",
        90..=94 => "bad-password",
        _ => "auth-before-tls",
    };
    ctx.counts.sessions.fetch_add(1, Ordering::Relaxed);
    *ctx.counts
        .kinds
        .lock()
        .expect("lock")
        .entry(kind)
        .or_default() += 1;
    let token = |m: u32| format!("s{i}-m{m}");
    let run = async {
        match kind {
            "plain" => {
                let mut c = greet(ctx.plain, i).await?;
                transaction(&mut c, &ctx, "plain@example.org", &token(0), &mut rng).await?;
                if rng.range(0, 10) < 3 {
                    transaction(&mut c, &ctx, "plain@example.org", &token(1), &mut rng).await?;
                }
                quit(c).await
            }
            "tls-auth" => {
                let mut c = greet(ctx.submission, i).await?;
                secure(&mut c, &ctx, i).await?;
                want("AUTH", c.cmd(&auth_plain(USER, PASSWORD)).await, &[235])?;
                transaction(&mut c, &ctx, "alice@example.org", &token(0), &mut rng).await?;
                quit(c).await
            }
            "limited" => {
                let mut c = greet(ctx.plain, i).await?;
                let sender = format!("bulk{}@limited.test", i % 3);
                transaction(&mut c, &ctx, &sender, &token(0), &mut rng).await?;
                quit(c).await
            }
            "rset" => {
                let mut c = greet(ctx.plain, i).await?;
                want("MAIL", c.cmd("MAIL FROM:<rset@example.org>").await, &[250])?;
                want("RCPT", c.cmd("RCPT TO:<gone@example.net>").await, &[250])?;
                want("RSET", c.cmd("RSET").await, &[250])?;
                transaction(&mut c, &ctx, "rset@example.org", &token(0), &mut rng).await?;
                quit(c).await
            }
            "abort-mid-data" => {
                let tls = rng.range(0, 2) == 0;
                let mut c = greet(if tls { ctx.submission } else { ctx.plain }, i).await?;
                if tls {
                    secure(&mut c, &ctx, i).await?;
                }
                want("MAIL", c.cmd("MAIL FROM:<abort@example.org>").await, &[250])?;
                want("RCPT", c.cmd("RCPT TO:<r@example.net>").await, &[250])?;
                want("DATA", c.cmd("DATA").await, &[354])?;
                let size = message_size(&mut rng);
                let w = wire(&body(&token(0), size, &mut rng));
                // Part of the message, never the end-of-data line; then the client is gone.
                let cut = rng.range(1, (w.len() - 3) as u64) as usize;
                c.send(&w[..cut]).await.map_err(|e| format!("body: {e}"))?;
                drop(c);
                ctx.counts.aborted.fetch_add(1, Ordering::Relaxed);
                Ok(())
            }
            "bad-commands" => {
                let mut c = greet(ctx.plain, i).await?;
                want("unknown verb", c.cmd("FROB the widget").await, &[500, 502])?;
                want("broken MAIL", c.cmd("MAIL FROM:<broken").await, &[501, 553])?;
                want("RCPT first", c.cmd("RCPT TO:<r@example.net>").await, &[503])?;
                want("NOOP", c.cmd("NOOP").await, &[250])?;
                ctx.counts.refused.fetch_add(3, Ordering::Relaxed);
                quit(c).await
            }
            "bad-password" => {
                let mut c = greet(ctx.submission, i).await?;
                secure(&mut c, &ctx, i).await?;
                want("AUTH", c.cmd(&auth_plain(USER, "wrong")).await, &[535])?;
                ctx.counts.refused.fetch_add(1, Ordering::Relaxed);
                quit(c).await
            }
            _ => {
                let mut c = greet(ctx.submission, i).await?;
                want(
                    "AUTH in clear",
                    c.cmd(&auth_plain(USER, PASSWORD)).await,
                    &[538],
                )?;
                ctx.counts.refused.fetch_add(1, Ordering::Relaxed);
                quit(c).await
            }
        }
    };
    if let Err(e) = run.await {
        ctx.counts.error(format!("session {i} ({kind}): {e}"));
    }
}

/// The CSV curve and the samples kept for the verdict.
struct Curve {
    path: PathBuf,
    file: std::fs::File,
    /// (elapsed seconds, RSS KiB, descriptors)
    samples: Vec<(f64, u64, usize)>,
}

impl Curve {
    fn new(secs: u64) -> Curve {
        let path = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
            .join(format!("soak-{secs}s-{}.csv", std::process::id()));
        let mut file = std::fs::File::create(&path).expect("create the CSV");
        writeln!(
            file,
            "elapsed_s,rss_kib,fds,sessions,accepted,deferred,aborted,errors"
        )
        .expect("write the CSV");
        Curve {
            path,
            file,
            samples: Vec::new(),
        }
    }

    fn sample(&mut self, pid: u32, elapsed: f64, c: &Counts) {
        let (rss, fds) = (rss_kib(pid), fd_count(pid));
        let load = |a: &AtomicU64| a.load(Ordering::Relaxed);
        writeln!(
            self.file,
            "{elapsed:.1},{rss},{fds},{},{},{},{},{}",
            load(&c.sessions),
            load(&c.accepted),
            load(&c.deferred),
            load(&c.aborted),
            load(&c.errors)
        )
        .expect("write the CSV");
        self.samples.push((elapsed, rss, fds));
    }
}

/// Runs the load for `secs` seconds, then waits for the sessions in progress; returns the
/// curve and when the load started (the curve's time origin).
async fn drive(
    ctx: Arc<Ctx>,
    pid: u32,
    secs: u64,
    rate: u64,
    sample_every: u64,
    seed: u64,
) -> (Curve, Instant) {
    let mut curve = Curve::new(secs);
    let start = Instant::now();
    let stop_at = start + Duration::from_secs(secs);
    let gap = Duration::from_secs_f64(1.0 / rate as f64);
    let gate = Arc::new(Semaphore::new(IN_FLIGHT));
    let mut set = JoinSet::new();
    let mut next_sample = start;
    let mut i = 0u64;
    loop {
        let now = Instant::now();
        if now >= next_sample {
            curve.sample(pid, now.duration_since(start).as_secs_f64(), &ctx.counts);
            next_sample += Duration::from_secs(sample_every);
        }
        if now >= stop_at {
            break;
        }
        let permit = gate.clone().acquire_owned().await.expect("semaphore");
        let ctx = ctx.clone();
        set.spawn(async move {
            session(ctx, i, seed).await;
            drop(permit);
        });
        // Reap finished sessions so the set stays small.
        while set.try_join_next().is_some() {}
        i += 1;
        tokio::time::sleep_until(start + gap * i as u32).await;
    }
    while let Some(r) = set.join_next().await {
        if let Err(e) = r {
            ctx.counts.error(format!("session task: {e}"));
        }
    }
    curve.sample(pid, start.elapsed().as_secs_f64(), &ctx.counts);
    (curve, start)
}

/// The `X-Soak-Id` of every message upstream accepted, with how often it came.
fn recorded_tokens(rec: &Recorder) -> HashMap<String, u32> {
    let mut seen = HashMap::new();
    for m in rec.messages() {
        let data = String::from_utf8_lossy(&m.data);
        let token = data
            .lines()
            .find_map(|l| l.strip_prefix("X-Soak-Id: "))
            .unwrap_or("<no X-Soak-Id>")
            .trim()
            .to_string();
        *seen.entry(token).or_default() += 1;
    }
    seen
}

#[test]
fn soak_mixed_load() {
    let _serial = loadkit::SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let secs = env_u64("FLOODGATE_SOAK_SECS", 60).max(10);
    let rate = env_u64("FLOODGATE_SOAK_RATE", 20).clamp(1, 200);
    let sample_every = env_u64("FLOODGATE_SOAK_SAMPLE_SECS", 10).max(1);
    let seed = env_u64("FLOODGATE_SOAK_SEED", 0x5eed);
    // Warm-up: the first minute, or the first third of a short run.
    let warm_up = (secs / 3).min(60) as f64;
    raise_nofile(8192);

    let rec = Recorder::start(RecorderOptions {
        idle_timeout: 120.0,
        ..RecorderOptions::default()
    });
    let cfg = FloodgateConfig::new(rec.addr())
        .listeners(vec![
            ListenerSpec::new("plain", "none"),
            ListenerSpec::new("submission", "starttls"),
        ])
        .server("workers", "2")
        .server("max_connections_per_ip", "1000")
        .log_level("info")
        .extra(POLICY);
    let fg = Floodgate::start(&cfg);
    let pid = fg.pid();
    let ctx = Arc::new(Ctx {
        plain: fg.addr("plain"),
        submission: fg.addr("submission"),
        tls: dev_connector(),
        counts: Counts::default(),
    });

    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    // The baseline: after one session on each listener has come and gone.
    rt.block_on(async {
        for addr in [ctx.plain, ctx.submission] {
            let c = greet(addr, u64::MAX)
                .await
                .unwrap_or_else(|e| panic!("{e}"));
            quit(c).await.unwrap_or_else(|e| panic!("{e}"));
        }
    });
    rec.wait_idle();
    let fds_before = settled_fds(pid);
    let (mut curve, start) = rt.block_on(drive(ctx.clone(), pid, secs, rate, sample_every, seed));
    let load_end = std::time::Instant::now();

    // Descriptors back to the baseline once the load stopped (bounded wait).
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let fds_after = loop {
        let fds = fd_count(pid);
        if fds <= fds_before {
            break fds;
        }
        if std::time::Instant::now() >= deadline {
            let sessions = fg.stderr().matches(" session").count();
            panic!(
                "floodgate holds {fds} descriptors 30 s after the load, {fds_before} before it \
                 ({sessions} session log lines, {} sessions started):\n{}",
                ctx.counts.sessions.load(Ordering::Relaxed),
                fd_listing(pid)
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let settle = load_end.elapsed().as_secs_f64();
    curve.sample(pid, start.elapsed().as_secs_f64(), &ctx.counts);

    let c = &ctx.counts;
    let load = |a: &AtomicU64| a.load(Ordering::Relaxed);
    let kinds = {
        let mut k: Vec<_> = c.kinds.lock().expect("lock").clone().into_iter().collect();
        k.sort();
        k
    };
    let warm = curve
        .samples
        .iter()
        .find(|s| s.0 >= warm_up)
        .copied()
        .unwrap_or(curve.samples[0]);
    let peak = curve.samples.iter().map(|s| s.1).max().unwrap_or(0);
    let end_rss = curve.samples.last().map_or(0, |s| s.1);
    let bound = ((warm.1 as f64 * RSS_FACTOR) as u64).max(warm.1 + RSS_SLACK_KIB);
    report(&format!(
        "soak: {secs}s at {rate}/s: sessions={} accepted={} deferred={} refused(expected 5xx)={} aborted={} errors={}",
        load(&c.sessions),
        load(&c.accepted),
        load(&c.deferred),
        load(&c.refused),
        load(&c.aborted),
        load(&c.errors)
    ));
    report(&format!("soak: kinds {kinds:?}"));
    report(&format!(
        "soak: floodgate VmRSS after warm-up ({:.0}s)={} KiB peak={} KiB end={} KiB (bound {} KiB); fds before={} peak={} after={} ({:.1}s after the load)",
        warm.0,
        warm.1,
        peak,
        end_rss,
        bound,
        fds_before,
        curve.samples.iter().map(|s| s.2).max().unwrap_or(0),
        fds_after,
        settle
    ));
    report(&format!("soak: curve written to {}", curve.path.display()));

    assert_eq!(
        load(&c.errors),
        0,
        "unexpected outcomes: {:#?}",
        c.first_errors.lock().expect("lock")
    );
    assert!(load(&c.accepted) > 0 && load(&c.deferred) > 0 && load(&c.aborted) > 0);

    // Every acknowledged message upstream exactly once; nothing else.
    rec.wait_idle();
    let recorded = recorded_tokens(&rec);
    let acked = c.tokens.lock().expect("lock").clone();
    let missing: Vec<_> = acked
        .iter()
        .filter(|t| !recorded.contains_key(*t))
        .collect();
    let twice: Vec<_> = recorded.iter().filter(|(_, n)| **n != 1).collect();
    let acked_set: std::collections::HashSet<_> = acked.iter().collect();
    let extra: Vec<_> = recorded.keys().filter(|t| !acked_set.contains(t)).collect();
    assert!(
        missing.is_empty() && twice.is_empty() && extra.is_empty(),
        "record vs acknowledged: missing {} {:?}, not exactly once {:?}, never acknowledged {:?}",
        missing.len(),
        &missing[..missing.len().min(10)],
        &twice[..twice.len().min(10)],
        &extra[..extra.len().min(10)]
    );
    assert_eq!(recorded.len(), acked.len());

    assert!(
        end_rss <= bound,
        "floodgate's RSS grew: {end_rss} KiB at the end, {} KiB after warm-up (bound {bound} KiB); curve in {}",
        warm.1,
        curve.path.display()
    );
    let log = fg.stderr();
    assert!(!log.contains("panicked"), "floodgate panicked:\n{log}");
}
