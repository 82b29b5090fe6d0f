//! The end-of-run report: per-node table, accounting line, JSON form.

use std::fmt::Write as _;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use serde::Serialize;

use super::NodeStats;
use crate::frame::Counts;

/// Latency percentiles in milliseconds.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct Latency {
    pub p50: f64,
    pub p95: f64,
    pub p99: f64,
    pub max: f64,
    pub count: u64,
}

impl Latency {
    /// The percentiles of a histogram of microseconds.
    pub fn of(h: &hdrhistogram::Histogram<u64>) -> Self {
        if h.is_empty() {
            return Latency::default();
        }
        let ms = |v: u64| v as f64 / 1000.0;
        Latency {
            p50: ms(h.value_at_quantile(0.50)),
            p95: ms(h.value_at_quantile(0.95)),
            p99: ms(h.value_at_quantile(0.99)),
            max: ms(h.max()),
            count: h.len(),
        }
    }
}

/// One row of the summary.
#[derive(Debug, Clone, Serialize)]
pub struct NodeReport {
    pub name: String,
    pub kind: String,
    pub role: String,
    pub frames_in: u64,
    pub frames_out: u64,
    pub dropped: u64,
    pub failed: u64,
    /// Stages: frames taken out on purpose (a `python` stage's `"drop": true`).
    pub filtered: u64,
    /// Sources: frames skipped for corrupt data.
    pub decode_errors: u64,
    /// Sources: stretches of corrupt data (each resumed at a keyframe).
    pub corrupt_bursts: u64,
    /// Frames out per second of wall time.
    pub fps: f64,
    /// Share of wall time spent working. Stages and sinks: on frames (not
    /// waiting for input or for room downstream). Sources: between frames,
    /// so reading, and waiting for the network or a real-time pace, count.
    pub busy: f64,
    pub queue_capacity: usize,
    pub queue_max_depth: usize,
    /// Time per frame in this node.
    pub latency_ms: Latency,
    /// Source to sink (sinks only).
    pub end_to_end_ms: Option<Latency>,
    /// Batches formed: (size, count), batching stages only.
    pub batch_sizes: Vec<(usize, u64)>,
    /// Sources: times the stream was lost and reconnected, and the longest gap.
    pub stream_lost: u64,
    pub reconnects: u64,
    pub longest_gap_ms: u64,
    /// Sources: times the input was played again (`restart = "always"`), not losses.
    pub loops: u64,
    /// Sinks: frames not delivered while a server output was unreachable.
    pub undelivered: u64,
    /// Infer stages: per stream, frames the model ran on and frames it skipped.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub work: Vec<WorkReport>,
    /// Message-bus sinks (Kafka, MQTT): delivered, retried, spooled, spool bytes, latency, errors.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub delivery: Option<crate::bus::DeliveryReport>,
    /// `redact` stages: what was redacted.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub redaction: Option<RedactionReport>,
}

/// What a `redact` stage did: boxes redacted, frames redacted whole (a
/// detector failed on them or skipped them), frames withheld
/// (`on_miss = "drop"`, also counted in `dropped`).
#[derive(Debug, Clone, Serialize)]
pub struct RedactionReport {
    pub boxes: u64,
    pub whole_frames: u64,
    pub withheld_frames: u64,
}

/// What an infer stage's model did with one stream's frames: ran
/// (`inferred`), skipped for the tracker to predict (`interval`), skipped
/// with earlier results carried forward (`motion`, `once_per_track`).
#[derive(Debug, Clone, Serialize)]
pub struct WorkReport {
    pub stream: String,
    pub inferred: u64,
    pub predicted: u64,
    pub carried: u64,
    /// Of `carried`: frames in stretches after which the boxes had moved
    /// (`motion`; counted by the detection postprocess after the stage).
    pub carried_moved: u64,
    /// Regions a `once_per_track` crop sent again because their track came
    /// wholly inside the picture.
    pub reread: u64,
}

/// Everything a run reports.
#[derive(Debug, Clone, Serialize)]
pub struct RunReport {
    pub pipeline: String,
    pub wall_seconds: f64,
    pub nodes: Vec<NodeReport>,
    pub frames: Counts,
    pub interrupted_by_signal: Option<i32>,
    pub fatal: Option<String>,
    pub source_errors: Vec<String>,
    /// (infer node, execution provider in use).
    pub providers: Vec<(String, String)>,
    /// (source node, how it decodes).
    pub decoders: Vec<(String, String)>,
    /// From the start of the run to the first frame written by a sink.
    pub first_result_ms: Option<f64>,
    /// Inputs of multi-input sources (`dir`): complete, skipped, failed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub inputs: Option<InputsReport>,
    /// Line crossings and zone entries and exits, by stage, stream, line or zone, class and direction.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub counts: Vec<CountRow>,
    /// Tracks that ended, by `track` stage.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tracks_ended: Vec<(String, u64)>,
    /// `serve`: the streams added at run time (how many, which failed, their first results).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub streams: Option<StreamsReport>,
}

