//! CUDA hardware decode (NVDEC): the CUDA context FFmpeg decodes on, the
//! decoder set-up that takes CUDA output or nothing, and where a decoded
//! CUDA frame's planes are in device memory.

use ff::ffi;
use ff::format::Pixel;
use ffmpeg_next as ff;

use super::picture::color_of;
use super::setup::init;
use crate::frame::ColorInfo;

/// FFmpeg's view of a CUDA context and stream owned elsewhere (the crate's
/// `Gpu`): they are injected into `AVCUDADeviceContext`, so NVDEC decodes in
/// the same (primary) context as the kernels and ONNX Runtime and queues its
/// copies on the same stream. FFmpeg never destroys either (it did not create them).
pub struct HwDevice(pub(super) *mut ffi::AVBufferRef);

// SAFETY: the device context is only read after `av_hwdevice_ctx_init`, and
// AVBufferRef reference counting is atomic.
unsafe impl Send for HwDevice {}
// SAFETY: as above; `&HwDevice` only hands out new references.
unsafe impl Sync for HwDevice {}

impl HwDevice {
    /// Wrap a CUDA context and stream (raw `CUcontext` / `CUstream`).
    pub fn cuda(cu_ctx: *mut std::ffi::c_void, cu_stream: *mut std::ffi::c_void) -> Result<Self, String> {
        init();
        // SAFETY: av_hwdevice_ctx_alloc returns a fresh device context whose
        // `hwctx` is an AVCUDADeviceContext for the CUDA type; we fill the two
        // public fields before init, as hwcontext_cuda.h documents. Init only
        // loads libcuda's entry points and, with the context already set,
        // marks it as not owned by FFmpeg.
        unsafe {
            let mut r = ffi::av_hwdevice_ctx_alloc(ffi::AVHWDeviceType::AV_HWDEVICE_TYPE_CUDA);
            if r.is_null() {
                return Err("cannot allocate an FFmpeg CUDA device".into());
            }
            let dev = (*r).data as *mut ffi::AVHWDeviceContext;
            let hw = (*dev).hwctx as *mut ffi::AVCUDADeviceContext;
            (*hw).cuda_ctx = cu_ctx as _;
            (*hw).stream = cu_stream as _;
            let e = ffi::av_hwdevice_ctx_init(r);
            if e < 0 {
                ffi::av_buffer_unref(&mut r);
                return Err(format!("FFmpeg cannot use the CUDA context: {}", ff::Error::from(e)));
            }
            Ok(HwDevice(r))
        }
    }

    /// Set up a decoder context to decode on this device (before opening it).
    pub(super) fn attach(&self, ctx: &mut ff::codec::context::Context, codec_id: ff::codec::Id) -> Result<(), String> {
        let codec = ff::codec::decoder::find(codec_id).ok_or("no decoder for this codec")?;
        // SAFETY: a static codec descriptor from FFmpeg's registry.
        if !codec_has_cuda(unsafe { codec.as_ptr() }) {
            return Err(format!("FFmpeg has no CUDA hwaccel for {}", codec.name()));
        }
        // SAFETY: `ctx` is an unopened codec context we own; the fields set
        // are the documented hwaccel inputs. `av_buffer_ref` gives the codec
        // its own reference, released by avcodec_free_context.
        unsafe {
            let c = ctx.as_mut_ptr();
            (*c).hw_device_ctx = ffi::av_buffer_ref(self.0);
            if (*c).hw_device_ctx.is_null() {
                return Err("out of memory".into());
            }
            (*c).get_format = Some(pick_cuda);
            // Frames are copied out of the decoder's surfaces at once; a
            // couple of extra surfaces cover the one in hand and those held
            // until their copies complete (`nvdec::Surfaces`).
            (*c).extra_hw_frames = 2 + HELD_SURFACES as i32;
            (*c).thread_count = 1;
        }
        Ok(())
    }
}

impl Drop for HwDevice {
    fn drop(&mut self) {
        // SAFETY: we hold one reference, released once.
        unsafe { ffi::av_buffer_unref(&mut self.0) };
    }
}

