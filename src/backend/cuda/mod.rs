//! CUDA through cudarc (dynamic loading, nothing needed at build time).
//!
//! One [`Gpu`] per device, shared by everything in the process: the device's
//! primary context (the one ONNX Runtime's CUDA and TensorRT providers use),
//! one stream (also handed to FFmpeg's NVDEC, see `backend::nvdec`), the
//! preprocessing kernels compiled by NVRTC for this device, and a pool of
//! device buffers. All work is ordered on that one stream; the host waits only
//! when it downloads. The launches of the kernels are in [`kernels`]; this
//! core imports nothing from the rest of the crate.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, OnceLock};

use cudarc::driver::{CudaContext, CudaFunction, CudaStream, result, sys};
use cudarc::nvrtc::{CompileOptions, Ptx};

mod kernels;

/// The kernels' CUDA C source (see the file for the CPU twin's location).
pub const KERNELS: &str = include_str!("kernels.cu");
/// Kernel entry points in [`KERNELS`].
pub const KERNEL_NAMES: &[&str] = &["preprocess", "checksum_u8", "overlay_nv12"];

#[derive(Debug, thiserror::Error)]
pub enum GpuError {
    #[error("no NVIDIA driver (libcuda.so) on this machine")]
    NoDriver,
    #[error("no NVRTC library (libnvrtc.so.13 or .12) found; set INFER_STREAM_NVRTC to its path")]
    NoNvrtc,
    #[error("CUDA device {0} does not exist ({1} device(s) here)")]
    NoDevice(usize, usize),
    #[error("CUDA: {0}")]
    Driver(String),
    #[error("NVRTC could not compile the kernels: {0}")]
    Compile(String),
}

fn drv(e: impl std::fmt::Debug) -> GpuError {
    GpuError::Driver(format!("{e:?}"))
}

/// What this machine offers to the GPU path.
#[derive(Debug, Clone, serde::Serialize)]
pub struct CudaProbe {
    pub driver: bool,
    pub nvrtc: bool,
    pub devices: usize,
    /// Where NVRTC was loaded from, when found outside the loader's path.
    pub nvrtc_path: Option<String>,
}

/// Load NVRTC from a known place so cudarc's by-name lookup finds it: the
/// dynamic loader matches an already-loaded library by its soname. Looks at
/// `INFER_STREAM_NVRTC` (a file), then beside the executable, `.deps/nvrtc`
/// and the CUDA toolkit. Returns the path loaded, if any.
pub fn preload_nvrtc() -> Option<PathBuf> {
    static DONE: OnceLock<Option<PathBuf>> = OnceLock::new();
    DONE.get_or_init(|| {
        let mut candidates: Vec<PathBuf> = Vec::new();
        if let Some(p) = std::env::var_os("INFER_STREAM_NVRTC") {
            candidates.push(p.into());
        }
        let mut dirs: Vec<PathBuf> = Vec::new();
        if let Some(d) = std::env::current_exe().ok().and_then(|e| e.parent().map(|p| p.to_path_buf())) {
            dirs.push(d.join("lib"));
            dirs.push(d);
        }
        dirs.push(PathBuf::from(".deps/nvrtc"));
        dirs.push(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(".deps/nvrtc"));
        dirs.push(PathBuf::from("/usr/local/cuda/lib64"));
        for d in dirs {
            for v in ["13", "12"] {
                candidates.push(d.join(format!("libnvrtc.so.{v}")));
            }
        }
        for c in candidates {
            if !c.is_file() {
                continue;
            }
            // SAFETY: loading NVRTC runs only its (trivial) initialisers; the
            // handle is leaked so the library stays loaded for the process.
            if let Ok(lib) = unsafe { libloading::Library::new(&c) } {
                std::mem::forget(lib);
                return Some(c);
            }
        }
        None
    })
    .clone()
}

