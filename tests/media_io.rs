//! Batch folders (`dir` source) and stdin pipes (containers, raw video, raw
//! audio): the real binary fed by real ffmpeg processes and real media made
//! in temporary folders.

mod util;

use std::io::Write;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use util::*;

/// Make a short H.264 clip of `frames` frames with the ffmpeg CLI.
fn clip(path: &Path, frames: u32) {
    let st = Command::new("ffmpeg")
        .args(["-nostdin", "-y", "-loglevel", "error", "-f", "lavfi", "-i", "testsrc2=size=320x240:rate=25", "-frames:v"])
        .arg(frames.to_string())
        .args(["-c:v", "libx264", "-threads", "1", "-pix_fmt", "yuv420p", "-g", "10"])
        .arg(path)
        .status()
        .expect("run ffmpeg");
    assert!(st.success(), "ffmpeg could not make {}", path.display());
}

/// Frames ffprobe counts by decoding the whole file.
fn ffprobe_frames(path: &Path) -> u64 {
    let o = Command::new("ffprobe")
        .args(["-v", "error", "-count_frames", "-select_streams", "v:0", "-show_entries", "stream=nb_read_frames", "-of", "csv=p=0"])
        .arg(path)
        .output()
        .expect("run ffprobe");
    String::from_utf8_lossy(&o.stdout).trim().parse().unwrap_or_else(|_| panic!("ffprobe on {}: {o:?}", path.display()))
}

/// Run `pipelines/batch.toml` on `input`, writing into `output`.
fn batch(input: &Path, output: &Path) -> Command {
    require_assets();
    let mut c = bin();
    c.args(["run", "pipelines/batch.toml", "--progress", "never"]).env("BATCH_INPUT", input).env("BATCH_OUTPUT", output);
    c
}

/// The NDJSON lines of one file's output: one per frame, `seq` 0, 1, 2, ... once each, its stream named after the file.
fn assert_complete_output(output: &Path, name: &str, frames: u64) {
    let lines = read_ndjson(&output.join(format!("{name}.ndjson")));
    let seqs: Vec<u64> = lines.iter().map(|l| l["seq"].as_u64().unwrap()).collect();
    assert_eq!(seqs, (0..frames).collect::<Vec<_>>(), "{name}: every frame exactly once");
    assert!(lines.iter().all(|l| l["stream"] == name && l["width"] == 320), "{name}: {}", lines[0]);
}

