//! A session's pool of emptied strings, reused for the facts of the next transaction
//! (no allocation per command once the pool is warm).

/// Most strings a pool keeps, and the largest (capacity).
const POOLED_STRINGS: usize = 8;
const POOLED_STRING_CAPACITY: usize = 1024;

/// Keeps an emptied `s` for reuse, up to the pool's bounds.
pub(super) fn pool_string(pool: &mut Vec<String>, s: Option<String>) {
    if let Some(mut s) = s {
        if pool.len() < POOLED_STRINGS && s.capacity() <= POOLED_STRING_CAPACITY {
            s.clear();
            pool.push(s);
        }
    }
}

/// `text` in a string from `pool` (no allocation once the pool is warm).
pub(super) fn pooled(pool: &mut Vec<String>, text: &str) -> String {
    let mut s = pool.pop().unwrap_or_default();
    s.push_str(text);
    s
}

#[cfg(test)]
mod pool_tests {
    use super::pool_string;

    #[test]
    fn pool_is_bounded_and_keeps_only_empty_small_strings() {
        let mut pool = Vec::new();
        pool_string(&mut pool, None);
        assert!(pool.is_empty());
        pool_string(&mut pool, Some("x".repeat(2000)));
        assert!(pool.is_empty(), "large strings are dropped");
        for _ in 0..20 {
            pool_string(&mut pool, Some(String::from("abc")));
        }
        assert_eq!(pool.len(), 8);
        assert!(pool.iter().all(|s| s.is_empty() && s.capacity() >= 3));
    }
}
