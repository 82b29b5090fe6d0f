//! Runs a built pipeline: one thread per node, bounded crossbeam channels
//! between them, frames accounted for, and an orderly drain on shutdown.

pub mod added;
pub mod clips;
pub mod control;
pub mod dynamic;
pub mod ends;
pub mod live;
pub mod node;
pub mod report;
pub mod request;
pub mod results;
pub mod slot;
pub mod stats;
pub mod trace;

mod drive;
mod source_ctx;

use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender, TrySendError, bounded};

use crate::config::{NodeConfig, OnError, PipelineConfig, Role, WhenFull};
use crate::frame::{Accounting, Event, Frame};
use crate::graph::Graph;
pub use control::Control;
use drive::{Links, drive_source, panic_message, run_node};
pub use ends::StreamEnds;
use node::Body;
pub use report::{InputLog, RunReport};
pub use results::ResultsHub;
pub(crate) use source_ctx::InputOpener;
pub use source_ctx::SourceCtx;
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
    /// A `redact` stage comes after this stage: a frame it fails on goes on,
    /// marked, to be redacted whole or withheld there, rather than skipped.
    pub pass_failed: bool,
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
    /// Where one sink offers its pictures to live viewers (`serve`).
    live: Option<live::LiveHub>,
}

impl Pipeline {
    pub fn new(cfg: &PipelineConfig, graph: Graph, bodies: Vec<Body>) -> Self {
        // Per node: a `redact` stage lies downstream.
        let redact_after: Vec<bool> = (0..cfg.nodes.len())
            .map(|i| {
                let mut seen = vec![false; cfg.nodes.len()];
                let mut todo = graph.consumers[i].clone();
                while let Some(c) = todo.pop() {
                    if matches!(cfg.nodes[c].kind, crate::config::NodeKind::Redact(_)) {
                        return true;
                    }
                    if !std::mem::replace(&mut seen[c], true) {
                        todo.extend(graph.consumers[c].iter().copied());
                    }
                }
                false
            })
            .collect();
        let nodes: Vec<Node> = cfg
            .nodes
            .iter()
            .zip(bodies)
            .enumerate()
            .map(|(i, (n, body)): (usize, (&NodeConfig, Body))| Node {
                pass_failed: n.role == Role::Stage && redact_after[i],
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
            if let Body::Sink(s) = &nodes[i].body
                && let Some(h) = s.clip_hub()
            {
                let _ = st.clips.set(h);
            }
        }
        let replies = nodes
            .iter()
            .map(|nd| match &nd.body {
                Body::Source(s) => s.request_hub(),
                _ => None,
            })
            .collect();
        Pipeline { name: cfg.name(), nodes, graph, queues, stats, tracer: None, results: None, live: None, replies }
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
        let live = live::LiveHub::new(live::DEFAULT_MAX_FPS);
        self.live = Some(live.clone());
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
        control.set_live(live, self.live_sink().map(|i| self.nodes[i].name.to_string()));
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

    /// The sink whose frames viewers see: the first sink, or, when the
    /// pipeline has a `redact` stage, the first sink after one (none after
    /// one: no live pictures, never the raw frame).
    fn live_sink(&self) -> Option<usize> {
        let sinks = (0..self.nodes.len()).filter(|&i| matches!(self.nodes[i].body, Body::Sink(_)));
        if !self.nodes.iter().any(|n| n.kind == "redact") {
            return sinks.into_iter().next();
        }
        sinks.into_iter().find(|&i| {
            let mut stack = self.graph.producers[i].clone();
            let mut seen = vec![false; self.nodes.len()];
            while let Some(j) = stack.pop() {
                if std::mem::replace(&mut seen[j], true) {
                    continue;
                }
                if self.nodes[j].kind == "redact" {
                    return true;
                }
                stack.extend(&self.graph.producers[j]);
            }
            false
        })
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

    /// Event clips: a closed clip's event goes to every sink but the clips
    /// sinks (into their queues, as stream events do), and to the live feed
    /// when a clips sink is the one that publishes it.
    fn connect_clips(&self, queues: &[Option<Queue>]) {
        let is_clips = |i: usize| matches!(&self.nodes[i].body, Body::Sink(s) if s.clip_hub().is_some());
        let Some(hub) = (0..self.nodes.len()).find_map(|i| self.stats[i].clips.get().cloned()) else { return };
        let others = (0..self.nodes.len())
            .filter(|&i| matches!(self.nodes[i].body, Body::Sink(_)) && !is_clips(i))
            .filter_map(|i| queues[i].as_ref().map(|q| q.tx.clone()))
            .collect();
        let first_sink = self.nodes.iter().position(|n| matches!(n.body, Body::Sink(_)));
        let results = self.results.clone().filter(|_| first_sink.is_some_and(is_clips));
        hub.connect(others, (0..self.nodes.len()).filter(|&i| is_clips(i)).count(), results);
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
        self.connect_clips(&queues);
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
        let live_sink = self.live.as_ref().and_then(|_| self.live_sink());

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
                live: self.live.clone().filter(|_| live_sink == Some(i)),
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

#[cfg(test)]
mod tests;
