//! The node kinds: one config struct per kind, and the registry that maps
//! `kind = "..."` to it. Each struct builds its runtime stage (see `stages`).

use std::fmt;

use serde::Deserialize;
use serde::de::{self, Deserializer, MapAccess, Visitor};
use toml::Spanned;

use super::Role;

/// Typed config of one node.
#[derive(Debug, Clone)]
pub enum NodeKind {
    File(FileSourceConfig),
    Rtsp(RtspSourceConfig),
    Dir(DirSourceConfig),
    ImageSequence(ImageSequenceConfig),
    Audio(AudioSourceConfig),
    TestSrc(TestSrcConfig),
    AudioTestSrc(AudioTestSrcConfig),
    Vad(VadConfig),
    Preprocess(PreprocessConfig),
    Infer(InferConfig),
    TextDetection(TextDetectionConfig),
    Crop(CropConfig),
    TextRecognition(TextRecognitionConfig),
    Detection(DetectionConfig),
    Classification(ClassificationConfig),
    Ndjson(NdjsonSinkConfig),
    Subtitles(SubtitlesSinkConfig),
    Images(ImagesSinkConfig),
    Video(VideoSinkConfig),
    AudioLevel(AudioLevelConfig),
    Null(NullSinkConfig),
    Track(TrackConfig),
    Detections(DetectionsSourceConfig),
    Analytics(AnalyticsConfig),
    KafkaJobs(KafkaSourceConfig),
    Kafka(KafkaSinkConfig),
    Mqtt(MqttSinkConfig),
    Request(RequestSourceConfig),
}

impl NodeKind {
    pub fn name(&self) -> &'static str {
        match self {
            NodeKind::File(_) => "file",
            NodeKind::Rtsp(_) => "rtsp",
            NodeKind::Dir(_) => "dir",
            NodeKind::ImageSequence(_) => "image_sequence",
            NodeKind::Audio(_) => "audio",
            NodeKind::TestSrc(_) => "testsrc",
            NodeKind::AudioTestSrc(_) => "audio_testsrc",
            NodeKind::Vad(_) => "vad",
            NodeKind::Preprocess(_) => "preprocess",
            NodeKind::Infer(_) => "infer",
            NodeKind::TextDetection(_) => "text_detection",
            NodeKind::Crop(_) => "crop",
            NodeKind::TextRecognition(_) => "text_recognition",
            NodeKind::Detection(_) => "detection",
            NodeKind::Classification(_) => "classification",
            NodeKind::Ndjson(_) => "ndjson",
            NodeKind::Subtitles(_) => "subtitles",
            NodeKind::Images(_) => "images",
            NodeKind::Video(_) => "video",
            NodeKind::AudioLevel(_) => "audio_level",
            NodeKind::Null(_) => "null",
            NodeKind::Track(_) => "track",
            NodeKind::Detections(_) => "detections",
            NodeKind::Analytics(_) => "analytics",
            NodeKind::KafkaJobs(_) | NodeKind::Kafka(_) => "kafka",
            NodeKind::Mqtt(_) => "mqtt",
            NodeKind::Request(_) => "request",
        }
    }
}

const SOURCE_KINDS: &[&str] =
    &["file", "rtsp", "dir", "image_sequence", "audio", "testsrc", "audio_testsrc", "detections", "kafka", "request"];
const STAGE_KINDS: &[&str] = &[
    "preprocess",
    "infer",
    "text_detection",
    "crop",
    "text_recognition",
    "detection",
    "classification",
    "vad",
    "audio_level",
    "track",
    "analytics",
];
const SINK_KINDS: &[&str] = &["ndjson", "subtitles", "images", "video", "null", "kafka", "mqtt"];

pub fn kinds_for(role: Role) -> &'static [&'static str] {
    match role {
        Role::Source => SOURCE_KINDS,
        Role::Stage => STAGE_KINDS,
        Role::Sink => SINK_KINDS,
    }
}

pub(super) fn deserialize_kind<'de, D: Deserializer<'de>>(role: Role, kind: &str, d: D) -> Result<NodeKind, D::Error> {
    Ok(match (role, kind) {
        (Role::Source, "file") => NodeKind::File(FileSourceConfig::deserialize(d)?),
        (Role::Source, "rtsp") => NodeKind::Rtsp(RtspSourceConfig::deserialize(d)?),
        (Role::Source, "dir") => NodeKind::Dir(DirSourceConfig::deserialize(d)?),
        (Role::Source, "image_sequence") => NodeKind::ImageSequence(ImageSequenceConfig::deserialize(d)?),
        (Role::Source, "audio") => NodeKind::Audio(AudioSourceConfig::deserialize(d)?),
        (Role::Source, "testsrc") => NodeKind::TestSrc(TestSrcConfig::deserialize(d)?),
        (Role::Source, "audio_testsrc") => NodeKind::AudioTestSrc(AudioTestSrcConfig::deserialize(d)?),
        (Role::Stage, "vad") => NodeKind::Vad(VadConfig::deserialize(d)?),
        (Role::Stage, "preprocess") => NodeKind::Preprocess(PreprocessConfig::deserialize(d)?),
        (Role::Stage, "infer") => NodeKind::Infer(InferConfig::deserialize(d)?),
        (Role::Stage, "text_detection") => NodeKind::TextDetection(TextDetectionConfig::deserialize(d)?),
        (Role::Stage, "crop") => NodeKind::Crop(CropConfig::deserialize(d)?),
        (Role::Stage, "text_recognition") => NodeKind::TextRecognition(TextRecognitionConfig::deserialize(d)?),
        (Role::Stage, "detection") => NodeKind::Detection(DetectionConfig::deserialize(d)?),
        (Role::Stage, "classification") => NodeKind::Classification(ClassificationConfig::deserialize(d)?),
        (Role::Sink, "ndjson") => NodeKind::Ndjson(NdjsonSinkConfig::deserialize(d)?),
        (Role::Sink, "null") => NodeKind::Null(NullSinkConfig::deserialize(d)?),
        (Role::Sink, "subtitles") => NodeKind::Subtitles(SubtitlesSinkConfig::deserialize(d)?),
        (Role::Sink, "images") => NodeKind::Images(ImagesSinkConfig::deserialize(d)?),
        (Role::Sink, "video") => NodeKind::Video(VideoSinkConfig::deserialize(d)?),
        (Role::Stage, "audio_level") => NodeKind::AudioLevel(AudioLevelConfig::deserialize(d)?),
        (Role::Stage, "track") => NodeKind::Track(TrackConfig::deserialize(d)?),
        (Role::Source, "detections") => NodeKind::Detections(DetectionsSourceConfig::deserialize(d)?),
        (Role::Stage, "analytics") => NodeKind::Analytics(AnalyticsConfig::deserialize(d)?),
        (Role::Source, "kafka") => NodeKind::KafkaJobs(KafkaSourceConfig::deserialize(d)?),
        (Role::Sink, "kafka") => NodeKind::Kafka(KafkaSinkConfig::deserialize(d)?),
        (Role::Sink, "mqtt") => NodeKind::Mqtt(MqttSinkConfig::deserialize(d)?),
        (Role::Source, "request") => NodeKind::Request(RequestSourceConfig::deserialize(d)?),
        _ => unreachable!("kind `{kind}` was checked against the registry"),
    })
}

