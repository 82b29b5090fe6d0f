//! Runtime stages, built from their configs.
//!
//! A node is one of three shapes: a [`Source`] that produces frames, a
//! [`Stage`] that attaches results to each frame (one in, one out), or a
//! [`Sink`] that consumes frames. The runtime owns threads, queues and
//! accounting; stages only see frames.

pub mod analytics;
pub mod build;
pub mod crop;
pub mod infer;
pub mod level;
pub mod live;
pub mod postprocess;
pub mod preprocess;
#[cfg(feature = "python")]
pub mod python;
pub mod redact;
pub mod scalers;
pub mod sinks;
pub mod sources;
pub mod track;
pub mod vad;

use std::cell::RefCell;
use std::path::PathBuf;
use std::sync::Arc;

use crate::config::{Diagnostics, NodeKind, PipelineConfig, Role};
use crate::graph::Graph;
pub use crate::graph::ModelIo;
pub use crate::runtime::node::{Body, OutputLosses, Sink, Source, Stage, StageError};
pub use build::{Build, BuildCtx, ort_runtime};

/// What building needs beyond the config.
#[derive(Debug, Clone, Default)]
pub struct BuildOptions {
    /// ONNX Runtime library from the command line (wins over TOML and environment).
    pub ort_library: Option<PathBuf>,
    /// Replace every sink with `null` (benchmarks).
    pub null_sinks: bool,
    /// Frames each source stops after (benchmarks).
    pub max_frames: Option<u64>,
    /// `dir` sources read and write their batch state (skip files done, record
    /// files finished). Set for `run`; a benchmark neither skips nor records.
    pub batch_state: bool,
    /// The run's stop, when known before the build (`run`): a source still
    /// opening its input (stdin that has sent nothing yet) gives up when it is asked.
    pub shutdown: Option<std::sync::Arc<crate::runtime::Shutdown>>,
}

/// `img` in host memory: itself, or the host copy of a device image (NVDEC
/// frames) for stages and sinks that work on the CPU. The first consumer of a
/// frame downloads it (into a buffer of its `pool`); the others reuse that copy.
pub fn on_host(img: &Arc<crate::frame::Image>, pool: &crate::frame::Pool<u8>) -> Result<Arc<crate::frame::Image>, String> {
    #[cfg(not(feature = "cuda"))]
    let _ = pool;
    match &img.storage {
        crate::frame::Storage::Host(_) => Ok(img.clone()),
        #[cfg(feature = "cuda")]
        crate::frame::Storage::Device(d) => d.host.get_or_make(|| crate::backend::nvdec::download_image(img, pool)),
    }
}

/// The registry: the config of each kind, as the builder of its node. A new
/// kind adds one line here (and its `impl Build` beside its node).
fn builder(kind: &NodeKind) -> &dyn Build {
    match kind {
        NodeKind::File(c) => c,
        NodeKind::Rtsp(c) => c,
        NodeKind::Dir(c) => c,
        NodeKind::ImageSequence(c) => c,
        NodeKind::Audio(c) => c,
        NodeKind::TestSrc(c) => c,
        NodeKind::AudioTestSrc(c) => c,
        NodeKind::Detections(c) => c,
        NodeKind::Request(c) => c,
        #[cfg(feature = "bus")]
        NodeKind::KafkaJobs(c) => c,
        NodeKind::Vad(c) => c,
        NodeKind::AudioLevel(c) => c,
        NodeKind::Preprocess(c) => c,
        NodeKind::Infer(c) => c,
        NodeKind::TextDetection(c) => c,
        NodeKind::Crop(c) => c,
        NodeKind::TextRecognition(c) => c,
        NodeKind::Detection(c) => c,
        NodeKind::Classification(c) => c,
        NodeKind::Track(c) => c,
        NodeKind::Redact(c) => c,
        #[cfg(feature = "python")]
        NodeKind::Python(c) => c,
        #[cfg(not(feature = "python"))]
        NodeKind::Python(_) => &build::NotCompiled("python"),
        NodeKind::Analytics(c) => c,
        NodeKind::Ndjson(c) => c,
        NodeKind::Null(c) => c,
        NodeKind::Images(c) => c,
        NodeKind::Video(c) => c,
        NodeKind::Clips(c) => c,
        NodeKind::Subtitles(c) => c,
        #[cfg(feature = "bus")]
        NodeKind::Kafka(c) => c,
        #[cfg(feature = "bus")]
        NodeKind::Mqtt(c) => c,
        #[cfg(not(feature = "bus"))]
        NodeKind::KafkaJobs(_) | NodeKind::Kafka(_) | NodeKind::Mqtt(_) => &build::NotCompiled("bus"),
    }
}

/// Build every node. All errors are collected.
pub fn build(cfg: &PipelineConfig, graph: &Graph, opts: &BuildOptions) -> Result<(Vec<Body>, ModelIo), Diagnostics> {
    let mut diags = Diagnostics::default();
    let mut bodies = Vec::new();
    let models = RefCell::new(ModelIo::new());
    let pool_size = graph.buffers_in_flight();
    #[cfg(feature = "bus")]
    let run = crate::bus::RunId::new();
    let needs_ort = |k: &NodeKind| matches!(k, NodeKind::Infer(_) | NodeKind::Vad(_));
    let ort = if cfg.nodes.iter().any(|n| needs_ort(&n.kind)) {
        match ort_runtime(cfg, opts) {
            Ok(rt) => Some(rt),
            Err(d) => {
                diags.push(d);
                None
            }
        }
    } else {
        None
    };
    // Event clips: the sources keep their packets only when a `clips` sink will use them.
    let keep_s = cfg
        .nodes
        .iter()
        .filter_map(|n| match &n.kind {
            NodeKind::Clips(c) => Some(*c.pre_s.get_ref()),
            _ => None,
        })
        .reduce(f64::max);
    let clips = keep_s.filter(|_| !opts.null_sinks).map(crate::runtime::clips::ClipHub::new);
    for (i, node) in cfg.nodes.iter().enumerate() {
        // A template of streams added at run time opens nothing now.
        if sources::template::is_template(node) {
            match sources::template::build(cfg, node, i as u32, pool_size, opts.max_frames, clips.clone()) {
                Ok(Some(t)) => bodies.push(Body::Source(Box::new(t))),
                Ok(None) => {}
                Err(d) => diags.push(d),
            }
            continue;
        }
        // Without ONNX Runtime (reported once, above) its nodes are not built.
        if needs_ort(&node.kind) && ort.is_none() {
            continue;
        }
        let body = if opts.null_sinks && node.role == Role::Sink {
            Ok(Body::Sink(Box::new(sinks::NullSink)))
        } else {
            let cx = BuildCtx {
                cfg,
                graph,
                opts,
                node,
                index: i,
                name: Arc::from(node.name.as_str()),
                pool_size,
                ort,
                models: &models,
                clips: clips.clone(),
                #[cfg(feature = "bus")]
                run: &run,
            };
            builder(&node.kind).build(&cx)
        };
        match body {
            Ok(b) => bodies.push(b),
            Err(d) => diags.push(d),
        }
    }
    if diags.is_empty() {
        Ok((bodies, models.into_inner()))
    } else {
        diags.sort();
        Err(diags)
    }
}
