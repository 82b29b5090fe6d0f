//! The narrow handle through which the service API talks to a running
//! pipeline: list, add and remove streams, read the pipeline's shape and
//! counters, and the live results hub. Nothing here touches a stage.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::Serialize;
use serde_json::{Map, Value};

use super::added::AddedLog;
use super::node::{Command, Template};
use super::report::StreamsReport;
use super::results::ResultsHub;
use super::slot::SlotState;
pub use super::slot::{StreamSlot, StreamState};
use super::{NodeStats, Shutdown};
use crate::config::{Restart, Role};

/// A source's restart policy: (policy, most restarts, first wait).
pub type RestartPolicy = (Restart, Option<u32>, Duration);

/// Why the API's request to the runtime was refused.
#[derive(Debug, thiserror::Error)]
pub enum ControlError {
    #[error("no source template `{name}`{}", hint(.templates))]
    UnknownTemplate { name: String, templates: Vec<String> },
    #[error("a stream `{0}` exists already: remove it first or choose another id")]
    Duplicate(String),
    #[error("source `{template}` does not let an added stream set `{key}`; it may set: {}", if .allowed.is_empty() { "nothing but `id`".to_string() } else { .allowed.join(", ") })]
    NotAllowed { template: String, key: String, allowed: Vec<String> },
    #[error("{0}")]
    Invalid(String),
    #[error("no stream `{0}`")]
    NotFound(String),
    #[error("stream `{0}` is part of the pipeline file, not added at run time: it cannot be removed")]
    Static(String),
    #[error("the pipeline is stopping")]
    Stopping,
    /// A stream limit is reached (`429`).
    #[error("{}", too_many(.limit, .max))]
    TooMany { limit: Limit, max: usize },
}

/// Which stream limit refused an added stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Limit {
    /// The template's `max_streams`.
    Template(String),
    /// `[pipeline] api.max_streams`, all templates together.
    Total,
}

impl Limit {
    /// `template` or `total`, as the API's error says.
    pub fn name(&self) -> &'static str {
        match self {
            Limit::Template(_) => "template",
            Limit::Total => "total",
        }
    }
}

fn too_many(limit: &Limit, max: &usize) -> String {
    let what = match limit {
        Limit::Template(t) => format!("source `{t}` has {max} added stream(s), its `max_streams`"),
        Limit::Total => format!("the pipeline has {max} added stream(s), `[pipeline] api.max_streams`"),
    };
    format!("{what}: remove one (DELETE /v1/streams/ID; ended and failed streams count until removed) before adding another")
}

fn hint(templates: &[String]) -> String {
    if templates.is_empty() {
        "; this pipeline has no source with `dynamic = true`".into()
    } else {
        format!("; templates: {}", templates.join(", "))
    }
}

/// A stream's status, as `GET /v1/streams` shows it.
#[derive(Debug, Clone, Serialize)]
pub struct StreamStatus {
    pub id: String,
    pub source: String,
    /// Added at run time (`true`) or part of the pipeline file.
    pub dynamic: bool,
    pub state: StreamState,
    /// The input, credentials masked.
    pub uri: String,
    pub required: bool,
    pub fps: f64,
    /// Frames the source delivered.
    pub frames: u64,
    /// Frames of it dropped by full queues.
    pub drops: u64,
    /// Frames of it a stage or sink failed on.
    pub failures: u64,
    /// Times it was lost, and the longest outage.
    pub gaps: u64,
    pub longest_gap_ms: u64,
    pub last_error: Option<String>,
    pub uptime_s: f64,
    /// Once it has ended: every frame settled and every sink closed its outputs without error.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub complete: Option<bool>,
}

/// One node, as `GET /v1/pipeline` shows it.
#[derive(Debug, Clone, Serialize)]
pub struct NodeView {
    pub name: String,
    pub kind: String,
    pub role: String,
    pub inputs: Vec<String>,
    pub describe: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub provider: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub decoder: Option<String>,
    pub frames_in: u64,
    pub frames_out: u64,
    pub dropped: u64,
    pub failed: u64,
    pub queue_depth: u64,
    pub queue_capacity: u64,
    pub busy_s: f64,
}

