//! Event clips (`kind = "clips"`) through the real binary on the moving-plates
//! clip (real decode, real PP-OCR detector, tracker, counting line): one clip
//! per crossing, starting at most one GOP before `event − pre_s` and ending
//! at or after `event + post_s`, its video packets byte-identical to the
//! source's for that span (ffprobe's packet hashes), the event's frame in it
//! (pixels compared, both decoded by the ffmpeg CLI); overlapping events
//! merged; retention; a clip that cannot be written stops clips, not the
//! pipeline; SIGTERM mid-clip leaves a playable, shorter clip.

mod util;

use std::path::{Path, PathBuf};
use std::process::Command;

use util::clips::{clips_in, decodes};
use util::*;

const FPS: f64 = 15.0;

/// pipelines/clips.toml with its paths made absolute, its outputs in `dir`, and `edit` applied.
fn example(dir: &Path, edit: &[(&str, &str)]) -> PathBuf {
    let mut text = std::fs::read_to_string(root().join("pipelines/clips.toml"))
        .unwrap()
        .replace("../samples/", &format!("{}/samples/", root().display()))
        .replace("../models/", &format!("{}/models/", root().display()))
        .replace("../out/", &format!("{}/", dir.display()));
    for (from, to) in edit {
        assert!(text.contains(from), "{from} not in pipelines/clips.toml");
        text = text.replace(from, to);
    }
    let p = dir.join("clips.toml");
    std::fs::write(&p, text).unwrap();
    p
}

/// One video packet as ffprobe shows it.
#[derive(Debug, Clone)]
struct Packet {
    pts: f64,
    key: bool,
    hash: String,
}

fn packets(file: &Path) -> Vec<Packet> {
    let o = Command::new("ffprobe")
        .args(["-v", "error", "-select_streams", "v:0", "-show_entries", "packet=pts_time,flags,data_hash", "-show_data_hash", "sha256"])
        .args(["-of", "csv=p=0"])
        .arg(file)
        .output()
        .expect("ffprobe");
    assert!(o.status.success(), "ffprobe {}: {}", file.display(), String::from_utf8_lossy(&o.stderr));
    String::from_utf8_lossy(&o.stdout)
        .lines()
        .map(|l| {
            let f: Vec<&str> = l.split(',').collect();
            // An AVI has no pts: N/A.
            Packet { pts: f[0].parse().unwrap_or(f64::NAN), key: f[1].starts_with('K'), hash: f[2].to_string() }
        })
        .collect()
}

/// Frame `n` (presentation order) of `file`, decoded by the ffmpeg CLI to grey pixels.
fn frame(file: &Path, n: u64) -> Vec<u8> {
    let o = Command::new("ffmpeg")
        .args(["-v", "error", "-nostdin", "-i"])
        .arg(file)
        .args(["-vf", &format!("select=eq(n\\,{n})"), "-frames:v", "1", "-pix_fmt", "gray", "-f", "rawvideo", "-"])
        .output()
        .expect("ffmpeg");
    assert!(o.status.success(), "ffmpeg {}: {}", file.display(), String::from_utf8_lossy(&o.stderr));
    assert_eq!(o.stdout.len(), 1280 * 720, "{}: frame {n} not decoded", file.display());
    o.stdout
}