/// One count of an `analytics` stage: `what` is `in` or `out` for a line,
/// `entered` or `left` for a zone.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct CountRow {
    pub node: String,
    pub stream: String,
    /// `line` or `zone`.
    pub kind: String,
    pub name: String,
    pub class: String,
    pub what: String,
    pub count: u64,
}

/// An input that could not be processed, and why.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct FailedInput {
    pub path: String,
    pub reason: String,
}

/// What became of the inputs of multi-input sources.
#[derive(Debug, Clone, Default, Serialize)]
pub struct InputsReport {
    /// Read to the end, every sink flushed their results (recorded as complete).
    pub complete: u64,
    /// Complete in an earlier run (its state file says so), not read again.
    pub skipped: u64,
    /// Failed before, unchanged since, not read again (still counted in `failed`).
    pub skipped_failed: u64,
    /// Started but not finished (the run was stopped): redone by the next run.
    pub incomplete: u64,
    /// Failed (this run or, unchanged, an earlier one), in path order.
    pub failed: Vec<FailedInput>,
    /// Jobs (`kafka`): complete ones that were delivered before (attempt > 1).
    #[serde(skip_serializing_if = "is_zero")]
    pub redone: u64,
    /// Jobs (`kafka`): stopped because their partition went to another worker (redone there).
    #[serde(skip_serializing_if = "is_zero")]
    pub revoked: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// Collects input outcomes while a pipeline runs (sources and sink threads record into it).
#[derive(Debug, Default)]
pub struct InputLog {
    used: std::sync::atomic::AtomicBool,
    report: std::sync::Mutex<InputsReport>,
}

impl InputLog {
    /// Record into the report (and say there are inputs to report).
    pub fn record(&self, f: impl FnOnce(&mut InputsReport)) {
        self.used.store(true, Ordering::Release);
        f(&mut self.report.lock().unwrap_or_else(|e| e.into_inner()));
    }

