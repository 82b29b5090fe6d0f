//! The `analytics` stage through the real binary. Line crossings and zone
//! entries, exits and dwell on real pedestrian trajectories (the TUD-Campus
//! and TUD-Stadtmitte ground truth shipped in the motmetrics wheel), fed as
//! clean detections through the tracker, against the same rule applied here
//! to the ground-truth trajectories; the moving-plates clip through the real
//! PP-OCR detector, tracker and a counting line; located errors for bad
//! lines and zones.

mod util;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use util::*;

/// Bottom centre, centre or top centre of a x0, y0, x1, y1 box.
fn anchor(name: &str, b: [f64; 4]) -> [f64; 2] {
    let cx = (b[0] + b[2]) / 2.0;
    match name {
        "center" => [cx, (b[1] + b[3]) / 2.0],
        "top_center" => [cx, b[1]],
        _ => [cx, b[3]],
    }
}

/// docs/analytics.md's rule for lines: the side a point is decidedly on
/// (`true`: the side a track leaves going `in`), or `None` within `margin`
/// of the line or beside the segment.
fn side(from: [f64; 2], to: [f64; 2], p: [f64; 2], margin: f64) -> Option<bool> {
    let (dx, dy) = (to[0] - from[0], to[1] - from[1]);
    let (px, py) = (p[0] - from[0], p[1] - from[1]);
    let len2 = dx * dx + dy * dy;
    let t = (px * dx + py * dy) / len2;
    let d = (dx * py - dy * px) / len2.sqrt();
    ((0.0..=1.0).contains(&t) && d.abs() > margin).then_some(d > 0.0)
}

/// Inside a polygon (even-odd), or `None` within `margin` of an edge.
fn inside(poly: &[[f64; 2]], p: [f64; 2], margin: f64) -> Option<bool> {
    let n = poly.len();
    let mut dist = f64::INFINITY;
    let mut inside = false;
    for i in 0..n {
        let (a, b) = (poly[i], poly[(i + 1) % n]);
        let (dx, dy) = (b[0] - a[0], b[1] - a[1]);
        let t = (((p[0] - a[0]) * dx + (p[1] - a[1]) * dy) / (dx * dx + dy * dy)).clamp(0.0, 1.0);
        dist = dist.min(((p[0] - a[0] - t * dx).powi(2) + (p[1] - a[1] - t * dy).powi(2)).sqrt());
        if (b[1] > p[1]) != (a[1] > p[1]) && p[0] < (a[0] - b[0]) * (p[1] - b[1]) / (a[1] - b[1]) + b[0] {
            inside = !inside;
        }
    }
    (dist > margin).then_some(inside)
}

struct LineSpec {
    name: &'static str,
    from: [f64; 2],
    to: [f64; 2],
    anchor: &'static str,
    classes: Option<&'static str>,
    streams: Option<&'static str>,
}

struct ZoneSpec {
    name: &'static str,
    points: Vec<[f64; 2]>,
    anchor: &'static str,
    streams: Option<&'static str>,
}

/// Ground-truth trajectories of one sequence: id → (frame from 1, box), in frame order.
fn trajectories(seq: &str) -> BTreeMap<u64, Vec<(u64, [f64; 4])>> {
    let gt = root().join(format!(".deps/eval-venv/lib/python3.11/site-packages/motmetrics/data/{seq}/gt.txt"));
    let text = std::fs::read_to_string(&gt).unwrap_or_else(|e| panic!("{}: {e}: run scripts/fetch-eval-deps.sh", gt.display()));
    let mut t: BTreeMap<u64, Vec<(u64, [f64; 4])>> = BTreeMap::new();
    for l in text.lines().filter(|l| !l.trim().is_empty()) {
        let v: Vec<f64> = l.split(',').take(6).map(|x| x.trim().parse().unwrap()).collect();
        t.entry(v[1] as u64).or_default().push((v[0] as u64, [v[2], v[3], v[2] + v[4], v[3] + v[5]]));
    }
    for tr in t.values_mut() {
        tr.sort_by_key(|o| o.0);
    }
    t
}

