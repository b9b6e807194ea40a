//! Records: the unit in which snapshots and increments are expressed, written to files and
//! applied to stores. A full snapshot is a sequence of `Put`, `Append` and `MapPut`
//! records; an increment may hold any record.

/// Largest encoded record, tag and length prefixes included: 64 MiB. A data-file block holds
/// at least one record and at most `format::MAX_BLOCK_LEN` (the same number) bytes of them,
/// so the store refuses any write whose record would be longer (`Error::TooLarge`): a
/// full snapshot writes a value state's key and value as one `Put`, a list's key and all of
/// its items as one `Put`, a map entry as one `MapPut`.
pub const MAX_RECORD_LEN: usize = 64 << 20;

/// The smallest encoded record: a `Delete` of an empty key (tag and one `u32` length).
pub const MIN_RECORD_LEN: usize = 5;

/// One change to one key of one state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Record<'a> {
    /// Value state: set the value. List state: replace the list with the encoded items.
    Put {
        /// Encoded key.
        key: &'a [u8],
        /// Value, or encoded list (see `state::list`).
        value: &'a [u8],
    },
    /// Remove the key, whatever its kind.
    Delete {
        /// Encoded key.
        key: &'a [u8],
    },
    /// List state: append the encoded items.
    Append {
        /// Encoded key.
        key: &'a [u8],
        /// Encoded items.
        items: &'a [u8],
    },
    /// Map state: set one map entry.
    MapPut {
        /// Encoded key.
        key: &'a [u8],
        /// Encoded map key.
        map_key: &'a [u8],
        /// Encoded value.
        value: &'a [u8],
    },
    /// Map state: remove one map entry.
    MapDelete {
        /// Encoded key.
        key: &'a [u8],
        /// Encoded map key.
        map_key: &'a [u8],
    },
}

impl<'a> Record<'a> {
    /// The record's key.
    pub fn key(&self) -> &'a [u8] {
        match *self {
            Record::Put { key, .. }
            | Record::Delete { key }
            | Record::Append { key, .. }
            | Record::MapPut { key, .. }
            | Record::MapDelete { key, .. } => key,
        }
    }

    /// Length of the record's encoding in a block: a one-byte tag, then each field as a
    /// `u32` length and its bytes (saturating, so an impossible length compares as huge).
    pub fn encoded_len(&self) -> usize {
        let field = |b: &[u8]| b.len().saturating_add(4);
        let fields = match *self {
            Record::Put { key, value } => field(key).saturating_add(field(value)),
            Record::Delete { key } => field(key),
            Record::Append { key, items } => field(key).saturating_add(field(items)),
            Record::MapPut { key, map_key, value } => {
                field(key).saturating_add(field(map_key)).saturating_add(field(value))
            }
            Record::MapDelete { key, map_key } => field(key).saturating_add(field(map_key)),
        };
        fields.saturating_add(1)
    }

    /// A short name of the record's kind.
    pub fn kind_name(&self) -> &'static str {
        match self {
            Record::Put { .. } => "put",
            Record::Delete { .. } => "delete",
            Record::Append { .. } => "append",
            Record::MapPut { .. } => "map-put",
            Record::MapDelete { .. } => "map-delete",
        }
    }
}
