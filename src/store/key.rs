//! Key identity and key text.
//!
//! A key text is hashed once per decision into a [`KeyId`]: 128 bits of
//! SipHash-1-3 (one pass, 128-bit output) under a random per-process key. The tables identify a record
//! by its id alone, so a lookup never leaves the table's slot to compare key
//! texts; with 128 random-keyed bits, two distinct texts colliding is not a
//! practical event (about 2^-88 for a billion live keys) and clients cannot
//! choose colliding texts. The text itself is kept beside the record as a
//! [`ThinKey`], read only by snapshots and iteration.
//!
//! `Box<str>` is two words; `ThinKey` stores the length in front of the
//! bytes in one heap block, so a slot holds a single pointer.

use siphasher::sip128::SipHasher13;
use std::alloc::{alloc, dealloc, handle_alloc_error, Layout};
use std::collections::hash_map::RandomState;
use std::fmt;
use std::hash::BuildHasher;
use std::ptr::NonNull;
use std::sync::OnceLock;

/// The 128-bit keyed identity of a key text.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct KeyId {
    /// First 64 bits: the table position.
    pub(crate) lo: u64,
    /// Second 64 bits: the shard.
    pub(crate) hi: u64,
}

impl KeyId {
    /// Hashes `text` with the two process-wide random keys.
    pub(crate) fn of(text: &str) -> KeyId {
        // Random per process: derived from std's randomly keyed SipHash,
        // so clients can neither predict nor choose colliding ids.
        static KEY: OnceLock<(u64, u64)> = OnceLock::new();
        let &(k0, k1) = KEY.get_or_init(|| {
            let rs = RandomState::new();
            (rs.hash_one(0u64), rs.hash_one(1u64))
        });
        let (lo, hi) = sip13_128(k0, k1, text.as_bytes());
        KeyId { lo, hi }
    }
}

/// SipHash-1-3 with 128-bit output of `data` under key `(k0, k1)`: the two little-endian
/// 64-bit halves of the output (the first is the table position, the second the shard).
fn sip13_128(k0: u64, k1: u64, data: &[u8]) -> (u64, u64) {
    SipHasher13::new_with_keys(k0, k1).hash(data).as_u64()
}

/// A key text with its id computed once.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Lookup<'a> {
    id: KeyId,
    text: &'a str,
}

impl<'a> Lookup<'a> {
    /// Hashes `text`.
    pub(crate) fn new(text: &'a str) -> Lookup<'a> {
        Lookup {
            id: KeyId::of(text),
            text,
        }
    }

    /// The id.
    pub(crate) fn id(&self) -> KeyId {
        self.id
    }

    /// The text.
    pub(crate) fn text(&self) -> &'a str {
        self.text
    }
}

const HEADER: usize = std::mem::size_of::<u32>();

/// An immutable UTF-8 string behind one pointer: `[len: u32][bytes]`.
pub struct ThinKey(NonNull<u8>);

// SAFETY: ThinKey owns its heap block exclusively and never mutates it after
// construction, exactly like Box<str>.
unsafe impl Send for ThinKey {}
// SAFETY: only shared reads happen through &ThinKey.
unsafe impl Sync for ThinKey {}

fn layout(len: usize) -> Layout {
    // Cannot fail: len fits in u32 (checked by the caller) and align 4 is valid.
    Layout::from_size_align(HEADER + len, std::mem::align_of::<u32>()).expect("key layout")
}

impl ThinKey {
    /// Copies `s` into a new key.
    ///
    /// # Panics
    /// If `s` is 4 GiB or longer (callers bound key length far below that).
    pub fn new(s: &str) -> ThinKey {
        let len = u32::try_from(s.len()).expect("key shorter than 4 GiB");
        let layout = layout(s.len());
        // SAFETY: the layout has non-zero size (HEADER > 0). The block is
        // written in full before use: 4 length bytes, then `len` bytes.
        unsafe {
            let p = alloc(layout);
            let Some(p) = NonNull::new(p) else {
                handle_alloc_error(layout)
            };
            p.as_ptr().cast::<u32>().write(len);
            std::ptr::copy_nonoverlapping(s.as_ptr(), p.as_ptr().add(HEADER), s.len());
            ThinKey(p)
        }
    }

    /// The key text.
    pub fn as_str(&self) -> &str {
        // SAFETY: the block was initialised in `new` with a valid length and
        // UTF-8 bytes copied from a &str, and lives as long as self.
        unsafe {
            let len = self.0.as_ptr().cast::<u32>().read() as usize;
            let bytes = std::slice::from_raw_parts(self.0.as_ptr().add(HEADER), len);
            std::str::from_utf8_unchecked(bytes)
        }
    }

