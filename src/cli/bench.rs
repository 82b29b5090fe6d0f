//! `bench` (one pipeline measured, or `--capacity` / `--sweep`) and `compare`
//! (two pipelines in interleaved rounds): their reports and exit codes.

use std::path::Path;

use anyhow::{Context, Result};

use infer_stream::bench::BenchOptions;
use infer_stream::graph;
use infer_stream::stages::{self, BuildOptions};

use super::args::CapacityArgs;
use super::common::{check_before_run, exit_code, load_checked, print_diags};
use super::exit;

pub(super) fn bench(path: &Path, opts: BenchOptions, json: bool, plot: Option<&Path>, trace: Option<&Path>) -> Result<u8> {
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
pub(super) fn capacity_cmd(
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
pub(super) fn compare_cmd(a: &Path, b: &Path, o: &infer_stream::capacity::compare::CompareOptions, json: bool, quiet: bool) -> Result<u8> {
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
