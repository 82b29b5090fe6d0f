//! The node kinds: one config struct per kind, and the registry that maps
//! `kind = "..."` to it. Each struct builds its runtime stage (see `crate::stages`).
//!
//! The structs live by role: `sources`, `stages` (results), `infer` (the
//! model-input stages and `infer`), `sinks`; `checked` holds the value checks
//! made while reading. This file ties them together: [`NodeKind`], the
//! registry of kind names per role, and the defaults they share.

use serde::Deserialize;
use serde::de::Deserializer;

use super::Role;

mod checked;
mod infer;
mod sinks;
mod sources;
mod stages;

pub use infer::*;
pub use sinks::*;
pub use sources::*;
pub use stages::*;

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
    Clips(ClipsSinkConfig),
    AudioLevel(AudioLevelConfig),
    Null(NullSinkConfig),
    Track(TrackConfig),
    Detections(DetectionsSourceConfig),
    Analytics(AnalyticsConfig),
    KafkaJobs(KafkaSourceConfig),
    Kafka(KafkaSinkConfig),
    Mqtt(MqttSinkConfig),
    Request(RequestSourceConfig),
    Redact(RedactConfig),
    Python(PythonConfig),
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
            NodeKind::Clips(_) => "clips",
            NodeKind::AudioLevel(_) => "audio_level",
            NodeKind::Null(_) => "null",
            NodeKind::Track(_) => "track",
            NodeKind::Detections(_) => "detections",
            NodeKind::Analytics(_) => "analytics",
            NodeKind::KafkaJobs(_) | NodeKind::Kafka(_) => "kafka",
            NodeKind::Mqtt(_) => "mqtt",
            NodeKind::Request(_) => "request",
            NodeKind::Redact(_) => "redact",
            NodeKind::Python(_) => "python",
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
    "redact",
    "python",
];
const SINK_KINDS: &[&str] = &["ndjson", "subtitles", "images", "video", "clips", "null", "kafka", "mqtt"];

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
        (Role::Sink, "clips") => NodeKind::Clips(ClipsSinkConfig::deserialize(d)?),
        (Role::Stage, "audio_level") => NodeKind::AudioLevel(AudioLevelConfig::deserialize(d)?),
        (Role::Stage, "track") => NodeKind::Track(TrackConfig::deserialize(d)?),
        (Role::Source, "detections") => NodeKind::Detections(DetectionsSourceConfig::deserialize(d)?),
        (Role::Stage, "analytics") => NodeKind::Analytics(AnalyticsConfig::deserialize(d)?),
        (Role::Source, "kafka") => NodeKind::KafkaJobs(KafkaSourceConfig::deserialize(d)?),
        (Role::Sink, "kafka") => NodeKind::Kafka(KafkaSinkConfig::deserialize(d)?),
        (Role::Sink, "mqtt") => NodeKind::Mqtt(MqttSinkConfig::deserialize(d)?),
        (Role::Source, "request") => NodeKind::Request(RequestSourceConfig::deserialize(d)?),
        (Role::Stage, "redact") => NodeKind::Redact(RedactConfig::deserialize(d)?),
        (Role::Stage, "python") => NodeKind::Python(PythonConfig::deserialize(d)?),
        _ => unreachable!("kind `{kind}` was checked against the registry"),
    })
}

fn yes() -> bool {
    true
}
