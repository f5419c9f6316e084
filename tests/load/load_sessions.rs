//! Load: ten thousand concurrent sessions through the real binary.
//!
//! floodgate runs with two workers, caps set above the load and its descriptor limit
//! raised (inherited from this process, which raises its own), in front of the recording
//! upstream (`tests/upstream/recorder.py`: one asyncio process holds the 10 000 upstream
//! sessions). The test opens the sessions (greeting + EHLO each, STARTTLS too for the TLS
//! case), holds them all, checks that every one got 220/250, relays one legitimate
//! message while they are open, then closes them and waits for floodgate's descriptors to
//! come back to where they were.
//!
//! Memory per idle session = (VmRSS with the sessions open - VmRSS before) / sessions.
//! Each floodgate session holds its client connection and its own upstream connection, so
//! the figure covers both. The figures are printed on stderr (not captured by the test
//! harness) and appended to `target/tmp/load-figures.txt`; nothing about time is asserted.
//!
//! A third test opens sessions that each relay one 20 KB message and then stay idle: the
//! memory a session keeps once it has relayed a message (its input buffer back at command
//! size, no message buffer kept).
//!
//! Sizes: `FLOODGATE_LOAD_PLAIN` (default 10000) plain sessions, `FLOODGATE_LOAD_TLS`
//! (default 2000, so that `cargo test` stays well under a minute) STARTTLS sessions,
//! `FLOODGATE_LOAD_SENT` (default 2000) sessions idle after a message;
//! `FLOODGATE_LOAD_TLS=10000 cargo test --test load_sessions starttls` runs ten thousand
//! TLS sessions (about 100 s with the debug build).
//!
//! Descriptors: floodgate needs two per session. The test raises its own limit (soft and,
//! when allowed, hard) and floodgate inherits it. Where even root cannot raise the hard
//! limit (no CAP_SYS_RESOURCE, e.g. a hard limit of 20000 in a container), the test runs
//! as many sessions as fit (9950 there) and prints that it did.

use crate::common;
use crate::loadkit;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use common::*;
use loadkit::{
    dev_connector, fd_count, raise_nofile, report, rss_kib, settled_fds, status_kib, Smtp,
};
use tokio::sync::Semaphore;
use tokio::task::JoinSet;

/// Sessions whose connect/greeting/EHLO(/STARTTLS) are in flight at once. Keeps bursts
/// below the listen backlogs (floodgate's 1024, the recorder's asyncio default of 100 is
/// served fast enough at this depth).
const OPENING_AT_ONCE: usize = 64;

/// Descriptors floodgate needs beyond two per session (it starts with about 25:
/// listeners, epoll, log, ...; one more session for the legitimate one).
const FD_SLACK: u64 = 100;

fn env_count(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("tokio runtime")
}

/// Raises the descriptor limit for `sessions` sessions (this process holds one per
/// session, floodgate two, the recorder one) and returns how many sessions fit.
fn fit_sessions(sessions: usize) -> usize {
    let want = 2 * sessions as u64 + FD_SLACK;
    let got = raise_nofile(want.max(70_000));
    if got >= want {
        return sessions;
    }
    // Without CAP_SYS_RESOURCE even root cannot raise the hard limit: floodgate needs two
    // descriptors a session, so run as many as fit and say so.
    let fit = ((got.saturating_sub(FD_SLACK)) / 2) as usize;
    report(&format!(
        "load: descriptor hard limit {got} cannot be raised to {want} (no CAP_SYS_RESOURCE?): \
         {fit} sessions instead of {sessions}"
    ));
    assert!(
        fit >= 1000,
        "descriptor limit {got} is far too low for a load test"
    );
    fit
}

fn start_pair() -> (Recorder, Floodgate) {
    let rec = Recorder::start(RecorderOptions {
        idle_timeout: 600.0,
        ..RecorderOptions::default()
    });
    let cfg = FloodgateConfig::new(rec.addr())
        .listeners(vec![
            ListenerSpec::new("plain", "none"),
            ListenerSpec::new("submission", "starttls"),
        ])
        .server("max_connections", "30000")
        .server("max_connections_per_ip", "30000")
        .server("workers", "2")
        .timeout("command", "10m")
        .timeout("session", "30m")
        .timeout("upstream_connect", "30s")
        .log_level("warn");
    let fg = Floodgate::start(&cfg);
    (rec, fg)
}

