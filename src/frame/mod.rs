//! What flows through a pipeline: a frame with its metadata, its decoded
//! image and the results each stage attached.

pub mod convert;
pub mod event;
pub mod json;
pub mod letterbox;
pub mod pool;
pub mod ticket;

use std::sync::Arc;
use std::time::Instant;

pub use event::{ClipInfo, Direction, Event, EventKind, TrackRef};
pub use letterbox::Letterbox;
pub use pool::{Pool, PoolBuf};
pub use ticket::{Accounting, Counts, InputEnd, InputToken, OnInputEnd, Ticket};

/// Pixel layout of a decoded image (FFmpeg's names; GStreamer maps onto them).
pub type PixelFormat = ffmpeg_next::format::Pixel;

/// Colour matrix of YUV data.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Matrix {
    Bt601,
    Bt709,
    Bt2020,
    /// Untagged: converters use BT.601, as FFmpeg does.
    Unspecified,
}

/// How an image's colour values are to be read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ColorInfo {
    pub matrix: Matrix,
    /// Full (0–255) rather than limited (16–235) range.
    pub full_range: bool,
}

/// Where pixel data lives.
pub enum Storage {
    /// Host memory on loan from a pool.
    Host(PoolBuf<u8>),
    /// Device memory (filled by the GPU path).
    #[cfg(feature = "cuda")]
    Device(DeviceImage),
}

/// A decoded picture: planes packed one after another in `storage`.
pub struct Image {
    pub width: u32,
    pub height: u32,
    pub format: PixelFormat,
    pub color: ColorInfo,
    /// Byte offset of each plane in the buffer (unused planes: 0).
    pub offsets: [usize; 4],
    /// Bytes per row of each plane (unused planes: 0).
    pub strides: [i32; 4],
    pub storage: Storage,
}

impl Image {
    /// A packed full-range RGB picture in host memory, `width * 3` bytes a row.
    pub fn rgb24(width: u32, height: u32, buf: PoolBuf<u8>) -> Image {
        Image {
            width,
            height,
            format: PixelFormat::RGB24,
            color: ColorInfo { matrix: Matrix::Unspecified, full_range: true },
            offsets: [0; 4],
            strides: [width as i32 * 3, 0, 0, 0],
            storage: Storage::Host(buf),
        }
    }

    /// The host bytes, if the image is in host memory.
    pub fn host(&self) -> Option<&[u8]> {
        match &self.storage {
            Storage::Host(b) => Some(b),
            #[cfg(feature = "cuda")]
            Storage::Device(_) => None,
        }
    }
}

/// Device-resident image planes. `keep` owns whatever keeps the memory alive
/// (a pooled device buffer); dropping it releases the planes.
#[cfg(feature = "cuda")]
pub struct DeviceImage {
    /// Device pointers per plane (0 when unused).
    pub planes: [u64; 4],
    /// Bytes per row of each plane.
    pub pitches: [usize; 4],
    pub keep: Box<dyn std::any::Any + Send + Sync>,
    /// The GPU the planes live on.
    pub gpu: Arc<crate::backend::cuda::Gpu>,
    /// The host copy CPU consumers share (made on first use).
    pub host: HostCopy,
}

/// The host copy of a device image, made once, by the first CPU consumer
/// that needs it (a sink, a CPU preprocess, a crop), and handed to the others:
/// they all reach it through the frame's shared `Arc<Image>`. Consumers that
/// ask at the same time wait for that one download rather than each making
/// their own. The copy is a pooled buffer of the first consumer's pool and
/// goes back to it when the device image drops (device images are never
/// changed once made, so the copy cannot go stale).
#[derive(Default)]
pub struct HostCopy(std::sync::Mutex<Option<Arc<Image>>>);

impl HostCopy {
    /// The copy, made by `make` on the first call; a failed `make` keeps
    /// nothing, so the next call tries again.
    pub fn get_or_make(&self, make: impl FnOnce() -> Result<Image, String>) -> Result<Arc<Image>, String> {
        let mut copy = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(c) = copy.as_ref() {
            return Ok(c.clone());
        }
        let c = Arc::new(make()?);
        *copy = Some(c.clone());
        Ok(c)
    }
}

