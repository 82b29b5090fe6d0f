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
    fn of(h: &hdrhistogram::Histogram<u64>) -> Self {
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
    /// Message-bus sinks (Kafka, MQTT): delivered, retried, spooled, spool bytes, latency, errors.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub delivery: Option<crate::bus::DeliveryReport>,
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
                    delivery: s.delivery.get().map(|d| d.report()),
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
        if c.balanced() {
            s.push_str("  (all accounted for)");
        } else {
            let _ = write!(s, "  MISMATCH: {} frame(s) unaccounted for", c.decoded as i64 - (c.processed + c.dropped + c.failed) as i64);
        }
        s
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
        for n in self.nodes.iter().filter(|n| !n.batch_sizes.is_empty()) {
            let sizes: Vec<String> = n.batch_sizes.iter().map(|(size, count)| format!("{count}×{size}")).collect();
            let frames: u64 = n.batch_sizes.iter().map(|(size, count)| *size as u64 * count).sum();
            let batches: u64 = n.batch_sizes.iter().map(|(_, c)| c).sum();
            let _ = writeln!(s, "{}: batches {} (mean {:.2} frames)", n.name, sizes.join(", "), frames as f64 / batches.max(1) as f64);
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
        if let Some(i) = &self.inputs {
            let _ = writeln!(s, "{}", i.line());
            for f in &i.failed {
                let _ = writeln!(s, "  failed: {}: {}", crate::config::tidy_path(std::path::Path::new(&f.path)).display(), f.reason);
            }
        }
        let _ = writeln!(s, "{}", self.accounting_line());
        let _ = write!(s, "wall {:.2} s, {:.2} frames/s through the pipeline", self.wall_seconds, self.fps());
        s
    }
}
