//! The dataflow API: a job is a graph of sources, operators and sinks, each with a
//! parallelism. Every stream of a job carries records of one type `T`.

use std::sync::Arc;

use super::sink::SinkConfig;
use super::source::Source;
use crate::error::Result;
use crate::state::Store;

/// Identifies a node of a [`JobGraph`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct NodeId(pub(crate) usize);

/// Builds a source instance: `(subtask, parallelism)`.
pub type SourceFactory<T> = Arc<dyn Fn(u32, u32) -> Box<dyn Source<T>> + Send + Sync>;
/// Extracts a record's key bytes (hashed into key groups).
pub type KeyFn<T> = Arc<dyn Fn(&T) -> Vec<u8> + Send + Sync>;
/// Builds a keyed process function instance.
pub type ProcessFactory<T> = Arc<dyn Fn() -> Box<dyn KeyedProcess<T>> + Send + Sync>;

/// A keyed, stateful function: the store holds its state, partitioned by the key.
pub trait KeyedProcess<T>: Send {
    /// Registers states (called once per task, before any record, also after a restore).
    fn open(&mut self, store: &mut Store) -> Result<()>;
    /// Handles one record from input `input` whose key is `key`; outputs go to `out`.
    fn process(
        &mut self,
        input: usize,
        key: &[u8],
        record: T,
        store: &mut Store,
        out: &mut Vec<T>,
    ) -> Result<()>;
}

/// How records travel along an edge.
#[derive(Clone)]
pub(crate) enum Partitioning<T> {
    /// Subtask i to subtask i (same parallelism), else round robin.
    Forward,
    /// By key group of the key.
    KeyBy(KeyFn<T>),
}

#[derive(Clone)]
pub(crate) enum Kind<T> {
    Source(SourceFactory<T>),
    Map(Arc<dyn Fn(T) -> T + Send + Sync>),
    Filter(Arc<dyn Fn(&T) -> bool + Send + Sync>),
    FlatMap(Arc<dyn Fn(T) -> Vec<T> + Send + Sync>),
    Union,
    Keyed { key: KeyFn<T>, process: ProcessFactory<T> },
    Sink(SinkConfig),
}

#[derive(Clone)]
pub(crate) struct Node<T> {
    pub name: String,
    pub parallelism: u32,
    pub kind: Kind<T>,
    pub inputs: Vec<(NodeId, Partitioning<T>)>,
}

/// A job's dataflow graph.
#[derive(Clone)]
pub struct JobGraph<T> {
    pub(crate) nodes: Vec<Node<T>>,
}

impl<T> Default for JobGraph<T> {
    fn default() -> Self {
        JobGraph { nodes: Vec::new() }
    }
}

impl<T: 'static> JobGraph<T> {
    /// An empty graph.
    pub fn new() -> Self {
        Self::default()
    }

    fn add(
        &mut self,
        name: &str,
        parallelism: u32,
        kind: Kind<T>,
        inputs: Vec<(NodeId, Partitioning<T>)>,
    ) -> NodeId {
        self.nodes.push(Node { name: name.to_string(), parallelism: parallelism.max(1), kind, inputs });
        NodeId(self.nodes.len() - 1)
    }

    /// A source with `parallelism` instances built by `factory(subtask, parallelism)`.
    pub fn source(
        &mut self,
        name: &str,
        parallelism: u32,
        factory: impl Fn(u32, u32) -> Box<dyn Source<T>> + Send + Sync + 'static,
    ) -> NodeId {
        self.add(name, parallelism, Kind::Source(Arc::new(factory)), vec![])
    }

    /// Applies `f` to every record.
    pub fn map(
        &mut self,
        name: &str,
        parallelism: u32,
        input: NodeId,
        f: impl Fn(T) -> T + Send + Sync + 'static,
    ) -> NodeId {
        self.add(name, parallelism, Kind::Map(Arc::new(f)), vec![(input, Partitioning::Forward)])
    }

    /// Keeps the records for which `f` is true.
    pub fn filter(
        &mut self,
        name: &str,
        parallelism: u32,
        input: NodeId,
        f: impl Fn(&T) -> bool + Send + Sync + 'static,
    ) -> NodeId {
        self.add(name, parallelism, Kind::Filter(Arc::new(f)), vec![(input, Partitioning::Forward)])
    }

    /// Replaces every record with zero or more records.
    pub fn flat_map(
        &mut self,
        name: &str,
        parallelism: u32,
        input: NodeId,
        f: impl Fn(T) -> Vec<T> + Send + Sync + 'static,
    ) -> NodeId {
        self.add(name, parallelism, Kind::FlatMap(Arc::new(f)), vec![(input, Partitioning::Forward)])
    }

    /// Merges several streams into one.
    pub fn union(&mut self, name: &str, parallelism: u32, inputs: &[NodeId]) -> NodeId {
        let inputs = inputs.iter().map(|&i| (i, Partitioning::Forward)).collect();
        self.add(name, parallelism, Kind::Union, inputs)
    }

    /// A keyed, stateful operator over one or more inputs (`key_by` on each): records are
    /// routed to the instance owning their key group, and the function sees which input a
    /// record came from (two inputs make a connected, two-input operator). `key` gives the
    /// record's key, the same value the function's typed states are keyed by.
    pub fn keyed_process<K: serde::Serialize>(
        &mut self,
        name: &str,
        parallelism: u32,
        inputs: &[NodeId],
        key: impl Fn(&T) -> K + Send + Sync + 'static,
        factory: impl Fn() -> Box<dyn KeyedProcess<T>> + Send + Sync + 'static,
    ) -> NodeId {
        // The key is encoded exactly as typed states encode keys (postcard), so a record
        // is routed to the instance that owns its key in the store.
        let key: KeyFn<T> = Arc::new(move |r: &T| postcard::to_allocvec(&key(r)).unwrap_or_default());
        let inputs = inputs.iter().map(|&i| (i, Partitioning::KeyBy(Arc::clone(&key)))).collect();
        self.add(name, parallelism, Kind::Keyed { key, process: Arc::new(factory) }, inputs)
    }

    /// A sink.
    pub fn sink(&mut self, name: &str, parallelism: u32, input: NodeId, config: SinkConfig) -> NodeId {
        self.add(name, parallelism, Kind::Sink(config), vec![(input, Partitioning::Forward)])
    }
}
