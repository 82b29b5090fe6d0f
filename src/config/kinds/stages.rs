//! Stage kinds that read model outputs or results: VAD, text detection and
//! recognition, detection, classification, audio level, tracking and
//! analytics (lines and zones). The model-input stages are in `infer`.

use serde::Deserialize;
use toml::Spanned;

/// `kind = "vad"`: Silero VAD, streaming, its recurrent state kept per stream.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VadConfig {
    pub model: Spanned<String>,
    /// Speech starts at this probability…
    #[serde(default = "vad_threshold")]
    pub threshold: f32,
    /// …and ends below this one (default: threshold − 0.15).
    pub neg_threshold: Option<f32>,
    /// Shorter speech is ignored.
    #[serde(default = "vad_min_speech")]
    pub min_speech_ms: u32,
    /// Shorter pauses do not end a segment.
    #[serde(default = "vad_min_silence")]
    pub min_silence_ms: u32,
    /// Segments are widened by this much on each side.
    #[serde(default = "vad_pad")]
    pub speech_pad_ms: u32,
}

fn vad_threshold() -> f32 {
    0.5
}
fn vad_min_speech() -> u32 {
    250
}
fn vad_min_silence() -> u32 {
    100
}
fn vad_pad() -> u32 {
    30
}

/// `kind = "text_detection"`: DB (PP-OCR det) probability map → text boxes in source pixels.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TextDetectionConfig {
    /// Pixel threshold on the probability map.
    #[serde(default = "db_thresh")]
    pub threshold: f32,
    /// Minimum mean probability inside a box.
    #[serde(default = "db_box_thresh")]
    pub box_threshold: f32,
    /// How far boxes grow (area × ratio / perimeter).
    #[serde(default = "db_unclip")]
    pub unclip_ratio: f32,
    #[serde(default = "db_max_candidates")]
    pub max_candidates: usize,
    /// Boxes whose short side is below this (model pixels) are dropped.
    #[serde(default = "db_min_size")]
    pub min_size: f32,
    /// Model output to read (default: the first).
    pub output: Option<Spanned<String>>,
}

fn db_thresh() -> f32 {
    0.3
}
fn db_box_thresh() -> f32 {
    0.5
}
fn db_unclip() -> f32 {
    1.6
}
fn db_max_candidates() -> usize {
    1000
}
fn db_min_size() -> f32 {
    3.0
}

impl Default for TextDetectionConfig {
    fn default() -> Self {
        TextDetectionConfig {
            threshold: db_thresh(),
            box_threshold: db_box_thresh(),
            unclip_ratio: db_unclip(),
            max_candidates: db_max_candidates(),
            min_size: db_min_size(),
            output: None,
        }
    }
}

/// `kind = "text_recognition"`: CTC greedy decoding of a recogniser's outputs on crops.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TextRecognitionConfig {
    /// Character list, one per line (default: the model's `character` metadata).
    pub dictionary: Option<Spanned<String>>,
    /// Class index of the CTC blank.
    #[serde(default)]
    pub blank: usize,
    /// Strings below this mean confidence are dropped.
    #[serde(default = "rec_min_score")]
    pub min_score: f32,
    /// Model output to read (default: the first).
    pub output: Option<Spanned<String>>,
}

fn rec_min_score() -> f32 {
    0.5
}

/// Output layout of a YOLO-family detector.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum YoloFormat {
    /// From the output shape: [B, 4+nc, N] (N > 4+nc) → yolov8; [B, N, 6] → end2end; otherwise yolov5.
    #[default]
    Auto,
    /// ultralytics v8/v11: [B, 4 + classes, N], boxes cx, cy, w, h.
    Yolov8,
    /// v5: [B, N, 5 + classes], cx, cy, w, h, objectness, class scores.
    Yolov5,
    /// NMS-free end to end (v10, YOLO26): [B, N, 6] = x0, y0, x1, y1, score, class.
    End2end,
    /// CenterFace (faces with 5 landmarks): four outputs, heatmap [B, 1, h, w],
    /// scale [B, 2, h, w], offset [B, 2, h, w], landmarks [B, 10, h, w].
    Centerface,
}

/// `kind = "detection"`: YOLO-family outputs → boxes, classes and scores in source pixels.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DetectionConfig {
    #[serde(default)]
    pub format: YoloFormat,
    /// Minimum score kept.
    #[serde(default = "det_confidence")]
    pub confidence: f32,
    /// NMS IoU threshold (same-class boxes overlapping more are suppressed).
    #[serde(default = "det_iou")]
    pub iou: f32,
    #[serde(default = "det_max")]
    pub max_detections: usize,
    /// Suppress overlapping boxes whatever their class.
    #[serde(default)]
    pub class_agnostic: bool,
    /// Class names, one per line (default: the model's `names` metadata).
    pub labels: Option<Spanned<String>>,
    /// Model output to read (default: the first).
    pub output: Option<Spanned<String>>,
}

