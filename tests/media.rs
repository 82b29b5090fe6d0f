//! Media I/O with the real binary and the real FFmpeg tools: the `video` sink
//! (checked by ffprobe/ffmpeg as readers), corrupt and resizing input, the
//! hwaccel choice, and audio from every common format.

mod util;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use util::*;

fn ffmpeg(args: &[&str]) {
    let o = Command::new("ffmpeg").args(["-nostdin", "-y", "-loglevel", "error"]).args(args).output().expect("run ffmpeg");
    assert!(o.status.success(), "ffmpeg {}: {}", args.join(" "), String::from_utf8_lossy(&o.stderr));
}

/// `ffprobe -count_frames` of the first video stream: (frames decoded, width, height, stream duration s).
fn probe_video(path: &Path) -> (u64, u64, u64, f64) {
    let o = Command::new("ffprobe")
        .args(["-v", "error", "-count_frames", "-select_streams", "v:0", "-show_entries", "stream=nb_read_frames,width,height,duration"])
        .args(["-of", "json"])
        .arg(path)
        .output()
        .unwrap();
    assert!(o.status.success(), "ffprobe {}: {}", path.display(), String::from_utf8_lossy(&o.stderr));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let s = &v["streams"][0];
    let num = |k: &str| s[k].as_str().and_then(|x| x.parse::<f64>().ok()).or(s[k].as_f64()).unwrap_or(f64::NAN);
    (num("nb_read_frames") as u64, num("width") as u64, num("height") as u64, num("duration"))
}

/// Decode the whole file with ffmpeg: the errors it prints (empty: clean).
fn decode_errors(path: &Path) -> String {
    let o = Command::new("ffmpeg").args(["-nostdin", "-v", "error", "-i"]).arg(path).args(["-f", "null", "-"]).output().unwrap();
    assert!(o.status.success(), "ffmpeg cannot read {}: {}", path.display(), String::from_utf8_lossy(&o.stderr));
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Frame `n` of `video` as an RGB image, decoded by ffmpeg.
fn frame_png(video: &Path, n: u64, dir: &Path) -> image::RgbImage {
    let png = dir.join(format!("frame-{n}.png"));
    ffmpeg(&["-i", video.to_str().unwrap(), "-vf", &format!("select=eq(n\\,{n})"), "-frames:v", "1", png.to_str().unwrap()]);
    image::open(&png).unwrap().to_rgb8()
}

fn is_green(p: &image::Rgb<u8>) -> bool {
    p.0[1] > 180 && p.0[0] < 110 && p.0[2] < 110
}

/// Run `pipelines/annotate.toml` on `input` writing into `dir`.
fn annotate(input: &Path, dir: &Path, extra: &[&str]) -> (std::process::Output, PathBuf, PathBuf) {
    require_assets();
    let (video, ndjson) = (dir.join("annotated.mp4"), dir.join("annotate.ndjson"));
    let o = bin()
        .args(["run", "pipelines/annotate.toml", "--progress", "never"])
        .args(extra)
        .env("ANNOTATE_INPUT", input)
        .env("ANNOTATE_OUTPUT", &video)
        .env("ANNOTATE_NDJSON", &ndjson)
        .output()
        .unwrap();
    (o, video, ndjson)
}

/// Text detection drawn into an mp4: every frame there, the source's duration,
/// and the boxes drawn where they were reported.
#[test]
fn video_sink_writes_annotated_mp4_with_the_source_timing() {
    let dir = tempfile::tempdir().unwrap();
    let input = root().join("samples/text-720p.mp4");
    let report = dir.path().join("report.json");
    let (o, video, ndjson) = annotate(&input, dir.path(), &["--report", report.to_str().unwrap()]);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(0), "{err}");
    assert!(err.contains("decode software ("), "the decode choice is in the summary: {err}");
    let r: serde_json::Value = serde_json::from_slice(&std::fs::read(&report).unwrap()).unwrap();
    assert_eq!(r["decoders"][0][0], "cam", "{}", r["decoders"]);
    let (in_frames, _, _, in_dur) = probe_video(&input);
    let (frames, w, h, dur) = probe_video(&video);
    assert_eq!((frames, w, h), (in_frames, 1280, 720));
    assert!((dur - in_dur).abs() < 1e-3, "duration {dur} vs input {in_dur}");
    assert_eq!(decode_errors(&video), "");
    let lines = read_ndjson(&ndjson);
    for seq in [10u64, 55] {
        let img = frame_png(&video, seq, dir.path());
        let boxes = bboxes(&lines[seq as usize], "boxes");
        assert!(!boxes.is_empty(), "frame {seq} has text");
        for b in boxes {
            // The outline runs outwards from the box edge (4 px at 720p): mid-height of its left side.
            let (x, y) = (b[0].round() as u32 - 2, ((b[1] + b[3]) / 2.0).round() as u32);
            assert!(is_green(img.get_pixel(x, y)), "frame {seq} box {b:?}: {:?} at ({x}, {y})", img.get_pixel(x, y));
        }
    }

    // Plain mode: the same frames, nothing drawn.
    let toml = dir.path().join("plain.toml");
    let text = std::fs::read_to_string(root().join("pipelines/annotate.toml")).unwrap();
    let model = root().join("models/ppocr/ch_PP-OCRv4_det_infer.onnx");
    std::fs::write(
        &toml,
        text.replace("annotate = true", "annotate = false").replace("../models/ppocr/ch_PP-OCRv4_det_infer.onnx", model.to_str().unwrap()),
    )
    .unwrap();
    let plain = dir.path().join("plain.mp4");
    let o = bin()
        .args(["run"])
        .arg(&toml)
        .args(["--progress", "never"])
        .env("ANNOTATE_INPUT", &input)
        .env("ANNOTATE_OUTPUT", &plain)
        .env("ANNOTATE_NDJSON", dir.path().join("plain.ndjson"))
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(probe_video(&plain).0, in_frames);
    assert_eq!(decode_errors(&plain), "");
    let img = frame_png(&plain, 10, dir.path());
    for b in bboxes(&lines[10], "boxes") {
        let (x, y) = (b[0].round() as u32 - 2, ((b[1] + b[3]) / 2.0).round() as u32);
        assert!(!is_green(img.get_pixel(x, y)), "nothing drawn in plain mode");
    }
}

