//! Compaction: rewrite a checkpoint's chains (base + increments) as one full snapshot per
//! operator instance, without a live store, one key group at a time (memory bounded by
//! the largest key group, not the state).

use std::collections::BTreeMap;
use std::io::Write;

use super::block_choice::BlockChoice;
use super::channel::ChannelStateHandle;
use super::layout;
use super::publish::{SyncProgress, WriteOptions, publish};
use super::recovery::{load_chain, open_chain_with};
use super::storage::{CheckpointStorage, CommitMeta, StateHandle, Target, ensure_dir};
use super::writer::{BufferPool, encode_unit, write_versioned};
use crate::error::{Error, Result};
use crate::format::manifest::hex_decode;
use crate::format::{DataFileWriter, DataHeader, FileKind, FileRef, FileState, Manifest, OperatorState};
use crate::state::{KeyGroupRange, Store, StoreConfig};

impl CheckpointStorage {
    /// Writes checkpoint `checkpoint_id`'s state as a new full checkpoint (or savepoint)
    /// with the next free id, and returns its manifest, which records `compacted_from`.
    /// `progress(done, total)` is called after each (state, key group).
    ///
    /// Compaction never rewinds: a new checkpoint becomes the newest, which recovery and
    /// restarts pick, so only the newest checkpoint may be compacted into one. An older
    /// one can be compacted into a savepoint (`Target::Savepoint`), which recovery never
    /// picks on its own; anything else is [`Error::InvalidConfig`] saying why.
    pub fn compact(
        &self,
        checkpoint_id: u64,
        target: Target,
        progress: &mut dyn FnMut(u64, u64),
    ) -> Result<Manifest> {
        self.writer("compact")?;
        // The directory this writer locked is still at its path (a handle keeps working in
        // the directory it opened: a replaced one is an error here, not a missing manifest).
        self.check_in_place()?;
        let source = self.read_manifest(checkpoint_id)?;
        // The new checkpoint holds the source's sink transactions: committed if its are
        // (a bounded job's final checkpoint), and then recorded so (a damaged record is
        // refused here as a restore refuses it).
        let committed =
            super::storage::sinks_committed_with(self.io(), &self.manifest_path(checkpoint_id), &source)?;
        let newest = self.checkpoint_ids()?.last().copied().unwrap_or(0);
        if target == Target::Checkpoint && checkpoint_id != newest {
            return Err(Error::InvalidConfig(format!(
                "checkpoint {checkpoint_id} is older than the newest checkpoint {newest}: compacting it into a \
                 new checkpoint would make recovery rewind to its state and source positions; compact it \
                 into a savepoint instead (floe compact --savepoint)"
            )));
        }
        if target == Target::Savepoint && !source.channel_state.is_empty() {
            return Err(Error::InvalidConfig(format!(
                "checkpoint {checkpoint_id} holds in-flight records (an unaligned checkpoint), which a \
                 savepoint cannot hold: a savepoint of it would lose them; compact it into a checkpoint, or \
                 take the savepoint from an aligned checkpoint"
            )));
        }
        // The in-flight records stay as they are: the new checkpoint names the source's
        // channel-state files (retention keeps them while any manifest names them), and
        // their version: a manifest older than version 5 lists files of version 3 only.
        let version = if source.format_version >= crate::format::CHANNEL_KINDS_VERSION {
            crate::format::CHANNEL_KINDS_VERSION
        } else {
            crate::format::CHANNEL_STATE_VERSION
        };
        let channel_state = source
            .channel_state
            .iter()
            .map(|c| {
                let file = source.file(&c.path).cloned().ok_or_else(|| {
                    Error::corrupt(
                        self.manifest_path(checkpoint_id),
                        crate::format::MANIFEST_HEADER_LEN as u64,
                        format!("channel-state file {} is not listed in files", c.path),
                    )
                })?;
                Ok(ChannelStateHandle {
                    operator: c.operator.clone(),
                    subtask: c.subtask,
                    file,
                    records: c.records,
                    version,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        let new_id = self.next_id()?;
        let handles = match self.compact_into(&source, new_id, target, progress) {
            Ok(h) => h,
            Err(e) => {
                self.abort(new_id);
                return Err(e);
            }
        };
        // The record that the sinks committed goes first: a compacted checkpoint without it
        // (a kill or a full disk between the two) would be the newest, and a job resumed
        // from it would take the transactions as not committed and refuse every attempt.
        if committed {
            let dir = self.target_dir(new_id, target);
            if let Err(e) = self.write_sinks_committed_record(&dir, target == Target::Savepoint, new_id) {
                self.abort(new_id);
                return Err(e);
            }
        }
        let decode = |m: &BTreeMap<String, String>| -> BTreeMap<String, Vec<u8>> {
            m.iter().filter_map(|(k, v)| hex_decode(v).map(|b| (k.clone(), b))).collect()
        };
        let source_encodings =
            source.sources.keys().map(|k| (k.clone(), source.source_encoding(k))).collect();
        let meta = CommitMeta {
            job: source.job.clone(),
            compacted_from: Some(checkpoint_id),
            source_encodings,
            stats: None,
        };
        self.commit_with_channel_state(
            new_id,
            target,
            handles,
            channel_state,
            decode(&source.sources),
            decode(&source.extra),
            meta,
        )
    }

    fn compact_into(
        &self,
        source: &Manifest,
        new_id: u64,
        target: Target,
        progress: &mut dyn FnMut(u64, u64),
    ) -> Result<Vec<StateHandle>> {
        let total: u64 =
            source.operators.iter().map(|o| u64::from(o.key_groups.len()) * o.states.len() as u64).sum();
        let mut done = 0u64;
        let dir = match target {
            Target::Checkpoint => self.root().to_path_buf(),
            Target::Savepoint => self.root().join(layout::savepoint_dir(new_id)),
        };
        self.check_in_place()?;
        ensure_dir(self.io(), self.root(), &dir.join(layout::DATA_DIR))?;
        let mut handles = Vec::new();
        for op in &source.operators {
            let files = open_chain_with(self.io(), self.root(), source, op)?;
            let rel = self.own_name(layout::data_file_name(new_id, &op.operator, op.subtask, true));
            let header = DataHeader {
                kind: FileKind::Full,
                checkpoint_id: new_id,
                parent_id: 0,
                max_parallelism: source.max_parallelism,
                owner: Some(crate::format::FileOwner::new(&op.operator, op.subtask, op.key_groups)),
            };
            let states: Vec<FileState> =
                op.states.iter().map(|d| FileState { name: d.name.clone(), kind: d.kind }).collect();
            let target_len = self.config().block_target;
            // Offline: no checkpoint waits, so adaptive compression means compressing.
            let compress = self.config().compression.fixed().unwrap_or(true);
            let options = WriteOptions::data_file(self.config(), None, Some(self.chunks));
            // A second attempt (a version-4 file) counts its key groups again.
            let done_before = done;
            let summary = write_versioned(|runs| {
                done = done_before;
                publish(self.io(), &dir, &rel, new_id, options, |out: &mut dyn Write, sync: &SyncProgress| {
                    let mut w = DataFileWriter::with_version(
                        out,
                        sync.file(),
                        header,
                        states.clone(),
                        runs.version(),
                    )?;
                    let pool = BufferPool::default();
                    // Blocks must come in (state, key group) order: one state at a time, one
                    // key group at a time, loading only that state's records of that group.
                    for (si, d) in op.states.iter().enumerate() {
                        let si =
                            u32::try_from(si).map_err(|_| Error::InvalidConfig("too many states".into()))?;
                        let one = OperatorState { states: vec![d.clone()], ..op.clone() };
                        for kg in op.key_groups.iter() {
                            let config = StoreConfig {
                                max_parallelism: source.max_parallelism,
                                key_groups: KeyGroupRange::new(kg, kg + 1)?,
                            };
                            let mut store = Store::with_config(config)?;
                            load_chain(&mut store, &files, &one, config.key_groups)?;
                            let snap = store.snapshot();
                            let mut choice = BlockChoice::always(compress);
                            for mut b in
                                encode_unit(&snap, 0, kg, None, target_len, &mut choice, &pool, runs)?
                            {
                                b.state = si;
                                w.write_block(&b)?;
                                pool.give(b.bytes);
                            }
                            done += 1;
                            progress(done, total);
                        }
                    }
                    Ok(w.finish()?.0)
                })
            })?;
            let own = FileRef::data(rel.clone(), &summary, new_id);
            handles.push(StateHandle {
                operator: OperatorState {
                    operator: op.operator.clone(),
                    subtask: op.subtask,
                    key_groups: op.key_groups,
                    chain: vec![rel],
                    states: op.states.clone(),
                    bytes_written: summary.size,
                },
                files: vec![own],
                kind: FileKind::Full,
                base_bytes: summary.size,
                increment_bytes: 0,
                max_parallelism: source.max_parallelism,
            });
        }
        Ok(handles)
    }
}
