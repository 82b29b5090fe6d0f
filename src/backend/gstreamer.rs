//! GStreamer, the second decode backend: a launch line ending in an
//! `appsink`, whose samples become the same pooled host images FFmpeg's
//! decoder gives.

use std::path::Path;
use std::time::Duration;

use gstreamer as gst;
use gstreamer::prelude::*;
use gstreamer_app as gst_app;
use gstreamer_video as gst_video;

use crate::frame::{ColorInfo, Image, Matrix, PixelFormat, Pool, Storage};

/// Initialise GStreamer and report its version.
pub fn version() -> Result<String, String> {
    gst::init().map_err(|e| e.to_string())?;
    Ok(gst::version_string().to_string())
}

/// Whether GStreamer's NVIDIA codec elements (nvcodec plugin) are installed.
pub fn has_nvcodec() -> bool {
    version().is_ok() && gst::ElementFactory::find("nvh264dec").is_some()
}

/// What the appsink hands out: formats the preprocess reads directly.
const CAPS: &str = "video/x-raw,format=(string){I420,NV12,RGB,BGR,GRAY8}";

/// The full launch line for `uri` (a path or URL) and an optional user
/// fragment (`{uri}` replaced); an appsink named `sink` is added unless the
/// fragment ends in one.
pub fn launch_line(uri: &str, fragment: Option<&str>) -> String {
    let as_uri = if uri.contains("://") {
        uri.to_string()
    } else {
        let abs = std::fs::canonicalize(uri).unwrap_or_else(|_| Path::new(uri).to_path_buf());
        format!("file://{}", abs.display())
    };
    let decode = match fragment {
        Some(f) => f.replace("{uri}", if f.contains("location={uri}") { uri } else { &as_uri }),
        None => format!("uridecodebin uri=\"{as_uri}\""),
    };
    if decode.contains("appsink") { decode } else { format!("{decode} ! videoconvert ! {CAPS} ! appsink name=sink sync=false") }
}

/// Why a launch line cannot be built.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LineError {
    /// Elements it names that are not installed.
    Missing(Vec<String>),
    /// Any other error (syntax, a bad property, GStreamer itself).
    Invalid(String),
}

/// Parse `line` into a pipeline without starting it (nothing is opened):
/// the elements it names exist and its syntax holds.
pub fn check_line(line: &str) -> Result<(), LineError> {
    gst::init().map_err(|e| LineError::Invalid(e.to_string()))?;
    let mut ctx = gst::ParseContext::new();
    match gst::parse::launch_full(line, Some(&mut ctx), gst::ParseFlags::FATAL_ERRORS) {
        Ok(el) => {
            let _ = el.set_state(gst::State::Null);
            Ok(())
        }
        Err(e) => {
            let missing = ctx.missing_elements();
            Err(if missing.is_empty() { LineError::Invalid(e.to_string()) } else { LineError::Missing(missing) })
        }
    }
}

/// What [`GstDecoder::next`] gives: `None` at the end of the stream,
/// `Some(None)` when nothing came in time, else a frame and its pts (ns).
pub type Pulled = Option<Option<(Image, Option<i64>)>>;

/// A running GStreamer pipeline and its appsink.
pub struct GstDecoder {
    pipeline: gst::Pipeline,
    sink: gst_app::AppSink,
    /// The line it runs, for messages.
    pub line: String,
    /// The format of the samples, parsed from their caps when the caps change.
    negotiated: Option<Negotiated>,
    /// Times the caps were parsed (the first caps, then each change).
    caps_seen: u64,
}

/// What a sample's caps say about its buffer, parsed once per caps.
struct Negotiated {
    caps: gst::Caps,
    width: u32,
    height: u32,
    format: PixelFormat,
    offsets: [usize; 4],
    strides: [i32; 4],
    color: ColorInfo,
}

