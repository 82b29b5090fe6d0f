//! CPU hot paths: preprocess (scale + convert + normalise), the DB
//! postprocess, buffer pool reuse and channel hand-off.

use std::hint::black_box;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use ffmpeg_next::format::Pixel;

use infer_stream::backend::ffmpeg::{Scaler, copy_to_image, init, sws_flags};
use infer_stream::config::{Interpolation, Layout, TextDetectionConfig};
use infer_stream::frame::{Letterbox, Pool};
use infer_stream::stages::postprocess::db::{DbScratch, detect};
use infer_stream::stages::postprocess::nms::{Detection, nms};
use infer_stream::stages::preprocess::{NormTable, normalize_into};

/// A YUV 4:2:0 frame with a gradient, as a decoder would hand it over.
fn frame(w: u32, h: u32) -> ffmpeg_next::frame::Video {
    init();
    let mut f = ffmpeg_next::frame::Video::new(Pixel::YUV420P, w, h);
    for p in 0..3 {
        let stride = f.stride(p);
        for (i, b) in f.data_mut(p).iter_mut().enumerate() {
            *b = ((i % stride) as u32 * 255 / stride as u32) as u8 ^ (p as u8 * 40);
        }
    }
    f
}

fn preprocess(c: &mut Criterion) {
    let mut g = c.benchmark_group("preprocess");
    let table = NormTable::new(1.0 / 255.0, [0.485, 0.456, 0.406], [0.229, 0.224, 0.225], 114);
    for (name, w, h) in [("720p", 1280, 720), ("1080p", 1920, 1080)] {
        let pool = Pool::<u8>::new(4);
        let img = copy_to_image(&frame(w, h), &pool).unwrap();
        let lb = Letterbox::fit(w, h, 640, 640);
        let mut scaler = Scaler::new(&img, lb.new_w, lb.new_h, Pixel::RGB24, sws_flags(Interpolation::Bilinear)).unwrap();
        let mut rgb = vec![0u8; (lb.new_w * lb.new_h * 3) as usize];
        let mut out = vec![0f32; 3 * 640 * 640];
        g.throughput(Throughput::Elements(1));
        g.bench_function(format!("{name} -> 640x640 letterbox + normalise"), |b| {
            b.iter(|| {
                scaler.run(black_box(&img), &mut rgb).unwrap();
                normalize_into(&rgb, &lb, &table, Layout::Nchw, &mut out);
                black_box(&out);
            })
        });
        g.bench_function(format!("{name} decode copy into pool"), |b| {
            let f = frame(w, h);
            b.iter(|| black_box(copy_to_image(&f, &pool).unwrap()))
        });
    }
    g.finish();
}

fn db_postprocess(c: &mut Criterion) {
    // A 640x384 map with 12 text-like regions.
    let (w, h) = (640, 384);
    let mut prob = vec![0.02f32; w * h];
    for k in 0..12 {
        let (x0, y0) = (20 + (k % 3) * 200, 20 + (k / 3) * 90);
        for y in y0..y0 + 30 {
            for x in x0..x0 + 160 {
                prob[y * w + x] = 0.9;
            }
        }
    }
    let cfg = TextDetectionConfig::default();
    let lb = Letterbox::fit(1280, 720, 640, 384);
    let mut scratch = DbScratch::default();
    c.bench_function("db postprocess 640x384, 12 boxes", |b| {
        b.iter(|| {
            let boxes = detect(black_box(&prob), w, h, &cfg, &lb, &mut scratch);
            assert_eq!(boxes.len(), 12);
            black_box(boxes)
        })
    });
}

fn nms_bench(c: &mut Criterion) {
    // 8400 candidates (a 640x640 YOLOv8 output) over 80 classes, in clusters that overlap.
    let mut rng = 0x2545_f491_4f6c_dd1du64;
    let mut next = || {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        (rng >> 11) as f32 / (1u64 << 53) as f32
    };
    let dets: Vec<Detection> = (0..8400)
        .map(|i| {
            let (cx, cy) = ((i % 40) as f32 * 16.0 + next() * 8.0, (i / 40 % 40) as f32 * 16.0 + next() * 8.0);
            let (w, h) = (20.0 + next() * 40.0, 20.0 + next() * 40.0);
            Detection { bbox: [cx - w / 2.0, cy - h / 2.0, cx + w / 2.0, cy + h / 2.0], score: next(), class: (i % 80) as u32 }
        })
        .collect();
    c.bench_function("nms 8400 candidates, 80 classes", |b| {
        b.iter(|| {
            let mut v = dets.clone();
            black_box(nms(&mut v, 0.45, 300))
        })
    });
}

fn plumbing(c: &mut Criterion) {
    let pool = Pool::<f32>::new(8);
    c.bench_function("pool get+return 640x640x3 f32", |b| b.iter(|| black_box(pool.get(3 * 640 * 640))));
    let (tx, rx) = crossbeam_channel::bounded::<std::sync::Arc<Vec<u8>>>(8);
    let payload = std::sync::Arc::new(vec![0u8; 1280 * 720 * 3 / 2]);
    c.bench_function("channel hand-off (Arc frame)", |b| {
        b.iter(|| {
            tx.send(payload.clone()).unwrap();
            black_box(rx.recv().unwrap())
        })
    });
}

criterion_group!(benches, preprocess, db_postprocess, nms_bench, plumbing);
criterion_main!(benches);
