//! Joining stores built apart: recovery loads disjoint key-group ranges of one operator on
//! several threads, each into its own store, then moves their tries into the one it
//! returns (`checkpoint/recovery.rs`, `load_chain`). Nothing is copied: a key group's trie
//! is moved as a pointer.

use super::keygroup::KeyGroupRange;
use super::store::{FIRST_EPOCH, Store};
use crate::error::{Error, Result};

impl Store {
    /// Whether [`Store::absorb`] would take stores of `range` built fresh now: this store
    /// is fresh too (no snapshot taken, none confirmed) and holds nothing in `range`.
    pub(crate) fn can_absorb(&self, range: KeyGroupRange) -> bool {
        let mine = self.config().key_groups;
        let Some(offset) = range.start.checked_sub(mine.start) else { return false };
        mine.intersect(&range) == range
            && self.epoch() == FIRST_EPOCH
            && self.confirmed_epoch() == 0
            && self.states.iter().all(|t| {
                t.groups[offset as usize..(offset + range.len()) as usize].iter().all(|g| g.is_blank())
            })
    }

    /// Moves every key group of `part` into this store, registering `part`'s states here
    /// (an existing registration must be identical). Both stores must be fresh (see
    /// [`Store::can_absorb`]), with the same `max_parallelism`; `part` must own a sub-range
    /// of this store's key groups, all blank here. Anything else is
    /// [`Error::InvalidConfig`] and changes nothing.
    pub(crate) fn absorb(&mut self, part: Store) -> Result<()> {
        let (mine, theirs) = (self.config(), part.config());
        let fits = mine.max_parallelism == theirs.max_parallelism
            && part.epoch() == FIRST_EPOCH
            && part.confirmed_epoch() == 0
            && self.can_absorb(theirs.key_groups);
        if !fits {
            return Err(Error::InvalidConfig(format!(
                "cannot join a store of key groups {} (epoch {}) into one of {} (epoch {}): one \
                 of them is not fresh, or those key groups are not empty here",
                theirs.key_groups,
                part.epoch(),
                mine.key_groups,
                self.epoch()
            )));
        }
        let offset = (theirs.key_groups.start - mine.key_groups.start) as usize;
        // Checked whole before anything moves.
        for t in &part.states {
            if let Some(id) = self.state_id(&t.desc.name) {
                self.states[id.index()].desc.check_same(&t.desc)?;
            }
        }
        for t in part.states {
            let id = self.register((*t.desc).clone())?;
            let here = &mut self.states[id.index()].groups[offset..];
            for (slot, trie) in here.iter_mut().zip(t.groups) {
                *slot = trie;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use crate::state::{KeyGroupRange, StateDescriptor, StateKind, Store, StoreConfig, key_group};

    fn part(range: KeyGroupRange, keys: &[&str]) -> Store {
        let mut s = Store::with_config(StoreConfig { max_parallelism: 128, key_groups: range }).unwrap();
        let v = s.register(StateDescriptor::raw("v", StateKind::Value)).unwrap();
        for k in keys {
            if range.contains(key_group(k.as_bytes(), 128)) {
                s.put(v, k.as_bytes(), k.as_bytes()).unwrap();
            }
        }
        s
    }

    #[test]
    fn joins_disjoint_ranges_and_refuses_the_rest() {
        let keys: Vec<String> = (0..500).map(|i| format!("key-{i}")).collect();
        let keys: Vec<&str> = keys.iter().map(String::as_str).collect();
        let mut whole = Store::new();
        whole.absorb(part(KeyGroupRange::new(0, 64).unwrap(), &keys)).unwrap();
        whole.absorb(part(KeyGroupRange::new(64, 128).unwrap(), &keys)).unwrap();
        let v = whole.state_id("v").unwrap();
        assert_eq!(whole.len(v), 500);
        for k in &keys {
            assert_eq!(whole.get(v, k.as_bytes()).unwrap(), Some(k.as_bytes()));
        }
        // Groups that already hold entries, another range, another epoch: refused whole.
        let err = whole.absorb(part(KeyGroupRange::new(0, 64).unwrap(), &keys)).unwrap_err();
        assert!(err.to_string().contains("not empty"), "{err}");
        let mut small = Store::with_config(StoreConfig {
            max_parallelism: 128,
            key_groups: KeyGroupRange::new(0, 8).unwrap(),
        })
        .unwrap();
        assert!(small.absorb(part(KeyGroupRange::new(0, 64).unwrap(), &keys)).is_err());
        let mut later = part(KeyGroupRange::new(64, 128).unwrap(), &[]);
        later.snapshot();
        let mut fresh = Store::new();
        assert!(fresh.absorb(later).is_err());
        assert_eq!(whole.len(v), 500);
    }
}