/// What the ground truth gives, per stream: crossings (line, seq, direction),
/// zone entries (zone, seq), exits (zone, dwell frames, ended with the track).
#[derive(Debug, Default, PartialEq)]
struct Expected {
    crossed: Vec<(String, u64, String)>,
    entered: Vec<(String, u64)>,
    left: Vec<(String, u64, bool)>,
}

/// The rule of docs/analytics.md on the trajectories of `stream`. A track
/// gets its id from its second detection (ByteTrack's activation), except on
/// the stream's first frame: a trajectory starting later is counted from its
/// second box.
fn expected(stream: &str, tracks: &BTreeMap<u64, Vec<(u64, [f64; 4])>>, lines: &[LineSpec], zones: &[ZoneSpec], margin: f64) -> Expected {
    let applies = |s: Option<&str>| s.is_none_or(|s| s.split(',').any(|x| x == stream));
    let mut e = Expected::default();
    for tr in tracks.values() {
        let obs = if tr[0].0 == 1 { &tr[..] } else { &tr[1..] };
        for l in lines.iter().filter(|l| applies(l.streams) && l.classes.is_none_or(|c| c.contains('0'))) {
            let mut state = None;
            for (frame, b) in obs {
                let Some(s) = side(l.from, l.to, anchor(l.anchor, *b), margin) else { continue };
                if state == Some(!s) {
                    e.crossed.push((l.name.into(), frame - 1, if s { "out" } else { "in" }.into()));
                }
                state = Some(s);
            }
        }
        for z in zones.iter().filter(|z| applies(z.streams)) {
            let mut entered: Option<u64> = None;
            for (frame, b) in obs {
                let Some(i) = inside(&z.points, anchor(z.anchor, *b), margin) else { continue };
                match (entered, i) {
                    (None, true) => {
                        entered = Some(frame - 1);
                        e.entered.push((z.name.into(), frame - 1));
                    }
                    (Some(at), false) => {
                        e.left.push((z.name.into(), frame - 1 - at, false));
                        entered = None;
                    }
                    _ => {}
                }
            }
            if let (Some(at), Some(last)) = (entered, obs.last()) {
                e.left.push((z.name.into(), last.0 - 1 - at, true));
            }
        }
    }
    e.crossed.sort();
    e.entered.sort();
    e.left.sort();
    e
}

fn toml_point(p: [f64; 2]) -> String {
    format!("[{}, {}]", p[0], p[1])
}

fn streams_key(s: Option<&str>) -> String {
    s.map(|s| format!("streams = [{}]\n", s.split(',').map(|x| format!("\"{x}\"")).collect::<Vec<_>>().join(", "))).unwrap_or_default()
}