impl std::fmt::Debug for Image {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Image({}x{} {:?})", self.width, self.height, self.format)
    }
}

/// A window of mono audio samples.
#[derive(Debug)]
pub struct AudioChunk {
    pub samples: PoolBuf<f32>,
    pub sample_rate: u32,
    /// Index of the first sample in the stream.
    pub start: u64,
    /// Samples that are real audio (the rest, at the very end, is zero padding).
    pub valid: usize,
    /// The stream's last window.
    pub last: bool,
}

/// A dense f32 tensor in host memory.
#[derive(Debug)]
pub struct Tensor {
    pub shape: Vec<usize>,
    pub data: PoolBuf<f32>,
}

/// A preprocessed model input and how it maps back to the source image.
#[derive(Debug)]
pub struct ModelInput {
    pub tensor: Tensor,
    pub letterbox: Letterbox,
    /// The tensor in device memory, for an inference stage on a GPU provider
    /// (then `tensor.data` is empty and `tensor.shape` describes this buffer).
    #[cfg(feature = "cuda")]
    pub device: Option<crate::backend::cuda::DeviceBuf>,
}

/// A model's outputs for one frame.
#[derive(Debug)]
pub struct ModelOutputs {
    pub outputs: Vec<(String, Tensor)>,
    /// Carried over from a whole-frame input so postprocessors map back to
    /// source pixels (`None` for crops: their regions carry the geometry).
    pub letterbox: Option<Letterbox>,
}

impl ModelOutputs {
    pub fn get(&self, name: Option<&str>) -> Option<&Tensor> {
        match name {
            Some(n) => self.outputs.iter().find(|(k, _)| k == n).map(|(_, t)| t),
            None => self.outputs.first().map(|(_, t)| t),
        }
    }
}

/// A detected text region in source pixels.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct TextBox {
    /// Axis-aligned bounds: x0, y0, x1, y1.
    #[serde(serialize_with = "round_px")]
    pub bbox: [f32; 4],
    /// Corners clockwise from top-left.
    #[serde(serialize_with = "round_quad")]
    pub quad: [[f32; 2]; 4],
    /// Mean probability inside the box.
    #[serde(serialize_with = "round_score")]
    pub score: f32,
}

/// Pixel coordinates to 1/100 px, scores to 1e-4: no float noise in the output.
fn round_to(v: f32, scale: f64) -> f64 {
    (v as f64 * scale).round() / scale
}
fn round_px<S: serde::Serializer>(v: &[f32; 4], s: S) -> Result<S::Ok, S::Error> {
    serde::Serialize::serialize(&v.map(|x| round_to(x, 100.0)), s)
}
fn round_quad<S: serde::Serializer>(v: &[[f32; 2]; 4], s: S) -> Result<S::Ok, S::Error> {
    serde::Serialize::serialize(&v.map(|p| p.map(|x| round_to(x, 100.0))), s)
}
fn round_points<S: serde::Serializer>(v: &[[f32; 2]], s: S) -> Result<S::Ok, S::Error> {
    s.collect_seq(v.iter().map(|p| p.map(|x| round_to(x, 100.0))))
}
fn round_score<S: serde::Serializer>(v: &f32, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_f64(round_to(*v, 10_000.0))
}

/// Regions cut out of a frame and batched for secondary inference.
#[derive(Debug)]
pub struct CropBatch {
    /// [N, 3, H, W]; empty (N = 0) when the frame had no regions.
    pub tensor: Tensor,
    /// The region each batch entry came from, in order.
    pub regions: Vec<TextBox>,
    /// `once_per_track`: the track of each batch entry (same order as `regions`).
    pub track_ids: Vec<Option<u64>>,
    /// `once_per_track`: regions not cropped because their track's result is
    /// reused, with their track id.
    pub reused: Vec<(u64, TextBox)>,
    /// `once_per_track`: tracks that ended with this frame (their results are forgotten).
    pub ended: Vec<u64>,
    /// `once_per_track`: whether each batch entry lay wholly inside the
    /// picture (same order as `regions`): a reading of a region cut by the
    /// edge gives way to one of the whole region.
    pub inside: Vec<bool>,
    /// `once_per_track`: batch entries cropped again because their track's
    /// region came wholly inside the picture (counted as `reread`).
    pub reread: u32,
}

