//! A fleet end to end: two floodgate processes sharing one
//! real redis-server relay together exactly m messages under a limit of m, not
//! 2m; with `failure_mode = "closed"`, Redis killed in the middle defers the
//! next MAIL with 451 4.3.0 (no hang), and when Redis returns on the same port
//! shared enforcement resumes with one consistent count.
//!
//! Every wait is bounded (reply timeouts, bounded polling loops); nothing here
//! binds or connects beyond 127.0.0.1.

use crate::common;
use crate::common::redis as redis_server;

use std::time::Duration;

use common::*;
use redis_server::RedisServer;

/// Messages the limits below let through per client IP.
const M: usize = 5;
/// Sessions (one message each) sent in a round, alternating between the two floodgates.
const SESSIONS: usize = 12;

/// How one session's message ended.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Outcome {
    /// 2xx at the end of data: relayed.
    Accepted,
    /// Refused with this code and enhanced status at `stage`.
    Refused {
        stage: &'static str,
        code: u16,
        enhanced: Option<String>,
    },
}

/// The `[store]` section for `redis`, plus `more` lines.
fn store_section(redis: &RedisServer, more: &str) -> String {
    format!(
        "[store]\nbackend = \"redis\"\nurl = \"{}\"\n\
         timeout = \"500ms\"\nconnect_timeout = \"500ms\"\nprobe_interval = \"100ms\"\n{more}\n",
        redis.url()
    )
}

/// Starts two floodgates with the same `extra` TOML in front of `rec`.
fn two_floodgates(rec: &Recorder, extra: &str) -> [Floodgate; 2] {
    let start = || {
        Floodgate::start(
            &FloodgateConfig::new(rec.addr())
                .listeners(vec![ListenerSpec::new("plain", "none")])
                .log_level("info")
                .extra(extra),
        )
    };
    [start(), start()]
}

/// One session on `fg` sending one message (EHLO `helo`); every reply is bounded by
/// [`REPLY_TIMEOUT`], so a hung store fails the test instead of hanging it.
fn send_one(fg: &Floodgate, helo: &str, n: usize) -> Outcome {
    let mut c = RawClient::connect_greeted(fg.addr("plain"));
    c.ehlo(helo);
    let refused = |stage, r: &Reply| Outcome::Refused {
        stage,
        code: r.code,
        enhanced: r.enhanced(),
    };
    let mail = c.cmd("MAIL FROM:<sender@example.org>");
    if mail.code != 250 {
        assert_eq!(c.cmd("QUIT").code, 221);
        return refused("mail", &mail);
    }
    let rcpt = c.cmd(&format!("RCPT TO:<r{n}@example.com>"));
    if rcpt.code != 250 {
        assert_eq!(c.cmd("QUIT").code, 221);
        return refused("rcpt", &rcpt);
    }
    let data = c.cmd("DATA");
    assert_eq!(data.code, 354, "DATA: {}", data.text());
    c.send(
        format!("Subject: fleet {n}\r\nFrom: sender@example.org\r\n\r\nmessage {n}\r\n.\r\n")
            .as_bytes(),
    );
    let end = c.reply();
    assert_eq!(c.cmd("QUIT").code, 221);
    if end.code / 100 == 2 {
        Outcome::Accepted
    } else {
        refused("data", &end)
    }
}

/// Sends [`SESSIONS`] sessions alternating between the floodgates, numbering messages
/// from `first`.
fn alternate(fgs: &[Floodgate; 2], first: usize) -> Vec<Outcome> {
    (0..SESSIONS)
        .map(|i| send_one(&fgs[i % 2], "client.test", first + i))
        .collect()
}

/// Asserts exactly `m` accepted, every other session refused with a 4xx 4.7.1.
fn assert_exactly(outcomes: &[Outcome], m: usize, what: &str) {
    let accepted = outcomes.iter().filter(|o| **o == Outcome::Accepted).count();
    assert_eq!(accepted, m, "{what}: {outcomes:?}");
    for o in outcomes {
        if let Outcome::Refused { code, enhanced, .. } = o {
            assert_eq!(code / 100, 4, "{what}: refusal must be temporary: {o:?}");
            assert_eq!(enhanced.as_deref(), Some("4.7.1"), "{what}: {o:?}");
        }
    }
}

