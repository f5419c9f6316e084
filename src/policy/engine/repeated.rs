//! The engine's warnings that can come once per event while the store is down (failing
//! closed, or a restriction the store could not take): each told once per
//! [`crate::lograte::EVERY`] with its count, the counts flushed by the sweep each second.

use crate::lograte::RepeatedWarning;

/// A decision refused because the store's failure mode is closed.
pub(super) static STORE_CLOSED: RepeatedWarning =
    RepeatedWarning::new("rate limit store unavailable; failing closed");

/// A ratio window unreadable while the store fails closed.
pub(super) static RATIO_CLOSED: RepeatedWarning =
    RepeatedWarning::new("ratio window unavailable; failing closed");

/// A MAIL FROM answered 451 because the restricted set could not be read.
pub(super) static SET_CLOSED: RepeatedWarning =
    RepeatedWarning::new("restricted set unavailable; failing closed");

/// A `restrict` limit over whose key the store did not take.
pub(super) static NOT_RESTRICTED: RepeatedWarning =
    RepeatedWarning::new("restrict: the store could not record the restriction");

/// A ratio window the store did not add to.
pub(super) static RATIO_NOT_UPDATED: RepeatedWarning =
    RepeatedWarning::new("ratio window not updated");

/// Reservations of an abandoned transaction the store did not cancel.
pub(super) static RESERVATIONS_KEPT: RepeatedWarning =
    RepeatedWarning::new("cannot release rate limit reservations");

/// A message whose keys took longer than `[message_keys] budget`: it keeps the keys
/// finished by then.
pub(super) static KEYS_BUDGET: RepeatedWarning = RepeatedWarning::new(
    "message keys: budget exceeded; the message keeps the keys finished in time",
);

/// A message whose keys the pool could not compute (its threads did not start, or the
/// computation panicked): it has none.
pub(super) static KEYS_LOST: RepeatedWarning =
    RepeatedWarning::new("message keys: not computed; the message has none");

/// Tells the counts whose interval has passed.
pub(super) fn flush() {
    for w in [
        &STORE_CLOSED,
        &RATIO_CLOSED,
        &SET_CLOSED,
        &NOT_RESTRICTED,
        &RATIO_NOT_UPDATED,
        &RESERVATIONS_KEPT,
        &KEYS_BUDGET,
        &KEYS_LOST,
    ] {
        w.flush();
    }
}
