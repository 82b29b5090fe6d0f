//! `kind = "infer"`: run an ONNX model on the frame's model input.

use std::sync::Arc;
use std::time::Instant;

use ort::value::TensorRef;

use crate::backend::ort::{BindMemory, Bindings, IoInfo, ModelSession, OrtRuntime, SessionOptions, Src, open_session, stack_on_host};
use crate::config::{Diagnostic, InferConfig, IoBindingMode, NodeKind, PipelineConfig, ProviderName};
use crate::frame::{Attached, Frame, ModelOutputs, Payload, Pool, Tensor, WorkMode};
use crate::gating::Gate;
use crate::stages::build::{Build, BuildCtx};
use crate::stages::{Body, Stage, StageError};

pub struct Infer {
    name: Arc<str>,
    model: String,
    m: ModelSession,
    input: String,
    output_names: Vec<String>,
    pools: Vec<Pool<f32>>,
    intra_threads: usize,
    /// (max frames, wait) when batching is on and the model takes a dynamic batch.
    batch: Option<(usize, std::time::Duration)>,
    stacked: Vec<f32>,
    /// IoBinding (input and outputs bound once per input shape), when on.
    bound: Option<Bindings>,
    /// `interval` / `motion` decided here (when no preprocess of its own decides for it).
    gate: Option<Gate>,
    /// `motion`: each stream's latest outputs, carried to frames that did not move.
    last: Option<std::collections::HashMap<Arc<str>, Arc<Payload>>>,
}

/// Where the stage binds its model's input and outputs, if it does
/// (`io_binding`): device memory for a GPU provider running on the
/// pipeline's GPU and stream, host memory otherwise.
fn bind_memory(c: &InferConfig, m: &ModelSession, name: &str) -> Option<BindMemory> {
    let gpu_provider = matches!(m.provider, ProviderName::Cuda | ProviderName::Tensorrt);
    match c.io_binding {
        IoBindingMode::Off => return None,
        IoBindingMode::Auto if !gpu_provider => return None,
        _ => {}
    }
    if !gpu_provider {
        return Some(BindMemory::Host);
    }
    // Device bindings skip ONNX Runtime's wait after a run: only sound when
    // the provider runs on the stream the copies in and out are queued on.
    #[cfg(feature = "cuda")]
    match &m.gpu {
        Some(gpu) => return Some(BindMemory::Device(gpu.clone())),
        None => tracing::warn!(
            "stage `{name}`: {} does not run on the pipeline's GPU stream (see above); inputs and outputs go through host memory",
            m.provider
        ),
    }
    #[cfg(not(feature = "cuda"))]
    tracing::warn!(
        "stage `{name}`: {} runs on the GPU but this build has no `cuda` feature; inputs and outputs go through host memory",
        m.provider
    );
    Some(BindMemory::Host)
}

/// Cores on this machine.
pub fn cores() -> usize {
    std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1)
}

