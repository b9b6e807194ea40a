//! Decodes arbitrary bytes as a manifest: a result or a typed error, never a panic; what
//! decodes holds only safe relative paths and survives an encode/decode round trip.
#![no_main]

use std::path::Path;

use floe::Error;
use floe::format::Manifest;
use floe::format::manifest::is_safe_relative;
use floe_fuzz::{fix_manifest, input};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let bytes = input(data, fix_manifest);
    let path = Path::new("fuzz.manifest");
    match Manifest::decode(path, &bytes) {
        Ok(m) => {
            assert!(m.files.iter().all(|f| is_safe_relative(&f.path)));
            for op in &m.operators {
                assert!(!op.chain.is_empty());
                assert!(op.chain.iter().all(|c| m.file(c).is_some()));
            }
            let _ = m.source_positions();
            let again = Manifest::decode(path, &m.encode().expect("a decoded manifest encodes"))
                .expect("an encoded manifest decodes");
            assert_eq!(m, again);
        }
        Err(Error::Corrupt { offset, .. }) => assert!(offset <= bytes.len() as u64),
        Err(Error::UnsupportedVersion { .. }) => {}
        Err(e) => panic!("unexpected error {e:?}"),
    }
});
