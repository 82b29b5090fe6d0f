//! `infer-stream bench`: run a pipeline and report what users choose a tool
//! by — throughput, per-stage busy time, latency, queues, CPU, memory, GPU —
//! and name the bottleneck. `--isolate` also measures each stage alone on the
//! same input and compares the pipeline with the bound they imply.

pub mod plot;
pub mod system;

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::config::{Diagnostics, PipelineConfig, Role};
use crate::frame::{Accounting, Counts};
use crate::graph::Graph;
use crate::runtime::report::{Latency, NodeReport};
use crate::runtime::trace::Tracer;
use crate::runtime::{NodeStats, Pipeline, Shutdown, SourceCtx};
use crate::stages::{self, Body, BuildOptions};

/// Version of the JSON report (`docs/bench-schema.json`).
pub const SCHEMA: &str = "infer-stream.bench/1";

/// What to measure.
#[derive(Clone, Default)]
pub struct BenchOptions {
    pub build: BuildOptions,
    pub isolate: bool,
    /// Frames (per source) excluded from the throughput figure.
    pub warmup: u64,
    /// Stop after this long.
    pub duration: Option<Duration>,
    pub tracer: Option<Arc<Tracer>>,
}

/// One stage measured alone.
#[derive(Debug, Clone, Serialize)]
pub struct StageAlone {
    pub node: String,
    pub kind: String,
    pub frames: u64,
    pub seconds: f64,
    pub fps: f64,
}

/// Each stage alone, and the rate they imply run one after another (the
/// "isolated stage rate"; `bound` in the JSON). An estimate, not a limit: the
/// pipeline overlaps stages on the cores and can beat it.
#[derive(Debug, Clone, Serialize)]
pub struct Isolated {
    pub decode: StageAlone,
    pub stages: Vec<StageAlone>,
    /// `shared-cpu`: 1 / (1/decode + 1/preprocess + 1/infer), every stage on the same cores;
    /// `separate-engines`: min(decode, preprocess, infer), inference on its own device.
    pub bound: &'static str,
    pub bound_fps: f64,
    /// Pipeline fps / isolated stage rate (above 1 when the stages overlap).
    pub efficiency: f64,
}

/// A sample of the run, every 100 ms.
#[derive(Debug, Clone, Serialize)]
pub struct Sample {
    /// Seconds since the run started.
    pub t: f64,
    /// Frames settled (processed + dropped + failed) so far.
    pub frames: u64,
    /// Frames per second over the last second.
    pub fps: f64,
    /// Frames waiting in each node's queue, in node order (sources: 0).
    pub queue_depth: Vec<usize>,
    /// Process CPU over the last interval, % of one core.
    pub cpu_percent: f64,
}

/// The slowest stage, and what to try.
#[derive(Debug, Clone, Serialize)]
pub struct Bottleneck {
    pub node: String,
    pub busy: f64,
    pub hint: String,
}

/// The whole bench report (`--json` prints this).
#[derive(Debug, Clone, Serialize)]
pub struct BenchReport {
    pub schema: &'static str,
    pub pipeline: String,
    pub wall_seconds: f64,
    pub warmup_frames: u64,
    /// Processed frames per second, warm-up excluded.
    pub fps: f64,
    /// Source to sink.
    pub latency_ms: Latency,
    pub frames: Counts,
    pub nodes: Vec<NodeReport>,
    pub cpu: system::CpuReport,
    pub peak_rss_mib: f64,
    pub gpu: system::GpuReport,
    pub bottleneck: Option<Bottleneck>,
    pub providers: Vec<(String, String)>,
    pub timeline: Vec<Sample>,
    pub isolate: Option<Isolated>,
    /// Per-node time-per-frame histograms (for plots; not in the JSON).
    #[serde(skip)]
    pub histograms: plot::Histograms,
    /// The measured run's own report: how it ended decides the exit code, as for `run`.
    #[serde(skip)]
    pub run: crate::runtime::report::RunReport,
}

fn alone(node: &str, kind: &str, frames: u64, d: Duration) -> StageAlone {
    let seconds = d.as_secs_f64().max(1e-9);
    StageAlone { node: node.into(), kind: kind.into(), frames, seconds, fps: frames as f64 / seconds }
}

/// Frames per source kept in memory to time the stages alone.
const ALONE_FRAMES: usize = 300;

