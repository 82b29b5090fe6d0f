//! `kind = "infer"`: run an ONNX model on the frame's model input.

use std::sync::Arc;
use std::time::Instant;

use ort::value::TensorRef;

use crate::backend::ort::{IoInfo, ModelSession, OrtRuntime, SessionOptions, open_session};
use crate::config::{Diagnostic, InferConfig, PipelineConfig};
use crate::frame::{Frame, ModelOutputs, Payload, Pool, Tensor};
use crate::stages::{Stage, StageError};

pub struct Infer {
    name: Arc<str>,
    model: String,
    m: ModelSession,
    input: String,
    output_names: Vec<String>,
    pools: Vec<Pool<f32>>,
    intra_threads: usize,
}

/// Cores on this machine.
pub fn cores() -> usize {
    std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1)
}

impl Infer {
    /// Open the model with the configured providers; `warm_shape` (from the
    /// upstream preprocess) lets it run once before the first frame.
    pub fn build(
        cfg: &PipelineConfig,
        name: Arc<str>,
        c: &InferConfig,
        rt: &OrtRuntime,
        warm_shape: Option<Vec<usize>>,
        pool_size: usize,
    ) -> Result<Self, Diagnostic> {
        let path = cfg.resolve_path(&c.model)?;
        if !path.exists() {
            return Err(cfg
                .diag(c.model.span(), format!("model file not found: {}", path.display()))
                .with_help("run scripts/fetch-models.sh, or fix the path (relative paths start at the pipeline file's folder)"));
        }
        let intra_threads = c.intra_threads.unwrap_or_else(cores);
        let opts = SessionOptions {
            providers: c.providers.get_ref().clone(),
            intra_threads,
            inter_threads: c.inter_threads.unwrap_or(1),
            spinning: c.spinning,
        };
        let m = open_session(rt, &path, &opts).map_err(|e| {
            let span = if matches!(e, crate::backend::ort::OrtError::Required { .. }) && c.providers.span() != (0..0) {
                c.providers.span()
            } else {
                c.model.span()
            };
            cfg.diag(span, format!("stage `{name}`: {e}"))
        })?;
        let input = match &c.input {
            Some(n) if m.inputs.iter().any(|i| &i.name == n.get_ref()) => n.get_ref().clone(),
            Some(n) => {
                let names: Vec<_> = m.inputs.iter().map(|i| format!("`{}`", i.name)).collect();
                return Err(cfg.diag(n.span(), format!("model has no input `{}`; its inputs are {}", n.get_ref(), names.join(", "))));
            }
            None => m.inputs.first().map(|i| i.name.clone()).ok_or_else(|| cfg.diag(c.model.span(), "model has no inputs"))?,
        };
        let output_names: Vec<String> = m.outputs.iter().map(|o| o.name.clone()).collect();
        let pools = output_names.iter().map(|_| Pool::new(pool_size)).collect();
        for (p, why) in &m.fallbacks {
            tracing::warn!("stage `{name}`: execution provider `{p}` is not available ({why}); falling back to `{}`", m.provider);
        }
        let mut stage = Infer { name, model: path.display().to_string(), m, input, output_names, pools, intra_threads };
        if c.warmup
            && let Some(shape) = warm_shape
        {
            let t0 = Instant::now();
            let zeros = vec![0f32; shape.iter().product()];
            stage.run(&shape, &zeros).map_err(|e| cfg.diag(c.model.span(), format!("stage `{}`: warm-up run failed: {e}", stage.name)))?;
            tracing::info!("stage `{}`: warm-up {:.0} ms", stage.name, t0.elapsed().as_secs_f64() * 1e3);
        }
        Ok(stage)
    }

    pub fn inputs(&self) -> &[IoInfo] {
        &self.m.inputs
    }
    pub fn outputs(&self) -> &[IoInfo] {
        &self.m.outputs
    }
    pub fn provider(&self) -> crate::config::ProviderName {
        self.m.provider
    }

    fn run(&mut self, shape: &[usize], data: &[f32]) -> Result<Vec<(String, Tensor)>, String> {
        let input = TensorRef::from_array_view((shape.to_vec(), data)).map_err(|e| e.to_string())?;
        let outputs = self.m.session.run(ort::inputs![self.input.as_str() => input]).map_err(|e| e.to_string())?;
        let mut out = Vec::with_capacity(self.output_names.len());
        for (name, pool) in self.output_names.iter().zip(&self.pools) {
            let v = outputs.get(name).ok_or_else(|| format!("model produced no output `{name}`"))?;
            let (s, d) = v.try_extract_tensor::<f32>().map_err(|e| format!("output `{name}`: {e}"))?;
            let mut buf = pool.get(d.len());
            buf.copy_from_slice(d);
            out.push((name.clone(), Tensor { shape: s.iter().map(|&x| x.max(0) as usize).collect(), data: buf }));
        }
        Ok(out)
    }
}

impl Stage for Infer {
    fn provider(&self) -> Option<String> {
        let mut s = self.m.provider.to_string();
        for (p, _) in &self.m.fallbacks {
            s.push_str(&format!(" (fallback from {p})"));
        }
        Some(s)
    }

    fn describe(&self) -> String {
        format!(
            "{} on {} ({} intra-op thread{})",
            self.model,
            self.m.provider,
            self.intra_threads,
            if self.intra_threads == 1 { "" } else { "s" }
        )
    }

    fn process(&mut self, frame: &mut Frame) -> Result<(), StageError> {
        // Hold the input by `Arc` (other branches may share it) while the frame gets the outputs.
        let payload = frame
            .results
            .iter()
            .rev()
            .find(|a| matches!(&*a.payload, Payload::Input(_) | Payload::Crops(_)))
            .map(|a| Arc::clone(&a.payload))
            .ok_or_else(|| StageError::Frame("no model input on the frame (is a preprocess or crop stage upstream?)".into()))?;
        let (tensor, letterbox) = match &*payload {
            Payload::Input(mi) => (&mi.tensor, Some(mi.letterbox)),
            Payload::Crops(c) => (&c.tensor, None),
            _ => unreachable!("matched above"),
        };
        // A frame without regions has nothing to run on.
        let outputs =
            if tensor.shape.first() == Some(&0) { Vec::new() } else { self.run(&tensor.shape, &tensor.data).map_err(StageError::Frame)? };
        frame.attach(&self.name, Payload::Outputs(ModelOutputs { outputs, letterbox }));
        Ok(())
    }
}
