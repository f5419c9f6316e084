//! Connection caps: sessions overall and per client IP.

use std::net::IpAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use dashmap::DashMap;

/// Counts live sessions, overall and per client IP.
#[derive(Default)]
pub struct ConnCounter {
    total: AtomicUsize,
    per_ip: DashMap<IpAddr, usize>,
}

/// Why a session was not admitted.
#[derive(Debug, PartialEq, Eq)]
pub enum Refusal {
    /// Too many sessions overall.
    Total,
    /// Too many sessions from this IP.
    PerIp,
}

impl Refusal {
    /// The `cap` label of `floodgate_connections_refused_total`: the config key of the cap.
    pub fn label(&self) -> &'static str {
        match self {
            Refusal::Total => "max_connections",
            Refusal::PerIp => "max_connections_per_ip",
        }
    }
}

/// Holds one admitted session's place; dropping it frees the place.
pub struct ConnGuard {
    counter: Arc<ConnCounter>,
    ip: IpAddr,
}

impl ConnCounter {
    /// Admits a session from `ip` if both caps allow it.
    pub fn admit(
        self: &Arc<Self>,
        ip: IpAddr,
        max_total: usize,
        max_per_ip: usize,
    ) -> Result<ConnGuard, Refusal> {
        let prev = self.total.fetch_add(1, Ordering::AcqRel);
        if prev >= max_total {
            self.total.fetch_sub(1, Ordering::AcqRel);
            return Err(Refusal::Total);
        }
        let mut entry = self.per_ip.entry(ip).or_insert(0);
        if *entry >= max_per_ip {
            drop(entry);
            self.total.fetch_sub(1, Ordering::AcqRel);
            return Err(Refusal::PerIp);
        }
        *entry += 1;
        drop(entry);
        Ok(ConnGuard {
            counter: self.clone(),
            ip,
        })
    }

    /// Live sessions overall.
    pub fn total(&self) -> usize {
        self.total.load(Ordering::Acquire)
    }

    /// Live sessions from `ip`.
    pub fn from_ip(&self, ip: IpAddr) -> usize {
        self.per_ip.get(&ip).map(|e| *e).unwrap_or(0)
    }
}

impl Drop for ConnGuard {
    fn drop(&mut self) {
        self.counter.per_ip.remove_if_mut(&self.ip, |_, n| {
            *n -= 1;
            *n == 0
        });
        self.counter.total.fetch_sub(1, Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refusals_are_labelled_by_their_cap_key() {
        assert_eq!(
            [Refusal::Total.label(), Refusal::PerIp.label()],
            crate::metrics::CAPS
        );
    }

    #[test]
    fn caps_and_release() {
        let c = Arc::new(ConnCounter::default());
        let a: IpAddr = "192.0.2.1".parse().unwrap();
        let b: IpAddr = "192.0.2.2".parse().unwrap();
        let g1 = c.admit(a, 3, 2).unwrap();
        let g2 = c.admit(a, 3, 2).unwrap();
        assert_eq!(c.admit(a, 3, 2).err(), Some(Refusal::PerIp));
        let g3 = c.admit(b, 3, 2).unwrap();
        assert_eq!(c.admit(b, 3, 2).err(), Some(Refusal::Total));
        assert_eq!(c.total(), 3);
        drop(g1);
        assert_eq!(c.from_ip(a), 1);
        drop(g2);
        assert_eq!(c.from_ip(a), 0);
        assert!(c.per_ip.get(&a).is_none(), "idle IPs are forgotten");
        drop(g3);
        assert_eq!(c.total(), 0);
    }
}
