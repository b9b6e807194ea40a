//! From a wiring of type-erased channels to a typed task: the one place where the graph's
//! erased parts meet the types of the operator they belong to. A task restores its own
//! state (in its own thread, so instances restore in parallel).

use std::any::Any;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use crossbeam_channel::{Receiver, Sender};

use super::Data;
use super::channel::{Inputs, Output, Outputs, Partitioner, Target};
use super::inflight::{Inflight, Marker, RecordForm, read_inflight};
use super::messages::{Control, Element, PriorityBarrier, Report, Timestamp};
use super::operator::{Logic, SinkLogic};
use super::sinks::{SinkDriver, SinkFactory, redistribute, sink_states_of};
use super::source::Source;
use super::task::{In, OperatorTask, Replayed, SourceTask, TaskCommon};
use super::time::{SourceClock, WatermarkStrategy};
use crate::checkpoint::Checkpointer;
use crate::checkpoint::recovery::restore_operator_with;
use crate::error::{Error, Result};
use crate::format::Manifest;
use crate::state::{KeyGroupRange, Store, StoreConfig};

/// What a task runs.
pub(crate) type TaskBody = Box<dyn FnOnce() -> Result<()> + Send>;

/// Makes a bounded channel of one element type: (sender, receiver), erased.
pub(crate) type ChannelMaker = Arc<dyn Fn(usize) -> (Box<dyn Any + Send>, Box<dyn Any + Send>) + Send + Sync>;

pub(crate) fn channel_maker<T: Data>() -> ChannelMaker {
    Arc::new(|cap| {
        let (tx, rx) = crossbeam_channel::bounded::<Element<T>>(super::channel::elements_for(cap));
        (Box::new(tx), Box::new(rx))
    })
}

/// The checkpoint an attempt restores.
pub(crate) struct RestoreCtx {
    pub dir: PathBuf,
    /// Reaches `dir`'s files, opened once for the whole restore (every task reads through
    /// it): the storage's own on a restart, so a path re-pointed since is not followed.
    pub io: Arc<dyn crate::checkpoint::io::Io>,
    /// The manifest's path (errors name it).
    pub path: PathBuf,
    pub manifest: Manifest,
    /// A savepoint whose sinks committed its transactions (its job stopped with it): the
    /// sinks are not given them again.
    pub sinks_committed: bool,
    /// Two-input operators whose inputs were swapped since the checkpoint: their in-flight
    /// records go to the other input (`input_sides.rs`).
    pub swapped_inputs: std::collections::BTreeSet<String>,
}

/// One downstream subtask of an output edge, erased.
pub(crate) struct ErasedTarget {
    pub tx: Box<dyn Any + Send>,
    pub priority: Sender<PriorityBarrier>,
    pub channel: usize,
}

/// An output edge, erased.
pub(crate) struct ErasedOutput {
    pub targets: Vec<ErasedTarget>,
    pub partitioner: Arc<dyn Any + Send + Sync>,
}

/// Everything the runner hands a task.
pub(crate) struct Wiring {
    pub common: TaskCommon,
    pub subtask: u32,
    pub parallelism: u32,
    pub max_parallelism: u32,
    /// (channel index, receiver) of each input.
    pub in1: Vec<(usize, Box<dyn Any + Send>)>,
    pub in2: Vec<(usize, Box<dyn Any + Send>)>,
    pub out: Vec<ErasedOutput>,
    pub side: Vec<ErasedOutput>,
    pub restore: Option<Arc<RestoreCtx>>,
    pub waker: Sender<Control>,
    /// The shape of the input channels (`format::timers::channel_shape`; 0 for a source).
    pub shape: u64,
    /// The source operators upstream of this one (a restored end of input becomes the event
    /// time they had reached).
    pub upstream_sources: Arc<std::collections::BTreeSet<String>>,
}

fn wiring_error() -> Error {
    Error::InvalidConfig("internal: a channel of the wrong type".into())
}

fn inputs<T: Data>(v: Vec<(usize, Box<dyn Any + Send>)>) -> Result<Inputs<T>> {
    let channels = v
        .into_iter()
        .map(|(c, b)| b.downcast::<Receiver<Element<T>>>().map(|rx| (c, *rx)).map_err(|_| wiring_error()))
        .collect::<Result<_>>()?;
    Ok(Inputs { channels })
}

