//! The model side of the stage kinds: `preprocess` and `crop` (frames and
//! regions into model tensors), `infer` with its execution providers, batching
//! and motion gating, and the settings only they use.

use std::fmt;

use serde::Deserialize;
use serde::de::{self, Deserializer, MapAccess, Visitor};
use toml::Spanned;

use super::{checked, yes};

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