/// A recognised string and where it is.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct TextLine {
    pub text: String,
    /// Mean probability of the kept characters.
    #[serde(serialize_with = "round_score")]
    pub score: f32,
    #[serde(serialize_with = "round_px")]
    pub bbox: [f32; 4],
    #[serde(serialize_with = "round_quad")]
    pub quad: [[f32; 2]; 4],
    /// `once_per_track`: the track the region belongs to.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub track_id: Option<u64>,
    /// `once_per_track`: the text was recognised on an earlier frame of the
    /// track and reused here (the box is this frame's).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub reused: bool,
}

/// What an inference stage did with one frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum WorkMode {
    /// The model ran.
    Inferred,
    /// Skipped by `interval`: a tracker downstream predicts the boxes.
    Predicted,
    /// Skipped (nothing moved, `motion`; or every region's track already has
    /// its result, `once_per_track`): earlier results are carried forward.
    Carried,
}

impl WorkMode {
    pub const ALL: [WorkMode; 3] = [WorkMode::Inferred, WorkMode::Predicted, WorkMode::Carried];

    pub fn name(self) -> &'static str {
        match self {
            WorkMode::Inferred => "inferred",
            WorkMode::Predicted => "predicted",
            WorkMode::Carried => "carried",
        }
    }
}

/// A detected object in source pixels.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Object {
    #[serde(serialize_with = "round_px")]
    pub bbox: [f32; 4],
    #[serde(serialize_with = "round_score")]
    pub score: f32,
    pub class: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub label: Option<Arc<str>>,
    /// Landmarks in source pixels, in the model's order (CenterFace: left
    /// eye, right eye, nose, left and right mouth corner); empty for models
    /// that give none, and then left out of the JSON.
    #[serde(skip_serializing_if = "Vec::is_empty", serialize_with = "round_points")]
    pub keypoints: Vec<[f32; 2]>,
}

/// One class with its score.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct ClassScore {
    pub class: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub label: Option<Arc<str>>,
    #[serde(serialize_with = "round_score")]
    pub score: f32,
}

/// The top classes of a frame, or of one region of it.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Classified {
    /// The region (for models run on crops).
    #[serde(skip_serializing_if = "Option::is_none", serialize_with = "round_opt_px")]
    pub bbox: Option<[f32; 4]>,
    pub top: Vec<ClassScore>,
}

fn round_opt_px<S: serde::Serializer>(v: &Option<[f32; 4]>, s: S) -> Result<S::Ok, S::Error> {
    match v {
        Some(b) => round_px(b, s),
        None => s.serialize_none(),
    }
}

/// Speech found by a voice-activity detector.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct SpeechSegment {
    /// Seconds from the start of the stream.
    pub start: f64,
    /// `None` while the segment is still open.
    pub end: Option<f64>,
}

/// Voice activity for one window: its probability, segments that opened or
/// closed with it, and (on the stream's last window) every segment.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Speech {
    #[serde(serialize_with = "round_score")]
    pub probability: f32,
    #[serde(flatten)]
    pub spans: Spans,
}

/// Stretches (speech, loud audio) that opened or closed with one window, and
/// on the stream's last window every one of them.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct Spans {
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub started: Vec<SpeechSegment>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub ended: Vec<SpeechSegment>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub segments: Option<Vec<SpeechSegment>>,
}

/// Loudness of one audio window, and loud stretches that opened or closed with
/// it (on the stream's last window: every one).
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Level {
    /// RMS level, dBFS.
    #[serde(serialize_with = "round_db")]
    pub rms_db: f32,
    /// Peak level, dBFS.
    #[serde(serialize_with = "round_db")]
    pub peak_db: f32,
    /// At or above the threshold.
    pub loud: bool,
    #[serde(flatten)]
    pub spans: Spans,
}

