//! The dataflow API, after Flink's DataStream API: a [`Job`] builds typed streams; each
//! operator may change the record type; `key_by` gives a keyed stream whose functions get
//! the typed key; two keyed streams of different types connect into one two-input
//! function; keyed streams window. Type mistakes are compile errors.
//!
//! Under the API a job is a graph of type-erased nodes: each knows how to make channels
//! for its output types and how to build a task from channels of its input types (the
//! runner wires them; `build.rs` turns a wiring into a typed task).

use std::any::Any;
use std::cell::RefCell;
use std::marker::PhantomData;
use std::rc::Rc;
use std::sync::Arc;

use super::Data;
use super::build::{
    ChannelMaker, TaskBody, Wiring, channel_maker, keyed_body, operator_body, sink_body, source_body,
};
use super::channel::Partitioner;
use super::function::{Key, KeyedCoProcessFunction, KeyedProcessFunction};
use super::messages::Timestamp;
use super::operator::{CoKeyed, Keyed, KeyedCore, Stateless};
use super::sinks::SinkFactory;
use super::source::Source;
use super::time::WatermarkStrategy;
use super::window::{AggregateFunction, FIRED_STATE, WINDOW_STATE, WindowLogic, Windowed, Windows};
use crate::error::{Error, Result};

/// Builds a task from its wiring.
pub(crate) type Build = Arc<dyn Fn(Wiring) -> Result<TaskBody> + Send + Sync>;

/// An edge into a node.
#[derive(Clone)]
pub(crate) struct Edge {
    pub from: usize,
    /// 0: the upstream's main output, 1: its side output.
    pub port: usize,
    /// 0: the node's first input, 1: its second.
    pub input: u8,
    /// A `Partitioner<T>` of the edge's record type.
    pub partitioner: Arc<dyn Any + Send + Sync>,
    /// Subtask i to subtask i when the parallelisms match.
    pub forward: bool,
}

/// A node of the graph.
#[derive(Clone)]
pub(crate) struct Node {
    pub name: String,
    pub parallelism: u32,
    pub inputs: Vec<Edge>,
    /// What the operator keeps in checkpoints, so a restore can refuse state that a node
    /// of another kind under the same name would drop or misapply.
    pub kind: NodeKind,
    /// Channel makers of the main and the side output.
    pub ports: [ChannelMaker; 2],
    pub build: Build,
}

impl Node {
    /// Whether it is a source (it reads no channel).
    pub fn is_source(&self) -> bool {
        self.kind == NodeKind::Source
    }
}

/// The kinds of operator, by what they keep in checkpoints.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum NodeKind {
    /// Positions (`sources`), clocks.
    Source,
    /// Nothing of its own (map, filter, flat map, union).
    Stateless,
    /// A keyed one- or two-input function: its states and timers.
    Keyed,
    /// Event-time windows: the runtime's window state and timers.
    Window,
    /// A two-phase-commit sink: its transactions (`sink/` entries).
    Sink,
}

impl NodeKind {
    /// How a message names it.
    pub(crate) fn name(self) -> &'static str {
        match self {
            NodeKind::Source => "a source",
            NodeKind::Stateless => "a stateless operator",
            NodeKind::Keyed => "a keyed function",
            NodeKind::Window => "a window operator",
            NodeKind::Sink => "a sink",
        }
    }
}

/// A job's graph, ready to run (and `Send`: [`Job::start`] runs it on its own thread).
#[derive(Clone)]
pub struct JobPlan {
    pub(crate) nodes: Vec<Node>,
}

/// Builds a job. Streams made from it add nodes to it.
#[derive(Clone, Default)]
pub struct Job {
    g: Rc<RefCell<Vec<Node>>>,
    /// The first mistake made while building (reported by every `plan`).
    error: Rc<RefCell<Option<String>>>,
}

/// A stream of records of type `T`.
pub struct Stream<T> {
    job: Job,
    node: usize,
    port: usize,
    _t: PhantomData<fn() -> T>,
}