fn outputs<T: Data>(v: Vec<ErasedOutput>, max_parallelism: u32) -> Result<Outputs<T>> {
    let mut edges = Vec::new();
    for o in v {
        let p = o.partitioner.downcast_ref::<Partitioner<T>>().ok_or_else(wiring_error)?;
        let p = match p {
            Partitioner::KeyGroups { key, .. } => {
                Partitioner::KeyGroups { key: Arc::clone(key), max_parallelism }
            }
            other => other.clone(),
        };
        let targets = o
            .targets
            .into_iter()
            .map(|t| {
                let tx = t.tx.downcast::<Sender<Element<T>>>().map_err(|_| wiring_error())?;
                Ok(Target::new(*tx, t.priority, t.channel))
            })
            .collect::<Result<_>>()?;
        edges.push(Output::new(targets, p));
    }
    Ok(Outputs { edges })
}

/// Decodes the in-flight elements this instance replays (unaligned checkpoints): the records
/// it owns, and, when its channels are those its old namesake had (`own_channels`), the
/// watermarks and changes of idleness its namesake's channels delivered among them. Order:
/// records of other old instances first (rescaled; judged against the restored watermark,
/// as no channel of this instance carried them), then its namesake's in the order that
/// instance processed them.
fn replay<L: Logic>(
    w: &Wiring,
    logic: &L,
    channel_input: &[u8],
    own_channels: bool,
    swapped: bool,
) -> Result<Vec<Replayed<L::In1, L::In2>>> {
    let (mut foreign, mut own) = (Vec::new(), Vec::new());
    let Some(r) = &w.restore else { return Ok(own) };
    let op = &w.common.operator;
    /// The record, or what is left over after it (its bytes must be exactly one record).
    #[allow(clippy::type_complexity, reason = "a decode error, or bytes left over")]
    fn decode<T: Data>(
        form: RecordForm,
        bytes: &[u8],
    ) -> postcard::Result<std::result::Result<(Option<Timestamp>, T), String>> {
        let (r, rest) = match form {
            RecordForm::Timestamped => postcard::take_from_bytes(bytes)?,
            RecordForm::Bare => postcard::take_from_bytes(bytes).map(|(r, rest)| ((None, r), rest))?,
        };
        Ok(if rest.is_empty() {
            Ok(r)
        } else {
            Err(format!(
                "{} bytes after the record's {} (not one record of the input's type: has it changed \
                 since the checkpoint? a savepoint holds no records in flight)",
                rest.len(),
                bytes.len() - rest.len()
            ))
        })
    }
    // The file an old instance's in-flight log is in (the manifest for logs of older
    // checkpoints, kept in `extra`), for errors.
    let file_of = |old: u32| {
        r.manifest
            .channel_state
            .iter()
            .find(|c| c.operator == *op && c.subtask == old)
            .map_or_else(|| r.path.clone(), |c| r.dir.join(&c.path))
    };
    let inputs = if w.in2.is_empty() { 1 } else { 2 };
    let mut counts: std::collections::BTreeMap<u32, u64> = std::collections::BTreeMap::new();
    read_inflight(&*r.io, &r.dir, &r.manifest, op, |old, input, e| {
        let n = counts.entry(old).or_default();
        *n += 1;
        let n = *n;
        let bad = |what: String| {
            Error::corrupt(
                file_of(old),
                0,
                format!("in-flight element {n} of {op}[{old}], input {input}: {what}"),
            )
        };
        if input >= inputs {
            return Err(bad(format!("the operator has {inputs} input(s)")));
        }
        // Captured on the input its upstream operator now feeds on the other side.
        let input = if swapped { 1 - input } else { input };
        // Its channel, where the instance's channels are those its namesake had.
        let channel = |ch: u32| -> Result<Option<usize>> {
            if old != w.subtask || !own_channels {
                return Ok(None);
            }
            let fits = usize::try_from(ch)
                .ok()
                .filter(|&c| channel_input.get(c).is_some_and(|&i| u32::from(i) == input));
            fits.map(Some).ok_or_else(|| {
                bad(format!(
                    "channel {ch}: the instance has no such channel of this input ({} channels)",
                    channel_input.len()
                ))
            })
        };
        let by_old = old % w.parallelism == w.subtask;
        let to = if old == w.subtask { &mut own } else { &mut foreign };
        match e {
            Inflight::Record(form, ch, bytes) => {
                if let Some(ch) = ch {
                    channel(ch)?;
                }
                let codec = |e| Error::Codec {
                    state: format!(
                        "in-flight record {n} of {op}[{old}] in {}, read as the input's type (has it changed \
                         since the checkpoint? a savepoint holds no records in flight)",
                        file_of(old).display()
                    ),
                    source: e,
                };
                if input == 0 {
                    let (ts, rec) = decode::<L::In1>(form, bytes).map_err(codec)?.map_err(bad)?;
                    if logic.owns1(&rec)?.unwrap_or(by_old) {
                        to.push(Replayed::Record(In::A(rec), ts));
                    }
                } else {
                    let (ts, rec) = decode::<L::In2>(form, bytes).map_err(codec)?.map_err(bad)?;
                    if logic.owns2(&rec)?.unwrap_or(by_old) {
                        to.push(Replayed::Record(In::B(rec), ts));
                    }
                }
            }
            Inflight::Marker(ch, m) => {
                if let Some(ch) = channel(ch)? {
                    own.push(match m {
                        Marker::Watermark(wm) => Replayed::Watermark(ch, wm),
                        Marker::Idle(idle) => Replayed::Idle(ch, idle),
                    });
                }
            }
        }
        Ok(())
    })?;
    foreign.append(&mut own);
    Ok(foreign)
}

