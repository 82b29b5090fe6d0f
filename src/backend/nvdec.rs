//! NVDEC frames into pipeline images, and device images back to the host.
//!
//! FFmpeg 5.1 hands out *mapped* decoder surfaces: holding one pins one of a
//! few NVDEC output surfaces ("No decoder surfaces left" when they run out).
//! So each frame is copied at once, on the shared stream, into a pooled
//! device buffer (a device-to-device copy of ~1.4 MB at 720p) and the surface
//! goes back to the decoder. Frames in flight then cost only pooled memory.
//!
//! The surface must stay mapped until that copy has run: NVIDIA's own
//! decoder waits for the stream before unmapping. Instead of waiting for
//! every frame, [`Surfaces`] keeps the last few frames and an event recorded
//! after each copy, and gives a frame back once its event has completed.

use std::collections::VecDeque;
use std::sync::Arc;

use cudarc::driver::CudaEvent;

use ff::format::Pixel;
use ffmpeg_next as ff;

use super::cuda::{Gpu, GpuError};
use super::ffmpeg::{HELD_SURFACES, HwDevice, cuda_planes, frame_ref};
use crate::frame::DeviceImage;
use crate::frame::{Image, Pool, Storage};

/// The FFmpeg device for `gpu`: its context and stream injected.
pub fn hw_device(gpu: &Gpu) -> Result<HwDevice, String> {
    HwDevice::cuda(gpu.cu_ctx() as *mut _, gpu.cu_stream() as *mut _)
}

/// Bytes per sample of a device layout.
fn bytes_per_sample(p: Pixel) -> usize {
    if matches!(p, Pixel::P010LE | Pixel::P016LE) { 2 } else { 1 }
}

/// Decoded frames whose copies may still be running, each with the event
/// recorded after its copy: at most [`HELD_SURFACES`], given back to the
/// decoder as their events complete (the oldest is waited for when full).
pub struct Surfaces {
    gpu: Arc<Gpu>,
    held: VecDeque<(CudaEvent, ff::frame::Video)>,
    spare: Vec<CudaEvent>,
}

impl Surfaces {
    pub fn new(gpu: &Arc<Gpu>) -> Self {
        Surfaces { gpu: gpu.clone(), held: VecDeque::with_capacity(HELD_SURFACES), spare: Vec::new() }
    }

    /// Frames held now.
    pub fn held(&self) -> usize {
        self.held.len()
    }

    /// Give back the frames whose copies are done; wait for the oldest while
    /// more than `keep` are held.
    fn release(&mut self, keep: usize) -> Result<(), String> {
        while let Some((event, _)) = self.held.front() {
            let done = event.try_is_complete().map_err(|e| format!("{e:?}"))?;
            if !done && self.held.len() <= keep {
                break;
            }
            if !done {
                event.synchronize().map_err(|e| format!("{e:?}"))?;
            }
            let (event, frame) = self.held.pop_front().expect("front exists");
            drop(frame);
            self.spare.push(event);
        }
        Ok(())
    }

    /// Hold `frame` until the work queued on the stream so far (its copy) has run.
    fn hold(&mut self, frame: &ff::frame::Video) -> Result<(), String> {
        self.release(HELD_SURFACES - 1)?;
        let event = match self.spare.pop() {
            Some(e) => e,
            None => self.gpu.ctx.new_event(None).map_err(|e| format!("{e:?}"))?,
        };
        event.record(&self.gpu.stream).map_err(|e| format!("{e:?}"))?;
        self.held.push_back((event, frame_ref(frame)?));
        Ok(())
    }
}

impl Drop for Surfaces {
    fn drop(&mut self) {
        // Every copy must have run before its surface is unmapped.
        let _ = self.release(0);
        if !self.held.is_empty() {
            let _ = self.gpu.sync();
        }
    }
}

