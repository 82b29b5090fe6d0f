//! The pipeline graph, checked whole before anything runs: inputs resolve,
//! no cycles, connected nodes agree on data types, files exist, and models
//! fit the tensors fed to them. Every error is collected and located.

use std::collections::HashMap;
use std::fmt::Write as _;

mod machine;
mod warnings;

pub use machine::check_machine;
pub use warnings::warnings;

use crate::config::{Diagnostic, Diagnostics, Layout, NodeKind, PipelineConfig, Role, diag, is_url, mask_credentials};

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
        NodeKind::TestSrc(_) | NodeKind::ImageSequence(_) | NodeKind::Request(_) => DataType::Video,
        NodeKind::Vad(_) => DataType::Speech,
        NodeKind::AudioLevel(_) => DataType::Level,
        NodeKind::Preprocess(_) => DataType::Tensor,
        NodeKind::Infer(_) => DataType::ModelOutputs,
        NodeKind::TextDetection(_) => DataType::TextBoxes,
        NodeKind::Crop(_) => DataType::Crops,
        NodeKind::TextRecognition(_) => DataType::Texts,
        NodeKind::Detection(_) | NodeKind::Detections(_) => DataType::Objects,
        NodeKind::Track(_) | NodeKind::Analytics(_) => DataType::Tracks,
        NodeKind::Classification(_) => DataType::Classes,
        NodeKind::Ndjson(_)
        | NodeKind::Null(_)
        | NodeKind::Subtitles(_)
        | NodeKind::Images(_)
        | NodeKind::Video(_)
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

    // Postprocessors need outputs of models run on the right thing: whole frames or crops.
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

    // Silero VAD takes 512-sample windows at 16 kHz or 256 at 8 kHz.
    for (i, node) in cfg.nodes.iter().enumerate() {
        if !matches!(node.kind, NodeKind::Vad(_)) {
            continue;
        }
        for &p in &producers[i] {
            if let NodeKind::Audio(a) = &cfg.nodes[p].kind {
                let ok = matches!((*a.sample_rate.get_ref(), *a.window.get_ref()), (16000, 512) | (8000, 256));
                if !ok {
                    diags.push(cfg.diag(a.window.span(), format!(
                        "vad `{}` needs 512-sample windows at 16000 Hz (or 256 at 8000 Hz), but `{}` makes {}-sample windows at {} Hz",
                        node.name, cfg.nodes[p].name, a.window.get_ref(), a.sample_rate.get_ref()
                    )).with_help("set sample_rate = 16000 and window = 512"));
                }
            }
        }
    }

    // Synthetic video is YUV 4:2:0: even sizes, a positive rate.
    for node in &cfg.nodes {
        if let NodeKind::TestSrc(t) = &node.kind {
            for v in [&t.width, &t.height] {
                if *v.get_ref() == 0 || v.get_ref() % 2 == 1 || *v.get_ref() > 8192 {
                    diags.push(cfg.diag(v.span(), format!("testsrc `{}`: sizes must be even and 2–8192, got {}", node.name, v.get_ref())));
                }
            }
            if !(t.rate > 0.0 && t.rate <= 1000.0) {
                diags.push(cfg.diag(node.kind_span.clone(), format!("testsrc `{}`: rate must be in (0, 1000], got {}", node.name, t.rate)));
            }
        }
    }

    // Tracker parameters and detection files: values that make sense.
    for node in &cfg.nodes {
        let mut bad = |span: std::ops::Range<usize>, what: &str| {
            diags.push(cfg.diag(span, format!("{} `{}`: {what}", node.kind.name(), node.name)));
        };
        match &node.kind {
            NodeKind::Track(t) => {
                let a = *t.track_activation_threshold.get_ref();
                if !(a > 0.0 && a < 1.0) {
                    bad(t.track_activation_threshold.span(), &format!("track_activation_threshold must be in (0, 1), got {a}"));
                }
                let m = *t.minimum_matching_threshold.get_ref();
                if !(m > 0.0 && m <= 1.0) {
                    bad(t.minimum_matching_threshold.span(), &format!("minimum_matching_threshold must be in (0, 1], got {m}"));
                }
                let r = *t.frame_rate.get_ref();
                if !(r > 0.0 && r <= 1000.0) {
                    bad(t.frame_rate.span(), &format!("frame_rate must be in (0, 1000], got {r}"));
                }
                if *t.minimum_consecutive_frames.get_ref() == 0 {
                    bad(t.minimum_consecutive_frames.span(), "minimum_consecutive_frames must be at least 1");
                }
            }
            NodeKind::Analytics(a) => {
                for (span, what) in crate::analytics::check(cfg, a) {
                    bad(if span.is_empty() { node.kind_span.clone() } else { span }, &what);
                }
            }
            NodeKind::Detections(d) => {
                let r = *d.rate.get_ref();
                if !(r > 0.0 && r <= 1000.0) {
                    bad(d.rate.span(), &format!("rate must be in (0, 1000], got {r}"));
                }
            }
            _ => {}
        }
    }

    // `restart` is for sources: a stage or sink has nothing to start again.
    for node in &cfg.nodes {
        if let Some(r) = &node.restart
            && node.role != crate::config::Role::Source
        {
            diags.push(
                cfg.diag(r.span(), format!("{} `{}`: `restart` applies to sources only", node.role.noun(), node.name))
                    .with_help("stages and sinks follow `on_error` (\"skip\" or \"stop\")"),
            );
        }
    }

    // `max_streams` belongs to templates of added streams (`dynamic = true`), and is 1 or more.
    for node in &cfg.nodes {
        let (dynamic, max) = match &node.kind {
            NodeKind::Rtsp(c) => (c.dynamic, &c.max_streams),
            NodeKind::File(c) => (c.dynamic, &c.max_streams),
            _ => continue,
        };
        match max {
            Some(m) if !dynamic => diags.push(
                cfg.diag(m.span(), format!("source `{}`: `max_streams` is for templates of added streams", node.name))
                    .with_help("set `dynamic = true` as well, or leave `max_streams` out"),
            ),
            Some(m) if *m.get_ref() == 0 => diags.push(
                cfg.diag(m.span(), format!("source `{}`: `max_streams` must be at least 1", node.name))
                    .with_help("leave it out for no limit but the pipeline's (`[pipeline] api.max_streams`)"),
            ),
            _ => {}
        }
    }

    // RTSP cameras: an rtsp:// URL and workable timings.
    for node in &cfg.nodes {
        if let NodeKind::Rtsp(r) = &node.kind {
            check_rtsp(cfg, &node.name, r, &mut diags);
        }
    }

    // Input formats: a demuxer FFmpeg has; raw video and raw audio say what the bytes are.
    for node in &cfg.nodes {
        let (format, what) = match &node.kind {
            NodeKind::File(c) => (&c.format, "video"),
            NodeKind::Audio(c) => (&c.format, "audio"),
            _ => continue,
        };
        let expanded = |v: &toml::Spanned<String>, diags: &mut Diagnostics| match cfg.expand(v) {
            Ok(s) => Some(s),
            Err(d) => {
                diags.push(d);
                None
            }
        };
        let format_name = format.as_ref().and_then(|f| expanded(f, &mut diags));
        if let (Some(f), Some(name)) = (format, &format_name)
            && !crate::backend::ffmpeg::input_format_exists(name)
        {
            diags.push(cfg.diag(f.span(), format!("source `{}`: FFmpeg has no input format `{name}`", node.name)).with_help(
                if what == "video" {
                    "e.g. rawvideo, mpegts, matroska, nut (ffmpeg -demuxers)"
                } else {
                    "e.g. s16le, f32le, wav (ffmpeg -demuxers)"
                },
            ));
            continue;
        }
        let raw = format_name.as_deref() == Some("rawvideo");
        if let NodeKind::File(c) = &node.kind {
            if raw {
                let missing: Vec<&str> = [("width", c.width.is_none()), ("height", c.height.is_none())]
                    .into_iter()
                    .filter_map(|(k, m)| m.then_some(k))
                    .collect();
                if !missing.is_empty() {
                    diags.push(
                        cfg.diag(
                            format.as_ref().expect("raw").span(),
                            format!("source `{}`: rawvideo needs {}", node.name, missing.join(" and ")),
                        )
                        .with_help("raw frames carry no header: set width, height (and pixel_format, rate) as the sender wrote them"),
                    );
                }
                for v in [&c.width, &c.height].into_iter().flatten() {
                    if *v.get_ref() == 0 || *v.get_ref() > 16384 {
                        diags.push(cfg.diag(v.span(), format!("source `{}`: sizes must be 1–16384, got {}", node.name, v.get_ref())));
                    }
                }
                if let Some(p) = &c.pixel_format
                    && let Some(pf) = expanded(p, &mut diags)
                    && !crate::backend::ffmpeg::pixel_format_exists(&pf)
                {
                    diags.push(
                        cfg.diag(p.span(), format!("source `{}`: unknown pixel format `{pf}`", node.name))
                            .with_help("e.g. yuv420p, nv12, rgb24, bgr24, gray (ffmpeg -pix_fmts)"),
                    );
                }
                if let Some(r) = &c.rate
                    && !(*r.get_ref() > 0.0 && *r.get_ref() <= 1000.0)
                {
                    diags.push(cfg.diag(r.span(), format!("source `{}`: rate must be in (0, 1000], got {}", node.name, r.get_ref())));
                }
            } else if let Some(span) = [
                c.pixel_format.as_ref().map(|v| v.span()),
                c.width.as_ref().map(|v| v.span()),
                c.height.as_ref().map(|v| v.span()),
                c.rate.as_ref().map(|v| v.span()),
            ]
            .into_iter()
            .flatten()
            .next()
            {
                diags.push(
                    cfg.diag(span, format!("source `{}`: pixel_format, width, height and rate describe raw video", node.name))
                        .with_help("add format = \"rawvideo\", or remove them (other formats say what they hold)"),
                );
            }
        }
        if let NodeKind::Audio(c) = &node.kind {
            let pcm = format_name.as_deref().is_some_and(is_raw_pcm);
            if pcm && c.input_rate.is_none() {
                diags.push(
                    cfg.diag(format.as_ref().expect("pcm").span(), format!("source `{}`: raw audio needs input_rate", node.name))
                        .with_help("set input_rate (and channels) as the sender wrote them, e.g. input_rate = 44100, channels = 2"),
                );
            }
            if !pcm && let Some(span) = c.input_rate.as_ref().map(|v| v.span()).or(c.channels.as_ref().map(|v| v.span())) {
                diags.push(
                    cfg.diag(span, format!("source `{}`: input_rate and channels describe raw audio", node.name))
                        .with_help("add format = \"s16le\" (or f32le, ...), or remove them"),
                );
            }
            for v in [&c.input_rate, &c.channels].into_iter().flatten() {
                if *v.get_ref() == 0 {
                    diags.push(cfg.diag(v.span(), format!("source `{}`: must be positive", node.name)));
                }
            }
        }
    }

    // Sizes that would exhaust memory or overflow at run time are refused here,
    // where they can be located, rather than found as an allocation failure later.
    for node in &cfg.nodes {
        if let Some(q) = node.queue
            && q.capacity.get() > MAX_QUEUE
        {
            diags.push(
                cfg.diag(
                    node.queue_span.clone(),
                    format!("{} `{}`: queue capacity {} is over {MAX_QUEUE}", node.role.noun(), node.name, q.capacity),
                )
                .with_help("a queue holds whole frames; a few (the default is 8) absorb jitter, more only add latency and memory"),
            );
        }
        match &node.kind {
            NodeKind::Preprocess(c) => {
                for v in [&c.width, &c.height] {
                    if *v.get_ref() == 0 || *v.get_ref() > MAX_TENSOR_SIDE {
                        diags.push(cfg.diag(
                            v.span(),
                            format!("preprocess `{}`: tensor sizes must be 1–{MAX_TENSOR_SIDE}, got {}", node.name, v.get_ref()),
                        ));
                    }
                }
            }
            NodeKind::Crop(c) => {
                let h = *c.height.get_ref();
                if h == 0 || h > MAX_TENSOR_SIDE || c.max_width == 0 || c.max_width > MAX_TENSOR_SIDE || c.min_width > c.max_width {
                    diags.push(cfg.diag(
                        c.height.span(),
                        format!(
                            "crop `{}`: height {h}, min_width {} and max_width {} must be 1–{MAX_TENSOR_SIDE}, with min_width ≤ max_width",
                            node.name, c.min_width, c.max_width
                        ),
                    ));
                }
            }
            NodeKind::Infer(c) => {
                if let Some(spanned) = &c.batch
                    && let b = spanned.get_ref()
                    && (b.max.get() > MAX_BATCH || b.timeout_ms > MAX_BATCH_WAIT_MS)
                {
                    diags.push(
                        cfg.diag(
                            spanned.span(),
                            format!(
                                "infer `{}`: batch max {} / timeout_ms {} out of range (max 1–{MAX_BATCH}, timeout_ms 0–{MAX_BATCH_WAIT_MS})",
                                node.name, b.max, b.timeout_ms
                            ),
                        )
                        .with_help("batches of a few frames, formed within milliseconds, e.g. batch = { max = 4, timeout_ms = 10 }"),
                    );
                }
            }
            _ => {}
        }
    }

    // A crop's `orientation` must name a classification stage.
    for node in &cfg.nodes {
        if let NodeKind::Crop(c) = &node.kind
            && let Some(o) = &c.orientation
            && !cfg.nodes.iter().any(|n| &n.name == o.get_ref() && matches!(n.kind, NodeKind::Classification(_)))
        {
            diags.push(
                cfg.diag(
                    o.span(),
                    format!("crop `{}`: `orientation` names `{}`, which is not a classification stage", node.name, o.get_ref()),
                )
                .with_help("name the `classification` stage that runs the orientation model on this crop's regions"),
            );
        }
    }

    check_gating(cfg, &producers, &mut diags);
    check_video_sinks(cfg, &producers, &mut diags);
    check_output_files(cfg, &producers, &mut diags);
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

    // Files that must exist before the run.
    for node in &cfg.nodes {
        let (value, what) = match &node.kind {
            // A GStreamer line that does not read `{uri}` (a test pattern, a camera element) needs no file.
            NodeKind::File(c) if c.launch.as_ref().is_some_and(|l| !l.get_ref().contains("{uri}")) => continue,
            NodeKind::File(c) => (&c.uri, "media file"),
            NodeKind::Audio(c) => (&c.uri, "media file"),
            NodeKind::Infer(c) => (&c.model, "model file"),
            NodeKind::Vad(c) => (&c.model, "model file"),
            _ => continue,
        };
        match cfg.resolve_path(value) {
            // `${VAR}` may hold a URL: look at the expanded value.
            Ok(p) if is_url(&p.to_string_lossy()) || p.as_os_str() == "-" => {}
            Ok(p) if !p.exists() => {
                let help = if what == "model file" {
                    "run scripts/fetch-models.sh, or fix the path (relative paths start at the pipeline file's folder)"
                } else {
                    "fix the path (relative paths start at the pipeline file's folder); scripts/make-samples.sh makes the bundled samples"
                };
                diags.push(cfg.diag(value.span(), format!("{what} not found: {}", p.display())).with_help(help));
            }
            Ok(p) if p.is_dir() => diags.push(cfg.diag(value.span(), format!("{what} is a folder: {}", p.display()))),
            Ok(_) => {}
            Err(d) => diags.push(d),
        }
    }
    if let Some(s) = &cfg.settings.ort_library
        && let Err(d) = cfg.resolve_path(s)
    {
        diags.push(d);
    }

    let queue_total = cfg.nodes.iter().map(|n| n.queue.map_or(8, |q| q.capacity.get())).fold(0usize, usize::saturating_add);
    if diags.is_empty() {
        Ok(Graph { producers, consumers, order, queue_total })
    } else {
        diags.sort();
        Err(diags)
    }
}

