//! `kind = "python"`: the user's own Python code on each frame
//! (docs/python.md). `setup(args)` once at start-up (an error there is a
//! start-up error), `process(frame)` per frame on the stage's own thread (an
//! exception fails that frame, handled by `on_error`), `finish()` when the
//! input ends. Files by concern: `interp` (the interpreter, loading and
//! checking the code), `convert` (the frame as Python sees it), `outcome`
//! (what `process` returned, back on the frame), `worker` (the thread the
//! code runs on, and the stop deadline).

mod convert;
pub mod interp;
mod outcome;
mod worker;

use std::sync::Arc;

use ffmpeg_next::format::Pixel;
use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::backend::ffmpeg::sws_flags;
use crate::config::{Diagnostic, Interpolation, NodeConfig, PipelineConfig, PythonConfig};
use crate::frame::{Event, Frame};
use crate::stages::build::{Build, BuildCtx};
use crate::stages::scalers::Scalers;
use crate::stages::{Body, Stage, StageError};

pub struct PythonStage {
    name: Arc<str>,
    /// `plugins/x.py:process` as written.
    shown: String,
    function: Arc<Py<PyAny>>,
    finish: Option<Arc<Py<PyAny>>>,
    /// The thread the code runs on.
    worker: worker::Worker,
    image: bool,
    scalers: Scalers,
    host: crate::frame::Pool<u8>,
}

/// The user's code as the config names it: a script's path, or a module.
enum Named<'a> {
    Script(std::path::PathBuf),
    Module(&'a str),
}

/// The user's code as the config names it, with the span to point errors at.
fn code<'a>(cfg: &PipelineConfig, node: &NodeConfig, c: &'a PythonConfig) -> Result<(Named<'a>, std::ops::Range<usize>), Diagnostic> {
    match (&c.script, &c.module) {
        (Some(_), Some(m)) => Err(cfg
            .diag(m.span(), format!("stage `{}`: both `script` and `module` are set", node.name))
            .with_help("keep one: `script = \"plugins/x.py\"` (a file) or `module = \"pkg.mod\"` (on Python's path)")),
        (None, None) => Err(cfg
            .diag(node.kind_span.clone(), format!("stage `{}`: no Python code named", node.name))
            .with_help("set `script = \"plugins/x.py\"` (a file, relative to the pipeline) or `module = \"pkg.mod\"`")),
        (Some(s), None) => {
            let p = cfg.resolve_path(s)?;
            if !p.is_file() {
                return Err(cfg
                    .diag(s.span(), format!("Python script not found: {}", p.display()))
                    .with_help("fix the path (relative paths start at the pipeline file's folder)"));
            }
            Ok((Named::Script(p), s.span()))
        }
        (None, Some(m)) => Ok((Named::Module(m.get_ref().as_str()), m.span())),
    }
}

/// Import the stage's code and check its functions (what `validate` does; `setup` is not called).
pub fn check(cfg: &PipelineConfig, node: &NodeConfig, c: &PythonConfig) -> Result<interp::Loaded, Diagnostic> {
    let (named, span) = code(cfg, node, c)?;
    let shown = c.script.as_ref().or(c.module.as_ref()).map(|s| s.get_ref().clone()).unwrap_or_default();
    let what = match &named {
        Named::Script(p) => interp::Code::Script(p),
        Named::Module(m) => interp::Code::Module(m),
    };
    interp::load(&node.name, &what, c.function.get_ref(), &cfg.base_dir).map_err(|e| match e {
        interp::LoadError::Import(tb) => cfg
            .diag(span.clone(), format!("stage `{}`: cannot import {shown}:\n{tb}", node.name))
            .with_help("fix the Python error above (python3 -c 'import ...' shows the same)"),
        interp::LoadError::Function(w) => {
            // `function` when written, else the code it names.
            let at = if c.function.span().is_empty() { span.clone() } else { c.function.span() };
            cfg.diag(at, format!("stage `{}`: {shown} {w}", node.name))
                .with_help("define `def process(frame):` (or name yours with `function = \"...\"`); docs/python.md")
        }
    })
}