    /// The report, when some source recorded inputs.
    pub fn summary(&self) -> Option<InputsReport> {
        if !self.used.load(Ordering::Acquire) {
            return None;
        }
        let mut r = self.report.lock().unwrap_or_else(|e| e.into_inner()).clone();
        r.failed.sort_by(|a, b| a.path.cmp(&b.path));
        Some(r)
    }
}

impl InputsReport {
    /// `inputs: 3 complete, 2 skipped (already complete), 1 failed`.
    pub fn line(&self) -> String {
        let mut s = format!("inputs: {} complete", self.complete);
        if self.skipped > 0 {
            let _ = write!(s, ", skipped {} already complete", self.skipped);
        }
        if self.incomplete > 0 {
            let _ = write!(s, ", {} stopped before the end (redone next run)", self.incomplete);
        }
        if self.redone > 0 {
            let _ = write!(s, " ({} redone: attempt > 1)", self.redone);
        }
        if self.revoked > 0 {
            let _ = write!(s, ", {} revoked (partition reassigned, redone by its new worker)", self.revoked);
        }
        let _ = write!(s, ", {} failed", self.failed.len());
        if self.skipped_failed > 0 {
            let _ = write!(s, " ({} of them unchanged since they failed before, not read again)", self.skipped_failed);
        }
        s
    }
}

impl RunReport {
    pub fn new(
        pipeline: String,
        stats: &[Arc<NodeStats>],
        frames: Counts,
        wall: Duration,
        signal: Option<i32>,
        fatal: Option<String>,
        source_errors: Vec<String>,
    ) -> Self {
        let secs = wall.as_secs_f64().max(1e-9);
        let nodes = stats
            .iter()
            .map(|s| {
                let out = s.frames_out.load(Ordering::Relaxed);
                let e2e = s.end_to_end.lock().map(|h| Latency::of(&h)).unwrap_or_default();
                NodeReport {
                    name: s.name.clone(),
                    kind: s.kind.to_string(),
                    role: s.role.noun().to_string(),
                    frames_in: s.frames_in.load(Ordering::Relaxed),
                    frames_out: out,
                    dropped: s.dropped.load(Ordering::Relaxed),
                    failed: s.failed.load(Ordering::Relaxed),
                    filtered: s.filtered.load(Ordering::Relaxed),
                    decode_errors: s.decode_errors.load(Ordering::Relaxed),
                    corrupt_bursts: s.corrupt_bursts.load(Ordering::Relaxed),
                    fps: out as f64 / secs,
                    busy: (s.busy_ns.load(Ordering::Relaxed) as f64 / 1e9 / secs).min(1.0),
                    queue_capacity: s.capacity.load(Ordering::Relaxed),
                    queue_max_depth: s.max_depth.load(Ordering::Relaxed),
                    latency_ms: s.service.lock().map(|h| Latency::of(&h)).unwrap_or_default(),
                    end_to_end_ms: (e2e.count > 0).then_some(e2e),
                    batch_sizes: s
                        .batch_sizes
                        .lock()
                        .map(|b| b.iter().enumerate().filter(|(_, c)| **c > 0).map(|(n, c)| (n, *c)).collect())
                        .unwrap_or_default(),
                    stream_lost: s.losses.load(Ordering::Relaxed),
                    reconnects: s.reconnects.load(Ordering::Relaxed),
                    longest_gap_ms: s.longest_gap_ms.load(Ordering::Relaxed),
                    loops: s.loops.load(Ordering::Relaxed),
                    undelivered: s.undelivered.load(Ordering::Relaxed),
                    work: s
                        .work_counts()
                        .into_iter()
                        .map(|(stream, [inferred, predicted, carried, carried_moved, reread])| WorkReport {
                            stream: stream.to_string(),
                            inferred,
                            predicted,
                            carried,
                            carried_moved,
                            reread,
                        })
                        .collect(),
                    delivery: s.delivery.get().map(|d| d.report()),
                    redaction: (s.kind == "redact").then(|| RedactionReport {
                        boxes: s.redacted[0].load(Ordering::Relaxed),
                        whole_frames: s.redacted[1].load(Ordering::Relaxed),
                        withheld_frames: s.dropped.load(Ordering::Relaxed),
                    }),
                }
            })
            .collect();
        RunReport {
            pipeline,
            wall_seconds: secs,
            nodes,
            frames,
            interrupted_by_signal: signal,
            fatal,
            source_errors,
            providers: Vec::new(),
            decoders: Vec::new(),
            first_result_ms: None,
            inputs: None,
            counts: stats
                .iter()
                .flat_map(|s| {
                    s.count_rows().into_iter().map(|(k, count)| CountRow {
                        node: s.name.clone(),
                        stream: k.stream.to_string(),
                        kind: k.kind.to_string(),
                        name: k.name.to_string(),
                        class: k.class,
                        what: k.what.to_string(),
                        count,
                    })
                })
                .collect(),
            tracks_ended: stats
                .iter()
                .filter(|s| s.kind == "track")
                .map(|s| (s.name.clone(), s.tracks_ended.load(Ordering::Relaxed)))
                .filter(|(_, n)| *n > 0)
                .collect(),
            streams: None,
        }
    }

    /// Frames per second through the whole pipeline (settled frames / wall time).
    pub fn fps(&self) -> f64 {
        self.frames.processed as f64 / self.wall_seconds
    }

    /// The accounting line: decoded = processed + dropped + failed.
    pub fn accounting_line(&self) -> String {
        let c = &self.frames;
        let mut s = format!("frames: decoded {} = processed {} + dropped {} + failed {}", c.decoded, c.processed, c.dropped, c.failed);
        if c.filtered > 0 {
            let _ = write!(s, " + filtered {}", c.filtered);
        }
        if c.balanced() {
            s.push_str("  (all accounted for)");
        } else {
            let _ = write!(
                s,
                "  MISMATCH: {} frame(s) unaccounted for",
                c.decoded as i64 - (c.processed + c.dropped + c.failed + c.filtered) as i64
            );
        }
        s
    }

    /// One summary line per line or zone, stream and class:
    /// `counts: door (cam) person: in 2, out 1` or `counts: desk (cam) 0: entered 3, left 3`.
    pub fn counts_lines(&self) -> String {
        let mut out = String::new();
        let mut rows: Vec<&CountRow> = self.counts.iter().collect();
        rows.sort_by(|a, b| (&a.node, &a.kind, &a.name, &a.stream, &a.class).cmp(&(&b.node, &b.kind, &b.name, &b.stream, &b.class)));
        let mut i = 0;
        while i < rows.len() {
            let r = rows[i];
            let same = |o: &CountRow| (&o.node, &o.kind, &o.name, &o.stream, &o.class) == (&r.node, &r.kind, &r.name, &r.stream, &r.class);
            let group: Vec<&CountRow> = rows[i..].iter().take_while(|o| same(o)).copied().collect();
            i += group.len();
            let get = |w: &str| group.iter().find(|o| o.what == w).map_or(0, |o| o.count);
            let figures = if r.kind == "line" {
                format!("in {}, out {}", get("in"), get("out"))
            } else {
                format!("entered {}, left {}", get("entered"), get("left"))
            };
            let _ = writeln!(out, "{}: {} `{}` ({}) class {}: {figures}", r.node, r.kind, r.name, r.stream, r.class);
        }
        out
    }

