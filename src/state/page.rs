//! Leaf pages of the state trie: many entries packed in one exact-size allocation, the
//! copy-on-write unit of the trie's leaves (see `trie.rs`).
//!
//! A page's bytes hold `n` entries sorted by `(hash, key)`, as arrays of their fields
//! (little-endian, read unaligned), then the keys and values back to back:
//!
//! ```text
//! n: u32 | hash: [u64; n] | stamp: [u64; n] | prev: [u32; n] | klen: [u16; n] | end: [u16; n] | data
//! ```
//!
//! 24 bytes of header per entry. A lookup reads the hash array (one cache line for 8
//! entries), then one key. `klen` carries two flags: `TOMB` (a tombstone: a key, no value)
//! and `SIDE` (the entry lives in the page's side array, as an [`Entry`] of its own: lists,
//! maps, and keys or values too long to inline; the entry's data is then empty). `end[i]`
//! is where entry `i`'s data (key, then value) ends in `data`; it starts where `i - 1`'s
//! ends. `prev` is packed relative to the stamp (see [`encode_prev`]).

use std::sync::Arc;

use super::trie::{Entry, Key, Prev, Val, Value, View};

/// `klen` flag: the entry is in the side array.
const SIDE: u16 = 0x8000;
/// `klen` flag: the entry is a tombstone.
const TOMB: u16 = 0x4000;
/// `klen` mask of the key length.
const KLEN: u16 = 0x3FFF;
/// Longest key plus value stored inline; longer ones go to the side array. With at most
/// `PAGE_ENTRIES + 1` entries in a page below the bucket depth, the data always fits the
/// 16-bit offsets.
const INLINE_MAX: usize = 3800;
/// Most data bytes of a page (offsets are 16-bit). Only a bucket (keys whose top 60 hash
/// bits collide) can reach it; entries beyond go to the side array.
const PAGE_DATA: usize = u16::MAX as usize;
/// Widest gap between a stamp and its `prev` stamp stored exactly (31 bits).
const MAX_GAP: u64 = (1 << 31) - 1;

/// Packs `prev` relative to `stamp` in 32 bits: 0 is [`Prev::NEW`], otherwise `gap << 1 |
/// live` with `gap = stamp - prev.stamp()`. A gap wider than 31 bits (a key left alone for
/// 2^31 epochs) is stored as the widest: the decoded stamp is then later than the true one,
/// which only makes [`View::live_at`] answer "unknown" for the epochs in between (the
/// increment then writes a conservative delete), never a wrong answer.
pub(crate) fn encode_prev(prev: Prev, stamp: u64) -> u32 {
    if prev == Prev::NEW {
        return 0;
    }
    debug_assert!(prev.stamp() < stamp, "a write's epoch follows the one it replaces");
    let gap = stamp.saturating_sub(prev.stamp()).clamp(1, MAX_GAP);
    // `gap` < 2^31: the shift fits.
    ((gap as u32) << 1) | u32::from(prev.live())
}

/// The inverse of [`encode_prev`].
pub(crate) fn decode_prev(raw: u32, stamp: u64) -> Prev {
    if raw == 0 {
        return Prev::NEW;
    }
    Prev::new(stamp.saturating_sub(u64::from(raw >> 1)), raw & 1 == 1)
}

#[inline]
fn rd64(b: &[u8], at: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(a)
}

#[inline]
fn rd32(b: &[u8], at: usize) -> u32 {
    let mut a = [0u8; 4];
    a.copy_from_slice(&b[at..at + 4]);
    u32::from_le_bytes(a)
}

#[inline]
fn rd16(b: &[u8], at: usize) -> u16 {
    let mut a = [0u8; 2];
    a.copy_from_slice(&b[at..at + 2]);
    u16::from_le_bytes(a)
}

