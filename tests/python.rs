//! `kind = "python"` stages through the real binary (docs/python.md): results,
//! events, dropped and passed-through frames; an exception fails its frame and
//! the run goes on; a `setup` error is a start-up error; `validate` checks the
//! code; tensors are the infer stage's memory; the shipped examples: a numpy
//! YOLO decoder equal to the built-in `detection`, a dwell rule on the
//! tracker's results, a colour added to each box from `frame.image()`.

mod util;

use std::path::{Path, PathBuf};

use util::*;

/// Write `plugin.py` and `p.toml` (`stages` between a testsrc `cam` of
/// `frames` frames and an ndjson sink reading `last`) into `dir`.
fn pipeline(dir: &Path, plugin: &str, frames: u32, stages: &str, last: &str) -> PathBuf {
    std::fs::write(dir.join("plugin.py"), plugin).unwrap();
    let p = dir.join("p.toml");
    let text = format!(
        "[sources.cam]\nkind = \"testsrc\"\nwidth = 64\nheight = 48\nframes = {frames}\n\n{stages}\n\n\
         [sinks.out]\nkind = \"ndjson\"\ninputs = [\"{last}\"]\npath = \"out.ndjson\"\n"
    );
    std::fs::write(&p, text).unwrap();
    p
}

/// A shipped pipeline rewritten to read from the repository and write into `dir`.
fn shipped(dir: &Path, name: &str) -> PathBuf {
    let r = root().display().to_string();
    let text = std::fs::read_to_string(root().join("pipelines").join(name))
        .unwrap()
        .replace("../samples/", &format!("{r}/samples/"))
        .replace("../models/", &format!("{r}/models/"))
        .replace("../tests/", &format!("{r}/tests/"))
        .replace("../plugins/", &format!("{r}/plugins/"))
        .replace("../out/", &format!("{}/", dir.display()));
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p
}

fn run(dir: &Path, p: &Path) -> std::process::Output {
    run_in(dir, &["run", p.to_str().unwrap(), "--progress", "never"])
}

fn frames_and_events(lines: &[serde_json::Value]) -> (Vec<&serde_json::Value>, Vec<&serde_json::Value>) {
    lines.iter().partition(|l| l.get("seq").is_some() && l.get("event").is_none())
}

const BASICS: &str = r#"
import numpy as np

def setup(args):
    global EVERY
    EVERY = args["every"]

def process(frame):
    if frame.seq % EVERY == 1:
        return None
    if frame.seq % EVERY == 2:
        return {"drop": True}
    out = {"seen": frame.seq, "size": [frame.width, frame.height], "half": np.float32(0.5), "range": np.arange(3),
           "tensors": len(frame.tensors)}
    if frame.seq % EVERY == 0:
        out["events"] = [{"event": "tick", "n": frame.seq}, {"event": "tock", "seq": 99}]
    return out
"#;

