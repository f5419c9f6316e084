//! The books of a fault run: what the clients were told, what Postfix delivered, what the
//! spools still hold, and the sums that must come out exact.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt::Write as _;
use std::fs;
use std::path::Path;

use crate::traffic::{Attempt, Class, End};

/// Delivered copies by tag: for each tag, the recipient of every copy in the maildir.
pub type Deliveries = HashMap<String, Vec<String>>;

/// Reads every message of the maildir: its `X-Fault-Tag` and `Delivered-To`.
pub fn deliveries(maildir: &Path) -> Deliveries {
    let mut out: Deliveries = HashMap::new();
    for sub in ["new", "cur"] {
        let Ok(rd) = fs::read_dir(maildir.join(sub)) else {
            continue;
        };
        for e in rd.filter_map(|e| e.ok()) {
            let Ok(raw) = fs::read(e.path()) else {
                continue;
            };
            let text = String::from_utf8_lossy(&raw);
            let head = text.split("\n\n").next().unwrap_or("");
            let field = |name: &str| {
                head.lines().find_map(|l| {
                    let (n, v) = l.split_once(':')?;
                    n.eq_ignore_ascii_case(name).then(|| v.trim().to_string())
                })
            };
            // Mail that is not the suite's (a notice, say) has no tag.
            if let (Some(tag), Some(to)) = (field("X-Fault-Tag"), field("Delivered-To")) {
                out.entry(tag).or_default().push(to.to_ascii_lowercase());
            }
        }
    }
    out
}

/// What the books say.
#[derive(Debug, Default)]
pub struct Books {
    /// Attempts, by class.
    pub attempts: BTreeMap<&'static str, usize>,
    /// Attempts answered 250 after the message.
    pub accepted: usize,
    /// Recipients of accepted attempts.
    pub accepted_rcpts: usize,
    /// Copies in the maildir of the suite's messages.
    pub delivered: usize,
    /// Recipients of accepted attempts still in a spool.
    pub held_rcpts: usize,
    /// Recipients of accepted attempts neither delivered nor held.
    pub lost: Vec<String>,
    /// Recipients delivered more than once.
    pub duplicated: Vec<String>,
    /// Copies of attempts that were refused (or cut before the message was sent).
    pub refused_delivered: Vec<String>,
    /// Copies for recipients floodgate never accepted in that attempt.
    pub phantom: Vec<String>,
    /// Attempts cut after the message was sent (the client does not know), and how many
    /// of their recipients were delivered.
    pub uncertain: (usize, usize),
}

/// Balances the attempts against the deliveries and the tags still held.
pub fn balance(attempts: &[Attempt], got: &Deliveries, held: &HashSet<String>) -> Books {
    let mut b = Books::default();
    let mut known: HashSet<&str> = HashSet::new();
    for a in attempts {
        known.insert(&a.tag);
        *b.attempts.entry(class_name(a.class)).or_default() += 1;
        let copies = got.get(&a.tag).map(Vec::as_slice).unwrap_or(&[]);
        let count = |rcpt: &str| copies.iter().filter(|c| c.as_str() == rcpt).count();
        for c in copies {
            if !a.accepted_rcpts.iter().any(|r| r.eq_ignore_ascii_case(c)) {
                b.phantom.push(format!("{} -> {c}", a.tag));
            }
        }
        match &a.end {
            End::Accepted => {
                b.accepted += 1;
                for r in &a.accepted_rcpts {
                    let r = r.to_ascii_lowercase();
                    b.accepted_rcpts += 1;
                    match count(&r) {
                        0 if held.contains(&a.tag) => b.held_rcpts += 1,
                        0 => b.lost.push(r),
                        1 => {}
                        _ => b.duplicated.push(r),
                    }
                }
            }
            End::Cut { stage: "end" } => {
                b.uncertain.0 += 1;
                for r in &a.accepted_rcpts {
                    match count(&r.to_ascii_lowercase()) {
                        0 => {}
                        1 => b.uncertain.1 += 1,
                        _ => b.duplicated.push(r.clone()),
                    }
                }
            }
            End::Refused { .. } | End::Cut { .. } => {
                b.refused_delivered.extend(copies.iter().cloned());
            }
        }
    }
    b.delivered = got
        .iter()
        .filter(|(t, _)| known.contains(t.as_str()))
        .map(|(_, c)| c.len())
        .sum();
    b
}

