//! A persistent hash trie with per-entry mutation stamps: the copy-on-write core of the
//! state store.
//!
//! Structure: a 32-way hash array mapped trie indexed by the top bits of a key's 64-bit
//! hash, 5 bits per level, whose leaves are *pages* (`page.rs`): up to [`PAGE_ENTRIES`]
//! entries packed in one exact-size allocation (24 bytes of header per entry, then the key
//! and value bytes), so an entry costs no allocation, pointer or reference count of its
//! own. Lists, maps and long values are *side entries* of their page, each an [`Entry`]
//! behind its own `Arc`. Cloning a [`Trie`] clones one pointer, which is what makes a
//! snapshot O(1) per trie. A branch's header (bitmap, `max_stamp`) sits beside the pointer
//! to it, in the parent's slot, and its slots in one exact-size `Arc<[Slot]>`; a page's
//! stamp bound sits in its slot too. A write makes its path unique with [`Arc::make_mut`]:
//! when no snapshot shares a node or page it is changed in place (a same-size overwrite
//! writes the bytes where they are; a removal, or an insertion into the slack a removal
//! left, moves the bytes within the page's allocation; any other write rebuilds the page
//! at its new size),
//! otherwise exactly that node (at most 32 slots) and that page are copied: the page is the
//! copy-on-write unit of the leaves. A branch's child covers a range of its 32 positions
//! (a branch child exactly one): a page that would hold more than [`PAGE_ENTRIES`] splits
//! into pages over parts of its range, about half full each, and only a page whose
//! entries all share the position becomes a branch one level down (see `Node`). At
//! [`MAX_DEPTH`] the hash has no bits left: keys whose top 60 hash bits collide form a
//! *bucket*, a B-tree by `(hash, key)` of pages under key nodes (see [`KEY_FANOUT`]).
//! [`Trie::from_sorted`] builds a trie bottom-up from entries in order, its pages about
//! full.
//!
//! Invariants:
//! - iteration yields entries in ascending `(hash, key)` order, whatever the history
//!   (pages are sorted, and branches split by hash bits);
//! - a slot's `max_stamp >= stamp` of every entry below it (conservative after deletes),
//!   so a walk for "changed since epoch p" can skip subtrees with `max_stamp <= p`;
//! - a hash branch's children cover disjoint ranges of its positions in ascending order,
//!   every entry below a child has its hash index (at the branch's depth) in the child's
//!   range, and a branch child's range is one position;
//! - a key node sits at [`MAX_DEPTH`] or below, has 1 to [`KEY_FANOUT`] children in
//!   `(hash, key)` order, all of one 60-bit hash prefix;
//! - a page holds 1 to [`PAGE_ENTRIES`] entries;
//! - a branch is never empty (an empty branch exists only transiently, inside an
//!   operation, as a placeholder: see `Slot::default`).

use std::sync::Arc;

use super::page::{self, Body, Item, Page, Placed};

/// Bits of the hash consumed per level.
const BITS: u32 = 5;
/// Depth at which pages become buckets (12 levels consume 60 bits).
pub(crate) const MAX_DEPTH: u32 = 12;
/// Most entries of a page above the bucket depth. Measured at 10^6 entries of 16-byte keys
/// and 100-byte values (128 key groups): see ARCHITECTURE.md "Costs".
pub(crate) const PAGE_ENTRIES: usize = 16;

/// The value of an entry.
#[derive(Clone, Debug)]
pub(crate) enum Value {
    /// The key was deleted; kept only while an increment may still need to say so.
    Tomb,
    /// A plain value (`ValueState`, or a `MapState` map value).
    Bytes(Box<[u8]>),
    /// A list (`ListState`). Boxed, like maps, to keep every entry small.
    List(Box<ListValue>),
    /// A map (`MapState`): a nested trie keyed by map key.
    Map(Box<MapValue>),
}

/// Keys up to this length are stored inside the entry (no allocation of their own).
const INLINE_KEY: usize = 22;

/// An encoded key, stored inline in the entry when short (one cache miss less per lookup,
/// one allocation less per entry), on the heap otherwise. Dereferences to the key bytes.
#[derive(Clone)]
pub(crate) enum Key {
    /// `bytes[..len]` is the key.
    Inline { len: u8, bytes: [u8; INLINE_KEY] },
    /// A key longer than `INLINE_KEY`.
    Heap(Box<[u8]>),
}

impl Key {
    /// A copy of `key`.
    pub fn new(key: &[u8]) -> Key {
        match u8::try_from(key.len()) {
            Ok(len) if key.len() <= INLINE_KEY => {
                let mut bytes = [0u8; INLINE_KEY];
                bytes[..key.len()].copy_from_slice(key);
                Key::Inline { len, bytes }
            }
            _ => Key::Heap(key.into()),
        }
    }
}

impl std::ops::Deref for Key {
    type Target = [u8];

    #[inline]
    fn deref(&self) -> &[u8] {
        match self {
            Key::Inline { len, bytes } => &bytes[..usize::from(*len)],
            Key::Heap(b) => b,
        }
    }
}

impl std::fmt::Debug for Key {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        (**self).fmt(f)
    }
}

pub(crate) use super::list::ListValue;

/// A map value: a nested trie of map key to bytes.
#[derive(Clone, Debug, Default)]
pub(crate) struct MapValue {
    /// The map's entries.
    pub trie: Trie,
    /// Epoch in which this map object was created (after an absence or a clear).
    pub created: u64,
}

/// What the key held before the first write of the epoch `Entry::stamp`, packed as
/// `stamp << 1 | live`. `Prev::NEW` says the key had no slot at all before (absent in
/// every epoch that can still be a parent).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Prev(u64);

impl Prev {
    /// No earlier state: the slot was created in `Entry::stamp`.
    pub const NEW: Prev = Prev(0);
    /// The state `live` written in epoch `stamp`.
    pub fn new(stamp: u64, live: bool) -> Prev {
        Prev(stamp << 1 | u64::from(live))
    }
    /// Epoch of the previous state.
    pub fn stamp(self) -> u64 {
        self.0 >> 1
    }
    /// Whether the previous state was a live value.
    pub fn live(self) -> bool {
        self.0 & 1 == 1
    }
}

/// One key's slot. Its hash is kept by the trie, beside the pointer to it. The fields a
/// lookup reads (key, value) come first and are 48 bytes: often in one cache line.
#[derive(Clone, Debug)]
#[repr(C)]
pub(crate) struct Entry {
    /// The encoded key.
    pub key: Key,
    /// Current value.
    pub value: Value,
    /// Epoch of the last write (every mutation stamps, not only copies: FLINK-26968).
    pub stamp: u64,
    /// State before the first write of epoch `stamp`.
    pub prev: Prev,
}

impl Entry {
    /// A fresh, empty slot for `key`, created in epoch `stamp`.
    pub fn new(key: &[u8], stamp: u64) -> Entry {
        Entry { key: Key::new(key), stamp, prev: Prev::NEW, value: Value::Tomb }
    }

    /// True unless the entry is a tombstone.
    pub fn is_live(&self) -> bool {
        !matches!(self.value, Value::Tomb)
    }

    /// Records that the entry is about to be written in epoch `epoch`: keeps the state as
    /// of the previous epoch in `prev`, then stamps.
    pub fn touch(&mut self, epoch: u64) {
        if self.stamp != epoch {
            self.prev = Prev::new(self.stamp, self.is_live());
            self.stamp = epoch;
        }
    }
}

/// A borrowed view of one entry, wherever it is stored.
#[derive(Clone, Copy, Debug)]
pub(crate) struct View<'a> {
    /// The encoded key.
    pub key: &'a [u8],
    /// Current value.
    pub value: Val<'a>,
    /// Epoch of the last write.
    pub stamp: u64,
    /// State before the first write of epoch `stamp`.
    pub prev: Prev,
}

/// A borrowed value.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Val<'a> {
    Tomb,
    Bytes(&'a [u8]),
    List(&'a ListValue),
    Map(&'a MapValue),
}

impl<'a> Val<'a> {
    /// A view of an owned value.
    pub fn of(v: &'a Value) -> Val<'a> {
        match v {
            Value::Tomb => Val::Tomb,
            Value::Bytes(b) => Val::Bytes(b),
            Value::List(l) => Val::List(l),
            Value::Map(m) => Val::Map(m),
        }
    }
}

impl View<'_> {
    /// True unless the entry is a tombstone.
    pub fn is_live(&self) -> bool {
        !matches!(self.value, Val::Tomb)
    }

    /// Whether the key was live at epoch `p`, if that can be told (`p < self.stamp`).
    /// `None` means unknown (several epochs of writes since `p`).
    pub fn live_at(&self, p: u64) -> Option<bool> {
        live_at(self.stamp, self.prev, self.is_live(), p)
    }
}

fn live_at(stamp: u64, prev: Prev, live: bool, p: u64) -> Option<bool> {
    if stamp <= p {
        Some(live)
    } else if prev == Prev::NEW {
        Some(false)
    } else if prev.stamp() <= p {
        Some(prev.live())
    } else {
        None
    }
}

/// What the state of a key was before a write in epoch `epoch`: the stamp and prev the
/// entry gets (the bookkeeping of [`Entry::touch`]).
fn touched(old: Option<View<'_>>, epoch: u64) -> (u64, Prev) {
    match old {
        None => (epoch, Prev::NEW),
        Some(v) if v.stamp != epoch => (epoch, Prev::new(v.stamp, v.is_live())),
        Some(v) => (v.stamp, v.prev),
    }
}

/// An entry loaded by [`Trie::from_sorted`]: bytes borrowed from the records, or an owned
/// entry (lists, maps).
pub(crate) enum Loaded<'r> {
    Bytes { key: &'r [u8], value: &'r [u8] },
    Entry(Entry),
}

impl Loaded<'_> {
    /// The entry's key.
    pub fn key(&self) -> &[u8] {
        match self {
            Loaded::Bytes { key, .. } => key,
            Loaded::Entry(e) => &e.key,
        }
    }
}

/// A slot of a branch (or the root): a branch one level down, or a page with an upper
/// bound of its entries' stamps (a walk for changes skips the page without loading it).
#[derive(Clone, Debug)]
enum Slot {
    Branch(Node),
    Page(u64, Page),
}

impl Default for Slot {
    /// An empty branch, which allocates nothing (`Arc::<[_]>::default()` is static). Only
    /// transient: what a slot holds while its content is moved elsewhere, or a subtree that
    /// lost its last entry, about to be dropped.
    fn default() -> Slot {
        Slot::Branch(Node::empty())
    }
}

impl Slot {
    /// Whether this is an empty branch (see `Default`).
    fn is_empty(&self) -> bool {
        matches!(self, Slot::Branch(n) if n.slots.is_empty())
    }

    fn max_stamp(&self) -> u64 {
        match self {
            Slot::Branch(n) => n.max_stamp,
            Slot::Page(s, _) => *s,
        }
    }
}

