//! What `run`, `serve`, `bench` and `validate` share: loading and checking a
//! pipeline file (diagnostics printed, exit code 2), checks before a run, the
//! start-up of `run` and `serve`, building the nodes, the metrics listener,
//! signal handling and a run's exit code.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};

use infer_stream::config::{self, Diagnostics, PipelineConfig};
use infer_stream::graph::{self, Graph};
use infer_stream::metrics::{Metrics, MetricsServer};
use infer_stream::runtime::Shutdown;
use infer_stream::stages::{self, BuildOptions};

use super::exit;

/// Load and check a file; diagnostics are printed and mapped to exit code 2.
pub(super) fn load_checked(path: &Path) -> Result<(PipelineConfig, Graph), Diagnostics> {
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

pub(super) fn print_diags(d: &Diagnostics) -> u8 {
    eprintln!("{d}");
    exit::CONFIG
}

/// Before a run or a bench: say the file's warnings in the log, then check
/// what this machine must have (a GPU asked for, writable outputs, GStreamer
/// elements), so a run that cannot work fails before models load. `Err`: the exit code.
pub(super) fn check_before_run(cfg: &PipelineConfig, graph: &Graph, outputs: bool) -> Result<(), u8> {
    for w in graph::warnings(cfg, graph) {
        match &w.help {
            Some(h) => tracing::warn!("{} ({h})", w.headline()),
            None => tracing::warn!("{}", w.headline()),
        }
    }
    let d = graph::check_machine(cfg, outputs);
    if d.is_empty() { Ok(()) } else { Err(print_diags(&d)) }
}

/// A pipeline file loaded and checked for `run` or `serve`, with the stop its
/// signals trigger and the options its nodes are built with.
pub(super) struct Started {
    pub(super) sd: Arc<Shutdown>,
    pub(super) opts: BuildOptions,
    pub(super) cfg: PipelineConfig,
    pub(super) graph: Graph,
}

/// The start-up `run` and `serve` share. Signals first: Ctrl-C while models
/// load (a TensorRT engine build can take minutes) or while stdin has sent
/// nothing yet stops the run before any frame with the documented exit code.
/// Then the file is loaded and checked, with what this machine must have
/// (outputs included). `opts.shutdown` is set to the signals' stop. `Ok(Err)`:
/// the exit code (diagnostics printed).
pub(super) fn start_checked(path: &Path, opts: BuildOptions) -> Result<Result<Started, u8>> {
    let sd = Shutdown::new();
    install_signals(sd.clone())?;
    let opts = BuildOptions { shutdown: Some(sd.clone()), ..opts };
    let (cfg, graph) = match load_checked(path) {
        Ok(x) => x,
        Err(d) => return Ok(Err(print_diags(&d))),
    };
    if let Err(code) = check_before_run(&cfg, &graph, true) {
        return Ok(Err(code));
    }
    Ok(Ok(Started { sd, opts, cfg, graph }))
}

/// Build a checked file's nodes (open sources, load models) and check the models fit.
pub(super) fn build_checked(cfg: &PipelineConfig, graph: &Graph, opts: &BuildOptions) -> Result<Vec<stages::Body>, Diagnostics> {
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
pub(super) fn start_metrics(cfg: &PipelineConfig, cli: Option<SocketAddr>, metrics: &Arc<Metrics>) -> Result<Option<MetricsServer>, u8> {
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
pub(super) fn install_signals(sd: Arc<Shutdown>) -> Result<()> {
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

/// The exit code of a run (or the run `bench` measured), its errors said.
pub(super) fn exit_code(o: &infer_stream::runtime::report::RunReport) -> u8 {
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