    /// The human summary table.
    pub fn render(&self) -> String {
        let ms = |n: &NodeReport, v: f64| if n.role == "source" { "-".to_string() } else { format!("{v:.2}") };
        let mut s = String::new();
        let w = self.nodes.iter().map(|n| n.name.len()).max().unwrap_or(4).max(4);
        let _ = writeln!(
            s,
            "{:<w$}  {:<14} {:>7} {:>7} {:>7} {:>6} {:>8} {:>5}  {:>8} {:>8} {:>8}",
            "node", "kind", "in", "out", "dropped", "failed", "fps", "busy", "p50 ms", "p95 ms", "p99 ms"
        );
        for n in &self.nodes {
            let l = n.end_to_end_ms.unwrap_or(n.latency_ms);
            let _ = writeln!(
                s,
                "{:<w$}  {:<14} {:>7} {:>7} {:>7} {:>6} {:>8.1} {:>4.0}%  {:>8} {:>8} {:>8}{}",
                n.name,
                n.kind,
                if n.role == "source" { "-".to_string() } else { n.frames_in.to_string() },
                n.frames_out,
                n.dropped,
                n.failed,
                n.fps,
                n.busy * 100.0,
                ms(n, l.p50),
                ms(n, l.p95),
                ms(n, l.p99),
                if n.end_to_end_ms.is_some() { "  (end to end)" } else { "" }
            );
        }
        if let Some(src) = self.nodes.iter().find(|n| n.role == "source" && n.busy >= 0.5) {
            let _ = writeln!(
                s,
                "busy: a source's counts reading its input, waiting for the network or the real-time pace included \
                 ({} {:.0}%); other nodes', time working on frames",
                src.name,
                src.busy * 100.0
            );
        }
        for n in self.nodes.iter().filter(|n| n.filtered > 0) {
            let _ = writeln!(s, "filtered: {} took {} frame(s) out on purpose (counted apart from failures)", n.name, n.filtered);
        }
        for n in self.nodes.iter().filter(|n| !n.batch_sizes.is_empty()) {
            let sizes: Vec<String> = n.batch_sizes.iter().map(|(size, count)| format!("{count}×{size}")).collect();
            let frames: u64 = n.batch_sizes.iter().map(|(size, count)| *size as u64 * count).sum();
            let batches: u64 = n.batch_sizes.iter().map(|(_, c)| c).sum();
            let _ = writeln!(s, "{}: batches {} (mean {:.2} frames)", n.name, sizes.join(", "), frames as f64 / batches.max(1) as f64);
        }
        for n in &self.nodes {
            if let Some(r) = &n.redaction {
                let _ = writeln!(
                    s,
                    "{}: redacted {} box(es); {} frame(s) whole and {} withheld (a detector failed on them or skipped them)",
                    n.name, r.boxes, r.whole_frames, r.withheld_frames
                );
            }
        }
        for n in &self.nodes {
            for w in n.work.iter().filter(|w| w.predicted + w.carried + w.reread > 0) {
                let _ = writeln!(
                    s,
                    "{}: stream `{}`: model ran on {} of {} frames ({} predicted by the tracker, {} carried forward)",
                    n.name,
                    w.stream,
                    w.inferred,
                    w.inferred + w.predicted + w.carried,
                    w.predicted,
                    w.carried
                );
                if w.carried_moved > 0 {
                    let _ = writeln!(s, "{}: stream `{}`: {} carried frames while the boxes moved", n.name, w.stream, w.carried_moved);
                }
                if w.reread > 0 {
                    let _ =
                        writeln!(s, "{}: stream `{}`: {} regions read again once wholly inside the picture", n.name, w.stream, w.reread);
                }
            }
        }
        for n in self.nodes.iter().filter(|n| n.role == "sink" && (n.stream_lost > 0 || n.undelivered > 0)) {
            let _ = writeln!(
                s,
                "{}: output lost {}×, reconnected {}×; {} frame(s) not delivered while it was unreachable",
                n.name, n.stream_lost, n.reconnects, n.undelivered
            );
        }
        for n in &self.nodes {
            let Some(d) = &n.delivery else { continue };
            let _ = write!(
                s,
                "{}: delivered {}, retried {}, spooled {}, spool {} bytes, errors {}; delivery latency p50 {:.1} ms, p99 {:.1} ms",
                n.name, d.delivered, d.retried, d.spooled, d.spool_bytes, d.errors, d.latency_p50_ms, d.latency_p99_ms
            );
            if d.dropped > 0 {
                let _ = write!(s, "; {} dropped (spool full)", d.dropped);
            }
            if d.left_in_spool > 0 {
                let _ = write!(s, "; {} undelivered, kept in the spool for the next run", d.left_in_spool);
            }
            s.push('\n');
        }
        for n in self.nodes.iter().filter(|n| n.role != "sink" && n.stream_lost > 0) {
            let _ = writeln!(
                s,
                "{}: stream lost {}×, reconnected {}×{}",
                n.name,
                n.stream_lost,
                n.reconnects,
                if n.reconnects > 0 { format!(" (longest gap {:.1} s)", n.longest_gap_ms as f64 / 1e3) } else { String::new() }
            );
        }
        for n in self.nodes.iter().filter(|n| n.loops > 0) {
            let _ = writeln!(s, "{}: looped {}×", n.name, n.loops);
        }
        for (node, decode) in &self.decoders {
            let _ = writeln!(s, "{node}: decode {decode}");
        }
        for n in self.nodes.iter().filter(|n| n.role == "source" && n.decode_errors > 0) {
            let _ = writeln!(s, "{}: {} frame(s) skipped for corrupt data in {} stretch(es)", n.name, n.decode_errors, n.corrupt_bursts);
        }
        for (node, provider) in &self.providers {
            let _ = writeln!(s, "{node}: execution provider {provider}");
        }
        if let Some(ms) = self.first_result_ms {
            let _ = writeln!(s, "time to first result: {ms:.0} ms after the pipeline started");
        }
        if let Some(st) = &self.streams {
            s.push_str(&st.lines());
        }
        if let Some(i) = &self.inputs {
            let _ = writeln!(s, "{}", i.line());
            for f in &i.failed {
                let _ = writeln!(s, "  failed: {}: {}", crate::config::tidy_path(std::path::Path::new(&f.path)).display(), f.reason);
            }
        }
        for (node, n) in &self.tracks_ended {
            let _ = writeln!(s, "{node}: {n} track(s) ended");
        }
        s.push_str(&self.counts_lines());
        let _ = writeln!(s, "{}", self.accounting_line());
        let _ = write!(s, "wall {:.2} s, {:.2} frames/s through the pipeline", self.wall_seconds, self.fps());
        s
    }
}

/// Failed streams named one by one in the summary (the most recent); older ones are only counted.
pub const LISTED_FAILED_STREAMS: usize = 64;

/// A stream that failed, and why.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct FailedStream {
    pub id: String,
    /// Its template.
    pub source: String,
    /// Why (credentials masked).
    pub error: String,
}