/// Three good clips and four bad files: the good ones are processed (frames
/// as ffprobe counts them), each bad one is named with its reason, exit 3.
/// A rerun reads nothing again: complete files are skipped, failed ones
/// (unchanged) still count, so the exit code stays 3.
#[test]
fn batch_processes_the_good_files_names_the_bad_ones_and_resumes() {
    let dir = tempfile::tempdir().unwrap();
    let (input, output) = (dir.path().join("in"), dir.path().join("out"));
    std::fs::create_dir_all(input.join("day 2")).unwrap();
    let good = [("a.mp4", 12), ("b.mp4", 17), ("day 2/c.mp4", 9)];
    for (name, frames) in good {
        clip(&input.join(name), frames);
    }
    // Truncated: the first 40% of a clip (mp4 index at the end: gone).
    let whole = std::fs::read(input.join("b.mp4")).unwrap();
    std::fs::write(input.join("truncated.mp4"), &whole[..whole.len() * 2 / 5]).unwrap();
    // Corrupt bytes in the middle of the payload.
    let mut corrupt = whole.clone();
    let mid = corrupt.len() / 3;
    for (i, b) in corrupt[mid..mid + 3000].iter_mut().enumerate() {
        *b = (i * 37 + 11) as u8;
    }
    std::fs::write(input.join("corrupt.mp4"), &corrupt).unwrap();
    std::fs::write(input.join("notes.mp4"), "not a video\n").unwrap();
    // A file in a subfolder: `path` without `recursive` leaves it out.
    let o = batch(&input, &output).output().unwrap();
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(3), "{err}");
    for (name, frames) in &good[..2] {
        assert_eq!(ffprobe_frames(&input.join(name)), *frames as u64);
        assert_complete_output(&output, name, *frames as u64);
    }
    assert!(!output.join("day_2_c.mp4.ndjson").exists(), "not recursive: subfolders left out");
    assert!(err.contains("inputs: 2 complete, 3 failed"), "{err}");
    for (file, reason) in
        [("corrupt.mp4", "corrupt data"), ("notes.mp4", "not readable as media"), ("truncated.mp4", "not readable as media")]
    {
        let line = format!("  failed: {}: {reason}", input.join(file).display());
        assert!(err.contains(&line), "{line}\nin:\n{err}");
    }
    assert!(err.contains("error: 3 input(s) failed"), "{err}");
    let (decoded, processed, _, _) = accounting(&err);
    assert_eq!(decoded, processed);
    let state: serde_json::Value = serde_json::from_slice(&std::fs::read(output.join(".infer-stream-batch.json")).unwrap()).unwrap();
    assert_eq!(state["files"]["a.mp4"]["status"], "complete");
    assert_eq!(state["files"]["a.mp4"]["frames"], 12);
    assert_eq!(state["files"]["notes.mp4"]["status"], "failed");

    // Rerun: nothing is read twice.
    let before = std::fs::read(output.join("a.mp4.ndjson")).unwrap();
    let o = batch(&input, &output).output().unwrap();
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(3), "{err}");
    assert!(err.contains("skipped 2 already complete"), "{err}");
    assert!(err.contains("3 failed (3 of them unchanged since they failed before, not read again)"), "{err}");
    assert_eq!(accounting(&err), (0, 0, 0, 0), "no frame decoded again");
    assert_eq!(std::fs::read(output.join("a.mp4.ndjson")).unwrap(), before, "outputs untouched");

    // Recursive, with an extension filter: the subfolder's clip joins; files done stay done.
    let toml = dir.path().join("recursive.toml");
    let text =
        std::fs::read_to_string(root().join("pipelines/batch.toml")).unwrap().replace("parallel = 2", "parallel = 2\nrecursive = true");
    let text = text.replace("../models/", &format!("{}/models/", root().display()));
    std::fs::write(&toml, text).unwrap();
    let o = bin()
        .args(["run", toml.to_str().unwrap(), "--progress", "never"])
        .env("BATCH_INPUT", &input)
        .env("BATCH_OUTPUT", &output)
        .output()
        .unwrap();
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(3), "{err}");
    assert!(err.contains("inputs: 1 complete, skipped 2 already complete"), "{err}");
    let lines = read_ndjson(&output.join("day_2_c.mp4.ndjson"));
    assert_eq!(lines.len(), 9);
    assert!(lines.iter().all(|l| l["stream"] == "day 2/c.mp4"), "stream named by the relative path");

    // A glob picks files by name: only the good ones here, so exit 0, into a fresh output folder.
    let toml = dir.path().join("glob.toml");
    let text = std::fs::read_to_string(root().join("pipelines/batch.toml"))
        .unwrap()
        .replace("path = \"${BATCH_INPUT:-../samples}\"", "glob = \"${BATCH_INPUT}/**/[abc].mp4\"")
        .replace("../models/", &format!("{}/models/", root().display()));
    std::fs::write(&toml, text).unwrap();
    let fresh = dir.path().join("fresh");
    let o = bin()
        .args(["run", toml.to_str().unwrap(), "--progress", "never"])
        .env("BATCH_INPUT", &input)
        .env("BATCH_OUTPUT", &fresh)
        .output()
        .unwrap();
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(0), "{err}");
    assert!(err.contains("inputs: 3 complete, 0 failed"), "{err}");
    for (name, frames) in good {
        assert_eq!(read_ndjson(&fresh.join(format!("{}.ndjson", name.replace([' ', '/'], "_")))).len(), frames as usize);
    }
}

