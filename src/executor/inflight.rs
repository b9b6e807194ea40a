//! In-flight records of an unaligned checkpoint: what one task logs for one checkpoint,
//! and reading them back on restore.
//!
//! INTERIM: until the channel-state files land in the checkpoint layer, the log is kept in
//! memory and stored in the manifest's `extra` map (as before this rewrite). The interface
//! is the one the channel-state files serve.

use std::path::Path;

use crate::checkpoint::CheckpointStorage;
use crate::error::{Error, Result};
use crate::format::Manifest;
use crate::format::manifest::hex_decode;

/// A task's in-flight log for one checkpoint.
pub(crate) struct InflightWriter {
    key: String,
    records: Vec<(u32, u32, Vec<u8>)>,
    bytes: u64,
}

/// A finished log, ready for the commit.
#[derive(Debug, Clone)]
pub(crate) struct InflightHandle {
    pub key: String,
    pub payload: Vec<u8>,
    pub bytes: u64,
}

impl InflightWriter {
    pub fn create(_storage: &CheckpointStorage, _id: u64, operator: &str, subtask: u32) -> Result<Self> {
        Ok(InflightWriter { key: format!("inflight/{operator}/{subtask}"), records: Vec::new(), bytes: 0 })
    }

    pub fn append(&mut self, input: u32, channel: u32, record: &[u8]) -> Result<()> {
        self.bytes += record.len() as u64;
        self.records.push((input, channel, record.to_vec()));
        Ok(())
    }

    pub fn finish(self) -> Result<InflightHandle> {
        let payload = postcard::to_allocvec(&self.records)
            .map_err(|e| Error::Codec { state: "in-flight records".into(), source: e })?;
        Ok(InflightHandle { key: self.key, payload, bytes: self.bytes })
    }
}

/// Calls `f(old_subtask, input, channel, bytes)` for every in-flight record of `operator`.
pub(crate) fn read_inflight(
    _dir: &Path,
    m: &Manifest,
    operator: &str,
    mut f: impl FnMut(u32, u32, u32, &[u8]) -> Result<()>,
) -> Result<()> {
    for (k, v) in &m.extra {
        let Some(rest) = k.strip_prefix("inflight/") else { continue };
        let Some((op, sub)) = rest.rsplit_once('/') else { continue };
        if op != operator {
            continue;
        }
        let sub: u32 = sub.parse().map_err(|_| Error::InvalidRecord(format!("bad in-flight key {k}")))?;
        let bytes = hex_decode(v).ok_or_else(|| Error::InvalidRecord(format!("in-flight {k} is not hex")))?;
        let log: Vec<(u32, u32, Vec<u8>)> = postcard::from_bytes(&bytes)
            .map_err(|e| Error::Codec { state: format!("in-flight {k}"), source: e })?;
        for (input, channel, rec) in log {
            f(sub, input, channel, &rec)?;
        }
    }
    Ok(())
}
