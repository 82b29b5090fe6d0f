//! The command line as clap reads it (`Cli`, its subcommands and their flags),
//! the value parsers for its numbers, and the argument checks clap cannot make
//! (files written at the end, `--ort-library`, bench's frame counts).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use clap::{Parser, Subcommand, ValueEnum};

use infer_stream::config;

const EXAMPLES: &str = "\
Examples:
  infer-stream run pipelines/text-detection.toml
  infer-stream run pipelines/text-detection.toml --ort-library /opt/onnxruntime/lib/libonnxruntime.so
  infer-stream run pipelines/text-detection.toml --metrics-addr 127.0.0.1:9464
  infer-stream serve pipelines/serve.toml --listen 127.0.0.1:8080
  infer-stream validate pipelines/*.toml
  infer-stream graph pipelines/text-detection.toml --format mermaid
  infer-stream bench pipelines/text-detection.toml --isolate
  infer-stream bench pipelines/capacity.toml --capacity --latency-budget 1000
  infer-stream bench pipelines/text-detection-bench.toml --sweep det.intra_threads=1,2 --frames 60
  infer-stream compare pipelines/text-detection-bench.toml pipelines/text-detection-small.toml --min-agreement 0.9
  infer-stream inspect models/ppocr/ch_PP-OCRv4_det_infer.onnx
  infer-stream doctor

Exit codes: 0 success, 1 runtime failure, 2 usage or pipeline-file error,
3 some inputs of a batch failed (the others were processed),
4 stopped at once by a second signal, without draining,
5 compare: B regressed past a gate,
129/130/143 stopped by SIGHUP/SIGINT/SIGTERM after draining (results flushed).";

#[derive(Parser)]
#[command(name = "infer-stream", version, about = "Real-time video inference pipelines from one TOML file", after_help = EXAMPLES)]
pub(super) struct Cli {
    /// More logging (-v debug, -vv trace).
    #[arg(short, long, action = clap::ArgAction::Count, global = true)]
    pub(super) verbose: u8,
    /// Only errors (no progress, no summary).
    #[arg(short, long, global = true)]
    pub(super) quiet: bool,
    #[command(subcommand)]
    pub(super) cmd: Cmd,
}

#[derive(Clone, Copy, ValueEnum)]
pub(super) enum Progress {
    /// A bar when stderr is a terminal.
    Auto,
    Always,
    Never,
}

#[derive(Clone, Copy, ValueEnum)]
pub(super) enum GraphFormat {
    Dot,
    Mermaid,
}

#[derive(Subcommand)]
pub(super) enum Cmd {
    /// Run a pipeline until its inputs end (or Ctrl-C: drain, flush, exit).
    Run {
        pipeline: PathBuf,
        /// ONNX Runtime library (overrides [pipeline] ort_library and ORT_DYLIB_PATH).
        #[arg(long, value_name = "PATH")]
        ort_library: Option<PathBuf>,
        #[arg(long, value_enum, default_value = "auto")]
        progress: Progress,
        /// Also write the end-of-run report as JSON.
        #[arg(long, value_name = "FILE")]
        report: Option<PathBuf>,
        /// Write a Chrome trace (one span per frame per node, queue waits): open in Perfetto or chrome://tracing.
        #[arg(long, value_name = "FILE")]
        trace: Option<PathBuf>,
        /// Stop each source after N frames, then drain, flush and exit as at the end of the input.
        #[arg(long, value_name = "N", conflicts_with = "duration", value_parser = clap::value_parser!(u64).range(1..))]
        frames: Option<u64>,
        /// Stop the sources after S seconds (from when the pipeline starts), then drain, flush and exit 0.
        #[arg(long, value_name = "S", value_parser = seconds)]
        duration: Option<f64>,
        /// Serve Prometheus /metrics, /healthz and /readyz while the pipeline runs: a PORT alone
        /// listens on 127.0.0.1 (this machine only); IP:PORT exactly there, e.g. 0.0.0.0:9464 for
        /// every interface (overrides [pipeline] metrics_addr).
        #[arg(long, value_name = "[IP:]PORT", value_parser = config::listen_addr)]
        metrics_addr: Option<SocketAddr>,
    },
    /// Run a pipeline as a service with an HTTP/gRPC API (streams added and removed while it
    /// runs, live results, health, metrics) until SIGTERM or Ctrl-C (drain, flush, exit).
    /// Needs a build with the `serve` feature.
    Serve {
        pipeline: PathBuf,
        /// Where the API listens: a PORT alone listens on 127.0.0.1; IP:PORT exactly there
        /// (overrides [pipeline] api.listen; default 127.0.0.1:8080).
        #[arg(long, value_name = "[IP:]PORT", value_parser = config::listen_addr)]
        listen: Option<SocketAddr>,
        #[arg(long, value_name = "PATH")]
        ort_library: Option<PathBuf>,
        /// Also write the report of the run as JSON when it stops.
        #[arg(long, value_name = "FILE")]
        report: Option<PathBuf>,
    },
    /// Check pipeline files (syntax, graph, types, files, models) without running them.
    Validate {
        #[arg(required = true)]
        pipelines: Vec<PathBuf>,
        /// Skip loading models (no ONNX Runtime needed).
        #[arg(long)]
        no_models: bool,
        #[arg(long, value_name = "PATH")]
        ort_library: Option<PathBuf>,
    },
    /// Show a model's inputs, outputs, shapes, dtypes and metadata.
    Inspect {
        model: PathBuf,
        #[arg(long)]
        json: bool,
        #[arg(long, value_name = "PATH")]
        ort_library: Option<PathBuf>,
    },
    /// Say what this machine can use: FFmpeg and its hwaccels, GStreamer, ONNX Runtime and its providers, CUDA.
    Doctor {
        #[arg(long)]
        json: bool,
        #[arg(long, value_name = "PATH")]
        ort_library: Option<PathBuf>,
        /// Also prove the GPU path on this video: NVDEC vs software decode, the
        /// kernels vs their CPU twins, stream order, a soak; with figures. Exit 1 on any failure.
        #[arg(long, value_name = "VIDEO")]
        gpu_check: Option<PathBuf>,
        /// Frames in the GPU check's soak.
        #[arg(long, default_value_t = 1000, requires = "gpu_check")]
        soak_frames: usize,
    },
    /// Print the pipeline graph.
    Graph {
        pipeline: PathBuf,
        #[arg(long, value_enum, default_value = "dot")]
        format: GraphFormat,
    },
    /// Measure a pipeline: throughput, per-stage busy time and latency, queues, CPU, memory, GPU, the bottleneck.
    Bench {
        pipeline: PathBuf,
        /// Also measure decode, preprocess and inference alone and compare the pipeline with their bound.
        #[arg(long)]
        isolate: bool,
        /// Stop each source after N frames.
        #[arg(long, value_name = "N", conflicts_with = "duration")]
        frames: Option<u64>,
        /// Stop after S seconds.
        #[arg(long, value_name = "S", value_parser = seconds)]
        duration: Option<f64>,
        /// Frames per source left out of the throughput figure.
        #[arg(long, value_name = "N", default_value_t = 0)]
        warmup: u64,
        /// Replace every sink with `null`.
        #[arg(long)]
        null_sinks: bool,
        /// Print the report as JSON (schema: docs/bench-schema.json).
        #[arg(long)]
        json: bool,
        /// Draw throughput over time and per-stage latency histograms (.svg or .png).
        #[arg(long, value_name = "FILE")]
        plot: Option<PathBuf>,
        /// Write a Chrome trace of the pipeline run (Perfetto, chrome://tracing).
        #[arg(long, value_name = "FILE")]
        trace: Option<PathBuf>,
        #[arg(long, value_name = "PATH")]
        ort_library: Option<PathBuf>,
        #[command(flatten)]
        capacity: CapacityArgs,
    },
    /// Run two versions of a pipeline on the same input in interleaved rounds: speed side by side
    /// (B/A with its spread), result agreement of B against A, and gates (exit 5 when B regresses).
    Compare {
        a: PathBuf,
        b: PathBuf,
        /// Interleaved rounds (A B, then B A, ...).
        #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u64).range(1..=1000))]
        rounds: u64,
        /// Frames per source in each run.
        #[arg(long, value_name = "N", default_value_t = 100)]
        frames: u64,
        /// Frames per source left out of each run's speed figures.
        #[arg(long, value_name = "N", default_value_t = 10)]
        warmup: u64,
        /// Fail (exit 5) when A's fps / B's fps exceeds this (e.g. 1.10: B at most 10% slower).
        #[arg(long, value_name = "RATIO", value_parser = positive)]
        max_slowdown: Option<f64>,
        /// Fail (exit 5) when any result kind agrees less than this (boxes F1, 1 - CER, labels, speech F1, track ids).
        #[arg(long, value_name = "FRACTION", value_parser = fraction)]
        min_agreement: Option<f64>,
        /// Fail (exit 5) when B finds fewer than this share of A's boxes.
        #[arg(long, value_name = "FRACTION", value_parser = fraction)]
        min_recall: Option<f64>,
        /// Fail (exit 5) when B's text has a character error rate against A's above this.
        #[arg(long, value_name = "FRACTION", value_parser = fraction)]
        max_cer: Option<f64>,
        /// Compare only node A_NODE of A with node B_NODE of B (two branches of one graph: give the file twice).
        #[arg(long, value_name = "A_NODE:B_NODE")]
        nodes: Option<String>,
        /// Compare A and B even when they read different inputs (refused otherwise, exit 2):
        /// speed only, their results cannot agree.
        #[arg(long)]
        inputs_differ: bool,
        /// Write side-by-side annotated pictures (A left, B right) of the frames that disagree most.
        #[arg(long, value_name = "DIR")]
        write_disagreements: Option<PathBuf>,
        /// How many disagreeing frames to list.
        #[arg(long, value_name = "N", default_value_t = 5)]
        worst: usize,
        /// Print the report as JSON (schema: docs/compare-schema.json).
        #[arg(long)]
        json: bool,
        #[arg(long, value_name = "PATH")]
        ort_library: Option<PathBuf>,
    },
}

/// `bench --capacity` and `bench --sweep` (docs/capacity.md).
#[derive(clap::Args)]
pub(super) struct CapacityArgs {
    /// Find how many paced streams of the pipeline's source this machine keeps in real time within --latency-budget.
    #[arg(long, conflicts_with_all = ["isolate", "frames", "duration", "sweep"])]
    pub(super) capacity: bool,
    /// --capacity: end-to-end p99 latency every count must stay under.
    #[arg(long, value_name = "MS", default_value_t = 500.0, value_parser = positive)]
    pub(super) latency_budget: f64,
    /// --capacity: share of frames that may be dropped (0: none).
    #[arg(long, value_name = "FRACTION", default_value_t = 0.0, value_parser = fraction)]
    pub(super) max_drops: f64,
    /// --capacity: measured seconds per stream count.
    #[arg(long, value_name = "S", default_value_t = 10.0, value_parser = seconds)]
    pub(super) step_seconds: f64,
    /// --capacity: seconds of each count left out before measuring.
    #[arg(long, value_name = "S", default_value_t = 3.0, value_parser = non_negative)]
    pub(super) step_warmup: f64,
    /// --capacity: the most streams tried.
    #[arg(long, value_name = "N", default_value_t = 64, value_parser = clap::value_parser!(u64).range(1..=4096))]
    pub(super) max_streams: u64,
    /// Vary a setting (NODE.KEY=V1,V2,…; repeat for the cross product), run in interleaved rounds.
    #[arg(long, value_name = "KEY=V1,V2,…", conflicts_with_all = ["isolate", "duration"])]
    pub(super) sweep: Vec<infer_stream::capacity::edit::Setting>,
    /// --sweep: interleaved rounds.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u64).range(1..=1000))]
    pub(super) rounds: u64,
}

/// `--duration`: a positive, finite number of seconds.
fn seconds(text: &str) -> Result<f64, String> {
    match text.trim().parse::<f64>() {
        Ok(s) if s.is_finite() && s > 0.0 && s <= 1e9 => Ok(s),
        Ok(_) => Err("seconds must be a positive number (at most 1e9)".into()),
        Err(e) => Err(e.to_string()),
    }
}

/// A positive, finite number (`--latency-budget`, `--max-slowdown`).
fn positive(text: &str) -> Result<f64, String> {
    match text.trim().parse::<f64>() {
        Ok(v) if v.is_finite() && v > 0.0 => Ok(v),
        Ok(_) => Err("must be a positive number".into()),
        Err(e) => Err(e.to_string()),
    }
}

/// Zero or more seconds (`--step-warmup`).
fn non_negative(text: &str) -> Result<f64, String> {
    match text.trim().parse::<f64>() {
        Ok(v) if v.is_finite() && (0.0..=1e9).contains(&v) => Ok(v),
        Ok(_) => Err("must be 0 or more (at most 1e9)".into()),
        Err(e) => Err(e.to_string()),
    }
}

/// A share from 0 to 1 (`--max-drops`, `--min-agreement`).
fn fraction(text: &str) -> Result<f64, String> {
    match text.trim().parse::<f64>() {
        Ok(v) if (0.0..=1.0).contains(&v) => Ok(v),
        Ok(_) => Err("must be between 0 and 1 (e.g. 0.9)".into()),
        Err(e) => Err(e.to_string()),
    }
}

/// Files the run writes at its end (`--report`, `--trace`, `--plot`) must be
/// writable before it starts, not found unwritable after an hour of work.
fn writable(flag: &str, path: &Path, extensions: &[&str]) -> Result<(), String> {
    let shown = format!("{flag} {}", path.display());
    if !extensions.is_empty() && !path.extension().is_some_and(|e| extensions.iter().any(|x| e.eq_ignore_ascii_case(x))) {
        return Err(format!("{shown}: the file name must end in .{}", extensions.join(" or .")));
    }
    if path.is_dir() {
        return Err(format!("{shown}: is a folder"));
    }
    let existed = path.exists();
    std::fs::OpenOptions::new().append(true).create(true).open(path).map_err(|e| format!("{shown}: {e}"))?;
    if !existed {
        let _ = std::fs::remove_file(path);
    }
    Ok(())
}

/// `--ort-library` names an existing file (whether it loads is said when it is loaded).
fn library_exists(path: Option<&Path>) -> Result<(), String> {
    match path {
        Some(p) if p.is_dir() => Err(format!("--ort-library {}: is a folder; give the path of libonnxruntime.so", p.display())),
        Some(p) if !p.exists() => Err(format!("--ort-library {}: no such file; give the path of libonnxruntime.so", p.display())),
        _ => Ok(()),
    }
}

/// Argument checks clap cannot make: output files, the library, and bench's frame counts.
pub(super) fn check_arguments(cmd: &Cmd) -> Result<(), String> {
    let library = match cmd {
        Cmd::Run { ort_library, .. }
        | Cmd::Serve { ort_library, .. }
        | Cmd::Validate { ort_library, .. }
        | Cmd::Inspect { ort_library, .. }
        | Cmd::Doctor { ort_library, .. }
        | Cmd::Bench { ort_library, .. }
        | Cmd::Compare { ort_library, .. } => ort_library.as_deref(),
        Cmd::Graph { .. } => None,
    };
    library_exists(library)?;
    match cmd {
        Cmd::Serve { report, .. } => report.as_deref().map_or(Ok(()), |p| writable("--report", p, &[])),
        Cmd::Run { report, trace, .. } => {
            report.as_deref().map_or(Ok(()), |p| writable("--report", p, &[]))?;
            trace.as_deref().map_or(Ok(()), |p| writable("--trace", p, &[]))
        }
        Cmd::Compare { frames, warmup, write_disagreements, .. } => {
            if warmup >= frames {
                return Err(format!("--warmup {warmup} leaves none of --frames {frames} to measure"));
            }
            match write_disagreements {
                Some(d) if d.exists() && !d.is_dir() => Err(format!("--write-disagreements {}: not a folder", d.display())),
                _ => Ok(()),
            }
        }
        Cmd::Bench { plot, trace, frames, warmup, .. } => {
            if let Some(f) = frames
                && warmup >= f
            {
                return Err(format!("--warmup {warmup} leaves none of --frames {f} to measure"));
            }
            plot.as_deref().map_or(Ok(()), |p| writable("--plot", p, &["svg", "png"]))?;
            trace.as_deref().map_or(Ok(()), |p| writable("--trace", p, &[]))
        }
        _ => Ok(()),
    }
}
