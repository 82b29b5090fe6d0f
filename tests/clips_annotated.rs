//! Annotated event clips (`annotated = true` on a `clips` sink, forced when a
//! `redact` stage is upstream): the clips are the sink's own encode of the
//! frames it gets, with the results drawn, so a redacting pipeline's clips
//! never hold an un-redacted face. Checked against the source decoded by the
//! ffmpeg CLI: the drawn boxes are in the clip's frame of the event and not
//! in the source's; the faces CenterFace found differ from the source's
//! pixels, the rest of the picture does not.

mod util;

use std::path::Path;
use std::process::Command;

use util::clips::{clips_in, decodes};
use util::*;

/// Frame `n` (presentation order) of `file`, decoded by the ffmpeg CLI to RGB (`w`x`h`).
fn rgb(file: &Path, n: u64, (w, h): (usize, usize)) -> Vec<u8> {
    let o = Command::new("ffmpeg")
        .args(["-v", "error", "-nostdin", "-i"])
        .arg(file)
        .args(["-vf", &format!("select=eq(n\\,{n})"), "-frames:v", "1", "-pix_fmt", "rgb24", "-f", "rawvideo", "-"])
        .output()
        .expect("ffmpeg");
    assert!(o.status.success(), "ffmpeg {}: {}", file.display(), String::from_utf8_lossy(&o.stderr));
    assert_eq!(o.stdout.len(), w * h * 3, "{}: frame {n} not decoded", file.display());
    o.stdout
}

/// Pixels in the tracks' orange or the text boxes' green (after an encode: loosely).
fn drawn(px: &[u8]) -> usize {
    px.chunks(3).filter(|p| (p[0] > 190 && p[1] > 90 && p[1] < 190 && p[2] < 90) || (p[1] > 190 && p[0] < 100 && p[2] < 100)).count()
}

#[test]
fn annotated_clips_have_the_results_drawn_around_each_crossing() {
    require_assets();
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let text = std::fs::read_to_string(root().join("pipelines/clips.toml"))
        .unwrap()
        .replace("../samples/", &format!("{}/samples/", root().display()))
        .replace("../models/", &format!("{}/models/", root().display()))
        .replace("../out/", &format!("{}/", d.display()))
        .replace("kind = \"clips\"\n", "kind = \"clips\"\nannotated = true\n")
        .replace("pre_s = 1\n", "pre_s = 0.05\n")
        .replace("post_s = 1\n", "post_s = 0.05\n");
    let p = d.join("clips.toml");
    std::fs::write(&p, text).unwrap();
    let o = bin().arg("run").arg(&p).output().unwrap();
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(0), "{err}");
    assert!(err.contains("annotated: every frame drawn and encoded with libx264"), "{err}");
    let out = read_ndjson(&d.join("clips.ndjson"));
    check_messages(&out);
    let crossed: Vec<u64> = out.iter().filter(|l| l["event"] == "crossed").map(|l| l["seq"].as_u64().unwrap()).collect();
    let clips = clips_in(&out);
    assert_eq!(crossed.len(), 3, "{err}");
    assert_eq!(clips.len(), 3, "one clip per crossing: {clips:?}");
    let fps = 15.0;
    for (c, &seq) in clips.iter().zip(&crossed) {
        let file = Path::new(c["path"].as_str().unwrap());
        decodes(file);
        let event = seq as f64 / fps;
        let (start, end) = (c["start_pts"].as_f64().unwrap(), c["end_pts"].as_f64().unwrap());
        // From a keyframe (at most 30 pictures, 2 s, apart) at or before event − pre_s, to event + post_s or later.
        let (pre, post) = (0.05, 0.05);
        assert!(start <= event - pre + 1e-6 && start >= event - pre - 2.0 - 1e-6, "clip from {start}, event at {event}: {c}");
        // (`end_pts` is the last frame's start: it is shown until a frame later.)
        assert!(end + 1.0 / fps >= event + post - 1e-6, "clip to {end}, event at {event}: {c}");
        // The event's frame: the same picture as the source's, with the boxes drawn on it.
        let k = ((event - start) * fps).round() as u64;
        let ours = rgb(file, k, (1280, 720));
        let theirs = rgb(&root().join("samples/plates.mp4"), seq, (1280, 720));
        let (a, b) = (drawn(&ours), drawn(&theirs));
        assert!(
            a > 2000 && a > 20 * b.max(1),
            "{}: frame {k} (source frame {seq}): {a} pixels in the boxes' colours, the source's {b}",
            file.display()
        );
    }
}