/// Decode alone, then each stage alone (serially, one frame at a time, on a
/// fresh decode of the same input).
pub fn measure_alone(cfg: &PipelineConfig, graph: &Graph, opts: &BuildOptions) -> Result<(StageAlone, Vec<StageAlone>), Diagnostics> {
    let sd = Shutdown::new();
    let acct = Arc::new(Accounting::default());

    // Decode alone: frames are dropped as soon as they exist.
    let (mut bodies, _) = stages::build(cfg, graph, opts)?;
    let mut decoded = 0u64;
    let mut decode_time = Duration::ZERO;
    for (i, node) in cfg.nodes.iter().enumerate() {
        if let Body::Source(src) = &mut bodies[i] {
            let st = NodeStats::new(&node.name, node.kind.name(), Role::Source);
            let mut emit = |f: crate::frame::Frame| {
                f.ticket.sunk();
                decoded += 1;
                true
            };
            let mut ctx = SourceCtx::new(Arc::from(node.name.as_str()), i as u32, &sd, &acct, &st, &mut emit);
            let t0 = Instant::now();
            let _ = src.run(&mut ctx);
            decode_time += t0.elapsed();
        }
    }
    let decode = alone("decode", "ffmpeg", decoded, decode_time);
    // Only one set of stages alive at a time: idle sessions still hold threads and memory.
    drop(bodies);

    // Each stage alone.
    let (mut bodies, _) = stages::build(cfg, graph, opts)?;
    let mut times = vec![Duration::ZERO; cfg.nodes.len()];
    let mut counts = vec![0u64; cfg.nodes.len()];
    let stage_nodes: Vec<usize> = graph.order.iter().copied().filter(|&i| cfg.nodes[i].role == Role::Stage).collect();
    let (sources, rest): (Vec<_>, Vec<_>) = bodies.iter_mut().enumerate().partition(|(_, b)| matches!(b, Body::Source(_)));
    let mut in_order: Vec<(usize, &mut Box<dyn stages::Stage>)> =
        rest.into_iter().filter_map(|(i, b)| if let Body::Stage(s) = b { Some((i, s)) } else { None }).collect();
    in_order.sort_by_key(|(i, _)| stage_nodes.iter().position(|x| x == i));
    // Decode first (up to ALONE_FRAMES per source, kept in memory), so that no
    // decoder thread runs while a stage is being timed.
    let mut frames = Vec::new();
    for (i, b) in sources {
        let Body::Source(src) = b else { continue };
        let st = NodeStats::new(&cfg.nodes[i].name, "", Role::Source);
        let mut kept = 0;
        let mut emit = |f: crate::frame::Frame| {
            frames.push(f);
            kept += 1;
            kept < ALONE_FRAMES
        };
        let mut ctx = SourceCtx::new(Arc::from(cfg.nodes[i].name.as_str()), i as u32, &sd, &acct, &st, &mut emit);
        let _ = src.run(&mut ctx);
    }
    for mut f in frames {
        for (j, stage) in in_order.iter_mut() {
            let t0 = Instant::now();
            let ok = stage.process(&mut f).is_ok();
            times[*j] += t0.elapsed();
            counts[*j] += ok as u64;
        }
        f.ticket.sunk();
    }
    let stages = stage_nodes.iter().map(|&i| alone(&cfg.nodes[i].name, cfg.nodes[i].kind.name(), counts[i], times[i])).collect();
    Ok((decode, stages))
}

/// The bound the issue of shared cores implies: every frame costs the sum of its stages.
pub fn bound(decode: &StageAlone, stages: &[StageAlone]) -> f64 {
    let inv = |k: &str| stages.iter().filter(|s| s.kind == k).map(|s| 1.0 / s.fps).sum::<f64>();
    1.0 / (1.0 / decode.fps + inv("preprocess") + inv("infer"))
}

/// The bound when inference runs on its own engine: the slowest of decode, preprocess and inference.
pub fn bound_separate(decode: &StageAlone, stages: &[StageAlone]) -> f64 {
    stages.iter().filter(|s| s.kind == "preprocess" || s.kind == "infer").map(|s| s.fps).fold(decode.fps, f64::min)
}

