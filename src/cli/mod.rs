//! Command-line interface: argument parsing, logging, exit codes.

use std::io::IsTerminal;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use clap::{Parser, Subcommand, ValueEnum};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use infer_stream::bench::BenchOptions;
use infer_stream::config::{self, Diagnostics, PipelineConfig};
use infer_stream::frame::Accounting;
use infer_stream::graph::{self, Graph};
use infer_stream::metrics::{Metrics, MetricsServer};
use infer_stream::runtime::trace::Tracer;
use infer_stream::runtime::{NodeStats, Pipeline, Shutdown};
use infer_stream::stages::{self, BuildOptions};

#[cfg(feature = "serve")]
mod serve;
#[cfg(not(feature = "serve"))]
#[path = "serve_off.rs"]
mod serve;

// `println!` and friends panic when their stream is closed (`2>&1 | head`, a
// log collector gone). Here they write and ignore the error: a run whose
// reader went away still drains, writes its results and its report, and
// exits with its own code.
macro_rules! eprintln {
    ($($t:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr(), $($t)*);
    }};
}
macro_rules! println {
    ($($t:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stdout(), $($t)*);
    }};
}
macro_rules! eprint {
    ($($t:tt)*) => {{
        use std::io::Write as _;
        let _ = write!(std::io::stderr(), $($t)*);
    }};
}
macro_rules! print {
    ($($t:tt)*) => {{
        use std::io::Write as _;
        let _ = write!(std::io::stdout(), $($t)*);
    }};
}

/// Standard error for the log, write errors ignored: tracing-subscriber
/// reports a failed write with `eprintln!`, which panics on a closed stderr.
struct LogWriter;

impl std::io::Write for LogWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        // Each log line is written whole: a URL's credentials are masked here too,
        // whichever message (an FFmpeg error, a library's) quoted it.
        let text = String::from_utf8_lossy(buf);
        let _ = std::io::stderr().write_all(infer_stream::config::mask_credentials(&text).as_bytes());
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        let _ = std::io::stderr().flush();
        Ok(())
    }
}

/// When the process started (for "ready in" and time to first result).
static STARTED: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();

/// Exit codes (also in docs/cli.md).
pub mod exit {
    pub const OK: u8 = 0;
    /// A stage or source failed at run time.
    pub const RUNTIME: u8 = 1;
    /// Bad arguments or a pipeline file with errors.
    pub const CONFIG: u8 = 2;
    /// The run finished, but some inputs (files of a `dir` source) failed: each is named in the summary.
    pub const INPUTS_FAILED: u8 = 3;
    /// Stopped at once by a second signal (1 s or more after the first),
    /// without draining: frames in flight are lost, no summary or report.
    pub const ABANDONED: u8 = 4;
    /// Stopped by a signal after a clean drain: 128 + signal (129 SIGHUP, 130 SIGINT, 143 SIGTERM).
    pub const SIGNAL_BASE: u8 = 128;
    /// `compare`: B regressed past a gate (`--max-slowdown`, `--min-agreement`, ...).
    pub const REGRESSED: u8 = 5;
}

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
struct Cli {
    /// More logging (-v debug, -vv trace).
    #[arg(short, long, action = clap::ArgAction::Count, global = true)]
    verbose: u8,
    /// Only errors (no progress, no summary).
    #[arg(short, long, global = true)]
    quiet: bool,
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Clone, Copy, ValueEnum)]
enum Progress {
    /// A bar when stderr is a terminal.
    Auto,
    Always,
    Never,
}

#[derive(Clone, Copy, ValueEnum)]
enum GraphFormat {
    Dot,
    Mermaid,
}