/// Stop a batch mid-way (Ctrl-C, then SIGKILL), then finish it: every file's
/// output holds each of its frames exactly once (a file cut short is redone
/// from the start, its partial output replaced, never appended).
#[test]
fn interrupted_batch_is_finished_by_a_rerun_with_every_frame_once() {
    let dir = tempfile::tempdir().unwrap();
    let (input, output) = (dir.path().join("in"), dir.path().join("out"));
    std::fs::create_dir_all(&input).unwrap();
    let clips = [("1.mp4", 40), ("2.mp4", 45), ("3.mp4", 50), ("4.mp4", 35)];
    for (name, frames) in clips {
        clip(&input.join(name), frames);
    }
    let state = output.join(".infer-stream-batch.json");
    let completes = || std::fs::read_to_string(&state).map(|s| s.matches("\"complete\"").count()).unwrap_or(0);
    let lines_of = |name: &str| std::fs::read_to_string(output.join(format!("{name}.ndjson"))).map(|s| s.lines().count()).unwrap_or(0);
    // Wait until `done` files are complete and a later file has some output, then stop the run with `signal`.
    let stop_when = |done: usize, signal: &str| -> (Option<i32>, String) {
        let child: Child = batch(&input, &output).stderr(Stdio::piped()).spawn().unwrap();
        let t0 = Instant::now();
        while !(completes() >= done && clips.iter().any(|(n, f)| (1..*f as usize).contains(&lines_of(n)))) {
            assert!(t0.elapsed() < Duration::from_secs(60), "no progress after 60 s");
            std::thread::sleep(Duration::from_millis(10));
        }
        assert!(Command::new("kill").args([signal, &child.id().to_string()]).status().unwrap().success());
        let o = child.wait_with_output().unwrap();
        (o.status.code(), stderr(&o))
    };
    let (code, err) = stop_when(1, "-INT");
    assert_eq!(code, Some(130), "{err}");
    assert!(err.contains("stopped before the end (redone next run)"), "{err}");
    let after_int = completes();
    let (code, err) = stop_when(after_int + 1, "-KILL");
    assert_eq!(code, None, "killed: {err}");
    let after_kill = completes();
    assert!(after_kill < clips.len(), "stopped before the end ({after_kill} complete)");
    let partial: Vec<&str> = clips.iter().filter(|(n, f)| (1..*f as usize).contains(&lines_of(n))).map(|(n, _)| *n).collect();
    assert!(!partial.is_empty(), "a file was cut short mid-way");
    eprintln!("complete after Ctrl-C: {after_int}, after SIGKILL: {after_kill}; cut short: {partial:?}");
    let o = batch(&input, &output).output().unwrap();
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(0), "{err}");
    assert!(err.contains(&format!("skipped {after_kill} already complete")), "{err}");
    assert!(err.contains(&format!("inputs: {} complete", clips.len() - after_kill)), "{err}");
    for (name, frames) in clips {
        assert_complete_output(&output, name, frames as u64);
    }
}

