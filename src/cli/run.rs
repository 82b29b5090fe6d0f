//! `run`: a pipeline until its inputs end, a bound is reached or a signal stops
//! it, with a progress bar, a report and a trace.

use std::io::IsTerminal;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use infer_stream::frame::Accounting;
use infer_stream::metrics::Metrics;
use infer_stream::runtime::trace::Tracer;
use infer_stream::runtime::{NodeStats, Pipeline};
use infer_stream::stages::BuildOptions;

use super::STARTED;
use super::args::Progress;
use super::common::{Started, build_checked, exit_code, print_diags, start_checked, start_metrics};

/// `run --frames N` / `--duration S`: where a run stops by itself (as `bench` does).
#[derive(Clone, Copy, Default)]
pub(super) struct Bound {
    /// Frames per source.
    pub(super) frames: Option<u64>,
    /// Time from the start of the pipeline, after which the sources stop and the frames in flight drain.
    pub(super) duration: Option<Duration>,
}

#[allow(clippy::too_many_arguments)]
pub(super) fn run(
    path: &Path,
    ort_library: Option<PathBuf>,
    progress: Progress,
    report_path: Option<&Path>,
    trace: Option<&Path>,
    bound: Bound,
    metrics_addr: Option<SocketAddr>,
    quiet: bool,
) -> Result<u8> {
    let opts = BuildOptions { ort_library, batch_state: true, max_frames: bound.frames, ..Default::default() };
    let Started { sd, opts, cfg, graph } = match start_checked(path, opts)? {
        Ok(s) => s,
        Err(code) => return Ok(code),
    };
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
