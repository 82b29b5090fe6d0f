//! `infer-stream doctor --gpu-check VIDEO`: prove the GPU path on this
//! machine, with figures. Each check compares the GPU against the CPU on real
//! decoded frames of `VIDEO` (H.264/HEVC/VP9/MPEG-4):
//!
//! 1. NVDEC frames equal FFmpeg's software-decoded frames (after download).
//! 2. The preprocess kernel equals its CPU twin within 1e-3 (several layouts,
//!    f32 and f16, NVDEC frames and uploaded software frames).
//! 3. Stream order: a checksum computed on the device equals the one of the
//!    downloaded frame, for every frame, with no extra synchronisation.
//! 4. Soak: many frames through NVDEC + kernel with flat device memory and a
//!    flat buffer pool, and no decoder-surface errors.
//!
//! It also measures NVDEC decode fps, software decode fps and kernel time
//! per frame. Used by `scripts/gpu-check.sh` and by the GPU-only tests.

use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use crate::backend::cuda::{Gpu, checksum_host};
use crate::backend::ffmpeg::{VideoDecoder, copy_to_image};
use crate::backend::nvdec::{Surfaces, device_image, download_image, hw_device, upload_image};
use crate::config::Layout;
use crate::frame::convert::{HostPlanes, KernelParams, Normalize, SrcFormat, TwinOut, f16_to_f32, preprocess_twin};
use crate::frame::{Image, Letterbox, Pool, Storage};

/// What the check found. `failures` is empty when everything passed.
#[derive(Debug, Default, serde::Serialize)]
pub struct GpuCheckReport {
    pub gpu: String,
    pub compute_capability: String,
    pub nvrtc: String,
    pub frames_compared: usize,
    /// Largest |NVDEC − software| over luma and chroma samples.
    pub decode_max_diff: u32,
    pub kernel_cases: usize,
    /// Largest |kernel − twin| over all compared f32 tensor elements.
    pub kernel_max_diff: f32,
    /// Largest distance in f16 steps between kernel and twin (f16 outputs).
    pub kernel_f16_max_ulps: u32,
    pub checksum_frames: usize,
    pub soak_frames: usize,
    /// Free device memory after warm-up and at the end of the soak (MiB).
    pub soak_free_mib: (f64, f64),
    /// Device buffers allocated after warm-up and at the end.
    pub soak_allocations: (u64, u64),
    /// NVDEC + copy + kernel, surfaces held until their copies complete (as pipelines run).
    pub nvdec_fps: f64,
    /// The same, waiting for each frame's copy before decoding the next.
    pub nvdec_fps_waited: f64,
    pub software_fps: f64,
    pub kernel_ms_per_frame: f64,
    pub failures: Vec<String>,
}

/// The preprocess variants compared: (size, letterbox, bgr, layout, f16).
const CASES: &[(u32, u32, bool, bool, Layout, bool)] = &[
    (640, 384, true, true, Layout::Nchw, false),
    (640, 640, true, false, Layout::Nchw, false),
    (320, 320, false, false, Layout::Nhwc, false),
    (640, 640, true, false, Layout::Nchw, true),
    (1920, 1088, true, false, Layout::Nchw, false),
];

fn params(img: &Image, case: &(u32, u32, bool, bool, Layout, bool)) -> KernelParams {
    let &(w, h, letterbox, bgr, layout, half) = case;
    let lb = if letterbox { Letterbox::fit(img.width, img.height, w, h) } else { Letterbox::stretch(img.width, img.height, w, h) };
    let norm = Normalize { scale: 1.0 / 255.0, mean: [0.485, 0.456, 0.406], std: [0.229, 0.224, 0.225], pad_value: 114 };
    let fmt = SrcFormat::from_pixel(img.format).expect("checked formats");
    KernelParams::new(fmt, img.color, &lb, &norm, bgr, layout == Layout::Nhwc, half)
}

