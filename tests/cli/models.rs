//! What the models find on the samples: text detection and OCR (upright and
//! turned), YOLO layouts, batching across streams, IoBinding, orientation on
//! crops, voice activity.

use crate::util::*;

#[test]
fn text_detection_finds_the_drawn_text_on_the_unseen_clip() {
    let (out, err) = run_ok(&["run", "tests/data/eval.toml", "--progress", "never"]);
    let truth = truth("eval-720p.truth.json");
    let lines = read_ndjson(&out.path().join("eval.ndjson"));
    assert_eq!(lines.len() as u64, truth.frames, "one line per frame");
    assert_eq!(accounting(&err), (truth.frames, truth.frames, 0, 0));
    let (mut good, mut far) = (0, 0);
    for (i, l) in lines.iter().enumerate() {
        assert_eq!(l["seq"], i as u64);
        assert_eq!(l["stream"], "cam");
        let pts = l["pts"].as_f64().unwrap();
        assert!((pts - i as f64 / 10.0).abs() < 1e-6, "pts {pts} of frame {i}");
        let want = truth.boxes_at(i as u64);
        let got = bboxes(l, "boxes");
        if want.iter().all(|t| got.iter().any(|g| iou(t, g) >= 0.5)) {
            good += 1;
        }
        // No box far from any text.
        far += got.iter().filter(|g| want.iter().all(|t| iou(t, g) < 0.1)).count();
    }
    assert!(good as f64 >= 0.9 * lines.len() as f64, "{good} of {} frames have every text box found", lines.len());
    assert_eq!(far, 0, "boxes far from any text");
}

/// Character error rate of the OCR pipeline on `input` (default: the eval
/// clip) against the eval clip's truth; `turned`: the clip was turned 180°.
fn ocr_cer(input: Option<&std::path::Path>, turned: bool, frames: usize) -> (f64, String) {
    require_assets();
    let out = tempfile::tempdir().unwrap();
    let mut cmd = bin();
    cmd.args(["run", "tests/data/ocr.toml", "--progress", "never"]).env("INFER_STREAM_TEST_OUT", out.path());
    if let Some(i) = input {
        cmd.env("OCR_INPUT", i);
    }
    let o = cmd.output().unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let truth_v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(root().join("samples/eval-720p.truth.json")).unwrap()).unwrap();
    let lines = read_ndjson(&out.path().join("ocr.ndjson"));
    assert_eq!(lines.len(), frames);
    let truth_box = |b: &serde_json::Value| {
        let t = ["x0", "y0", "x1", "y1"].map(|k| b[k].as_f64().unwrap());
        if turned { [1280.0 - t[2], 720.0 - t[3], 1280.0 - t[0], 720.0 - t[1]] } else { t }
    };
    let (mut errors, mut chars, mut spurious) = (0usize, 0usize, 0usize);
    for l in &lines {
        let seq = l["seq"].as_u64().unwrap();
        let seg = truth_v["segments"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["start_frame"].as_u64().unwrap() <= seq && seq < s["end_frame"].as_u64().unwrap())
            .unwrap();
        let got: Vec<([f64; 4], String)> = l["results"]["text"]["texts"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| {
                let b = t["bbox"].as_array().unwrap();
                ([0, 1, 2, 3].map(|i| b[i].as_f64().unwrap()), t["text"].as_str().unwrap().to_string())
            })
            .collect();
        for b in seg["boxes"].as_array().unwrap() {
            let want = b["text"].as_str().unwrap();
            let tb = truth_box(b);
            // The strings read inside this truth box (a line may come back in pieces), in reading order.
            let mut parts: Vec<&([f64; 4], String)> = got
                .iter()
                .filter(|g| {
                    let inter = (g.0[2].min(tb[2]) - g.0[0].max(tb[0])).max(0.0) * (g.0[3].min(tb[3]) - g.0[1].max(tb[1])).max(0.0);
                    inter >= 0.5 * (g.0[2] - g.0[0]) * (g.0[3] - g.0[1])
                })
                .collect();
            parts.sort_by(|a, b| if turned { b.0[0].total_cmp(&a.0[0]) } else { a.0[0].total_cmp(&b.0[0]) });
            let read = parts.iter().map(|g| g.1.as_str()).collect::<Vec<_>>().join(" ");
            errors += strsim::levenshtein(want, &read);
            chars += want.chars().count();
        }
        spurious += got.iter().filter(|g| seg["boxes"].as_array().unwrap().iter().all(|b| iou(&truth_box(b), &g.0) < 0.1)).count();
    }
    assert_eq!(spurious, 0, "recognised text where nothing was drawn");
    (errors as f64 / chars as f64, std::fs::read_to_string(out.path().join("ocr.vtt")).unwrap())
}