#[test]
fn one_clip_per_crossing_with_the_source_packets_unchanged() {
    require_assets();
    let dir = tempfile::tempdir().unwrap();
    let (pre, post) = (0.05, 0.05);
    let p = example(dir.path(), &[("pre_s = 1\n", "pre_s = 0.05\n"), ("post_s = 1\n", "post_s = 0.05\n")]);
    let o = bin().arg("run").arg(&p).output().unwrap();
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(0), "{err}");
    let out = read_ndjson(&dir.path().join("clips.ndjson"));
    check_messages(&out);
    let crossed: Vec<u64> = out.iter().filter(|l| l["event"] == "crossed").map(|l| l["seq"].as_u64().unwrap()).collect();
    let clips = clips_in(&out);
    assert_eq!(crossed.len(), 3, "{err}");
    assert_eq!(clips.len(), crossed.len(), "one clip per crossing: {clips:?}");
    let source = root().join("samples/plates.mp4");
    let src = packets(&source);
    let keys: Vec<f64> = src.iter().filter(|p| p.key).map(|p| p.pts).collect();
    let gop = keys.windows(2).map(|w| w[1] - w[0]).fold(0.0, f64::max);
    assert!(gop > 0.5, "keyframes at {keys:?}");
    for (c, &seq) in clips.iter().zip(&crossed) {
        assert_eq!(c["triggers"], serde_json::json!([{"event": "crossed", "seq": seq}]), "{c}");
        assert_eq!(c["cut"], false, "{c}");
        let event = seq as f64 / FPS;
        let file = PathBuf::from(c["path"].as_str().unwrap());
        let file = if file.is_absolute() { file } else { root().join(file) };
        decodes(&file);
        let got = packets(&file);
        // The clip's packets are a run of the source's, byte for byte.
        let at = src.iter().position(|p| p.hash == got[0].hash).expect("the clip's first packet is one of the source's");
        let span = &src[at..at + got.len()];
        assert!(span.iter().zip(&got).all(|(a, b)| a.hash == b.hash), "{}: packets differ from the source's", file.display());
        // It starts on a keyframe at most one GOP before event − pre_s ...
        let start = span[0].pts;
        assert!(span[0].key && got[0].key, "{}: starts on a non-keyframe", file.display());
        assert!(start <= event - pre + 1e-6 && start >= event - pre - gop - 1e-6, "clip starts at {start}, event at {event}");
        assert!((c["start_pts"].as_f64().unwrap() - start).abs() < 1e-6, "{c}");
        // ... and ends at or after event + post_s.
        let end = span.iter().map(|p| p.pts).fold(f64::MIN, f64::max);
        assert!(end >= event + post - 1e-6, "clip ends at {end}, event at {event}");
        assert_eq!(c["frames"].as_u64().unwrap() as usize, got.len(), "{c}");
        // The event's frame is in it, pixel for pixel.
        let first_frame = (start * FPS).round() as u64;
        assert_eq!(frame(&file, seq - first_frame), frame(&source, seq), "{}: frame of the event", file.display());
    }
    // Each clip said in the log, and counted.
    assert_eq!(err.matches("clips sink `clips`: ").count(), 3, "{err}");
}

#[test]
fn overlapping_crossings_make_one_clip_with_every_trigger() {
    require_assets();
    let dir = tempfile::tempdir().unwrap();
    let p = example(dir.path(), &[]);
    let o = bin().arg("run").arg(&p).output().unwrap();
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(0), "{err}");
    let out = read_ndjson(&dir.path().join("clips.ndjson"));
    let crossed: Vec<u64> = out.iter().filter(|l| l["event"] == "crossed").map(|l| l["seq"].as_u64().unwrap()).collect();
    let clips = clips_in(&out);
    // Crossings 1 s apart or less with pre_s = post_s = 1: one clip.
    assert!(crossed.windows(2).all(|w| (w[1] - w[0]) as f64 / FPS <= 1.0), "{crossed:?}");
    assert_eq!(clips.len(), 1, "{clips:?}");
    let triggers: Vec<u64> = clips[0]["triggers"].as_array().unwrap().iter().map(|t| t["seq"].as_u64().unwrap()).collect();
    assert_eq!(triggers, crossed);
    let (first, last) = (crossed[0] as f64 / FPS, *crossed.last().unwrap() as f64 / FPS);
    assert!(clips[0]["start_pts"].as_f64().unwrap() <= first - 1.0 + 1e-6, "{}", clips[0]);
    assert!(clips[0]["end_pts"].as_f64().unwrap() >= last + 1.0 - 1e-6, "{}", clips[0]);
    decodes(Path::new(clips[0]["path"].as_str().unwrap()));
}