impl Infer {
    /// Open the model with the configured providers; `warm_shape` (from the
    /// upstream preprocess) lets it run once before the first frame;
    /// `whole_frames`: its inputs come from a preprocess (not crops).
    pub fn build(
        cfg: &PipelineConfig,
        name: Arc<str>,
        c: &InferConfig,
        rt: &OrtRuntime,
        warm_shape: Option<Vec<usize>>,
        whole_frames: bool,
        pool_size: usize,
    ) -> Result<Self, Diagnostic> {
        let path = cfg.resolve_path(&c.model)?;
        if !path.exists() {
            return Err(cfg
                .diag(c.model.span(), format!("model file not found: {}", path.display()))
                .with_help(crate::config::fetch_hint::missing_model(&path)));
        }
        let intra_threads = c.intra_threads.unwrap_or_else(cores);
        let opts = SessionOptions {
            providers: c.providers.get_ref().clone(),
            intra_threads,
            inter_threads: c.inter_threads.unwrap_or(1),
            spinning: c.spinning,
            probe: warm_shape.clone().map(|shape| (c.input.as_ref().map(|n| n.get_ref().clone()), shape)),
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
        let batch = match c.batch.as_ref().map(|b| *b.get_ref()) {
            Some(b) if b.max.get() > 1 => {
                let dim0 = m.inputs.iter().find(|i| i.name == input).and_then(|i| i.dims.first().copied());
                if dim0.is_some_and(|d| d >= 0) {
                    tracing::warn!(
                        "stage `{name}`: the model's batch dimension is fixed ({}); frames run one at a time",
                        dim0.unwrap_or(1)
                    );
                    None
                } else {
                    Some((b.max.get(), std::time::Duration::from_millis(b.timeout_ms)))
                }
            }
            _ => None,
        };
        // Only whole-frame inputs (from a preprocess) are bound: crop batches change size every frame.
        let bound = match bind_memory(c, &m, &name).filter(|_| whole_frames) {
            Some(memory) => {
                let capacity = batch.map_or(1, |b| b.0) + 2;
                let bind = |memory| Bindings::new(&m.session, m.provider, memory, &input, output_names.clone(), capacity);
                let on_device = !matches!(memory, BindMemory::Host);
                let b = match bind(memory) {
                    Ok(b) => b,
                    // Device memory the session cannot allocate: host memory, loudly.
                    Err(e) if on_device => {
                        tracing::warn!(
                            "stage `{name}`: cannot bind the model's input and outputs in device memory ({e}); binding them in host memory"
                        );
                        bind(BindMemory::Host).map_err(|e| {
                            cfg.diag(c.model.span(), format!("stage `{name}`: cannot bind the model's input and outputs: {e}"))
                        })?
                    }
                    Err(e) => {
                        return Err(cfg.diag(c.model.span(), format!("stage `{name}`: cannot bind the model's input and outputs: {e}")));
                    }
                };
                Some(b)
            }
            None => None,
        };
        let mut stage = Infer {
            name,
            model: crate::config::tidy_path(&path).display().to_string(),
            m,
            input,
            output_names,
            pools,
            intra_threads,
            batch,
            stacked: Vec::new(),
            bound,
            gate: None,
            last: c.motion.is_some().then(Default::default),
        };
        if c.warmup
            && let Some(shape) = warm_shape
        {
            let t0 = Instant::now();
            let zeros = vec![0f32; shape.iter().product()];
            stage
                .run_parts(&shape, &[Src::Host(&zeros)])
                .map_err(|e| cfg.diag(c.model.span(), format!("stage `{}`: warm-up run failed: {e}", stage.name)))?;
            tracing::info!("stage `{}`: warm-up {:.0} ms", stage.name, t0.elapsed().as_secs_f64() * 1e3);
        }
        Ok(stage)
    }

    /// Decide here which frames run (`interval`, `motion`): the preprocess
    /// before does not decide for this stage.
    pub fn set_gate(&mut self, gate: Gate) {
        self.gate = Some(gate);
    }

    /// Whether this frame skips the model, and how: the stage's own gate, or
    /// the marker its preprocess left.
    fn skip_mode(&mut self, frame: &Frame) -> Option<WorkMode> {
        if let Some(g) = &mut self.gate {
            return Some(g.decide(&frame.stream, frame.image.as_deref())).filter(|m| *m != WorkMode::Inferred);
        }
        frame
            .results
            .iter()
            .rev()
            .find_map(|a| match &*a.payload {
                Payload::Gated(m) => Some(Some(*m)),
                Payload::Input(_) | Payload::Crops(_) => Some(None),
                _ => None,
            })
            .flatten()
    }

    /// A skipped frame gets the marker, and (`carried`) the stream's latest outputs.
    fn skip(&mut self, frame: &mut Frame, mode: WorkMode) {
        let last = self.last.as_ref().and_then(|l| l.get(&frame.stream)).cloned();
        match (mode, last) {
            (WorkMode::Carried, Some(p)) => {
                frame.attach(&self.name, Payload::NotInferred(WorkMode::Carried));
                frame.results.push(Attached { node: self.name.clone(), payload: p });
            }
            // Nothing to carry yet: the boxes are the tracker's to predict.
            _ => frame.attach(&self.name, Payload::NotInferred(WorkMode::Predicted)),
        }
    }

    fn attach_outputs(&mut self, frame: &mut Frame, outputs: ModelOutputs) {
        let p = Arc::new(Payload::Outputs(outputs));
        if let Some(last) = &mut self.last {
            if last.len() >= 4096 && !last.contains_key(&frame.stream) {
                last.clear();
            }
            last.insert(frame.stream.clone(), p.clone());
        }
        frame.results.push(Attached { node: self.name.clone(), payload: p });
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

    /// Run on `parts` stacked along the first dimension into a tensor of
    /// `shape`: into the bound input (device parts copied on the device), else
    /// one host part read in place, or the parts stacked in the stage's reused
    /// buffer (device parts downloaded into their place).
    fn run_parts(&mut self, shape: &[usize], parts: &[Src<'_>]) -> Result<Vec<(String, Tensor)>, String> {
        if let Some(b) = self.bound.as_mut() {
            self.m.bind_device()?;
            let pools = &self.pools;
            let mut k = 0;
            let outs = b.run(&mut self.m.session, shape, parts, |_, n| {
                let buf = pools[k].get(n);
                k += 1;
                buf
            })?;
            return Ok(outs.into_iter().map(|(name, shape, data)| (name, Tensor { shape, data })).collect());
        }
        if let [Src::Host(data)] = parts {
            return self.run_plain(shape, data);
        }
        let mut stacked = std::mem::take(&mut self.stacked);
        stacked.resize(parts.iter().map(Src::len).sum(), 0.0);
        let r = stack_on_host(parts, &mut stacked).and_then(|_| self.run_plain(shape, &stacked));
        self.stacked = stacked;
        r
    }

    /// A plain run (no binding), the input read in place: crop batches,
    /// whose size changes from frame to frame, always run this way.
    fn run_plain(&mut self, shape: &[usize], data: &[f32]) -> Result<Vec<(String, Tensor)>, String> {
        self.m.bind_device()?;
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

/// Where a model input's values are: on the device (the GPU preprocess) or
/// in host memory.
fn source(mi: &crate::frame::ModelInput) -> Src<'_> {
    #[cfg(feature = "cuda")]
    if let Some(d) = &mi.device {
        return Src::Device(d, mi.tensor.shape.iter().product());
    }
    Src::Host(&mi.tensor.data)
}

impl Infer {
    /// Run frames whose inputs have the same shape `[1, ...]` as one batch and
    /// give each frame its slice of the outputs.
    fn run_stacked(&mut self, frames: &mut [Frame], idx: &[usize]) -> Result<(), String> {
        let inputs: Vec<Arc<Payload>> = idx
            .iter()
            .map(|&i| {
                frames[i]
                    .results
                    .iter()
                    .rev()
                    .find(|a| matches!(&*a.payload, Payload::Input(_)))
                    .map(|a| Arc::clone(&a.payload))
                    .expect("checked by caller")
            })
            .collect();
        let tensors: Vec<&crate::frame::ModelInput> =
            inputs.iter().map(|p| if let Payload::Input(mi) = &**p { mi } else { unreachable!() }).collect();
        let mut shape = tensors[0].tensor.shape.clone();
        shape[0] = tensors.len();
        // Each frame's tensor goes into its slot of one input.
        let parts: Vec<Src<'_>> = tensors.iter().map(|t| source(t)).collect();
        let outputs = self.run_parts(&shape, &parts)?;
        let n = idx.len();
        for (k, &i) in idx.iter().enumerate() {
            let mut mine = Vec::with_capacity(outputs.len());
            for ((name, t), pool) in outputs.iter().zip(&self.pools) {
                if t.shape.first() != Some(&n) {
                    return Err(format!("output `{name}` has shape {:?}: no batch dimension of {n} to split", t.shape));
                }
                let per = t.data.len() / n;
                let mut buf = pool.get(per);
                buf.copy_from_slice(&t.data[k * per..(k + 1) * per]);
                let mut s = t.shape.clone();
                s[0] = 1;
                mine.push((name.clone(), Tensor { shape: s, data: buf }));
            }
            self.attach_outputs(&mut frames[i], ModelOutputs { outputs: mine, letterbox: Some(tensors[k].letterbox) });
        }
        Ok(())
    }
}

impl Stage for Infer {
    fn batching(&self) -> Option<(usize, std::time::Duration)> {
        self.batch
    }

    fn process_batch(&mut self, frames: &mut [Frame]) -> Vec<Result<(), StageError>> {
        // Whole-frame inputs of the same shape run together; anything else (crops) one by one.
        let stackable = |f: &Frame| {
            f.results.iter().rev().find_map(|a| match &*a.payload {
                Payload::Input(mi) if mi.tensor.shape.first() == Some(&1) => Some(Some(mi.tensor.shape.clone())),
                Payload::Input(_) | Payload::Crops(_) => Some(None),
                _ => None,
            })
        };
        let skips: Vec<Option<WorkMode>> = frames.iter().map(|f| self.skip_mode(f)).collect();
        let shapes: Vec<Option<Vec<usize>>> =
            frames.iter().zip(&skips).map(|(f, s)| if s.is_some() { None } else { stackable(f).flatten() }).collect();
        let mut results: Vec<Option<Result<(), StageError>>> = (0..frames.len()).map(|_| None).collect();
        let mut done = vec![false; frames.len()];
        for i in 0..frames.len() {
            if done[i] {
                continue;
            }
            let Some(shape) = &shapes[i] else { continue };
            let group: Vec<usize> = (i..frames.len()).filter(|&j| !done[j] && shapes[j].as_ref() == Some(shape)).collect();
            if group.len() < 2 {
                continue;
            }
            let r = self.run_stacked(frames, &group);
            for &j in &group {
                done[j] = true;
                results[j] = Some(r.clone().map_err(StageError::Frame));
            }
        }
        for (i, f) in frames.iter_mut().enumerate() {
            if results[i].is_none() {
                results[i] = Some(self.process_one(f, skips[i]));
            }
        }
        results.into_iter().map(|r| r.expect("every frame handled")).collect()
    }

    fn provider(&self) -> Option<String> {
        let mut s = self.m.provider.to_string();
        for (p, _) in &self.m.fallbacks {
            s.push_str(&format!(" (fallback from {p})"));
        }
        Some(s)
    }

    fn describe(&self) -> String {
        let binding = match &self.bound {
            Some(b) => format!(", IoBinding in {} memory", b.memory().name()),
            None => String::new(),
        };
        format!(
            "{} on {} ({} intra-op thread{}{binding})",
            self.model,
            self.m.provider,
            self.intra_threads,
            if self.intra_threads == 1 { "" } else { "s" }
        )
    }

    fn process(&mut self, frame: &mut Frame) -> Result<(), StageError> {
        let skip = self.skip_mode(frame);
        self.process_one(frame, skip)
    }
}

impl Infer {
    /// One frame, its skip already decided.
    fn process_one(&mut self, frame: &mut Frame, skip: Option<WorkMode>) -> Result<(), StageError> {
        if let Some(mode) = skip {
            self.skip(frame, mode);
            return Ok(());
        }
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
        if let Payload::Crops(c) = &*payload
            && c.regions.is_empty()
            && !c.reused.is_empty()
        {
            // `once_per_track`: every region's track has its result already.
            frame.attach(&self.name, Payload::NotInferred(WorkMode::Carried));
        }
        let outputs = match &*payload {
            // A frame without regions has nothing to run on.
            _ if tensor.shape.first() == Some(&0) => Ok(Vec::new()),
            Payload::Input(mi) => self.run_parts(&tensor.shape, &[source(mi)]),
            _ => self.run_plain(&tensor.shape, &tensor.data),
        }
        .map_err(StageError::Frame)?;
        self.attach_outputs(frame, ModelOutputs { outputs, letterbox });
        Ok(())
    }
}

impl Build for InferConfig {
    fn build(&self, cx: &BuildCtx<'_>) -> Result<Body, Diagnostic> {
        let (cfg, graph, i) = (cx.cfg, cx.graph, cx.index);
        let warm = graph.preprocess_shape(cfg, i);
        let whole_frames = graph.producers[i].iter().all(|&p| matches!(cfg.nodes[p].kind, NodeKind::Preprocess(_)));
        let mut s = Infer::build(cfg, cx.name.clone(), self, cx.ort()?, warm, whole_frames, cx.pool_size)?;
        cx.record_model((s.inputs().to_vec(), s.outputs().to_vec()));
        // Gated here unless the preprocess before it decides (and skips its work too).
        if cx.gate_in_preprocess(i).is_none()
            && let Some(g) = Gate::of(self)
        {
            s.set_gate(g);
        }
        Ok(Body::Stage(Box::new(s)))
    }
}