/// What an operator instance restores besides its store: its watermark, its channels'
/// watermarks and idleness, and its in-flight elements.
struct Restored<L: Logic> {
    watermark: Option<Timestamp>,
    /// The watermark is what a bounded job's end of input fired (`END_OF_INPUT`).
    end_of_input: bool,
    inputs: Option<crate::format::timers::Inputs>,
    replay: Vec<Replayed<L::In1, L::In2>>,
}

/// The input (0 or 1) of each of the instance's channels.
fn channel_inputs(w: &Wiring) -> Vec<u8> {
    std::iter::repeat_n(0u8, w.in1.len()).chain(std::iter::repeat_n(1u8, w.in2.len())).collect()
}

fn restored<L: Logic>(w: &Wiring, logic: &L, channel_input: &[u8]) -> Result<Restored<L>> {
    let Some(r) = &w.restore else {
        return Ok(Restored { watermark: None, end_of_input: false, inputs: None, replay: Vec::new() });
    };
    let (op, sub) = (&w.common.operator, w.subtask);
    use crate::format::timers::END_OF_INPUT;
    let restored =
        crate::format::timers::restored_watermark(&r.manifest.extra, op, sub, w.parallelism, &r.path)?;
    let mut inputs = crate::format::timers::restored_inputs(
        &r.manifest.extra,
        op,
        sub,
        channel_input.len(),
        w.shape,
        &r.path,
        true,
    )?;
    // The end of a bounded input, in a final checkpoint written before tasks recorded the
    // watermark they had before it, restores as what it fired, the event time the sources
    // upstream had read, so more input is not all late.
    let end_of_input = restored == Some(END_OF_INPUT);
    let channels_ended = inputs.as_ref().is_some_and(|(i, _)| i.watermarks.contains(&END_OF_INPUT));
    let end = if end_of_input || channels_ended {
        crate::format::timers::end_of_input(&r.manifest.extra, &w.upstream_sources, &r.path)?
    } else {
        None
    };
    let watermark = if end_of_input { end } else { restored };
    if let Some((i, _)) = inputs.as_mut() {
        let to = end.unwrap_or(i64::MIN);
        i.watermarks.iter_mut().filter(|w| **w == END_OF_INPUT).for_each(|w| *w = to);
    }
    let own_channels = inputs.as_ref().is_some_and(|(_, own)| *own);
    // The job's two inputs were swapped since the checkpoint (`a.connect(b)` became
    // `b.connect(a)`): in-flight records go to the input their upstream operator feeds now
    // (their markers, on channels that are not the instance's own, are dropped as after a
    // rescale).
    let swapped = r.swapped_inputs.contains(op.as_str());
    let replay = replay(w, logic, channel_input, own_channels, swapped)?;
    Ok(Restored { watermark, end_of_input, inputs: inputs.map(|(i, _)| i), replay })
}

/// Builds and runs an operator instance's task. What it cannot restore (a damaged entry or
/// in-flight record) is a restore failure: a damaged checkpoint is not tried again.
fn run_task<L: Logic + 'static>(w: Wiring, logic: L) -> Result<()> {
    let channel_input = channel_inputs(&w);
    let restored = match restored(&w, &logic, &channel_input) {
        Ok(r) => r,
        Err(e) => return restore_failed(&w, e),
    };
    OperatorTask {
        logic,
        in1: inputs(w.in1)?,
        in2: inputs(w.in2)?,
        out: outputs(w.out, w.max_parallelism)?,
        side: outputs(w.side, w.max_parallelism)?,
        channel_input,
        replay: restored.replay,
        restored_watermark: restored.watermark,
        restored_end_of_input: restored.end_of_input,
        restored_inputs: restored.inputs,
        shape: w.shape,
        restored: w.restore.is_some(),
        common: w.common,
    }
    .run()
}

/// A stateless operator's task.
pub(crate) fn operator_body<L: Logic + 'static>(w: Wiring, logic: L) -> Result<TaskBody> {
    Ok(Box::new(move || run_task(w, logic)))
}

/// Reports a restore failure (the runner may mark the checkpoint bad) and ends the task.
fn restore_failed(w: &Wiring, error: Error) -> Result<()> {
    let _ = w.common.report.send(Report::RestoreFailed { task: w.common.name(), error });
    Ok(())
}

