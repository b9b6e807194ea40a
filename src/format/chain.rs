//! The checks between the data files of a chain and the manifest entry that names them
//! (format-spec/layout.md, "Resolving a chain"). They are written once, here: restore
//! (`checkpoint::open_chain`) stops at the first problem, `floe verify` reports them all,
//! and both name the same offset for each.

use super::FORMAT_VERSION;
use super::datafile::{DataHeader, FileKind, FileOwner, FileState};
use super::manifest::OperatorState;

/// One way a data file does not fit its place in a chain: the offset in the data file of
/// the field that disagrees, and what is wrong.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChainProblem {
    /// Offset in the data file (a header field, or a state's entry in the index).
    pub offset: u64,
    /// What is wrong.
    pub what: String,
}

/// The file written by another checkpoint than the manifest's `created_by` says (header
/// offset 16), if it is.
pub fn created_by_problem(header: &DataHeader, created_by: u64) -> Option<ChainProblem> {
    (header.checkpoint_id != created_by).then(|| ChainProblem {
        offset: 16,
        what: format!(
            "file was written by checkpoint {}, the manifest says {created_by}",
            header.checkpoint_id
        ),
    })
}

/// A place in a chain, as the manifest gives it.
#[derive(Debug, Clone, Copy)]
pub struct ChainPlace<'a> {
    /// The operator entry whose chain it is.
    pub op: &'a OperatorState,
    /// 0-based position in `op.chain`.
    pub position: usize,
    /// The file's `created_by` in the manifest's `files`.
    pub created_by: u64,
    /// The file's `format_version` in the manifest's `files` (absent: 1 or 2).
    pub format_version: Option<u32>,
    /// The checkpoint id in the previous file's header (`None` at position 0, or unknown).
    pub previous: Option<u64>,
    /// The manifest's `max_parallelism`.
    pub max_parallelism: u32,
}

/// What a data file of format `version` with `header` and `states` (whose index entries lie
/// at `state_offset(i)`) breaks at `place`, in the order of layout.md: version, kind,
/// writer, parent, max_parallelism, owner (version 2: subtask, operator, key groups), state
/// kinds.
pub fn chain_problems(
    header: &DataHeader,
    version: u32,
    states: &[FileState],
    state_offset: &dyn Fn(u32) -> u64,
    place: &ChainPlace<'_>,
) -> Vec<ChainProblem> {
    let ChainPlace { op, position, created_by, format_version, previous, max_parallelism } = *place;
    let mut out = Vec::new();
    let mut bad = |offset: u64, what: String| out.push(ChainProblem { offset, what });
    let who = format!("{}[{}]", op.operator, op.subtask);
    // The manifest's version covers its files: a version-4 file is listed as one, so that a
    // reader refuses the checkpoint at its manifest, before opening files it cannot read.
    let listed = match format_version {
        Some(v) => v == version,
        None => version <= FORMAT_VERSION,
    };
    if !listed {
        let says = format_version.map_or("1 or 2".to_string(), |v| v.to_string());
        bad(8, format!("file is format version {version}, the manifest lists it as {says}"));
    }
    let want = if position == 0 { FileKind::Full } else { FileKind::Increment };
    if header.kind != want {
        bad(12, format!("chain position {position} of {who} holds a {:?} file", header.kind));
    }
    if let Some(p) = created_by_problem(header, created_by) {
        bad(p.offset, p.what);
    }
    if let Some(prev) = previous
        && position > 0
        && header.parent_id != prev
    {
        bad(
            24,
            format!(
                "increment's parent is {}, the previous file of the chain is from {prev}",
                header.parent_id
            ),
        );
    }
    if header.max_parallelism != max_parallelism {
        bad(
            32,
            format!(
                "max_parallelism {} differs from the manifest's {max_parallelism}",
                header.max_parallelism
            ),
        );
    }
    // Version-1 files did not record their owner: nothing to compare.
    if let Some(owner) = header.owner {
        if owner.subtask != op.subtask {
            bad(36, format!("file belongs to subtask {}, the chain is {who}'s", owner.subtask));
        }
        if owner.operator_hash != FileOwner::operator_hash_of(&op.operator) {
            bad(
                40,
                format!(
                    "file belongs to another operator (hash {:016x}), the chain is {who}'s",
                    owner.operator_hash
                ),
            );
        }
        if owner.key_groups != op.key_groups {
            bad(
                48,
                format!(
                    "file holds key groups {}, the manifest gives {who} key groups {}",
                    owner.key_groups, op.key_groups
                ),
            );
        }
    }
    for d in &op.states {
        if let Some((i, s)) = states.iter().enumerate().find(|(_, s)| s.name == d.name)
            && s.kind != d.kind
        {
            bad(
                state_offset(u32::try_from(i).unwrap_or(u32::MAX)),
                format!(
                    "state {} is a {} state here, the manifest says {}",
                    d.name,
                    s.kind.as_str(),
                    d.kind.as_str()
                ),
            );
        }
    }
    out
}

impl super::DataFile {
    /// [`chain_problems`] of this file at `place`.
    pub fn chain_problems(&self, place: &ChainPlace<'_>) -> Vec<ChainProblem> {
        chain_problems(&self.header(), self.version(), self.states(), &|i| self.state_offset(i), place)
    }
}
