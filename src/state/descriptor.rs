//! State descriptors: what a state is called, what kind it is, and how its bytes decode.
//! Descriptors are recorded in every checkpoint manifest so tools can decode state later.

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

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

impl Codec {
    /// Lower-case name, as written in manifests.
    pub fn as_str(self) -> &'static str {
        match self {
            Codec::Raw => "raw",
            Codec::Postcard => "postcard",
        }
    }
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
    /// Whether a state recorded as `self` may be used as `other`: the same descriptor.
    /// Another kind is [`Error::StateKindMismatch`]; another codec, key type, map key type
    /// or value type is [`Error::StateTypeMismatch`] naming the first field that differs.
    /// The names are what floe recorded (for typed states `std::any::type_name`), compared
    /// exactly.
    pub fn check_same(&self, other: &StateDescriptor) -> Result<()> {
        if self.kind != other.kind {
            return Err(Error::StateKindMismatch {
                name: other.name.clone(),
                expected: other.kind.as_str(),
                actual: self.kind.as_str(),
            });
        }
        let none = || "none".to_string();
        let fields: [(&'static str, String, String); 4] = [
            ("codec", self.codec.as_str().into(), other.codec.as_str().into()),
            ("key type", self.key_type.clone(), other.key_type.clone()),
            (
                "map key type",
                self.map_key_type.clone().unwrap_or_else(none),
                other.map_key_type.clone().unwrap_or_else(none),
            ),
            ("value type", self.value_type.clone(), other.value_type.clone()),
        ];
        for (field, registered, requested) in fields {
            if registered != requested {
                return Err(Error::StateTypeMismatch {
                    name: other.name.clone(),
                    field,
                    registered,
                    requested,
                });
            }
        }
        Ok(())
    }

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
