use super::session::probe_run;
use super::*;
#[cfg(feature = "cuda")]
use crate::config::ProviderSpec;
use crate::config::TensorRtOptions;

/// Bindings on the real PP-OCR detector (CPU, host memory): outputs equal
/// plain runs, one binding per input shape however many runs, stacked
/// parts land in their slots, and the least recently used shape goes.
#[test]
fn bindings_are_made_once_per_shape_and_match_plain_runs() {
    let (lib, _) = default_library();
    if !lib.exists() {
        panic!("{} is missing: run scripts/setup.sh first", lib.display());
    }
    let rt = runtime(None).unwrap();
    let model = Path::new(env!("CARGO_MANIFEST_DIR")).join("models/ppocr/ch_PP-OCRv4_det_infer.onnx");
    let mut m = open_session(rt, &model, &SessionOptions::cpu_single()).unwrap();
    let (input, outputs) = (m.inputs[0].name.clone(), m.outputs.iter().map(|o| o.name.clone()).collect::<Vec<_>>());
    let mut b = Bindings::new(&m.session, m.provider, BindMemory::Host, &input, outputs.clone(), 2).unwrap();
    let image = |seed: u32, n: usize| -> Vec<f32> {
        (0..n).map(|i| (((i as u32).wrapping_mul(2654435761).wrapping_add(seed) >> 16) % 255) as f32 / 127.5 - 1.0).collect()
    };
    let plain = |m: &mut ModelSession, shape: &[usize], data: &[f32]| -> Vec<f32> {
        let t = ort::value::TensorRef::from_array_view((shape.to_vec(), data)).unwrap();
        let o = m.session.run(ort::inputs![input.as_str() => t]).unwrap();
        o[0].try_extract_tensor::<f32>().unwrap().1.to_vec()
    };
    let one = [1usize, 3, 64, 96];
    let n1: usize = one.iter().product();
    for seed in 0..4 {
        let x = image(seed, n1);
        let got = b.run(&mut m.session, &one, &[Src::Host(&x)], |_, n| vec![0f32; n]).unwrap();
        assert_eq!(got[0].1, vec![1, 1, 64, 96]);
        assert_eq!(got[0].2, plain(&mut m, &one, &x), "run {seed}");
    }
    assert_eq!(b.created(), 1, "one binding for one shape");
    // Two frames stacked into a batch of two: each half equals its own run.
    let (x, y) = (image(7, n1), image(8, n1));
    let two = [2usize, 3, 64, 96];
    let got = b.run(&mut m.session, &two, &[Src::Host(&x), Src::Host(&y)], |_, n| vec![0f32; n]).unwrap();
    let per = got[0].2.len() / 2;
    let (px, py) = (plain(&mut m, &one, &x), plain(&mut m, &one, &y));
    let close = |a: &[f32], b: &[f32]| a.iter().zip(b).all(|(p, q)| (p - q).abs() < 1e-5);
    assert!(close(&got[0].2[..per], &px) && close(&got[0].2[per..], &py), "stacked halves differ from single runs");
    assert_eq!(b.created(), 2);
    // A third shape evicts the oldest (capacity 2); coming back rebinds it.
    let three = [1usize, 3, 32, 32];
    b.run(&mut m.session, &three, &[Src::Host(&image(1, 3 * 32 * 32))], |_, n| vec![0f32; n]).unwrap();
    b.run(&mut m.session, &two, &[Src::Host(&x), Src::Host(&y)], |_, n| vec![0f32; n]).unwrap();
    assert_eq!(b.created(), 3, "the batch shape was still bound");
    b.run(&mut m.session, &one, &[Src::Host(&x)], |_, n| vec![0f32; n]).unwrap();
    assert_eq!(b.created(), 4, "the single-frame shape was evicted and bound again");
    // Too few values for the shape is an error, not a read past the end.
    let e = b.run(&mut m.session, &two, &[Src::Host(&x)], |_, n| vec![0f32; n]).unwrap_err();
    assert!(e.contains("needs 36864 values, got 18432"), "{e}");
}

/// Outputs whose shape changes with the data (tests/models/positives.onnx:
/// the input's values above 0): the binding finds out on the run that
/// changes it, binds them anew from then on, and every run is right.
#[test]
fn outputs_whose_shape_follows_the_data_are_bound_anew() {
    let rt = runtime(None).unwrap();
    let model = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/models/positives.onnx");
    let mut m = open_session(rt, &model, &SessionOptions::cpu_single()).unwrap();
    let mut b = Bindings::new(&m.session, m.provider, BindMemory::Host, "x", vec!["y".into()], 2).unwrap();
    for x in
        [[1.0, -1.0, 2.0, 3.0, -5.0, 0.0, 4.0, 5.0], [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0], [0.5, -2.0, 0.0, 0.0, 0.0, 0.0, 0.0, 9.0]]
    {
        let want: Vec<f32> = x.iter().copied().filter(|v| *v > 0.0).collect::<Vec<f32>>();
        let got = b.run(&mut m.session, &[1, 8], &[Src::Host(&x)], |_, n| vec![0f32; n]).unwrap();
        assert_eq!((&got[0].1, &got[0].2), (&vec![1, want.len()], &want), "input {x:?}");
    }
    assert_eq!(b.created(), 1);
}

