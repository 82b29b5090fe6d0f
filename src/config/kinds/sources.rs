//! Source kinds: the config of each node that brings frames in (files, folders,
//! image sequences, RTSP cameras, audio, synthetic test sources, detections
//! files, Kafka jobs, `serve` requests) and the settings only sources use.

use serde::Deserialize;
use toml::Spanned;

use super::{checked, yes};

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
