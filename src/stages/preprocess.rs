//! `kind = "preprocess"`: decoded image → normalised f32 tensor.
//!
//! Two passes over the pixels, both cheap: swscale scales and converts to
//! packed RGB/BGR at the letterboxed size in one go, then a table lookup
//! normalises into the pooled tensor and fills the padding.

use std::sync::Arc;

use ffmpeg_next::format::Pixel;

use crate::backend::ffmpeg::sws_flags;
use crate::config::{ChannelOrder, ComputeDevice, Diagnostic, Layout, NodeKind, PreprocessConfig, ResizeMode};
use crate::frame::convert::{KernelParams, Normalize, SrcFormat};
use crate::frame::{Frame, Image, Letterbox, ModelInput, Payload, Pool, Tensor};
use crate::stages::build::{Build, BuildCtx};
use crate::stages::scalers::Scalers;
use crate::stages::{Body, Stage, StageError};

/// Per-channel lookup: byte value → normalised float.
#[derive(Clone)]
pub struct NormTable {
    pub(crate) lut: [[f32; 256]; 3],
    pad: [f32; 3],
}

impl NormTable {
    pub fn new(scale: f32, mean: [f32; 3], std: [f32; 3], pad_value: u8) -> Self {
        let mut lut = [[0f32; 256]; 3];
        for (c, table) in lut.iter_mut().enumerate() {
            for (v, out) in table.iter_mut().enumerate() {
                *out = (v as f32 * scale - mean[c]) / std[c];
            }
        }
        let pad = [lut[0][pad_value as usize], lut[1][pad_value as usize], lut[2][pad_value as usize]];
        NormTable { lut, pad }
    }
}

/// Write packed 3-channel `src` (`lb.new_w` × `lb.new_h`) into `out` (the
/// whole `lb.dst_w` × `lb.dst_h` tensor), normalised, with padding filled.
pub fn normalize_into(src: &[u8], lb: &Letterbox, t: &NormTable, layout: Layout, out: &mut [f32]) {
    let (dw, dh) = (lb.dst_w as usize, lb.dst_h as usize);
    let (nw, nh) = (lb.new_w as usize, lb.new_h as usize);
    let (px, py) = (lb.pad_x as usize, lb.pad_y as usize);
    assert_eq!(out.len(), 3 * dw * dh);
    assert!(src.len() >= 3 * nw * nh);
    let [l0, l1, l2] = &t.lut;
    match layout {
        Layout::Nchw => {
            let plane = dw * dh;
            let (p0, rest) = out.split_at_mut(plane);
            let (p1, p2) = rest.split_at_mut(plane);
            for (p, pad) in [(&mut *p0, t.pad[0]), (&mut *p1, t.pad[1]), (&mut *p2, t.pad[2])] {
                fill_padding(p, dw, dh, px, py, nw, nh, 1, &[pad]);
            }
            for y in 0..nh {
                let row = &src[y * nw * 3..(y + 1) * nw * 3];
                let o = (y + py) * dw + px;
                let (r0, r1, r2) = (&mut p0[o..o + nw], &mut p1[o..o + nw], &mut p2[o..o + nw]);
                for (x, px3) in row.chunks_exact(3).enumerate() {
                    r0[x] = l0[px3[0] as usize];
                    r1[x] = l1[px3[1] as usize];
                    r2[x] = l2[px3[2] as usize];
                }
            }
        }
        Layout::Nhwc => {
            fill_padding(out, dw, dh, px, py, nw, nh, 3, &t.pad);
            for y in 0..nh {
                let row = &src[y * nw * 3..(y + 1) * nw * 3];
                let o = ((y + py) * dw + px) * 3;
                let dst = &mut out[o..o + nw * 3];
                for (d, s) in dst.chunks_exact_mut(3).zip(row.chunks_exact(3)) {
                    d[0] = l0[s[0] as usize];
                    d[1] = l1[s[1] as usize];
                    d[2] = l2[s[2] as usize];
                }
            }
        }
    }
}

/// Fill everything outside the `nw` × `nh` image at (`px`, `py`) with `pad` (`ch` values per pixel).
#[allow(clippy::too_many_arguments)]
fn fill_padding(out: &mut [f32], dw: usize, dh: usize, px: usize, py: usize, nw: usize, nh: usize, ch: usize, pad: &[f32]) {
    let fill = |s: &mut [f32]| {
        for p in s.chunks_exact_mut(ch) {
            p.copy_from_slice(pad);
        }
    };
    fill(&mut out[..py * dw * ch]);
    fill(&mut out[(py + nh) * dw * ch..dh * dw * ch]);
    if nw < dw {
        for y in py..py + nh {
            let row = &mut out[y * dw * ch..(y + 1) * dw * ch];
            fill(&mut row[..px * ch]);
            fill(&mut row[(px + nw) * ch..]);
        }
    }
}