/// `kind = "file"`: a media file (or any URL FFmpeg opens) decoded with FFmpeg.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileSourceConfig {
    /// Path (relative to the pipeline file), URL, or `-` for a stream on stdin (format probed).
    pub uri: Spanned<String>,
    /// Decoder threads; 0 lets FFmpeg choose (default).
    #[serde(default, deserialize_with = "checked::threads")]
    pub decoder_threads: usize,
    /// Stop after this many frames.
    #[serde(default, deserialize_with = "checked::opt_frames")]
    pub max_frames: Option<u64>,
    /// Pace frames at their timestamps, as a live camera would deliver them
    /// (queues then default to `drop_oldest`).
    #[serde(default)]
    pub realtime: bool,
    /// Input format (an FFmpeg demuxer: `rawvideo`, `mpegts`, `matroska`, `nut`, ...); default: probed.
    pub format: Option<Spanned<String>>,
    /// rawvideo: pixel layout of the frames (`yuv420p`, `rgb24`, `nv12`, `gray`, ...; default yuv420p).
    pub pixel_format: Option<Spanned<String>>,
    /// rawvideo: frame size (required).
    pub width: Option<Spanned<u32>>,
    pub height: Option<Spanned<u32>>,
    /// rawvideo: frames per second (default 25).
    pub rate: Option<Spanned<f64>>,
    /// Hardware decoding: `auto` (NVDEC when a GPU and a CUDA hwaccel for the
    /// codec are there, software otherwise, reported either way), `cuda`
    /// (NVDEC or an error), `none` (software).
    pub hwaccel: Option<Spanned<HwAccel>>,
    /// CUDA device for `hwaccel`.
    #[serde(default)]
    pub device_id: usize,
    /// Largest frame (width × height) accepted; default `[pipeline] max_pixels`.
    pub max_pixels: Option<u64>,
    /// Decode backend: FFmpeg (default) or GStreamer.
    #[serde(default = "ffmpeg_backend")]
    pub backend: Spanned<DecodeBackend>,
    /// GStreamer only: the decoding part of a launch line, `{uri}` replaced by
    /// the input (default `uridecodebin uri={uri}`); the frames are taken from
    /// its `appsink` (one is added when the line has none).
    pub launch: Option<Spanned<String>>,
    /// Turn frames as the container's display matrix asks (`auto`), or process them as stored (`none`, default).
    pub rotate: Option<Spanned<Rotate>>,
    /// `serve` only: a template for streams added at run time (`POST /v1/streams`);
    /// no stream starts with the pipeline, and its `uri` is the default of the added ones.
    #[serde(default)]
    pub dynamic: bool,
    /// With `dynamic`: the keys an added stream may set besides its `id` (e.g. `["uri", "required"]`).
    #[serde(default)]
    pub allow: Vec<Spanned<String>>,
    /// With `dynamic`: the most streams of this template listed at once (more: `429`).
    pub max_streams: Option<Spanned<usize>>,
    /// With `dynamic`: the URL schemes an added stream's `uri` may use (default none: paths only).
    pub schemes: Option<Vec<Spanned<String>>>,
    /// With `dynamic`: the hosts an added stream's URL may name (names, `*.suffix`, addresses, CIDR ranges, `*`).
    pub hosts: Option<Vec<Spanned<String>>>,
    /// With `dynamic`: the folders an added stream's path must lie in (default none: no path).
    pub roots: Option<Vec<Spanned<String>>>,
}

/// `rotate` of a `file` or `dir` source.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Rotate {
    /// Frames as stored; a warning says what the container asks for.
    #[default]
    None,
    /// Frames turned by a quarter turn the display matrix asks for (90°, 180°, 270°) before the pipeline sees them.
    Auto,
}

fn ffmpeg_backend() -> Spanned<DecodeBackend> {
    Spanned::new(0..0, DecodeBackend::Ffmpeg)
}

/// Which library decodes a `file` source.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DecodeBackend {
    #[default]
    Ffmpeg,
    Gstreamer,
}

/// `kind = "dir"`: every media file of a folder (or matching a glob), one
/// stream per file, in path order; resumable through a state file.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DirSourceConfig {
    /// A folder (relative to the pipeline file).
    pub path: Option<Spanned<String>>,
    /// Or a glob such as `recordings/*.mp4` (`**` for any depth).
    pub glob: Option<Spanned<String>>,
    /// With `path`: also files in subfolders.
    #[serde(default)]
    pub recursive: bool,
    /// Only files with these extensions (case-insensitive, without the dot); default: every file.
    pub extensions: Option<Vec<String>>,
    /// Files decoded at once.
    #[serde(default = "one_nz")]
    pub parallel: Spanned<std::num::NonZeroUsize>,
    /// Decoder threads per file; 0 lets FFmpeg choose.
    #[serde(default, deserialize_with = "checked::threads")]
    pub decoder_threads: usize,
    /// Stop each file after this many frames.
    #[serde(default, deserialize_with = "checked::opt_frames")]
    pub max_frames: Option<u64>,
    /// The batch state file (files done, files failed); default: `.infer-stream-batch.json`
    /// in the folder of the first `{stream}` NDJSON output, else none (no resume).
    pub state: Option<Spanned<String>>,
    /// What to read from each file: its video (frames) or its audio (timed windows).
    #[serde(default)]
    pub media: MediaKind,
    /// Audio: the rate the audio is resampled to (default 16000 Hz).
    pub sample_rate: Option<Spanned<u32>>,
    /// Audio: samples per window (default 512).
    pub window: Option<Spanned<usize>>,
    /// Audio: samples between window starts (default: the window).
    pub hop: Option<Spanned<usize>>,
    /// Video: turn frames as each file's display matrix asks (`auto`), or process them as stored (`none`, default).
    #[serde(default)]
    pub rotate: Rotate,
}

/// `kind = "image_sequence"`: still images (JPEG, PNG, ...) as one video
/// stream, in natural name order, at a set frame rate.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ImageSequenceConfig {
    /// A folder of images, or a numbered pattern such as `frames/img%05d.jpg`
    /// (relative to the pipeline file).
    pub path: Spanned<String>,
    /// Frames per second the timestamps follow.
    #[serde(default = "image_sequence_fps")]
    pub fps: Spanned<f64>,
    /// Stop after this many frames.
    #[serde(default, deserialize_with = "checked::opt_frames")]
    pub max_frames: Option<u64>,
    /// With a folder: only files with these extensions (case-insensitive,
    /// without the dot); default jpg, jpeg, png, bmp, tif, tiff, webp.
    pub extensions: Option<Vec<String>>,
    /// Largest image (width × height) accepted; default `[pipeline] max_pixels`.
    pub max_pixels: Option<u64>,
}

fn image_sequence_fps() -> Spanned<f64> {
    Spanned::new(0..0, 25.0)
}

