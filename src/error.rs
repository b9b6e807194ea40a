//! The crate's error type: structured, `#[non_exhaustive]`, with I/O failures, on-disk
//! corruption and unsupported versions kept apart so callers can react to each.

use std::path::PathBuf;

/// Result alias used throughout floe.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong in floe.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// An operating-system I/O call failed.
    #[error("I/O error during {op} on {}: {source}", path.display())]
    Io {
        /// What floe was doing (`"open"`, `"write"`, `"fsync"`, `"rename"`, ...).
        op: &'static str,
        /// The file or directory involved.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// Bytes on disk do not form a valid floe structure.
    #[error("corrupt data in {} at offset {offset}: {what}", path.display())]
    Corrupt {
        /// The file that holds the bad bytes.
        path: PathBuf,
        /// Byte offset in that file where the problem was found.
        offset: u64,
        /// What was wrong.
        what: String,
    },
    /// A file was written by a format version this build cannot read.
    #[error("{} has format version {found}, this build reads up to {supported}", path.display())]
    UnsupportedVersion {
        /// The file.
        path: PathBuf,
        /// The version found in the file.
        found: u32,
        /// The newest version this build understands.
        supported: u32,
    },
    /// A key hashed to a key group that this store does not own.
    #[error("key group {key_group} is outside this store's range {start}..{end}")]
    KeyGroupOutOfRange {
        /// The key's group.
        key_group: u32,
        /// First owned group.
        start: u32,
        /// One past the last owned group.
        end: u32,
    },
    /// No state of that name or id is registered.
    #[error("unknown state {0:?}")]
    UnknownState(String),
    /// A state was used (or re-registered) as a different kind than it was declared.
    #[error("state {name:?} is a {actual} state, not a {expected} state")]
    StateKindMismatch {
        /// The state's name.
        name: String,
        /// The kind the caller asked for.
        expected: &'static str,
        /// The kind the state has.
        actual: &'static str,
    },
    /// Encoding or decoding a typed key or value failed.
    #[error("codec error for state {state:?}: {source}")]
    Codec {
        /// The state whose codec failed.
        state: String,
        /// The codec's error.
        #[source]
        source: postcard::Error,
    },
    /// A write was refused because its data could not be stored: a record longer than the
    /// format's limit (`state::MAX_RECORD_LEN`), a state name longer than 65535 bytes, or
    /// more states than one operator instance may have. Nothing was changed.
    #[error("state {state:?}: {what} of {len} exceeds the limit of {limit}")]
    TooLarge {
        /// The state written to (or registered).
        state: String,
        /// What was too large (`"put record (key and value)"`, `"state name"`, ...).
        what: &'static str,
        /// Its size (bytes, or a count for `"number of states"`).
        len: u64,
        /// The largest size the format holds.
        limit: u64,
    },
    /// A state was registered again with another codec or other type names than it was
    /// registered (or recorded in the checkpoint it was restored from) with. Changing them
    /// takes an explicit migration (`Store::migrate_state`).
    #[error(
        "state {name:?} is registered with {field} {registered:?}, not {requested:?} \
         (re-typing a state takes Store::migrate_state)"
    )]
    StateTypeMismatch {
        /// The state's name.
        name: String,
        /// What differs: `"codec"`, `"key type"`, `"map key type"` or `"value type"`.
        field: &'static str,
        /// What the state is registered with.
        registered: String,
        /// What the caller asked for.
        requested: String,
    },
    /// A record does not fit the state it is applied to (wrong kind, malformed list).
    #[error("invalid record: {0}")]
    InvalidRecord(String),
    /// A configuration value is not acceptable.
    #[error("invalid configuration: {0}")]
    InvalidConfig(String),
    /// A checkpoint, file or directory that the operation needs does not exist.
    #[error("not found: {0}")]
    NotFound(String),
    /// The path is not floe's to touch (it holds something floe did not write).
    #[error("{} is not a floe directory: {why}", path.display())]
    NotOurs {
        /// The path.
        path: PathBuf,
        /// What was found there.
        why: String,
    },
    /// A task of a running job failed (the job restarts or fails).
    #[error("task {task} failed: {reason}")]
    TaskFailed {
        /// `operator[subtask]`.
        task: String,
        /// What went wrong.
        reason: String,
    },
    /// A task stopped because its attempt was cancelled or a task it sends to exited: a
    /// consequence of another failure, never its cause.
    #[error("cancelled: {0}")]
    Cancelled(String),
    /// A task panicked (the attempt fails like on an error).
    #[error("task {task} panicked: {message}")]
    TaskPanicked {
        /// `operator[subtask]`.
        task: String,
        /// The panic message.
        message: String,
    },
    /// More checkpoints failed in a row than the job tolerates.
    #[error("{failed} checkpoints failed in a row (more than the {tolerated} tolerated); the last: {last}")]
    CheckpointsFailing {
        /// Failed in a row.
        failed: u32,
        /// Tolerated.
        tolerated: u32,
        /// The last failure.
        last: String,
    },
    /// A job gave up: its restarts are used up, or it cannot restore.
    #[error("job failed after {restarts} restarts: {cause}")]
    JobFailed {
        /// Restarts made.
        restarts: u32,
        /// The failure of the last attempt.
        #[source]
        cause: Box<Error>,
    },
    /// A stop-with-savepoint found the job ending by itself (its bounded input ended) or
    /// ended: the job was let finish, its final checkpoint publishing its output; no
    /// savepoint was taken.
    #[error(
        "no savepoint taken: the job ended by itself (its input ended); its last completed checkpoint: {}",
        last_checkpoint.map_or_else(|| "none".to_string(), |id| id.to_string())
    )]
    JobEnded {
        /// The job's last completed checkpoint (its final one).
        last_checkpoint: Option<u64>,
    },
    /// A failure injected on purpose (tests, the demo's crash).
    #[error("injected failure: {0}")]
    Injected(String),
    /// A background task failed or was cancelled before it reported.
    #[error("background task failed: {0}")]
    Background(String),
    /// Another writer holds the checkpoint directory (a running job, `floe compact`,
    /// `floe gc`): one writer per directory.
    #[error("{} is locked by another writer ({holder}); floe allows one writer per directory", path.display())]
    Locked {
        /// The directory.
        path: PathBuf,
        /// Who holds it, as its LOCK file says (pid, host, since when).
        holder: String,
    },
    /// The file system is full (`ENOSPC`, or a quota: `EDQUOT`).
    #[error("no space left on the device during {op} on {}: {source}", path.display())]
    NoSpace {
        /// What floe was doing.
        op: &'static str,
        /// The file or directory involved.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// A checkpoint id that cannot be used now: ids only go up, and an aborted id is never
    /// written or committed.
    #[error("checkpoint {id} refused: {why}")]
    CheckpointId {
        /// The id.
        id: u64,
        /// Why (`"at or below the newest committed checkpoint 5"`, `"aborted"`, ...).
        why: String,
    },
    /// An increment was asked for against a parent the store cannot vouch for (another
    /// store instance, or a parent older than the store's confirmed epoch): writing it
    /// would silently miss writes or deletes.
    #[error("no increment for {task}: {why}")]
    ParentMismatch {
        /// `operator[subtask]`.
        task: String,
        /// What did not match.
        why: String,
    },
    /// The name a checkpoint publishes was taken by another writer first: of two writers
    /// racing for one checkpoint id (on object storage, where the create-only manifest put
    /// is the lock) exactly one wins, and this is what the other gets. Nothing was
    /// overwritten.
    #[error(
        "{} was published first by another writer (a job, floe compact, or a second process using the same checkpoint id); floe never replaces a file, so nothing was overwritten: run one writer per directory, and retry with a new id",
        path.display()
    )]
    AlreadyPublished {
        /// The file (a manifest, or a data file) whose name was taken.
        path: PathBuf,
    },
    /// The operation writes, and this handle was opened read-only (`open_existing`).
    #[error("{} was opened read-only; {op} needs a writing handle (CheckpointStorage::open)", path.display())]
    ReadOnly {
        /// The directory.
        path: PathBuf,
        /// What was attempted.
        op: &'static str,
    },
}

