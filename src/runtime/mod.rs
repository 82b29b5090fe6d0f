//! Runs a built pipeline: one thread per node, bounded crossbeam channels
//! between them, frames accounted for, and an orderly drain on shutdown.

pub mod added;
pub mod control;
pub mod dynamic;
pub mod ends;
pub mod node;
pub mod report;
pub mod request;
pub mod results;
pub mod slot;
pub mod stats;
pub mod trace;

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender, TrySendError, bounded};

use crate::config::{NodeConfig, OnError, PipelineConfig, Role, WhenFull};
use crate::frame::{Accounting, Event, EventKind, Frame, Image, InputEnd, InputToken, Ticket};
use crate::graph::Graph;
pub use control::Control;
pub use ends::StreamEnds;
use node::{Body, StageError};
pub use report::{InputLog, RunReport};
pub use results::ResultsHub;
pub use stats::{NodeStats, StreamEvent};

/// Why and whether the pipeline is stopping.
#[derive(Debug, Default)]
pub struct Shutdown {
    stop: AtomicBool,
    /// The signal that asked for the stop (0: none).
    signal: AtomicI32,
    fatal: Mutex<Option<String>>,
}

impl Shutdown {
    pub fn new() -> Arc<Self> {
        Arc::new(Shutdown::default())
    }
    /// Ask sources to stop; frames in flight drain.
    pub fn stop(&self) {
        self.stop.store(true, Ordering::Release);
    }
    /// A signal (SIGINT, SIGTERM) asked for the stop.
    pub fn interrupt(&self, signal: i32) {
        let _ = self.signal.compare_exchange(0, signal, Ordering::AcqRel, Ordering::Acquire);
        self.stop();
    }
    /// A stage failed for good: record the first reason and stop.
    pub fn fail(&self, reason: String) {
        let mut f = self.fatal.lock().unwrap_or_else(|e| e.into_inner());
        if f.is_none() {
            tracing::error!("{reason}; stopping the pipeline");
            *f = Some(reason);
        }
        drop(f);
        self.stop();
    }
    pub fn stopping(&self) -> bool {
        self.stop.load(Ordering::Acquire)
    }
    pub fn signal(&self) -> Option<i32> {
        match self.signal.load(Ordering::Acquire) {
            0 => None,
            s => Some(s),
        }
    }
    pub fn fatal(&self) -> Option<String> {
        self.fatal.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

/// What travels through a queue: a frame, or an event of a stream, in order.
pub enum Msg {
    Frame(Frame),
    Event(Arc<Event>),
}

/// One queue into a consumer node, as seen by a producer.
struct Edge {
    tx: Sender<Msg>,
    /// Kept to pop the oldest frame when full (`drop_oldest`).
    rx: Receiver<Msg>,
    when_full: WhenFull,
    to: Arc<NodeStats>,
}

impl Edge {
    /// Send one frame; `false` when the consumer is gone.
    fn send(&self, frame: Frame) -> bool {
        let frame_of = |m: Msg| match m {
            Msg::Frame(f) => f,
            Msg::Event(_) => unreachable!("only frames are sent here"),
        };
        match self.when_full {
            WhenFull::Block => match self.tx.send(Msg::Frame(frame)) {
                Ok(()) => self.queued(),
                Err(e) => {
                    frame_of(e.0).ticket.dropped();
                    false
                }
            },
            WhenFull::DropNewest => match self.tx.try_send(Msg::Frame(frame)) {
                Ok(()) => self.queued(),
                Err(TrySendError::Full(f)) => {
                    let f = frame_of(f);
                    f.ticket.dropped();
                    self.to.dropped.fetch_add(1, Ordering::Relaxed);
                    self.to.stream(&f.stream, StreamEvent::Dropped);
                    true
                }
                Err(TrySendError::Disconnected(f)) => {
                    frame_of(f).ticket.dropped();
                    false
                }
            },
            WhenFull::DropOldest => {
                let mut msg = Msg::Frame(frame);
                // Events are never dropped: one taken out to make room goes back in after the frame.
                let mut events = Vec::new();
                let open = loop {
                    match self.tx.try_send(msg) {
                        Ok(()) => break self.queued(),
                        Err(TrySendError::Full(f)) => {
                            match self.rx.try_recv() {
                                Ok(Msg::Frame(old)) => {
                                    old.ticket.dropped();
                                    self.to.queued.fetch_sub(1, Ordering::Relaxed);
                                    self.to.dropped.fetch_add(1, Ordering::Relaxed);
                                    self.to.stream(&old.stream, StreamEvent::Dropped);
                                }
                                Ok(Msg::Event(e)) => events.push(e),
                                Err(_) => {}
                            }
                            msg = f;
                        }
                        Err(TrySendError::Disconnected(f)) => {
                            frame_of(f).ticket.dropped();
                            break false;
                        }
                    }
                };
                for e in events {
                    self.send_event(e);
                }
                open
            }
        }
    }

    /// Send an event, whatever the queue's policy (it waits for room); `false` when the consumer is gone.
    fn send_event(&self, event: Arc<Event>) -> bool {
        self.tx.send(Msg::Event(event)).is_ok()
    }

    /// A frame is in the queue (for the consumer's queue depth).
    fn queued(&self) -> bool {
        self.to.queued.fetch_add(1, Ordering::Relaxed);
        true
    }
}

/// A node's outgoing edges (fan-out shares the frame by `Arc`, never copies pixels).
pub struct Outputs {
    edges: Vec<Edge>,
}

impl Outputs {
    /// Send to every consumer; `false` when all of them are gone.
    fn send(&self, mut frame: Frame) -> bool {
        frame.queued_at = Some(Instant::now());
        let Some((last, rest)) = self.edges.split_last() else {
            // No consumers: the frame ends here, delivered nowhere.
            frame.ticket.dropped();
            return true;
        };
        let mut any = false;
        for e in rest {
            any |= e.send(frame.clone());
        }
        any | last.send(frame)
    }

    /// Send an event to every consumer.
    fn send_event(&self, event: Arc<Event>) {
        for e in &self.edges {
            e.send_event(event.clone());
        }
    }
}

/// Opens inputs of a source (see [`SourceCtx::open_input`]) from any thread.
pub(crate) struct InputOpener(Option<Arc<StreamEnds>>);

impl InputOpener {
    pub(crate) fn open(self, stream: Arc<str>, on_flushed: impl FnOnce(InputEnd, bool) + Send + 'static) -> Arc<InputToken> {
        let ends = self.0;
        InputToken::new(
            stream,
            Box::new(move |end: InputEnd| match ends {
                Some(hub) => {
                    let s = end.stream.clone();
                    hub.ended(s, Box::new(move |ok| on_flushed(end, ok)));
                }
                None => on_flushed(end, true),
            }),
        )
    }
}

/// What a source sees: the stop flag and a way to emit frames.
pub struct SourceCtx<'a> {
    pub name: Arc<str>,
    pub index: u32,
    shutdown: &'a Arc<Shutdown>,
    acct: &'a Arc<Accounting>,
    stats: &'a NodeStats,
    emit: &'a mut dyn FnMut(Frame) -> bool,
    /// Where stream events go (none: counted only).
    events: Option<&'a dyn Fn(Arc<Event>)>,
    /// Start of the current busy stretch: waiting for room downstream is not busy time.
    busy_since: Instant,
    trace: Option<trace::TraceBuf>,
    last_emit: Instant,
    /// Where ended inputs go to be closed by the sinks (multi-input sources).
    ends: Option<Arc<StreamEnds>>,
    inputs: Arc<InputLog>,
    /// The input this context's frames belong to (a stream of a dynamic source).
    input: Option<Arc<InputToken>>,
}

impl<'a> SourceCtx<'a> {
    /// A context that hands frames to `emit` (used by the runtime and by `bench --isolate`).
    pub fn new(
        name: Arc<str>,
        index: u32,
        shutdown: &'a Arc<Shutdown>,
        acct: &'a Arc<Accounting>,
        stats: &'a NodeStats,
        emit: &'a mut dyn FnMut(Frame) -> bool,
    ) -> Self {
        SourceCtx {
            name,
            index,
            shutdown,
            acct,
            stats,
            emit,
            events: None,
            busy_since: Instant::now(),
            trace: None,
            last_emit: Instant::now(),
            ends: None,
            inputs: Arc::new(InputLog::default()),
            input: None,
        }
    }

