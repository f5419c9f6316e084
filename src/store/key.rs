//! A thin (one-pointer) owned string used as the hash-table key.
//!
//! `Box<str>` is two words; with millions of keys the second word costs
//! 8 bytes per key in every hash-table slot (and twice that at a low load
//! factor). `ThinKey` stores the length in front of the bytes in one heap
//! block, so a slot holds a single pointer.
//!
//! Keys are hashed once per decision: [`Lookup`] carries the text with its
//! precomputed keyed SipHash, the store picks the shard from some bits of
//! it and the table uses it unchanged (through [`IdentityHasher`]).

use std::alloc::{alloc, dealloc, handle_alloc_error, Layout};
use std::borrow::Borrow;
use std::collections::hash_map::RandomState;
use std::fmt;
use std::hash::{BuildHasher, Hash, Hasher};
use std::ptr::NonNull;
use std::sync::OnceLock;

/// The process-wide keyed hash of a key text (SipHash with random keys, so
/// that clients cannot choose colliding keys).
pub fn key_hash(text: &str) -> u64 {
    static KEYS: OnceLock<RandomState> = OnceLock::new();
    KEYS.get_or_init(RandomState::new).hash_one(text)
}

/// A hasher that passes a precomputed `u64` through.
#[derive(Debug, Default, Clone, Copy)]
pub struct IdentityHasher(u64);

impl Hasher for IdentityHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        // Only `write_u64` is used by the key types; fold anything else in
        // FNV-1a style so the hasher stays correct if that ever changes.
        for &b in bytes {
            self.0 = (self.0 ^ u64::from(b)).wrapping_mul(0x100_0000_01b3);
        }
    }
    fn write_u64(&mut self, v: u64) {
        self.0 = v;
    }
}

/// Anything that can be looked up in a table of [`ThinKey`]s.
pub trait AsKey {
    /// The keyed hash ([`key_hash`] of the text).
    fn key_hash(&self) -> u64;
    /// The key text.
    fn key_text(&self) -> &str;
}

/// A key text with its hash computed once.
#[derive(Debug, Clone, Copy)]
pub struct Lookup<'a> {
    hash: u64,
    text: &'a str,
}

impl<'a> Lookup<'a> {
    /// Hashes `text`.
    pub fn new(text: &'a str) -> Lookup<'a> {
        Lookup {
            hash: key_hash(text),
            text,
        }
    }

    /// The hash.
    pub fn hash(&self) -> u64 {
        self.hash
    }

    /// The text.
    pub fn text(&self) -> &'a str {
        self.text
    }
}

impl AsKey for Lookup<'_> {
    fn key_hash(&self) -> u64 {
        self.hash
    }
    fn key_text(&self) -> &str {
        self.text
    }
}

impl Hash for dyn AsKey + '_ {
    fn hash<H: Hasher>(&self, state: &mut H) {
        state.write_u64(self.key_hash());
    }
}

impl PartialEq for dyn AsKey + '_ {
    fn eq(&self, other: &Self) -> bool {
        self.key_text() == other.key_text()
    }
}

impl Eq for dyn AsKey + '_ {}

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

impl AsKey for ThinKey {
    fn key_hash(&self) -> u64 {
        key_hash(self.as_str())
    }
    fn key_text(&self) -> &str {
        self.as_str()
    }
}

impl Hash for ThinKey {
    /// Hashes like `dyn AsKey` (only table growth recomputes it).
    fn hash<H: Hasher>(&self, state: &mut H) {
        state.write_u64(key_hash(self.as_str()));
    }
}

impl<'a> Borrow<dyn AsKey + 'a> for ThinKey {
    fn borrow(&self) -> &(dyn AsKey + 'a) {
        self
    }
}

impl fmt::Debug for ThinKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.as_str(), f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;
    use std::hash::BuildHasherDefault;

    #[test]
    fn roundtrip_and_lookup() {
        let mut m: HashMap<ThinKey, u32, BuildHasherDefault<IdentityHasher>> = HashMap::default();
        for s in ["", "a", "1h/per_rcpt/unique/ü@example.org"] {
            let k = ThinKey::new(s);
            assert_eq!(k.as_str(), s);
            assert_eq!(k.clone(), k);
            m.insert(k, s.len() as u32);
        }
        let get = |k: &str| m.get(&Lookup::new(k) as &dyn AsKey).copied();
        assert_eq!(get("a"), Some(1));
        assert_eq!(get(""), Some(0));
        assert_eq!(get("b"), None);
        assert_eq!(ThinKey::new("a").key_hash(), Lookup::new("a").hash());
        assert_eq!(std::mem::size_of::<ThinKey>(), std::mem::size_of::<usize>());
    }
}
