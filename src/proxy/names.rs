//! The client's name for XCLIENT `NAME` and `REVERSE_NAME`: a reverse lookup, then a
//! forward lookup of that name that must give the client's address back (a
//! forward-confirmed name, as Postfix computes it for a client that connects directly).
//!
//! The system resolver is used (`getnameinfo`, `getaddrinfo`): it follows
//! `/etc/nsswitch.conf` and `/etc/hosts` as Postfix itself does, so upstream gets the name
//! it would have found. Its calls block, so they run on tokio's blocking threads, at most
//! [`MAX_IN_FLIGHT`] at a time, the whole lookup bounded by `[timeouts]
//! client_name_lookup`; a lookup that times out leaves its thread to finish alone and
//! yields `[TEMPUNAVAIL]`. Results are cached per address ([`NameCache`]): bounded, with
//! a time to live, shorter for temporary failures.

use std::collections::HashMap;
use std::ffi::{CStr, CString};
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::Semaphore;
use tokio::time::Instant;

use crate::smtp::xclient::ClientName;

/// Lookups running at once; more wait for a place (within their timeout).
pub const MAX_IN_FLIGHT: usize = 32;
/// Addresses the cache keeps.
pub const CACHE_ENTRIES: usize = 8192;
/// How long a found name (or a definite "no name") is kept.
pub const TTL: Duration = Duration::from_secs(600);
/// How long a temporary failure is kept.
pub const TEMP_TTL: Duration = Duration::from_secs(30);

/// The names of one client address.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ClientNames {
    /// The forward-confirmed name (`NAME`).
    pub name: ClientName,
    /// The name the reverse lookup gave, unverified (`REVERSE_NAME`).
    pub reverse: ClientName,
}

impl ClientNames {
    /// Both names temporarily unavailable (a lookup that did not finish).
    pub fn temp_unavailable() -> ClientNames {
        ClientNames {
            name: ClientName::TempUnavailable,
            reverse: ClientName::TempUnavailable,
        }
    }

    fn is_temporary(&self) -> bool {
        self.name == ClientName::TempUnavailable || self.reverse == ClientName::TempUnavailable
    }
}

/// One session's lookup of its client's names: started early, awaited when first needed.
#[derive(Debug, Default)]
pub(super) struct NameLookup {
    /// The lookup under way.
    task: Option<tokio::task::JoinHandle<ClientNames>>,
    /// Its outcome, once awaited (or found in the cache).
    names: Option<ClientNames>,
}

impl NameLookup {
    /// Starts looking up `ip` with `resolver`: a client seen within the cache's lifetime
    /// (most connections) needs no task.
    pub(super) fn start(&mut self, resolver: &Arc<NameResolver>, ip: IpAddr) {
        if let Some(names) = resolver.cached(ip) {
            self.names = Some(names);
            return;
        }
        let resolver = resolver.clone();
        self.task = Some(tokio::spawn(async move { resolver.lookup(ip).await }));
    }

    /// The client's names: the lookup's outcome (waiting for it if needed, never past its
    /// timeout), or none when no lookup was started.
    pub(super) async fn get(&mut self) -> ClientNames {
        if let Some(task) = self.task.take() {
            let names = task
                .await
                .unwrap_or_else(|_| ClientNames::temp_unavailable());
            self.names = Some(names);
        }
        self.names.clone().unwrap_or_default()
    }

    /// The client's names if the lookup has been awaited.
    pub(super) fn known(&self) -> Option<&ClientNames> {
        self.names.as_ref()
    }
}

/// The outcome of one resolver call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Lookup<T> {
    /// An answer.
    Found(T),
    /// A definite "no such name / no PTR record".
    NotFound,
    /// A failure that may pass (DNS server unreachable or failing, timeout).
    TempFail,
}

/// A host name as Postfix accepts one from a reverse lookup (`valid_hostname`): at most
/// 255 octets, labels of 1 to 63 letters, digits, `-` or `_` that neither start nor end
/// with `-`, and not an IP address in disguise (all-numeric last label). A trailing dot
/// is allowed.
pub fn valid_hostname(name: &str) -> bool {
    let name = name.strip_suffix('.').unwrap_or(name);
    if name.is_empty() || name.len() > 255 || name.parse::<IpAddr>().is_ok() {
        return false;
    }
    let labels_ok = name.split('.').all(|l| {
        !l.is_empty()
            && l.len() <= 63
            && !l.starts_with('-')
            && !l.ends_with('-')
            && l.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
    });
    let last = name.rsplit('.').next().unwrap_or("");
    labels_ok && !last.bytes().all(|b| b.is_ascii_digit())
}

