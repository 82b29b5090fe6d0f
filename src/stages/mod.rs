//! Runtime stages, built from their configs.
//!
//! A node is one of three shapes: a [`Source`] that produces frames, a
//! [`Stage`] that attaches results to each frame (one in, one out), or a
//! [`Sink`] that consumes frames. The runtime owns threads, queues and
//! accounting; stages only see frames.

pub mod analytics;
pub mod crop;
pub mod infer;
pub mod level;
pub mod postprocess;
pub mod preprocess;
#[cfg(feature = "python")]
pub mod python;
pub mod scalers;
pub mod sinks;
pub mod sources;
pub mod track;
pub mod vad;

use std::path::PathBuf;
use std::sync::Arc;

use crate::backend::ort::OrtRuntime;
use crate::config::{Diagnostic, Diagnostics, NodeKind, PipelineConfig};
use crate::graph::Graph;
pub use crate::runtime::node::{Body, OutputLosses, Sink, Source, Stage, StageError};

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

/// Load ONNX Runtime as the config and options say.
pub fn ort_runtime(cfg: &PipelineConfig, opts: &BuildOptions) -> Result<&'static OrtRuntime, Diagnostic> {
    let toml_lib = match &cfg.settings.ort_library {
        Some(s) => Some((cfg.resolve_path(s)?, s.span())),
        None => None,
    };
    let explicit = match (&opts.ort_library, &toml_lib) {
        (Some(p), _) => Some((p.as_path(), "--ort-library")),
        (None, Some((p, _))) => Some((p.as_path(), "[pipeline] ort_library")),
        _ => None,
    };
    crate::backend::ort::runtime(explicit).map_err(|e| {
        let d = match &toml_lib {
            Some((_, span)) if opts.ort_library.is_none() => cfg.diag(span.clone(), e.to_string()),
            _ => Diagnostic::whole_file(&cfg.file, e.to_string()),
        };
        d.with_help("run scripts/fetch-models.sh, or point ORT_DYLIB_PATH, --ort-library or [pipeline] ort_library at libonnxruntime.so")
    })
}

/// A text file the config names (dictionary, labels), errors located at the key.
fn read_listed(cfg: &PipelineConfig, value: &toml::Spanned<String>, what: &str) -> Result<String, Diagnostic> {
    let path = cfg.resolve_path(value)?;
    std::fs::read_to_string(&path).map_err(|e| cfg.diag(value.span(), format!("cannot read {what} {}: {e}", path.display())))
}

/// An upstream model (as written in the config) and one of its metadata values.
type ModelMetadata<'a> = (&'a toml::Spanned<String>, Option<String>);

/// The model of the infer stage feeding node `i` (as written in the config)
/// and its custom metadata `key`; `None` when no infer stage (or no runtime) feeds it.
fn upstream_metadata<'a>(
    cfg: &'a PipelineConfig,
    graph: &Graph,
    i: usize,
    key: &str,
    rt: Option<&OrtRuntime>,
) -> Result<Option<ModelMetadata<'a>>, Diagnostic> {
    let infer = graph.producers[i].iter().find_map(|&p| match &cfg.nodes[p].kind {
        NodeKind::Infer(ic) => Some(ic),
        _ => None,
    });
    let (Some(ic), Some(rt)) = (infer, rt) else { return Ok(None) };
    let model = cfg.resolve_path(&ic.model)?;
    let report = crate::backend::ort::model_report(rt, &model).map_err(|e| cfg.diag(ic.model.span(), e.to_string()))?;
    Ok(Some((&ic.model, report.metadata.get(key).cloned())))
}