    /// Send this source's stream events to `events`.
    pub fn with_events(mut self, events: &'a dyn Fn(Arc<Event>)) -> Self {
        self.events = Some(events);
        self
    }

    /// Outcomes of this source's inputs (multi-input sources record into it).
    pub fn inputs(&self) -> &Arc<InputLog> {
        &self.inputs
    }

    /// Start one input of a multi-input source, its own stream named `stream`.
    /// `on_flushed` runs once the input has ended (the source dropped the token
    /// and every frame of it settled) and every sink closed the stream; its
    /// `bool` says whether all sinks did so without error.
    pub fn open_input(&self, stream: Arc<str>, on_flushed: impl FnOnce(InputEnd, bool) + Send + 'static) -> Arc<InputToken> {
        self.input_opener().open(stream, on_flushed)
    }

    /// What [`SourceCtx::open_input`] needs, to open an input later on another thread.
    pub(crate) fn input_opener(&self) -> InputOpener {
        InputOpener(self.ends.clone())
    }

    /// A new frame of one input (its own stream), with its accounting ticket.
    pub fn new_frame_of(
        &self,
        input: &Arc<InputToken>,
        seq: u64,
        pts: Option<i64>,
        time_base: (i32, i32),
        image: Option<Arc<Image>>,
    ) -> Frame {
        self.frame(input.stream.clone(), seq, pts, time_base, image, self.acct.issue_for(Some(input.clone())))
    }

