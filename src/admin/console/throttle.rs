//! Timeouts, not lockouts, after wrong admin tokens on the TCP address: per client address,
//! each recent wrong token doubles the time before that address is heard again, the way
//! failed SMTP AUTH is slowed ([`crate::policy::authdelay`]).
//!
//! After the n-th recent wrong token from an address (the count decays by a factor e every
//! `decay`), the address is not heard for `base · 2^(n−1)`, at most `max`: a request that
//! presents a token (the login form, or `Authorization: Bearer`) meanwhile is answered 429
//! with `Retry-After`, its token not looked at. The wrong answer itself comes at once and
//! holds nothing: a waiting request would keep an admin connection, and enough of them would
//! starve the listener. A right token still works once the wait is over, and forgets the
//! address's wrong tokens.
//!
//! Across all addresses together, at most `per_minute` wrong tokens are looked at per
//! minute (a bucket of `per_minute` tries, refilled evenly over the minute): once they are
//! spent, no token from anyone is looked at (429 with `Retry-After`, the time until the next
//! try) until the bucket refills, so a guesser with many addresses (2,000 in 127/8, or an
//! IPv6 range) gets no more tries than the bucket gives, and the right token works again
//! once the guessing stops. The right token cannot be let through meanwhile: answering it
//! while refusing wrong ones would tell the guesser which was right.
//!
//! An IPv6 client is keyed by its /64 (one host commonly holds a whole /64); an IPv4-mapped
//! address by its IPv4 address. At most [`MAX_ADDRESSES`] addresses are remembered; a new
//! one beyond that takes the place of the one whose wait ends first. No I/O: the caller
//! gives the time.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv6Addr};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::config::LoginDelay;
use crate::policy::authdelay::delay_for;
use crate::policy::model::AuthDelay;

/// Addresses remembered at once.
pub const MAX_ADDRESSES: usize = 4096;

/// The key of a client address: the address, IPv6 cut to its /64.
pub fn key_of(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V4(v4) => IpAddr::V4(v4),
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => IpAddr::V6(Ipv6Addr::from(u128::from(v6) & !((1u128 << 64) - 1))),
        },
    }
}

/// Why a presented token is not looked at now, and for how long (answer 429 with
/// `Retry-After`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Wait {
    /// The client's address waits after its own wrong tokens.
    Address(Duration),
    /// Wrong tokens from all addresses together spent the minute's tries.
    Everyone(Duration),
}

impl Wait {
    /// How long.
    pub fn time(self) -> Duration {
        match self {
            Wait::Address(d) | Wait::Everyone(d) => d,
        }
    }

    /// Why, in words, with the wait in whole seconds (`secs`).
    pub fn why(self, secs: u64) -> String {
        match self {
            Wait::Address(_) => {
                format!("too many wrong tokens from your address: try again in {secs} s")
            }
            Wait::Everyone(_) => format!(
                "too many wrong tokens from many addresses: no token is checked for now; try \
                 again in {secs} s"
            ),
        }
    }
}

/// What a request that presents a token may do now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Turn {
    /// Its token is looked at.
    Go,
    /// Not now.
    Wait(Wait),
}

/// The tries left for wrong tokens from all addresses: `per_minute` at most, refilled at
/// `per_minute` a minute; below one, no token is looked at.
#[derive(Clone, Copy, Debug)]
struct Bucket {
    /// Tries left as of `at` (below zero when concurrent wrong tokens overdrew it).
    left: f64,
    at: Instant,
}

/// One address's recent wrong tokens.
#[derive(Clone, Copy, Debug)]
struct Entry {
    /// The decayed count as of `at`.
    count: f64,
    /// When `count` was last set.
    at: Instant,
    /// Not heard before this.
    until: Instant,
}

/// The wrong tokens of recent addresses, bounded in number, and of all together.
#[derive(Debug)]
pub struct Throttle {
    delay: LoginDelay,
    max_addresses: usize,
    entries: Mutex<Entries>,
}

#[derive(Debug)]
struct Entries {
    by_address: HashMap<IpAddr, Entry>,
    /// `None` until the first wrong token (full).
    all: Option<Bucket>,
}

impl Throttle {
    /// A throttle with the waits of `delay`, remembering [`MAX_ADDRESSES`] addresses.
    pub fn new(delay: LoginDelay) -> Throttle {
        Throttle::with_capacity(delay, MAX_ADDRESSES)
    }

    /// A throttle remembering at most `max_addresses` addresses (at least one).
    pub fn with_capacity(delay: LoginDelay, max_addresses: usize) -> Throttle {
        Throttle {
            delay,
            max_addresses: max_addresses.max(1),
            entries: Mutex::new(Entries {
                by_address: HashMap::new(),
                all: None,
            }),
        }
    }

    fn entries(&self) -> std::sync::MutexGuard<'_, Entries> {
        self.entries.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Tries per second, and at most, of the bucket shared by all addresses.
    fn rate(&self) -> (f64, f64) {
        let n = f64::from(self.delay.per_minute.max(1));
        (n / 60.0, n)
    }