impl<T> Clone for Stream<T> {
    fn clone(&self) -> Self {
        Stream { job: self.job.clone(), node: self.node, port: self.port, _t: PhantomData }
    }
}

/// A stream partitioned by a key of type `K`.
pub struct KeyedStream<K, T> {
    stream: Stream<T>,
    key: Arc<dyn Fn(&T) -> K + Send + Sync>,
}

impl<K, T> Clone for KeyedStream<K, T> {
    fn clone(&self) -> Self {
        KeyedStream { stream: self.stream.clone(), key: Arc::clone(&self.key) }
    }
}

/// Two keyed streams of different record types with the same key type.
pub struct ConnectedStreams<K, A, B> {
    a: KeyedStream<K, A>,
    b: KeyedStream<K, B>,
}

/// A keyed stream with a window assigner.
pub struct WindowedStream<K, T> {
    keyed: KeyedStream<K, T>,
    windows: Windows,
    lateness: i64,
}

/// The outputs of a window operator: results, and the records that came too late for
/// every window they belong to (filled by [`WindowedStream::aggregate_with_late`]).
pub struct WindowOutput<K, R, T> {
    /// One record per window firing.
    pub results: Stream<Windowed<K, R>>,
    /// Late records.
    pub late: Stream<T>,
}

/// A sink node (nothing reads from it).
pub struct SinkNode {
    job: Job,
    node: usize,
}

impl SinkNode {
    /// Sets the sink's parallelism (by default the one of the stream it writes).
    pub fn parallelism(self, parallelism: u32) -> Self {
        self.job.set_parallelism(self.node, parallelism);
        self
    }
}

fn key_partitioner<K: Key, T: 'static>(
    key: Arc<dyn Fn(&T) -> K + Send + Sync>,
    name: String,
) -> Partitioner<T> {
    // The key is encoded exactly as typed states encode keys (postcard), so a record is
    // routed to the instance that owns its key in the store. A key that does not encode
    // fails the task (never a silent default key).
    Partitioner::KeyGroups {
        key: Arc::new(move |r: &T| {
            postcard::to_allocvec(&key(r))
                .map_err(|source| Error::Codec { state: format!("key of {name}"), source })
        }),
        max_parallelism: 0,
    }
}

impl Job {
    /// An empty job.
    pub fn new() -> Self {
        Self::default()
    }

    fn add(
        &self,
        name: &str,
        parallelism: u32,
        inputs: Vec<Edge>,
        kind: NodeKind,
        ports: [ChannelMaker; 2],
        build: Build,
    ) -> usize {
        let mut g = self.g.borrow_mut();
        // A name keys the operator's state, positions and entries in every checkpoint.
        if name.is_empty() {
            self.fault("an operator needs a name (\"\" was given)".to_string());
        }
        if g.iter().any(|n| n.name == name) {
            self.fault(format!("two operators are called {name:?}"));
        }
        if parallelism == 0 {
            self.fault(format!("{name}: parallelism 0"));
        }
        g.push(Node { name: name.to_string(), parallelism: parallelism.max(1), inputs, kind, ports, build });
        g.len() - 1
    }

    /// Records a mistake in the graph; the first one is the error of every `plan`.
    fn fault(&self, what: String) {
        self.error.borrow_mut().get_or_insert(what);
    }

    fn set_parallelism(&self, node: usize, parallelism: u32) {
        if parallelism == 0 {
            let name = self.g.borrow()[node].name.clone();
            self.fault(format!("{name}: parallelism 0"));
        }
        self.g.borrow_mut()[node].parallelism = parallelism.max(1);
    }

    /// Whether `other` is this job (a stream of another job cannot be an input here).
    fn same(&self, other: &Job) -> bool {
        Rc::ptr_eq(&self.g, &other.g)
    }

    fn stream<T>(&self, node: usize, port: usize) -> Stream<T> {
        Stream { job: self.clone(), node, port, _t: PhantomData }
    }

