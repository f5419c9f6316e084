//! A thin (one-pointer) owned string used as the hash-table key.
//!
//! `Box<str>` is two words; with millions of keys the second word costs
//! 8 bytes per key in every hash-table slot (and twice that at a low load
//! factor). `ThinKey` stores the length in front of the bytes in one heap
//! block, so a slot holds a single pointer.

use std::alloc::{alloc, dealloc, handle_alloc_error, Layout};
use std::borrow::Borrow;
use std::fmt;
use std::hash::{Hash, Hasher};
use std::ptr::NonNull;

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

impl Hash for ThinKey {
    /// Hashes exactly like `str`, so maps keyed by `ThinKey` can be queried with `&str`.
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.as_str().hash(state);
    }
}

impl Borrow<str> for ThinKey {
    fn borrow(&self) -> &str {
        self.as_str()
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

    #[test]
    fn roundtrip_and_lookup() {
        let mut m: HashMap<ThinKey, u32> = HashMap::new();
        for s in ["", "a", "1h/per_rcpt/unique/ü@example.org"] {
            let k = ThinKey::new(s);
            assert_eq!(k.as_str(), s);
            assert_eq!(k.clone(), k);
            m.insert(k, s.len() as u32);
        }
        assert_eq!(m.get("a"), Some(&1));
        assert_eq!(m.get(""), Some(&0));
        assert_eq!(m.get("b"), None);
        assert_eq!(std::mem::size_of::<ThinKey>(), std::mem::size_of::<usize>());
    }
}
