//! The pipeline graph, checked whole before anything runs: inputs resolve,
//! no cycles, connected nodes agree on data types, files exist, and models
//! fit the tensors fed to them. Every error is collected and located.
//!
//! This file holds the [`Graph`] and the structural check (names, edges, data
//! types, cycles); [`check`] calls the per-kind settings checks
//! (`settings.rs`) and the file checks (`files.rs`) in turn. Models are checked
//! in `models.rs`, the graph is drawn in `render.rs`.

use std::collections::HashMap;

mod files;
mod machine;
mod models;
mod render;
mod settings;
mod warnings;

pub use machine::check_machine;
pub use models::check_models;
pub use render::{to_dot, to_mermaid};
pub use settings::{is_raw_pcm, upstream_nodes as upstream};
pub use warnings::warnings;

use crate::config::{Diagnostic, Diagnostics, Layout, NodeKind, PipelineConfig, Role, diag};

/// Models' declared inputs and outputs, per infer node.
pub type ModelIo = HashMap<String, (Vec<crate::backend::ort::IoInfo>, Vec<crate::backend::ort::IoInfo>)>;

/// What flows along an edge.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DataType {
    Video,
    Audio,
    Speech,
    Level,
    Tensor,
    ModelOutputs,
    TextBoxes,
    Crops,
    Texts,
    Objects,
    Classes,
    Tracks,
    /// A `python` stage: its input's frames with whatever its code adds
    /// (boxes, tracks' rules, fields): accepted wherever frames are.
    Any,
    /// Sinks produce nothing.
    Nothing,
}

impl DataType {
    pub fn describe(self) -> &'static str {
        match self {
            DataType::Video => "video frames",
            DataType::Audio => "audio windows",
            DataType::Speech => "voice activity",
            DataType::Level => "audio levels",
            DataType::Tensor => "model input tensors",
            DataType::ModelOutputs => "model outputs",
            DataType::TextBoxes => "text boxes",
            DataType::Crops => "crop batches",
            DataType::Texts => "recognised text",
            DataType::Objects => "detections",
            DataType::Classes => "classes",
            DataType::Tracks => "tracks",
            DataType::Any => "what its code returns",
            DataType::Nothing => "nothing",
        }
    }
}

fn output_type(kind: &NodeKind) -> DataType {
    match kind {
        NodeKind::Dir(c) if c.media == crate::config::MediaKind::Audio => DataType::Audio,
        NodeKind::KafkaJobs(c) if c.media == crate::config::MediaKind::Audio => DataType::Audio,
        NodeKind::KafkaJobs(_) => DataType::Video,
        NodeKind::Rtsp(c) if c.media == crate::config::MediaKind::Audio => DataType::Audio,
        NodeKind::File(_) | NodeKind::Rtsp(_) | NodeKind::Dir(_) => DataType::Video,
        NodeKind::Audio(_) | NodeKind::AudioTestSrc(_) => DataType::Audio,
        NodeKind::TestSrc(_) | NodeKind::ImageSequence(_) | NodeKind::Request(_) | NodeKind::Redact(_) => DataType::Video,
        NodeKind::Vad(_) => DataType::Speech,
        NodeKind::AudioLevel(_) => DataType::Level,
        NodeKind::Preprocess(_) => DataType::Tensor,
        NodeKind::Infer(_) => DataType::ModelOutputs,
        NodeKind::TextDetection(_) => DataType::TextBoxes,
        NodeKind::Crop(_) => DataType::Crops,
        NodeKind::TextRecognition(_) => DataType::Texts,
        NodeKind::Detection(_) | NodeKind::Detections(_) => DataType::Objects,
        NodeKind::Track(_) | NodeKind::Analytics(_) => DataType::Tracks,
        NodeKind::Python(_) => DataType::Any,
        NodeKind::Classification(_) => DataType::Classes,
        NodeKind::Ndjson(_)
        | NodeKind::Null(_)
        | NodeKind::Subtitles(_)
        | NodeKind::Images(_)
        | NodeKind::Video(_)
        | NodeKind::Clips(_)
        | NodeKind::Kafka(_)
        | NodeKind::Mqtt(_) => DataType::Nothing,
    }
}