/// Probe without panicking: cudarc's loader panics when a library is missing,
/// so presence is checked first.
pub fn probe() -> CudaProbe {
    let nvrtc_path = preload_nvrtc().map(|p| p.display().to_string());
    // SAFETY: only tries to dlopen the driver library; no CUDA call is made.
    let driver = unsafe { sys::is_culib_present() };
    // SAFETY: as above, for libnvrtc.
    let nvrtc = unsafe { cudarc::nvrtc::sys::is_culib_present() };
    let devices = if driver { CudaContext::device_count().unwrap_or(0).max(0) as usize } else { 0 };
    CudaProbe { driver, nvrtc, devices, nvrtc_path }
}

/// NVRTC's version, when the library is there.
pub fn nvrtc_version() -> Option<(i32, i32)> {
    preload_nvrtc();
    // SAFETY: presence check only.
    if !unsafe { cudarc::nvrtc::sys::is_culib_present() } {
        return None;
    }
    let (mut major, mut minor) = (0, 0);
    // SAFETY: two out-pointers to live locals.
    unsafe { cudarc::nvrtc::sys::nvrtcVersion(&mut major, &mut minor) }.result().ok()?;
    Some((major, minor))
}

/// Compile the kernels to PTX for `arch` (e.g. `compute_90`), with fused
/// multiply-add off so the results match the CPU twin to rounding. Needs
/// only NVRTC, no GPU: CI runs it.
pub fn compile_kernels(arch: &str) -> Result<Ptx, GpuError> {
    preload_nvrtc();
    // SAFETY: presence check only; cudarc would panic on a missing library.
    if !unsafe { cudarc::nvrtc::sys::is_culib_present() } {
        return Err(GpuError::NoNvrtc);
    }
    // cudarc wants a 'static arch name; the set of archs is tiny, so leaking is fine.
    let arch: &'static str = Box::leak(arch.to_string().into_boxed_str());
    let opts = CompileOptions { fmad: Some(false), arch: Some(arch), name: Some("infer_stream_kernels.cu".into()), ..Default::default() };
    cudarc::nvrtc::compile_ptx_with_opts(KERNELS, opts).map_err(|e| GpuError::Compile(format!("{e:?}")))
}

/// A 2D copy of `height` rows of `width_bytes` from a pitched device region;
/// the caller fills in the destination.
fn plane_copy(src: u64, src_pitch: usize, width_bytes: usize, height: usize) -> sys::CUDA_MEMCPY2D {
    sys::CUDA_MEMCPY2D {
        srcXInBytes: 0,
        srcY: 0,
        srcMemoryType: sys::CUmemorytype::CU_MEMORYTYPE_DEVICE,
        srcHost: std::ptr::null(),
        srcDevice: src,
        srcArray: std::ptr::null_mut(),
        srcPitch: src_pitch,
        dstXInBytes: 0,
        dstY: 0,
        dstMemoryType: sys::CUmemorytype::CU_MEMORYTYPE_DEVICE,
        dstHost: std::ptr::null_mut(),
        dstDevice: 0,
        dstArray: std::ptr::null_mut(),
        dstPitch: 0,
        WidthInBytes: width_bytes,
        Height: height,
    }
}

/// One device: context, stream, kernels, buffer pool.
pub struct Gpu {
    pub ctx: Arc<CudaContext>,
    pub stream: Arc<CudaStream>,
    preprocess: CudaFunction,
    checksum: CudaFunction,
    overlay: CudaFunction,
    pub name: String,
    pub compute_capability: (i32, i32),
    /// Free device buffers by size in bytes.
    free: Mutex<HashMap<usize, Vec<u64>>>,
    allocations: std::sync::atomic::AtomicU64,
}

impl std::fmt::Debug for Gpu {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Gpu({} sm_{}{})", self.name, self.compute_capability.0, self.compute_capability.1)
    }
}