/// A page: its packed bytes and, when some entries are not inline, their side array (in
/// entry order). Cloning shares both; a writer makes what it changes unique.
#[derive(Clone, Debug)]
pub(crate) struct Page {
    bytes: Arc<[u8]>,
    side: Option<Arc<Vec<Arc<Entry>>>>,
}

/// The body of an entry being written into a page.
pub(crate) enum Body<'a> {
    Bytes(&'a [u8]),
    Tomb,
    /// An entry of its own (its key, stamp and prev are the entry's).
    Side(Arc<Entry>),
}

/// One entry to write into a page (see [`build`]).
pub(crate) struct Item<'a> {
    pub hash: u64,
    pub stamp: u64,
    pub prev: Prev,
    /// The key (unused for `Body::Side`).
    pub key: &'a [u8],
    pub body: Body<'a>,
}

impl<'a> Item<'a> {
    /// An item for an owned entry placed by [`place`].
    pub fn of_placed(hash: u64, p: &'a Placed) -> Item<'a> {
        match p {
            Placed::Inline(e) => {
                let body = match &e.value {
                    Value::Bytes(b) => Body::Bytes(b),
                    _ => Body::Tomb,
                };
                Item { hash, stamp: e.stamp, prev: e.prev, key: &e.key, body }
            }
            Placed::Side(e) => {
                Item { hash, stamp: e.stamp, prev: e.prev, key: &[], body: Body::Side(Arc::clone(e)) }
            }
        }
    }

    /// Bytes this item takes in a page's data when inline.
    fn data_len(&self) -> usize {
        match self.body {
            Body::Bytes(v) => self.key.len() + v.len(),
            Body::Tomb => self.key.len(),
            Body::Side(_) => 0,
        }
    }
}

/// An owned entry on its way into a page: inline (a tombstone or short bytes) or as a side
/// entry.
pub(crate) enum Placed {
    Inline(Entry),
    Side(Arc<Entry>),
}

/// Where an owned entry goes: inline when it is a tombstone or bytes short enough.
pub(crate) fn place(e: Entry) -> Placed {
    let inline = match &e.value {
        Value::Tomb => e.key.len() <= INLINE_MAX,
        Value::Bytes(b) => e.key.len() + b.len() <= INLINE_MAX,
        Value::List(_) | Value::Map(_) => false,
    };
    if inline { Placed::Inline(e) } else { Placed::Side(Arc::new(e)) }
}

/// A page holding `items` (sorted by `(hash, key)`, at least one). Inline items beyond
/// [`INLINE_MAX`] or the page's data bound become side entries.
pub(crate) fn build(mut items: Vec<Item<'_>>) -> Page {
    let n = items.len();
    let mut data_len = 0usize;
    let mut sides = 0usize;
    for it in &mut items {
        let len = it.data_len();
        let side = matches!(it.body, Body::Side(_)) || len > INLINE_MAX || data_len + len > PAGE_DATA;
        if side {
            if !matches!(it.body, Body::Side(_)) {
                let value = match it.body {
                    Body::Bytes(v) => Value::Bytes(v.into()),
                    _ => Value::Tomb,
                };
                it.body = Body::Side(Arc::new(Entry {
                    key: Key::new(it.key),
                    value,
                    stamp: it.stamp,
                    prev: it.prev,
                }));
            }
            sides += 1;
        } else {
            data_len += len;
        }
    }
    let head = 4 + 24 * n;
    let mut b = vec![0u8; head + data_len];
    // A page never holds 2^32 entries (it would not fit in memory with its headers).
    b[..4].copy_from_slice(&(n as u32).to_le_bytes());
    let mut side = Vec::with_capacity(sides);
    let mut end = 0usize;
    for (i, it) in items.into_iter().enumerate() {
        let (stamp, prev) = match &it.body {
            Body::Side(e) => (e.stamp, e.prev),
            _ => (it.stamp, it.prev),
        };
        b[4 + 8 * i..][..8].copy_from_slice(&it.hash.to_le_bytes());
        b[4 + 8 * n + 8 * i..][..8].copy_from_slice(&stamp.to_le_bytes());
        b[4 + 16 * n + 4 * i..][..4].copy_from_slice(&encode_prev(prev, stamp).to_le_bytes());
        // Inline keys are at most INLINE_MAX < KLEN bytes, and the data at most PAGE_DATA.
        let klen = match it.body {
            Body::Bytes(v) => {
                b[head + end..][..it.key.len()].copy_from_slice(it.key);
                b[head + end + it.key.len()..][..v.len()].copy_from_slice(v);
                end += it.key.len() + v.len();
                it.key.len() as u16
            }
            Body::Tomb => {
                b[head + end..][..it.key.len()].copy_from_slice(it.key);
                end += it.key.len();
                it.key.len() as u16 | TOMB
            }
            Body::Side(e) => {
                side.push(e);
                SIDE
            }
        };
        b[4 + 20 * n + 2 * i..][..2].copy_from_slice(&klen.to_le_bytes());
        b[4 + 22 * n + 2 * i..][..2].copy_from_slice(&(end as u16).to_le_bytes());
    }
    Page { bytes: Arc::from(b), side: (!side.is_empty()).then(|| Arc::new(side)) }
}

impl Page {
    /// Number of entries.
    #[inline]
    pub fn len(&self) -> usize {
        rd32(&self.bytes, 0) as usize
    }

