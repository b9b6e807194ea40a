//! Leaf pages of the state trie: many entries packed in one allocation, the copy-on-write
//! unit of the trie's leaves (see `trie.rs`). A page is built at its exact size; a removal
//! done in place ([`Page::splice_mut`]) leaves slack after its bytes (at most an
//! eighth of the allocation), which nothing reads and a later insertion may fill.
//!
//! A page's bytes hold `n` entries sorted by `(hash, key)`, as arrays of their fields
//! (little-endian, read unaligned), then the keys and values back to back:
//!
//! ```text
//! n: u32 | keys: u32 | hash: [u64; n] | klen: [u16; n] | end: [u16; n] | stamp: [u64; n]
//!   | prev: [u32; n] | the keys back to back (`keys` bytes) | the values back to back
//! ```
//!
//! 24 bytes of header per entry. The fields a lookup reads (hashes, key lengths, then the
//! keys) come first and together: for 8 entries of 16-byte keys they are the page's first
//! six cache lines, which a lookup asks for at once instead of one after the other. `klen` carries two flags: `TOMB` (a tombstone: a key, no value)
//! and `SIDE` (the entry lives in the page's side array, as an [`Entry`] of its own: lists,
//! maps, and keys or values too long to inline; its key and value are then empty). Key
//! `i` starts after the keys before it; `end[i]` is where value `i` ends in the values, and
//! it starts where value `i - 1` ends. `prev` is packed relative to the stamp (see [`encode_prev`]).

use std::sync::Arc;

use super::trie::{Entry, Key, Prev, Val, Value, View};

/// `klen` flag: the entry is in the side array.
const SIDE: u16 = 0x8000;
/// `klen` flag: the entry is a tombstone.
const TOMB: u16 = 0x4000;
/// `klen` mask of the key length.
const KLEN: u16 = 0x3FFF;
/// Longest key plus value stored inline; longer ones go to the side array. With at most
/// `PAGE_ENTRIES + 1` entries in a page (the one over, just before it splits), the data
/// always fits the 16-bit offsets.
pub(crate) const INLINE_MAX: usize = 3800;
/// Most data bytes of a page (offsets are 16-bit). No page reaches it (see [`INLINE_MAX`]);
/// [`build`] would move entries beyond it to the side array all the same.
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