    fn frame(
        &self,
        stream: Arc<str>,
        seq: u64,
        pts: Option<i64>,
        time_base: (i32, i32),
        image: Option<Arc<Image>>,
        ticket: Arc<Ticket>,
    ) -> Frame {
        Frame {
            stream,
            stream_index: self.index,
            seq,
            pts,
            time_base,
            created: Instant::now(),
            image,
            audio: None,
            results: Vec::new(),
            ticket,
            queued_at: None,
            events: Vec::new(),
        }
    }

    pub fn stopping(&self) -> bool {
        self.shutdown.stopping()
    }

    /// The pipeline's stop flag, for code that cannot borrow the context (an FFmpeg interrupt callback).
    pub fn shutdown(&self) -> Arc<Shutdown> {
        self.shutdown.clone()
    }

    /// Something happened to this stream (lost, reconnected): counted, and sent
    /// downstream in order with the frames, to the sinks.
    pub fn event(&mut self, kind: EventKind) {
        self.stats.stream_event(&kind);
        let event = Arc::new(Event::new(self.name.clone(), kind));
        if let Some(send) = self.events {
            send(event);
        }
    }

    /// The input refuses this source for now (`Some`: why; the stream shows as
    /// `failed` while the source goes on trying), or no longer (`None`).
    pub fn refused(&self, reason: Option<String>) {
        *self.stats.refused.lock().unwrap_or_else(|e| e.into_inner()) = reason;
    }

    /// A new frame of this stream, with its accounting ticket.
    pub fn new_frame(&self, seq: u64, pts: Option<i64>, time_base: (i32, i32), image: Option<Arc<Image>>) -> Frame {
        match &self.input {
            Some(input) => self.frame(input.stream.clone(), seq, pts, time_base, image, self.acct.issue_for(Some(input.clone()))),
            None => self.frame(self.name.clone(), seq, pts, time_base, image, self.acct.issue()),
        }
    }

    /// Send a frame downstream; `false` when nobody is listening any more.
    pub fn emit(&mut self, frame: Frame) -> bool {
        self.stats.frames_out.fetch_add(1, Ordering::Relaxed);
        self.stats.stream(&frame.stream, StreamEvent::Out);
        let t0 = Instant::now();
        if let Some(t) = &mut self.trace {
            // Decoding this frame took from the previous hand-off until now.
            t.work(&frame, self.last_emit, t0);
        }
        // Busy time is counted frame by frame, so it is live while the source runs.
        self.stats.add_busy(self.busy_since.elapsed());
        let open = (self.emit)(frame);
        self.busy_since = Instant::now();
        self.last_emit = self.busy_since;
        open
    }

    /// The source is done: count its busy time since the last frame.
    fn finish(&self) {
        self.stats.add_busy(self.busy_since.elapsed());
    }

    /// Corrupt packets or unusable frames the decoder skipped.
    pub fn note_decode_errors(&self, n: u64) {
        self.stats.decode_errors.fetch_add(n, Ordering::Relaxed);
    }

    /// Frames skipped for corrupt data so far, and the stretches they came in (totals, kept live).
    pub fn set_decode_errors(&self, frames: u64, bursts: u64) {
        self.stats.decode_errors.store(frames, Ordering::Relaxed);
        self.stats.corrupt_bursts.store(bursts, Ordering::Relaxed);
    }
}

/// A node ready to run.
pub struct Node {
    pub name: Arc<str>,
    pub kind: &'static str,
    pub role: Role,
    pub on_error: OnError,
    /// Sources: (policy, most restarts, first wait).
    pub restart: (crate::config::Restart, Option<u32>, Duration),
    pub body: Body,
    pub describe: String,
    /// The execution provider an infer stage runs on.
    pub provider: Option<String>,
    /// How a source decodes (software, or the device and why).
    pub decode: Option<String>,
}

/// Whether a source that stopped (with `err`, or at the end of its input)
/// starts again under `policy`; `Some(reason)` when it does.
fn restart_decision(policy: crate::config::Restart, err: Option<&str>, done: u32, max: Option<u32>, stopping: bool) -> Option<Again> {
    use crate::config::Restart;
    if stopping || max.is_some_and(|m| done >= m) {
        return None;
    }
    match (policy, err) {
        (Restart::Never, _) | (Restart::OnError, None) => None,
        (_, Some(e)) => Some(Again::Lost(format!("failed: {e}"))),
        (Restart::Always, None) => Some(Again::Loop),
    }
}

/// Why a source starts again.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Again {
    /// It failed: its stream is lost until it runs again.
    Lost(String),
    /// Its input ended and `restart = "always"` plays it again: a loop, not a loss.
    Loop,
}

/// Called every 100 ms while a pipeline runs (progress bars).
pub type Tick<'a> = &'a mut dyn FnMut(&[Arc<NodeStats>], Duration);

/// A consumer's queue: every producer of the node sends into it.
struct Queue {
    tx: Sender<Msg>,
    rx: Receiver<Msg>,
    when_full: WhenFull,
}

