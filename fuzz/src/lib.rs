//! Helpers shared by the fuzz targets.
//!
//! Every floe structure is checksummed, so random mutations almost never get past the
//! checksums. The targets that read files therefore take a leading mode byte: when its low
//! bit is set, the checksums of the rest are recomputed before decoding (structure-aware
//! fuzzing of what lies behind them); otherwise the bytes are decoded as they are.

use std::collections::BTreeMap;

use floe::state::{Store, ValueRef};

/// Splits the mode byte off `data` and returns the bytes to decode, with their checksums
/// fixed by `fix` when the mode asks for it.
pub fn input(data: &[u8], fix: fn(&mut [u8])) -> Vec<u8> {
    let Some((&mode, rest)) = data.split_first() else { return Vec::new() };
    let mut bytes = rest.to_vec();
    if mode & 1 == 1 {
        fix(&mut bytes);
    }
    bytes
}

fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(b.get(at..at.checked_add(4)?)?.try_into().ok()?))
}

fn u64_at(b: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_le_bytes(b.get(at..at.checked_add(8)?)?.try_into().ok()?))
}

/// Recomputes a data file's header, block and index checksums, as far as its header,
/// footer and index can be followed (see `format-spec/data-file.md`).
#[allow(non_snake_case, reason = "the sizes read as the constants they were")]
pub fn fix_data_file(b: &mut [u8]) {
    const FOOTER: usize = 32;
    // Header and block-entry sizes of the file's version (2: 64 and 56; 1: 40 and 48).
    let (HEADER, ENTRY) = match u32_at(b, 8) {
        Some(1) => (40, 48),
        _ => (64, 56),
    };
    if b.len() < HEADER + FOOTER {
        return;
    }
    let crc = crc32fast::hash(&b[0..HEADER - 4]);
    b[HEADER - 4..HEADER].copy_from_slice(&crc.to_le_bytes());
    let foot = b.len() - FOOTER;
    let (Some(io), Some(il)) = (u64_at(b, foot), u64_at(b, foot + 8)) else { return };
    if io < HEADER as u64 || io.checked_add(il) != Some(foot as u64) {
        return;
    }
    let (io, end) = (io as usize, foot);
    // Walk the state table to the block entries.
    let Some(n_states) = u32_at(b, io) else { return };
    let mut at = io + 4;
    for _ in 0..n_states.min(1 << 16) {
        let Some(name_len) = b.get(at + 1..at + 3) else { return };
        at += 3 + usize::from(u16::from_le_bytes([name_len[0], name_len[1]]));
        if at > end {
            return;
        }
    }
    if let Some(n_blocks) = u32_at(b, at) {
        at += 4;
        for _ in 0..n_blocks {
            if at + ENTRY > end {
                break;
            }
            let (Some(off), Some(stored)) = (u64_at(b, at + 8), u32_at(b, at + 16)) else { break };
            if let Some(e) = off.checked_add(u64::from(stored)).filter(|&e| e <= io as u64) {
                let crc = crc32fast::hash(&b[off as usize..e as usize]);
                b[at + 28..at + 32].copy_from_slice(&crc.to_le_bytes());
            }
            at += ENTRY;
        }
    }
    let crc = crc32fast::hash(&b[io..end]);
    b[foot + 16..foot + 20].copy_from_slice(&crc.to_le_bytes());
}

/// Sets a manifest's body length and checksum to those of the bytes after its header.
pub fn fix_manifest(b: &mut [u8]) {
    const HEADER: usize = 24;
    if b.len() < HEADER {
        return;
    }
    let len = u32::try_from(b.len() - HEADER).unwrap_or(u32::MAX);
    let crc = crc32fast::hash(&b[HEADER..]);
    b[12..16].copy_from_slice(&len.to_le_bytes());
    b[16..20].copy_from_slice(&crc.to_le_bytes());
}

/// A store's live contents, by (state name, key), values as comparable bytes.
pub type Contents = BTreeMap<(String, Vec<u8>), Vec<Vec<u8>>>;

/// Every live entry of `store` (taking a snapshot).
pub fn contents(store: &mut Store) -> Contents {
    let snap = store.snapshot();
    let mut out = Contents::new();
    for d in snap.descriptors() {
        let Some(id) = snap.state_id(&d.name) else { continue };
        for kg in snap.key_groups().iter() {
            let Ok(entries) = snap.entries(id, kg) else { continue };
            for e in entries {
                let v = match e.value {
                    ValueRef::Bytes(b) => vec![b.to_vec()],
                    ValueRef::List(items) => items.map(<[u8]>::to_vec).collect(),
                    ValueRef::Map(it) => it.flat_map(|(k, v)| [k.to_vec(), v.to_vec()]).collect(),
                };
                assert!(out.insert((d.name.clone(), e.key.to_vec()), v).is_none(), "key listed twice");
            }
        }
    }
    out
}