#[derive(Subcommand)]
enum Cmd {
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
struct CapacityArgs {
    /// Find how many paced streams of the pipeline's source this machine keeps in real time within --latency-budget.
    #[arg(long, conflicts_with_all = ["isolate", "frames", "duration", "sweep"])]
    capacity: bool,
    /// --capacity: end-to-end p99 latency every count must stay under.
    #[arg(long, value_name = "MS", default_value_t = 500.0, value_parser = positive)]
    latency_budget: f64,
    /// --capacity: share of frames that may be dropped (0: none).
    #[arg(long, value_name = "FRACTION", default_value_t = 0.0, value_parser = fraction)]
    max_drops: f64,
    /// --capacity: measured seconds per stream count.
    #[arg(long, value_name = "S", default_value_t = 10.0, value_parser = seconds)]
    step_seconds: f64,
    /// --capacity: seconds of each count left out before measuring.
    #[arg(long, value_name = "S", default_value_t = 3.0, value_parser = non_negative)]
    step_warmup: f64,
    /// --capacity: the most streams tried.
    #[arg(long, value_name = "N", default_value_t = 64, value_parser = clap::value_parser!(u64).range(1..=4096))]
    max_streams: u64,
    /// Vary a setting (NODE.KEY=V1,V2,…; repeat for the cross product), run in interleaved rounds.
    #[arg(long, value_name = "KEY=V1,V2,…", conflicts_with_all = ["isolate", "duration"])]
    sweep: Vec<infer_stream::capacity::edit::Setting>,
    /// --sweep: interleaved rounds.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u64).range(1..=1000))]
    rounds: u64,
}

fn init_logging(verbose: u8, quiet: bool) {
    let level = match (quiet, verbose) {
        (true, _) => "error",
        (_, 0) => "info",
        (_, 1) => "debug",
        _ => "trace",
    };
    let default = format!("{level},ort={}", if verbose >= 2 { "debug" } else { "warn" });
    let filter = tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    // Colours only on a terminal: logs kept in files stay free of escape codes.
    tracing_subscriber::fmt()
        .with_writer(|| LogWriter)
        .with_ansi(std::io::stderr().is_terminal())
        .with_env_filter(filter)
        .with_target(false)
        .without_time()
        .init();
}

pub fn main() -> ExitCode {
    // Before any thread starts, and before ONNX Runtime is loaded.
    infer_stream::backend::ort::telemetry_off_unless_asked();
    let started = std::time::Instant::now();
    let _ = STARTED.set(started);
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        Err(e) => {
            let _ = e.print();
            return ExitCode::from(if e.use_stderr() { exit::CONFIG } else { exit::OK });
        }
    };
    init_logging(cli.verbose, cli.quiet);
    let quiet = cli.quiet;
    if let Err(e) = check_arguments(&cli.cmd) {
        eprintln!("error: {e}");
        return ExitCode::from(exit::CONFIG);
    }
    let r = match cli.cmd {
        Cmd::Run { pipeline, ort_library, progress, report, trace, frames, duration, metrics_addr } => {
            let bound = Bound { frames, duration: duration.map(Duration::from_secs_f64) };
            run(&pipeline, ort_library, progress, report.as_deref(), trace.as_deref(), bound, metrics_addr, quiet)
        }
        Cmd::Serve { pipeline, listen, ort_library, report } => serve::serve(&pipeline, listen, ort_library, report.as_deref(), quiet),
        Cmd::Validate { pipelines, no_models, ort_library } => validate(&pipelines, no_models, ort_library, quiet),
        Cmd::Graph { pipeline, format } => graph_cmd(&pipeline, format),
        Cmd::Inspect { model, json, ort_library } => inspect(&model, json, ort_library.as_deref()),
        Cmd::Doctor { json, ort_library, gpu_check, soak_frames } => {
            let d = infer_stream::doctor::probe(ort_library.as_deref());
            if json && gpu_check.is_none() {
                println!("{}", serde_json::to_string_pretty(&d).expect("doctor report serialises"));
            } else if !json {
                print!("{}", d.render());
            }
            match gpu_check {
                Some(video) => run_gpu_check(&video, soak_frames, json),
                // Said in the report; the exit code lets scripts see it.
                None if d.onnxruntime.error.is_some() => Ok(exit::RUNTIME),
                None => Ok(exit::OK),
            }
        }
        Cmd::Bench { pipeline, frames, warmup, null_sinks, json, plot, ort_library, capacity, .. }
            if capacity.capacity || !capacity.sweep.is_empty() =>
        {
            let build = BuildOptions { ort_library, null_sinks, max_frames: frames, batch_state: false, shutdown: None };
            capacity_cmd(&pipeline, build, warmup, &capacity, json, plot.as_deref(), quiet)
        }
        Cmd::Compare {
            a,
            b,
            rounds,
            frames,
            warmup,
            max_slowdown,
            min_agreement,
            min_recall,
            max_cer,
            nodes,
            inputs_differ,
            write_disagreements,
            worst,
            json,
            ort_library,
        } => {
            let nodes = match nodes.as_deref().map(|n| n.split_once(':')) {
                None => None,
                Some(Some((x, y))) if !x.is_empty() && !y.is_empty() => Some((x.to_string(), y.to_string())),
                Some(_) => {
                    eprintln!("error: --nodes: write A_NODE:B_NODE (e.g. boxes_a:boxes_b)");
                    return ExitCode::from(exit::CONFIG);
                }
            };
            let o = infer_stream::capacity::compare::CompareOptions {
                build: BuildOptions { ort_library, max_frames: Some(frames), ..Default::default() },
                rounds: rounds as usize,
                warmup,
                nodes,
                write_disagreements,
                worst,
                gates: infer_stream::capacity::compare::Gates { max_slowdown, min_agreement, min_recall, max_cer },
                inputs_differ,
            };
            compare_cmd(&a, &b, &o, json, quiet)
        }
        Cmd::Bench { pipeline, isolate, frames, duration, warmup, null_sinks, json, plot, trace, ort_library, capacity: _ } => {
            let opts = BenchOptions {
                build: BuildOptions { ort_library, null_sinks, max_frames: frames, batch_state: false, shutdown: None },
                isolate,
                warmup,
                duration: duration.map(Duration::from_secs_f64),
                tracer: trace.as_ref().map(|_| Tracer::new()),
            };
            bench(&pipeline, opts, json, plot.as_deref(), trace.as_deref())
        }
    };
    match r {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(exit::RUNTIME)
        }
    }
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
fn check_arguments(cmd: &Cmd) -> Result<(), String> {
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

/// `doctor --gpu-check`: run the GPU self-check and print its figures.
fn run_gpu_check(video: &Path, soak_frames: usize, json: bool) -> anyhow::Result<u8> {
    #[cfg(feature = "cuda")]
    {
        println!("\nGPU check on {} ({soak_frames} soak frames):", video.display());
        let r = infer_stream::gpu_check::run(video, soak_frames, 0).map_err(|e| anyhow::anyhow!("GPU check: {e}"))?;
        if json {
            println!("{}", serde_json::to_string_pretty(&r)?);
        }
        println!("{r}");
        Ok(if r.failures.is_empty() { exit::OK } else { exit::RUNTIME })
    }
    #[cfg(not(feature = "cuda"))]
    {
        let _ = (video, soak_frames, json);
        anyhow::bail!("GPU check: this build has no GPU support (built without the `cuda` feature)")
    }
}

/// Load and check a file; diagnostics are printed and mapped to exit code 2.
fn load_checked(path: &Path) -> Result<(PipelineConfig, Graph), Diagnostics> {
    let (cfg, mut diags) = config::load_lenient(path);
    let Some(cfg) = cfg else { return Err(diags) };
    match graph::check(&cfg) {
        Ok(g) if diags.is_empty() => Ok((cfg, g)),
        Ok(_) => Err(diags),
        Err(mut g) => {
            diags.0.append(&mut g.0);
            diags.sort();
            Err(diags)
        }
    }
}

fn print_diags(d: &Diagnostics) -> u8 {
    eprintln!("{d}");
    exit::CONFIG
}

/// Before a run or a bench: say the file's warnings in the log, then check
/// what this machine must have (a GPU asked for, writable outputs, GStreamer
/// elements), so a run that cannot work fails before models load. `Err`: the exit code.
fn check_before_run(cfg: &PipelineConfig, graph: &Graph, outputs: bool) -> Result<(), u8> {
    for w in graph::warnings(cfg, graph) {
        match &w.help {
            Some(h) => tracing::warn!("{} ({h})", w.headline()),
            None => tracing::warn!("{}", w.headline()),
        }
    }
    let d = graph::check_machine(cfg, outputs);
    if d.is_empty() { Ok(()) } else { Err(print_diags(&d)) }
}

fn validate(paths: &[PathBuf], no_models: bool, ort_library: Option<PathBuf>, quiet: bool) -> Result<u8> {
    let mut all = Diagnostics::default();
    for path in paths {
        let (cfg, graph) = match load_checked(path) {
            Ok(x) => x,
            Err(mut d) => {
                all.0.append(&mut d.0);
                continue;
            }
        };
        let warnings = graph::warnings(&cfg, &graph);
        if !quiet {
            for w in &warnings {
                eprintln!("{w}");
            }
        }
        all.0.append(&mut graph::check_machine(&cfg, true).0);
        // `serve`'s API settings: address, tokens, TLS files.
        #[cfg(feature = "serve")]
        if cfg.settings.api.is_some()
            && let Err(mut d) = infer_stream::api::ApiSettings::from_config(&cfg, None)
        {
            all.0.append(&mut d.0);
        }
        if !no_models {
            let opts = BuildOptions { ort_library: ort_library.clone(), batch_state: true, ..Default::default() };
            let mut models = stages::ModelIo::new();
            for node in cfg.nodes.iter() {
                let config::NodeKind::Infer(c) = &node.kind else {
                    continue;
                };
                let rt = match stages::ort_runtime(&cfg, &opts) {
                    Ok(rt) => rt,
                    Err(d) => {
                        all.push(d);
                        break;
                    }
                };
                let model = cfg.resolve_path(&c.model).expect("checked by graph::check");
                match infer_stream::backend::ort::inspect(rt, &model) {
                    Ok(io) => {
                        models.insert(node.name.clone(), io);
                    }
                    Err(e) => all.push(cfg.diag(c.model.span(), format!("stage `{}`: {e}", node.name))),
                }
            }
            all.0.append(&mut graph::check_models(&cfg, &graph, &models).0);
        }
        if all.0.iter().all(|d| d.file != *path) {
            let n = warnings.len();
            let said = if n == 0 { String::new() } else { format!(", {n} warning{}", if n == 1 { "" } else { "s" }) };
            // The result on stdout (warnings and errors are on stderr).
            println!("{}: ok ({} nodes{said})", path.display(), cfg.nodes.len());
        }
    }
    if all.is_empty() { Ok(exit::OK) } else { Ok(print_diags(&all)) }
}

fn inspect(model: &Path, json: bool, ort_library: Option<&Path>) -> Result<u8> {
    if !model.is_file() {
        let why = if model.is_dir() { "a folder, not a model file" } else { "no such model file" };
        eprintln!("error: {}: {why}", model.display());
        return Ok(exit::CONFIG);
    }
    let rt = match infer_stream::backend::ort::runtime(ort_library.map(|p| (p, "--ort-library"))) {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: {e}");
            // A library named on the command line that does not load is a bad argument.
            return Ok(if ort_library.is_some() { exit::CONFIG } else { exit::RUNTIME });
        }
    };
    let r = match infer_stream::backend::ort::model_report(rt, model) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: {e}");
            return Ok(exit::CONFIG);
        }
    };
    if json {
        println!("{}", serde_json::to_string_pretty(&r)?);
        return Ok(exit::OK);
    }
    println!("model: {}", r.path.display());
    for (k, v) in [("producer", &r.producer), ("graph", &r.graph_name), ("description", &r.description), ("domain", &r.domain)] {
        if let Some(v) = v {
            println!("{k}: {v}");
        }
    }
    if let Some(v) = r.version {
        println!("version: {v}");
    }
    for (title, ios) in [("inputs", &r.inputs), ("outputs", &r.outputs)] {
        println!("{title}:");
        for io in ios.iter() {
            println!("  {:<32} {:<8} {}", io.name, io.dtype, io.shape_string());
        }
    }
    if !r.metadata.is_empty() {
        println!("metadata:");
        for (k, v) in &r.metadata {
            let n = v.chars().count();
            if n > 80 {
                println!("  {k}: {}… ({n} characters; --json shows all)", v.chars().take(60).collect::<String>().replace('\n', "\\n"));
            } else {
                println!("  {k}: {v}");
            }
        }
    }
    Ok(exit::OK)
}

