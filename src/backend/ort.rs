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

/// ONNX Runtime's own switch for its telemetry (1DS on Linux): read when the
/// library initialises, before any API call. `with_telemetry(false)` comes
/// too late: by then the library has already written its record (a
/// persistent device id, OS, CPU model, container flag, program name) to
/// `~/.cache/Microsoft/DeveloperTools/.onnxruntime/onnxruntime.db`.
pub const TELEMETRY_SWITCH: &str = "ORT_DISABLE_TELEMETRY";

/// Keep ONNX Runtime's telemetry off unless the user set
/// [`TELEMETRY_SWITCH`] themselves (`ORT_DISABLE_TELEMETRY=0` opts in).
/// Call it before any other thread starts and before [`runtime`]: the
/// command line does so first thing.
pub fn telemetry_off_unless_asked() {
    if std::env::var_os(TELEMETRY_SWITCH).is_none() {
        // SAFETY: the environment is changed only while this is the only
        // thread of the process (the caller's contract, kept by the command
        // line, which calls this before it starts any thread or loads any
        // native library), so no other thread reads it at the same time.
        unsafe { std::env::set_var(TELEMETRY_SWITCH, "1") };
    }
}

static RUNTIME: OnceLock<OrtRuntime> = OnceLock::new();
static INIT: Mutex<()> = Mutex::new(());

/// The library of the build tree this binary was built in (put there by
/// `scripts/fetch-models.sh`): the last place looked at, so `cargo run` and
/// the tests work; a binary moved elsewhere uses the library beside it.
pub const BUILD_TREE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/.deps/onnxruntime/libonnxruntime.so");

/// Where to look for the library when nothing names one, in order, with how
/// each is said: beside the binary, in `../lib` beside it, then the build tree.
pub fn default_library() -> (PathBuf, &'static str) {
    if let Some(dir) = std::env::current_exe().ok().and_then(|e| e.parent().map(Path::to_path_buf)) {
        for (p, origin) in
            [(dir.join("libonnxruntime.so"), "beside the binary"), (dir.join("../lib/libonnxruntime.so"), "../lib beside the binary")]
        {
            if p.exists() {
                return (p, origin);
            }
        }
    }
    (PathBuf::from(BUILD_TREE), "build tree")
}