impl Error {
    /// Builds an [`Error::Io`].
    /// A full disk (`ENOSPC`, `EDQUOT`) becomes [`Error::NoSpace`], so callers and the tool
    /// can name it.
    pub fn io(op: &'static str, path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        if matches!(source.kind(), std::io::ErrorKind::StorageFull | std::io::ErrorKind::QuotaExceeded) {
            return Error::NoSpace { op, path: path.into(), source };
        }
        Error::Io { op, path: path.into(), source }
    }

    /// Builds an [`Error::Corrupt`].
    pub fn corrupt(path: impl Into<PathBuf>, offset: u64, what: impl Into<String>) -> Self {
        Error::Corrupt { path: path.into(), offset, what: what.into() }
    }

    /// True when the error says stored data is damaged (as opposed to I/O or usage).
    pub fn is_corruption(&self) -> bool {
        matches!(self, Error::Corrupt { .. } | Error::UnsupportedVersion { .. })
    }

    /// True when a checkpoint that fails with this error is unusable for good, so
    /// recovery may fall back to an older one: corruption, an unsupported version, or a
    /// file that is missing. Anything else (`EIO`, `EMFILE`, permissions, a full disk) may
    /// pass, and recovery returns it instead of silently restoring older state.
    pub fn is_permanent_damage(&self) -> bool {
        match self {
            Error::Corrupt { .. } | Error::UnsupportedVersion { .. } => true,
            Error::Io { source, .. } => source.kind() == std::io::ErrorKind::NotFound,
            _ => false,
        }
    }

    /// True for an I/O error whose cause is a file that is not there (`NotFound`).
    pub fn is_not_found(&self) -> bool {
        matches!(self, Error::Io { source, .. } if source.kind() == std::io::ErrorKind::NotFound)
    }

    /// True for [`Error::NoSpace`], also when it is the cause of a task failure.
    pub fn is_no_space(&self) -> bool {
        matches!(self, Error::NoSpace { .. })
    }
}