fn graph_cmd(path: &Path, format: GraphFormat) -> Result<u8> {
    let cfg = match load_checked(path) {
        Ok((cfg, _)) => cfg,
        Err(d) => return Ok(print_diags(&d)),
    };
    print!(
        "{}",
        match format {
            GraphFormat::Dot => graph::to_dot(&cfg),
            GraphFormat::Mermaid => graph::to_mermaid(&cfg),
        }
    );
    Ok(exit::OK)
}

/// Build a checked file's nodes (open sources, load models) and check the models fit.
fn build_checked(cfg: &PipelineConfig, graph: &Graph, opts: &BuildOptions) -> Result<Vec<stages::Body>, Diagnostics> {
    let (bodies, models) = stages::build(cfg, graph, opts)?;
    let d = graph::check_models(cfg, graph, &models);
    if !d.is_empty() {
        return Err(d);
    }
    Ok(bodies)
}

/// Listen for scrapes when `--metrics-addr` (which wins) or `[pipeline] metrics_addr` asks for
/// it, before the pipeline is built: a port that cannot be had fails at once with exit code 2,
/// and `/readyz` answers "not ready" while models load. `Err` holds the exit code.
fn start_metrics(cfg: &PipelineConfig, cli: Option<SocketAddr>, metrics: &Arc<Metrics>) -> Result<Option<MetricsServer>, u8> {
    let addr = match cli {
        Some(a) => a,
        None => match cfg.metrics_addr() {
            Ok(Some(a)) => a,
            Ok(None) => return Ok(None),
            Err(d) => return Err(print_diags(&Diagnostics(vec![d]))),
        },
    };
    match MetricsServer::start(addr, metrics.clone()) {
        Ok(server) => {
            tracing::info!("metrics on http://{}/metrics (health: /healthz, /readyz)", server.local_addr());
            if !addr.ip().is_loopback() {
                tracing::warn!(
                    "metrics and health checks on {addr} can be reached from other machines, without authentication; \
                     give a port alone (or 127.0.0.1:PORT) to keep them on this machine"
                );
            }
            Ok(Some(server))
        }
        Err(e) => match (&cfg.settings.metrics_addr, cli) {
            (Some(v), None) => {
                let d = cfg.diag(v.span(), e.to_string());
                Err(print_diags(&Diagnostics(vec![match e.help() {
                    Some(h) => d.with_help(h),
                    None => d,
                }])))
            }
            _ => {
                eprintln!("error: --metrics-addr: {e}");
                if let Some(h) = e.help() {
                    eprintln!("  = help: {h}");
                }
                Err(exit::CONFIG)
            }
        },
    }
}

