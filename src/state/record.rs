//! Records: the unit in which snapshots and increments are expressed, written to files and
//! applied to stores. A full snapshot is a sequence of `Put`, `Append` and `MapPut`
//! records; an increment may hold any record.

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