fn det_confidence() -> f32 {
    0.25
}
fn det_iou() -> f32 {
    0.45
}
fn det_max() -> usize {
    300
}

/// `kind = "classification"`: class scores → top-k classes with labels, per
/// frame (model run on whole frames) or per region (model run on crops).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClassificationConfig {
    /// Apply softmax to the outputs first (off when the model already outputs probabilities).
    #[serde(default)]
    pub softmax: bool,
    #[serde(default = "top_k")]
    pub top_k: usize,
    /// Classes below this score are left out.
    #[serde(default)]
    pub min_score: f32,
    /// Class names, one per line (default: the model's `names` metadata, else class numbers).
    pub labels: Option<Spanned<String>>,
    /// Model output to read (default: the first).
    pub output: Option<Spanned<String>>,
}

fn top_k() -> usize {
    1
}

/// `kind = "audio_level"`: RMS and peak level (dBFS) of each audio window, and
/// the stretches where the level stays above a threshold.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AudioLevelConfig {
    /// A window is loud when its RMS level is at least this (dBFS).
    #[serde(default = "level_threshold")]
    pub threshold_db: Spanned<f32>,
    /// Quieter stretches shorter than this do not end a loud segment.
    #[serde(default)]
    pub min_silence_ms: u32,
    /// Loud segments shorter than this are ignored.
    #[serde(default)]
    pub min_duration_ms: u32,
}

fn level_threshold() -> Spanned<f32> {
    Spanned::new(0..0, -40.0)
}

/// `kind = "track"`: multi-object tracking (ByteTrack) of the boxes a
/// detection stage attached; per stream, each object keeps a track id.
/// Names and defaults follow supervision's `ByteTrack`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TrackConfig {
    /// Detections above this score are matched first; a track starts from one
    /// scoring at least this + 0.1. Weaker ones (above 0.1) only extend tracks.
    #[serde(default = "track_activation")]
    pub track_activation_threshold: Spanned<f32>,
    /// Frames a lost track is kept, given at 30 fps (scaled by `frame_rate`).
    #[serde(default = "track_buffer")]
    pub lost_track_buffer: Spanned<u32>,
    /// First association: a track and a detection match when 1 - IoU × score is at most this.
    #[serde(default = "track_matching")]
    pub minimum_matching_threshold: Spanned<f32>,
    /// Frames per second of the stream (scales `lost_track_buffer`).
    #[serde(default = "track_rate")]
    pub frame_rate: Spanned<f64>,
    /// Frames in a row a track must be matched before it is confirmed and given an id.
    #[serde(default = "track_min_frames")]
    pub minimum_consecutive_frames: Spanned<u32>,
}

fn track_activation() -> Spanned<f32> {
    Spanned::new(0..0, 0.25)
}
fn track_buffer() -> Spanned<u32> {
    Spanned::new(0..0, 30)
}
fn track_matching() -> Spanned<f32> {
    Spanned::new(0..0, 0.8)
}
fn track_rate() -> Spanned<f64> {
    Spanned::new(0..0, 30.0)
}
fn track_min_frames() -> Spanned<u32> {
    Spanned::new(0..0, 1)
}

/// `kind = "analytics"`: counting lines and zones over the tracks of the
/// `track` stage before it (see docs/analytics.md).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AnalyticsConfig {
    /// Counting lines (`[[stages.NAME.lines]]`).
    #[serde(default)]
    pub lines: Vec<LineConfig>,
    /// Polygon zones (`[[stages.NAME.zones]]`).
    #[serde(default)]
    pub zones: Vec<ZoneConfig>,
    /// Hysteresis band, pixels: an anchor this close to a line (or a zone's
    /// edge) changes nothing, so box jitter never counts twice.
    #[serde(default = "analytics_margin")]
    pub margin: Spanned<f32>,
    /// Default anchor point of lines and zones that name none.
    #[serde(default)]
    pub anchor: Anchor,
}

fn analytics_margin() -> Spanned<f32> {
    Spanned::new(0..0, 4.0)
}

/// The point of a track's box that lines and zones test.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Anchor {
    #[default]
    BottomCenter,
    Center,
    TopCenter,
}

/// One counting line: a segment from `from` to `to`, in source pixels.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LineConfig {
    pub name: Spanned<String>,
    pub from: Spanned<[f64; 2]>,
    pub to: Spanned<[f64; 2]>,
    pub anchor: Option<Anchor>,
    /// Class ids counted (default: all).
    pub classes: Option<Vec<u32>>,
    /// Source streams it applies to (default: all).
    pub streams: Option<Spanned<Vec<String>>>,
}