    #[inline]
    pub fn hash(&self, i: usize) -> u64 {
        rd64(&self.bytes, 4 + 8 * i)
    }

    #[inline]
    pub fn stamp(&self, i: usize) -> u64 {
        rd64(&self.bytes, 4 + 8 * self.len() + 8 * i)
    }

    #[inline]
    fn klen_raw(&self, i: usize) -> u16 {
        rd16(&self.bytes, 4 + 20 * self.len() + 2 * i)
    }

    #[inline]
    fn end(&self, i: usize) -> usize {
        usize::from(rd16(&self.bytes, 4 + 22 * self.len() + 2 * i))
    }

    /// Offset in `bytes` of entry `i`'s data.
    #[inline]
    fn start(&self, i: usize) -> usize {
        4 + 24 * self.len() + if i == 0 { 0 } else { self.end(i - 1) }
    }

    /// Whether entry `i` is a side entry.
    #[inline]
    pub fn is_side(&self, i: usize) -> bool {
        self.klen_raw(i) & SIDE != 0
    }

    fn sides(&self) -> &[Arc<Entry>] {
        self.side.as_deref().map_or(&[], Vec::as_slice)
    }

    /// Position of entry `i` (a side entry) in the side array.
    fn side_index(&self, i: usize) -> usize {
        (0..i).filter(|&j| self.is_side(j)).count()
    }

    fn side_entry(&self, i: usize) -> &Arc<Entry> {
        &self.sides()[self.side_index(i)]
    }

    /// The key of entry `i`.
    #[inline]
    pub fn key(&self, i: usize) -> &[u8] {
        let k = self.klen_raw(i);
        if k & SIDE != 0 {
            return &self.side_entry(i).key;
        }
        let s = self.start(i);
        &self.bytes[s..s + usize::from(k & KLEN)]
    }

    /// Entry `i`.
    #[inline]
    pub fn view(&self, i: usize) -> View<'_> {
        let k = self.klen_raw(i);
        if k & SIDE != 0 {
            let e = self.side_entry(i);
            return View { key: &e.key, value: Val::of(&e.value), stamp: e.stamp, prev: e.prev };
        }
        let s = self.start(i);
        let kl = usize::from(k & KLEN);
        let key = &self.bytes[s..s + kl];
        let value = if k & TOMB != 0 {
            Val::Tomb
        } else {
            Val::Bytes(&self.bytes[s + kl..4 + 24 * self.len() + self.end(i)])
        };
        let stamp = self.stamp(i);
        View { key, value, stamp, prev: decode_prev(rd32(&self.bytes, 4 + 16 * self.len() + 4 * i), stamp) }
    }