/// Offsets in a page of `n` entries of entry `i`'s fields, and of the data.
#[inline]
fn at_hash(i: usize) -> usize {
    8 + 8 * i
}
#[inline]
fn at_klen(n: usize, i: usize) -> usize {
    8 + 8 * n + 2 * i
}
#[inline]
fn at_end(n: usize, i: usize) -> usize {
    8 + 10 * n + 2 * i
}
#[inline]
fn at_stamp(n: usize, i: usize) -> usize {
    8 + 12 * n + 8 * i
}
#[inline]
fn at_prev(n: usize, i: usize) -> usize {
    8 + 20 * n + 4 * i
}
#[inline]
fn head(n: usize) -> usize {
    8 + 24 * n
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

/// Whether two keys are equal; keys of 8 to 16 bytes (the common ones) are compared as two
/// words each, inline, instead of by a call to `bcmp`.
#[inline]
fn keys_eq(a: &[u8], b: &[u8]) -> bool {
    let n = a.len();
    if n != b.len() {
        return false;
    }
    if (8..=16).contains(&n) {
        return (rd64(a, 0) == rd64(b, 0)) & (rd64(a, n - 8) == rd64(b, n - 8));
    }
    a == b
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
    let head = head(n);
    let keys: usize = items
        .iter()
        .map(|it| match it.body {
            Body::Side(_) => 0,
            _ => it.key.len(),
        })
        .sum();
    let mut bytes = zeroed(head + data_len);
    let b = unique(&mut bytes);
    // A page never holds 2^32 entries, nor 4 GiB of keys (data is at most PAGE_DATA).
    b[..4].copy_from_slice(&(n as u32).to_le_bytes());
    b[4..8].copy_from_slice(&(keys as u32).to_le_bytes());
    let mut side = Vec::with_capacity(sides);
    let (mut kpos, mut end) = (head, 0usize);
    let values = head + keys;
    for (i, it) in items.into_iter().enumerate() {
        let (stamp, prev) = match &it.body {
            Body::Side(e) => (e.stamp, e.prev),
            _ => (it.stamp, it.prev),
        };
        b[at_hash(i)..][..8].copy_from_slice(&it.hash.to_le_bytes());
        b[at_stamp(n, i)..][..8].copy_from_slice(&stamp.to_le_bytes());
        b[at_prev(n, i)..][..4].copy_from_slice(&encode_prev(prev, stamp).to_le_bytes());
        // Inline keys are at most INLINE_MAX < KLEN bytes, and the data at most PAGE_DATA.
        let klen = match it.body {
            Body::Bytes(v) => {
                b[kpos..][..it.key.len()].copy_from_slice(it.key);
                kpos += it.key.len();
                b[values + end..][..v.len()].copy_from_slice(v);
                end += v.len();
                it.key.len() as u16
            }
            Body::Tomb => {
                b[kpos..][..it.key.len()].copy_from_slice(it.key);
                kpos += it.key.len();
                it.key.len() as u16 | TOMB
            }
            Body::Side(e) => {
                side.push(e);
                SIDE
            }
        };
        b[at_klen(n, i)..][..2].copy_from_slice(&klen.to_le_bytes());
        b[at_end(n, i)..][..2].copy_from_slice(&(end as u16).to_le_bytes());
    }
    Page { bytes, side: (!side.is_empty()).then(|| Arc::new(side)) }
}

/// `len` zero bytes in an allocation of their own, written where they will live: a page
/// built in a `Vec` and turned into an `Arc<[u8]>` is copied once more (the `Arc`'s counts
/// go before the bytes), which was a fifth of an insertion's time.
fn zeroed(len: usize) -> Arc<[u8]> {
    // An exact-size iterator: one allocation, filled in place.
    std::iter::repeat_n(0u8, len).collect()
}

/// The bytes of an `Arc` just made by [`zeroed`], which nothing else holds yet.
fn unique(bytes: &mut Arc<[u8]>) -> &mut [u8] {
    match Arc::get_mut(bytes) {
        Some(b) => b,
        None => unreachable!("a new allocation has one holder"),
    }
}

/// The bytes of the keys before entry `i` in a page's keys.
#[inline]
fn keys_before(b: &[u8], n: usize, i: usize) -> usize {
    let (lens, _) = b[at_klen(n, 0)..at_klen(n, i)].as_chunks::<2>();
    lens.iter().map(|l| usize::from(u16::from_le_bytes(*l) & KLEN)).sum()
}

/// The end of value `i - 1` in a page's values (0 before the first).
#[inline]
fn end_before(b: &[u8], n: usize, i: usize) -> usize {
    if i == 0 { 0 } else { usize::from(rd16(b, at_end(n, i - 1))) }
}

/// Whether a page of `len` bytes stays in an allocation of `cap` (at least seven eighths
/// full). Measured at 10^6 keys (16-byte keys, 100-byte values) by `cargo bench --bench
/// store` after 10^6 steps of churn (remove a key, insert a new one), against copying
/// every page to its size (147.3 B per entry, 2726 ns per step): half full 173.5 B, 1998
/// ns; three quarters 158.5 B, ~2500 ns; seven eighths 151.4 B, 2404 ns. Density is what
/// the store is for, so an eighth.
fn keeps_slack(len: usize, cap: usize) -> bool {
    8 * len >= 7 * cap
}

/// A short inline entry as [`Splice`] writes it: `prev` packed, `klen` with its flags.
#[derive(Clone, Copy)]
struct Inline<'i> {
    hash: u64,
    stamp: u64,
    prev: u32,
    klen: u16,
    key: &'i [u8],
    value: &'i [u8],
}

/// Where the bytes of a page go when its entries `a..b` are replaced by one short inline
/// item or by nothing: the plan [`Page::splice_mut`] carries out, in place or by a copy.
struct Splice<'i> {
    /// Entries before and after.
    n: usize,
    m: usize,
    a: usize,
    b: usize,
    /// The item, if any.
    item: Option<Inline<'i>>,
    /// Bytes of the keys before `a` and before `b`, and of all keys, before and after.
    ka: usize,
    kb: usize,
    keys_old: usize,
    keys: usize,
    /// Value ends before `a`, before `b` and of all values, before.
    va: usize,
    vb: usize,
    vend: usize,
}

impl<'i> Splice<'i> {
    /// The plan for `page` (none when it has side entries, when the item is not short
    /// inline bytes or a tombstone, or when the result would be empty or outgrow a page).
    fn plan(page: &Page, a: usize, b: usize, item: Option<&Item<'i>>) -> Option<Splice<'i>> {
        let old = &page.bytes[..];
        let n = page.len();
        if page.side.is_some() || a > b || b > n {
            return None;
        }
        let item = match item {
            None => None,
            Some(Item { body: Body::Side(_), .. }) => return None,
            Some(it) => {
                let (value, tomb) = match it.body {
                    Body::Bytes(v) => (v, 0),
                    _ => (&[][..], TOMB),
                };
                if it.key.len() + value.len() > INLINE_MAX {
                    return None;
                }
                // An inline key is at most INLINE_MAX < KLEN bytes.
                let klen = it.key.len() as u16 | tomb;
                let prev = encode_prev(it.prev, it.stamp);
                Some(Inline { hash: it.hash, stamp: it.stamp, prev, klen, key: it.key, value })
            }
        };
        let m = a + usize::from(item.is_some()) + (n - b);
        if m == 0 {
            return None;
        }
        let key = item.map_or(&[][..], |it| it.key);
        let (ka, kb, keys_old) = (keys_before(old, n, a), keys_before(old, n, b), rd32(old, 4) as usize);
        let (va, vb, vend) = (end_before(old, n, a), end_before(old, n, b), end_before(old, n, n));
        let keys = ka + key.len() + (keys_old - kb);
        let plan = Splice { n, m, a, b, item, ka, kb, keys_old, keys, va, vb, vend };
        (plan.len() - head(m) <= PAGE_DATA).then_some(plan)
    }

    fn add(&self) -> usize {
        usize::from(self.item.is_some())
    }

    fn key(&self) -> &'i [u8] {
        self.item.map_or(&[][..], |it| it.key)
    }

