//! Decodes arbitrary bytes as a data file: opening, reading every block and looking keys
//! up must give results or `Corrupt` errors, never a panic or an unbounded allocation.
#![no_main]

use std::path::Path;

use floe::Error;
use floe::format::DataFile;
use floe_fuzz::{fix_data_file, input};
use libfuzzer_sys::fuzz_target;

fn check(r: floe::Result<()>, len: usize) {
    match r {
        Ok(()) => {}
        Err(Error::Corrupt { offset, .. }) => assert!(offset <= len as u64, "offset {offset} of {len}"),
        Err(Error::UnsupportedVersion { .. }) => {}
        Err(e) => panic!("unexpected error {e:?}"),
    }
}

fuzz_target!(|data: &[u8]| {
    let bytes = input(data, fix_data_file);
    let len = bytes.len();
    let f = match DataFile::from_bytes(Path::new("fuzz.data"), bytes) {
        Ok(f) => f,
        Err(e) => return check(Err(e), len),
    };
    let mut scratch = Vec::new();
    let mut all_read = true;
    let mut keys: Vec<(u32, Vec<u8>, usize)> = Vec::new();
    for b in f.blocks() {
        let mut n = 0u32;
        let r = f.for_each_record_in(b, &mut scratch, &mut |r| {
            n += 1;
            if let Some(k) = keys.iter_mut().find(|(s, k, _)| *s == b.state && k.as_slice() == r.key()) {
                k.2 += 1;
            } else if keys.len() < 32 {
                keys.push((b.state, r.key().to_vec(), 1));
            }
            Ok(())
        });
        if r.is_ok() {
            assert_eq!(n, b.records);
        }
        all_read &= r.is_ok();
        check(r, len);
    }
    // When every block reads, every key found by scanning is found by lookup, as often.
    for (state, key, count) in &keys {
        let mut found = 0usize;
        let r = f.lookup(*state, key, &mut |r| {
            assert_eq!(r.key(), &key[..]);
            found += 1;
            Ok(())
        });
        if all_read {
            assert!(r.is_ok(), "lookup of {key:?} failed on a file whose blocks all read");
            assert_eq!(found, *count, "lookup of {key:?}");
        }
        check(r, len);
    }
    for state in 0..f.states().len() as u32 + 1 {
        check(f.lookup(state, b"absent key", &mut |_| Ok(())), len);
    }
    let verified = f.verify_blocks().map(drop);
    // Reading each (state, key group) whole, in order (what restore does), checks the order
    // across its blocks as `verify_blocks` does (version 4: keys of one hash across a
    // boundary): both succeed or both fail.
    let mut groups: Vec<(u32, u32)> = f.blocks().iter().map(|b| (b.state, b.key_group)).collect();
    groups.dedup();
    let mut whole = Ok(());
    for &(state, kg) in &groups {
        let mut bufs = Vec::new();
        let r = f.group_records(state, kg, &mut bufs).map(drop);
        check(f.for_each_record(state, kg, &mut |_| Ok(())), len);
        if whole.is_ok() {
            whole = r;
        }
    }
    assert_eq!(whole.is_ok(), verified.is_ok(), "group reads {whole:?}, verify {verified:?}");
    check(verified, len);
    let _ = f.whole_crc32();
});