/// Kernel on a device image vs the twin on its host copy: (max |diff| of
/// f32 outputs, max f16 steps apart of f16 outputs).
fn compare_kernel(gpu: &Arc<Gpu>, dev: &Image, host: &Image, k: &KernelParams) -> Result<(f32, u32), String> {
    let Storage::Device(d) = &dev.storage else { return Err("not a device image".into()) };
    let (_, planes) = HostPlanes::of(host).ok_or("host image format")?;
    let n = k.out_len();
    let out = gpu.alloc(n * if k.half { 2 } else { 4 }).map_err(|e| e.to_string())?;
    gpu.preprocess([d.planes[0], d.planes[1], d.planes[2]], [d.pitches[0], d.pitches[1], d.pitches[2]], k, out.ptr)
        .map_err(|e| e.to_string())?;
    if k.half {
        let mut got = vec![0u16; n];
        gpu.download(out.ptr, &mut got).map_err(|e| e.to_string())?;
        let mut want = vec![0u16; n];
        preprocess_twin(k, &planes, TwinOut::F16(&mut want));
        // Same sign here (finite values): the bit patterns are ordered like the numbers.
        let ulps = got.iter().zip(&want).map(|(a, b)| (*a as i32 - *b as i32).unsigned_abs()).max().unwrap_or(0);
        let diff = got.iter().zip(&want).map(|(a, b)| (f16_to_f32(*a) - f16_to_f32(*b)).abs()).fold(0f32, f32::max);
        tracing::debug!("f16 case: max {ulps} step(s), {diff:.2e}");
        Ok((0.0, ulps))
    } else {
        let mut got = vec![0f32; n];
        gpu.download(out.ptr, &mut got).map_err(|e| e.to_string())?;
        let mut want = vec![0f32; n];
        preprocess_twin(k, &planes, TwinOut::F32(&mut want));
        Ok((got.iter().zip(&want).map(|(a, b)| (a - b).abs()).fold(0f32, f32::max), 0))
    }
}

/// Max |a − b| between an NVDEC frame (host NV12) and a software frame (YUV420P).
fn decode_diff(nv12: &Image, yuv: &Image) -> Result<u32, String> {
    if nv12.format != ffmpeg_next::format::Pixel::NV12 || SrcFormat::from_pixel(yuv.format) != Some(SrcFormat::Yuv420p) {
        return Err(format!("cannot compare {:?} with {:?}", nv12.format, yuv.format));
    }
    let (w, h) = (nv12.width as usize, nv12.height as usize);
    let (a, b) = (nv12.host().ok_or("host")?, yuv.host().ok_or("host")?);
    let mut worst = 0u32;
    for y in 0..h {
        for x in 0..w {
            let p = a[nv12.offsets[0] + y * nv12.strides[0] as usize + x];
            let q = b[yuv.offsets[0] + y * yuv.strides[0] as usize + x];
            worst = worst.max((p as i32 - q as i32).unsigned_abs());
        }
    }
    for y in 0..h.div_ceil(2) {
        for x in 0..w.div_ceil(2) {
            let uv = nv12.offsets[1] + y * nv12.strides[1] as usize + 2 * x;
            for (c, off) in [(1usize, 0usize), (2, 1)] {
                let q = b[yuv.offsets[c] + y * yuv.strides[c] as usize + x];
                worst = worst.max((a[uv + off] as i32 - q as i32).unsigned_abs());
            }
        }
    }
    Ok(worst)
}

/// Decode up to `max` frames and run the kernel on each, queued with no
/// wait; `each(i)` is called after frame `i + 1`. Returns the frames done.
fn decode_and_preprocess(
    gpu: &Arc<Gpu>,
    dec: &mut VideoDecoder,
    mut held: Option<&mut Surfaces>,
    case: &(u32, u32, bool, bool, Layout, bool),
    max: usize,
    mut each: impl FnMut(usize),
) -> Result<usize, String> {
    let mut n = 0;
    while n < max {
        let img = match dec.next_frame().map_err(|e| e.to_string())? {
            Some(f) => device_image(f, gpu, held.as_deref_mut())?,
            None => break,
        };
        let Storage::Device(d) = &img.storage else { unreachable!("device images only") };
        let k = params(&img, case);
        let out = gpu.alloc(k.out_len() * 4).map_err(|e| e.to_string())?;
        gpu.preprocess([d.planes[0], d.planes[1], 0], [d.pitches[0], d.pitches[1], 0], &k, out.ptr).map_err(|e| e.to_string())?;
        n += 1;
        each(n);
    }
    Ok(n)
}

/// Kernel time per frame: 200 launches on one decoded frame, one wait.
fn kernel_time(
    gpu: &Arc<Gpu>,
    video: &Path,
    hw: &crate::backend::ffmpeg::HwDevice,
    case: &(u32, u32, bool, bool, Layout, bool),
) -> Result<f64, String> {
    let mut dec = VideoDecoder::open_cuda(video, hw, &Default::default()).map_err(|e| e.to_string())?;
    let img = match dec.next_frame().map_err(|e| e.to_string())? {
        Some(f) => device_image(f, gpu, None)?,
        None => return Err("the video has no frames".into()),
    };
    let Storage::Device(d) = &img.storage else { unreachable!("device images only") };
    let k = params(&img, case);
    let out = gpu.alloc(k.out_len() * 4).map_err(|e| e.to_string())?;
    let launch = || gpu.preprocess([d.planes[0], d.planes[1], 0], [d.pitches[0], d.pitches[1], 0], &k, out.ptr).map_err(|e| e.to_string());
    launch()?;
    gpu.sync().map_err(|e| e.to_string())?;
    let t0 = Instant::now();
    for _ in 0..200 {
        launch()?;
    }
    gpu.sync().map_err(|e| e.to_string())?;
    Ok(t0.elapsed().as_secs_f64() * 1e3 / 200.0)
}