/// Opens one session: greeting, EHLO, and with `tls` STARTTLS plus a second EHLO.
async fn open_one(
    addr: SocketAddr,
    i: usize,
    tls: Option<Arc<tokio_rustls::TlsConnector>>,
) -> Result<Smtp, String> {
    let step = |what: &str, e: std::io::Error| format!("session {i}: {what}: {e}");
    let mut c = Smtp::connect(addr).await.map_err(|e| step("connect", e))?;
    let g = c.reply().await.map_err(|e| step("greeting", e))?;
    if g.code != 220 {
        return Err(format!("session {i}: greeting {g:?}"));
    }
    let helo = format!("EHLO load-{i}.test");
    let e = c.cmd(&helo).await.map_err(|e| step("EHLO", e))?;
    if e.code != 250 {
        return Err(format!("session {i}: EHLO {e:?}"));
    }
    if let Some(connector) = tls {
        if let Some(r) = c
            .starttls(&connector)
            .await
            .map_err(|e| step("STARTTLS", e))?
        {
            return Err(format!("session {i}: STARTTLS {r:?}"));
        }
        let e = c.cmd(&helo).await.map_err(|e| step("EHLO after TLS", e))?;
        if e.code != 250 {
            return Err(format!("session {i}: EHLO after TLS {e:?}"));
        }
    }
    Ok(c)
}

/// Opens `n` sessions, at most [`OPENING_AT_ONCE`] in progress; returns the open ones and
/// the failures.
async fn open_many(
    addr: SocketAddr,
    n: usize,
    tls: Option<Arc<tokio_rustls::TlsConnector>>,
) -> (Vec<Smtp>, Vec<String>) {
    let gate = Arc::new(Semaphore::new(OPENING_AT_ONCE));
    let mut set = JoinSet::new();
    for i in 0..n {
        let gate = gate.clone();
        let tls = tls.clone();
        set.spawn(async move {
            let _permit = gate.acquire_owned().await.expect("semaphore");
            open_one(addr, i, tls).await
        });
    }
    gather(set).await
}

/// Waits for every task of `set`: the sessions that came through, and the failures.
async fn gather(mut set: JoinSet<Result<Smtp, String>>) -> (Vec<Smtp>, Vec<String>) {
    let mut open = Vec::with_capacity(set.len());
    let mut failed = Vec::new();
    while let Some(r) = set.join_next().await {
        match r {
            Ok(Ok(c)) => open.push(c),
            Ok(Err(e)) => failed.push(e),
            Err(e) => failed.push(format!("task: {e}")),
        }
    }
    (open, failed)
}

/// A whole legitimate session on `addr` (STARTTLS first with `tls`): one message carrying
/// `token`, which must be acknowledged with 250.
async fn full_session(
    addr: SocketAddr,
    tls: Option<Arc<tokio_rustls::TlsConnector>>,
    token: &str,
) -> Result<(), String> {
    let mut c = open_one(addr, usize::MAX, tls)
        .await
        .map_err(|e| format!("full session: {e}"))?;
    let expect = |what: &str, r: std::io::Result<Reply>, code: u16| -> Result<(), String> {
        match r {
            Ok(r) if r.code == code => Ok(()),
            Ok(r) => Err(format!("full session: {what}: {r:?}")),
            Err(e) => Err(format!("full session: {what}: {e}")),
        }
    };
    expect("MAIL", c.cmd("MAIL FROM:<load@example.org>").await, 250)?;
    expect("RCPT", c.cmd("RCPT TO:<rcpt@example.net>").await, 250)?;
    expect("DATA", c.cmd("DATA").await, 354)?;
    let body = format!(
        "From: load@example.org\r\nTo: rcpt@example.net\r\nSubject: {token}\r\n\r\n\
         sent while thousands of sessions are open\r\n.\r\n"
    );
    c.send(body.as_bytes())
        .await
        .map_err(|e| format!("full session: body: {e}"))?;
    expect("end of data", c.reply().await, 250)?;
    expect("QUIT", c.cmd("QUIT").await, 221)?;
    Ok(())
}