/// `media` of a `dir` or `rtsp` source: what it reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MediaKind {
    #[default]
    Video,
    Audio,
}

fn one_nz() -> Spanned<std::num::NonZeroUsize> {
    Spanned::new(0..0, std::num::NonZeroUsize::MIN)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum HwAccel {
    #[default]
    Auto,
    Cuda,
    None,
}

/// Where a stage computes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ComputeDevice {
    /// Where the frame is: device frames on the GPU, host frames on the CPU.
    #[default]
    Auto,
    Cpu,
    Cuda,
}

/// How RTP packets travel from an RTSP camera.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RtspTransport {
    /// Interleaved in the RTSP TCP connection: passes firewalls and NAT, no packet loss.
    #[default]
    Tcp,
    /// Separate UDP ports: lower latency, lost packets show as damaged frames.
    Udp,
}

impl RtspTransport {
    pub fn as_str(self) -> &'static str {
        match self {
            RtspTransport::Tcp => "tcp",
            RtspTransport::Udp => "udp",
        }
    }
}

/// `kind = "rtsp"`: a live RTSP camera, decoded by FFmpeg, that survives the
/// camera going away: a watchdog notices a stream that stopped (or a camera
/// that hangs), and the source reconnects with exponential backoff, probing
/// the camera's port in between to reconnect as soon as it is back.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RtspSourceConfig {
    /// `rtsp://[user:password@]host[:port]/path` (`${VAR}` for credentials).
    pub uri: Spanned<String>,
    #[serde(default)]
    pub transport: RtspTransport,
    /// Longest wait for the camera to answer when connecting.
    #[serde(default = "rtsp_connect_timeout")]
    pub connect_timeout_ms: Spanned<u64>,
    /// No frame for this long: the stream is lost (a hung camera included).
    #[serde(default = "rtsp_watchdog")]
    pub watchdog_ms: Spanned<u64>,
    /// Reconnect after a loss (else the source ends).
    #[serde(default = "yes")]
    pub reconnect: bool,
    /// First wait before reconnecting; doubles after each failed attempt…
    #[serde(default = "rtsp_backoff_initial")]
    pub backoff_initial_ms: Spanned<u64>,
    /// …up to this (each wait is jittered down by up to a quarter).
    #[serde(default = "rtsp_backoff_max")]
    pub backoff_max_ms: Spanned<u64>,
    /// While the stream is down, knock on the camera's port (a TCP connect to
    /// its host:port) this often between the backoff's attempts; an answer
    /// after none starts a full reconnection at once. 0: no probing.
    #[serde(default = "rtsp_probe_interval")]
    pub probe_interval_ms: Spanned<u64>,
    /// Probe for this long into an outage; after it only the backoff's attempts.
    #[serde(default = "rtsp_probe_window")]
    pub probe_window_ms: Spanned<u64>,
    /// Give up after this many failed attempts in a row (default: never).
    pub max_retries: Option<u32>,
    /// The camera refused the credentials (RTSP 401) this many times in a row:
    /// the stream shows as `failed` (`unauthorized`) while the source keeps
    /// trying on the backoff, in case the camera's credentials change.
    #[serde(default = "rtsp_max_auth_failures")]
    pub max_auth_failures: Spanned<u32>,
    /// `/readyz` is not ready while this stream is lost (`false`: it only
    /// shows in `/readyz?verbose`).
    #[serde(default = "yes")]
    pub required: bool,
    /// A camera that does not answer at start: `false` stops the run before
    /// anything runs (exit 2); `true` starts the run with the stream lost and
    /// keeps trying with the backoff (and `max_retries`), as after a loss.
    #[serde(default)]
    pub wait_at_start: bool,
    /// What to read from the stream: its video (frames) or its audio (timed windows).
    #[serde(default)]
    pub media: MediaKind,
    /// Audio: the rate the audio is resampled to (default 16000 Hz).
    pub sample_rate: Option<Spanned<u32>>,
    /// Audio: samples per window (default 512).
    pub window: Option<Spanned<usize>>,
    /// Audio: samples between window starts (default: the window).
    pub hop: Option<Spanned<usize>>,
    /// Decoder threads; 0 lets FFmpeg choose (default).
    #[serde(default, deserialize_with = "checked::threads")]
    pub decoder_threads: usize,
    /// Stop after this many frames.
    #[serde(default, deserialize_with = "checked::opt_frames")]
    pub max_frames: Option<u64>,
    /// `serve` only: a template for streams added at run time (`POST /v1/streams`);
    /// no stream starts with the pipeline, and its `uri` is the default of the added ones.
    #[serde(default)]
    pub dynamic: bool,
    /// With `dynamic`: the keys an added stream may set besides its `id` (e.g. `["uri", "required"]`).
    #[serde(default)]
    pub allow: Vec<Spanned<String>>,
    /// With `dynamic`: the most streams of this template listed at once (more: `429`).
    pub max_streams: Option<Spanned<usize>>,
    /// With `dynamic`: the URL schemes an added stream's `uri` may use (default `["rtsp", "rtsps"]`).
    pub schemes: Option<Vec<Spanned<String>>>,
    /// With `dynamic`: the hosts an added stream's `uri` may name (names, `*.suffix`, addresses, CIDR ranges, `*`).
    pub hosts: Option<Vec<Spanned<String>>>,
}

fn rtsp_max_auth_failures() -> Spanned<u32> {
    Spanned::new(0..0, 3)
}
fn rtsp_connect_timeout() -> Spanned<u64> {
    Spanned::new(0..0, 5000)
}
fn rtsp_watchdog() -> Spanned<u64> {
    Spanned::new(0..0, 5000)
}
fn rtsp_backoff_initial() -> Spanned<u64> {
    Spanned::new(0..0, 500)
}
fn rtsp_backoff_max() -> Spanned<u64> {
    Spanned::new(0..0, 30000)
}
fn rtsp_probe_interval() -> Spanned<u64> {
    Spanned::new(0..0, 250)
}
fn rtsp_probe_window() -> Spanned<u64> {
    Spanned::new(0..0, 90000)
}

/// `kind = "testsrc"`: synthetic video (a moving gradient and a moving square)
/// for benchmarks and demos; finite (`frames` or `duration`) or endless.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TestSrcConfig {
    #[serde(default = "testsrc_width")]
    pub width: Spanned<u32>,
    #[serde(default = "testsrc_height")]
    pub height: Spanned<u32>,
    /// Frames per second.
    #[serde(default = "testsrc_rate")]
    pub rate: f64,
    pub frames: Option<u64>,
    /// Seconds (used when `frames` is not set); neither: endless.
    #[serde(default, deserialize_with = "checked::opt_seconds")]
    pub duration: Option<f64>,
    /// Deliver frames at `rate` instead of as fast as possible.
    #[serde(default)]
    pub realtime: bool,
}

fn testsrc_width() -> Spanned<u32> {
    Spanned::new(0..0, 1280)
}
fn testsrc_height() -> Spanned<u32> {
    Spanned::new(0..0, 720)
}
fn testsrc_rate() -> f64 {
    25.0
}

