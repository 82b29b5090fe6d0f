//! Annotated event clips (`annotated = true` on a `clips` sink, forced when a
//! `redact` stage is upstream): every frame the sink gets — redacted, when
//! the pipeline redacts — is drawn with its results (as the `video` sink
//! draws them) and encoded, and the packets go to a ring of the sink's own,
//! from which clips are cut as from a source's ring. A clip then never holds
//! a picture the pipeline did not pass on: no un-redacted face.

use std::sync::Arc;

use ffmpeg_next::format::Pixel;

use super::draw::{self, Canvas};
use crate::backend::ffmpeg::{ChosenEncoder, ClipEncoder, Scaler, sws_flags};
use crate::config::Interpolation;
use crate::frame::{Frame, Image, Pool};
use crate::runtime::clips::{PacketRing, RingPacket};

/// A keyframe at least every this many pictures: where an annotated clip may start.
pub const KEYINT: u32 = 30;

pub struct Annotator {
    encoder: ChosenEncoder,
    enc: Option<ClipEncoder>,
    ring: Arc<PacketRing>,
    to_rgb: Option<Scaler>,
    to_yuv: Option<Scaler>,
    pool: Pool<u8>,
    trails: draw::Trails,
}

impl Annotator {
    /// For `stream`, keeping `keep_s` seconds (and the GOP before) of encoded pictures.
    pub fn new(stream: &Arc<str>, keep_s: f64, encoder: ChosenEncoder) -> Self {
        Annotator {
            encoder,
            enc: None,
            ring: Arc::new(PacketRing::standalone(stream.clone(), keep_s)),
            to_rgb: None,
            to_yuv: None,
            pool: Pool::new(2),
            trails: draw::Trails::default(),
        }
    }

    /// The ring clips are cut from.
    pub fn ring(&self) -> Arc<PacketRing> {
        self.ring.clone()
    }

    /// Draw and encode `frame` (one with a picture and a timestamp).
    pub fn push(&mut self, frame: &Frame) -> Result<(), String> {
        let (Some(img), Some(pts)) = (frame.image.as_ref(), frame.pts) else { return Ok(()) };
        let img = crate::stages::on_host(img, &self.pool)?;
        let (sw, sh) = (img.width, img.height);
        if self.enc.is_none() {
            let e = ClipEncoder::create(&self.encoder, (sw & !1, sh & !1), frame.time_base, KEYINT)?;
            self.ring.start(Some(e.params()), frame.time_base);
            self.enc = Some(e);
        }
        let mut marks = self.trails.update(frame);
        marks.extend(draw::marks(frame));
        let enc = self.enc.as_mut().expect("made above");
        let (w, h) = (enc.width, enc.height);
        // Drawn at the source size (results are in source pixels), then into the encoder's YUV.
        let mut buf = self.pool.get(sw as usize * sh as usize * 3);
        fit(&mut self.to_rgb, &img, (sw, sh, Pixel::RGB24))?.run(&img, &mut buf)?;
        let mut canvas = Canvas::from_raw(sw, sh, buf).ok_or("picture size mismatch")?;
        draw::draw(&mut canvas, &marks, (sh / 180).max(2), draw::font());
        let rgb = Image::rgb24(sw, sh, canvas.into_raw());
        let mut picture = enc.picture();
        fit(&mut self.to_yuv, &rgb, (w, h, Pixel::YUV420P))?.run_into(&rgb, &mut picture)?;
        let packets = enc.encode(picture, pts)?;
        self.keep(packets);
        Ok(())
    }

    /// The pictures still in the encoder, into the ring (the stream ended).
    pub fn flush(&mut self) -> Result<(), String> {
        let Some(enc) = self.enc.as_mut() else { return Ok(()) };
        let packets = enc.flush()?;
        self.keep(packets);
        Ok(())
    }

    fn keep(&self, packets: Vec<crate::backend::ffmpeg::TappedPacket>) {
        let epoch = self.ring.epoch();
        for p in packets {
            let Some(pts) = p.pts() else { continue };
            let (dts, duration, key) = (p.dts().unwrap_or(pts), p.duration(), p.is_key());
            self.ring.push(RingPacket { packet: p, pts, dts, duration, key, epoch, no_pts: false });
        }
    }
}

/// The scaler in `slot`, made again when the picture or the target changed.
fn fit<'a>(slot: &'a mut Option<Scaler>, src: &Image, (w, h, fmt): (u32, u32, Pixel)) -> Result<&'a mut Scaler, String> {
    if !slot.as_ref().is_some_and(|s| s.fits_to(src, w, h, fmt, None)) {
        *slot = Some(Scaler::new_to(src, w, h, fmt, sws_flags(Interpolation::Bilinear), None).map_err(|e| e.to_string())?);
    }
    Ok(slot.as_mut().expect("set above"))
}