/// Does `codec` decode through a CUDA device context?
fn codec_has_cuda(codec: *const ffi::AVCodec) -> bool {
    for i in 0.. {
        // SAFETY: iterates the codec's static hw config table; null ends it.
        let cfg = unsafe { ffi::avcodec_get_hw_config(codec, i) };
        if cfg.is_null() {
            return false;
        }
        // SAFETY: non-null entries point into the static table.
        let cfg = unsafe { &*cfg };
        if cfg.device_type == ffi::AVHWDeviceType::AV_HWDEVICE_TYPE_CUDA
            && cfg.methods & ffi::AV_CODEC_HW_CONFIG_METHOD_HW_DEVICE_CTX as i32 != 0
        {
            return true;
        }
    }
    false
}

/// Take CUDA output or nothing: a silent software fallback would hide that
/// NVDEC is not running.
unsafe extern "C" fn pick_cuda(_: *mut ffi::AVCodecContext, mut p: *const ffi::AVPixelFormat) -> ffi::AVPixelFormat {
    // SAFETY: FFmpeg passes a list terminated by AV_PIX_FMT_NONE.
    unsafe {
        while *p != ffi::AVPixelFormat::AV_PIX_FMT_NONE {
            if *p == ffi::AVPixelFormat::AV_PIX_FMT_CUDA {
                return *p;
            }
            p = p.add(1);
        }
    }
    ffi::AVPixelFormat::AV_PIX_FMT_NONE
}

/// Where a decoded `Pixel::CUDA` frame's planes are on the device.
#[derive(Debug, Clone, Copy)]
pub struct CudaPlanes {
    /// The real layout (NV12, P010LE, ...).
    pub sw_format: Pixel,
    /// Y and interleaved UV (device pointers), crop applied.
    pub planes: [u64; 2],
    pub pitches: [usize; 2],
    pub width: u32,
    pub height: u32,
    pub color: ColorInfo,
}

/// Decoded CUDA frames a source may hold while their copies complete.
pub const HELD_SURFACES: usize = 3;

/// A new reference to `frame`'s buffers (no copy). For a CUDA frame it keeps
/// the decoder's surface mapped until dropped.
pub fn frame_ref(frame: &ff::frame::Video) -> Result<ff::frame::Video, String> {
    // SAFETY: `frame` is a valid frame; av_frame_clone returns a new frame
    // referencing the same buffers (or null when out of memory), which
    // `Video::wrap` owns and frees with av_frame_free on drop.
    unsafe {
        let p = ffi::av_frame_clone(frame.as_ptr());
        if p.is_null() {
            return Err("out of memory".into());
        }
        Ok(ff::frame::Video::wrap(p))
    }
}

/// The device planes of a CUDA frame (`None` for a host frame).
pub fn cuda_planes(frame: &ff::frame::Video) -> Option<CudaPlanes> {
    if frame.format() != Pixel::CUDA {
        return None;
    }
    // SAFETY: a CUDA frame from the decoder carries `hw_frames_ctx` (an
    // AVHWFramesContext) and device pointers in data[0..2]; only addresses
    // are read here, never the pixels.
    unsafe {
        let f = frame.as_ptr();
        if (*f).hw_frames_ctx.is_null() {
            return None;
        }
        let fc = (*(*f).hw_frames_ctx).data as *const ffi::AVHWFramesContext;
        let sw_format: Pixel = (*fc).sw_format.into();
        let bpp = if matches!(sw_format, Pixel::P010LE | Pixel::P016LE) { 2 } else { 1 };
        let (ct, cl) = ((*f).crop_top, (*f).crop_left);
        let pitches = [(*f).linesize[0] as usize, (*f).linesize[1] as usize];
        let y = (*f).data[0] as u64 + (ct * pitches[0] + cl * bpp) as u64;
        let uv = (*f).data[1] as u64 + ((ct / 2) * pitches[1] + (cl / 2) * 2 * bpp) as u64;
        Some(CudaPlanes { sw_format, planes: [y, uv], pitches, width: frame.width(), height: frame.height(), color: color_of(frame) })
    }
}