/// Signals that arrive within this long of the first are the same stop:
/// `timeout`, and anything that signals a whole process group, delivers the
/// signal twice within microseconds.
const SAME_STOP: Duration = Duration::from_secs(1);

/// First SIGINT, SIGTERM or SIGHUP: stop sources and drain (exit 128 +
/// signal). Another within [`SAME_STOP`]: the same stop. One later: exit at
/// once without draining ([`exit::ABANDONED`]).
fn install_signals(sd: Arc<Shutdown>) -> Result<()> {
    use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
    let mut signals = signal_hook::iterator::Signals::new([SIGINT, SIGTERM, SIGHUP]).context("installing signal handlers")?;
    std::thread::Builder::new().name("signals".into()).spawn(move || {
        let mut first: Option<std::time::Instant> = None;
        for sig in signals.forever() {
            match first {
                Some(t) if t.elapsed() < SAME_STOP => {
                    tracing::debug!("signal {sig} {:.1} ms after the first: the same stop", t.elapsed().as_secs_f64() * 1e3);
                }
                Some(_) => {
                    eprintln!("second signal: exiting now without draining (exit code {})", exit::ABANDONED);
                    infer_stream::backend::process::exit_now(exit::ABANDONED);
                }
                None => {
                    first = Some(std::time::Instant::now());
                    eprintln!("\nsignal {sig}: stopping sources and draining frames in flight (again to exit at once)");
                    sd.interrupt(sig);
                }
            }
        }
    })?;
    Ok(())
}

