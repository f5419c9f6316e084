//! The spool directory's checks at start, as Postfix checks its queue: it must be a
//! directory, owned by the user floodgate runs as, and writable by no one else (another user
//! who can write it could plant a held file that a release then sends, or take one away).

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// Why the spool directory is refused.
#[derive(Debug, thiserror::Error)]
pub enum DirError {
    /// It does not exist, or is not a directory.
    #[error(
        "[hold] dir {0}: no such directory (create it, owned by floodgate's user: mkdir -m 700 {0})"
    )]
    Missing(PathBuf),
    /// Its group or other users may write it.
    #[error(
        "[hold] dir {path}: writable by its group or by other users (mode {mode:04o}), who could \
         plant or remove held mail: chmod 700 {path}"
    )]
    Writable {
        /// The directory.
        path: PathBuf,
        /// Its permission bits.
        mode: u32,
    },
    /// Another user owns it.
    #[error(
        "[hold] dir {path}: owned by {owner}, not by {user} that floodgate runs as: chown {user} {path}"
    )]
    Owner {
        /// The directory.
        path: PathBuf,
        /// Its owner (name, or `uid N`).
        owner: String,
        /// floodgate's effective user (name, or its uid).
        user: String,
    },
    /// Its metadata cannot be read.
    #[error("[hold] dir {path}: {source}")]
    Io {
        /// The directory.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
}

/// The checks of a directory's metadata, pure: `owner` and `mode` as `stat` gives them,
/// `euid` the user floodgate runs as, `name` a user's name when known.
pub(super) fn judge(
    path: &Path,
    is_dir: bool,
    owner: u32,
    mode: u32,
    euid: u32,
    name: impl Fn(u32) -> Option<String>,
) -> Result<(), DirError> {
    if !is_dir {
        return Err(DirError::Missing(path.to_path_buf()));
    }
    if mode & 0o022 != 0 {
        return Err(DirError::Writable {
            path: path.to_path_buf(),
            mode: mode & 0o7777,
        });
    }
    if owner != euid {
        return Err(DirError::Owner {
            path: path.to_path_buf(),
            owner: name(owner).unwrap_or_else(|| format!("uid {owner}")),
            user: name(euid).unwrap_or_else(|| euid.to_string()),
        });
    }
    Ok(())
}

/// Creates the spool directory `path` with mode 0700 when nothing is there and its parent
/// directory exists; an existing one is left as it is, for [`check`] to judge.
pub fn create_missing(path: &Path) -> Result<(), DirError> {
    use std::os::unix::fs::DirBuilderExt;
    match std::fs::DirBuilder::new().mode(0o700).create(path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            Err(DirError::Missing(path.to_path_buf()))
        }
        Err(source) => Err(DirError::Io {
            path: path.to_path_buf(),
            source,
        }),
    }
}

/// Checks the spool directory `path` (following a symbolic link to it).
pub fn check(path: &Path) -> Result<(), DirError> {
    let meta = match std::fs::metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(DirError::Missing(path.to_path_buf()))
        }
        Err(source) => {
            return Err(DirError::Io {
                path: path.to_path_buf(),
                source,
            })
        }
    };
    // SAFETY: geteuid has no preconditions and cannot fail.
    let euid = unsafe { libc::geteuid() };
    judge(
        path,
        meta.is_dir(),
        meta.uid(),
        meta.mode(),
        euid,
        user_name,
    )
}

/// The name of the user `uid`, when the password database has one.
fn user_name(uid: u32) -> Option<String> {
    crate::config::run_as::name_of(uid)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(uid: u32) -> Option<String> {
        match uid {
            0 => Some("root".into()),
            107 => Some("floodgate".into()),
            _ => None,
        }
    }

    #[test]
    fn owner_and_mode_are_judged_with_the_fix_in_the_message() {
        let p = Path::new("/var/lib/floodgate/hold");
        assert!(judge(p, true, 107, 0o40700, 107, names).is_ok());
        assert!(judge(p, true, 107, 0o40750, 107, names).is_ok());
        assert!(judge(p, true, 107, 0o40755, 107, names).is_ok());
        for mode in [0o40770, 0o40777, 0o41777, 0o40702, 0o40720] {
            let e = judge(p, true, 107, mode, 107, names).unwrap_err();
            assert!(matches!(e, DirError::Writable { .. }), "{mode:o}: {e}");
            let text = e.to_string();
            assert!(
                text.contains("chmod 700 /var/lib/floodgate/hold")
                    && text.contains(&format!("mode {:04o}", mode & 0o7777)),
                "{text}"
            );
        }
        let e = judge(p, true, 0, 0o40700, 107, names).unwrap_err();
        assert_eq!(
            e.to_string(),
            "[hold] dir /var/lib/floodgate/hold: owned by root, not by floodgate that floodgate \
             runs as: chown floodgate /var/lib/floodgate/hold"
        );
        let e = judge(p, true, 4242, 0o40700, 999, names).unwrap_err();
        assert!(
            e.to_string()
                .contains("owned by uid 4242, not by 999 that floodgate runs as: chown 999 "),
            "{e}"
        );
        let e = judge(p, false, 107, 0o100600, 107, names).unwrap_err();
        assert!(e.to_string().contains("no such directory"), "{e}");
    }

    #[test]
    fn real_directories() {
        use std::os::unix::fs::PermissionsExt;
        let d = tempfile::tempdir().unwrap();
        check(d.path()).unwrap();
        std::fs::set_permissions(d.path(), std::fs::Permissions::from_mode(0o770)).unwrap();
        assert!(matches!(check(d.path()), Err(DirError::Writable { .. })));
        std::fs::set_permissions(d.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
        assert!(matches!(
            check(&d.path().join("nope")),
            Err(DirError::Missing(_))
        ));
        let file = d.path().join("file");
        std::fs::write(&file, "").unwrap();
        assert!(matches!(check(&file), Err(DirError::Missing(_))));
        // A missing spool is made private; an existing one is left for `check` to judge.
        let made = d.path().join("made");
        create_missing(&made).unwrap();
        let mode = std::fs::metadata(&made).unwrap().permissions().mode();
        assert_eq!(mode & 0o7777, 0o700);
        check(&made).unwrap();
        std::fs::set_permissions(&made, std::fs::Permissions::from_mode(0o777)).unwrap();
        create_missing(&made).unwrap();
        assert!(matches!(check(&made), Err(DirError::Writable { .. })));
        assert!(matches!(
            create_missing(&d.path().join("no/spool")),
            Err(DirError::Missing(_))
        ));
        create_missing(&file).unwrap();
        assert!(matches!(check(&file), Err(DirError::Missing(_))));
        // SAFETY: geteuid has no preconditions and cannot fail.
        if unsafe { libc::geteuid() } == 0 {
            // Root can give it away: then it is someone else's.
            std::os::unix::fs::chown(d.path(), Some(65534), None).unwrap();
            let e = check(d.path()).unwrap_err();
            assert!(matches!(e, DirError::Owner { .. }), "{e}");
            assert!(e.to_string().contains("chown root "), "{e}");
        }
        assert_eq!(user_name(0).as_deref(), Some("root"));
    }
}
