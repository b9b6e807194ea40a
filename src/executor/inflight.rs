//! In-flight records of an unaligned checkpoint: what one task captures for one
//! checkpoint, streamed to the checkpoint's channel-state file (format-spec/
//! channel-state.md) so memory stays bounded whatever their size, and reading them back
//! on restore. Each record is stored as postcard of `(timestamp, record)`; the watermarks
//! and changes of idleness the channels delivered among them are stored in order with them
//! (channel-state files of version 5), so that a restore replays each record against the
//! watermark it met before the failure.
//!
//! Checkpoints written before channel-state files kept in-flight records in the manifest's
//! `extra` map (`inflight/<operator>/<subtask>`); those still read.

use std::path::Path;
use std::sync::Arc;

use crate::checkpoint::{ChannelStateHandle, ChannelStateWriter, CheckpointStorage, read_channel_state_with};
use crate::error::{Error, Result};
use crate::format::entries::LegacyInflight;
use crate::format::manifest::hex_decode;
use crate::format::{ChannelEntry, Manifest};

/// A task's in-flight log for one checkpoint.
pub(crate) struct InflightWriter {
    w: ChannelStateWriter,
    bytes: u64,
}

/// A finished log, ready for the commit.
#[derive(Debug, Clone)]
pub(crate) struct InflightHandle {
    pub handle: ChannelStateHandle,
    pub bytes: u64,
}

impl InflightWriter {
    pub fn create(storage: &Arc<CheckpointStorage>, id: u64, operator: &str, subtask: u32) -> Result<Self> {
        Ok(InflightWriter { w: storage.channel_state_writer(id, operator, subtask)?, bytes: 0 })
    }

    pub fn append(&mut self, input: u32, channel: u32, record: &[u8]) -> Result<()> {
        self.bytes += record.len() as u64;
        self.w.append(input, channel, record)
    }

    /// A watermark or a change of idleness the channel delivered among the records, in
    /// order with them.
    pub fn append_marker(&mut self, input: u32, channel: u32, marker: Marker) -> Result<()> {
        let entry = match marker {
            Marker::Watermark(w) => ChannelEntry::Watermark(w),
            Marker::Idle(i) => ChannelEntry::Idle(i),
        };
        self.w.append_entry(input, channel, entry)
    }

    pub fn finish(self) -> Result<InflightHandle> {
        Ok(InflightHandle { handle: self.w.finish()?, bytes: self.bytes })
    }
}

/// How a stored in-flight record's bytes decode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RecordForm {
    /// postcard of `(Option<i64> timestamp, record)` (this build).
    Timestamped,
    /// postcard of the record alone (the executor before event time).
    Bare,
}

/// What a channel delivered among its records, in order with them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Marker {
    Watermark(crate::executor::Timestamp),
    Idle(bool),
}

/// One element of the in-flight log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Inflight<'a> {
    /// A record, with the task's channel it came on (channel-state files; `None` for the
    /// logs of older checkpoints kept in `extra`).
    Record(RecordForm, Option<u32>, &'a [u8]),
    /// A watermark or change of idleness on the task's channel (its index).
    Marker(u32, Marker),
}

/// The operator and subtask of an `extra` key `inflight/<operator>/<subtask>`, where
/// checkpoints older than channel-state files kept in-flight records (`None`: another key;
/// a subtask of `None`: not in canonical decimal).
pub(crate) fn inflight_key(k: &str) -> Option<(&str, Option<u32>)> {
    use crate::format::entries::{INFLIGHT_EXTRA_PREFIX, entry_key};
    entry_key(k, INFLIGHT_EXTRA_PREFIX)
}