impl Negotiated {
    fn parse(caps: &gst::CapsRef) -> Result<Self, String> {
        let info = gst_video::VideoInfo::from_caps(caps).map_err(|e| format!("caps {caps}: {e}"))?;
        let format: PixelFormat = match info.format() {
            gst_video::VideoFormat::I420 => PixelFormat::YUV420P,
            gst_video::VideoFormat::Nv12 => PixelFormat::NV12,
            gst_video::VideoFormat::Rgb => PixelFormat::RGB24,
            gst_video::VideoFormat::Bgr => PixelFormat::BGR24,
            gst_video::VideoFormat::Gray8 => PixelFormat::GRAY8,
            f => return Err(format!("appsink gives {f:?}; use caps {CAPS}")),
        };
        let (mut offsets, mut strides) = ([0usize; 4], [0i32; 4]);
        for (i, (o, s)) in info.offset().iter().zip(info.stride()).enumerate().take(4) {
            offsets[i] = *o;
            strides[i] = *s;
        }
        let c = info.colorimetry();
        let matrix = match c.matrix() {
            gst_video::VideoColorMatrix::Bt709 => Matrix::Bt709,
            gst_video::VideoColorMatrix::Bt601 => Matrix::Bt601,
            gst_video::VideoColorMatrix::Bt2020 => Matrix::Bt2020,
            _ => Matrix::Unspecified,
        };
        let full_range = c.range() == gst_video::VideoColorRange::Range0_255 || !matches!(format, PixelFormat::YUV420P | PixelFormat::NV12);
        Ok(Negotiated {
            caps: caps.to_owned(),
            width: info.width(),
            height: info.height(),
            format,
            offsets,
            strides,
            color: ColorInfo { matrix, full_range },
        })
    }
}

impl GstDecoder {
    /// Build and start the pipeline; errors (unknown element, bad syntax, no
    /// appsink, a file that cannot be opened) come back as text.
    pub fn open(line: &str) -> Result<Self, String> {
        gst::init().map_err(|e| e.to_string())?;
        let el = gst::parse::launch(line).map_err(|e| format!("GStreamer cannot build `{line}`: {e}"))?;
        let pipeline = el.downcast::<gst::Pipeline>().map_err(|_| format!("`{line}` is not a pipeline"))?;
        let sink = pipeline
            .iterate_sinks()
            .into_iter()
            .flatten()
            .find_map(|e| e.downcast::<gst_app::AppSink>().ok())
            .ok_or_else(|| format!("`{line}` has no appsink"))?;
        sink.set_max_buffers(4);
        pipeline.set_state(gst::State::Paused).map_err(|_| Self::bus_error(&pipeline).unwrap_or_else(|| "cannot start".into()))?;
        // Prerolling opens the input: a missing file or a bad stream fails here, before the run.
        let (r, _, _) = pipeline.state(gst::ClockTime::from_seconds(10));
        if r.is_err() {
            let why = Self::bus_error(&pipeline).unwrap_or_else(|| "the pipeline did not start".into());
            let _ = pipeline.set_state(gst::State::Null);
            return Err(why);
        }
        pipeline.set_state(gst::State::Playing).map_err(|_| Self::bus_error(&pipeline).unwrap_or_else(|| "cannot play".into()))?;
        Ok(GstDecoder { pipeline, sink, line: line.to_string(), negotiated: None, caps_seen: 0 })
    }

    fn bus_error(pipeline: &gst::Pipeline) -> Option<String> {
        let bus = pipeline.bus()?;
        while let Some(msg) = bus.pop_filtered(&[gst::MessageType::Error]) {
            if let gst::MessageView::Error(e) = msg.view() {
                return Some(format!("{}{}", e.error(), e.debug().map(|d| format!(" ({d})")).unwrap_or_default()));
            }
        }
        None
    }

    /// The next frame (pts in nanoseconds), `Ok(None)` at the end of the stream,
    /// or `Err` when the pipeline failed. Waits at most `wait` per call when
    /// nothing comes (`Ok(Some(None))`: try again).
    pub fn next(&mut self, pool: &Pool<u8>, wait: Duration) -> Result<Pulled, String> {
        if let Some(e) = Self::bus_error(&self.pipeline) {
            return Err(e);
        }
        let Some(sample) = self.sink.try_pull_sample(gst::ClockTime::from_nseconds(wait.as_nanos() as u64)) else {
            return if self.sink.is_eos() { Ok(None) } else { Ok(Some(None)) };
        };
        let caps = sample.caps().ok_or("sample without caps")?;
        // Samples of one negotiation share their caps (`gst_caps_is_equal` sees
        // the same pointer at once): parsed again only when they change mid-stream.
        if self.negotiated.as_ref().is_none_or(|n| n.caps.as_ref() != caps) {
            let n = Negotiated::parse(caps)?;
            self.caps_seen += 1;
            tracing::debug!("GStreamer caps #{}: {caps}", self.caps_seen);
            self.negotiated = Some(n);
        }
        let n = self.negotiated.as_ref().expect("parsed above");
        let buffer = sample.buffer().ok_or("sample without buffer")?;
        let map = buffer.map_readable().map_err(|e| e.to_string())?;
        let mut buf = pool.get(map.len());
        buf.copy_from_slice(map.as_slice());
        let image = Image {
            width: n.width,
            height: n.height,
            format: n.format,
            color: n.color,
            offsets: n.offsets,
            strides: n.strides,
            storage: Storage::Host(buf),
        };
        let pts = buffer.pts().map(|t| t.nseconds() as i64);
        Ok(Some(Some((image, pts))))
    }
}

