//! Running one of Postfix's commands off the async workers, with a time limit.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use thiserror::Error;

/// Most octets of a command's output kept for an error message.
const STDERR_SHOWN: usize = 2000;

/// One of Postfix's commands that did not do what was asked.
#[derive(Debug, Error)]
pub enum CommandError {
    /// It could not be started (missing, not executable).
    #[error("{command}: cannot run it: {source}")]
    Spawn {
        /// The command line.
        command: String,
        /// The system's error.
        #[source]
        source: std::io::Error,
    },
    /// It exited with a failure.
    #[error("{command}: {status}{}", stderr_text(.stderr))]
    Failed {
        /// The command line.
        command: String,
        /// How it ended.
        status: String,
        /// What it wrote on its standard error (trimmed, cut short when long).
        stderr: String,
    },
    /// It took longer than it may; it was killed.
    #[error("{command}: no answer within {after:?}; killed")]
    TimedOut {
        /// The command line.
        command: String,
        /// The time limit.
        after: Duration,
    },
}

fn stderr_text(stderr: &str) -> String {
    if stderr.is_empty() {
        String::new()
    } else {
        format!(": {stderr}")
    }
}

/// What a command that succeeded printed.
#[derive(Debug)]
pub struct Printed {
    /// Its standard output.
    pub stdout: String,
    /// Its standard error.
    pub stderr: String,
}

/// `program` with `args`, as an error message shows it.
pub fn command_line(program: &Path, args: &[&str]) -> String {
    let mut s = program.display().to_string();
    for a in args {
        s.push(' ');
        s.push_str(a);
    }
    s
}

/// Runs `program args…` with no input, waits at most `timeout` (killing it then), and
/// gives its output when it exits with status 0.
pub async fn run(
    program: &PathBuf,
    args: &[&str],
    timeout: Duration,
) -> Result<Printed, CommandError> {
    let command = command_line(program, args);
    let child = tokio::process::Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .map_err(|source| CommandError::Spawn {
            command: command.clone(),
            source,
        })?;
    let out = match tokio::time::timeout(timeout, child.wait_with_output()).await {
        Ok(Ok(out)) => out,
        Ok(Err(source)) => return Err(CommandError::Spawn { command, source }),
        Err(_) => {
            return Err(CommandError::TimedOut {
                command,
                after: timeout,
            })
        }
    };
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).trim().to_string();
    if !out.status.success() {
        let mut shown = stderr;
        if shown.len() > STDERR_SHOWN {
            let mut end = STDERR_SHOWN;
            while !shown.is_char_boundary(end) {
                end -= 1;
            }
            shown.truncate(end);
            shown.push('…');
        }
        return Err(CommandError::Failed {
            command,
            status: out.status.to_string(),
            stderr: shown,
        });
    }
    Ok(Printed { stdout, stderr })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rt() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
    }

    #[test]
    fn output_of_a_command_that_succeeds() {
        let p = rt()
            .block_on(run(
                &"/bin/sh".into(),
                &["-c", "echo out; echo err >&2"],
                Duration::from_secs(20),
            ))
            .unwrap();
        assert_eq!((p.stdout.as_str(), p.stderr.as_str()), ("out\n", "err"));
    }

    #[test]
    fn failures_name_the_command_and_its_stderr() {
        let e = rt()
            .block_on(run(
                &"/bin/sh".into(),
                &["-c", "echo 'postqueue: fatal: no queue' >&2; exit 75"],
                Duration::from_secs(20),
            ))
            .unwrap_err();
        assert_eq!(
            e.to_string(),
            "/bin/sh -c echo 'postqueue: fatal: no queue' >&2; exit 75: exit status: 75: postqueue: fatal: no queue"
        );
        let e = rt()
            .block_on(run(
                &"/nonexistent/postqueue".into(),
                &["-j"],
                Duration::from_secs(20),
            ))
            .unwrap_err();
        assert!(
            e.to_string()
                .starts_with("/nonexistent/postqueue -j: cannot run it: No such file"),
            "{e}"
        );
        let e = rt()
            .block_on(run(
                &"/bin/sleep".into(),
                &["30"],
                Duration::from_millis(50),
            ))
            .unwrap_err();
        assert_eq!(
            e.to_string(),
            "/bin/sleep 30: no answer within 50ms; killed"
        );
    }
}