    /// A source of `parallelism` instances built by `factory(subtask, parallelism)`,
    /// without event time (records carry no timestamp).
    pub fn source<T: Data>(
        &self,
        name: &str,
        parallelism: u32,
        factory: impl Fn(u32, u32) -> Box<dyn Source<T>> + Send + Sync + 'static,
    ) -> Stream<T> {
        self.add_source(name, parallelism, Arc::new(factory), None)
    }

    /// A source whose records get timestamps and watermarks from `strategy`, per source
    /// instance.
    pub fn source_with_watermarks<T: Data>(
        &self,
        name: &str,
        parallelism: u32,
        factory: impl Fn(u32, u32) -> Box<dyn Source<T>> + Send + Sync + 'static,
        strategy: WatermarkStrategy<T>,
    ) -> Stream<T> {
        self.add_source(name, parallelism, Arc::new(factory), Some(strategy))
    }

    #[allow(clippy::type_complexity, reason = "a factory of boxed sources")]
    fn add_source<T: Data>(
        &self,
        name: &str,
        parallelism: u32,
        factory: Arc<dyn Fn(u32, u32) -> Box<dyn Source<T>> + Send + Sync>,
        strategy: Option<WatermarkStrategy<T>>,
    ) -> Stream<T> {
        let build: Build = Arc::new(move |w: Wiring| source_body(w, &factory, strategy.clone()));
        let node = self.add(
            name,
            parallelism,
            vec![],
            NodeKind::Source,
            [channel_maker::<T>(), channel_maker::<()>()],
            build,
        );
        self.stream(node, 0)
    }

    /// The graph, checked: names given and unique, parallelisms positive.
    pub fn plan(&self) -> Result<JobPlan> {
        if let Some(e) = self.error.borrow().as_ref() {
            return Err(Error::InvalidConfig(e.clone()));
        }
        Ok(JobPlan { nodes: self.g.borrow().clone() })
    }
}

impl<T: Data> Stream<T> {
    fn parallelism_of(&self) -> u32 {
        self.job.g.borrow()[self.node].parallelism
    }

    fn edge(&self, input: u8, partitioner: Partitioner<T>, forward: bool) -> Edge {
        Edge { from: self.node, port: self.port, input, partitioner: Arc::new(partitioner), forward }
    }

    /// Sets the parallelism of the operator that produces this stream.
    pub fn parallelism(self, parallelism: u32) -> Self {
        self.job.set_parallelism(self.node, parallelism);
        self
    }

    fn stateless<U: Data>(
        &self,
        name: &str,
        inputs: Vec<Edge>,
        f: impl Fn(T, &mut Vec<(U, Option<Timestamp>)>, Option<Timestamp>) + Send + Sync + 'static,
    ) -> Stream<U> {
        let f = Arc::new(f);
        let build: Build = Arc::new(move |w: Wiring| {
            let f = Arc::clone(&f);
            operator_body(w, Stateless { f: Box::new(move |r, out, ts| f(r, out, ts)) })
        });
        let p = self.parallelism_of();
        let node = self.job.add(
            name,
            p,
            inputs,
            NodeKind::Stateless,
            [channel_maker::<U>(), channel_maker::<()>()],
            build,
        );
        self.job.stream(node, 0)
    }

    /// Applies `f` to every record (timestamps are kept).
    pub fn map<U: Data>(&self, name: &str, f: impl Fn(T) -> U + Send + Sync + 'static) -> Stream<U> {
        let e = self.edge(0, Partitioner::Rebalance, true);
        self.stateless(name, vec![e], move |r, out, ts| out.push((f(r), ts)))
    }

    /// Keeps the records for which `f` is true.
    pub fn filter(&self, name: &str, f: impl Fn(&T) -> bool + Send + Sync + 'static) -> Stream<T> {
        let e = self.edge(0, Partitioner::Rebalance, true);
        self.stateless(name, vec![e], move |r, out, ts| {
            if f(&r) {
                out.push((r, ts));
            }
        })
    }