/// A built pipeline.
pub struct Pipeline {
    pub name: String,
    pub nodes: Vec<Node>,
    graph: Graph,
    queues: Vec<(usize, Option<WhenFull>)>,
    /// Live counters, one per node (shared with progress, summary and metrics).
    stats: Vec<Arc<NodeStats>>,
    tracer: Option<Arc<trace::Tracer>>,
    /// Per node: the hub of a request source, answered from the sinks.
    replies: Arc<[Option<request::RequestHub>]>,
    /// Where the first sink publishes live results (`serve`).
    results: Option<Arc<ResultsHub>>,
}

impl Pipeline {
    pub fn new(cfg: &PipelineConfig, graph: Graph, bodies: Vec<Body>) -> Self {
        let nodes: Vec<Node> = cfg
            .nodes
            .iter()
            .zip(bodies)
            .map(|(n, body): (&NodeConfig, Body)| Node {
                name: Arc::from(n.name.as_str()),
                kind: n.kind.name(),
                role: n.role,
                on_error: n.on_error,
                restart: (
                    n.restart.as_ref().map(|r| *r.get_ref()).unwrap_or_default(),
                    n.max_restarts,
                    Duration::from_millis(n.restart_backoff_ms),
                ),
                provider: match &body {
                    Body::Stage(s) => s.provider(),
                    _ => None,
                },
                decode: match &body {
                    Body::Source(s) => s.decode(),
                    _ => None,
                },
                describe: match &body {
                    Body::Source(s) => s.describe(),
                    Body::Stage(s) => s.describe(),
                    Body::Sink(s) => s.describe(),
                },
                body,
            })
            .collect();
        let queues: Vec<_> =
            cfg.nodes.iter().map(|n| (n.queue.map_or(8, |q| q.capacity.get()), n.queue.and_then(|q| q.when_full))).collect();
        let stats: Vec<_> = nodes.iter().map(|nd| Arc::new(NodeStats::new(&nd.name, nd.kind, nd.role))).collect();
        for (i, st) in stats.iter().enumerate() {
            if !graph.producers[i].is_empty() {
                st.set_capacity(queues[i].0);
            }
            if let Body::Source(s) = &nodes[i].body {
                st.required.store(s.required(), std::sync::atomic::Ordering::Relaxed);
                st.dynamic.store(s.template().is_some(), std::sync::atomic::Ordering::Relaxed);
            }
            if let Body::Sink(s) = &nodes[i].body
                && let Some(d) = s.delivery()
            {
                let _ = st.delivery.set(d);
            }
        }
        let replies = nodes
            .iter()
            .map(|nd| match &nd.body {
                Body::Source(s) => s.request_hub(),
                _ => None,
            })
            .collect();
        Pipeline { name: cfg.name(), nodes, graph, queues, stats, tracer: None, results: None, replies }
    }

    /// Record one span per frame per node (and queue waits) into `tracer`.
    pub fn with_tracer(mut self, tracer: Arc<trace::Tracer>) -> Self {
        self.tracer = Some(tracer);
        self
    }

    /// The control handle for the service API: streams (the file's sources and
    /// templates to add streams to), the graph and its counters; the first sink
    /// publishes each frame's and event's JSON to `results`.
    pub fn control(&mut self, results: Arc<ResultsHub>) -> Arc<Control> {
        self.results = Some(results.clone());
        let shapes = self
            .nodes
            .iter()
            .enumerate()
            .map(|(i, n)| control::NodeShape {
                name: n.name.to_string(),
                kind: n.kind,
                role: n.role,
                inputs: self.graph.producers[i].iter().map(|&p| self.nodes[p].name.to_string()).collect(),
                describe: n.describe.clone(),
                provider: n.provider.clone(),
                decoder: n.decode.clone(),
            })
            .collect();
        let mut templates = Vec::new();
        let mut statics = Vec::new();
        for (i, n) in self.nodes.iter().enumerate() {
            if let Body::Source(s) = &n.body {
                match s.template() {
                    Some(t) => templates.push((i as u32, n.restart, t)),
                    None => statics.push((self.stats[i].clone(), crate::config::mask_credentials(&n.describe).into_owned(), s.required())),
                }
            }
        }
        let control = Control::new(self.name.clone(), shapes, self.stats.clone(), templates, statics, results);
        control.set_request_hubs(self.request_hubs());
        control
    }

    /// Each node's live counters, available before and during the run.
    pub fn stats(&self) -> &[Arc<NodeStats>] {
        &self.stats
    }

    /// The hubs of the request sources, by source name: what a service submits pictures through.
    pub fn request_hubs(&self) -> Vec<request::RequestHub> {
        self.replies.iter().flatten().cloned().collect()
    }

    /// Frames the sources expect to produce, if all of them know.
    pub fn expected_frames(&self) -> Option<u64> {
        let mut total = 0;
        for n in &self.nodes {
            if let Body::Source(s) = &n.body {
                total += s.expected_frames()?;
            }
        }
        Some(total)
    }

