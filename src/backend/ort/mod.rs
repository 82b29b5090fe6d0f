//! ONNX Runtime through ort (`load-dynamic`): finding the library, opening
//! sessions with the requested execution providers, loudly.

use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};

use ort::ep::{self, ExecutionProvider};
use ort::session::Session;

use crate::config::ProviderName;

mod binding;
mod session;

pub use binding::*;
pub use session::*;

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

#[cfg(test)]
mod tests;
