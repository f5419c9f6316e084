//! The console's state: the admin API it acts through, the named tokens and the throttle of
//! wrong ones, the sessions and the per-minute history, and the task that samples it.

use std::net::IpAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;

use super::auth::TokenCheck;
use super::{auth, history, throttle};
use crate::admin::api::AdminState;
use crate::admin::http::ct_eq;
use crate::config::AdminToken;

/// How often the per-minute history reads the counters.
pub const SAMPLE_EVERY: Duration = Duration::from_secs(5);

/// The console of one admin TCP address.
pub struct Console {
    pub(super) state: Arc<AdminState>,
    /// The tokens of the admin address, each with its name.
    pub(super) tokens: Vec<AdminToken>,
    pub(super) actions: bool,
    /// The address serves TLS: the session cookie is `Secure`.
    pub(super) secure: bool,
    pub(super) throttle: throttle::Throttle,
    pub(super) sessions: auth::Sessions,
    pub(super) history: history::Recorder,
}

impl Console {
    /// The console over `state`, guarded by `tokens`; `[admin] console_actions`, `tls` and the
    /// login delays are read now (like the rest of `[admin]`, a reload does not change
    /// them). Starts the sampler of the per-minute history, which ends with `stop`.
    pub fn start(
        state: Arc<AdminState>,
        tokens: Vec<AdminToken>,
        stop: CancellationToken,
    ) -> Arc<Console> {
        let config = state.control.config();
        let console = Arc::new(Console {
            actions: config.admin.console_actions,
            secure: config.admin.tls.is_some(),
            throttle: throttle::Throttle::new(config.admin.login_delay),
            state,
            tokens,
            sessions: auth::Sessions::default(),
            history: history::Recorder::default(),
        });
        let c = console.clone();
        tokio::spawn(async move {
            let mut every = tokio::time::interval(SAMPLE_EVERY);
            every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tokio::select! {
                    _ = every.tick() => c.sample(),
                    _ = stop.cancelled() => return,
                }
            }
        });
        console
    }

    /// Checks `given`, presented from `peer`, against the admin tokens, unless `peer` must
    /// still wait after its wrong tokens (see [`throttle`]). Every token is compared in
    /// constant time (none is skipped once one matched), so the time taken tells nothing of
    /// which matched. A wrong token is logged with the address and the wait it earned.
    pub fn check_token(&self, given: &str, peer: IpAddr) -> TokenCheck {
        let now = Instant::now();
        if let throttle::Turn::Wait(w) = self.throttle.turn(peer, now) {
            return TokenCheck::Throttled(w);
        }
        let mut matched = None;
        for t in &self.tokens {
            if ct_eq(given.as_bytes(), t.secret.expose().as_bytes()) && matched.is_none() {
                matched = Some(t.name.clone());
            }
        }
        if let Some(name) = matched {
            self.throttle.right(peer);
            return TokenCheck::Right(name);
        }
        let wait = self.throttle.wrong(peer, now);
        tracing::warn!(
            client = %peer,
            wait_ms = wait.as_millis() as u64,
            "admin address: wrong token; the address waits before its next one"
        );
        TokenCheck::Wrong(wait)
    }

    /// Reads the counters into the per-minute history.
    fn sample(&self) {
        let minute = history::minute_of(crate::store::now_micros());
        self.history.sample(
            &self.state.metrics,
            &self.state.control.generation(),
            minute,
        );
    }
}