/// Ctrl-C mid-run: exit 130, and the mp4 holds every frame that was processed, readable to the end.
#[test]
fn video_sink_file_stays_playable_after_sigint() {
    require_assets();
    let dir = tempfile::tempdir().unwrap();
    let (video, ndjson) = (dir.path().join("annotated.mp4"), dir.path().join("annotate.ndjson"));
    let child = bin()
        .args(["run", "pipelines/annotate.toml", "--progress", "never"])
        .env("ANNOTATE_INPUT", root().join("samples/eval-720p.mp4"))
        .env("ANNOTATE_OUTPUT", &video)
        .env("ANNOTATE_NDJSON", &ndjson)
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let t0 = Instant::now();
    while std::fs::read_to_string(&ndjson).map(|s| s.lines().count()).unwrap_or(0) < 10 {
        assert!(t0.elapsed() < Duration::from_secs(60), "no output after 60 s");
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(Command::new("kill").args(["-INT", &child.id().to_string()]).status().unwrap().success());
    let o = child.wait_with_output().unwrap();
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(130), "{err}");
    let (_, processed, _, _) = accounting(&err);
    assert!(processed < 300, "stopped early");
    let (frames, _, _, _) = probe_video(&video);
    assert!(frames > 0);
    assert_eq!(frames, processed, "every processed frame is in the file");
    assert_eq!(decode_errors(&video), "");
}

/// A pipeline with a video sink on stdout: a real ffmpeg reading the pipe sees every frame.
#[test]
fn video_sink_streams_mpegts_to_stdout() {
    let dir = tempfile::tempdir().unwrap();
    let toml = dir.path().join("stdout.toml");
    std::fs::write(
        &toml,
        "[sources.gen]\nkind = \"testsrc\"\nwidth = 320\nheight = 240\nrate = 25\nframes = 60\n\
         [sinks.out]\nkind = \"video\"\ninputs = [\"gen\"]\npath = \"-\"\nformat = \"mpegts\"\n",
    )
    .unwrap();
    let mut run = bin().args(["-q", "run"]).arg(&toml).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    let reader = Command::new("ffmpeg")
        .args(["-nostdin", "-v", "error", "-i", "-", "-f", "framemd5", "-"])
        .stdin(run.stdout.take().unwrap())
        .output()
        .unwrap();
    let o = run.wait_with_output().unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(reader.status.success(), "{}", String::from_utf8_lossy(&reader.stderr));
    assert_eq!(String::from_utf8_lossy(&reader.stderr), "", "the reader saw no errors");
    let frames = String::from_utf8_lossy(&reader.stdout).lines().filter(|l| !l.starts_with('#')).count();
    assert_eq!(frames, 60);
}

/// Two streams into one sink with `{stream}` in the path: one file each, with its own size.
#[test]
fn video_sink_writes_one_file_per_stream() {
    let dir = tempfile::tempdir().unwrap();
    let toml = dir.path().join("two.toml");
    std::fs::write(
        &toml,
        "[sources.a]\nkind = \"testsrc\"\nwidth = 320\nheight = 240\nframes = 30\n\
         [sources.b]\nkind = \"testsrc\"\nwidth = 160\nheight = 120\nframes = 20\n\
         [sinks.out]\nkind = \"video\"\ninputs = [\"a\", \"b\"]\npath = \"out/{stream}.mkv\"\n",
    )
    .unwrap();
    let o = bin().args(["run"]).arg(&toml).args(["--progress", "never"]).output().unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let (n, w, h, _) = probe_video(&dir.path().join("out/a.mkv"));
    assert_eq!((n, w, h), (30, 320, 240));
    let (n, w, h, _) = probe_video(&dir.path().join("out/b.mkv"));
    assert_eq!((n, w, h), (20, 160, 120));
}

