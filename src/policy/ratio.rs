//! Ratio limits: `ratio = "bounced_recipients / recipients"`, `above`, `min_events`,
//! `period`. The two counts of a key are kept in a ratio window of the store (see
//! [`crate::store::ratio`]: exact integers over the last `period`, to within one twelfth
//! of it); the limit is over when the denominator has at least `min_events` and
//! `numerator / denominator > above`. A zero denominator is never over.
//!
//! In a ratio each count is of what upstream answered: `recipients` every recipient
//! upstream answered at RCPT TO (accepted or refused, so `refused_recipients / recipients`
//! is the share refused), `messages` every message it answered after the data, `bytes`
//! their size; `refused_*` the refused part; `bounced_recipients` and
//! `deferred_recipients` what the smart host reported later for queued messages.
//! Messages with a null sender or an `Auto-Submitted:` header other than `no` count on
//! neither side unless `include_automatic = true`.

use std::ops::Range;

use toml::Spanned;

use super::counted::Counted;
use super::Stage;
use crate::config::{parse_duration, ConfigError, LimitConfig};
use crate::store::{RatioCounts, RatioWindow};

/// The counts a ratio may use.
pub const RATIO_COUNTS: [Counted; 7] = [
    Counted::Recipients,
    Counted::Messages,
    Counted::Bytes,
    Counted::RefusedRecipients,
    Counted::RefusedMessages,
    Counted::BouncedRecipients,
    Counted::DeferredRecipients,
];

/// A compiled ratio limit.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RatioDef {
    /// The numerator.
    pub num: Counted,
    /// The denominator.
    pub den: Counted,
    /// Over when the ratio is strictly above this.
    pub above: f64,
    /// The fewest denominator events for the limit to judge at all.
    pub min_events: u64,
    /// The window.
    pub period_secs: u64,
    /// Whether null-sender and auto-submitted messages count.
    pub include_automatic: bool,
}

impl RatioDef {
    /// The store's window.
    pub fn window(&self) -> RatioWindow {
        RatioWindow::from_secs(self.period_secs)
    }

    /// The ratio of `c` (0 for a zero denominator) and whether it is over.
    pub fn judge(&self, c: RatioCounts) -> (f64, bool) {
        if c.den == 0 {
            return (0.0, false);
        }
        let value = c.num as f64 / c.den as f64;
        (value, c.den >= self.min_events && value > self.above)
    }

    /// What one side of the window gets from the events of one transaction.
    pub fn amounts(&self, of: impl Fn(Counted) -> u64) -> RatioCounts {
        RatioCounts {
            num: of(self.num),
            den: of(self.den),
        }
    }

    /// Whether either side counts `c`.
    pub fn uses(&self, c: Counted) -> bool {
        self.num == c || self.den == c
    }
}

/// Why a ratio expression was refused: the message and the byte offset in the expression.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct ExprError {
    /// Byte offset of the fault.
    pub at: usize,
    /// What is wrong.
    pub message: String,
}

fn words() -> String {
    RATIO_COUNTS
        .iter()
        .map(|c| c.as_str())
        .collect::<Vec<_>>()
        .join(", ")
}

/// Parses `"COUNT / COUNT"` (spaces around the `/` optional).
pub fn parse_expr(text: &str) -> Result<(Counted, Counted), ExprError> {
    let Some(slash) = text.find('/') else {
        return Err(ExprError {
            at: 0,
            message: format!("{text:?} is not \"COUNT / COUNT\" (counts: {})", words()),
        });
    };
    let side = |part: &str, start: usize| -> Result<Counted, ExprError> {
        let trimmed = part.trim();
        let off = start + (part.len() - part.trim_start().len());
        if trimmed.is_empty() {
            return Err(ExprError {
                at: off,
                message: "a count is missing on one side of the \"/\"".into(),
            });
        }
        Counted::parse(trimmed)
            .filter(|c| RATIO_COUNTS.contains(c))
            .ok_or_else(|| ExprError {
                at: off,
                message: format!("{trimmed:?} cannot be part of a ratio: use {}", words()),
            })
    };
    let num = side(&text[..slash], 0)?;
    let den = side(&text[slash + 1..], slash + 1)?;
    if num == den {
        return Err(ExprError {
            at: 0,
            message: format!("the ratio divides {} by itself (always 1)", num.as_str()),
        });
    }
    Ok((num, den))
}

/// The ratio keys given without `ratio`: the first one, for the error.
pub fn stray_key(raw: &LimitConfig) -> Option<(&'static str, Range<usize>)> {
    [
        raw.above.as_ref().map(|v| ("above", v.span())),
        raw.min_events.as_ref().map(|v| ("min_events", v.span())),
        raw.period.as_ref().map(|v| ("period", v.span())),
        raw.include_automatic
            .as_ref()
            .map(|v| ("include_automatic", v.span())),
    ]
    .into_iter()
    .flatten()
    .next()
}

