//! Who is at the other end of a unix socket.
//!
//! The admin socket's default place may be a shared directory (the temporary directory when
//! there is no `$XDG_RUNTIME_DIR` and no snapshot directory), where another local user can
//! put a socket of their own at the expected path before floodgate does. The admin verbs
//! therefore talk only to a socket served by their own user or by root (and root also to
//! one served by the owner of a directory only that owner may write: the service's own
//! runtime directory), and the server names the user holding a path it cannot take.

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

/// The name of user `uid` in the system's user database (`getpwuid_r`: `/etc/passwd`,
/// or whatever NSS is configured with), or `uid N` when it has none or cannot be read.
pub fn user_name(uid: u32) -> String {
    let unknown = || format!("uid {uid}");
    // Start with the system's suggested buffer size; grow on ERANGE, up to 1 MiB.
    // SAFETY: sysconf has no preconditions.
    let suggested = unsafe { libc::sysconf(libc::_SC_GETPW_R_SIZE_MAX) };
    let mut size = usize::try_from(suggested)
        .unwrap_or(1024)
        .clamp(256, 1 << 20);
    for _ in 0..13 {
        let mut buf = vec![0 as libc::c_char; size];
        // SAFETY: an all-zero passwd is a valid value (null pointers, zero ids) for
        // getpwuid_r to overwrite.
        let mut pwd: libc::passwd = unsafe { std::mem::zeroed() };
        let mut found: *mut libc::passwd = std::ptr::null_mut();
        // SAFETY: every pointer is valid for writes for the length given with it; on
        // success `found` points at `pwd`, whose strings point into `buf`, both alive here.
        let rc =
            unsafe { libc::getpwuid_r(uid, &mut pwd, buf.as_mut_ptr(), buf.len(), &mut found) };
        if rc == libc::ERANGE && size < (1 << 20) {
            size *= 2;
            continue;
        }
        if rc != 0 || found.is_null() || pwd.pw_name.is_null() {
            return unknown();
        }
        // SAFETY: getpwuid_r succeeded: pw_name is a NUL-terminated string inside `buf`.
        let name = unsafe { std::ffi::CStr::from_ptr(pwd.pw_name) };
        return match name.to_str() {
            Ok(n) if !n.is_empty() => n.to_string(),
            _ => unknown(),
        };
    }
    unknown()
}

/// Whether a socket served by `peer` may be trusted by a process running as `me`: only
/// its own user, or root (a floodgate run by root, administered by an operator account).
pub fn trusted(peer: u32, me: u32) -> bool {
    peer == me || peer == 0
}

/// Whether a directory owned by `owner` with permission bits `mode` is `uid`'s alone to
/// put sockets in: owned by it and writable by neither its group nor others. Root trusts
/// the user serving a socket there (the service's runtime directory, `/run/floodgate`),
/// as Postfix's `postsuper` trusts root: nobody else could have put the socket there.
pub fn owns_private_dir(uid: u32, owner: u32, mode: u32) -> bool {
    owner == uid && mode & 0o022 == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn root_trusts_the_owner_of_a_private_directory() {
        assert!(owns_private_dir(994, 994, 0o40750));
        assert!(owns_private_dir(994, 994, 0o40700));
        // Another user's directory, or one others may write (/tmp): not trusted.
        assert!(!owns_private_dir(994, 0, 0o40755));
        assert!(!owns_private_dir(994, 994, 0o40770));
        assert!(!owns_private_dir(994, 994, 0o41777));
    }

    #[test]
    fn own_user_and_root_only() {
        assert!(trusted(1000, 1000));
        assert!(trusted(0, 1000));
        assert!(trusted(0, 0));
        assert!(!trusted(65534, 1000));
        assert!(!trusted(1000, 0));
    }

    #[test]
    fn user_names_from_the_user_database() {
        // Root is in every user database.
        assert_eq!(user_name(0), "root");
        // An id nobody has: said as a number.
        assert_eq!(user_name(3_999_999_999), "uid 3999999999");
        // This process's user: its name when the database has one, else its id.
        let me = my_uid();
        let name = user_name(me);
        assert!(!name.is_empty());
        if name.starts_with("uid ") {
            assert_eq!(name, format!("uid {me}"));
        }
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