pub struct Preprocess {
    name: Arc<str>,
    cfg: PreprocessConfig,
    table: NormTable,
    flags: i32,
    scalers: Scalers,
    rgb: Vec<u8>,
    pool: Pool<f32>,
    device: ComputeDevice,
    /// The GPU for host frames when `device = "cuda"`.
    #[cfg(feature = "cuda")]
    gpu: Option<Arc<crate::backend::cuda::Gpu>>,
    /// Host copies of device frames (`device = "cpu"`).
    #[cfg(feature = "cuda")]
    host_images: Pool<u8>,
    /// Leave GPU-made tensors on the device (every consumer runs on a GPU provider).
    #[cfg(feature = "cuda")]
    keep_on_device: bool,
    /// The gate of the infer stage this preprocess alone feeds (`interval`,
    /// `motion`): frames it skips get no tensor, only a marker.
    gate: Option<crate::gating::Gate>,
}

impl Preprocess {
    /// Build the stage; `device = "cuda"` needs a GPU now (the error says why not).
    pub fn new(name: Arc<str>, cfg: &PreprocessConfig, pool_size: usize) -> Result<Self, String> {
        let device = cfg.device.as_ref().map(|d| *d.get_ref()).unwrap_or_default();
        #[cfg(feature = "cuda")]
        let gpu = match device {
            ComputeDevice::Cuda => Some(crate::backend::cuda::Gpu::shared(cfg.device_id).map_err(|e| e.to_string())?),
            _ => None,
        };
        #[cfg(not(feature = "cuda"))]
        if device == ComputeDevice::Cuda {
            return Err("this build has no GPU support (built without the `cuda` feature)".into());
        }
        Ok(Preprocess {
            name,
            table: NormTable::new(cfg.scale, cfg.mean, cfg.std, cfg.pad_value),
            flags: sws_flags(cfg.interpolation),
            cfg: cfg.clone(),
            scalers: Scalers::default(),
            rgb: Vec::new(),
            pool: Pool::new(pool_size),
            device,
            #[cfg(feature = "cuda")]
            gpu,
            #[cfg(feature = "cuda")]
            host_images: Pool::new(pool_size),
            #[cfg(feature = "cuda")]
            keep_on_device: false,
            gate: None,
        })
    }

    /// Decide for the infer stage after (which this preprocess alone feeds)
    /// which frames it skips: those are not preprocessed.
    pub fn set_gate(&mut self, gate: crate::gating::Gate) {
        self.gate = Some(gate);
    }

    /// Leave tensors made by the kernel in device memory (when every consumer
    /// is an inference stage asking for a GPU provider; one that ends up on the
    /// CPU downloads them itself).
    pub fn keep_on_device(&mut self, yes: bool) {
        #[cfg(feature = "cuda")]
        {
            self.keep_on_device = yes;
        }
        #[cfg(not(feature = "cuda"))]
        let _ = yes;
    }

    fn letterbox(&self, img: &Image) -> Letterbox {
        let (w, h) = (*self.cfg.width.get_ref(), *self.cfg.height.get_ref());
        match self.cfg.resize {
            ResizeMode::Letterbox => Letterbox::fit(img.width, img.height, w, h),
            ResizeMode::Stretch => Letterbox::stretch(img.width, img.height, w, h),
        }
    }

    /// The kernel's parameters for `img` (also what the CPU twin runs).
    pub fn kernel_params(&self, img: &Image) -> Result<KernelParams, String> {
        let fmt = SrcFormat::from_pixel(img.format)
            .ok_or_else(|| format!("the GPU preprocess reads NV12, P010, YUV420P, RGB24 and BGR24, not {:?}", img.format))?;
        let c = &self.cfg;
        let norm = Normalize { scale: c.scale, mean: c.mean, std: c.std, pad_value: c.pad_value };
        Ok(KernelParams::new(fmt, img.color, &self.letterbox(img), &norm, c.color == ChannelOrder::Bgr, c.layout == Layout::Nhwc, false))
    }