    fn value(&self) -> &'i [u8] {
        self.item.map_or(&[][..], |it| it.value)
    }

    /// Bytes of the new page.
    fn len(&self) -> usize {
        head(self.m) + self.keys + self.va + self.value().len() + (self.vend - self.vb)
    }

    /// The kept bytes, as `(from, to, len)` in ascending `from` order: of each fixed-width
    /// array the prefix `..a` and the suffix `b..`, then the keys' and the values'.
    fn moves(&self) -> [(usize, usize, usize); 14] {
        let Splice { n, m, a, b, ka, kb, keys_old, keys, va, vb, vend, .. } = *self;
        let to = a + self.add();
        let (ho, hm) = (head(n), head(m));
        let (vo, vm) = (ho + keys_old, hm + keys);
        let shifted = va + self.value().len();
        let field = |at: fn(usize, usize) -> usize, w: usize| {
            [(at(n, 0), at(m, 0), w * a), (at(n, b), at(m, to), w * (n - b))]
        };
        let [h0, h1] = field(|_, i| at_hash(i), 8);
        let [k0, k1] = field(at_klen, 2);
        let [e0, e1] = field(at_end, 2);
        let [s0, s1] = field(at_stamp, 8);
        let [p0, p1] = field(at_prev, 4);
        let key0 = (ho, hm, ka);
        let key1 = (ho + kb, hm + ka + self.key().len(), keys_old - kb);
        let val0 = (vo, vm, va);
        let val1 = (vo + vb, vm + shifted, vend - vb);
        [h0, h1, k0, k1, e0, e1, s0, s1, p0, p1, key0, key1, val0, val1]
    }

    /// Writes what is new into `out`, whose kept bytes are already moved: the header, the
    /// item's fields, key and value, and the value ends after it (shifted).
    fn finish(&self, out: &mut [u8]) {
        let Splice { m, a, ka, keys, va, vb, .. } = *self;
        out[..4].copy_from_slice(&(m as u32).to_le_bytes());
        out[4..8].copy_from_slice(&(keys as u32).to_le_bytes());
        let shifted = va + self.value().len();
        if let Some(Inline { hash, stamp, prev, klen, key, value }) = self.item {
            out[at_hash(a)..][..8].copy_from_slice(&hash.to_le_bytes());
            out[at_klen(m, a)..][..2].copy_from_slice(&klen.to_le_bytes());
            out[at_stamp(m, a)..][..8].copy_from_slice(&stamp.to_le_bytes());
            out[at_prev(m, a)..][..4].copy_from_slice(&prev.to_le_bytes());
            // Value ends are below 2^16: the data is at most PAGE_DATA.
            out[at_end(m, a)..][..2].copy_from_slice(&(shifted as u16).to_le_bytes());
            let hm = head(m);
            out[hm + ka..][..key.len()].copy_from_slice(key);
            out[hm + keys + va..][..value.len()].copy_from_slice(value);
        }
        for j in a + self.add()..m {
            let e = usize::from(rd16(out, at_end(m, j))) - vb + shifted;
            out[at_end(m, j)..][..2].copy_from_slice(&(e as u16).to_le_bytes());
        }
    }
}

impl Page {
    /// Replaces this page's entries `a..b` by `item` (or by nothing), `a <= b <= len`: an
    /// insertion (`a == b`), a replacement (`b == a + 1`) or a removal (no item), from one
    /// plan. In the page's own allocation when it can be (see [`Page::in_place`]), else
    /// copied range by range into a new page, where [`build`] goes through a list of items:
    /// the same bytes, in a fraction of the time. `Some(true)` when done in place,
    /// `Some(false)` when copied, `None` (nothing done) when the page has side entries,
    /// when the item is not short inline bytes or a tombstone, or when the result would be
    /// empty or outgrow the page's data: [`build`] then.
    pub fn splice_mut(&mut self, a: usize, b: usize, item: Option<&Item<'_>>) -> Option<bool> {
        let plan = Splice::plan(self, a, b, item)?;
        if self.in_place(&plan) {
            return Some(true);
        }
        *self = self.copied(&plan);
        Some(false)
    }

