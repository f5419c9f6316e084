//! How much of a message's text is whole clean lines, checked 64 octets at a time.
//!
//! A clean line ends in CRLF, holds no other CR or LF, does not start with '.', and is within
//! the line limit: its dot-stuffed wire form is the line itself, so the DATA decoder passes a
//! run of such lines on without looking at each. Nearly all message text is clean lines.
//! [`clean_run`] checks them a block at a time from three bit masks (CR, LF and '.' octets):
//! every LF must follow a CR and every CR precede an LF, no line may start with a dot, and
//! only the first line end of a block needs its line's length checked (within a block, line
//! ends are less than 64 octets apart). No work is done per line; the block where a check
//! fails, and the short end of the input, are gone through line by line
//! ([`clean_run_by_lines`], which is also what the block-wise answer is tested against).

/// The length of the longest prefix of `input` made of whole clean lines: each ended by CRLF,
/// with no other CR or LF, not starting with '.', and at most `max_line` octets long, CRLF
/// included. `input` must begin at the start of a line.
pub fn clean_run(input: &[u8], max_line: usize) -> usize {
    // Within a block, consecutive line ends are at most 63 octets apart, so lines other than
    // a block's first need no length check only if no limit is below 64.
    let good = if max_line >= 64 {
        by_blocks(input, max_line)
    } else {
        0
    };
    good + clean_run_by_lines(&input[good..], max_line)
}

/// [`clean_run`] one line at a time.
pub fn clean_run_by_lines(input: &[u8], max_line: usize) -> usize {
    let mut j = 0;
    while let Some(&first) = input.get(j) {
        if first == b'.' {
            break;
        }
        let Some(stop) = memchr::memchr2(b'\r', b'\n', &input[j..]) else {
            break;
        };
        let stop = j + stop;
        if input[stop] != b'\r' || input.get(stop + 1) != Some(&b'\n') {
            break;
        }
        if stop + 2 - j > max_line {
            break;
        }
        j = stop + 2;
    }
    j
}