/// One 20 KB message on an open session: MAIL, RCPT, DATA, the text, 250.
async fn send_message(c: &mut Smtp, i: usize) -> Result<(), String> {
    for (cmd, code) in [
        ("MAIL FROM:<load@example.org>", 250),
        ("RCPT TO:<rcpt@example.net>", 250),
        ("DATA", 354),
    ] {
        match c.cmd(cmd).await {
            Ok(r) if r.code == code => {}
            other => return Err(format!("session {i}: {cmd}: {other:?}")),
        }
    }
    let mut text = format!("From: load@example.org\r\nSubject: sent-{i}\r\n\r\n");
    while text.len() < 20_000 {
        text.push_str("a line of text as long as the lines of a real message are long\r\n");
    }
    text.push_str(".\r\n");
    c.send(text.as_bytes())
        .await
        .map_err(|e| format!("session {i}: text: {e}"))?;
    match c.reply().await {
        Ok(r) if r.code == 250 => Ok(()),
        other => Err(format!("session {i}: end of data: {other:?}")),
    }
}

struct Figures {
    kind: &'static str,
    sessions: usize,
    rss_before: u64,
    rss_open: u64,
    fds_before: usize,
    fds_open: usize,
}

impl Figures {
    fn print(&self) {
        let per = (self.rss_open.saturating_sub(self.rss_before)) as f64 / self.sessions as f64;
        report(&format!(
            "load: {} sessions={} floodgate VmRSS before={} KiB open={} KiB -> {:.1} KiB per idle session; fds before={} open={}",
            self.kind, self.sessions, self.rss_before, self.rss_open, per, self.fds_before, self.fds_open
        ));
    }
}

/// The body of both tests: `n` sessions on `listener`, STARTTLS when `tls`.
fn hold_sessions(kind: &'static str, listener: &str, n: usize, tls: bool) {
    let _serial = loadkit::SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let n = fit_sessions(n);
    let (rec, fg) = start_pair();
    let addr = fg.addr(listener);
    let pid = fg.pid();
    let connector = tls.then(|| Arc::new(dev_connector()));
    let rt = runtime();

    // Warm-up: one whole session, so first-use allocations are in the baseline.
    rt.block_on(full_session(addr, connector.clone(), "warm-up"))
        .unwrap_or_else(|e| panic!("{e}"));
    rec.wait_events("message", 1);
    rec.wait_idle();
    let fds_before = settled_fds(pid);
    let rss_before = rss_kib(pid);

    let (open, failed) = rt.block_on(open_many(addr, n, connector.clone()));
    assert!(
        failed.is_empty(),
        "{} of {n} {kind} sessions failed (none may be refused); first: {:#?}",
        failed.len(),
        &failed[..failed.len().min(10)]
    );
    assert_eq!(open.len(), n);
    assert!(open.iter().all(|c| c.is_tls() == tls));
    // Every session is now idle inside floodgate, waiting for its next command.
    let rss_open = rss_kib(pid);
    let fds_open = fd_count(pid);
    assert!(
        fds_open >= 2 * n,
        "floodgate holds {fds_open} descriptors for {n} sessions (client + upstream each)"
    );

    // A legitimate session while they are all open: relayed and recorded.
    let token = format!("legit-{kind}-{n}");
    rt.block_on(full_session(addr, connector.clone(), &token))
        .unwrap_or_else(|e| panic!("{e}"));
    let msgs = rec.wait_events("message", 2);
    let found = rec
        .messages()
        .iter()
        .filter(|m| String::from_utf8_lossy(&m.data).contains(&token))
        .count();
    assert_eq!(
        found,
        1,
        "the legitimate message is in the record once ({} messages)",
        msgs.len()
    );

    Figures {
        kind,
        sessions: n,
        rss_before,
        rss_open,
        fds_before,
        fds_open,
    }
    .print();
    report(&format!(
        "load: {kind} floodgate VmHWM={} KiB",
        status_kib(pid, "VmHWM").unwrap_or(0)
    ));

    // Close them all; floodgate must let go of both descriptors of every session.
    rt.block_on(async move {
        for c in open {
            drop(c);
        }
    });
    let fds_after = wait_until(
        Duration::from_secs(60),
        "floodgate's descriptors to return to the baseline",
        || {
            let fds = fd_count(pid);
            (fds <= fds_before).then_some(fds)
        },
    );
    report(&format!(
        "load: {kind} after closing: fds={fds_after} VmRSS={} KiB",
        rss_kib(pid)
    ));
    let log = fg.stderr();
    assert!(
        !log.contains("accept failed") && !log.contains("too many connections"),
        "floodgate refused or failed to accept:\n{}",
        &log[..log.len().min(4000)]
    );
}