/// Choose the library: explicit (CLI flag or TOML) > `ORT_DYLIB_PATH` >
/// beside the binary > `../lib` beside it > the build tree.
pub fn choose_library(explicit: Option<(&Path, &'static str)>) -> (PathBuf, &'static str) {
    if let Some((p, origin)) = explicit {
        return (p.to_path_buf(), origin);
    }
    match std::env::var_os("ORT_DYLIB_PATH") {
        Some(p) if !p.is_empty() => (PathBuf::from(p), "ORT_DYLIB_PATH"),
        _ => default_library(),
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
    if origin == "build tree" {
        tracing::info!(
            "ONNX Runtime from the build tree, {} (none named by --ort-library, [pipeline] ort_library or ORT_DYLIB_PATH, none beside the binary)",
            path.display()
        );
    }
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

    /// Why `provider` cannot be registered on a session here, if it cannot.
    /// A GPU build of ONNX Runtime lists TensorRT whether or not TensorRT
    /// itself (libnvinfer) is installed: registering loads the provider's
    /// library and what it links, which is what a session would do.
    pub fn register_error(&self, provider: ProviderName) -> Option<String> {
        let mut b = match Session::builder(&self.env) {
            Ok(b) => b,
            Err(e) => return Some(e.to_string()),
        };
        let r = match provider {
            ProviderName::Tensorrt => ep::TensorRT::default().register(&mut b),
            ProviderName::Cuda => ep::CUDA::default().register(&mut b),
            ProviderName::Cpu => return None,
        };
        r.err().map(|e| e.to_string())
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
fn probe_run(session: &mut Session, input: Option<&str>, shape: &[usize]) -> Result<(), String> {
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

/// Where a bound session's input and outputs live.
#[derive(Clone)]
pub enum BindMemory {
    /// Host memory (ONNX Runtime copies to and from a GPU provider itself).
    Host,
    /// Device memory on the pipeline's GPU: frames are copied device to
    /// device into the bound input, outputs stay on the device until one
    /// download per run.
    #[cfg(feature = "cuda")]
    Device(std::sync::Arc<crate::backend::cuda::Gpu>),
}

impl BindMemory {
    pub fn name(&self) -> &'static str {
        match self {
            BindMemory::Host => "host",
            #[cfg(feature = "cuda")]
            BindMemory::Device(_) => "device",
        }
    }
}

/// A tensor to copy into a bound input (f32 values).
pub enum Src<'a> {
    Host(&'a [f32]),
    /// `len` values at the start of a device buffer.
    #[cfg(feature = "cuda")]
    Device(&'a crate::backend::cuda::DeviceBuf, usize),
}

impl Src<'_> {
    pub fn len(&self) -> usize {
        match self {
            Src::Host(d) => d.len(),
            #[cfg(feature = "cuda")]
            Src::Device(_, n) => *n,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// A device part must hold the values it claims: a copy past the end of a
    /// device buffer would poison the context for every stage.
    fn check(&self) -> Result<(), String> {
        #[cfg(feature = "cuda")]
        if let Src::Device(buf, n) = self
            && n.checked_mul(4).is_none_or(|b| b > buf.bytes)
        {
            return Err(format!("a device tensor of {} bytes cannot hold {n} values", buf.bytes));
        }
        Ok(())
    }
}

/// Copy `parts` one after the other into `dst` (host memory): device parts
/// are downloaded straight into their place.
pub fn stack_on_host(parts: &[Src<'_>], dst: &mut [f32]) -> Result<(), String> {
    let mut at = 0;
    for p in parts {
        p.check()?;
        let slot = dst.get_mut(at..at + p.len()).ok_or("the parts do not fit the tensor")?;
        match p {
            Src::Host(d) => slot.copy_from_slice(d),
            #[cfg(feature = "cuda")]
            Src::Device(buf, _) => buf.gpu().download(buf.ptr, slot).map_err(|e| e.to_string())?,
        }
        at += p.len();
    }
    Ok(())
}

/// One input shape's binding: an input tensor allocated by ONNX Runtime in
/// the binding's memory and bound once, and its outputs bound once.
struct Bound {
    shape: Vec<usize>,
    binding: ort::session::IoBinding,
    input: ort::value::Tensor<f32>,
    last_used: u64,
    /// The outputs' shapes change with the data (not only with the input's
    /// shape, e.g. NMS inside the model): they are bound anew before each run.
    rebind_outputs: bool,
}

/// ONNX Runtime's refusal to reuse a bound output whose shape changed.
fn output_shape_changed(e: &ort::Error) -> bool {
    let m = e.to_string();
    m.contains("computed output shape") || m.contains("pre-allocated output")
}

/// IoBinding for one session: a binding per input shape (a batch size is a
/// shape), made the first time that shape runs and reused for every later
/// run, so addresses stay fixed and nothing is allocated per frame.
pub struct Bindings {
    memory: BindMemory,
    allocator: ort::memory::Allocator,
    out_info: ort::memory::MemoryInfo<'static>,
    input_name: String,
    output_names: Vec<String>,
    /// A host input for a GPU provider is copied to the device when bound, so
    /// it has to be bound again before each run.
    rebind_input: bool,
    run_options: ort::session::RunOptions,
    cache: Vec<Bound>,
    capacity: usize,
    clock: u64,
    created: u64,
}

impl Bindings {
    /// Bindings for `session` (whose provider is `provider`) in `memory`,
    /// keeping at most `capacity` input shapes.
    pub fn new(
        session: &Session,
        provider: ProviderName,
        memory: BindMemory,
        input_name: &str,
        output_names: Vec<String>,
        capacity: usize,
    ) -> Result<Self, String> {
        use ort::memory::Allocator;
        let e = |e: ort::Error| e.to_string();
        #[cfg_attr(not(feature = "cuda"), allow(unused_mut))]
        let mut run_options = ort::session::RunOptions::new().map_err(e)?;
        let (allocator, out_info) = match &memory {
            BindMemory::Host => {
                let a = Allocator::default();
                let info = a.memory_info().to_owned();
                (a, info)
            }
            #[cfg(feature = "cuda")]
            BindMemory::Device(gpu) => {
                use ort::memory::{AllocationDevice, AllocatorType, MemoryInfo, MemoryType};
                let info = MemoryInfo::new(AllocationDevice::CUDA, gpu.ctx.ordinal() as i32, AllocatorType::Device, MemoryType::Default)
                    .map_err(e)?;
                let a = Allocator::new(session, info.clone()).map_err(|err| format!("no CUDA allocator for the session: {err}"))?;
                // Inference is queued on the shared stream after the copies in;
                // the one wait is after the downloads of the outputs.
                run_options.disable_device_sync().map_err(e)?;
                (a, info.to_owned())
            }
        };
        #[cfg(not(feature = "cuda"))]
        let _ = session;
        let gpu_provider = matches!(provider, ProviderName::Cuda | ProviderName::Tensorrt);
        Ok(Bindings {
            rebind_input: gpu_provider && matches!(memory, BindMemory::Host),
            memory,
            allocator,
            out_info,
            input_name: input_name.to_string(),
            output_names,
            run_options,
            cache: Vec::new(),
            capacity: capacity.max(1),
            clock: 0,
            created: 0,
        })
    }

    pub fn memory(&self) -> &BindMemory {
        &self.memory
    }

    /// Bindings made so far (one per input shape seen; flat in steady state).
    pub fn created(&self) -> u64 {
        self.created
    }

    /// The binding for `shape`, made on first use (the least recently used
    /// one is dropped when `capacity` shapes are already bound).
    fn slot(&mut self, session: &Session, shape: &[usize]) -> Result<usize, String> {
        self.clock += 1;
        if let Some(i) = self.cache.iter().position(|b| b.shape == shape) {
            self.cache[i].last_used = self.clock;
            return Ok(i);
        }
        if self.cache.len() >= self.capacity
            && let Some(oldest) = self.cache.iter().enumerate().min_by_key(|(_, b)| b.last_used).map(|(i, _)| i)
        {
            self.cache.swap_remove(oldest);
        }
        let e = |e: ort::Error| e.to_string();
        let input = ort::value::Tensor::<f32>::new(&self.allocator, shape.to_vec()).map_err(e)?;
        let mut binding = session.create_binding().map_err(e)?;
        // An owned tensor from ONNX Runtime's allocator: bound by reference, not copied.
        binding.bind_input(self.input_name.as_str(), &input).map_err(e)?;
        for name in &self.output_names {
            binding.bind_output_to_device(name.as_str(), &self.out_info).map_err(e)?;
        }
        self.created += 1;
        self.cache.push(Bound { shape: shape.to_vec(), binding, input, last_used: self.clock, rebind_outputs: false });
        Ok(self.cache.len() - 1)
    }

    /// Run `session` on the inputs in `parts`, stacked in order along the
    /// first dimension into the bound input of `shape`. Each output is
    /// handed to `out` (name, shape) for a host buffer of its length, which is
    /// filled: from device memory with one download per output and one wait
    /// for them all.
    pub fn run<B: std::ops::DerefMut<Target = [f32]>>(
        &mut self,
        session: &mut Session,
        shape: &[usize],
        parts: &[Src<'_>],
        mut out: impl FnMut(&str, usize) -> B,
    ) -> Result<Vec<(String, Vec<usize>, B)>, String> {
        let total: usize = shape.iter().product();
        let given: usize = parts.iter().map(Src::len).sum();
        if given != total {
            return Err(format!("input of shape {shape:?} needs {total} values, got {given}"));
        }
        let i = self.slot(session, shape)?;
        let memory = self.memory.clone();
        let b = &mut self.cache[i];
        // Copy the parts in.
        match &memory {
            BindMemory::Host => stack_on_host(parts, b.input.extract_tensor_mut().1)?,
            #[cfg(feature = "cuda")]
            BindMemory::Device(gpu) => {
                let base = b.input.data_ptr_mut() as u64;
                let mut at = 0u64;
                for p in parts {
                    p.check()?;
                    match p {
                        Src::Host(d) => gpu.upload_async(d, base + at * 4),
                        Src::Device(buf, n) if std::sync::Arc::ptr_eq(buf.gpu(), gpu) => gpu.copy_d2d(buf.ptr, base + at * 4, n * 4),
                        // A tensor on another device: through the host.
                        Src::Device(buf, n) => {
                            let mut v = vec![0f32; *n];
                            buf.gpu().download(buf.ptr, &mut v).and_then(|_| gpu.upload_async(&v, base + at * 4))
                        }
                    }
                    .map_err(|e| e.to_string())?;
                    at += p.len() as u64;
                }
            }
        }
        if self.rebind_input {
            // Copied to the device when bound; ONNX Runtime's run does not wait for that copy.
            b.binding.bind_input(self.input_name.as_str(), &b.input).map_err(|e| e.to_string())?;
            b.binding.synchronize_inputs().map_err(|e| e.to_string())?;
        }
        let (names, info) = (&self.output_names, &self.out_info);
        let bind_outputs = |b: &mut Bound| -> Result<(), String> {
            for name in names {
                b.binding.bind_output_to_device(name.as_str(), info).map_err(|e| e.to_string())?;
            }
            Ok(())
        };
        if b.rebind_outputs {
            bind_outputs(b)?;
        }
        // Outputs stay bound from run to run, unless their shape turns out to
        // change with the data: then they are bound anew, now and before every run.
        let first = match session.run_binding_with_options(&b.binding, &self.run_options) {
            Ok(outputs) => Ok(collect(&outputs, names, &memory, &mut out)?),
            Err(e) => Err(e),
        };
        match first {
            Ok(result) => Ok(result),
            Err(e) if !b.rebind_outputs && output_shape_changed(&e) => {
                tracing::info!(
                    "model outputs change shape with the data (ONNX Runtime's error just above says so): they are bound anew before each run"
                );
                b.rebind_outputs = true;
                bind_outputs(b)?;
                let outputs = session.run_binding_with_options(&b.binding, &self.run_options).map_err(|e| e.to_string())?;
                collect(&outputs, names, &memory, &mut out)
            }
            Err(e) => Err(e.to_string()),
        }
    }
}

/// The outputs of a bound run, in host buffers from `out`: copied from host
/// memory, or downloaded from the device (one copy per output, one wait).
fn collect<B: std::ops::DerefMut<Target = [f32]>>(
    outputs: &ort::session::SessionOutputs<'_>,
    names: &[String],
    memory: &BindMemory,
    out: &mut impl FnMut(&str, usize) -> B,
) -> Result<Vec<(String, Vec<usize>, B)>, String> {
    let mut result = Vec::with_capacity(names.len());
    for name in names {
        let v = outputs.get(name.as_str()).ok_or_else(|| format!("model produced no output `{name}`"))?;
        let t = v.view().downcast::<ort::value::TensorValueType<f32>>().map_err(|e| format!("output `{name}`: {e}"))?;
        let dims: Vec<usize> = t.shape().iter().map(|&x| x.max(0) as usize).collect();
        let mut host = out(name, dims.iter().product());
        match memory {
            BindMemory::Host => {
                let (_, d) = t.extract_tensor();
                host.copy_from_slice(d);
            }
            #[cfg(feature = "cuda")]
            // An empty output may have no device address at all.
            #[cfg(feature = "cuda")]
            BindMemory::Device(_) if host.is_empty() => {}
            #[cfg(feature = "cuda")]
            BindMemory::Device(gpu) => {
                // SAFETY: the output holds `host.len()` values on the device (its
                // shape says so), and `host` is kept untouched in `result`
                // until the wait below.
                unsafe { gpu.download_async(t.data_ptr() as u64, &mut host) }.map_err(|e| e.to_string())?;
            }
        }
        result.push((name.clone(), dims, host));
    }
    #[cfg(feature = "cuda")]
    if let BindMemory::Device(gpu) = memory {
        gpu.sync().map_err(|e| e.to_string())?;
    }
    Ok(result)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::TensorRtOptions;

    /// Bindings on the real PP-OCR detector (CPU, host memory): outputs equal
    /// plain runs, one binding per input shape however many runs, stacked
    /// parts land in their slots, and the least recently used shape goes.
    #[test]
    fn bindings_are_made_once_per_shape_and_match_plain_runs() {
        let (lib, _) = default_library();
        if !lib.exists() {
            panic!("{} is missing: run scripts/setup.sh first", lib.display());
        }
        let rt = runtime(None).unwrap();
        let model = Path::new(env!("CARGO_MANIFEST_DIR")).join("models/ppocr/ch_PP-OCRv4_det_infer.onnx");
        let mut m = open_session(rt, &model, &SessionOptions::cpu_single()).unwrap();
        let (input, outputs) = (m.inputs[0].name.clone(), m.outputs.iter().map(|o| o.name.clone()).collect::<Vec<_>>());
        let mut b = Bindings::new(&m.session, m.provider, BindMemory::Host, &input, outputs.clone(), 2).unwrap();
        let image = |seed: u32, n: usize| -> Vec<f32> {
            (0..n).map(|i| (((i as u32).wrapping_mul(2654435761).wrapping_add(seed) >> 16) % 255) as f32 / 127.5 - 1.0).collect()
        };
        let plain = |m: &mut ModelSession, shape: &[usize], data: &[f32]| -> Vec<f32> {
            let t = ort::value::TensorRef::from_array_view((shape.to_vec(), data)).unwrap();
            let o = m.session.run(ort::inputs![input.as_str() => t]).unwrap();
            o[0].try_extract_tensor::<f32>().unwrap().1.to_vec()
        };
        let one = [1usize, 3, 64, 96];
        let n1: usize = one.iter().product();
        for seed in 0..4 {
            let x = image(seed, n1);
            let got = b.run(&mut m.session, &one, &[Src::Host(&x)], |_, n| vec![0f32; n]).unwrap();
            assert_eq!(got[0].1, vec![1, 1, 64, 96]);
            assert_eq!(got[0].2, plain(&mut m, &one, &x), "run {seed}");
        }
        assert_eq!(b.created(), 1, "one binding for one shape");
        // Two frames stacked into a batch of two: each half equals its own run.
        let (x, y) = (image(7, n1), image(8, n1));
        let two = [2usize, 3, 64, 96];
        let got = b.run(&mut m.session, &two, &[Src::Host(&x), Src::Host(&y)], |_, n| vec![0f32; n]).unwrap();
        let per = got[0].2.len() / 2;
        let (px, py) = (plain(&mut m, &one, &x), plain(&mut m, &one, &y));
        let close = |a: &[f32], b: &[f32]| a.iter().zip(b).all(|(p, q)| (p - q).abs() < 1e-5);
        assert!(close(&got[0].2[..per], &px) && close(&got[0].2[per..], &py), "stacked halves differ from single runs");
        assert_eq!(b.created(), 2);
        // A third shape evicts the oldest (capacity 2); coming back rebinds it.
        let three = [1usize, 3, 32, 32];
        b.run(&mut m.session, &three, &[Src::Host(&image(1, 3 * 32 * 32))], |_, n| vec![0f32; n]).unwrap();
        b.run(&mut m.session, &two, &[Src::Host(&x), Src::Host(&y)], |_, n| vec![0f32; n]).unwrap();
        assert_eq!(b.created(), 3, "the batch shape was still bound");
        b.run(&mut m.session, &one, &[Src::Host(&x)], |_, n| vec![0f32; n]).unwrap();
        assert_eq!(b.created(), 4, "the single-frame shape was evicted and bound again");
        // Too few values for the shape is an error, not a read past the end.
        let e = b.run(&mut m.session, &two, &[Src::Host(&x)], |_, n| vec![0f32; n]).unwrap_err();
        assert!(e.contains("needs 36864 values, got 18432"), "{e}");
    }

    /// Outputs whose shape changes with the data (tests/models/positives.onnx:
    /// the input's values above 0): the binding finds out on the run that
    /// changes it, binds them anew from then on, and every run is right.
    #[test]
    fn outputs_whose_shape_follows_the_data_are_bound_anew() {
        let rt = runtime(None).unwrap();
        let model = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/models/positives.onnx");
        let mut m = open_session(rt, &model, &SessionOptions::cpu_single()).unwrap();
        let mut b = Bindings::new(&m.session, m.provider, BindMemory::Host, "x", vec!["y".into()], 2).unwrap();
        for x in [
            [1.0, -1.0, 2.0, 3.0, -5.0, 0.0, 4.0, 5.0],
            [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0],
            [0.5, -2.0, 0.0, 0.0, 0.0, 0.0, 0.0, 9.0],
        ] {
            let want: Vec<f32> = x.iter().copied().filter(|v| *v > 0.0).collect::<Vec<f32>>();
            let got = b.run(&mut m.session, &[1, 8], &[Src::Host(&x)], |_, n| vec![0f32; n]).unwrap();
            assert_eq!((&got[0].1, &got[0].2), (&vec![1, want.len()], &want), "input {x:?}");
        }
        assert_eq!(b.created(), 1);
    }

    /// The CUDA provider with inputs and outputs bound in device memory, on the
    /// real PP-OCR detector: host and device sources give the same maps as
    /// the provider's plain runs, which agree with the CPU provider; one
    /// binding per shape. Runs where a GPU and an ONNX Runtime with the CUDA
    /// provider are present (scripts/gpu-check.sh sets both up); skipped with
    /// the reason elsewhere.
    #[cfg(feature = "cuda")]
    #[test]
    fn gpu_device_bindings_on_the_cuda_provider_match_the_cpu() {
        use crate::backend::cuda;
        if !cuda::probe().driver {
            eprintln!("skipped: no CUDA driver here");
            return;
        }
        let rt = runtime(None).unwrap();
        if !rt.available_providers().contains(&ProviderName::Cuda) {
            eprintln!("skipped: {} has no CUDA provider (the CPU build of ONNX Runtime)", rt.library.display());
            return;
        }
        let gpu = cuda::Gpu::shared(0).unwrap();
        // A test binary carried to a GPU host finds the models through INFER_STREAM_TEST_MODELS.
        let models = std::env::var_os("INFER_STREAM_TEST_MODELS")
            .map_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("models"), PathBuf::from);
        let model = models.join("ppocr/ch_PP-OCRv4_det_infer.onnx");
        // TF32 off: compared with the CPU provider below.
        let cuda_opts = SessionOptions {
            providers: vec![ProviderSpec { required: true, tf32: false, ..ProviderSpec::named(ProviderName::Cuda) }],
            ..SessionOptions::cpu_single()
        };
        let mut g = open_session(rt, &model, &cuda_opts).unwrap();
        let mut c = open_session(rt, &model, &SessionOptions::cpu_single()).unwrap();
        assert_eq!(g.provider, ProviderName::Cuda);
        let (input, outputs) = (g.inputs[0].name.clone(), g.outputs.iter().map(|o| o.name.clone()).collect::<Vec<_>>());
        let mut b = Bindings::new(&g.session, g.provider, BindMemory::Device(gpu.clone()), &input, outputs, 2).unwrap();
        let plain = |m: &mut ModelSession, shape: &[usize], data: &[f32]| -> Vec<f32> {
            let t = ort::value::TensorRef::from_array_view((shape.to_vec(), data)).unwrap();
            let o = m.session.run(ort::inputs![input.as_str() => t]).unwrap();
            o[0].try_extract_tensor::<f32>().unwrap().1.to_vec()
        };
        let max_diff = |a: &[f32], b: &[f32]| {
            assert_eq!(a.len(), b.len());
            a.iter().zip(b).map(|(p, q)| (p - q).abs()).fold(0f32, f32::max)
        };
        let shape = [1usize, 3, 384, 640];
        let n: usize = shape.iter().product();
        let mut worst = (0f32, 0f32);
        let image = |seed: u32| -> Vec<f32> {
            (0..n).map(|i| (((i as u32).wrapping_mul(2654435761).wrapping_add(seed) >> 16) % 255) as f32 / 127.5 - 1.0).collect()
        };
        for seed in 0..4u32 {
            let x = image(seed);
            let dev = gpu.alloc(n * 4).unwrap();
            gpu.upload(&x, dev.ptr).unwrap();
            let from_host = b.run(&mut g.session, &shape, &[Src::Host(&x)], |_, n| vec![0f32; n]).unwrap();
            let from_dev = b.run(&mut g.session, &shape, &[Src::Device(&dev, n)], |_, n| vec![0f32; n]).unwrap();
            let (on_cuda, on_cpu) = (plain(&mut g, &shape, &x), plain(&mut c, &shape, &x));
            assert_eq!(from_dev[0].1, vec![1, 1, 384, 640]);
            let (d_host, d_dev) = (max_diff(&from_host[0].2, &on_cuda), max_diff(&from_dev[0].2, &on_cuda));
            let d_cpu = max_diff(&on_cuda, &on_cpu);
            eprintln!("run {seed}: bound host input vs plain {d_host:e}, bound device input vs plain {d_dev:e}, CUDA vs CPU {d_cpu:e}");
            assert!(d_host < 1e-4 && d_dev < 1e-4, "bound runs differ from the provider's plain run");
            worst = (worst.0.max(d_dev), worst.1.max(d_cpu));
        }
        // A probability map: float sums in another order move values slightly.
        assert!(worst.1 < 2e-2, "CUDA and CPU providers differ by {}", worst.1);
        assert_eq!(b.created(), 1, "one binding for one shape");
        // A batch of two device tensors stacked into one bound input, then a
        // partial batch again: each frame's slice equals its own run.
        let (x, y) = (image(11), image(12));
        let (dx, dy) = (gpu.alloc(n * 4).unwrap(), gpu.alloc(n * 4).unwrap());
        gpu.upload(&x, dx.ptr).unwrap();
        gpu.upload(&y, dy.ptr).unwrap();
        let two = [2usize, 3, 384, 640];
        let got = b.run(&mut g.session, &two, &[Src::Device(&dx, n), Src::Device(&dy, n)], |_, n| vec![0f32; n]).unwrap();
        assert_eq!(got[0].1, vec![2, 1, 384, 640]);
        let per = got[0].2.len() / 2;
        let (px, py) = (plain(&mut g, &shape, &x), plain(&mut g, &shape, &y));
        let (d0, d1) = (max_diff(&got[0].2[..per], &px), max_diff(&got[0].2[per..], &py));
        eprintln!("batch of two from device tensors: slices vs single runs {d0:e}, {d1:e}");
        assert!(d0 < 1e-4 && d1 < 1e-4, "stacked device batch differs from single runs");
        let again = b.run(&mut g.session, &shape, &[Src::Device(&dy, n)], |_, n| vec![0f32; n]).unwrap();
        assert!(max_diff(&again[0].2, &py) < 1e-4, "the single-frame binding after a batch");
        assert_eq!(b.created(), 2, "one binding per shape: [1,...] and [2,...]");
        // A device part that claims more values than its buffer holds is refused, not read past.
        let e = b.run(&mut g.session, &shape, &[Src::Device(&gpu.alloc(16).unwrap(), n)], |_, n| vec![0f32; n]).unwrap_err();
        assert!(e.contains("cannot hold"), "{e}");
        eprintln!("device bindings: worst difference to plain runs {:e}, CUDA vs CPU {:e}", worst.0, worst.1);
    }

    /// The first run a GPU provider's session gets before it is taken: zeros
    /// of the probe shape into the named input (or the first); a shape the
    /// model refuses is an error naming the shape, so the provider is not taken.
    #[test]
    fn probe_run_feeds_zeros_of_the_shape() {
        let rt = runtime(None).unwrap();
        let model = Path::new(env!("CARGO_MANIFEST_DIR")).join("models/ppocr/ch_PP-OCRv4_det_infer.onnx");
        let mut m = open_session(rt, &model, &SessionOptions::cpu_single()).unwrap();
        let input = m.inputs[0].name.clone();
        probe_run(&mut m.session, Some(&input), &[1, 3, 32, 32]).unwrap();
        probe_run(&mut m.session, None, &[1, 3, 32, 32]).unwrap();
        probe_run(&mut m.session, Some("no such input"), &[1, 3, 32, 32]).unwrap();
        let e = probe_run(&mut m.session, None, &[1, 5, 32, 32]).unwrap_err();
        assert!(e.starts_with("first run on [1, 5, 32, 32] failed:"), "{e}");
    }

    /// The CPU build of ONNX Runtime cannot register the GPU providers, and says why.
    #[test]
    fn register_error_says_why_a_provider_cannot_load() {
        let rt = runtime(None).unwrap();
        assert_eq!(rt.register_error(ProviderName::Cpu), None);
        if rt.available_providers().contains(&ProviderName::Cuda) {
            eprintln!("skipped: {} has the CUDA provider", rt.library.display());
            return;
        }
        for p in [ProviderName::Cuda, ProviderName::Tensorrt] {
            let e = rt.register_error(p).unwrap_or_else(|| panic!("{p} registered on the CPU build"));
            assert!(!e.is_empty());
        }
    }

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