/// Both TUD sequences as two streams of one pipeline, clean boxes (the
/// ground truth, score 1) → track → analytics with lines and zones of every
/// anchor, a class filter and per-stream lists → NDJSON. Every crossing (its
/// frame and direction), every entry (its frame), every exit (its dwell, and
/// whether the track ended inside) equals the ground truth's, exactly; the
/// summary, `--report` and the running counts in the results agree with the events.
#[test]
fn lines_and_zones_count_real_trajectories_exactly() {
    let dir = tempfile::tempdir().unwrap();
    let seqs = [("campus", "TUD-Campus"), ("stadt", "TUD-Stadtmitte")];
    let margin = 4.0;
    let lines = [
        LineSpec { name: "middle", from: [320.0, 0.0], to: [320.0, 480.0], anchor: "bottom_center", classes: None, streams: None },
        LineSpec { name: "slant", from: [100.0, 250.0], to: [600.0, 480.0], anchor: "center", classes: Some("0"), streams: Some("campus") },
        LineSpec {
            name: "stadt_x400",
            from: [400.0, 480.0],
            to: [400.0, 0.0],
            anchor: "bottom_center",
            classes: None,
            streams: Some("stadt"),
        },
        LineSpec { name: "heads", from: [300.0, 0.0], to: [290.0, 300.0], anchor: "top_center", classes: None, streams: Some("stadt") },
        LineSpec { name: "others", from: [320.0, 0.0], to: [320.0, 480.0], anchor: "bottom_center", classes: Some("1"), streams: None },
    ];
    let zones = [
        ZoneSpec {
            name: "front",
            points: vec![[200.0, 300.0], [450.0, 300.0], [450.0, 480.0], [200.0, 480.0]],
            anchor: "bottom_center",
            streams: None,
        },
        ZoneSpec {
            name: "corner",
            points: vec![[0.0, 330.0], [330.0, 330.0], [0.0, 480.0]],
            anchor: "bottom_center",
            streams: Some("campus"),
        },
        ZoneSpec {
            name: "square",
            points: vec![[300.0, 150.0], [520.0, 150.0], [540.0, 230.0], [280.0, 230.0]],
            anchor: "center",
            streams: Some("stadt"),
        },
    ];
    let mut text = String::new();
    let mut trajectories_of = BTreeMap::new();
    for (name, seq) in seqs {
        let tracks = trajectories(seq);
        let mut dets: Vec<(u64, [f64; 4])> = tracks.values().flatten().copied().collect();
        dets.sort_by_key(|d| d.0);
        let file = dir.path().join(format!("{name}.txt"));
        let mot: String =
            dets.iter().map(|(f, b)| format!("{f},-1,{},{},{},{},1,-1,-1,-1\n", b[0], b[1], b[2] - b[0], b[3] - b[1])).collect();
        std::fs::write(&file, mot).unwrap();
        text += &format!("[sources.{name}]\nkind = \"detections\"\nuri = \"{}\"\nrate = 25\n\n", file.display());
        trajectories_of.insert(name, tracks);
    }
    text += "[stages.trk]\nkind = \"track\"\ninputs = [\"campus\", \"stadt\"]\nframe_rate = 25\n\n";
    text += &format!("[stages.counts]\nkind = \"analytics\"\ninputs = [\"trk\"]\nmargin = {margin}\n\n");
    for l in &lines {
        text += &format!(
            "[[stages.counts.lines]]\nname = \"{}\"\nfrom = {}\nto = {}\nanchor = \"{}\"\n{}{}\n",
            l.name,
            toml_point(l.from),
            toml_point(l.to),
            l.anchor,
            l.classes.map(|c| format!("classes = [{c}]\n")).unwrap_or_default(),
            streams_key(l.streams)
        );
    }
    for z in &zones {
        let pts: Vec<String> = z.points.iter().map(|p| toml_point(*p)).collect();
        text += &format!(
            "[[stages.counts.zones]]\nname = \"{}\"\npoints = [{}]\nanchor = \"{}\"\n{}\n",
            z.name,
            pts.join(", "),
            z.anchor,
            streams_key(z.streams)
        );
    }
    text += "[sinks.out]\nkind = \"ndjson\"\ninputs = [\"counts\"]\npath = \"out.ndjson\"\n";
    let p = dir.path().join("p.toml");
    std::fs::write(&p, &text).unwrap();
    let report = dir.path().join("report.json");
    let o = bin().arg("run").arg(&p).arg("--report").arg(&report).output().unwrap();
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(0), "{err}");
    let out = read_ndjson(&dir.path().join("out.ndjson"));
    let rep: serde_json::Value = serde_json::from_slice(&std::fs::read(&report).unwrap()).unwrap();

    let mut total_events = 0;
    for (name, _) in seqs {
        let want = expected(name, &trajectories_of[name], &lines, &zones, margin);
        let mut got = Expected::default();
        let mut running: BTreeMap<String, [u64; 2]> = BTreeMap::new();
        let mut last_seq = 0;
        // A frame's running counts include the crossings raised on it, whose events follow it.
        let mut pending: Option<&serde_json::Value> = None;
        let check_counts = |frame: Option<&serde_json::Value>, running: &BTreeMap<String, [u64; 2]>| {
            let Some(f) = frame else { return };
            for (line, c) in f["results"]["counts"]["lines"].as_object().unwrap() {
                let want = running.get(line).copied().unwrap_or_default();
                assert_eq!([c["in"].as_u64().unwrap(), c["out"].as_u64().unwrap()], want, "{line} in {f}");
            }
        };
        for l in out.iter().filter(|l| l["stream"] == name) {
            let s = |k: &str| l[k].as_str().unwrap().to_string();
            match l["event"].as_str() {
                None => {
                    check_counts(pending, &running);
                    pending = Some(l);
                    // Events follow their frame: never one of a frame not yet written.
                    last_seq = l["seq"].as_u64().unwrap();
                    continue;
                }
                Some("crossed") => {
                    let c = running.entry(s("line")).or_default();
                    c[(s("direction") == "out") as usize] += 1;
                    got.crossed.push((s("line"), l["seq"].as_u64().unwrap(), s("direction")));
                }
                Some("entered") => got.entered.push((s("zone"), l["seq"].as_u64().unwrap())),
                Some("left") => {
                    let dwell = l["dwell_frames"].as_u64().unwrap();
                    assert_eq!(l["dwell_ms"].as_u64(), Some(dwell * 40), "25 fps: {l}");
                    got.left.push((s("zone"), dwell, l["track_ended"].as_bool().unwrap()));
                }
                Some("track_ended") => continue,
                Some(other) => panic!("unexpected event {other}: {l}"),
            }
            if l["event"] != "left" {
                assert_eq!(l["seq"].as_u64(), Some(last_seq), "an event follows its frame: {l}");
            }
            total_events += 1;
        }
        check_counts(pending, &running);
        got.crossed.sort();
        got.entered.sort();
        got.left.sort();
        eprintln!(
            "{name}: {} crossings, {} entries, {} exits (ground truth: {}, {}, {})",
            got.crossed.len(),
            got.entered.len(),
            got.left.len(),
            want.crossed.len(),
            want.entered.len(),
            want.left.len()
        );
        assert!(want.crossed.len() >= 3 && want.entered.len() >= 3, "the lines and zones see something: {want:?}");
        assert!(want.crossed.iter().any(|c| c.2 == "in") && want.crossed.iter().any(|c| c.2 == "out"), "{want:?}");
        assert_eq!(got, want, "stream {name}");
        // The summary and the report count the same, per line, class and direction.
        for line in lines.iter().filter(|l| l.streams.is_none_or(|s| s == name)) {
            for dir in ["in", "out"] {
                let n = want.crossed.iter().filter(|c| c.0 == line.name && c.2 == dir).count() as u64;
                let rows: Vec<&serde_json::Value> = rep["counts"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .filter(|r| r["stream"] == name && r["name"] == line.name && r["what"] == dir)
                    .collect();
                assert_eq!(rows.iter().map(|r| r["count"].as_u64().unwrap()).sum::<u64>(), n, "{name} {} {dir}", line.name);
                assert!(rows.iter().all(|r| r["class"] == "0" && r["kind"] == "line"));
            }
        }
        for zone in zones.iter().filter(|z| z.streams.is_none_or(|s| s == name)) {
            let entered = want.entered.iter().filter(|e| e.0 == zone.name).count();
            if entered > 0 {
                assert!(
                    err.contains(&format!("counts: zone `{}` ({name}) class 0: entered {entered}, left {entered}", zone.name)),
                    "{err}"
                );
            }
        }
    }
    assert!(rep["counts"].as_array().unwrap().iter().all(|r| r["name"] != "others"), "class 1 is never counted");
    assert_eq!(out.iter().filter(|l| l["event"].is_string() && l["event"] != "track_ended").count(), total_events);
    // Every track ends once, with its lifetime.
    let ended: Vec<&serde_json::Value> = out.iter().filter(|l| l["event"] == "track_ended").collect();
    let confirmed: std::collections::BTreeSet<(String, u64)> = out
        .iter()
        .filter(|l| l["event"].is_null())
        .flat_map(|l| {
            let s = l["stream"].as_str().unwrap().to_string();
            l["results"]["trk"]["tracks"]
                .as_array()
                .unwrap()
                .iter()
                .filter_map(move |t| Some((s.clone(), t["track_id"].as_u64()?)))
                .collect::<Vec<_>>()
        })
        .collect();
    let mut ended_ids: Vec<(String, u64)> =
        ended.iter().map(|e| (e["stream"].as_str().unwrap().to_string(), e["track_id"].as_u64().unwrap())).collect();
    ended_ids.sort();
    assert_eq!(ended_ids, confirmed.into_iter().collect::<Vec<_>>(), "each confirmed track ends once");
    for e in &ended {
        let (first, last) = (e["first_seq"].as_u64().unwrap(), e["last_seq"].as_u64().unwrap());
        assert!(first <= last && e["hits"].as_u64().unwrap() <= last - first + 1, "{e}");
    }
}

