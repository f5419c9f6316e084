//! The files, directories and programs a config makes floodgate write, read or run,
//! checked against the file system as the user checking (`floodgate check` runs as the
//! service's user in the systemd unit), each problem placed at the line and column of the
//! value that names the path.

use std::fmt;
use std::fs::OpenOptions;
use std::io;
use std::ops::Range;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use super::{Config, ConfigError};

/// How floodgate uses a path.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PathUse {
    /// A directory floodgate creates files in (the hold spool); floodgate creates it (mode
    /// 0700) when it is missing, so only its parent must then exist and take it.
    Directory,
    /// A file floodgate creates, appends to or replaces, and reads back (the snapshot, the
    /// event log, the admin socket): its directory must exist and take new files, the file
    /// itself, when present, must open for reading and appending.
    Written,
    /// A file floodgate only reads (certificates, keys, passwords).
    Read,
    /// A program floodgate runs.
    Run,
}

/// One path of a config: what it is for, where it is written.
#[derive(Clone, Debug)]
pub struct ConfigPath {
    /// The section and key, as `[hold] dir`.
    pub label: &'static str,
    /// The path, absolute (relative ones resolved against the config file's directory).
    pub path: PathBuf,
    /// How floodgate uses it.
    pub used: PathUse,
    /// The span of the value in the config text (`0..0` when not written: a default).
    pub span: Range<usize>,
    /// A problem refuses the config; when false (a default floodgate falls back from) it
    /// is a warning.
    pub required: bool,
}

/// Paths of a config that cannot be used, each with its file, line and column.
#[derive(Debug)]
pub struct PathErrors(pub Vec<ConfigError>);

impl fmt::Display for PathErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, e) in self.0.iter().enumerate() {
            if i > 0 {
                writeln!(f)?;
            }
            write!(f, "{e}")?;
        }
        Ok(())
    }
}

impl std::error::Error for PathErrors {}

impl Config {
    /// Every path this config makes floodgate write, read or run, in this order: `[tls]`,
    /// `[upstream] ca_file`, `[store]`, `[admin] socket`, `[admin] audit`, `[report] events`,
    /// `[hold] dir`, `[alerts] command`.
    pub fn paths(&self) -> Vec<ConfigPath> {
        let mut v = self.tls_paths();
        v.extend(self.store_paths());
        v.extend(self.admin_paths());
        v.extend(self.output_paths());
        v
    }

    /// The path `label` names, written at `key` of `[section]`.
    fn named(
        &self,
        label: &'static str,
        section: &str,
        key: &str,
        path: PathBuf,
        used: PathUse,
        required: bool,
    ) -> ConfigPath {
        ConfigPath {
            label,
            path,
            used,
            span: self.key_span(section, key),
            required,
        }
    }

    /// The certificates and keys read: `[tls]`, `[upstream] ca_file`.
    fn tls_paths(&self) -> Vec<ConfigPath> {
        let mut v = Vec::new();
        if let Some(t) = &self.tls {
            let (c, k) = (t.certificate.clone(), t.private_key.clone());
            v.push(self.named(
                "[tls] certificate",
                "tls",
                "certificate",
                c,
                PathUse::Read,
                true,
            ));
            v.push(self.named(
                "[tls] private_key",
                "tls",
                "private_key",
                k,
                PathUse::Read,
                true,
            ));
        }
        if let Some(ca) = &self.upstream.ca_file {
            let ca = ca.clone();
            v.push(self.named(
                "[upstream] ca_file",
                "upstream",
                "ca_file",
                ca,
                PathUse::Read,
                true,
            ));
        }
        v
    }

    /// The store's file (memory) or password file (Redis).
    fn store_paths(&self) -> Vec<ConfigPath> {
        let mut v = Vec::new();
        let store = &self.store;
        match (store.backend.as_str(), &store.path, &store.password_file) {
            ("memory", Some(p), _) => {
                v.push(self.named(
                    "[store] path",
                    "store",
                    "path",
                    p.clone(),
                    PathUse::Written,
                    true,
                ));
            }
            ("redis", _, Some(p)) => {
                let p = p.clone();
                v.push(self.named(
                    "[store] password_file",
                    "store",
                    "password_file",
                    p,
                    PathUse::Read,
                    true,
                ));
            }
            _ => {}
        }
        v
    }

