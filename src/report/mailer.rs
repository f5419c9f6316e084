//! Sending alert mail off the session path: a bounded queue of mails ([`Mailer::offer`]; a
//! full queue drops the mail and counts it), one task that sends them one at a time through
//! a [`MailTransport`] (the running floodgate's upstream), and the daily digest at its local
//! time. Results are counted (`floodgate_alert_mail_total{result}`); failures are logged
//! at most once per [`crate::lograte::EVERY`] with their count.

use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::Value;
use tokio::sync::mpsc;

use super::digest::{digest_mail, DigestClock, DigestError, DigestSource};
use super::mail::OutMail;
use crate::lograte::RepeatedWarning;
use crate::metrics::Metrics;
use crate::policy::alert::{AlertSettings, Alerter, Notice};
use crate::store::now_micros;

/// Alert mails waiting to be sent at most; more are dropped.
pub const MAIL_QUEUE: usize = 64;

/// Release notices remembered for the digest at most.
const MAX_RELEASED: usize = 1000;

const DAY_US: i64 = 86_400_000_000;

/// Why one mail was not sent.
#[derive(Debug, thiserror::Error)]
pub enum MailError {
    /// The transport failed: upstream refused the mail or could not be reached.
    #[error("{0}")]
    Send(String),
    /// Nothing to send through yet (floodgate is not serving sessions).
    #[error("no upstream to send through")]
    NoTransport,
    /// Alert mail is off (no `[alerts] mail_to`).
    #[error("[alerts] mail_to is not set")]
    Off,
    /// The digest's facts could not be read.
    #[error(transparent)]
    Digest(#[from] DigestError),
}

/// A future of one sending: upstream's last answer line once it accepted the mail.
pub type SendFuture<'a> = Pin<Box<dyn Future<Output = Result<String, MailError>> + Send + 'a>>;

/// Sends one mail from the null sender.
pub trait MailTransport: Send + Sync {
    /// Sends `mail`.
    fn send<'a>(&'a self, mail: &'a OutMail) -> SendFuture<'a>;
}

static SEND_FAILED: RepeatedWarning = RepeatedWarning::new("alert mail not sent");
static DROPPED: RepeatedWarning =
    RepeatedWarning::new("alert mail dropped: too many waiting to be sent");

/// What alert mail goes out through, is counted in and reads the digest's facts from,
/// given when the [`Mailer`] is made.
pub struct MailParts {
    /// Sends each mail (the running floodgate's upstream).
    pub transport: Arc<dyn MailTransport>,
    /// Counts the results (`floodgate_alert_mail_total{result}`).
    pub metrics: Arc<Metrics>,
    /// The digest's facts.
    pub digest: Arc<dyn DigestSource>,
}

/// The queue of alert mail, its transport, the digest's source and what the digest
/// remembers.
pub struct Mailer {
    tx: mpsc::Sender<OutMail>,
    transport: Arc<dyn MailTransport>,
    source: Arc<dyn DigestSource>,
    metrics: Arc<Metrics>,
    released: Mutex<VecDeque<(i64, Value)>>,
}

impl Mailer {
    /// A mailer of `parts` and the receiving end of its queue (for [`run`]).
    pub fn new(parts: MailParts) -> (Mailer, mpsc::Receiver<OutMail>) {
        let (tx, rx) = mpsc::channel(MAIL_QUEUE);
        (
            Mailer {
                tx,
                transport: parts.transport,
                source: parts.digest,
                metrics: parts.metrics,
                released: Mutex::new(VecDeque::new()),
            },
            rx,
        )
    }

    fn count(&self, result: &str) {
        self.metrics.alert_mail(result);
    }

    /// Queues `mail`; a full queue drops it (counted and logged).
    pub fn offer(&self, mail: OutMail) {
        if let Err(e) = self.tx.try_send(mail) {
            self.count("dropped");
            let subject = match &e {
                mpsc::error::TrySendError::Full(m) | mpsc::error::TrySendError::Closed(m) => {
                    m.subject.clone()
                }
            };
            DROPPED.warn(&subject);
        }
    }

    /// Remembers a release notice for the digest (the last 24 hours, bounded).
    pub fn noted(&self, notice: &Notice, now_us: i64) {
        let Notice::Restriction(v) = notice else {
            return;
        };
        if v["event"] != "floodgate.released" {
            return;
        }
        let mut r = self.released.lock().unwrap_or_else(|e| e.into_inner());
        r.push_back((now_us, v.clone()));
        while r.len() > MAX_RELEASED || r.front().is_some_and(|(t, _)| *t < now_us - DAY_US) {
            r.pop_front();
        }
    }

    /// Sends `mail` now, counting and logging the result.
    pub async fn send(&self, mail: &OutMail) -> Result<String, MailError> {
        match self.transport.send(mail).await {
            Ok(answer) => {
                self.count("sent");
                tracing::info!(to = ?mail.to, subject = %mail.subject, upstream = %answer,
                    "alert mail sent");
                Ok(answer)
            }
            Err(e) => {
                self.count("failed");
                SEND_FAILED.warn(&format!("{}: {e}", mail.subject));
                Err(e)
            }
        }
    }