/// The subjects the recorder holds, sorted.
fn recorded_subjects(rec: &Recorder) -> Vec<String> {
    let mut s: Vec<String> = rec
        .messages()
        .iter()
        .map(|m| {
            let text = String::from_utf8_lossy(&m.data).into_owned();
            text.lines()
                .find_map(|l| l.strip_prefix("Subject: ").map(str::to_string))
                .unwrap_or_default()
        })
        .collect();
    s.sort();
    s
}

#[test]
fn two_floodgates_one_redis_relay_exactly_m() {
    // A token bucket (GCRA, charged at MAIL) and Exim's EWMA (strict, per_mail; 5.5 keeps
    // the boundary away from floating-point ties: rates ~5 pass, ~6 do not).
    let limits = [
        (
            "gcra",
            "[[limit]]\nname = \"per-ip\"\ncount = \"messages\"\nrate = \"5 / 1h\"\n\
             burst = \"5\"\naction = \"defer\"\n",
        ),
        (
            "exim",
            "[[limit]]\nname = \"per-ip\"\nratelimit = \"5.5 / 1h / per_mail / strict\"\n\
             action = \"defer\"\n",
        ),
    ];
    for (flavour, limit) in limits {
        let redis = RedisServer::start();
        let rec = Recorder::plain();
        let fgs = two_floodgates(&rec, &format!("{}{limit}", store_section(&redis, "")));
        let outcomes = alternate(&fgs, 0);
        assert_exactly(&outcomes, M, flavour);
        // Both processes took part: the first M sessions alternate, so each relayed some.
        for (i, fg) in fgs.iter().enumerate() {
            let relayed = outcomes
                .iter()
                .skip(i)
                .step_by(2)
                .filter(|o| **o == Outcome::Accepted)
                .count();
            assert!(relayed > 0, "{flavour}: floodgate {i} relayed nothing");
            assert!(
                !fg.stderr().contains("Redis unavailable"),
                "{flavour}: floodgate {i} lost Redis:\n{}",
                fg.stderr()
            );
        }
        // The first M in time were the accepted ones (nothing decays in a few seconds).
        assert!(
            outcomes[..M].iter().all(|o| *o == Outcome::Accepted),
            "{flavour}: {outcomes:?}"
        );
        let msgs = rec.messages();
        assert_eq!(msgs.len(), M, "{flavour}: the recorder holds exactly m");
        let want: Vec<String> = {
            let mut w: Vec<String> = (0..M).map(|n| format!("fleet {n}")).collect();
            w.sort();
            w
        };
        assert_eq!(recorded_subjects(&rec), want, "{flavour}");
        // The state is in Redis, not in either process: it holds keys.
        let size = redis_server::raw_command(redis.port, "DBSIZE").unwrap_or_default();
        assert!(
            size.starts_with(':') && size.trim() != ":0",
            "{flavour}: DBSIZE {size:?}"
        );
    }
}