    /// The bucket's tries left at `now`.
    fn left(&self, all: Option<Bucket>, now: Instant) -> f64 {
        let (rate, full) = self.rate();
        all.map_or(full, |b| {
            (b.left + now.saturating_duration_since(b.at).as_secs_f64() * rate).min(full)
        })
    }

    /// Whether a token from `ip` is looked at now: not while the address waits after its
    /// own wrong tokens, nor while the tries of all addresses together are spent.
    pub fn turn(&self, ip: IpAddr, now: Instant) -> Turn {
        let e = self.entries();
        if let Some(a) = e.by_address.get(&key_of(ip)).filter(|a| a.until > now) {
            return Turn::Wait(Wait::Address(a.until - now));
        }
        let left = self.left(e.all, now);
        if left < 1.0 {
            let (rate, _) = self.rate();
            let secs = (1.0 - left) / rate;
            return Turn::Wait(Wait::Everyone(Duration::from_secs_f64(secs)));
        }
        Turn::Go
    }

    /// Counts a wrong token from `ip` (and one of the tries of all addresses); returns how
    /// long the address now waits.
    pub fn wrong(&self, ip: IpAddr, now: Instant) -> Duration {
        let key = key_of(ip);
        let mut e = self.entries();
        let left = self.left(e.all, now) - 1.0;
        e.all = Some(Bucket { left, at: now });
        let map = &mut e.by_address;
        let count = match map.get(&key) {
            Some(e) => decayed(
                e.count,
                now.saturating_duration_since(e.at),
                self.delay.decay,
            ),
            None => 0.0,
        } + 1.0;
        let wait = self.wait_for(count);
        if !map.contains_key(&key) && map.len() >= self.max_addresses {
            // The address whose wait ends first (most likely over already) makes room.
            if let Some(k) = map.iter().min_by_key(|(_, e)| e.until).map(|(k, _)| *k) {
                map.remove(&k);
            }
        }
        map.insert(
            key,
            Entry {
                count,
                at: now,
                until: now + wait,
            },
        );
        wait
    }

    /// A right token from `ip`: its wrong ones are forgotten.
    pub fn right(&self, ip: IpAddr) {
        self.entries().by_address.remove(&key_of(ip));
    }

    /// Addresses remembered now.
    pub fn len(&self) -> usize {
        self.entries().by_address.len()
    }

    /// Whether no address is remembered.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The wait after a decayed count of `n` wrong tokens: SMTP AUTH's doubling.
    fn wait_for(&self, n: f64) -> Duration {
        let d = AuthDelay {
            enabled: true,
            base: self.delay.base,
            max: self.delay.max,
            decay_secs: u32::try_from(self.delay.decay.as_secs()).unwrap_or(u32::MAX),
        };
        delay_for(&d, n)
    }
}