/// `None` passes the frame on unchanged, a dict is the stage's result (numpy
/// values as plain JSON), `events` follow their frame in order, `"drop": true`
/// takes the frame out and counts it as filtered; a later stage sees the
/// results so far in `frame.results`.
#[test]
fn results_events_drop_and_pass_through() {
    let dir = tempfile::tempdir().unwrap();
    let stages = "[stages.mine]\nkind = \"python\"\ninputs = [\"cam\"]\nscript = \"plugin.py\"\nargs = { every = 3 }\n\n\
                  [stages.after]\nkind = \"python\"\ninputs = [\"mine\"]\nscript = \"after.py\"\n";
    std::fs::write(dir.path().join("after.py"), "def process(frame):\n    return {\"saw\": frame.results.get(\"mine\")}\n").unwrap();
    let p = pipeline(dir.path(), BASICS, 10, stages, "after");
    let o = run(dir.path(), &p);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(0), "{err}");
    let lines = read_ndjson(&dir.path().join("out.ndjson"));
    let (frames, events) = frames_and_events(&lines);
    let seqs: Vec<u64> = frames.iter().map(|f| f["seq"].as_u64().unwrap()).collect();
    assert_eq!(seqs, [0, 1, 3, 4, 6, 7, 9], "frames 2, 5 and 8 were dropped");
    for f in &frames {
        let seq = f["seq"].as_u64().unwrap();
        let r = &f["results"];
        if seq % 3 == 1 {
            assert!(r.get("mine").is_none(), "passed through unchanged: {f}");
            assert_eq!(r["after"]["saw"], serde_json::Value::Null, "{f}");
        } else {
            let want = serde_json::json!({"seen": seq, "size": [64, 48], "half": 0.5, "range": [0, 1, 2], "tensors": 0});
            assert_eq!(r["mine"], want, "{f}");
            assert_eq!(r["after"]["saw"], want, "the next stage sees the results so far: {f}");
        }
    }
    let names: Vec<(String, u64, String)> = events
        .iter()
        .map(|e| (e["event"].as_str().unwrap().to_string(), e["seq"].as_u64().unwrap(), e["stage"].as_str().unwrap().to_string()))
        .collect();
    let want: Vec<(String, u64, String)> = [0u64, 3, 6, 9]
        .iter()
        .flat_map(|&s| [("tick".to_string(), s, "mine".to_string()), ("tock".to_string(), 99, "mine".to_string())])
        .collect();
    assert_eq!(names, want, "{events:?}");
    assert!(events.iter().filter(|e| e["event"] == "tick").all(|e| e["n"] == e["seq"] && e["stream"] == "cam"));
    // Each event right after its frame.
    for (i, l) in lines.iter().enumerate().filter(|(_, l)| l["event"] == "tick") {
        assert_eq!(lines[i - 1]["seq"], l["seq"], "a tick follows its frame: {:?}", &lines[i - 1]);
    }
    assert!(err.contains("frames: decoded 10 = processed 7 + dropped 0 + failed 0 + filtered 3  (all accounted for)"), "{err}");
    assert!(err.contains("filtered: mine took 3 frame(s) out"), "{err}");
}

/// An exception fails that frame (counted, the traceback logged with the
/// stream and frame), and the run goes on under `on_error = "skip"`; a wrong
/// return value fails its frame with what to fix.
#[test]
fn an_exception_fails_its_frame_and_the_run_goes_on() {
    let dir = tempfile::tempdir().unwrap();
    let plugin = "def process(frame):\n    if frame.seq in (3, 8):\n        raise ValueError(f\"bad frame {frame.seq}\")\n    \
                  if frame.seq == 6:\n        return [1, 2]\n    return {\"ok\": True}\n";
    let stages = "[stages.mine]\nkind = \"python\"\ninputs = [\"cam\"]\nscript = \"plugin.py\"\non_error = \"skip\"\n";
    let p = pipeline(dir.path(), plugin, 10, stages, "mine");
    let o = run(dir.path(), &p);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(0), "{err}");
    let seqs: Vec<u64> = read_ndjson(&dir.path().join("out.ndjson")).iter().map(|f| f["seq"].as_u64().unwrap()).collect();
    assert_eq!(seqs, [0, 1, 2, 4, 5, 7, 9]);
    assert!(err.contains("frames: decoded 10 = processed 7 + dropped 0 + failed 3  (all accounted for)"), "{err}");
    // The 1st and 2nd failures are logged with their traceback, the 3rd not (then the 4th, 8th, ...).
    assert!(err.contains("stage `mine`: stream `cam` frame 3:"), "{err}");
    assert!(err.contains("Traceback (most recent call last):") && err.contains("plugin.py\", line 3, in process"), "{err}");
    assert!(err.contains("ValueError: bad frame 3"), "{err}");
    assert!(err.contains("stream `cam` frame 6: plugin.py:process returned a list: return None (pass the frame on) or a dict"), "{err}");
    assert!(!err.contains("bad frame 8"), "rate-limited: {err}");
}

/// An exception in `setup(args)` is a start-up error: exit 2, the traceback
/// printed, located at the stage in the pipeline file; nothing runs.
#[test]
fn a_setup_error_is_a_startup_error() {
    let dir = tempfile::tempdir().unwrap();
    let plugin = "def setup(args):\n    raise RuntimeError(\"no zone named \" + args[\"zone\"])\n\ndef process(frame):\n    return None\n";
    let stages = "[stages.mine]\nkind = \"python\"\ninputs = [\"cam\"]\nscript = \"plugin.py\"\nargs = { zone = \"door\" }\n";
    let p = pipeline(dir.path(), plugin, 5, stages, "mine");
    let o = run(dir.path(), &p);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("p.toml:11:8") && err.contains("stage `mine`: setup(args) of plugin.py:process failed"), "{err}");
    assert!(err.contains("plugin.py\", line 2, in setup") && err.contains("RuntimeError: no zone named door"), "{err}");
    assert!(!dir.path().join("out.ndjson").exists() || std::fs::read_to_string(dir.path().join("out.ndjson")).unwrap().is_empty());
}