fn round_db<S: serde::Serializer>(v: &f32, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_f64(round_to(*v, 100.0))
}

/// One track in one frame (the `track` stage).
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct TrackedObject {
    /// Absent while the track is tentative.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub track_id: Option<u64>,
    pub state: crate::track::TrackState,
    pub class: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub label: Option<Arc<str>>,
    /// The box detected in this frame (absent for a lost track).
    #[serde(skip_serializing_if = "Option::is_none", serialize_with = "round_opt_px")]
    pub bbox: Option<[f32; 4]>,
    /// The motion model's box: corrected by this frame's detection, or predicted when lost.
    #[serde(serialize_with = "round_px")]
    pub smoothed: [f32; 4],
    /// Score of the last detection matched.
    #[serde(serialize_with = "round_score")]
    pub score: f32,
    /// Frames since the track started.
    pub age: u64,
    /// Frames it was matched in.
    pub hits: u64,
    /// The frame was not inferred (`interval`): `smoothed` is the motion
    /// model's prediction, not corrected by a detection.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub predicted: bool,
}

/// A frame's tracks, and the tracks that ended with it.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Tracks {
    pub tracks: Vec<TrackedObject>,
    #[serde(rename = "ended_tracks", skip_serializing_if = "Vec::is_empty")]
    pub ended: Vec<crate::track::EndedTrack>,
}

/// The lines and zones of an `analytics` stage that apply to a frame's
/// stream, with their running counts (crossings in and out, tracks inside).
#[derive(Debug, Clone)]
pub struct PlacesView {
    pub places: Arc<crate::analytics::places::Places>,
    pub counts: crate::analytics::places::Counts,
    pub stream: Arc<str>,
}

impl PlacesView {
    /// `{"lines": {"door": {"in": 2, "out": 1}}, "zones": {"desk": {"inside": 1}}}`.
    pub fn to_json(&self) -> serde_json::Value {
        let mut lines = serde_json::Map::new();
        for (l, c) in self.places.lines.iter().zip(&self.counts.lines).filter(|(l, _)| l.filter.streams.has(&self.stream)) {
            lines.insert(l.name.to_string(), serde_json::json!({ "in": c[0], "out": c[1] }));
        }
        let mut zones = serde_json::Map::new();
        for (z, c) in self.places.zones.iter().zip(&self.counts.zones).filter(|(z, _)| z.filter.streams.has(&self.stream)) {
            zones.insert(z.name.to_string(), serde_json::json!({ "inside": c }));
        }
        serde_json::json!({ "lines": lines, "zones": zones })
    }
}

/// A result a stage attaches to a frame.
#[derive(Debug)]
pub enum Payload {
    Speech(Speech),
    Level(Level),
    Classes(Vec<Classified>),
    Objects(Vec<Object>),
    Input(ModelInput),
    Outputs(ModelOutputs),
    TextBoxes(Vec<TextBox>),
    Crops(CropBatch),
    Texts(Vec<TextLine>),
    Tracks(Tracks),
    Places(PlacesView),
    /// An inference stage did not run its model on this frame (`interval`,
    /// `motion`): `{"inferred": false, "mode": "predicted"}` in the results.
    NotInferred(WorkMode),
    /// A preprocess left the frame for the inference stage after it to skip
    /// (no tensor made); internal.
    Gated(WorkMode),
    /// A detection postprocess found, on this inferred frame, boxes that had
    /// moved since the frames before it that the inference stage `node`
    /// carried (`frames` of them); internal, counted as `carried_moved`.
    CarriedMoved {
        node: Arc<str>,
        frames: u32,
    },
    /// The job a frame belongs to (`kafka` source).
    Job(JobTag),
    /// What a `redact` stage rewrote on this frame's picture.
    Redaction(Redaction),
    /// This stage failed on the frame, which went on only because a
    /// `redact` stage after it redacts such frames whole (or drops them);
    /// the stages in between pass it on untouched. Internal.
    Failed(String),
    /// What a `python` stage returned: its JSON, written as is, and the boxes of
    /// its `detections` when they follow the detection schema (so that track,
    /// analytics and the overlay read them as a detection stage's).
    Custom(CustomResult),
}

