//! The hand-written baseline of issue 16: a `HashMap<Vec<u8>, Vec<u8>>` with a set of the
//! keys written since the last checkpoint, checkpointed the simplest sound way by hand:
//! records (u32 key length, u32 value length, key, value) in 64 KiB blocks, each
//! LZ4-compressed with a crc32 (u32 length, u32 crc32, bytes), into a temp file, `fsync`,
//! rename, `fsync` of the directory. A full checkpoint writes every entry; an increment
//! writes the keys written since the last one (deletes are not modelled: the benches only
//! put). One thread, no snapshot: the map is not written to while it is checkpointed,
//! which is the pause a real job would pay.

use std::collections::{HashMap, HashSet};
use std::io::Write;
use std::path::Path;
use std::time::{Duration, Instant};

const BLOCK: usize = 64 << 10;

#[derive(Default)]
pub struct HandMap {
    pub map: HashMap<Vec<u8>, Vec<u8>>,
    dirty: HashSet<Vec<u8>>,
}

impl HandMap {
    pub fn put(&mut self, k: &[u8], v: &[u8]) {
        self.map.insert(k.to_vec(), v.to_vec());
        self.dirty.insert(k.to_vec());
    }

    /// Writes `dir/name` (all entries, or those written since the last checkpoint);
    /// returns the time to durable and the file's bytes.
    pub fn checkpoint(&mut self, dir: &Path, name: &str, full: bool) -> (Duration, u64) {
        let t = Instant::now();
        let tmp = dir.join(format!("{name}.tmp"));
        let mut out = std::io::BufWriter::with_capacity(1 << 20, std::fs::File::create(&tmp).unwrap());
        let mut raw = Vec::with_capacity(BLOCK + 1024);
        let mut packed = vec![0u8; lz4_flex::block::get_maximum_output_size(BLOCK + 1024)];
        let mut bytes = 0u64;
        let mut flush = |raw: &mut Vec<u8>, out: &mut std::io::BufWriter<std::fs::File>| {
            let n = lz4_flex::block::compress_into(raw, &mut packed).unwrap();
            let crc = crc32fast::hash(&packed[..n]);
            out.write_all(&(n as u32).to_le_bytes()).unwrap();
            out.write_all(&crc.to_le_bytes()).unwrap();
            out.write_all(&packed[..n]).unwrap();
            bytes += 8 + n as u64;
            raw.clear();
        };
        let mut emit =
            |k: &[u8], v: &[u8], raw: &mut Vec<u8>, out: &mut std::io::BufWriter<std::fs::File>| {
                raw.extend_from_slice(&(k.len() as u32).to_le_bytes());
                raw.extend_from_slice(&(v.len() as u32).to_le_bytes());
                raw.extend_from_slice(k);
                raw.extend_from_slice(v);
                if raw.len() >= BLOCK {
                    flush(raw, out);
                }
            };
        if full {
            for (k, v) in &self.map {
                emit(k, v, &mut raw, &mut out);
            }
        } else {
            for k in &self.dirty {
                emit(k, &self.map[k], &mut raw, &mut out);
            }
        }
        if !raw.is_empty() {
            flush(&mut raw, &mut out);
        }
        let f = out.into_inner().unwrap();
        f.sync_all().unwrap();
        drop(f);
        std::fs::rename(&tmp, dir.join(name)).unwrap();
        std::fs::File::open(dir).unwrap().sync_all().unwrap();
        self.dirty.clear();
        (t.elapsed(), bytes)
    }
}