/// The recogniser's characters: the `dictionary` file, else the `character`
/// metadata of the model in the infer stage feeding node `i`.
fn charset(
    cfg: &PipelineConfig,
    graph: &Graph,
    i: usize,
    c: &crate::config::TextRecognitionConfig,
    rt: Option<&OrtRuntime>,
) -> Result<postprocess::ctc::Charset, Diagnostic> {
    let node = &cfg.nodes[i];
    if let Some(d) = &c.dictionary {
        return Ok(postprocess::ctc::Charset::new(&read_listed(cfg, d, "dictionary")?, c.blank));
    }
    match upstream_metadata(cfg, graph, i, "character", rt)? {
        Some((_, Some(chars))) => Ok(postprocess::ctc::Charset::new(&chars, c.blank)),
        Some((model, None)) => Err(cfg
            .diag(node.kind_span.clone(), format!("model {} has no `character` metadata", model.get_ref()))
            .with_help("set `dictionary = \"keys.txt\"` (one character per line)")),
        None => Err(cfg
            .diag(node.kind_span.clone(), format!("text_recognition `{}` has no dictionary", node.name))
            .with_help("set `dictionary = \"keys.txt\"`, or feed it an infer stage whose model has `character` metadata")),
    }
}

/// Class names: the `labels` file, else the `names` metadata of the model
/// feeding node `i` (ultralytics' format), else none.
fn labels_for(
    cfg: &PipelineConfig,
    graph: &Graph,
    i: usize,
    labels: Option<&toml::Spanned<String>>,
    rt: Option<&OrtRuntime>,
) -> Result<Vec<String>, Diagnostic> {
    if let Some(l) = labels {
        return Ok(read_listed(cfg, l, "labels")?.lines().map(|s| s.trim().to_string()).collect());
    }
    Ok(upstream_metadata(cfg, graph, i, "names", rt)?.and_then(|(_, n)| n).map(|n| postprocess::yolo::parse_names(&n)).unwrap_or_default())
}

/// The preprocess that decides for gated infer node `i` (`interval`,
/// `motion`) which frames to skip, so that skipped frames are not
/// preprocessed: its one producer, a preprocess feeding nothing else.
fn gate_in_preprocess(cfg: &PipelineConfig, graph: &Graph, i: usize) -> Option<usize> {
    match (&cfg.nodes[i].kind, &graph.producers[i][..]) {
        (NodeKind::Infer(_), &[p]) if matches!(cfg.nodes[p].kind, NodeKind::Preprocess(_)) && graph.consumers[p] == [i] => Some(p),
        _ => None,
    }
}

pub use crate::graph::ModelIo;

