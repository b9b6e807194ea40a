//! Turning a store snapshot into a data file: records are encoded and compressed per
//! (state, key group) on several threads, then written in order.

use std::io::Write;
use std::path::Path;

use super::io::Io;
use super::publish::publish;
use crate::error::Result;
use crate::format::datafile::encode_record;
use crate::format::{DataFileWriter, DataHeader, EncodedBlock, FileState, FileSummary, encode_block};
use crate::state::{Snapshot, StateId, key_hash};

/// Encodes the records of one (state, key group) of `snapshot` into blocks of about
/// `target` uncompressed bytes.
pub(crate) fn encode_unit(
    snapshot: &Snapshot,
    state: u32,
    key_group: u32,
    since: Option<u64>,
    target: usize,
) -> Result<Vec<EncodedBlock>> {
    let mut blocks = Vec::new();
    let mut buf = Vec::with_capacity(target + 1024);
    let mut records = 0u32;
    let mut first_hash = 0u64;
    snapshot.for_each_record(StateId::from_index(state), key_group, since, &mut |r| {
        if records == 0 {
            first_hash = key_hash(r.key());
        }
        encode_record(&mut buf, &r);
        records += 1;
        if buf.len() >= target {
            blocks.push(encode_block(state, key_group, &buf, records, first_hash));
            buf.clear();
            records = 0;
        }
    })?;
    if records > 0 {
        blocks.push(encode_block(state, key_group, &buf, records, first_hash));
    }
    Ok(blocks)
}

/// Writes the data file `dir/rel` for `snapshot` (all of it, or the increment since the
/// epoch `since`), compressing on `threads` threads, and publishes it atomically.
#[allow(clippy::too_many_arguments, reason = "internal; each argument is a distinct setting")]
pub(crate) fn write_snapshot_file(
    io: &dyn Io,
    dir: &Path,
    rel: &str,
    header: DataHeader,
    snapshot: &Snapshot,
    since: Option<u64>,
    target: usize,
    threads: usize,
) -> Result<FileSummary> {
    let states: Vec<FileState> =
        snapshot.descriptors().map(|d| FileState { name: d.name.clone(), kind: d.kind }).collect();
    let units: Vec<(u32, u32)> =
        (0..states.len() as u32).flat_map(|s| snapshot.key_groups().iter().map(move |kg| (s, kg))).collect();
    let path = dir.join(rel);
    publish(io, dir, rel, header.checkpoint_id, |out: &mut dyn Write| {
        let mut w = DataFileWriter::new(out, &path, header, states)?;
        let threads = threads.max(1);
        // Encoders take units round-robin and send their blocks through a bounded channel;
        // this thread writes them in unit order as they arrive, so compression on every
        // core overlaps with I/O and memory stays bounded by the channel.
        std::thread::scope(|s| -> Result<()> {
            let (tx, rx) = std::sync::mpsc::sync_channel::<(usize, Result<Vec<EncodedBlock>>)>(4 * threads);
            for t in 0..threads {
                let tx = tx.clone();
                let units = &units;
                s.spawn(move || {
                    for (i, &(st, kg)) in units.iter().enumerate().skip(t).step_by(threads) {
                        let r = encode_unit(snapshot, st, kg, since, target);
                        let failed = r.is_err();
                        if tx.send((i, r)).is_err() || failed {
                            return;
                        }
                    }
                });
            }
            drop(tx);
            let mut waiting = std::collections::BTreeMap::new();
            let mut next = 0usize;
            for (i, r) in rx.iter() {
                waiting.insert(i, r?);
                while let Some(blocks) = waiting.remove(&next) {
                    for b in &blocks {
                        w.write_block(b)?;
                    }
                    next += 1;
                }
            }
            if next != units.len() {
                return Err(crate::Error::Background("a compression thread stopped early".into()));
            }
            Ok(())
        })?;
        let (summary, _) = w.finish()?;
        Ok(summary)
    })
}