/// A keyed operator's task: restores (or creates) its store, then builds the logic.
pub(crate) fn keyed_body<L: Logic + 'static>(
    w: Wiring,
    make: impl FnOnce(Store, Checkpointer, &str) -> Result<L> + Send + 'static,
) -> Result<TaskBody> {
    Ok(Box::new(move || {
        let range = KeyGroupRange::for_instance(w.max_parallelism, w.parallelism, w.subtask)?;
        let cfg = StoreConfig { max_parallelism: w.max_parallelism, key_groups: range };
        // An operator the checkpoint does not know (added since) starts empty.
        let restore = w
            .restore
            .as_ref()
            .filter(|r| r.manifest.operators.iter().any(|o| o.operator == w.common.operator));
        let store = match restore {
            Some(r) => {
                let t = Instant::now();
                match restore_operator_with(&*r.io, &r.dir, &r.manifest, &w.common.operator, cfg) {
                    Ok((store, report)) => {
                        let _ = w.common.report.send(Report::Restored {
                            chain_len: report.chain_len,
                            bytes: report.bytes,
                            elapsed: t.elapsed(),
                        });
                        store
                    }
                    Err(e) => return restore_failed(&w, e),
                }
            }
            None => Store::with_config(cfg)?,
        };
        let cp = Checkpointer::new(Arc::clone(&w.common.storage), &w.common.operator, w.subtask);
        let logic = make(store, cp, &w.common.operator)?;
        run_task(w, logic)
    }))
}

/// A sink's task: first commits what the restored checkpoint pre-committed (of the old
/// instances that map to this one) and discards the rest (`TwoPhaseCommitSink::recover`).
/// A savepoint whose sinks committed (a stop-with-savepoint that ended well) gives none.
pub(crate) fn sink_body<T: Data>(w: Wiring, factory: SinkFactory<T>) -> Result<TaskBody> {
    Ok(Box::new(move || {
        let mut restored = Vec::new();
        if let Some(r) = w.restore.as_ref().filter(|r| !r.sinks_committed) {
            let states = sink_states_of(&r.manifest.extra, &w.common.operator, &r.path)?;
            restored = redistribute(&states, w.subtask, w.parallelism)?;
        }
        let sink = factory(w.subtask, w.parallelism)?;
        let from = w.restore.as_ref().map(|r| r.manifest.checkpoint_id);
        let driver = SinkDriver::start(sink, from, &restored)?;
        let logic = SinkLogic { operator: w.common.operator.clone(), subtask: w.subtask, driver };
        run_task(w, logic)
    }))
}

/// A source's task.
pub(crate) fn source_body<T: Data>(
    w: Wiring,
    factory: &Arc<dyn Fn(u32, u32) -> Box<dyn Source<T>> + Send + Sync>,
    strategy: Option<WatermarkStrategy<T>>,
) -> Result<TaskBody> {
    let factory = Arc::clone(factory);
    Ok(Box::new(move || {
        let key = format!("{}/{}", w.common.operator, w.subtask);
        let prefix = format!("{}/", w.common.operator);
        // A source the checkpoint does not know (added since) starts at its beginning.
        let restore =
            w.restore.as_ref().filter(|r| r.manifest.sources.keys().any(|k| k.starts_with(&prefix)));
        let position = match restore {
            Some(r) => match r.manifest.source_positions().remove(&key) {
                Some(p) => Some(p),
                None => {
                    return Err(Error::NotFound(format!(
                        "position of source {key} in checkpoint {} (a source's parallelism cannot change)",
                        r.manifest.checkpoint_id
                    )));
                }
            },
            None => None,
        };
        // A source instance's one input is its own reading: restored idle if it was.
        let idle = match restore {
            Some(r) => crate::format::timers::restored_inputs(
                &r.manifest.extra,
                &w.common.operator,
                w.subtask,
                1,
                0,
                &r.path,
                false,
            )?
            .is_some_and(|(i, _)| i.idle.first().copied().unwrap_or(false)),
            None => false,
        };
        let mut clock = strategy.map(SourceClock::new);
        if let (Some(r), Some(c)) = (restore, clock.as_mut())
            && let Some(state) = crate::format::timers::restored_clock(
                &r.manifest.extra,
                &w.common.operator,
                w.subtask,
                &r.path,
            )?
        {
            c.restore(state);
        }
        let source = factory(w.subtask, w.parallelism);
        SourceTask {
            idle,
            restored: restore.is_some(),
            out: outputs(w.out, w.max_parallelism)?,
            source,
            clock,
            position,
            waker: w.waker,
            common: w.common,
        }
        .run()
    }))
}