impl Drop for GstDecoder {
    fn drop(&mut self) {
        let _ = self.pipeline.set_state(gst::State::Null);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn initialises() {
        let v = version().expect("GStreamer initialises");
        assert!(v.starts_with("GStreamer "), "{v}");
    }

    #[test]
    fn launch_lines_get_an_appsink_and_a_uri() {
        assert_eq!(
            launch_line("rtsp://cam/x", None),
            format!("uridecodebin uri=\"rtsp://cam/x\" ! videoconvert ! {CAPS} ! appsink name=sink sync=false")
        );
        let l = launch_line("/v.mp4", Some("filesrc location={uri} ! qtdemux ! avdec_h264"));
        assert!(l.starts_with("filesrc location=/v.mp4 ! qtdemux ! avdec_h264 ! videoconvert"), "{l}");
        assert_eq!(launch_line("x", Some("videotestsrc ! appsink name=s")), "videotestsrc ! appsink name=s");
    }

    #[test]
    fn test_pattern_frames_come_out_as_images() {
        let pool = Pool::new(4);
        let mut d = GstDecoder::open(&launch_line("-", Some("videotestsrc num-buffers=5 ! video/x-raw,width=64,height=48"))).unwrap();
        let mut n = 0;
        while let Some(f) = d.next(&pool, Duration::from_millis(200)).unwrap() {
            if let Some((img, _)) = f {
                assert_eq!((img.width, img.height), (64, 48));
                n += 1;
            }
        }
        assert_eq!(n, 5);
        assert_eq!(d.caps_seen, 1, "one negotiation: its caps parsed once");
        let e = GstDecoder::open("nosuchelement ! appsink").err().unwrap();
        assert!(e.contains("nosuchelement"), "{e}");
    }

    /// Caps that change mid-stream (a new size, a new format) are parsed
    /// again, and each frame is described by its own caps; caps equal to the
    /// last ones are not parsed again.
    #[test]
    fn caps_changes_mid_stream_give_frames_their_own_format() {
        let pool = Pool::new(4);
        let mut d = GstDecoder::open("appsrc name=src is-live=true format=time ! appsink name=sink sync=false").unwrap();
        let src = d.pipeline.by_name("src").unwrap().downcast::<gst_app::AppSrc>().unwrap();
        let caps = |format: &str, w: i32, h: i32| {
            gst::Caps::builder("video/x-raw")
                .field("format", format)
                .field("width", w)
                .field("height", h)
                .field("framerate", gst::Fraction::new(25, 1))
                .build()
        };
        // (format, width, height, bytes per frame)
        let (i420_bytes, rgb_bytes) = (64 * 48 * 3 / 2, 32 * 24 * 3);
        let plan = [
            ("I420", 64, 48, i420_bytes),
            ("I420", 64, 48, i420_bytes),
            ("RGB", 32, 24, rgb_bytes),
            ("RGB", 32, 24, rgb_bytes),
            ("I420", 64, 48, i420_bytes),
        ];
        for (i, (f, w, h, size)) in plan.iter().enumerate() {
            let mut buffer = gst::Buffer::with_size(*size).unwrap();
            buffer.get_mut().unwrap().set_pts(gst::ClockTime::from_mseconds(40 * i as u64));
            // A new caps object each time: equal caps are still recognised as equal.
            src.push_sample(&gst::Sample::builder().buffer(&buffer).caps(&caps(f, *w, *h)).build()).unwrap();
        }
        src.end_of_stream().unwrap();
        let mut got = Vec::new();
        while let Some(f) = d.next(&pool, Duration::from_millis(500)).unwrap() {
            if let Some((img, _)) = f {
                got.push((img.format, img.width, img.height, img.strides[0]));
            }
        }
        let (i420, rgb) = ((PixelFormat::YUV420P, 64, 48, 64), (PixelFormat::RGB24, 32, 24, 96));
        assert_eq!(got, [i420, i420, rgb, rgb, i420]);
        assert_eq!(d.caps_seen, 3, "parsed at the start and at each of the two changes");
    }
}