/// The CUDA provider with inputs and outputs bound in device memory, on the
/// real PP-OCR detector: host and device sources give the same maps as
/// the provider's plain runs, which agree with the CPU provider; one
/// binding per shape. Runs where a GPU and an ONNX Runtime with the CUDA
/// provider are present (scripts/gpu-check.sh sets both up); skipped with
/// the reason elsewhere.
#[cfg(feature = "cuda")]
#[test]
fn gpu_device_bindings_on_the_cuda_provider_match_the_cpu() {
    use crate::backend::cuda;
    if !cuda::probe().driver {
        eprintln!("skipped: no CUDA driver here");
        return;
    }
    let rt = runtime(None).unwrap();
    if !rt.available_providers().contains(&ProviderName::Cuda) {
        eprintln!("skipped: {} has no CUDA provider (the CPU build of ONNX Runtime)", rt.library.display());
        return;
    }
    let gpu = cuda::Gpu::shared(0).unwrap();
    // A test binary carried to a GPU host finds the models through INFER_STREAM_TEST_MODELS.
    let models =
        std::env::var_os("INFER_STREAM_TEST_MODELS").map_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("models"), PathBuf::from);
    let model = models.join("ppocr/ch_PP-OCRv4_det_infer.onnx");
    // TF32 off: compared with the CPU provider below.
    let cuda_opts = SessionOptions {
        providers: vec![ProviderSpec { required: true, tf32: false, ..ProviderSpec::named(ProviderName::Cuda) }],
        ..SessionOptions::cpu_single()
    };
    let mut g = open_session(rt, &model, &cuda_opts).unwrap();
    let mut c = open_session(rt, &model, &SessionOptions::cpu_single()).unwrap();
    assert_eq!(g.provider, ProviderName::Cuda);
    let (input, outputs) = (g.inputs[0].name.clone(), g.outputs.iter().map(|o| o.name.clone()).collect::<Vec<_>>());
    let mut b = Bindings::new(&g.session, g.provider, BindMemory::Device(gpu.clone()), &input, outputs, 2).unwrap();
    let plain = |m: &mut ModelSession, shape: &[usize], data: &[f32]| -> Vec<f32> {
        let t = ort::value::TensorRef::from_array_view((shape.to_vec(), data)).unwrap();
        let o = m.session.run(ort::inputs![input.as_str() => t]).unwrap();
        o[0].try_extract_tensor::<f32>().unwrap().1.to_vec()
    };
    let max_diff = |a: &[f32], b: &[f32]| {
        assert_eq!(a.len(), b.len());
        a.iter().zip(b).map(|(p, q)| (p - q).abs()).fold(0f32, f32::max)
    };
    let shape = [1usize, 3, 384, 640];
    let n: usize = shape.iter().product();
    let mut worst = (0f32, 0f32);
    let image = |seed: u32| -> Vec<f32> {
        (0..n).map(|i| (((i as u32).wrapping_mul(2654435761).wrapping_add(seed) >> 16) % 255) as f32 / 127.5 - 1.0).collect()
    };
    for seed in 0..4u32 {
        let x = image(seed);
        let dev = gpu.alloc(n * 4).unwrap();
        gpu.upload(&x, dev.ptr).unwrap();
        let from_host = b.run(&mut g.session, &shape, &[Src::Host(&x)], |_, n| vec![0f32; n]).unwrap();
        let from_dev = b.run(&mut g.session, &shape, &[Src::Device(&dev, n)], |_, n| vec![0f32; n]).unwrap();
        let (on_cuda, on_cpu) = (plain(&mut g, &shape, &x), plain(&mut c, &shape, &x));
        assert_eq!(from_dev[0].1, vec![1, 1, 384, 640]);
        let (d_host, d_dev) = (max_diff(&from_host[0].2, &on_cuda), max_diff(&from_dev[0].2, &on_cuda));
        let d_cpu = max_diff(&on_cuda, &on_cpu);
        eprintln!("run {seed}: bound host input vs plain {d_host:e}, bound device input vs plain {d_dev:e}, CUDA vs CPU {d_cpu:e}");
        assert!(d_host < 1e-4 && d_dev < 1e-4, "bound runs differ from the provider's plain run");
        worst = (worst.0.max(d_dev), worst.1.max(d_cpu));
    }
    // A probability map: float sums in another order move values slightly.
    assert!(worst.1 < 2e-2, "CUDA and CPU providers differ by {}", worst.1);
    assert_eq!(b.created(), 1, "one binding for one shape");
    // A batch of two device tensors stacked into one bound input, then a
    // partial batch again: each frame's slice equals its own run.
    let (x, y) = (image(11), image(12));
    let (dx, dy) = (gpu.alloc(n * 4).unwrap(), gpu.alloc(n * 4).unwrap());
    gpu.upload(&x, dx.ptr).unwrap();
    gpu.upload(&y, dy.ptr).unwrap();
    let two = [2usize, 3, 384, 640];
    let got = b.run(&mut g.session, &two, &[Src::Device(&dx, n), Src::Device(&dy, n)], |_, n| vec![0f32; n]).unwrap();
    assert_eq!(got[0].1, vec![2, 1, 384, 640]);
    let per = got[0].2.len() / 2;
    let (px, py) = (plain(&mut g, &shape, &x), plain(&mut g, &shape, &y));
    let (d0, d1) = (max_diff(&got[0].2[..per], &px), max_diff(&got[0].2[per..], &py));
    eprintln!("batch of two from device tensors: slices vs single runs {d0:e}, {d1:e}");
    assert!(d0 < 1e-4 && d1 < 1e-4, "stacked device batch differs from single runs");
    let again = b.run(&mut g.session, &shape, &[Src::Device(&dy, n)], |_, n| vec![0f32; n]).unwrap();
    assert!(max_diff(&again[0].2, &py) < 1e-4, "the single-frame binding after a batch");
    assert_eq!(b.created(), 2, "one binding per shape: [1,...] and [2,...]");
    // A device part that claims more values than its buffer holds is refused, not read past.
    let e = b.run(&mut g.session, &shape, &[Src::Device(&gpu.alloc(16).unwrap(), n)], |_, n| vec![0f32; n]).unwrap_err();
    assert!(e.contains("cannot hold"), "{e}");
    eprintln!("device bindings: worst difference to plain runs {:e}, CUDA vs CPU {:e}", worst.0, worst.1);
}

