//! Decodes arbitrary bytes as a data file and applies its records to a store through
//! `load_chain`, as recovery does: a typed error or a consistent store, never a panic. A
//! store that loads is snapshotted and rebuilt from its full records, which must give the
//! same contents.
#![no_main]

use std::path::Path;

use floe::checkpoint::load_chain;
use floe::format::{DataFile, OperatorState};
use floe::state::{KeyGroupRange, StateDescriptor, Store, StoreConfig};
use floe_fuzz::{contents, fix_data_file, input};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let bytes = input(data, fix_data_file);
    let Ok(f) = DataFile::from_bytes(Path::new("fuzz.data"), bytes) else { return };
    let mp = f.header().max_parallelism;
    let all = KeyGroupRange::all(mp);
    let op = OperatorState {
        operator: "op".into(),
        subtask: 0,
        key_groups: all,
        chain: vec!["fuzz.data".into()],
        states: f.states().iter().map(|s| StateDescriptor::raw(s.name.clone(), s.kind)).collect(),
        bytes_written: 0,
    };
    let config = StoreConfig { max_parallelism: mp, key_groups: all };
    let mut store = Store::with_config(config).expect("a valid file has a valid max_parallelism");
    if load_chain(&mut store, std::slice::from_ref(&f), &op, all).is_err() {
        return;
    }
    let loaded = contents(&mut store);
    let snap = store.snapshot();
    let mut rebuilt = Store::with_config(config).unwrap();
    rebuilt.apply_snapshot(&snap, None).expect("a snapshot's records apply");
    assert_eq!(contents(&mut rebuilt), loaded);
    // Applying the file again on top is allowed to fail but must not panic.
    let _ = load_chain(&mut store, std::slice::from_ref(&f), &op, all);
});