/// `GET /v1/pipeline`.
#[derive(Debug, Clone, Serialize)]
pub struct PipelineView {
    pub name: String,
    pub uptime_s: f64,
    pub stopping: bool,
    pub nodes: Vec<NodeView>,
    pub templates: Vec<TemplateView>,
    /// Live-results subscribers and their drops.
    pub results: super::results::ResultsView,
    /// Live-picture viewers, pictures encoded and dropped for slow viewers.
    pub live: super::live::LiveView,
}

/// A source template, for `GET /v1/pipeline`.
#[derive(Debug, Clone, Serialize)]
pub struct TemplateView {
    pub source: String,
    pub kind: String,
    pub allow: Vec<String>,
}

/// The static shape of a node (its counters are read live).
pub(crate) struct NodeShape {
    pub name: String,
    pub kind: &'static str,
    pub role: Role,
    pub inputs: Vec<String>,
    pub describe: String,
    pub provider: Option<String>,
    pub decoder: Option<String>,
}

/// The control handle of one pipeline.
pub struct Control {
    name: String,
    shapes: Vec<NodeShape>,
    nodes: Vec<Arc<NodeStats>>,
    templates: BTreeMap<String, Arc<Template>>,
    /// Every stream by id: the file's sources, then added streams.
    streams: Mutex<BTreeMap<Arc<str>, Arc<StreamSlot>>>,
    results: Arc<ResultsHub>,
    /// The request sources' hubs (request/response inference).
    requests: std::sync::OnceLock<Vec<super::request::RequestHub>>,
    shutdown: Mutex<Option<Arc<Shutdown>>>,
    started: Instant,
    index_of: BTreeMap<String, (u32, RestartPolicy)>,
    /// The most added streams listed at once (`api.max_streams`).
    max_streams: std::sync::atomic::AtomicUsize,
    /// What became of the added streams removed so far.
    added_log: AddedLog,
    /// Live pictures, and the sink viewers see (none: no picture is shown).
    live: std::sync::OnceLock<(super::live::LiveHub, Option<String>)>,
}

/// Stream ids: they name files (`{stream}`) and metric labels.
pub fn valid_id(id: &str) -> Result<(), String> {
    if id.is_empty() || id.len() > 64 {
        return Err("`id` must be 1 to 64 characters".into());
    }
    if !id.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.')) || id.starts_with('.') {
        return Err(format!("`id` {id:?} may hold only letters, digits, `-`, `_` and `.` (not first)"));
    }
    Ok(())
}