    /// Whether any source upstream of node `i` is live.
    fn live_upstream(&self, i: usize) -> bool {
        let mut stack = vec![i];
        let mut seen = vec![false; self.nodes.len()];
        while let Some(j) = stack.pop() {
            if std::mem::replace(&mut seen[j], true) {
                continue;
            }
            if let Body::Source(s) = &self.nodes[j].body
                && s.is_live()
            {
                return true;
            }
            stack.extend(&self.graph.producers[j]);
        }
        false
    }

    /// Run to completion (or until `shutdown`), then report.
    pub fn run(self, shutdown: Arc<Shutdown>, acct: Arc<Accounting>, on_tick: Option<Tick<'_>>) -> RunReport {
        let started = Instant::now();
        let n = self.nodes.len();
        let stats = self.stats.clone();
        // One queue per consumer; all its producers share it (fan-in).
        let queues: Vec<Option<Queue>> = (0..n)
            .map(|i| {
                if self.graph.producers[i].is_empty() {
                    return None;
                }
                let (cap, when_full) = self.queues[i];
                let when_full = when_full.unwrap_or(if self.live_upstream(i) { WhenFull::DropOldest } else { WhenFull::Block });
                let (tx, rx) = bounded(cap);
                Some(Queue { tx, rx, when_full })
            })
            .collect();
        let outputs: Vec<Outputs> = self
            .graph
            .consumers
            .iter()
            .map(|cons| Outputs {
                edges: cons
                    .iter()
                    .map(|&c| {
                        let q = queues[c].as_ref().expect("consumer has a queue");
                        Edge { tx: q.tx.clone(), rx: q.rx.clone(), when_full: q.when_full, to: stats[c].clone() }
                    })
                    .collect(),
            })
            .collect();
        let providers: Vec<(String, String)> = self.nodes.iter().filter_map(|n| Some((n.name.to_string(), n.provider.clone()?))).collect();
        let decoders: Vec<(String, String)> = self.nodes.iter().filter_map(|n| Some((n.name.to_string(), n.decode.clone()?))).collect();
        let mut inputs: Vec<Option<Receiver<Msg>>> = queues.into_iter().map(|q| q.map(|q| q.rx)).collect();
        let source_errors = Arc::new(Mutex::new(Vec::new()));
        // Sinks in order, each with the receiver of streams to close.
        let sink_index: Vec<Option<usize>> = {
            let mut k = 0;
            self.nodes
                .iter()
                .map(|n| {
                    matches!(n.body, Body::Sink(_)).then(|| {
                        k += 1;
                        k - 1
                    })
                })
                .collect()
        };
        let (ends, mut end_rxs) = StreamEnds::new(sink_index.iter().flatten().count(), stats.clone());
        let mut end_rxs: Vec<Option<Receiver<Arc<str>>>> = {
            let mut v: Vec<Option<Receiver<Arc<str>>>> = end_rxs.drain(..).map(Some).collect();
            sink_index.iter().map(|k| k.and_then(|k| v[k].take())).collect()
        };
        let input_log = Arc::new(InputLog::default());

        let mut handles = Vec::new();
        for ((i, node), out) in self.nodes.into_iter().enumerate().zip(outputs) {
            let st = stats[i].clone();
            let rx = inputs[i].take();
            let sd = shutdown.clone();
            let acct = acct.clone();
            let errs = source_errors.clone();
            let tb = self.tracer.as_ref().map(|t| t.buffer(i as u32 + 1, &node.name));
            let links = Links {
                stats: stats.clone(),
                ends: ends.clone(),
                sink: sink_index[i].zip(end_rxs[i].take()),
                inputs: input_log.clone(),
                replies: self.replies.clone(),
                results: self.results.clone().filter(|_| sink_index[i] == Some(0)),
            };
            let h = std::thread::Builder::new()
                .name(format!("node:{}", node.name))
                .spawn(move || run_node(i as u32, node, rx, out, st, sd, acct, errs, tb, links))
                .expect("spawn node thread");
            handles.push(h);
        }
        // Progress ticks while the nodes run.
        let mut on_tick = on_tick;
        while handles.iter().any(|h| !h.is_finished()) {
            std::thread::sleep(Duration::from_millis(100));
            if let Some(t) = on_tick.as_mut() {
                t(&stats, started.elapsed());
            }
        }
        for h in handles {
            if h.join().is_err() {
                shutdown.fail("a node thread panicked outside its stage".into());
            }
        }
        let wall = started.elapsed();
        let errors = source_errors.lock().unwrap_or_else(|e| e.into_inner()).clone();
        let mut report = RunReport::new(self.name, &stats, acct.snapshot(), wall, shutdown.signal(), shutdown.fatal(), errors);
        report.providers = providers;
        report.decoders = decoders;
        report.inputs = input_log.summary();
        report.first_result_ms = stats.iter().filter_map(|s| s.first_out.get()).min().map(|t| (*t - started).as_secs_f64() * 1e3);
        report
    }
}

