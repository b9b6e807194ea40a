//! The bytes of a list value, shared between the store and its snapshots so that an
//! append with a snapshot alive copies no item already there.
//!
//! A [`ListBuf`] is a view `[start, end)` of a growable allocation shared by reference
//! count. The allocation remembers how far any view has written (`written`). A view whose
//! end is exactly `written` appends in place past it, when capacity allows: every other
//! view ends at or before its old end and never reads the new bytes. Any other change
//! (an append by a view that ends earlier, an append past capacity) copies the view into a
//! new allocation first, doubling, so appends cost O(1) amortized whatever the snapshots.
//! Cutting items off either end narrows the view (and copies only when the view has
//! shrunk to under a quarter of the allocation, so a trimmed list frees its old bytes).
//!
//! Before this, a list's bytes were one `Vec<u8>` in the entry: the first append of an
//! epoch with a snapshot alive copied the whole list (the entry's copy-on-write clone),
//! O(list) per appended key per checkpoint.

use std::cell::UnsafeCell;
use std::mem::MaybeUninit;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

/// The shared allocation. Bytes below `written` were written once and are never written
/// again; bytes at or above it are written only by the view that moved `written` over them
/// (a compare-and-swap from its own end), before it includes them.
struct Raw {
    bytes: Box<[UnsafeCell<MaybeUninit<u8>>]>,
    written: AtomicUsize,
}

// SAFETY: a `Raw` is shared by reference between threads (a snapshot read on one thread
// while the store appends on another). No byte is ever accessed by two parties in a way
// that races: bytes below `written` are only read (`ListBuf::deref`); a byte at or above
// `written` is written by exactly one view, the one whose compare-and-swap moved
// `written` past it, and no view includes it (so nobody reads it) until that view has
// written it. A view handed to another thread travels by a synchronizing transfer (a
// snapshot's `Arc`, a channel), which orders the writes before the reads.
unsafe impl Sync for Raw {}

impl Raw {
    fn with_capacity(cap: usize) -> Arc<Raw> {
        let bytes = (0..cap).map(|_| UnsafeCell::new(MaybeUninit::uninit())).collect();
        Arc::new(Raw { bytes, written: AtomicUsize::new(0) })
    }

    fn cap(&self) -> usize {
        self.bytes.len()
    }

    /// Writes `data` at `at`.
    ///
    /// # Safety
    /// `[at, at + data.len())` is within capacity and reserved by the caller (it moved
    /// `written` from `at` to `at + data.len()`), so no other party touches it.
    unsafe fn write_at(&self, at: usize, data: &[u8]) {
        debug_assert!(at + data.len() <= self.cap());
        let dst = UnsafeCell::raw_get(self.bytes.as_ptr().wrapping_add(at)).cast::<u8>();
        // SAFETY: in bounds and reserved (the caller's contract); `data` is another
        // allocation (the caller holds `&[u8]` of it while this is only reachable through
        // a view that does not include the range yet).
        unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), dst, data.len()) }
    }
}

/// A list's encoded items: a view of a shared allocation (see the module documentation).
/// Dereferences to the bytes. Cloning shares them.
#[derive(Clone)]
pub(crate) struct ListBuf {
    raw: Arc<Raw>,
    start: usize,
    end: usize,
}

/// Smallest allocation (bytes).
const MIN_CAP: usize = 32;

impl Default for ListBuf {
    fn default() -> ListBuf {
        ListBuf::from(&[][..])
    }
}

impl From<&[u8]> for ListBuf {
    fn from(data: &[u8]) -> ListBuf {
        ListBuf::copied(data, &[], data.len())
    }
}

impl ListBuf {
    /// A new allocation of `cap` bytes (at least) holding `a` then `b`.
    fn copied(a: &[u8], b: &[u8], cap: usize) -> ListBuf {
        let len = a.len() + b.len();
        let raw = Raw::with_capacity(cap.max(len));
        raw.written.store(len, Ordering::Relaxed);
        // SAFETY: the allocation is new and holds at least `len` bytes; nobody else has it.
        unsafe {
            raw.write_at(0, a);
            raw.write_at(a.len(), b);
        }
        ListBuf { raw, start: 0, end: len }
    }

    /// Appends `data`: in place when this view ends where the allocation's bytes end and
    /// capacity allows, into a new allocation of twice the size otherwise.
    pub fn extend_from_slice(&mut self, data: &[u8]) {
        if let Some(raw) = Arc::get_mut(&mut self.raw) {
            // No other view: bytes past this one's end (left by a cut) are nobody's.
            *raw.written.get_mut() = self.end;
        }
        let Some(new_end) = self.end.checked_add(data.len()) else { return self.regrow(data) };
        if new_end <= self.raw.cap()
            && self
                .raw
                .written
                .compare_exchange(self.end, new_end, Ordering::AcqRel, Ordering::Relaxed)
                .is_ok()
        {
            // SAFETY: within capacity, and the compare-and-swap reserved `[end, new_end)`
            // for this view alone.
            unsafe { self.raw.write_at(self.end, data) };
            self.end = new_end;
        } else {
            self.regrow(data);
        }
    }