    /// Heap bytes used by this key (header + text).
    pub fn heap_bytes(&self) -> usize {
        HEADER + self.as_str().len()
    }
}

impl Drop for ThinKey {
    fn drop(&mut self) {
        let len = self.as_str().len();
        // SAFETY: allocated in `new` with exactly this layout.
        unsafe { dealloc(self.0.as_ptr(), layout(len)) }
    }
}

impl Clone for ThinKey {
    fn clone(&self) -> ThinKey {
        ThinKey::new(self.as_str())
    }
}

impl PartialEq for ThinKey {
    fn eq(&self, other: &ThinKey) -> bool {
        self.as_str() == other.as_str()
    }
}

impl Eq for ThinKey {}

impl fmt::Debug for ThinKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.as_str(), f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const K0: u64 = 0x0706_0504_0302_0100;
    const K1: u64 = 0x0f0e_0d0c_0b0a_0908;

    /// Key ids are pinned: these are the values of SipHash-1-3/128 the store has always
    /// computed (key 00..0f), so a change of hash implementation cannot move keys between
    /// table slots and shards unnoticed.
    #[test]
    fn sip13_128_pinned_values() {
        assert_eq!(
            sip13_128(K0, K1, b""),
            (0xbea5_8827_b2bc_7ee7, 0x0130_30dd_6adb_62fd)
        );
        assert_eq!(
            sip13_128(K0, K1, b"alice@example.com"),
            (0xf982_9f18_48b2_ec30, 0xccc3_282f_eeb5_b91b)
        );
        assert_eq!(
            sip13_128(
                K0,
                K1,
                b"192.0.2.1/limit/msgs/with a longer key text over 16 bytes"
            ),
            (0x25fe_be87_9a48_fddc, 0x3073_3b84_c913_a5cb)
        );
    }

    /// The crate's 128-bit SipHash-2-4 against the first vectors of `vectors_sip128` in the
    /// SipHash reference (key 00..0f, message 00..len-1): the halves come out in the order
    /// [`sip13_128`] returns them.
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
            let (lo, hi) = siphasher::sip128::SipHasher24::new_with_keys(K0, K1)
                .hash(&msg[..len])
                .as_u64();
            let got = [lo.to_le_bytes(), hi.to_le_bytes()].concat();
            assert_eq!(got, want.to_vec(), "len {len}");
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        /// Any change of the input (one flipped bit, or one more byte) changes both halves.
        #[test]
        fn every_change_changes_both_halves(
            data in proptest::collection::vec(any::<u8>(), 0..64),
            bit in 0usize..512,
            extra in any::<u8>(),
        ) {
            let a = sip13_128(K0, K1, &data);
            let mut longer = data.clone();
            longer.push(extra);
            let b = sip13_128(K0, K1, &longer);
            prop_assert!(a.0 != b.0 && a.1 != b.1);
            if !data.is_empty() {
                let mut flipped = data.clone();
                let i = bit % (data.len() * 8);
                flipped[i / 8] ^= 1 << (i % 8);
                let c = sip13_128(K0, K1, &flipped);
                prop_assert!(a.0 != c.0 && a.1 != c.1);
            }
            prop_assert_ne!(sip13_128(K0 ^ 1, K1, &data), a);
        }
    }

    #[test]
    fn thin_key_roundtrip() {
        for s in ["", "a", "1h/per_rcpt/unique/ü@example.org"] {
            let k = ThinKey::new(s);
            assert_eq!(k.as_str(), s);
            assert_eq!(k.clone(), k);
            assert_eq!(k.heap_bytes(), 4 + s.len());
        }
        assert_eq!(std::mem::size_of::<ThinKey>(), std::mem::size_of::<usize>());
        assert_eq!(
            std::mem::size_of::<Option<ThinKey>>(),
            std::mem::size_of::<usize>()
        );
    }

    #[test]
    fn ids_are_stable_and_distinct() {
        assert_eq!(KeyId::of("a"), KeyId::of("a"));
        assert_eq!(Lookup::new("a").id(), KeyId::of("a"));
        assert_eq!(Lookup::new("a").text(), "a");
        let ids: std::collections::HashSet<KeyId> =
            (0..10_000).map(|i| KeyId::of(&format!("k{i}"))).collect();
        assert_eq!(ids.len(), 10_000);
        let id = KeyId::of("x");
        assert_ne!(id.lo, id.hi, "the two halves use independent keys");
    }
}