/// `kind = "audio"`: the audio of a file (wav, flac, mp3, aac/m4a, opus, or a
/// video's audio track), resampled to mono f32 and cut into fixed windows.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AudioSourceConfig {
    pub uri: Spanned<String>,
    #[serde(default = "audio_rate")]
    pub sample_rate: Spanned<u32>,
    /// Samples per window.
    #[serde(default = "audio_window")]
    pub window: Spanned<usize>,
    /// Samples between window starts (default: the window, no overlap).
    pub hop: Option<usize>,
    /// Input format (an FFmpeg demuxer), e.g. raw PCM `s16le` or `f32le` on stdin; default: probed.
    pub format: Option<Spanned<String>>,
    /// Raw PCM: the rate of the samples coming in (`sample_rate` is the rate they are resampled to).
    pub input_rate: Option<Spanned<u32>>,
    /// Raw PCM: interleaved channels coming in (default 1).
    pub channels: Option<Spanned<u32>>,
}

fn audio_rate() -> Spanned<u32> {
    Spanned::new(0..0, 16000)
}
fn audio_window() -> Spanned<usize> {
    Spanned::new(0..0, 512)
}

/// `kind = "audio_testsrc"`: synthetic audio for benchmarks and demos: tone
/// bursts (`tone_ms` of a sine, then `gap_ms` of quiet noise, repeated), in
/// the same timed windows as the `audio` source; finite (`duration`) or endless.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AudioTestSrcConfig {
    #[serde(default = "audio_rate")]
    pub sample_rate: Spanned<u32>,
    #[serde(default = "audio_window")]
    pub window: Spanned<usize>,
    pub hop: Option<usize>,
    /// Hz of the tone.
    #[serde(default = "tone_hz")]
    pub frequency: f64,
    /// Peak amplitude of the tone (full scale = 1).
    #[serde(default = "tone_amplitude")]
    pub amplitude: f32,
    /// Milliseconds of tone, then of quiet, repeated (`gap_ms = 0`: a steady tone).
    #[serde(default = "tone_ms")]
    pub tone_ms: u64,
    #[serde(default = "gap_ms")]
    pub gap_ms: u64,
    /// Seconds in all; none: endless.
    #[serde(default, deserialize_with = "checked::opt_seconds")]
    pub duration: Option<f64>,
    /// Deliver windows at their own pace, as a microphone would.
    #[serde(default)]
    pub realtime: bool,
}

fn tone_hz() -> f64 {
    1000.0
}
fn tone_amplitude() -> f32 {
    0.5
}
fn tone_ms() -> u64 {
    300
}
fn gap_ms() -> u64 {
    700
}

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

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ResizeMode {
    /// Keep the aspect ratio, pad the rest with `pad_value` (centred).
    #[default]
    Letterbox,
    /// Scale each axis independently to fill the tensor.
    Stretch,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ChannelOrder {
    #[default]
    Rgb,
    Bgr,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Layout {
    #[default]
    Nchw,
    Nhwc,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Interpolation {
    Nearest,
    FastBilinear,
    #[default]
    Bilinear,
    Bicubic,
    Area,
}

/// `kind = "preprocess"`: video frame → f32 model tensor in one scale+convert pass and one normalise pass.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PreprocessConfig {
    pub width: Spanned<u32>,
    pub height: Spanned<u32>,
    #[serde(default)]
    pub resize: ResizeMode,
    /// Pixel value (0–255, before normalising) of the letterbox padding.
    #[serde(default)]
    pub pad_value: u8,
    #[serde(default)]
    pub color: ChannelOrder,
    /// value = (pixel × scale − mean) / std, per channel in `color` order.
    #[serde(default = "zeros3", deserialize_with = "checked::finite3")]
    pub mean: [f32; 3],
    #[serde(default = "ones3", deserialize_with = "checked::divisors3")]
    pub std: [f32; 3],
    #[serde(default = "inv255", deserialize_with = "checked::scale")]
    pub scale: f32,
    #[serde(default)]
    pub layout: Layout,
    #[serde(default)]
    pub interpolation: Interpolation,
    /// `auto`: the CUDA kernel for frames on the GPU (NVDEC), the CPU path
    /// for frames in host memory; `cuda`: always the kernel (host frames are
    /// uploaded); `cpu`: always the CPU path (device frames are downloaded).
    pub device: Option<Spanned<ComputeDevice>>,
    /// CUDA device for `device = "cuda"` with host frames.
    #[serde(default)]
    pub device_id: usize,
}

/// Value checks made while reading, so an error points at the value itself.
mod checked {
    use serde::de::{self, Deserialize, Deserializer};

    /// Most threads a source, decoder or model may ask for: far more than any
    /// machine has cores, few enough that a typo cannot exhaust memory.
    pub const MAX_THREADS: usize = 256;

    fn too_many<E: de::Error>(n: usize) -> E {
        E::custom(format!("{n} threads is more than {MAX_THREADS} (each takes memory before doing any work)"))
    }

    pub fn threads<'de, D: Deserializer<'de>>(d: D) -> Result<usize, D::Error> {
        let n = usize::deserialize(d)?;
        if n > MAX_THREADS { Err(too_many(n)) } else { Ok(n) }
    }

    pub fn opt_threads<'de, D: Deserializer<'de>>(d: D) -> Result<Option<usize>, D::Error> {
        match usize::deserialize(d)? {
            0 => Err(de::Error::custom("0 threads: at least 1 (leave the key out for the default)")),
            n if n > MAX_THREADS => Err(too_many(n)),
            n => Ok(Some(n)),
        }
    }

    pub fn qos<'de, D: Deserializer<'de>>(d: D) -> Result<u8, D::Error> {
        match u8::deserialize(d)? {
            q @ (0 | 1) => Ok(q),
            q => Err(de::Error::custom(format!("qos = {q}: the MQTT sink sends at QoS 0 or 1"))),
        }
    }

    pub fn opt_frames<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
        match u64::deserialize(d)? {
            0 => Err(de::Error::custom("max_frames = 0 would read no frame (leave it out to read them all)")),
            n => Ok(Some(n)),
        }
    }

    pub fn opt_seconds<'de, D: Deserializer<'de>>(d: D) -> Result<Option<f64>, D::Error> {
        let s = f64::deserialize(d)?;
        if s.is_finite() && s > 0.0 {
            Ok(Some(s))
        } else {
            Err(de::Error::custom(format!("{s} seconds: a duration must be a positive number (leave it out for endless)")))
        }
    }

    pub fn finite3<'de, D: Deserializer<'de>>(d: D) -> Result<[f32; 3], D::Error> {
        let v = <[f32; 3]>::deserialize(d)?;
        if v.iter().all(|x| x.is_finite()) { Ok(v) } else { Err(de::Error::custom(format!("{v:?}: every value must be a finite number"))) }
    }

    /// `std`: divides every value, so neither 0 nor infinite nor NaN.
    pub fn divisors3<'de, D: Deserializer<'de>>(d: D) -> Result<[f32; 3], D::Error> {
        let v = <[f32; 3]>::deserialize(d)?;
        if v.iter().all(|x| x.is_finite() && *x != 0.0) {
            Ok(v)
        } else {
            Err(de::Error::custom(format!("{v:?}: every value divides the pixels, so it must be a finite number other than 0")))
        }
    }

    pub fn providers<'de, D: Deserializer<'de>>(d: D) -> Result<toml::Spanned<Vec<super::ProviderSpec>>, D::Error> {
        let v = toml::Spanned::<Vec<super::ProviderSpec>>::deserialize(d)?;
        if v.get_ref().is_empty() {
            return Err(de::Error::custom("providers = [] leaves no execution provider to run the model (e.g. [\"cuda\", \"cpu\"])"));
        }
        Ok(v)
    }

    pub fn scale<'de, D: Deserializer<'de>>(d: D) -> Result<f32, D::Error> {
        let v = f32::deserialize(d)?;
        if v.is_finite() && v != 0.0 { Ok(v) } else { Err(de::Error::custom(format!("scale = {v}: a finite number other than 0"))) }
    }
}

fn zeros3() -> [f32; 3] {
    [0.0; 3]
}
fn ones3() -> [f32; 3] {
    [1.0; 3]
}
fn inv255() -> f32 {
    1.0 / 255.0
}

/// An execution provider ONNX Runtime may use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ProviderName {
    Tensorrt,
    Cuda,
    Cpu,
}