/// Bad video sink settings stop before anything runs, each error located.
#[test]
fn video_sink_bad_config_is_a_located_error() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("a-file"), "").unwrap();
    let cases: &[(&str, &str, &str)] = &[
        ("path = \"x.mp4\"\ncodec = \"libx999\"", "validate", "error: video sink `out`: unknown video encoder `libx999`\n  --> "),
        ("path = \"x.mp4\"\ncrf = 70", "validate", "error: video sink `out`: crf must be 0–51, got 70\n"),
        ("path = \"x.avi\"", "validate", "error: video sink `out`: cannot tell the container from `x.avi`\n"),
        ("path = \"-\"", "validate", "error: video sink `out`: writing to stdout needs a container\n"),
        (
            "path = \"x.mp4\"\nstream = \"c\"",
            "validate",
            "error: video sink `out`: stream `c` does not feed this sink; its streams are `a`, `b`\n",
        ),
        ("path = \"x.mp4\"", "validate", "error: video sink `out` is fed by 2 streams (`a`, `b`); a video file holds one\n"),
        ("path = \"a-file/x.mp4\"\nstream = \"a\"", "validate", "error: sink `out`: cannot make the folder for "),
        (
            "path = \"x.mp4\"\nstream = \"a\"\npreset = \"warp-speed\"",
            "run",
            "error: video sink `out`: cannot open encoder `libx264` (preset=warp-speed, crf=23)",
        ),
    ];
    for (keys, cmd, want) in cases {
        let toml = dir.path().join("bad.toml");
        std::fs::write(
            &toml,
            format!(
                "[sources.a]\nkind = \"testsrc\"\nframes = 2\n[sources.b]\nkind = \"testsrc\"\nframes = 2\n\
                 [sinks.out]\nkind = \"video\"\ninputs = [\"a\", \"b\"]\n{keys}\n"
            ),
        )
        .unwrap();
        let o = bin().arg(cmd).arg(&toml).output().unwrap();
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(2), "{keys}: {err}");
        assert!(err.contains(want), "{keys}: expected\n{want}\nin\n{err}");
        assert!(err.contains("bad.toml:"), "located: {err}");
    }
}

/// Bytes overwritten in the middle of a file: the decoder skips to the next
/// keyframe, each burst is logged once, the skipped frames are counted in the
/// summary and the JSON report, and the rest of the file is still processed.
#[test]
fn corrupt_data_is_skipped_to_the_next_keyframe() {
    require_assets();
    let dir = tempfile::tempdir().unwrap();
    let clean = dir.path().join("clean.mp4");
    // A keyframe every 10 frames (1 s), no B-frames.
    ffmpeg(&[
        "-i",
        root().join("samples/text-720p.mp4").to_str().unwrap(),
        "-c:v",
        "libx264",
        "-threads",
        "1",
        "-g",
        "10",
        "-bf",
        "0",
        clean.to_str().unwrap(),
    ]);
    let mut bytes = std::fs::read(&clean).unwrap();
    let n = bytes.len();
    for frac in [0.3, 0.5, 0.7] {
        let at = (n as f64 * frac) as usize;
        for (i, b) in bytes[at..at + 400].iter_mut().enumerate() {
            *b = ((i * 37 + 11) % 256) as u8;
        }
    }
    let corrupt = dir.path().join("corrupt.mp4");
    std::fs::write(&corrupt, &bytes).unwrap();
    let report = dir.path().join("report.json");
    let (o, video, ndjson) = annotate(&corrupt, dir.path(), &["--report", report.to_str().unwrap()]);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(0), "{err}");
    let (decoded, processed, _, _) = accounting(&err);
    let r: serde_json::Value = serde_json::from_slice(&std::fs::read(&report).unwrap()).unwrap();
    let cam = &r["nodes"][0];
    assert_eq!(cam["name"], "cam");
    let (skipped, bursts) = (cam["decode_errors"].as_u64().unwrap(), cam["corrupt_bursts"].as_u64().unwrap());
    assert!(skipped > 0 && bursts > 0, "{cam}");
    assert_eq!(decoded + skipped, 100, "every frame is either decoded or counted as skipped");
    assert!(err.contains(&format!("cam: {skipped} frame(s) skipped for corrupt data in {bursts} stretch(es)")), "{err}");
    // One warning per burst, not per packet.
    assert_eq!(err.matches("corrupt data from").count() + err.matches("corrupt data:").count(), bursts as usize, "{err}");
    let lines = read_ndjson(&ndjson);
    assert_eq!(lines.len() as u64, processed);
    assert!(lines.last().unwrap()["pts"].as_f64().unwrap() >= 9.0, "frames after the damage are processed");
    // Text is still found on the frames that came through.
    let truth = truth("text-720p.truth.json");
    let found = lines.iter().filter(|l| {
        let got = bboxes(l, "boxes");
        let seq = (l["pts"].as_f64().unwrap() * 10.0).round() as u64;
        truth.boxes_at(seq).iter().all(|t| got.iter().any(|g| iou(t, g) >= 0.5))
    });
    assert!(found.count() as f64 >= 0.9 * lines.len() as f64);
    assert_eq!(probe_video(&video).0, processed);
}

