//! Video encoders: checking a name, choosing one (`auto`: NVENC when it
//! opens here, else libx264) with its options, opening it, and the pool of
//! NV12 pictures in device memory an NVENC encoder reads.

use std::path::Path;

use ff::ffi;
use ff::format::Pixel;
use ffmpeg_next as ff;

use super::dictionary;
use super::hw::HwDevice;
use super::setup::init;
use crate::frame::{ColorInfo, Matrix};

/// Whether `name` is a video encoder this FFmpeg has (`auto` always is).
pub fn check_video_encoder(name: &str) -> Result<(), String> {
    init();
    if name == "auto" {
        return Ok(());
    }
    match ff::codec::encoder::find_by_name(name) {
        None => Err(format!("unknown video encoder `{name}`")),
        Some(c) if !c.is_video() => Err(format!("`{name}` is not a video encoder")),
        Some(_) => Ok(()),
    }
}

/// What an encoder is asked for.
#[derive(Debug, Clone)]
pub struct EncoderSettings {
    /// An FFmpeg encoder name, or `auto`.
    pub codec: String,
    pub preset: Option<String>,
    pub crf: Option<u32>,
}

/// The encoder chosen for some settings, with the options it is opened with.
#[derive(Debug, Clone)]
pub struct ChosenEncoder {
    pub name: String,
    pub options: Vec<(String, String)>,
    /// Why `auto` chose it.
    pub note: Option<String>,
}

/// The NVENC preset nearest a libx264 one.
fn x264_to_nvenc_preset(p: &str) -> Option<&'static str> {
    Some(match p {
        "ultrafast" | "superfast" => "p1",
        "veryfast" => "p2",
        "faster" | "fast" => "p3",
        "medium" => "p4",
        "slow" => "p5",
        "slower" => "p6",
        "veryslow" | "placebo" => "p7",
        _ => return None,
    })
}

pub(super) fn encoder_options(name: &str, s: &EncoderSettings) -> Vec<(String, String)> {
    let mut o = Vec::new();
    match name {
        "libx264" | "libx264rgb" | "libx265" => {
            o.push(("preset".into(), s.preset.clone().unwrap_or_else(|| "veryfast".into())));
            o.push(("crf".into(), s.crf.unwrap_or(23).to_string()));
        }
        n if n.ends_with("_nvenc") => {
            // `codec = "auto"` with a libx264 preset: NVENC's nearest (p1 fastest … p7 best).
            let preset = match s.preset.as_deref() {
                None => "p4".to_string(),
                Some(p) if s.codec == "auto" => x264_to_nvenc_preset(p).unwrap_or(p).to_string(),
                Some(p) => p.to_string(),
            };
            o.push(("preset".into(), preset));
            o.push(("rc".into(), "vbr".into()));
            o.push(("cq".into(), s.crf.unwrap_or(23).to_string()));
        }
        _ => {
            if let Some(p) = &s.preset {
                o.push(("preset".into(), p.clone()));
            }
            if let Some(c) = s.crf {
                o.push(("crf".into(), c.to_string()));
            }
        }
    }
    o
}

