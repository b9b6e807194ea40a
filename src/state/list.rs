//! The encoding of list items, shared by the in-memory `ListState` value, increments
//! (appends) and snapshot files: items back to back, each `u32 LE length` then the bytes.

use super::list_buf::ListBuf;

/// A list value (`ListState`): its items encoded back to back as `u32 LE length, bytes`,
/// in a buffer its snapshots share (appends copy no item already there: `list_buf`).
#[derive(Clone, Debug, Default)]
pub(crate) struct ListValue {
    /// The encoded items.
    pub buf: ListBuf,
    /// Number of items in `buf`.
    pub count: u32,
    /// When `append_only` is set, the list equalled `buf[..base_len]` at every epoch in
    /// `[base_stamp, entry.stamp)`, and was only appended to since.
    pub base_stamp: u64,
    /// Byte length of the list as of `base_stamp`.
    pub base_len: u32,
    /// Whether only appends happened since `base_stamp`.
    pub append_only: bool,
}

/// Appends one item to an encoded list.
pub fn push_item(buf: &mut Vec<u8>, item: &[u8]) -> Result<(), ItemTooLarge> {
    let len = u32::try_from(item.len()).map_err(|_| ItemTooLarge(item.len()))?;
    buf.extend_from_slice(&len.to_le_bytes());
    buf.extend_from_slice(item);
    Ok(())
}

/// An item longer than `u32::MAX` bytes cannot be stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ItemTooLarge(pub usize);

/// Counts the items of an encoded list, or `None` if the bytes are not a well-formed
/// encoding (a length running past the end). Used on every list read from disk.
pub fn count_items(mut buf: &[u8]) -> Option<u32> {
    let mut n: u32 = 0;
    while !buf.is_empty() {
        let (len, rest) = buf.split_first_chunk::<4>()?;
        let len = usize::try_from(u32::from_le_bytes(*len)).ok()?;
        buf = rest.get(len..)?;
        n = n.checked_add(1)?;
    }
    Some(n)
}

/// Iterator over the items of a well-formed encoded list.
#[derive(Clone, Debug)]
pub struct ListItems<'a> {
    buf: &'a [u8],
}

impl<'a> ListItems<'a> {
    /// Iterates over `buf`; a malformed tail ends the iteration.
    pub fn new(buf: &'a [u8]) -> Self {
        ListItems { buf }
    }
}

impl<'a> Iterator for ListItems<'a> {
    type Item = &'a [u8];

    fn next(&mut self) -> Option<&'a [u8]> {
        let (len, rest) = self.buf.split_first_chunk::<4>()?;
        let len = usize::try_from(u32::from_le_bytes(*len)).ok()?;
        let item = rest.get(..len)?;
        self.buf = &rest[len..];
        Some(item)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encode_count_iterate() {
        let mut buf = Vec::new();
        for item in [&b"a"[..], b"", b"hello"] {
            push_item(&mut buf, item).unwrap();
        }
        assert_eq!(count_items(&buf), Some(3));
        let items: Vec<&[u8]> = ListItems::new(&buf).collect();
        assert_eq!(items, vec![&b"a"[..], b"", b"hello"]);
        assert_eq!(count_items(&buf[..buf.len() - 1]), None);
        assert_eq!(count_items(&[1, 0, 0]), None);
    }
}