#[test]
fn ten_thousand_plain_sessions() {
    hold_sessions(
        "plain",
        "plain",
        env_count("FLOODGATE_LOAD_PLAIN", 10_000),
        false,
    );
}

/// Sessions that each relayed a message and then wait for their next command.
#[test]
fn sessions_idle_after_a_message() {
    let _serial = loadkit::SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let n = fit_sessions(env_count("FLOODGATE_LOAD_SENT", 2_000));
    let (rec, fg) = start_pair();
    let addr = fg.addr("plain");
    let pid = fg.pid();
    let rt = runtime();
    rt.block_on(full_session(addr, None, "warm-up"))
        .unwrap_or_else(|e| panic!("{e}"));
    rec.wait_events("message", 1);
    rec.wait_idle();
    let rss_before = rss_kib(pid);
    let fds_before = settled_fds(pid);

    let (open, failed) = rt.block_on(open_many(addr, n, None));
    assert!(
        failed.is_empty(),
        "sessions failed: {:#?}",
        &failed[..failed.len().min(10)]
    );
    let rss_open = rss_kib(pid);
    // Every session relays its message (a few at a time, as they were opened), then idles.
    let (open, failed) = rt.block_on(async move {
        let gate = Arc::new(Semaphore::new(OPENING_AT_ONCE));
        let mut set = JoinSet::new();
        for (i, mut c) in open.into_iter().enumerate() {
            let gate = gate.clone();
            set.spawn(async move {
                let _permit = gate.acquire_owned().await.expect("semaphore");
                send_message(&mut c, i).await.map(|()| c)
            });
        }
        gather(set).await
    });
    assert!(
        failed.is_empty(),
        "messages failed: {:#?}",
        &failed[..failed.len().min(10)]
    );
    assert_eq!(rec.wait_events("message", n + 1).len(), n + 1);
    let rss_sent = rss_kib(pid);
    Figures {
        kind: "plain, idle after a 20 KB message",
        sessions: n,
        rss_before,
        rss_open: rss_sent,
        fds_before,
        fds_open: fd_count(pid),
    }
    .print();
    let kept = rss_sent.saturating_sub(rss_open) as f64 / n as f64;
    report(&format!(
        "load: the same sessions before their messages: {:.1} KiB per idle session; \
         {kept:.1} KiB more each once they relayed one",
        rss_open.saturating_sub(rss_before) as f64 / n as f64
    ));
    // Not a speed figure but a bound: a session must not keep its last message (20 KB) or
    // a message-sized buffer once it is idle again. Measured: about 10 KiB (the buffers
    // freed by the sessions relaying at the same moment, allocator pages, the command
    // buffers); keeping a 64 KiB spool per session measured 73 KiB here.
    assert!(
        kept < 16.0,
        "an idle session keeps {kept:.1} KiB more after relaying one 20 KB message"
    );
    drop(open);
}

#[test]
fn starttls_sessions() {
    hold_sessions(
        "starttls",
        "submission",
        env_count("FLOODGATE_LOAD_TLS", 2_000),
        true,
    );
}