/// A branch: the header lives with the pointer (in the parent's slot, or in the [`Trie`]
/// for the root), and the slots in one exact-size allocation. Looking up a child costs one
/// cache miss per level: the header is already at hand when the slots are loaded.
///
/// A child covers a *range* of the 32 positions: a branch exactly one (its keys share the
/// hash bits of this level), a page one or more (`range`). So a page that outgrows its
/// bound splits into pages over parts of its range, each holding about half, instead of
/// a branch of 32 positions one level down holding a fraction of a key each: pages stay
/// between about half full and full at any number of keys (with one branch of 32 pages per
/// position, pages held ~1 entry at 3 * 10^6 keys of 128 key groups and ~2.4 at 10^7).
/// Positions no child covers (left by removals, or beside a branch) are *holes*.
#[derive(Clone, Debug)]
struct Node {
    /// The first position of each child's range.
    starts: u32,
    /// The positions some child covers: a child's range runs from its start up to the next
    /// start or the first position not covered, whichever comes first.
    covered: u32,
    /// Upper bound of the stamps below this node.
    max_stamp: u64,
    /// The children in position order.
    slots: Arc<[Slot]>,
}

#[inline]
fn index(hash: u64, depth: u32) -> u32 {
    // Past the bucket depth the hash has no bits left: no hash branch is there (key nodes
    // are, which no position covers), and the shift saturates instead of overflowing.
    ((hash >> 64u32.saturating_sub(BITS * (depth + 1))) & 0x1f) as u32
}

/// The positions below `i` (`i` in 0..=32).
#[inline]
fn below(i: u32) -> u32 {
    if i == 0 { 0 } else { u32::MAX >> (32 - i) }
}

/// The positions `lo..hi`.
#[inline]
fn span(lo: u32, hi: u32) -> u32 {
    below(hi) & !below(lo)
}

impl Node {
    fn empty() -> Node {
        Node { starts: 0, covered: 0, max_stamp: 0, slots: Arc::default() }
    }

    /// A key node over `slots` (1 to [`KEY_FANOUT`] children in `(hash, key)` order).
    fn keyed(slots: Vec<Slot>) -> Node {
        let max_stamp = slots.iter().map(Slot::max_stamp).max().unwrap_or(0);
        let mut node = Node { starts: 0, covered: 0, max_stamp, slots: slots.into() };
        node.renumber();
        node
    }

    /// Whether this is a key node: one of a bucket's B-tree (see [`KEY_FANOUT`]). Its
    /// children are numbered, none covers a position (`covered` is 0), and a key is found
    /// by comparing it with each child's first entry.
    #[inline]
    fn is_keyed(&self) -> bool {
        self.covered == 0 && self.starts != 0
    }

    /// Numbers a key node's children after they changed (at most [`KEY_FANOUT`]).
    fn renumber(&mut self) {
        debug_assert!(self.slots.len() <= KEY_FANOUT);
        self.starts = below(self.slots.len().min(KEY_FANOUT) as u32);
    }

    /// Position in `slots` of the child covering hash index `idx`, and whether one does.
    #[inline]
    fn position(&self, idx: u32) -> (usize, bool) {
        let n = (self.starts & below(idx + 1)).count_ones() as usize;
        (n.saturating_sub(1), n > 0 && self.covered & (1 << idx) != 0)
    }

    /// The range `start..end` of positions of the child that starts at `start`.
    #[inline]
    fn range(&self, start: u32) -> (u32, u32) {
        let above = !below(start + 1);
        let next = (self.starts & above).trailing_zeros();
        let gap = (!self.covered & above).trailing_zeros();
        (start, next.min(gap))
    }

    /// The start of the child covering `idx` (which some child covers).
    #[inline]
    fn start_of(&self, idx: u32) -> u32 {
        31 - (self.starts & below(idx + 1)).leading_zeros()
    }

    /// The hole around `idx` (not covered): the range of positions up to the nearest
    /// covered ones.
    fn hole(&self, idx: u32) -> (u32, u32) {
        let under = self.covered & below(idx);
        let lo = 32 - under.leading_zeros();
        let hi = (self.covered & !below(idx + 1)).trailing_zeros();
        (lo, hi)
    }

    /// The children with their ranges, in order.
    fn children(&self) -> impl Iterator<Item = (u32, u32, &Slot)> + '_ {
        let mut bits = self.starts;
        self.slots.iter().map(move |s| {
            let start = bits.trailing_zeros();
            bits &= bits.wrapping_sub(1);
            let (_, end) = self.range(start);
            (start, end, s)
        })
    }
}

/// The subtree at `depth` holding `items` (sorted, at least one, all with the same hash
/// prefix above `depth`): a page when they fit one, else a branch of subtrees.
fn make_slot(items: Vec<Item<'_>>, depth: u32) -> Slot {
    if items.len() <= PAGE_ENTRIES {
        return page_slot(items);
    }
    if depth >= MAX_DEPTH {
        return keyed_slot(items);
    }
    let (starts, covered, slots) = pack(items, depth, 0, 32);
    let max_stamp = slots.iter().map(Slot::max_stamp).max().unwrap_or(0);
    Slot::Branch(Node { starts, covered, max_stamp, slots: slots.into() })
}

fn page_slot(items: Vec<Item<'_>>) -> Slot {
    let max = items.iter().map(|i| item_stamp(i)).max().unwrap_or(0);
    Slot::Page(max, page::build(items))
}

/// The children of a branch at `depth` over positions `lo..hi` holding `items` (sorted,
/// all with hash indexes at `depth` in `lo..hi`): the positions' starts and coverage, and
/// the children in order. A position with more entries than a page holds gets a branch of
/// its own (a key node at the bucket depth); the others are packed in order
/// into pages of at most [`PAGE_ENTRIES`] and about `n / pages` entries each, so a split
/// page leaves two about half full and a bulk load leaves them about full. Each page covers
/// from where the previous child ends up to where the next one starts.
fn pack(items: Vec<Item<'_>>, depth: u32, lo: u32, hi: u32) -> (u32, u32, Vec<Slot>) {
    // The plan first (runs of entries by position), then the items moved into it in order.
    enum Part {
        Page { start: u32, end: u32, len: usize },
        Branch { at: u32, len: usize },
    }
    let n = items.len();
    let cap = n.div_ceil(n.div_ceil(PAGE_ENTRIES).max(1)).max(1);
    let mut plan: Vec<Part> = Vec::new();
    let (mut run, mut run_start) = (0usize, lo);
    let mut i = 0;
    while i < n {
        let idx = index(items[i].hash, depth);
        let len = items[i..].iter().take_while(|x| index(x.hash, depth) == idx).count();
        i += len;
        if len > PAGE_ENTRIES {
            if run > 0 {
                plan.push(Part::Page { start: run_start, end: idx, len: run });
            }
            plan.push(Part::Branch { at: idx, len });
            (run, run_start) = (0, idx + 1);
            continue;
        }
        if run > 0 && (run + len > PAGE_ENTRIES || run >= cap) {
            plan.push(Part::Page { start: run_start, end: idx, len: run });
            (run, run_start) = (0, idx);
        }
        run += len;
    }
    if run > 0 {
        plan.push(Part::Page { start: run_start, end: hi, len: run });
    }
    let (mut starts, mut covered) = (0u32, 0u32);
    let mut slots = Vec::with_capacity(plan.len());
    let mut items = items.into_iter();
    for part in plan {
        match part {
            Part::Page { start, end, len } => {
                starts |= 1 << start;
                covered |= span(start, end);
                slots.push(page_slot(items.by_ref().take(len).collect()));
            }
            Part::Branch { at, len } => {
                starts |= 1 << at;
                covered |= 1 << at;
                slots.push(make_slot(items.by_ref().take(len).collect(), depth + 1));
            }
        }
    }
    (starts, covered, slots)
}

fn item_stamp(i: &Item<'_>) -> u64 {
    match &i.body {
        Body::Side(e) => e.stamp,
        _ => i.stamp,
    }
}

/// Replaces the slot at `pos` with `with` (any number, none included). The slots are
/// reallocated at their new size; when this node is not shared they are moved, otherwise
/// cloned (the copy-on-write copy of the node).
fn splice_slots(slots: &mut Arc<[Slot]>, pos: usize, remove: usize, with: Vec<Slot>) {
    let fresh: Arc<[Slot]> = if let Some(old) = Arc::get_mut(slots) {
        let (head, rest) = old.split_at_mut(pos);
        let tail = rest.get_mut(remove..).unwrap_or_default();
        head.iter_mut().map(std::mem::take).chain(with).chain(tail.iter_mut().map(std::mem::take)).collect()
    } else {
        let tail = slots.get(pos + remove..).unwrap_or_default();
        slots[..pos].iter().cloned().chain(with).chain(tail.iter().cloned()).collect()
    };
    *slots = fresh;
}

/// Drops the empty slots of a unique branch and uncovers their positions; a branch left
/// with a single page becomes that page (a page may sit higher than the bits it needs).
fn compact(slot: &mut Slot) {
    let Slot::Branch(node) = slot else { return };
    if node.slots.iter().any(Slot::is_empty) {
        let (mut starts, mut covered) = (node.starts, node.covered);
        for (start, end, s) in node.children() {
            if s.is_empty() {
                starts &= !(1 << start);
                covered &= !span(start, end);
            }
        }
        let slots = Arc::make_mut(&mut node.slots);
        let fresh: Arc<[Slot]> = slots.iter_mut().filter(|s| !s.is_empty()).map(std::mem::take).collect();
        node.slots = fresh;
        (node.starts, node.covered) = (starts, covered);
    }
    if node.slots.len() == 1 && matches!(node.slots[0], Slot::Page(..)) {
        *slot = only_child(node);
    }
}

/// A write of one key.
enum Op<'v, F> {
    /// Set the value to these bytes (in place when the size matches).
    Put(&'v [u8]),
    /// Set the value.
    Set(Value),
    /// Change the entry through `F` (the entry has its old stamps; `F` touches it).
    Modify(F),
}

/// The entry `op` leaves for `key`, given what was there.
fn resolve<F: FnOnce(&mut Entry)>(
    op: Op<'_, F>,
    key: &[u8],
    old: Option<(&Page, usize)>,
    epoch: u64,
) -> Placed {
    let view = old.map(|(p, i)| p.view(i));
    match op {
        Op::Put(v) => {
            let (stamp, prev) = touched(view, epoch);
            page::place(Entry { key: Key::new(key), value: Value::Bytes(v.into()), stamp, prev })
        }
        Op::Set(value) => {
            let (stamp, prev) = touched(view, epoch);
            page::place(Entry { key: Key::new(key), value, stamp, prev })
        }
        Op::Modify(f) => {
            let mut e = match old {
                None => Entry::new(key, epoch),
                Some((p, i)) => p.owned(i),
            };
            f(&mut e);
            page::place(e)
        }
    }
}

/// What a write below a slot did.
enum Wrote {
    /// Written: whether the key was live before and after.
    Done(bool, bool),
    /// The page would outgrow its bound: the parent (or the trie, for the root) rebuilds it
    /// with `placed` inserted at `found`, split. `was` and `now` as for `Done`.
    Split { was: bool, now: bool, found: Result<usize, usize>, placed: Placed },
    /// Written below a key node that now has more children than [`KEY_FANOUT`]: the parent
    /// splits it in two (a bucket's root gets a new root above the two).
    Grew(bool, bool),
}