/// `run --frames N` / `--duration S`: where a run stops by itself (as `bench` does).
#[derive(Clone, Copy, Default)]
struct Bound {
    /// Frames per source.
    frames: Option<u64>,
    /// Time from the start of the pipeline, after which the sources stop and the frames in flight drain.
    duration: Option<Duration>,
}

#[allow(clippy::too_many_arguments)]
fn run(
    path: &Path,
    ort_library: Option<PathBuf>,
    progress: Progress,
    report_path: Option<&Path>,
    trace: Option<&Path>,
    bound: Bound,
    metrics_addr: Option<SocketAddr>,
    quiet: bool,
) -> Result<u8> {
    // Signals first: Ctrl-C while models load (a TensorRT engine build can take
    // minutes) or while stdin has sent nothing yet stops the run before any
    // frame with the documented exit code.
    let sd = Shutdown::new();
    install_signals(sd.clone())?;
    let opts = BuildOptions { ort_library, batch_state: true, shutdown: Some(sd.clone()), max_frames: bound.frames, ..Default::default() };
    let (cfg, graph) = match load_checked(path) {
        Ok(x) => x,
        Err(d) => return Ok(print_diags(&d)),
    };
    if let Err(code) = check_before_run(&cfg, &graph, true) {
        return Ok(code);
    }
    let metrics = Metrics::new();
    let server = match start_metrics(&cfg, metrics_addr, &metrics) {
        Ok(s) => s,
        Err(code) => return Ok(code),
    };
    let bodies = match build_checked(&cfg, &graph, &opts) {
        Ok(b) => b,
        Err(d) => return Ok(print_diags(&d)),
    };
    let mut pipeline = Pipeline::new(&cfg, graph, bodies);
    let tracer = trace.map(|_| Tracer::new());
    if let Some(t) = &tracer {
        pipeline = pipeline.with_tracer(t.clone());
    }
    tracing::info!(
        "pipeline `{}` from {}: ready in {:.0} ms (models loaded and warmed up)",
        pipeline.name,
        path.display(),
        STARTED.get().map_or(0.0, |t| t.elapsed().as_secs_f64() * 1e3)
    );
    for n in &pipeline.nodes {
        tracing::info!("  {} `{}` ({}): {}", n.role.noun(), n.name, n.kind, n.describe);
    }
    let show = !quiet
        && match progress {
            Progress::Auto => std::io::stderr().is_terminal(),
            Progress::Always => true,
            Progress::Never => false,
        };
    let acct = Arc::new(Accounting::default());
    metrics.watch(&pipeline, acct.clone(), sd.clone());
    let bar = show.then(|| progress_bar(pipeline.expected_frames()));
    let acct2 = acct.clone();
    let mut tick = |_: &[Arc<NodeStats>], elapsed: Duration| {
        if let Some(b) = &bar {
            let c = acct2.snapshot();
            b.set_position(c.settled());
            b.set_message(format!("{:.1} fps", c.processed as f64 / elapsed.as_secs_f64().max(1e-3)));
        }
    };
    if let Some(d) = bound.duration {
        // A plain stop (not a signal): sources end, frames in flight drain, exit 0.
        let sd = sd.clone();
        std::thread::Builder::new().name("duration".into()).spawn(move || {
            std::thread::sleep(d);
            if !sd.stopping() {
                tracing::info!("--duration {:.1} s reached: stopping sources and draining frames in flight", d.as_secs_f64());
                sd.stop();
            }
        })?;
    }
    let report = pipeline.run(sd.clone(), acct, Some(&mut tick));
    if let Some(b) = bar {
        b.finish_and_clear();
    }
    if !quiet {
        eprintln!("{}", report.render());
    }
    if let Some(p) = report_path {
        std::fs::write(p, serde_json::to_vec_pretty(&report)?).with_context(|| format!("writing {}", p.display()))?;
    }
    if let (Some(t), Some(p)) = (&tracer, trace) {
        t.write(p).with_context(|| format!("writing {}", p.display()))?;
        tracing::info!("trace: {} spans in {}", t.span_count(), p.display());
    }
    // Scrapes see the final counters until here; then the port closes and the process can exit.
    if let Some(s) = server {
        s.stop();
    }
    Ok(exit_code(&report))
}

