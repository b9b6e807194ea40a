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
        // Batches keep memory bounded while both cores compress.
        for batch in units.chunks(8 * threads) {
            let per = batch.len().div_ceil(threads);
            let results: Vec<Result<Vec<Vec<EncodedBlock>>>> = std::thread::scope(|s| {
                let handles: Vec<_> = batch
                    .chunks(per)
                    .map(|part| {
                        s.spawn(move || {
                            part.iter()
                                .map(|&(st, kg)| encode_unit(snapshot, st, kg, since, target))
                                .collect::<Result<Vec<_>>>()
                        })
                    })
                    .collect();
                handles
                    .into_iter()
                    .map(|h| {
                        h.join().unwrap_or_else(|_| {
                            Err(crate::Error::Background("a compression thread panicked".into()))
                        })
                    })
                    .collect()
            });
            for part in results {
                for unit in part? {
                    for b in &unit {
                        w.write_block(b)?;
                    }
                }
            }
        }
        let (summary, _) = w.finish()?;
        Ok(summary)
    })
}