impl fmt::Display for ProviderName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ProviderName::Tensorrt => "tensorrt",
            ProviderName::Cuda => "cuda",
            ProviderName::Cpu => "cpu",
        })
    }
}

/// TensorRT settings (`{ name = "tensorrt", fp16 = true, engine_cache = "cache/trt", ... }`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TensorRtOptions {
    pub fp16: bool,
    pub int8: bool,
    /// INT8 calibration table (path).
    pub int8_calibration_table: Option<String>,
    /// Folder for built engines; each model gets a subfolder keyed by its hash,
    /// its input shapes and the ONNX Runtime version, so a stale engine is never reused.
    pub engine_cache: Option<String>,
    /// Keep TensorRT's timing cache beside the engines.
    pub timing_cache: bool,
    /// Shapes for dynamic inputs, e.g. `"x:1x3x384x640"` (TensorRT profile min/opt/max).
    pub min_shapes: Option<String>,
    pub opt_shapes: Option<String>,
    pub max_shapes: Option<String>,
}

/// `"cuda"` or `{ name = "cuda", required = true, device_id = 0 }` (TensorRT takes more keys).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProviderSpec {
    pub name: ProviderName,
    /// A required provider that cannot load is an error, never a fallback.
    pub required: bool,
    /// The GPU (0 or more).
    pub device_id: i32,
    /// TF32 tensor-core maths in the CUDA provider (ONNX Runtime's default,
    /// on); off gives results closer to the CPU's, slower.
    pub tf32: bool,
    pub tensorrt: TensorRtOptions,
}

impl ProviderSpec {
    pub fn named(name: ProviderName) -> Self {
        ProviderSpec { name, required: false, device_id: 0, tf32: true, tensorrt: TensorRtOptions::default() }
    }
}

impl<'de> Deserialize<'de> for ProviderSpec {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(deny_unknown_fields)]
        struct Table {
            name: ProviderName,
            #[serde(default)]
            required: bool,
            #[serde(default)]
            device_id: i32,
            tf32: Option<bool>,
            #[serde(default)]
            fp16: bool,
            #[serde(default)]
            int8: bool,
            int8_calibration_table: Option<String>,
            engine_cache: Option<String>,
            #[serde(default)]
            timing_cache: bool,
            min_shapes: Option<String>,
            opt_shapes: Option<String>,
            max_shapes: Option<String>,
        }
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = ProviderSpec;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a provider name (`tensorrt`, `cuda`, `cpu`) or a table { name, required, device_id, ... }")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
                Ok(ProviderSpec::named(ProviderName::deserialize(de::value::StrDeserializer::<E>::new(v))?))
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
                let t = Table::deserialize(de::value::MapAccessDeserializer::new(map))?;
                let tensorrt = TensorRtOptions {
                    fp16: t.fp16,
                    int8: t.int8,
                    int8_calibration_table: t.int8_calibration_table,
                    engine_cache: t.engine_cache,
                    timing_cache: t.timing_cache,
                    min_shapes: t.min_shapes,
                    opt_shapes: t.opt_shapes,
                    max_shapes: t.max_shapes,
                };
                if t.name != ProviderName::Tensorrt && tensorrt != TensorRtOptions::default() {
                    return Err(de::Error::custom(format!(
                        "fp16, int8, int8_calibration_table, engine_cache, timing_cache and *_shapes apply to `tensorrt`, not `{}`",
                        t.name
                    )));
                }
                if t.device_id < 0 {
                    return Err(de::Error::custom(format!("device_id = {} is not a GPU index (0 or more)", t.device_id)));
                }
                if t.tf32.is_some() && t.name == ProviderName::Cpu {
                    return Err(de::Error::custom("tf32 applies to `cuda` and `tensorrt` (its CUDA provider), not `cpu`"));
                }
                if t.int8 && tensorrt.int8_calibration_table.is_none() {
                    return Err(de::Error::custom("int8 = true needs int8_calibration_table"));
                }
                Ok(ProviderSpec { name: t.name, required: t.required, device_id: t.device_id, tf32: t.tf32.unwrap_or(true), tensorrt })
            }
        }
        d.deserialize_any(V)
    }
}

fn cpu_only() -> Spanned<Vec<ProviderSpec>> {
    Spanned::new(0..0, vec![ProviderSpec::named(ProviderName::Cpu)])
}

/// `kind = "infer"`: run an ONNX model with ONNX Runtime.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InferConfig {
    pub model: Spanned<String>,
    /// Tried in order; the one that loads is printed at start and in the summary.
    #[serde(default = "cpu_only", deserialize_with = "checked::providers")]
    pub providers: Spanned<Vec<ProviderSpec>>,
    /// Intra-op threads (default: all cores; the pipeline's other threads mostly wait on this one).
    #[serde(default, deserialize_with = "checked::opt_threads")]
    pub intra_threads: Option<usize>,
    /// Inter-op threads (default 1).
    #[serde(default, deserialize_with = "checked::opt_threads")]
    pub inter_threads: Option<usize>,
    /// Let ONNX Runtime's threads spin while idle (fast alone, harmful when cores are shared).
    #[serde(default)]
    pub spinning: bool,
    /// Model input to feed (default: the model's first input).
    pub input: Option<Spanned<String>>,
    /// Run once on zeros before the first frame.
    #[serde(default = "yes")]
    pub warmup: bool,
    /// Group frames (from one or several streams) into one model run.
    pub batch: Option<Spanned<BatchConfig>>,
    /// Bind the model's input and outputs once per input shape (ONNX Runtime
    /// IoBinding): `auto` (on a CUDA or TensorRT provider), `on`, `off`.
    #[serde(default)]
    pub io_binding: IoBindingMode,
    /// Run the model on one frame in `interval + 1` per stream; a `track`
    /// stage downstream predicts the boxes in between (0: every frame).
    #[serde(default = "no_interval")]
    pub interval: Spanned<u32>,
    /// Skip the model while nothing moves (off by default).
    pub motion: Option<Spanned<MotionConfig>>,
}

