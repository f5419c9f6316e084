//! The console's state: the admin API it acts through, the token, the sessions and the
//! per-minute history, and the task that samples it.

use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::{auth, history};
use crate::admin::api::AdminState;
use crate::config::Secret;

/// How often the per-minute history reads the counters.
pub const SAMPLE_EVERY: Duration = Duration::from_secs(5);

/// The console of one admin TCP address.
pub struct Console {
    pub(super) state: Arc<AdminState>,
    pub(super) token: Arc<Secret>,
    pub(super) actions: bool,
    pub(super) sessions: auth::Sessions,
    pub(super) history: history::Recorder,
}

impl Console {
    /// The console over `state`, guarded by `token`; `[admin] console_actions` is read now
    /// (like the rest of `[admin]`, a reload does not change it). Starts the sampler of the
    /// per-minute history, which ends with `stop`.
    pub fn start(
        state: Arc<AdminState>,
        token: Arc<Secret>,
        stop: CancellationToken,
    ) -> Arc<Console> {
        let actions = state.control.config().admin.console_actions;
        let console = Arc::new(Console {
            state,
            token,
            actions,
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