/// `ffmpeg -re ... -f mpegts - | infer-stream run pipelines/stdin.toml`: every
/// frame of the sample arrives (as ffprobe counts them), in real time.
#[test]
fn stdin_container_piped_in_real_time_keeps_every_frame() {
    require_assets();
    let out = tempfile::tempdir().unwrap();
    let sample = root().join("samples/text-720p.mp4");
    let want = ffprobe_frames(&sample);
    for format in ["mpegts", "matroska", "nut"] {
        let ndjson = out.path().join(format!("{format}.ndjson"));
        // Real-time pacing for the container most used live; as fast as possible for the other.
        let pace: &[&str] = if format == "mpegts" { &["-re"] } else { &[] };
        let mut ffmpeg = Command::new("ffmpeg")
            .args(["-nostdin", "-loglevel", "error"])
            .args(pace)
            .arg("-i")
            .arg(&sample)
            .args(["-c", "copy", "-f", format, "-"])
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let o = bin()
            .args(["run", "pipelines/stdin.toml", "--progress", "never"])
            .env("STDIN_OUTPUT", &ndjson)
            .stdin(ffmpeg.stdout.take().unwrap())
            .output()
            .unwrap();
        assert!(ffmpeg.wait().unwrap().success());
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(0), "{format}: {err}");
        assert_eq!(accounting(&err), (want, want, 0, 0), "{format}");
        let lines = read_ndjson(&ndjson);
        assert_eq!(lines.len() as u64, want);
        assert!(lines.iter().all(|l| l["width"] == 1280 && l["height"] == 720));
        assert!(lines.iter().filter(|l| !bboxes(l, "boxes").is_empty()).count() > 90, "{format}: text found");
    }
}

