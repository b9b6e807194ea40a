//! State descriptors: what a state is called, what kind it is, and how its bytes decode.
//! Descriptors are recorded in every checkpoint manifest so tools can decode state later.

use serde::{Deserialize, Serialize};

/// The kind of a state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum StateKind {
    /// One value per key.
    Value,
    /// A list of values per key.
    List,
    /// A map per key.
    Map,
}

impl StateKind {
    /// Lower-case name, as written in manifests.
    pub fn as_str(self) -> &'static str {
        match self {
            StateKind::Value => "value",
            StateKind::List => "list",
            StateKind::Map => "map",
        }
    }

    /// The kind's code in snapshot files.
    pub fn code(self) -> u8 {
        match self {
            StateKind::Value => 1,
            StateKind::List => 2,
            StateKind::Map => 3,
        }
    }

    /// The kind of a file code.
    pub fn from_code(code: u8) -> Option<StateKind> {
        match code {
            1 => Some(StateKind::Value),
            2 => Some(StateKind::List),
            3 => Some(StateKind::Map),
            _ => None,
        }
    }
}

/// How keys and values of a state are encoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Codec {
    /// Bytes chosen by the caller (the raw API); floe cannot decode them.
    Raw,
    /// serde through postcard 1.x (varint integers, length-prefixed strings).
    Postcard,
}

/// Describes one registered state.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct StateDescriptor {
    /// Unique name within the store.
    pub name: String,
    /// Value, list or map.
    pub kind: StateKind,
    /// Encoding of keys, map keys and values.
    pub codec: Codec,
    /// Rust type of the key (informational, for tools).
    pub key_type: String,
    /// Rust type of a map key (map states only).
    pub map_key_type: Option<String>,
    /// Rust type of a value (or list item).
    pub value_type: String,
}

impl StateDescriptor {
    /// A raw-bytes descriptor.
    pub fn raw(name: impl Into<String>, kind: StateKind) -> Self {
        StateDescriptor {
            name: name.into(),
            kind,
            codec: Codec::Raw,
            key_type: "bytes".into(),
            map_key_type: (kind == StateKind::Map).then(|| "bytes".into()),
            value_type: "bytes".into(),
        }
    }
}