impl Gpu {
    /// The shared GPU for `device` (created on first use).
    pub fn shared(device: usize) -> Result<Arc<Gpu>, GpuError> {
        static GPUS: OnceLock<Mutex<HashMap<usize, Arc<Gpu>>>> = OnceLock::new();
        let mut map = GPUS.get_or_init(Default::default).lock().unwrap_or_else(|e| e.into_inner());
        if let Some(g) = map.get(&device) {
            return Ok(g.clone());
        }
        let g = Arc::new(Gpu::new(device)?);
        map.insert(device, g.clone());
        Ok(g)
    }

    fn new(device: usize) -> Result<Gpu, GpuError> {
        let p = probe();
        if !p.driver {
            return Err(GpuError::NoDriver);
        }
        if device >= p.devices {
            return Err(GpuError::NoDevice(device, p.devices));
        }
        if !p.nvrtc {
            return Err(GpuError::NoNvrtc);
        }
        let ctx = CudaContext::new(device).map_err(drv)?;
        // One stream, ordered by hand: no per-buffer events.
        // SAFETY: every buffer this crate hands to kernels is used on `stream` only.
        unsafe { ctx.disable_event_tracking() };
        let stream = ctx.new_stream().map_err(drv)?;
        let cc = ctx.compute_capability().map_err(drv)?;
        let ptx = compile_kernels(&format!("compute_{}{}", cc.0, cc.1))?;
        let module = ctx.load_module(ptx).map_err(drv)?;
        let preprocess = module.load_function("preprocess").map_err(drv)?;
        let checksum = module.load_function("checksum_u8").map_err(drv)?;
        let overlay = module.load_function("overlay_nv12").map_err(drv)?;
        let name = ctx.name().unwrap_or_else(|_| "NVIDIA GPU".into());
        Ok(Gpu {
            ctx,
            stream,
            preprocess,
            checksum,
            overlay,
            name,
            compute_capability: cc,
            free: Mutex::new(HashMap::new()),
            allocations: 0.into(),
        })
    }

    /// The raw stream, for FFmpeg and ONNX Runtime.
    pub fn cu_stream(&self) -> sys::CUstream {
        self.stream.cu_stream()
    }

    /// The raw (primary) context, for FFmpeg.
    pub fn cu_ctx(&self) -> sys::CUcontext {
        self.ctx.cu_ctx()
    }

    /// Make the device's context current on this thread.
    pub fn bind(&self) -> Result<(), GpuError> {
        self.ctx.bind_to_thread().map_err(drv)
    }

    /// A device buffer of `bytes`, from the pool when one is free.
    pub fn alloc(self: &Arc<Self>, bytes: usize) -> Result<DeviceBuf, GpuError> {
        if let Some(ptr) = self.free.lock().unwrap_or_else(|e| e.into_inner()).get_mut(&bytes).and_then(|v| v.pop()) {
            return Ok(DeviceBuf { ptr, bytes, gpu: self.clone() });
        }
        self.bind()?;
        // SAFETY: a plain allocation in the bound context; freed in `Gpu::drop`
        // (pooled buffers come back through `DeviceBuf::drop`).
        let ptr = unsafe { result::malloc_sync(bytes.max(1)) }.map_err(drv)?;
        self.allocations.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Ok(DeviceBuf { ptr, bytes, gpu: self.clone() })
    }