/// The end of the last whole clean line in the leading whole 64-octet blocks that pass every
/// check. `max_line` is at least 64.
fn by_blocks(input: &[u8], max_line: usize) -> usize {
    #[cfg(target_arch = "x86_64")]
    {
        if std::is_x86_feature_detected!("avx2") {
            // SAFETY: AVX2 was detected on this CPU.
            unsafe { by_blocks_avx2(input, max_line) }
        } else {
            blocks_with(input, max_line, masks_sse2)
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    blocks_with(input, max_line, masks_portable)
}

/// [`by_blocks`] compiled for AVX2, so the masks are built inline, in registers.
///
/// # Safety
/// The CPU must have AVX2.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn by_blocks_avx2(input: &[u8], max_line: usize) -> usize {
    // SAFETY: this function only runs where AVX2 is (the caller's promise).
    blocks_with(input, max_line, |block| unsafe { masks_avx2(block) })
}

/// The block loop of [`by_blocks`], with `masks` building the masks of one block.
#[inline(always)]
fn blocks_with(input: &[u8], max_line: usize, masks: impl Fn(&[u8; 64]) -> Masks) -> usize {
    // The end of the last line end seen: where the current line starts.
    let mut good = 0;
    // The previous block's last octet was CR: this block's first must be LF.
    let mut cr_carry = 0u64;
    // This block's first octet starts a line (so must not be '.'); the input's first does.
    let mut start_carry = 1u64;
    let mut base = 0;
    while let Some(block) = input.get(base..base + 64) {
        let Masks { cr, lf, dot } = masks(block.try_into().expect("64 octets"));
        // Every LF right after a CR, every CR right before an LF (the one at the block's end
        // is checked with the next block), and no dot at a line start.
        if lf != (cr << 1) | cr_carry || dot & ((lf << 1) | start_carry) != 0 {
            break;
        }
        if lf != 0 {
            // The first line ending here began at `good`; later ones, in this block.
            let first = base + lf.trailing_zeros() as usize;
            if first + 1 - good > max_line {
                break;
            }
            good = base + 64 - lf.leading_zeros() as usize;
        }
        cr_carry = cr >> 63;
        start_carry = lf >> 63;
        base += 64;
    }
    good
}

/// Bit `k` of each mask is set where octet `k` of a block is CR, LF or '.'.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
struct Masks {
    cr: u64,
    lf: u64,
    dot: u64,
}

#[cfg(target_arch = "x86_64")]
fn masks_sse2(block: &[u8; 64]) -> Masks {
    use std::arch::x86_64::{
        __m128i, _mm_cmpeq_epi8, _mm_loadu_si128, _mm_movemask_epi8, _mm_set1_epi8,
    };
    // SAFETY: SSE2 is part of every x86_64 target, so these instructions always exist; each
    // load reads octets 16k..16k+16, inside `block`, and has no alignment requirement.
    unsafe {
        let (cr, lf, dot) = (
            _mm_set1_epi8(b'\r' as i8),
            _mm_set1_epi8(b'\n' as i8),
            _mm_set1_epi8(b'.' as i8),
        );
        let mut m = Masks::default();
        for k in 0..4 {
            let v = _mm_loadu_si128(block.as_ptr().add(16 * k).cast::<__m128i>());
            let bits = |c| u64::from(_mm_movemask_epi8(_mm_cmpeq_epi8(v, c)) as u16) << (16 * k);
            m.cr |= bits(cr);
            m.lf |= bits(lf);
            m.dot |= bits(dot);
        }
        m
    }
}

/// # Safety
/// The CPU must have AVX2.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn masks_avx2(block: &[u8; 64]) -> Masks {
    use std::arch::x86_64::{
        __m256i, _mm256_cmpeq_epi8, _mm256_loadu_si256, _mm256_movemask_epi8, _mm256_set1_epi8,
    };
    let (cr, lf, dot) = (
        _mm256_set1_epi8(b'\r' as i8),
        _mm256_set1_epi8(b'\n' as i8),
        _mm256_set1_epi8(b'.' as i8),
    );
    let mut m = Masks::default();
    for k in 0..2 {
        // SAFETY: reads octets 32k..32k+32, inside `block`, with no alignment requirement.
        let v = unsafe { _mm256_loadu_si256(block.as_ptr().add(32 * k).cast::<__m256i>()) };
        let bits = |c| u64::from(_mm256_movemask_epi8(_mm256_cmpeq_epi8(v, c)) as u32) << (32 * k);
        m.cr |= bits(cr);
        m.lf |= bits(lf);
        m.dot |= bits(dot);
    }
    m
}