/// The exit code of a run (or the run `bench` measured), its errors said.
fn exit_code(o: &infer_stream::runtime::report::RunReport) -> u8 {
    if let Some(f) = &o.fatal {
        eprintln!("error: {f}");
        return exit::RUNTIME;
    }
    if !o.source_errors.is_empty() {
        for e in &o.source_errors {
            eprintln!("error: {e}");
        }
        return exit::RUNTIME;
    }
    if !o.frames.balanced() {
        eprintln!("error: {}", o.accounting_line());
        return exit::RUNTIME;
    }
    if let Some(sig) = o.interrupted_by_signal {
        return exit::SIGNAL_BASE + sig as u8;
    }
    if let Some(i) = o.inputs.as_ref().filter(|i| !i.failed.is_empty()) {
        eprintln!("error: {} input(s) failed (named above); the others were processed", i.failed.len());
        return exit::INPUTS_FAILED;
    }
    exit::OK
}

fn progress_bar(total: Option<u64>) -> ProgressBar {
    let bar = match total {
        Some(n) => ProgressBar::new(n).with_style(
            ProgressStyle::with_template("{spinner} [{elapsed_precise}] {bar:30} {pos}/{len} frames  {msg}  ETA {eta}")
                .expect("valid template"),
        ),
        None => ProgressBar::new_spinner()
            .with_style(ProgressStyle::with_template("{spinner} [{elapsed_precise}] {pos} frames  {msg}").expect("valid template")),
    };
    bar.set_draw_target(ProgressDrawTarget::stderr_with_hz(5));
    bar
}