    /// The CUDA kernel on a device image, then one download of the tensor.
    #[cfg(feature = "cuda")]
    fn process_gpu(&mut self, frame: &mut Frame, img: &Image) -> Result<(), StageError> {
        let crate::frame::Storage::Device(d) = &img.storage else { unreachable!("device images only") };
        let k = self.kernel_params(img).map_err(StageError::Frame)?;
        let e = |e: crate::backend::cuda::GpuError| StageError::Frame(format!("GPU preprocess: {e}"));
        let out = d.gpu.alloc(k.out_len() * 4).map_err(e)?;
        d.gpu.preprocess([d.planes[0], d.planes[1], d.planes[2]], [d.pitches[0], d.pitches[1], d.pitches[2]], &k, out.ptr).map_err(e)?;
        let letterbox = self.letterbox(img);
        let input = if self.keep_on_device {
            // The GPU inference stage reads it in place: nothing crosses to the host.
            ModelInput { tensor: Tensor { shape: self.shape(), data: self.pool.get(0) }, letterbox, device: Some(out) }
        } else {
            let mut data = self.pool.get(k.out_len());
            d.gpu.download(out.ptr, &mut data).map_err(e)?;
            ModelInput { tensor: Tensor { shape: self.shape(), data }, letterbox, device: None }
        };
        frame.attach(&self.name, Payload::Input(input));
        Ok(())
    }

    pub fn shape(&self) -> Vec<usize> {
        let (w, h) = (*self.cfg.width.get_ref() as usize, *self.cfg.height.get_ref() as usize);
        match self.cfg.layout {
            Layout::Nchw => vec![1, 3, h, w],
            Layout::Nhwc => vec![1, h, w, 3],
        }
    }

    /// Buffers this stage's pool has allocated (steady state: stays flat).
    pub fn allocations(&self) -> u64 {
        self.pool.allocations()
    }
}

impl Stage for Preprocess {
    fn describe(&self) -> String {
        let c = &self.cfg;
        let engine = match self.device {
            #[cfg(feature = "cuda")]
            ComputeDevice::Auto => "CUDA kernel for NVDEC frames, else CPU: swscale + table normalise",
            // A build without the GPU path has no NVDEC frames: the CPU always.
            #[cfg(not(feature = "cuda"))]
            ComputeDevice::Auto => "CPU: swscale + table normalise",
            ComputeDevice::Cuda => "CUDA kernel",
            ComputeDevice::Cpu => "CPU: swscale + table normalise",
        };
        format!(
            "{:?} {}x{} {:?} {:?} f32 ({engine}, {:?})",
            c.resize,
            c.width.get_ref(),
            c.height.get_ref(),
            c.color,
            c.layout,
            c.interpolation
        )
        .to_lowercase()
    }

    fn process(&mut self, frame: &mut Frame) -> Result<(), StageError> {
        let img = frame.image.clone().ok_or_else(|| StageError::Frame("frame has no image".into()))?;
        if let Some(gate) = &mut self.gate {
            let mode = gate.decide(&frame.stream, Some(&img));
            if mode != crate::frame::WorkMode::Inferred {
                frame.attach(&self.name, Payload::Gated(mode));
                return Ok(());
            }
        }
        #[cfg(feature = "cuda")]
        {
            let on_device = img.host().is_none();
            match (self.device, on_device) {
                (ComputeDevice::Cpu, true) => {
                    let host = crate::stages::on_host(&img, &self.host_images).map_err(StageError::Frame)?;
                    return self.process_cpu(frame, &host);
                }
                (_, true) => return self.process_gpu(frame, &img),
                (ComputeDevice::Cuda, false) => {
                    let gpu = self.gpu.clone().expect("built with a GPU for device = cuda");
                    let up = crate::backend::nvdec::upload_image(&img, &gpu).map_err(StageError::Frame)?;
                    return self.process_gpu(frame, &up);
                }
                _ => {}
            }
        }
        self.process_cpu(frame, &img)
    }
}

impl Preprocess {
    fn process_cpu(&mut self, frame: &mut Frame, img: &Image) -> Result<(), StageError> {
        let (w, h) = (*self.cfg.width.get_ref(), *self.cfg.height.get_ref());
        let lb = self.letterbox(img);
        let fmt = match self.cfg.color {
            ChannelOrder::Rgb => Pixel::RGB24,
            ChannelOrder::Bgr => Pixel::BGR24,
        };
        let scaler = self.scalers.get(&self.name, &frame.stream, img, (lb.new_w, lb.new_h, fmt), self.flags)?;
        self.rgb.resize(lb.new_w as usize * lb.new_h as usize * 3, 0);
        scaler.run(img, &mut self.rgb).map_err(StageError::Frame)?;
        let mut data = self.pool.get(3 * w as usize * h as usize);
        normalize_into(&self.rgb, &lb, &self.table, self.cfg.layout, &mut data);
        frame.attach(
            &self.name,
            Payload::Input(ModelInput {
                tensor: Tensor { shape: self.shape(), data },
                letterbox: lb,
                #[cfg(feature = "cuda")]
                device: None,
            }),
        );
        Ok(())
    }
}