/// Calls `f(old_subtask, input, element)` for every in-flight element of `operator`, in
/// order: from its channel-state files, then from `extra` entries of older checkpoints
/// (records only).
pub(crate) fn read_inflight(
    io: &dyn crate::checkpoint::io::Io,
    dir: &Path,
    m: &Manifest,
    operator: &str,
    mut f: impl FnMut(u32, u32, Inflight<'_>) -> Result<()>,
) -> Result<()> {
    if m.channel_state.iter().any(|c| c.operator == operator) {
        read_channel_state_with(io, dir, m, operator, |sub, input, channel, entry| {
            let e = match entry {
                ChannelEntry::Record(rec) => Inflight::Record(RecordForm::Timestamped, Some(channel), rec),
                ChannelEntry::Watermark(w) => Inflight::Marker(channel, Marker::Watermark(w)),
                ChannelEntry::Idle(i) => Inflight::Marker(channel, Marker::Idle(i)),
            };
            f(sub, input, e)
        })?;
    }
    for (k, v) in &m.extra {
        let Some((op, sub)) = inflight_key(k) else { continue };
        if op != operator {
            continue;
        }
        let sub = sub.ok_or_else(|| {
            Error::InvalidRecord(format!("bad in-flight key {k} (its subtask is not canonical decimal)"))
        })?;
        // (Checked with the manifest's path before the first attempt; named by key here.)
        let at = Path::new(k);
        let bytes = hex_decode(v).ok_or_else(|| Error::corrupt(at, 0, "the value is not hex"))?;
        match crate::format::entries::decode_legacy_inflight(&bytes, at)? {
            LegacyInflight::Timestamped(log) => {
                // The channel numbers of this older log are not checked against the
                // instance's channels (no inputs entry was written with them).
                for (input, _channel, rec) in log {
                    f(sub, input, Inflight::Record(RecordForm::Timestamped, None, &rec))?;
                }
            }
            LegacyInflight::Bare(log) => {
                for (input, rec) in log {
                    f(sub, input, Inflight::Record(RecordForm::Bare, None, &rec))?;
                }
            }
        }
    }
    Ok(())
}
#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::manifest::hex_encode;

    fn manifest(extra: &[(&str, Vec<u8>)]) -> Manifest {
        let json = serde_json::json!({
            "format_version": 2, "checkpoint_id": 1, "kind": "full", "parent": null, "base": 1,
            "created_unix_ms": 0, "max_parallelism": 128, "files": [], "operators": [], "sources": {},
            "extra": extra.iter().map(|(k, v)| (k.to_string(), hex_encode(v))).collect::<BTreeMap<_, _>>(),
        });
        serde_json::from_value(json).unwrap()
    }

    use std::collections::BTreeMap;

    #[test]
    fn in_flight_records_of_this_and_the_earlier_executor_both_read() {
        let new =
            postcard::to_allocvec(&vec![(1u32, 3u32, postcard::to_allocvec(&(Some(5i64), 7u64)).unwrap())])
                .unwrap();
        let old = postcard::to_allocvec(&vec![(0u32, postcard::to_allocvec(&9u64).unwrap())]).unwrap();
        let m = manifest(&[("inflight/op/0", new), ("inflight/op/1", old), ("inflight/other/0", vec![1])]);
        let mut seen = Vec::new();
        read_inflight(&crate::checkpoint::io::StdIo, Path::new("."), &m, "op", |sub, input, e| {
            let Inflight::Record(form, _, b) = e else { panic!("{e:?}") };
            seen.push((sub, input, form, b.to_vec()));
            Ok(())
        })
        .unwrap();
        assert_eq!(seen.len(), 2);
        assert_eq!((seen[0].0, seen[0].1, seen[0].2), (0, 1, RecordForm::Timestamped));
        assert_eq!(postcard::from_bytes::<(Option<i64>, u64)>(&seen[0].3).unwrap(), (Some(5), 7));
        assert_eq!((seen[1].0, seen[1].1, seen[1].2), (1, 0, RecordForm::Bare));
        assert_eq!(postcard::from_bytes::<u64>(&seen[1].3).unwrap(), 9);
        // Neither form: an error naming the entry.
        let m = manifest(&[("inflight/op/0", vec![0xff, 0xff, 0xff])]);
        let e = read_inflight(&crate::checkpoint::io::StdIo, Path::new("."), &m, "op", |_, _, _| Ok(()))
            .unwrap_err();
        assert!(e.to_string().contains("inflight/op/0"), "{e}");
    }
}