    /// Device buffers allocated so far (steady state: stays flat).
    pub fn allocations(&self) -> u64 {
        self.allocations.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// (free, total) device memory in bytes.
    pub fn mem_info(&self) -> Result<(usize, usize), GpuError> {
        self.bind()?;
        result::mem_get_info().map_err(drv)
    }

    /// Copy `height` rows of `width_bytes` between pitched device regions, on the stream.
    pub fn copy_2d(
        &self,
        src: u64,
        src_pitch: usize,
        dst: u64,
        dst_pitch: usize,
        width_bytes: usize,
        height: usize,
    ) -> Result<(), GpuError> {
        self.bind()?;
        let p = sys::CUDA_MEMCPY2D {
            dstMemoryType: sys::CUmemorytype::CU_MEMORYTYPE_DEVICE,
            dstDevice: dst,
            dstPitch: dst_pitch,
            ..plane_copy(src, src_pitch, width_bytes, height)
        };
        // SAFETY: both regions are device memory in this context of at least
        // `pitch * height` bytes (the callers size them); ordered on our stream.
        unsafe { sys::cuMemcpy2DAsync_v2(&p, self.cu_stream()) }.result().map_err(drv)
    }

    /// Copy `height` rows of `width_bytes` from a pitched device region into
    /// `dst` (rows `dst_pitch` apart) and wait for them.
    pub fn download_2d(
        &self,
        src: u64,
        src_pitch: usize,
        dst: &mut [u8],
        dst_pitch: usize,
        width_bytes: usize,
        height: usize,
    ) -> Result<(), GpuError> {
        if height > 0 && (dst_pitch < width_bytes || dst.len() < dst_pitch * (height - 1) + width_bytes) {
            return Err(GpuError::Driver(format!("{height} rows of {width_bytes} bytes do not fit a {}-byte host buffer", dst.len())));
        }
        self.bind()?;
        let p = sys::CUDA_MEMCPY2D {
            dstMemoryType: sys::CUmemorytype::CU_MEMORYTYPE_HOST,
            dstHost: dst.as_mut_ptr().cast(),
            dstPitch: dst_pitch,
            ..plane_copy(src, src_pitch, width_bytes, height)
        };
        // SAFETY: the source is device memory of this context holding
        // `height` rows of `src_pitch` (callers pass a frame's plane); the
        // destination range was checked above to lie inside `dst`, which is
        // borrowed until the stream is synchronised below.
        unsafe {
            sys::cuMemcpy2DAsync_v2(&p, self.cu_stream()).result().map_err(drv)?;
            result::stream::synchronize(self.cu_stream()).map_err(drv)
        }
    }

    /// Copy device bytes at `src` into `dst` and wait for them.
    pub fn download<T: Copy>(&self, src: u64, dst: &mut [T]) -> Result<(), GpuError> {
        self.bind()?;
        // SAFETY: `src` holds at least `size_of_val(dst)` bytes (callers pass
        // buffers of that size); the stream is synchronised before returning,
        // so `dst` is not touched after this call.
        unsafe {
            result::memcpy_dtoh_async(dst, src, self.cu_stream()).map_err(drv)?;
            result::stream::synchronize(self.cu_stream()).map_err(drv)
        }
    }

    /// Copy host bytes to `dst` on the stream and wait (the host buffer is then free).
    pub fn upload<T: Copy>(&self, src: &[T], dst: u64) -> Result<(), GpuError> {
        self.bind()?;
        // SAFETY: `dst` holds at least `size_of_val(src)` bytes; synchronised
        // before returning, so `src` outlives the copy.
        unsafe {
            result::memcpy_htod_async(dst, src, self.cu_stream()).map_err(drv)?;
            result::stream::synchronize(self.cu_stream()).map_err(drv)
        }
    }

    /// Queue a copy of `bytes` from device `src` to device `dst` on the stream.
    pub fn copy_d2d(&self, src: u64, dst: u64, bytes: usize) -> Result<(), GpuError> {
        self.bind()?;
        // SAFETY: callers pass device buffers of this context holding at least
        // `bytes` (a pooled buffer and a tensor sized to match); ordered on our stream.
        unsafe { sys::cuMemcpyDtoDAsync_v2(dst, src, bytes, self.cu_stream()) }.result().map_err(drv)
    }

    /// Queue a copy of host values to `dst` on the stream. `src` may be
    /// reused as soon as this returns: the driver stages pageable memory
    /// before returning.
    pub fn upload_async<T: Copy>(&self, src: &[T], dst: u64) -> Result<(), GpuError> {
        self.bind()?;
        // SAFETY: `dst` holds at least `size_of_val(src)` bytes (callers size
        // it); `src` is pageable host memory (a Vec or slice of one), which the
        // driver copies to staging memory before returning.
        unsafe { result::memcpy_htod_async(dst, src, self.cu_stream()) }.map_err(drv)
    }

    /// Queue a copy of device bytes at `src` into `dst` on the stream.
    ///
    /// # Safety
    /// `src` must hold at least `size_of_val(dst)` bytes, and `dst` must stay
    /// alive and untouched until the next [`Gpu::sync`] (pinned memory is
    /// written asynchronously; pageable memory before this returns).
    pub unsafe fn download_async<T: Copy>(&self, src: u64, dst: &mut [T]) -> Result<(), GpuError> {
        self.bind()?;
        // SAFETY: as the caller promised above.
        unsafe { result::memcpy_dtoh_async(dst, src, self.cu_stream()) }.map_err(drv)
    }

    /// Wait for everything queued on the stream.
    pub fn sync(&self) -> Result<(), GpuError> {
        self.stream.synchronize().map_err(drv)
    }
}

/// The same checksum on the host (the oracle of [`Gpu::checksum`]).
pub fn checksum_host(p: &[u8], pitch: usize, w: usize, h: usize) -> u64 {
    let mut s = 0u64;
    for y in 0..h {
        for x in 0..w {
            s = s.wrapping_add(p[y * pitch + x] as u64 * (x as u64 + 1 + y as u64 * 7));
        }
    }
    s
}

impl Drop for Gpu {
    fn drop(&mut self) {
        let _ = self.ctx.bind_to_thread();
        let _ = self.stream.synchronize();
        for ptrs in self.free.get_mut().unwrap_or_else(|e| e.into_inner()).values() {
            for &p in ptrs {
                // SAFETY: pooled buffers are ours (malloc_sync above) and no
                // longer used: the stream was synchronised.
                let _ = unsafe { result::free_sync(p) };
            }
        }
    }
}

/// A device buffer on loan from the GPU's pool; returns there on drop.
pub struct DeviceBuf {
    pub ptr: u64,
    pub bytes: usize,
    gpu: Arc<Gpu>,
}

impl std::fmt::Debug for DeviceBuf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "DeviceBuf({} bytes)", self.bytes)
    }
}

