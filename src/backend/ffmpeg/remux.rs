//! Event clips without re-encoding: the compressed video packets a decoder's
//! demuxer reads, handed to a tap ([`TappedPacket`], [`PacketTap`]) with the
//! stream's codec parameters ([`StreamParams`]), and the muxer that writes
//! such packets unchanged into fragmented mp4 ([`ClipMuxer`]).

use std::path::Path;

use ffmpeg_next as ff;

use super::setup::init;

/// One compressed video packet as the demuxer read it (its data is never changed).
pub struct TappedPacket(pub(super) ff::Packet);

impl TappedPacket {
    /// Bytes of compressed data.
    pub fn size(&self) -> usize {
        self.0.size()
    }
    /// Presentation timestamp (stream time base).
    pub fn pts(&self) -> Option<i64> {
        self.0.pts()
    }
    /// Decode timestamp (stream time base).
    pub fn dts(&self) -> Option<i64> {
        self.0.dts()
    }
    /// Duration (stream time base), 0 when unknown.
    pub fn duration(&self) -> i64 {
        self.0.duration()
    }
    /// A keyframe: a clip may start here.
    pub fn is_key(&self) -> bool {
        self.0.is_key()
    }
    /// The compressed bytes.
    pub fn data(&self) -> &[u8] {
        self.0.data().unwrap_or_default()
    }
}

/// Called with each packet of the decoded video stream, after the decoder has it.
pub type PacketTap = Box<dyn FnMut(TappedPacket) + Send>;

/// What a muxer needs to write a stream's packets: its codec parameters
/// (codec, size, extradata such as H.264's SPS/PPS) and time base.
#[derive(Clone)]
pub struct StreamParams {
    pub(super) params: ff::codec::Parameters,
    /// The stream's time base (num, den).
    pub time_base: (i32, i32),
    /// The codec's name (`h264`, `hevc`, ...).
    pub codec: String,
}

impl std::fmt::Debug for StreamParams {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "StreamParams({}, {}/{})", self.codec, self.time_base.0, self.time_base.1)
    }
}

/// Writes one video stream's packets, unchanged, into a fragmented mp4 (a
/// fragment per keyframe: a killed process loses at most the open one).
pub struct ClipMuxer {
    out: ff::format::context::Output,
    tb_in: ff::Rational,
    tb_out: ff::Rational,
    path: String,
    file: std::path::PathBuf,
}

impl ClipMuxer {
    /// Create `path` for a stream of `params`, with timestamps in `time_base`.
    pub fn create(path: &Path, params: &StreamParams, time_base: (i32, i32)) -> Result<Self, String> {
        init();
        let shown = path.display().to_string();
        let mut out = ff::format::output_as(&path, "mp4").map_err(|e| format!("{shown}: {e}"))?;
        {
            let mut ost = out.add_stream(ff::encoder::find(ff::codec::Id::None)).map_err(|e| format!("{shown}: {e}"))?;
            ost.set_parameters(params.params.clone());
            // SAFETY: the stream's own codec parameters, owned by `out`; a
            // plain int: the source container's tag means nothing in mp4.
            unsafe { (*ost.parameters().as_mut_ptr()).codec_tag = 0 };
            ost.set_time_base(ff::Rational(time_base.0, time_base.1));
        }
        let mut opts = ff::Dictionary::new();
        opts.set("movflags", "frag_keyframe+empty_moov+default_base_moof");
        // Each fragment goes to the file when it is complete, not when FFmpeg's buffer fills.
        opts.set("flush_packets", "1");
        out.write_header_with(opts).map_err(|e| format!("{shown}: writing the header: {e}"))?;
        let tb_out = out.stream(0).map(|s| s.time_base()).unwrap_or(ff::Rational(time_base.0, time_base.1));
        Ok(ClipMuxer { out, tb_in: ff::Rational(time_base.0, time_base.1), tb_out, path: shown, file: path.to_path_buf() })
    }

    /// Write `packet` with timestamps `pts`, `dts` and `duration` (in the time base given at create).
    pub fn write(&mut self, packet: &TappedPacket, pts: i64, dts: i64, duration: i64) -> Result<(), String> {
        let mut p = ff::Packet::copy(packet.data());
        p.set_pts(Some(pts));
        p.set_dts(Some(dts));
        p.set_duration(duration);
        p.set_flags(packet.0.flags());
        p.set_stream(0);
        p.set_position(-1);
        p.rescale_ts(self.tb_in, self.tb_out);
        p.write(&mut self.out).map(drop).map_err(|e| format!("{}: {e}", self.path))?;
        self.io().1.map_or(Ok(()), Err)
    }

    /// Bytes the muxer has written so far, and the I/O error it met, if any.
    fn io(&self) -> (i64, Option<String>) {
        // SAFETY: the output's own I/O context, opened with it (mp4 is a file
        // muxer: `pb` is set) and alive as long as `self.out`; its position and
        // error field are read only.
        let (pos, err) = unsafe {
            let pb = (*self.out.as_ptr()).pb;
            if pb.is_null() { (0, 0) } else { (ff::ffi::avio_seek(pb, 0, libc::SEEK_CUR), (*pb).error) }
        };
        (pos, (err < 0).then(|| format!("{}: {}", self.path, ff::Error::from(err))))
    }

    /// Close the last fragment and the file; the bytes written. A write that
    /// did not all reach the disk (a disk full, a file size limit: a short
    /// write FFmpeg does not see) is an error.
    pub fn finish(mut self) -> Result<u64, String> {
        self.out.write_trailer().map_err(|e| format!("{}: {e}", self.path))?;
        let (size, err) = self.io();
        if let Some(e) = err {
            return Err(e);
        }
        let (path, file) = (self.path.clone(), self.file.clone());
        drop(self);
        let on_disk = std::fs::metadata(&file).map_err(|e| format!("{path}: {e}"))?.len();
        if (on_disk as i64) < size {
            return Err(format!("{path}: only {on_disk} of {size} bytes reached the disk (disk full, or a file size limit)"));
        }
        Ok(on_disk)
    }
}
