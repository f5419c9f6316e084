//! The open-file limit: each session holds two descriptors (client and upstream), so the
//! default soft limit of many systems (1024) would refuse sessions long before the caps.

use std::io;

/// The soft and hard `RLIMIT_NOFILE` after [`raise_fd_limit`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FdLimit {
    /// The soft limit now in force.
    pub soft: u64,
    /// The hard limit (the most an unprivileged process may ask for).
    pub hard: u64,
}

impl FdLimit {
    /// Descriptors needed for `max_connections` sessions (two each) and `admin_connections`
    /// connections of the admin listeners and the metrics address (one each; see
    /// `AdminConfig::max_descriptors`), plus room for listeners, the store and logs.
    pub fn needed(max_connections: usize, admin_connections: usize) -> u64 {
        (max_connections as u64)
            .saturating_mul(2)
            .saturating_add(admin_connections as u64)
            .saturating_add(64)
    }
}

/// Raises the soft open-file limit to the hard limit (what `ulimit -n` allows without
/// privilege) and returns both.
pub fn raise_fd_limit() -> io::Result<FdLimit> {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit only read and write the struct we pass.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } != 0 {
        return Err(io::Error::last_os_error());
    }
    if lim.rlim_cur < lim.rlim_max {
        let want = libc::rlimit {
            rlim_cur: lim.rlim_max,
            rlim_max: lim.rlim_max,
        };
        // SAFETY: as above.
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &want) } != 0 {
            return Err(io::Error::last_os_error());
        }
        lim.rlim_cur = lim.rlim_max;
    }
    Ok(FdLimit {
        soft: lim.rlim_cur,
        hard: lim.rlim_max,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn raising_gives_soft_equal_to_hard() {
        let l = raise_fd_limit().unwrap();
        assert_eq!(l.soft, l.hard);
        // Idempotent.
        assert_eq!(raise_fd_limit().unwrap(), l);
    }

    #[test]
    fn needed_counts_two_per_session_and_one_per_admin_connection() {
        assert_eq!(FdLimit::needed(0, 0), 64);
        assert_eq!(FdLimit::needed(10_000, 0), 20_064);
        assert_eq!(FdLimit::needed(10_000, 192), 20_256);
        assert_eq!(FdLimit::needed(usize::MAX, 1), u64::MAX);
    }
}
