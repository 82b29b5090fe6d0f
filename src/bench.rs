//! `bench --isolate`: each stage measured alone on the same input, the
//! machine bound they imply, and the whole pipeline measured against it.

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::config::{Diagnostics, PipelineConfig, Role};
use crate::frame::Accounting;
use crate::graph::Graph;
use crate::runtime::{NodeStats, Pipeline, RunReport, Shutdown, SourceCtx};
use crate::stages::{self, Body, BuildOptions};

/// One stage measured alone.
#[derive(Debug, Clone, Serialize)]
pub struct StageAlone {
    pub node: String,
    pub kind: String,
    pub frames: u64,
    pub seconds: f64,
    pub fps: f64,
}

/// The isolated figures, the bound and the pipeline's efficiency against it.
#[derive(Debug, Clone, Serialize)]
pub struct IsolateReport {
    pub decode: StageAlone,
    pub stages: Vec<StageAlone>,
    /// 1 / (1/decode + 1/preprocess + 1/infer): all stages sharing the same cores.
    pub bound_fps: f64,
    pub pipeline_fps: f64,
    pub efficiency: f64,
    pub pipeline: RunReport,
}

impl IsolateReport {
    pub fn render(&self) -> String {
        let mut s = String::from("measured alone on the same input:\n");
        for a in std::iter::once(&self.decode).chain(&self.stages) {
            s.push_str(&format!("  {:<12} {:<14} {:>6} frames {:>8.3} s {:>9.2} fps\n", a.node, a.kind, a.frames, a.seconds, a.fps));
        }
        s.push_str(&format!("machine bound 1/(1/decode + 1/preprocess + 1/infer) = {:.2} fps\n", self.bound_fps));
        s.push_str(&format!(
            "pipeline: {:.2} fps  ({} frames in {:.2} s)\n",
            self.pipeline_fps, self.pipeline.frames.processed, self.pipeline.wall_seconds
        ));
        s.push_str(&format!("efficiency: {:.3} of the bound", self.efficiency));
        s
    }
}

fn alone(node: &str, kind: &str, frames: u64, d: Duration) -> StageAlone {
    let seconds = d.as_secs_f64().max(1e-9);
    StageAlone { node: node.into(), kind: kind.into(), frames, seconds, fps: frames as f64 / seconds }
}

/// Measure decode alone, then each stage alone (serially, one frame at a
/// time), then the whole pipeline with null sinks.
pub fn isolate(cfg: &PipelineConfig, graph: &Graph, opts: &BuildOptions) -> Result<IsolateReport, Diagnostics> {
    let opts = BuildOptions { null_sinks: true, ..opts.clone() };
    let sd = Shutdown::new();
    let acct = Arc::new(Accounting::default());

    // 1. Decode alone: frames are dropped as soon as they exist.
    let (mut bodies, _) = stages::build(cfg, graph, &opts)?;
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

    // 2. Each stage alone, on frames from a fresh decode.
    let (mut bodies, _) = stages::build(cfg, graph, &opts)?;
    let mut times = vec![Duration::ZERO; cfg.nodes.len()];
    let mut counts = vec![0u64; cfg.nodes.len()];
    let order = graph.order.clone();
    let stage_nodes: Vec<usize> = order.iter().copied().filter(|&i| cfg.nodes[i].role == Role::Stage).collect();
    let (sources, rest): (Vec<_>, Vec<_>) = bodies.iter_mut().enumerate().partition(|(_, b)| matches!(b, Body::Source(_)));
    let mut stages_by_index: Vec<(usize, &mut Box<dyn stages::Stage>)> =
        rest.into_iter().filter_map(|(i, b)| if let Body::Stage(s) = b { Some((i, s)) } else { None }).collect();
    stages_by_index.sort_by_key(|(i, _)| stage_nodes.iter().position(|x| x == i));
    for (i, b) in sources {
        let Body::Source(src) = b else { continue };
        let st = NodeStats::new(&cfg.nodes[i].name, "", Role::Source);
        let mut emit = |mut f: crate::frame::Frame| {
            for (j, stage) in stages_by_index.iter_mut() {
                let t0 = Instant::now();
                let ok = stage.process(&mut f).is_ok();
                times[*j] += t0.elapsed();
                counts[*j] += ok as u64;
            }
            f.ticket.sunk();
            true
        };
        let mut ctx = SourceCtx::new(Arc::from(cfg.nodes[i].name.as_str()), i as u32, &sd, &acct, &st, &mut emit);
        let _ = src.run(&mut ctx);
    }
    let stages: Vec<StageAlone> =
        stage_nodes.iter().map(|&i| alone(&cfg.nodes[i].name, cfg.nodes[i].kind.name(), counts[i], times[i])).collect();
    let inv = |k: &str| stages.iter().filter(|s| s.kind == k).map(|s| 1.0 / s.fps).sum::<f64>();
    let bound_fps = 1.0 / (1.0 / decode.fps + inv("preprocess") + inv("infer"));
    drop(bodies);

    // 3. The whole pipeline.
    let (bodies, _) = stages::build(cfg, graph, &opts)?;
    let pipeline = Pipeline::new(cfg, graph.clone(), bodies).run(Shutdown::new(), Arc::new(Accounting::default()), None);
    let pipeline_fps = pipeline.fps();
    Ok(IsolateReport { decode, stages, bound_fps, pipeline_fps, efficiency: pipeline_fps / bound_fps, pipeline })
}