/// Open the encoder `name` for `w`x`h` YUV 4:2:0 at time base `tb`.
pub(super) fn open_encoder(
    name: &str,
    options: &[(String, String)],
    w: u32,
    h: u32,
    tb: ff::Rational,
    global_header: bool,
    input: Option<(&DeviceFrames, ColorInfo)>,
) -> Result<ff::encoder::Video, String> {
    use ff::color::{Range, Space};
    let codec = ff::codec::encoder::find_by_name(name).ok_or_else(|| format!("unknown video encoder `{name}`"))?;
    let mut enc = ff::codec::context::Context::new_with_codec(codec).encoder().video().map_err(|e| format!("{name}: {e}"))?;
    enc.set_width(w);
    enc.set_height(h);
    enc.set_time_base(tb);
    match input {
        None => {
            enc.set_format(Pixel::YUV420P);
            enc.set_colorspace(Space::SMPTE170M);
            enc.set_color_range(Range::MPEG);
        }
        Some((frames, color)) => {
            // The decoded pictures go in as they are: tagged with their own matrix and range.
            enc.set_format(Pixel::CUDA);
            enc.set_colorspace(match color.matrix {
                Matrix::Bt709 => Space::BT709,
                Matrix::Bt2020 => Space::BT2020NCL,
                Matrix::Bt601 | Matrix::Unspecified => Space::SMPTE170M,
            });
            enc.set_color_range(if color.full_range { Range::JPEG } else { Range::MPEG });
            // SAFETY: an unopened encoder context we own; it takes its own
            // reference to the frames context, released by avcodec_free_context.
            unsafe {
                let c = enc.as_mut_ptr();
                (*c).hw_frames_ctx = ffi::av_buffer_ref(frames.frames);
                if (*c).hw_frames_ctx.is_null() {
                    return Err("out of memory".into());
                }
            }
        }
    }
    if global_header {
        enc.set_flags(ff::codec::Flags::GLOBAL_HEADER);
    }
    let r = enc.open_as_with(codec, dictionary(options));
    r.map_err(|e| {
        let opts: Vec<String> = options.iter().map(|(k, v)| format!("{k}={v}")).collect();
        format!("cannot open encoder `{name}` ({}): {e}", opts.join(", "))
    })
}

/// Choose and check the encoder: `auto` takes h264_nvenc when it opens here, else
/// libx264; any encoder is opened once on a small picture so bad options fail now.
pub fn choose_encoder(s: &EncoderSettings) -> Result<ChosenEncoder, String> {
    init();
    let probe = |name: &str| {
        let options = encoder_options(name, s);
        // SAFETY: plain reads and writes of FFmpeg's log level. This runs while the
        // pipeline is built, before any decoder thread: an encoder that cannot open
        // (NVENC without a GPU) is reported by us, not by FFmpeg's own log.
        let level = unsafe { ffi::av_log_get_level() };
        // SAFETY: as above.
        unsafe { ffi::av_log_set_level(ffi::AV_LOG_QUIET) };
        let r = open_encoder(name, &options, 256, 144, ff::Rational::new(1, 25), false, None).map(|_| options);
        // SAFETY: restores the level read above.
        unsafe { ffi::av_log_set_level(level) };
        r
    };
    if s.codec == "auto" {
        let nvenc = match ff::codec::encoder::find_by_name("h264_nvenc") {
            None => Err("this FFmpeg has no h264_nvenc".to_string()),
            // FFmpeg's own reason is a bare errno ("Operation not permitted").
            Some(_) if !Path::new("/proc/driver/nvidia/version").exists() => Err("no NVIDIA driver on this machine".to_string()),
            Some(_) => probe("h264_nvenc").map_err(|e| format!("the GPU's NVENC refused to open: {e}")),
        };
        return match nvenc {
            Ok(options) => Ok(ChosenEncoder { name: "h264_nvenc".into(), options, note: Some("NVENC opened on the GPU".into()) }),
            Err(e) => {
                let options = probe("libx264")?;
                Ok(ChosenEncoder {
                    name: "libx264".into(),
                    options,
                    note: Some(format!("h264_nvenc unusable here ({e}); encoding on the CPU")),
                })
            }
        };
    }
    let options = probe(&s.codec)?;
    Ok(ChosenEncoder { name: s.codec.clone(), options, note: None })
}

/// A pool of NV12 pictures in device memory on an [`HwDevice`]
/// (`AVHWFramesContext`), for an encoder that reads CUDA frames (NVENC):
/// pictures are drawn on where they are and encoded without a download.
pub struct DeviceFrames {
    frames: *mut ffi::AVBufferRef,
    pub width: u32,
    pub height: u32,
}

// SAFETY: as HwDevice: the frames context is read-only after init and its
// reference counting is atomic.
unsafe impl Send for DeviceFrames {}

