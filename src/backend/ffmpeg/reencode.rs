//! Event clips re-encoded (`annotated = true`): an encoder without a muxer,
//! whose compressed packets go to a clip's packet ring as a demuxer's would
//! ([`TappedPacket`], with the [`StreamParams`] an mp4 muxer needs).

use ff::format::Pixel;
use ffmpeg_next as ff;

use super::encode::{ChosenEncoder, open_encoder};
use super::remux::{StreamParams, TappedPacket};
use super::setup::init;

/// One stream's pictures into H.264 (or the chosen codec) packets, a keyframe
/// at least every `keyint` pictures (where a clip may start), no B-frames
/// (packets leave in presentation order, pts = dts) and, for libx264, no delay.
pub struct ClipEncoder {
    encoder: ff::encoder::Video,
    params: StreamParams,
    pub width: u32,
    pub height: u32,
    /// The last picture's pts, to give each packet its duration.
    last_pts: Option<i64>,
    durations: std::collections::HashMap<i64, i64>,
}

// SAFETY: the FFmpeg codec context inside has no thread affinity; the encoder
// is owned and used by one sink thread at a time (&mut self).
unsafe impl Send for ClipEncoder {}

impl ClipEncoder {
    /// An encoder for `w`x`h` YUV 4:2:0 pictures with timestamps in `tb`.
    pub fn create(encoder: &ChosenEncoder, (w, h): (u32, u32), tb: (i32, i32), keyint: u32) -> Result<Self, String> {
        init();
        let mut options = encoder.options.clone();
        options.push(("g".into(), keyint.max(1).to_string()));
        options.push(("bf".into(), "0".into()));
        if encoder.name == "libx264" {
            // Each picture's packet comes out as it goes in (no lookahead, no frame threads):
            // a clip cut now has every picture up to now.
            options.push(("tune".into(), "zerolatency".into()));
        }
        let enc_tb = ff::Rational::new(tb.0.max(1), tb.1.max(1));
        // mp4 keeps the codec's headers (H.264's SPS/PPS) in the stream's extradata.
        let enc = open_encoder(&encoder.name, &options, w, h, enc_tb, true, None)?;
        let params: ff::codec::Parameters = (&enc).into();
        let codec = ff::codec::encoder::find_by_name(&encoder.name).map(|c| c.name().to_string()).unwrap_or_default();
        let params = StreamParams { params, time_base: tb, codec };
        Ok(ClipEncoder { encoder: enc, params, width: w, height: h, last_pts: None, durations: Default::default() })
    }

    /// The codec parameters a clip's muxer needs.
    pub fn params(&self) -> StreamParams {
        self.params.clone()
    }

    /// An empty host picture of the encoder's size to fill (YUV 4:2:0).
    pub fn picture(&self) -> ff::frame::Video {
        ff::frame::Video::new(Pixel::YUV420P, self.width, self.height)
    }

    /// Encode `picture` shown at `pts` (rising); the packets ready now.
    pub fn encode(&mut self, mut picture: ff::frame::Video, pts: i64) -> Result<Vec<TappedPacket>, String> {
        if self.last_pts.is_some_and(|l| pts <= l) {
            return Ok(Vec::new());
        }
        if let Some(l) = self.last_pts {
            self.durations.insert(l, pts - l);
        }
        self.last_pts = Some(pts);
        picture.set_pts(Some(pts));
        picture.set_kind(ff::picture::Type::None);
        self.encoder.send_frame(&picture).map_err(|e| format!("encoding: {e}"))?;
        self.drain()
    }

    /// The packets still in the encoder (at the end of the stream).
    pub fn flush(&mut self) -> Result<Vec<TappedPacket>, String> {
        self.encoder.send_eof().map_err(|e| format!("flushing the encoder: {e}"))?;
        self.drain()
    }

    fn drain(&mut self) -> Result<Vec<TappedPacket>, String> {
        let mut out = Vec::new();
        loop {
            let mut packet = ff::Packet::empty();
            match self.encoder.receive_packet(&mut packet) {
                Ok(()) => {
                    if let Some(d) = packet.pts().and_then(|p| self.durations.remove(&p)) {
                        packet.set_duration(d);
                    }
                    out.push(TappedPacket(packet));
                }
                Err(ff::Error::Eof) => return Ok(out),
                Err(ff::Error::Other { errno }) if errno == ff::ffi::EAGAIN => return Ok(out),
                Err(e) => return Err(format!("encoding: {e}")),
            }
        }
    }
}