    /// Copies the view and `data` into a new allocation with room to double.
    fn regrow(&mut self, data: &[u8]) {
        let len = self.len().saturating_add(data.len());
        *self = ListBuf::copied(self, data, len.saturating_mul(2).max(MIN_CAP));
    }

    /// Narrows the view to its bytes `range` (relative to the view): cutting items off
    /// either end. Copies only when what is left is under a quarter of the allocation.
    pub fn keep(&mut self, range: std::ops::Range<usize>) {
        let s = range.start.min(self.len());
        let e = range.end.clamp(s, self.len());
        if (e - s).saturating_mul(4) < self.raw.cap() && self.raw.cap() > MIN_CAP {
            let kept = ListBuf::copied(&self[s..e], &[], e - s);
            *self = kept;
        } else {
            self.end = self.start + e;
            self.start += s;
        }
    }

    /// Bytes the allocation holds (shared with the other views of it).
    #[cfg(test)]
    fn capacity(&self) -> usize {
        self.raw.cap()
    }
}

impl std::ops::Deref for ListBuf {
    type Target = [u8];

    #[inline]
    fn deref(&self) -> &[u8] {
        let base = UnsafeCell::raw_get(self.raw.bytes.as_ptr().wrapping_add(self.start)).cast::<u8>();
        // SAFETY: `[start, end)` is in bounds, was written before this view included it,
        // and is never written again (the `Raw` invariant).
        unsafe { std::slice::from_raw_parts(base.cast_const(), self.end - self.start) }
    }
}

impl std::fmt::Debug for ListBuf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ListBuf")
            .field("len", &self.len())
            .field("shared", &Arc::strong_count(&self.raw))
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn appends_share_and_never_disturb_another_view() {
        let mut a = ListBuf::from(&b"abc"[..]);
        a.extend_from_slice(b"def");
        let frozen = a.clone();
        let raw = Arc::as_ptr(&a.raw);
        // The live view ends where the bytes end: it appends in place.
        a.extend_from_slice(b"gh");
        assert_eq!(Arc::as_ptr(&a.raw), raw, "appended in place, nothing copied");
        assert_eq!(&*a, b"abcdefgh");
        assert_eq!(&*frozen, b"abcdef");
        // The frozen view no longer ends at the bytes' end: it copies before appending.
        let mut other = frozen.clone();
        other.extend_from_slice(b"XY");
        assert_ne!(Arc::as_ptr(&other.raw), raw);
        assert_eq!(&*other, b"abcdefXY");
        assert_eq!(&*a, b"abcdefgh");
        assert_eq!(&*frozen, b"abcdef");
    }

    #[test]
    fn growth_doubles_and_cuts_narrow() {
        let mut a = ListBuf::default();
        let mut model = Vec::new();
        for i in 0..1000u32 {
            a.extend_from_slice(&i.to_le_bytes());
            model.extend_from_slice(&i.to_le_bytes());
        }
        assert_eq!(&*a, &model[..]);
        assert!(a.capacity() <= 2 * model.len() + MIN_CAP, "{}", a.capacity());
        let snap = a.clone();
        a.keep(4..a.len() - 4);
        assert_eq!(&*a, &model[4..model.len() - 4]);
        assert_eq!(&*snap, &model[..]);
        // A cut to a small rest copies it out, freeing the rest once the others drop.
        a.keep(0..8);
        assert_eq!(&*a, &model[4..12]);
        assert!(a.capacity() < 64, "{}", a.capacity());
        // After a cut at the end, an append copies (the old bytes past it are shared).
        let mut b = snap.clone();
        b.keep(0..8);
        b.extend_from_slice(b"zz");
        assert_eq!(&b[..8], &model[..8]);
        assert_eq!(&b[8..], b"zz");
        assert_eq!(&*snap, &model[..]);
    }

    #[test]
    fn views_on_threads() {
        let mut live = ListBuf::default();
        for round in 0..50u8 {
            let frozen = live.clone();
            let want = frozen.to_vec();
            let reader = std::thread::spawn(move || {
                for _ in 0..20 {
                    assert_eq!(&*frozen, &want[..]);
                }
            });
            for _ in 0..20 {
                live.extend_from_slice(&[round; 7]);
            }
            reader.join().unwrap();
        }
        assert_eq!(live.len(), 50 * 20 * 7);
    }
}
