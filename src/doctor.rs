//! `infer-stream doctor`: what this machine can really use, said plainly.

use std::path::Path;

use serde::Serialize;

use crate::backend;

#[derive(Debug, Clone, Serialize)]
pub struct FfmpegFacts {
    pub versions: String,
    pub hwaccels: Vec<String>,
}

#[derive(Debug, Clone, Serialize)]
pub struct GstFacts {
    /// Built with the `gstreamer` feature.
    pub built: bool,
    pub version: Option<String>,
    pub nvcodec: Option<bool>,
    pub error: Option<String>,
}

#[derive(Debug, Clone, Serialize)]
pub struct OrtFacts {
    pub library: String,
    pub origin: String,
    pub version: Option<String>,
    pub providers: Vec<String>,
    pub error: Option<String>,
}

#[derive(Debug, Clone, Serialize)]
pub struct CudaFacts {
    /// Built with the `cuda` feature.
    pub built: bool,
    pub driver: bool,
    pub nvrtc: bool,
    pub devices: usize,
}

/// The whole report, plus what a pipeline will actually run on.
#[derive(Debug, Clone, Serialize)]
pub struct Doctor {
    pub ffmpeg: FfmpegFacts,
    pub gstreamer: GstFacts,
    pub onnxruntime: OrtFacts,
    pub cuda: CudaFacts,
    /// Decode path a pipeline gets here.
    pub decode: String,
    /// Best execution provider a pipeline gets here.
    pub inference: String,
    /// What a `video` sink with `codec = "auto"` encodes with here, and why.
    pub encode: String,
}

fn gst() -> GstFacts {
    #[cfg(feature = "gstreamer")]
    {
        match backend::gstreamer::version() {
            Ok(v) => GstFacts { built: true, version: Some(v), nvcodec: Some(backend::gstreamer::has_nvcodec()), error: None },
            Err(e) => GstFacts { built: true, version: None, nvcodec: None, error: Some(e) },
        }
    }
    #[cfg(not(feature = "gstreamer"))]
    GstFacts { built: false, version: None, nvcodec: None, error: Some("built without the `gstreamer` feature".into()) }
}

fn cuda() -> CudaFacts {
    #[cfg(feature = "cuda")]
    {
        let p = backend::cuda::probe();
        CudaFacts { built: true, driver: p.driver, nvrtc: p.nvrtc, devices: p.devices }
    }
    #[cfg(not(feature = "cuda"))]
    CudaFacts { built: false, driver: Path::new("/proc/driver/nvidia/version").exists(), nvrtc: false, devices: 0 }
}

/// Probe everything; nothing here fails: problems are reported as facts.
pub fn probe(ort_library: Option<&Path>) -> Doctor {
    let ffmpeg = FfmpegFacts { versions: backend::ffmpeg::versions(), hwaccels: backend::ffmpeg::hwaccels() };
    let explicit = ort_library.map(|p| (p, "--ort-library"));
    let (lib, origin) = backend::ort::choose_library(explicit);
    let onnxruntime = match backend::ort::runtime(explicit) {
        Ok(rt) => OrtFacts {
            library: rt.library.display().to_string(),
            origin: rt.origin.into(),
            version: Some(rt.version()),
            providers: rt.available_providers().iter().map(|p| p.to_string()).collect(),
            error: None,
        },
        Err(e) => OrtFacts {
            library: lib.display().to_string(),
            origin: origin.into(),
            version: None,
            providers: Vec::new(),
            error: Some(e.to_string()),
        },
    };
    let cuda = cuda();
    let gpu = cuda.driver && cuda.devices > 0;
    let decode = match (gpu, ffmpeg.hwaccels.iter().any(|h| h == "cuda")) {
        (true, true) => "FFmpeg; NVDEC (hwaccel cuda) available".to_string(),
        (false, true) => "FFmpeg software: this FFmpeg has hwaccel cuda, but there is no NVIDIA GPU".to_string(),
        (_, false) => "FFmpeg software: this FFmpeg has no cuda hwaccel".to_string(),
    };
    let inference = if onnxruntime.error.is_some() {
        "none: ONNX Runtime could not be loaded".to_string()
    } else if gpu && onnxruntime.providers.iter().any(|p| p == "tensorrt") {
        "tensorrt".to_string()
    } else if gpu && onnxruntime.providers.iter().any(|p| p == "cuda") {
        "cuda".to_string()
    } else if onnxruntime.providers.iter().any(|p| p == "cuda") {
        "cpu: this ONNX Runtime has CUDA providers, but there is no NVIDIA GPU".to_string()
    } else {
        "cpu: this ONNX Runtime build has no CUDA/TensorRT provider".to_string()
    };
    let auto = backend::ffmpeg::EncoderSettings { codec: "auto".into(), preset: None, crf: None };
    let encode = match backend::ffmpeg::choose_encoder(&auto) {
        Ok(c) if c.name == "h264_nvenc" && gpu && cuda.built => {
            "h264_nvenc: NVENC opens here; NVDEC frames are encoded where they are, results drawn on the GPU".to_string()
        }
        Ok(c) if c.name == "h264_nvenc" => "h264_nvenc: NVENC opens here".to_string(),
        Ok(c) => format!("{}: {}", c.name, c.note.unwrap_or_else(|| "chosen".into())),
        Err(e) => format!("none: {e}"),
    };
    Doctor { ffmpeg, gstreamer: gst(), onnxruntime, cuda, decode, inference, encode }
}

impl Doctor {
    pub fn render(&self) -> String {
        let yes = |b: bool| if b { "yes" } else { "no" };
        let mut s = String::new();
        s.push_str(&format!(
            "FFmpeg        {}\n              hwaccels: {}\n",
            self.ffmpeg.versions,
            if self.ffmpeg.hwaccels.is_empty() { "none".into() } else { self.ffmpeg.hwaccels.join(", ") }
        ));
        let g = &self.gstreamer;
        match (&g.version, &g.error) {
            (Some(v), _) => s.push_str(&format!("GStreamer     {v}; NVIDIA nvcodec elements: {}\n", yes(g.nvcodec == Some(true)))),
            (None, Some(e)) => s.push_str(&format!("GStreamer     not available: {e}\n")),
            _ => {}
        }
        let o = &self.onnxruntime;
        match &o.error {
            None => s.push_str(&format!(
                "ONNX Runtime  {} from {} ({})\n              execution providers: {}\n",
                o.version.as_deref().unwrap_or("?"),
                o.library,
                o.origin,
                o.providers.join(", ")
            )),
            Some(e) => s.push_str(&format!("ONNX Runtime  not loaded: {e}\n")),
        }
        let c = &self.cuda;
        if c.built {
            s.push_str(&format!(
                "CUDA          driver: {}; GPUs: {}; NVRTC: {}\n",
                if c.driver { "yes" } else { "no (libcuda not found: no NVIDIA GPU here)" },
                c.devices,
                if c.nvrtc { "yes" } else { "no" }
            ));
        } else {
            s.push_str(&format!("CUDA          built without the `cuda` feature; NVIDIA driver present: {}\n", yes(c.driver)));
        }
        s.push_str(&format!("=> decode:    {}\n=> inference: {}\n=> encode:    {}\n", self.decode, self.inference, self.encode));
        s
    }
}