    /// The admin socket and the audit log.
    fn admin_paths(&self) -> Vec<ConfigPath> {
        let mut v = Vec::new();
        if let Some(s) = &self.admin.socket {
            let required = !self.admin.default_socket;
            v.push(self.named(
                "[admin] socket",
                "admin",
                "socket",
                s.clone(),
                PathUse::Written,
                required,
            ));
        }
        if let Some(p) = &self.admin.audit {
            v.push(self.named(
                "[admin] audit",
                "admin",
                "audit",
                p.clone(),
                PathUse::Written,
                true,
            ));
        }
        v
    }

    /// Where messages and events go: `[report] events`, `[hold] dir`, `[alerts] command`.
    fn output_paths(&self) -> Vec<ConfigPath> {
        let mut v = Vec::new();
        if let Some(e) = &self.report.events {
            let e = self.resolve(e.get_ref());
            v.push(self.named(
                "[report] events",
                "report",
                "events",
                e,
                PathUse::Written,
                true,
            ));
        }
        if let Some(h) = &self.hold {
            let d = self.resolve(&h.get_ref().dir);
            v.push(self.named("[hold] dir", "hold", "dir", d, PathUse::Directory, true));
        }
        if let Some(a) = self.alerts.as_ref().filter(|a| a.enabled != Some(false)) {
            if let Some(program) = a.command.as_ref().and_then(|c| c.get_ref().first()) {
                let p = PathBuf::from(program);
                v.push(self.named(
                    "[alerts] command",
                    "alerts",
                    "command",
                    p,
                    PathUse::Run,
                    true,
                ));
            }
        }
        v
    }

    /// Checks every path of [`paths`](Self::paths) as this process's user: the problems
    /// of required paths refuse the config (all of them named at once); those of defaults
    /// are returned as warnings.
    pub fn check_paths(&self) -> Result<Vec<String>, PathErrors> {
        let mut errors = Vec::new();
        let mut warnings = Vec::new();
        for p in self.paths() {
            let Some(problem) = problem(&p.path, p.used) else {
                continue;
            };
            let message = format!("{} {}: {problem}", p.label, p.path.display());
            if p.required {
                errors.push(self.error_at(p.span, message));
            } else {
                warnings.push(message);
            }
        }
        if errors.is_empty() {
            Ok(warnings)
        } else {
            Err(PathErrors(errors))
        }
    }
}

/// Why `path` cannot be used as `used` says, by this process's user; `None` when it can.
pub fn problem(path: &Path, used: PathUse) -> Option<String> {
    match used {
        PathUse::Directory => match std::fs::symlink_metadata(path) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                let parent = match path.parent() {
                    Some(d) if !d.as_os_str().is_empty() => d,
                    _ => Path::new("."),
                };
                directory_problem(parent)
                    .map(|p| format!("missing, and its directory {}: {p}", parent.display()))
            }
            _ => directory_problem(path),
        },
        PathUse::Written => {
            let dir = match path.parent() {
                Some(d) if !d.as_os_str().is_empty() => d,
                _ => Path::new("."),
            };
            if let Some(p) = directory_problem(dir) {
                return Some(format!("its directory {}: {p}", dir.display()));
            }
            match std::fs::symlink_metadata(path) {
                Err(e) if e.kind() == io::ErrorKind::NotFound => None,
                Err(e) => Some(format!("cannot be examined: {e}")),
                Ok(m) if m.is_dir() => Some("is a directory".into()),
                // A socket is replaced when floodgate starts, not opened.
                Ok(m) if std::os::unix::fs::FileTypeExt::is_socket(&m.file_type()) => None,
                Ok(_) => OpenOptions::new()
                    .read(true)
                    .append(true)
                    .open(path)
                    .err()
                    .map(|e| format!("cannot open it for reading and appending: {e}")),
            }
        }
        PathUse::Read => match std::fs::File::open(path) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => Some("no such file".into()),
            Err(e) => Some(format!("cannot read it: {e}")),
            Ok(f) => match f.metadata() {
                Ok(m) if m.is_dir() => Some("is a directory, not a file".into()),
                _ => None,
            },
        },
        PathUse::Run => match std::fs::metadata(path) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => Some("no such program".into()),
            Err(e) => Some(format!("cannot be examined: {e}")),
            Ok(m) if !m.is_file() => Some("is not a file".into()),
            Ok(_) if !may_execute(path) => Some(format!(
                "not executable by this user (uid {})",
                effective_uid()
            )),
            Ok(_) => None,
        },
    }
}