/// Raw frames in four pixel formats: every frame, at its size; a last frame cut short is reported, not a panic.
#[test]
fn stdin_rawvideo_frames_sizes_and_a_cut_last_frame() {
    let out = tempfile::tempdir().unwrap();
    for (pix_fmt, bytes_per_frame) in
        [("yuv420p", 320 * 240 * 3 / 2), ("nv12", 320 * 240 * 3 / 2), ("rgb24", 320 * 240 * 3), ("gray", 320 * 240)]
    {
        let raw = Command::new("ffmpeg")
            .args(["-nostdin", "-loglevel", "error", "-f", "lavfi", "-i", "testsrc2=size=320x240:rate=25", "-frames:v", "9"])
            .args(["-f", "rawvideo", "-pix_fmt", pix_fmt, "-"])
            .output()
            .unwrap();
        assert_eq!(raw.stdout.len(), 9 * bytes_per_frame, "{pix_fmt}");
        // Whole, then with the last frame cut in half.
        for (bytes, frames) in [(raw.stdout.len(), 9u64), (8 * bytes_per_frame + bytes_per_frame / 2, 8)] {
            let mut child = bin()
                .args(["run", "tests/data/stdin-raw.toml", "--progress", "never"])
                .env("INFER_STREAM_TEST_OUT", out.path())
                .env("INFER_STREAM_TEST_PIX_FMT", pix_fmt)
                .stdin(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap();
            child.stdin.take().unwrap().write_all(&raw.stdout[..bytes]).unwrap();
            let o = child.wait_with_output().unwrap();
            let err = stderr(&o);
            assert_eq!(o.status.code(), Some(0), "{pix_fmt}: {err}");
            assert_eq!(accounting(&err), (frames, frames, 0, 0), "{pix_fmt}");
            let lines = read_ndjson(&out.path().join("raw.ndjson"));
            assert_eq!(lines.len() as u64, frames);
            for (i, l) in lines.iter().enumerate() {
                assert_eq!((l["width"].as_u64(), l["height"].as_u64(), l["seq"].as_u64()), (Some(320), Some(240), Some(i as u64)));
                assert!((l["pts"].as_f64().unwrap() - i as f64 / 25.0).abs() < 1e-9, "{l}");
            }
            if frames == 8 {
                assert!(err.contains("stdin: corrupt data from 0.320 s: 1 frame(s) skipped"), "{pix_fmt}: {err}");
            }
        }
    }
}

/// Raw PCM on stdin (s16le, 44.1 kHz stereo): the VAD finds the same speech as from the file.
#[test]
fn stdin_raw_audio_finds_the_speech_segments() {
    require_assets();
    let out = tempfile::tempdir().unwrap();
    let ndjson = out.path().join("vad.ndjson");
    let mut ffmpeg = Command::new("ffmpeg")
        .args(["-nostdin", "-loglevel", "error", "-i"])
        .arg(root().join("samples/speech-short.wav"))
        .args(["-f", "s16le", "-ar", "44100", "-ac", "2", "-"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let o = bin()
        .args(["run", "pipelines/vad-stdin.toml", "--progress", "never"])
        .env("VAD_OUTPUT", &ndjson)
        .stdin(ffmpeg.stdout.take().unwrap())
        .output()
        .unwrap();
    assert!(ffmpeg.wait().unwrap().success());
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(0), "{err}");
    assert!(err.contains("pcm_s16le 44100 Hz, 2 channel(s)"), "{err}");
    let lines = read_ndjson(&ndjson);
    let got: Vec<(f64, f64)> = lines.last().unwrap()["results"]["vad"]["segments"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| (s["start"].as_f64().unwrap(), s["end"].as_f64().unwrap()))
        .collect();
    let truth: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(root().join("samples/speech-short.truth.json")).unwrap()).unwrap();
    let want: Vec<(f64, f64)> =
        truth["segments"].as_array().unwrap().iter().map(|s| (s["start"].as_f64().unwrap(), s["end"].as_f64().unwrap())).collect();
    assert_eq!(got.len(), want.len(), "{got:?}");
    let f1 = speech_f1(&got, &want, truth["duration"].as_f64().unwrap());
    assert!(f1 >= 0.9, "F1 {f1:.3}");
    // The whole clip arrived: the last window ends at its duration.
    let last_pts = lines.last().unwrap()["pts"].as_f64().unwrap();
    assert!((truth["duration"].as_f64().unwrap() - last_pts).abs() < 0.064, "{last_pts}");
}

/// rawvideo with no frame size: a config error at the `format` key, exit 2, nothing run.
#[test]
fn rawvideo_without_a_size_is_a_located_config_error() {
    let out = tempfile::tempdir().unwrap();
    let o = run_in(out.path(), &["run", "tests/data/raw-no-size.toml"]);
    assert_eq!(o.status.code(), Some(2));
    let err = stderr(&o);
    assert!(
        err.contains(
            "error: source `pipe`: rawvideo needs width and height\n  --> tests/data/raw-no-size.toml:5:10\n  |\n5 | format = \"rawvideo\"\n  |          ^^^^^^^^^^"
        ),
        "{err}"
    );
    assert!(!out.path().join("raw.ndjson").exists(), "nothing ran");
}

/// Random bytes on stdin: a clear error and a non-zero exit, quickly (no hang).
#[test]
fn garbage_on_stdin_is_a_clear_error_not_a_hang() {
    require_assets();
    let out = tempfile::tempdir().unwrap();
    // Deterministic noise (xorshift), 2 MB.
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    let noise: Vec<u8> = (0..2_000_000)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect();
    let mut child = bin()
        .args(["run", "tests/data/stdin.toml", "--progress", "never"])
        .env("INFER_STREAM_TEST_OUT", out.path())
        .stdin(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    // The binary may stop reading early: a broken pipe here is fine.
    let writer = std::thread::spawn(move || {
        let _ = stdin.write_all(&noise);
    });
    let t0 = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if t0.elapsed() > Duration::from_secs(20) {
            let _ = child.kill();
            panic!("still running after 20 s on garbage input");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let o = child.wait_with_output().unwrap();
    writer.join().unwrap();
    let err = stderr(&o);
    assert_ne!(o.status.code(), Some(0), "{err}");
    assert!(err.contains("error: source `cam`: cannot open stdin: Invalid data found when processing input"), "{err}");
}

/// Audio recordings in a batch (`media = "audio"`, pipelines/batch-audio.toml):
/// WAV, AAC and FLAC copies of the speech sample each get one NDJSON line per
/// window and their speech segments (F1 ≥ 0.9 against the truth); an AAC file
/// cut short (index at the front, so it opens) and a text file are named with
/// their reasons, exit 3; a rerun reads nothing again.
#[test]
fn batch_of_audio_recordings_gets_the_vad_per_file() {
    require_assets();
    let dir = tempfile::tempdir().unwrap();
    let (input, output) = (dir.path().join("in"), dir.path().join("out"));
    std::fs::create_dir_all(&input).unwrap();
    let speech = root().join("samples/speech-short.wav");
    std::fs::copy(&speech, input.join("a.wav")).unwrap();
    let ffmpeg = |args: &[&str], out: &Path| {
        let st =
            Command::new("ffmpeg").args(["-nostdin", "-y", "-loglevel", "error", "-i"]).arg(&speech).args(args).arg(out).status().unwrap();
        assert!(st.success(), "ffmpeg could not make {}", out.display());
    };
    ffmpeg(&["-c:a", "aac", "-movflags", "+faststart"], &input.join("b.m4a"));
    ffmpeg(&["-c:a", "flac"], &input.join("c.flac"));
    let whole = std::fs::read(input.join("b.m4a")).unwrap();
    std::fs::write(input.join("cut.m4a"), &whole[..whole.len() * 2 / 5]).unwrap();
    std::fs::write(input.join("notes.wav"), "not audio\n").unwrap();
    let run = || {
        bin()
            .args(["run", "pipelines/batch-audio.toml", "--progress", "never"])
            .env("BATCH_INPUT", &input)
            .env("BATCH_OUTPUT", &output)
            .output()
            .unwrap()
    };
    let o = run();
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(3), "{err}");
    assert!(err.contains("inputs: 3 complete, 2 failed"), "{err}");
    for (file, reason) in [("cut.m4a", "corrupt data"), ("notes.wav", "not readable as media")] {
        let line = format!("  failed: {}: {reason}", input.join(file).display());
        assert!(err.contains(&line), "{line}\nin:\n{err}");
    }
    let truth: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(root().join("samples/speech-short.truth.json")).unwrap()).unwrap();
    let duration = truth["duration"].as_f64().unwrap();
    let want: Vec<(f64, f64)> =
        truth["segments"].as_array().unwrap().iter().map(|s| (s["start"].as_f64().unwrap(), s["end"].as_f64().unwrap())).collect();
    for name in ["a.wav", "b.m4a", "c.flac"] {
        let lines = read_ndjson(&output.join(format!("{name}.ndjson")));
        let windows = (duration * 16000.0 / 512.0).ceil() as usize;
        assert!(lines.len().abs_diff(windows) <= 2, "{name}: {} windows for {duration} s", lines.len());
        assert!(lines.iter().enumerate().all(|(i, l)| l["stream"] == name && l["seq"] == i as u64), "{name}: every window once, in order");
        let got: Vec<(f64, f64)> = lines.last().unwrap()["results"]["vad"]["segments"]
            .as_array()
            .unwrap_or_else(|| panic!("{name}: no segments on the last line"))
            .iter()
            .map(|s| (s["start"].as_f64().unwrap(), s["end"].as_f64().unwrap()))
            .collect();
        let f1 = speech_f1(&got, &want, duration);
        assert!(f1 >= 0.9, "{name}: F1 {f1:.3} ({got:?})");
        // Its own subtitles: one cue per segment, numbered from 1, at the segments' times.
        let srt = std::fs::read_to_string(output.join(format!("{name}.srt"))).unwrap();
        let cues: Vec<&str> = srt.split("\n\n").filter(|c| !c.trim().is_empty()).collect();
        assert_eq!(cues.len(), got.len(), "{name}: {srt}");
        for (i, (cue, (start, _))) in cues.iter().zip(&got).enumerate() {
            let mut l = cue.lines();
            assert_eq!(l.next(), Some((i + 1).to_string().as_str()), "{name}: {cue}");
            let at = l.next().unwrap();
            let ms = (start * 1000.0).round() as u64;
            assert!(at.starts_with(&format!("00:00:{:02},{:03} --> ", ms / 1000, ms % 1000)), "{name}: {at} for {start}");
            assert_eq!(l.next(), Some("(speech)"));
        }
    }
    let (decoded, processed, _, failed) = accounting(&err);
    assert_eq!((decoded, failed), (processed, 0), "{err}");

    // Rerun: nothing read again; the failed files (unchanged) still fail the run.
    let o = run();
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(3), "{err}");
    assert!(err.contains("skipped 3 already complete"), "{err}");
    assert_eq!(accounting(&err), (0, 0, 0, 0), "no window decoded again");

    // Audio settings on a video batch: a located error, nothing run.
    let toml = dir.path().join("video.toml");
    let text = std::fs::read_to_string(root().join("pipelines/batch.toml"))
        .unwrap()
        .replace("parallel = 2", "parallel = 2\nwindow = 512")
        .replace("../models/", &format!("{}/models/", root().display()));
    std::fs::write(&toml, text).unwrap();
    let o = bin().args(["run", toml.to_str().unwrap()]).env("BATCH_INPUT", &input).env("BATCH_OUTPUT", &output).output().unwrap();
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("`sample_rate`, `window` and `hop` are for audio") && err.contains("video.toml:14:10"), "{err}");
}

