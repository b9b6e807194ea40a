//! The one owner of a checkpoint id's life in a writing handle:
//!
//! ```text
//! (unused) ──begin/reserve──> begun ──commit──> committing ──manifest durable──> committed
//!                               │                      └──commit failed──┐
//!                               └────abort────> aborted (final) <────────┘
//! ```
//!
//! A commit that has begun decides alone: an abort of a committing id does nothing (a
//! commit that returns `Ok` keeps every file it names), and the commit aborts the id itself
//! if it fails.
//!
//! Ids only go up: an id is begun only above every id the directory or this handle ever
//! used; a commit raises the newest committed id, and every lower id still begun becomes
//! aborted (it can never commit). An aborted id is never written or committed again; its
//! files are removed once its last writer finished. Only begun ids (and aborted ones whose
//! writers still run) protect their files from being orphans. With the directory lock
//! there is one writing handle per directory, so this book knows every writer.

use std::collections::BTreeMap;

use crate::error::{Error, Result};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Life {
    Begun,
    /// Its commit runs: only the commit ends it (committed, or aborted if it fails).
    Committing,
    Aborted,
}

#[derive(Debug, Clone, Copy)]
struct Entry {
    life: Life,
    /// Data files of this id being written right now.
    writers: u32,
}

/// What [`IdBook::writer_end`] asks of the caller.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum AfterWrite {
    /// Keep the file: the id may still commit.
    Keep,
    /// The id was aborted while the file was written: remove it (and, when this was the
    /// last writer, every other file of the id).
    Remove { last: bool },
}

/// Ids of one directory, as one writing handle sees them.
#[derive(Debug)]
pub(crate) struct IdBook {
    /// The lowest id that may still be begun (`u64::MAX + 1`: none is left).
    next: u128,
    /// The newest committed id (checkpoint or savepoint); 0 if none.
    newest_committed: u64,
    /// Ids begun or aborted and above `newest_committed` (or with writers still running).
    live: BTreeMap<u64, Entry>,
}

impl IdBook {
    /// A book for a directory whose highest used id is `max_used` and whose newest
    /// committed id is `newest_committed`.
    pub fn new(max_used: u64, newest_committed: u64) -> Self {
        let next = (u128::from(max_used) + 1).max(u128::from(newest_committed) + 1);
        IdBook { next, newest_committed, live: BTreeMap::new() }
    }

    /// Hands out the next id, begun; an error once every id up to `u64::MAX` was used.
    pub fn reserve(&mut self) -> Result<u64> {
        let id = u64::try_from(self.next).map_err(|_| Error::CheckpointId {
            id: u64::MAX,
            why: "no checkpoint id is left: this directory already used u64::MAX".into(),
        })?;
        self.next += 1;
        self.live.insert(id, Entry { life: Life::Begun, writers: 0 });
        Ok(id)
    }

    /// Hands out the next id above `floor` too (ids skipped up to it are never used), begun.
    pub fn reserve_after(&mut self, floor: u64) -> Result<u64> {
        self.next = self.next.max(u128::from(floor) + 1);
        self.reserve()
    }

    /// Begins `id` (again: begun ids are fine), or says why it cannot be used.
    pub fn begin(&mut self, id: u64) -> Result<()> {
        match self.live.get(&id).map(|e| e.life) {
            Some(Life::Begun) => return Ok(()),
            Some(Life::Committing) => {
                return Err(Error::CheckpointId { id, why: "it is being committed".into() });
            }
            Some(Life::Aborted) => return Err(aborted(id)),
            None => {}
        }
        if id == 0 {
            return Err(Error::CheckpointId { id, why: "ids start at 1".into() });
        }
        if id <= self.newest_committed {
            return Err(Error::CheckpointId {
                id,
                why: format!("at or below the newest committed checkpoint {}", self.newest_committed),
            });
        }
        if u128::from(id) < self.next {
            return Err(Error::CheckpointId {
                id,
                why: format!(
                    "already used in this directory (ids only go up; the next free one is {})",
                    self.next
                ),
            });
        }
        self.next = u128::from(id) + 1;
        self.live.insert(id, Entry { life: Life::Begun, writers: 0 });
        Ok(())
    }

    /// A data file of `id` starts being written.
    pub fn writer_start(&mut self, id: u64) -> Result<()> {
        self.begin(id)?;
        if let Some(e) = self.live.get_mut(&id) {
            e.writers += 1;
        }
        Ok(())
    }

    /// A data file of `id` was written (or failed).
    pub fn writer_end(&mut self, id: u64) -> AfterWrite {
        let Some(e) = self.live.get_mut(&id) else { return AfterWrite::Keep };
        e.writers = e.writers.saturating_sub(1);
        match e.life {
            Life::Begun | Life::Committing => AfterWrite::Keep,
            Life::Aborted => {
                let last = e.writers == 0;
                if last && id <= self.newest_committed {
                    self.live.remove(&id);
                }
                AfterWrite::Remove { last }
            }
        }
    }

    /// Starts the commit of `id`, if it may commit now: from here until [`IdBook::committed`]
    /// or [`IdBook::commit_failed`], aborts of `id` do nothing.
    pub fn check_commit(&mut self, id: u64) -> Result<()> {
        self.begin(id)?;
        if let Some(e) = self.live.get_mut(&id) {
            e.life = Life::Committing;
        }
        Ok(())
    }