/// What a `redact` stage did to one frame's picture.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Redaction {
    /// Boxes rewritten (blurred, pixelated or filled).
    pub boxes: u32,
    /// Fixed regions blacked out.
    pub regions: u32,
    /// Why the whole picture was redacted (a detector failed or did not run).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub full: Option<String>,
}

/// A `python` stage's result: the dict it returned, as JSON (written as is),
/// and the boxes of its `detections` read for the stages after it.
#[derive(Debug, Clone)]
pub struct CustomResult {
    pub json: serde_json::Map<String, serde_json::Value>,
    pub objects: Option<Vec<Object>>,
}

/// A job's id and which delivery of it this is (1 the first; more when it is redone).
#[derive(Debug, Clone)]
pub struct JobTag {
    pub id: Arc<str>,
    pub attempt: u32,
}

impl Payload {
    /// The JSON sinks write (`None`: internal data such as tensors).
    pub fn to_json(&self) -> Option<serde_json::Value> {
        match self {
            Payload::Input(_)
            | Payload::Outputs(_)
            | Payload::Crops(_)
            | Payload::Gated(_)
            | Payload::CarriedMoved { .. }
            | Payload::Failed(_) => None,
            Payload::Redaction(r) => Some(serde_json::json!({ "redaction": r })),
            Payload::NotInferred(m) => Some(serde_json::json!({ "inferred": false, "mode": m })),
            Payload::TextBoxes(b) => Some(serde_json::json!({ "text_boxes": b })),
            Payload::Texts(t) => Some(serde_json::json!({ "texts": t })),
            Payload::Objects(o) => Some(serde_json::json!({ "detections": o })),
            Payload::Classes(c) => Some(serde_json::json!({ "classes": c })),
            Payload::Speech(v) => Some(serde_json::to_value(v).expect("speech serialises")),
            Payload::Level(v) => Some(serde_json::to_value(v).expect("level serialises")),
            Payload::Tracks(t) => Some(serde_json::to_value(t).expect("tracks serialise")),
            Payload::Places(p) => Some(p.to_json()),
            Payload::Job(j) => Some(serde_json::json!({ "job": &*j.id, "attempt": j.attempt })),
            // As returned (extra fields of its boxes included).
            Payload::Custom(c) => Some(serde_json::Value::Object(c.json.clone())),
        }
    }

    /// Detected boxes: a detection stage's, or a `python` stage's in the detection schema.
    pub fn objects(&self) -> Option<&[Object]> {
        match self {
            Payload::Objects(o) => Some(o),
            Payload::Custom(CustomResult { objects: Some(o), .. }) => Some(o),
            _ => None,
        }
    }
}

/// A result, with the node that produced it.
#[derive(Debug, Clone)]
pub struct Attached {
    pub node: Arc<str>,
    pub payload: Arc<Payload>,
}

/// One frame of one stream. Cloning is cheap: the image and the results are
/// shared by `Arc` (fan-out never copies pixels).
#[derive(Debug, Clone)]
pub struct Frame {
    /// The source node's name.
    pub stream: Arc<str>,
    /// Index of the source in the pipeline.
    pub stream_index: u32,
    /// 0, 1, 2… per stream, in decode order.
    pub seq: u64,
    /// Presentation timestamp in `time_base` units.
    pub pts: Option<i64>,
    pub time_base: (i32, i32),
    /// When the source emitted the frame (for end-to-end latency).
    pub created: Instant,
    pub image: Option<Arc<Image>>,
    pub audio: Option<Arc<AudioChunk>>,
    pub results: Vec<Attached>,
    pub ticket: Arc<Ticket>,
    /// When the frame entered its current queue (queue-wait tracing).
    pub queued_at: Option<Instant>,
    /// Events a stage raised on this frame: the runtime takes them off and
    /// sends them on right after the frame, in order, to every sink.
    pub events: Vec<Event>,
    /// A stage took the frame out on purpose (a `python` stage's `"drop": true`):
    /// not passed on, counted as filtered (neither failed nor dropped by a queue).
    pub filtered: bool,
}

