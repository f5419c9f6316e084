//! Postfix's hold queue as floodgate sees it: the ledger joined with `postqueue -j`, a
//! message shown with `postcat -q`, released with `postsuper -H` and deleted with
//! `postsuper -d ID hold`, every command with `-c config_directory`.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, Weak};

use thiserror::Error;

use super::command::{self, CommandError};
use super::ledger::{Ledger, LedgerError};
use super::line::{Done, How, LedgerEntry};
use super::settings::PostfixSettings;
use crate::postfix::queue::{read_listing, read_postcat, Postcat, QueueEntry, QueueName};

/// What went wrong with a message in Postfix's hold queue.
#[derive(Debug, Error)]
pub enum PostfixError {
    /// One of Postfix's commands failed.
    #[error(transparent)]
    Command(#[from] CommandError),
    /// The ledger refused or failed.
    #[error(transparent)]
    Ledger(#[from] LedgerError),
    /// floodgate held it, but Postfix's hold queue no longer has it: someone released or
    /// deleted it with Postfix's own commands.
    #[error("queue id {0} is no longer in Postfix's hold queue (released or deleted with Postfix's own commands)")]
    Gone(String),
    /// A command's output was not what Postfix prints.
    #[error("{command}: unexpected output: {output:?}")]
    Unexpected {
        /// The command line.
        command: String,
        /// What it printed.
        output: String,
    },
}

impl PostfixError {
    /// Whether the error says the message asked for is not held (any more).
    pub fn is_not_held(&self) -> bool {
        match self {
            PostfixError::Gone(_) => true,
            PostfixError::Ledger(e) => e.is_not_held(),
            _ => false,
        }
    }

    /// Whether another request is releasing or deleting the message now.
    pub fn is_busy(&self) -> bool {
        matches!(self, PostfixError::Ledger(LedgerError::Busy(_)))
    }
}

/// A message floodgate held that is in Postfix's hold queue now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HeldInPostfix {
    /// What the ledger knows of it.
    pub entry: LedgerEntry,
    /// Its size as Postfix queued it.
    pub message_size: u64,
    /// Its recipients still to be delivered, as Postfix lists them.
    pub recipients: Vec<String>,
}

/// Ledgers open in this process, by path: a reload opens the same ledger again and gets
/// the one already open, so one file has one index and one set of claims.
static OPEN: Mutex<Vec<(PathBuf, Weak<Ledger>)>> = Mutex::new(Vec::new());

fn shared_ledger(s: &PostfixSettings) -> Result<Arc<Ledger>, LedgerError> {
    let mut open = OPEN
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    open.retain(|(_, w)| w.strong_count() > 0);
    if let Some(l) = open
        .iter()
        .find(|(p, _)| *p == s.ledger)
        .and_then(|(_, w)| w.upgrade())
    {
        return Ok(l);
    }
    let l = Arc::new(Ledger::open(&s.ledger, s.max_held)?);
    open.push((s.ledger.clone(), Arc::downgrade(&l)));
    Ok(l)
}

/// Postfix's hold queue, for the messages floodgate told Postfix to hold.
#[derive(Debug)]
pub struct PostfixHold {
    settings: PostfixSettings,
    ledger: Arc<Ledger>,
}

impl PostfixHold {
    /// Opens the ledger of `settings` (the one already open in this process, if any).
    pub fn open(settings: PostfixSettings) -> Result<PostfixHold, LedgerError> {
        let ledger = shared_ledger(&settings)?;
        Ok(PostfixHold { settings, ledger })
    }

    /// The ledger: front ends [`record`](Ledger::record) each message they tell Postfix to
    /// hold.
    pub fn ledger(&self) -> &Arc<Ledger> {
        &self.ledger
    }

    /// Its settings.
    pub fn settings(&self) -> &PostfixSettings {
        &self.settings
    }

    async fn run(
        &self,
        program: &PathBuf,
        args: &[&str],
    ) -> Result<command::Printed, CommandError> {
        let dir = self.settings.config_directory.display().to_string();
        let mut all = vec!["-c", dir.as_str()];
        all.extend_from_slice(args);
        command::run(program, &all, self.settings.command_timeout).await
    }

    /// Every message in Postfix's queue (`postqueue -j`), by queue id; lines that do not
    /// read are left out.
    async fn queue(&self) -> Result<HashMap<String, QueueEntry>, PostfixError> {
        let out = self.run(&self.settings.postqueue, &["-j"]).await?;
        Ok(read_listing(&out.stdout)
            .filter_map(Result::ok)
            .map(|e| (e.queue_id.clone(), e))
            .collect())
    }