#[test]
fn ocr_reads_the_drawn_strings_on_the_unseen_clip() {
    let (cer, vtt) = ocr_cer(None, false, 300);
    eprintln!("OCR character error rate on the evaluation clip: {cer:.4}");
    assert!(cer <= 0.05, "CER {cer:.4} > 5%");
    // Subtitles: a WebVTT cue for each string while it is on screen.
    assert!(vtt.starts_with("WEBVTT\n\n"));
    assert!(vtt.contains("00:00:00.000 --> 00:00:05.000\nMorning News\n"), "{vtt}");
    assert!(vtt.contains("00:00:05.000 --> 00:00:10.000\nLIMITED EDITION\n"), "{vtt}");
}

/// Upside-down text: the orientation classifier turns those regions before recognition.
#[test]
fn ocr_reads_text_turned_upside_down() {
    require_assets();
    let dir = tempfile::tempdir().unwrap();
    let turned = turned_clip(dir.path(), "eval-720p.mp4", 60);
    let (cer, _) = ocr_cer(Some(&turned), true, 60);
    eprintln!("OCR character error rate on the clip turned 180°: {cer:.4}");
    assert!(cer <= 0.05, "CER {cer:.4} > 5%");
}

/// The generated models output known candidates (tests/models/make.py); after
/// the confidence filter, NMS and the letterbox (640x360 → 64x64: scale 1/10,
/// 14 px of padding on top), exactly these objects must come out.
#[test]
fn yolo_layouts_decode_to_the_exact_boxes() {
    require_assets();
    // (x0, y0, x1, y1) in source pixels, score, class, label.
    let cat = ([150.0, 10.0, 250.0, 110.0], 0.9, 0, "cat");
    let cat2 = ([160.0, 20.0, 260.0, 120.0], 0.8, 0, "cat");
    let dog = ([160.0, 20.0, 260.0, 120.0], 0.7, 1, "dog");
    let bird = ([460.0, 230.0, 540.0, 290.0], 0.3, 2, "bird");
    for (model, want) in [("yolov8", vec![cat, dog, bird]), ("yolov5", vec![cat, dog, bird]), ("end2end", vec![cat, cat2, dog, bird])] {
        let out = tempfile::tempdir().unwrap();
        let o = bin()
            .args(["run", "tests/data/yolo.toml", "--progress", "never"])
            .env("INFER_STREAM_TEST_OUT", out.path())
            .env("YOLO_MODEL", root().join(format!("tests/models/{model}.onnx")))
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(0), "{model}: {}", stderr(&o));
        let lines = read_ndjson(&out.path().join("yolo.ndjson"));
        assert_eq!(lines.len(), 20, "{model}");
        for l in &lines {
            let got: Vec<_> = l["results"]["objects"]["detections"].as_array().unwrap().iter().collect();
            assert_eq!(got.len(), want.len(), "{model}: {l}");
            for (g, (bbox, score, class, label)) in got.iter().zip(&want) {
                let b: Vec<f64> = g["bbox"].as_array().unwrap().iter().map(|v| v.as_f64().unwrap()).collect();
                assert!(b.iter().zip(bbox).all(|(x, y)| (x - y).abs() < 0.01), "{model}: {b:?} vs {bbox:?}");
                assert!((g["score"].as_f64().unwrap() - score).abs() < 1e-4, "{model}: {g}");
                assert_eq!((g["class"].as_u64().unwrap(), g["label"].as_str().unwrap()), (*class, *label), "{model}");
            }
        }
    }
}