/// The added streams of a run, in the report.
#[derive(Debug, Clone, Default, Serialize)]
pub struct StreamsReport {
    /// Streams added over the run (removed ones included).
    pub added: u64,
    /// Of them, failed (their source could not start, gave up, or the camera refused the credentials).
    pub failed: u64,
    /// Of them, no result ever reached a sink.
    pub without_result: u64,
    /// The failed streams, the most recent [`LISTED_FAILED_STREAMS`], in the order they were recorded.
    pub failed_streams: Vec<FailedStream>,
    /// From each stream's `POST` to its first result, over the streams that had one.
    pub first_result_ms: Option<Latency>,
}

impl StreamsReport {
    /// The summary's lines (none when no stream was added).
    pub fn lines(&self) -> String {
        use std::fmt::Write as _;
        let mut s = String::new();
        if self.added == 0 {
            return s;
        }
        let _ = write!(s, "added streams: {}, failed {}, without a result {}", self.added, self.failed, self.without_result);
        if let Some(l) = &self.first_result_ms {
            let _ = write!(
                s,
                "; first result after adding: p50 {:.0} ms, p95 {:.0} ms, max {:.0} ms ({} stream(s))",
                l.p50, l.p95, l.max, l.count
            );
        }
        s.push('\n');
        let unlisted = self.failed.saturating_sub(self.failed_streams.len() as u64);
        if unlisted > 0 {
            let _ = writeln!(s, "  failed: {unlisted} earlier stream(s) not listed");
        }
        for f in &self.failed_streams {
            let _ = writeln!(s, "  failed: `{}` ({}): {}", f.id, f.source, f.error);
        }
        s
    }
}