/// Nodes reached from `i` following `next` (producers: upstream; consumers: downstream), `i` excluded.
fn reached(next: &dyn Fn(usize) -> Vec<usize>, n: usize, i: usize) -> Vec<bool> {
    let mut seen = vec![false; n];
    let mut todo = next(i);
    while let Some(j) = todo.pop() {
        if j < n && !seen[j] {
            seen[j] = true;
            todo.extend(next(j));
        }
    }
    seen
}

/// `interval` needs a `track` stage downstream (it predicts the skipped
/// frames); `once_per_track` a `track` stage upstream (it gives the ids);
/// `motion` settings in range.
fn check_gating(cfg: &PipelineConfig, producers: &[Vec<usize>], diags: &mut Diagnostics) {
    let n = cfg.nodes.len();
    let up = |i: usize| producers.get(i).cloned().unwrap_or_default();
    let down = |i: usize| (0..n).filter(|&j| producers[j].contains(&i)).collect::<Vec<_>>();
    let is_track = |j: usize| matches!(cfg.nodes[j].kind, NodeKind::Track(_));
    for (i, node) in cfg.nodes.iter().enumerate() {
        match &node.kind {
            NodeKind::Infer(c) => {
                if *c.interval.get_ref() > 0 && !reached(&down, n, i).iter().enumerate().any(|(j, r)| *r && is_track(j)) {
                    diags.push(
                        cfg.diag(
                            c.interval.span(),
                            format!(
                                "infer `{}`: interval = {} skips frames, but no `track` stage downstream predicts their boxes",
                                node.name,
                                c.interval.get_ref()
                            ),
                        )
                        .with_help("add a `track` stage after the detection stage that reads this one, or remove `interval`"),
                    );
                }
                if let Some(m) = &c.motion {
                    let v = m.get_ref();
                    let in_range = (0.0..=1.0).contains(&v.min_area)
                        && v.alpha > 0.0
                        && v.alpha <= 1.0
                        && (8..=4096).contains(&v.width)
                        && (2..=64).contains(&v.cell)
                        && (0.0..=1.0).contains(&v.cell_area);
                    if !in_range {
                        diags.push(
                            cfg.diag(
                                m.span(),
                                format!(
                                    "infer `{}`: motion min_area {}, alpha {}, width {}, cell {} and cell_area {} out of range \
                                     (min_area 0–1, alpha over 0 up to 1, width 8–4096, cell 2–64, cell_area 0–1)",
                                    node.name, v.min_area, v.alpha, v.width, v.cell, v.cell_area
                                ),
                            )
                            .with_help("e.g. motion = { threshold = 25, min_area = 0.002 }"),
                        );
                    }
                }
            }
            NodeKind::Crop(c) if *c.once_per_track.get_ref() && !reached(&up, n, i).iter().enumerate().any(|(j, r)| *r && is_track(j)) => {
                diags.push(
                    cfg.diag(
                        c.once_per_track.span(),
                        format!("crop `{}`: once_per_track needs a `track` stage upstream (it gives each region its track id)", node.name),
                    )
                    .with_help("put a `track` stage between the detection stage and this crop, or remove `once_per_track`"),
                );
            }
            _ => {}
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

/// `path` with `.` and `..` worked out in the text (nothing need exist yet).
fn lexical(path: &std::path::Path) -> std::path::PathBuf {
    use std::path::Component;
    let mut out = std::path::PathBuf::new();
    for c in path.components() {
        match c {
            Component::CurDir => {}
            Component::ParentDir if matches!(out.components().next_back(), Some(Component::Normal(_))) => {
                out.pop();
            }
            c => out.push(c),
        }
    }
    out
}

/// Why a sink could not write `path` (a file, or a folder for `images`), when
/// that can be told before the run: a folder where the file goes, a file
/// where a folder goes, `{stream}` outside the file name.
fn unwritable(path: &std::path::Path, folder: bool, templated: bool) -> Option<String> {
    if templated && path.parent().is_some_and(|d| d.to_string_lossy().contains("{stream}")) {
        return Some("`{stream}` may only appear in the file name, not in a folder (e.g. path = \"out/{stream}.ndjson\")".into());
    }
    if !folder && !templated && path.is_dir() {
        return Some(format!("{} is a folder, not a file", path.display()));
    }
    let first = if folder { Some(path) } else { path.parent() };
    let existing = first.into_iter().flat_map(|p| p.ancestors()).find(|a| !a.as_os_str().is_empty() && a.exists())?;
    (!existing.is_dir()).then(|| format!("cannot make the folder for {}: {} is a file", path.display(), existing.display()))
}

/// No two outputs may be one file: two sinks writing one path, or one
/// sink's `{stream}` files for streams whose names make one file name (`a b`
/// and `a_b` both make `a_b`: names are made file-name safe). Either would
/// silently overwrite or interleave results.
fn check_output_files(cfg: &PipelineConfig, producers: &[Vec<usize>], diags: &mut Diagnostics) {
    use crate::config::paths::{stream_file_name, stream_path};
    // A file (or, for a `dir` source's streams, a path template) → who writes it.
    let mut taken: HashMap<std::path::PathBuf, (&str, String)> = HashMap::new();
    for (i, node) in cfg.nodes.iter().enumerate() {
        let (value, images, only) = match &node.kind {
            NodeKind::Ndjson(c) => (&c.path, false, None),
            NodeKind::Subtitles(c) => (&c.path, false, None),
            NodeKind::Video(c) => (&c.path, false, c.stream.as_ref().map(|s| s.get_ref().as_str())),
            NodeKind::Images(c) => (&c.folder, true, None),
            _ => continue,
        };
        // Unset variables and stdout are reported or allowed elsewhere.
        let (Ok(text), Ok(path)) = (cfg.expand(value), cfg.resolve_path(value)) else { continue };
        // A server (a URL) is no file here: no folder to make, no file to share.
        if text == "-" || crate::config::is_url(&text) {
            continue;
        }
        let path = lexical(&path);
        if let Some(e) = unwritable(&path, images, text.contains("{stream}")) {
            diags.push(cfg.diag(value.span(), format!("sink `{}`: {e}", node.name)));
            continue;
        }
        // `None`: every stream of a `dir` source (the template itself is the key).
        let file_of = |stream: Option<&str>| -> std::path::PathBuf {
            match (images, stream) {
                // Snapshots are `STREAM-SEQ.ext` in the folder.
                (true, s) => path.join(format!("{}-*", s.map_or_else(|| "{stream}".to_string(), stream_file_name))),
                (false, Some(s)) => stream_path(&path, s),
                (false, None) => path.clone(),
            }
        };
        let mut files = Vec::new();
        if images || text.contains("{stream}") {
            for j in upstream_sources(cfg, producers, i) {
                let source = &cfg.nodes[j];
                if only.is_some_and(|o| o != source.name) {
                    continue;
                }
                if matches!(source.kind, NodeKind::Dir(_) | NodeKind::KafkaJobs(_)) {
                    // Named at run time, one per input file (the `dir` source checks its own names).
                    files.push((file_of(None), format!("the files of `{}` source `{}`", source.kind.name(), source.name)));
                } else {
                    files.push((file_of(Some(&source.name)), format!("stream `{}`", source.name)));
                }
            }
        } else {
            files.push((path.clone(), String::new()));
        }
        for (file, what) in files {
            match taken.get(&file) {
                Some((sink, other)) if *sink == node.name => diags.push(
                    cfg.diag(value.span(), format!("sink `{sink}`: {other} and {what} would write the same file {}", file.display()))
                        .with_help("stream names are made file-name safe (characters other than letters, digits, `-`, `_` and `.` become `_`): rename one of the sources"),
                ),
                Some((sink, _)) => diags.push(
                    cfg.diag(value.span(), format!("sinks `{sink}` and `{}` would write the same file {}", node.name, file.display()))
                        .with_help("give each sink its own path"),
                ),
                None => {
                    taken.insert(file, (node.name.as_str(), what));
                }
            }
        }
    }
}

/// A `video` sink writes one stream per file: several streams need `{stream}`
/// in the path or one chosen `stream`; the container and encoder must exist.
fn check_video_sinks(cfg: &PipelineConfig, producers: &[Vec<usize>], diags: &mut Diagnostics) {
    for (i, node) in cfg.nodes.iter().enumerate() {
        let NodeKind::Video(v) = &node.kind else { continue };
        let sources = upstream_sources(cfg, producers, i);
        let names: Vec<&str> = sources.iter().map(|&j| cfg.nodes[j].name.as_str()).collect();
        // A `dir` source makes one stream per file.
        let batch = sources
            .iter()
            .find(|&&j| matches!(cfg.nodes[j].kind, NodeKind::Dir(_) | NodeKind::KafkaJobs(_)))
            .map(|&j| cfg.nodes[j].name.as_str());
        let listed = names.iter().map(|n| format!("`{n}`")).collect::<Vec<_>>().join(", ");
        let path = match cfg.expand(&v.path) {
            Ok(p) => p,
            Err(d) => {
                diags.push(d);
                continue;
            }
        };
        let path = path.as_str();
        let templated = path.contains("{stream}");
        let stdout = path == "-";
        if templated && stdout {
            diags.push(cfg.diag(v.path.span(), format!("video sink `{}`: `{{stream}}` cannot be used with stdout", node.name)));
        }
        match &v.stream {
            Some(s) if !names.contains(&s.get_ref().as_str()) && !names.is_empty() => diags.push(
                cfg.diag(
                    s.span(),
                    format!("video sink `{}`: stream `{}` does not feed this sink; its streams are {listed}", node.name, s.get_ref()),
                )
                .with_help("name one of the sources upstream of this sink"),
            ),
            None if !templated && let Some(dir) = batch => diags.push(
                cfg.diag(
                    v.path.span(),
                    format!("video sink `{}` is fed by the `dir` source `{dir}`, one stream per file; a video file holds one", node.name),
                )
                .with_help("put `{stream}` in `path` for one file per input, e.g. path = \"out/{stream}.mp4\""),
            ),
            None if names.len() > 1 && !templated => diags.push(
                cfg.diag(
                    v.path.span(),
                    format!("video sink `{}` is fed by {} streams ({listed}); a video file holds one", node.name, names.len()),
                )
                .with_help(format!("put `{{stream}}` in `path` for one file per stream, or set `stream = \"{}\"`", names[0])),
            ),
            _ => {}
        }
        match (&v.format, stdout) {
            (None, true) => diags.push(
                cfg.diag(v.path.span(), format!("video sink `{}`: writing to stdout needs a container", node.name))
                    .with_help("set `format = \"mpegts\"` (or `\"matroska\"`): mp4 cannot be streamed"),
            ),
            (Some(f), true) if *f.get_ref() == crate::config::VideoContainer::Mp4 && !v.fragmented => diags.push(
                cfg.diag(
                    f.span(),
                    format!("video sink `{}`: plain mp4 cannot be written to stdout (it seeks back to finish the file)", node.name),
                )
                .with_help("use `format = \"mpegts\"` or `\"matroska\"`, or `fragmented = true`"),
            ),
            (None, false) if crate::config::VideoContainer::from_path(path).is_none() => diags.push(
                cfg.diag(v.path.span(), format!("video sink `{}`: cannot tell the container from `{path}`", node.name))
                    .with_help("end the path with .mp4, .mkv or .ts, push to an rtmp://, rtsp://, srt:// or udp:// URL, or set `format = \"mp4\" | \"matroska\" | \"mpegts\"`"),
            ),
            _ => {}
        }
        if v.fragmented
            && v.format.as_ref().map_or(crate::config::VideoContainer::from_path(path), |f| Some(*f.get_ref()))
                != Some(crate::config::VideoContainer::Mp4)
        {
            diags.push(cfg.diag(v.path.span(), format!("video sink `{}`: `fragmented` applies to mp4 only", node.name)));
        }
        if let Some(k) = &v.keyframe_interval_s
            && !(k.get_ref().is_finite() && *k.get_ref() > 0.0)
        {
            diags.push(
                cfg.diag(
                    k.span(),
                    format!("video sink `{}`: keyframe_interval_s must be a positive number of seconds, got {}", node.name, k.get_ref()),
                )
                .with_help("e.g. keyframe_interval_s = 1 (a keyframe each second)"),
            );
        }
        if let Some(f) = &v.fragment_duration_ms {
            if !v.fragmented {
                diags.push(
                    cfg.diag(f.span(), format!("video sink `{}`: `fragment_duration_ms` applies to fragmented mp4 only", node.name))
                        .with_help("add `fragmented = true`, or remove `fragment_duration_ms`"),
                );
            } else if *f.get_ref() == 0 {
                diags.push(cfg.diag(f.span(), format!("video sink `{}`: fragment_duration_ms must be at least 1", node.name)));
            }
        }
        if let Err(e) = crate::backend::ffmpeg::check_video_encoder(v.codec.get_ref()) {
            diags.push(
                cfg.diag(v.codec.span(), format!("video sink `{}`: {e}", node.name))
                    .with_help("use `libx264` (CPU), `h264_nvenc` (NVIDIA GPU) or `auto`; `ffmpeg -encoders` lists what this FFmpeg has"),
            );
        }
        if let Some(c) = &v.crf
            && *c.get_ref() > 51
        {
            diags.push(cfg.diag(c.span(), format!("video sink `{}`: crf must be 0–51, got {}", node.name, c.get_ref())));
        }
    }
}

/// Kahn's algorithm; on a cycle, returns one cycle's nodes in flow order.
/// Raw PCM demuxers (`s16le`, `f32le`, `u8`, `alaw`, ...): their bytes carry no rate or channel count.
pub fn is_raw_pcm(format: &str) -> bool {
    let f = format.trim_end_matches("le").trim_end_matches("be");
    matches!(f, "s8" | "u8" | "s16" | "u16" | "s24" | "u24" | "s32" | "u32" | "f32" | "f64" | "alaw" | "mulaw")
}

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

/// Check every infer stage's model against what feeds it, and every
/// postprocess against the model it reads.
pub fn check_models(cfg: &PipelineConfig, graph: &Graph, models: &ModelIo) -> Diagnostics {
    let mut diags = Diagnostics::default();
    for (i, node) in cfg.nodes.iter().enumerate() {
        match &node.kind {
            NodeKind::Infer(c) => {
                let Some((inputs, _)) = models.get(&node.name) else {
                    continue;
                };
                let input = match &c.input {
                    Some(n) => match inputs.iter().find(|x| &x.name == n.get_ref()) {
                        Some(x) => x,
                        None => {
                            let names: Vec<_> = inputs.iter().map(|x| format!("`{}`", x.name)).collect();
                            diags.push(
                                cfg.diag(n.span(), format!("model has no input `{}`; its inputs are {}", n.get_ref(), names.join(", "))),
                            );
                            continue;
                        }
                    },
                    None => match inputs.first() {
                        Some(x) => x,
                        None => continue,
                    },
                };
                if !input.dtype.contains("float32") && !input.dtype.contains("f32") {
                    diags.push(
                        cfg.diag(
                            c.model.span(),
                            format!("model input `{}` is {}, but preprocess produces float32", input.name, input.dtype),
                        ),
                    );
                }
                for &p in &graph.producers[i] {
                    let NodeKind::Preprocess(pc) = &cfg.nodes[p].kind else {
                        continue;
                    };
                    let pname = &cfg.nodes[p].name;
                    let want = graph.preprocess_shape(cfg, i).unwrap_or_default();
                    let model = c.model.get_ref();
                    if input.dims.len() != 4 {
                        diags.push(cfg.diag(c.model.span(), format!(
                            "model `{model}` input `{}` has shape {}, but preprocess `{pname}` produces a 4-d image tensor {want:?}", input.name, input.shape_string()
                        )).with_help("use an image model (N, C, H, W or N, H, W, C input)"));
                        continue;
                    }
                    let (c_at, h_at, w_at) = match pc.layout {
                        Layout::Nchw => (1, 2, 3),
                        Layout::Nhwc => (3, 1, 2),
                    };
                    let d = &input.dims;
                    let fixed = |k: usize| (d[k] >= 0).then_some(d[k] as usize);
                    // Channels where the other layout has them while ours is not 3: the layout is wrong.
                    let other_c = if pc.layout == Layout::Nchw { 3 } else { 1 };
                    if fixed(c_at).is_some_and(|v| v != 3) || (fixed(c_at).is_none() && fixed(other_c) == Some(3)) {
                        let (ours, other) = if pc.layout == Layout::Nchw { ("nchw", "nhwc") } else { ("nhwc", "nchw") };
                        diags.push(
                            cfg.diag(
                                c.model.span(),
                                format!(
                                    "model `{model}` input `{}` has shape {}, which is not {ours} with 3 channels as preprocess `{pname}` produces",
                                    input.name,
                                    input.shape_string(),
                                ),
                            )
                            .with_help(format!("set layout = \"{other}\" in `{pname}` if the model takes that layout")),
                        );
                        continue;
                    }
                    if fixed(0).is_some_and(|v| v != 1) {
                        diags.push(
                            cfg.diag(
                                c.model.span(),
                                format!(
                                    "model `{model}` input `{}` has a fixed batch of {} ({}); frames are fed one at a time",
                                    input.name,
                                    d[0],
                                    input.shape_string()
                                ),
                            )
                            .with_help("export the model with batch 1 or a dynamic batch"),
                        );
                    }
                    for (k, key, val) in [(h_at, "height", &pc.height), (w_at, "width", &pc.width)] {
                        if let Some(v) = fixed(k)
                            && v != *val.get_ref() as usize
                        {
                            diags.push(cfg.diag(val.span(), format!(
                                    "preprocess `{pname}` makes tensors of {key} {}, but model `{model}` input `{}` needs {key} {v} (shape {})",
                                    val.get_ref(), input.name, input.shape_string()
                                )).with_help(format!("set {key} = {v} in `{pname}`")));
                        }
                    }
                }
            }
            NodeKind::TextDetection(c) => {
                for &p in &graph.producers[i] {
                    let Some((_, outputs)) = models.get(&cfg.nodes[p].name) else {
                        continue;
                    };
                    let out = match &c.output {
                        Some(n) => match outputs.iter().find(|o| &o.name == n.get_ref()) {
                            Some(o) => o,
                            None => {
                                let names: Vec<_> = outputs.iter().map(|x| format!("`{}`", x.name)).collect();
                                diags.push(cfg.diag(
                                    n.span(),
                                    format!(
                                        "model of `{}` has no output `{}`; its outputs are {}",
                                        cfg.nodes[p].name,
                                        n.get_ref(),
                                        names.join(", ")
                                    ),
                                ));
                                continue;
                            }
                        },
                        None => match outputs.first() {
                            Some(o) => o,
                            None => continue,
                        },
                    };
                    let ok = matches!(out.dims.as_slice(), [_, c1, _, _] if *c1 == 1 || *c1 < 0);
                    if !ok {
                        diags.push(
                            cfg.diag(
                                node.kind_span.clone(),
                                format!(
                                    "text_detection `{}` needs a probability map [N, 1, H, W], but `{}` outputs `{}` with shape {}",
                                    node.name,
                                    cfg.nodes[p].name,
                                    out.name,
                                    out.shape_string()
                                ),
                            )
                            .with_help("feed it a DB text detection model such as PP-OCRv4 det"),
                        );
                    }
                }
            }
            _ => {}
        }
    }
    diags.sort();
    diags
}

/// `text` inside a double-quoted DOT string.
fn dot_quoted(text: &str) -> String {
    text.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}

/// `text` inside a double-quoted Mermaid label (entity codes for what would end or break it).
fn mermaid_quoted(text: &str) -> String {
    text.replace('"', "#quot;").replace('<', "#lt;").replace('>', "#gt;")
}

fn shape(kind: &NodeKind, role: Role, name: &str) -> (String, String) {
    let label = format!("{}\\n{}", mermaid_quoted(name), kind.name());
    match role {
        Role::Source => (format!("[/\"{label}\"/]"), "invhouse".into()),
        Role::Stage => (format!("[\"{label}\"]"), "box".into()),
        Role::Sink => (format!("[(\"{label}\")]"), "cylinder".into()),
    }
}

/// Graphviz DOT: sources, stages and sinks drawn as different shapes.
pub fn to_dot(cfg: &PipelineConfig) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "digraph \"{}\" {{\n  rankdir=LR;", dot_quoted(&cfg.name()));
    for n in &cfg.nodes {
        let (_, dot_shape) = shape(&n.kind, n.role, &n.name);
        let name = dot_quoted(&n.name);
        let _ = writeln!(s, "  \"{name}\" [shape={dot_shape}, label=\"{name}\\n({})\"];", n.kind.name());
    }
    for n in &cfg.nodes {
        for i in &n.inputs {
            let _ = writeln!(s, "  \"{}\" -> \"{}\";", dot_quoted(i.get_ref()), dot_quoted(&n.name));
        }
    }
    s.push_str("}\n");
    s
}

/// Mermaid flowchart, with the same shapes.
pub fn to_mermaid(cfg: &PipelineConfig) -> String {
    let mut s = String::from("flowchart LR\n");
    // Ids are names made safe; two names that become one id (`a b`, `a_b`) get the node's index.
    let mut ids: HashMap<&str, String> = HashMap::new();
    let mut used = std::collections::HashSet::new();
    for (k, n) in cfg.nodes.iter().enumerate() {
        let mut id = n.name.replace(|c: char| !c.is_ascii_alphanumeric() && c != '_', "_");
        if id.is_empty() || !used.insert(id.clone()) {
            id = format!("{id}_{k}");
            used.insert(id.clone());
        }
        ids.insert(&n.name, id);
    }
    let id = |name: &str| ids.get(name).cloned().unwrap_or_else(|| name.replace(|c: char| !c.is_ascii_alphanumeric() && c != '_', "_"));
    for n in &cfg.nodes {
        let (m, _) = shape(&n.kind, n.role, &n.name);
        let _ = writeln!(s, "  {}{}", id(&n.name), m.replace("\\n", "<br/>"));
    }
    for n in &cfg.nodes {
        for i in &n.inputs {
            let _ = writeln!(s, "  {} --> {}", id(i.get_ref()), id(&n.name));
        }
    }
    s
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

    fn errors(src: String) -> Vec<String> {
        let cfg = crate::config::parse(std::path::Path::new("/p/p.toml"), src).unwrap();
        match check(&cfg) {
            Ok(_) => Vec::new(),
            Err(d) => d.0.iter().map(|d| d.headline()).collect(),
        }
    }

    /// Any node name renders as valid DOT and Mermaid: quotes escaped, and
    /// names that make one Mermaid id (`a b`, `a_b`) kept apart.
    #[test]
    fn graph_output_escapes_names() {
        let src = "[sources.\"a b\"]\nkind = \"testsrc\"\n[sources.a_b]\nkind = \"testsrc\"\n[sinks.'x\"y\\z']\nkind = \"null\"\ninputs = [\"a b\", \"a_b\"]\n";
        let cfg = crate::config::parse(std::path::Path::new("/p/p.toml"), src.to_string()).unwrap();
        let dot = to_dot(&cfg);
        assert!(dot.contains(r#"  "x\"y\\z" [shape=cylinder, label="x\"y\\z\n(null)"];"#), "{dot}");
        assert!(dot.contains(r#"  "a b" -> "x\"y\\z";"#), "{dot}");
        let m = to_mermaid(&cfg);
        assert!(m.contains("  a_b[/\"a b<br/>testsrc\"/]\n  a_b_1[/\"a_b<br/>testsrc\"/]"), "{m}");
        assert!(m.contains("#quot;") && m.contains("  a_b_1 --> x_y_z\n"), "{m}");
    }

    /// What a sink cannot write is a located error before the run (and in `validate`).
    #[test]
    fn outputs_that_cannot_be_written_are_errors() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path().display().to_string();
        std::fs::write(dir.path().join("file"), b"x").unwrap();
        let sink = |kind: &str, key: &str, path: &str| {
            format!("[sources.a]\nkind = \"testsrc\"\n[sinks.out]\nkind = \"{kind}\"\ninputs = [\"a\"]\n{key} = \"{path}\"\n")
        };
        let cases = [
            (sink("ndjson", "path", &d), format!("{d} is a folder, not a file")),
            (sink("ndjson", "path", &format!("{d}/file/r.ndjson")), format!("{d}/file is a file")),
            (sink("video", "path", &format!("{d}/file/sub/{{stream}}.mp4")), format!("{d}/file is a file")),
            (sink("images", "folder", &format!("{d}/file")), format!("{d}/file is a file")),
            (sink("ndjson", "path", &format!("{d}/{{stream}}/r.ndjson")), "may only appear in the file name".to_string()),
        ];
        for (src, want) in cases {
            let e = errors(src.clone());
            assert!(e.len() == 1 && e[0].starts_with("/p/p.toml:6:") && e[0].contains(&want), "{src}\n{e:?}");
        }
        assert_eq!(errors(sink("ndjson", "path", &format!("{d}/new/folder/r.ndjson"))), Vec::<String>::new());
        let src = "[sources.a]\nkind = \"testsrc\"\n[stages.det]\nkind = \"infer\"\ninputs = [\"a\"]\nmodel = \"m.onnx\"\nproviders = []\n[sinks.out]\nkind = \"null\"\ninputs = [\"det\"]\n";
        let e = crate::config::parse(std::path::Path::new("/p/p.toml"), src.to_string()).unwrap_err();
        assert!(e.0.iter().any(|e| e.headline().starts_with("/p/p.toml:7:13: providers = [] leaves no execution provider")), "{e:?}");
    }

    /// Two outputs that would be one file are located errors, before anything runs.
    #[test]
    fn outputs_that_would_share_a_file_are_errors() {
        let src = |a: &str, b: &str, sinks: &str| {
            format!("[sources.\"{a}\"]\nkind = \"testsrc\"\n[sources.\"{b}\"]\nkind = \"testsrc\"\n{sinks}",)
        };
        let one = |kind: &str, key: &str, path: &str| {
            format!("[sinks.out]\nkind = \"{kind}\"\ninputs = [\"a b\", \"a_b\"]\n{key} = \"{path}\"\n")
        };
        // Streams `a b` and `a_b` of one sink.
        let e = errors(src("a b", "a_b", &one("ndjson", "path", "out/{stream}.ndjson")));
        assert_eq!(e.len(), 1, "{e:?}");
        assert!(e[0].contains("sink `out`: stream `a b` and stream `a_b` would write the same file /p/out/a_b.ndjson"), "{e:?}");
        let e = errors(src("a b", "a_b", &one("video", "path", "out/{stream}.mp4")));
        assert_eq!(e.len(), 1, "{e:?}");
        let e = errors(src("a b", "a_b", &one("subtitles", "path", "out/{stream}.srt")));
        assert_eq!(e.iter().filter(|e| e.contains("would write the same file /p/out/a_b.srt")).count(), 1, "{e:?}");
        assert!(errors(src("a b", "a_b", &one("images", "folder", "shots")))[0].contains("/p/shots/a_b-*"));
        // Distinct names are fine; one file for both streams is fine.
        assert_eq!(errors(src("a b", "a_b", &one("ndjson", "path", "out/all.ndjson"))), Vec::<String>::new());
        let fine = "[sources.a]\nkind = \"testsrc\"\n[sources.b]\nkind = \"testsrc\"\n[sinks.out]\nkind = \"ndjson\"\ninputs = [\"a\", \"b\"]\npath = \"out/{stream}.ndjson\"\n";
        assert_eq!(errors(fine.to_string()), Vec::<String>::new());
        // Two sinks, one path (however it is written).
        let two = "[sources.a]\nkind = \"testsrc\"\n[sinks.x]\nkind = \"ndjson\"\ninputs = [\"a\"]\npath = \"out/same.ndjson\"\n[sinks.y]\nkind = \"ndjson\"\ninputs = [\"a\"]\npath = \"out/./sub/../same.ndjson\"\n";
        let e = errors(two.to_string());
        assert_eq!(e, vec!["/p/p.toml:10:8: sinks `x` and `y` would write the same file /p/out/same.ndjson"], "{e:?}");
        // A `dir` source's files through two sinks with one template.
        let dir = "[sources.d]\nkind = \"dir\"\npath = \"in\"\n[sinks.x]\nkind = \"ndjson\"\ninputs = [\"d\"]\npath = \"out/{stream}.ndjson\"\n[sinks.y]\nkind = \"ndjson\"\ninputs = [\"d\"]\npath = \"out/{stream}.ndjson\"\n";
        let e = errors(dir.to_string());
        assert!(e.len() == 1 && e[0].contains("sinks `x` and `y` would write the same file /p/out/{stream}.ndjson"), "{e:?}");
    }
}

#[cfg(test)]
mod url_tests {
    use super::*;

    fn errors(src: String) -> Vec<String> {
        let cfg = crate::config::parse(std::path::Path::new("/p/p.toml"), src).unwrap();
        match check(&cfg) {
            Ok(_) => Vec::new(),
            Err(d) => d.0.iter().map(|d| d.headline()).collect(),
        }
    }

    fn video(path: &str, extra: &str) -> String {
        format!(
            "[sources.a]\nkind = \"testsrc\"\n[sources.b]\nkind = \"testsrc\"\n[sinks.out]\nkind = \"video\"\ninputs = [\"a\", \"b\"]\npath = \"{path}\"\n{extra}"
        )
    }

    /// A server URL is no file: its scheme tells the container, `{stream}`
    /// may stand anywhere in it, and no folder or collision rule applies.
    #[test]
    fn server_urls_are_checked_as_urls_not_paths() {
        for url in ["rtmp://127.0.0.1:1935/{stream}/live", "rtsp://127.0.0.1:8554/cams/{stream}", "srt://127.0.0.1:9000?streamid={stream}"]
        {
            assert_eq!(errors(video(url, "")), Vec::<String>::new(), "{url}");
        }
        assert_eq!(errors(video("udp://127.0.0.1:1234", "stream = \"a\"\n")), Vec::<String>::new());
        // Still one stream per server URL.
        let e = errors(video("udp://127.0.0.1:1234", ""));
        assert!(e.len() == 1 && e[0].contains("fed by 2 streams"), "{e:?}");
    }

    #[test]
    fn keyframe_and_fragment_settings_are_checked() {
        let e = errors(video("out/{stream}.mp4", "keyframe_interval_s = 0\n"));
        assert!(e.len() == 1 && e[0].contains("/p/p.toml:9:23: video sink `out`: keyframe_interval_s must be a positive number"), "{e:?}");
        let e = errors(video("out/{stream}.mp4", "fragment_duration_ms = 500\n"));
        assert!(e.len() == 1 && e[0].contains("`fragment_duration_ms` applies to fragmented mp4 only"), "{e:?}");
        let ok = video("out/{stream}.mp4", "fragmented = true\nfragment_duration_ms = 500\nkeyframe_interval_s = 0.5\n");
        assert_eq!(errors(ok), Vec::<String>::new());
    }
}

#[cfg(test)]
mod model_tests {
    use std::path::Path;

    use super::*;
    use crate::backend::ort::IoInfo;

    const SRC: &str = "[sources.cam]\nkind = \"file\"\nuri = \"/dev/null\"\n[stages.pre]\nkind = \"preprocess\"\ninputs = [\"cam\"]\nwidth = 640\nheight = 384\n[stages.det]\nkind = \"infer\"\ninputs = [\"pre\"]\nmodel = \"/dev/null\"\n[stages.boxes]\nkind = \"text_detection\"\ninputs = [\"det\"]\n[sinks.out]\nkind = \"null\"\ninputs = [\"boxes\"]\n";

    fn check_with(input: Vec<i64>, output: Vec<i64>) -> Vec<String> {
        let cfg = crate::config::parse(Path::new("p.toml"), SRC.into()).unwrap();
        let graph = check(&cfg).unwrap();
        let io = |name: &str, dims: Vec<i64>| IoInfo { name: name.into(), dims, dtype: "float32".into() };
        let models = ModelIo::from([("det".to_string(), (vec![io("x", input)], vec![io("y", output)]))]);
        check_models(&cfg, &graph, &models).0.iter().map(|d| d.headline()).collect()
    }

    #[test]
    fn dynamic_and_matching_shapes_pass() {
        assert!(check_with(vec![-1, 3, -1, -1], vec![-1, 1, -1, -1]).is_empty());
        assert!(check_with(vec![1, 3, 384, 640], vec![1, 1, 384, 640]).is_empty());
    }

    #[test]
    fn fixed_size_mismatch_points_at_the_preprocess_key() {
        assert_eq!(
            check_with(vec![1, 3, 640, 640], vec![1, 1, 640, 640]),
            vec![
                "p.toml:8:10: preprocess `pre` makes tensors of height 384, but model `/dev/null` input `x` needs height 640 (shape [1, 3, 640, 640])"
            ]
        );
    }

    #[test]
    fn layout_and_batch_mismatches() {
        assert_eq!(
            check_with(vec![1, 384, 640, 3], vec![1, 1, 384, 640]),
            vec![
                "p.toml:12:9: model `/dev/null` input `x` has shape [1, 384, 640, 3], which is not nchw with 3 channels as preprocess `pre` produces"
            ]
        );
        assert_eq!(
            check_with(vec![4, 3, -1, -1], vec![4, 1, -1, -1]),
            vec!["p.toml:12:9: model `/dev/null` input `x` has a fixed batch of 4 ([4, 3, ?, ?]); frames are fed one at a time"]
        );
    }

    #[test]
    fn text_detection_needs_a_single_channel_map() {
        assert_eq!(
            check_with(vec![-1, 3, -1, -1], vec![-1, 2, -1, -1]),
            vec!["p.toml:14:8: text_detection `boxes` needs a probability map [N, 1, H, W], but `det` outputs `y` with shape [?, 2, ?, ?]"]
        );
    }
}

fn check_rtsp(cfg: &PipelineConfig, name: &str, r: &crate::config::RtspSourceConfig, diags: &mut Diagnostics) {
    match cfg.expand(&r.uri) {
        Ok(url) => {
            let scheme = url.split_once("://").map(|(s, _)| s.to_ascii_lowercase());
            if !matches!(scheme.as_deref(), Some("rtsp" | "rtsps")) {
                diags.push(
                    cfg.diag(r.uri.span(), format!("rtsp `{name}`: expected an rtsp:// or rtsps:// URL, got `{}`", mask_credentials(&url)))
                        .with_help("files and other URLs are read by `kind = \"file\"`"),
                );
            }
        }
        Err(d) => diags.push(d),
    }
    for (key, v, min) in [
        ("connect_timeout_ms", &r.connect_timeout_ms, 100),
        ("watchdog_ms", &r.watchdog_ms, 100),
        ("backoff_initial_ms", &r.backoff_initial_ms, 1),
    ] {
        if *v.get_ref() < min {
            diags.push(cfg.diag(v.span(), format!("rtsp `{name}`: `{key}` must be at least {min}, got {}", v.get_ref())));
        }
    }
    // A day at most: longer waits are never meant, and deadlines past the clock's range would overflow.
    for (key, v) in [
        ("connect_timeout_ms", &r.connect_timeout_ms),
        ("watchdog_ms", &r.watchdog_ms),
        ("backoff_initial_ms", &r.backoff_initial_ms),
        ("backoff_max_ms", &r.backoff_max_ms),
        ("probe_interval_ms", &r.probe_interval_ms),
        ("probe_window_ms", &r.probe_window_ms),
    ] {
        if *v.get_ref() > MAX_WAIT_MS {
            diags.push(cfg.diag(v.span(), format!("rtsp `{name}`: `{key}` must be at most {MAX_WAIT_MS} (a day), got {}", v.get_ref())));
        }
    }
    if *r.max_auth_failures.get_ref() == 0 {
        diags.push(
            cfg.diag(r.max_auth_failures.span(), format!("rtsp `{name}`: `max_auth_failures` must be at least 1, got 0"))
                .with_help("the number of refused credentials (RTSP 401) in a row before the stream shows as failed"),
        );
    }
    let probe = *r.probe_interval_ms.get_ref();
    if probe != 0 && probe < 50 {
        diags.push(
            cfg.diag(
                r.probe_interval_ms.span(),
                format!("rtsp `{name}`: `probe_interval_ms` must be 0 (no probing) or at least 50, got {probe}"),
            )
            .with_help("a probe is a TCP connect to the camera; more often than 20 times a second only hammers it"),
        );
    }
    if r.backoff_max_ms.get_ref() < r.backoff_initial_ms.get_ref() {
        let v = if r.backoff_max_ms.span().is_empty() { &r.backoff_initial_ms } else { &r.backoff_max_ms };
        diags.push(
            cfg.diag(
                v.span(),
                format!(
                    "rtsp `{name}`: `backoff_max_ms` ({}) is below `backoff_initial_ms` ({})",
                    r.backoff_max_ms.get_ref(),
                    r.backoff_initial_ms.get_ref()
                ),
            )
            .with_help("the wait doubles from backoff_initial_ms up to backoff_max_ms"),
        );
    }
}
