//! Sink kinds: the config of each node that takes results out (NDJSON,
//! subtitles, images, video, null, Kafka, MQTT) and the bus settings (TLS,
//! SASL) the Kafka and MQTT sinks share.

use serde::Deserialize;
use toml::Spanned;

use super::{checked, yes};

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

/// `kind = "null"`: discards frames (benchmarks).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NullSinkConfig {}

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

/// What starts a clip: event kinds (`["crossed", "entered"]`), or a filter on
/// detections (`{ classes = ["person"], min_score = 0.5 }`).
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum ClipTrigger {
    Events(Vec<String>),
    Detections(ClipDetectionFilter),
}

/// A frame with a detection of one of `classes` (any class when empty) scoring at least `min_score` starts a clip.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClipDetectionFilter {
    /// Class names (or numbers, as text) that count; empty: any.
    #[serde(default)]
    pub classes: Vec<String>,
    /// The lowest score that counts (default 0.5).
    #[serde(default = "clip_min_score")]
    pub min_score: f32,
}

fn clip_min_score() -> f32 {
    0.5
}

/// How long and how much of its clips a `clips` sink keeps.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClipRetain {
    /// Clips older than this are deleted: `"90s"`, `"30m"`, `"12h"`, `"7d"`.
    pub max_age: Option<Spanned<String>>,
    /// The oldest clips are deleted while all together take more: `"500MB"`, `"20GB"`.
    pub max_bytes: Option<Spanned<String>>,
}

/// `kind = "clips"`: a clip of the source's own compressed video around each
/// event (`pre_s` before, `post_s` after), remuxed into fragmented mp4 without
/// re-encoding; overlapping events make one clip.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClipsSinkConfig {
    /// What starts a clip: event kinds, or a filter on detections.
    pub on: Spanned<ClipTrigger>,
    /// Seconds before the event (the clip starts at the keyframe at or before it).
    #[serde(default = "clip_pre_s")]
    pub pre_s: Spanned<f64>,
    /// Seconds after the last event of the clip.
    #[serde(default = "clip_post_s")]
    pub post_s: Spanned<f64>,
    /// The longest clip in seconds: events that keep coming extend a clip up to this.
    #[serde(default = "clip_max_s")]
    pub max_s: Spanned<f64>,
    /// Where clips go: `{stream}`, `{start:%Y%m%d-%H%M%S}` (UTC), `{event}`, `{seq}` are filled in.
    #[serde(default = "clip_path")]
    pub path: Spanned<String>,
    /// Clips of the frames with the results drawn, re-encoded, rather than the
    /// source's packets copied (forced when a `redact` stage is upstream).
    #[serde(default = "no_annotated")]
    pub annotated: Spanned<bool>,
    /// Retention: the oldest clips are deleted past `max_age` or `max_bytes`.
    pub retain: Option<ClipRetain>,
}

fn no_annotated() -> Spanned<bool> {
    Spanned::new(0..0, false)
}
fn clip_pre_s() -> Spanned<f64> {
    Spanned::new(0..0, 5.0)
}
fn clip_post_s() -> Spanned<f64> {
    Spanned::new(0..0, 5.0)
}
fn clip_max_s() -> Spanned<f64> {
    Spanned::new(0..0, 60.0)
}
fn clip_path() -> Spanned<String> {
    Spanned::new(0..0, "clips/{stream}/{start:%Y%m%d-%H%M%S}-{event}.mp4".into())
}

/// `"7d"`, `"12h"`, `"30m"`, `"90s"` (or a plain number of seconds) in seconds.
pub fn parse_age(text: &str) -> Result<f64, String> {
    let t = text.trim();
    let (num, unit) = t.split_at(t.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(t.len()));
    let n: f64 =
        num.parse().map_err(|_| format!("`{text}` is not an age: write a number and a unit, as \"7d\", \"12h\", \"30m\", \"90s\""))?;
    let mult = match unit.trim() {
        "" | "s" => 1.0,
        "m" => 60.0,
        "h" => 3600.0,
        "d" => 86400.0,
        u => return Err(format!("`{text}`: unknown unit `{u}` (use s, m, h or d)")),
    };
    Ok(n * mult).and_then(|v| if v > 0.0 && v.is_finite() { Ok(v) } else { Err(format!("`{text}` must be more than 0")) })
}

/// `"20GB"`, `"500MB"`, `"64KiB"`, `"1000"` (bytes) in bytes.
pub fn parse_bytes(text: &str) -> Result<u64, String> {
    let t = text.trim();
    let (num, unit) = t.split_at(t.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(t.len()));
    let n: f64 = num.parse().map_err(|_| format!("`{text}` is not a size: write a number and a unit, as \"500MB\", \"20GB\""))?;
    let mult: f64 = match unit.trim().to_ascii_uppercase().as_str() {
        "" | "B" => 1.0,
        "KB" | "K" => 1e3,
        "MB" | "M" => 1e6,
        "GB" | "G" => 1e9,
        "TB" | "T" => 1e12,
        "KIB" => 1024.0,
        "MIB" => 1024.0 * 1024.0,
        "GIB" => 1024.0 * 1024.0 * 1024.0,
        "TIB" => 1024.0 * 1024.0 * 1024.0 * 1024.0,
        u => return Err(format!("`{text}`: unknown unit `{u}` (use B, KB, MB, GB, TB, KiB, MiB, GiB, TiB)")),
    };
    let v = n * mult;
    if v >= 1.0 && v.is_finite() { Ok(v as u64) } else { Err(format!("`{text}` must be at least 1 byte")) }
}