impl Frame {
    /// pts in seconds.
    pub fn pts_seconds(&self) -> Option<f64> {
        let (num, den) = self.time_base;
        self.pts.filter(|_| den != 0).map(|p| p as f64 * num as f64 / den as f64)
    }

    pub fn attach(&mut self, node: &Arc<str>, payload: Payload) {
        self.results.push(Attached { node: node.clone(), payload: Arc::new(payload) });
    }

    /// The most recent model input attached.
    pub fn model_input(&self) -> Option<&ModelInput> {
        self.results.iter().rev().find_map(|a| match &*a.payload {
            Payload::Input(i) => Some(i),
            _ => None,
        })
    }

    /// The most recent crop batch attached.
    pub fn crops(&self) -> Option<&CropBatch> {
        self.results.iter().rev().find_map(|a| match &*a.payload {
            Payload::Crops(c) => Some(c),
            _ => None,
        })
    }

    /// The most recent text boxes attached.
    pub fn text_boxes(&self) -> Option<&[TextBox]> {
        self.results.iter().rev().find_map(|a| match &*a.payload {
            Payload::TextBoxes(b) => Some(b.as_slice()),
            _ => None,
        })
    }

    /// Whether the latest inference result is an `interval` skip: no model
    /// outputs (nor boxes from them) for this frame; a tracker predicts.
    pub fn predicted(&self) -> bool {
        self.results
            .iter()
            .rev()
            .find_map(|a| match &*a.payload {
                Payload::NotInferred(m) => Some(*m == WorkMode::Predicted),
                Payload::Outputs(_) | Payload::Objects(_) | Payload::TextBoxes(_) => Some(false),
                _ => None,
            })
            .unwrap_or(false)
    }

    /// The latest inference stage's name and what it did with this frame
    /// (its outputs, or its not-inferred marker).
    pub fn latest_work(&self) -> Option<(Arc<str>, WorkMode)> {
        let i = self.results.iter().rposition(|a| matches!(&*a.payload, Payload::NotInferred(_) | Payload::Outputs(_)))?;
        let node = &self.results[i].node;
        // A carried frame has the marker and, after it, the outputs it carries.
        let mode = self.results[..=i]
            .iter()
            .rev()
            .take_while(|a| &a.node == node)
            .find_map(|a| match &*a.payload {
                Payload::NotInferred(m) => Some(*m),
                _ => None,
            })
            .unwrap_or(WorkMode::Inferred);
        Some((node.clone(), mode))
    }

    /// The crops stage `node` (an inference stage) ran on: the attachment
    /// just before its own.
    pub fn crops_before(&self, node: &str) -> Option<&CropBatch> {
        match &*self.results.iter().rev().find(|a| &*a.node != node)?.payload {
            Payload::Crops(c) => Some(c),
            _ => None,
        }
    }

    /// Carried frames of an inference stage whose boxes had moved, found by
    /// stage `node` on this frame: (inference stage, frames).
    pub fn carried_moved(&self, node: &str) -> Option<(&Arc<str>, u32)> {
        self.results.iter().rev().take_while(|a| &*a.node == node).find_map(|a| match &*a.payload {
            Payload::CarriedMoved { node, frames } => Some((node, *frames)),
            _ => None,
        })
    }

    /// What inference stage `node` did with this frame, from what it attached:
    /// `None` when it attached nothing or ran on nothing (no regions).
    pub fn work_mode(&self, node: &str) -> Option<WorkMode> {
        let mut ran = false;
        for a in self.results.iter().rev().take_while(|a| &*a.node == node) {
            match &*a.payload {
                Payload::NotInferred(m) => return Some(*m),
                Payload::Outputs(o) if !o.outputs.is_empty() => ran = true,
                _ => {}
            }
        }
        ran.then_some(WorkMode::Inferred)
    }