/// Writes `key` below `slot` (whose hash branches index at `depth`): see [`Trie::put`].
fn write_in<F: FnOnce(&mut Entry)>(
    slot: &mut Slot,
    depth: u32,
    hash: u64,
    key: &[u8],
    epoch: u64,
    op: Op<'_, F>,
) -> Wrote {
    match slot {
        Slot::Branch(node) if node.is_keyed() => write_keyed(node, depth, hash, key, epoch, op),
        Slot::Branch(node) => {
            node.max_stamp = node.max_stamp.max(epoch);
            let idx = index(hash, depth);
            let (pos, present) = node.position(idx);
            if !present {
                // A new page over the whole hole.
                let placed = resolve(op, key, None, epoch);
                let item = Item::of_placed(hash, &placed);
                let now = item_live(&item);
                let (lo, hi) = node.hole(idx);
                let at = (node.starts & below(lo)).count_ones() as usize;
                splice_slots(&mut node.slots, at, 0, vec![page_slot(vec![item])]);
                node.starts |= 1 << lo;
                node.covered |= span(lo, hi);
                return Wrote::Done(false, now);
            }
            let (start, end) = node.range(node.start_of(idx));
            let slots = Arc::make_mut(&mut node.slots);
            match write_in(&mut slots[pos], depth + 1, hash, key, epoch, op) {
                Wrote::Split { was, now, found, placed } => {
                    // The page splits over its range, in this branch (past the hash's bits,
                    // into a key node).
                    let old = std::mem::take(&mut slots[pos]);
                    let items = with_placed(&old, hash, found, &placed);
                    let (starts, covered, children) = pack(items, depth, start, end);
                    splice_slots(&mut node.slots, pos, 1, children);
                    node.starts = (node.starts & !span(start, end)) | starts;
                    node.covered = (node.covered & !span(start, end)) | covered;
                    Wrote::Done(was, now)
                }
                Wrote::Grew(was, now) => {
                    // A bucket's root key node outgrew its fan-out: a new root above.
                    let old = std::mem::take(&mut slots[pos]);
                    slots[pos] = Slot::Branch(Node::keyed(split_keyed(old)));
                    Wrote::Done(was, now)
                }
                done => done,
            }
        }
        Slot::Page(max, page) => {
            *max = (*max).max(epoch);
            let found = page.find(hash, key);
            if let Ok(i) = found {
                let old = page.view(i);
                let was = old.is_live();
                match op {
                    // A side entry of a long value that stays too long to inline takes the
                    // new bytes (or a tombstone, for a long key) where it is: a rebuild
                    // would only put it back in the side array.
                    Op::Put(_) | Op::Set(Value::Tomb)
                        if page.is_side(i)
                            && matches!(old.value, Val::Bytes(_) | Val::Tomb)
                            && key.len() + op_len(&op) > page::INLINE_MAX =>
                    {
                        let value = match op {
                            Op::Put(v) => Value::Bytes(v.into()),
                            _ => Value::Tomb,
                        };
                        let now = matches!(value, Value::Bytes(_));
                        page.modify_side(i, |e| {
                            e.touch(epoch);
                            e.value = value;
                        });
                        return Wrote::Done(was, now);
                    }
                    Op::Put(v) if matches!(old.value, Val::Bytes(b) if b.len() == v.len()) => {
                        let (stamp, prev) = touched(Some(old), epoch);
                        if page.overwrite(i, v, stamp, prev) {
                            return Wrote::Done(was, true);
                        }
                        // Not reached for inline bytes of that size; a rebuild is always right.
                        return rebuild(slot, hash, key, epoch, Ok(i), Op::Put::<F>(v));
                    }
                    Op::Modify(f) if page.is_side(i) => {
                        let now = page.modify_side(i, |e| {
                            f(e);
                            e.is_live()
                        });
                        return Wrote::Done(was, now);
                    }
                    op => return rebuild(slot, hash, key, epoch, found, op),
                }
            }
            rebuild(slot, hash, key, epoch, found, op)
        }
    }
}

/// The bytes of value a write puts (0 for any but a put).
fn op_len<F>(op: &Op<'_, F>) -> usize {
    match op {
        Op::Put(v) => v.len(),
        _ => 0,
    }
}

/// The items of page slot `old` with `placed` inserted at `Err(pos)` or replacing `Ok(pos)`.
fn with_placed<'a>(
    old: &'a Slot,
    hash: u64,
    found: Result<usize, usize>,
    placed: &'a Placed,
) -> Vec<Item<'a>> {
    let mut items = match old {
        Slot::Page(_, page) => page.items(),
        Slot::Branch(_) => Vec::new(),
    };
    let item = Item::of_placed(hash, placed);
    match found {
        Ok(i) if i < items.len() => items[i] = item,
        Ok(i) | Err(i) => items.insert(i.min(items.len()), item),
    }
    items
}

/// The general write of a page slot: the page rebuilt with the key's new entry (inserted
/// at `Err(pos)` or replacing `Ok(pos)`), or [`Wrote::Split`] if it would outgrow a page.
fn rebuild<F: FnOnce(&mut Entry)>(
    slot: &mut Slot,
    hash: u64,
    key: &[u8],
    epoch: u64,
    found: Result<usize, usize>,
    op: Op<'_, F>,
) -> Wrote {
    let Slot::Page(max, page) = slot else { return Wrote::Done(false, false) };
    let was = found.is_ok_and(|i| page.view(i).is_live());
    let placed = resolve(op, key, found.ok().map(|i| (&*page, i)), epoch);
    let item = Item::of_placed(hash, &placed);
    let now = item_live(&item);
    if page.len() + usize::from(found.is_err()) > PAGE_ENTRIES {
        return Wrote::Split { was, now, found, placed };
    }
    // In the page's own bytes when it can be, else copied range by range, else item by item.
    let (a, b) = match found {
        Ok(i) => (i, i + 1),
        Err(i) => (i, i),
    };
    match page.splice_mut(a, b, Some(&item)) {
        // In place the stamp bound stays (conservative); a copy's is its own.
        Some(true) => {}
        Some(false) => *max = page.max_stamp(),
        None => *slot = page_slot(with_placed(slot, hash, found, &placed)),
    }
    Wrote::Done(was, now)
}

fn item_live(i: &Item<'_>) -> bool {
    match &i.body {
        Body::Tomb => false,
        Body::Bytes(_) => true,
        Body::Side(e) => e.is_live(),
    }
}

/// Physically removes `key` below `slot` (which holds it).
fn remove_in(slot: &mut Slot, depth: u32, hash: u64, key: &[u8]) {
    match slot {
        Slot::Page(_, page) => {
            let Ok(i) = page.find(hash, key) else { return };
            if page.len() == 1 {
                *slot = Slot::default();
                return;
            }
            if page.splice_mut(i, i + 1, None).is_none() {
                let mut items = page.items();
                items.remove(i);
                *page = page::build(items);
            }
        }
        Slot::Branch(node) if node.is_keyed() => {
            let pos = key_pos(node, hash, key);
            let slots = Arc::make_mut(&mut node.slots);
            remove_in(&mut slots[pos], depth + 1, hash, key);
            tidy_keyed(node, pos);
            collapse_keyed(slot);
        }
        Slot::Branch(node) => {
            let (pos, present) = node.position(index(hash, depth));
            if !present {
                return;
            }
            let slots = Arc::make_mut(&mut node.slots);
            remove_in(&mut slots[pos], depth + 1, hash, key);
            merge_around(node, pos);
            compact(slot);
        }
    }
}

/// Most children of a key node. Past the bucket depth ([`MAX_DEPTH`]: keys whose top 60
/// hash bits are equal, which XXH64 lets anyone craft) the hash tells keys apart no more,
/// so a bucket is a B-tree by `(hash, key)`: key nodes of up to this many children, pages
/// of up to [`PAGE_ENTRIES`] entries at the leaves. A page that overflows splits in two in
/// its key node; a key node that overflows splits in two in its parent key node, and the
/// bucket's root in two under a new root. So every operation on a bucket of `n` keys costs
/// O(log n) pages and nodes, where one page per bucket cost O(n) per write.
const KEY_FANOUT: usize = 32;

/// The first entry below `slot`: its hash and key.
fn first_entry(slot: &Slot) -> Option<(u64, &[u8])> {
    let mut s = slot;
    loop {
        match s {
            Slot::Page(_, p) if p.len() > 0 => return Some((p.hash(0), p.view(0).key)),
            Slot::Page(..) => return None,
            Slot::Branch(n) => s = n.slots.first()?,
        }
    }
}

/// The child of key node `node` whose range holds `(hash, key)`: the last one whose first
/// entry is not after it (the first child when none is).
#[cold]
fn key_pos(node: &Node, hash: u64, key: &[u8]) -> usize {
    let after = node.slots.partition_point(|s| first_entry(s).is_some_and(|(h, k)| (h, k) <= (hash, key)));
    after.saturating_sub(1)
}

/// `items` split into `parts` runs (at most one per item) whose lengths differ by at most
/// one, in order.
fn even<T>(items: Vec<T>, parts: usize) -> Vec<Vec<T>> {
    let n = items.len();
    let parts = parts.clamp(1, n.max(1));
    let mut it = items.into_iter();
    (0..parts).map(|i| it.by_ref().take(n * (i + 1) / parts - n * i / parts).collect()).collect()
}

/// A bucket holding `items` (sorted, more than a page holds, all of one 60-bit hash
/// prefix): full pages under key nodes about full, built bottom-up.
fn keyed_slot(items: Vec<Item<'_>>) -> Slot {
    let pages = items.len().div_ceil(PAGE_ENTRIES);
    let mut level: Vec<Slot> = even(items, pages).into_iter().map(page_slot).collect();
    while level.len() > KEY_FANOUT {
        let nodes = level.len().div_ceil(KEY_FANOUT);
        level = even(level, nodes).into_iter().map(|c| Slot::Branch(Node::keyed(c))).collect();
    }
    Slot::Branch(Node::keyed(level))
}

/// An overfull key node's children as two key nodes, about half each.
fn split_keyed(slot: Slot) -> Vec<Slot> {
    let Slot::Branch(mut node) = slot else { return vec![slot] };
    let children: Vec<Slot> = match Arc::get_mut(&mut node.slots) {
        Some(own) => own.iter_mut().map(std::mem::take).collect(),
        None => node.slots.to_vec(),
    };
    even(children, 2).into_iter().map(|c| Slot::Branch(Node::keyed(c))).collect()
}

/// [`write_in`] at key node `node`: into the child whose range holds the key; a page that
/// overflows splits in two here, a child key node that overflows splits in two here, and
/// this node, if it then overflows, is split by its parent ([`Wrote::Grew`]). Out of line:
/// only buckets come here, and the common write's recursion stays small.
#[cold]
#[inline(never)]
fn write_keyed<F: FnOnce(&mut Entry)>(
    node: &mut Node,
    depth: u32,
    hash: u64,
    key: &[u8],
    epoch: u64,
    op: Op<'_, F>,
) -> Wrote {
    node.max_stamp = node.max_stamp.max(epoch);
    let pos = key_pos(node, hash, key);
    let slots = Arc::make_mut(&mut node.slots);
    let (was, now) = match write_in(&mut slots[pos], depth + 1, hash, key, epoch, op) {
        Wrote::Split { was, now, found, placed } => {
            let old = std::mem::take(&mut slots[pos]);
            let halves = even(with_placed(&old, hash, found, &placed), 2);
            let pages = halves.into_iter().map(page_slot).collect();
            splice_slots(&mut node.slots, pos, 1, pages);
            (was, now)
        }
        Wrote::Grew(was, now) => {
            let old = std::mem::take(&mut slots[pos]);
            splice_slots(&mut node.slots, pos, 1, split_keyed(old));
            (was, now)
        }
        Wrote::Done(was, now) => (was, now),
    };
    if node.slots.len() > KEY_FANOUT {
        return Wrote::Grew(was, now);
    }
    node.renumber();
    Wrote::Done(was, now)
}

