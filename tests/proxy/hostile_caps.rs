//! Hostile clients against the connection caps: thousands of connections from one
//! IP, and connections that sit on a PROXY listener without ever sending their header. Each
//! gets a clear 421 4.7.0 while a legitimate session (from another address, through a
//! trusted PROXY header) goes on and delivers.

use crate::common;

use std::net::SocketAddr;
use std::time::Duration;

use common::*;

/// Starts a transaction with one recipient: EHLO, MAIL, RCPT (all 250).
fn begin(c: &mut RawClient, tag: &str) {
    c.ehlo(&format!("{tag}.client.test"));
    let r = c.cmd(&format!("MAIL FROM:<{tag}@client.test>"));
    assert_eq!(r.code, 250, "MAIL: {r:?}");
    let r = c.cmd(&format!("RCPT TO:<{tag}-rcpt@dest.test>"));
    assert_eq!(r.code, 250, "RCPT: {r:?}");
}

/// DATA, a one-line body, 250, QUIT, 221.
fn finish(c: &mut RawClient, tag: &str) {
    let r = c.cmd("DATA");
    assert_eq!(r.code, 354, "DATA: {r:?}");
    c.send(format!("Subject: {tag}\r\n\r\nbody of {tag}\r\n.\r\nQUIT\r\n").as_bytes());
    let codes: Vec<u16> = c.replies_until_close().iter().map(|r| r.code).collect();
    assert_eq!(codes, [250, 221], "{tag}");
}

/// A session that arrives through the trusted PROXY listener as `client`.
fn behind(addr: SocketAddr, client: &str) -> RawClient {
    let mut c = RawClient::connect(addr);
    c.send(format!("PROXY TCP4 {client} 127.0.0.1 5555 25\r\n").as_bytes());
    let g = c.reply();
    assert_eq!(g.code, 220, "greeting behind the proxy: {g:?}");
    c
}

fn assert_421(r: &Reply, text: &str) {
    assert_eq!(
        (r.code, r.enhanced().as_deref()),
        (421, Some("4.7.0")),
        "want 421 4.7.0, got {r:?}"
    );
    assert!(r.text().contains(text), "want {text:?} in {r:?}");
}

fn delivered(rec: &Recorder, tag: &str) -> bool {
    let sender = format!("{tag}@client.test");
    rec.messages().iter().any(|m| m.mail_from == sender)
}

#[test]
fn two_thousand_connections_from_one_ip_get_421_past_the_per_ip_cap() {
    const CAP: usize = 20;
    const FLOOD: usize = 2000;
    const BATCH: usize = 100;
    let rec = Recorder::plain();
    let fg = Floodgate::start(
        &FloodgateConfig::new(rec.addr())
            .log_level("info")
            .server("max_connections_per_ip", &CAP.to_string())
            .trusted_proxies(&["127.0.0.1/32"])
            .listeners(vec![
                ListenerSpec::new("plain", "none"),
                ListenerSpec::new("behind", "none").with_proxy_protocol(),
            ]),
    );
    let plain = fg.addr("plain");
    // The honest client comes from another address (through the trusted proxy).
    let mut honest = behind(fg.addr("behind"), "192.0.2.50");
    begin(&mut honest, "honest");
    let mut held: Vec<RawClient> = (0..CAP)
        .map(|_| RawClient::connect_greeted(plain))
        .collect();
    let rss_before = fg.rss_kib();
    let mut refused = 0;
    for _ in 0..FLOOD / BATCH {
        let mut batch: Vec<RawClient> = (0..BATCH).map(|_| RawClient::connect(plain)).collect();
        for c in &mut batch {
            assert_421(&c.reply(), "too many connections from 127.0.0.1");
            let rest = c.drain_until_close();
            assert!(rest.is_empty(), "bytes after 421: {}", show(&rest));
            refused += 1;
        }
    }
    assert_eq!(refused, FLOOD);
    if let (Some(before), Some(after)) = (rss_before, fg.rss_kib()) {
        assert!(
            after < before + 16 * 1024,
            "floodgate grew from {before} KiB to {after} KiB refusing {FLOOD} connections"
        );
    }
    // The admitted sessions from the flooding address still work, and so does the honest
    // client's transaction that spanned the flood.
    begin(&mut held[0], "held");
    finish(&mut held[0], "held");
    finish(&mut honest, "honest");
    drop(held);
    wait_until(Duration::from_secs(20), "both messages upstream", || {
        (delivered(&rec, "held") && delivered(&rec, "honest")).then_some(())
    });
    // Refusals never opened an upstream session: the honest one, 20 held, nothing more.
    assert_eq!(rec.events_of("session_start").len(), CAP + 1);
}

#[test]
fn connections_waiting_for_a_proxy_header_count_against_the_total_cap() {
    let rec = Recorder::plain();
    let fg = Floodgate::start(
        &FloodgateConfig::new(rec.addr())
            .log_level("info")
            .server("max_connections", "3")
            .trusted_proxies(&["127.0.0.1/32"])
            .timeout("proxy_header", "60s")
            .listeners(vec![
                ListenerSpec::new("plain", "none"),
                ListenerSpec::new("behind", "none").with_proxy_protocol(),
            ]),
    );
    let plain = fg.addr("plain");
    let proxied = fg.addr("behind");
    // Six connections that start a header and never finish it. No other connection
    // exists meanwhile, so exactly three hold the three places and three are refused, in
    // whatever order floodgate accepts them.
    let mut all: Vec<RawClient> = (0..6).map(|_| RawClient::connect(proxied)).collect();
    for c in &mut all {
        let _ = c.try_send(b"PROXY TCP4 192.0.2.9 ");
        c.set_read_timeout(Duration::from_millis(100));
    }
    let mut refused = vec![false; all.len()];
    wait_until(Duration::from_secs(10), "three refusals", || {
        for (c, r) in all.iter_mut().zip(refused.iter_mut()) {
            if !*r {
                if let Ok(reply) = c.try_reply() {
                    assert_421(&reply, "too many connections");
                    *r = true;
                }
            }
        }
        (refused.iter().filter(|r| **r).count() == 3).then_some(())
    });
    let mut waiting: Vec<RawClient> = all
        .into_iter()
        .zip(&refused)
        .filter(|(_, r)| !**r)
        .map(|(c, _)| c)
        .collect();
    for c in &mut waiting {
        c.set_read_timeout(REPLY_TIMEOUT);
    }
    // Every new connection is refused while they wait, on either listener.
    for addr in [plain, proxied] {
        let mut c = RawClient::connect(addr);
        assert_421(&c.reply(), "too many connections");
        assert!(c.drain_until_close().is_empty());
    }

    // One header is completed: that session is admitted and delivers.
    let mut honest = waiting.pop().expect("a waiting connection");
    honest.send(b"127.0.0.1 5555 25\r\n");
    let g = honest.reply();
    assert_eq!(g.code, 220, "{g:?}");
    begin(&mut honest, "honest");
    finish(&mut honest, "honest");
    // The two silent ones leave: places are free again.
    drop(waiting);
    let mut c = wait_until(Duration::from_secs(10), "a free place", || {
        let mut c = RawClient::connect(plain);
        (c.reply().code == 220).then_some(c)
    });
    begin(&mut c, "after");
    finish(&mut c, "after");
    wait_until(Duration::from_secs(20), "both messages upstream", || {
        (delivered(&rec, "honest") && delivered(&rec, "after")).then_some(())
    });
}
