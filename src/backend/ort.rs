//! ONNX Runtime through ort (`load-dynamic`): finding the library, opening
//! sessions with the requested execution providers, loudly.

use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};

use ort::ep::{self, ExecutionProvider};
use ort::session::Session;
use ort::session::builder::GraphOptimizationLevel;
use ort::value::ValueType;

use crate::config::{ProviderName, ProviderSpec};

#[derive(Debug, thiserror::Error)]
pub enum OrtError {
    #[error("cannot load ONNX Runtime from {path} ({origin}): {reason}")]
    Library { path: PathBuf, origin: &'static str, reason: String },
    #[error("ONNX Runtime was already loaded from {loaded}; cannot switch to {wanted} in one process")]
    AlreadyLoaded { loaded: PathBuf, wanted: PathBuf },
    #[error("{model}: {reason}")]
    Model { model: PathBuf, reason: String },
    #[error("{model}: required execution provider `{provider}` is not available: {reason}")]
    Required { model: PathBuf, provider: ProviderName, reason: String },
    #[error("{model}: no execution provider could be used ({tried})")]
    NoProvider { model: PathBuf, tried: String },
}

/// The loaded ONNX Runtime library and its environment.
pub struct OrtRuntime {
    pub env: ort::environment::Environment,
    pub library: PathBuf,
    /// Why that library was chosen (flag, TOML, environment, default).
    pub origin: &'static str,
    pub build_info: String,
}

static RUNTIME: OnceLock<OrtRuntime> = OnceLock::new();
static INIT: Mutex<()> = Mutex::new(());

/// Where to look for the library when nothing names one.
pub fn default_library() -> PathBuf {
    if let Some(dir) = std::env::current_exe().ok().and_then(|e| e.parent().map(Path::to_path_buf)) {
        let beside = dir.join("libonnxruntime.so");
        if beside.exists() {
            return beside;
        }
    }
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/.deps/onnxruntime/libonnxruntime.so"))
}

/// Choose the library: explicit (CLI flag or TOML) > `ORT_DYLIB_PATH` > default.
pub fn choose_library(explicit: Option<(&Path, &'static str)>) -> (PathBuf, &'static str) {
    if let Some((p, origin)) = explicit {
        return (p.to_path_buf(), origin);
    }
    match std::env::var_os("ORT_DYLIB_PATH") {
        Some(p) if !p.is_empty() => (PathBuf::from(p), "ORT_DYLIB_PATH"),
        _ => (default_library(), "default"),
    }
}

/// Load ONNX Runtime once per process.
pub fn runtime(explicit: Option<(&Path, &'static str)>) -> Result<&'static OrtRuntime, OrtError> {
    let (path, origin) = choose_library(explicit);
    let _guard = INIT.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(rt) = RUNTIME.get() {
        if explicit.is_some() && rt.library != path {
            return Err(OrtError::AlreadyLoaded { loaded: rt.library.clone(), wanted: path });
        }
        return Ok(rt);
    }
    if !path.exists() {
        return Err(OrtError::Library {
            path,
            origin,
            reason: "file not found; run scripts/fetch-models.sh, or set ORT_DYLIB_PATH / --ort-library / [pipeline] ort_library".into(),
        });
    }
    let lib_err = |reason: String| OrtError::Library { path: path.clone(), origin, reason };
    let env = ort::init_from(&path)
        .map_err(|e| lib_err(e.to_string()))?
        .with_name("infer-stream")
        .with_telemetry(false)
        .build()
        .map_err(|e| lib_err(e.to_string()))?;
    let build_info = ort::info().to_string();
    let _ = RUNTIME.set(OrtRuntime { env, library: path, origin, build_info });
    Ok(RUNTIME.get().expect("just set"))
}

impl OrtRuntime {
    /// `1.31.1`-style version, from the library's real file name (`libonnxruntime.so.1.31.1`).
    pub fn version(&self) -> String {
        let real = std::fs::canonicalize(&self.library).unwrap_or_else(|_| self.library.clone());
        let name = real.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        match name.split_once(".so.") {
            Some((_, v)) if v.split('.').all(|p| p.parse::<u32>().is_ok()) => v.to_string(),
            _ => format!("unknown ({name} carries no version)"),
        }
    }

    /// Execution providers compiled into the loaded library.
    pub fn available_providers(&self) -> Vec<ProviderName> {
        let mut v = Vec::new();
        if <ep::TensorRT as ExecutionProvider>::is_available().unwrap_or(false) {
            v.push(ProviderName::Tensorrt);
        }
        if <ep::CUDA as ExecutionProvider>::is_available().unwrap_or(false) {
            v.push(ProviderName::Cuda);
        }
        v.push(ProviderName::Cpu);
        v
    }
}

/// A model input or output as the model declares it (`-1` = dynamic).
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct IoInfo {
    pub name: String,
    pub dims: Vec<i64>,
    pub dtype: String,
}

impl IoInfo {
    fn from_outlet(o: &ort::value::Outlet) -> Self {
        let (dims, dtype) = match o.dtype() {
            ValueType::Tensor { ty, shape, .. } => (shape.to_vec(), format!("{ty:?}").to_lowercase()),
            other => (Vec::new(), format!("{other:?}")),
        };
        IoInfo { name: o.name().to_string(), dims, dtype }
    }

    pub fn shape_string(&self) -> String {
        let d: Vec<String> = self.dims.iter().map(|&d| if d < 0 { "?".into() } else { d.to_string() }).collect();
        format!("[{}]", d.join(", "))
    }
}

/// Options for one session.
#[derive(Debug, Clone)]
pub struct SessionOptions {
    pub providers: Vec<ProviderSpec>,
    pub intra_threads: usize,
    pub inter_threads: usize,
    pub spinning: bool,
}

impl SessionOptions {
    /// One CPU thread, CPU provider required: for small models and for reading a model's signature.
    pub fn cpu_single() -> Self {
        SessionOptions {
            providers: vec![ProviderSpec { required: true, ..ProviderSpec::named(ProviderName::Cpu) }],
            intra_threads: 1,
            inter_threads: 1,
            spinning: false,
        }
    }
}

/// An open model and what it runs on.
pub struct ModelSession {
    pub session: Session,
    pub provider: ProviderName,
    /// Providers tried before the one in use, with why each failed.
    pub fallbacks: Vec<(ProviderName, String)>,
    pub inputs: Vec<IoInfo>,
    pub outputs: Vec<IoInfo>,
}

fn builder(rt: &OrtRuntime, opts: &SessionOptions) -> Result<ort::session::builder::SessionBuilder, String> {
    let e = |e: ort::Error<ort::session::builder::SessionBuilder>| e.to_string();
    Session::builder(&rt.env)
        .map_err(|e| e.to_string())?
        .with_optimization_level(GraphOptimizationLevel::All)
        .map_err(e)?
        .with_intra_threads(opts.intra_threads.max(1))
        .map_err(e)?
        .with_inter_threads(opts.inter_threads.max(1))
        .map_err(e)?
        .with_intra_op_spinning(opts.spinning)
        .map_err(e)?
        .with_inter_op_spinning(opts.spinning)
        .map_err(e)
}

/// Where built TensorRT engines for `model` live: a folder per model hash,
/// profile shapes and ONNX Runtime version, so a changed model, shape or
/// runtime never picks up a stale engine.
pub fn engine_cache_dir(root: &Path, model: &Path, opts: &crate::config::TensorRtOptions, ort_version: &str) -> std::io::Result<PathBuf> {
    use sha2::{Digest, Sha256};
    let mut h = Sha256::new();
    h.update(std::fs::read(model)?);
    let model_hash = h.finalize();
    let mut k = Sha256::new();
    for s in [&opts.min_shapes, &opts.opt_shapes, &opts.max_shapes] {
        k.update(s.as_deref().unwrap_or("-").as_bytes());
        k.update(b"|");
    }
    k.update(format!("fp16={} int8={}", opts.fp16, opts.int8).as_bytes());
    let hex = |b: &[u8]| b.iter().take(8).map(|x| format!("{x:02x}")).collect::<String>();
    Ok(root.join(format!("{}-{}-ort{ort_version}", hex(&model_hash), hex(&k.finalize()))))
}

fn tensorrt(rt: &OrtRuntime, model: &Path, spec: &ProviderSpec) -> Result<ep::TensorRT, String> {
    let o = &spec.tensorrt;
    let mut t = ep::TensorRT::default().with_device_id(spec.device_id).with_fp16(o.fp16).with_int8(o.int8);
    if let Some(table) = &o.int8_calibration_table {
        t = t.with_int8_calibration_table_name(table);
    }
    if let Some(root) = &o.engine_cache {
        let dir = engine_cache_dir(Path::new(root), model, o, &rt.version()).map_err(|e| format!("engine cache: {e}"))?;
        std::fs::create_dir_all(&dir).map_err(|e| format!("engine cache {}: {e}", dir.display()))?;
        t = t.with_engine_cache(true).with_engine_cache_path(dir.display());
        if o.timing_cache {
            t = t.with_timing_cache(true).with_timing_cache_path(dir.display());
        }
    }
    for (shapes, set) in [(&o.min_shapes, 0), (&o.opt_shapes, 1), (&o.max_shapes, 2)] {
        if let Some(s) = shapes {
            t = match set {
                0 => t.with_profile_min_shapes(s),
                1 => t.with_profile_opt_shapes(s),
                _ => t.with_profile_max_shapes(s),
            };
        }
    }
    Ok(t)
}

/// The pipeline's one CUDA stream for a GPU provider, so that inference is
/// ordered after the preprocess kernels without a host wait (None without a GPU).
fn shared_stream(spec: &ProviderSpec) -> Option<*mut ()> {
    #[cfg(feature = "cuda")]
    if matches!(spec.name, ProviderName::Cuda | ProviderName::Tensorrt) {
        return crate::backend::cuda::Gpu::shared(spec.device_id as usize).ok().map(|g| g.cu_stream() as *mut ());
    }
    let _ = spec;
    None
}

/// Open `model`, trying the providers in order. A provider that fails is
/// reported with a warning (or is an error when marked required).
pub fn open_session(rt: &OrtRuntime, model: &Path, opts: &SessionOptions) -> Result<ModelSession, OrtError> {
    let mut fallbacks = Vec::new();
    for spec in &opts.providers {
        let attempt = (|| -> Result<Session, String> {
            let b = builder(rt, opts)?;
            let stream = shared_stream(spec);
            let dispatch = match spec.name {
                ProviderName::Tensorrt => {
                    let t = tensorrt(rt, model, spec)?;
                    // SAFETY: the stream belongs to the device's primary context (the
                    // one the provider uses) and lives as long as the process.
                    let t = match stream {
                        Some(s) => unsafe { t.with_compute_stream(s) },
                        None => t,
                    };
                    t.build().error_on_failure()
                }
                ProviderName::Cuda => {
                    let c = ep::CUDA::default().with_device_id(spec.device_id);
                    // SAFETY: as above.
                    let c = match stream {
                        Some(s) => unsafe { c.with_compute_stream(s) },
                        None => c,
                    };
                    c.build().error_on_failure()
                }
                // The CPU EP defaults to no memory arena in ort; the arena is ONNX Runtime's own default and much faster.
                ProviderName::Cpu => ep::CPU::default().with_arena_allocator(true).build().error_on_failure(),
            };
            let mut b = b.with_execution_providers([dispatch]).map_err(|e| e.to_string())?;
            b.commit_from_file(model).map_err(|e| e.to_string())
        })();
        match attempt {
            Ok(session) => {
                let inputs = session.inputs().iter().map(IoInfo::from_outlet).collect();
                let outputs = session.outputs().iter().map(IoInfo::from_outlet).collect();
                return Ok(ModelSession { session, provider: spec.name, fallbacks, inputs, outputs });
            }
            Err(reason)
                if !model.exists()
                    || reason.contains("Load model")
                    || reason.contains("INVALID_PROTOBUF")
                    || reason.contains("NO_SUCHFILE") =>
            {
                return Err(OrtError::Model { model: model.to_path_buf(), reason });
            }
            Err(reason) if spec.required => {
                return Err(OrtError::Required { model: model.to_path_buf(), provider: spec.name, reason });
            }
            Err(reason) => {
                // The caller reports fallbacks, naming its stage.
                fallbacks.push((spec.name, reason));
            }
        }
    }
    let tried = fallbacks.iter().map(|(p, r)| format!("{p}: {r}")).collect::<Vec<_>>().join("; ");
    Err(OrtError::NoProvider { model: model.to_path_buf(), tried })
}

/// Read a model's inputs, outputs and metadata without running it.
pub fn inspect(rt: &OrtRuntime, model: &Path) -> Result<(Vec<IoInfo>, Vec<IoInfo>), OrtError> {
    let s = open_session(rt, model, &SessionOptions::cpu_single())?;
    Ok((s.inputs, s.outputs))
}

/// Everything `inspect` prints about a model.
#[derive(Debug, Clone, serde::Serialize)]
pub struct ModelReport {
    pub path: PathBuf,
    pub inputs: Vec<IoInfo>,
    pub outputs: Vec<IoInfo>,
    pub producer: Option<String>,
    pub graph_name: Option<String>,
    pub description: Option<String>,
    pub domain: Option<String>,
    pub version: Option<i64>,
    /// Custom metadata (e.g. `character` for PP-OCR recognisers, `names` for YOLO).
    pub metadata: std::collections::BTreeMap<String, String>,
}

/// Load `model` on the CPU and read its signature and metadata.
pub fn model_report(rt: &OrtRuntime, model: &Path) -> Result<ModelReport, OrtError> {
    let s = open_session(rt, model, &SessionOptions::cpu_single())?;
    let err = |e: ort::Error| OrtError::Model { model: model.to_path_buf(), reason: e.to_string() };
    let md = s.session.metadata().map_err(err)?;
    let mut metadata = std::collections::BTreeMap::new();
    for k in md.custom_keys().map_err(err)? {
        if let Some(v) = md.custom(&k) {
            metadata.insert(k, v);
        }
    }
    Ok(ModelReport {
        path: model.to_path_buf(),
        producer: md.producer().filter(|p| !p.is_empty()),
        graph_name: md.name().filter(|n| !n.is_empty()),
        description: md.description().filter(|d| !d.is_empty()),
        domain: md.domain().filter(|d| !d.is_empty()),
        // ONNX leaves the model version at i64::MAX when unset.
        version: md.version().filter(|v| *v != i64::MAX),
        metadata,
        inputs: s.inputs,
        outputs: s.outputs,
    })
}

/// Run `f` with a tensor view of `buf` (device memory, f32, `shape`) that a
/// CUDA or TensorRT session reads in place: no host copy. The view cannot
/// outlive the borrow of `buf`.
#[cfg(feature = "cuda")]
pub fn with_device_tensor<R>(
    buf: &crate::backend::cuda::DeviceBuf,
    shape: &[usize],
    device_id: i32,
    f: impl FnOnce(ort::value::TensorRefMut<'_, f32>) -> R,
) -> Result<R, String> {
    use ort::memory::{AllocationDevice, AllocatorType, MemoryInfo, MemoryType};
    let n: usize = shape.iter().product();
    if n * 4 > buf.bytes {
        return Err(format!("device tensor {shape:?} does not fit its {}-byte buffer", buf.bytes));
    }
    let info = MemoryInfo::new(AllocationDevice::CUDA, device_id, AllocatorType::Device, MemoryType::Default).map_err(|e| e.to_string())?;
    let dims: Vec<i64> = shape.iter().map(|&d| d as i64).collect();
    // SAFETY: `buf` is a live device allocation of at least n * 4 bytes on
    // `device_id` (checked above); the tensor only borrows it (ONNX Runtime
    // does not free borrowed memory) and is dropped inside `f`, while `buf` is
    // still borrowed by this call.
    let t = unsafe { ort::value::TensorRefMut::<f32>::from_raw(info, buf.ptr as *mut std::ffi::c_void, ort::value::Shape::new(dims)) }
        .map_err(|e| e.to_string())?;
    Ok(f(t))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::TensorRtOptions;

    #[test]
    fn engine_cache_is_keyed_by_model_shapes_and_version() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b) = (dir.path().join("a.onnx"), dir.path().join("b.onnx"));
        std::fs::write(&a, b"model a").unwrap();
        std::fs::write(&b, b"model b").unwrap();
        let root = Path::new("cache");
        let o = TensorRtOptions { opt_shapes: Some("x:1x3x384x640".into()), ..Default::default() };
        let key = |m: &Path, o: &TensorRtOptions, v: &str| engine_cache_dir(root, m, o, v).unwrap();
        assert_eq!(key(&a, &o, "1.31.1"), key(&a, &o, "1.31.1"));
        assert_ne!(key(&a, &o, "1.31.1"), key(&b, &o, "1.31.1"), "model");
        assert_ne!(
            key(&a, &o, "1.31.1"),
            key(&a, &TensorRtOptions { opt_shapes: Some("x:1x3x640x640".into()), ..Default::default() }, "1.31.1"),
            "shapes"
        );
        assert_ne!(key(&a, &o, "1.31.1"), key(&a, &TensorRtOptions { fp16: true, ..o.clone() }, "1.31.1"), "precision");
        assert_ne!(key(&a, &o, "1.31.1"), key(&a, &o, "1.32.0"), "runtime version");
        assert!(key(&a, &o, "1.31.1").starts_with(root) && key(&a, &o, "1.31.1").to_string_lossy().ends_with("-ort1.31.1"));
    }
}