    /// The copy [`Page::splice_mut`] makes, as a new page (this one unchanged).
    #[cfg(test)]
    pub fn splice(&self, a: usize, b: usize, item: Option<&Item<'_>>) -> Option<Page> {
        Splice::plan(self, a, b, item).map(|plan| self.copied(&plan))
    }

    /// What [`Page::splice_mut`] does in place, alone: false (nothing done) when it cannot
    /// be done there.
    #[cfg(test)]
    pub fn splice_in_place(&mut self, a: usize, b: usize, item: Option<&Item<'_>>) -> bool {
        Splice::plan(self, a, b, item).is_some_and(|plan| self.in_place(&plan))
    }

    /// A new page holding the result of `plan`, copied range by range from this one.
    fn copied(&self, plan: &Splice<'_>) -> Page {
        let old = &self.bytes[..];
        let mut bytes = zeroed(plan.len());
        let out = unique(&mut bytes);
        for (from, to, len) in plan.moves() {
            out[to..to + len].copy_from_slice(&old[from..from + len]);
        }
        plan.finish(out);
        Page { bytes, side: None }
    }

    /// Carries out `plan` in this page's own allocation, when no snapshot shares it and the
    /// result fits: no allocation, and each kept byte moves within lines already being
    /// written. The allocation keeps its size, so bytes past the entries are slack (a later
    /// insertion may use them) as long as the result fills [`keeps_slack`] of it; a page
    /// that lost more is copied into one of its size instead. Returns false (nothing done)
    /// when it cannot be done here.
    fn in_place(&mut self, plan: &Splice<'_>) -> bool {
        let cap = self.bytes.len();
        let len = plan.len();
        if len > cap || !keeps_slack(len, cap) {
            return false;
        }
        let moves = plan.moves();
        // All kept bytes move the same way (toward the start for a removal, the end for an
        // insertion; a replacement moves only the values after it), so moving them in
        // order from the side they move away from never overwrites one not yet moved.
        let left = moves.iter().all(|&(from, to, len)| len == 0 || to <= from);
        let right = moves.iter().all(|&(from, to, len)| len == 0 || to >= from);
        let Some(out) = Arc::get_mut(&mut self.bytes) else { return false };
        if left {
            for (from, to, len) in moves {
                out.copy_within(from..from + len, to);
            }
        } else if right {
            for (from, to, len) in moves.into_iter().rev() {
                out.copy_within(from..from + len, to);
            }
        } else {
            return false;
        }
        plan.finish(out);
        true
    }

    /// The greatest stamp of the entries.
    pub fn max_stamp(&self) -> u64 {
        let n = self.len();
        let (stamps, _) = self.bytes[at_stamp(n, 0)..at_stamp(n, n)].as_chunks::<8>();
        stamps.iter().map(|s| u64::from_le_bytes(*s)).max().unwrap_or(0)
    }

    /// Number of entries.
    #[inline]
    pub fn len(&self) -> usize {
        rd32(&self.bytes, 0) as usize
    }

    #[inline]
    pub fn hash(&self, i: usize) -> u64 {
        rd64(&self.bytes, at_hash(i))
    }

    #[inline]
    pub fn stamp(&self, i: usize) -> u64 {
        rd64(&self.bytes, at_stamp(self.len(), i))
    }

    #[inline]
    fn klen_raw(&self, i: usize) -> u16 {
        rd16(&self.bytes, at_klen(self.len(), i))
    }

    /// Offset in `bytes` of key `i`, and its length (0 for a side entry).
    #[inline]
    fn key_at(b: &[u8], n: usize, i: usize) -> (usize, usize) {
        (head(n) + keys_before(b, n, i), usize::from(rd16(b, at_klen(n, i)) & KLEN))
    }

    /// The range in `bytes` of value `i` (empty for a side entry or a tombstone).
    #[inline]
    fn value_at(b: &[u8], n: usize, i: usize) -> std::ops::Range<usize> {
        let base = head(n) + rd32(b, 4) as usize;
        let start = if i == 0 { 0 } else { usize::from(rd16(b, at_end(n, i - 1))) };
        base + start..base + usize::from(rd16(b, at_end(n, i)))
    }

    /// Whether entry `i` is a side entry.
    #[inline]
    pub fn is_side(&self, i: usize) -> bool {
        self.klen_raw(i) & SIDE != 0
    }

    fn sides(&self) -> &[Arc<Entry>] {
        self.side.as_deref().map_or(&[], Vec::as_slice)
    }

