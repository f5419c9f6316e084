//! The user `floodgate check` checks as when root runs it: the service's user, so that the
//! answer is the service's, and so that root's check neither creates nor changes a file
//! the service later cannot use (a hold spool made by root, mode 0700, would stop the
//! service from starting).
//!
//! That user is the one named with `--user`, else the owner of the first existing state
//! directory the config names, in [`Config::paths`] order (the directory of `[store] path`
//! first: `/var/lib/floodgate`, which the package and the unit's `StateDirectory=` give to
//! the unit's `User=`); root when every one of them is root's (a floodgate run as root).

use std::ffi::{CStr, CString};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use super::paths::PathUse;
use super::Config;

/// A user to check as.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RunAs {
    /// The user's name.
    pub name: String,
    /// Its user id.
    pub uid: u32,
    /// Its primary group.
    pub gid: u32,
    /// Why this user: `given with --user`, or `owner of DIR`.
    pub why: String,
}

/// Why the user to check as could not be had, or become.
#[derive(Debug, thiserror::Error)]
pub enum RunAsError {
    /// `--user` names no user.
    #[error("--user {0}: no such user")]
    NoUser(String),
    /// The directory's owner has no entry in the user database.
    #[error("{dir} is owned by uid {uid}, which has no user name: give --user")]
    Nameless {
        /// The directory.
        dir: PathBuf,
        /// Its owner.
        uid: u32,
    },
    /// Changing to the user failed.
    #[error("cannot become {name} (uid {uid}): {source}")]
    Become {
        /// The user.
        name: String,
        /// Its uid.
        uid: u32,
        /// Why.
        source: std::io::Error,
    },
}

impl Config {
    /// The directories whose owner is the service's user, in order: the directory each
    /// written file goes in, and the spool directory (its parent while it is missing).
    pub fn state_directories(&self) -> Vec<PathBuf> {
        let mut v: Vec<PathBuf> = Vec::new();
        for p in self.paths() {
            let dir = match p.used {
                PathUse::Written => p.path.parent().map(Path::to_path_buf),
                PathUse::Directory if p.path.exists() => Some(p.path.clone()),
                PathUse::Directory => p.path.parent().map(Path::to_path_buf),
                PathUse::Read | PathUse::Run => None,
            };
            if let Some(d) = dir.filter(|d| !d.as_os_str().is_empty() && !v.contains(d)) {
                v.push(d);
            }
        }
        v
    }
}

/// The user a check by root runs as: `given` by name, else the first owner other than
/// root of an existing directory of `dirs`; `None` when every one is root's.
pub fn choose(given: Option<&str>, dirs: &[PathBuf]) -> Result<Option<RunAs>, RunAsError> {
    if let Some(name) = given {
        let (uid, gid) = lookup_name(name).ok_or_else(|| RunAsError::NoUser(name.into()))?;
        return Ok(Some(RunAs {
            name: name.into(),
            uid,
            gid,
            why: "given with --user".into(),
        }));
    }
    for d in dirs {
        let Ok(m) = std::fs::metadata(d) else {
            continue;
        };
        if m.uid() == 0 {
            continue;
        }
        let name = name_of(m.uid()).ok_or_else(|| RunAsError::Nameless {
            dir: d.clone(),
            uid: m.uid(),
        })?;
        let (uid, gid) = lookup_name(&name).unwrap_or((m.uid(), m.gid()));
        return Ok(Some(RunAs {
            name,
            uid,
            gid,
            why: format!("owner of {}", d.display()),
        }));
    }
    Ok(None)
}

impl RunAs {
    /// Becomes this user for good: its groups (`initgroups`), its group, then its user id,
    /// real, effective and saved alike. Call it before any thread is started.
    pub fn become_it(&self) -> Result<(), RunAsError> {
        let fail = |source| RunAsError::Become {
            name: self.name.clone(),
            uid: self.uid,
            source,
        };
        let name = CString::new(self.name.as_bytes())
            .map_err(|_| fail(std::io::Error::from(std::io::ErrorKind::InvalidInput)))?;
        // SAFETY: `name` is a valid NUL-terminated string for the call; the others take
        // plain ids. Each returns -1 and sets errno on failure.
        let rc = unsafe {
            if libc::initgroups(name.as_ptr(), self.gid) != 0
                || libc::setgid(self.gid) != 0
                || libc::setuid(self.uid) != 0
            {
                -1
            } else {
                0
            }
        };
        if rc != 0 {
            return Err(fail(std::io::Error::last_os_error()));
        }
        Ok(())
    }
}

