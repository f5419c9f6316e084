//! Alert delivery, off the session path: each notice is logged (target `floodgate::alert`,
//! the JSON as the message), POSTed to the webhook, given to the command on stdin and
//! queued as mail to `mail_to` ([`super::mailer`]), as configured. A failed delivery is logged and not retried (the next alert for the key
//! comes after its period). Once a second the task asks the alerter for a summary of
//! suppressed alerts.

use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::mpsc::Receiver;
use tracing::{info, warn};

use super::http::post_json;
use super::mailer::Mailer;
use crate::policy::alert::{AlertSettings, Alerter, Notice};
use crate::store::now_micros;

/// Builds the TLS client configuration of an https webhook (`None` for http or no webhook).
pub fn webhook_tls(
    s: &AlertSettings,
) -> Result<Option<Arc<rustls::ClientConfig>>, crate::tls::TlsError> {
    match &s.webhook {
        Some(u) if u.tls => crate::tls::client_config(s.ca_file.as_deref()).map(Some),
        _ => Ok(None),
    }
}

/// Why an alert command did not run to success.
#[derive(Debug, thiserror::Error)]
pub enum CommandError {
    /// No program was given.
    #[error("empty command")]
    Empty,
    /// The program could not be started.
    #[error("cannot run {prog}: {source}")]
    Spawn {
        /// The program.
        prog: String,
        /// Why.
        source: std::io::Error,
    },
    /// The program ended with a failure status.
    #[error("{prog} exited with {status}")]
    Failed {
        /// The program.
        prog: String,
        /// How it ended.
        status: std::process::ExitStatus,
    },
    /// The program ran past its time limit and was killed.
    #[error("{prog} killed after {limit:?}")]
    Killed {
        /// The program.
        prog: String,
        /// The time limit.
        limit: Duration,
    },
    /// Waiting for the program failed.
    #[error("{prog}: {source}")]
    Wait {
        /// The program.
        prog: String,
        /// Why.
        source: std::io::Error,
    },
}

/// Runs `argv` (no shell) with `input` on stdin; kills it after `limit`.
pub fn run_command(argv: &[String], input: &str, limit: Duration) -> Result<(), CommandError> {
    let (prog, args) = argv.split_first().ok_or(CommandError::Empty)?;
    let mut child = Command::new(prog)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .map_err(|source| CommandError::Spawn {
            prog: prog.clone(),
            source,
        })?;
    if let Some(mut stdin) = child.stdin.take() {
        // A command that exits without reading is not an error of ours.
        let _ = stdin.write_all(input.as_bytes());
        let _ = stdin.write_all(b"\n");
    }
    let deadline = Instant::now() + limit;
    loop {
        match child.try_wait() {
            Ok(Some(st)) if st.success() => return Ok(()),
            Ok(Some(status)) => {
                return Err(CommandError::Failed {
                    prog: prog.clone(),
                    status,
                })
            }
            Ok(None) if Instant::now() >= deadline => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(CommandError::Killed {
                    prog: prog.clone(),
                    limit,
                });
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(10)),
            Err(source) => {
                return Err(CommandError::Wait {
                    prog: prog.clone(),
                    source,
                })
            }
        }
    }
}

async fn deliver_one(
    notice: &Notice,
    settings: Option<Arc<AlertSettings>>,
    tls: &mut Option<(Option<PathBuf>, Arc<rustls::ClientConfig>)>,
    mailer: &Mailer,
    host: &str,
) {
    let json = notice.to_json();
    info!(target: "floodgate::alert", "{json}");
    let now = now_micros();
    mailer.noted(notice, now);
    let Some(s) = settings else { return };
    if let Some(m) = &s.mail {
        mailer.offer(super::mail::notice_mail(notice, m, host, now));
    }
    let webhook = async {
        let Some(url) = &s.webhook else { return };
        let config = if url.tls {
            let fresh = !matches!(tls, Some((ca, _)) if *ca == s.ca_file);
            if fresh {
                match webhook_tls(&s) {
                    Ok(Some(c)) => *tls = Some((s.ca_file.clone(), c)),
                    Ok(None) => {}
                    Err(e) => {
                        warn!(error = %e, "alert webhook: TLS configuration failed");
                        return;
                    }
                }
            }
            tls.as_ref().map(|(_, c)| c.clone())
        } else {
            None
        };
        if let Err(e) = post_json(url, &json, config, s.webhook_timeout).await {
            warn!(error = %e, "alert webhook delivery failed");
        }
    };
    let command = async {
        let Some(argv) = s.command.clone() else {
            return;
        };
        let limit = s.command_timeout;
        let input = json.clone();
        match tokio::task::spawn_blocking(move || run_command(&argv, &input, limit)).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => warn!(error = %e, "alert command failed"),
            Err(e) => warn!(error = %e, "alert command task failed"),
        }
    };
    tokio::join!(webhook, command);
}

/// The delivery loop: runs until the alerter (the sending side) is gone.
pub async fn run(
    alerter: Arc<Alerter>,
    mut rx: Receiver<Notice>,
    host: Arc<std::sync::RwLock<String>>,
    mailer: Arc<Mailer>,
) {
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut tls = None;
    loop {
        tokio::select! {
            n = rx.recv() => match n {
                Some(n) => {
                    let h = host.read().unwrap_or_else(|e| e.into_inner()).clone();
                    deliver_one(&n, alerter.settings(), &mut tls, &mailer, &h).await;
                }
                None => return,
            },
            _ = tick.tick() => {
                let h = host.read().unwrap_or_else(|e| e.into_inner()).clone();
                // The summary is queued on the same channel and delivered in order.
                alerter.tick(now_micros(), &h);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn command_gets_stdin_and_is_killed_after_its_limit() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("out");
        let argv: Vec<String> = vec![
            "/bin/sh".into(),
            "-c".into(),
            "cat > \"$0\"".into(),
            out.display().to_string(),
        ];
        run_command(&argv, "{\"a\":1}", Duration::from_secs(20)).unwrap();
        assert_eq!(std::fs::read_to_string(&out).unwrap(), "{\"a\":1}\n");
        let slow: Vec<String> = vec!["/bin/sleep".into(), "30".into()];
        let e = run_command(&slow, "", Duration::from_millis(100)).unwrap_err();
        assert!(e.to_string().contains("killed"), "{e}");
        let e =
            run_command(&["/nonexistent/x".to_string()], "", Duration::from_secs(1)).unwrap_err();
        assert!(e.to_string().contains("cannot run"), "{e}");
        let e = run_command(&["/bin/false".to_string()], "", Duration::from_secs(20)).unwrap_err();
        assert!(e.to_string().contains("exited"), "{e}");
    }
}
