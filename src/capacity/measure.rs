//! One measured run: warm-up left out, then a window (a set time, or until
//! the sources end) in which throughput, drops, latency, CPU, memory and GPU
//! use are taken.

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::Serialize;

use super::Error;
use crate::bench::system;
use crate::config::{PipelineConfig, Role};
use crate::frame::{Accounting, Counts};
use crate::graph::Graph;
use crate::runtime::report::{Latency, RunReport};
use crate::runtime::{NodeStats, Pipeline, Shutdown};
use crate::stages::{self, BuildOptions};

/// What is left out before measuring.
#[derive(Debug, Clone, Copy)]
pub enum Warmup {
    /// Frames per source.
    Frames(u64),
    Seconds(f64),
}

/// How long one run is measured.
#[derive(Debug, Clone, Copy)]
pub struct Plan {
    pub warmup: Warmup,
    /// Measure this long after the warm-up, then stop; `None`: until the sources end.
    pub window: Option<Duration>,
}

/// The figures of one measured window.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Measured {
    /// Length of the measured window.
    pub seconds: f64,
    /// Frames decoded, processed, dropped and failed in the window.
    pub frames: Counts,
    /// Dropped / decoded in the window.
    pub drop_fraction: f64,
    /// Processed frames per second, all streams together.
    pub fps: f64,
    /// Frames delivered by the sinks per second, the slowest stream's.
    pub stream_fps_min: f64,
    /// Frames per second each source delivered (mean over the streams).
    pub source_fps: f64,
    /// Sources (streams) in the run.
    pub sources: usize,
    /// Source to sink, in the window.
    pub latency_ms: Latency,
    /// Process CPU in the window, % of one core.
    pub cpu_percent: f64,
    /// Largest resident memory seen during the run, MiB.
    pub rss_mib: f64,
    /// Mean GPU utilisation, when there is a GPU.
    pub gpu_percent: Option<f64>,
    /// The busiest node and its share of the time.
    pub bottleneck: Option<String>,
    pub bottleneck_busy: f64,
    /// The first source, as the run described it (`file.mp4 (h264 1280x720 @ 10.00 fps)`).
    #[serde(skip)]
    pub input: String,
}

/// Resident memory of this process now (VmRSS), MiB.
pub fn rss_mib() -> f64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines().find_map(|l| l.strip_prefix("VmRSS:").and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok()))
        })
        .map_or(0.0, |kb| kb / 1024.0)
}

/// A mark taken at the start and the end of the window.
struct Mark {
    at: Instant,
    counts: Counts,
    cpu: f64,
    /// Frames written per stream by the first sink.
    streams: Vec<(Arc<str>, u64)>,
}

fn mark(acct: &Accounting, sink: Option<&Arc<NodeStats>>) -> Mark {
    Mark {
        at: Instant::now(),
        counts: acct.snapshot(),
        cpu: system::cpu_seconds().unwrap_or(0.0),
        streams: sink.map(|s| s.stream_counts().into_iter().map(|(n, c)| (n, c[1])).collect()).unwrap_or_default(),
    }
}