/// The uid and primary gid of user `name`.
fn lookup_name(name: &str) -> Option<(u32, u32)> {
    let c = CString::new(name).ok()?;
    let mut buf = vec![0 as libc::c_char; 16 * 1024];
    // SAFETY: an all-zero passwd is a valid value for getpwnam_r to overwrite.
    let mut pwd: libc::passwd = unsafe { std::mem::zeroed() };
    let mut found: *mut libc::passwd = std::ptr::null_mut();
    // SAFETY: every pointer is valid for writes for the length given with it, `c` is
    // NUL-terminated; on success `found` points at `pwd`.
    let rc = unsafe {
        libc::getpwnam_r(
            c.as_ptr(),
            &mut pwd,
            buf.as_mut_ptr(),
            buf.len(),
            &mut found,
        )
    };
    (rc == 0 && !found.is_null()).then_some((pwd.pw_uid, pwd.pw_gid))
}

/// The name of user `uid`, when the user database has one (`getpwuid_r`).
pub fn name_of(uid: u32) -> Option<String> {
    let mut buf = vec![0 as libc::c_char; 16 * 1024];
    // SAFETY: an all-zero passwd is a valid value for getpwuid_r to overwrite.
    let mut pwd: libc::passwd = unsafe { std::mem::zeroed() };
    let mut found: *mut libc::passwd = std::ptr::null_mut();
    // SAFETY: every pointer is valid for writes for the length given with it; on success
    // `found` points at `pwd`, whose strings live in `buf`.
    let rc = unsafe { libc::getpwuid_r(uid, &mut pwd, buf.as_mut_ptr(), buf.len(), &mut found) };
    if rc != 0 || found.is_null() || pwd.pw_name.is_null() {
        return None;
    }
    // SAFETY: pw_name is a NUL-terminated string in `buf`, alive here.
    let name = unsafe { CStr::from_ptr(pwd.pw_name) };
    Some(name.to_string_lossy().into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_state_directories_of_a_config_in_order() {
        let d = tempfile::tempdir().unwrap();
        let c = Config::parse(
            &d.path().join("f.toml"),
            "[[listener]]\naddress = \"127.0.0.1:0\"\n[upstream]\naddress = \"127.0.0.1:25\"\n\
             [store]\npath = \"/var/lib/fg/state\"\n[admin]\nsocket = \"/run/fg/admin.sock\"\n\
             [report]\nevents = \"/var/lib/fg/events.jsonl\"\n[hold]\ndir = \"/var/lib/fg/hold\"\n\
             [tls]\ncertificate = \"/etc/fg/c\"\nprivate_key = \"/etc/fg/k\"\n",
        )
        .unwrap();
        assert_eq!(
            c.state_directories(),
            [PathBuf::from("/var/lib/fg"), PathBuf::from("/run/fg"),]
        );
    }

    #[test]
    fn choosing_the_user() {
        let d = tempfile::tempdir().unwrap();
        let dirs = [d.path().join("missing"), d.path().to_path_buf()];
        // SAFETY: geteuid has no preconditions.
        let me = unsafe { libc::geteuid() };
        let got = choose(None, &dirs).unwrap();
        if me == 0 {
            // Root's own directories: root checks as itself.
            assert_eq!(got, None);
            std::os::unix::fs::chown(d.path(), Some(65534), Some(65534)).unwrap();
            let u = choose(None, &dirs).unwrap().unwrap();
            assert_eq!(u.uid, 65534);
            assert_eq!(u.why, format!("owner of {}", d.path().display()));
        } else {
            let u = got.unwrap();
            assert_eq!(u.uid, me);
        }
        let root = choose(Some("root"), &[]).unwrap().unwrap();
        assert_eq!(
            (root.uid, root.gid, root.why.as_str()),
            (0, 0, "given with --user")
        );
        let e = choose(Some("no-such-user-here"), &[]).unwrap_err();
        assert_eq!(e.to_string(), "--user no-such-user-here: no such user");
    }
}
