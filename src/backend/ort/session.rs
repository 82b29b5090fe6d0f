//! Sessions: a model's declared inputs and outputs, the options it is
//! opened with, the execution providers tried in order (TensorRT with its
//! engine cache, CUDA on the shared GPU, the CPU), each tried on a probe run
//! so that a provider that cannot run the model falls back loudly.

use std::path::{Path, PathBuf};

use ort::ep;
use ort::session::Session;
use ort::session::builder::GraphOptimizationLevel;
use ort::value::ValueType;

use super::{OrtError, OrtRuntime};
use crate::config::{ProviderName, ProviderSpec};

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
    /// Run a GPU provider's session once, on zeros of this shape fed to the
    /// named input (or the first), before taking it: a provider that loads
    /// but cannot run the model (TensorRT failing to build its engine, a
    /// missing cuDNN) then falls back like one that cannot load, instead of
    /// failing the first frame.
    pub probe: Option<(Option<String>, Vec<usize>)>,
}

impl SessionOptions {
    /// One CPU thread, CPU provider required: for small models and for reading a model's signature.
    pub fn cpu_single() -> Self {
        SessionOptions {
            providers: vec![ProviderSpec { required: true, ..ProviderSpec::named(ProviderName::Cpu) }],
            intra_threads: 1,
            inter_threads: 1,
            spinning: false,
            probe: None,
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
    /// The pipeline GPU whose stream the session's GPU provider was given
    /// (None on the CPU, or when the provider runs on a stream of its own).
    #[cfg(feature = "cuda")]
    pub gpu: Option<std::sync::Arc<crate::backend::cuda::Gpu>>,
}

impl ModelSession {
    /// Make the session's device current on this thread before a run (a
    /// provider given a stream may leave that to the caller).
    pub fn bind_device(&self) -> Result<(), String> {
        #[cfg(feature = "cuda")]
        if let Some(gpu) = &self.gpu {
            gpu.bind().map_err(|e| e.to_string())?;
        }
        Ok(())
    }
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

/// The pipeline's GPU for a GPU provider, whose one CUDA stream the provider
/// is given so that inference is ordered after the preprocess kernels without
/// a host wait (None without a GPU, loudly when one was expected).
#[cfg(feature = "cuda")]
fn shared_gpu(spec: &ProviderSpec, model: &Path) -> Option<std::sync::Arc<crate::backend::cuda::Gpu>> {
    if !matches!(spec.name, ProviderName::Cuda | ProviderName::Tensorrt) {
        return None;
    }
    let device = usize::try_from(spec.device_id).ok()?;
    match crate::backend::cuda::Gpu::shared(device) {
        Ok(g) => Some(g),
        Err(e) => {
            tracing::warn!(
                "{}: `{}` gets a CUDA stream of its own, not the pipeline's ({e}): frames and results go through host memory",
                model.display(),
                spec.name
            );
            None
        }
    }
}

/// The CUDA provider for `spec`'s device, on `stream` when given.
fn cuda_provider(spec: &ProviderSpec, stream: Option<*mut ()>) -> ep::CUDA {
    let c = ep::CUDA::default().with_device_id(spec.device_id).with_tf32(spec.tf32);
    match stream {
        // SAFETY: the stream belongs to the device's primary context (the one
        // the provider uses) and lives as long as the process.
        Some(s) => unsafe { c.with_compute_stream(s) },
        None => c,
    }
}

/// Run `session` once on zeros of `shape` (see [`SessionOptions::probe`]).
pub(super) fn probe_run(session: &mut Session, input: Option<&str>, shape: &[usize]) -> Result<(), String> {
    let name = match input {
        Some(n) if session.inputs().iter().any(|i| i.name() == n) => n.to_string(),
        _ => session.inputs().first().map(|i| i.name().to_string()).ok_or("the model has no inputs")?,
    };
    let zeros = vec![0f32; shape.iter().product()];
    let t = ort::value::TensorRef::from_array_view((shape.to_vec(), zeros.as_slice())).map_err(|e| e.to_string())?;
    session.run(ort::inputs![name.as_str() => t]).map(|_| ()).map_err(|e| format!("first run on {shape:?} failed: {e}"))
}

/// Open `model`, trying the providers in order. A provider that fails to
/// load, or (with a probe shape) to run, is reported with a warning, or is an
/// error when marked required. TensorRT is registered with the CUDA provider
/// behind it (same device and stream), so the nodes TensorRT does not take
/// run on CUDA rather than on the CPU.
pub fn open_session(rt: &OrtRuntime, model: &Path, opts: &SessionOptions) -> Result<ModelSession, OrtError> {
    let mut fallbacks = Vec::new();
    for spec in &opts.providers {
        #[cfg(feature = "cuda")]
        let gpu = shared_gpu(spec, model);
        #[cfg(feature = "cuda")]
        let stream = gpu.as_ref().map(|g| g.cu_stream() as *mut ());
        #[cfg(not(feature = "cuda"))]
        let stream: Option<*mut ()> = None;
        let attempt = (|| -> Result<Session, String> {
            let b = builder(rt, opts)?;
            let providers = match spec.name {
                ProviderName::Tensorrt => {
                    let t = tensorrt(rt, model, spec)?;
                    // SAFETY: as in `cuda_provider`.
                    let t = match stream {
                        Some(s) => unsafe { t.with_compute_stream(s) },
                        None => t,
                    };
                    vec![t.build().error_on_failure(), cuda_provider(spec, stream).build().error_on_failure()]
                }
                ProviderName::Cuda => vec![cuda_provider(spec, stream).build().error_on_failure()],
                // The CPU EP defaults to no memory arena in ort; the arena is ONNX Runtime's own default and much faster.
                ProviderName::Cpu => vec![ep::CPU::default().with_arena_allocator(true).build().error_on_failure()],
            };
            let mut b = b.with_execution_providers(providers).map_err(|e| e.to_string())?;
            let mut session = b.commit_from_file(model).map_err(|e| e.to_string())?;
            if let (Some((input, shape)), ProviderName::Tensorrt | ProviderName::Cuda) = (&opts.probe, spec.name) {
                probe_run(&mut session, input.as_deref(), shape)?;
            }
            Ok(session)
        })();
        match attempt {
            Ok(session) => {
                let inputs = session.inputs().iter().map(IoInfo::from_outlet).collect();
                let outputs = session.outputs().iter().map(IoInfo::from_outlet).collect();
                return Ok(ModelSession {
                    session,
                    provider: spec.name,
                    fallbacks,
                    inputs,
                    outputs,
                    #[cfg(feature = "cuda")]
                    gpu,
                });
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