#[test]
fn retention_deletes_the_oldest_clips_past_max_bytes() {
    require_assets();
    let dir = tempfile::tempdir().unwrap();
    // Three clips of an earlier run, old and large: past max_bytes together with the new ones.
    let folder = dir.path().join("clips/cam");
    std::fs::create_dir_all(&folder).unwrap();
    for n in 0..3 {
        std::fs::write(folder.join(format!("old-{n}.mp4")), vec![0u8; 40_000]).unwrap();
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let keep_untouched = folder.join("notes.txt");
    std::fs::write(&keep_untouched, "not a clip").unwrap();
    let p = example(
        dir.path(),
        &[("pre_s = 1\n", "pre_s = 0.05\n"), ("post_s = 1\n", "post_s = 0.05\n"), ("max_bytes = \"1GB\"", "max_bytes = \"60KB\"")],
    );
    let o = bin().arg("run").arg(&p).output().unwrap();
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(0), "{err}");
    let out = read_ndjson(&dir.path().join("clips.ndjson"));
    let clips = clips_in(&out);
    assert_eq!(clips.len(), 3, "{err}");
    let mut left: Vec<(String, u64)> = std::fs::read_dir(&folder)
        .unwrap()
        .map(|e| e.unwrap())
        .filter(|e| e.path().extension().is_some_and(|x| x == "mp4"))
        .map(|e| (e.file_name().to_string_lossy().into_owned(), e.metadata().unwrap().len()))
        .collect();
    left.sort();
    let total: u64 = left.iter().map(|f| f.1).sum();
    assert!(total <= 60_000, "{left:?}");
    // The old files went first: none is left while a new clip is.
    assert!(left.iter().all(|f| !f.0.starts_with("old-")), "{left:?}");
    assert!(!left.is_empty(), "the newest clip is kept: {err}");
    assert!(keep_untouched.exists(), "only clips are deleted");
    assert!(err.contains("(retention)"), "{err}");
}

/// `max_age`: clips older than it go (those of earlier runs at the start), newer ones stay.
#[test]
fn retention_deletes_the_clips_past_max_age() {
    require_assets();
    let dir = tempfile::tempdir().unwrap();
    let folder = dir.path().join("clips/cam");
    std::fs::create_dir_all(&folder).unwrap();
    let (old, recent) = (folder.join("old.mp4"), folder.join("recent.mp4"));
    std::fs::write(&old, vec![0u8; 1000]).unwrap();
    std::fs::write(&recent, vec![0u8; 1000]).unwrap();
    // Two hours old, and ten minutes old, by their modification times.
    for (f, ago) in [(&old, "2 hours ago"), (&recent, "10 minutes ago")] {
        assert!(Command::new("touch").args(["-d", ago]).arg(f).status().unwrap().success());
    }
    let p = example(dir.path(), &[("max_age = \"7d\"", "max_age = \"1h\"")]);
    let o = bin().arg("run").arg(&p).output().unwrap();
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(0), "{err}");
    assert!(!old.exists(), "a clip past max_age is kept: {err}");
    assert!(recent.exists(), "a clip within max_age is deleted: {err}");
    assert!(!clips_in(&read_ndjson(&dir.path().join("clips.ndjson"))).is_empty(), "{err}");
    assert!(err.contains("old.mp4 (retention)"), "{err}");
}