/// Regression: `a.b.mp4` and `a_b.mp4` pass the `dir` source's check that no
/// two files make the same output name, yet the video and images sinks once
/// named both `a_b_mp4`, one file overwriting the other. Each now has its own
/// video and its own snapshots, named as the NDJSON outputs are.
#[test]
fn batch_files_the_dir_source_accepts_never_share_a_video_or_snapshot() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("in");
    std::fs::create_dir_all(&input).unwrap();
    clip(&input.join("a.b.mp4"), 5);
    clip(&input.join("a_b.mp4"), 8);
    let toml = dir.path().join("p.toml");
    std::fs::write(
        &toml,
        "[sources.batch]\nkind = \"dir\"\npath = \"in\"\n\
         [sinks.clips]\nkind = \"video\"\ninputs = [\"batch\"]\npath = \"clips/{stream}.mkv\"\n\
         [sinks.snaps]\nkind = \"images\"\ninputs = [\"batch\"]\nfolder = \"snaps\"\nformat = \"png\"\nevery = 100\n",
    )
    .unwrap();
    let o = bin().arg("run").arg(&toml).args(["--progress", "never"]).output().unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(ffprobe_frames(&dir.path().join("clips/a.b.mp4.mkv")), 5);
    assert_eq!(ffprobe_frames(&dir.path().join("clips/a_b.mp4.mkv")), 8);
    let mut snaps: Vec<String> =
        std::fs::read_dir(dir.path().join("snaps")).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    snaps.sort();
    assert_eq!(snaps, ["a.b.mp4-000000.png", "a_b.mp4-000000.png"]);
}