/// The first run a GPU provider's session gets before it is taken: zeros
/// of the probe shape into the named input (or the first); a shape the
/// model refuses is an error naming the shape, so the provider is not taken.
#[test]
fn probe_run_feeds_zeros_of_the_shape() {
    let rt = runtime(None).unwrap();
    let model = Path::new(env!("CARGO_MANIFEST_DIR")).join("models/ppocr/ch_PP-OCRv4_det_infer.onnx");
    let mut m = open_session(rt, &model, &SessionOptions::cpu_single()).unwrap();
    let input = m.inputs[0].name.clone();
    probe_run(&mut m.session, Some(&input), &[1, 3, 32, 32]).unwrap();
    probe_run(&mut m.session, None, &[1, 3, 32, 32]).unwrap();
    probe_run(&mut m.session, Some("no such input"), &[1, 3, 32, 32]).unwrap();
    let e = probe_run(&mut m.session, None, &[1, 5, 32, 32]).unwrap_err();
    assert!(e.starts_with("first run on [1, 5, 32, 32] failed:"), "{e}");
}

/// The CPU build of ONNX Runtime cannot register the GPU providers, and says why.
#[test]
fn register_error_says_why_a_provider_cannot_load() {
    let rt = runtime(None).unwrap();
    assert_eq!(rt.register_error(ProviderName::Cpu), None);
    if rt.available_providers().contains(&ProviderName::Cuda) {
        eprintln!("skipped: {} has the CUDA provider", rt.library.display());
        return;
    }
    for p in [ProviderName::Cuda, ProviderName::Tensorrt] {
        let e = rt.register_error(p).unwrap_or_else(|| panic!("{p} registered on the CPU build"));
        assert!(!e.is_empty());
    }
}

#[test]
fn engine_cache_is_keyed_by_model_shapes_and_version() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (dir.path().join("a.onnx"), dir.path().join("b.onnx"));
    std::fs::write(&a, b"model a").unwrap();
    std::fs::write(&b, b"model b").unwrap();
    let root = Path::new("cache");
    let o = TensorRtOptions { opt_shapes: Some("x:1x3x384x640".into()), ..Default::default() };
    let key = |m: &Path, o: &TensorRtOptions, v: &str| engine_cache_dir(root, m, o, v).unwrap();
    assert_eq!(key(&a, &o, "1.31.1"), key(&a, &o, "1.31.1"));
    assert_ne!(key(&a, &o, "1.31.1"), key(&b, &o, "1.31.1"), "model");
    assert_ne!(
        key(&a, &o, "1.31.1"),
        key(&a, &TensorRtOptions { opt_shapes: Some("x:1x3x640x640".into()), ..Default::default() }, "1.31.1"),
        "shapes"
    );
    assert_ne!(key(&a, &o, "1.31.1"), key(&a, &TensorRtOptions { fp16: true, ..o.clone() }, "1.31.1"), "precision");
    assert_ne!(key(&a, &o, "1.31.1"), key(&a, &o, "1.32.0"), "runtime version");
    assert!(key(&a, &o, "1.31.1").starts_with(root) && key(&a, &o, "1.31.1").to_string_lossy().ends_with("-ort1.31.1"));
}
