//! The GPU path through the real binary. Where there is no GPU, the GPU
//! options must fail loudly (never fall back silently) and the GPU-only
//! checks say why they skip; on a GPU they run for real.

mod util;

use std::path::Path;

use util::*;

/// Does this machine have an NVIDIA GPU the binary can use? (`doctor --json`)
fn gpu() -> Option<String> {
    let o = bin().args(["doctor", "--json"]).output().unwrap();
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    (v["cuda"]["devices"].as_u64().unwrap_or(0) > 0).then(|| v["decode"].to_string())
}

/// `pipelines/gpu.toml` with the decode and preprocess placement changed, written into `dir`.
fn variant(dir: &Path, name: &str, hwaccel: &str, device: &str) -> std::path::PathBuf {
    let text = std::fs::read_to_string(root().join("pipelines/gpu.toml")).unwrap();
    let text: String = text
        .lines()
        .map(|l| {
            if l.starts_with("hwaccel = ") {
                format!("hwaccel = \"{hwaccel}\"")
            } else if l.starts_with("device = ") {
                format!("device = \"{device}\"")
            } else {
                l.replace("../", &format!("{}/", root().display()))
            }
        })
        .map(|l| l + "\n")
        .collect();
    let p = dir.join(format!("{name}.toml"));
    std::fs::write(&p, text).unwrap();
    p
}

#[test]
fn gpu_options_fail_loudly_without_a_gpu() {
    require_assets();
    if let Some(d) = gpu() {
        eprintln!("skipped: this machine has a GPU ({d}); the GPU tests below run instead");
        return;
    }
    let out = tempfile::tempdir().unwrap();
    // hwaccel = "cuda": a located error, exit 2, never a silent software decode.
    let o = bin().args(["run", "pipelines/gpu.toml"]).env("OUT", out.path().join("x.ndjson")).output().unwrap();
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("error: source `cam`: hwaccel = \"cuda\": "), "{err}");
    assert!(err.contains("--> pipelines/gpu.toml:13:11"), "{err}");
    let results = std::fs::read_to_string(out.path().join("x.ndjson")).unwrap_or_default();
    assert!(results.is_empty(), "nothing ran: {results}");

    // Preprocess forced onto the GPU: the same, located at `device`.
    let p = variant(out.path(), "pre-cuda", "none", "cuda");
    let o = bin().arg("run").arg(&p).output().unwrap();
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("error: stage `pre`: device = \"cuda\": "), "{err}");
    assert!(err.contains(":26:10"), "{err}");

    // auto: runs in software and says so, with the reason.
    let p = variant(out.path(), "auto", "auto", "auto");
    let o = bin().arg("run").arg(&p).args(["--progress", "never"]).env("OUT", out.path().join("auto.ndjson")).output().unwrap();
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(0), "{err}");
    assert!(err.contains("decode: FFmpeg software; no NVDEC: "), "{err}");
    let (decoded, processed, _, _) = accounting(&err);
    assert_eq!((decoded, processed), (300, 300));
    assert_eq!(read_ndjson(&out.path().join("auto.ndjson")).len(), 300);

    // The self-check says why it cannot run, and fails.
    let o = bin().args(["doctor", "--gpu-check", "samples/text-720p.mp4"]).output().unwrap();
    assert_eq!(o.status.code(), Some(1));
    let err = stderr(&o);
    if cfg!(feature = "cuda") {
        assert!(err.contains("GPU check: no NVIDIA driver") || err.contains("GPU check: CUDA device 0 does not exist"), "{err}");
    } else {
        assert!(err.contains("built without the `cuda` feature"), "{err}");
    }
}

/// On a GPU: NVDEC + kernel gives exactly the results of software decode +
/// the same kernel (NVDEC frames equal software frames), and the results of
/// the CPU preprocess within tolerance (bilinear kernel vs swscale).
#[test]
fn gpu_pipeline_matches_cpu() {
    require_assets();
    let Some(d) = gpu() else {
        eprintln!("skipped: no NVIDIA GPU here (doctor finds no CUDA device); CPU twins are tested in the unit tests");
        return;
    };
    eprintln!("GPU: {d}");
    let out = tempfile::tempdir().unwrap();
    let mut results = Vec::new();
    for (name, hw, dev) in [("nvdec", "cuda", "auto"), ("upload", "none", "cuda"), ("cpu", "none", "cpu")] {
        let p = variant(out.path(), name, hw, dev);
        let nd = out.path().join(format!("{name}.ndjson"));
        let o = bin().arg("run").arg(&p).args(["--progress", "never"]).env("OUT", &nd).output().unwrap();
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(0), "{name}: {err}");
        if name == "nvdec" {
            assert!(err.contains("decode: NVDEC on "), "{err}");
        }
        assert_eq!(accounting(&err).1, 300, "{name}");
        results.push(read_ndjson(&nd));
    }
    let (nvdec, upload, cpu) = (&results[0], &results[1], &results[2]);
    for (a, b) in nvdec.iter().zip(upload) {
        assert_eq!(bboxes(a, "boxes"), bboxes(b, "boxes"), "frame {}: NVDEC vs software decode through the same kernel", a["seq"]);
    }
    // swscale (CPU) and the bilinear kernel resample a little differently:
    // every box is found (IoU >= 0.8), nine in ten closely (>= 0.9). On an
    // H200: 1100/1100 found, 1012 at >= 0.9, worst 0.859.
    let (mut close, mut total, mut worst) = (0, 0, 1.0f64);
    for (g, c) in nvdec.iter().zip(cpu) {
        let gb = bboxes(g, "boxes");
        for b in bboxes(c, "boxes") {
            let best = gb.iter().map(|x| iou(x, &b)).fold(0.0, f64::max);
            total += 1;
            close += (best >= 0.9) as usize;
            worst = worst.min(best);
        }
    }
    assert!(total > 0 && close * 10 >= total * 9 && worst >= 0.8, "CPU boxes on GPU: {close}/{total} at IoU >= 0.9, worst {worst:.3}");
}
