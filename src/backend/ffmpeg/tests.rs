//! Input names, swscale colour output and encoder options.

use std::path::Path;

use ff::format::Pixel;
use ffmpeg_next as ff;

use super::encode::encoder_options;
use super::{EncoderSettings, Scaler, init, shown_name, sws_flags};
use crate::frame::{ColorInfo, Image, Matrix, Pool};

#[test]
fn shown_paths_are_tidied_by_their_text() {
    let n = |p: &str| shown_name(Path::new(p));
    assert_eq!(n("pipelines/../samples/a.mp4"), "samples/a.mp4");
    assert_eq!(n("./../samples/./a.mp4"), "../samples/a.mp4");
    assert_eq!(n("tests/data/../../samples/x.mp4"), "samples/x.mp4");
    assert_eq!(n("/data/../../clips/a.mp4"), "/clips/a.mp4");
    assert_eq!(n("a/.."), ".");
    assert_eq!(n("-"), "stdin");
    assert_eq!(n("rtsp://u:pw@cam/../x"), "rtsp://u:***@cam/../x");
}

fn settings(codec: &str, preset: Option<&str>) -> EncoderSettings {
    EncoderSettings { codec: codec.into(), preset: preset.map(str::to_string), crf: Some(20) }
}

/// A YUV output in a chosen matrix and range (what a device-mode video
/// sink uploads, tagged with its stream's colour): white and a red are
/// the textbook codes of each, and the default stays BT.601 limited.
#[test]
fn scaler_writes_yuv_in_the_colour_asked_for() {
    use crate::frame::convert::rgb_to_yuv;
    let (w, h) = (16u32, 8u32);
    let pool = Pool::<u8>::new(1);
    let paint = |rgb: [u8; 3]| {
        let mut buf = pool.get((w * h * 3) as usize);
        buf.chunks_exact_mut(3).for_each(|p| p.copy_from_slice(&rgb));
        Image::rgb24(w, h, buf)
    };
    init();
    let flags = sws_flags(crate::config::Interpolation::Bilinear);
    for to in [
        None,
        Some(ColorInfo { matrix: Matrix::Bt709, full_range: false }),
        Some(ColorInfo { matrix: Matrix::Bt709, full_range: true }),
        Some(ColorInfo { matrix: Matrix::Bt601, full_range: true }),
    ] {
        for rgb in [[255u8, 255, 255], [200, 30, 40]] {
            let src = paint(rgb);
            let mut s = Scaler::new_to(&src, w, h, Pixel::NV12, flags, to).unwrap();
            assert!(s.fits_to(&src, w, h, Pixel::NV12, to) && (to.is_none() || !s.fits(&src, w, h, Pixel::NV12)));
            let mut out = ff::frame::Video::new(Pixel::NV12, w, h);
            s.run_into(&src, &mut out).unwrap();
            let want = rgb_to_yuv(rgb, to.unwrap_or(ColorInfo { matrix: Matrix::Bt601, full_range: false }));
            let got = [out.data(0)[0], out.data(1)[0], out.data(1)[1]];
            for k in 0..3 {
                assert!((got[k] as i32 - want[k] as i32).abs() <= 1, "{to:?} {rgb:?}: got {got:?}, want {want:?}");
            }
        }
    }
}

/// `auto` with a libx264 preset gives NVENC its nearest preset (NVENC
/// refuses libx264's names); a preset named for NVENC itself is kept as written.
#[test]
fn auto_translates_libx264_presets_for_nvenc() {
    let get = |o: Vec<(String, String)>, k: &str| o.into_iter().find(|(n, _)| n == k).map(|(_, v)| v);
    assert_eq!(get(encoder_options("h264_nvenc", &settings("auto", Some("veryfast"))), "preset").as_deref(), Some("p2"));
    assert_eq!(get(encoder_options("h264_nvenc", &settings("auto", Some("veryslow"))), "preset").as_deref(), Some("p7"));
    assert_eq!(get(encoder_options("h264_nvenc", &settings("auto", Some("p5"))), "preset").as_deref(), Some("p5"));
    assert_eq!(get(encoder_options("h264_nvenc", &settings("auto", None)), "preset").as_deref(), Some("p4"));
    assert_eq!(get(encoder_options("h264_nvenc", &settings("h264_nvenc", Some("veryfast"))), "preset").as_deref(), Some("veryfast"));
    assert_eq!(get(encoder_options("h264_nvenc", &settings("auto", Some("veryfast"))), "cq").as_deref(), Some("20"));
    // libx264 keeps its own names.
    assert_eq!(get(encoder_options("libx264", &settings("auto", Some("veryfast"))), "preset").as_deref(), Some("veryfast"));
}