    /// Replaces every record with zero or more records.
    pub fn flat_map<U: Data, I: IntoIterator<Item = U>>(
        &self,
        name: &str,
        f: impl Fn(T) -> I + Send + Sync + 'static,
    ) -> Stream<U> {
        let e = self.edge(0, Partitioner::Rebalance, true);
        self.stateless(name, vec![e], move |r, out, ts| out.extend(f(r).into_iter().map(|u| (u, ts))))
    }

    /// Merges this stream with others of the same type.
    pub fn union(&self, name: &str, others: &[Stream<T>]) -> Stream<T> {
        if others.iter().any(|o| !self.job.same(&o.job)) {
            self.job.fault(format!("{name}: a stream of another job cannot be an input"));
        }
        let mut edges = vec![self.edge(0, Partitioner::Rebalance, true)];
        edges.extend(others.iter().map(|o| o.edge(0, Partitioner::Rebalance, true)));
        self.stateless(name, edges, |r, out, ts| out.push((r, ts)))
    }

    /// Partitions the stream by `key`: records of one key go to one instance of the next
    /// keyed operator, whose state and timers are per key.
    pub fn key_by<K: Key>(&self, key: impl Fn(&T) -> K + Send + Sync + 'static) -> KeyedStream<K, T> {
        KeyedStream { stream: self.clone(), key: Arc::new(key) }
    }

    /// Writes the stream to a two-phase-commit sink built by `factory(subtask,
    /// parallelism)`. The sink has this stream's parallelism.
    pub fn sink(&self, name: &str, factory: SinkFactory<T>) -> SinkNode {
        let e = self.edge(0, Partitioner::Rebalance, true);
        let build: Build = Arc::new(move |w: Wiring| sink_body(w, Arc::clone(&factory)));
        let p = self.parallelism_of();
        let node = self.job.add(
            name,
            p,
            vec![e],
            NodeKind::Sink,
            [channel_maker::<()>(), channel_maker::<()>()],
            build,
        );
        SinkNode { job: self.job.clone(), node }
    }
}

impl<K: Key, T: Data> KeyedStream<K, T> {
    fn edge(&self, input: u8, name: &str) -> Edge {
        self.stream.edge(input, key_partitioner(Arc::clone(&self.key), name.to_string()), false)
    }

    /// A keyed function over this stream; `factory` builds one per instance.
    pub fn process<O: Data, F: KeyedProcessFunction<K, T, O> + 'static>(
        &self,
        name: &str,
        factory: impl Fn() -> F + Send + Sync + 'static,
    ) -> Stream<O> {
        let key = Arc::clone(&self.key);
        let build: Build = Arc::new(move |w: Wiring| {
            let key = Arc::clone(&key);
            let mut f = factory();
            keyed_body(w, move |mut store, cp, operator| {
                store.reserve_runtime_names(&[crate::format::timers::TIMER_STATE, WINDOW_STATE, FIRED_STATE]);
                f.open(&mut store)?;
                let core = KeyedCore::new(operator, store, cp)?;
                Ok(Keyed { core, key, f, _types: PhantomData })
            })
        });
        let p = self.stream.parallelism_of();
        let e = self.edge(0, name);
        let node = self.stream.job.add(
            name,
            p,
            vec![e],
            NodeKind::Keyed,
            [channel_maker::<O>(), channel_maker::<()>()],
            build,
        );
        self.stream.job.stream(node, 0)
    }

    /// Connects another keyed stream (of another record type, the same key type) into a
    /// two-input keyed function: a join.
    pub fn connect<B: Data>(&self, other: &KeyedStream<K, B>) -> ConnectedStreams<K, T, B> {
        if !self.stream.job.same(&other.stream.job) {
            self.stream.job.fault("connect: a stream of another job cannot be an input".into());
        }
        ConnectedStreams { a: self.clone(), b: other.clone() }
    }

    /// Event-time windows of this keyed stream.
    pub fn window(&self, windows: Windows) -> WindowedStream<K, T> {
        WindowedStream { keyed: self.clone(), windows, lateness: 0 }
    }
}