/// A file cut short says so, honestly, as a source error (exit 1, the frames
/// before the cut processed): against the frame count its container lists
/// (mp4), or, when it lists none (Matroska), the frames its declared duration
/// makes at its rate, given as "about".
#[test]
fn a_cut_file_says_how_far_it_got() {
    let dir = tempfile::tempdir().unwrap();
    let run = |name: &str, extra: &[&str]| {
        let whole = dir.path().join(format!("whole-{name}"));
        // 100 frames at 25 fps: 4 s; no B-frames, so the frames decoded are the frames read.
        let mut args = vec!["-f", "lavfi", "-i", "testsrc2=size=320x240:rate=25", "-frames:v", "100"];
        args.extend(["-c:v", "libx264", "-threads", "1", "-g", "10", "-bf", "0"]);
        args.extend(extra);
        args.push(whole.to_str().unwrap());
        ffmpeg(&args);
        let bytes = std::fs::read(&whole).unwrap();
        let cut = dir.path().join(name);
        std::fs::write(&cut, &bytes[..bytes.len() / 2]).unwrap();
        let toml = dir.path().join(format!("{name}.toml"));
        std::fs::write(
            &toml,
            format!(
                "[sources.cam]\nkind = \"file\"\nuri = \"{name}\"\n[sinks.out]\nkind = \"ndjson\"\ninputs = [\"cam\"]\npath = \"{name}.ndjson\"\n"
            ),
        )
        .unwrap();
        let o = bin().arg("run").arg(&toml).args(["--progress", "never"]).output().unwrap();
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(1), "{err}");
        let (decoded, processed, ..) = accounting(&err);
        assert!(decoded > 10 && decoded < 90, "{err}");
        assert_eq!(read_ndjson(&dir.path().join(format!("{name}.ndjson"))).len() as u64, processed, "{err}");
        (decoded, err)
    };
    for (name, extra) in [("cut.mp4", &["-movflags", "+faststart"][..]), ("cut.mkv", &[][..])] {
        let (decoded, err) = run(name, extra);
        let line = format!(
            "error: source `cam`: {}: truncated: ended early after {decoded} frames (expected about 100)",
            dir.path().join(name).display()
        );
        assert!(err.contains(&line), "{line}\nin:\n{err}");
    }
}

/// Two sizes in one MPEG-TS stream (1280×720, then 640×360): every frame is
/// processed, each with its own size, boxes in that frame's pixels; the video
/// sink keeps the first size.
#[test]
fn resolution_change_mid_stream() {
    require_assets();
    let dir = tempfile::tempdir().unwrap();
    let src = root().join("samples/text-720p.mp4");
    let (a, b, ab) = (dir.path().join("a.ts"), dir.path().join("b.ts"), dir.path().join("ab.ts"));
    let x264 = ["-c:v", "libx264", "-threads", "1", "-bf", "0"];
    let mut args = vec!["-i", src.to_str().unwrap(), "-vf", "trim=start_frame=0:end_frame=20,setpts=PTS-STARTPTS"];
    args.extend(x264);
    args.push(a.to_str().unwrap());
    ffmpeg(&args);
    let mut args = vec!["-i", src.to_str().unwrap(), "-vf", "trim=start_frame=20:end_frame=40,setpts=PTS-STARTPTS,scale=640:360"];
    args.extend(x264);
    args.extend(["-output_ts_offset", "2"]);
    args.push(b.to_str().unwrap());
    ffmpeg(&args);
    ffmpeg(&["-i", &format!("concat:{}|{}", a.display(), b.display()), "-c", "copy", ab.to_str().unwrap()]);
    let (o, video, ndjson) = annotate(&ab, dir.path(), &[]);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(0), "{err}");
    assert_eq!(accounting(&err), (40, 40, 0, 0));
    let lines = read_ndjson(&ndjson);
    assert_eq!(lines.len(), 40);
    let truth = truth("text-720p.truth.json");
    let mut good = 0;
    for (i, l) in lines.iter().enumerate() {
        let scale = if i < 20 { 1.0 } else { 0.5 };
        assert_eq!((l["width"].as_f64().unwrap(), l["height"].as_f64().unwrap()), (1280.0 * scale, 720.0 * scale), "frame {i}");
        let got = bboxes(l, "boxes");
        let want: Vec<[f64; 4]> = truth.boxes_at(i as u64).iter().map(|b| b.map(|v| v * scale)).collect();
        if want.iter().all(|t| got.iter().any(|g| iou(t, g) >= 0.5)) && got.iter().all(|g| g[2] <= 1280.0 * scale + 1.0) {
            good += 1;
        }
    }
    assert!(good >= 36, "{good} of 40 frames have their boxes in their own pixels");
    let (n, w, h, _) = probe_video(&video);
    assert_eq!((n, w, h), (40, 1280, 720), "all frames, first size kept");
}