#[test]
fn a_clip_that_cannot_be_written_stops_clips_not_the_pipeline() {
    require_assets();
    let dir = tempfile::tempdir().unwrap();
    // A file where the clips' folder should be.
    std::fs::write(dir.path().join("clips"), "a file, not a folder").unwrap();
    let p = example(dir.path(), &[("pre_s = 1\n", "pre_s = 0.05\n"), ("post_s = 1\n", "post_s = 0.05\n")]);
    let o = bin().arg("run").arg(&p).output().unwrap();
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(0), "the pipeline goes on: {err}");
    let out = read_ndjson(&dir.path().join("clips.ndjson"));
    assert_eq!(out.iter().filter(|l| l["event"].is_null()).count(), 120, "every frame reaches the other sink");
    assert!(clips_in(&out).is_empty());
    assert_eq!(err.matches("no more clips are made in this run").count(), 1, "said once: {err}");
    assert!(err.contains("cannot make"), "{err}");
}

#[test]
fn a_file_size_limit_mid_clip_stops_clips_not_the_pipeline() {
    require_assets();
    let dir = tempfile::tempdir().unwrap();
    let p = example(dir.path(), &[]);
    // A disk that fills: RLIMIT_FSIZE of 20 KiB on the child (SIGXFSZ ignored, so a
    // write past it fails with EFBIG as one on a full disk fails with ENOSPC); the
    // clip (about 40 KB) hits it part-way. The NDJSON sink would too: it is left out.
    let text = std::fs::read_to_string(&p).unwrap();
    let text = text.split("[sinks.results]").next().unwrap().to_string();
    std::fs::write(&p, text).unwrap();
    let o = Command::new("bash")
        .arg("-c")
        .arg(format!("trap '' XFSZ; ulimit -f 20 && exec {} run {}", env!("CARGO_BIN_EXE_infer-stream"), p.display()))
        .current_dir(root())
        .output()
        .unwrap();
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(0), "the pipeline goes on: {err}");
    assert!(err.contains("no more clips are made in this run"), "{err}");
    assert!(err.contains("frames: decoded 120 = processed 120"), "{err}");
    // The broken clip is removed.
    let left: Vec<_> = std::fs::read_dir(dir.path().join("clips/cam")).map(|d| d.flatten().map(|e| e.path()).collect()).unwrap_or_default();
    assert!(left.is_empty(), "{left:?}");
}