/// What a node accepts (`None`: anything), and how to fix a mismatch.
fn input_type(kind: &NodeKind) -> Option<(&'static [DataType], &'static str)> {
    match kind {
        NodeKind::Preprocess(_) => Some((&[DataType::Video], "connect a video source here")),
        NodeKind::Vad(_) | NodeKind::AudioLevel(_) => Some((&[DataType::Audio], "connect an `audio` source here")),
        NodeKind::Video(_) => Some((
            &[
                DataType::Video,
                DataType::Tensor,
                DataType::ModelOutputs,
                DataType::TextBoxes,
                DataType::Crops,
                DataType::Texts,
                DataType::Objects,
                DataType::Classes,
                DataType::Tracks,
            ],
            "connect a video source, or a stage that works on video frames",
        )),
        NodeKind::Subtitles(_) => Some((&[DataType::Texts, DataType::Speech], "name a `text_recognition` or `vad` stage in `inputs`")),
        NodeKind::Infer(_) => Some((
            &[DataType::Tensor, DataType::Crops],
            "put a `preprocess` (whole frames) or `crop` (regions) stage in between and name it in `inputs`",
        )),
        NodeKind::TextDetection(_) => Some((&[DataType::ModelOutputs], "name an `infer` stage running a text detection model in `inputs`")),
        NodeKind::Track(_) => Some((
            &[DataType::Objects, DataType::TextBoxes],
            "name a stage that yields boxes (`detection`, `text_detection`) or a `detections` source in `inputs`",
        )),
        NodeKind::Analytics(_) => Some((&[DataType::Tracks], "name a `track` stage in `inputs`")),
        NodeKind::Redact(_) => Some((
            &[DataType::Objects, DataType::TextBoxes, DataType::Texts, DataType::Tracks],
            "name the stage whose boxes are to be redacted (`detection`, `text_detection`, `track`) in `inputs`",
        )),
        NodeKind::Crop(_) => Some((
            &[DataType::TextBoxes, DataType::Classes, DataType::Tracks],
            "name a `text_detection` stage (or a `classification` of its regions, or a `track` stage after it) in `inputs`: its boxes are the regions to crop",
        )),
        NodeKind::TextRecognition(_) => {
            Some((&[DataType::ModelOutputs], "name an `infer` stage that runs a recogniser on a `crop` stage's output"))
        }
        _ => None,
    }
}

fn describe_types(types: &[DataType]) -> String {
    types.iter().map(|t| t.describe()).collect::<Vec<_>>().join(" or ")
}

/// The checked graph: edges by node index, in the config's node order.
#[derive(Debug, Clone)]
pub struct Graph {
    pub producers: Vec<Vec<usize>>,
    pub consumers: Vec<Vec<usize>>,
    /// Nodes in dependency order (every producer before its consumers).
    pub order: Vec<usize>,
    queue_total: usize,
}

impl Graph {
    /// Buffers that can be alive at once: all queues full plus one per node, plus slack.
    pub fn buffers_in_flight(&self) -> usize {
        self.queue_total + self.producers.len() + 4
    }

    /// The tensor shape produced by the preprocess feeding node `i`, if there is one.
    pub fn preprocess_shape(&self, cfg: &PipelineConfig, i: usize) -> Option<Vec<usize>> {
        self.producers[i].iter().find_map(|&p| match &cfg.nodes[p].kind {
            NodeKind::Preprocess(c) => {
                let (w, h) = (*c.width.get_ref() as usize, *c.height.get_ref() as usize);
                Some(match c.layout {
                    Layout::Nchw => vec![1, 3, h, w],
                    Layout::Nhwc => vec![1, h, w, 3],
                })
            }
            NodeKind::Crop(c) => Some(vec![1, 3, *c.height.get_ref() as usize, (c.max_width as usize).min(320)]),
            _ => None,
        })
    }
}

/// Most frames one queue may hold.
pub const MAX_QUEUE: usize = 4096;
/// Largest side of a model tensor (preprocess and crop sizes).
pub const MAX_TENSOR_SIDE: u32 = 16384;
/// Most frames in one batch, and the longest wait to fill one.
pub const MAX_BATCH: usize = 1024;
pub const MAX_BATCH_WAIT_MS: u64 = 60_000;
/// Longest timeout or backoff a source may be given.
pub const MAX_WAIT_MS: u64 = 86_400_000;