/// `count` after `elapsed`, falling by a factor e every `decay`.
fn decayed(count: f64, elapsed: Duration, decay: Duration) -> f64 {
    if decay.is_zero() {
        return 0.0;
    }
    count * (-elapsed.as_secs_f64() / decay.as_secs_f64()).exp()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn delay() -> LoginDelay {
        LoginDelay {
            base: Duration::from_millis(100),
            max: Duration::from_secs(3),
            decay: Duration::from_secs(600),
            per_minute: 100_000,
        }
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn waits_double_per_address_and_are_capped() {
        // A week's decay: the few seconds between the tokens forget next to nothing.
        let week = LoginDelay {
            decay: Duration::from_secs(7 * 86_400),
            ..delay()
        };
        let t = Throttle::new(week);
        let t0 = Instant::now();
        let a = ip("192.0.2.1");
        assert_eq!(t.turn(a, t0), Turn::Go);
        let mut now = t0;
        let mut waits = Vec::new();
        for _ in 0..8 {
            let w = t.wrong(a, now);
            waits.push(w.as_millis());
            // Asked again at once: wait the whole of it; after it: heard.
            assert_eq!(t.turn(a, now), Turn::Wait(Wait::Address(w)));
            now += w;
            assert_eq!(t.turn(a, now), Turn::Go);
        }
        assert_eq!(waits, [100, 200, 400, 800, 1600, 3000, 3000, 3000]);
        // Another address is not slowed.
        assert_eq!(t.turn(ip("192.0.2.2"), t0), Turn::Go);
        assert_eq!(t.wrong(ip("192.0.2.2"), now).as_millis(), 100);
    }

    #[test]
    fn a_right_token_forgets_and_time_decays() {
        let t = Throttle::new(delay());
        let a = ip("2001:db8::1");
        let t0 = Instant::now();
        for i in 0..3 {
            t.wrong(a, t0 + Duration::from_millis(i));
        }
        assert_eq!(t.wrong(a, t0 + Duration::from_millis(3)).as_millis(), 800);
        t.right(a);
        assert!(t.is_empty());
        assert_eq!(t.wrong(a, t0).as_millis(), 100);
        // Ten decay periods later the count is nearly gone: back to the base wait.
        let later = t0 + Duration::from_secs(6000);
        assert_eq!(t.wrong(a, later).as_millis(), 100);
    }

    #[test]
    fn ipv6_is_keyed_by_its_64_and_mapped_ipv4_by_ipv4() {
        assert_eq!(key_of(ip("2001:db8:1:2:3:4:5:6")), ip("2001:db8:1:2::"));
        assert_eq!(key_of(ip("::ffff:192.0.2.7")), ip("192.0.2.7"));
        assert_eq!(key_of(ip("192.0.2.7")), ip("192.0.2.7"));
        let t = Throttle::new(delay());
        let t0 = Instant::now();
        t.wrong(ip("2001:db8:1:2::1"), t0);
        assert!(matches!(
            t.turn(ip("2001:db8:1:2::ffff"), t0),
            Turn::Wait(_)
        ));
        assert_eq!(t.turn(ip("2001:db8:1:3::1"), t0), Turn::Go);
        t.wrong(ip("::ffff:192.0.2.7"), t0);
        assert!(matches!(t.turn(ip("192.0.2.7"), t0), Turn::Wait(_)));
    }

    #[test]
    fn memory_is_bounded_and_the_first_wait_to_end_goes() {
        let t = Throttle::with_capacity(delay(), 3);
        let t0 = Instant::now();
        let a = ip("192.0.2.1");
        // a waits longest (three wrong tokens); b and c once each, c later than b.
        for _ in 0..3 {
            t.wrong(a, t0);
        }
        t.wrong(ip("192.0.2.2"), t0);
        t.wrong(ip("192.0.2.3"), t0 + Duration::from_millis(10));
        t.wrong(ip("192.0.2.4"), t0 + Duration::from_millis(20));
        assert_eq!(t.len(), 3);
        let now = t0 + Duration::from_millis(20);
        assert_eq!(
            t.turn(ip("192.0.2.2"), now),
            Turn::Go,
            "b's wait ended first"
        );
        assert!(matches!(t.turn(a, now), Turn::Wait(_)));
        assert!(matches!(t.turn(ip("192.0.2.3"), now), Turn::Wait(_)));
    }

    #[test]
    fn wrong_tokens_from_many_addresses_share_the_minutes_tries() {
        let t = Throttle::new(LoginDelay {
            per_minute: 60,
            ..delay()
        });
        let t0 = Instant::now();
        // 2,000 addresses in 127/8, each with one wrong token, all at once: the first 60
        // are looked at, then nobody's (not even a fresh address's) until the bucket refills.
        let mut looked_at = 0;
        for i in 0..2_000u32 {
            let a = IpAddr::from([127, 1, (i >> 8) as u8, i as u8]);
            match t.turn(a, t0) {
                Turn::Go => {
                    t.wrong(a, t0);
                    looked_at += 1;
                }
                Turn::Wait(w) => assert!(matches!(w, Wait::Everyone(_)), "{w:?}"),
            }
        }
        assert_eq!(looked_at, 60);
        let fresh = ip("192.0.2.9");
        let Turn::Wait(Wait::Everyone(w)) = t.turn(fresh, t0) else {
            panic!("the tries are spent")
        };
        // One try comes back every second (60 a minute).
        assert_eq!(w, Duration::from_secs(1));
        assert!(Wait::Everyone(w).why(1).contains("many addresses"));
        assert_eq!(t.turn(fresh, t0 + w), Turn::Go);
        // Half a minute without guesses: 30 tries again, no more than the minute's 60 later.
        assert_eq!(t.left(t.entries().all, t0 + Duration::from_secs(30)), 30.0);
        assert_eq!(
            t.left(t.entries().all, t0 + Duration::from_secs(3600)),
            60.0
        );
        // The right token forgets its address only; the shared tries stay spent.
        t.right(fresh);
        assert!(matches!(t.turn(fresh, t0), Turn::Wait(Wait::Everyone(_))));
    }

    proptest! {
        /// Whatever the addresses and times, the wait never falls below the base, never
        /// exceeds the cap, never shrinks for quick repeats from one address, and the
        /// number of addresses kept never exceeds the bound.
        #[test]
        fn waits_stay_between_base_and_cap(
            events in proptest::collection::vec((0u8..8, 0u64..5_000), 1..200),
        ) {
            let d = delay();
            let t = Throttle::with_capacity(d, 4);
            let t0 = Instant::now();
            let mut now = t0;
            let mut last: Option<(IpAddr, Duration)> = None;
            for (host, step_ms) in events {
                now += Duration::from_millis(step_ms);
                let a = IpAddr::from([198, 51, 100, host]);
                let w = t.wrong(a, now);
                prop_assert!(w >= d.base && w <= d.max, "{w:?}");
                if let Some((prev_a, prev)) = last.filter(|_| step_ms == 0) {
                    if prev_a == a {
                        prop_assert!(w >= prev, "{w:?} < {prev:?}");
                    }
                }
                last = Some((a, w));
                prop_assert!(t.len() <= 4);
                prop_assert_eq!(t.turn(a, now), Turn::Wait(Wait::Address(w)));
            }
        }
    }
}