/// What became of one frame in a stage.
enum Outcome {
    Done,
    /// Failed; counted and skipped (`on_error = "skip"`).
    Skip(String),
    /// Failed in a way that stops the pipeline.
    Stop(String),
}

fn panic_message(p: Box<dyn std::any::Any + Send>) -> String {
    p.downcast_ref::<&str>().map(|s| s.to_string()).or_else(|| p.downcast_ref::<String>().cloned()).unwrap_or_else(|| "panic".into())
}

/// Run a source until it is done, starting it again as its `restart` policy
/// says (with backoff); the error it ended with, if any.
fn drive_source(
    src: &mut Box<dyn node::Source>,
    ctx: &mut SourceCtx<'_>,
    st: &NodeStats,
    restart: (crate::config::Restart, Option<u32>, Duration),
) -> Option<String> {
    let name = ctx.name.clone();
    let (policy, max_restarts, first_wait) = restart;
    let mut restarts = 0u32;
    let mut wait = first_wait;
    loop {
        let r = catch_unwind(AssertUnwindSafe(|| src.run(ctx)));
        let err = match r {
            Ok(Ok(())) => None,
            Ok(Err(e)) => Some(e),
            Err(p) => Some(format!("panic: {}", panic_message(p))),
        };
        match restart_decision(policy, err.as_deref(), restarts, max_restarts, ctx.stopping() || src.exhausted()) {
            None => break err,
            Some(again) => {
                // A failure loses the stream; it comes back (a `reconnected` event) once the source
                // runs again. A deliberate loop is neither: it is counted as a loop.
                let lost_at = Instant::now();
                match &again {
                    Again::Lost(reason) => {
                        tracing::warn!("source `{name}`: {reason}; starting it again in {} ms", wait.as_millis());
                        ctx.event(EventKind::Lost { reason: reason.clone() });
                    }
                    Again::Loop => tracing::debug!("source `{name}`: input ended; playing it again in {} ms", wait.as_millis()),
                }
                let mut attempts = 0u32;
                let reopened = loop {
                    let until = Instant::now() + wait;
                    while !ctx.stopping() && Instant::now() < until {
                        std::thread::sleep((until - Instant::now()).min(Duration::from_millis(50)));
                    }
                    wait = (wait * 2).min(Duration::from_secs(30));
                    if ctx.stopping() {
                        break false;
                    }
                    attempts += 1;
                    restarts += 1;
                    match catch_unwind(AssertUnwindSafe(|| src.reopen())).unwrap_or_else(|p| Err(panic_message(p))) {
                        Ok(()) => break true,
                        Err(e) if max_restarts.is_some_and(|m| restarts >= m) => {
                            tracing::warn!("source `{name}`: cannot start again: {e}");
                            break false;
                        }
                        Err(e) => tracing::warn!("source `{name}`: cannot start again: {e}; next try in {} ms", wait.as_millis()),
                    }
                };
                if !reopened {
                    break err;
                }
                if again == Again::Loop {
                    let n = st.loops.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
                    tracing::info!("source `{name}`: looped (input ended, playing it again from the start: loop {n})");
                } else {
                    ctx.event(EventKind::Reconnected { gap_ms: lost_at.elapsed().as_millis() as u64, attempts });
                }
            }
        }
    }
}

/// What connects a node to the ends of streams.
struct Links {
    /// Every node's counts (a detection postprocess counts carried frames
    /// whose boxes had moved for the infer stage before it).
    stats: Vec<Arc<NodeStats>>,
    ends: Arc<StreamEnds>,
    /// For a sink: its index among the sinks and where ended streams arrive.
    sink: Option<(usize, Receiver<Arc<str>>)>,
    inputs: Arc<InputLog>,
    /// Request sources' hubs by node index: a sink's written frame answers its request.
    replies: Arc<[Option<request::RequestHub>]>,
    /// The first sink publishes what it writes here.
    results: Option<Arc<ResultsHub>>,
}

