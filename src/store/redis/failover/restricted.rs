//! The restricted set while Redis does not answer: the copy's answer, restricting on this
//! node, and the sweep that brings the copy and Redis together (see [`super`] and
//! [`crate::store::redis::copy`]).

use std::sync::atomic::Ordering;

use super::{FailoverStore, FailureMode, RECORD_OUTCOMES};
use crate::store::redis::copy::Recorded;
use crate::store::{now_micros, Decision, Guarded, Restriction, StoreError};

impl FailoverStore {
    /// The restricted set could not be read (`e`): a key this node's copy holds in force is
    /// restricted as Redis would say, whatever the failure mode; for the others the store's
    /// failure mode decides, as for a limit: closed refuses (the error, answered 451), open
    /// and local let the event through. Logged once per interval with a count.
    pub(super) fn offline_check(
        &self,
        keys: &[String],
        e: StoreError,
    ) -> Result<Option<Restriction>, StoreError> {
        if let Some(r) = self.copy.check(keys, now_micros()) {
            return Ok(Some(r));
        }
        let mode = self.policy.default;
        self.unreadable
            .warn(&format!("{e} (failure_mode {})", mode.as_str()));
        if mode == FailureMode::Closed {
            Err(e)
        } else {
            Ok(None)
        }
    }

    /// The guarded decision while the set cannot be read: the copy, then the fallback.
    pub(super) fn offline_guarded(
        &self,
        keys: &[String],
        decision: &Decision,
        e: StoreError,
    ) -> Result<Guarded, StoreError> {
        if let Some(r) = self.offline_check(keys, e)? {
            return Ok(Guarded::Restricted(r));
        }
        self.fallback_local(None, decision).map(Guarded::Decided)
    }

    /// Restricts on this node while Redis cannot be written (`why`).
    pub(super) fn restrict_here(
        &self,
        r: Restriction,
        dur: Option<i64>,
        keep: bool,
        why: &StoreError,
    ) -> (Restriction, bool) {
        let (r, made) = self.copy.restrict_here(r, dur, keep, now_micros());
        if made {
            self.restricted_here.fetch_add(1, Ordering::Relaxed);
            self.unwritable.warn(&format!("{why} (key {})", r.key));
        }
        (r, made)
    }

    /// Brings the copy and Redis together: the listing refreshes the copy, the restrictions
    /// made here are recorded, the ended ones swept (answered in `ended`).
    pub(super) async fn sync(&self, ended: &mut Vec<Restriction>) -> Result<(), StoreError> {
        let start = self.copy.begin_refresh();
        let listed = self.redis.restriction_list().await?;
        let lost = self.copy.refresh(start, listed, now_micros());
        if lost > 0 {
            tracing::warn!(
                restrictions = lost,
                "restricted set: Redis lacks restrictions this node holds in force; \
                 recording them again unless released"
            );
        }
        for r in self.copy.pending(now_micros()) {
            let outcome = match self.redis.record_restriction(&r).await {
                Ok(o) => o,
                Err(e) => {
                    self.not_recorded.warn(&e.to_string());
                    return Err(e);
                }
            };
            self.copy.settle(&r, &outcome);
            if let Some(i) = RECORD_OUTCOMES.iter().position(|l| *l == outcome.label()) {
                self.recorded[i].fetch_add(1, Ordering::Relaxed);
            }
            // Times in microseconds since the epoch (the store keeps no clock of text).
            let since_us = r.since_us;
            match &outcome {
                Recorded::Recorded(_) => tracing::info!(key = %r.key, limit = %r.limit, since_us,
                    "restriction made while Redis was away recorded in Redis"),
                Recorded::Kept(k) => tracing::info!(key = %r.key, limit = %r.limit, since_us,
                    kept_since_us = k.since_us, kept_by = %k.by,
                    "restriction made while Redis was away not recorded: Redis holds one of the key"),
                Recorded::Released(at) => tracing::info!(key = %r.key, limit = %r.limit, since_us,
                    released_us = *at,
                    "restriction made while Redis was away not recorded: the key was released since"),
                Recorded::Expired => tracing::info!(key = %r.key, limit = %r.limit, since_us,
                    "restriction made while Redis was away not recorded: it has ended"),
            }
        }
        let swept = self.redis.sweep_restrictions().await?;
        for r in &swept {
            self.copy.forget(&r.key);
        }
        ended.extend(swept);
        Ok(())
    }

    /// Tells the counts of the repeated warnings whose interval has passed.
    pub(super) fn flush_warnings(&self) {
        self.unreadable.flush();
        self.unwritable.flush();
        self.not_recorded.flush();
    }
}