/// Build every node. All errors are collected.
pub fn build(cfg: &PipelineConfig, graph: &Graph, opts: &BuildOptions) -> Result<(Vec<Body>, ModelIo), Diagnostics> {
    let mut diags = Diagnostics::default();
    let mut bodies = Vec::new();
    let mut models = ModelIo::new();
    let pool_size = graph.buffers_in_flight();
    // This run's id, in every message the bus sinks send (docs/messages.md).
    #[cfg(feature = "bus")]
    let run = crate::bus::RunId::new();
    let needs_ort = cfg.nodes.iter().any(|n| matches!(n.kind, NodeKind::Infer(_) | NodeKind::Vad(_)));
    let rt = if needs_ort {
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
    for (i, node) in cfg.nodes.iter().enumerate() {
        let name: Arc<str> = Arc::from(node.name.as_str());
        // A template of streams added at run time opens nothing now.
        if sources::template::is_template(node) {
            match sources::template::build(cfg, node, i as u32, pool_size, opts.max_frames) {
                Ok(Some(t)) => bodies.push(Body::Source(Box::new(t))),
                Ok(None) => {}
                Err(d) => diags.push(d),
            }
            continue;
        }
        let body = match &node.kind {
            NodeKind::TestSrc(c) => Ok(Body::Source(Box::new(sources::testsrc::TestSrc::new(c, pool_size, opts.max_frames)))),
            NodeKind::Audio(c) => sources::audio::AudioSource::build(cfg, node, c, pool_size, opts.max_frames, opts.shutdown.as_ref())
                .map(|s| Body::Source(s.boxed())),
            NodeKind::Vad(c) => match rt {
                Some(rt) => vad::Vad::build(cfg, name, c, rt).map(|s| Body::Stage(Box::new(s))),
                None => continue,
            },
            NodeKind::ImageSequence(c) => {
                sources::images::ImageSequence::build(cfg, node, c, pool_size, opts.max_frames).map(|s| Body::Source(Box::new(s)))
            }
            NodeKind::Dir(c) => sources::dir::DirSource::build(cfg, node, c, pool_size, opts.batch_state, opts.max_frames)
                .map(|s| Body::Source(Box::new(s))),
            NodeKind::File(c) if *c.backend.get_ref() == crate::config::DecodeBackend::Gstreamer => {
                #[cfg(feature = "gstreamer")]
                {
                    sources::gst::GstSource::build(cfg, node, c, pool_size, opts.max_frames).map(|s| Body::Source(Box::new(s)) as Body)
                }
                #[cfg(not(feature = "gstreamer"))]
                Err(cfg.diag(c.backend.span(), format!("source `{}`: this build has no GStreamer backend", node.name))
                    .with_help("build with the `gstreamer` feature (on by default), or use backend = \"ffmpeg\""))
            }
            NodeKind::File(c) => sources::file::FileSource::build(cfg, node, c, i as u32, pool_size, opts.max_frames, opts.shutdown.as_ref())
                .map(|s| Body::Source(s.boxed())),
            NodeKind::AudioTestSrc(c) => Ok(Body::Source(Box::new(sources::audiotest::AudioTestSrc::new(c, pool_size, opts.max_frames)))),
            NodeKind::AudioLevel(c) => Ok(Body::Stage(Box::new(level::AudioLevel::new(name, c.clone())))),
            NodeKind::Rtsp(c) => {
                sources::rtsp::RtspSource::build(cfg, node, c, i as u32, pool_size, opts.max_frames).map(|s| Body::Source(Box::new(s)))
            }
            NodeKind::Preprocess(c) => preprocess::Preprocess::new(name.clone(), c, pool_size)
                .map(|mut p| {
                    let gpu_consumers = !graph.consumers[i].is_empty()
                        && graph.consumers[i].iter().all(|&n| {
                            matches!(&cfg.nodes[n].kind, NodeKind::Infer(ic)
                                if ic.providers.get_ref().first().is_some_and(|p| p.name != crate::config::ProviderName::Cpu))
                        });
                    p.keep_on_device(gpu_consumers);
                    if let [c] = graph.consumers[i][..]
                        && gate_in_preprocess(cfg, graph, c) == Some(i)
                        && let NodeKind::Infer(ic) = &cfg.nodes[c].kind
                        && let Some(g) = crate::gating::Gate::of(ic)
                    {
                        p.set_gate(g);
                    }
                    Body::Stage(Box::new(p)) as Body
                })
                .map_err(|e| {
                    let span = c.device.as_ref().map(|d| d.span()).unwrap_or(c.width.span());
                    cfg.diag(span, format!("stage `{name}`: device = \"cuda\": {e}"))
                        .with_help("use device = \"auto\" (the GPU for NVDEC frames only) or \"cpu\"; `infer-stream doctor` says what this machine has")
                }),
            NodeKind::Infer(c) => match rt {
                Some(rt) => {
                    let warm = graph.preprocess_shape(cfg, i);
                    let whole_frames = graph.producers[i].iter().all(|&p| matches!(cfg.nodes[p].kind, NodeKind::Preprocess(_)));
                    infer::Infer::build(cfg, name, c, rt, warm, whole_frames, pool_size).map(|mut s| {
                        models.insert(node.name.clone(), (s.inputs().to_vec(), s.outputs().to_vec()));
                        if gate_in_preprocess(cfg, graph, i).is_none()
                            && let Some(g) = crate::gating::Gate::of(c)
                        {
                            s.set_gate(g);
                        }
                        Body::Stage(Box::new(s))
                    })
                }
                None => continue,
            },
            NodeKind::TextDetection(c) => Ok(Body::Stage(Box::new(postprocess::db::TextDetection::new(name, c.clone())))),
            NodeKind::Detection(c) => labels_for(cfg, graph, i, c.labels.as_ref(), rt)
                .map(|names| Body::Stage(Box::new(postprocess::yolo::Yolo::new(name, c.clone(), names)) as Box<dyn Stage>)),
            NodeKind::Classification(c) => match labels_for(cfg, graph, i, c.labels.as_ref(), rt) {
                Ok(l) => Ok(Body::Stage(Box::new(postprocess::classify::Classification::new(name, c.clone(), l)))),
                Err(d) => Err(d),
            },
            NodeKind::Crop(c) => Ok(Body::Stage(Box::new(crop::Crop::new(name, c, pool_size)))),
            NodeKind::Track(c) => Ok(Body::Stage(Box::new(track::Track::new(name, c)))),
            NodeKind::Analytics(c) => Ok(Body::Stage(Box::new(analytics::AnalyticsStage::new(name, c)))),
            #[cfg(feature = "python")]
            NodeKind::Python(c) => python::PythonStage::build(cfg, node, c, pool_size).map(|s| Body::Stage(Box::new(s))),
            #[cfg(not(feature = "python"))]
            NodeKind::Python(_) => Err(crate::features::node_not_compiled(cfg, node, "python")),
            NodeKind::Detections(c) => sources::detections::DetectionsSource::build(cfg, c, opts.max_frames).map(|s| Body::Source(Box::new(s))),
            #[cfg(feature = "bus")]
            NodeKind::KafkaJobs(c) => sources::kafka::KafkaSource::build(cfg, node, c, pool_size).map(|s| Body::Source(Box::new(s))),
            #[cfg(not(feature = "bus"))]
            NodeKind::KafkaJobs(_) => Err(crate::features::node_not_compiled(cfg, node, "bus")),
            NodeKind::Request(c) => sources::request::RequestSource::build(cfg, node, c, pool_size).map(|s| Body::Source(Box::new(s))),
            NodeKind::TextRecognition(c) => match charset(cfg, graph, i, c, rt) {
                Ok(cs) => Ok(Body::Stage(Box::new(postprocess::ctc::TextRecognition::new(name, c.clone(), cs)))),
                Err(d) => Err(d),
            },
            _ if opts.null_sinks => Ok(Body::Sink(Box::new(sinks::NullSink))),
            NodeKind::Ndjson(c) => sinks::ndjson::NdjsonSink::build(cfg, c).map(|s| Body::Sink(Box::new(s))),
            NodeKind::Null(_) => Ok(Body::Sink(Box::new(sinks::NullSink))),
            NodeKind::Images(c) => sinks::images::Images::build(cfg, name, c).map(|s| Body::Sink(Box::new(s))),
            NodeKind::Video(c) => {
                let streams: Vec<&str> =
                    crate::graph::upstream_sources(cfg, &graph.producers, i).into_iter().map(|j| cfg.nodes[j].name.as_str()).collect();
                sinks::video::VideoSink::build(cfg, &node.name, c, &streams).map(|s| Body::Sink(Box::new(s)))
            }
            NodeKind::Subtitles(c) => sinks::subtitles::Subtitles::build(cfg, c).map(|s| Body::Sink(Box::new(s))),
            #[cfg(feature = "bus")]
            NodeKind::Kafka(c) => sinks::kafka::KafkaSink::build(cfg, node, c, &run).map(|s| Body::Sink(Box::new(s))),
            #[cfg(feature = "bus")]
            NodeKind::Mqtt(c) => sinks::mqtt::MqttSink::build(cfg, node, c, &run).map(|s| Body::Sink(Box::new(s))),
            #[cfg(not(feature = "bus"))]
            NodeKind::Kafka(_) | NodeKind::Mqtt(_) => Err(crate::features::node_not_compiled(cfg, node, "bus")),
        };
        match body {
            Ok(b) => bodies.push(b),
            Err(d) => diags.push(d),
        }
    }
    if diags.is_empty() {
        Ok((bodies, models))
    } else {
        diags.sort();
        Err(diags)
    }
}