impl Build for PreprocessConfig {
    fn build(&self, cx: &BuildCtx<'_>) -> Result<Body, Diagnostic> {
        let (cfg, graph, i) = (cx.cfg, cx.graph, cx.index);
        let mut p = Preprocess::new(cx.name.clone(), self, cx.pool_size).map_err(|e| {
            let span = self.device.as_ref().map(|d| d.span()).unwrap_or(self.width.span());
            cfg.diag(span, format!("stage `{}`: device = \"cuda\": {e}", cx.name)).with_help(
                "use device = \"auto\" (the GPU for NVDEC frames only) or \"cpu\"; `infer-stream doctor` says what this machine has",
            )
        })?;
        // Keep the tensors on the GPU when every consumer runs its model there.
        let gpu_consumers = !graph.consumers[i].is_empty()
            && graph.consumers[i].iter().all(|&n| {
                matches!(&cfg.nodes[n].kind, NodeKind::Infer(ic)
                    if ic.providers.get_ref().first().is_some_and(|p| p.name != crate::config::ProviderName::Cpu))
            });
        p.keep_on_device(gpu_consumers);
        // The gate of the one infer stage this preprocess feeds decides here.
        if let [c] = graph.consumers[i][..]
            && cx.gate_in_preprocess(c) == Some(i)
            && let NodeKind::Infer(ic) = &cfg.nodes[c].kind
            && let Some(g) = crate::gating::Gate::of(ic)
        {
            p.set_gate(g);
        }
        Ok(Body::Stage(Box::new(p)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table() -> NormTable {
        NormTable::new(1.0 / 255.0, [0.5, 0.5, 0.5], [0.5, 0.5, 0.5], 0)
    }

    #[test]
    fn nchw_letterbox_places_pixels_and_padding() {
        // 2x1 image into a 2x4 tensor: 2x1 scaled image centred vertically (pad_y = 1).
        let lb = Letterbox {
            src_w: 2,
            src_h: 1,
            dst_w: 2,
            dst_h: 4,
            new_w: 2,
            new_h: 1,
            pad_x: 0,
            pad_y: 1,
            inv_scale_x: 1.0,
            inv_scale_y: 1.0,
        };
        let src = [255, 0, 0, 0, 255, 0];
        let mut out = vec![9.0; 3 * 8];
        normalize_into(&src, &lb, &table(), Layout::Nchw, &mut out);
        // R plane: row 0 pad (-1), row 1 = [1, -1], rows 2-3 pad.
        assert_eq!(&out[0..8], &[-1.0, -1.0, 1.0, -1.0, -1.0, -1.0, -1.0, -1.0]);
        // G plane row 1 = [-1, 1].
        assert_eq!(&out[8 + 2..8 + 4], &[-1.0, 1.0]);
        assert!(out.iter().all(|v| *v != 9.0), "every element written");
    }

    #[test]
    fn nhwc_with_side_padding() {
        let lb = Letterbox {
            src_w: 1,
            src_h: 1,
            dst_w: 3,
            dst_h: 1,
            new_w: 1,
            new_h: 1,
            pad_x: 1,
            pad_y: 0,
            inv_scale_x: 1.0,
            inv_scale_y: 1.0,
        };
        let t = NormTable::new(1.0, [0.0; 3], [1.0; 3], 7);
        let mut out = vec![0.0; 9];
        normalize_into(&[10, 20, 30], &lb, &t, Layout::Nhwc, &mut out);
        assert_eq!(out, vec![7.0, 7.0, 7.0, 10.0, 20.0, 30.0, 7.0, 7.0, 7.0]);
    }

    #[test]
    fn table_matches_formula() {
        let t = NormTable::new(1.0 / 255.0, [0.485, 0.456, 0.406], [0.229, 0.224, 0.225], 114);
        for v in [0usize, 1, 128, 255] {
            let want = (v as f32 / 255.0 - 0.456) / 0.224;
            assert!((t.lut[1][v] - want).abs() < 1e-6);
        }
        assert!((t.pad[0] - (114.0 / 255.0 - 0.485) / 0.229).abs() < 1e-6);
    }
}
