//! Who is at the other end of a unix socket.
//!
//! The admin socket's default place may be a shared directory (the temporary directory when
//! there is no `$XDG_RUNTIME_DIR` and no snapshot directory), where another local user can
//! put a socket of their own at the expected path before floodgate does. The admin verbs
//! therefore talk only to a socket served by their own user or by root, and the server
//! names the user holding a path it cannot take.

use std::io;
use std::os::fd::AsRawFd;

/// The user id of the process that serves (or connected to) the other end of `sock`.
pub fn peer_uid(sock: &impl AsRawFd) -> io::Result<u32> {
    peer_uid_of(sock.as_raw_fd())
}

#[cfg(any(target_os = "linux", target_os = "android"))]
fn peer_uid_of(fd: std::os::fd::RawFd) -> io::Result<u32> {
    let mut cred = libc::ucred {
        pid: 0,
        uid: 0,
        gid: 0,
    };
    let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: `cred` and `len` are valid for writes and `len` is `cred`'s size, as
    // SO_PEERCRED requires; an fd that is not a unix socket makes the call fail, not write.
    let rc = unsafe {
        libc::getsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            (&mut cred as *mut libc::ucred).cast(),
            &mut len,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(cred.uid)
}

#[cfg(not(any(target_os = "linux", target_os = "android")))]
fn peer_uid_of(fd: std::os::fd::RawFd) -> io::Result<u32> {
    let (mut uid, mut gid) = (0, 0);
    // SAFETY: both out-pointers are valid for writes; a bad fd makes the call fail.
    if unsafe { libc::getpeereid(fd, &mut uid, &mut gid) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(uid)
}

/// This process's effective user id.
pub fn my_uid() -> u32 {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() }
}

/// Whether a socket served by `peer` may be trusted by a process running as `me`: only
/// its own user, or root (a floodgate run by root, administered by an operator account).
pub fn trusted(peer: u32, me: u32) -> bool {
    peer == me || peer == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn own_user_and_root_only() {
        assert!(trusted(1000, 1000));
        assert!(trusted(0, 1000));
        assert!(trusted(0, 0));
        assert!(!trusted(65534, 1000));
        assert!(!trusted(1000, 0));
    }

    #[test]
    fn reads_the_peer_of_a_socket_pair() {
        let (a, b) = std::os::unix::net::UnixStream::pair().unwrap();
        assert_eq!(peer_uid(&a).unwrap(), my_uid());
        assert_eq!(peer_uid(&b).unwrap(), my_uid());
        // Not a unix socket: a clear error, not a made-up id.
        let f = std::fs::File::open("/dev/null").unwrap();
        assert!(peer_uid(&f).is_err());
    }
}