/// Why floodgate cannot create files in `dir`; `None` when it can (a probe file is
/// created and removed, which also finds a read-only file system).
fn directory_problem(dir: &Path) -> Option<String> {
    match std::fs::metadata(dir) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            return Some("no such directory (create it, writable by floodgate)".into())
        }
        Err(e) => return Some(format!("cannot be examined: {e}")),
        Ok(m) if !m.is_dir() => return Some("not a directory".into()),
        Ok(_) => {}
    }
    let probe = dir.join(format!(".floodgate-check.{}", std::process::id()));
    match OpenOptions::new().write(true).create_new(true).open(&probe) {
        Ok(_) => {
            let _ = std::fs::remove_file(&probe);
            None
        }
        // Left by a check that was killed: the directory takes files.
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
            let _ = std::fs::remove_file(&probe);
            None
        }
        Err(e) => Some(format!(
            "not writable by uid {} (a file cannot be created in it): {e}",
            effective_uid()
        )),
    }
}

/// Whether this process's user may execute `path` (access(2) with X_OK).
fn may_execute(path: &Path) -> bool {
    let Ok(c) = std::ffi::CString::new(path.as_os_str().as_bytes()) else {
        return false;
    };
    // SAFETY: `c` is a valid NUL-terminated string that outlives the call.
    unsafe { libc::access(c.as_ptr(), libc::X_OK) == 0 }
}