    /// Position of entry `i` (a side entry) in the side array: the side entries before it,
    /// counted over the `klen` array (a loop the compiler vectorizes). Only a bucket page
    /// holds many entries; walks over a page use [`Walk`], which carries the count.
    fn side_index(&self, i: usize) -> usize {
        let (lens, _) = self.bytes[at_klen(self.len(), 0)..at_klen(self.len(), i)].as_chunks::<2>();
        lens.iter().map(|l| usize::from(u16::from_le_bytes(*l) >> 15)).sum()
    }

    fn side_entry(&self, i: usize) -> &Arc<Entry> {
        &self.sides()[self.side_index(i)]
    }

    /// Entry `i`.
    #[inline]
    pub fn view(&self, i: usize) -> View<'_> {
        let k = self.klen_raw(i);
        if k & SIDE != 0 {
            let e = self.side_entry(i);
            return View { key: &e.key, value: Val::of(&e.value), stamp: e.stamp, prev: e.prev };
        }
        let b = &self.bytes[..];
        let n = self.len();
        let (s, len) = Self::key_at(b, n, i);
        let value = if k & TOMB != 0 { Val::Tomb } else { Val::Bytes(&b[Self::value_at(b, n, i)]) };
        let stamp = self.stamp(i);
        View { key: &b[s..s + len], value, stamp, prev: decode_prev(rd32(b, at_prev(n, i)), stamp) }
    }

    /// The value of entry `i` if it is inline bytes (`None` for a side entry or a
    /// tombstone): reads only the fields a lookup already loaded.
    #[inline]
    pub fn inline_bytes(&self, i: usize) -> Option<&[u8]> {
        let b = &self.bytes[..];
        let n = rd32(b, 0) as usize;
        if rd16(b, at_klen(n, i)) & (SIDE | TOMB) != 0 {
            return None;
        }
        b.get(Self::value_at(b, n, i))
    }

    /// Entry `i` (inline) as an owned entry.
    pub fn owned(&self, i: usize) -> Entry {
        owned_of(self.view(i))
    }

    /// All entries as items.
    pub fn items(&self) -> Vec<Item<'_>> {
        let mut w = self.walk();
        let mut items = Vec::with_capacity(w.n);
        while let Some(step) = w.step() {
            let hash = self.hash(step.i);
            items.push(match step.side {
                Some((_, e)) => {
                    Item { hash, stamp: e.stamp, prev: e.prev, key: &[], body: Body::Side(Arc::clone(e)) }
                }
                None => {
                    let v = step.view;
                    let body = match v.value {
                        Val::Bytes(b) => Body::Bytes(b),
                        _ => Body::Tomb,
                    };
                    Item { hash, stamp: v.stamp, prev: v.prev, key: v.key, body }
                }
            });
        }
        items
    }

    /// The entries in order, each step O(1) (see [`Walk`]).
    pub fn walk(&self) -> Walk<'_> {
        Walk { page: self, n: self.len(), i: 0, kpos: head(self.len()), vstart: 0, si: 0 }
    }

    /// The position of `(hash, key)`, or where it would be inserted.
    #[inline]
    pub fn find(&self, hash: u64, key: &[u8]) -> Result<usize, usize> {
        let b = &self.bytes[..];
        let n = rd32(b, 0) as usize;
        // The hashes and key lengths as two slices walked together: no bounds check per
        // entry.
        let (hashes, _) = b[at_hash(0)..at_hash(n)].as_chunks::<8>();
        let (klens, _) = b[at_klen(n, 0)..at_klen(n, n)].as_chunks::<2>();
        let mut kpos = head(n);
        for (i, (h, k)) in hashes.iter().zip(klens).enumerate() {
            let h = u64::from_le_bytes(*h);
            let k = u16::from_le_bytes(*k);
            let klen = usize::from(k & KLEN);
            if h < hash {
                kpos += klen;
                continue;
            }
            if h > hash {
                return Err(i);
            }
            // Equal hashes almost always mean equal keys: test that first, without a call.
            if k & SIDE == 0 && keys_eq(&b[kpos..kpos + klen], key) {
                return Ok(i);
            }
            return self.find_among_equal(i, kpos, hash, key);
        }
        Err(n)
    }

    /// [`Page::find`] from entry `i` (at key offset `kpos`), the first of hash `hash`, on:
    /// keys of one hash are ordered by key. The key offset and the side entries passed are
    /// carried, so a bucket page (many entries of one hash) costs one pass, not one pass
    /// per entry.
    #[cold]
    #[inline(never)]
    fn find_among_equal(&self, i: usize, mut kpos: usize, hash: u64, key: &[u8]) -> Result<usize, usize> {
        let b = &self.bytes[..];
        let n = rd32(b, 0) as usize;
        let mut si = self.side_index(i);
        for j in i..n {
            if rd64(b, at_hash(j)) != hash {
                return Err(j);
            }
            let k = rd16(b, at_klen(n, j));
            let klen = usize::from(k & KLEN);
            let here = if k & SIDE != 0 {
                si += 1;
                &self.sides()[si - 1].key[..]
            } else {
                kpos += klen;
                &b[kpos - klen..kpos]
            };
            match here.cmp(key) {
                std::cmp::Ordering::Equal => return Ok(j),
                std::cmp::Ordering::Greater => return Err(j),
                std::cmp::Ordering::Less => {}
            }
        }
        Err(n)
    }

    /// Asks for the cache lines a lookup reads (headers and keys, up to 8 lines).
    #[inline]
    pub fn prefetch_lookup(&self, prefetch: impl Fn(*const u8)) {
        let at = self.bytes.as_ptr();
        // The length comes with the pointer (no load of the page), so every line a lookup
        // may read is asked for at once: the header arrays, then the keys. Up to 8 lines:
        // the header and keys of a page of ~8 entries of 16-byte keys (a fuller page's
        // later keys, and the values, are left to the lookup).
        let lines = self.bytes.len().div_ceil(64).min(8);
        for l in 0..lines {
            prefetch(at.wrapping_add(64 * l));
        }
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
        let range = Self::value_at(&self.bytes, n, i);
        if range.len() != value.len() {
            return false;
        }
        let b = Arc::make_mut(&mut self.bytes);
        b[range].copy_from_slice(value);
        b[at_stamp(n, i)..][..8].copy_from_slice(&stamp.to_le_bytes());
        b[at_prev(n, i)..][..4].copy_from_slice(&encode_prev(prev, stamp).to_le_bytes());
        true
    }

    /// Applies `f` to side entry `i` in place (copying the page's bytes, its side array and
    /// the entry first if a snapshot shares them), then records its stamps in the header.
    /// Returns `f`'s result.
    pub fn modify_side<R>(&mut self, i: usize, f: impl FnOnce(&mut Entry) -> R) -> R {
        self.modify_side_at(i, self.side_index(i), f)
    }

    /// [`Page::modify_side`] of entry `i`, the `si`th side entry (as a [`Walk`] told).
    pub fn modify_side_at<R>(&mut self, i: usize, si: usize, f: impl FnOnce(&mut Entry) -> R) -> R {
        let side = Arc::make_mut(self.side.get_or_insert_with(Default::default));
        let e = Arc::make_mut(&mut side[si]);
        let r = f(e);
        let (stamp, prev) = (e.stamp, e.prev);
        let n = self.len();
        let b = Arc::make_mut(&mut self.bytes);
        b[at_stamp(n, i)..][..8].copy_from_slice(&stamp.to_le_bytes());
        b[at_prev(n, i)..][..4].copy_from_slice(&encode_prev(prev, stamp).to_le_bytes());
        r
    }

    /// A hint to load the page's first cache lines.
    #[inline]
    pub fn first_line(&self) -> *const u8 {
        self.bytes.as_ptr()
    }

    /// Length of the page's bytes.
    #[inline]
    pub fn byte_len(&self) -> usize {
        self.bytes.len()
    }
}