    /// The messages floodgate held that Postfix's hold queue has now (every one, or those
    /// held for `key`), oldest first. Those no longer in the hold queue (released or deleted
    /// with Postfix's own commands) end in the ledger as gone.
    pub async fn list(&self, key: Option<&str>) -> Result<Vec<HeldInPostfix>, PostfixError> {
        let entries = match key {
            Some(k) => self.ledger.for_key(k),
            None => self.ledger.all(),
        };
        if entries.is_empty() {
            return Ok(Vec::new());
        }
        let queue = self.queue().await?;
        let mut out = Vec::with_capacity(entries.len());
        for entry in entries {
            match queue.get(&entry.queue_id) {
                Some(q) if q.queue_name() == QueueName::Hold => out.push(HeldInPostfix {
                    message_size: q.message_size,
                    recipients: q.recipients.iter().map(|r| r.address.clone()).collect(),
                    entry,
                }),
                _ => self.gone(&entry.queue_id)?,
            }
        }
        Ok(out)
    }

    /// The held message `queue_id`: the ledger's entry, and the header section and body
    /// size `postcat -q` prints.
    pub async fn show(&self, queue_id: &str) -> Result<(LedgerEntry, Postcat), PostfixError> {
        let entry = self.entry(queue_id)?;
        let printed = self.run(&self.settings.postcat, &["-q", queue_id]).await;
        let printed = match printed {
            Ok(p) => p,
            Err(e) => {
                // postcat fails on a queue id Postfix no longer has.
                if !self.in_hold(queue_id).await? {
                    self.gone(queue_id)?;
                    return Err(PostfixError::Gone(queue_id.to_string()));
                }
                return Err(e.into());
            }
        };
        let Some(m) = read_postcat(&printed.stdout) else {
            return Err(PostfixError::Unexpected {
                command: command::command_line(&self.settings.postcat, &["-q", queue_id]),
                output: printed.stdout.chars().take(200).collect(),
            });
        };
        if m.queue != "hold" {
            self.gone(queue_id)?;
            return Err(PostfixError::Gone(queue_id.to_string()));
        }
        Ok((entry, m))
    }

    /// Releases the held message `queue_id` (`postsuper -H`, then `postqueue -i` so Postfix
    /// delivers it now), once: a second release of it is an error that says when and by
    /// whom it was released.
    pub async fn release(&self, queue_id: &str, by: &str) -> Result<LedgerEntry, PostfixError> {
        self.act(queue_id, by, How::Released).await
    }

    /// Deletes the held message `queue_id` (`postsuper -d ID hold`).
    pub async fn delete(&self, queue_id: &str, by: &str) -> Result<LedgerEntry, PostfixError> {
        self.act(queue_id, by, How::Deleted).await
    }

    /// The ledger's entry for `queue_id`, or why there is none.
    fn entry(&self, queue_id: &str) -> Result<LedgerEntry, PostfixError> {
        self.ledger
            .get(queue_id)
            .ok_or_else(|| self.ledger.why_not_held(queue_id).into())
    }

    async fn in_hold(&self, queue_id: &str) -> Result<bool, PostfixError> {
        Ok(self
            .queue()
            .await?
            .get(queue_id)
            .is_some_and(|q| q.queue_name() == QueueName::Hold))
    }

    fn gone(&self, queue_id: &str) -> Result<(), PostfixError> {
        self.ledger.finish(Done {
            queue_id: queue_id.to_string(),
            how: How::Gone,
            time: crate::hold::spool::now_secs(),
            by: None,
        })?;
        Ok(())
    }

    async fn act(&self, queue_id: &str, by: &str, how: How) -> Result<LedgerEntry, PostfixError> {
        let entry = self.ledger.claim(queue_id)?;
        match self.postsuper(queue_id, how).await {
            Ok(true) => {
                if how == How::Released {
                    self.deliver_now(queue_id).await;
                }
                self.ledger.finish(Done {
                    queue_id: queue_id.to_string(),
                    how,
                    time: crate::hold::spool::now_secs(),
                    by: Some(by.to_string()),
                })?;
                Ok(entry)
            }
            Ok(false) => {
                self.gone(queue_id)?;
                Err(PostfixError::Gone(queue_id.to_string()))
            }
            Err(e) => {
                self.ledger.unclaim(queue_id);
                Err(e)
            }
        }
    }

    /// Asks Postfix to deliver a released message now (`postqueue -i ID`): `postsuper -H`
    /// puts it in the deferred queue, which Postfix otherwise looks at only every
    /// `queue_run_delay`. A failure only delays it, so it is logged, not returned.
    async fn deliver_now(&self, queue_id: &str) {
        if let Err(e) = self.run(&self.settings.postqueue, &["-i", queue_id]).await {
            tracing::warn!(error = %e, queue_id, "released message left for Postfix's next queue run");
        }
    }

    /// Runs `postsuper -H ID` or `-d ID hold`: whether it released or deleted the message
    /// (Postfix counts what it did: `Released from hold: 1 message`, `Deleted: 1 message`).
    async fn postsuper(&self, queue_id: &str, how: How) -> Result<bool, PostfixError> {
        let (args, done): (&[&str], &str) = match how {
            How::Released => (&["-H", queue_id], "Released from hold: 1 message"),
            _ => (&["-d", queue_id, "hold"], "Deleted: 1 message"),
        };
        let out = self.run(&self.settings.postsuper, args).await?;
        Ok(out.stderr.contains(done) || out.stdout.contains(done))
    }
}
