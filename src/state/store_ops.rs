//! The store's read paths over a whole state and its in-place list, map and value edits
//! (read-modify-write, pop, trim), beside the basic operations of `store.rs`. The typed
//! handles (`typed.rs`) are built on these.

use super::StateId;
use super::descriptor::StateKind;
use super::key_hash;
use super::list::ListItems;
use super::record::MAX_RECORD_LEN;
use super::record::Record;
use super::snapshot::{EntryRef, value_ref};
use super::store::{Store, delete_key, len_u32, modify, too_large};
use super::trie::{Trie, Val, Value};
use crate::error::{Error, Result};

impl Store {
    /// Every live entry of a state, key group by key group, each in `(hash, key)` order
    /// (the order of [`super::Snapshot::iter_entries`]). Borrows the store: no copy.
    pub fn iter_entries(&self, state: StateId) -> Result<impl Iterator<Item = EntryRef<'_>>> {
        let table =
            self.states.get(state.index()).ok_or_else(|| Error::UnknownState(format!("#{}", state.0)))?;
        Ok(table
            .groups
            .iter()
            .flat_map(Trie::iter)
            .filter_map(|e| value_ref(e).map(|value| EntryRef { key: e.key, value })))
    }

    /// Read-modify-write of `key` in a value state: `f` sees the current value and returns
    /// the new one (`None` removes the key). The key is hashed once; its path is walked to
    /// read, then again to write (a same-size value is written in place). An error from
    /// `f`, or a value too large for a data file, leaves the key as it was.
    pub fn update(
        &mut self,
        state: StateId,
        key: &[u8],
        f: impl FnOnce(Option<&[u8]>) -> Result<Option<Vec<u8>>>,
    ) -> Result<()> {
        let loc = self.locate(state, key, StateKind::Value)?;
        let epoch = self.epoch;
        let table = &mut self.states[loc.state];
        let name = &table.desc.name;
        let trie = &mut table.groups[loc.group];
        let old = trie.get(loc.hash, key).and_then(|e| match e.value {
            Val::Bytes(b) => Some(b),
            _ => None,
        });
        let new = match f(old) {
            Ok(Some(v)) if Record::Put { key, value: &v }.encoded_len() > MAX_RECORD_LEN => {
                let len = Record::Put { key, value: &v }.encoded_len();
                Err(too_large(name, "put record (key and value)", len, MAX_RECORD_LEN))
            }
            r => r,
        }?;
        match new {
            Some(v) => trie.put(loc.hash, key, epoch, &v),
            None => {
                delete_key(trie, loc.hash, key, epoch);
            }
        }
        Ok(())
    }

    /// Number of items in `key`'s list (0 when absent). Reads a counter: O(1).
    pub fn list_len(&self, state: StateId, key: &[u8]) -> Result<u32> {
        let loc = self.locate(state, key, StateKind::List)?;
        Ok(self.trie(loc).get(loc.hash, key).map_or(0, |e| match e.value {
            Val::List(l) => l.count,
            _ => 0,
        }))
    }

    /// Removes the last item of `key`'s list and returns it (`None` when the list is empty
    /// or absent; the last item gone removes the key). A pop of items appended since the
    /// parent keeps the list's append form, so the next increment still carries an append
    /// of what is left of them, not the whole list.
    pub fn list_pop(&mut self, state: StateId, key: &[u8]) -> Result<Option<Vec<u8>>> {
        let loc = self.locate(state, key, StateKind::List)?;
        let last = match self.trie(loc).get(loc.hash, key).map(|e| e.value) {
            Some(Val::List(l)) if l.count > 0 => {
                let mut at = 0;
                let mut last = None;
                for item in ListItems::new(&l.buf) {
                    last = Some((at, item.to_vec()));
                    at += 4 + item.len();
                }
                last
            }
            _ => None,
        };
        let Some((at, item)) = last else { return Ok(None) };
        self.list_edit(loc, key, |len| 0..at.min(len), 1, true);
        Ok(Some(item))
    }

    /// Drops the first `n` items of `key`'s list (all of them removes the key); returns
    /// how many were dropped. Dropping none writes nothing, so an append since the parent
    /// stays an append in the next increment. Dropping some makes the next increment carry
    /// the whole (trimmed) list: the data-file format has no record for "drop the first n"
    /// (format-spec/data-file.md, records).
    pub fn list_drop_first(&mut self, state: StateId, key: &[u8], n: u32) -> Result<u32> {
        let loc = self.locate(state, key, StateKind::List)?;
        let cut = match self.trie(loc).get(loc.hash, key).map(|e| e.value) {
            Some(Val::List(l)) if n > 0 && l.count > 0 => {
                let dropped = n.min(l.count);
                let bytes: usize = ListItems::new(&l.buf).take(dropped as usize).map(|i| 4 + i.len()).sum();
                Some((dropped, bytes))
            }
            _ => None,
        };
        let Some((dropped, bytes)) = cut else { return Ok(0) };
        self.list_edit(loc, key, |len| bytes.min(len)..len, dropped, false);
        Ok(dropped)
    }

    /// Keeps only the last `n` items of `key`'s list; returns how many were dropped.
    pub fn list_keep_last(&mut self, state: StateId, key: &[u8], n: u32) -> Result<u32> {
        let count = self.list_len(state, key)?;
        self.list_drop_first(state, key, count.saturating_sub(n))
    }

    /// Shortens `key`'s list by `removed` items to the bytes `keep` (given the buffer's
    /// length) names; no item is copied unless little is left (`ListBuf::keep`). The list's
    /// append form (its base, then items appended since) survives a cut `at_end` that
    /// leaves the base whole; any other cut makes the next increment carry the whole list.
    fn list_edit(
        &mut self,
        loc: super::store::Loc,
        key: &[u8],
        keep: impl FnOnce(usize) -> std::ops::Range<usize>,
        removed: u32,
        at_end: bool,
    ) {
        let epoch = self.epoch;
        let mut emptied = false;
        let trie = self.trie_mut(loc);
        modify(trie, loc.hash, key, epoch, |e| {
            let first_write = e.stamp != epoch;
            let before = e.stamp;
            e.touch(epoch);
            if let Value::List(l) = &mut e.value {
                if first_write {
                    l.base_stamp = before;
                    l.base_len = len_u32(l.buf.len());
                    l.append_only = true;
                }
                let range = keep(l.buf.len());
                l.buf.keep(range);
                l.append_only &= at_end && l.buf.len() >= l.base_len as usize;
                l.count -= removed.min(l.count);
                emptied = l.count == 0;
            }
        });
        if emptied {
            delete_key(trie, loc.hash, key, epoch);
        }
    }

    /// Number of entries in `key`'s map (0 when absent). Reads a counter: O(1).
    pub fn map_len(&self, state: StateId, key: &[u8]) -> Result<u64> {
        let loc = self.locate(state, key, StateKind::Map)?;
        Ok(self.trie(loc).get(loc.hash, key).map_or(0, |e| match e.value {
            Val::Map(m) => m.trie.len(),
            _ => 0,
        }))
    }

    /// Whether `key`'s map holds `map_key` (the value is not copied or decoded).
    pub fn map_contains(&self, state: StateId, key: &[u8], map_key: &[u8]) -> Result<bool> {
        let loc = self.locate(state, key, StateKind::Map)?;
        Ok(self.trie(loc).get(loc.hash, key).is_some_and(|e| match e.value {
            Val::Map(m) => m.trie.get(key_hash(map_key), map_key).is_some_and(|n| n.is_live()),
            _ => false,
        }))
    }
}