/// `hwaccel = "cuda"` with no GPU is a located error; `auto` says what it chose.
#[test]
fn hwaccel_cuda_without_a_gpu_is_an_error() {
    require_assets();
    if Path::new("/dev/nvidiactl").exists() {
        eprintln!("a GPU is present: the no-GPU error cannot be checked here");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let toml = dir.path().join("hw.toml");
    let clip = root().join("samples/clip.webm");
    for (hw, code) in [("cuda", 2), ("auto", 0), ("none", 0)] {
        std::fs::write(
            &toml,
            format!(
                "[sources.cam]\nkind = \"file\"\nuri = \"{}\"\nmax_frames = 3\nhwaccel = \"{hw}\"\n\
                 [sinks.out]\nkind = \"null\"\ninputs = [\"cam\"]\n",
                clip.display()
            ),
        )
        .unwrap();
        let o = bin().args(["run"]).arg(&toml).args(["--progress", "never"]).output().unwrap();
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(code), "{hw}: {err}");
        match hw {
            "cuda" => {
                assert!(err.contains("error: source `cam`: hwaccel = \"cuda\": "), "{err}");
                assert!(err.contains("hw.toml:5:11"), "located at the value: {err}");
            }
            "auto" => assert!(err.contains("cam: decode software ("), "{err}"),
            _ => assert!(err.contains("cam: decode software (hwaccel = \"none\")"), "{err}"),
        }
    }
}

/// A 1 kHz beep at 2.000–2.300 s (44.1 kHz stereo, quiet noise elsewhere) from
/// wav, flac, mp3, AAC (m4a), Opus and a video file's AAC track: resampled to
/// 16 kHz mono, the `audio_level` stage finds it there, ± one 32 ms window.
#[test]
fn audio_formats_decode_and_the_beep_is_found() {
    require_assets();
    let dir = tempfile::tempdir().unwrap();
    let d = |f: &str| dir.path().join(f).to_str().unwrap().to_string();
    let tone = "0.5*sin(2*PI*1000*t)*between(t\\,2\\,2.3)";
    ffmpeg(&[
        "-f",
        "lavfi",
        "-i",
        &format!("aevalsrc={tone}+0.001*(2*random(0)-1)|{tone}+0.001*(2*random(1)-1):s=44100:d=5"),
        "-c:a",
        "pcm_s16le",
        &d("beep.wav"),
    ]);
    for f in ["beep.flac", "beep.mp3", "beep.m4a", "beep.opus"] {
        ffmpeg(&["-i", &d("beep.wav"), &d(f)]);
    }
    ffmpeg(&[
        "-f",
        "lavfi",
        "-i",
        "testsrc=size=320x240:rate=10:duration=5",
        "-i",
        &d("beep.wav"),
        "-c:v",
        "libx264",
        "-threads",
        "1",
        "-c:a",
        "aac",
        "-shortest",
        &d("beep-video.mp4"),
    ]);
    for f in ["beep.wav", "beep.flac", "beep.mp3", "beep.m4a", "beep.opus", "beep-video.mp4"] {
        let out = dir.path().join(format!("{f}.ndjson"));
        let o = bin()
            .args(["run", "pipelines/audio-level.toml", "--progress", "never"])
            .env("LEVEL_INPUT", d(f))
            .env("LEVEL_OUTPUT", &out)
            .output()
            .unwrap();
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(0), "{f}: {err}");
        let lines = read_ndjson(&out);
        // 5 s at 16 kHz in 512-sample windows, with exact timestamps.
        assert!((155..=158).contains(&lines.len()), "{f}: {} windows", lines.len());
        for (i, l) in lines.iter().enumerate() {
            assert!((l["pts"].as_f64().unwrap() - i as f64 * 0.032).abs() < 1e-9, "{f}: {l}");
        }
        let segs = lines.last().unwrap()["results"]["level"]["segments"].as_array().unwrap().clone();
        assert_eq!(segs.len(), 1, "{f}: one loud stretch: {segs:?}");
        let (s, e) = (segs[0]["start"].as_f64().unwrap(), segs[0]["end"].as_f64().unwrap());
        assert!((s - 2.0).abs() <= 0.032 && (e - 2.3).abs() <= 0.032, "{f}: beep at {s}–{e} s");
        // Live events: opened once, closed once, with the same times.
        let started: Vec<_> = lines.iter().filter_map(|l| l["results"]["level"]["started"].as_array()).flatten().collect();
        let ended: Vec<_> = lines.iter().filter_map(|l| l["results"]["level"]["ended"].as_array()).flatten().collect();
        assert_eq!((started.len(), ended.len()), (1, 1), "{f}");
        assert_eq!((started[0]["start"].as_f64(), ended[0]["end"].as_f64()), (Some(s), Some(e)));
        // The beep is loud (a 0.5 sine in both channels, downmixed with -3 dB each to
        // amplitude 0.71: RMS -6 dBFS), the rest is quiet noise.
        let at = |t: f64| &lines[(t / 0.032) as usize]["results"]["level"];
        assert!((at(2.15)["rms_db"].as_f64().unwrap() + 6.0).abs() < 1.5, "{f}: {}", at(2.15));
        assert!(at(1.0)["rms_db"].as_f64().unwrap() < -50.0, "{f}: {}", at(1.0));
    }
}