fn effective_uid() -> u32 {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HEAD: &str =
        "[[listener]]\naddress = \"127.0.0.1:0\"\n[upstream]\naddress = \"127.0.0.1:25\"\n";

    fn config(dir: &Path, body: &str) -> Config {
        Config::parse(&dir.join("f.toml"), &format!("{HEAD}{body}")).unwrap()
    }

    fn errors(c: &Config) -> Vec<String> {
        match c.check_paths() {
            Ok(w) => panic!("no error; warnings {w:?}"),
            Err(e) => e.0.iter().map(ToString::to_string).collect(),
        }
    }

    #[test]
    fn usable_paths_pass_and_leave_nothing_behind() {
        let d = tempfile::tempdir().unwrap();
        std::fs::create_dir(d.path().join("held")).unwrap();
        std::fs::write(d.path().join("ev.jsonl"), "").unwrap();
        let c = config(
            d.path(),
            "[store]\npath = \"state\"\n[report]\nevents = \"ev.jsonl\"\n\
             [hold]\ndir = \"held\"\n[admin]\nsocket = \"admin.sock\"\n\
             [alerts]\ncommand = [\"/bin/sh\", \"-c\", \"true\"]\n",
        );
        assert_eq!(c.check_paths().unwrap(), Vec::<String>::new());
        let mut left: Vec<_> = std::fs::read_dir(d.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        left.sort();
        assert_eq!(left, ["ev.jsonl", "held"]);
    }

    #[test]
    fn every_unusable_path_is_named_with_its_label_and_place() {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(d.path().join("plain"), "").unwrap();
        let c = config(
            d.path(),
            "[tls]\ncertificate = \"nope.crt\"\nprivate_key = \"plain\"\n\
             [store]\npath = \"gone/state\"\n\
             [report]\nevents = \"plain/ev.jsonl\"\n\
             [hold]\ndir = \"gone/missing\"\n\
             [admin]\nsocket = \"run/admin.sock\"\n\
             [alerts]\ncommand = [\"/nonexistent/page\"]\n",
        );
        let f = d.path().join("f.toml");
        let f = f.display();
        let dir = d.path().display();
        assert_eq!(
            errors(&c),
            [
                format!("{f}:6:15: [tls] certificate {dir}/nope.crt: no such file"),
                format!(
                    "{f}:9:8: [store] path {dir}/gone/state: its directory {dir}/gone: no such directory (create it, writable by floodgate)"
                ),
                format!(
                    "{f}:15:10: [admin] socket {dir}/run/admin.sock: its directory {dir}/run: no such directory (create it, writable by floodgate)"
                ),
                format!(
                    "{f}:11:10: [report] events {dir}/plain/ev.jsonl: its directory {dir}/plain: not a directory"
                ),
                format!(
                    "{f}:13:7: [hold] dir {dir}/gone/missing: missing, and its directory {dir}/gone: no such directory (create it, writable by floodgate)"
                ),
                format!("{f}:17:11: [alerts] command /nonexistent/page: no such program"),
            ]
        );
    }

    #[test]
    fn a_program_must_be_an_executable_file() {
        let d = tempfile::tempdir().unwrap();
        assert_eq!(
            problem(d.path(), PathUse::Run).as_deref(),
            Some("is not a file")
        );
        assert_eq!(problem(Path::new("/bin/sh"), PathUse::Run), None);
        let script = d.path().join("page");
        std::fs::write(&script, "#!/bin/sh\n").unwrap();
        // No execute bit for anyone: not even root may run it.
        let p = problem(&script, PathUse::Run).unwrap();
        assert!(p.starts_with("not executable by this user"), "{p}");
    }

    #[test]
    fn a_written_file_that_is_a_directory_or_a_read_file_that_is_a_directory() {
        let d = tempfile::tempdir().unwrap();
        assert_eq!(
            problem(d.path(), PathUse::Written).as_deref(),
            Some("is a directory")
        );
        assert_eq!(
            problem(d.path(), PathUse::Read).as_deref(),
            Some("is a directory, not a file")
        );
        // A missing spool directory is created at start when its parent takes it.
        assert_eq!(problem(&d.path().join("x"), PathUse::Directory), None);
        assert_eq!(
            problem(&d.path().join("x/y"), PathUse::Directory),
            Some(format!(
                "missing, and its directory {}: no such directory (create it, writable by floodgate)",
                d.path().join("x").display()
            ))
        );
    }

    #[test]
    fn a_default_socket_that_cannot_be_made_is_a_warning() {
        let d = tempfile::tempdir().unwrap();
        // The default socket goes next to the snapshot; its directory is missing, so the
        // snapshot is refused and the socket only warned about.
        let c = config(d.path(), "[store]\npath = \"gone/state\"\n");
        assert!(c.admin.default_socket);
        let e = errors(&c);
        assert_eq!(e.len(), 1, "{e:?}");
        assert!(e[0].contains("[store] path"), "{e:?}");
        std::fs::create_dir(d.path().join("gone")).unwrap();
        assert_eq!(c.check_paths().unwrap(), Vec::<String>::new());
        std::fs::remove_dir(d.path().join("gone")).unwrap();
        let c = config(d.path(), "[store]\nbackend = \"memory\"\n");
        assert!(c.check_paths().is_ok());
    }

    #[test]
    fn the_audit_log_is_a_written_path() {
        let d = tempfile::tempdir().unwrap();
        let f = d.path().join("f.toml");
        let dir = d.path().display();
        let c = config(d.path(), "[admin]\naudit = \"logs/audit.jsonl\"\n");
        assert_eq!(
            errors(&c),
            [format!(
                "{}:6:9: [admin] audit {dir}/logs/audit.jsonl: its directory {dir}/logs: no such directory (create it, writable by floodgate)",
                f.display()
            )]
        );
        std::fs::create_dir(d.path().join("logs")).unwrap();
        std::fs::create_dir(d.path().join("logs/audit.jsonl")).unwrap();
        let e = errors(&c);
        assert!(
            e[0].starts_with(&format!("{}:6:9: [admin] audit", f.display())),
            "{e:?}"
        );
        std::fs::remove_dir(d.path().join("logs/audit.jsonl")).unwrap();
        assert_eq!(c.check_paths().unwrap(), Vec::<String>::new());
    }
}
