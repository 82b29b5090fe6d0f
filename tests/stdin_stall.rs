//! A stdin source whose writer goes silent but keeps the pipe open: SIGINT /
//! SIGTERM must still stop the run at once (FFmpeg's read from the pipe is
//! aborted), with the frames that came before drained and written and the
//! exit code of a signal stop; and a stop before the first byte is a stop,
//! not "Invalid data found". Real media made by the ffmpeg CLI, the real
//! binary, pipelines without a model.

mod util;

use std::io::Write as _;
use std::path::Path;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::time::{Duration, Instant};

use util::*;

/// Longest a signal may take to end a run blocked on a silent stdin.
const STOP_BOUND: Duration = Duration::from_secs(10);

/// Bytes the ffmpeg CLI writes to stdout for `args`.
fn ffmpeg_bytes(args: &[&str]) -> Vec<u8> {
    let o = Command::new("ffmpeg")
        .args(["-nostdin", "-loglevel", "error"])
        .args(args)
        .current_dir(root())
        .stderr(Stdio::inherit())
        .output()
        .expect("run ffmpeg");
    assert!(o.status.success() && !o.stdout.is_empty(), "ffmpeg {}", args.join(" "));
    o.stdout
}

/// A stdin source as `source` (the keys after `uri = "-"`), into NDJSON:
/// video straight to the sink, audio through the level meter.
fn pipeline(dir: &Path, name: &str, source: &str) -> std::path::PathBuf {
    let audio = source.contains("kind = \"audio\"");
    let (stage, input) = if audio { ("[stages.level]\nkind = \"audio_level\"\ninputs = [\"pipe\"]\n\n", "level") } else { ("", "pipe") };
    let toml = dir.join(format!("{name}.toml"));
    std::fs::write(
        &toml,
        format!(
            "[sources.pipe]\n{source}\nuri = \"-\"\n\n{stage}[sinks.out]\nkind = \"ndjson\"\ninputs = [\"{input}\"]\npath = \"{}\"\n",
            dir.join(format!("{name}.ndjson")).display()
        ),
    )
    .unwrap();
    toml
}

fn spawn(dir: &Path, name: &str, toml: &Path) -> Child {
    bin()
        .arg("run")
        .arg(toml)
        .args(["--progress", "never", "--report"])
        .arg(dir.join(format!("{name}.report.json")))
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(dir.join(format!("{name}.stderr"))).unwrap())
        .spawn()
        .unwrap()
}