/// Mean absolute difference of two RGB images of one size (per channel, 0-255).
fn mean_diff(a: &image::RgbImage, b: &image::RgbImage) -> f64 {
    assert_eq!(a.dimensions(), b.dimensions());
    let sum: u64 = a.as_raw().iter().zip(b.as_raw()).map(|(x, y)| x.abs_diff(*y) as u64).sum();
    sum as f64 / a.as_raw().len() as f64
}

/// `rotate = "auto"`: a clip whose display matrix asks for a quarter turn
/// (as phones store portrait video) reaches the pipeline turned: width and
/// height swap for 90° and 270°, and the pixels are those ffmpeg shows when
/// it turns the clip itself (its autorotate). Without the key frames stay as stored.
#[test]
fn rotate_auto_turns_frames_as_the_display_matrix_asks() {
    let dir = tempfile::tempdir().unwrap();
    for (pix_fmt, plain) in [("yuv420p", "plain.mp4"), ("yuv422p", "plain-422.mp4")] {
        let plain = dir.path().join(plain);
        let args = ["-f", "lavfi", "-i", "testsrc2=size=320x240:rate=25", "-frames:v", "3", "-c:v", "libx264", "-pix_fmt", pix_fmt];
        ffmpeg(&args.into_iter().chain(["-threads", "1", plain.to_str().unwrap()]).collect::<Vec<_>>());
    }
    // 4:2:2 cannot be turned a quarter in its own layout: it is turned in 4:4:4.
    for (rotate, plain, turned) in [
        (90, "plain.mp4", "turned-90.mp4"),
        (180, "plain.mp4", "turned-180.mp4"),
        (270, "plain.mp4", "turned-270.mp4"),
        (90, "plain-422.mp4", "turned-422-90.mp4"),
    ] {
        let (plain, turned) = (dir.path().join(plain), dir.path().join(turned));
        let meta = format!("rotate={rotate}");
        ffmpeg(&["-i", plain.to_str().unwrap(), "-c", "copy", "-metadata:s:v:0", &meta, turned.to_str().unwrap()]);
        // What ffmpeg shows: the clip turned as its display matrix asks.
        let want = frame_png(&turned, 0, dir.path());
        for mode in ["auto", "none"] {
            let stem = turned.file_stem().unwrap().to_string_lossy().into_owned();
            let out = dir.path().join(format!("{stem}-{mode}"));
            let toml = dir.path().join(format!("{stem}-{mode}.toml"));
            std::fs::write(
                &toml,
                format!(
                    "[sources.cam]\nkind = \"file\"\nuri = \"{}\"\nrotate = \"{mode}\"\n\n\
                     [sinks.frames]\nkind = \"images\"\ninputs = [\"cam\"]\nfolder = \"{}\"\nformat = \"png\"\nannotate = false\n\n\
                     [sinks.out]\nkind = \"ndjson\"\ninputs = [\"cam\"]\npath = \"{}\"\n",
                    turned.display(),
                    out.display(),
                    out.join("out.ndjson").display()
                ),
            )
            .unwrap();
            let o = bin().arg("run").arg(&toml).args(["--progress", "never"]).output().unwrap();
            let err = stderr(&o);
            assert_eq!(o.status.code(), Some(0), "{err}");
            let lines = read_ndjson(&out.join("out.ndjson"));
            assert_eq!(lines.len(), 3, "{err}");
            let size = (lines[0]["width"].as_u64().unwrap(), lines[0]["height"].as_u64().unwrap());
            let mut pngs: Vec<PathBuf> =
                std::fs::read_dir(&out).unwrap().map(|e| e.unwrap().path()).filter(|p| p.extension().is_some_and(|e| e == "png")).collect();
            pngs.sort();
            let got = image::open(&pngs[0]).unwrap().to_rgb8();
            if mode == "auto" {
                let expect = if rotate == 180 { (320, 240) } else { (240, 320) };
                assert_eq!(size, expect, "{rotate}°: width and height as turned: {err}");
                assert!(err.contains("° clockwise, as the container's display matrix asks"), "{err}");
                let d = mean_diff(&got, &want);
                eprintln!("{stem}: mean difference from ffmpeg's turned frame {d:.2}");
                assert!(d < 4.0, "{rotate}°: the turned frame is ffmpeg's turned frame (mean difference {d:.2})");
                let wrong = mean_diff(&got, &image::imageops::rotate180(&want));
                assert!(wrong > 20.0, "{rotate}°: turned the other way would differ (mean difference {wrong:.2})");
            } else {
                assert_eq!(size, (320, 240), "{rotate}°: as stored: {err}");
                assert!(err.contains("frames are processed as stored, not turned"), "{err}");
                if rotate == 180 {
                    let d = mean_diff(&got, &want);
                    assert!(d > 20.0, "the stored frame is not the turned one (mean difference {d:.2}): the check above can fail");
                }
            }
        }
    }
    // A `dir` source turns each file as its own display matrix asks.
    let folder = dir.path().join("batch");
    std::fs::create_dir_all(&folder).unwrap();
    for name in ["turned-90.mp4", "turned-180.mp4", "plain.mp4"] {
        std::fs::copy(dir.path().join(name), folder.join(name)).unwrap();
    }
    let toml = dir.path().join("batch.toml");
    std::fs::write(
        &toml,
        format!(
            "[sources.rec]\nkind = \"dir\"\npath = \"{}\"\nrotate = \"auto\"\n\n[sinks.out]\nkind = \"ndjson\"\ninputs = [\"rec\"]\npath = \"{}\"\n",
            folder.display(),
            dir.path().join("batch.ndjson").display()
        ),
    )
    .unwrap();
    let o = bin().arg("run").arg(&toml).args(["--progress", "never"]).output().unwrap();
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(0), "{err}");
    for line in read_ndjson(&dir.path().join("batch.ndjson")) {
        let size = (line["width"].as_u64().unwrap(), line["height"].as_u64().unwrap());
        let want = if line["stream"] == "turned-90.mp4" { (240, 320) } else { (320, 240) };
        assert_eq!(size, want, "{line}");
    }
}

