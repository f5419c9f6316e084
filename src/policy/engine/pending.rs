//! Charges waiting for upstream's answer, and the decision that settles them.

use crate::limit::bucket::{BucketOp, MessageClass};
use crate::limit::spec::UpdateMode;
use crate::store::{Algorithm, Decision, LimitRequest};

/// A charge to settle when upstream answers.
#[derive(Clone, Debug, PartialEq)]
pub(super) struct Pending {
    pub(super) key: String,
    pub(super) algorithm: Algorithm,
    pub(super) count: f64,
    pub(super) unique: Option<String>,
    /// When it was checked (the policy clock), for the replay of leaky Exim limits.
    pub(super) time_us: i64,
}

impl Pending {
    /// The charge of a checked event, applied as checked once upstream accepts (an EWMA
    /// limit is then stored whatever its mode: the check already decided).
    pub(super) fn charge(req: &LimitRequest, time_us: i64) -> Pending {
        let mut algorithm = req.algorithm.clone();
        if let Algorithm::Ewma { mode, .. } = &mut algorithm {
            *mode = UpdateMode::Strict;
        }
        Pending {
            key: req.key.clone(),
            algorithm,
            count: req.count,
            unique: req.unique.clone(),
            time_us,
        }
    }

    /// A bucket's reservation, settled as reserved.
    pub(super) fn reservation(req: &LimitRequest, time_us: i64) -> Pending {
        Pending {
            key: req.key.clone(),
            algorithm: req.algorithm.clone(),
            count: req.count,
            unique: None,
            time_us,
        }
    }

    pub(super) fn is_bucket(&self) -> bool {
        matches!(self.algorithm, Algorithm::Bucket { .. })
    }

    pub(super) fn is_ewma(&self) -> bool {
        matches!(self.algorithm, Algorithm::Ewma { .. })
    }

    /// Whether upstream's permanent refusal makes this charge spam (a dynamic bucket).
    pub(super) fn is_dynamic_bucket(&self) -> bool {
        matches!(self.algorithm, Algorithm::Bucket { spec, .. } if spec.dynamic.is_some())
    }
}

/// A decision that settles `pending`: commit (with the message class for dynamic buckets) or not.
pub(super) fn settlement(pending: Vec<Pending>, commit: Option<MessageClass>) -> Decision {
    let mut d = Decision::default();
    // Sum non-unique charges per key: one request per key and algorithm. EWMA events
    // stay one request each, in the order they were checked, as Exim stores them.
    let mut merged: Vec<Pending> = Vec::new();
    for p in pending {
        if p.unique.is_none() && !p.is_ewma() {
            if let Some(m) = merged
                .iter_mut()
                .find(|m| m.unique.is_none() && m.key == p.key && m.algorithm == p.algorithm)
            {
                m.count += p.count;
                continue;
            }
        }
        merged.push(p);
    }
    for p in merged {
        let algorithm = match (p.algorithm, commit) {
            (Algorithm::Bucket { spec, .. }, Some(v)) => Algorithm::Bucket {
                spec,
                op: BucketOp::Commit(v),
            },
            (Algorithm::Bucket { spec, .. }, None) => Algorithm::Bucket {
                spec,
                op: BucketOp::Cancel,
            },
            (other, Some(_)) => other,
            // Nothing was stored for a dry-run charge: dropping it is the refund.
            (_, None) => continue,
        };
        d.limits.push(LimitRequest {
            key: p.key,
            algorithm,
            count: p.count,
            unique: p.unique,
            blocking: false,
        });
    }
    d
}

/// The decision for upstream's answer to a message (its reply code's class): a 2xx commits
/// every charge as ham; a 5xx commits dynamic buckets as spam (their multipliers shrink)
/// and releases the rest; anything else releases everything.
pub(super) fn message_settlement(pending: Vec<Pending>, class: u16) -> Decision {
    let mut d = match class {
        2 => settlement(pending, Some(MessageClass::Ham)),
        5 => {
            let (spam, rest): (Vec<Pending>, Vec<Pending>) =
                pending.into_iter().partition(Pending::is_dynamic_bucket);
            let mut d = settlement(spam, Some(MessageClass::Spam));
            d.limits.extend(settlement(rest, None).limits);
            d
        }
        _ => settlement(pending, None),
    };
    d.limits.shrink_to_fit();
    d
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::limit::gcra::GcraSpec;
    use crate::limit::rate::Rate;

    fn gcra(key: &str, count: f64) -> Pending {
        Pending {
            key: key.into(),
            algorithm: Algorithm::Gcra(
                GcraSpec::new(10.0, Rate::new(10.0, 60.0).unwrap()).unwrap(),
            ),
            count,
            unique: None,
            time_us: 0,
        }
    }

    #[test]
    fn accepted_charges_merge_per_key() {
        let d = settlement(
            vec![gcra("a", 1.0), gcra("b", 2.0), gcra("a", 3.0)],
            Some(MessageClass::Ham),
        );
        let got: Vec<(&str, f64)> = d.limits.iter().map(|r| (&*r.key, r.count)).collect();
        assert_eq!(got, [("a", 4.0), ("b", 2.0)]);
        assert!(d.limits.iter().all(|r| !r.blocking));
    }

    #[test]
    fn refused_dry_run_charges_are_dropped() {
        assert!(settlement(vec![gcra("a", 1.0)], None).limits.is_empty());
        assert!(message_settlement(vec![gcra("a", 1.0)], 4)
            .limits
            .is_empty());
        assert!(message_settlement(vec![gcra("a", 1.0)], 5)
            .limits
            .is_empty());
        assert_eq!(message_settlement(vec![gcra("a", 1.0)], 2).limits.len(), 1);
    }
}
