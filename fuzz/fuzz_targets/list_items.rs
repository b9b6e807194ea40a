//! `list::count_items` and `ListItems` agree on arbitrary bytes: a well-formed encoding is
//! counted and iterated completely (and re-encodes to the same bytes); a malformed one is
//! refused by `count_items` and iterated up to its malformed tail.
#![no_main]

use floe::state::list::{ListItems, count_items, push_item};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let items: Vec<&[u8]> = ListItems::new(data).collect();
    let mut again = Vec::with_capacity(data.len());
    for item in &items {
        push_item(&mut again, item).expect("items of a slice fit u32");
    }
    match count_items(data) {
        Some(n) => {
            assert_eq!(n as usize, items.len());
            assert_eq!(again, data);
        }
        None => {
            assert!(again.len() < data.len());
            assert!(data.starts_with(&again));
        }
    }
});