/// Build and run the pipeline once, measuring the window `plan` describes.
/// Returns the figures and the run's own report.
pub fn measure(cfg: &PipelineConfig, graph: &Graph, opts: &BuildOptions, plan: &Plan) -> Result<(Measured, RunReport), Error> {
    let (bodies, _) = stages::build(cfg, graph, opts)?;
    let pipeline = Pipeline::new(cfg, graph.clone(), bodies);
    let input = pipeline.nodes.iter().find(|n| n.role == Role::Source).map(|n| n.describe.clone()).unwrap_or_default();
    let sources = cfg.nodes.iter().filter(|n| n.role == Role::Source).count().max(1);
    let stats: Vec<Arc<NodeStats>> = pipeline.stats().to_vec();
    let sinks: Vec<Arc<NodeStats>> = stats.iter().filter(|s| s.role == Role::Sink).cloned().collect();
    let sd = Shutdown::new();
    let acct = Arc::new(Accounting::default());
    let gpu = system::GpuSampler::start();
    let (mut start, mut end): (Option<Mark>, Option<Mark>) = (None, None);
    let mut peak_rss = 0f64;
    let mut e2e: Option<hdrhistogram::Histogram<u64>> = None;
    let stopper = sd.clone();
    let acct2 = acct.clone();
    let mut tick = |_: &[Arc<NodeStats>], t: Duration| {
        peak_rss = peak_rss.max(rss_mib());
        if start.is_none() {
            let warm = match plan.warmup {
                Warmup::Frames(n) => acct2.snapshot().processed >= n * sources as u64,
                Warmup::Seconds(s) => t.as_secs_f64() >= s,
            };
            if warm {
                // Latency from here on only.
                for s in &sinks {
                    s.end_to_end.lock().unwrap_or_else(|e| e.into_inner()).reset();
                }
                start = Some(mark(&acct2, sinks.first()));
            }
        } else if end.is_none()
            && let (Some(w), Some(s)) = (plan.window, &start)
            && s.at.elapsed() >= w
        {
            end = Some(mark(&acct2, sinks.first()));
            e2e = merged(&sinks);
            stopper.stop();
        }
    };
    let run = pipeline.run(sd, acct.clone(), Some(&mut tick));
    let gpu = gpu.finish();
    if let Some(f) = &run.fatal {
        return Err(Error::Run(f.clone()));
    }
    if let Some(e) = run.source_errors.first() {
        return Err(Error::Run(e.clone()));
    }
    // A run shorter than its warm-up is measured whole.
    let start = start.unwrap_or(Mark {
        at: Instant::now() - Duration::from_secs_f64(run.wall_seconds),
        counts: Counts::default(),
        cpu: 0.0,
        streams: Vec::new(),
    });
    let end = end.unwrap_or_else(|| mark(&acct, sinks.first()));
    let e2e = e2e.or_else(|| merged(&sinks));
    let seconds = (end.at - start.at).as_secs_f64().max(1e-6);
    let d = |f: fn(&Counts) -> u64| f(&end.counts).saturating_sub(f(&start.counts));
    let frames = Counts {
        decoded: d(|c| c.decoded),
        processed: d(|c| c.processed),
        dropped: d(|c| c.dropped),
        failed: d(|c| c.failed),
        filtered: d(|c| c.filtered),
        lost: 0,
    };
    let per_stream: Vec<f64> = end
        .streams
        .iter()
        .map(|(n, out)| {
            let before = start.streams.iter().find(|(m, _)| m == n).map_or(0, |x| x.1);
            out.saturating_sub(before) as f64 / seconds
        })
        .collect();
    let busiest = run.nodes.iter().filter(|n| n.role != "source").max_by(|a, b| a.busy.total_cmp(&b.busy));
    let m = Measured {
        seconds,
        drop_fraction: if frames.decoded == 0 { 0.0 } else { frames.dropped as f64 / frames.decoded as f64 },
        fps: frames.processed as f64 / seconds,
        stream_fps_min: per_stream.iter().copied().reduce(f64::min).unwrap_or(0.0),
        source_fps: frames.decoded as f64 / seconds / sources as f64,
        sources,
        frames,
        latency_ms: e2e.as_ref().map(Latency::of).unwrap_or_default(),
        cpu_percent: (end.cpu - start.cpu).max(0.0) / seconds * 100.0,
        rss_mib: peak_rss.max(rss_mib()),
        gpu_percent: gpu.mean_utilization_percent,
        bottleneck: busiest.map(|n| n.name.clone()),
        bottleneck_busy: busiest.map_or(0.0, |n| n.busy),
        input,
    };
    Ok((m, run))
}

/// The sinks' source-to-sink histograms together.
fn merged(sinks: &[Arc<NodeStats>]) -> Option<hdrhistogram::Histogram<u64>> {
    let mut all: Option<hdrhistogram::Histogram<u64>> = None;
    for s in sinks {
        let h = s.end_to_end.lock().unwrap_or_else(|e| e.into_inner()).clone();
        match &mut all {
            Some(a) => {
                let _ = a.add(&h);
            }
            None => all = Some(h),
        }
    }
    all
}