impl DeviceFrames {
    /// NV12 pictures of `w` x `h` on `device`.
    pub fn nv12(device: &HwDevice, w: u32, h: u32) -> Result<Self, String> {
        // SAFETY: av_hwframe_ctx_alloc takes its own reference to the device
        // and returns a frames context whose public fields are set before
        // av_hwframe_ctx_init, as hwcontext.h documents; on failure the one
        // reference we hold is released.
        unsafe {
            let mut r = ffi::av_hwframe_ctx_alloc(device.0);
            if r.is_null() {
                return Err("cannot allocate FFmpeg CUDA frames".into());
            }
            let fc = (*r).data as *mut ffi::AVHWFramesContext;
            (*fc).format = ffi::AVPixelFormat::AV_PIX_FMT_CUDA;
            (*fc).sw_format = ffi::AVPixelFormat::AV_PIX_FMT_NV12;
            (*fc).width = w as i32;
            (*fc).height = h as i32;
            let e = ffi::av_hwframe_ctx_init(r);
            if e < 0 {
                ffi::av_buffer_unref(&mut r);
                return Err(format!("FFmpeg cannot make {w}x{h} NV12 frames on the GPU: {}", ff::Error::from(e)));
            }
            Ok(DeviceFrames { frames: r, width: w, height: h })
        }
    }

    /// A free picture from the pool: device pointers and pitches of its luma
    /// and interleaved chroma planes are in `data[0..2]` / `linesize[0..2]`
    /// (see [`DeviceFrames::planes`]).
    pub fn picture(&self) -> Result<ff::frame::Video, String> {
        let mut f = ff::frame::Video::empty();
        // SAFETY: `f` is an empty frame we own; av_hwframe_get_buffer fills it
        // with a pooled surface and a reference to our frames context.
        let e = unsafe { ffi::av_hwframe_get_buffer(self.frames, f.as_mut_ptr(), 0) };
        if e < 0 {
            return Err(format!("no free GPU picture for the encoder: {}", ff::Error::from(e)));
        }
        Ok(f)
    }

    /// (luma, chroma) device pointers and pitches of a picture from [`DeviceFrames::picture`].
    pub fn planes(f: &ff::frame::Video) -> [(u64, usize); 2] {
        // SAFETY: reads two pointers and pitches of a frame we hold; no pixel is touched.
        unsafe {
            let p = f.as_ptr();
            [((*p).data[0] as u64, (*p).linesize[0] as usize), ((*p).data[1] as u64, (*p).linesize[1] as usize)]
        }
    }

    /// Whether `encoder` takes these pictures: one is encoded by a scratch
    /// encoder (nothing is written anywhere), so a refusal that only shows
    /// when the first picture is sent (NVENC maps its input then) is known
    /// before a file is started.
    pub fn try_encoder(&self, encoder: &ChosenEncoder, color: ColorInfo) -> Result<(), String> {
        let tb = ff::Rational::new(1, 25);
        let mut enc = open_encoder(&encoder.name, &encoder.options, self.width, self.height, tb, false, Some((self, color)))?;
        let mut pic = self.picture()?;
        pic.set_pts(Some(0));
        let fail = |e: ff::Error| format!("{} refused a picture in device memory: {e}", encoder.name);
        enc.send_frame(&pic).map_err(fail)?;
        enc.send_eof().map_err(fail)?;
        let mut packet = ff::Packet::empty();
        loop {
            match enc.receive_packet(&mut packet) {
                Ok(()) => {}
                Err(ff::Error::Eof) => return Ok(()),
                Err(e) => return Err(fail(e)),
            }
        }
    }

    /// Copy a host NV12 picture `src` of this size into the device picture `dst`.
    pub fn upload(dst: &mut ff::frame::Video, src: &ff::frame::Video) -> Result<(), String> {
        // SAFETY: `dst` is a CUDA frame from this pool and `src` a host NV12
        // frame of the same size; av_hwframe_transfer_data copies between them
        // in the frames context's CUDA context and checks both.
        let e = unsafe { ffi::av_hwframe_transfer_data(dst.as_mut_ptr(), src.as_ptr(), 0) };
        if e < 0 { Err(format!("cannot copy a picture to the GPU: {}", ff::Error::from(e))) } else { Ok(()) }
    }
}

impl Drop for DeviceFrames {
    fn drop(&mut self) {
        // SAFETY: we hold one reference, released once.
        unsafe { ffi::av_buffer_unref(&mut self.frames) };
    }
}