/// Run every check on `video` with a soak of at least `soak_frames` frames.
pub fn run(video: &Path, soak_frames: usize, device: usize) -> Result<GpuCheckReport, String> {
    let gpu = Gpu::shared(device).map_err(|e| e.to_string())?;
    let mut r = GpuCheckReport {
        gpu: gpu.name.clone(),
        compute_capability: format!("{}.{}", gpu.compute_capability.0, gpu.compute_capability.1),
        nvrtc: crate::backend::cuda::nvrtc_version().map(|(a, b)| format!("{a}.{b}")).unwrap_or_default(),
        ..Default::default()
    };
    let hw = hw_device(&gpu)?;
    let host_pool = Pool::new(8);

    // 1-3: frame by frame against software decode.
    let mut nv = VideoDecoder::open_cuda(video, &hw, &Default::default()).map_err(|e| e.to_string())?;
    let mut sw = VideoDecoder::open(video, 0).map_err(|e| e.to_string())?;
    // Surfaces held by events, as in pipelines: the checksums below show the
    // copies are ordered without a wait per frame.
    let mut held = Surfaces::new(&gpu);
    let compare = 30usize;
    while r.frames_compared < compare {
        let dev = match nv.next_frame().map_err(|e| e.to_string())? {
            Some(f) => device_image(f, &gpu, Some(&mut held))?,
            None => break,
        };
        let Some(sf) = sw.next_frame().map_err(|e| e.to_string())? else { break };
        let soft = copy_to_image(sf, &host_pool)?;
        let host = download_image(&dev, &host_pool)?;
        r.decode_max_diff = r.decode_max_diff.max(decode_diff(&host, &soft)?);
        // Stream order: device checksum of the luma plane vs the host copy.
        let Storage::Device(d) = &dev.storage else { unreachable!() };
        let (w, h) = (dev.width as usize, dev.height as usize);
        let on_device = gpu.checksum(d.planes[0], d.pitches[0], w, h).map_err(|e| e.to_string())?;
        let on_host = checksum_host(&host.host().expect("host")[host.offsets[0]..], host.strides[0] as usize, w, h);
        if on_device != on_host {
            r.failures.push(format!("frame {}: device checksum {on_device} != host checksum {on_host}", r.frames_compared));
        }
        r.checksum_frames += 1;
        // Kernel vs twin: NVDEC frames (NV12) and uploaded software frames (YUV420P).
        let up = upload_image(&soft, &gpu)?;
        // Every variant on the first frame, then one per frame in turn.
        let cases = if r.frames_compared == 0 { CASES } else { std::slice::from_ref(&CASES[r.frames_compared % CASES.len()]) };
        for case in cases {
            for (d, h) in [(&dev, &host), (&up, &soft)] {
                let (diff, ulps) = compare_kernel(&gpu, d, h, &params(d, case))?;
                r.kernel_max_diff = r.kernel_max_diff.max(diff);
                r.kernel_f16_max_ulps = r.kernel_f16_max_ulps.max(ulps);
                r.kernel_cases += 1;
            }
        }
        r.frames_compared += 1;
    }
    if r.frames_compared == 0 {
        r.failures.push("no frames decoded".into());
    }
    if r.decode_max_diff > 1 {
        r.failures.push(format!("NVDEC frames differ from software decode by up to {} levels", r.decode_max_diff));
    }
    if r.kernel_max_diff > 1e-3 {
        r.failures.push(format!("kernel differs from its CPU twin by {:.2e} (limit 1e-3)", r.kernel_max_diff));
    }
    if r.kernel_f16_max_ulps > 1 {
        r.failures.push(format!("f16 kernel output is {} f16 steps from its CPU twin (limit 1)", r.kernel_f16_max_ulps));
    }

    // 4: soak + NVDEC fps: decode the file again and again, preprocess every
    // frame, with no wait per frame (surfaces held by events).
    let k_case = &CASES[0];
    // Device memory and pool size at frame 100 and at the last frame, each
    // with a decoder open.
    let (mut warm, mut end) = (None, None);
    let t0 = Instant::now();
    while r.soak_frames < soak_frames {
        let mut dec = VideoDecoder::open_cuda(video, &hw, &Default::default()).map_err(|e| e.to_string())?;
        let n = decode_and_preprocess(&gpu, &mut dec, Some(&mut held), k_case, soak_frames - r.soak_frames, |done| {
            let at = r.soak_frames + done;
            if at == 100 || at == soak_frames {
                let now = Some((gpu.mem_info().map(|m| m.0).unwrap_or(0), gpu.allocations()));
                if at == 100 { warm = now } else { end = now }
            }
        })
        .map_err(|e| format!("soak frame {}: {e}", r.soak_frames))?;
        if n == 0 {
            return Err("the video has no frames".into());
        }
        r.soak_frames += n;
    }
    gpu.sync().map_err(|e| e.to_string())?;
    r.nvdec_fps = r.soak_frames as f64 / t0.elapsed().as_secs_f64();
    drop(held);
    // The same work waiting for each copy, for the ratio.
    let t0 = Instant::now();
    let mut dec = VideoDecoder::open_cuda(video, &hw, &Default::default()).map_err(|e| e.to_string())?;
    let n = decode_and_preprocess(&gpu, &mut dec, None, k_case, 300, |_| {})?;
    gpu.sync().map_err(|e| e.to_string())?;
    r.nvdec_fps_waited = n as f64 / t0.elapsed().as_secs_f64();
    r.kernel_ms_per_frame = kernel_time(&gpu, video, &hw, k_case)?;
    if let (Some((free_warm, alloc_warm)), Some((free_end, alloc_end))) = (warm, end) {
        let mib = |b: usize| b as f64 / (1024.0 * 1024.0);
        r.soak_free_mib = (mib(free_warm), mib(free_end));
        r.soak_allocations = (alloc_warm, alloc_end);
        if (mib(free_warm) - mib(free_end)).abs() > 64.0 {
            r.failures.push(format!("device memory moved by {:.0} MiB during the soak", mib(free_warm) - mib(free_end)));
        }
        if alloc_end != alloc_warm {
            r.failures.push(format!("buffer pool grew from {alloc_warm} to {alloc_end} during the soak"));
        }
    }

    // Software decode fps on the same frames, for the ratio.
    let t0 = Instant::now();
    let mut sw = VideoDecoder::open(video, 0).map_err(|e| e.to_string())?;
    let mut n = 0usize;
    while let Some(f) = sw.next_frame().map_err(|e| e.to_string())? {
        let _img = copy_to_image(f, &host_pool)?;
        n += 1;
    }
    r.software_fps = n as f64 / t0.elapsed().as_secs_f64();
    Ok(r)
}