/// After a removal below child `pos` of a unique key node: an emptied child is dropped, and
/// a page left with at most [`MERGE_BELOW`] entries merges with a neighbouring page (as in
/// [`merge_around`]).
fn tidy_keyed(node: &mut Node, pos: usize) {
    if node.slots.get(pos).is_some_and(Slot::is_empty) {
        splice_slots(&mut node.slots, pos, 1, Vec::new());
    } else if let Some((a, merged)) = merge_with_neighbour(&node.slots, pos) {
        splice_slots(&mut node.slots, a, 2, vec![merged]);
    }
    node.renumber();
}

/// A key node left with one child becomes that child (an empty one stays, for its parent
/// to drop).
fn collapse_keyed(slot: &mut Slot) {
    let Slot::Branch(node) = slot else { return };
    if node.slots.len() == 1 {
        *slot = only_child(node);
    }
}

/// The only child of `node`, moved out when nothing shares the node, else cloned.
fn only_child(node: &mut Node) -> Slot {
    match Arc::get_mut(&mut node.slots) {
        Some(s) => std::mem::take(&mut s[0]),
        None => node.slots[0].clone(),
    }
}

/// A page left with at most this many entries by a removal merges with a neighbour page.
const MERGE_BELOW: usize = PAGE_ENTRIES / 4;
/// Most entries of a merged page, so it takes writes before it splits again.
const MERGE_MAX: usize = PAGE_ENTRIES * 3 / 4;

/// After removals below child `pos` of a unique branch: when that child is a page of at most
/// [`MERGE_BELOW`] entries and a neighbouring child is a page with which it holds at most
/// [`MERGE_MAX`], the two become one page over both ranges (and any hole between). So a
/// trie that lost most of its keys (expired, cleared) does not keep a page per few keys.
fn merge_around(node: &mut Node, pos: usize) {
    let Some((a, merged)) = merge_with_neighbour(&node.slots, pos) else { return };
    let (start_a, start_b, end_b) = {
        let mut pair = node.children().skip(a);
        let (Some((start_a, _, _)), Some((start_b, end_b, _))) = (pair.next(), pair.next()) else { return };
        (start_a, start_b, end_b)
    };
    splice_slots(&mut node.slots, a, 2, vec![merged]);
    node.starts &= !(1 << start_b);
    node.covered |= span(start_a, end_b);
}

/// When child `pos` of `slots` is a page of at most [`MERGE_BELOW`] entries and a
/// neighbouring child is a page with which it holds at most [`MERGE_MAX`]: the position of
/// the first of the two, and the page holding both (in a hash branch or a key node alike).
fn merge_with_neighbour(slots: &[Slot], pos: usize) -> Option<(usize, Slot)> {
    fn page_len(s: &Slot) -> Option<usize> {
        match s {
            Slot::Page(_, p) => Some(p.len()),
            Slot::Branch(_) => None,
        }
    }
    let n = slots.get(pos).and_then(page_len).filter(|&n| n <= MERGE_BELOW)?;
    let other = [pos.checked_sub(1), pos.checked_add(1)]
        .into_iter()
        .flatten()
        .find(|&o| slots.get(o).and_then(page_len).is_some_and(|m| m + n <= MERGE_MAX))?;
    let a = pos.min(other);
    let (Slot::Page(max_a, pa), Slot::Page(max_b, pb)) = (&slots[a], &slots[a + 1]) else { return None };
    let mut items = pa.items();
    items.extend(pb.items());
    Some((a, Slot::Page((*max_a).max(*max_b), page::build(items))))
}

/// A persistent map from `(hash, key)` to entries. Cloning is O(1).
#[derive(Clone, Debug, Default)]
pub(crate) struct Trie {
    root: Option<Slot>,
    /// Number of live (non-tombstone) entries.
    live: u64,
    /// The latest epoch in which a tombstone was left here (or, for a map state, in a map
    /// stored here): with none since the last confirmation there is nothing to purge.
    last_tomb: u64,
}

impl Trie {
    /// Number of live entries.
    pub fn len(&self) -> u64 {
        self.live
    }

    /// Records that a tombstone was left in epoch `epoch` (here or in a nested map).
    pub fn note_tomb(&mut self, epoch: u64) {
        self.last_tomb = self.last_tomb.max(epoch);
    }

    /// The latest epoch in which a tombstone was left (0 if never).
    pub fn last_tomb(&self) -> u64 {
        self.last_tomb
    }

    /// True when no live entry exists (tombstones may remain).
    pub fn is_empty(&self) -> bool {
        self.live == 0
    }

    fn note_liveness(&mut self, (was, now): (bool, bool)) {
        match (was, now) {
            (false, true) => self.live += 1,
            (true, false) => self.live -= 1,
            _ => {}
        }
    }

    /// Upper bound of all stamps in the trie (0 when empty).
    pub fn max_stamp(&self) -> u64 {
        self.root.as_ref().map_or(0, Slot::max_stamp)
    }

    /// The page that holds `key` if the trie has it (the walk down by hash; the page's
    /// lookup lines are prefetched).
    #[inline(always)]
    fn page_of(&self, hash: u64, key: &[u8]) -> Option<&Page> {
        let mut slot = self.root.as_ref()?;
        let mut depth = 0;
        loop {
            match slot {
                Slot::Page(_, p) => {
                    p.prefetch_lookup(prefetch);
                    return Some(p);
                }
                Slot::Branch(n) => {
                    let (pos, present) = n.position(index(hash, depth));
                    // A key node covers no position: only a miss asks whether it is one.
                    let pos = match present {
                        true => pos,
                        false if n.is_keyed() => key_pos(n, hash, key),
                        false => return None,
                    };
                    slot = n.slots.get(pos)?;
                    depth += 1;
                }
            }
        }
    }