    /// The stage that failed on this frame and its error, when the frame
    /// went on regardless (see [`Payload::Failed`]).
    pub fn failed_upstream(&self) -> Option<(&Arc<str>, &str)> {
        self.results.iter().find_map(|a| match &*a.payload {
            Payload::Failed(e) => Some((&a.node, e.as_str())),
            _ => None,
        })
    }

    /// The most recent model outputs attached.
    pub fn model_outputs(&self) -> Option<&ModelOutputs> {
        self.results.iter().rev().find_map(|a| match &*a.payload {
            Payload::Outputs(o) => Some(o),
            _ => None,
        })
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;

    /// A gray host image of `w`x`h` in a buffer of `pool`, as a download gives.
    fn download(pool: &Pool<u8>, w: u32, h: u32, made: &AtomicUsize) -> Result<Image, String> {
        made.fetch_add(1, Ordering::SeqCst);
        let mut buf = pool.get(w as usize * h as usize);
        buf.fill(made.load(Ordering::SeqCst) as u8);
        Ok(Image {
            width: w,
            height: h,
            format: PixelFormat::GRAY8,
            color: ColorInfo { matrix: Matrix::Unspecified, full_range: true },
            offsets: [0; 4],
            strides: [w as i32, 0, 0, 0],
            storage: Storage::Host(buf),
        })
    }

    /// The second consumer of a device frame gets the first one's copy: one download.
    #[test]
    fn host_copy_is_made_once_and_shared() {
        let (pool, made, copy) = (Pool::new(2), AtomicUsize::new(0), HostCopy::default());
        let a = copy.get_or_make(|| download(&pool, 4, 2, &made)).unwrap();
        let b = copy.get_or_make(|| download(&pool, 4, 2, &made)).unwrap();
        assert_eq!(made.load(Ordering::SeqCst), 1);
        assert!(Arc::ptr_eq(&a, &b));
        assert_eq!(b.host().unwrap(), [1; 8]);
    }

    /// A failed download is not kept: the next consumer tries again.
    #[test]
    fn a_failed_host_copy_is_tried_again() {
        let (pool, made, copy) = (Pool::new(2), AtomicUsize::new(0), HostCopy::default());
        assert_eq!(copy.get_or_make(|| Err("device lost".into())).unwrap_err(), "device lost");
        let a = copy.get_or_make(|| download(&pool, 2, 2, &made)).unwrap();
        assert_eq!((made.load(Ordering::SeqCst), a.width), (1, 2));
    }

    /// Consumers in other threads (fan-out sinks) asking at once share one download.
    #[test]
    fn concurrent_consumers_share_one_download() {
        let (pool, made, copy) = (Pool::new(8), AtomicUsize::new(0), HostCopy::default());
        let barrier = std::sync::Barrier::new(8);
        let got: Vec<Arc<Image>> = std::thread::scope(|s| {
            let hs: Vec<_> = (0..8)
                .map(|_| {
                    s.spawn(|| {
                        barrier.wait();
                        copy.get_or_make(|| {
                            std::thread::sleep(std::time::Duration::from_millis(20));
                            download(&pool, 8, 8, &made)
                        })
                        .unwrap()
                    })
                })
                .collect();
            hs.into_iter().map(|h| h.join().unwrap()).collect()
        });
        assert_eq!(made.load(Ordering::SeqCst), 1);
        assert!(got.iter().all(|g| Arc::ptr_eq(g, &got[0])));
    }

    /// The copy's pooled buffer stays valid while any consumer holds it, and
    /// goes back to its pool once the device image and every consumer let go.
    #[test]
    fn host_copy_returns_its_buffer_to_the_pool() {
        let (pool, made, copy) = (Pool::new(2), AtomicUsize::new(0), HostCopy::default());
        let held = copy.get_or_make(|| download(&pool, 4, 4, &made)).unwrap();
        drop(copy);
        assert_eq!(held.host().unwrap(), [1; 16], "still readable after the device image dropped");
        assert_eq!(pool.reuses(), 0);
        drop(held);
        let _again = pool.get(16);
        assert_eq!((pool.allocations(), pool.reuses()), (1, 1), "the buffer came back");
    }
}