impl std::fmt::Display for GpuCheckReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(f, "GPU: {} (compute {}), NVRTC {}", self.gpu, self.compute_capability, self.nvrtc)?;
        writeln!(f, "NVDEC vs software decode: {} frames, max diff {} level(s)", self.frames_compared, self.decode_max_diff)?;
        writeln!(
            f,
            "kernel vs CPU twin: {} cases, max diff {:.2e} (limit 1e-3), f16 max {} step(s) (limit 1)",
            self.kernel_cases, self.kernel_max_diff, self.kernel_f16_max_ulps
        )?;
        writeln!(f, "stream order: {} device checksums equal the host's", self.checksum_frames)?;
        writeln!(
            f,
            "soak: {} frames, free device memory {:.0} -> {:.0} MiB, buffers {} -> {}",
            self.soak_frames, self.soak_free_mib.0, self.soak_free_mib.1, self.soak_allocations.0, self.soak_allocations.1
        )?;
        writeln!(
            f,
            "NVDEC decode + copy + kernel: {:.0} fps; software decode alone: {:.0} fps (ratio {:.2}); kernel {:.3} ms/frame",
            self.nvdec_fps,
            self.software_fps,
            self.nvdec_fps / self.software_fps.max(1e-9),
            self.kernel_ms_per_frame
        )?;
        writeln!(
            f,
            "NVDEC surfaces held by events: {:.0} fps vs waiting for each copy: {:.0} fps (ratio {:.2})",
            self.nvdec_fps,
            self.nvdec_fps_waited,
            self.nvdec_fps / self.nvdec_fps_waited.max(1e-9)
        )?;
        if self.failures.is_empty() {
            write!(f, "GPU check: PASS")
        } else {
            for x in &self.failures {
                writeln!(f, "FAIL: {x}")?;
            }
            write!(f, "GPU check: FAIL ({} problem(s))", self.failures.len())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// On a GPU: the whole check passes on the bundled sample. Elsewhere: skipped, saying why.
    #[test]
    fn gpu_check_passes_on_the_sample() {
        let p = crate::backend::cuda::probe();
        if !p.driver || p.devices == 0 {
            eprintln!("skipped: no NVIDIA GPU here (driver: {}, devices: {})", p.driver, p.devices);
            return;
        }
        let video = crate::test_support::sample("text-720p.mp4");
        let r = run(&video, 400, 0).expect("GPU check ran");
        eprintln!("{r}");
        assert!(r.failures.is_empty(), "{r}");
        assert!(r.frames_compared >= 30 && r.soak_frames >= 400);
    }
}
