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

use super::sip::siphash128;
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
        let (lo, hi) = siphash128::<1, 3>(k0, k1, text.as_bytes());
        KeyId { lo, hi }
    }
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