/// Wait (bounded) until the binary has its SIGINT/SIGTERM handlers, so a
/// signal sent now is the pipeline's stop and not the default action.
fn wait_for_signal_handlers(pid: u32) {
    let t0 = Instant::now();
    loop {
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
        let caught =
            status.lines().find_map(|l| l.strip_prefix("SigCgt:")).and_then(|m| u64::from_str_radix(m.trim(), 16).ok()).unwrap_or(0);
        // Bit n-1 for signal n: SIGINT 2, SIGTERM 15.
        if caught & (1 << 1) != 0 && caught & (1 << 14) != 0 {
            return;
        }
        assert!(t0.elapsed() < Duration::from_secs(30), "no signal handlers after 30 s:\n{status}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn complete_lines(p: &Path) -> usize {
    std::fs::read_to_string(p).map(|t| t.matches('\n').count()).unwrap_or(0)
}

/// Send `signal` and wait at most [`STOP_BOUND`] for the exit; a run still
/// there then is killed (and stdin closed) and the test fails.
fn signal_and_wait(mut child: Child, stdin: ChildStdin, signal: &str, what: &str, stderr_path: &Path) -> std::process::ExitStatus {
    assert!(Command::new("kill").args([signal, &child.id().to_string()]).status().unwrap().success());
    let t0 = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if t0.elapsed() > STOP_BOUND {
            let _ = child.kill();
            drop(stdin);
            let _ = child.wait();
            panic!(
                "{what}: still running {} s after {signal} with stdin open and silent:\n{}",
                STOP_BOUND.as_secs(),
                std::fs::read_to_string(stderr_path).unwrap_or_default()
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    // The writer closes its end only now: the run had to stop without it.
    drop(stdin);
    status
}

/// A few seconds of media, then the writer goes silent with the pipe open:
/// the signal ends the run within the bound, with the exit code of a signal
/// stop; every frame decoded before the stall is processed and written as a
/// whole NDJSON line, as many lines as the summary and the report count.
#[test]
fn a_signal_stops_a_stdin_that_went_silent_mid_stream() {
    require_assets();
    let dir = tempfile::tempdir().unwrap();
    let cases: [(&str, &str, Vec<u8>, &str, i32); 3] = [
        // Probed container (no `format`): 8 s, more than FFmpeg analyses before the first frame.
        (
            "mpegts",
            "kind = \"file\"",
            ffmpeg_bytes(&["-i", "samples/text-720p.mp4", "-t", "8", "-c", "copy", "-f", "mpegts", "-"]),
            "-INT",
            130,
        ),
        // A named demuxer (`format`): raw frames.
        (
            "rawvideo",
            "kind = \"file\"\nformat = \"rawvideo\"\npixel_format = \"yuv420p\"\nwidth = 320\nheight = 240\nrate = 25",
            ffmpeg_bytes(&[
                "-f",
                "lavfi",
                "-i",
                "testsrc2=size=320x240:rate=25",
                "-frames:v",
                "50",
                "-f",
                "rawvideo",
                "-pix_fmt",
                "yuv420p",
                "-",
            ]),
            "-TERM",
            143,
        ),
        // The audio decoder: raw PCM.
        (
            "s16le",
            "kind = \"audio\"\nformat = \"s16le\"\ninput_rate = 44100\nchannels = 2",
            ffmpeg_bytes(&["-i", "samples/speech-short.wav", "-t", "3", "-f", "s16le", "-ar", "44100", "-ac", "2", "-"]),
            "-INT",
            130,
        ),
    ];
    for (name, source, bytes, signal, code) in cases {
        let toml = pipeline(dir.path(), name, source);
        let (nd, stderr_path) = (dir.path().join(format!("{name}.ndjson")), dir.path().join(format!("{name}.stderr")));
        let mut child = spawn(dir.path(), name, &toml);
        let mut stdin = child.stdin.take().unwrap();
        // Write everything, then keep the pipe open and silent.
        let writer = std::thread::spawn(move || {
            stdin.write_all(&bytes).expect("the run reads what is sent");
            stdin.flush().unwrap();
            stdin
        });
        let stdin = writer.join().unwrap();
        // Wait (bounded) until the results stop growing: the source is blocked on the silent pipe.
        let t0 = Instant::now();
        let (mut seen, mut since) = (complete_lines(&nd), Instant::now());
        while seen == 0 || since.elapsed() < Duration::from_secs(1) {
            assert!(
                t0.elapsed() < Duration::from_secs(60) && child.try_wait().unwrap().is_none(),
                "{name}: no results or an early exit:\n{}",
                std::fs::read_to_string(&stderr_path).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(50));
            let n = complete_lines(&nd);
            if n != seen {
                (seen, since) = (n, Instant::now());
            }
        }
        let status = signal_and_wait(child, stdin, signal, name, &stderr_path);
        let err = std::fs::read_to_string(&stderr_path).unwrap();
        let ctx = format!("{name}, {signal} after {seen} results:\n{err}");
        assert_eq!(status.code(), Some(code), "{ctx}");
        assert!(!err.contains("panicked") && !err.contains("read error"), "{ctx}");
        let (decoded, processed, dropped, failed) = accounting(&err);
        assert_eq!(decoded, processed + dropped + failed, "{ctx}");
        let text = std::fs::read_to_string(&nd).unwrap();
        assert!(text.ends_with('\n'), "last line complete: {ctx}");
        let lines = read_ndjson(&nd);
        assert_eq!(lines.len() as u64, processed, "one line per processed frame: {ctx}");
        assert!(lines.len() >= seen && seen > 0, "the results written before the stop are kept: {ctx}");
        for (i, l) in lines.iter().enumerate() {
            assert_eq!(l["seq"], i as u64, "in order, none missing: {ctx}");
        }
        let report: serde_json::Value =
            serde_json::from_slice(&std::fs::read(dir.path().join(format!("{name}.report.json"))).unwrap()).unwrap();
        assert_eq!(report["frames"]["processed"], processed, "{ctx}");
        assert_eq!(report["interrupted_by_signal"], code - 128, "{ctx}");
    }
}

/// Nothing on stdin yet (the writer has not started sending): the signal
/// stops the run within the bound, as a stop (exit 130), not as a failed
/// open ("Invalid data found" once the writer gives up), with nothing written.
#[test]
fn a_signal_before_the_first_byte_on_stdin_is_a_stop() {
    require_assets();
    let dir = tempfile::tempdir().unwrap();
    for (name, source) in [
        ("probed", "kind = \"file\""),
        ("rawvideo", "kind = \"file\"\nformat = \"rawvideo\"\npixel_format = \"yuv420p\"\nwidth = 320\nheight = 240"),
        ("mpegts", "kind = \"file\"\nformat = \"mpegts\""),
        ("s16le", "kind = \"audio\"\nformat = \"s16le\"\ninput_rate = 44100\nchannels = 2"),
    ] {
        let toml = pipeline(dir.path(), name, source);
        let (nd, stderr_path) = (dir.path().join(format!("{name}.ndjson")), dir.path().join(format!("{name}.stderr")));
        let mut child = spawn(dir.path(), name, &toml);
        let stdin = child.stdin.take().unwrap();
        wait_for_signal_handlers(child.id());
        // Into the build, where the source opens stdin (the outcome must not depend on when).
        std::thread::sleep(Duration::from_millis(500));
        let status = signal_and_wait(child, stdin, "-INT", name, &stderr_path);
        let err = std::fs::read_to_string(&stderr_path).unwrap();
        let ctx = format!("{name}:\n{err}");
        assert_eq!(status.code(), Some(130), "{ctx}");
        assert!(!err.contains("Invalid data") && !err.contains("error"), "{ctx}");
        let (decoded, ..) = accounting(&err);
        assert_eq!(decoded, 0, "{ctx}");
        assert_eq!(std::fs::read_to_string(&nd).unwrap_or_default(), "", "{ctx}");
    }
}
