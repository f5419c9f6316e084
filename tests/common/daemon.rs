//! Daemons the tests start as root (Postfix's master, Dovecot): each in its own process
//! group, so that one signal reaches every process it forked, stopped by that group's id.
//!
//! Three ways they stop, whichever comes first:
//! * [`Daemon::stop`] (called from the owners' `Drop`, also while a test panics);
//! * [`stop_group_at_exit`]: an `atexit` hook for instances shared by all tests of a binary
//!   (kept in a `static`, never dropped), run when the test binary exits normally or with
//!   failures;
//! * `PR_SET_PDEATHSIG`: the daemons are forked from one thread that lives as long as the
//!   test process, so the kernel sends them SIGTERM if the test binary is killed outright.

use std::fs::File;
use std::io;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{mpsc, Mutex, Once, OnceLock};
use std::thread;
use std::time::{Duration, Instant};

type SpawnJob = (Command, mpsc::Sender<io::Result<Child>>);

/// Forks `cmd` on the keeper thread (which never exits, so the parent-death signal fires
/// only when the whole test process goes away).
fn spawn_on_keeper(cmd: Command) -> io::Result<Child> {
    static KEEPER: OnceLock<Mutex<mpsc::Sender<SpawnJob>>> = OnceLock::new();
    let keeper = KEEPER.get_or_init(|| {
        let (tx, rx) = mpsc::channel::<SpawnJob>();
        thread::Builder::new()
            .name("daemon-keeper".into())
            .spawn(move || {
                for (mut cmd, reply) in rx {
                    let _ = reply.send(cmd.spawn());
                }
                // The senders live in a static: this point is never reached while the
                // process runs, and the thread must not end (see PR_SET_PDEATHSIG).
                loop {
                    thread::park();
                }
            })
            .expect("start the daemon keeper thread");
        Mutex::new(tx)
    });
    let (tx, rx) = mpsc::channel();
    keeper
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .send((cmd, tx))
        .expect("daemon keeper thread is gone");
    rx.recv().expect("daemon keeper thread is gone")
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
}

impl Daemon {
    /// Starts `cmd` (stdin closed, stdout and stderr into `stderr_file`) as the leader of a
    /// new process group. Panics naming `what` when it cannot be started.
    pub fn spawn(what: &'static str, mut cmd: Command, stderr_file: &Path) -> Daemon {
        let err = File::create(stderr_file).expect("daemon stderr file");
        let out = err.try_clone().expect("clone stderr file");
        cmd.stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .process_group(0);
        // SAFETY: prctl(PR_SET_PDEATHSIG) is async-signal-safe and touches no memory of
        // the parent; it is the only call made between fork and exec.
        unsafe {
            cmd.pre_exec(|| {
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM) != 0 {
                    return Err(io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let shown = format!("{cmd:?}");
        let child =
            spawn_on_keeper(cmd).unwrap_or_else(|e| panic!("cannot start {what} ({shown}): {e}"));
        let pid = child.id();
        Daemon {
            what,
            child: Mutex::new(child),
            pid,
            stopped: false,
        }
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
