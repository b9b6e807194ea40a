//! Writes seed corpora for the fuzz targets into `fuzz/corpus/<target>/` (not committed):
//! the files of a small checkpoint directory with a full snapshot and an increment, made
//! through floe's public API. Run: `cargo run --manifest-path fuzz/Cargo.toml --example seeds`.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use floe::checkpoint::{CheckpointStorage, Checkpointer, StorageConfig, Target};
use floe::state::{StateDescriptor, StateKind, Store, list};

fn main() -> floe::Result<()> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("corpus");
    let dir = std::env::temp_dir().join(format!("floe-fuzz-seeds-{}", std::process::id()));
    let storage = CheckpointStorage::open(&dir, StorageConfig::default())?;
    let mut store = Store::new();
    let v = store.register(StateDescriptor::raw("v", StateKind::Value))?;
    let l = store.register(StateDescriptor::raw("l", StateKind::List))?;
    let m = store.register(StateDescriptor::raw("m", StateKind::Map))?;
    for i in 0..24u32 {
        let k = format!("key-{i}");
        store.put(v, k.as_bytes(), format!("value {i} value {i}").as_bytes())?;
        for j in 0..=i % 3 {
            store.list_append(l, k.as_bytes(), format!("item {j} item {j}").as_bytes())?;
        }
        for j in 0..=i % 4 {
            store.map_put(m, k.as_bytes(), format!("mk-{j}").as_bytes(), format!("mv {i} {j}").as_bytes())?;
        }
    }
    let mut cp = Checkpointer::new(Arc::clone(&storage), "op", 0);
    for id in 1..=2u64 {
        if id == 2 {
            for i in (0..24u32).step_by(3) {
                let k = format!("key-{i}");
                store.delete(v, k.as_bytes())?;
                store.list_append(l, k.as_bytes(), b"appended")?;
                store.map_remove(m, k.as_bytes(), b"mk-0")?;
            }
        }
        let (handle, _) = cp.snapshot(&mut store, id, Target::Checkpoint)?.wait()?;
        storage.commit(id, Target::Checkpoint, vec![handle.clone()], BTreeMap::new(), BTreeMap::new())?;
        cp.notify_complete(id, &handle, &mut store);
    }
    let write = |target: &str, name: &str, mode: u8, bytes: &[u8]| -> std::io::Result<()> {
        let d = root.join(target);
        std::fs::create_dir_all(&d)?;
        let mut b = Vec::with_capacity(bytes.len() + 1);
        if mode != u8::MAX {
            b.push(mode);
        }
        b.extend_from_slice(bytes);
        std::fs::write(d.join(name), b)
    };
    let io = |e: std::io::Error| floe::Error::io("write seed", &root, e);
    for e in std::fs::read_dir(dir.join("data")).map_err(|e| floe::Error::io("read dir", &dir, e))? {
        let p = e.map_err(|e| floe::Error::io("read dir", &dir, e))?.path();
        let bytes = std::fs::read(&p).map_err(|e| floe::Error::io("read", &p, e))?;
        let name = p.file_name().and_then(|n| n.to_str()).unwrap_or("data");
        for target in ["data_file", "records_apply"] {
            write(target, &format!("fixed-{name}"), 1, &bytes).map_err(io)?;
            write(target, &format!("raw-{name}"), 0, &bytes).map_err(io)?;
        }
    }
    // The spec's test vectors: version-1 files, a version-4 file whose runs of one hash
    // continue across blocks, channel state, and damaged ones.
    let vectors = Path::new(env!("CARGO_MANIFEST_DIR")).join("../format-spec/test-vectors");
    for v in std::fs::read_dir(&vectors).map_err(|e| floe::Error::io("read dir", &vectors, e))? {
        let v = v.map_err(|e| floe::Error::io("read dir", &vectors, e))?.path();
        let Ok(files) = std::fs::read_dir(v.join("data")) else { continue };
        let vector = v.file_name().and_then(|n| n.to_str()).unwrap_or("vector").to_string();
        for e in files {
            let p = e.map_err(|e| floe::Error::io("read dir", &v, e))?.path();
            if p.extension().is_some_and(|x| x == "chan") {
                continue;
            }
            let bytes = std::fs::read(&p).map_err(|e| floe::Error::io("read", &p, e))?;
            let name = p.file_name().and_then(|n| n.to_str()).unwrap_or("data");
            for target in ["data_file", "records_apply"] {
                write(target, &format!("{vector}-{name}"), 0, &bytes).map_err(io)?;
            }
        }
    }
    for id in 1..=2 {
        let p = storage.manifest_path(id);
        let bytes = std::fs::read(&p).map_err(|e| floe::Error::io("read", &p, e))?;
        write("manifest", &format!("fixed-{id}"), 1, &bytes).map_err(io)?;
        write("manifest", &format!("raw-{id}"), 0, &bytes).map_err(io)?;
    }
    let mut items = Vec::new();
    for item in [&b"a"[..], b"", b"hello world"] {
        list::push_item(&mut items, item).map_err(|e| floe::Error::InvalidRecord(format!("{e:?}")))?;
    }
    write("list_items", "three", u8::MAX, &items).map_err(io)?;
    write("list_items", "truncated", u8::MAX, &items[..items.len() - 1]).map_err(io)?;
    let _ = std::fs::remove_dir_all(&dir);
    println!("seeds written to {}", root.display());
    Ok(())
}