fn hint(n: &NodeReport) -> String {
    let busy = n.busy * 100.0;
    let what = match n.kind.as_str() {
        "infer" => "try a smaller input tensor, more intra_threads, or a faster execution provider",
        "preprocess" => "try interpolation = \"fast_bilinear\" or a smaller tensor",
        "file" => "decode-bound: try decoder_threads = 0 (all cores) or a lighter codec",
        "text_detection" => "raise threshold or box_threshold to cut candidate regions",
        "python" => {
            "its Python code runs on one core (the GIL): do the work in numpy, or split the streams over more processes (docs/python.md)"
        }
        _ => "this sink cannot keep up: compare with --null-sinks",
    };
    format!("{} is {busy:.0}% busy: {what}", n.name)
}

/// Run the pipeline (after the isolated measurements when asked) and report.
pub fn bench(cfg: &PipelineConfig, graph: &Graph, opts: &BenchOptions) -> Result<BenchReport, Diagnostics> {
    let alone = if opts.isolate { Some(measure_alone(cfg, graph, &opts.build)?) } else { None };

    let (bodies, _) = stages::build(cfg, graph, &opts.build)?;
    let mut pipeline = Pipeline::new(cfg, graph.clone(), bodies);
    if let Some(t) = &opts.tracer {
        pipeline = pipeline.with_tracer(t.clone());
    }
    let sd = Shutdown::new();
    if let Some(d) = opts.duration {
        let sd = sd.clone();
        std::thread::spawn(move || {
            std::thread::sleep(d);
            sd.stop();
        });
    }
    let sources = cfg.nodes.iter().filter(|n| n.role == Role::Source).count() as u64;
    let warm_frames = opts.warmup * sources;
    let gpu = system::GpuSampler::start();
    let acct = Arc::new(Accounting::default());
    let acct2 = acct.clone();
    let mut timeline: Vec<Sample> = Vec::new();
    let mut cpu = system::CpuClock::start();
    let mut warm_mark: Option<(f64, u64)> = (warm_frames == 0).then_some((0.0, 0));
    let mut tick = |stats: &[Arc<NodeStats>], t: Duration| {
        let t = t.as_secs_f64();
        let frames = acct2.snapshot().processed;
        // Throughput over the last second (frames take longer than a tick).
        let (pt, pf) = timeline.iter().rev().find(|s| s.t <= t - 1.0).or(timeline.first()).map_or((0.0, 0), |s| (s.t, s.frames));
        if warm_mark.is_none() && frames >= warm_frames {
            warm_mark = Some((t, frames));
        }
        timeline.push(Sample {
            t,
            frames,
            fps: (frames - pf) as f64 / (t - pt).max(1e-6),
            queue_depth: stats.iter().map(|s| s.depth() as usize).collect(),
            cpu_percent: cpu.percent_since_last(),
        });
    };
    let stats: Vec<Arc<NodeStats>> = pipeline.stats().to_vec();
    let run = pipeline.run(sd, acct, Some(&mut tick));
    let histograms = stats
        .iter()
        .filter(|s| s.role != Role::Source)
        .map(|s| {
            let h = s.service.lock().unwrap_or_else(|e| e.into_inner());
            let buckets = if h.is_empty() {
                Vec::new()
            } else {
                h.iter_log(10, 1.25).map(|v| (v.value_iterated_to() as f64 / 1000.0, v.count_since_last_iteration())).collect()
            };
            (s.name.clone(), buckets)
        })
        .collect();
    let gpu = gpu.finish();
    let processed = run.frames.processed;
    let fps = match warm_mark {
        Some((t0, f0)) if run.wall_seconds > t0 && processed > f0 => (processed - f0) as f64 / (run.wall_seconds - t0),
        _ => run.fps(),
    };
    let e2e = run.nodes.iter().filter_map(|n| n.end_to_end_ms).max_by(|a, b| a.p99.total_cmp(&b.p99)).unwrap_or_default();
    let bottleneck = run.nodes.iter().max_by(|a, b| a.busy.total_cmp(&b.busy)).map(|n| Bottleneck {
        node: n.name.clone(),
        busy: n.busy,
        hint: if n.busy < 0.5 {
            format!("no node is saturated (busiest: {} at {:.0}%): the pipeline waits on its input", n.name, n.busy * 100.0)
        } else {
            hint(n)
        },
    });
    // Inference on a GPU runs beside the CPU stages: then the slowest stage bounds the pipeline.
    let separate = run.providers.iter().any(|(_, p)| !p.starts_with("cpu"));
    let isolate = alone.map(|(decode, stages)| {
        let (kind, bound_fps) =
            if separate { ("separate-engines", bound_separate(&decode, &stages)) } else { ("shared-cpu", bound(&decode, &stages)) };
        Isolated { decode, stages, bound: kind, bound_fps, efficiency: run.fps() / bound_fps }
    });
    Ok(BenchReport {
        schema: SCHEMA,
        pipeline: run.pipeline.clone(),
        wall_seconds: run.wall_seconds,
        warmup_frames: warm_frames,
        fps,
        latency_ms: e2e,
        frames: run.frames,
        cpu: cpu.report(run.wall_seconds),
        peak_rss_mib: system::peak_rss_mib(),
        gpu,
        bottleneck,
        providers: run.providers.clone(),
        nodes: run.nodes.clone(),
        timeline,
        isolate,
        histograms,
        run,
    })
}