    /// The entry for `key`, tombstones included.
    #[inline]
    pub fn get(&self, hash: u64, key: &[u8]) -> Option<View<'_>> {
        let p = self.page_of(hash, key)?;
        p.find(hash, key).ok().map(|i| p.view(i))
    }

    /// The value of `key` when it is plain bytes (as `get`, reading less of the page).
    #[inline]
    pub fn get_bytes(&self, hash: u64, key: &[u8]) -> Option<&[u8]> {
        #[cfg(all(target_arch = "x86_64", not(target_feature = "popcnt")))]
        if std::arch::is_x86_feature_detected!("popcnt") {
            // SAFETY: this CPU has the `popcnt` instruction (detected just above), the only
            // feature the function is compiled for.
            return unsafe { self.get_bytes_popcnt(hash, key) };
        }
        self.get_bytes_walk(hash, key)
    }

    /// [`Trie::get_bytes`] compiled with the `popcnt` instruction. The x86-64 baseline
    /// lacks it, so a branch's `count_ones` is 12 dependent instructions per level on the
    /// lookup's critical path; every x86-64 CPU since 2008 has it.
    #[cfg(all(target_arch = "x86_64", not(target_feature = "popcnt")))]
    #[target_feature(enable = "popcnt")]
    unsafe fn get_bytes_popcnt(&self, hash: u64, key: &[u8]) -> Option<&[u8]> {
        self.get_bytes_walk(hash, key)
    }

    #[inline(always)]
    fn get_bytes_walk(&self, hash: u64, key: &[u8]) -> Option<&[u8]> {
        let p = self.page_of(hash, key)?;
        let i = p.find(hash, key).ok()?;
        if !p.is_side(i) {
            return p.inline_bytes(i);
        }
        match p.view(i).value {
            Val::Bytes(b) => Some(b),
            _ => None,
        }
    }

    fn write<F: FnOnce(&mut Entry)>(&mut self, hash: u64, key: &[u8], epoch: u64, op: Op<'_, F>) {
        let change = match &mut self.root {
            Some(root) => match write_in(root, 0, hash, key, epoch, op) {
                Wrote::Done(was, now) => (was, now),
                Wrote::Grew(was, now) => {
                    // Not reached: the root indexes by hash, and a key node is never it.
                    let old = std::mem::take(root);
                    *root = Slot::Branch(Node::keyed(split_keyed(old)));
                    (was, now)
                }
                Wrote::Split { was, now, found, placed } => {
                    // The root page becomes a branch.
                    let old = std::mem::take(root);
                    *root = make_slot(with_placed(&old, hash, found, &placed), 0);
                    (was, now)
                }
            },
            None => {
                let placed = resolve(op, key, None, epoch);
                let item = Item::of_placed(hash, &placed);
                let now = item_live(&item);
                self.root = Some(make_slot(vec![item], 0));
                (false, now)
            }
        };
        self.note_liveness(change);
    }

    /// Sets `key`'s value to `value` in epoch `epoch` (stamping it, and keeping in `prev`
    /// what it was before the epoch's first write). Every node and page on the path is
    /// made unique (copy-on-write) and has its stamp bound raised to `epoch`. A value of the
    /// same size as the old one is written over it in place: no allocation when nothing
    /// shares the page.
    pub fn put(&mut self, hash: u64, key: &[u8], epoch: u64, value: &[u8]) {
        self.write(hash, key, epoch, Op::<fn(&mut Entry)>::Put(value));
    }

    /// Sets `key`'s value to `value` (a tombstone, list or map too), as [`Trie::put`]. The
    /// old value is dropped, never copied.
    pub fn set(&mut self, hash: u64, key: &[u8], epoch: u64, value: Value) {
        self.write(hash, key, epoch, Op::<fn(&mut Entry)>::Set(value));
    }

    /// Changes `key`'s entry through `f`, which gets it with its old stamps (a fresh
    /// tombstone stamped `epoch` when absent) and is expected to [`Entry::touch`] it. A list
    /// or map is changed where it is (copied first only if a snapshot shares it).
    pub fn modify(&mut self, hash: u64, key: &[u8], epoch: u64, f: impl FnOnce(&mut Entry)) {
        self.write(hash, key, epoch, Op::Modify(f));
    }

    /// A trie holding `entries` (`(hash, entry)`), which must be in strictly ascending
    /// `(hash, key)` order; borrowed bytes get stamp `stamp` and no `prev`. Built bottom-up:
    /// each node and page is allocated once, at its final size, and no path is copied;
    /// pages are filled in order up to [`PAGE_ENTRIES`] (a position's entries are not split
    /// between pages).
    pub fn from_sorted(entries: Vec<(u64, Loaded<'_>)>, stamp: u64) -> Trie {
        debug_assert!(entries.windows(2).all(|w| (w[0].0, w[0].1.key()) < (w[1].0, w[1].1.key())));
        if entries.is_empty() {
            return Trie::default();
        }
        let mut live = 0u64;
        let mut last_tomb = 0;
        let items: Vec<Item<'_>> = entries
            .into_iter()
            .map(|(hash, l)| match l {
                Loaded::Bytes { key, value } => {
                    live += 1;
                    Item { hash, stamp, prev: Prev::NEW, key, body: Body::Bytes(value) }
                }
                Loaded::Entry(e) => {
                    live += u64::from(e.is_live());
                    // Tombstones, or maps (which may hold some), are conservatively as new
                    // as `stamp`.
                    if matches!(e.value, Value::Tomb | Value::Map(_)) {
                        last_tomb = stamp;
                    }
                    Item { hash, stamp: e.stamp, prev: e.prev, key: &[], body: Body::Side(Arc::new(e)) }
                }
            })
            .collect();
        Trie { root: Some(make_slot(items, 0)), live, last_tomb }
    }

    /// True when the trie holds no slot at all, not even a tombstone.
    pub fn is_blank(&self) -> bool {
        self.root.is_none()
    }

    /// Physically removes `key`'s entry. Returns whether it was there.
    #[cfg(test)]
    pub fn remove(&mut self, hash: u64, key: &[u8]) -> bool {
        // A miss copies nothing.
        let Some(was) = self.get(hash, key).map(|e| e.is_live()) else { return false };
        self.remove_found(hash, key, was);
        true
    }

    /// [`Trie::remove`] of a key the caller has just found (`was_live`: whether its entry
    /// is live), without looking it up again.
    pub fn remove_found(&mut self, hash: u64, key: &[u8], was_live: bool) {
        let Some(root) = self.root.as_mut() else { return };
        remove_in(root, 0, hash, key);
        if root.is_empty() {
            self.root = None;
        }
        if was_live {
            self.live -= 1;
        }
    }

    /// Visits every entry (tombstones included) in `(hash, key)` order.
    ///
    /// Large tries are walked in batches: the walk collects up to [`WALK_BATCH`] pages
    /// (without touching them), then hands their entries to `f` while prefetching the
    /// pages [`PREFETCH_AHEAD`] steps ahead: a caller that copies each value (encoding a
    /// checkpoint) otherwise waits for each page's first cache misses one after another.
    pub fn for_each<'a>(&'a self, f: &mut impl FnMut(View<'a>)) {
        self.walk_pages(None, &mut |p| {
            for (_, v) in p.walk() {
                f(v);
            }
        });
    }

    /// Visits, in order, every entry whose stamp is greater than `since`, skipping
    /// subtrees and pages that hold none. Batched and prefetched like [`Trie::for_each`].
    pub fn for_each_since<'a>(&'a self, since: u64, f: &mut impl FnMut(View<'a>)) {
        self.walk_pages(Some(since), &mut |p| {
            for (_, v) in p.walk() {
                if v.stamp > since {
                    f(v);
                }
            }
        });
    }

    /// Calls `f` on every page whose stamp bound is above `since`, in order, prefetched.
    fn walk_pages<'a>(&'a self, since: Option<u64>, f: &mut impl FnMut(&'a Page)) {
        let Some(root) = &self.root else { return };
        if self.live < SMALL_TRIE {
            return visit_pages(root, since, f);
        }
        let mut batch: Vec<&'a Page> = Vec::with_capacity(WALK_BATCH);
        let mut drain = |batch: &mut Vec<&'a Page>| {
            for p in batch.iter().take(PREFETCH_AHEAD) {
                prefetch_page(p, since.is_none());
            }
            for (i, p) in batch.iter().enumerate() {
                if let Some(ahead) = batch.get(i + PREFETCH_AHEAD) {
                    prefetch_page(ahead, since.is_none());
                }
                f(p);
            }
            batch.clear();
        };
        visit_pages(root, since, &mut |p| {
            batch.push(p);
            if batch.len() == WALK_BATCH {
                drain(&mut batch);
            }
        });
        drain(&mut batch);
    }

    /// Visits in `(hash, key)` order the entries (tombstones included) that come after
    /// `after` (all of them when `None`), until `f` returns false. Subtrees wholly before
    /// `after` are skipped from the hash bits without being loaded, so resuming a walk
    /// costs one path, not the entries before it. Returns whether the walk reached the end.
    pub fn visit_after(
        &self,
        after: Option<(u64, &[u8])>,
        f: &mut impl FnMut(u64, View<'_>) -> bool,
    ) -> bool {
        self.root.as_ref().is_none_or(|root| visit_after_in(root, 0, after, f))
    }

    /// An iterator over all entries, tombstones included, in `(hash, key)` order.
    pub fn iter(&self) -> TrieIter<'_> {
        let mut it = TrieIter { stack: Vec::with_capacity(MAX_DEPTH as usize + 1), page: None };
        match &self.root {
            Some(Slot::Page(_, p)) => it.page = Some(p.walk()),
            Some(Slot::Branch(n)) => it.stack.push(n.slots.iter()),
            None => {}
        }
        it
    }

    /// Applies `f` to every entry with `stamp > since` for which `needs` holds, and removes
    /// the entries for which `f` returns false. Nodes and pages are copied only on the
    /// paths where some entry needs it (`needs` is a read-only pre-check).
    pub fn retain_since(
        &mut self,
        since: u64,
        needs: &impl Fn(View<'_>) -> bool,
        f: &mut impl FnMut(&mut Entry) -> bool,
    ) {
        let Some(root) = self.root.as_mut() else { return };
        let mut live_delta: i64 = 0;
        retain_in(root, since, needs, f, &mut live_delta);
        if root.is_empty() {
            self.root = None;
        }
        self.live = self.live.saturating_add_signed(live_delta);
    }
}

/// Calls `f` on the pages below `slot` whose stamp bound is above `since` (all when
/// `None`), in order.
fn visit_pages<'a>(slot: &'a Slot, since: Option<u64>, f: &mut impl FnMut(&'a Page)) {
    match slot {
        Slot::Page(max, p) => {
            if since.is_none_or(|s| *max > s) {
                f(p)
            }
        }
        Slot::Branch(n) => {
            if since.is_none_or(|s| n.max_stamp > s) {
                for s in n.slots.iter() {
                    visit_pages(s, since, f);
                }
            }
        }
    }
}

/// See [`Trie::visit_after`]. A branch's children cover ranges of the hash's index at
/// `depth` in ascending order (a branch child exactly one); pages are sorted.
fn visit_after_in(
    slot: &Slot,
    depth: u32,
    after: Option<(u64, &[u8])>,
    f: &mut impl FnMut(u64, View<'_>) -> bool,
) -> bool {
    match slot {
        Slot::Page(_, p) => {
            for (i, v) in p.walk() {
                let h = p.hash(i);
                if let Some((ah, ak)) = after
                    && (h < ah || (h == ah && v.key <= ak))
                {
                    continue;
                }
                if !f(h, v) {
                    return false;
                }
            }
            true
        }
        Slot::Branch(node) if node.is_keyed() => {
            // Children after the one holding `after` come wholly after it.
            let from = after.map_or(0, |(h, k)| key_pos(node, h, k));
            for (i, s) in node.slots.iter().enumerate().skip(from) {
                let sub = if i == from { after } else { None };
                if !visit_after_in(s, depth + 1, sub, f) {
                    return false;
                }
            }
            true
        }
        Slot::Branch(node) => {
            let target = after.map(|(h, _)| index(h, depth));
            for (start, end, s) in node.children() {
                let sub = match target {
                    Some(t) if end <= t => continue,
                    Some(t) if start > t => None,
                    _ => after,
                };
                if !visit_after_in(s, depth + 1, sub, f) {
                    return false;
                }
            }
            true
        }
    }
}

/// Tries with fewer live entries than this (most nested maps) are walked directly.
const SMALL_TRIE: u64 = 64;
/// Pages collected per batch of a prefetching walk.
const WALK_BATCH: usize = 128;
/// How many pages ahead of the visited one a page is prefetched.
const PREFETCH_AHEAD: usize = 4;

/// Prefetches a page: all of it for a full walk (`whole`), which copies every value; its
/// first four cache lines (the header arrays, where the stamps are) for a walk since an
/// epoch, which reads the stamps and only the few entries above it. Measured on 10^6
/// entries of 16-byte keys and 100-byte values (~1.1 KiB pages): a full walk that encodes
/// every record took 67-73 ms on one thread with the first four lines, 43-46 ms with the
/// whole page (the hardware prefetcher does not run ahead across a page's lines soon
/// enough: each page's data missed one line after another).
#[inline]
fn prefetch_page(p: &Page, whole: bool) {
    let at = p.first_line();
    let len = if whole { p.byte_len() } else { 256 };
    for off in (0..len).step_by(64) {
        prefetch(at.wrapping_add(off));
    }
}

/// A hint to load the cache line holding `p` (a no-op off x86_64).
#[inline(always)]
fn prefetch(p: *const u8) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: `_mm_prefetch` requires SSE, which is part of the x86_64 baseline every
    // x86_64 target enables. A prefetch is a hint with no architectural memory access: it
    // cannot fault or read anything the program can observe, whatever the address, so
    // any pointer (even dangling or past an allocation's end) is fine. Measured to halve
    // a checkpoint's walk-and-encode time (see `Trie::for_each`).
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(p.cast());
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}

