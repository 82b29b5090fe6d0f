//! Chrome Trace Event output (`run --trace FILE`): one complete span per frame
//! per node, plus the time each frame waited in the node's queue. Opens in
//! Perfetto (ui.perfetto.dev) and chrome://tracing.

use std::io::Write;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use serde::Serialize;

use crate::frame::Frame;

/// One complete event (`"ph": "X"`).
#[derive(Debug, Clone, Serialize)]
pub struct Span {
    pub name: Arc<str>,
    pub cat: &'static str,
    pub ph: &'static str,
    /// Microseconds since the run started.
    pub ts: f64,
    pub dur: f64,
    pub pid: u32,
    pub tid: u32,
    pub args: SpanArgs,
}

#[derive(Debug, Clone, Serialize)]
pub struct SpanArgs {
    pub stream: Arc<str>,
    pub seq: u64,
}

/// Collects spans from every node; written once at the end of the run.
pub struct Tracer {
    origin: Instant,
    spans: Mutex<Vec<Span>>,
    threads: Mutex<Vec<(u32, String)>>,
}

impl Tracer {
    pub fn new() -> Arc<Self> {
        Arc::new(Tracer { origin: Instant::now(), spans: Mutex::new(Vec::new()), threads: Mutex::new(Vec::new()) })
    }

    /// A buffer for one node's thread (no locking per frame).
    pub fn buffer(self: &Arc<Self>, tid: u32, node: &Arc<str>) -> TraceBuf {
        self.threads.lock().unwrap_or_else(|e| e.into_inner()).push((tid, format!("{node}")));
        TraceBuf { tracer: self.clone(), tid, node: node.clone(), wait: Arc::from(format!("{node} queue")), spans: Vec::new() }
    }

    pub fn span_count(&self) -> usize {
        self.spans.lock().unwrap_or_else(|e| e.into_inner()).len()
    }

    /// Write the trace as `{"traceEvents": [...]}`.
    pub fn write(&self, path: &Path) -> std::io::Result<()> {
        let spans = self.spans.lock().unwrap_or_else(|e| e.into_inner());
        let threads = self.threads.lock().unwrap_or_else(|e| e.into_inner());
        let mut events: Vec<serde_json::Value> = threads
            .iter()
            .map(|(tid, name)| serde_json::json!({"name": "thread_name", "ph": "M", "pid": 1, "tid": tid, "args": {"name": name}}))
            .collect();
        events.extend(spans.iter().map(|s| serde_json::to_value(s).expect("span serialises")));
        let mut f = std::io::BufWriter::new(std::fs::File::create(path)?);
        serde_json::to_writer(&mut f, &serde_json::json!({"traceEvents": events, "displayTimeUnit": "ms"}))?;
        f.flush()
    }
}

/// One node's spans, merged into the [`Tracer`] when dropped.
pub struct TraceBuf {
    tracer: Arc<Tracer>,
    tid: u32,
    node: Arc<str>,
    wait: Arc<str>,
    spans: Vec<Span>,
}

impl TraceBuf {
    fn us(&self, t: Instant) -> f64 {
        t.saturating_duration_since(self.tracer.origin).as_secs_f64() * 1e6
    }

    fn push(&mut self, name: Arc<str>, cat: &'static str, frame: &Frame, from: Instant, to: Instant) {
        let ts = self.us(from);
        let dur = (self.us(to) - ts).max(0.0);
        self.spans.push(Span {
            name,
            cat,
            ph: "X",
            ts,
            dur,
            pid: 1,
            tid: self.tid,
            args: SpanArgs { stream: frame.stream.clone(), seq: frame.seq },
        });
    }

    /// The node worked on `frame` from `from` to `to`.
    pub fn work(&mut self, frame: &Frame, from: Instant, to: Instant) {
        self.push(self.node.clone(), "node", frame, from, to);
    }

    /// `frame` waited in this node's queue until `until`.
    pub fn waited(&mut self, frame: &Frame, until: Instant) {
        if let Some(q) = frame.queued_at {
            self.push(self.wait.clone(), "queue", frame, q, until);
        }
    }
}

impl Drop for TraceBuf {
    fn drop(&mut self) {
        let mut all = self.tracer.spans.lock().unwrap_or_else(|e| e.into_inner());
        all.append(&mut self.spans);
    }
}