/// The masks octet by octet: what other targets use, and what the vector versions are
/// tested against.
#[cfg_attr(target_arch = "x86_64", allow(dead_code))]
fn masks_portable(block: &[u8; 64]) -> Masks {
    let mask = |c: u8| {
        block
            .iter()
            .enumerate()
            .fold(0u64, |m, (k, &b)| m | (u64::from(b == c) << k))
    };
    Masks {
        cr: mask(b'\r'),
        lf: mask(b'\n'),
        dot: mask(b'.'),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// `n` clean lines of `len` octets each (CRLF included).
    fn lines(n: usize, len: usize) -> Vec<u8> {
        let mut v = Vec::new();
        for _ in 0..n {
            v.extend(std::iter::repeat_n(b'x', len - 2));
            v.extend_from_slice(b"\r\n");
        }
        v
    }

    #[test]
    fn a_clean_text_is_a_run_up_to_its_last_line_end() {
        let text = lines(40, 80);
        assert_eq!(clean_run(&text, 1000), text.len());
        let mut open = text.clone();
        open.extend_from_slice(b"an unfinished line");
        assert_eq!(clean_run(&open, 1000), text.len());
        assert_eq!(clean_run(b"", 1000), 0);
        assert_eq!(clean_run(b"\r\n", 1000), 2);
        assert_eq!(clean_run(b".\r\n", 1000), 0);
        // The input's first octet starts a line too.
        assert_eq!(clean_run(&[&b"."[..], &lines(3, 70)].concat(), 1000), 0);
    }

    #[test]
    fn the_run_stops_before_the_first_unclean_line() {
        let text = lines(10, 80);
        for (bad, why) in [
            (&b".dot\r\n"[..], "a leading dot"),
            (b"bare\nlf\r\n", "a bare LF"),
            (b"bare\rcr\r\n", "a bare CR"),
            (b"cr at end\r", "a CR with nothing after it"),
        ] {
            let mut input = text.clone();
            input.extend_from_slice(bad);
            input.extend_from_slice(&lines(10, 80));
            assert_eq!(clean_run(&input, 1000), text.len(), "{why}");
        }
    }

    #[test]
    fn line_ends_and_starts_across_block_edges() {
        // CR as a block's last octet, LF as the next block's first.
        let mut input = lines(1, 65);
        input.extend_from_slice(&lines(3, 70));
        assert_eq!(input[63], b'\r');
        assert_eq!(clean_run(&input, 1000), input.len());
        // The same CR followed by something else.
        let mut bad = input.clone();
        bad[64] = b'y';
        assert_eq!(clean_run(&bad, 1000), 0);
        // A line starting at a block's first octet, with a dot.
        let mut dot = lines(1, 64);
        dot.extend_from_slice(b".x\r\n");
        dot.extend_from_slice(&lines(3, 70));
        assert_eq!(clean_run(&dot, 1000), 64);
        // A dot that is not at a line start is text.
        let mut inner = lines(1, 63);
        inner.extend_from_slice(b"x.y\r\n");
        inner.extend_from_slice(&lines(3, 70));
        assert_eq!(clean_run(&inner, 1000), inner.len());
    }

    #[test]
    fn a_line_over_the_limit_ends_the_run_wherever_it_ends() {
        let mut input = lines(3, 100);
        input.extend_from_slice(&lines(1, 1001));
        input.extend_from_slice(&lines(3, 100));
        assert_eq!(clean_run(&input, 1000), 300);
        assert_eq!(clean_run(&input, 1001), input.len());
        // A limit under a block's width is checked line by line.
        assert_eq!(clean_run(&lines(20, 10), 10), 200);
        assert_eq!(clean_run(&lines(20, 10), 9), 0);
    }

    fn octets() -> impl Strategy<Value = Vec<u8>> {
        // Mostly clean lines of any length around the block width, with now and then a dot,
        // a bare CR or LF, or any octet, so every check fails somewhere.
        let piece = prop_oneof![
            12 => (0usize..140).prop_map(|n| {
                let mut v = vec![b'a'; n];
                v.extend_from_slice(b"\r\n");
                v
            }),
            1 => Just(b".".to_vec()),
            1 => Just(b"\r".to_vec()),
            1 => Just(b"\n".to_vec()),
            1 => any::<u8>().prop_map(|b| vec![b]),
        ];
        proptest::collection::vec(piece, 0..60).prop_map(|p| p.concat())
    }

    proptest! {
        /// Block by block is line by line.
        #[test]
        fn blocks_agree_with_lines(
            input in octets(),
            max_line in prop_oneof![Just(1000usize), 2usize..200],
            skip in prop_oneof![Just(0usize), 0usize..70],
        ) {
            let input = &input[skip.min(input.len())..];
            prop_assert_eq!(clean_run(input, max_line), clean_run_by_lines(input, max_line));
        }

        /// Every way of building the masks gives the octet-by-octet masks.
        #[test]
        fn vector_masks_are_the_portable_masks(
            block in proptest::collection::vec(
                prop_oneof![2 => Just(b'\r'), 2 => Just(b'\n'), 2 => Just(b'.'), 3 => any::<u8>()],
                64,
            ),
        ) {
            let block: [u8; 64] = block.try_into().unwrap();
            let want = masks_portable(&block);
            #[cfg(target_arch = "x86_64")]
            {
                prop_assert_eq!(masks_sse2(&block), want);
                if std::is_x86_feature_detected!("avx2") {
                    // SAFETY: AVX2 detected.
                    prop_assert_eq!(unsafe { masks_avx2(&block) }, want);
                }
            }
        }
    }
}