impl Control {
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        name: String,
        shapes: Vec<NodeShape>,
        nodes: Vec<Arc<NodeStats>>,
        templates: Vec<(u32, RestartPolicy, Arc<Template>)>,
        statics: Vec<(Arc<NodeStats>, String, bool)>,
        results: Arc<ResultsHub>,
    ) -> Arc<Self> {
        let mut streams = BTreeMap::new();
        for (stats, shown, required) in statics {
            let id: Arc<str> = Arc::from(stats.name.as_str());
            streams.insert(
                id.clone(),
                Arc::new(StreamSlot {
                    id,
                    source: stats.name.clone(),
                    dynamic: false,
                    shown,
                    required,
                    stats,
                    restart: (Restart::Never, None, Duration::ZERO),
                    stop: Shutdown::new(),
                    removing: AtomicBool::new(false),
                    exited: AtomicBool::new(true),
                    state: Mutex::new(SlotState::default()),
                    added: Instant::now(),
                    first_result: Default::default(),
                }),
            );
        }
        let index_of = templates.iter().map(|(i, r, t)| (t.source.clone(), (*i, *r))).collect();
        Arc::new(Control {
            name,
            shapes,
            nodes,
            templates: templates.into_iter().map(|(_, _, t)| (t.source.clone(), t)).collect(),
            streams: Mutex::new(streams),
            results,
            requests: std::sync::OnceLock::new(),
            shutdown: Mutex::new(None),
            started: Instant::now(),
            index_of,
            max_streams: std::sync::atomic::AtomicUsize::new(usize::MAX),
            added_log: AddedLog::default(),
            live: std::sync::OnceLock::new(),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<Arc<str>, Arc<StreamSlot>>> {
        self.streams.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// At most `n` added streams listed at once, all templates together (`api.max_streams`).
    pub fn limit_streams(&self, n: usize) {
        self.max_streams.store(n, Ordering::Relaxed);
    }

    /// Refused when adding one more stream to `template` would pass a limit.
    fn room_for(&self, streams: &BTreeMap<Arc<str>, Arc<StreamSlot>>, template: &Template) -> Result<(), ControlError> {
        let total = self.max_streams.load(Ordering::Relaxed);
        if streams.values().filter(|s| s.dynamic).count() >= total {
            return Err(ControlError::TooMany { limit: Limit::Total, max: total });
        }
        if let Some(max) = template.max_streams
            && streams.values().filter(|s| s.dynamic && s.source == template.source).count() >= max
        {
            return Err(ControlError::TooMany { limit: Limit::Template(template.source.clone()), max });
        }
        Ok(())
    }

    /// The pipeline runs under `shutdown` (readiness says when it stops).
    pub fn running_under(&self, shutdown: Arc<Shutdown>) {
        *self.shutdown.lock().unwrap_or_else(|e| e.into_inner()) = Some(shutdown);
    }

    pub fn stopping(&self) -> bool {
        self.shutdown.lock().unwrap_or_else(|e| e.into_inner()).as_ref().is_some_and(|s| s.stopping())
    }

    /// Where live results are published.
    pub fn results(&self) -> &Arc<ResultsHub> {
        &self.results
    }

    /// The request sources, to submit pictures through (`POST /v1/infer`, gRPC `Infer`).
    pub fn request_hubs(&self) -> &[super::request::RequestHub] {
        self.requests.get().map_or(&[], Vec::as_slice)
    }

    /// Set once, when the handle is made.
    pub(crate) fn set_request_hubs(&self, hubs: Vec<super::request::RequestHub>) {
        let _ = self.requests.set(hubs);
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// Set once, when the handle is made: the live pictures' hub and the sink they come from.
    pub(crate) fn set_live(&self, hub: super::live::LiveHub, sink: Option<String>) {
        let _ = self.live.set((hub, sink));
    }

    /// The live pictures' hub; `None` when no sink shows pictures (a pipeline
    /// with a `redact` stage and no sink after it).
    pub fn live(&self) -> Option<&super::live::LiveHub> {
        self.live.get().and_then(|(h, sink)| sink.as_ref().map(|_| h))
    }

    /// The hub even when no sink shows pictures (to set its renderer and rate).
    pub fn live_hub(&self) -> Option<&super::live::LiveHub> {
        self.live.get().map(|(h, _)| h)
    }

    fn status(&self, slot: &StreamSlot) -> StreamStatus {
        let (drops, failures) = self.nodes.iter().filter(|n| n.role != Role::Source).fold((0, 0), |(d, f), n| {
            let c = n.stream_counts();
            match c.iter().find(|(s, _)| **s == *slot.id) {
                Some((_, k)) => (d + k[2], f + k[3]),
                None => (d, f),
            }
        });
        let st = slot.lock();
        let failure = || {
            let failure = slot.stats.failure.lock().unwrap_or_else(|e| e.into_inner()).clone();
            failure.or_else(|| slot.stats.refused.lock().unwrap_or_else(|e| e.into_inner()).clone())
        };
        let last_error = st.last_error.clone().or_else(failure).map(|e| crate::config::mask_credentials(&e).into_owned()).or_else(|| {
            slot.stats
                .lost_now
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .as_ref()
                .map(|(_, r)| crate::config::mask_credentials(r).into_owned())
        });
        let complete = st.flushed.as_ref().map(|(_, ok)| *ok);
        drop(st);
        StreamStatus {
            id: slot.id.to_string(),
            source: slot.source.clone(),
            dynamic: slot.dynamic,
            state: slot.state(),
            uri: slot.shown.clone(),
            required: slot.required,
            fps: (slot.fps() * 100.0).round() / 100.0,
            frames: slot.stats.frames_out.load(Ordering::Relaxed),
            drops,
            failures,
            gaps: slot.stats.losses.load(Ordering::Relaxed),
            longest_gap_ms: slot.stats.longest_gap_ms.load(Ordering::Relaxed),
            last_error,
            uptime_s: (slot.added.elapsed().as_secs_f64() * 10.0).round() / 10.0,
            complete,
        }
    }

    /// Every stream: the file's sources, then the added ones, by id.
    pub fn streams(&self) -> Vec<StreamStatus> {
        let slots: Vec<Arc<StreamSlot>> = self.lock().values().cloned().collect();
        slots.iter().map(|s| self.status(s)).collect()
    }

    pub fn stream(&self, id: &str) -> Option<StreamStatus> {
        let slot = self.lock().get(id).cloned()?;
        Some(self.status(&slot))
    }

    /// The counters of the streams added at run time (each named by its id), for `/metrics`.
    pub fn added_stats(&self) -> Vec<Arc<NodeStats>> {
        self.lock().values().filter(|s| s.dynamic).map(|s| s.stats.clone()).collect()
    }

    /// The source templates (`dynamic = true`) streams can be added to.
    pub fn templates(&self) -> Vec<TemplateView> {
        self.templates
            .values()
            .map(|t| TemplateView { source: t.source.clone(), kind: t.kind.to_string(), allow: t.allow.clone() })
            .collect()
    }

    /// Add a stream to template `source` with `fields` (the keys it allows).
    pub fn add_stream(&self, source: &str, id: &str, fields: &Map<String, Value>) -> Result<StreamStatus, ControlError> {
        if self.stopping() {
            return Err(ControlError::Stopping);
        }
        let Some(t) = self.templates.get(source) else {
            return Err(ControlError::UnknownTemplate { name: source.to_string(), templates: self.templates.keys().cloned().collect() });
        };
        valid_id(id).map_err(ControlError::Invalid)?;
        if let Some(key) = fields.keys().find(|k| !t.allow.iter().any(|a| a == *k)) {
            return Err(ControlError::NotAllowed { template: source.into(), key: key.clone(), allowed: t.allow.clone() });
        }
        {
            let streams = self.lock();
            if streams.contains_key(id) {
                return Err(ControlError::Duplicate(id.into()));
            }
            self.room_for(&streams, t)?;
        }
        let prepared = (t.prepare)(id, fields).map_err(|e| ControlError::Invalid(crate::config::mask_credentials(&e).into_owned()))?;
        let (index, restart) = self.index_of[source];
        let _ = index;
        let slot = Arc::new(StreamSlot {
            id: Arc::from(id),
            source: source.into(),
            dynamic: true,
            shown: prepared.shown.clone(),
            required: prepared.required,
            stats: Arc::new(NodeStats::new(id, t.kind, Role::Source)),
            restart,
            stop: Shutdown::new(),
            removing: AtomicBool::new(false),
            exited: AtomicBool::new(false),
            state: Mutex::new(SlotState::default()),
            added: Instant::now(),
            first_result: Default::default(),
        });
        {
            let mut streams = self.lock();
            if streams.contains_key(id) {
                return Err(ControlError::Duplicate(id.into()));
            }
            // Checked again under the same lock as the insert: requests at once cannot pass the limit together.
            self.room_for(&streams, t)?;
            streams.insert(slot.id.clone(), slot.clone());
        }
        if !t.send(Command::Start(slot.clone(), prepared)) {
            self.lock().remove(id);
            return Err(ControlError::Stopping);
        }
        tracing::info!("stream `{id}` added to `{source}`: {}", slot.shown);
        Ok(self.status(&slot))
    }

    /// Stop an added stream: its frames in flight drain, its outputs close and
    /// its source is dropped; waits up to `wait` for that, then forgets the
    /// stream and hands the memory it freed back to the system. Its last status.
    pub fn remove_stream(&self, id: &str, wait: Duration) -> Result<StreamStatus, ControlError> {
        let slot = self.begin_remove(id)?;
        let until = Instant::now() + wait;
        while !(slot.is_flushed() && slot.exited.load(Ordering::Acquire)) && Instant::now() < until {
            std::thread::sleep(Duration::from_millis(10));
        }
        let status = self.finish_remove(&slot);
        // Its decoder threads, frames and counters are freed now; without this the
        // allocator keeps their memory in its arenas (hundreds of MB after 200 streams).
        crate::backend::memory::return_free_memory();
        Ok(status)
    }

    /// The first half of [`Control::remove_stream`]: ask the stream to stop.
    pub fn begin_remove(&self, id: &str) -> Result<Arc<StreamSlot>, ControlError> {
        let slot = self.lock().get(id).cloned().ok_or_else(|| ControlError::NotFound(id.into()))?;
        if !slot.dynamic {
            return Err(ControlError::Static(id.into()));
        }
        slot.removing.store(true, Ordering::Release);
        slot.stop();
        Ok(slot)
    }

    /// The second half: forget the stream (once flushed, or given up on) and say its last status.
    pub fn finish_remove(&self, slot: &Arc<StreamSlot>) -> StreamStatus {
        let status = self.status(slot);
        let mut streams = self.lock();
        if streams.get(&slot.id).is_some_and(|s| Arc::ptr_eq(s, slot)) {
            streams.remove(&slot.id);
            drop(streams);
            self.record(slot, &status);
        }
        if let Some(h) = self.live_hub() {
            h.forget(&slot.id);
        }
        tracing::info!("stream `{}` removed ({} frames)", slot.id, status.frames);
        status
    }

    /// Record what became of an added stream, for the summary.
    fn record(&self, slot: &StreamSlot, status: &StreamStatus) {
        let error = (status.state == StreamState::Failed).then(|| status.last_error.clone().unwrap_or_else(|| "failed".into()));
        let first = slot.first_result.get().and_then(|f| f.get()).map(|t| t.saturating_duration_since(slot.added));
        self.added_log.record(&slot.id, &slot.source, error, first);
    }

    /// At the end of the run: what became of every stream added (the ones still
    /// listed are recorded now, and forgotten).
    pub fn streams_report(&self) -> StreamsReport {
        let listed: Vec<Arc<StreamSlot>> = {
            let mut streams = self.lock();
            let ids: Vec<Arc<str>> = streams.values().filter(|s| s.dynamic).map(|s| s.id.clone()).collect();
            ids.iter().filter_map(|id| streams.remove(id)).collect()
        };
        for slot in listed {
            let status = self.status(&slot);
            self.record(&slot, &status);
        }
        self.added_log.report()
    }

    /// Whether the pipeline file has sources of its own (not only templates).
    pub fn has_file_streams(&self) -> bool {
        self.lock().values().any(|s| !s.dynamic)
    }

    /// The graph, each node's counters, the templates.
    pub fn pipeline(&self) -> PipelineView {
        let nodes = self
            .shapes
            .iter()
            .zip(&self.nodes)
            .map(|(s, st)| NodeView {
                name: s.name.clone(),
                kind: s.kind.to_string(),
                role: s.role.noun().to_string(),
                inputs: s.inputs.clone(),
                describe: crate::config::mask_credentials(&s.describe).into_owned(),
                provider: s.provider.clone(),
                decoder: s.decoder.clone(),
                frames_in: st.frames_in.load(Ordering::Relaxed),
                frames_out: st.frames_out.load(Ordering::Relaxed),
                dropped: st.dropped.load(Ordering::Relaxed),
                failed: st.failed.load(Ordering::Relaxed),
                queue_depth: st.depth(),
                queue_capacity: st.capacity.load(Ordering::Relaxed) as u64,
                busy_s: st.busy_ns.load(Ordering::Relaxed) as f64 / 1e9,
            })
            .collect();
        PipelineView {
            name: self.name.clone(),
            uptime_s: (self.started.elapsed().as_secs_f64() * 10.0).round() / 10.0,
            stopping: self.stopping(),
            nodes,
            templates: self.templates(),
            results: self.results.view(),
            live: self.live_hub().map(|h| h.view()).unwrap_or_else(|| super::live::LiveHub::new(0.0).view()),
        }
    }

    /// Added streams that hold readiness back: required ones not delivering now (`Err`: the first, and why).
    pub fn streams_ready(&self) -> Result<(), String> {
        let slots: Vec<Arc<StreamSlot>> = self.lock().values().filter(|s| s.dynamic && s.required).cloned().collect();
        for s in slots {
            match s.state() {
                StreamState::Running | StreamState::Stopping | StreamState::Ended => {}
                StreamState::Starting => return Err(format!("not ready: stream `{}` has not delivered a frame yet", s.id)),
                StreamState::Lost | StreamState::Reconnecting => return Err(format!("not ready: stream `{}` is lost, reconnecting", s.id)),
                StreamState::Failed => return Err(format!("not ready: stream `{}` failed", s.id)),
            }
        }
        Ok(())
    }

    /// Event clips written and still on disk, oldest first (none without a `clips` sink).
    pub fn clips(&self) -> Vec<super::clips::ClipRecord> {
        self.nodes.iter().find_map(|n| n.clips.get()).map(|h| h.list()).unwrap_or_default()
    }
}