/// The names of `ip` from a reverse lookup and, when it gave a valid name, the forward
/// lookup of that name (`None`: not done, e.g. out of time).
pub fn confirm(
    ip: IpAddr,
    reverse: Lookup<String>,
    forward: Option<Lookup<Vec<IpAddr>>>,
) -> ClientNames {
    let ptr = match reverse {
        Lookup::Found(n) if valid_hostname(&n) => n.strip_suffix('.').unwrap_or(&n).to_string(),
        Lookup::Found(_) | Lookup::NotFound => return ClientNames::default(),
        Lookup::TempFail => return ClientNames::temp_unavailable(),
    };
    let ip = ip.to_canonical();
    let name = match forward {
        Some(Lookup::Found(addrs)) if addrs.iter().any(|a| a.to_canonical() == ip) => {
            ClientName::Known(ptr.clone())
        }
        Some(Lookup::Found(_)) | Some(Lookup::NotFound) => ClientName::Unavailable,
        Some(Lookup::TempFail) | None => ClientName::TempUnavailable,
    };
    ClientNames {
        name,
        reverse: ClientName::Known(ptr),
    }
}

/// A bounded cache of names by address, each kept for its time to live.
#[derive(Debug)]
pub struct NameCache {
    entries: HashMap<IpAddr, (Instant, ClientNames)>,
    max: usize,
}

impl NameCache {
    /// An empty cache of at most `max` addresses.
    pub fn new(max: usize) -> NameCache {
        NameCache {
            entries: HashMap::new(),
            max: max.max(1),
        }
    }

    /// The names of `ip`, if cached and not expired at `now`.
    pub fn get(&self, ip: IpAddr, now: Instant) -> Option<ClientNames> {
        self.entries
            .get(&ip)
            .filter(|(until, _)| *until > now)
            .map(|(_, n)| n.clone())
    }

    /// Keeps `names` for `ip` from `now` (for [`TEMP_TTL`] when temporary). When full, the
    /// expired entries go first, then the entry that expires soonest.
    pub fn insert(&mut self, ip: IpAddr, names: ClientNames, now: Instant) {
        let ttl = if names.is_temporary() { TEMP_TTL } else { TTL };
        if self.entries.len() >= self.max && !self.entries.contains_key(&ip) {
            self.entries.retain(|_, (until, _)| *until > now);
            if self.entries.len() >= self.max {
                let soonest = self
                    .entries
                    .iter()
                    .min_by_key(|(_, (until, _))| *until)
                    .map(|(ip, _)| *ip);
                if let Some(old) = soonest {
                    self.entries.remove(&old);
                }
            }
        }
        self.entries.insert(ip, (now + ttl, names));
    }
}

/// Name lookups with the system resolver, bounded and cached.
#[derive(Debug)]
pub struct NameResolver {
    cache: Mutex<NameCache>,
    slots: Arc<Semaphore>,
    timeout: Duration,
}

impl NameResolver {
    /// A resolver whose lookups take at most `timeout` each.
    pub fn new(timeout: Duration) -> NameResolver {
        NameResolver {
            cache: Mutex::new(NameCache::new(CACHE_ENTRIES)),
            slots: Arc::new(Semaphore::new(MAX_IN_FLIGHT)),
            timeout,
        }
    }

    /// The names of `ip` if the cache holds them (not expired): no lookup, no waiting.
    pub fn cached(&self, ip: IpAddr) -> Option<ClientNames> {
        self.cache
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(ip.to_canonical(), Instant::now())
    }

    /// The names of `ip`, from the cache or looked up (never longer than the timeout).
    pub async fn lookup(&self, ip: IpAddr) -> ClientNames {
        if let Some(n) = self.cached(ip) {
            return n;
        }
        let ip = ip.to_canonical();
        let deadline = Instant::now() + self.timeout;
        let names = self.resolve(ip, deadline).await;
        self.cache.lock().unwrap_or_else(|e| e.into_inner()).insert(
            ip,
            names.clone(),
            Instant::now(),
        );
        names
    }