/// Four streams into one detector with `batch = { max = 4 }`: batches of four
/// form, and every frame's boxes equal those of an unbatched run.
#[test]
fn batches_form_across_streams_and_split_back_exactly() {
    let (out, err) = run_ok(&["run", "tests/data/batching.toml", "--progress", "never"]);
    assert_eq!(accounting(&err), (400, 400, 0, 0));
    let line = err.lines().find(|l| l.starts_with("det: batches ")).unwrap_or_else(|| panic!("no batch line:\n{err}"));
    let in_fours: u64 = line
        .trim_start_matches("det: batches ")
        .split(" (")
        .next()
        .unwrap()
        .split(", ")
        .filter_map(|p| p.split_once('×'))
        .filter(|(_, size)| *size == "4")
        .map(|(count, _)| count.parse::<u64>().unwrap() * 4)
        .sum();
    assert!(in_fours >= 360, "most frames run in batches of 4: {line}");
    let o = run_in(out.path(), &["run", "tests/data/single.toml", "--progress", "never"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let single = read_ndjson(&out.path().join("single.ndjson"));
    let batched = read_ndjson(&out.path().join("batching.ndjson"));
    for cam in ["cam0", "cam1", "cam2", "cam3"] {
        let mine: Vec<_> = batched.iter().filter(|l| l["stream"] == cam).collect();
        assert_eq!(mine.len(), 100, "{cam}");
        for (b, s) in mine.iter().zip(&single) {
            assert_eq!(b["seq"], s["seq"]);
            let (bb, sb) = (bboxes(b, "boxes"), bboxes(s, "boxes"));
            assert_eq!(bb.len(), sb.len(), "{cam} frame {}", b["seq"]);
            for (x, y) in bb.iter().zip(&sb) {
                assert!(x.iter().zip(y).all(|(p, q)| (p - q).abs() < 0.5), "{cam} frame {}: {x:?} vs {y:?}", b["seq"]);
            }
        }
    }
}

/// `io_binding = "on"` on the CPU provider (the same binding code a GPU
/// provider uses, in host memory): the batched run's results equal those of
/// plain runs exactly, and the start-up line says the input is bound.
#[test]
fn io_binding_gives_the_same_results_as_plain_runs() {
    let (plain, _) = run_ok(&["run", "tests/data/batching.toml", "--progress", "never"]);
    let bound = tempfile::tempdir().unwrap();
    let text = std::fs::read_to_string(root().join("tests/data/batching.toml")).unwrap();
    let with_binding = text
        .replace("../../", &format!("{}/", root().display()))
        .replace("batch = { max = 4, timeout_ms = 50 }", "batch = { max = 4, timeout_ms = 50 }\nio_binding = \"on\"");
    assert!(with_binding.contains("io_binding = \"on\""));
    let toml = bound.path().join("bound.toml");
    std::fs::write(&toml, with_binding).unwrap();
    let o = run_in(bound.path(), &["run", toml.to_str().unwrap(), "--progress", "never"]);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(0), "{err}");
    assert!(err.contains("IoBinding in host memory"), "the binding is not reported:\n{err}");
    let (a, b) = (read_ndjson(&plain.path().join("batching.ndjson")), read_ndjson(&bound.path().join("batching.ndjson")));
    assert_eq!(a.len(), 400);
    let key = |l: &serde_json::Value| (l["stream"].as_str().unwrap().to_string(), l["seq"].as_u64().unwrap());
    let plain: std::collections::HashMap<_, _> = a.iter().map(|l| (key(l), &l["results"])).collect();
    let mut boxes = 0;
    for l in &b {
        assert_eq!(plain.get(&key(l)), Some(&&l["results"]), "{:?}", key(l));
        boxes += bboxes(l, "boxes").len();
    }
    assert_eq!(b.len(), 400);
    assert!(boxes > 400, "the comparison covers real detections ({boxes} boxes)");
}

/// The orientation classifier on crops: upright text reads upright, and the
/// same clip turned 180° (made here with the ffmpeg CLI) reads upside down.
#[test]
fn classification_on_crops_tells_orientation() {
    require_assets();
    let out = tempfile::tempdir().unwrap();
    let flipped = turned_clip(out.path(), "eval-720p.mp4", 60);
    for (input, want) in [(root().join("samples/eval-720p.mp4"), "upright"), (flipped, "upside-down")] {
        let ndjson = out.path().join(format!("{want}.ndjson"));
        let o = bin()
            .args(["run", "pipelines/classify.toml", "--progress", "never"])
            .env("CLASSIFY_INPUT", &input)
            .env("CLASSIFY_OUTPUT", &ndjson)
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
        let (mut right, mut total) = (0, 0);
        for l in read_ndjson(&ndjson) {
            let classes = l["results"]["orientation"]["classes"].as_array().unwrap();
            // One classification per detected region, with its box.
            assert_eq!(classes.len(), l["results"]["boxes"]["text_boxes"].as_array().unwrap().len());
            for c in classes {
                assert!(c["bbox"].is_array());
                total += 1;
                right += usize::from(c["top"][0]["label"] == want);
            }
        }
        assert!(total > 100 && right as f64 >= 0.95 * total as f64, "{want}: {right} of {total}");
    }
}

/// Silero VAD on speech it was never tuned on (espeak-ng voices, known silences,
/// light noise), from a WAV and from compressed audio.
#[test]
fn vad_finds_the_speech_segments() {
    require_assets();
    for (input, truth_file) in
        [("samples/speech-eval.wav", "samples/speech-eval.truth.json"), ("samples/speech-short.m4a", "samples/speech-short.truth.json")]
    {
        let out = tempfile::tempdir().unwrap();
        let ndjson = out.path().join("vad.ndjson");
        let srt = out.path().join("vad.srt");
        let o = bin()
            .args(["run", "pipelines/vad.toml", "--progress", "never"])
            .env("VAD_INPUT", root().join(input))
            .env("VAD_OUTPUT", &ndjson)
            .env("VAD_SRT", &srt)
            .output()
            .unwrap();
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(0), "{input}: {err}");
        assert!(err.contains("real-time factor"), "{err}");
        let lines = read_ndjson(&ndjson);
        let truth: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(root().join(truth_file)).unwrap()).unwrap();
        let want: Vec<(f64, f64)> =
            truth["segments"].as_array().unwrap().iter().map(|s| (s["start"].as_f64().unwrap(), s["end"].as_f64().unwrap())).collect();
        // Windows are 32 ms apart, with exact timestamps.
        for (i, l) in lines.iter().enumerate() {
            assert!((l["pts"].as_f64().unwrap() - i as f64 * 0.032).abs() < 1e-9, "{l}");
        }
        let last = lines.last().unwrap();
        let got: Vec<(f64, f64)> = last["results"]["vad"]["segments"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| (s["start"].as_f64().unwrap(), s["end"].as_f64().unwrap()))
            .collect();
        // Live events: every segment opened once and closed once, in order.
        let events =
            |k: &str| lines.iter().flat_map(|l| l["results"]["vad"][k].as_array().cloned().unwrap_or_default()).collect::<Vec<_>>();
        let (started, ended) = (events("started"), events("ended"));
        assert_eq!((started.len(), ended.len()), (got.len(), got.len()), "{input}");
        for ((s, e), seg) in started.iter().zip(&ended).zip(&got) {
            assert_eq!(s["start"].as_f64().unwrap(), seg.0);
            assert_eq!(e["end"].as_f64().unwrap(), seg.1);
        }
        // One SRT cue per segment, numbered from 1, with the same times.
        let srt = std::fs::read_to_string(&srt).unwrap();
        let cues: Vec<&str> = srt.split("\n\n").filter(|c| !c.trim().is_empty()).collect();
        assert_eq!(cues.len(), got.len(), "{srt}");
        let ts = |s: f64| {
            let ms = (s * 1000.0).round() as u64;
            format!("{:02}:{:02}:{:02},{:03}", ms / 3_600_000, ms / 60_000 % 60, ms / 1000 % 60, ms % 1000)
        };
        for (i, (cue, (s, e))) in cues.iter().zip(&got).enumerate() {
            assert_eq!(*cue, format!("{}\n{} --> {}\n(speech)", i + 1, ts(*s), ts(*e)));
        }
        let f1 = speech_f1(&got, &want, truth["duration"].as_f64().unwrap());
        eprintln!("{input}: {} segments (truth {}), F1 at 32 ms = {f1:.3}", got.len(), want.len());
        assert!(f1 >= 0.9, "{input}: F1 {f1:.3}");
    }
}