#[allow(clippy::too_many_arguments)]
fn run_node(
    index: u32,
    node: Node,
    rx: Option<Receiver<Msg>>,
    out: Outputs,
    st: Arc<NodeStats>,
    sd: Arc<Shutdown>,
    acct: Arc<Accounting>,
    errs: Arc<Mutex<Vec<String>>>,
    mut trace: Option<trace::TraceBuf>,
    links: Links,
) {
    let Node { name, body, on_error, role, restart, .. } = node;
    match body {
        Body::Source(mut src) => {
            let mut emit = |f: Frame| out.send(f);
            let events = |e: Arc<Event>| out.send_event(e);
            let mut ctx = SourceCtx::new(name.clone(), index, &sd, &acct, &st, &mut emit).with_events(&events);
            ctx.trace = trace.take();
            ctx.ends = Some(links.ends.clone());
            ctx.inputs = links.inputs.clone();
            let err = drive_source(&mut src, &mut ctx, &st, restart);
            ctx.finish();
            if let Some(e) = err {
                *st.failure.lock().unwrap_or_else(|e| e.into_inner()) = Some(e.clone());
                let msg = format!("source `{name}`: {e}");
                tracing::error!("{msg}");
                errs.lock().unwrap_or_else(|e| e.into_inner()).push(msg);
            }
            // Dropping `out` closes our side of every edge: end of stream downstream.
        }
        Body::Stage(mut stage) => {
            let rx = rx.expect("stage has an input");
            let (max, wait) = stage.batching().unwrap_or((1, Duration::ZERO));
            let mut dead = false;
            let mut batch: Vec<Frame> = Vec::with_capacity(max);
            let mut open = true;
            // An event that arrived while a batch was forming: passed on after the batch, keeping the order.
            let mut event_after: Option<Arc<Event>> = None;
            while open {
                if let Some(e) = event_after.take() {
                    out.send_event(e);
                }
                // One frame, then (when batching) more until the batch is full or the oldest has waited `wait`.
                match rx.recv() {
                    Ok(Msg::Frame(f)) => batch.push(f),
                    Ok(Msg::Event(e)) => {
                        // Events pass through stages untouched.
                        out.send_event(e);
                        continue;
                    }
                    Err(_) => break,
                }
                let deadline = Instant::now() + wait;
                while batch.len() < max {
                    match rx.recv_deadline(deadline) {
                        Ok(Msg::Frame(f)) => batch.push(f),
                        Ok(Msg::Event(e)) => {
                            event_after = Some(e);
                            break;
                        }
                        Err(crossbeam_channel::RecvTimeoutError::Timeout) => break,
                        Err(crossbeam_channel::RecvTimeoutError::Disconnected) => {
                            open = false;
                            break;
                        }
                    }
                }
                for f in &batch {
                    st.took(f, rx.len());
                }
                if dead {
                    for frame in batch.drain(..) {
                        frame.ticket.failed();
                        st.failed_on(&frame);
                    }
                    continue;
                }
                let t0 = Instant::now();
                let r = catch_unwind(AssertUnwindSafe(|| stage.process_batch(&mut batch)));
                let t1 = Instant::now();
                if max > 1 {
                    st.batch_formed(batch.len());
                }
                let per_frame = (t1 - t0) / batch.len() as u32;
                let results: Vec<Outcome> = match r {
                    Ok(rs) => rs
                        .into_iter()
                        .map(|r| match r {
                            Ok(()) => Outcome::Done,
                            Err(StageError::Frame(e)) if on_error == OnError::Skip => Outcome::Skip(e),
                            Err(e) => Outcome::Stop(e.to_string()),
                        })
                        .collect(),
                    Err(p) => {
                        // A panic is an error on these frames, handled by the policy like any other.
                        let msg = format!("panic: {}", panic_message(p));
                        for f in &batch {
                            tracing::error!("stage `{name}` panicked on stream `{}` frame {}: {msg}", f.stream, f.seq);
                        }
                        batch
                            .iter()
                            .map(|_| if on_error == OnError::Skip { Outcome::Skip(msg.clone()) } else { Outcome::Stop(msg.clone()) })
                            .collect()
                    }
                };
                for (mut frame, r) in batch.drain(..).zip(results) {
                    // Events the stage raised on this frame follow it, whatever became of it.
                    let events = std::mem::take(&mut frame.events);
                    st.record(per_frame, None);
                    if let Some(t) = &mut trace {
                        t.waited(&frame, t0);
                        t.work(&frame, t0, t1);
                    }
                    match r {
                        Outcome::Done => {
                            if st.kind == "infer"
                                && let Some(mode) = frame.work_mode(&name)
                            {
                                st.worked(&frame.stream, mode);
                                if let Some(n) = frame.crops_before(&name).map(|c| c.reread).filter(|n| *n > 0) {
                                    st.add_work(&frame.stream, stats::WORK_REREAD, n as u64);
                                }
                            }
                            if let Some((node, n)) = frame.carried_moved(&name)
                                && let Some(up) = links.stats.iter().find(|s| *s.name == **node)
                            {
                                up.add_work(&frame.stream, stats::WORK_CARRIED_MOVED, n as u64);
                            }
                            st.passed(&frame);
                            out.send(frame);
                        }
                        Outcome::Skip(e) => {
                            frame.ticket.failed();
                            let n = st.failed_on(&frame);
                            if n.is_power_of_two() {
                                tracing::warn!("stage `{name}`: stream `{}` frame {}: {e} (skipped; {n} so far)", frame.stream, frame.seq);
                            }
                        }
                        Outcome::Stop(e) => {
                            frame.ticket.failed();
                            st.failed_on(&frame);
                            if !dead {
                                sd.fail(format!("stage `{name}` failed on stream `{}` frame {}: {e}", frame.stream, frame.seq));
                            }
                            dead = true;
                        }
                    }
                    for e in events {
                        st.stage_event(&e);
                        out.send_event(Arc::new(e));
                    }
                }
            }
            if let Some(e) = event_after {
                out.send_event(e);
            }
            // The input ended: what the stage still has to say (tracks ending with the stream).
            if !dead {
                match catch_unwind(AssertUnwindSafe(|| stage.finish())) {
                    Ok(events) => {
                        for e in events {
                            st.stage_event(&e);
                            out.send_event(Arc::new(e));
                        }
                    }
                    Err(p) => tracing::error!("stage `{name}` panicked at the end of its input: {}", panic_message(p)),
                }
            }
        }
        Body::Sink(mut sink) => {
            let rx = rx.expect("sink has an input");
            let (sink_no, end_rx) = links.sink.expect("sink has an index");
            let mut dead = false;
            loop {
                // Frames and stream events, and streams that ended (every frame of them written): close those.
                let msg = crossbeam_channel::select! {
                    recv(rx) -> f => match f {
                        Ok(f) => f,
                        Err(_) => break,
                    },
                    recv(end_rx) -> s => {
                        if let Ok(stream) = s {
                            let r = catch_unwind(AssertUnwindSafe(|| sink.end_stream(&stream))).unwrap_or_else(|p| Err(panic_message(p)));
                            if let Err(e) = &r {
                                tracing::error!("sink `{name}`: closing stream `{stream}`: {e}");
                            }
                            links.ends.closed(sink_no, &stream, r.is_ok() && !dead);
                        }
                        continue;
                    }
                };
                let frame = match msg {
                    Msg::Frame(f) => f,
                    Msg::Event(e) => {
                        if let Some(hub) = &links.results {
                            hub.publish(&e.stream, results::ResultKind::Event, || e.to_json().to_string());
                        }
                        if !dead {
                            match catch_unwind(AssertUnwindSafe(|| sink.event(&e))) {
                                Ok(Ok(())) => {}
                                Ok(Err(err)) => tracing::warn!("sink `{name}`: stream `{}` event {}: {err}", e.stream, e.name()),
                                Err(p) => {
                                    tracing::warn!("sink `{name}`: stream `{}` event {}: panic: {}", e.stream, e.name(), panic_message(p))
                                }
                            }
                        }
                        continue;
                    }
                };
                st.took(&frame, rx.len());
                if dead {
                    frame.ticket.failed();
                    st.failed_on(&frame);
                    continue;
                }
                let t0 = Instant::now();
                let r = catch_unwind(AssertUnwindSafe(|| sink.write(&frame)));
                let t1 = Instant::now();
                st.record(t1 - t0, Some(t1 - frame.created));
                if let Some(t) = &mut trace {
                    t.waited(&frame, t0);
                    t.work(&frame, t0, t1);
                }
                match r {
                    Ok(Ok(())) => {
                        let _ = st.first_out.set(t1);
                        if let Some(hub) = &links.results {
                            hub.publish(&frame.stream, results::ResultKind::Frame, || crate::frame::json::frame_json_string(&frame));
                        }
                        if let Some(Some(hub)) = links.replies.get(frame.stream_index as usize) {
                            hub.deliver(&frame);
                        }
                        frame.ticket.sunk();
                        st.passed(&frame);
                    }
                    Ok(Err(StageError::Frame(e))) if on_error == OnError::Skip => {
                        frame.ticket.failed();
                        st.failed_on(&frame);
                        tracing::warn!("sink `{name}`: stream `{}` frame {}: {e} (skipped)", frame.stream, frame.seq);
                    }
                    Ok(Err(e)) => {
                        frame.ticket.failed();
                        st.failed_on(&frame);
                        sd.fail(format!("sink `{name}` failed on stream `{}` frame {}: {e}", frame.stream, frame.seq));
                        dead = true;
                    }
                    Err(p) if on_error == OnError::Skip => {
                        frame.ticket.failed();
                        st.failed_on(&frame);
                        tracing::error!(
                            "sink `{name}` panicked on stream `{}` frame {}: {} (skipped)",
                            frame.stream,
                            frame.seq,
                            panic_message(p)
                        );
                    }
                    Err(p) => {
                        frame.ticket.failed();
                        st.failed_on(&frame);
                        sd.fail(format!("sink `{name}` panicked on stream `{}` frame {}: {}", frame.stream, frame.seq, panic_message(p)));
                        dead = true;
                    }
                }
            }
            let finished = catch_unwind(AssertUnwindSafe(|| sink.finish())).unwrap_or_else(|p| Err(panic_message(p)));
            if let Err(e) = &finished {
                sd.fail(format!("sink `{name}`: {e}"));
            }
            let losses = sink.output_losses();
            st.losses.fetch_add(losses.lost, Ordering::Relaxed);
            st.reconnects.fetch_add(losses.reconnects, Ordering::Relaxed);
            st.undelivered.fetch_add(losses.undelivered, Ordering::Relaxed);
            links.ends.sink_finished(sink_no, finished.is_ok() && !dead);
        }
    }
    let _ = role;
    st.finish();
}

#[cfg(test)]
mod tests;