/// A pipeline file from pipelines/ with its paths made absolute and its outputs in `dir`.
fn example(name: &str, dir: &Path) -> PathBuf {
    let text = std::fs::read_to_string(root().join("pipelines").join(name))
        .unwrap()
        .replace("../samples/", &format!("{}/samples/", root().display()))
        .replace("../models/", &format!("{}/models/", root().display()))
        .replace("../out/", &format!("{}/", dir.display()));
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p
}

/// pipelines/lines.toml on the moving-plates clip (real decode, real PP-OCR
/// detector, tracker): each plate crosses the line once, in its direction,
/// when its box is at the line, and keeps one track id from entering the
/// picture to leaving it; the annotated video has every frame.
#[test]
fn plates_cross_the_line_once_each_with_one_id() {
    require_assets();
    assert!(root().join("samples/plates.mp4").exists(), "samples/plates.mp4 is missing: run scripts/make-samples.sh");
    let truth: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(root().join("samples/plates.truth.json")).unwrap()).unwrap();
    let fps = truth["fps"].as_f64().unwrap();
    let plates = truth["plates"].as_array().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let p = example("lines.toml", dir.path());
    let o = bin().arg("run").arg(&p).output().unwrap();
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(0), "{err}");
    let out = read_ndjson(&dir.path().join("lines.ndjson"));
    // Frames and every kind of event (crossed, entered, left, track_ended) are in the messages' schema.
    check_messages(&out);
    // The plate a box belongs to: the one whose row (text top y, 72 px text) it covers.
    let plate_of = |b: &[f64; 4]| {
        plates
            .iter()
            .position(|pl| (b[1] + b[3]) / 2.0 > pl["y"].as_f64().unwrap() - 20.0 && (b[1] + b[3]) / 2.0 < pl["y"].as_f64().unwrap() + 90.0)
    };
    let mut ids: BTreeMap<usize, std::collections::BTreeSet<u64>> = BTreeMap::new();
    let mut frames = 0;
    let mut boxes_at: BTreeMap<(u64, u64), [f64; 4]> = BTreeMap::new();
    for l in out.iter().filter(|l| l["event"].is_null()) {
        frames += 1;
        let seq = l["seq"].as_u64().unwrap();
        for t in l["results"]["tracks"]["tracks"].as_array().unwrap() {
            let (Some(id), Some(b)) = (t["track_id"].as_u64(), t["bbox"].as_array()) else { continue };
            let b = [0, 1, 2, 3].map(|i| b[i].as_f64().unwrap());
            let k = plate_of(&b).unwrap_or_else(|| panic!("seq {seq}: a track on no plate: {t}"));
            ids.entry(k).or_default().insert(id);
            boxes_at.insert((seq, id), b);
        }
    }
    assert_eq!(frames, truth["frames"].as_u64().unwrap());
    assert_eq!(ids.len(), plates.len(), "every plate tracked: {ids:?}");
    for (k, set) in &ids {
        assert_eq!(set.len(), 1, "plate {} keeps one id from entry to exit: {set:?}", plates[*k]["text"]);
    }
    let crossed: Vec<&serde_json::Value> = out.iter().filter(|l| l["event"] == "crossed").collect();
    assert_eq!(crossed.len(), plates.len(), "{crossed:?}");
    for (k, pl) in plates.iter().enumerate() {
        let id = *ids[&k].iter().next().unwrap();
        let c: Vec<&&serde_json::Value> = crossed.iter().filter(|c| c["track_id"] == id).collect();
        assert_eq!(c.len(), 1, "plate {} crosses once: {crossed:?}", pl["text"]);
        assert_eq!(c[0]["direction"], pl["direction"], "plate {}", pl["text"]);
        assert_eq!(c[0]["line"], "gate");
        // At the crossing the box centre has just passed x = 640 (margin 4 px, one frame's travel at most).
        let seq = c[0]["seq"].as_u64().unwrap();
        let b = boxes_at[&(seq, id)];
        let cx = (b[0] + b[2]) / 2.0;
        let step = pl["vx"].as_f64().unwrap().abs() / fps;
        assert!((cx - 640.0).abs() > 4.0 && (cx - 640.0).abs() <= 4.0 + step + 1.0, "plate {} at x {cx} when it crossed", pl["text"]);
    }
    assert!(err.contains("counts: line `gate` (cam) class 0: in 2, out 1"), "{err}");
    // The zone (the right half): entered and left in pairs, the last summary counts agree.
    let entered = out.iter().filter(|l| l["event"] == "entered").count();
    let left = out.iter().filter(|l| l["event"] == "left").count();
    assert_eq!((entered, left), (3, 3), "each plate is in the right half once");
    let ended = out.iter().filter(|l| l["event"] == "track_ended").count();
    assert_eq!(ended, 3, "each track ends once");
    let probe = std::process::Command::new("ffprobe")
        .args(["-v", "error", "-count_frames", "-select_streams", "v:0", "-show_entries", "stream=nb_read_frames", "-of", "csv=p=0"])
        .arg(dir.path().join("lines.mp4"))
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&probe.stdout).trim(), "120", "the annotated video has every frame");
}