/// A text detection pipeline on `source` (a TOML source table body) writing `out`.
fn detect_toml(source: &str, out: &Path) -> String {
    let models = root().join("models/ppocr/ch_PP-OCRv4_det_infer.onnx");
    format!(
        "[sources.cam]\n{source}\n\n[stages.pre]\nkind = \"preprocess\"\ninputs = [\"cam\"]\nwidth = 640\nheight = 384\ncolor = \"bgr\"\n\
         mean = [0.5, 0.5, 0.5]\nstd = [0.5, 0.5, 0.5]\n\n[stages.det]\nkind = \"infer\"\ninputs = [\"pre\"]\nmodel = \"{}\"\n\n\
         [stages.boxes]\nkind = \"text_detection\"\ninputs = [\"det\"]\n\n[sinks.out]\nkind = \"ndjson\"\ninputs = [\"boxes\"]\npath = \"{}\"\n",
        models.display(),
        out.display()
    )
}

/// An image sequence is one stream: a `%05d` pattern's images in number
/// order at `fps`, giving the text boxes the clip they came from gives; a
/// folder's images in natural name order (`f2` before `f10`), each frame the
/// image itself, sizes free to change, an unreadable image skipped and
/// counted as corrupt, keeping its place in time.
#[test]
fn an_image_sequence_is_one_stream_in_natural_order() {
    require_assets();
    let dir = tempfile::tempdir().unwrap();
    let seq = dir.path().join("seq");
    std::fs::create_dir_all(&seq).unwrap();
    let clip = root().join("samples/text-720p.mp4");
    ffmpeg(&["-i", clip.to_str().unwrap(), "-frames:v", "12", seq.join("img%05d.png").to_str().unwrap()]);
    let run = |toml: &str, name: &str| {
        let p = dir.path().join(format!("{name}.toml"));
        std::fs::write(&p, toml).unwrap();
        let report = dir.path().join(format!("{name}.json"));
        let o = bin().arg("run").arg(&p).args(["--progress", "never", "--report"]).arg(&report).output().unwrap();
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(0), "{name}: {err}");
        let r: serde_json::Value = serde_json::from_slice(&std::fs::read(&report).unwrap()).unwrap();
        let cam = r["nodes"].as_array().unwrap().iter().find(|n| n["name"] == "cam").unwrap().clone();
        (err, cam["decode_errors"].as_u64().unwrap())
    };

    // The pattern, at 10 fps (the clip's rate), against the clip itself.
    let (from_clip, from_seq) = (dir.path().join("clip.ndjson"), dir.path().join("seq.ndjson"));
    run(&detect_toml(&format!("kind = \"file\"\nuri = \"{}\"\nmax_frames = 12", clip.display()), &from_clip), "clip");
    let pattern = format!("kind = \"image_sequence\"\npath = \"{}\"\nfps = 10", seq.join("img%05d.png").display());
    let (err, bad) = run(&detect_toml(&pattern, &from_seq), "seq");
    assert_eq!(bad, 0, "{err}");
    let (a, b) = (read_ndjson(&from_clip), read_ndjson(&from_seq));
    assert_eq!((a.len(), b.len()), (12, 12), "{err}");
    for (i, (x, y)) in a.iter().zip(&b).enumerate() {
        assert_eq!(y["seq"].as_u64(), Some(i as u64));
        assert!((y["pts"].as_f64().unwrap() - i as f64 / 10.0).abs() < 1e-6, "pts {i}/fps: {y}");
        let (bx, by) = (bboxes(x, "boxes"), bboxes(y, "boxes"));
        assert!(!bx.is_empty() && bx.len() == by.len(), "frame {i}: {} boxes from the clip, {} from its images", bx.len(), by.len());
        for g in &bx {
            assert!(by.iter().any(|h| iou(g, h) >= 0.9), "frame {i}: box {g:?} of the clip not found in {by:?}");
        }
    }

    // A folder named f1.png … f12.png (name order would put f10 first); f3 at
    // another size, f6 not an image.
    let folder = dir.path().join("folder");
    std::fs::create_dir_all(&folder).unwrap();
    for n in 1..=12 {
        std::fs::copy(seq.join(format!("img{n:05}.png")), folder.join(format!("f{n}.png"))).unwrap();
    }
    let f3 = folder.join("f3.png");
    ffmpeg(&["-i", seq.join("img00003.png").to_str().unwrap(), "-vf", "scale=640:360", f3.to_str().unwrap()]);
    std::fs::write(folder.join("f6.png"), b"not an image").unwrap();
    // f9 a JPEG cut in half: FFmpeg would conceal the missing half; it is damaged, so skipped.
    std::fs::remove_file(folder.join("f9.png")).unwrap();
    let f9 = dir.path().join("f9.jpg");
    ffmpeg(&["-i", seq.join("img00009.png").to_str().unwrap(), f9.to_str().unwrap()]);
    let jpeg = std::fs::read(&f9).unwrap();
    std::fs::write(folder.join("f9.jpg"), &jpeg[..jpeg.len() / 2]).unwrap();
    let snaps = dir.path().join("snaps");
    let toml = format!(
        "[sources.cam]\nkind = \"image_sequence\"\npath = \"{}\"\n\n[sinks.frames]\nkind = \"images\"\ninputs = [\"cam\"]\nfolder = \"{}\"\n\
         format = \"png\"\nannotate = false\n\n[sinks.out]\nkind = \"ndjson\"\ninputs = [\"cam\"]\npath = \"{}\"\n",
        folder.display(),
        snaps.display(),
        dir.path().join("folder.ndjson").display()
    );
    let (err, bad) = run(&toml, "folder");
    assert_eq!(bad, 2, "the unreadable and the cut image are counted: {err}");
    assert!(err.contains("f6.png: not a readable image") && err.contains("f9.jpg: not a readable image"), "{err}");
    let lines = read_ndjson(&dir.path().join("folder.ndjson"));
    assert_eq!(lines.len(), 10, "{err}");
    let images: Vec<u32> = (1..=12).filter(|n| *n != 6 && *n != 9).collect();
    let mut shots: Vec<PathBuf> = std::fs::read_dir(&snaps).unwrap().map(|e| e.unwrap().path()).collect();
    shots.sort();
    assert_eq!(shots.len(), 10);
    for ((line, shot), n) in lines.iter().zip(&shots).zip(&images) {
        let want = image::open(folder.join(format!("f{n}.png"))).unwrap().to_rgb8();
        let got = image::open(shot).unwrap().to_rgb8();
        assert_eq!((line["width"].as_u64(), line["height"].as_u64()), (Some(want.width() as u64), Some(want.height() as u64)), "f{n}");
        assert!(mean_diff(&got, &want) < 0.5, "frame {} is f{n}.png", line["seq"]);
        // 25 fps by default; the skipped f6 keeps its place in time.
        assert!((line["pts"].as_f64().unwrap() - (n - 1) as f64 / 25.0).abs() < 1e-6, "f{n}: {line}");
    }
    assert_eq!(lines[2]["width"].as_u64(), Some(640), "f3 at its own size");
}