/// Check structure, types and files. Models are checked by [`check_models`].
pub fn check(cfg: &PipelineConfig) -> Result<Graph, Diagnostics> {
    let mut diags = Diagnostics::default();
    let n = cfg.nodes.len();
    let mut index: HashMap<&str, usize> = HashMap::new();
    for (i, node) in cfg.nodes.iter().enumerate() {
        if let Some(&first) = index.get(node.name.as_str()) {
            let f = &cfg.nodes[first];
            diags.push(
                cfg.diag(node.name_span.clone(), format!("name `{}` is used twice (also {} `{}`)", node.name, f.role.noun(), f.name))
                    .with_help("node names are shared by sources, stages and sinks; rename one"),
            );
        } else {
            index.insert(&node.name, i);
        }
    }
    let failed = |role: Role| cfg.failed.iter().any(|(_, r)| *r == role);
    if !cfg.nodes.iter().any(|n| n.role == Role::Source) && !failed(Role::Source) {
        diags.push(
            Diagnostic::whole_file(&cfg.file, "the pipeline has no sources")
                .with_help("add a `[sources.NAME]` table with `kind = \"file\"` and `uri = \"...\"`"),
        );
    }
    if !cfg.nodes.iter().any(|n| n.role == Role::Sink) && !failed(Role::Sink) {
        diags.push(
            Diagnostic::whole_file(&cfg.file, "the pipeline has no sinks")
                .with_help("add a `[sinks.NAME]` table, e.g. `kind = \"ndjson\"` with `path = \"results.ndjson\"`"),
        );
    }

    let mut producers = vec![Vec::new(); n];
    let mut consumers = vec![Vec::new(); n];
    for (i, node) in cfg.nodes.iter().enumerate() {
        for input in &node.inputs {
            let name = input.get_ref().as_str();
            if cfg.failed.iter().any(|(f, _)| f == name) {
                continue; // already reported where that node is defined
            }
            let Some(&p) = index.get(name) else {
                let mut d = cfg.diag(input.span(), format!("{} `{}` names unknown input `{name}`", node.role.noun(), node.name));
                d = match diag::closest(
                    name,
                    cfg.nodes
                        .iter()
                        .filter(|m| m.role != Role::Sink)
                        .map(|m| m.name.as_str())
                        .chain(cfg.failed.iter().filter(|f| f.1 != Role::Sink).map(|f| f.0.as_str())),
                ) {
                    Some(c) => d.with_help(format!("did you mean `{c}`?")),
                    None => d.with_help("inputs name sources or stages defined in this file"),
                };
                diags.push(d);
                continue;
            };
            let prod = &cfg.nodes[p];
            if prod.role == Role::Sink {
                diags.push(
                    cfg.diag(
                        input.span(),
                        format!("`{name}` is a sink and produces nothing; {} `{}` cannot take it as input", node.role.noun(), node.name),
                    )
                    .with_help("name the stage that feeds that sink instead"),
                );
                continue;
            }
            if p == i {
                diags.push(cfg.diag(input.span(), format!("cycle: [ {0} -> {0} ]", node.name)).with_help("a node cannot be its own input"));
                continue;
            }
            if producers[i].contains(&p) {
                diags.push(cfg.diag(input.span(), format!("input `{name}` is listed twice")).with_help("remove the duplicate"));
                continue;
            }
            producers[i].push(p);
            consumers[p].push(i);
            let got = output_type(&prod.kind);
            if let Some((want, help)) = input_type(&node.kind)
                && got != DataType::Any
                && !want.contains(&got)
            {
                diags.push(
                    cfg.diag(
                        input.span(),
                        format!(
                            "type mismatch: {} `{}` ({}) takes {}, but `{name}` ({}) produces {}",
                            node.role.noun(),
                            node.name,
                            node.kind.name(),
                            describe_types(want),
                            prod.kind.name(),
                            got.describe()
                        ),
                    )
                    .with_help(help),
                );
            }
        }
    }

    check_postprocess_inputs(cfg, &producers, &mut diags);
    settings::check_vad_windows(cfg, &producers, &mut diags);
    settings::check_testsrc(cfg, &mut diags);
    settings::check_tracking(cfg, &mut diags);
    settings::check_restart(cfg, &mut diags);
    settings::check_max_streams(cfg, &mut diags);
    settings::check_rtsp_sources(cfg, &mut diags);
    settings::check_input_formats(cfg, &mut diags);
    settings::check_limits(cfg, &mut diags);
    settings::check_crop_orientation(cfg, &mut diags);
    settings::check_gating(cfg, &producers, &mut diags);
    settings::check_video_sinks(cfg, &producers, &mut diags);
    settings::check_clips(cfg, &producers, &mut diags);
    files::check_output_files(cfg, &producers, &mut diags);
    for node in &cfg.nodes {
        diags.0.extend(crate::bus::check_settings(cfg, node));
    }

    // Cycles: depth-first search; each cycle is reported once, as its chain.
    let order = match topo_order(&producers) {
        Ok(o) => o,
        Err(cycle) => {
            let names: Vec<&str> = cycle.iter().map(|&i| cfg.nodes[i].name.as_str()).collect();
            let last = *cycle.last().expect("cycle has nodes");
            let first = cycle[0];
            let node = &cfg.nodes[first];
            let span =
                node.inputs.iter().find(|s| s.get_ref() == &cfg.nodes[last].name).map(|s| s.span()).unwrap_or(node.name_span.clone());
            diags.push(
                cfg.diag(span, format!("cycle: [ {} -> {} ]", names.join(" -> "), names[0]))
                    .with_help("frames must flow from sources to sinks; remove one of these inputs"),
            );
            Vec::new()
        }
    };

    files::check_input_files(cfg, &mut diags);

    let queue_total = cfg.nodes.iter().map(|n| n.queue.map_or(8, |q| q.capacity.get())).fold(0usize, usize::saturating_add);
    if diags.is_empty() {
        Ok(Graph { producers, consumers, order, queue_total })
    } else {
        diags.sort();
        Err(diags)
    }
}

