//! I/O binding: a session's input and outputs bound once per input shape
//! (on the host or the GPU), parts of a batch stacked into their slots, and
//! the outputs collected without copies where the memory allows.

use ort::session::Session;

use crate::config::ProviderName;

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