/// `normal` or `compromised`.
pub fn class_name(c: Class) -> &'static str {
    match c {
        Class::Normal => "normal",
        Class::Compromised => "compromised",
    }
}

/// One fault of the run and when it was in force (seconds since the traffic began).
#[derive(Debug, Clone)]
pub struct Window {
    /// What was done.
    pub fault: String,
    /// When it began.
    pub from: f64,
    /// When it was undone (the node back, Redis back, …).
    pub to: f64,
}

/// Per fault, what each class of client was told for the attempts started while it was
/// in force (and for five seconds after), and for normal users how long their messages
/// took to be accepted (first try to the accepted one).
pub fn fault_table(attempts: &[Attempt], windows: &[Window]) -> String {
    let mut t = String::new();
    for w in windows {
        let _ = writeln!(t, "{:>6.1}s-{:>6.1}s  {}", w.from, w.to, w.fault);
        for class in [Class::Normal, Class::Compromised] {
            let mut seen: BTreeMap<String, usize> = BTreeMap::new();
            for a in attempts
                .iter()
                .filter(|a| a.class == class && a.started >= w.from && a.started <= w.to + 5.0)
            {
                *seen.entry(a.end.label()).or_default() += 1;
            }
            let list: Vec<String> = seen.iter().map(|(k, n)| format!("{k} ×{n}")).collect();
            let _ = writeln!(t, "          {:<12} {}", class_name(class), list.join(", "));
        }
        let waits = message_waits(attempts, w.from, w.to + 5.0);
        if let Some(max) = waits.iter().cloned().reduce(f64::max) {
            let _ = writeln!(
                t,
                "          normal users' messages begun then: {} accepted, longest wait {max:.1}s",
                waits.len()
            );
        }
    }
    t
}

/// For each normal user's message whose first try began in `[from, to]` and that was
/// accepted: the seconds from its first try to the start of the accepted one.
fn message_waits(attempts: &[Attempt], from: f64, to: f64) -> Vec<f64> {
    let mut first: HashMap<(&str, usize), f64> = HashMap::new();
    let mut done: HashMap<(&str, usize), f64> = HashMap::new();
    for a in attempts.iter().filter(|a| a.class == Class::Normal) {
        let k = (a.user.as_str(), a.message);
        let f = first.entry(k).or_insert(a.started);
        *f = f.min(a.started);
        if a.end == End::Accepted {
            done.insert(k, a.started);
        }
    }
    first
        .iter()
        .filter(|(_, &f)| f >= from && f <= to)
        .filter_map(|(k, f)| done.get(k).map(|d| d - f))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attempt(tag: &str, rcpts: &[&str], end: End) -> Attempt {
        Attempt {
            user: "u".into(),
            class: Class::Normal,
            node: 0,
            message: 0,
            tag: tag.into(),
            started: 0.0,
            accepted_rcpts: rcpts.iter().map(|r| r.to_string()).collect(),
            end,
        }
    }

    #[test]
    fn the_books_find_each_kind_of_error() {
        let attempts = vec![
            attempt("ok", &["a@x"], End::Accepted),
            attempt("lost", &["b@x"], End::Accepted),
            attempt("held", &["c@x"], End::Accepted),
            attempt("dup", &["d@x"], End::Accepted),
            attempt(
                "refused",
                &["e@x"],
                End::Refused {
                    stage: "end",
                    code: 451,
                    enhanced: "4.3.0".into(),
                },
            ),
            attempt("cut", &["f@x"], End::Cut { stage: "end" }),
        ];
        let mut got = Deliveries::new();
        got.insert("ok".into(), vec!["a@x".into(), "zz@x".into()]);
        got.insert("dup".into(), vec!["d@x".into(), "d@x".into()]);
        got.insert("refused".into(), vec!["e@x".into()]);
        got.insert("cut".into(), vec!["f@x".into()]);
        let held: HashSet<String> = ["held".to_string()].into();
        let b = balance(&attempts, &got, &held);
        assert_eq!(b.lost, vec!["b@x"]);
        assert_eq!(b.duplicated, vec!["d@x"]);
        assert_eq!(b.refused_delivered, vec!["e@x"]);
        assert_eq!(b.phantom, vec!["ok -> zz@x"]);
        assert_eq!(b.held_rcpts, 1);
        assert_eq!(b.uncertain, (1, 1));
        assert_eq!(b.accepted, 4);
    }
}