/// A container that asks for the picture to be turned (a phone's display
/// matrix) is said loudly: frames are processed as stored.
#[test]
fn a_turned_picture_is_said_not_silently_ignored() {
    let dir = tempfile::tempdir().unwrap();
    let (plain, turned) = (dir.path().join("plain.mp4"), dir.path().join("turned.mp4"));
    clip(&plain, 5);
    let st = Command::new("ffmpeg")
        .args(["-nostdin", "-y", "-loglevel", "error", "-i"])
        .arg(&plain)
        .args(["-c", "copy", "-metadata:s:v:0", "rotate=90"])
        .arg(&turned)
        .status()
        .unwrap();
    assert!(st.success());
    let toml = dir.path().join("p.toml");
    let run = |video: &Path| {
        std::fs::write(
            &toml,
            format!("[sources.cam]\nkind = \"file\"\nuri = \"{}\"\n[sinks.out]\nkind = \"null\"\ninputs = [\"cam\"]\n", video.display()),
        )
        .unwrap();
        let o = bin().args(["run", toml.to_str().unwrap(), "--progress", "never"]).output().unwrap();
        assert_eq!(o.status.code(), Some(0));
        stderr(&o)
    };
    let err = run(&turned);
    assert!(
        err.contains(
            "source `cam`: the container says to turn it 90° counterclockwise for display; frames are processed as stored, not turned"
        ),
        "{err}"
    );
    assert!(!run(&plain).contains("the container says"));
}

