//! What building a node is given, and the trait each kind's config
//! implements to build its node.
//!
//! A kind's `impl Build for XConfig` lives in the file of the node it builds
//! (`stages/track.rs` builds `TrackConfig`); the registry in [`super::build`]
//! names each kind once. The helpers here answer questions several kinds ask
//! of the graph: which model feeds a node, its labels, whether a preprocess
//! gates for the infer stage after it.

use std::cell::RefCell;
use std::sync::Arc;

use crate::backend::ort::OrtRuntime;
use crate::config::{Diagnostic, NodeConfig, NodeKind, PipelineConfig};
use crate::graph::{Graph, ModelIo};
use crate::runtime::node::Body;

use super::BuildOptions;

/// A node kind's config builds its node.
pub trait Build {
    /// Build the node for `cx.node`; errors are located in the config.
    fn build(&self, cx: &BuildCtx<'_>) -> Result<Body, Diagnostic>;
}

/// One node's view of the build: the pipeline, its graph, the options, the
/// node itself and what the whole run shares (buffers, ONNX Runtime, run id).
pub struct BuildCtx<'a> {
    pub cfg: &'a PipelineConfig,
    pub graph: &'a Graph,
    pub opts: &'a BuildOptions,
    pub node: &'a NodeConfig,
    /// The node's index in `cfg.nodes` (and the graph).
    pub index: usize,
    /// The node's name, shared with the frames' results.
    pub name: Arc<str>,
    /// Buffers each pool may hand out: what the graph can hold in flight.
    pub pool_size: usize,
    /// ONNX Runtime, when a node needs it and it loaded.
    pub(super) ort: Option<&'static OrtRuntime>,
    /// The inputs and outputs of each model built so far (checked against
    /// the stages they feed once every node is built).
    pub(super) models: &'a RefCell<ModelIo>,
    /// Event clips: the hub of packet rings, when the pipeline has a `clips` sink.
    pub clips: Option<Arc<crate::runtime::clips::ClipHub>>,
    /// This run's id, in every message the bus sinks send (docs/messages.md).
    #[cfg(feature = "bus")]
    pub run: &'a crate::bus::RunId,
}

impl BuildCtx<'_> {
    /// Frames each source stops after (benchmarks).
    pub fn max_frames(&self) -> Option<u64> {
        self.opts.max_frames
    }

    /// ONNX Runtime for a node that runs a model. The registry builds no such
    /// node when the runtime failed to load (that error is reported once).
    pub fn ort(&self) -> Result<&'static OrtRuntime, Diagnostic> {
        self.ort.ok_or_else(|| self.cfg.diag(self.node.kind_span.clone(), "ONNX Runtime is not loaded"))
    }

    /// Record a model's inputs and outputs for the checks after the build.
    pub fn record_model(&self, io: (Vec<crate::backend::ort::IoInfo>, Vec<crate::backend::ort::IoInfo>)) {
        self.models.borrow_mut().insert(self.node.name.clone(), io);
    }

    /// The preprocess that decides for gated infer node `i` (`interval`,
    /// `motion`) which frames to skip, so that skipped frames are not
    /// preprocessed: its one producer, a preprocess feeding nothing else.
    pub fn gate_in_preprocess(&self, i: usize) -> Option<usize> {
        let (cfg, graph) = (self.cfg, self.graph);
        match (&cfg.nodes[i].kind, &graph.producers[i][..]) {
            (NodeKind::Infer(_), &[p]) if matches!(cfg.nodes[p].kind, NodeKind::Preprocess(_)) && graph.consumers[p] == [i] => Some(p),
            _ => None,
        }
    }

    /// A text file the config names (dictionary, labels), errors located at the key.
    pub fn read_listed(&self, value: &toml::Spanned<String>, what: &str) -> Result<String, Diagnostic> {
        let path = self.cfg.resolve_path(value)?;
        std::fs::read_to_string(&path).map_err(|e| self.cfg.diag(value.span(), format!("cannot read {what} {}: {e}", path.display())))
    }

    /// The model of the infer stage feeding this node (as written in the
    /// config) and its custom metadata `key`; `None` when no infer stage (or
    /// no runtime) feeds it.
    pub fn upstream_metadata(&self, key: &str) -> Result<Option<ModelMetadata<'_>>, Diagnostic> {
        let cfg = self.cfg;
        let infer = self.graph.producers[self.index].iter().find_map(|&p| match &cfg.nodes[p].kind {
            NodeKind::Infer(ic) => Some(ic),
            _ => None,
        });
        let (Some(ic), Some(rt)) = (infer, self.ort) else { return Ok(None) };
        let model = cfg.resolve_path(&ic.model)?;
        let report = crate::backend::ort::model_report(rt, &model).map_err(|e| cfg.diag(ic.model.span(), e.to_string()))?;
        Ok(Some((&ic.model, report.metadata.get(key).cloned())))
    }

    /// Class names: the `labels` file, else the `names` metadata of the model
    /// feeding this node (ultralytics' format), else none.
    pub fn labels(&self, labels: Option<&toml::Spanned<String>>) -> Result<Vec<String>, Diagnostic> {
        if let Some(l) = labels {
            return Ok(self.read_listed(l, "labels")?.lines().map(|s| s.trim().to_string()).collect());
        }
        Ok(self.upstream_metadata("names")?.and_then(|(_, n)| n).map(|n| super::postprocess::parse_names(&n)).unwrap_or_default())
    }
}

/// An upstream model (as written in the config) and one of its metadata values.
pub type ModelMetadata<'a> = (&'a toml::Spanned<String>, Option<String>);

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

/// A kind this build leaves out (its cargo feature is off): building it is a
/// located error that names the feature.
#[cfg_attr(all(feature = "bus", feature = "python"), allow(dead_code))]
pub(super) struct NotCompiled(pub &'static str);

impl Build for NotCompiled {
    fn build(&self, cx: &BuildCtx<'_>) -> Result<Body, Diagnostic> {
        Err(crate::features::node_not_compiled(cx.cfg, cx.node, self.0))
    }
}