/// `validate` imports the code and checks the function: a missing function,
/// one of the wrong arity, a missing script and an import error are each
/// reported at their key (file:line:column), exit 2.
#[test]
fn validate_checks_the_code() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::write(d.join("two.py"), "def process(frame, extra):\n    return None\n").unwrap();
    std::fs::write(d.join("none.py"), "def handle(frame):\n    return None\n").unwrap();
    std::fs::write(d.join("broken.py"), "import math\nx = math.nope\n").unwrap();
    let cases = [
        ("function = \"run\"\nscript = \"none.py\"", "none.py has no function `run`; it has handle", "p.toml:4:12"),
        ("script = \"none.py\"", "none.py has no function `process`; it has handle", "p.toml:4:10"),
        ("script = \"two.py\"", "`process(frame, extra)` must take one argument, the frame", "p.toml:4:10"),
        ("script = \"gone.py\"", "Python script not found", "p.toml:4:10"),
        ("script = \"broken.py\"", "AttributeError: module 'math' has no attribute 'nope'", "p.toml:4:10"),
        ("module = \"no_such_module_here\"", "ModuleNotFoundError: No module named 'no_such_module_here'", "p.toml:4:10"),
    ];
    for (keys, want, at) in cases {
        let text = format!(
            "[sources.cam]\nkind = \"testsrc\"\n[stages.mine]\n{}\nkind = \"python\"\ninputs = [\"cam\"]\n[sinks.out]\nkind = \"null\"\ninputs = [\"mine\"]\n",
            keys
        );
        let p = d.join("p.toml");
        std::fs::write(&p, &text).unwrap();
        let o = bin().args(["validate", p.to_str().unwrap()]).output().unwrap();
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(2), "{keys}: {err}");
        assert!(err.contains(want), "{keys}: want {want:?} in:\n{err}");
        assert!(err.contains(at), "{keys}: want {at} in:\n{err}");
    }
    // A fitting module validates.
    std::fs::write(d.join("good.py"), "def setup(args):\n    pass\n\ndef process(frame):\n    return None\n").unwrap();
    let p = d.join("p.toml");
    std::fs::write(&p, "[sources.cam]\nkind = \"testsrc\"\n[stages.mine]\nkind = \"python\"\ninputs = [\"cam\"]\nscript = \"good.py\"\n[sinks.out]\nkind = \"null\"\ninputs = [\"mine\"]\n").unwrap();
    let o = bin().args(["validate", p.to_str().unwrap()]).output().unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
}

/// `frame.tensors` are the infer stage's outputs in the pipeline's own memory:
/// numpy arrays that own no data and are read-only; writing one fails the frame.
#[test]
fn tensors_are_the_model_outputs_without_a_copy() {
    let dir = tempfile::tempdir().unwrap();
    let r = root().display().to_string();
    let plugin = "def process(frame):\n    t = frame.tensors[\"output0\"]\n    \
                  info = {\"shape\": list(t.shape), \"dtype\": str(t.dtype), \"owndata\": bool(t.flags.owndata), \
                  \"writeable\": bool(t.flags.writeable), \"top\": float(t[0, 4:].max()), \"letterbox\": frame.letterbox[\"dst_w\"]}\n    \
                  if frame.seq == 1:\n        t[0, 0, 0] = 1.0\n    return info\n";
    let stages = format!(
        "[stages.pre]\nkind = \"preprocess\"\ninputs = [\"cam\"]\nwidth = 64\nheight = 64\nresize = \"letterbox\"\n\n\
         [stages.yolo]\nkind = \"infer\"\ninputs = [\"pre\"]\nmodel = \"{r}/tests/models/yolov8.onnx\"\n\n\
         [stages.mine]\nkind = \"python\"\ninputs = [\"yolo\"]\nscript = \"plugin.py\"\n"
    );
    let p = pipeline(dir.path(), plugin, 3, &stages, "mine");
    let o = run(dir.path(), &p);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(0), "{err}");
    let lines = read_ndjson(&dir.path().join("out.ndjson"));
    assert_eq!(lines.len(), 2, "frame 1 wrote into a tensor and failed");
    for l in &lines {
        let m = &l["results"]["mine"];
        assert_eq!(m["shape"], serde_json::json!([1, 7, 8]), "{l}");
        assert_eq!(
            (m["dtype"].as_str(), m["owndata"].as_bool(), m["writeable"].as_bool()),
            (Some("float32"), Some(false), Some(false)),
            "{l}"
        );
        assert!((m["top"].as_f64().unwrap() - 0.9).abs() < 1e-6, "{l}");
        assert_eq!(m["letterbox"], 64);
    }
    assert!(err.contains("ValueError: assignment destination is read-only"), "{err}");
}

