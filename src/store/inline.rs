//! A vector that keeps its first `N` items inline: the per-decision
//! bookkeeping of a multi-limit decision (keys, shard locks, undo log) needs
//! no heap allocation for decisions of up to `N` limits, and spills to the
//! heap beyond.

use std::ops::{Index, IndexMut};

/// A vector with inline room for `N` items.
pub(crate) struct InlineVec<T, const N: usize> {
    // Safe inline storage: `None` past `len`.
    inline: [Option<T>; N],
    len: usize,
    heap: Vec<T>,
}

impl<T, const N: usize> InlineVec<T, N> {
    /// An empty vector (no allocation).
    pub(crate) fn new() -> Self {
        InlineVec {
            inline: std::array::from_fn(|_| None),
            len: 0,
            heap: Vec::new(),
        }
    }

    /// Number of items.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Appends an item.
    pub(crate) fn push(&mut self, v: T) {
        if self.len < N {
            self.inline[self.len] = Some(v);
        } else {
            self.heap.push(v);
        }
        self.len += 1;
    }

    /// Removes the last item.
    pub(crate) fn pop(&mut self) -> Option<T> {
        if self.len == 0 {
            return None;
        }
        self.len -= 1;
        if self.len >= N {
            self.heap.pop()
        } else {
            self.inline[self.len].take()
        }
    }

    /// The item at `i`.
    pub(crate) fn get(&self, i: usize) -> Option<&T> {
        if i >= self.len {
            None
        } else if i < N {
            self.inline[i].as_ref()
        } else {
            self.heap.get(i - N)
        }
    }

    /// The item at `i`, mutable.
    pub(crate) fn get_mut(&mut self, i: usize) -> Option<&mut T> {
        if i >= self.len {
            None
        } else if i < N {
            self.inline[i].as_mut()
        } else {
            self.heap.get_mut(i - N)
        }
    }

    /// The items in order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = &T> {
        self.inline.iter().flatten().chain(self.heap.iter())
    }
}

impl<T, const N: usize> Index<usize> for InlineVec<T, N> {
    type Output = T;
    fn index(&self, i: usize) -> &T {
        self.get(i).expect("InlineVec index in bounds")
    }
}

impl<T, const N: usize> IndexMut<usize> for InlineVec<T, N> {
    fn index_mut(&mut self, i: usize) -> &mut T {
        self.get_mut(i).expect("InlineVec index in bounds")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn inline_then_heap() {
        let mut v: InlineVec<String, 2> = InlineVec::new();
        for s in ["a", "b", "c"] {
            v.push(s.to_string());
        }
        assert_eq!(v.len(), 3);
        assert_eq!(v[2], "c");
        v[0].push('!');
        assert_eq!(v.iter().cloned().collect::<Vec<_>>(), ["a!", "b", "c"]);
        assert_eq!(v.get(3), None);
        assert_eq!(v.pop().as_deref(), Some("c"));
        assert_eq!(v.pop().as_deref(), Some("b"));
        assert_eq!(v.pop().as_deref(), Some("a!"));
        assert_eq!(v.pop(), None);
    }

    proptest! {
        /// Behaves like a Vec under pushes and pops.
        #[test]
        fn matches_vec(ops in proptest::collection::vec(proptest::option::of(any::<u16>()), 0..40)) {
            let mut v: InlineVec<u16, 4> = InlineVec::new();
            let mut w: Vec<u16> = Vec::new();
            for op in ops {
                match op {
                    Some(x) => { v.push(x); w.push(x); }
                    None => prop_assert_eq!(v.pop(), w.pop()),
                }
                prop_assert_eq!(v.len(), w.len());
                prop_assert_eq!(v.iter().copied().collect::<Vec<_>>(), w.clone());
                for (i, x) in w.iter().enumerate() {
                    prop_assert_eq!(v[i], *x);
                }
            }
        }
    }
}
