//! Command-line interface: logging, exit codes and the dispatch of each
//! subcommand. The arguments are in `args.rs`, the commands in `run.rs`,
//! `serve.rs`, `validate.rs`, `inspect.rs` and `bench.rs`, what they share in
//! `common.rs`.

use std::io::IsTerminal;
use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;

use infer_stream::bench::BenchOptions;
use infer_stream::runtime::trace::Tracer;
use infer_stream::stages::BuildOptions;

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

// After the macros above, which they use.
mod args;
mod bench;
mod common;
mod inspect;
mod run;
mod validate;

use args::{Cli, Cmd, check_arguments};
use bench::{bench, capacity_cmd, compare_cmd};
// What `serve.rs` takes from here.
#[cfg(feature = "serve")]
use common::{Started, build_checked, exit_code, print_diags, start_checked, start_metrics};
use inspect::{inspect, run_gpu_check};
use run::{Bound, run};
use validate::{graph_cmd, validate};

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
