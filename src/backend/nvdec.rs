//! NVDEC frames into pipeline images, and device images back to the host.
//!
//! FFmpeg 5.1 hands out *mapped* decoder surfaces: holding one pins one of a
//! few NVDEC output surfaces ("No decoder surfaces left" when they run out).
//! So each frame is copied at once, on the shared stream, into a pooled
//! device buffer (a device-to-device copy of ~1.4 MB at 720p) and the surface
//! goes back to the decoder. Frames in flight then cost only pooled memory.

use std::sync::Arc;

use ff::format::Pixel;
use ffmpeg_next as ff;

use super::cuda::{DeviceImage, Gpu, GpuError};
use super::ffmpeg::{HwDevice, cuda_planes};
use crate::frame::{Image, Pool, Storage};

/// The FFmpeg device for `gpu`: its context and stream injected.
pub fn hw_device(gpu: &Gpu) -> Result<HwDevice, String> {
    HwDevice::cuda(gpu.cu_ctx() as *mut _, gpu.cu_stream() as *mut _)
}

/// Bytes per sample of a device layout.
fn bytes_per_sample(p: Pixel) -> usize {
    if matches!(p, Pixel::P010LE | Pixel::P016LE) { 2 } else { 1 }
}

/// Copy a decoded CUDA frame into a pooled device image (NV12 or P010 layout,
/// both planes in one buffer at one pitch). Waits for the copy, so the
/// decoder may reuse its surface as soon as this returns.
pub fn device_image(frame: &ff::frame::Video, gpu: &Arc<Gpu>) -> Result<Image, String> {
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
    gpu.sync().map_err(e)?;
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
        }),
    })
}

/// A host copy of a device image (planes packed, no padding), for stages
/// and sinks that work on the CPU. One download per plane.
pub fn download_image(img: &Image, pool: &Pool<u8>) -> Result<Image, String> {
    let Storage::Device(d) = &img.storage else { return Err("image is not on the device".into()) };
    let bpp = bytes_per_sample(img.format);
    let (w, h) = (img.width as usize, img.height as usize);
    let ch = h.div_ceil(2);
    let rows = [(w * bpp, h), (w.div_ceil(2) * 2 * bpp, ch)];
    let total = rows[0].0 * rows[0].1 + rows[1].0 * rows[1].1;
    let mut out = pool.get(total);
    let mut staging: Vec<u8> = Vec::new();
    let mut at = 0;
    for (i, (row, n)) in rows.into_iter().enumerate() {
        let pitch = d.pitches[i];
        staging.resize(pitch * (n - 1) + row, 0);
        d.gpu.download(d.planes[i], &mut staging).map_err(|e| e.to_string())?;
        for r in 0..n {
            out[at + r * row..at + (r + 1) * row].copy_from_slice(&staging[r * pitch..r * pitch + row]);
        }
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
        storage: Storage::Device(DeviceImage { planes, pitches, keep: Box::new(buf), gpu: gpu.clone() }),
    })
}
