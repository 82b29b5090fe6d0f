//! The embedded interpreter: one CPython for the process (started on first
//! use), the helper module every `python` stage shares (`helper.py`), the
//! user's code loaded and checked, and Python errors as text with their
//! tracebacks. Each stage calls into Python on its own thread, holding the
//! GIL only while Python runs (docs/python.md, "Threads and the GIL").

use std::ffi::CString;
use std::path::Path;
use std::sync::OnceLock;

use pyo3::prelude::*;
use pyo3::types::PyModule;

/// The helper's source, run as the module `infer_stream_python`.
const HELPER: &str = include_str!("helper.py");

static MODULE: OnceLock<Py<PyModule>> = OnceLock::new();

/// The helper module (made on first use; every stage shares it).
pub fn helper(py: Python<'_>) -> PyResult<Bound<'_, PyModule>> {
    if let Some(m) = MODULE.get() {
        return Ok(m.bind(py).clone());
    }
    let code = CString::new(HELPER).expect("helper.py has no NUL");
    let m = PyModule::from_code(py, &code, c"infer_stream_python.py", c"infer_stream_python")?;
    let _ = MODULE.set(m.clone().unbind());
    Ok(m)
}

/// A Python error as Python prints it: the traceback, then the exception.
pub fn error_text(py: Python<'_>, e: &PyErr) -> String {
    let text =
        helper(py).and_then(|h| h.call_method1("traceback_text", (e.value(py), e.traceback(py)))).and_then(|t| t.extract::<String>());
    text.unwrap_or_else(|_| e.to_string())
}

/// What the user's code is: a file or a module.
pub enum Code<'a> {
    Script(&'a Path),
    Module(&'a str),
}

/// The user's functions, checked: `function` (takes the frame), and `setup`
/// and `finish` when the module has them.
pub struct Loaded {
    pub function: Py<PyAny>,
    pub setup: Option<Py<PyAny>>,
    pub finish: Option<Py<PyAny>>,
}

/// Why loading failed: the module did not import (its traceback), or its
/// functions do not fit (what is wrong).
pub enum LoadError {
    Import(String),
    Function(String),
}

/// Import the user's code for stage `stage` (the pipeline's folder on the path) and check its functions.
pub fn load(stage: &str, code: &Code<'_>, function: &str, folder: &Path) -> Result<Loaded, LoadError> {
    Python::attach(|py| {
        let h = helper(py).map_err(|e| LoadError::Import(error_text(py, &e)))?;
        let (script, module) = match code {
            Code::Script(p) => (Some(p.to_string_lossy().into_owned()), None),
            Code::Module(m) => (None, Some(m.to_string())),
        };
        let m = h
            .call_method1("load", (stage, script, module, folder.to_string_lossy().into_owned()))
            .map_err(|e| LoadError::Import(error_text(py, &e)))?;
        let wrong: Option<String> =
            h.call_method1("check", (&m, function)).and_then(|w| w.extract()).map_err(|e| LoadError::Import(error_text(py, &e)))?;
        if let Some(w) = wrong {
            return Err(LoadError::Function(w));
        }
        let get = |name: &str| m.getattr(name).ok().filter(|f| !f.is_none()).map(Bound::unbind);
        let function = get(function).ok_or_else(|| LoadError::Function(format!("has no function `{function}`")))?;
        Ok(Loaded { function, setup: get("setup"), finish: get("finish") })
    })
}

/// Call `setup(args)` with the args as a dict (their JSON text); `Err`: the traceback.
pub fn setup(setup: &Py<PyAny>, args_json: &str) -> Result<(), String> {
    Python::attach(|py| {
        let run = || -> PyResult<()> {
            let args = py.import("json")?.call_method1("loads", (args_json,))?;
            setup.bind(py).call1((args,))?;
            Ok(())
        };
        run().map_err(|e| error_text(py, &e))
    })
}

/// The Python this process runs and its numpy (`doctor`): versions, or why not.
pub fn versions() -> (String, Result<String, String>) {
    Python::attach(|py| {
        let python = py.version().split_whitespace().next().unwrap_or_default().to_string();
        let numpy =
            py.import("numpy").and_then(|n| n.getattr("__version__")).and_then(|v| v.extract::<String>()).map_err(|e| e.to_string());
        (python, numpy)
    })
}