impl BenchReport {
    /// The text report.
    pub fn render(&self) -> String {
        let mut s = String::new();
        s.push_str(&format!("pipeline `{}`: {:.2} frames/s end to end", self.pipeline, self.fps));
        if self.warmup_frames > 0 {
            s.push_str(&format!(" (after {} warm-up frames)", self.warmup_frames));
        }
        s.push_str(&format!(", {} frames in {:.2} s\n", self.frames.processed, self.wall_seconds));
        let l = &self.latency_ms;
        s.push_str(&format!("latency source→sink: p50 {:.1} ms, p95 {:.1} ms, p99 {:.1} ms, max {:.1} ms\n", l.p50, l.p95, l.p99, l.max));
        s.push_str(&format!(
            "{:<12} {:<14} {:>8} {:>6} {:>8} {:>8} {:>8} {:>8} {:>9}\n",
            "node", "kind", "fps", "busy", "p50 ms", "p95 ms", "p99 ms", "dropped", "max queue"
        ));
        for n in &self.nodes {
            let l = n.latency_ms;
            let ms = |v: f64| if n.role == "source" { "-".to_string() } else { format!("{v:.2}") };
            let queue = if n.role == "source" { "-".to_string() } else { format!("{}/{}", n.queue_max_depth, n.queue_capacity) };
            s.push_str(&format!(
                "{:<12} {:<14} {:>8.1} {:>5.0}% {:>8} {:>8} {:>8} {:>8} {:>9}\n",
                n.name,
                n.kind,
                n.fps,
                n.busy * 100.0,
                ms(l.p50),
                ms(l.p95),
                ms(l.p99),
                n.dropped,
                queue
            ));
        }
        let c = &self.cpu;
        s.push_str(&format!(
            "cpu: {:.0}% of one core on average ({} cores), peak RSS {:.1} MiB\n",
            c.mean_percent, c.cores, self.peak_rss_mib
        ));
        s.push_str(&format!("gpu: {}\n", self.gpu.summary()));
        for (node, p) in &self.providers {
            s.push_str(&format!("{node}: execution provider {p}\n"));
        }
        let f = &self.frames;
        s.push_str(&format!("frames: decoded {} = processed {} + dropped {} + failed {}\n", f.decoded, f.processed, f.dropped, f.failed));
        if let Some(b) = &self.bottleneck {
            s.push_str(&format!("bottleneck: {}\n", b.hint));
        }
        if let Some(i) = &self.isolate {
            s.push_str("measured alone on the same input:\n");
            for a in std::iter::once(&i.decode).chain(&i.stages) {
                s.push_str(&format!("  {:<12} {:<14} {:>6} frames {:>8.3} s {:>9.2} fps\n", a.node, a.kind, a.frames, a.seconds, a.fps));
            }
            if i.bound == "shared-cpu" {
                s.push_str(&format!(
                    "isolated stage rate 1/(1/decode + 1/preprocess + 1/infer) = {:.2} fps (each stage alone, one after another: an estimate, not a limit)\n",
                    i.bound_fps
                ));
            } else {
                s.push_str(&format!(
                    "isolated stage rate min(decode, preprocess, infer) = {:.2} fps (the slowest stage alone; inference on its own engine)\n",
                    i.bound_fps
                ));
            }
            s.push_str(&format!(
                "efficiency: pipeline {:.2} fps / isolated stage rate = {:.3}{}\n",
                self.frames.processed as f64 / self.wall_seconds,
                i.efficiency,
                if i.efficiency > 1.0 { " (above 1: the stages overlap on the cores)" } else { "" }
            ));
        }
        s
    }
}