impl<K: Key, A: Data, B: Data> ConnectedStreams<K, A, B> {
    /// The two-input keyed function; `factory` builds one per instance.
    pub fn process<O: Data, F: KeyedCoProcessFunction<K, A, B, O> + 'static>(
        &self,
        name: &str,
        factory: impl Fn() -> F + Send + Sync + 'static,
    ) -> Stream<O> {
        let (k1, k2) = (Arc::clone(&self.a.key), Arc::clone(&self.b.key));
        let build: Build = Arc::new(move |w: Wiring| {
            let (key1, key2) = (Arc::clone(&k1), Arc::clone(&k2));
            let mut f = factory();
            keyed_body(w, move |mut store, cp, operator| {
                store.reserve_runtime_names(&[crate::format::timers::TIMER_STATE, WINDOW_STATE, FIRED_STATE]);
                f.open(&mut store)?;
                let core = KeyedCore::new(operator, store, cp)?;
                Ok(CoKeyed { core, key1, key2, f, _types: PhantomData })
            })
        });
        let p = self.a.stream.parallelism_of();
        let edges = vec![self.a.edge(0, name), self.b.edge(1, name)];
        let job = &self.a.stream.job;
        let node =
            job.add(name, p, edges, NodeKind::Keyed, [channel_maker::<O>(), channel_maker::<()>()], build);
        job.stream(node, 0)
    }
}

impl<K: Key, T: Data> WindowedStream<K, T> {
    /// Records up to `ms` behind the watermark still update their windows (each such
    /// update fires the window again); later ones are late.
    pub fn allowed_lateness(mut self, ms: i64) -> Self {
        self.lateness = ms.max(0);
        self
    }

    fn build<A: Data, R: Data, F: AggregateFunction<T, A, R> + Clone + 'static>(
        &self,
        name: &str,
        agg: F,
        late_to_side: bool,
    ) -> WindowOutput<K, R, T> {
        let key = Arc::clone(&self.keyed.key);
        let (windows, lateness) = (self.windows, self.lateness);
        if let Err(e) = windows.validate() {
            self.keyed.stream.job.fault(format!("{name}: {e}"));
        }
        let build: Build = Arc::new(move |w: Wiring| {
            let key = Arc::clone(&key);
            let agg = agg.clone();
            keyed_body(w, move |mut store, cp, operator| {
                let any_fired = store.state_id(FIRED_STATE).is_some_and(|id| !store.is_empty(id));
                let state = store.map_state(WINDOW_STATE)?;
                let fired = store.map_state(FIRED_STATE)?;
                let core = KeyedCore::new(operator, store, cp)?;
                Ok(WindowLogic {
                    core,
                    key,
                    windows,
                    lateness,
                    late_to_side,
                    agg,
                    state,
                    fired,
                    any_fired,
                    fired_until: Timestamp::MIN,
                    _types: PhantomData,
                })
            })
        });
        let p = self.keyed.stream.parallelism_of();
        let e = self.keyed.edge(0, name);
        let job = &self.keyed.stream.job;
        let node = job.add(
            name,
            p,
            vec![e],
            NodeKind::Window,
            [channel_maker::<Windowed<K, R>>(), channel_maker::<T>()],
            build,
        );
        WindowOutput { results: job.stream(node, 0), late: job.stream(node, 1) }
    }

    /// Aggregates each window incrementally; late records are dropped.
    pub fn aggregate<A: Data, R: Data, F: AggregateFunction<T, A, R> + Clone + 'static>(
        &self,
        name: &str,
        agg: F,
    ) -> Stream<Windowed<K, R>> {
        self.build(name, agg, false).results
    }

    /// Aggregates each window; late records go to the `late` stream.
    pub fn aggregate_with_late<A: Data, R: Data, F: AggregateFunction<T, A, R> + Clone + 'static>(
        &self,
        name: &str,
        agg: F,
    ) -> WindowOutput<K, R, T> {
        self.build(name, agg, true)
    }
}