#[test]
fn sigterm_mid_clip_finishes_a_playable_shorter_clip() {
    require_assets();
    let dir = tempfile::tempdir().unwrap();
    // The plates clip (8 s) played in real time, stopped right after the first
    // crossing (3.5 s), long before its clip's end (20 s later) and the input's.
    let p = example(dir.path(), &[("post_s = 1\n", "post_s = 20\n"), ("max_s = 30", "max_s = 40")]);
    let text = std::fs::read_to_string(&p).unwrap().replace("kind = \"file\"\n", "kind = \"file\"\nrealtime = true\n");
    std::fs::write(&p, text).unwrap();
    let child = bin().arg("run").arg(&p).stderr(std::process::Stdio::piped()).spawn().unwrap();
    // Wait for the first crossing in the NDJSON, then stop.
    let nd = dir.path().join("clips.ndjson");
    let t0 = std::time::Instant::now();
    while !std::fs::read_to_string(&nd).unwrap_or_default().contains("\"crossed\"") {
        assert!(t0.elapsed().as_secs() < 60, "no crossing");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    send_signal(child.id(), "TERM");
    let o = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    let out = read_ndjson(&nd);
    let clips = clips_in(&out);
    assert_eq!(clips.len(), 1, "{err}");
    assert_eq!(clips[0]["cut"], true, "{}", clips[0]);
    let file = Path::new(clips[0]["path"].as_str().unwrap());
    decodes(file);
    let got = packets(file);
    assert!(!got.is_empty() && got[0].key);
    let seq = out.iter().find(|l| l["event"] == "crossed").unwrap()["seq"].as_u64().unwrap();
    // Cut at the stop: well before the input's end (7.93 s), so not closed by the stream ending.
    let end = clips[0]["end_pts"].as_f64().unwrap();
    assert!(end >= seq as f64 / FPS && end < 7.0, "cut at the stop: {}", clips[0]);
    assert!(!out.iter().any(|l| l["seq"].as_u64() == Some(119) && l["event"].is_null()), "stopped before the end");
    assert_eq!(clips[0]["frames"].as_u64().unwrap() as usize, got.len());
}

/// Send `signal` to `pid` with kill(1).
fn send_signal(pid: u32, signal: &str) {
    let s = Command::new("kill").arg(format!("-{signal}")).arg(pid.to_string()).status().unwrap();
    assert!(s.success());
}

/// `serve`: `GET /v1/clips` lists the clip (viewer role), `GET /v1/clips/{id}`
/// gives its file byte for byte; no token is 401, an unknown id 404.
#[test]
fn serve_lists_and_gives_the_clips() {
    require_assets();
    use util::serve::{Serve, curl, json_of, wait_for};
    const VIEWER: &str = "clips-viewer-token-0123456789";
    let dir = tempfile::tempdir().unwrap();
    let p = example(dir.path(), &[]);
    let text = std::fs::read_to_string(&p).unwrap().replace(
        "[pipeline]\nname = \"clips\"\n",
        &format!("[pipeline]\nname = \"clips\"\napi = {{ tokens = [{{ role = \"viewer\", token = \"{VIEWER}\" }}] }}\n"),
    );
    let s = Serve::start(&text, &[]);
    let auth = format!("Authorization: Bearer {VIEWER}");
    let mut listed = serde_json::Value::Null;
    wait_for("a clip listed", std::time::Duration::from_secs(120), || {
        let (code, body) = curl(&s.url("/v1/clips"), &["-H", &auth]);
        assert_eq!(code, 200, "{body}\n{}", s.log());
        listed = json_of(&body);
        !listed["clips"].as_array().unwrap().is_empty()
    });
    let clip = &listed["clips"][0];
    assert_eq!(clip["stream"], "cam", "{listed}");
    assert!(clip["frames"].as_u64().unwrap() > 0 && clip["bytes"].as_u64().unwrap() > 0, "{listed}");
    let id = clip["id"].as_u64().unwrap();
    let got = dir.path().join("got.mp4");
    let o = Command::new("curl")
        .args(["-s", "-S", "--fail", "--max-time", "20", "-H", &auth, "-o"])
        .arg(&got)
        .arg(s.url(&format!("/v1/clips/{id}")))
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let on_disk = std::fs::read(clip["path"].as_str().unwrap()).unwrap_or_else(|e| panic!("{listed}: {e}"));
    assert_eq!(std::fs::read(&got).unwrap(), on_disk, "the download is the clip's file");
    decodes(&got);
    // The ring and the clips in /metrics.
    let (code, m) = curl(&s.url("/metrics"), &["-H", &auth]);
    assert_eq!(code, 200);
    let ring = m.lines().find(|l| l.starts_with("infer_stream_clip_ring_bytes{") && l.contains("stream=\"cam\"")).expect(&m);
    assert!(ring.rsplit(' ').next().unwrap().parse::<f64>().unwrap() > 0.0, "{ring}");
    assert!(m.lines().any(|l| l.starts_with("infer_stream_clips_written_total{") && l.ends_with(" 1")), "{m}");
    let (code, body) = curl(&s.url("/v1/clips"), &[]);
    assert_eq!(code, 401, "{body}");
    let (code, body) = curl(&s.url("/v1/clips/999999"), &["-H", &auth]);
    assert_eq!((code, json_of(&body)["status"].as_u64()), (404, Some(404)), "{body}");
}

/// A stream added at run time to a `serve` template keeps its own ring:
/// its crossings make clips of its own packets (byte-identical to the file's),
/// listed under its id; removed, its ring goes from /metrics.
#[test]
fn a_stream_added_to_serve_gets_clips_and_its_ring_goes_with_it() {
    require_assets();
    use util::serve::{Serve, add, curl, json_of, wait_for};
    let dir = tempfile::tempdir().unwrap();
    let p = example(
        dir.path(),
        &[("kind = \"file\"\nuri = ", "kind = \"file\"\ndynamic = true\nrealtime = true\nrestart = \"always\"\nuri = ")],
    );
    let s = Serve::start(&std::fs::read_to_string(&p).unwrap(), &[]);
    let (code, body) = add(&s, serde_json::json!({ "source": "cam", "id": "added-1" }));
    assert_eq!(code, 201, "{body}");
    let mut listed = serde_json::Value::Null;
    wait_for("a clip of the added stream", std::time::Duration::from_secs(120), || {
        listed = json_of(&curl(&s.url("/v1/clips"), &[]).1);
        !listed["clips"].as_array().unwrap().is_empty()
    });
    let clip = &listed["clips"][0];
    assert_eq!(clip["stream"], "added-1", "{listed}\n{}", s.log());
    let file = PathBuf::from(clip["path"].as_str().unwrap());
    decodes(&file);
    let source: Vec<String> = packets(&root().join("samples/plates.mp4")).into_iter().map(|p| p.hash).collect();
    let copied: Vec<String> = packets(&file).into_iter().map(|p| p.hash).collect();
    assert!(
        !copied.is_empty() && source.windows(copied.len()).any(|w| w == copied.as_slice()),
        "the clip's packets are a run of the file's"
    );
    let ring = |m: &str| m.lines().any(|l| l.starts_with("infer_stream_clip_ring_bytes{") && l.contains("stream=\"added-1\""));
    assert!(ring(&curl(&s.url("/metrics"), &[]).1), "no ring of the added stream in /metrics");
    let (code, body) = curl(&s.url("/v1/streams/added-1"), &["-X", "DELETE"]);
    assert_eq!(code, 200, "{body}");
    wait_for("its ring gone from /metrics", std::time::Duration::from_secs(20), || !ring(&curl(&s.url("/metrics"), &[]).1));
}

/// An RTSP camera (GStreamer's RTSP server) that drops and comes back while a
/// clip is being made: the clip goes on over the new connection, the time the
/// camera was away is in its `gaps`, and the file decodes without an error.
#[test]
fn an_rtsp_camera_that_drops_mid_clip_leaves_a_gap_in_a_playable_clip() {
    use util::serve::{Camera, free_port, terminate};
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let mut camera = Some(Camera::start(port));
    let toml = format!(
        r#"
[sources.cam]
kind = "rtsp"
uri = "rtsp://127.0.0.1:{port}/cam"
watchdog_ms = 1000
backoff_initial_ms = 100
backoff_max_ms = 300

[sinks.clips]
kind = "clips"
inputs = ["cam"]
on = ["lost"]
pre_s = 1
post_s = 4
path = "{dir}/clips/{{stream}}-{{start:%H%M%S}}.mp4"

[sinks.out]
kind = "ndjson"
inputs = ["cam"]
path = "{dir}/out.ndjson"
"#,
        dir = dir.path().display()
    );
    let p = dir.path().join("rtsp.toml");
    std::fs::write(&p, toml).unwrap();
    let log = std::fs::File::create(dir.path().join("run.log")).unwrap();
    let child = bin().arg("run").arg(&p).stderr(log).spawn().unwrap();
    let nd = dir.path().join("out.ndjson");
    let lines = || std::fs::read_to_string(&nd).unwrap_or_default();
    let wait = |what: &str, done: &dyn Fn(&str) -> bool| {
        let t0 = std::time::Instant::now();
        while !done(&lines()) {
            assert!(t0.elapsed().as_secs() < 30, "{what}: not within 30 s");
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
    };
    wait("30 frames", &|t| t.lines().filter(|l| l.contains("\"pts\"")).count() >= 30);
    camera.take();
    wait("a lost event", &|t| t.contains("\"lost\""));
    std::thread::sleep(std::time::Duration::from_millis(1500));
    camera = Some(Camera::start(port));
    wait("a clip", &|t| t.contains("\"clip\""));
    let code = terminate(child);
    drop(camera);
    let out = read_ndjson(&nd);
    check_messages(&out);
    let clips = clips_in(&out);
    let log = std::fs::read_to_string(dir.path().join("run.log")).unwrap();
    assert_eq!(clips.len(), 1, "{code:?}: {log}");
    let c = clips[0];
    let gaps = c["gaps"].as_array().unwrap();
    assert_eq!(gaps.len(), 1, "{c}");
    let (from, to) = (gaps[0]["from"].as_f64().unwrap(), gaps[0]["to"].as_f64().unwrap());
    assert!(to - from >= 1.5, "the camera was away 1.5 s or more: {c}");
    assert!(c["start_pts"].as_f64().unwrap() < from && c["end_pts"].as_f64().unwrap() > to, "frames on both sides of the gap: {c}");
    let file = Path::new(c["path"].as_str().unwrap());
    decodes(file);
    let got = packets(file);
    assert_eq!(got.len() as u64, c["frames"].as_u64().unwrap());
    // The gap is in the file's timestamps too.
    let jump = got.windows(2).map(|w| w[1].pts - w[0].pts).fold(0.0, f64::max);
    assert!(jump >= 1.5, "largest step between packets {jump} s");
}

/// SIGKILL mid-clip: the fragments already complete are on disk and play; at
/// most the open one (a GOP) is lost.
#[test]
fn sigkill_mid_clip_leaves_the_finished_fragments_playable() {
    require_assets();
    let dir = tempfile::tempdir().unwrap();
    let p = example(dir.path(), &[("post_s = 1\n", "post_s = 20\n"), ("max_s = 30", "max_s = 40")]);
    let text = std::fs::read_to_string(&p).unwrap().replace("kind = \"file\"\n", "kind = \"file\"\nrealtime = true\n");
    std::fs::write(&p, text).unwrap();
    let mut child = bin().arg("run").arg(&p).stderr(std::process::Stdio::null()).spawn().unwrap();
    let nd = dir.path().join("clips.ndjson");
    let t0 = std::time::Instant::now();
    // Killed 1.5 s (of source time) after the first crossing: the pre-roll (a GOP or two) and a second are written.
    let seq = loop {
        let text = std::fs::read_to_string(&nd).unwrap_or_default();
        if let Some(l) = text.lines().find(|l| l.contains("\"crossed\"")) {
            break serde_json::from_str::<serde_json::Value>(l).unwrap()["seq"].as_u64().unwrap();
        }
        assert!(t0.elapsed().as_secs() < 60, "no crossing");
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    std::thread::sleep(std::time::Duration::from_millis(1500));
    child.kill().unwrap();
    child.wait().unwrap();
    let files: Vec<PathBuf> = std::fs::read_dir(dir.path().join("clips/cam")).unwrap().map(|e| e.unwrap().path()).collect();
    assert_eq!(files.len(), 1, "{files:?}");
    decodes(&files[0]);
    let got = packets(&files[0]);
    // Whole GOPs from the keyframe at or before the crossing − 1 s up to at least the crossing's GOP.
    assert!(!got.is_empty() && got[0].key, "{got:?}");
    let src = packets(&root().join("samples/plates.mp4"));
    let at = src.iter().position(|p| p.hash == got[0].hash).unwrap();
    assert!(src[at..at + got.len()].iter().zip(&got).all(|(a, b)| a.hash == b.hash));
    let last = src[at..at + got.len()].iter().map(|p| p.pts).fold(0.0, f64::max);
    assert!(last + 1.0 >= seq as f64 / FPS, "the crossing's GOP (or the one before it) is kept: last {last}, crossing {seq}");
}

/// A detection filter (`on = { classes = ["face"], min_score = 0.6 }`) on
/// CenterFace's faces in samples/Megamind.avi's picture (made H.264 with
/// B-frames by libx264): every trigger is a frame with such a face, every
/// clip is the source's own packets, unchanged. The AVI itself (MPEG-4 with
/// B-frames and no pts) is refused with what to do.
#[test]
fn a_detection_filter_makes_clips_of_the_frames_with_faces() {
    require_assets();
    let dir = tempfile::tempdir().unwrap();
    let text = faces_with_clips(dir.path(), &root().join("samples/Megamind.avi"));
    let p = dir.path().join("avi.toml");
    std::fs::write(&p, text).unwrap();
    let o = bin().arg("run").arg(&p).output().unwrap();
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(0), "{err}");
    assert!(err.contains("carry no presentation timestamps") && err.contains("-fflags +genpts"), "{err}");
    assert!(clips_in(&read_ndjson(&dir.path().join("faces.ndjson"))).is_empty());
    std::fs::remove_dir_all(dir.path().join("clips")).ok();

    let source = dir.path().join("megamind.mp4");
    let o = Command::new("ffmpeg")
        .args(["-v", "error", "-nostdin", "-i"])
        .arg(root().join("samples/Megamind.avi"))
        .args(["-an", "-c:v", "libx264", "-preset", "ultrafast", "-g", "24", "-bf", "2", "-threads", "1"])
        .arg(&source)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let text = faces_with_clips(dir.path(), &source);
    let p = dir.path().join("faces.toml");
    std::fs::write(&p, text).unwrap();
    let o = bin().arg("run").arg(&p).output().unwrap();
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(0), "{err}");
    let out = read_ndjson(&dir.path().join("faces.ndjson"));
    let faces_at = |seq: u64| {
        out.iter().any(|l| {
            l["seq"].as_u64() == Some(seq)
                && l["event"].is_null()
                && l["results"]["faces"]["detections"].as_array().unwrap().iter().any(|d| d["score"].as_f64().unwrap() >= 0.6)
        })
    };
    let clips = clips_in(&out);
    assert!(!clips.is_empty(), "{err}");
    let src = packets(&source);
    for c in &clips {
        let triggers = c["triggers"].as_array().unwrap();
        assert!(!triggers.is_empty());
        for t in triggers {
            assert_eq!(t["event"], "face", "{c}");
            assert!(faces_at(t["seq"].as_u64().unwrap()), "trigger without a face: {t}");
        }
        assert!(c["end_pts"].as_f64().unwrap() - c["start_pts"].as_f64().unwrap() <= 4.0 + 1.0, "max_s: {c}");
        let file = Path::new(c["path"].as_str().unwrap());
        decodes(file);
        let got = packets(file);
        let at = src.iter().position(|p| p.hash == got[0].hash).expect("the clip's first packet is the source's");
        assert!(src[at..at + got.len()].iter().zip(&got).all(|(a, b)| a.hash == b.hash), "{}", file.display());
    }
}

/// pipelines/faces.toml on `input` with a clips sink of faces; outputs in `dir`.
fn faces_with_clips(dir: &Path, input: &Path) -> String {
    let text = std::fs::read_to_string(root().join("pipelines/faces.toml"))
        .unwrap()
        .replace("${FACES_INPUT:-../samples/Megamind.avi}", &input.display().to_string())
        .replace("../models/", &format!("{}/models/", root().display()))
        .replace("${FACES_OUTPUT:-../out/faces.ndjson}", &format!("{}/faces.ndjson", dir.display()));
    let text = format!(
        "{text}\n[sinks.clips]\nkind = \"clips\"\ninputs = [\"faces\"]\non = {{ classes = [\"face\"], min_score = 0.6 }}\npre_s = 0.5\npost_s = 0.5\nmax_s = 4\npath = \"{}/clips/{{stream}}-{{seq}}.mp4\"\n",
        dir.display()
    );
    text
}