fn bench(path: &Path, opts: BenchOptions, json: bool, plot: Option<&Path>, trace: Option<&Path>) -> Result<u8> {
    let (cfg, graph) = match load_checked(path) {
        Ok(x) => x,
        Err(d) => return Ok(print_diags(&d)),
    };
    if let Err(code) = check_before_run(&cfg, &graph, !opts.build.null_sinks) {
        return Ok(code);
    }
    // Check models against their inputs before measuring anything.
    match stages::build(&cfg, &graph, &opts.build) {
        Ok((_, models)) => {
            let d = graph::check_models(&cfg, &graph, &models);
            if !d.is_empty() {
                return Ok(print_diags(&d));
            }
        }
        Err(d) => return Ok(print_diags(&d)),
    }
    let tracer = opts.tracer.clone();
    let report = match infer_stream::bench::bench(&cfg, &graph, &opts) {
        Ok(r) => r,
        Err(d) => return Ok(print_diags(&d)),
    };
    if json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print!("{}", report.render());
    }
    if let Some(p) = plot {
        infer_stream::bench::plot::draw(&report, &report.histograms, p)
            .map_err(anyhow::Error::msg)
            .with_context(|| format!("drawing {}", p.display()))?;
        eprintln!("plot: {}", p.display());
    }
    if let (Some(t), Some(p)) = (tracer, trace) {
        t.write(p).with_context(|| format!("writing {}", p.display()))?;
        eprintln!("trace: {} spans in {}", t.span_count(), p.display());
    }
    Ok(exit_code(&report.run))
}