/// The example validates.
#[test]
fn example_pipeline_validates() {
    let o = bin().args(["validate", "pipelines/lines.toml"]).output().unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
}

/// Bad lines and zones: located errors, exit 2.
#[test]
fn bad_lines_and_zones_are_located() {
    let dir = tempfile::tempdir().unwrap();
    let dets = dir.path().join("d.txt");
    std::fs::write(&dets, "1,-1,10,10,5,5,0.9\n").unwrap();
    let check = |places: &str, want: &[&str]| {
        let p = dir.path().join("p.toml");
        std::fs::write(
            &p,
            format!(
                "[sources.cam]\nkind = \"detections\"\nuri = \"{}\"\n\n[stages.trk]\nkind = \"track\"\ninputs = [\"cam\"]\n\n\
                 [stages.counts]\nkind = \"analytics\"\ninputs = [\"trk\"]\n{places}\n\
                 [sinks.out]\nkind = \"ndjson\"\ninputs = [\"counts\"]\npath = \"out.ndjson\"\n",
                dets.display()
            ),
        )
        .unwrap();
        let o = bin().arg("validate").arg(&p).output().unwrap();
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(2), "{places}: {err}");
        for w in want {
            assert!(err.contains(w), "{places}: want {w:?} in: {err}");
        }
    };
    check(
        "[[stages.counts.lines]]\nname = \"a\"\nfrom = [1, 2]\nto = [1, 2]\n",
        &["line `a` has the same point for `from` and `to`", "p.toml:15:6"],
    );
    check(
        "[[stages.counts.zones]]\nname = \"z\"\npoints = [[0, 0], [5, 5]]\nstreams = [\"nope\"]\n",
        &["zone `z` needs at least 3 points, got 2", "p.toml:14:10", "`nope` is not a source of this pipeline (sources: cam)"],
    );
    check(
        "[[stages.counts.lines]]\nname = \"a\"\nfrom = [0, 0]\nto = [5, 5]\n[[stages.counts.lines]]\nname = \"a\"\nfrom = [0, 0]\nto = [1, 5]\n",
        &["two lines are named `a`", "p.toml:17:8"],
    );
    check(
        "[[stages.counts.lines]]\nname = \"a\"\nfrom = [0, 0]\nto = [5, 5]\nanchor = \"feet\"\n",
        &["unknown variant `feet`", "p.toml:16:"],
    );
    check(
        "margin = -1\n[[stages.counts.lines]]\nname = \"a\"\nfrom = [0, 0]\nto = [5, 5]\n",
        &["margin must be a distance in pixels", "p.toml:12:10"],
    );
    check("", &["no lines and no zones", "p.toml:10:8"]);
}
