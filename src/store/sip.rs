//! SipHash with 128-bit output (Aumasson & Bernstein), written for key ids:
//! one pass over the key text gives both 64-bit halves of a [`KeyId`].
//!
//! The store uses SipHash-1-3 (the rounds of Rust's `DefaultHasher`); the
//! tests check the round function and 128-bit finalisation against the
//! reference SipHash-2-4 vectors.
//!
//! [`KeyId`]: super::key::KeyId

/// The SipHash state.
struct State {
    v0: u64,
    v1: u64,
    v2: u64,
    v3: u64,
}

impl State {
    #[inline(always)]
    fn round(&mut self) {
        self.v0 = self.v0.wrapping_add(self.v1);
        self.v1 = self.v1.rotate_left(13) ^ self.v0;
        self.v0 = self.v0.rotate_left(32);
        self.v2 = self.v2.wrapping_add(self.v3);
        self.v3 = self.v3.rotate_left(16) ^ self.v2;
        self.v0 = self.v0.wrapping_add(self.v3);
        self.v3 = self.v3.rotate_left(21) ^ self.v0;
        self.v2 = self.v2.wrapping_add(self.v1);
        self.v1 = self.v1.rotate_left(17) ^ self.v2;
        self.v2 = self.v2.rotate_left(32);
    }

    #[inline(always)]
    fn compress<const C: usize>(&mut self, m: u64) {
        self.v3 ^= m;
        for _ in 0..C {
            self.round();
        }
        self.v0 ^= m;
    }

    #[inline(always)]
    fn finish<const D: usize>(&mut self) -> u64 {
        for _ in 0..D {
            self.round();
        }
        self.v0 ^ self.v1 ^ self.v2 ^ self.v3
    }
}

/// SipHash-C-D with 128-bit output of `data` under key `(k0, k1)`; returns
/// the two little-endian halves of the output.
#[inline]
pub(crate) fn siphash128<const C: usize, const D: usize>(
    k0: u64,
    k1: u64,
    data: &[u8],
) -> (u64, u64) {
    let mut s = State {
        v0: k0 ^ 0x736f_6d65_7073_6575,
        v1: k1 ^ 0x646f_7261_6e64_6f6d ^ 0xee,
        v2: k0 ^ 0x6c79_6765_6e65_7261,
        v3: k1 ^ 0x7465_6462_7974_6573,
    };
    let mut words = data.chunks_exact(8);
    for w in &mut words {
        let mut b = [0u8; 8];
        b.copy_from_slice(w);
        s.compress::<C>(u64::from_le_bytes(b));
    }
    let rest = words.remainder();
    let mut b = [0u8; 8];
    b[..rest.len()].copy_from_slice(rest);
    // The length modulo 256 in the top byte, as the reference does.
    b[7] = data.len() as u8;
    s.compress::<C>(u64::from_le_bytes(b));
    s.v2 ^= 0xee;
    let lo = s.finish::<D>();
    s.v1 ^= 0xdd;
    let hi = s.finish::<D>();
    (lo, hi)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const K0: u64 = 0x0706_0504_0302_0100;
    const K1: u64 = 0x0f0e_0d0c_0b0a_0908;

    fn bytes((lo, hi): (u64, u64)) -> Vec<u8> {
        [lo.to_le_bytes(), hi.to_le_bytes()].concat()
    }

    /// The first vectors of `vectors_sip128` in the SipHash reference
    /// (key 00..0f, message 00..len-1).
    #[test]
    fn reference_vectors_2_4() {
        let expected: [[u8; 16]; 3] = [
            [
                0xa3, 0x81, 0x7f, 0x04, 0xba, 0x25, 0xa8, 0xe6, 0x6d, 0xf6, 0x72, 0x14, 0xc7, 0x55,
                0x02, 0x93,
            ],
            [
                0xda, 0x87, 0xc1, 0xd8, 0x6b, 0x99, 0xaf, 0x44, 0x34, 0x76, 0x59, 0x11, 0x9b, 0x22,
                0xfc, 0x45,
            ],
            [
                0x81, 0x77, 0x22, 0x8d, 0xa4, 0xa4, 0x5d, 0xc7, 0xfc, 0xa3, 0x8b, 0xde, 0xf6, 0x0a,
                0xff, 0xe4,
            ],
        ];
        let msg: Vec<u8> = (0..16).collect();
        for (len, want) in expected.iter().enumerate() {
            assert_eq!(
                bytes(siphash128::<2, 4>(K0, K1, &msg[..len])),
                want.to_vec(),
                "len {len}"
            );
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        /// Any change of the input (one flipped bit, or one more byte)
        /// changes both halves.
        #[test]
        fn every_change_changes_both_halves(
            data in proptest::collection::vec(any::<u8>(), 0..64),
            bit in 0usize..512,
            extra in any::<u8>(),
        ) {
            let a = siphash128::<1, 3>(K0, K1, &data);
            let mut longer = data.clone();
            longer.push(extra);
            let b = siphash128::<1, 3>(K0, K1, &longer);
            prop_assert!(a.0 != b.0 && a.1 != b.1);
            if !data.is_empty() {
                let mut flipped = data.clone();
                let i = bit % (data.len() * 8);
                flipped[i / 8] ^= 1 << (i % 8);
                let c = siphash128::<1, 3>(K0, K1, &flipped);
                prop_assert!(a.0 != c.0 && a.1 != c.1);
            }
            prop_assert_ne!(siphash128::<1, 3>(K0 ^ 1, K1, &data), a);
        }
    }
}