/// Postprocessors need outputs of models run on the right thing: whole frames or crops.
fn check_postprocess_inputs(cfg: &PipelineConfig, producers: &[Vec<usize>], diags: &mut Diagnostics) {
    for (i, node) in cfg.nodes.iter().enumerate() {
        let (want_crops, what) = match node.kind {
            NodeKind::TextDetection(_) | NodeKind::Detection(_) => (false, "whole frames (a `preprocess` stage)"),
            NodeKind::TextRecognition(_) => (true, "crops (a `crop` stage)"),
            _ => continue,
        };
        for &p in &producers[i] {
            for &pp in &producers[p] {
                let on_crops = matches!(cfg.nodes[pp].kind, NodeKind::Crop(_));
                if on_crops != want_crops {
                    let span =
                        node.inputs.iter().find(|s| s.get_ref() == &cfg.nodes[p].name).map(|s| s.span()).unwrap_or(node.name_span.clone());
                    diags.push(cfg.diag(
                        span,
                        format!(
                            "{} `{}` reads a model run on {what}, but `{}` runs on the output of `{}` ({})",
                            node.kind.name(),
                            node.name,
                            cfg.nodes[p].name,
                            cfg.nodes[pp].name,
                            cfg.nodes[pp].kind.name()
                        ),
                    ));
                }
            }
        }
    }
}

/// The sources upstream of node `i`, in config order.
pub fn upstream_sources(cfg: &PipelineConfig, producers: &[Vec<usize>], i: usize) -> Vec<usize> {
    let mut seen = vec![false; producers.len()];
    let mut stack = vec![i];
    while let Some(j) = stack.pop() {
        if std::mem::replace(&mut seen[j], true) {
            continue;
        }
        stack.extend(&producers[j]);
    }
    (0..producers.len()).filter(|&j| seen[j] && cfg.nodes[j].role == Role::Source).collect()
}

/// Kahn's algorithm; on a cycle, returns one cycle's nodes in flow order.
fn topo_order(producers: &[Vec<usize>]) -> Result<Vec<usize>, Vec<usize>> {
    let n = producers.len();
    let mut indeg: Vec<usize> = producers.iter().map(Vec::len).collect();
    let mut consumers = vec![Vec::new(); n];
    for (i, ps) in producers.iter().enumerate() {
        for &p in ps {
            consumers[p].push(i);
        }
    }
    let mut ready: Vec<usize> = (0..n).filter(|&i| indeg[i] == 0).rev().collect();
    let mut order = Vec::with_capacity(n);
    while let Some(i) = ready.pop() {
        order.push(i);
        for &c in consumers[i].iter().rev() {
            indeg[c] -= 1;
            if indeg[c] == 0 {
                ready.push(c);
            }
        }
    }
    if order.len() == n {
        return Ok(order);
    }
    // Walk producers among the remaining nodes until one repeats.
    let stuck: Vec<bool> = indeg.iter().map(|&d| d > 0).collect();
    let start = (0..n).find(|&i| stuck[i]).expect("some node is stuck");
    let mut path = vec![start];
    let mut cur = start;
    loop {
        let next = *producers[cur].iter().find(|&&p| stuck[p]).expect("stuck node has a stuck producer");
        if let Some(pos) = path.iter().position(|&x| x == next) {
            let mut cycle = path[pos..].to_vec();
            cycle.reverse(); // producers were followed backwards
            return Err(cycle);
        }
        path.push(next);
        cur = next;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn topo_orders_producers_first() {
        // 0 -> 1 -> 2, 0 -> 2
        let producers = vec![vec![], vec![0], vec![1, 0]];
        assert_eq!(topo_order(&producers).unwrap(), vec![0, 1, 2]);
    }

    #[test]
    fn finds_a_cycle_in_flow_order() {
        // 0 -> 1 -> 2 -> 3 -> 1
        let producers = vec![vec![], vec![0, 3], vec![1], vec![2]];
        let c = topo_order(&producers).unwrap_err();
        assert_eq!(c.len(), 3);
        let pos = |x| c.iter().position(|&v| v == x).unwrap();
        assert_eq!((pos(2) + 3 - pos(1)) % 3, 1, "1 flows into 2: {c:?}");
        assert_eq!((pos(3) + 3 - pos(2)) % 3, 1, "2 flows into 3: {c:?}");
    }
}