/// Two cameras of different sizes into one preprocess: each stream keeps its
/// own scaler, so alternating frames neither rebuild it nor log a line each
/// (at most one line per stream), and each stream gets the text boxes it
/// gets when run alone.
#[test]
fn fan_in_of_two_sizes_keeps_a_scaler_per_stream() {
    let dir = tempfile::tempdir().unwrap();
    let big = root().join("samples/text-720p.mp4");
    let small = dir.path().join("small.mp4");
    let st = Command::new("ffmpeg")
        .args(["-nostdin", "-y", "-loglevel", "error", "-i"])
        .arg(&big)
        .args(["-frames:v", "12", "-vf", "scale=854:480", "-c:v", "libx264", "-threads", "1"])
        .arg(&small)
        .status()
        .expect("run ffmpeg");
    assert!(st.success());
    let model = root().join("models/ppocr/ch_PP-OCRv4_det_infer.onnx");
    let run = |name: &str, sources: &[(&str, &Path)]| -> (Vec<serde_json::Value>, String) {
        let mut toml = String::new();
        for (s, uri) in sources {
            toml += &format!("[sources.{s}]\nkind = \"file\"\nuri = \"{}\"\nmax_frames = 12\n\n", uri.display());
        }
        let inputs: Vec<String> = sources.iter().map(|(s, _)| format!("\"{s}\"")).collect();
        let out = dir.path().join(format!("{name}.ndjson"));
        toml += &format!(
            "[stages.pre]\nkind = \"preprocess\"\ninputs = [{}]\nwidth = 640\nheight = 384\ncolor = \"bgr\"\nmean = [0.5, 0.5, 0.5]\nstd = [0.5, 0.5, 0.5]\n\n\
             [stages.det]\nkind = \"infer\"\ninputs = [\"pre\"]\nmodel = \"{}\"\nproviders = [\"cpu\"]\n\n\
             [stages.boxes]\nkind = \"text_detection\"\ninputs = [\"det\"]\n\n\
             [sinks.results]\nkind = \"ndjson\"\ninputs = [\"boxes\"]\npath = \"{}\"\n",
            inputs.join(", "),
            model.display(),
            out.display()
        );
        let p = dir.path().join(format!("{name}.toml"));
        std::fs::write(&p, toml).unwrap();
        let (_o, err) = run_ok(&["run", "--progress", "never", p.to_str().unwrap()]);
        (read_ndjson(&out), err)
    };
    let (both, err) = run("both", &[("hd", &big), ("sd", &small)]);
    let said: Vec<&str> = err.lines().filter(|l| l.contains("input changed")).collect();
    assert!(said.len() <= 2, "{} line(s) about a changed input for 2 streams of fixed sizes:\n{}", said.len(), said.join("\n"));
    assert_eq!(both.len(), 24, "every frame of both streams");
    for (s, uri) in [("hd", &big), ("sd", &small)] {
        let (alone, _) = run(s, &[(s, uri.as_path())]);
        assert_eq!(alone.len(), 12);
        for a in &alone {
            let b = both.iter().find(|b| b["stream"] == a["stream"] && b["seq"] == a["seq"]).expect("the same frame in the fan-in");
            let (want, got) = (bboxes(a, "boxes"), bboxes(b, "boxes"));
            assert_eq!(want.len(), got.len(), "stream {s} frame {}: {want:?} vs {got:?}", a["seq"]);
            assert!(!want.is_empty() || s == "sd", "text is found in the 720p stream");
            for (w, g) in want.iter().zip(&got) {
                assert!(iou(w, g) > 0.98, "stream {s} frame {}: {w:?} vs {g:?}", a["seq"]);
            }
        }
    }
}