/// A capacity or sweep error as an exit code: the file or a setting is wrong (2), or a run failed (1).
fn capacity_error(e: infer_stream::capacity::Error) -> u8 {
    use infer_stream::capacity::Error;
    match e {
        Error::Pipeline(d) => print_diags(&d),
        Error::Setting(s) => {
            eprintln!("error: {s}");
            exit::CONFIG
        }
        Error::Run(s) | Error::Io(s) => {
            eprintln!("error: {s}");
            exit::RUNTIME
        }
    }
}

/// `bench --capacity` and `bench --sweep`.
fn capacity_cmd(
    path: &Path,
    build: BuildOptions,
    warmup: u64,
    a: &CapacityArgs,
    json: bool,
    plot: Option<&Path>,
    quiet: bool,
) -> Result<u8> {
    use infer_stream::capacity::{edit::Doc, streams, sweep};
    let doc = match Doc::load(path) {
        Ok(d) => d,
        Err(e) => return Ok(capacity_error(e)),
    };
    if a.capacity {
        let o = streams::CapacityOptions {
            build,
            latency_budget_ms: a.latency_budget,
            max_drops: a.max_drops,
            step_seconds: a.step_seconds,
            warmup_seconds: a.step_warmup,
            max_streams: a.max_streams as usize,
        };
        // Progress on stderr: not with --json, not with -q.
        let progress = !json && !quiet;
        if progress {
            eprint!("{}", streams::header());
        }
        let r = match streams::search(&doc, &o, |s| {
            if progress {
                eprint!("{}", streams::row(s));
            }
        }) {
            Ok(r) => r,
            Err(e) => return Ok(capacity_error(e)),
        };
        if json {
            println!("{}", serde_json::to_string_pretty(&r)?);
        } else {
            print!("{}", r.render());
        }
        if let Some(p) = plot {
            infer_stream::capacity::plot::draw(&r, p).map_err(anyhow::Error::msg).with_context(|| format!("drawing {}", p.display()))?;
            eprintln!("plot: {}", p.display());
        }
        return Ok(exit::OK);
    }
    let build = BuildOptions { null_sinks: true, max_frames: build.max_frames.or(Some(100)), ..build };
    let o = sweep::SweepOptions { build, rounds: a.rounds as usize, warmup };
    let r = match sweep::sweep(&doc, &a.sweep, &o, |round, label, m| {
        if !json && !quiet {
            eprintln!("round {}: {label}: {:.1} fps, p99 {:.1} ms", round + 1, m.fps, m.latency_ms.p99);
        }
    }) {
        Ok(r) => r,
        Err(e) => return Ok(capacity_error(e)),
    };
    if json {
        println!("{}", serde_json::to_string_pretty(&r)?);
    } else {
        print!("{}", r.render());
    }
    Ok(exit::OK)
}

/// `compare A.toml B.toml`.
fn compare_cmd(a: &Path, b: &Path, o: &infer_stream::capacity::compare::CompareOptions, json: bool, quiet: bool) -> Result<u8> {
    use infer_stream::capacity::{compare, edit::Doc};
    let (da, db) = match (Doc::load(a), Doc::load(b)) {
        (Ok(x), Ok(y)) => (x, y),
        (Err(e), _) | (_, Err(e)) => return Ok(capacity_error(e)),
    };
    let r = match compare::compare(&da, &db, o, |round, which, m| {
        if !json && !quiet {
            eprintln!("round {}: {which}: {:.1} fps, p99 {:.1} ms", round + 1, m.fps, m.latency_ms.p99);
        }
    }) {
        Ok(r) => r,
        Err(e) => return Ok(capacity_error(e)),
    };
    if json {
        println!("{}", serde_json::to_string_pretty(&r)?);
    } else {
        print!("{}", r.render());
    }
    Ok(if r.passed { exit::OK } else { exit::REGRESSED })
}