/// Mean absolute difference of two RGB pictures (`w` wide) over the pixels `inside` says.
fn mean_diff(a: &[u8], b: &[u8], w: usize, inside: impl Fn(usize, usize) -> bool) -> f64 {
    let (mut sum, mut n) = (0u64, 0u64);
    for (i, (p, q)) in a.chunks(3).zip(b.chunks(3)).enumerate() {
        if inside(i % w, i / w) {
            sum += (0..3).map(|c| (p[c] as i32 - q[c] as i32).unsigned_abs() as u64).sum::<u64>();
            n += 3;
        }
    }
    sum as f64 / n.max(1) as f64
}

/// pipelines/faces.toml with a `redact` stage, and a clips sink after it
/// that does not ask for `annotated`: validate warns that it is forced, and
/// each clip's frames are the redacted ones.
#[test]
fn clips_after_a_redact_stage_are_re_encoded_from_the_redacted_frames() {
    require_assets();
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let source = root().join("samples/Megamind.avi");
    let text = std::fs::read_to_string(root().join("pipelines/faces.toml"))
        .unwrap()
        .replace("${FACES_INPUT:-../samples/Megamind.avi}", &source.display().to_string())
        .replace("../models/", &format!("{}/models/", root().display()))
        .replace("${FACES_OUTPUT:-../out/faces.ndjson}", &format!("{}/faces.ndjson", d.display()));
    let text = format!(
        "{text}\n[stages.anon]\nkind = \"redact\"\ninputs = [\"faces\"]\nmethod = \"blur\"\non_miss = \"full\"\n\n\
         [sinks.clips]\nkind = \"clips\"\ninputs = [\"anon\"]\non = {{ classes = [\"face\"], min_score = 0.6 }}\npre_s = 0.5\npost_s = 0.5\nmax_s = 4\n\
         path = \"{}/clips/{{stream}}-{{seq}}.mp4\"\n",
        d.display()
    );
    let p = d.join("faces.toml");
    std::fs::write(&p, text).unwrap();
    let o = bin().arg("validate").arg(&p).output().unwrap();
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(0), "{err}");
    assert!(err.contains("stage `anon` redacts the frames") && err.contains("annotated = true, forced"), "{err}");
    let o = bin().arg("run").arg(&p).output().unwrap();
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(0), "{err}");
    let out = read_ndjson(&d.join("faces.ndjson"));
    let clips = clips_in(&out);
    assert!(!clips.is_empty(), "{err}");
    let (w, h) = (720usize, 528usize);
    let pts_of = |seq: u64| out.iter().find(|l| l["seq"].as_u64() == Some(seq) && l["event"].is_null()).and_then(|l| l["pts"].as_f64());
    let mut checked = 0;
    for c in clips.iter().take(2) {
        let file = Path::new(c["path"].as_str().unwrap());
        decodes(file);
        let seq = c["triggers"][0]["seq"].as_u64().unwrap();
        let start = c["start_pts"].as_f64().unwrap();
        // The clip's frame of its first trigger: frames before it in the clip, from its start.
        let first = out
            .iter()
            .filter(|l| l["event"].is_null() && l["pts"].as_f64().is_some_and(|p| (p - start).abs() < 1e-6))
            .find_map(|l| l["seq"].as_u64())
            .unwrap_or_else(|| panic!("no frame at the clip's start {start}: {c}"));
        assert!(pts_of(seq).is_some());
        let ours = rgb(file, seq - first, (w, h));
        let raw = rgb(&source, seq, (w, h));
        let line = out.iter().find(|l| l["seq"].as_u64() == Some(seq) && l["event"].is_null()).unwrap();
        let faces: Vec<[f64; 4]> = line["results"]["faces"]["detections"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|f| f["score"].as_f64().unwrap() >= 0.6)
            .map(|f| std::array::from_fn(|i| f["bbox"][i].as_f64().unwrap()))
            .collect();
        assert!(!faces.is_empty(), "{line}");
        let in_face =
            |x: usize, y: usize| faces.iter().any(|b| (x as f64) >= b[0] && (x as f64) < b[2] && (y as f64) >= b[1] && (y as f64) < b[3]);
        let near = |x: usize, y: usize| {
            faces.iter().any(|b| {
                let (fw, fh) = (b[2] - b[0], b[3] - b[1]);
                (x as f64) >= b[0] - fw && (x as f64) < b[2] + fw && (y as f64) >= b[1] - fh && (y as f64) < b[3] + fh
            })
        };
        let inside = mean_diff(&ours, &raw, w, in_face);
        let outside = mean_diff(&ours, &raw, w, |x, y| !near(x, y));
        eprintln!(
            "{}: frame {seq}: {} faces, mean difference to the source {inside:.1} inside them, {outside:.1} away",
            file.display(),
            faces.len()
        );
        assert!(
            inside > 3.0 * outside && inside > 15.0,
            "{}: frame {seq} is not redacted: {inside:.1} inside the faces, {outside:.1} away",
            file.display()
        );
        checked += 1;
    }
    assert!(checked > 0);
}
