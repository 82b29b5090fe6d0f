//! Quarter turns of host pictures (`picture`).

use ff::ffi;
use ff::format::Pixel;
use ffmpeg_next as ff;

use super::{turn_image, turn_picture};
use crate::frame::{ColorInfo, Image, Matrix, Pool, Storage};

/// A packed host image of `fmt`, `w` x `h`, its bytes `data`.
fn image(fmt: Pixel, w: u32, h: u32, data: &[u8], pool: &Pool<u8>) -> Image {
    let f: ffi::AVPixelFormat = fmt.into();
    let mut buf = pool.get(data.len());
    buf.copy_from_slice(data);
    let (mut ptrs, mut strides) = ([std::ptr::null_mut::<u8>(); 4], [0i32; 4]);
    // SAFETY: plane pointers into `buf`, which holds the packed layout of this size (checked by the caller).
    let n = unsafe { ffi::av_image_fill_arrays(ptrs.as_mut_ptr(), strides.as_mut_ptr(), buf.as_ptr(), f, w as i32, h as i32, 1) };
    assert_eq!(n as usize, data.len());
    let base = buf.as_ptr() as usize;
    let offsets = ptrs.map(|p| if p.is_null() { 0 } else { p as usize - base });
    Image {
        width: w,
        height: h,
        format: fmt,
        color: ColorInfo { matrix: Matrix::Bt601, full_range: false },
        offsets,
        strides,
        storage: Storage::Host(buf),
    }
}

#[test]
fn a_quarter_turn_clockwise_puts_the_bottom_left_corner_top_left() {
    let pool = Pool::new(4);
    // 3x2 grey:  1 2 3 / 4 5 6  turned 90° clockwise is 2x3:  4 1 / 5 2 / 6 3
    let g = image(Pixel::GRAY8, 3, 2, &[1, 2, 3, 4, 5, 6], &pool);
    let t = turn_image(&g, 90, &pool).unwrap();
    assert_eq!((t.width, t.height, t.host().unwrap()), (2, 3, &[4, 1, 5, 2, 6, 3][..]));
    let t = turn_image(&g, 270, &pool).unwrap();
    assert_eq!((t.width, t.height, t.host().unwrap()), (2, 3, &[3, 6, 2, 5, 1, 4][..]));
    let t = turn_image(&g, 180, &pool).unwrap();
    assert_eq!((t.width, t.height, t.host().unwrap()), (3, 2, &[6, 5, 4, 3, 2, 1][..]));
}

/// NV12's chroma pairs move as one element; four quarter turns give the picture back.
#[test]
fn chroma_pairs_turn_whole_and_four_turns_are_none() {
    let pool = Pool::new(8);
    // 4x2 NV12: 8 luma bytes, one row of two (U, V) pairs.
    let data = [10, 11, 12, 13, 14, 15, 16, 17, 100, 200, 101, 201];
    let img = image(Pixel::NV12, 4, 2, &data, &pool);
    let t = turn_image(&img, 90, &pool).unwrap();
    assert_eq!((t.width, t.height), (2, 4));
    let chroma = &t.host().unwrap()[t.offsets[1]..];
    assert_eq!(chroma, [100, 200, 101, 201], "pairs kept whole, one per row of the turned picture");
    let mut back = img;
    for _ in 0..4 {
        back = turn_image(&back, 90, &pool).unwrap();
    }
    assert_eq!(back.host().unwrap(), data);
    let yuyv = image(Pixel::YUYV422, 2, 2, &[0; 8], &pool);
    assert!(turn_image(&yuyv, 90, &pool).is_err(), "4:2:2 cannot be turned a quarter in its own layout");
    assert!(turn_image(&yuyv, 180, &pool).is_err(), "nor can a layout whose pixels share their chroma");
    // Those are turned in 4:4:4: grey (Y 16 to 235, no colour) stays grey, turned.
    let mut data = [128u8; 8];
    for (i, y) in [16u8, 60, 180, 235].into_iter().enumerate() {
        data[i * 2] = y;
    }
    let yuyv = image(Pixel::YUYV422, 2, 2, &data, &pool);
    let t = turn_picture(&yuyv, 90, &pool).unwrap();
    assert_eq!((t.width, t.height, t.format), (2, 2, Pixel::YUV444P));
    let host = t.host().unwrap();
    assert_eq!(&host[..4], [180, 16, 235, 60], "luma turned clockwise");
    assert!(host[4..].iter().all(|c| c.abs_diff(128) <= 1), "no colour: {host:?}");
}