/// `motion = { threshold = 25, min_area = 0.002 }` on an `infer` stage: a
/// cheap change detector (a small grey copy against a running background);
/// when the changed area is under `min_area`, the model is skipped and the
/// previous results are carried forward.
#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MotionConfig {
    /// Grey-level difference (0–255) that counts a pixel as changed.
    #[serde(default = "motion_threshold")]
    pub threshold: u8,
    /// Changed share of the picture (0–1) that counts as motion.
    #[serde(default = "motion_min_area")]
    pub min_area: f32,
    /// Width of the grey copy, pixels.
    #[serde(default = "motion_width")]
    pub width: u32,
    /// How fast the background follows the picture (0–1 per frame).
    #[serde(default = "motion_alpha")]
    pub alpha: f32,
    /// Side of the square cells the grey copy is cut into, pixels: a small
    /// object moving is motion when it changes `cell_area` of one cell.
    #[serde(default = "motion_cell")]
    pub cell: u32,
    /// Changed share of one cell (0–1) that counts as motion (0: cells off).
    #[serde(default = "motion_cell_area")]
    pub cell_area: f32,
    /// Most frames carried in a row: the model runs on the next one whatever
    /// the detector says (0: no limit).
    #[serde(default = "motion_max_carried")]
    pub max_carried: u32,
}

fn no_interval() -> Spanned<u32> {
    Spanned::new(0..0, 0)
}
fn not_once_per_track() -> Spanned<bool> {
    Spanned::new(0..0, false)
}
fn motion_threshold() -> u8 {
    25
}
fn motion_min_area() -> f32 {
    0.002
}
fn motion_width() -> u32 {
    160
}
fn motion_alpha() -> f32 {
    0.1
}
fn motion_cell() -> u32 {
    8
}
fn motion_cell_area() -> f32 {
    0.1
}
fn motion_max_carried() -> u32 {
    15
}

/// `io_binding` of an `infer` stage.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum IoBindingMode {
    /// On for a CUDA or TensorRT provider (inputs and outputs in device
    /// memory when the pipeline has a GPU), off on the CPU.
    #[default]
    Auto,
    /// Always, also on the CPU provider (input and outputs in host memory).
    On,
    /// Plain runs: the input is read where it is, outputs are new each run.
    Off,
}

/// `batch = { max = 4, timeout_ms = 10 }`: a batch runs when full, or when its oldest frame has waited `timeout_ms`.
#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BatchConfig {
    pub max: std::num::NonZeroUsize,
    #[serde(default = "batch_timeout")]
    pub timeout_ms: u64,
}

fn batch_timeout() -> u64 {
    10
}

fn yes() -> bool {
    true
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

/// `kind = "crop"`: cut each upstream region (text box) out of the frame,
/// perspective-rectified, scaled to a fixed height and batched into one tensor
/// for secondary inference.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CropConfig {
    /// Crop height in pixels (PP-OCR recognition: 48).
    #[serde(default = "crop_height")]
    pub height: Spanned<u32>,
    /// Width follows the region's aspect ratio, at most this (wider crops are squeezed).
    #[serde(default = "crop_max_width")]
    pub max_width: u32,
    /// Narrowest tensor width (crops are padded to the widest crop in the frame, at least this).
    #[serde(default = "crop_min_width")]
    pub min_width: u32,
    /// Regions taller than wide by this ratio are turned 90° (vertical text).
    #[serde(default = "crop_rotate_ratio")]
    pub rotate_ratio: f32,
    #[serde(default)]
    pub color: ChannelOrder,
    #[serde(default = "half3", deserialize_with = "checked::finite3")]
    pub mean: [f32; 3],
    #[serde(default = "half3", deserialize_with = "checked::divisors3")]
    pub std: [f32; 3],
    #[serde(default = "inv255", deserialize_with = "checked::scale")]
    pub scale: f32,
    /// A `classification` stage upstream that says which regions are upside
    /// down (PP-OCR's text-line orientation classifier): those are turned 180°.
    pub orientation: Option<Spanned<String>>,
    /// The class of `orientation` that means upside down.
    #[serde(default = "one")]
    pub flip_class: u32,
    /// Crop each track's region once (a `track` stage upstream gives the ids)
    /// and reuse its result while the track lives.
    #[serde(default = "not_once_per_track")]
    pub once_per_track: Spanned<bool>,
    /// With `once_per_track`: crop a track's region again after this many frames (0: never).
    #[serde(default)]
    pub refresh_frames: u64,
    /// With `once_per_track`: crop a track's region again after this long (0: never).
    #[serde(default)]
    pub refresh_ms: u64,
}

fn one() -> u32 {
    1
}

fn crop_height() -> Spanned<u32> {
    Spanned::new(0..0, 48)
}
fn crop_max_width() -> u32 {
    960
}
fn crop_min_width() -> u32 {
    48
}
fn crop_rotate_ratio() -> f32 {
    1.5
}
fn half3() -> [f32; 3] {
    [0.5; 3]
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

/// `kind = "ndjson"`: one JSON object per frame, one line each.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NdjsonSinkConfig {
    /// File path, or `-` for stdout.
    pub path: Spanned<String>,
    /// Append instead of truncating.
    #[serde(default)]
    pub append: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SubtitleFormat {
    Srt,
    Vtt,
}

/// `kind = "subtitles"`: SRT or WebVTT cues from recognised text and speech segments.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SubtitlesSinkConfig {
    pub path: Spanned<String>,
    /// Default: from the file extension (`.vtt` → vtt, else srt).
    pub format: Option<SubtitleFormat>,
    /// Cue text for a speech segment.
    #[serde(default = "speech_text")]
    pub speech_text: String,
}

fn speech_text() -> String {
    "(speech)".into()
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ImageFormat {
    #[default]
    Jpeg,
    Png,
}

/// `kind = "images"`: JPEG/PNG snapshots, `STREAM-SEQ.jpg` in `folder`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ImagesSinkConfig {
    pub folder: Spanned<String>,
    #[serde(default)]
    pub format: ImageFormat,
    /// Every Nth frame of each stream (by sequence number).
    #[serde(default = "one_u64")]
    pub every: u64,
    /// Only frames with boxes, text or detections.
    #[serde(default)]
    pub only_with_results: bool,
    /// Draw boxes, text regions and detections.
    #[serde(default = "yes_images")]
    pub annotate: bool,
}

fn one_u64() -> u64 {
    1
}
fn yes_images() -> bool {
    true
}

/// Container of a `video` sink.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum VideoContainer {
    Mp4,
    Matroska,
    Mpegts,
    /// FLV, what RTMP carries.
    Flv,
    /// RTSP publishing (ANNOUNCE/RECORD) to a server.
    Rtsp,
}