impl PythonStage {
    /// Load the code, check it and run its `setup(args)`: any error is a start-up error.
    pub fn build(
        cfg: &PipelineConfig,
        node: &NodeConfig,
        c: &PythonConfig,
        pool_size: usize,
        shutdown: Option<Arc<crate::runtime::Shutdown>>,
    ) -> Result<Self, Diagnostic> {
        let loaded = check(cfg, node, c)?;
        let shown = format!(
            "{}:{}",
            c.script.as_ref().or(c.module.as_ref()).map(|s| s.get_ref().as_str()).unwrap_or_default(),
            c.function.get_ref()
        );
        if let Some(setup) = &loaded.setup {
            let args =
                c.args.as_ref().map(|a| serde_json::to_string(a.get_ref()).unwrap_or_else(|_| "{}".into())).unwrap_or_else(|| "{}".into());
            interp::setup(setup, &args).map_err(|tb| {
                let span = c.args.as_ref().map(|a| a.span()).unwrap_or_else(|| node.kind_span.clone());
                cfg.diag(span, format!("stage `{}`: setup(args) of {shown} failed:\n{tb}", node.name))
                    .with_help("fix setup() or the stage's `args`; docs/python.md")
            })?;
        }
        let name: Arc<str> = Arc::from(node.name.as_str());
        let timeout = std::time::Duration::from_millis(c.stop_timeout_ms);
        let worker = worker::Worker::start(name.clone(), shown.clone(), shutdown, timeout)
            .map_err(|e| cfg.diag(node.kind_span.clone(), format!("stage `{}`: cannot start its thread: {e}", node.name)))?;
        Ok(PythonStage {
            name,
            shown,
            function: Arc::new(loaded.function),
            finish: loaded.finish.map(Arc::new),
            worker,
            image: c.image,
            scalers: Scalers::default(),
            host: crate::frame::Pool::new(pool_size.max(2)),
        })
    }

    /// The frame's picture as RGB, when the stage asks for it.
    fn picture(&mut self, frame: &Frame) -> Result<Option<convert::Picture>, StageError> {
        let Some(img) = frame.image.as_ref().filter(|_| self.image) else { return Ok(None) };
        let img = crate::stages::on_host(img, &self.host).map_err(StageError::Frame)?;
        let (w, h) = (img.width, img.height);
        let scaler = self.scalers.get(&self.name, &frame.stream, &img, (w, h, Pixel::RGB24), sws_flags(Interpolation::Bilinear))?;
        let mut rgb = vec![0u8; w as usize * h as usize * 3];
        scaler.run(&img, &mut rgb).map_err(StageError::Frame)?;
        Ok(Some((w, h, rgb)))
    }
}

impl Stage for PythonStage {
    fn process(&mut self, frame: &mut Frame) -> Result<(), StageError> {
        let picture = self.picture(frame)?;
        let meta = convert::meta_json(frame);
        let outputs = convert::latest_outputs(frame);
        let function = self.function.clone();
        let shown = self.shown.clone();
        let call = move || {
            Python::attach(|py| -> Result<Option<String>, String> {
                let f = convert::to_python(py, &meta, outputs.as_ref(), picture).map_err(|e| interp::error_text(py, &e))?;
                let r = function.bind(py).call1((f,)).map_err(|e| format!("{shown} raised:\n{}", interp::error_text(py, &e)))?;
                if r.is_none() {
                    return Ok(None);
                }
                if !r.is_instance_of::<PyDict>() {
                    let ty = r.get_type().name().map(|n| n.to_string()).unwrap_or_default();
                    let a = if ty.starts_with(['a', 'e', 'i', 'o', 'u']) { "an" } else { "a" };
                    return Err(format!("{shown} returned {a} {ty}: return None (pass the frame on) or a dict (its results)"));
                }
                let h = interp::helper(py).map_err(|e| interp::error_text(py, &e))?;
                let text = h.call_method1("dumps", (r,)).and_then(|t| t.extract::<String>());
                text.map(Some).map_err(|e| format!("{shown} returned a dict that is not JSON:\n{}", interp::error_text(py, &e)))
            })
        };
        let at = format!("stream `{}` frame {}", frame.stream, frame.seq);
        let returned = self.worker.call(&at, Box::new(call)).map_err(StageError::Frame)?;
        match returned {
            Some(text) => outcome::apply(&self.name, frame, &text).map_err(|e| StageError::Frame(format!("{}: {e}", self.shown))),
            None => Ok(()),
        }
    }

    fn finish(&mut self) -> Vec<Event> {
        if let Some(f) = self.finish.clone()
            && let Err(tb) = self.worker.call(
                "the end of the input",
                Box::new(move || Python::attach(|py| f.bind(py).call0().map(|_| None).map_err(|e| interp::error_text(py, &e)))),
            )
        {
            tracing::error!("stage `{}`: finish() of {} failed:\n{tb}", self.name, self.shown);
        }
        Vec::new()
    }

    fn describe(&self) -> String {
        format!("Python {}{}", self.shown, if self.image { " (with the picture)" } else { "" })
    }
}

impl Build for PythonConfig {
    fn build(&self, cx: &BuildCtx<'_>) -> Result<Body, Diagnostic> {
        PythonStage::build(cx.cfg, cx.node, self, cx.pool_size, cx.opts.shutdown.clone()).map(|s| Body::Stage(Box::new(s)))
    }
}