    /// Entry `i` as an item for [`build`] (a side entry is shared, not copied).
    pub fn item(&self, i: usize) -> Item<'_> {
        let hash = self.hash(i);
        if self.is_side(i) {
            let e = self.side_entry(i);
            return Item { hash, stamp: e.stamp, prev: e.prev, key: &[], body: Body::Side(Arc::clone(e)) };
        }
        let v = self.view(i);
        let body = match v.value {
            Val::Bytes(b) => Body::Bytes(b),
            _ => Body::Tomb,
        };
        Item { hash, stamp: v.stamp, prev: v.prev, key: v.key, body }
    }

    /// Entry `i` (inline) as an owned entry.
    pub fn owned(&self, i: usize) -> Entry {
        let v = self.view(i);
        let value = match v.value {
            Val::Bytes(b) => Value::Bytes(b.into()),
            _ => Value::Tomb,
        };
        Entry { key: Key::new(v.key), value, stamp: v.stamp, prev: v.prev }
    }

    /// All entries as items.
    pub fn items(&self) -> Vec<Item<'_>> {
        (0..self.len()).map(|i| self.item(i)).collect()
    }

    /// The position of `(hash, key)`, or where it would be inserted.
    #[inline]
    pub fn find(&self, hash: u64, key: &[u8]) -> Result<usize, usize> {
        let n = self.len();
        for i in 0..n {
            let h = self.hash(i);
            if h < hash {
                continue;
            }
            if h > hash {
                return Err(i);
            }
            match self.key(i).cmp(key) {
                std::cmp::Ordering::Less => {}
                std::cmp::Ordering::Equal => return Ok(i),
                std::cmp::Ordering::Greater => return Err(i),
            }
        }
        Err(n)
    }

    /// Overwrites inline entry `i`'s value (of the same length as `value`) and its stamps,
    /// copying the page's bytes first if a snapshot shares them. Returns false (nothing
    /// done) when the entry is not inline bytes of that length.
    pub fn overwrite(&mut self, i: usize, value: &[u8], stamp: u64, prev: Prev) -> bool {
        let k = self.klen_raw(i);
        if k & (SIDE | TOMB) != 0 {
            return false;
        }
        let n = self.len();
        let s = self.start(i) + usize::from(k & KLEN);
        let e = 4 + 24 * n + self.end(i);
        if e - s != value.len() {
            return false;
        }
        let b = Arc::make_mut(&mut self.bytes);
        b[s..e].copy_from_slice(value);
        b[4 + 8 * n + 8 * i..][..8].copy_from_slice(&stamp.to_le_bytes());
        b[4 + 16 * n + 4 * i..][..4].copy_from_slice(&encode_prev(prev, stamp).to_le_bytes());
        true
    }

    /// Applies `f` to side entry `i` in place (copying the page's bytes, its side array and
    /// the entry first if a snapshot shares them), then records its stamps in the header.
    /// Returns `f`'s result.
    pub fn modify_side<R>(&mut self, i: usize, f: impl FnOnce(&mut Entry) -> R) -> R {
        let si = self.side_index(i);
        let side = Arc::make_mut(self.side.get_or_insert_with(Default::default));
        let e = Arc::make_mut(&mut side[si]);
        let r = f(e);
        let (stamp, prev) = (e.stamp, e.prev);
        let n = self.len();
        let b = Arc::make_mut(&mut self.bytes);
        b[4 + 8 * n + 8 * i..][..8].copy_from_slice(&stamp.to_le_bytes());
        b[4 + 16 * n + 4 * i..][..4].copy_from_slice(&encode_prev(prev, stamp).to_le_bytes());
        r
    }

    /// A hint to load the page's first cache lines.
    #[inline]
    pub fn first_line(&self) -> *const u8 {
        self.bytes.as_ptr()
    }
}