/// Example (1): the numpy YOLO decoder on the raw tensors gives the built-in
/// `detection` stage's boxes on every frame (one infer stage feeding both).
#[test]
fn numpy_yolo_decoder_equals_the_builtin_detection() {
    let dir = tempfile::tempdir().unwrap();
    let p = shipped(dir.path(), "python-yolo.toml");
    // The real YOLOv12n on real pedestrians (samples/vtest.avi), as shipped.
    let o = run_in(dir.path(), &["run", p.to_str().unwrap(), "--progress", "never", "--frames", "8"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let ours = read_ndjson(&dir.path().join("python-yolo.ndjson"));
    let theirs = read_ndjson(&dir.path().join("python-yolo-builtin.ndjson"));
    assert_eq!((ours.len(), theirs.len()), (8, 8));
    let mut boxes = 0;
    for (a, b) in ours.iter().zip(&theirs) {
        assert_eq!(a["seq"], b["seq"]);
        let mine = a["results"]["decoded"]["detections"].as_array().unwrap();
        let builtin = b["results"]["objects"]["detections"].as_array().unwrap();
        assert_eq!(mine.len(), builtin.len(), "frame {}: {a} vs {b}", a["seq"]);
        for (m, w) in mine.iter().zip(builtin) {
            assert_eq!(m["class"], w["class"], "{m} vs {w}");
            // The built-in rounds to 0.01 px and 0.001 in score.
            assert!((m["score"].as_f64().unwrap() - w["score"].as_f64().unwrap()).abs() < 1e-3, "{m} vs {w}");
            for i in 0..4 {
                assert!((m["bbox"][i].as_f64().unwrap() - w["bbox"][i].as_f64().unwrap()).abs() < 0.01, "{m} vs {w}");
            }
            boxes += 1;
        }
    }
    assert!(boxes >= 40, "{boxes} boxes compared");
}

/// Python boxes in the detection schema feed the tracker like a detection stage's.
#[test]
fn python_boxes_feed_the_tracker() {
    let dir = tempfile::tempdir().unwrap();
    let plugin = "def process(frame):\n    x = 4 + frame.seq\n    \
                  return {\"detections\": [{\"bbox\": [x, 10, x + 20, 30], \"score\": 0.9, \"class\": 2, \"label\": \"car\", \"note\": \"mine\"}]}\n";
    let stages = "[stages.mine]\nkind = \"python\"\ninputs = [\"cam\"]\nscript = \"plugin.py\"\n\n\
                  [stages.trk]\nkind = \"track\"\ninputs = [\"mine\"]\nminimum_consecutive_frames = 2\n";
    let p = pipeline(dir.path(), plugin, 6, stages, "trk");
    let o = run(dir.path(), &p);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let lines = read_ndjson(&dir.path().join("out.ndjson"));
    let (frames, events) = frames_and_events(&lines);
    assert_eq!(frames.len(), 6);
    assert_eq!(frames[0]["results"]["mine"]["detections"][0]["note"], "mine", "extra fields are written as returned");
    let last = &frames[5]["results"]["trk"]["tracks"][0];
    assert_eq!((last["track_id"].as_u64(), last["class"].as_u64(), last["label"].as_str()), (Some(1), Some(2), Some("car")), "{last}");
    assert!(events.iter().any(|e| e["event"] == "track_ended" && e["track_id"] == 1), "{events:?}");
}

/// Example (2) on real footage: YOLOv12n and the tracker on the pedestrians
/// of samples/vtest.avi, the rule on the tracks. Its events are recomputed
/// here from the tracks in the same NDJSON and the pipeline's own `args`
/// (polygon, seconds, classes): a person's stay starts on the first frame
/// its box's bottom centre is inside the polygon (a winding number, not the
/// plugin's even-odd rule), ends on the first frame it is not, and one event
/// is due on the first frame the stay is longer than `seconds`.
#[test]
fn dwell_rule_fires_when_the_stay_passes_n_seconds() {
    let dir = tempfile::tempdir().unwrap();
    let p = shipped(dir.path(), "python-dwell.toml");
    let o = run_in(dir.path(), &["run", p.to_str().unwrap(), "--progress", "never", "--frames", "150"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let lines = read_ndjson(&dir.path().join("python-dwell.ndjson"));
    // Frames, the tracker's events and the rule's own all follow docs/messages.schema.json.
    check_messages(&lines);
    let (frames, events) = frames_and_events(&lines);
    assert_eq!(frames.len(), 150);
    let cfg: toml::Table = toml::from_str(&std::fs::read_to_string(&p).unwrap()).unwrap();
    let args = &cfg["stages"]["dwell"]["args"];
    let seconds = args["seconds"].as_float().unwrap();
    let classes: Vec<i64> = args["classes"].as_array().unwrap().iter().map(|c| c.as_integer().unwrap()).collect();
    let polygon: Vec<(f64, f64)> = args["polygon"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            let xy: Vec<f64> = p.as_array().unwrap().iter().map(|v| v.as_float().or(v.as_integer().map(|i| i as f64)).unwrap()).collect();
            (xy[0], xy[1])
        })
        .collect();
    assert!(polygon.len() >= 3);
    let inside = |x: f64, y: f64| winding_number(&polygon, (x, y)) != 0;
    let mut since: std::collections::HashMap<u64, (f64, bool)> = Default::default();
    let (mut want, mut starts, mut outside) = (Vec::new(), Vec::new(), 0);
    for f in &frames {
        let pts = f["pts"].as_f64().unwrap();
        let mut seen = std::collections::HashSet::new();
        for t in f["results"]["tracks"]["tracks"].as_array().unwrap() {
            let Some(id) = t["track_id"].as_u64() else { continue };
            if !classes.contains(&t["class"].as_i64().unwrap()) {
                continue;
            }
            let b = if t["bbox"].is_null() { &t["smoothed"] } else { &t["bbox"] };
            let b: Vec<f64> = b.as_array().unwrap().iter().map(|v| v.as_f64().unwrap()).collect();
            if !inside((b[0] + b[2]) / 2.0, b[3]) {
                outside += 1;
                continue;
            }
            seen.insert(id);
            let e = since.entry(id).or_insert((pts, false));
            if !e.1 && pts - e.0 > seconds {
                e.1 = true;
                want.push((f["seq"].as_u64().unwrap(), id));
                starts.push(e.0);
            }
        }
        since.retain(|id, _| seen.contains(id));
    }
    let got: Vec<(u64, u64)> =
        events.iter().filter(|e| e["event"] == "dwell").map(|e| (e["seq"].as_u64().unwrap(), e["track_id"].as_u64().unwrap())).collect();
    assert!(want.len() >= 5, "people stay in the zone longer than {seconds} s: {want:?}");
    assert!(outside > 0, "some people are outside the polygon");
    assert_eq!(got, want);
    let began: Vec<f64> = events.iter().filter(|e| e["event"] == "dwell").map(|e| e["since_pts"].as_f64().unwrap()).collect();
    assert!(began.iter().zip(&starts).all(|(a, b)| (a - b).abs() < 1e-6), "{began:?} vs {starts:?}");
    // Each event says when the stay began and how long it has lasted (rounded to the µs).
    for e in events.iter().filter(|e| e["event"] == "dwell") {
        let at = frames.iter().find(|f| f["seq"] == e["seq"]).unwrap()["pts"].as_f64().unwrap();
        let (since, lasted) = (e["since_pts"].as_f64().unwrap(), e["seconds"].as_f64().unwrap());
        assert!((at - since - lasted).abs() < 2e-6 && lasted >= seconds && e["stage"] == "dwell" && e["class"] == 0, "{e}");
    }
}

/// How many times `polygon` winds around `p` (0: outside).
fn winding_number(polygon: &[(f64, f64)], p: (f64, f64)) -> i32 {
    let cross = |a: (f64, f64), b: (f64, f64)| (b.0 - a.0) * (p.1 - a.1) - (p.0 - a.0) * (b.1 - a.1);
    let mut w = 0;
    for (i, &a) in polygon.iter().enumerate() {
        let b = polygon[(i + 1) % polygon.len()];
        if a.1 <= p.1 {
            if b.1 > p.1 && cross(a, b) > 0.0 {
                w += 1;
            }
        } else if b.1 <= p.1 && cross(a, b) < 0.0 {
            w -= 1;
        }
    }
    w
}

/// Numpy's mean colour of each box of each frame: the frames decoded by the
/// ffmpeg CLI to RGB (argv: raw rgb24 file, width, height, the NDJSON).
const COLOUR_REFERENCE: &str = r#"
import json, sys
import numpy as np

raw, w, h, nd = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
frames = np.fromfile(raw, np.uint8).reshape(-1, h, w, 3)
out = []
for line in open(nd):
    f = json.loads(line)
    if "event" in f:
        continue
    picture = frames[f["seq"]].astype(np.float64)
    means = []
    for b in f["results"]["objects"]["detections"]:
        x0, y0, x1, y1 = np.clip(np.rint(b["bbox"]).astype(int), 0, [w, h, w, h])
        means.append(picture[y0:y1, x0:x1].reshape(-1, 3).mean(axis=0).tolist())
    out.append(means)
print(json.dumps(out))
"#;

/// Example (3) on real footage: each person YOLOv12n finds in
/// samples/vtest.avi gets the mean colour of the picture inside its box,
/// equal (within the rounding: the pixels are the same) to numpy's
/// mean over the same box of the same frame decoded by the ffmpeg CLI; and
/// `frame.image()` is the picture, RGB, exactly.
#[test]
fn colour_enrichment_adds_a_field_to_every_box() {
    let dir = tempfile::tempdir().unwrap();
    let p = shipped(dir.path(), "python-colour.toml");
    let frames = 12;
    let o = run_in(dir.path(), &["run", p.to_str().unwrap(), "--progress", "never", "--frames", &frames.to_string()]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let nd = dir.path().join("python-colour.ndjson");
    let lines = read_ndjson(&nd);
    assert_eq!(lines.len(), frames);
    // The same frames, decoded and turned to RGB by the ffmpeg CLI (swscale, bilinear, accurate rounding as the stage).
    let raw = dir.path().join("frames.rgb");
    let vtest = root().join("samples/vtest.avi");
    let st = std::process::Command::new("ffmpeg")
        .args(["-v", "error", "-i", vtest.to_str().unwrap(), "-frames:v", &frames.to_string(), "-sws_flags", "bilinear+accurate_rnd"])
        .args(["-f", "rawvideo", "-pix_fmt", "rgb24", "-y", raw.to_str().unwrap()])
        .status()
        .unwrap();
    assert!(st.success());
    let (w, h) = (lines[0]["width"].as_u64().unwrap(), lines[0]["height"].as_u64().unwrap());
    let o = std::process::Command::new("/usr/bin/python3")
        .args(["-c", COLOUR_REFERENCE, raw.to_str().unwrap(), &w.to_string(), &h.to_string(), nd.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let reference: Vec<Vec<Vec<f64>>> = serde_json::from_slice(&o.stdout).unwrap();
    let (mut boxes, mut worst) = (0, 0f64);
    for (f, want) in lines.iter().zip(&reference) {
        let theirs = f["results"]["objects"]["detections"].as_array().unwrap();
        let ours = f["results"]["colour"]["detections"].as_array().unwrap();
        assert_eq!((ours.len(), want.len()), (theirs.len(), theirs.len()));
        for ((a, b), mean) in ours.iter().zip(theirs).zip(want) {
            assert_eq!(a["bbox"], b["bbox"]);
            let c: Vec<f64> = a["colour"].as_array().unwrap().iter().map(|v| v.as_f64().unwrap()).collect();
            assert_eq!(c.len(), 3, "{a}");
            for (got, want) in c.iter().zip(mean) {
                worst = worst.max((got - want).abs());
                assert!((got - want).abs() <= 0.501, "frame {}: {a}: numpy's mean {mean:?}", f["seq"]);
            }
            assert!(a["colour_name"].is_string(), "{a}");
            boxes += 1;
        }
    }
    assert!(boxes >= 40, "{boxes} boxes compared");
    eprintln!("{boxes} boxes, largest difference from numpy {worst:.3}");

    // The picture itself: a PNG, left half red, right half blue.
    let img = image::RgbImage::from_fn(40, 20, |x, _| if x < 20 { image::Rgb([255, 0, 0]) } else { image::Rgb([0, 0, 255]) });
    std::fs::create_dir(dir.path().join("pics")).unwrap();
    img.save(dir.path().join("pics/000.png")).unwrap();
    let plugin = "def process(frame):\n    p = frame.image()\n    \
                  return {\"shape\": list(p.shape), \"dtype\": str(p.dtype), \"left\": p[5, 3].tolist(), \"right\": p[15, 35].tolist()}\n";
    std::fs::write(dir.path().join("plugin.py"), plugin).unwrap();
    let p = dir.path().join("img.toml");
    std::fs::write(
        &p,
        "[sources.cam]\nkind = \"image_sequence\"\npath = \"pics\"\n\n\
         [stages.mine]\nkind = \"python\"\ninputs = [\"cam\"]\nscript = \"plugin.py\"\nimage = true\n\n\
         [sinks.out]\nkind = \"ndjson\"\ninputs = [\"mine\"]\npath = \"img.ndjson\"\n",
    )
    .unwrap();
    let o = run(dir.path(), &p);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let l = read_ndjson(&dir.path().join("img.ndjson"));
    assert_eq!(
        l[0]["results"]["mine"],
        serde_json::json!({"shape": [20, 40, 3], "dtype": "uint8", "left": [255, 0, 0], "right": [0, 0, 255]})
    );
}

/// A slow `process` shows in `bench` like any stage: named as the bottleneck,
/// with the way to scale it.
#[test]
fn a_slow_process_is_the_bench_bottleneck() {
    let dir = tempfile::tempdir().unwrap();
    let plugin = "import time\n\ndef process(frame):\n    time.sleep(0.02)\n";
    let stages = "[stages.slow]\nkind = \"python\"\ninputs = [\"cam\"]\nscript = \"plugin.py\"";
    let p = pipeline(dir.path(), plugin, 30, stages, "slow");
    let o = run_in(dir.path(), &["-q", "bench", p.to_str().unwrap(), "--frames", "30"]);
    let text = String::from_utf8_lossy(&o.stdout);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let line = text.lines().find(|l| l.starts_with("bottleneck: ")).unwrap_or_else(|| panic!("{text}"));
    assert!(line.starts_with("bottleneck: slow is ") && line.contains("the GIL") && line.contains("more processes"), "{text}");
}

/// A result that breaks the rules fails its frame with what to fix: boxes not
/// in the detection schema, an event setting a key the pipeline writes, an
/// event without a name; nothing of a failed frame is applied.
#[test]
fn wrong_results_fail_the_frame_with_what_to_fix() {
    let dir = tempfile::tempdir().unwrap();
    let plugin = "def process(frame):\n    \
                  if frame.seq == 0:\n        return {\"detections\": [{\"bbox\": [1, 2, 3], \"score\": 0.5, \"class\": 0}], \"events\": [{\"event\": \"x\"}]}\n    \
                  if frame.seq == 1:\n        return {\"events\": [{\"event\": \"x\", \"stream\": \"other\"}]}\n    \
                  if frame.seq == 2:\n        return {\"events\": [{\"name\": \"x\"}]}\n    \
                  if frame.seq == 3:\n        return {\"events\": [{\"event\": \"crossed\"}]}\n    \
                  return {\"ok\": 1}\n";
    let stages = "[stages.mine]\nkind = \"python\"\ninputs = [\"cam\"]\nscript = \"plugin.py\"\non_error = \"skip\"\n";
    let p = pipeline(dir.path(), plugin, 5, stages, "mine");
    let o = run(dir.path(), &p);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(0), "{err}");
    let lines = read_ndjson(&dir.path().join("out.ndjson"));
    assert_eq!(lines.len(), 1, "only frame 4 passes, and no event of a failed frame is sent: {lines:?}");
    assert!(err.contains("frame 0: plugin.py:process: detections[0]: \"bbox\" must be 4 numbers"), "{err}");
    assert!(err.contains("frame 1: plugin.py:process: events[0] sets \"stream\", which the pipeline writes"), "{err}");
    assert!(err.contains("frame 3: plugin.py:process: events[0]: \"crossed\" is the name of a built-in event"), "{err}");
    assert!(err.contains("failed 4"), "{err}");
}
