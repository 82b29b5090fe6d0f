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
    assert!(err.contains("cam: decode software ("), "{err}");
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
            assert!(err.contains("decode NVDEC on "), "{err}");
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

/// scripts/prune-fatbin.py (how gpu-bundle.sh --cuda-ep fits ONNX Runtime's
/// CUDA provider into a device call) on a real ELF file with a `.nv_fatbin`
/// section: each fatbin keeps only the wanted architecture's entries, in
/// order and byte for byte, with its size set to theirs and the rest zeroed;
/// a fatbin without that architecture stays whole; nothing outside the
/// section changes.
#[test]
fn fatbin_pruning_keeps_one_architecture() {
    fn entry(arch: u32, payload: &[u8]) -> Vec<u8> {
        // kind 2 (ELF), header of 64 bytes, payload size, architecture at byte 28.
        let mut h = vec![0u8; 64];
        h[0..2].copy_from_slice(&2u16.to_le_bytes());
        h[4..8].copy_from_slice(&64u32.to_le_bytes());
        h[8..16].copy_from_slice(&(payload.len() as u64).to_le_bytes());
        h[28..32].copy_from_slice(&arch.to_le_bytes());
        h.extend_from_slice(payload);
        h
    }
    fn fatbin(entries: &[Vec<u8>]) -> Vec<u8> {
        let body: Vec<u8> = entries.concat();
        let mut f = Vec::new();
        f.extend_from_slice(&0xBA55ED50u32.to_le_bytes());
        f.extend_from_slice(&1u16.to_le_bytes());
        f.extend_from_slice(&16u16.to_le_bytes());
        f.extend_from_slice(&(body.len() as u64).to_le_bytes());
        f.extend(body);
        f
    }
    let (a80, a90, b90, c75) = (entry(80, &[0x80; 40]), entry(90, &[0x90; 24]), entry(90, &[0x91; 16]), entry(75, &[0x75; 32]));
    let first = fatbin(&[a80.clone(), a90.clone(), entry(120, &[0x12; 8]), b90.clone()]);
    let second = fatbin(std::slice::from_ref(&c75));
    let mut section = first.clone();
    section.extend_from_slice(&[0u8; 8]); // padding between fatbins
    section.extend_from_slice(&second);

    let dir = tempfile::tempdir().unwrap();
    let (blob, lib, pruned) = (dir.path().join("fatbin"), dir.path().join("lib.so"), dir.path().join("pruned.so"));
    std::fs::write(&blob, &section).unwrap();
    // Any real ELF file will do as the carrier: the test binary itself.
    let carrier = std::env::current_exe().unwrap();
    let objcopy = |args: &[&std::ffi::OsStr]| {
        let o = std::process::Command::new("objcopy").args(args).output().expect("objcopy (binutils) is needed");
        assert!(o.status.success(), "objcopy {args:?}: {}", String::from_utf8_lossy(&o.stderr));
    };
    let arg = |s: String| std::ffi::OsString::from(s);
    objcopy(&["--add-section".as_ref(), &arg(format!(".nv_fatbin={}", blob.display())), carrier.as_os_str(), lib.as_os_str()]);
    let o =
        std::process::Command::new("python3").arg(root().join("scripts/prune-fatbin.py")).args([&lib, &pruned]).arg("90").output().unwrap();
    let said = String::from_utf8_lossy(&o.stdout).into_owned() + &String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{said}");
    assert!(said.contains("2 fatbins; kept 2 sm_90 entries, dropped 2; 1 without sm_90 kept whole"), "{said}");

    let out = dir.path().join("out");
    objcopy(&["--dump-section".as_ref(), &arg(format!(".nv_fatbin={}", out.display())), pruned.as_os_str()]);
    let got = std::fs::read(&out).unwrap();
    assert_eq!(got.len(), section.len(), "the section keeps its size");
    let kept = [a90, b90].concat();
    assert_eq!(&got[..8], &first[..8], "magic, version, header size");
    assert_eq!(u64::from_le_bytes(got[8..16].try_into().unwrap()), kept.len() as u64, "the fatbin's size is its kept entries'");
    assert_eq!(&got[16..16 + kept.len()], &kept[..], "sm_90 entries first, in order, byte for byte");
    assert!(got[16 + kept.len()..first.len()].iter().all(|&b| b == 0), "the dropped entries are zeroed");
    assert_eq!(&got[first.len()..], &section[first.len()..], "a fatbin without sm_90 stays whole");

    // Outside the section nothing changed.
    let (a, b) = (dir.path().join("a"), dir.path().join("b"));
    objcopy(&["--remove-section".as_ref(), ".nv_fatbin".as_ref(), lib.as_os_str(), a.as_os_str()]);
    objcopy(&["--remove-section".as_ref(), ".nv_fatbin".as_ref(), pruned.as_os_str(), b.as_os_str()]);
    assert!(std::fs::read(&a).unwrap() == std::fs::read(&b).unwrap(), "bytes outside .nv_fatbin changed");
    assert_eq!(std::fs::metadata(&lib).unwrap().len(), std::fs::metadata(&pruned).unwrap().len());

    // No code for the wanted architecture at all: an error, no output.
    let none = dir.path().join("none.so");
    let o =
        std::process::Command::new("python3").arg(root().join("scripts/prune-fatbin.py")).args([&lib, &none]).arg("86").output().unwrap();
    assert!(!o.status.success() && !none.exists());
    assert!(String::from_utf8_lossy(&o.stderr).contains("no sm_86 code at all"));
}
