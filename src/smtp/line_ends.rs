//! Finding the CR and LF octets of message text 64 octets at a time.
//!
//! Message lines are short (often under 80 octets), so looking for each line's end with a
//! fresh search pays that search's set-up once per line. [`LineEnds`] instead marks every
//! CR and LF of a 64-octet block in one bit mask, then answers "the next CR or LF from here"
//! from the mask for as many lines as the block holds.

/// The positions of CR and LF in one input, found block by block.
pub struct LineEnds<'a> {
    input: &'a [u8],
    /// The block whose mask is held (`usize::MAX`: none yet).
    block: usize,
    /// Bit `k` set: octet `64 * block + k` is CR or LF.
    mask: u64,
}

impl<'a> LineEnds<'a> {
    /// A scanner over `input`.
    pub fn new(input: &'a [u8]) -> Self {
        LineEnds {
            input,
            block: usize::MAX,
            mask: 0,
        }
    }

    /// The position of the first CR or LF at or after `from`, if any.
    pub fn next_from(&mut self, from: usize) -> Option<usize> {
        if from >= self.input.len() {
            return None;
        }
        let mut block = from / 64;
        let mut m = self.mask_of(block) & (!0u64 << (from % 64));
        while m == 0 {
            block += 1;
            if block * 64 >= self.input.len() {
                return None;
            }
            m = self.mask_of(block);
        }
        Some(block * 64 + m.trailing_zeros() as usize)
    }

    fn mask_of(&mut self, block: usize) -> u64 {
        if block != self.block {
            self.block = block;
            let rest = &self.input[block * 64..];
            self.mask = match rest.get(..64) {
                Some(whole) => mask64(whole.try_into().expect("64 octets")),
                None => {
                    // The last, short block: padded with octets that are neither CR nor LF.
                    let mut padded = [0u8; 64];
                    padded[..rest.len()].copy_from_slice(rest);
                    mask64(&padded)
                }
            };
        }
        self.mask
    }
}

/// Bit `k` set where `block[k]` is CR or LF.
#[cfg(target_arch = "x86_64")]
fn mask64(block: &[u8; 64]) -> u64 {
    use std::arch::x86_64::{
        __m128i, _mm_cmpeq_epi8, _mm_loadu_si128, _mm_movemask_epi8, _mm_or_si128, _mm_set1_epi8,
    };
    // SAFETY: SSE2 is part of every x86_64 target, so these instructions always exist; each
    // load reads octets 16k..16k+16, inside `block`, and has no alignment requirement.
    unsafe {
        let cr = _mm_set1_epi8(b'\r' as i8);
        let lf = _mm_set1_epi8(b'\n' as i8);
        let mut mask = 0u64;
        for k in 0..4 {
            let v = _mm_loadu_si128(block.as_ptr().add(16 * k).cast::<__m128i>());
            let hits = _mm_or_si128(_mm_cmpeq_epi8(v, cr), _mm_cmpeq_epi8(v, lf));
            mask |= u64::from(_mm_movemask_epi8(hits) as u16) << (16 * k);
        }
        mask
    }
}

/// Bit `k` set where `block[k]` is CR or LF.
#[cfg(not(target_arch = "x86_64"))]
fn mask64(block: &[u8; 64]) -> u64 {
    mask64_portable(block)
}

/// [`mask64`] without vector instructions: what other targets use, and what the x86_64
/// version is tested against.
#[cfg_attr(target_arch = "x86_64", allow(dead_code))]
fn mask64_portable(block: &[u8; 64]) -> u64 {
    block.iter().enumerate().fold(0, |m, (k, &b)| {
        m | (u64::from(b == b'\r' || b == b'\n') << k)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn naive(input: &[u8], from: usize) -> Option<usize> {
        (from..input.len()).find(|&i| input[i] == b'\r' || input[i] == b'\n')
    }

    #[test]
    fn finds_ends_across_blocks_and_in_the_short_last_block() {
        let mut input = vec![b'x'; 200];
        input[0] = b'\r';
        input[63] = b'\n';
        input[64] = b'\r';
        input[199] = b'\n';
        let mut s = LineEnds::new(&input);
        assert_eq!(s.next_from(0), Some(0));
        assert_eq!(s.next_from(1), Some(63));
        assert_eq!(s.next_from(64), Some(64));
        assert_eq!(s.next_from(65), Some(199));
        assert_eq!(s.next_from(200), None);
        // Backwards too: the block mask is recomputed.
        assert_eq!(s.next_from(2), Some(63));
        assert_eq!(LineEnds::new(b"").next_from(0), None);
        assert_eq!(LineEnds::new(b"abc").next_from(0), None);
        assert_eq!(LineEnds::new(&[0u8; 70]).next_from(3), None);
        // Every octet value other than CR and LF is passed over.
        let all: Vec<u8> = (0..=255u8).filter(|&b| b != b'\r' && b != b'\n').collect();
        assert_eq!(LineEnds::new(&all).next_from(0), None);
    }

    proptest! {
        /// The vector mask is the octet-by-octet mask.
        #[test]
        fn vector_mask_is_the_portable_mask(
            block in proptest::collection::vec(
                prop_oneof![2 => Just(b'\r'), 2 => Just(b'\n'), 1 => Just(b'\r' | 0x80), 3 => any::<u8>()],
                64,
            ),
        ) {
            let block: [u8; 64] = block.try_into().unwrap();
            prop_assert_eq!(mask64(&block), mask64_portable(&block));
        }

        /// Any input, any sequence of starting points: the same answer as looking octet by
        /// octet.
        #[test]
        fn same_as_a_plain_search(
            input in proptest::collection::vec(
                prop_oneof![4 => Just(b'a'), 1 => Just(b'\r'), 1 => Just(b'\n'), 1 => any::<u8>()],
                0..300,
            ),
            starts in proptest::collection::vec(0usize..320, 1..20),
        ) {
            let mut s = LineEnds::new(&input);
            for from in starts {
                prop_assert_eq!(s.next_from(from), naive(&input, from));
            }
        }
    }
}