/// Compiles the ratio of a `[[limit]]` with `ratio`: the numerator (as what the limit
/// counts), the stage and the rate.
pub fn compile(
    raw: &LimitConfig,
    ratio: &Spanned<String>,
    stage: Option<Stage>,
    err: &dyn Fn(Range<usize>, String) -> ConfigError,
) -> Result<(Counted, Stage, RatioDef), ConfigError> {
    let (num, den) = parse_expr(ratio.get_ref()).map_err(|e| {
        let s = ratio.span().start + 1 + e.at;
        err(s..s, format!("ratio: {}", e.message))
    })?;
    let above = raw
        .above
        .as_ref()
        .ok_or_else(|| err(ratio.span(), "a ratio needs `above` (such as 0.3)".into()))?;
    let a = *above.get_ref();
    if !a.is_finite() || a < 0.0 {
        return Err(err(
            above.span(),
            format!("above = {a}: use a number of 0 or more"),
        ));
    }
    let min_events = match &raw.min_events {
        Some(m) => u64::try_from(*m.get_ref())
            .map_err(|_| err(m.span(), "min_events must be 0 or more".into()))?,
        None => 1,
    };
    let period = raw.period.as_ref().ok_or_else(|| {
        err(
            ratio.span(),
            "a ratio needs `period` (the window, such as \"1h\")".into(),
        )
    })?;
    let p =
        parse_duration(period.get_ref()).map_err(|e| err(period.span(), format!("period: {e}")))?;
    if p.as_secs() < 12 || p.subsec_nanos() != 0 {
        return Err(err(
            period.span(),
            "period: use whole seconds, at least 12s".into(),
        ));
    }
    for (key, given) in [
        ("count", raw.count.as_ref().map(|v| v.span())),
        ("burst", raw.burst.as_ref().map(|v| v.span())),
        ("algorithm", raw.algorithm.as_ref().map(|v| v.span())),
        ("mode", raw.mode.as_ref().map(|v| v.span())),
        ("limit_list", raw.limit_list.as_ref().map(|v| v.span())),
    ] {
        if let Some(span) = given {
            return Err(err(
                span,
                format!("`{key}` does not go with `ratio` (the counts are in the ratio)"),
            ));
        }
    }
    Ok((
        num,
        stage.unwrap_or(Stage::Mail),
        RatioDef {
            num,
            den,
            above: a,
            min_events,
            period_secs: p.as_secs(),
            include_automatic: raw.include_automatic.as_ref().is_some_and(|v| *v.get_ref()),
        },
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn expressions() {
        assert_eq!(
            parse_expr("bounced_recipients / recipients"),
            Ok((Counted::BouncedRecipients, Counted::Recipients))
        );
        assert_eq!(
            parse_expr("refused_messages/messages"),
            Ok((Counted::RefusedMessages, Counted::Messages))
        );
        let e = parse_expr("recipients").unwrap_err();
        assert!(e.message.contains("COUNT / COUNT"), "{e}");
        let e = parse_expr("bounced_recipients / ").unwrap_err();
        assert!(e.message.contains("missing"), "{e}");
        let e = parse_expr("bounced / recipients").unwrap_err();
        assert_eq!(e.at, 0);
        assert!(e.message.contains("\"bounced\" cannot be part"), "{e}");
        let e = parse_expr("recipients / connections").unwrap_err();
        assert_eq!(e.at, 13);
        let e = parse_expr("recipients / recipients").unwrap_err();
        assert!(e.message.contains("by itself"), "{e}");
        assert!(parse_expr("a / b / c").is_err());
    }

    fn def(above: f64, min: u64) -> RatioDef {
        RatioDef {
            num: Counted::RefusedRecipients,
            den: Counted::Recipients,
            above,
            min_events: min,
            period_secs: 3600,
            include_automatic: false,
        }
    }

    #[test]
    fn judging() {
        let c = |num, den| RatioCounts { num, den };
        assert_eq!(def(0.5, 10).judge(c(12, 20)), (0.6, true));
        assert_eq!(def(0.5, 10).judge(c(10, 20)), (0.5, false));
        // Too few events to judge.
        assert_eq!(def(0.5, 10).judge(c(9, 9)), (1.0, false));
        // A zero denominator: no ratio at all.
        assert_eq!(def(0.0, 0).judge(c(5, 0)), (0.0, false));
        assert_eq!(def(0.0, 0).judge(c(1, 1)), (1.0, true));
    }

    proptest! {
        #[test]
        fn parse_never_panics(s in "\\PC{0,60}") {
            let _ = parse_expr(&s);
        }

        #[test]
        fn every_pair_round_trips(i in 0usize..7, j in 0usize..7, sp in "[ \t]{0,3}") {
            let (a, b) = (RATIO_COUNTS[i], RATIO_COUNTS[j]);
            let text = format!("{sp}{}{sp}/{sp}{}{sp}", a.as_str(), b.as_str());
            let got = parse_expr(&text);
            if i == j {
                prop_assert!(got.is_err());
            } else {
                prop_assert_eq!(got, Ok((a, b)));
            }
        }

        #[test]
        fn over_means_above_with_enough_events(num in 0u64..1000, den in 0u64..1000, above in 0.0f64..2.0, min in 0u64..50) {
            let (v, over) = def(above, min).judge(RatioCounts { num, den });
            prop_assert!(v.is_finite());
            prop_assert_eq!(over, den > 0 && den >= min && (num as f64 / den as f64) > above);
        }
    }
}