/// One entry of a [`Walk`]: its position, its view and, for a side entry, its position in
/// the side array and the entry.
pub(crate) struct Step<'a> {
    pub i: usize,
    pub view: View<'a>,
    pub side: Option<(usize, &'a Arc<Entry>)>,
}

/// An inline entry's view as an owned entry.
pub(crate) fn owned_of(v: View<'_>) -> Entry {
    let value = match v.value {
        Val::Bytes(b) => Value::Bytes(b.into()),
        _ => Value::Tomb,
    };
    Entry { key: Key::new(v.key), value, stamp: v.stamp, prev: v.prev }
}

/// A page's entries in order. Each step carries the key offset, the value start and the
/// side entries passed, where [`Page::view`] recounts them from the first entry: a walk
/// over a bucket page of `n` entries is O(n), not O(n^2).
pub(crate) struct Walk<'a> {
    page: &'a Page,
    n: usize,
    i: usize,
    kpos: usize,
    vstart: usize,
    si: usize,
}

impl<'a> Walk<'a> {
    /// The next entry.
    pub fn step(&mut self) -> Option<Step<'a>> {
        let (i, n) = (self.i, self.n);
        if i >= n {
            return None;
        }
        self.i += 1;
        let page: &'a Page = self.page;
        let b: &'a [u8] = &page.bytes;
        let k = rd16(b, at_klen(n, i));
        // Side entries and tombstones add no value bytes: `end` is then the previous one.
        let end = usize::from(rd16(b, at_end(n, i)));
        let start = std::mem::replace(&mut self.vstart, end);
        if k & SIDE != 0 {
            let si = self.si;
            let e = &page.sides()[si];
            self.si += 1;
            let view = View { key: &e.key, value: Val::of(&e.value), stamp: e.stamp, prev: e.prev };
            return Some(Step { i, view, side: Some((si, e)) });
        }
        let klen = usize::from(k & KLEN);
        let key = &b[self.kpos..self.kpos + klen];
        self.kpos += klen;
        let base = head(n) + rd32(b, 4) as usize;
        let value = if k & TOMB != 0 { Val::Tomb } else { Val::Bytes(&b[base + start..base + end]) };
        let stamp = rd64(b, at_stamp(n, i));
        let view = View { key, value, stamp, prev: decode_prev(rd32(b, at_prev(n, i)), stamp) };
        Some(Step { i, view, side: None })
    }
}

