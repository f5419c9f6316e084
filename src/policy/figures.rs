//! Numbers as people read them: a rate with at most three decimals, a period as the
//! config writes it, and the nearest-rank percentile that baselines and the report share.

/// A period in seconds as the config writes it (`1h`, `10m`, `1d`, `90s`).
pub fn period_text(secs: f64) -> String {
    let s = secs.round() as u64;
    match s {
        0 => "-".into(),
        s if s % 86_400 == 0 => format!("{}d", s / 86_400),
        s if s % 3600 == 0 => format!("{}h", s / 3600),
        s if s % 60 == 0 => format!("{}m", s / 60),
        s => format!("{s}s"),
    }
}

/// A rate for people: up to three decimals, no trailing zeros.
pub fn num(v: f64) -> String {
    let s = format!("{:.3}", v);
    let s = s.trim_end_matches('0').trim_end_matches('.');
    if s == "-0" {
        "0".into()
    } else {
        s.to_string()
    }
}

/// Nearest-rank percentile of ascending `v` (`p` in (0, 1]).
pub fn percentile(v: &[f64], p: f64) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    let rank = (p * v.len() as f64).ceil() as usize;
    v[rank.clamp(1, v.len()) - 1]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentile_is_nearest_rank() {
        let v = [1.0, 2.0, 3.0, 4.0];
        assert_eq!(percentile(&v, 0.5), 2.0);
        assert_eq!(percentile(&v, 1.0), 4.0);
        assert_eq!(percentile(&v, 0.01), 1.0);
        assert_eq!(percentile(&[], 0.5), 0.0);
    }

    #[test]
    fn periods_and_rates_read_as_written() {
        assert_eq!(period_text(3600.0), "1h");
        assert_eq!(period_text(90.0), "90s");
        assert_eq!(period_text(0.0), "-");
        assert_eq!(num(0.125), "0.125");
        assert_eq!(num(-0.0001), "0");
    }
}
