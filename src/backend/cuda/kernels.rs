//! The launches of the kernels in `kernels.cu` on a [`Gpu`]'s stream: the
//! fused preprocess (its maths and parameters in [`crate::frame::convert`]),
//! the overlay painter (primitives of [`PRIM_INTS`] ints, drawn by
//! `stages::sinks::overlay`) and the checksum
//! the tests compare with [`super::checksum_host`].

use std::sync::Arc;

use cudarc::driver::{LaunchConfig, PushKernelArg};

use super::{Gpu, GpuError, drv};
use crate::backend::PRIM_INTS;
use crate::frame::convert::KernelParams;

impl Gpu {
    /// Launch the fused preprocess kernel: planes `p` (device pointers and
    /// pitches) → one image at `out` (f32 or f16 per `k.half`).
    pub fn preprocess(&self, p: [u64; 3], pitch: [usize; 3], k: &KernelParams, out: u64) -> Result<(), GpuError> {
        self.bind()?;
        let pitch = pitch.map(|v| v as i32);
        let (format, bgr, nhwc, half) = (k.format as i32, k.bgr as i32, k.nhwc as i32, k.half as i32);
        let mut b = self.stream.launch_builder(&self.preprocess);
        b.arg(&p[0]).arg(&pitch[0]).arg(&p[1]).arg(&pitch[1]).arg(&p[2]).arg(&pitch[2]);
        b.arg(&format).arg(&k.src_w).arg(&k.src_h);
        b.arg(&k.y_off).arg(&k.y_mul).arg(&k.c_mul);
        b.arg(&k.k_rv).arg(&k.k_gu).arg(&k.k_gv).arg(&k.k_bu);
        b.arg(&k.new_w).arg(&k.new_h).arg(&k.pad_x).arg(&k.pad_y).arg(&k.dst_w).arg(&k.dst_h);
        b.arg(&k.sx).arg(&k.sy);
        b.arg(&k.mul[0]).arg(&k.mul[1]).arg(&k.mul[2]);
        b.arg(&k.add[0]).arg(&k.add[1]).arg(&k.add[2]);
        b.arg(&k.pad[0]).arg(&k.pad[1]).arg(&k.pad[2]);
        b.arg(&bgr).arg(&nhwc).arg(&half).arg(&out);
        let cfg = LaunchConfig {
            grid_dim: ((k.dst_w as u32).div_ceil(32), (k.dst_h as u32).div_ceil(8), 1),
            block_dim: (32, 8, 1),
            shared_mem_bytes: 0,
        };
        // SAFETY: the argument list matches the kernel's signature in
        // kernels.cu one for one (types: u64 pointers, i32, f32); the planes
        // hold `src_h` rows of their pitch and `out` holds `k.out_len()`
        // elements (callers allocate it so).
        unsafe { b.launch(cfg) }.map(|_| ()).map_err(drv)
    }

    /// Paint `prims` (`overlay::PRIM_INTS` ints each, masks in `alpha`) on a
    /// `w` x `h` NV12 picture on the device (luma at `y`, interleaved chroma
    /// at `uv`), in place, queued on the stream.
    #[allow(clippy::too_many_arguments)]
    pub fn overlay_nv12(
        self: &Arc<Self>,
        y: u64,
        y_pitch: usize,
        uv: u64,
        uv_pitch: usize,
        w: usize,
        h: usize,
        prims: &[i32],
        alpha: &[u8],
    ) -> Result<(), GpuError> {
        if prims.is_empty() || w == 0 || h == 0 {
            return Ok(());
        }
        if !prims.len().is_multiple_of(PRIM_INTS) {
            return Err(GpuError::Driver(format!("{} ints are not whole primitives", prims.len())));
        }
        // Every mask a primitive points at must lie inside `alpha`: the kernel reads it unchecked.
        for p in prims.chunks_exact(PRIM_INTS) {
            let (pw, ph) = (p[2] as i128 - p[0] as i128 + 1, p[3] as i128 - p[1] as i128 + 1);
            if p[8] >= 0 && (pw <= 0 || ph <= 0 || pw > i32::MAX as i128 || p[8] as i128 + pw * ph > alpha.len() as i128) {
                return Err(GpuError::Driver(format!("an overlay mask lies outside its {} bytes", alpha.len())));
            }
        }
        // Pooled by power-of-two sizes, so frames with different drawings reuse buffers.
        let pooled = |bytes: usize| bytes.max(4096).next_power_of_two();
        let dp = self.alloc(pooled(std::mem::size_of_val(prims)))?;
        let da = self.alloc(pooled(alpha.len()))?;
        self.upload_async(prims, dp.ptr)?;
        if !alpha.is_empty() {
            self.upload_async(alpha, da.ptr)?;
        }
        self.bind()?;
        let (yp, uvp, wi, hi, n) = (y_pitch as i32, uv_pitch as i32, w as i32, h as i32, (prims.len() / PRIM_INTS) as i32);
        let mut b = self.stream.launch_builder(&self.overlay);
        b.arg(&y).arg(&yp).arg(&uv).arg(&uvp).arg(&wi).arg(&hi).arg(&dp.ptr).arg(&n).arg(&da.ptr);
        let cfg =
            LaunchConfig { grid_dim: ((w as u32).div_ceil(32), (h as u32).div_ceil(8), 1), block_dim: (32, 8, 1), shared_mem_bytes: 0 };
        // SAFETY: the arguments match `overlay_nv12` in kernels.cu one for one;
        // the planes hold `h` rows of their pitch (the caller's frame), the
        // primitives and every mask they point at lie inside the uploaded
        // buffers (checked above); the buffers go back to the pool after the
        // launch is queued, so their next user queues after this kernel.
        unsafe { b.launch(cfg) }.map(|_| ()).map_err(drv)
    }

    /// Position-weighted checksum of a `w` x `h` byte plane on the device
    /// (see `checksum_u8`); waits for the result.
    pub fn checksum(self: &Arc<Self>, p: u64, pitch: usize, w: usize, h: usize) -> Result<u64, GpuError> {
        let sum = self.alloc(8)?;
        self.upload(&[0u64], sum.ptr)?;
        let (pitch, w32, h32) = (pitch as i32, w as i32, h as i32);
        let mut b = self.stream.launch_builder(&self.checksum);
        b.arg(&p).arg(&pitch).arg(&w32).arg(&h32).arg(&sum.ptr);
        let cfg =
            LaunchConfig { grid_dim: ((w as u32).div_ceil(32), (h as u32).div_ceil(8), 1), block_dim: (32, 8, 1), shared_mem_bytes: 0 };
        // SAFETY: arguments match `checksum_u8`; `p` holds `h` rows of `pitch`
        // bytes and `sum` 8 bytes.
        unsafe { b.launch(cfg) }.map_err(drv)?;
        let mut out = [0u64];
        self.download(sum.ptr, &mut out)?;
        Ok(out[0])
    }
}