fn any_needs(slot: &Slot, since: u64, needs: &impl Fn(View<'_>) -> bool) -> bool {
    slot.max_stamp() > since
        && match slot {
            Slot::Page(_, p) => p.walk().any(|(_, v)| v.stamp > since && needs(v)),
            Slot::Branch(n) => n.slots.iter().any(|s| any_needs(s, since, needs)),
        }
}

fn retain_in(
    slot: &mut Slot,
    since: u64,
    needs: &impl Fn(View<'_>) -> bool,
    f: &mut impl FnMut(&mut Entry) -> bool,
    live_delta: &mut i64,
) {
    if !any_needs(slot, since, needs) {
        return;
    }
    match slot {
        Slot::Branch(node) => {
            let mut visited = Vec::new();
            for (i, s) in Arc::make_mut(&mut node.slots).iter_mut().enumerate() {
                if s.max_stamp() > since {
                    retain_in(s, since, needs, f, live_delta);
                    visited.push(i);
                }
            }
            // From the right, so a merge leaves the positions to its left in place.
            if node.is_keyed() {
                for &i in visited.iter().rev() {
                    tidy_keyed(node, i);
                }
                collapse_keyed(slot);
                return;
            }
            for &i in visited.iter().rev() {
                merge_around(node, i);
            }
            compact(slot);
        }
        Slot::Page(max, page) => {
            let n = page.len();
            // The entries `f` sees, from one walk (a bucket page holds many): a side entry
            // by its position in the side array, an inline one copied out.
            enum Hit {
                Side(usize),
                Inline(Entry),
            }
            let mut hits: Vec<(usize, bool, Hit)> = Vec::new();
            let mut walk = page.walk();
            while let Some(step) = walk.step() {
                let v = step.view;
                if v.stamp > since && needs(v) {
                    let hit = match step.side {
                        Some((si, _)) => Hit::Side(si),
                        None => Hit::Inline(page::owned_of(v)),
                    };
                    hits.push((step.i, v.is_live(), hit));
                }
            }
            let mut keep = vec![true; n];
            let mut changed: Vec<(usize, Placed)> = Vec::new();
            for (i, was, hit) in hits {
                let (kept, now) = match hit {
                    Hit::Side(si) => page.modify_side_at(i, si, |e| {
                        let k = f(e);
                        (k, k && e.is_live())
                    }),
                    Hit::Inline(mut e) => {
                        let k = f(&mut e);
                        let now = k && e.is_live();
                        if k {
                            changed.push((i, page::place(e)));
                        }
                        (k, now)
                    }
                };
                *live_delta += i64::from(now) - i64::from(was);
                keep[i] = kept;
            }
            if keep.iter().all(|&k| k) && changed.is_empty() {
                return;
            }
            let mut items = page.items();
            for (i, p) in &changed {
                items[*i] = Item::of_placed(page.hash(*i), p);
            }
            let items: Vec<Item<'_>> =
                items.into_iter().zip(&keep).filter(|(_, k)| **k).map(|(it, _)| it).collect();
            let fresh = if items.is_empty() { Slot::default() } else { Slot::Page(*max, page::build(items)) };
            *slot = fresh;
        }
    }
}

/// Iterator over a trie's entries in `(hash, key)` order.
pub(crate) struct TrieIter<'a> {
    stack: Vec<std::slice::Iter<'a, Slot>>,
    /// The page being walked.
    page: Option<page::Walk<'a>>,
}

impl<'a> Iterator for TrieIter<'a> {
    type Item = View<'a>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            if let Some(w) = &mut self.page {
                if let Some((_, v)) = w.next() {
                    return Some(v);
                }
                self.page = None;
            }
            let top = self.stack.last_mut()?;
            match top.next() {
                None => {
                    self.stack.pop();
                }
                Some(Slot::Page(_, p)) => self.page = Some(p.walk()),
                Some(Slot::Branch(c)) => self.stack.push(c.slots.iter()),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn put(t: &mut Trie, hash: u64, key: &[u8], stamp: u64) {
        t.put(hash, key, stamp, key);
    }

    fn keys(t: &Trie) -> Vec<(u64, Vec<u8>)> {
        let mut out = Vec::new();
        t.visit_after(None, &mut |h, e| {
            out.push((h, e.key.to_vec()));
            true
        });
        let by_iter: Vec<Vec<u8>> = t.iter().map(|e| e.key.to_vec()).collect();
        assert_eq!(by_iter, out.iter().map(|(_, k)| k.clone()).collect::<Vec<_>>());
        let mut by_walk = Vec::new();
        t.for_each(&mut |e| by_walk.push(e.key.to_vec()));
        assert_eq!(by_iter, by_walk);
        out
    }

    #[test]
    fn full_hash_collisions_land_in_sorted_buckets() {
        let mut t = Trie::default();
        // Same top 60 bits: only a bucket at MAX_DEPTH can tell them apart.
        let h = 0xABCD_EF01_2345_6780u64;
        for (i, k) in [&b"c"[..], b"a", b"b"].iter().enumerate() {
            put(&mut t, h | (i as u64 & 1), k, 1);
        }
        put(&mut t, 0x1, b"z", 1);
        assert_eq!(t.len(), 4);
        let order = keys(&t);
        let mut sorted = order.clone();
        sorted.sort();
        assert_eq!(order, sorted, "iteration must be in (hash, key) order");
        assert!(t.get(h, b"c").is_some());
        assert!(t.get(h | 1, b"a").is_some());
        assert!(t.get(h, b"a").is_none());
        assert!(t.remove(h | 1, b"a"));
        assert!(t.remove(h, b"c"));
        assert!(t.remove(h, b"b"));
        assert_eq!(keys(&t), vec![(1, b"z".to_vec())]);
        assert!(t.remove(1, b"z"));
        assert!(t.root.is_none());
    }

    /// A bucket holding more than a page's worth of long values (all of one hash) keeps
    /// every entry.
    #[test]
    fn a_bucket_of_long_values_keeps_every_entry() {
        let mut t = Trie::default();
        let value = vec![7u8; 3000];
        for i in 0..100u32 {
            t.put(42, &i.to_be_bytes(), 1, &value);
        }
        assert_eq!(t.len(), 100);
        for i in 0..100u32 {
            assert_eq!(
                t.get(42, &i.to_be_bytes()).map(|e| e.value).and_then(|v| match v {
                    Val::Bytes(b) => Some(b.len()),
                    _ => None,
                }),
                Some(3000)
            );
        }
        assert_eq!(keys(&t).len(), 100);
        for i in 0..100u32 {
            assert!(t.remove(42, &i.to_be_bytes()));
        }
        assert!(t.is_blank());
    }

    /// A bucket (every key of one hash) mixing inline values, empty values, tombstones and
    /// side entries (values too long to inline) reads back exactly by lookup and by every
    /// walk, before and after removals, overwrites under a snapshot and a purge: a B-tree
    /// of pages under key nodes at every step.
    #[test]
    fn a_bucket_of_mixed_entries_reads_back_by_every_path() {
        use std::collections::BTreeMap;
        let mut t = Trie::default();
        let mut model: BTreeMap<Vec<u8>, Option<Vec<u8>>> = BTreeMap::new();
        for i in 0..300u32 {
            let key = i.to_be_bytes().to_vec();
            if i % 11 == 5 {
                t.set(42, &key, 1, Value::Tomb);
                model.insert(key, None);
                continue;
            }
            let len = match i % 7 {
                0 => 4000,
                1 => 0,
                _ => (i as usize * 37) % 900,
            };
            let value = vec![i as u8; len];
            t.put(42, &key, 1, &value);
            model.insert(key, Some(value));
        }
        let check = |t: &Trie, model: &BTreeMap<Vec<u8>, Option<Vec<u8>>>| {
            let want: Vec<(Vec<u8>, Option<Vec<u8>>)> =
                model.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
            let own = |e: View<'_>| {
                let v = match e.value {
                    Val::Bytes(b) => Some(b.to_vec()),
                    Val::Tomb => None,
                    _ => panic!("a value state holds bytes or tombstones"),
                };
                (e.key.to_vec(), v)
            };
            for (k, v) in &want {
                assert_eq!(t.get(42, k).map(own), Some((k.clone(), v.clone())), "lookup of {k:?}");
                assert_eq!(t.get_bytes(42, k), v.as_deref(), "get_bytes of {k:?}");
            }
            assert_eq!(t.iter().map(own).collect::<Vec<_>>(), want, "iter");
            let mut got = Vec::new();
            t.for_each(&mut |e| got.push(own(e)));
            assert_eq!(got, want, "for_each");
            let mut got = Vec::new();
            t.for_each_since(0, &mut |e| got.push(own(e)));
            assert_eq!(got, want, "for_each_since");
            let mut got = Vec::new();
            t.visit_after(None, &mut |_, e| {
                got.push(own(e));
                true
            });
            assert_eq!(got, want, "visit_after");
        };
        check(&t, &model);
        let (pages, _) = check_trie(&t);
        assert!(pages >= 300 / PAGE_ENTRIES, "{pages} pages");
        assert!(t.root.as_ref().map_or(0, key_levels) >= 1, "the bucket is a tree of key nodes");
        for i in (0..300u32).step_by(3) {
            let key = i.to_be_bytes().to_vec();
            assert!(t.remove(42, &key));
            model.remove(&key);
        }
        check(&t, &model);
        check_trie(&t);
        // Overwrites in epoch 2, side entries among them (each keeps its place or moves
        // inline), of the same, another and a long size: only they are newer than 1.
        let snap = t.clone();
        let before: Vec<(Vec<u8>, Option<Vec<u8>>)> =
            model.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
        let mut newer = Vec::new();
        for (n, (k, v)) in before.iter().enumerate().filter(|(n, _)| n % 4 == 1) {
            let len = match n % 3 {
                0 => v.as_ref().map_or(5, Vec::len),
                1 => 4500,
                _ => 7,
            };
            let value = vec![n as u8; len];
            t.put(42, k, 2, &value);
            model.insert(k.clone(), Some(value));
            newer.push(k.clone());
        }
        check(&t, &model);
        let mut since = Vec::new();
        t.for_each_since(1, &mut |e| since.push(e.key.to_vec()));
        assert_eq!(since, newer, "exactly the overwritten entries are newer than epoch 1");
        let again: Vec<Vec<u8>> = snap.iter().map(|e| e.key.to_vec()).collect();
        assert_eq!(again, before.iter().map(|(k, _)| k.clone()).collect::<Vec<_>>());
        for (k, v) in &before {
            let got = snap.get(42, k).map(|e| match e.value {
                Val::Bytes(b) => Some(b.to_vec()),
                _ => None,
            });
            assert_eq!(got, Some(v.clone()), "the clone's {k:?}");
        }
        // Deletes under a snapshot (tombstones) of some of them, side entries among them.
        for k in newer.iter().step_by(2) {
            t.set(42, k, 3, Value::Tomb);
            model.insert(k.clone(), None);
        }
        check(&t, &model);
        let mut since = Vec::new();
        t.for_each_since(2, &mut |e| since.push(e.key.to_vec()));
        assert_eq!(since, newer.iter().step_by(2).cloned().collect::<Vec<_>>());
        // A purge of the tombstones (what confirming a checkpoint does) in one walk.
        check_trie(&t);
        t.retain_since(0, &|e| matches!(e.value, Val::Tomb), &mut |e| !matches!(e.value, Value::Tomb));
        model.retain(|_, v| v.is_some());
        check(&t, &model);
        check_trie(&t);
    }

    /// A large bucket takes overwrites and deletes with the stamps an increment needs.
    #[test]
    fn a_large_bucket_takes_overwrites_and_deletes() {
        let mut t = Trie::default();
        let keys: Vec<[u8; 4]> = (0..700u32).map(|i| i.to_be_bytes()).collect();
        for k in &keys {
            t.put(42, k, 1, &[1u8; 100]);
        }
        check_trie(&t);
        let since = |t: &Trie, epoch| {
            let mut out = Vec::new();
            t.for_each_since(epoch, &mut |e| out.push((e.key.to_vec(), e.stamp, e.prev)));
            out
        };
        for (n, k) in keys.iter().enumerate() {
            t.put(42, k, 2, &[n as u8; 100]);
        }
        for (n, k) in keys.iter().enumerate() {
            assert_eq!(t.get_bytes(42, k), Some(&[n as u8; 100][..]));
        }
        let want: Vec<_> = keys.iter().map(|k| (k.to_vec(), 2, Prev::new(1, true))).collect();
        assert_eq!(since(&t, 1), want, "every entry stamped 2, its prev live at 1");
        for k in &keys {
            t.set(42, k, 3, Value::Tomb);
        }
        for k in &keys {
            assert!(matches!(t.get(42, k).map(|e| e.value), Some(Val::Tomb)), "{k:?} deleted");
        }
        let want: Vec<_> = keys.iter().map(|k| (k.to_vec(), 3, Prev::new(2, true))).collect();
        assert_eq!(since(&t, 2), want, "every entry stamped 3, its prev live at 2");
        assert_eq!(t.len(), 0);
    }

    /// A walk resumed after any entry (or after a position between entries) visits exactly
    /// the entries after it, in order, through collisions down to the buckets.
    #[test]
    fn visit_after_resumes_exactly_after_a_position() {
        let mut t = Trie::default();
        let mut hashes: Vec<u64> = (0..3000u64).map(|i| i.wrapping_mul(0x9E37_79B9_7F4A_7C15)).collect();
        hashes.extend([0xABCD_EF01_2345_6780, 0xABCD_EF01_2345_6781, 0xABCD_EF01_2345_6000, 0, 7, u64::MAX]);
        for (i, &h) in hashes.iter().enumerate() {
            put(&mut t, h, &(i as u64).to_le_bytes(), 1);
        }
        // Keys of equal hash: a bucket of one full hash, ordered by key.
        for k in [&b"b"[..], b"a", b"ab"] {
            put(&mut t, 0xABCD_EF01_2345_6780, k, 1);
        }
        let all = keys(&t);
        let walk = |after: Option<(u64, &[u8])>, limit: usize| {
            let mut out = Vec::new();
            let done = t.visit_after(after, &mut |h, e| {
                if out.len() == limit {
                    return false;
                }
                out.push((h, e.key.to_vec()));
                true
            });
            (out, done)
        };
        assert_eq!(walk(None, usize::MAX), (all.clone(), true));
        let after = |h: u64, k: &[u8]| -> Vec<(u64, Vec<u8>)> {
            all.iter().filter(|(h2, k2)| (*h2, &k2[..]) > (h, k)).cloned().collect()
        };
        for (i, (h, k)) in all.iter().enumerate() {
            assert_eq!(walk(Some((*h, k)), usize::MAX), (all[i + 1..].to_vec(), true), "after entry {i}");
            // A position between entries: the empty key sorts before every key of its hash.
            assert_eq!(walk(Some((*h, &[])), usize::MAX), (after(*h, &[]), true), "before entry {i}");
            // A hash no entry has.
            let h1 = h.wrapping_add(1);
            assert_eq!(walk(Some((h1, &[])), usize::MAX), (after(h1, &[]), true), "past entry {i}");
        }
        // Stopping early reports that the end was not reached; resuming continues.
        let (first, done) = walk(None, 100);
        assert!(!done);
        let last = first.last().unwrap();
        let (rest, done) = walk(Some((last.0, &last.1)), usize::MAX);
        assert!(done);
        assert_eq!([first, rest].concat(), all);
    }

    #[test]
    fn slots_stay_small() {
        // Memory per entry and cache lines per lookup depend on this.
        assert!(size_of::<Slot>() <= 40, "{}", size_of::<Slot>());
    }

    /// Checks the structure below `slot` (whose branches index at `depth`): children cover
    /// disjoint ranges in order, a branch child exactly one position, every entry sits in
    /// its child's range, pages hold at most `PAGE_ENTRIES`, key nodes sit past the hash's
    /// bits with 1 to `KEY_FANOUT` children of one 60-bit hash prefix, stamp bounds hold
    /// (`bound` is the parent's). Returns (pages, entries).
    fn check(slot: &Slot, depth: u32, bound: u64) -> (usize, usize) {
        assert!(slot.max_stamp() <= bound, "a child's stamp bound exceeds its parent's");
        match slot {
            Slot::Page(max, p) => {
                assert!(p.len() > 0, "empty page");
                assert!(p.len() <= PAGE_ENTRIES, "{} entries at depth {depth}", p.len());
                for i in 0..p.len() {
                    assert!(p.stamp(i) <= *max, "page stamp bound");
                }
                (1, p.len())
            }
            Slot::Branch(n) if n.is_keyed() => {
                assert!(depth >= MAX_DEPTH, "a key node at depth {depth}");
                assert!((1..=KEY_FANOUT).contains(&n.slots.len()), "{} children", n.slots.len());
                assert_eq!(n.starts, below(n.slots.len() as u32));
                let mut hashes = Vec::new();
                slot.visit_hashes(&mut hashes);
                assert!(hashes.iter().all(|&h| h >> 4 == hashes[0] >> 4), "a key node of one hash prefix");
                let (mut pages, mut entries) = (0, 0);
                for c in n.slots.iter() {
                    let (p, e) = check(c, depth + 1, n.max_stamp);
                    pages += p;
                    entries += e;
                }
                (pages, entries)
            }
            Slot::Branch(n) => {
                assert!(depth < MAX_DEPTH);
                assert!(!n.slots.is_empty(), "empty branch");
                assert_eq!(n.starts & !n.covered, 0, "a start not covered");
                assert_eq!(n.starts.count_ones() as usize, n.slots.len());
                let (mut pages, mut entries) = (0, 0);
                let mut prev_end = 0;
                for (start, end, c) in n.children() {
                    assert!(start >= prev_end && end > start);
                    prev_end = end;
                    let mut hashes = Vec::new();
                    c.visit_hashes(&mut hashes);
                    assert!(
                        hashes.iter().all(|&h| (start..end).contains(&index(h, depth))),
                        "entry out of range"
                    );
                    if let Slot::Branch(_) = c {
                        assert_eq!(end - start, 1, "a branch child covers one position");
                    }
                    let (p, e) = check(c, depth + 1, n.max_stamp);
                    pages += p;
                    entries += e;
                }
                (pages, entries)
            }
        }
    }

    impl Slot {
        fn visit_hashes(&self, out: &mut Vec<u64>) {
            match self {
                Slot::Page(_, p) => out.extend((0..p.len()).map(|i| p.hash(i))),
                Slot::Branch(n) => n.slots.iter().for_each(|c| c.visit_hashes(out)),
            }
        }
    }

    /// [`check`] of a whole trie: (pages, entries).
    fn check_trie(t: &Trie) -> (usize, usize) {
        let Some(root) = &t.root else { return (0, 0) };
        let all = keys(t);
        assert!(all.windows(2).all(|w| w[0] < w[1]), "entries out of (hash, key) order");
        check(root, 0, u64::MAX)
    }

    /// The key-node levels on the deepest path below `slot`.
    fn key_levels(slot: &Slot) -> usize {
        match slot {
            Slot::Page(..) => 0,
            Slot::Branch(n) => usize::from(n.is_keyed()) + n.slots.iter().map(key_levels).max().unwrap_or(0),
        }
    }

    fn xorshift(x: &mut u64) -> u64 {
        *x ^= *x << 13;
        *x ^= *x >> 7;
        *x ^= *x << 17;
        *x
    }

    #[test]
    fn from_sorted_builds_a_valid_trie_of_full_pages() {
        let mut t = Trie::default();
        let mut hashes: Vec<u64> = (0..5000u64).map(|i| i.wrapping_mul(0x9E37_79B9_7F4A_7C15)).collect();
        // Collisions down to the bucket level, and shared prefixes of every length.
        hashes.extend([0xABCD_EF01_2345_6780, 0xABCD_EF01_2345_6781, 0xABCD_EF01_2345_6000, 7, 8]);
        hashes.extend((0..40u64).map(|i| 0x1234_5678_9ABC_D000 | i));
        for (i, &h) in hashes.iter().enumerate() {
            put(&mut t, h, &(i as u64).to_le_bytes(), 3);
            if i % 3 == 0 {
                put(&mut t, h, b"same hash", 3);
            }
        }
        let all = keys(&t);
        check_trie(&t);
        let sorted: Vec<(u64, Loaded<'_>)> =
            all.iter().map(|(h, k)| (*h, Loaded::Bytes { key: k, value: k })).collect();
        let built = Trie::from_sorted(sorted, 3);
        assert_eq!(built.len(), t.len());
        assert_eq!(keys(&built), all);
        let (pages, entries) = check_trie(&built);
        assert_eq!(entries, all.len());
        // Packed in order, pages are nearly full (a position's entries are not split).
        assert!(entries as f64 / pages as f64 >= 12.0, "{entries} entries in {pages} pages");
        let Some(Slot::Branch(root)) = &built.root else { panic!("a branch at the root") };
        assert!(root.slots.iter().any(|c| matches!(c, Slot::Branch(_))), "the test must reach branches");
        assert!(Trie::from_sorted(Vec::new(), 1).is_blank());
    }

    #[test]
    fn pages_stay_dense_at_every_size() {
        // With a branch of 32 positions for every page that outgrew 16 entries, a trie of
        // 20k keys held ~0.6 entries per page (each of ~1k depth-2 prefixes ~20 keys, split
        // 32 ways); split over ranges, pages hold between ~8 and 16 at any size.
        let mut x = 0x2545_F491_4F6C_DD1Du64;
        for n in [100u64, 2_000, 20_000, 60_000] {
            let mut t = Trie::default();
            for i in 0..n {
                t.put(xorshift(&mut x), &i.to_le_bytes(), 1, b"v");
            }
            let (pages, entries) = check_trie(&t);
            assert_eq!(entries as u64, n);
            let fill = entries as f64 / pages as f64;
            assert!(fill >= 9.0, "{n} keys: {fill:.2} entries per page");
        }
    }

    #[test]
    fn a_trie_that_lost_most_keys_keeps_few_pages() {
        // Without merges a page kept its range whatever it lost: 90% of 20k keys removed
        // left ~1.2 entries per page. The same holds inside a bucket (keys of one hash,
        // pages under key nodes), where `tidy_keyed` merges.
        for (by_retain, one_hash) in [(false, false), (true, false), (false, true), (true, true)] {
            let mut x = 0x2545_F491_4F6C_DD1Du64;
            let mut t = Trie::default();
            let hashes: Vec<u64> = (0..20_000)
                .map(|_| if one_hash { 0xABCD_EF01_2345_6780 } else { xorshift(&mut x) })
                .collect();
            for (i, &h) in hashes.iter().enumerate() {
                t.put(h, &(i as u64).to_le_bytes(), 1, b"v");
            }
            let keep = |i: u64| i % 10 == 3;
            if by_retain {
                t.retain_since(0, &|_| true, &mut |e| {
                    keep(u64::from_le_bytes(e.key[..8].try_into().unwrap()))
                });
            } else {
                for (i, &h) in hashes.iter().enumerate() {
                    if !keep(i as u64) {
                        assert!(t.remove(h, &(i as u64).to_le_bytes()));
                    }
                }
            }
            let (pages, entries) = check_trie(&t);
            assert_eq!(entries, 2000);
            assert_eq!(t.len(), 2000);
            let fill = entries as f64 / pages as f64;
            assert!(fill >= 3.0, "retain {by_retain}, one hash {one_hash}: {fill:.2} entries per page");
            if one_hash {
                assert!(t.root.as_ref().map_or(0, key_levels) >= 1, "the test must reach key nodes");
            }
            for (i, &h) in hashes.iter().enumerate() {
                assert_eq!(t.get(h, &(i as u64).to_le_bytes()).is_some(), keep(i as u64));
            }
        }
    }

    type Model = std::collections::BTreeMap<(u64, Vec<u8>), Vec<u8>>;
    type ModelEntry = ((u64, Vec<u8>), Vec<u8>);

    /// Removes all but about one in `keep` of `model`'s keys from `t` and the model, checking
    /// the structure every `check_every` removals and at the end.
    fn remove_most(t: &mut Trie, model: &mut Model, x: &mut u64, keep: u64, check_every: usize) {
        let doomed: Vec<(u64, Vec<u8>)> =
            model.keys().filter(|_| !xorshift(x).is_multiple_of(keep)).cloned().collect();
        for (n, (h, k)) in doomed.into_iter().enumerate() {
            assert!(t.remove(h, &k));
            model.remove(&(h, k));
            if n % check_every == 0 {
                check_trie(t);
            }
        }
        check_trie(t);
    }

    /// `trie` holds exactly `m` (bytes values): by iteration in order, by count, and by
    /// lookup (`get` and `get_bytes`).
    fn assert_holds(trie: &Trie, m: &Model, what: &str) {
        let got: Vec<ModelEntry> = trie
            .iter()
            .zip(keys(trie))
            .map(|(v, (h, k))| match v.value {
                Val::Bytes(b) => ((h, k), b.to_vec()),
                _ => panic!("not bytes"),
            })
            .collect();
        let want: Vec<ModelEntry> = m.clone().into_iter().collect();
        assert_eq!(got, want, "{what}");
        assert_eq!(trie.len(), m.len() as u64);
        for ((h, k), v) in m {
            assert!(matches!(trie.get(*h, k).map(|e| e.value), Some(Val::Bytes(b)) if b == &v[..]));
            assert_eq!(trie.get_bytes(*h, k), Some(&v[..]));
        }
    }

    /// A walk of `trie` resumed after `(at, key)`, held or not, yields exactly the next
    /// `limit` keys of `m`.
    fn assert_resumes(trie: &Trie, m: &Model, at: u64, key: &[u8], limit: usize) {
        let mut got = Vec::new();
        trie.visit_after(Some((at, key)), &mut |h, e| {
            got.push((h, e.key.to_vec()));
            got.len() < limit
        });
        let want: Vec<(u64, Vec<u8>)> = m
            .range((std::ops::Bound::Excluded((at, key.to_vec())), std::ops::Bound::Unbounded))
            .take(limit)
            .map(|(hk, _)| hk.clone())
            .collect();
        assert_eq!(got, want);
    }

    #[test]
    fn random_writes_and_removals_match_a_model_and_keep_the_structure() {
        use std::collections::BTreeMap;
        let mut x = 0x9E37_79B9_7F4A_7C15u64;
        for round in 0..6u64 {
            let mut t = Trie::default();
            let mut model: Model = BTreeMap::new();
            let mut frozen: Vec<(Trie, Model)> = Vec::new();
            // Few distinct hashes in some rounds: shared prefixes down to the buckets.
            let spread = [u64::MAX, 0xFFFF, 0x3FF, 0x1F, u64::MAX, 0xFFF_FFFF][round as usize];
            for step in 0..6000u64 {
                let r = xorshift(&mut x);
                let h = (r & spread).wrapping_mul(0x9E37_79B9_7F4A_7C15) | (r >> 60);
                let key = (r % 3).to_le_bytes().to_vec();
                let epoch = 1 + step / 500;
                if r.is_multiple_of(5) {
                    let had = model.remove(&(h, key.clone())).is_some();
                    assert_eq!(t.remove(h, &key), had);
                } else {
                    let value = vec![(r >> 8) as u8; (r % 40) as usize];
                    t.put(h, &key, epoch, &value);
                    model.insert((h, key), value);
                }
                if step % 1000 == 999 {
                    frozen.push((t.clone(), model.clone()));
                    check_trie(&t);
                }
            }
            check_trie(&t);
            // Most keys removed (merges), the state before held by a clone.
            frozen.push((t.clone(), model.clone()));
            remove_most(&mut t, &mut model, &mut x, 10, 97);
            for (trie, m) in frozen.iter().chain([(t, model)].iter()) {
                assert_holds(trie, m, &format!("round {round}"));
                // Resuming after a position, held or not, yields exactly what follows it.
                for _ in 0..20 {
                    let r = xorshift(&mut x);
                    // A held hash's neighbourhood, or anywhere (holes too).
                    let at = match r % 3 {
                        0 => (r & spread).wrapping_mul(0x9E37_79B9_7F4A_7C15) | (r >> 60),
                        1 => {
                            ((r & spread).wrapping_mul(0x9E37_79B9_7F4A_7C15) | (r >> 60)) ^ (1 << (r >> 58))
                        }
                        _ => xorshift(&mut x),
                    };
                    assert_resumes(trie, m, at, &(r % 3).to_le_bytes(), 50);
                }
            }
        }
    }

    /// Thousands of keys whose hashes share their top 60 bits (XXH64 lets anyone craft
    /// them) make a B-tree of pages under key nodes, not one page per bucket: every page
    /// holds at most `PAGE_ENTRIES` and the key levels stay logarithmic, through inserts in
    /// ascending and descending order (the worst for a tree that does not split upward),
    /// random writes and removals, clones held across them, purges, and the removal of
    /// nearly everything. Every clone reads back its model by lookup, walk and resumed walk.
    #[test]
    fn a_bucket_is_a_b_tree_that_matches_a_model() {
        use std::collections::BTreeMap;
        const H: u64 = 0xABCD_EF01_2345_6780;
        let hashes = [H, H | 1, H | 0xF, 0x1234];
        let mut x = 0x0123_4567_89AB_CDEFu64;
        let mut t = Trie::default();
        let mut model: Model = BTreeMap::new();
        let mut frozen: Vec<(Trie, Model)> = Vec::new();
        let key_of = |i: u64| {
            let b = (i as u32).to_be_bytes();
            b[..1 + (i % 4) as usize].to_vec()
        };
        // Ascending, then descending, runs of one hash.
        for i in 0..3000u64 {
            t.put(H, &(i as u32).to_be_bytes(), 1, &[i as u8; 20]);
            model.insert((H, (i as u32).to_be_bytes().to_vec()), vec![i as u8; 20]);
        }
        for i in (0..3000u64).rev() {
            let k = (i as u32 | 0x8000_0000).to_be_bytes();
            t.put(H | 1, &k, 1, &[i as u8; 7]);
            model.insert((H | 1, k.to_vec()), vec![i as u8; 7]);
        }
        check_trie(&t);
        assert!(t.root.as_ref().map_or(0, key_levels) >= 2, "the test must reach two key levels");
        frozen.push((t.clone(), model.clone()));
        for step in 0..20_000u64 {
            let r = xorshift(&mut x);
            let h = hashes[(r % 4) as usize];
            let key = key_of(r >> 8 & 0x3FFF);
            let epoch = 2 + step / 4000;
            if r % 5 < 2 {
                let had = model.remove(&(h, key.clone())).is_some();
                assert_eq!(t.remove(h, &key), had, "step {step}");
            } else {
                let value = vec![(r >> 30) as u8; (r >> 40) as usize % 60];
                t.put(h, &key, epoch, &value);
                model.insert((h, key), value);
            }
            if step % 4000 == 3999 {
                check_trie(&t);
                frozen.push((t.clone(), model.clone()));
            }
        }
        let levels = t.root.as_ref().map_or(0, key_levels);
        assert!(levels <= 4, "{levels} key levels for {} entries", model.len());
        // A purge (what confirming a checkpoint does) of about a third, in one walk.
        t.retain_since(0, &|e| e.key.len() == 2, &mut |e| e.key.len() != 2);
        model.retain(|(_, k), _| k.len() != 2);
        check_trie(&t);
        frozen.push((t.clone(), model.clone()));
        remove_most(&mut t, &mut model, &mut x, 50, 499);
        for (trie, m) in frozen.iter().chain([(t, model)].iter()) {
            assert_holds(trie, m, "a bucket");
            for _ in 0..50 {
                let r = xorshift(&mut x);
                let (h, k) = (hashes[(r % 4) as usize], key_of(r >> 8 & 0x3FFF));
                assert_eq!(trie.get_bytes(h, &k), m.get(&(h, k.clone())).map(|v| &v[..]));
                assert_resumes(trie, m, h, &k, 40);
            }
        }
    }

    #[test]
    fn long_keys_and_values_go_to_the_side() {
        let mut t = Trie::default();
        let all: Vec<Vec<u8>> = (0..48u8).map(|n| (0..n).map(|i| i ^ n).collect()).collect();
        for k in &all {
            // One hash for all: every comparison goes through the key bytes.
            put(&mut t, 42, k, 1);
        }
        let long = vec![1u8; 5000];
        t.put(42, &long, 1, &long);
        t.put(43, b"v", 1, &long);
        for k in &all {
            assert_eq!(t.get(42, k).unwrap().key, &k[..]);
        }
        assert_eq!(t.get(42, &long).unwrap().key, &long[..]);
        assert!(matches!(t.get(43, b"v").unwrap().value, Val::Bytes(b) if b == &long[..]));
        let mut sorted = all.clone();
        sorted.push(long.clone());
        sorted.sort();
        let mut got: Vec<(u64, Vec<u8>)> = keys(&t);
        got.pop();
        assert_eq!(got.into_iter().map(|(_, k)| k).collect::<Vec<_>>(), sorted);
        assert!(t.get(42, &[0; 30]).is_none());
    }

    #[test]
    fn prev_packs_exactly_or_conservatively() {
        for (stamp, prev) in
            [(5, Prev::NEW), (5, Prev::new(4, true)), (5, Prev::new(0, true)), (9, Prev::new(3, false))]
        {
            assert_eq!(page::decode_prev(page::encode_prev(prev, stamp), stamp), prev);
        }
        // A gap too wide for 31 bits decodes later than it was: unknown, never wrong.
        let stamp = 1u64 << 40;
        let p = page::decode_prev(page::encode_prev(Prev::new(1, true), stamp), stamp);
        assert!(p.stamp() > 1 && p.stamp() < stamp && p.live());
    }

    #[test]
    fn clones_share_until_written() {
        let mut t = Trie::default();
        for i in 0..1000u64 {
            put(&mut t, i.wrapping_mul(0x9E37_79B9_7F4A_7C15), &i.to_le_bytes(), 1);
        }
        let frozen = t.clone();
        put(&mut t, 5u64.wrapping_mul(0x9E37_79B9_7F4A_7C15), b"new", 2);
        // A same-size overwrite of a shared page writes into a copy.
        let h7 = 7u64.wrapping_mul(0x9E37_79B9_7F4A_7C15);
        t.put(h7, &7u64.to_le_bytes(), 2, b"88888888");
        assert_eq!(frozen.len(), 1000);
        assert_eq!(t.len(), 1001);
        assert!(frozen.get(5u64.wrapping_mul(0x9E37_79B9_7F4A_7C15), b"new").is_none());
        assert!(
            matches!(frozen.get(h7, &7u64.to_le_bytes()).unwrap().value, Val::Bytes(b) if b == &7u64.to_le_bytes()[..])
        );
        assert!(matches!(t.get(h7, &7u64.to_le_bytes()).unwrap().value, Val::Bytes(b) if b == b"88888888"));
        let mut changed = Vec::new();
        t.for_each_since(1, &mut |e| changed.push(e.key.to_vec()));
        changed.sort();
        assert_eq!(changed, vec![7u64.to_le_bytes().to_vec(), b"new".to_vec()]);
    }
}