impl DeviceBuf {
    pub fn gpu(&self) -> &Arc<Gpu> {
        &self.gpu
    }
}

impl Drop for DeviceBuf {
    fn drop(&mut self) {
        // Work reading this buffer was queued on the one stream before it was
        // dropped, so whoever reuses it queues after that work.
        self.gpu.free.lock().unwrap_or_else(|e| e.into_inner()).entry(self.bytes).or_default().push(self.ptr);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn probe_never_panics() {
        let p = probe();
        if !p.driver {
            eprintln!("no CUDA driver here: GPU checks are skipped");
            assert_eq!(p.devices, 0);
        }
    }

    /// Every kernel compiles with NVRTC, no GPU needed (setup fetches NVRTC
    /// into .deps/nvrtc): for Turing (the oldest NVRTC 13 targets) and Hopper.
    #[test]
    fn kernels_compile_with_nvrtc() {
        let Some((major, minor)) = nvrtc_version() else {
            panic!("NVRTC not found: run scripts/fetch-nvrtc.sh (or set INFER_STREAM_NVRTC to libnvrtc.so)");
        };
        eprintln!("NVRTC {major}.{minor} from {:?}", preload_nvrtc());
        for arch in ["compute_75", "compute_90"] {
            let ptx = compile_kernels(arch).unwrap_or_else(|e| panic!("{arch}: {e}")).to_src();
            let target = format!(".target sm_{}", &arch["compute_".len()..]);
            assert!(ptx.contains(&target), "{arch}: no `{target}` in the PTX");
            for name in KERNEL_NAMES {
                assert!(ptx.contains(&format!(".entry {name}(")), "{arch}: kernel `{name}` missing from the PTX");
            }
        }
    }

    /// The overlay kernel paints what its CPU twin paints, byte for byte, on
    /// an odd-sized NV12 picture with padded rows: outlines clipped at every
    /// edge, label bands and text masks. GPU only (skipped elsewhere).
    #[test]
    fn gpu_overlay_kernel_equals_its_cpu_twin() {
        use crate::stages::sinks::draw::{self, Mark};
        use crate::stages::sinks::overlay;
        let p = probe();
        if !p.driver || p.devices == 0 {
            eprintln!("skipped: no NVIDIA GPU here (driver: {}, devices: {})", p.driver, p.devices);
            return;
        }
        let gpu = Gpu::shared(0).unwrap();
        let (w, h, pitch) = (333usize, 201usize, 384usize);
        let ch = h.div_ceil(2);
        let host_y: Vec<u8> = (0..pitch * h).map(|i| (i * 7 % 251) as u8).collect();
        let host_uv: Vec<u8> = (0..pitch * ch).map(|i| (i * 13 % 241) as u8).collect();
        let marks = vec![
            Mark { bbox: Some([20.0, 30.0, 120.0, 90.0]), color: draw::TEXT_BOX, label: "0.93".into() },
            Mark { bbox: Some([-10.0, -5.0, 60.0, 20.0]), color: draw::OBJECT, label: "person 0.88".into() },
            Mark { bbox: Some([300.0, 150.0, 400.0, 260.0]), color: draw::TEXT_LINE, label: "EXIT 0.99".into() },
            Mark { bbox: None, color: draw::CLASS, label: "cat 0.70".into() },
        ];
        let color = crate::frame::ColorInfo { matrix: crate::frame::Matrix::Bt709, full_range: false };
        let o = overlay::layout(&marks, h as u32, 3, draw::font(), color);
        assert!(o.len() >= 4 && !o.alpha.is_empty(), "outlines and labels laid out");
        let (dy, duv) = (gpu.alloc(pitch * h).unwrap(), gpu.alloc(pitch * ch).unwrap());
        gpu.upload(&host_y, dy.ptr).unwrap();
        gpu.upload(&host_uv, duv.ptr).unwrap();
        gpu.overlay_nv12(dy.ptr, pitch, duv.ptr, pitch, w, h, &o.prims, &o.alpha).unwrap();
        let (mut got_y, mut got_uv) = (vec![0u8; pitch * h], vec![0u8; pitch * ch]);
        gpu.download(dy.ptr, &mut got_y).unwrap();
        gpu.download(duv.ptr, &mut got_uv).unwrap();
        let (mut want_y, mut want_uv) = (host_y.clone(), host_uv.clone());
        overlay::paint_nv12(&mut want_y, pitch, &mut want_uv, pitch, w, h, &o);
        let changed = want_y.iter().zip(&host_y).filter(|(a, b)| a != b).count();
        let diff_y = got_y.iter().zip(&want_y).filter(|(a, b)| a != b).count();
        let diff_uv = got_uv.iter().zip(&want_uv).filter(|(a, b)| a != b).count();
        eprintln!(
            "overlay: {} primitives, {changed} luma bytes painted; kernel vs twin: {diff_y} luma, {diff_uv} chroma bytes differ",
            o.len()
        );
        assert!(changed > 1000);
        assert_eq!((diff_y, diff_uv), (0, 0), "the kernel differs from its CPU twin");
        // The padding past each row's width is never written.
        assert!((0..h).all(|r| got_y[r * pitch + w..(r + 1) * pitch] == host_y[r * pitch + w..(r + 1) * pitch]));
    }

    #[test]
    fn checksum_host_weights_positions() {
        let p = [1u8, 2, 9, 3, 4, 9];
        // (x+1+7y) weights: 1*1 + 2*2 + 3*8 + 4*9 over a 2x2 window of pitch 3.
        assert_eq!(checksum_host(&p, 3, 2, 2), 1 + 4 + 24 + 36);
    }
}