impl VideoContainer {
    /// FFmpeg's muxer name.
    pub fn muxer(self) -> &'static str {
        match self {
            VideoContainer::Mp4 => "mp4",
            VideoContainer::Matroska => "matroska",
            VideoContainer::Mpegts => "mpegts",
            VideoContainer::Flv => "flv",
            VideoContainer::Rtsp => "rtsp",
        }
    }

    /// From a URL's scheme (`rtmp://` → flv, `rtsp://` → RTSP, `srt://`,
    /// `udp://` and `tcp://` → MPEG-TS) or a file name's extension.
    pub fn from_path(path: &str) -> Option<Self> {
        if let Some((scheme, _)) = path.split_once("://") {
            match scheme.to_ascii_lowercase().as_str() {
                "rtmp" | "rtmps" => return Some(VideoContainer::Flv),
                "rtsp" | "rtsps" => return Some(VideoContainer::Rtsp),
                "srt" | "udp" | "tcp" => return Some(VideoContainer::Mpegts),
                _ => {}
            }
        }
        let ext = std::path::Path::new(path).extension()?.to_str()?.to_ascii_lowercase();
        match ext.as_str() {
            "mp4" | "m4v" | "mov" => Some(VideoContainer::Mp4),
            "mkv" => Some(VideoContainer::Matroska),
            "ts" | "m2ts" => Some(VideoContainer::Mpegts),
            "flv" => Some(VideoContainer::Flv),
            _ => None,
        }
    }
}

/// `kind = "video"`: encoded video (H.264 by default) of the frames, plain or
/// with the results drawn on them.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VideoSinkConfig {
    /// `.mp4`, `.mkv` or `.ts` file (`{stream}` is replaced by the stream name), `-` for
    /// stdout, or a server to push to: `rtmp://`, `rtsp://`, `srt://`, `udp://` URL.
    pub path: Spanned<String>,
    /// Container (default: from the URL scheme or the extension; required for stdout: `mpegts` or `matroska`).
    pub format: Option<Spanned<VideoContainer>>,
    /// An FFmpeg video encoder (`libx264`, `h264_nvenc`, ...) or `auto` (NVENC when it opens, else libx264).
    #[serde(default = "video_codec")]
    pub codec: Spanned<String>,
    /// Encoder preset (libx264 default `veryfast`, NVENC `p4`).
    pub preset: Option<Spanned<String>>,
    /// Constant quality, 0–51 (lower is better; default 23).
    pub crf: Option<Spanned<u32>>,
    /// Draw boxes, labels, recognised text and scores.
    #[serde(default = "yes")]
    pub annotate: bool,
    /// Encode only this stream (the others pass through unwritten).
    pub stream: Option<Spanned<String>>,
    /// mp4 only: fragmented mp4, playable even if the process is killed.
    #[serde(default)]
    pub fragmented: bool,
    /// Seconds between keyframes (default 1 for fragmented mp4 and network
    /// outputs, where a reader joins or a kill cuts at one; else the encoder's own).
    pub keyframe_interval_s: Option<Spanned<f64>>,
    /// Fragmented mp4: the longest fragment in ms (default 1000), about the most
    /// that is lost if the process is killed.
    pub fragment_duration_ms: Option<Spanned<u32>>,
}

fn video_codec() -> Spanned<String> {
    Spanned::new(0..0, "libx264".into())
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

/// `kind = "null"`: discards frames (benchmarks).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NullSinkConfig {}

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

/// `kind = "detections"`: boxes read from a file instead of a model, one
/// frame per frame number and no image: MOT Challenge text
/// (`frame, id, x, y, w, h, score[, class, ...]`, frames from 1).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DetectionsSourceConfig {
    /// Path (relative to the pipeline file).
    pub uri: Spanned<String>,
    /// Frames per second (timestamps).
    #[serde(default = "detections_rate")]
    pub rate: Spanned<f64>,
    /// Frames in the stream (default: up to the last frame in the file).
    #[serde(default, deserialize_with = "checked::opt_frames")]
    pub frames: Option<u64>,
}

fn detections_rate() -> Spanned<f64> {
    Spanned::new(0..0, 30.0)
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

/// `kind = "kafka"`: jobs read from a Kafka topic in a consumer group, each
/// job (a JSON object naming its media) its own stream, processed like one
/// file of a `dir` batch; a job's offset is committed once its results are
/// delivered.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KafkaSourceConfig {
    /// Bootstrap brokers, `host:port[,host:port...]`.
    pub brokers: Spanned<String>,
    /// The job topic.
    pub topic: Spanned<String>,
    /// The consumer group the workers share.
    pub group: Spanned<String>,
    /// Jobs processed at once.
    #[serde(default = "one_nz")]
    pub parallel: Spanned<std::num::NonZeroUsize>,
    /// Where bad jobs go, with their reason (none: logged, counted and committed).
    pub dead_letter_topic: Option<Spanned<String>>,
    /// librdkafka properties passed through as written (TLS, SASL, timeouts).
    #[serde(default)]
    pub client: std::collections::BTreeMap<String, Spanned<ClientSetting>>,
    /// End the run once no job has come for this long and none is in flight (default: run until stopped).
    pub stop_when_idle_ms: Option<Spanned<u64>>,
    /// The name this worker gives in dead letters and its client id (default `HOST:PID`).
    pub worker: Option<Spanned<String>>,
    /// Decoder threads per job; 0 lets FFmpeg choose.
    #[serde(default, deserialize_with = "checked::threads")]
    pub decoder_threads: usize,
    /// Stop each job after this many frames.
    #[serde(default, deserialize_with = "checked::opt_frames")]
    pub max_frames: Option<u64>,
    /// What to read from each job's media: its video (frames) or its audio (timed windows).
    #[serde(default)]
    pub media: MediaKind,
    /// Audio: the rate the audio is resampled to (default 16000 Hz).
    pub sample_rate: Option<Spanned<u32>>,
    /// Audio: samples per window (default 512).
    pub window: Option<Spanned<usize>>,
    /// Audio: samples between window starts (default: the window).
    pub hop: Option<Spanned<usize>>,
    /// Video: turn frames as each job's display matrix asks (`auto`), or process them as stored (`none`, default).
    #[serde(default)]
    pub rotate: Rotate,
}

/// A client property's value: written as a string, number or boolean, passed on as text.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum ClientSetting {
    Text(String),
    Integer(i64),
    Float(f64),
    Bool(bool),
}

impl ClientSetting {
    /// The value as librdkafka reads it (`${VAR}` in text is expanded by the caller).
    pub fn text(&self) -> String {
        match self {
            ClientSetting::Text(s) => s.clone(),
            ClientSetting::Integer(i) => i.to_string(),
            ClientSetting::Float(f) => f.to_string(),
            ClientSetting::Bool(b) => b.to_string(),
        }
    }
}

