//! NVIDIA GPU figures for `/metrics`, read through NVML at each scrape, so a
//! deployment without NVIDIA's DCGM exporter still sees GPU use next to the
//! pipeline's own series: utilisation, memory used and total, and the video
//! decoder's and encoder's use, one series per GPU.
//!
//! NVML (`libnvidia-ml.so.1`, part of the driver) is loaded at run time, the
//! first time `/metrics` is scraped. Without a driver or a GPU these series are
//! absent, not zero: a dashboard then shows "no data" rather than an idle GPU.

use std::ffi::OsStr;
use std::fmt;
use std::sync::OnceLock;

use nvml_wrapper::Nvml;
use prometheus_client::encoding::DescriptorEncoder;
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::registry::Unit;

use super::family;

/// One GPU's figures at one scrape; a figure the device does not report is `None`.
#[derive(Debug, Clone, PartialEq)]
pub struct GpuReading {
    /// NVML's index (the order of `nvidia-smi`).
    pub index: u32,
    pub uuid: String,
    pub name: String,
    /// Percent of the last sample period with a kernel running.
    pub utilization_pct: Option<u32>,
    pub memory_used_bytes: Option<u64>,
    pub memory_total_bytes: Option<u64>,
    /// Percent use of the video decoder (NVDEC) and encoder (NVENC).
    pub decoder_pct: Option<u32>,
    pub encoder_pct: Option<u32>,
}

/// NVML, loaded once; `None` where there is no driver (the usual case without a GPU).
fn nvml() -> Option<&'static Nvml> {
    static NVML: OnceLock<Option<Nvml>> = OnceLock::new();
    NVML.get_or_init(|| {
        // The driver installs the versioned name; the bare one comes with development packages.
        Nvml::builder().lib_path(OsStr::new("libnvidia-ml.so.1")).init().or_else(|_| Nvml::init()).ok()
    })
    .as_ref()
}

/// Every GPU's figures now: empty without NVML or without GPUs.
pub fn read() -> Vec<GpuReading> {
    let Some(nvml) = nvml() else { return Vec::new() };
    let count = nvml.device_count().unwrap_or(0);
    (0..count)
        .filter_map(|i| {
            let d = nvml.device_by_index(i).ok()?;
            let mem = d.memory_info().ok();
            Some(GpuReading {
                index: i,
                uuid: d.uuid().unwrap_or_default(),
                name: d.name().unwrap_or_default(),
                utilization_pct: d.utilization_rates().ok().map(|u| u.gpu),
                memory_used_bytes: mem.as_ref().map(|m| m.used),
                memory_total_bytes: mem.as_ref().map(|m| m.total),
                decoder_pct: d.decoder_utilization().ok().map(|u| u.utilization),
                encoder_pct: d.encoder_utilization().ok().map(|u| u.utilization),
            })
        })
        .collect()
}

/// Fractions 0–1, named `…_ratio` as Prometheus names them.
fn ratio_unit() -> Unit {
    Unit::Other("ratio".into())
}

type GpuLabels<'a> = [(&'static str, &'a str); 3];

/// Write the GPU families for `gpus`; nothing at all (not even a `# HELP`) when empty.
pub fn encode(enc: &mut DescriptorEncoder, gpus: &[GpuReading]) -> fmt::Result {
    if gpus.is_empty() {
        return Ok(());
    }
    let index: Vec<String> = gpus.iter().map(|g| g.index.to_string()).collect();
    let labels = |i: usize| -> GpuLabels<'_> { [("gpu", &index[i]), ("uuid", &gpus[i].uuid), ("name", &gpus[i].name)] };
    let ratio = |pct: u32| ConstGauge::new(f64::from(pct) / 100.0);
    let rows =
        |pick: fn(&GpuReading) -> Option<f64>| (0..gpus.len()).filter_map(move |i| pick(&gpus[i]).map(|v| (labels(i), ConstGauge::new(v))));
    family(
        enc,
        "infer_stream_gpu_utilization",
        "Fraction of the last sample period a kernel ran on the GPU (NVML).",
        Some(&ratio_unit()),
        MetricType::Gauge,
        (0..gpus.len()).filter_map(|i| gpus[i].utilization_pct.map(|p| (labels(i), ratio(p)))),
    )?;
    family(
        enc,
        "infer_stream_gpu_memory_used",
        "GPU memory allocated, by every process (NVML).",
        Some(&Unit::Bytes),
        MetricType::Gauge,
        rows(|g| g.memory_used_bytes.map(|b| b as f64)),
    )?;
    family(
        enc,
        "infer_stream_gpu_memory_total",
        "GPU memory installed (NVML).",
        Some(&Unit::Bytes),
        MetricType::Gauge,
        rows(|g| g.memory_total_bytes.map(|b| b as f64)),
    )?;
    family(
        enc,
        "infer_stream_gpu_decoder_utilization",
        "Fraction of time the GPU's video decoder (NVDEC) was busy (NVML).",
        Some(&ratio_unit()),
        MetricType::Gauge,
        (0..gpus.len()).filter_map(|i| gpus[i].decoder_pct.map(|p| (labels(i), ratio(p)))),
    )?;
    family(
        enc,
        "infer_stream_gpu_encoder_utilization",
        "Fraction of time the GPU's video encoder (NVENC) was busy (NVML).",
        Some(&ratio_unit()),
        MetricType::Gauge,
        (0..gpus.len()).filter_map(|i| gpus[i].encoder_pct.map(|p| (labels(i), ratio(p)))),
    )
}