/// Copy a decoded CUDA frame into a pooled device image (NV12 or P010 layout,
/// both planes in one buffer at one pitch), queued on the shared stream.
/// With `surfaces`, the frame is held there until its copy has run and this
/// returns at once; without, this waits for the copy.
pub fn device_image(frame: &ff::frame::Video, gpu: &Arc<Gpu>, surfaces: Option<&mut Surfaces>) -> Result<Image, String> {
    let p = cuda_planes(frame).ok_or("not a CUDA frame")?;
    if !matches!(p.sw_format, Pixel::NV12 | Pixel::P010LE | Pixel::P016LE) {
        return Err(format!("NVDEC output {:?} is not supported (NV12, P010 are)", p.sw_format));
    }
    let bpp = bytes_per_sample(p.sw_format);
    let (w, h) = (p.width as usize, p.height as usize);
    let ch = h.div_ceil(2);
    let row_y = w * bpp;
    let row_uv = w.div_ceil(2) * 2 * bpp;
    let pitch = row_y.max(row_uv).next_multiple_of(256);
    let e = |e: GpuError| e.to_string();
    let buf = gpu.alloc(pitch * (h + ch)).map_err(e)?;
    gpu.copy_2d(p.planes[0], p.pitches[0], buf.ptr, pitch, row_y, h).map_err(e)?;
    let uv = buf.ptr + (pitch * h) as u64;
    gpu.copy_2d(p.planes[1], p.pitches[1], uv, pitch, row_uv, ch).map_err(e)?;
    match surfaces {
        Some(s) => s.hold(frame)?,
        None => gpu.sync().map_err(e)?,
    }
    let format = if bpp == 2 { Pixel::P010LE } else { Pixel::NV12 };
    Ok(Image {
        width: p.width,
        height: p.height,
        format,
        color: p.color,
        offsets: [0, pitch * h, 0, 0],
        strides: [pitch as i32, pitch as i32, 0, 0],
        storage: Storage::Device(DeviceImage {
            planes: [buf.ptr, uv, 0, 0],
            pitches: [pitch, pitch, 0, 0],
            keep: Box::new(buf),
            gpu: gpu.clone(),
            host: Default::default(),
        }),
    })
}

/// A host copy of a device image (planes packed, no padding), for stages
/// and sinks that work on the CPU. One download per plane, into a pooled
/// buffer (no staging copy).
pub fn download_image(img: &Image, pool: &Pool<u8>) -> Result<Image, String> {
    let Storage::Device(d) = &img.storage else { return Err("image is not on the device".into()) };
    let bpp = bytes_per_sample(img.format);
    let (w, h) = (img.width as usize, img.height as usize);
    let ch = h.div_ceil(2);
    let rows = [(w * bpp, h), (w.div_ceil(2) * 2 * bpp, ch)];
    let total = rows[0].0 * rows[0].1 + rows[1].0 * rows[1].1;
    let mut out = pool.get(total);
    let mut at = 0;
    for (i, (row, n)) in rows.into_iter().enumerate() {
        // One 2D copy straight into the packed host plane (pitch dropped on the way).
        d.gpu.download_2d(d.planes[i], d.pitches[i], &mut out[at..at + row * n], row, row, n).map_err(|e| e.to_string())?;
        at += row * n;
    }
    let (r0, r1) = (rows[0].0 as i32, rows[1].0 as i32);
    Ok(Image {
        width: img.width,
        height: img.height,
        format: img.format,
        color: img.color,
        offsets: [0, rows[0].0 * h, 0, 0],
        strides: [r0, r1, 0, 0],
        storage: Storage::Host(out),
    })
}

/// Put a host image on the device (for the GPU preprocess of software-decoded
/// frames): one upload of its packed buffer.
pub fn upload_image(img: &Image, gpu: &Arc<Gpu>) -> Result<Image, String> {
    let host = img.host().ok_or("image is already on the device")?;
    let buf = gpu.alloc(host.len()).map_err(|e| e.to_string())?;
    gpu.upload(host, buf.ptr).map_err(|e| e.to_string())?;
    let mut planes = [0u64; 4];
    let mut pitches = [0usize; 4];
    for i in 0..4 {
        if img.strides[i] > 0 {
            planes[i] = buf.ptr + img.offsets[i] as u64;
            pitches[i] = img.strides[i] as usize;
        }
    }
    Ok(Image {
        width: img.width,
        height: img.height,
        format: img.format,
        color: img.color,
        offsets: img.offsets,
        strides: img.strides,
        storage: Storage::Device(DeviceImage { planes, pitches, keep: Box::new(buf), gpu: gpu.clone(), host: Default::default() }),
    })
}