    /// Makes and sends the digest of `settings` now.
    pub async fn digest(&self, settings: &AlertSettings, host: &str) -> Result<String, MailError> {
        let m = settings.mail.as_ref().ok_or(MailError::Off)?;
        let facts = match self.source.facts().await {
            Ok(f) => f,
            Err(e) => {
                self.count("failed");
                SEND_FAILED.warn(&e.to_string());
                return Err(e.into());
            }
        };
        let now = now_micros();
        let released: Vec<Value> = self
            .released
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .filter(|(t, _)| *t >= now - DAY_US)
            .map(|(_, v)| v.clone())
            .collect();
        self.send(&digest_mail(&facts, &released, m, host, now))
            .await
    }
}

/// How often the sending task looks at the clock (the digest, the warnings' counts).
const TICK: Duration = Duration::from_secs(20);

/// The sending task: sends queued mail in order and the digest when due; runs until the
/// queue's sending end is gone.
pub async fn run(
    mailer: Arc<Mailer>,
    mut rx: mpsc::Receiver<OutMail>,
    alerter: Arc<Alerter>,
    host: Arc<std::sync::RwLock<String>>,
) {
    let mut tick = tokio::time::interval(TICK);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut clock = DigestClock::default();
    loop {
        tokio::select! {
            m = rx.recv() => match m {
                // A failure is counted and logged by `send`; alert mail is not retried.
                Some(m) => { let _ = mailer.send(&m).await; }
                None => return,
            },
            _ = tick.tick() => {
                SEND_FAILED.flush();
                DROPPED.flush();
                let settings = alerter.settings();
                let time = settings.as_ref().and_then(|s| s.mail.as_ref()).and_then(|m| m.digest);
                if clock.due(time, jiff::Zoned::now().datetime()) {
                    if let Some(s) = settings {
                        let h = host.read().unwrap_or_else(|e| e.into_inner()).clone();
                        let _ = mailer.digest(&s, &h).await;
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A transport that answers every mail with `answer` and keeps the subjects.
    struct Fixed {
        answer: Result<String, String>,
        sent: Mutex<Vec<String>>,
    }

    impl MailTransport for Fixed {
        fn send<'a>(&'a self, mail: &'a OutMail) -> SendFuture<'a> {
            self.sent.lock().unwrap().push(mail.subject.clone());
            let r = self.answer.clone().map_err(MailError::Send);
            Box::pin(async move { r })
        }
    }

    fn mail(subject: &str) -> OutMail {
        OutMail {
            to: vec!["p@uni.test".into()],
            subject: subject.into(),
            message: b"Subject: x\r\n\r\nx\r\n".to_vec(),
        }
    }

    /// A digest source with nothing to tell.
    struct NoFacts;

    impl DigestSource for NoFacts {
        fn facts(&self) -> super::super::digest::FactsFuture<'_> {
            Box::pin(async { Err(DigestError("no facts here".into())) })
        }
    }

    fn mailer(
        answer: Result<String, String>,
        metrics: &Arc<Metrics>,
    ) -> (Mailer, Arc<Fixed>, mpsc::Receiver<OutMail>) {
        let t = Arc::new(Fixed {
            answer,
            sent: Mutex::default(),
        });
        let (m, rx) = Mailer::new(MailParts {
            transport: t.clone(),
            metrics: metrics.clone(),
            digest: Arc::new(NoFacts),
        });
        (m, t, rx)
    }

    /// The transport of a floodgate not serving yet.
    struct NotServing;

    impl MailTransport for NotServing {
        fn send<'a>(&'a self, _: &'a OutMail) -> SendFuture<'a> {
            Box::pin(async { Err(MailError::NoTransport) })
        }
    }

    #[tokio::test]
    async fn results_are_counted_and_a_full_queue_drops() {
        // Without an upstream to send through: failed, not sent.
        let before = Arc::new(Metrics::new());
        let (m, _rx) = Mailer::new(MailParts {
            transport: Arc::new(NotServing),
            metrics: before.clone(),
            digest: Arc::new(NoFacts),
        });
        assert!(matches!(
            m.send(&mail("a")).await,
            Err(MailError::NoTransport)
        ));
        assert_eq!(before.alert_mail_of("failed"), 1);
        assert_eq!(before.alert_mail_of("sent"), 0);

        let metrics = Arc::new(Metrics::new());
        let (m, t, _rx) = mailer(Ok("250 queued".into()), &metrics);
        assert_eq!(m.send(&mail("b")).await.unwrap(), "250 queued");
        assert_eq!(*t.sent.lock().unwrap(), ["b"]);
        assert_eq!(metrics.alert_mail_of("sent"), 1);
        // Nobody takes from the queue: the one past its length is dropped and counted.
        for i in 0..=MAIL_QUEUE {
            m.offer(mail(&i.to_string()));
        }
        assert_eq!(metrics.alert_mail_of("dropped"), 1);

        let (m, _t, _rx) = mailer(Err("550 5.1.1 no such user".into()), &metrics);
        let e = m.send(&mail("c")).await.unwrap_err();
        assert_eq!(e.to_string(), "550 5.1.1 no such user");
        assert_eq!(metrics.alert_mail_of("failed"), 1);
        assert_eq!(metrics.alert_mail_of("sent"), 1);
    }

    #[test]
    fn releases_are_remembered_for_a_day() {
        let (m, _t, _rx) = mailer(Ok("250 queued".into()), &Arc::new(Metrics::new()));
        let released = |key: &str| {
            Notice::Restriction(serde_json::json!({"event": "floodgate.released", "key": key}))
        };
        m.noted(&released("a"), 0);
        m.noted(
            &Notice::Restriction(serde_json::json!({"event": "floodgate.restricted"})),
            1,
        );
        m.noted(&released("b"), DAY_US / 2);
        assert_eq!(m.released.lock().unwrap().len(), 2);
        m.noted(&released("c"), DAY_US + 1);
        let keys: Vec<Value> = m
            .released
            .lock()
            .unwrap()
            .iter()
            .map(|(_, v)| v["key"].clone())
            .collect();
        assert_eq!(keys, ["b", "c"]);
    }
}