impl<'a> Iterator for Walk<'a> {
    type Item = (usize, View<'a>);

    #[inline]
    fn next(&mut self) -> Option<Self::Item> {
        self.step().map(|s| (s.i, s.view))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn next(x: &mut u64) -> u64 {
        *x ^= *x << 13;
        *x ^= *x >> 7;
        *x ^= *x << 17;
        *x
    }

    /// An owned inline entry: a key, a value or a tombstone, stamps.
    struct Owned {
        hash: u64,
        key: Vec<u8>,
        value: Option<Vec<u8>>,
        stamp: u64,
        prev: Prev,
    }

    fn random_entry(x: &mut u64) -> Owned {
        let hash = next(x) % 64;
        let key: Vec<u8> = (0..next(x) % 40).map(|_| next(x) as u8).collect();
        let value = (!next(x).is_multiple_of(5)).then(|| (0..next(x) % 300).map(|_| next(x) as u8).collect());
        let stamp = 1 + next(x) % 1000;
        let prev = match next(x) % 3 {
            _ if stamp < 2 => Prev::NEW,
            0 => Prev::NEW,
            _ => Prev::new(1 + next(x) % (stamp - 1), next(x).is_multiple_of(2)),
        };
        Owned { hash, key, value, stamp, prev }
    }

    fn item(o: &Owned) -> Item<'_> {
        let body = match &o.value {
            Some(v) => Body::Bytes(v),
            None => Body::Tomb,
        };
        Item { hash: o.hash, stamp: o.stamp, prev: o.prev, key: &o.key, body }
    }

    /// A random splice: sorted entries, a range `a..b` of them (empty, one, or clipped at
    /// the end) and whether `new` replaces it (always when the range is empty).
    struct Case {
        entries: Vec<Owned>,
        a: usize,
        b: usize,
        new: Owned,
        with: bool,
    }

    impl Case {
        fn random(x: &mut u64) -> Case {
            let n = 1 + (next(x) % 17) as usize;
            let mut entries: Vec<Owned> = (0..n).map(|_| random_entry(x)).collect();
            entries.sort_by(|p, q| (p.hash, &p.key).cmp(&(q.hash, &q.key)));
            let a = (next(x) % (n as u64 + 1)) as usize;
            let b = match next(x) % 3 {
                0 => a,
                _ => (a + 1).min(n),
            };
            let new = random_entry(x);
            let with = !next(x).is_multiple_of(4) || a == b;
            Case { entries, a, b, new, with }
        }

        fn page(&self) -> Page {
            build(self.entries.iter().map(item).collect())
        }

        fn item(&self) -> Option<Item<'_>> {
            self.with.then(|| item(&self.new))
        }

        /// The entries the splice must leave.
        fn want(&self) -> Vec<Item<'_>> {
            let mut want: Vec<Item<'_>> = self.entries.iter().map(item).collect();
            want.splice(self.a..self.b, self.item());
            want
        }
    }

    /// Every insertion, replacement and removal by `splice` gives the very bytes `build`
    /// gives for the same entries: prefix, item and suffix of each field and of the data.
    #[test]
    fn splice_writes_the_bytes_build_writes() {
        let mut x = 0x9E37_79B9_7F4A_7C15u64;
        for round in 0..3000 {
            let case = Case::random(&mut x);
            let Case { a, b, with, .. } = case;
            let n = case.entries.len();
            let want = case.want();
            let got = case.page().splice(a, b, case.item().as_ref());
            if want.is_empty() {
                assert!(got.is_none(), "round {round}: an empty page is not spliced");
                continue;
            }
            let got = got.unwrap_or_else(|| panic!("round {round}: splice refused a plain page"));
            let want = build(want);
            assert_eq!(got.bytes, want.bytes, "round {round}: n {n}, a {a}, b {b}, item {with}");
            assert_eq!(got.max_stamp(), (0..got.len()).map(|i| got.stamp(i)).max().unwrap_or(0));
        }
    }

    /// `page`'s bytes in an allocation `extra` bytes longer, the slack filled with garbage.
    fn padded(page: &Page, extra: usize) -> Page {
        let mut b = page.bytes.to_vec();
        b.resize(b.len() + extra, 0xA5);
        Page { bytes: Arc::from(b), side: page.side.clone() }
    }

    /// `splice_in_place` leaves the very bytes `build` writes for the same entries at the
    /// front of the page's allocation, whatever the slack behind them holds, moving kept
    /// bytes toward the start (removals, shorter values) or the end (insertions, longer
    /// values); when it declines (the result does not fit, or would leave more slack than
    /// `keeps_slack` allows, or a snapshot shares the page) it changes nothing.
    #[test]
    fn splice_in_place_writes_the_bytes_build_writes() {
        let mut x = 0x2545_F491_4F6C_DD1Du64;
        let (mut done, mut declined) = (0, 0);
        for round in 0..6000 {
            let case = Case::random(&mut x);
            let Case { a, b, with, .. } = case;
            let (entries, new, n) = (&case.entries, &case.new, case.entries.len());
            let exact = case.page();
            // Mostly a little slack, sometimes much more than an in-place splice keeps.
            let most = if next(&mut x).is_multiple_of(4) { 700 } else { exact.bytes.len() / 6 + 1 };
            let mut page = padded(&exact, (next(&mut x) % most as u64) as usize);
            let want = case.want();
            let shared = next(&mut x).is_multiple_of(8).then(|| page.clone());
            let before = page.bytes.to_vec();
            let ok = page.splice_in_place(a, b, case.item().as_ref());
            if let Some(other) = &shared {
                assert!(!ok, "round {round}: a shared page is never written in place");
                assert_eq!(other.bytes[..], before[..], "round {round}: the sharer's bytes changed");
            }
            if !ok {
                assert_eq!(page.bytes[..], before[..], "round {round}: a declined splice changed the page");
                declined += 1;
                if shared.is_none() && !want.is_empty() {
                    let need = build(want).bytes.len();
                    let cap = before.len();
                    // Only a replacement by another key can move bytes both ways (a shorter
                    // key, a longer value), which the trie never asks for.
                    let mixed = with && b == a + 1 && entries[a].key != new.key;
                    assert!(
                        need > cap || !keeps_slack(need, cap) || mixed,
                        "round {round}: declined {need} bytes in {cap}"
                    );
                }
                continue;
            }
            done += 1;
            let want = build(want);
            let len = want.bytes.len();
            assert!(
                keeps_slack(len, page.bytes.len()),
                "round {round}: {len} bytes left in {}",
                page.bytes.len()
            );
            assert_eq!(page.bytes[..len], want.bytes[..], "round {round}: n {n}, a {a}, b {b}, item {with}");
            assert_eq!(page.len(), want.len());
            for i in 0..want.len() {
                let (g, w) = (page.view(i), want.view(i));
                assert_eq!((g.key, g.stamp, g.prev), (w.key, w.stamp, w.prev), "round {round}: entry {i}");
                assert_eq!(format!("{:?}", g.value), format!("{:?}", w.value), "round {round}: entry {i}");
            }
        }
        assert!(done > 1000 && declined > 500, "both ways exercised: {done} in place, {declined} declined");
    }

    /// A page with side entries, or an item that must go to the side, is left to `build`.
    #[test]
    fn splice_leaves_side_entries_to_build() {
        let long = vec![1u8; INLINE_MAX + 1];
        let short =
            Owned { hash: 1, key: b"k".to_vec(), value: Some(b"v".to_vec()), stamp: 1, prev: Prev::NEW };
        let with_side =
            build(vec![Item { hash: 0, stamp: 1, prev: Prev::NEW, key: b"a", body: Body::Bytes(&long) }]);
        assert!(with_side.is_side(0));
        assert!(with_side.splice(1, 1, Some(&item(&short))).is_none());
        let plain = build(vec![item(&short)]);
        let too_long = Item { hash: 2, stamp: 1, prev: Prev::NEW, key: b"b", body: Body::Bytes(&long) };
        assert!(plain.splice(1, 1, Some(&too_long)).is_none());
        assert!(plain.splice(0, 1, None).is_none(), "nothing left");
        assert!(plain.splice(1, 0, None).is_none(), "a range backwards");
        assert!(plain.splice(0, 2, None).is_none(), "a range past the end");
    }

    #[test]
    fn keys_eq_is_slice_equality() {
        for len in 0..40usize {
            let a: Vec<u8> = (0..len as u8).collect();
            assert!(keys_eq(&a, &a.clone()), "length {len}");
            for other in [len.saturating_sub(1), len + 1] {
                let b: Vec<u8> = (0..other as u8).collect();
                assert_eq!(keys_eq(&a, &b), a == b, "lengths {len} and {other}");
            }
            for at in 0..len {
                let mut b = a.clone();
                b[at] ^= 0x80;
                assert!(!keys_eq(&a, &b), "length {len}, byte {at} differs");
            }
        }
    }
}
