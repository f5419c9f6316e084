//! Daemons the tests start as root (Postfix's master, Dovecot): each in its own process
//! group, so that one signal reaches every process it forked, stopped by that group's id.
//!
//! Three ways they stop, whichever comes first:
//! * [`Daemon::stop`] (called from the owners' `Drop`, also while a test panics);
//! * [`stop_group_at_exit`]: an `atexit` hook for instances shared by all tests of a binary
//!   (kept in a `static`, never dropped), run when the test binary exits normally or with
//!   failures;
//! * a watchdog (`sh`) per daemon that blocks reading a pipe only the test process holds:
//!   when the test binary dies in any way (SIGKILL included) the pipe reaches end of file
//!   and the watchdog stops the daemon's group. (`PR_SET_PDEATHSIG` is not enough: with it
//!   set, Postfix's master outlived a SIGKILLed test binary here, and Dovecot's workers
//!   outlived their master.)

use std::fs::File;
use std::io;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, ExitStatus, Stdio};
use std::sync::{Mutex, Once};
use std::thread;
use std::time::{Duration, Instant};

/// The watchdog: waits for end of file on stdin, then SIGTERM to process group `$1`, then
/// (after at most 10 s of it still existing) SIGKILL. `kill -SIG -PGID` is the form dash's
/// built-in `kill` takes for a group (it rejects `--`).
const WATCHDOG: &str = r#"read -r _
kill -TERM -"$1" 2>/dev/null || exit 0
i=0
while [ "$i" -lt 50 ] && kill -0 -"$1" 2>/dev/null; do sleep 0.2; i=$((i + 1)); done
kill -KILL -"$1" 2>/dev/null
exit 0"#;

/// Starts the watchdog of process group `pgid`; it acts when the returned pipe closes.
fn watchdog(pgid: u32) -> io::Result<(Child, ChildStdin)> {
    let mut child = Command::new("sh")
        .arg("-c")
        .arg(WATCHDOG)
        .arg("floodgate-test-watchdog")
        .arg(pgid.to_string())
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .process_group(0)
        .spawn()?;
    let pipe = child.stdin.take().expect("piped stdin");
    Ok((child, pipe))
}

/// True when the tests run as root (Postfix's master and Dovecot need it).
pub fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

/// Sends `sig` to process group `pgid`; false when no process of the group is left.
fn signal_group(pgid: u32, sig: libc::c_int) -> bool {
    // SAFETY: kill with a negative pid signals a process group; no memory is involved.
    unsafe { libc::kill(-(pgid as libc::pid_t), sig) == 0 }
}

/// A daemon running in the foreground in its own process group.
pub struct Daemon {
    what: &'static str,
    child: Mutex<Child>,
    pid: u32,
    stopped: bool,
    /// The watchdog and the write end of its pipe (closed to let it go).
    watchdog: Option<(Child, ChildStdin)>,
}

impl Daemon {
    /// Starts `cmd` (stdin closed, stdout and stderr into `stderr_file`) as the leader of a
    /// new process group, with its watchdog. Panics naming `what` when it cannot start.
    pub fn spawn(what: &'static str, mut cmd: Command, stderr_file: &Path) -> Daemon {
        let err = File::create(stderr_file).expect("daemon stderr file");
        let out = err.try_clone().expect("clone stderr file");
        cmd.stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .process_group(0);
        let child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {what} ({cmd:?}): {e}"));
        let pid = child.id();
        let mut daemon = Daemon {
            what,
            child: Mutex::new(child),
            pid,
            stopped: false,
            watchdog: None,
        };
        match watchdog(pid) {
            Ok(w) => daemon.watchdog = Some(w),
            Err(e) => {
                daemon.stop();
                panic!("cannot start the watchdog of {what} (sh): {e}");
            }
        }
        daemon
    }

    /// The daemon's process id (also its process group id).
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// The exit status if the daemon has exited.
    pub fn exited(&self) -> Option<ExitStatus> {
        let mut child = self.child.lock().unwrap_or_else(|p| p.into_inner());
        child.try_wait().ok().flatten()
    }

    /// SIGTERM to the process group, then (after at most 10 s) SIGKILL; waits for the
    /// leader. Idempotent.
    pub fn stop(&mut self) {
        if self.stopped {
            return;
        }
        self.stopped = true;
        let mut child = self.child.lock().unwrap_or_else(|p| p.into_inner());
        signal_group(self.pid, libc::SIGTERM);
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Ok(Some(_)) = child.try_wait() {
                break;
            }
            if Instant::now() >= deadline {
                eprintln!(
                    "{} (pid {}) ignored SIGTERM for 10 s; killing its group",
                    self.what, self.pid
                );
                signal_group(self.pid, libc::SIGKILL);
                let _ = child.wait();
                break;
            }
            thread::sleep(Duration::from_millis(20));
        }
        // Stragglers of the group (workers that outlived the leader) get SIGKILL.
        signal_group(self.pid, libc::SIGKILL);
        drop(child);
        if let Some((mut wd, pipe)) = self.watchdog.take() {
            // End of file: the watchdog finds the group gone and exits; reap it off the
            // test's thread.
            drop(pipe);
            thread::spawn(move || {
                let _ = wd.wait();
            });
        }
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        self.stop();
    }
}

enum AtExit {
    Group(u32),
    Dir(PathBuf),
}

static AT_EXIT: Mutex<Vec<AtExit>> = Mutex::new(Vec::new());

extern "C" fn run_at_exit() {
    let jobs = std::mem::take(&mut *AT_EXIT.lock().unwrap_or_else(|p| p.into_inner()));
    for job in &jobs {
        if let AtExit::Group(pgid) = job {
            signal_group(*pgid, libc::SIGTERM);
        }
    }
    for job in &jobs {
        if let AtExit::Group(pgid) = job {
            let deadline = Instant::now() + Duration::from_secs(10);
            loop {
                let mut status = 0;
                // SAFETY: waitpid on our own child with WNOHANG; `status` is a valid int.
                let r = unsafe { libc::waitpid(*pgid as libc::pid_t, &mut status, libc::WNOHANG) };
                if r != 0 || Instant::now() >= deadline {
                    break;
                }
                thread::sleep(Duration::from_millis(20));
            }
            signal_group(*pgid, libc::SIGKILL);
        }
    }
    for job in &jobs {
        if let AtExit::Dir(dir) = job {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

fn register(job: AtExit) {
    static HOOK: Once = Once::new();
    HOOK.call_once(|| {
        // SAFETY: registers a plain extern "C" function with no captured state.
        let r = unsafe { libc::atexit(run_at_exit) };
        assert_eq!(r, 0, "atexit failed");
    });
    AT_EXIT.lock().unwrap_or_else(|p| p.into_inner()).push(job);
}

/// Stops process group `pgid` when the test process exits.
pub fn stop_group_at_exit(pgid: u32) {
    register(AtExit::Group(pgid));
}

/// Removes `dir` when the test process exits (after the daemons are stopped).
pub fn remove_dir_at_exit(dir: PathBuf) {
    register(AtExit::Dir(dir));
}
