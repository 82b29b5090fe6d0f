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
    print_report(&report, json, |r| r.render())?;
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

/// Runs `capacity_cmd` or `compare_cmd`'s body, whose capacity errors (raised
/// with `?`) become their exit code here: the file or a setting is wrong (2),
/// or a run failed (1). Other errors pass through.
fn capacity_exit(body: impl FnOnce() -> Result<u8>) -> Result<u8> {
    use infer_stream::capacity::Error;
    let e = match body() {
        Ok(code) => return Ok(code),
        Err(e) => e.downcast::<Error>()?,
    };
    Ok(match e {
        Error::Pipeline(d) => print_diags(&d),
        Error::Setting(s) => {
            eprintln!("error: {s}");
            exit::CONFIG
        }
        Error::Run(s) | Error::Io(s) => {
            eprintln!("error: {s}");
            exit::RUNTIME
        }
    })
}

/// A report on stdout: JSON with `--json`, else its text.
fn print_report<R: serde::Serialize>(r: &R, json: bool, render: impl FnOnce(&R) -> String) -> Result<()> {
    if json {
        println!("{}", serde_json::to_string_pretty(r)?);
    } else {
        print!("{}", render(r));
    }
    Ok(())
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
    capacity_exit(|| {
        let doc = Doc::load(path)?;
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
            let r = streams::search(&doc, &o, |s| {
                if progress {
                    eprint!("{}", streams::row(s));
                }
            })?;
            print_report(&r, json, |r| r.render())?;
            if let Some(p) = plot {
                infer_stream::capacity::plot::draw(&r, p)
                    .map_err(anyhow::Error::msg)
                    .with_context(|| format!("drawing {}", p.display()))?;
                eprintln!("plot: {}", p.display());
            }
            return Ok(exit::OK);
        }
        let build = BuildOptions { null_sinks: true, max_frames: build.max_frames.or(Some(100)), ..build };
        let o = sweep::SweepOptions { build, rounds: a.rounds as usize, warmup };
        let r = sweep::sweep(&doc, &a.sweep, &o, |round, label, m| {
            if !json && !quiet {
                eprintln!("round {}: {label}: {:.1} fps, p99 {:.1} ms", round + 1, m.fps, m.latency_ms.p99);
            }
        })?;
        print_report(&r, json, |r| r.render())?;
        Ok(exit::OK)
    })
}

/// `compare A.toml B.toml`.
pub(super) fn compare_cmd(a: &Path, b: &Path, o: &infer_stream::capacity::compare::CompareOptions, json: bool, quiet: bool) -> Result<u8> {
    use infer_stream::capacity::{compare, edit::Doc};
    capacity_exit(|| {
        let (da, db) = (Doc::load(a), Doc::load(b));
        let (da, db) = (da?, db?);
        let r = compare::compare(&da, &db, o, |round, which, m| {
            if !json && !quiet {
                eprintln!("round {}: {which}: {:.1} fps, p99 {:.1} ms", round + 1, m.fps, m.latency_ms.p99);
            }
        })?;
        print_report(&r, json, |r| r.render())?;
        Ok(if r.passed { exit::OK } else { exit::REGRESSED })
    })
}