/// TLS files of a bus sink (`tls = { ca = "...", cert = "...", key = "..." }`).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BusTlsConfig {
    /// CA certificates (PEM) the broker's certificate is checked against.
    pub ca: Option<Spanned<String>>,
    /// Client certificate (PEM), for brokers that ask for one.
    pub cert: Option<Spanned<String>>,
    /// The client certificate's private key (PEM).
    pub key: Option<Spanned<String>>,
}

/// SASL for the Kafka sink (`sasl = { mechanism = "PLAIN", username = "...", password = "${PW}" }`).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KafkaSaslConfig {
    /// `PLAIN`, `SCRAM-SHA-256` or `SCRAM-SHA-512`.
    #[serde(default = "sasl_mechanism")]
    pub mechanism: Spanned<String>,
    pub username: Spanned<String>,
    /// Masked wherever it is shown; write `${ENV}` to keep it out of the file.
    pub password: Spanned<String>,
}

fn sasl_mechanism() -> Spanned<String> {
    Spanned::new(0..0, "PLAIN".into())
}

fn spool_max_bytes() -> u64 {
    256 << 20
}
fn buffer_messages() -> usize {
    10_000
}
fn flush_timeout_ms() -> u64 {
    5_000
}

/// `kind = "kafka"`: one message per frame and per stream event, keyed by stream.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KafkaSinkConfig {
    /// `host:port[,host:port...]`.
    pub brokers: Spanned<String>,
    /// Topic; `{stream}` is replaced by the stream name (made topic-safe).
    pub topic: Spanned<String>,
    /// `all` (default), `1` or `0`.
    #[serde(default)]
    pub acks: KafkaAcks,
    /// The idempotent producer (no duplicates from retries, order kept); default on.
    #[serde(default = "yes")]
    pub idempotent: bool,
    /// `none` (default), `gzip`, `snappy`, `lz4` or `zstd`.
    #[serde(default)]
    pub compression: KafkaCompression,
    /// How long the producer waits to fill a batch (librdkafka `linger.ms`).
    #[serde(default = "kafka_linger")]
    pub linger_ms: u64,
    /// Largest batch in bytes (librdkafka `batch.size`).
    pub batch_size: Option<u64>,
    /// Send only frames with at least one result (events always go).
    #[serde(default)]
    pub only_with_results: bool,
    pub tls: Option<BusTlsConfig>,
    pub sasl: Option<KafkaSaslConfig>,
    /// librdkafka properties passed through as written (`[sinks.x.client]`).
    #[serde(default)]
    pub client: std::collections::BTreeMap<String, Spanned<String>>,
    /// Folder of the spool file (`PIPELINE-SINK.spool`); default: `spool/` beside the pipeline file.
    pub spool_dir: Option<Spanned<String>>,
    /// Largest spool; when full, new messages are dropped and counted.
    #[serde(default = "spool_max_bytes")]
    pub spool_max_bytes: u64,
    /// Messages kept in memory until the broker acknowledges them; beyond, they spool.
    #[serde(default = "buffer_messages")]
    pub buffer_messages: usize,
    /// How long the end of a stream and the end of the run wait for acknowledgements.
    #[serde(default = "flush_timeout_ms")]
    pub flush_timeout_ms: u64,
    /// Connected with messages in flight and no acknowledgement for this long: the producer is made again (0: never).
    #[serde(default = "stall_timeout_ms")]
    pub stall_timeout_ms: u64,
}

fn stall_timeout_ms() -> u64 {
    10_000
}

/// Which acknowledgement a Kafka message waits for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
pub enum KafkaAcks {
    /// Every in-sync replica has it (needed by the idempotent producer).
    #[default]
    #[serde(rename = "all")]
    All,
    #[serde(rename = "1")]
    Leader,
    #[serde(rename = "0")]
    None,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum KafkaCompression {
    #[default]
    None,
    Gzip,
    Snappy,
    Lz4,
    Zstd,
}
fn kafka_linger() -> u64 {
    5
}

/// `kind = "mqtt"`: results and events on `{prefix}/{stream}/results|events`,
/// `{prefix}/available` (`online`, and `offline` as the retained last will).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MqttSinkConfig {
    /// `host:port`, `mqtt://host:port` or `mqtts://host:port` (TLS).
    pub broker: Spanned<String>,
    /// Topic prefix.
    #[serde(default = "mqtt_prefix")]
    pub prefix: Spanned<String>,
    /// 0 or 1 (default): at 1 a message is delivered at the broker's PUBACK.
    #[serde(default = "mqtt_qos", deserialize_with = "checked::qos")]
    pub qos: u8,
    /// Default: `infer-stream-PIPELINE-SINK`.
    pub client_id: Option<Spanned<String>>,
    pub username: Option<Spanned<String>>,
    /// Masked wherever it is shown; write `${ENV}` to keep it out of the file.
    pub password: Option<Spanned<String>>,
    pub tls: Option<BusTlsConfig>,
    /// Keep-alive interval, seconds.
    #[serde(default = "mqtt_keep_alive")]
    pub keep_alive_s: u64,
    /// Send only frames with at least one result (events always go).
    #[serde(default)]
    pub only_with_results: bool,
    /// Folder of the spool file (`PIPELINE-SINK.spool`); default: `spool/` beside the pipeline file.
    pub spool_dir: Option<Spanned<String>>,
    /// Largest spool; when full, new messages are dropped and counted.
    #[serde(default = "spool_max_bytes")]
    pub spool_max_bytes: u64,
    /// Messages kept in memory until the broker acknowledges them; beyond, they spool.
    #[serde(default = "buffer_messages")]
    pub buffer_messages: usize,
    /// How long the end of a stream and the end of the run wait for acknowledgements.
    #[serde(default = "flush_timeout_ms")]
    pub flush_timeout_ms: u64,
}

fn mqtt_prefix() -> Spanned<String> {
    Spanned::new(0..0, "infer-stream".into())
}
fn mqtt_qos() -> u8 {
    1
}
fn mqtt_keep_alive() -> u64 {
    30
}

/// `kind = "request"`: pictures sent to `infer-stream serve` (`POST /v1/infer`,
/// gRPC `Infer`), one frame per request, answered with the frame's results.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RequestSourceConfig {
    /// Requests waiting to start at most; beyond it a request is refused as busy (HTTP 503).
    #[serde(default = "request_max_waiting")]
    pub max_waiting: Spanned<usize>,
    /// Deadline of a request that sets none, in milliseconds (HTTP 504 past it).
    #[serde(default = "request_timeout_ms")]
    pub timeout_ms: Spanned<u64>,
    /// Largest picture accepted, in bytes of the encoded file (HTTP 413 beyond it).
    #[serde(default = "request_max_bytes")]
    pub max_bytes: Spanned<usize>,
    /// Largest picture (width × height) accepted; default `[pipeline] max_pixels`.
    pub max_pixels: Option<u64>,
}

fn request_max_waiting() -> Spanned<usize> {
    Spanned::new(0..0, 64)
}
fn request_timeout_ms() -> Spanned<u64> {
    Spanned::new(0..0, 10_000)
}
fn request_max_bytes() -> Spanned<usize> {
    Spanned::new(0..0, 16 << 20)
}
