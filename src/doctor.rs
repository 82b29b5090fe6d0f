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
    /// Providers the library lists but cannot register here, with why (a
    /// GPU build lists TensorRT even where libnvinfer is not installed).
    pub unusable: std::collections::BTreeMap<String, String>,
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

/// The Python `python` stages run in (the `python` feature): the embedded
/// interpreter's version and its numpy's, or why not.
#[derive(Debug, Clone, Serialize)]
pub struct PythonFacts {
    pub built: bool,
    pub version: Option<String>,
    pub numpy: Option<String>,
    pub error: Option<String>,
}

fn python() -> PythonFacts {
    #[cfg(feature = "python")]
    {
        let (version, numpy) = crate::stages::python::interp::versions();
        let (numpy, error) = match numpy {
            Ok(v) => (Some(v), None),
            Err(e) => (None, Some(format!("numpy does not import: {e} (install python3-numpy)"))),
        };
        PythonFacts { built: true, version: Some(version), numpy, error }
    }
    #[cfg(not(feature = "python"))]
    PythonFacts { built: false, version: None, numpy: None, error: None }
}

/// The whole report, plus what a pipeline will actually run on.
#[derive(Debug, Clone, Serialize)]
pub struct Doctor {
    pub ffmpeg: FfmpegFacts,
    pub gstreamer: GstFacts,
    pub onnxruntime: OrtFacts,
    pub cuda: CudaFacts,
    pub python: PythonFacts,
    /// Decode path a pipeline gets here.
    pub decode: String,
    /// Best execution provider a pipeline gets here.
    pub inference: String,
    /// What a `video` sink with `codec = "auto"` encodes with here, and why.
    pub encode: String,
    /// The optional capabilities (cargo features) and whether this build has each.
    pub features: Vec<crate::features::Feature>,
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
        Ok(rt) => {
            let listed = rt.available_providers();
            let unusable = listed.iter().filter_map(|&p| rt.register_error(p).map(|e| (p.to_string(), e))).collect();
            OrtFacts {
                library: rt.library.display().to_string(),
                origin: rt.origin.into(),
                version: Some(rt.version()),
                providers: listed.iter().map(|p| p.to_string()).collect(),
                unusable,
                error: None,
            }
        }
        Err(e) => OrtFacts {
            library: lib.display().to_string(),
            origin: origin.into(),
            version: None,
            providers: Vec::new(),
            unusable: Default::default(),
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
    let inference = inference_line(&onnxruntime, gpu);
    let auto = backend::ffmpeg::EncoderSettings { codec: "auto".into(), preset: None, crf: None };
    let encode = match backend::ffmpeg::choose_encoder(&auto) {
        Ok(c) if c.name == "h264_nvenc" && gpu && cuda.built => {
            "h264_nvenc: NVENC opens here; NVDEC frames are encoded where they are, results drawn on the GPU".to_string()
        }
        Ok(c) if c.name == "h264_nvenc" => "h264_nvenc: NVENC opens here".to_string(),
        Ok(c) => format!("{}: {}", c.name, c.note.unwrap_or_else(|| "chosen".into())),
        Err(e) => format!("none: {e}"),
    };
    Doctor {
        ffmpeg,
        gstreamer: gst(),
        onnxruntime,
        cuda,
        python: python(),
        decode,
        inference,
        encode,
        features: crate::features::FEATURES.to_vec(),
    }
}

/// The best provider a pipeline gets, and why not a better one.
fn inference_line(o: &OrtFacts, gpu: bool) -> String {
    if o.error.is_some() {
        return "none: ONNX Runtime could not be loaded".to_string();
    }
    let listed = |p: &str| o.providers.iter().any(|x| x == p);
    let usable = |p: &str| listed(p) && !o.unusable.contains_key(p);
    let why_not = |p: &str| o.unusable.get(p).map(|e| format!(" ({p} is listed but cannot load: {e})")).unwrap_or_default();
    if !gpu {
        return if listed("cuda") {
            "cpu: this ONNX Runtime has CUDA providers, but there is no NVIDIA GPU".to_string()
        } else {
            "cpu: this ONNX Runtime build has no CUDA/TensorRT provider".to_string()
        };
    }
    if usable("tensorrt") {
        "tensorrt (CUDA behind it for the nodes TensorRT does not take)".to_string()
    } else if usable("cuda") {
        format!("cuda{}", why_not("tensorrt"))
    } else if listed("cuda") {
        format!("cpu: the CUDA provider cannot load here{}{}", why_not("cuda"), why_not("tensorrt"))
    } else {
        "cpu: this ONNX Runtime build has no CUDA/TensorRT provider".to_string()
    }
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
                o.providers
                    .iter()
                    .map(|p| if o.unusable.contains_key(p) { format!("{p} (cannot load)") } else { p.clone() })
                    .collect::<Vec<_>>()
                    .join(", ")
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
        let py = &self.python;
        match (&py.version, &py.numpy, &py.error) {
            (Some(v), Some(n), _) => s.push_str(&format!("Python        {v} (embedded), numpy {n}: `python` stages run here\n")),
            (Some(v), _, Some(e)) => s.push_str(&format!("Python        {v} (embedded); {e}\n")),
            _ if !py.built => s.push_str("Python        built without the `python` feature\n"),
            _ => {}
        }
        s.push_str(&format!("=> decode:    {}\n=> inference: {}\n=> encode:    {}\n", self.decode, self.inference, self.encode));
        let (with, without): (Vec<_>, Vec<_>) = self.features.iter().partition(|f| f.compiled);
        let names = |v: &[&crate::features::Feature]| {
            if v.is_empty() { "none".to_string() } else { v.iter().map(|f| f.name).collect::<Vec<_>>().join(", ") }
        };
        s.push_str(&format!("features      built with: {}; without: {}", names(&with), names(&without)));
        if !without.is_empty() {
            s.push_str(" (cargo build --release --locked --features NAME adds one)");
        }
        s.push('\n');
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn facts(providers: &[&str], unusable: &[(&str, &str)]) -> OrtFacts {
        OrtFacts {
            library: "lib".into(),
            origin: "test".into(),
            version: Some("1.31.1".into()),
            providers: providers.iter().map(|p| p.to_string()).collect(),
            unusable: unusable.iter().map(|(p, e)| (p.to_string(), e.to_string())).collect(),
            error: None,
        }
    }

    /// A provider the library lists but cannot register is never reported as
    /// what a pipeline gets; the reason is named.
    #[test]
    fn inference_line_names_the_provider_that_really_loads() {
        let all = ["tensorrt", "cuda", "cpu"];
        assert!(inference_line(&facts(&all, &[]), true).starts_with("tensorrt"));
        let no_trt = facts(&all, &[("tensorrt", "libnvinfer.so.10: cannot open shared object file")]);
        assert_eq!(
            inference_line(&no_trt, true),
            "cuda (tensorrt is listed but cannot load: libnvinfer.so.10: cannot open shared object file)"
        );
        let neither = facts(&all, &[("tensorrt", "no libnvinfer"), ("cuda", "libcublas.so.13 missing")]);
        let line = inference_line(&neither, true);
        assert!(line.starts_with("cpu: the CUDA provider cannot load here") && line.contains("libcublas.so.13 missing"), "{line}");
        assert!(
            inference_line(&facts(&all, &[]), false).starts_with("cpu: this ONNX Runtime has CUDA providers, but there is no NVIDIA GPU")
        );
        assert!(inference_line(&facts(&["cpu"], &[]), true).starts_with("cpu: this ONNX Runtime build has no CUDA/TensorRT provider"));
        let broken = OrtFacts { error: Some("x".into()), ..facts(&[], &[]) };
        assert!(inference_line(&broken, true).starts_with("none"));
        // The rendered provider list marks the one that cannot load.
        let mut d = Doctor { onnxruntime: no_trt, ..probe(None) };
        d.inference = inference_line(&d.onnxruntime, true);
        assert!(d.render().contains("execution providers: tensorrt (cannot load), cuda, cpu"), "{}", d.render());
    }

    /// The report names the compiled features and the missing ones, with how to add one.
    #[test]
    fn doctor_lists_the_features_this_build_has() {
        let d = probe(None);
        assert_eq!(d.features, crate::features::FEATURES);
        let line = d.render().lines().find(|l| l.starts_with("features")).map(str::to_string).unwrap_or_default();
        let with = crate::features::compiled().join(", ");
        assert!(line.starts_with(&format!("features      built with: {with}; without: ")), "{line}");
        let d = Doctor { features: vec![crate::features::Feature { name: "bus", compiled: false, what: "" }], ..probe(None) };
        assert!(
            d.render().contains("built with: none; without: bus (cargo build --release --locked --features NAME adds one)"),
            "{}",
            d.render()
        );
    }
}