    /// Both lookups run on one blocking thread that holds a place until it is done, even
    /// past the deadline: at most [`MAX_IN_FLIGHT`] threads ever wait on the resolver.
    async fn resolve(&self, ip: IpAddr, deadline: Instant) -> ClientNames {
        let Ok(Ok(slot)) =
            tokio::time::timeout_at(deadline, self.slots.clone().acquire_owned()).await
        else {
            return ClientNames::temp_unavailable();
        };
        let (reverse_tx, reverse_rx) = tokio::sync::oneshot::channel();
        let forward = tokio::task::spawn_blocking(move || {
            let _slot = slot;
            let reverse = reverse_lookup(ip);
            let name = match &reverse {
                Lookup::Found(n) if valid_hostname(n) => Some(n.clone()),
                _ => None,
            };
            let _ = reverse_tx.send(reverse);
            name.map(|n| forward_lookup(&n))
        });
        let reverse = match tokio::time::timeout_at(deadline, reverse_rx).await {
            Ok(Ok(r)) => r,
            _ => Lookup::TempFail,
        };
        let forward = match &reverse {
            Lookup::Found(n) if valid_hostname(n) => {
                match tokio::time::timeout_at(deadline, forward).await {
                    Ok(Ok(Some(f))) => Some(f),
                    // Out of time after a name was found: known, but unconfirmed for now.
                    _ => Some(Lookup::TempFail),
                }
            }
            _ => None,
        };
        confirm(ip, reverse, forward)
    }
}

/// `getnameinfo(NI_NAMEREQD)`: the PTR name of `ip`.
pub fn reverse_lookup(ip: IpAddr) -> Lookup<String> {
    let addr = SocketAddr::new(ip, 0);
    let mut host = [0 as libc::c_char; 1025];
    // SAFETY: the sockaddr is built for its family and lives across the call; `host` is a
    // writable buffer of the length given; getnameinfo writes a NUL-terminated string.
    let rc = unsafe {
        match addr {
            SocketAddr::V4(a) => {
                let mut sa: libc::sockaddr_in = std::mem::zeroed();
                sa.sin_family = libc::AF_INET as libc::sa_family_t;
                sa.sin_addr.s_addr = u32::from_ne_bytes(a.ip().octets());
                libc::getnameinfo(
                    (&sa as *const libc::sockaddr_in).cast(),
                    std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t,
                    host.as_mut_ptr(),
                    host.len() as libc::socklen_t,
                    std::ptr::null_mut(),
                    0,
                    libc::NI_NAMEREQD,
                )
            }
            SocketAddr::V6(a) => {
                let mut sa: libc::sockaddr_in6 = std::mem::zeroed();
                sa.sin6_family = libc::AF_INET6 as libc::sa_family_t;
                sa.sin6_addr.s6_addr = a.ip().octets();
                libc::getnameinfo(
                    (&sa as *const libc::sockaddr_in6).cast(),
                    std::mem::size_of::<libc::sockaddr_in6>() as libc::socklen_t,
                    host.as_mut_ptr(),
                    host.len() as libc::socklen_t,
                    std::ptr::null_mut(),
                    0,
                    libc::NI_NAMEREQD,
                )
            }
        }
    };
    match rc {
        0 => {
            // SAFETY: on success the buffer holds a NUL-terminated string.
            let name = unsafe { CStr::from_ptr(host.as_ptr()) };
            match name.to_str() {
                Ok(n) => Lookup::Found(n.to_string()),
                Err(_) => Lookup::NotFound,
            }
        }
        libc::EAI_AGAIN | libc::EAI_MEMORY | libc::EAI_SYSTEM => Lookup::TempFail,
        _ => Lookup::NotFound,
    }
}

