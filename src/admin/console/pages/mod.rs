//! The console's pages, one file each.

pub mod campaigns;
pub mod held;
pub mod held_postfix;
pub mod key;
pub mod key_history;
pub mod login;
pub mod message;
pub mod overview;
pub mod restricted;
pub mod top;

use crate::time::rfc3339;

/// `HH:MM` (UTC) of the start of minute `m` (minutes since the epoch).
pub fn clock(m: i64) -> String {
    let t = rfc3339(m.saturating_mul(60_000_000));
    t.get(11..16).unwrap_or("").to_string()
}

/// The labels under an hour's time axis ending at minute `now`: its first minute, the
/// middle and `now`.
pub fn hour_labels(now: i64) -> Vec<(usize, String)> {
    let n = super::history::MINUTES;
    let first = now - n as i64 + 1;
    vec![
        (0, clock(first)),
        (n / 2, clock(first + n as i64 / 2)),
        (n - 1, format!("{} UTC", clock(now))),
    ]
}

/// A time as RFC 3339 without the fraction of a second.
pub fn when(us: i64) -> String {
    let t = rfc3339(us.div_euclid(1_000_000) * 1_000_000);
    match t.find('.') {
        Some(i) => format!("{}Z", &t[..i]),
        None => t,
    }
}

/// An RFC 3339 time without its fraction of a second (`…:20.338479Z` → `…:20Z`), as
/// [`when`] shows times.
pub fn whole_seconds(t: &str) -> String {
    match t.split_once('.') {
        Some((head, _)) if t.ends_with('Z') => format!("{head}Z"),
        _ => t.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clocks_and_labels() {
        // 2025-01-01T00:00:00Z is minute 28_928_160.
        assert_eq!(clock(28_928_160), "00:00");
        assert_eq!(clock(28_928_160 + 61), "01:01");
        let l = hour_labels(28_928_160 + 59);
        assert_eq!(l[0], (0, "00:00".to_string()));
        assert_eq!(l[2], (59, "00:59 UTC".to_string()));
        assert_eq!(when(1_735_689_600_250_000), "2025-01-01T00:00:00Z");
    }
}
