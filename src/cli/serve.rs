//! `infer-stream serve`: a pipeline as a long-lived service with its API.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};

use infer_stream::api::{self, ApiSettings, ApiState};
use infer_stream::frame::Accounting;
use infer_stream::metrics::Metrics;
use infer_stream::runtime::{Pipeline, ResultsHub};
use infer_stream::stages::BuildOptions;

use super::{STARTED, Started, build_checked, exit, exit_code, print_diags, start_checked};

/// How long `DELETE /v1/streams/{id}` waits for the stream's outputs to close.
const DRAIN_WAIT: Duration = Duration::from_secs(10);

pub fn serve(path: &Path, listen: Option<SocketAddr>, ort_library: Option<PathBuf>, report_path: Option<&Path>, quiet: bool) -> Result<u8> {
    // Streams come and go: what a removed stream freed goes back to the system.
    infer_stream::backend::memory::return_freed_memory_promptly();
    let opts = BuildOptions { ort_library, batch_state: false, ..Default::default() };
    let Started { sd, opts, cfg, graph } = match start_checked(path, opts)? {
        Ok(s) => s,
        Err(code) => return Ok(code),
    };
    let settings = match ApiSettings::from_config(&cfg, listen) {
        Ok(s) => s,
        Err(d) => return Ok(print_diags(&d)),
    };
    // The port is taken before models load: one in use fails at once (exit 2).
    let listener = match api::bind(settings.listen) {
        Ok(l) => l,
        Err(e) => {
            eprintln!("error: API: {e}");
            if let Some(h) = e.help() {
                eprintln!("  = help: {h}");
            }
            return Ok(exit::CONFIG);
        }
    };
    let metrics = Metrics::new();
    // `[pipeline] metrics_addr` still serves its own port too (the API has `/metrics` as well).
    let metrics_server = match super::start_metrics(&cfg, None, &metrics) {
        Ok(s) => s,
        Err(code) => return Ok(code),
    };
    let bodies = match build_checked(&cfg, &graph, &opts) {
        Ok(b) => b,
        Err(d) => return Ok(print_diags(&d)),
    };
    let mut pipeline = Pipeline::new(&cfg, graph, bodies);
    let control = pipeline.control(ResultsHub::new(settings.results_buffer));
    control.running_under(sd.clone());
    control.limit_streams(settings.max_streams);
    if let Some(live) = control.live_hub() {
        // Live pictures: drawn and encoded on the runtime's encoder thread, only while someone watches.
        live.set_max_fps(settings.live_fps);
        live.set_renderer(infer_stream::stages::live::renderer());
    }
    let acct = Arc::new(Accounting::default());
    metrics.watch(&pipeline, acct.clone(), sd.clone());
    let added = control.clone();
    metrics.watch_added(move || added.added_stats());
    let open = settings.auth.is_open();
    let state = ApiState { control: control.clone(), metrics: metrics.clone(), auth: settings.auth.clone(), drain_wait: DRAIN_WAIT };
    let server = api::Server::start(listener, &settings, state).context("starting the API")?;
    let scheme = if settings.tls.is_some() { "https" } else { "http" };
    tracing::info!(
        "pipeline `{}` from {}: serving on {scheme}://{}{}{} (ready in {:.0} ms)",
        pipeline.name,
        path.display(),
        server.local_addr(),
        if settings.mtls { ", client certificates required" } else { "" },
        if open { ", no tokens: open to this machine" } else { "" },
        STARTED.get().map_or(0.0, |t| t.elapsed().as_secs_f64() * 1e3)
    );
    for n in &pipeline.nodes {
        tracing::info!("  {} `{}` ({}): {}", n.role.noun(), n.name, n.kind, infer_stream::config::mask_credentials(&n.describe));
    }
    let report = pipeline.run(sd.clone(), acct, None);
    // The file's inputs ended (no template keeps the pipeline up): the API stays until asked to stop.
    if !sd.stopping() {
        tracing::info!("the pipeline's inputs ended; serving until stopped (SIGTERM or Ctrl-C)");
        while !sd.stopping() {
            std::thread::sleep(Duration::from_millis(100));
        }
    }
    server.stop(Duration::from_secs(1));
    if let Some(m) = metrics_server {
        m.stop();
    }
    let mut report = report;
    if !control.templates().is_empty() {
        // Streams added at run time: their first results count from their `POST`, not from the start.
        if !control.has_file_streams() {
            report.first_result_ms = None;
        }
        report.streams = Some(control.streams_report());
    }
    if !quiet {
        eprintln!("{}", report.render());
    }
    if let Some(p) = report_path {
        std::fs::write(p, serde_json::to_vec_pretty(&report)?).with_context(|| format!("writing {}", p.display()))?;
    }
    Ok(exit_code(&report))
}