/// Drives decisions on `fg` with `EHLO probe.test` sessions (only the probe limit
/// applies to them) until its log says Redis answers again; bounded.
fn until_redis_back(fg: &Floodgate, which: usize) {
    for _ in 0..100 {
        let mut c = RawClient::connect_greeted(fg.addr("plain"));
        c.ehlo("probe.test");
        let _ = c.cmd("MAIL FROM:<probe@example.org>");
        assert_eq!(c.cmd("QUIT").code, 221);
        if fg.stderr().contains("Redis answers again") {
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    panic!("floodgate {which} never saw Redis again:\n{}", fg.stderr());
}

/// The outage scenario up to Redis' death: one Redis (closed failure mode), two
/// floodgates, two messages relayed before the kill, then four sessions (alternating)
/// sent while Redis is down, each answered within the reply bound.
struct Outage {
    redis: RedisServer,
    rec: Recorder,
    fgs: [Floodgate; 2],
    /// The four sessions sent while Redis was down.
    during: Vec<Outcome>,
}

fn outage() -> Outage {
    let redis = RedisServer::start();
    let rec = Recorder::plain();
    // The counted limit ignores probe sessions; the probe limit (huge, its own key) gives
    // them a decision so a floodgate notices Redis is back without touching the count.
    let policy = "[[limit]]\nname = \"per-ip\"\nwhen = 'helo != \"probe.test\"'\n\
                  count = \"messages\"\nrate = \"5 / 1h\"\nburst = \"5\"\naction = \"defer\"\n\n\
                  [[limit]]\nname = \"probe\"\nwhen = 'helo == \"probe.test\"'\n\
                  count = \"messages\"\nkey = \"probe\"\nrate = \"1000000 / 1h\"\n\
                  burst = \"1000000\"\naction = \"defer\"\n";
    let extra = format!(
        "{}{policy}",
        store_section(&redis, "failure_mode = \"closed\"")
    );
    let fgs = two_floodgates(&rec, &extra);
    let mut o = Outage {
        redis,
        rec,
        fgs,
        during: Vec::new(),
    };
    // Before: shared enforcement, one message through each floodgate.
    for i in 0..2 {
        assert_eq!(send_one(&o.fgs[i], "client.test", i), Outcome::Accepted);
    }
    o.redis.kill();
    // Every session gets its replies within REPLY_TIMEOUT (send_one panics otherwise).
    o.during = (0..4)
        .map(|i| send_one(&o.fgs[i % 2], "client.test", 100 + i))
        .collect();
    for fg in &o.fgs {
        fg.wait_stderr("Redis unavailable", Duration::from_secs(10));
        let log = fg.stderr();
        assert!(
            log.contains("mode=\"closed\"") || log.contains("mode=closed"),
            "{log}"
        );
    }
    o
}

/// What the closed failure mode documents (`[store] failure_mode`, README, and
/// `store::redis::failover`): while Redis is down the next MAIL is deferred with
/// 451 4.3.0 and nothing is relayed.
#[test]
fn redis_killed_closed_mode_defers_451() {
    let o = outage();
    let relayed = o.rec.messages().len() - 2;
    let deferred = Outcome::Refused {
        stage: "mail",
        code: 451,
        enhanced: Some("4.3.0".into()),
    };
    assert!(
        o.during.iter().all(|d| *d == deferred),
        "closed mode must defer with 451 4.3.0 while Redis is down; got {:?} ({relayed} relayed)",
        o.during
    );
    assert_eq!(relayed, 0);
}

#[test]
fn redis_restarted_shared_enforcement_resumes() {
    let mut o = outage();
    // Whatever the outage answered (see redis_killed_closed_mode_defers_451), it was
    // answered: count what got through so the totals below are exact.
    let relayed_during = o.during.iter().filter(|d| **d == Outcome::Accepted).count();
    assert_eq!(o.rec.messages().len(), 2 + relayed_during);

    // Redis returns on the same port, empty (no persistence): both floodgates switch
    // back, and together they again relay exactly m.
    o.redis.restart();
    for (i, fg) in o.fgs.iter().enumerate() {
        until_redis_back(fg, i);
    }
    let after = alternate(&o.fgs, 200);
    assert_exactly(&after, M, "after restart");
    assert!(
        after[..M].iter().all(|x| *x == Outcome::Accepted),
        "{after:?}"
    );
    assert_eq!(o.rec.messages().len(), 2 + relayed_during + M);
    // The shared count is one count: a further session on each floodgate is refused,
    // and nothing counted in a process-local store during the outage leaks back.
    let more: Vec<Outcome> = (0..2)
        .map(|i| send_one(&o.fgs[i], "client.test", 300 + i))
        .collect();
    assert_exactly(&more, 0, "after the shared quota is used");
    assert_eq!(o.rec.messages().len(), 2 + relayed_during + M);
    for fg in &o.fgs {
        assert!(fg.stderr().contains("Redis answers again"));
    }
}