/// `getaddrinfo`: every address of `name`, both families.
pub fn forward_lookup(name: &str) -> Lookup<Vec<IpAddr>> {
    let Ok(cname) = CString::new(name) else {
        return Lookup::NotFound;
    };
    // SAFETY: hints is zeroed then set; `res` is freed with freeaddrinfo after its list is
    // read, and each ai_addr is read according to its ai_family.
    unsafe {
        let mut hints: libc::addrinfo = std::mem::zeroed();
        hints.ai_family = libc::AF_UNSPEC;
        hints.ai_socktype = libc::SOCK_STREAM;
        let mut res: *mut libc::addrinfo = std::ptr::null_mut();
        let rc = libc::getaddrinfo(cname.as_ptr(), std::ptr::null(), &hints, &mut res);
        if rc != 0 {
            return match rc {
                libc::EAI_AGAIN | libc::EAI_MEMORY | libc::EAI_SYSTEM => Lookup::TempFail,
                _ => Lookup::NotFound,
            };
        }
        let mut out = Vec::new();
        let mut p = res;
        while !p.is_null() {
            let ai = &*p;
            if !ai.ai_addr.is_null() {
                match ai.ai_family {
                    libc::AF_INET => {
                        let sa = &*(ai.ai_addr as *const libc::sockaddr_in);
                        out.push(IpAddr::from(sa.sin_addr.s_addr.to_ne_bytes()));
                    }
                    libc::AF_INET6 => {
                        let sa = &*(ai.ai_addr as *const libc::sockaddr_in6);
                        out.push(IpAddr::from(sa.sin6_addr.s6_addr));
                    }
                    _ => {}
                }
            }
            p = ai.ai_next;
        }
        libc::freeaddrinfo(res);
        Lookup::Found(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    fn known(s: &str) -> ClientName {
        ClientName::Known(s.into())
    }

    #[test]
    fn hostnames() {
        for good in [
            "localhost",
            "mail.example.org",
            "a-b.c_d.example.",
            "x1.example.com",
        ] {
            assert!(valid_hostname(good), "{good}");
        }
        for bad in [
            "",
            ".",
            "192.0.2.1",
            "2001:db8::1",
            "1.2.3.4.5",
            "a..b",
            "-a.example",
            "a-.example",
            "a b.example",
            "a(b).example",
            "é.example",
            &"a".repeat(64),
            &format!("{}.example", "a.".repeat(130)),
        ] {
            assert!(!valid_hostname(bad), "{bad:?}");
        }
    }

    #[test]
    fn confirmed_unconfirmed_and_failures() {
        let c = ip("192.0.2.1");
        let found = |n: &str| Lookup::Found(n.to_string());
        assert_eq!(
            confirm(
                c,
                found("host.example."),
                Some(Lookup::Found(vec![ip("192.0.2.9"), c]))
            ),
            ClientNames {
                name: known("host.example"),
                reverse: known("host.example")
            }
        );
        // The name does not lead back to the client: only the reverse name is known.
        assert_eq!(
            confirm(
                c,
                found("liar.example"),
                Some(Lookup::Found(vec![ip("198.51.100.1")]))
            ),
            ClientNames {
                name: ClientName::Unavailable,
                reverse: known("liar.example")
            }
        );
        assert_eq!(
            confirm(c, found("gone.example"), Some(Lookup::NotFound)).name,
            ClientName::Unavailable
        );
        assert_eq!(
            confirm(c, found("slow.example"), Some(Lookup::TempFail)),
            ClientNames {
                name: ClientName::TempUnavailable,
                reverse: known("slow.example")
            }
        );
        assert_eq!(
            confirm(c, found("late.example"), None).name,
            ClientName::TempUnavailable
        );
        assert_eq!(confirm(c, Lookup::NotFound, None), ClientNames::default());
        assert_eq!(
            confirm(c, Lookup::TempFail, None),
            ClientNames::temp_unavailable()
        );
        // A PTR record that names an address is no name.
        assert_eq!(
            confirm(c, found("192.0.2.1"), Some(Lookup::Found(vec![c]))),
            ClientNames::default()
        );
        // IPv4-mapped client addresses compare as IPv4.
        assert_eq!(
            confirm(
                ip("::ffff:192.0.2.1"),
                found("h.example"),
                Some(Lookup::Found(vec![c]))
            )
            .name,
            known("h.example")
        );
    }

    #[test]
    fn cache_expires_and_stays_bounded() {
        let t0 = Instant::now();
        let mut cache = NameCache::new(2);
        let named = ClientNames {
            name: known("a"),
            reverse: known("a"),
        };
        cache.insert(ip("192.0.2.1"), named.clone(), t0);
        assert_eq!(cache.get(ip("192.0.2.1"), t0), Some(named.clone()));
        assert_eq!(cache.get(ip("192.0.2.1"), t0 + TTL), None);
        cache.insert(ip("192.0.2.2"), ClientNames::temp_unavailable(), t0);
        assert!(
            cache.get(ip("192.0.2.2"), t0 + TEMP_TTL).is_none(),
            "temporary kept too long"
        );
        // Full: the entry expiring soonest (the temporary one) makes room.
        cache.insert(ip("192.0.2.3"), named.clone(), t0);
        assert_eq!(cache.entries.len(), 2);
        assert!(cache.get(ip("192.0.2.2"), t0).is_none());
        assert!(cache.get(ip("192.0.2.1"), t0).is_some());
        // Expired entries go first.
        cache.insert(ip("192.0.2.4"), named, t0 + TTL);
        assert_eq!(cache.entries.len(), 1);
        assert!(!cache.entries.is_empty());
    }

    #[test]
    fn loopback_resolves_through_the_hosts_file() {
        // /etc/hosts maps 127.0.0.1 to localhost on every system floodgate is tested on.
        let Lookup::Found(name) = reverse_lookup(ip("127.0.0.1")) else {
            panic!("no name for 127.0.0.1");
        };
        assert!(valid_hostname(&name), "{name}");
        assert!(matches!(forward_lookup(&name), Lookup::Found(a) if a.contains(&ip("127.0.0.1"))));
        assert_eq!(forward_lookup("no-such-host.invalid"), Lookup::NotFound);
    }

    #[tokio::test]
    async fn resolver_confirms_loopback_and_caches() {
        let r = NameResolver::new(Duration::from_secs(5));
        assert_eq!(r.cached(ip("127.0.0.1")), None);
        let names = r.lookup(ip("127.0.0.1")).await;
        assert!(names.name.known().is_some(), "{names:?}");
        assert_eq!(names.name, names.reverse);
        assert_eq!(r.cache.lock().unwrap().entries.len(), 1);
        assert_eq!(r.lookup(ip("127.0.0.1")).await, names);
        // Known now without a lookup, also as the IPv4-mapped IPv6 address.
        assert_eq!(r.cached(ip("127.0.0.1")), Some(names.clone()));
        assert_eq!(r.cached(ip("::ffff:127.0.0.1")), Some(names));
        assert_eq!(r.cached(ip("127.0.0.2")), None);
    }

    #[tokio::test]
    async fn no_place_to_look_up_in_time_gives_tempunavail_briefly() {
        let r = NameResolver::new(Duration::from_millis(50));
        let all = r
            .slots
            .clone()
            .acquire_many_owned(MAX_IN_FLIGHT as u32)
            .await
            .unwrap();
        assert_eq!(
            r.lookup(ip("127.0.0.1")).await,
            ClientNames::temp_unavailable()
        );
        drop(all);
        // Cached as temporary: the next lookup within TEMP_TTL gives the same.
        assert_eq!(
            r.lookup(ip("127.0.0.1")).await,
            ClientNames::temp_unavailable()
        );
    }

    proptest! {
        /// A valid host name never holds anything that could break an XCLIENT value, a
        /// header comment or a log field.
        #[test]
        fn valid_names_are_plain(s in "\\PC{0,80}") {
            if valid_hostname(&s) {
                prop_assert!(s.bytes().all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b)));
            }
        }

        /// Whatever the lookups say, NAME is either a placeholder or the reverse name.
        #[test]
        fn name_is_the_reverse_name_or_nothing(
            n in "[a-z0-9.-]{0,20}",
            hit in any::<bool>(),
            f in 0u8..4,
        ) {
            let c = ip("192.0.2.1");
            let fwd = match f {
                0 => None,
                1 => Some(Lookup::NotFound),
                2 => Some(Lookup::TempFail),
                _ => Some(Lookup::Found(if hit { vec![c] } else { vec![] })),
            };
            let names = confirm(c, Lookup::Found(n), fwd);
            if let ClientName::Known(name) = &names.name {
                prop_assert_eq!(&names.reverse, &ClientName::Known(name.clone()));
                prop_assert!(hit && f == 3);
            }
        }
    }
}