/// One zone: a polygon (at least three corners), in source pixels.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ZoneConfig {
    pub name: Spanned<String>,
    pub points: Spanned<Vec<[f64; 2]>>,
    pub anchor: Option<Anchor>,
    /// Class ids counted (default: all).
    pub classes: Option<Vec<u32>>,
    /// Source streams it applies to (default: all).
    pub streams: Option<Spanned<Vec<String>>>,
}

/// `kind = "redact"`: rewrites each frame's picture so that the sinks after
/// it get it anonymised: the boxes of the detection stages before it
/// (detections, text boxes, tracks, their predicted boxes between
/// detections included) blurred, pixelated or filled, and fixed `regions`
/// blacked out on every frame.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RedactConfig {
    #[serde(default)]
    pub method: RedactMethod,
    #[serde(default)]
    pub shape: RedactShape,
    /// Each side of a box grows by `mask_scale - 1` times the box's size
    /// before redacting (as deface's `--mask-scale`).
    #[serde(default = "redact_mask_scale")]
    pub mask_scale: Spanned<f32>,
    /// `solid`: the fill, RGB 0–255.
    #[serde(default)]
    pub color: [u8; 3],
    /// `pixelate`: cells across the longer side of a box.
    #[serde(default = "redact_blocks")]
    pub blocks: Spanned<u32>,
    /// Nodes whose boxes are redacted and that must have run on each frame
    /// (default: the stage's `inputs`).
    pub from: Option<Spanned<Vec<String>>>,
    /// Classes redacted, by id or label (default: all).
    pub classes: Option<Vec<ClassRef>>,
    /// Boxes scoring below this are left alone.
    #[serde(default)]
    pub min_score: f32,
    /// Polygons (source pixels, at least three corners each) blacked out on every frame.
    #[serde(default = "no_regions")]
    pub regions: Spanned<Vec<Vec<[f64; 2]>>>,
    /// A frame on which a detector of `from` failed or did not run (and no
    /// tracker predicted its boxes): `full` redacts the whole picture, `drop`
    /// drops the frame.
    #[serde(default)]
    pub on_miss: OnMiss,
    /// Keep the redacted boxes in the results (NDJSON and the other result sinks).
    #[serde(default = "super::yes")]
    pub keep_boxes: bool,
}

fn redact_mask_scale() -> Spanned<f32> {
    Spanned::new(0..0, 1.3)
}
fn no_regions() -> Spanned<Vec<Vec<[f64; 2]>>> {
    Spanned::new(0..0, Vec::new())
}
fn redact_blocks() -> Spanned<u32> {
    Spanned::new(0..0, 8)
}

/// How a redacted area is rewritten.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RedactMethod {
    /// A box blur as wide as half the area (as deface), strong enough to leave no detail.
    #[default]
    Blur,
    /// Coarse cells, each the mean of its pixels.
    Pixelate,
    /// One colour (`color`).
    Solid,
}

/// The part of a (scaled) box that is redacted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RedactShape {
    /// The ellipse inscribed in the box (as deface).
    #[default]
    Ellipse,
    Box,
}

/// What a redact stage does with a frame whose detector failed or did not run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OnMiss {
    /// Redact the whole picture.
    #[default]
    Full,
    /// Drop the frame: no sink after the stage gets it.
    Drop,
}

/// A class named by id or by label.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(untagged)]
pub enum ClassRef {
    Id(u32),
    Label(String),
}

/// `kind = "python"`: the user's own Python code on each frame (docs/python.md).
/// Exactly one of `script` (a file, relative to the pipeline) and `module`
/// (a module on Python's path, the pipeline's folder included).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PythonConfig {
    pub script: Option<Spanned<String>>,
    pub module: Option<Spanned<String>>,
    /// The function called with each frame.
    #[serde(default = "python_function")]
    pub function: Spanned<String>,
    /// Passed once to `setup(args)` as a dict.
    pub args: Option<Spanned<toml::Table>>,
    /// `frame.image()` gives the picture (an RGB copy of each frame is made).
    #[serde(default)]
    pub image: bool,
    /// Once the run is stopping, how long a `process` call may still run
    /// before it is abandoned (its frame and the stage's later ones fail).
    #[serde(default = "python_stop_timeout_ms")]
    pub stop_timeout_ms: u64,
}

fn python_stop_timeout_ms() -> u64 {
    5000
}

fn python_function() -> Spanned<String> {
    Spanned::new(0..0, "process".to_string())
}