    /// The commit of `id` failed: it is aborted for good. Returns whether no writer of it
    /// runs (its files can go now).
    pub fn commit_failed(&mut self, id: u64) -> bool {
        self.abort_inner(id, true)
    }

    /// `id` committed: every lower id still begun is aborted for good.
    pub fn committed(&mut self, id: u64) {
        debug_assert!(id > self.newest_committed, "committed ids only go up");
        self.newest_committed = self.newest_committed.max(id);
        self.next = self.next.max(u128::from(id) + 1);
        self.live.remove(&id);
        for e in self.live.range_mut(..id).map(|(_, e)| e) {
            e.life = Life::Aborted;
        }
        // Lower ids with no writer left are settled: `begin` refuses them by number.
        self.live.retain(|&k, e| k > id || e.writers > 0);
    }

    /// Aborts `id` for good, unless its commit runs (then the commit decides). Returns
    /// whether it was aborted and no writer of it runs (its files can go now).
    pub fn abort(&mut self, id: u64) -> bool {
        self.abort_inner(id, false)
    }

    fn abort_inner(&mut self, id: u64, committing_too: bool) -> bool {
        if id <= self.newest_committed && !self.live.contains_key(&id) {
            // Settled already: committed, or aborted and cleaned.
            return false;
        }
        if !committing_too && self.live.get(&id).is_some_and(|e| e.life == Life::Committing) {
            return false;
        }
        let e = self.live.entry(id).or_insert(Entry { life: Life::Aborted, writers: 0 });
        e.life = Life::Aborted;
        self.next = self.next.max(u128::from(id) + 1);
        e.writers == 0
    }

    /// Whether the files of `id` are protected from cleanup (being written or able to
    /// commit).
    pub fn protects(&self, id: u64) -> bool {
        self.live.get(&id).is_some_and(|e| e.life != Life::Aborted || e.writers > 0)
    }

    /// The highest id used (0: none).
    pub fn max_used(&self) -> u64 {
        u64::try_from(self.next.saturating_sub(1)).unwrap_or(u64::MAX)
    }
}

fn aborted(id: u64) -> Error {
    Error::CheckpointId {
        id,
        why: "it was aborted (an aborted checkpoint is never written or committed)".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_only_go_up_and_aborts_are_final() {
        let mut b = IdBook::new(4, 4);
        assert!(b.begin(3).is_err(), "below the newest committed");
        assert!(b.begin(4).is_err());
        assert_eq!(b.reserve().unwrap(), 5);
        b.begin(7).unwrap();
        assert!(b.begin(6).is_err(), "7 was used, 6 is behind it");
        b.writer_start(7).unwrap();
        assert!(!b.abort(7), "a writer of 7 still runs");
        assert!(b.protects(7));
        assert!(b.begin(7).is_err() && b.check_commit(7).is_err(), "aborted is final");
        assert_eq!(b.writer_end(7), AfterWrite::Remove { last: true });
        assert!(!b.protects(7));
        b.check_commit(5).unwrap();
        b.committed(5);
        assert!(b.check_commit(5).is_err(), "a second commit of the same id");
        assert!(b.begin(7).is_err());
        assert_eq!(b.reserve().unwrap(), 8);
    }

    #[test]
    fn a_commit_that_began_decides_alone() {
        let mut b = IdBook::new(0, 0);
        b.begin(3).unwrap();
        b.check_commit(3).unwrap();
        assert!(!b.abort(3), "an abort of a committing id does nothing");
        assert!(b.protects(3), "its files stay protected");
        assert!(b.begin(3).is_err() && b.writer_start(3).is_err(), "no new writer while it commits");
        b.committed(3);
        assert!(!b.abort(3) && !b.protects(3));
        // A failed commit aborts the id for good.
        b.begin(4).unwrap();
        b.check_commit(4).unwrap();
        assert!(b.commit_failed(4));
        assert!(!b.protects(4) && b.begin(4).is_err() && b.check_commit(4).is_err());
    }

    #[test]
    fn ids_run_out_instead_of_repeating() {
        let mut b = IdBook::new(u64::MAX - 1, 0);
        assert_eq!(b.reserve().unwrap(), u64::MAX);
        b.committed(u64::MAX);
        assert!(b.reserve().is_err());
        assert!(b.begin(u64::MAX).is_err());
        assert!(!b.abort(u64::MAX), "a committed id is settled: its files must stay");
    }

    #[test]
    fn ids_after_a_floor_skip_up_to_it_and_never_go_back() {
        let mut b = IdBook::new(3, 3);
        assert_eq!(b.reserve_after(10).unwrap(), 11);
        assert_eq!(b.reserve_after(2).unwrap(), 12, "a lower floor changes nothing");
        assert!(b.begin(5).is_err(), "skipped ids are not handed out later");
        assert_eq!(b.reserve().unwrap(), 13);
        let mut full = IdBook::new(1, 0);
        assert!(full.reserve_after(u64::MAX).is_err(), "no id above u64::MAX");
    }

    #[test]
    fn a_commit_aborts_every_lower_id() {
        let mut b = IdBook::new(0, 0);
        let (x, y) = (b.reserve().unwrap(), b.reserve().unwrap());
        b.writer_start(x).unwrap();
        b.committed(y);
        assert!(b.check_commit(x).is_err());
        assert!(b.protects(x), "its writer still runs");
        assert_eq!(b.writer_end(x), AfterWrite::Remove { last: true });
        assert!(!b.protects(x));
    }
}
