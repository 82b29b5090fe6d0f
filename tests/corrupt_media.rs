//! Corrupt and hostile media: a corpus generated deterministically (fixed seed)
//! from the samples — truncations, flipped bytes in headers and payloads, wrong
//! extensions, empty files, containers declaring absurd sizes, garbage on
//! stdin — each run through the real binary (file source → NDJSON, no model)
//! with a per-file timeout. No file may crash, panic or hang it; each must end
//! in a located error (exit 2, naming the file) or a completed run whose
//! accounting balances, with corrupt data counted.

mod util;

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use util::*;

/// Longest any one file may take before it counts as a hang.
const TIMEOUT: Duration = Duration::from_secs(20);

/// xorshift64*: a fixed seed gives the same corpus on every machine.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
    fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.next() as u8).collect()
    }
}

enum Input {
    File(PathBuf),
    /// Bytes piped to a `uri = "-"` source.
    Stdin(Vec<u8>),
}

struct Case {
    name: String,
    input: Input,
}

/// Top-level MP4 boxes: (type, offset, size).
fn mp4_boxes(d: &[u8]) -> Vec<([u8; 4], usize, usize)> {
    let mut out = Vec::new();
    let mut i = 0;
    while i + 8 <= d.len() {
        let size = u32::from_be_bytes(d[i..i + 4].try_into().unwrap()) as usize;
        out.push((d[i + 4..i + 8].try_into().unwrap(), i, size));
        if size < 8 {
            break;
        }
        i += size;
    }
    out
}

fn find(d: &[u8], pat: &[u8]) -> usize {
    d.windows(pat.len()).position(|w| w == pat).unwrap_or_else(|| panic!("{} not found", String::from_utf8_lossy(pat)))
}

/// Flip `n` random bytes in `range`.
fn flip(d: &[u8], range: std::ops::Range<usize>, n: usize, rng: &mut Rng) -> Vec<u8> {
    let mut v = d.to_vec();
    for _ in 0..n {
        let i = range.start + rng.below(range.len());
        v[i] ^= (rng.next() as u8) | 1;
    }
    v
}

/// Make the corpus in `dir`. Deterministic: same seed, same files.
fn corpus(dir: &Path) -> Vec<Case> {
    let mut rng = Rng(0x5eed_cafe_f00d_0001);
    let mut cases = Vec::new();
    let file = |name: String, bytes: &[u8], cases: &mut Vec<Case>| {
        let p = dir.join(&name);
        std::fs::write(&p, bytes).unwrap();
        cases.push(Case { name, input: Input::File(p) });
    };
    let mp4 = std::fs::read(root().join("samples/text-720p.mp4")).unwrap();
    let webm = std::fs::read(root().join("samples/clip.webm")).unwrap();
    let mkv = std::fs::read(root().join("samples/clip-1080p.mkv")).unwrap();
    let m4a = std::fs::read(root().join("samples/speech-short.m4a")).unwrap();
    // The same H.264 in MPEG-TS (as cameras and pipes send it), made with the ffmpeg CLI.
    let ts_path = dir.join("source.ts");
    let st = Command::new("ffmpeg")
        .args(["-nostdin", "-y", "-loglevel", "error", "-i"])
        .arg(root().join("samples/text-720p.mp4"))
        .args(["-c", "copy", "-f", "mpegts"])
        .arg(&ts_path)
        .status()
        .unwrap();
    assert!(st.success(), "ffmpeg could not remux to MPEG-TS");
    let ts = std::fs::read(&ts_path).unwrap();
    std::fs::remove_file(&ts_path).unwrap();

    // Truncated at many offsets: inside the header, at its end, through the payload.
    for (name, data, ext) in [("mp4", &mp4, "mp4"), ("webm", &webm, "webm"), ("mkv", &mkv, "mkv"), ("ts", &ts, "ts")] {
        let fractions: &[f64] =
            if name == "mp4" { &[0.001, 0.004, 0.006, 0.0065, 0.05, 0.25, 0.5, 0.9, 0.999] } else { &[0.01, 0.1, 0.5, 0.95] };
        for f in fractions {
            let n = ((data.len() as f64 * f) as usize).max(1);
            file(format!("truncated-{name}-{n}.{ext}"), &data[..n], &mut cases);
        }
    }
    for n in [8usize, 33] {
        file(format!("truncated-mp4-{n}.mp4"), &mp4[..n], &mut cases);
    }

    // Bytes flipped in headers and in payloads.
    let boxes = mp4_boxes(&mp4);
    let moov = boxes.iter().find(|b| &b.0 == b"moov").unwrap();
    let mdat = boxes.iter().find(|b| &b.0 == b"mdat").unwrap();
    for i in 0..8 {
        let v = flip(&mp4, moov.1 + 8..moov.1 + moov.2, 1 + i, &mut rng);
        file(format!("flipped-header-mp4-{i}.mp4"), &v, &mut cases);
    }
    for i in 0..8 {
        let v = flip(&mp4, mdat.1 + 8..mdat.1 + mdat.2, 4 << i, &mut rng);
        file(format!("flipped-payload-mp4-{i}.mp4"), &v, &mut cases);
    }
    for (name, data) in [("webm", &webm), ("mkv", &mkv), ("ts", &ts)] {
        let head = (data.len() / 50).max(64);
        for i in 0..3 {
            let v = flip(data, 0..head, 1 + 2 * i, &mut rng);
            file(format!("flipped-header-{name}-{i}.{name}"), &v, &mut cases);
            let v = flip(data, head..data.len(), 16 << (2 * i), &mut rng);
            file(format!("flipped-payload-{name}-{i}.{name}"), &v, &mut cases);
        }
    }
    // Box sizes that lie: moov claiming 4 GiB, mdat claiming 0 and 9 bytes.
    let mut v = mp4.clone();
    v[moov.1..moov.1 + 4].copy_from_slice(&u32::MAX.to_be_bytes());
    file("box-moov-4gib.mp4".into(), &v, &mut cases);
    let mut v = mp4.clone();
    v[mdat.1..mdat.1 + 4].copy_from_slice(&0u32.to_be_bytes());
    file("box-mdat-size0.mp4".into(), &v, &mut cases);
    let mut v = mp4.clone();
    v[mdat.1..mdat.1 + 4].copy_from_slice(&9u32.to_be_bytes());
    file("box-mdat-size9.mp4".into(), &v, &mut cases);

    // Wrong extensions, empty files, noise, two files glued together.
    file("webm-named.mp4".into(), &webm, &mut cases);
    file("mp4-named.webm".into(), &mp4, &mut cases);
    file("audio-only-named.mp4".into(), &m4a, &mut cases);
    file("text-named.mkv".into(), b"#!/bin/sh\necho not a video\n", &mut cases);
    file("empty.mp4".into(), b"", &mut cases);
    file("empty.webm".into(), b"", &mut cases);
    file("noise.mp4".into(), &rng.bytes(200_000), &mut cases);
    file("noise.ts".into(), &rng.bytes(200_000), &mut cases);
    let mut glued = mp4[..mp4.len() / 2].to_vec();
    glued.extend_from_slice(&webm);
    file("glued-mp4-webm.mp4".into(), &glued, &mut cases);
    let mut ts_noise = ts[..ts.len() / 3].to_vec();
    ts_noise.extend(rng.bytes(100_000));
    file("ts-then-noise.ts".into(), &ts_noise, &mut cases);

    // Containers that declare absurd sizes.
    let mut v = mp4.clone();
    let tkhd = find(&v, b"tkhd");
    v[tkhd + 80..tkhd + 88].copy_from_slice(&[0xff, 0xff, 0, 0, 0xff, 0xff, 0, 0]);
    let avc1 = find(&v, b"avc1");
    v[avc1 + 28..avc1 + 32].copy_from_slice(&[0xff, 0xff, 0xff, 0xff]);
    file("huge-tkhd-avc1-65535x65535.mp4".into(), &v, &mut cases);
    for (w, h) in [(10000u32, 10000u32), (100_000, 100_000), (16384, 16384), (0, 0), (65536, 2)] {
        let mut y = format!("YUV4MPEG2 W{w} H{h} F25:1 Ip A1:1 C420jpeg\nFRAME\n").into_bytes();
        y.extend(rng.bytes(4096));
        file(format!("huge-{w}x{h}.y4m"), &y, &mut cases);
    }
    for (magic, ext) in [("P6", "ppm"), ("P5", "pgm")] {
        let mut p = format!("{magic}\n100000 100000\n255\n").into_bytes();
        p.extend(rng.bytes(4096));
        file(format!("huge-100000x100000.{ext}"), &p, &mut cases);
    }

    // Garbage on stdin (`head -c N /dev/urandom | infer-stream run`), and a valid stream that turns to garbage.
    for n in [0usize, 1, 4096, 1 << 20] {
        cases.push(Case { name: format!("stdin-noise-{n}"), input: Input::Stdin(rng.bytes(n)) });
    }
    let mut v = ts[..ts.len() / 2].to_vec();
    v.extend(rng.bytes(200_000));
    cases.push(Case { name: "stdin-ts-then-noise".into(), input: Input::Stdin(v) });
    cases.push(Case { name: "stdin-truncated-mp4".into(), input: Input::Stdin(mp4[..mp4.len() / 2].to_vec()) });
    cases
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Outcome {
    /// Exit 2 with an error naming the file.
    LocatedError,
    /// Exit 0/1, accounting balanced.
    Completed,
    Crash,
    Panic,
    Hang,
    /// Anything else: unexpected exit code, unnamed file, unbalanced or lost results.
    Wrong,
}

struct Row {
    name: String,
    outcome: Outcome,
    code: Option<i32>,
    decoded: u64,
    processed: u64,
    decode_errors: u64,
    secs: f64,
    note: String,
}

fn run_case(dir: &Path, case: &Case) -> Row {
    let out = dir.join(format!("{}.out", case.name));
    std::fs::create_dir_all(&out).unwrap();
    let uri = match &case.input {
        Input::File(p) => p.display().to_string(),
        Input::Stdin(_) => "-".into(),
    };
    let toml = out.join("p.toml");
    std::fs::write(
        &toml,
        format!(
            "[sources.cam]\nkind = \"file\"\nuri = \"{uri}\"\n\n[sinks.out]\nkind = \"ndjson\"\ninputs = [\"cam\"]\npath = \"{}\"\n",
            out.join("out.ndjson").display()
        ),
    )
    .unwrap();
    let report = out.join("report.json");
    let start = Instant::now();
    let mut child = bin()
        .args(["run"])
        .arg(&toml)
        .args(["--progress", "never", "--report"])
        .arg(&report)
        .stdin(if matches!(case.input, Input::Stdin(_)) { Stdio::piped() } else { Stdio::null() })
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(out.join("stderr")).unwrap())
        .spawn()
        .unwrap();
    let feeder = match (&case.input, child.stdin.take()) {
        (Input::Stdin(bytes), Some(mut stdin)) => {
            let bytes = bytes.clone();
            // A reader that gives up early closes the pipe: that write error is expected.
            Some(std::thread::spawn(move || drop(stdin.write_all(&bytes))))
        }
        _ => None,
    };
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break Some(s);
        }
        if start.elapsed() > TIMEOUT {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    if let Some(f) = feeder {
        let _ = f.join();
    }
    let secs = start.elapsed().as_secs_f64();
    let err = std::fs::read_to_string(out.join("stderr")).unwrap_or_default();
    let first_error = err.lines().find(|l| l.starts_with("error") || l.contains("ERROR")).unwrap_or("").to_string();
    let mut row = Row {
        name: case.name.clone(),
        outcome: Outcome::Wrong,
        code: status.and_then(|s| s.code()),
        decoded: 0,
        processed: 0,
        decode_errors: 0,
        secs,
        note: first_error,
    };
    let Some(status) = status else {
        row.outcome = Outcome::Hang;
        return row;
    };
    if err.contains("panicked") {
        row.outcome = Outcome::Panic;
        row.note = err.lines().find(|l| l.contains("panicked")).unwrap().to_string();
        return row;
    }
    let Some(code) = status.code() else {
        row.outcome = Outcome::Crash;
        row.note = format!("{status}");
        return row;
    };
    // The file must be named in any error; stdin is named as such.
    let named = match &case.input {
        Input::File(p) => err.contains(&p.display().to_string()),
        Input::Stdin(_) => err.contains("stdin"),
    };
    match code {
        2 if named => row.outcome = Outcome::LocatedError,
        2 => row.note = format!("exit 2 without naming the input: {err}"),
        0 | 1 => {
            let Some(line) = err.lines().find(|l| l.starts_with("frames: decoded")) else {
                row.note = format!("exit {code} without an accounting line: {err}");
                return row;
            };
            let n: Vec<u64> = line.split_whitespace().filter_map(|w| w.parse().ok()).collect();
            (row.decoded, row.processed) = (n[0], n[1]);
            let r: serde_json::Value = serde_json::from_slice(&std::fs::read(&report).unwrap_or_default()).unwrap_or_default();
            row.decode_errors = r["nodes"].as_array().map(|ns| ns.iter().filter_map(|n| n["decode_errors"].as_u64()).sum()).unwrap_or(0);
            let written = std::fs::read_to_string(out.join("out.ndjson")).map(|t| t.lines().count() as u64).unwrap_or(0);
            if !line.contains("(all accounted for)") {
                row.note = format!("unbalanced: {line}");
            } else if written != row.processed {
                row.note = format!("{written} NDJSON lines for {} processed frames", row.processed);
            } else if code == 0 && row.decoded == 0 {
                row.note = format!("exit 0 with no frame decoded (a silent empty success): {err}");
            } else if code == 1 && !named {
                row.note = format!("exit 1 without naming the input: {err}");
            } else {
                row.outcome = Outcome::Completed;
            }
        }
        _ => row.note = format!("exit {code}: {err}"),
    }
    row
}

#[test]
fn corrupt_and_hostile_media_never_crash_or_hang() {
    require_assets();
    let dir = tempfile::tempdir().unwrap();
    let cases = corpus(dir.path());
    assert!(cases.len() >= 50, "corpus has {} files", cases.len());
    // Two at a time (the build machines have two cores); each run is one process.
    let next = AtomicUsize::new(0);
    let rows = Mutex::new(Vec::new());
    std::thread::scope(|s| {
        for _ in 0..2 {
            s.spawn(|| {
                while let Some(case) = cases.get(next.fetch_add(1, Ordering::Relaxed)) {
                    let row = run_case(dir.path(), case);
                    rows.lock().unwrap().push(row);
                }
            });
        }
    });
    let mut rows = rows.into_inner().unwrap();
    rows.sort_by(|a, b| a.name.cmp(&b.name));
    println!(
        "{:<34} {:<13} {:>4} {:>7} {:>9} {:>8} {:>6}  first error",
        "file", "outcome", "exit", "decoded", "processed", "corrupt", "secs"
    );
    for r in &rows {
        let code = r.code.map_or("-".into(), |c| c.to_string());
        let note: String = r.note.chars().take(110).collect();
        println!(
            "{:<34} {:<13} {:>4} {:>7} {:>9} {:>8} {:>6.2}  {note}",
            r.name,
            format!("{:?}", r.outcome),
            code,
            r.decoded,
            r.processed,
            r.decode_errors,
            r.secs
        );
    }
    let count = |o: Outcome| rows.iter().filter(|r| r.outcome == o).count();
    println!(
        "{} files: {} located errors (exit 2), {} completed runs (exit 0/1, accounted for; {} with corrupt data counted), \
         {} crashes, {} panics, {} hangs, {} wrong",
        rows.len(),
        count(Outcome::LocatedError),
        count(Outcome::Completed),
        rows.iter().filter(|r| r.outcome == Outcome::Completed && r.decode_errors > 0).count(),
        count(Outcome::Crash),
        count(Outcome::Panic),
        count(Outcome::Hang),
        count(Outcome::Wrong)
    );
    let bad: Vec<String> = rows
        .iter()
        .filter(|r| !matches!(r.outcome, Outcome::LocatedError | Outcome::Completed))
        .map(|r| format!("{} ({:?}): {}", r.name, r.outcome, r.note))
        .collect();
    assert!(bad.is_empty(), "{} file(s) mishandled:\n{}", bad.len(), bad.join("\n"));
    // The corpus really is hostile: both outcomes occur, and corrupt payloads are counted.
    assert!(count(Outcome::LocatedError) >= 10 && count(Outcome::Completed) >= 10);
    assert!(rows.iter().any(|r| r.name.starts_with("flipped-payload") && r.decode_errors > 0), "no corrupt packet was counted");
}

/// Sizes beyond `max_pixels` are refused when the source opens, naming the
/// source and the size; a lower per-source limit refuses the sample itself.
#[test]
fn absurd_frame_sizes_are_refused_at_open() {
    require_assets();
    let dir = tempfile::tempdir().unwrap();
    let y4m = dir.path().join("huge.y4m");
    let mut y = b"YUV4MPEG2 W12000 H12000 F25:1 Ip A1:1 C420jpeg\nFRAME\n".to_vec();
    y.extend(vec![128u8; 4096]);
    std::fs::write(&y4m, &y).unwrap();
    let toml = dir.path().join("p.toml");
    let write = |uri: &Path, extra: &str| {
        std::fs::write(
            &toml,
            format!(
                "[pipeline]\n{extra}\n[sources.cam]\nkind = \"file\"\nuri = \"{}\"\n\n[sinks.out]\nkind = \"null\"\ninputs = [\"cam\"]\n",
                uri.display()
            ),
        )
        .unwrap()
    };
    write(&y4m, "");
    let o = bin().arg("run").arg(&toml).args(["--progress", "never"]).output().unwrap();
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.contains(&format!("source `cam`: {}: frame size 12000x12000 (144000000 pixels) exceeds the limit", y4m.display())),
        "{err}"
    );
    assert!(err.contains("max_pixels"), "{err}");
    // The limit is configurable: 1280x720 = 921600 pixels is over a 640x480 limit.
    write(&root().join("samples/text-720p.mp4"), "max_pixels = 307200");
    let o = bin().arg("run").arg(&toml).args(["--progress", "never"]).output().unwrap();
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("frame size 1280x720 (921600 pixels) exceeds the limit of 307200 pixels"), "{err}");
    // And raising it lets a big-but-legal size through validation of the limit itself.
    write(&root().join("samples/text-720p.mp4"), "max_pixels = 921600");
    let o = bin().arg("run").arg(&toml).args(["--progress", "never"]).output().unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
}

/// The corrupt-data figures of a run's source: (frames skipped, stretches) from `--report`.
fn source_figures(report: &Path, source: &str) -> (u64, u64) {
    let r: serde_json::Value = serde_json::from_slice(&std::fs::read(report).unwrap()).unwrap();
    let n = r["nodes"].as_array().unwrap().iter().find(|n| n["name"] == source).unwrap_or_else(|| panic!("no {source} in {r}"));
    (n["decode_errors"].as_u64().unwrap(), n["corrupt_bursts"].as_u64().unwrap())
}

/// Regression: a `dir` source counted each failed file as one corrupt frame
/// (`1 frame(s) skipped for corrupt data in 0 stretch(es)` for a file whose
/// decoder skipped 17 frames in 2 stretches). Its summary and report now carry
/// the frames skipped and the stretches summed over its files, each file's
/// figures as the `file` source reports them; a file that cannot be opened at
/// all is named as failed and adds no frame.
#[test]
fn dir_source_counts_corrupt_frames_and_stretches_as_the_file_source_does() {
    require_assets();
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("in");
    std::fs::create_dir_all(&input).unwrap();
    // 100 frames, a keyframe every 10 (1 s), no B-frames: damage is skipped up to the next keyframe.
    let clean = input.join("clean.mp4");
    let st = Command::new("ffmpeg")
        .args(["-nostdin", "-y", "-loglevel", "error", "-i"])
        .arg(root().join("samples/text-720p.mp4"))
        .args(["-c:v", "libx264", "-threads", "1", "-g", "10", "-bf", "0"])
        .arg(&clean)
        .status()
        .unwrap();
    assert!(st.success(), "ffmpeg could not re-encode the sample");
    let bytes = std::fs::read(&clean).unwrap();
    // 200 random bytes (fixed seed) written over the payload at these fractions of the file.
    let mut rng = Rng(0x5eed_d1a5_0000_0003);
    let mut damaged = |fractions: &[f64]| {
        let mut v = bytes.clone();
        for f in fractions {
            let at = (v.len() as f64 * f) as usize;
            v[at..at + 200].copy_from_slice(&rng.bytes(200));
        }
        v
    };
    std::fs::write(input.join("one.mp4"), damaged(&[0.5])).unwrap();
    std::fs::write(input.join("two.mp4"), damaged(&[0.4, 0.6])).unwrap();
    std::fs::write(input.join("notes.mp4"), "not a video\n").unwrap();

    // Each damaged file through a `file` source.
    let mut per_file = Vec::new();
    for name in ["one.mp4", "two.mp4"] {
        let out = dir.path().join(format!("{name}.out"));
        std::fs::create_dir_all(&out).unwrap();
        let toml = out.join("p.toml");
        std::fs::write(
            &toml,
            format!(
                "[sources.cam]\nkind = \"file\"\nuri = \"{}\"\n\n[sinks.out]\nkind = \"null\"\ninputs = [\"cam\"]\n",
                input.join(name).display()
            ),
        )
        .unwrap();
        let report = out.join("report.json");
        let o = bin().arg("run").arg(&toml).args(["--progress", "never", "--report"]).arg(&report).output().unwrap();
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(0), "{name}: {err}");
        let (skipped, bursts) = source_figures(&report, "cam");
        assert!(skipped > 0 && bursts > 0, "{name}: the damage is skipped and counted: {err}");
        let (decoded, ..) = accounting(&err);
        assert_eq!(decoded + skipped, 100, "{name}: every frame is either decoded or counted as skipped");
        per_file.push((name, skipped, bursts));
    }
    assert!(per_file[1].2 >= 2, "two damaged places, two stretches: {per_file:?}");

    // The folder through a `dir` source, two files at a time.
    let (o, report, err) = run_batch(dir.path(), &input, 2);
    assert_eq!(o.status.code(), Some(3), "damaged and unreadable files fail the batch: {err}");
    let (skipped, bursts) = source_figures(&report, "recordings");
    let want = per_file.iter().fold((0, 0), |(s, b), f| (s + f.1, b + f.2));
    assert_eq!((skipped, bursts), want, "the dir source's totals are the file source's figures summed: {per_file:?}\n{err}");
    assert!(err.contains(&format!("recordings: {skipped} frame(s) skipped for corrupt data in {bursts} stretch(es)")), "{err}");
    // Each damaged file is named with its own figures; the unreadable one with its reason.
    let r: serde_json::Value = serde_json::from_slice(&std::fs::read(&report).unwrap()).unwrap();
    assert_eq!(r["inputs"]["complete"], 1, "{err}");
    let failed = r["inputs"]["failed"].as_array().unwrap();
    assert_eq!(failed.len(), 3, "{err}");
    let reason = |name: &str| {
        let path = input.join(name).display().to_string();
        failed.iter().find(|f| f["path"] == path.as_str()).unwrap_or_else(|| panic!("{name} not failed: {err}"))["reason"]
            .as_str()
            .unwrap()
            .to_string()
    };
    let mut summed = (0, 0);
    for (name, skipped, bursts) in &per_file {
        let reason = reason(name);
        let n: Vec<u64> = reason
            .strip_prefix("corrupt data: ")
            .unwrap_or_else(|| panic!("{name}: {reason}"))
            .split(' ')
            .filter_map(|w| w.parse().ok())
            .collect();
        assert_eq!((n[0], n[1]), (*skipped, *bursts), "{name}: the dir source's figures are the file source's: {reason}");
        summed = (summed.0 + n[0], summed.1 + n[1]);
    }
    assert_eq!(summed, (skipped, bursts), "the totals are the per-file figures summed");
    assert!(reason("notes.mp4").starts_with("not readable as media"), "{err}");
    // Frames are either decoded or counted as skipped, over the whole folder.
    let (decoded, processed, ..) = accounting(&err);
    assert_eq!((decoded, processed), (300 - skipped, 300 - skipped), "{err}");
}

/// The sample and its MPEG-TS remux (as cameras and pipes send it), each cut
/// to 60% of its bytes with `head -c`, in `dir`: (path, whole frame count).
fn cut_files(dir: &Path) -> Vec<(PathBuf, u64)> {
    let ts = dir.join("whole.ts");
    let st = Command::new("ffmpeg")
        .args(["-nostdin", "-y", "-loglevel", "error", "-i"])
        .arg(root().join("samples/text-720p.mp4"))
        .args(["-c", "copy", "-f", "mpegts"])
        .arg(&ts)
        .status()
        .unwrap();
    assert!(st.success(), "ffmpeg could not remux to MPEG-TS");
    let mut out = Vec::new();
    for (whole, name) in [(root().join("samples/text-720p.mp4"), "cut.mp4"), (ts.clone(), "cut.ts")] {
        let size = std::fs::metadata(&whole).unwrap().len() * 60 / 100;
        let cut = dir.join(name);
        let st = Command::new("sh").arg("-c").arg(format!("head -c {size} '{}' > '{}'", whole.display(), cut.display())).status().unwrap();
        assert!(st.success());
        out.push((cut, 100));
    }
    std::fs::remove_file(&ts).unwrap();
    out
}

/// Regression: a file cut to 60% exited 0 with its last, incomplete frames
/// counted as corrupt data ("each resumed at the next keyframe" while the
/// warning said there was none), and a `dir` batch gave "corrupt data" as its
/// reason. A cut file is now a source error saying how far it got (exit 1,
/// the results of the frames it had written), not corrupt data; in a batch
/// its reason is "truncated". mp4 lists its frame count; MPEG-TS lists none
/// (and its duration is read from its last packets), so a TS cut part-way
/// through a packet says that instead of an expected count.
#[test]
fn a_truncated_file_is_reported_as_truncated_not_as_corrupt() {
    require_assets();
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("in");
    std::fs::create_dir_all(&input).unwrap();
    let cuts = cut_files(&input);
    for (cut, whole) in &cuts {
        let out = dir.path().join(format!("{}.out", cut.file_name().unwrap().to_string_lossy()));
        std::fs::create_dir_all(&out).unwrap();
        let toml = out.join("p.toml");
        std::fs::write(
            &toml,
            format!(
                "[sources.cam]\nkind = \"file\"\nuri = \"{}\"\n\n[sinks.out]\nkind = \"ndjson\"\ninputs = [\"cam\"]\npath = \"{}\"\n",
                cut.display(),
                out.join("out.ndjson").display()
            ),
        )
        .unwrap();
        let report = out.join("report.json");
        let o = bin().arg("run").arg(&toml).args(["--progress", "never", "--report"]).arg(&report).output().unwrap();
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(1), "a truncated input is a source error: {err}");
        let (decoded, processed, ..) = accounting(&err);
        assert!(decoded > 10 && decoded < 90, "{err}");
        let said = format!("error: source `cam`: {}: truncated: ended early after {decoded} frames", cut.display());
        assert!(err.contains(&said), "{said}\nin:\n{err}");
        if cut.extension().unwrap() == "mp4" {
            assert!(err.contains(&format!("{said} (expected about {whole})")), "mp4 lists its frame count: {err}");
        }
        assert!(!err.contains("skipped for corrupt data") && !err.contains("resumed at"), "a cut is not corrupt data: {err}");
        assert_eq!(source_figures(&report, "cam"), (0, 0), "{err}");
        let written = std::fs::read_to_string(out.join("out.ndjson")).unwrap().lines().count() as u64;
        assert_eq!(written, processed, "the frames before the cut are processed and written: {err}");
    }

    // The same files in a batch, beside a whole one.
    std::fs::copy(root().join("samples/text-720p.mp4"), input.join("whole.mp4")).unwrap();
    let (o, report, err) = run_batch(dir.path(), &input, 1);
    assert_eq!(o.status.code(), Some(3), "truncated files fail the batch: {err}");
    let r: serde_json::Value = serde_json::from_slice(&std::fs::read(&report).unwrap()).unwrap();
    assert_eq!(r["inputs"]["complete"], 1, "{err}");
    let failed = r["inputs"]["failed"].as_array().unwrap();
    assert_eq!(failed.len(), 2, "{err}");
    for (cut, whole) in &cuts {
        let f = failed.iter().find(|f| f["path"] == cut.display().to_string().as_str()).unwrap_or_else(|| panic!("{err}"));
        let reason = f["reason"].as_str().unwrap();
        assert!(reason.starts_with("truncated: ended early after "), "{reason}");
        if cut.extension().unwrap() == "mp4" {
            assert!(reason.ends_with(&format!("frames (expected about {whole})")), "{reason}");
        }
    }
    assert_eq!(source_figures(&report, "recordings"), (0, 0), "cut files add no corrupt frames: {err}");
}

/// Run the folder `input` as a `dir` batch (`parallel` files at a time) into
/// `dir/batch-out/`: the output, the `--report` path and stderr.
fn run_batch(dir: &Path, input: &Path, parallel: usize) -> (std::process::Output, PathBuf, String) {
    let toml = dir.join("batch.toml");
    std::fs::write(
        &toml,
        format!(
            "[sources.recordings]\nkind = \"dir\"\npath = \"{}\"\nparallel = {parallel}\n\n\
             [sinks.out]\nkind = \"ndjson\"\ninputs = [\"recordings\"]\npath = \"{}/{{stream}}.ndjson\"\n",
            input.display(),
            dir.join("batch-out").display()
        ),
    )
    .unwrap();
    let report = dir.join("batch-report.json");
    let o = bin().arg("run").arg(&toml).args(["--progress", "never", "--report"]).arg(&report).output().unwrap();
    let err = stderr(&o);
    (o, report, err)
}

/// Frames of `path` FFmpeg itself decodes (`ffprobe -count_frames`).
fn ffprobe_frames(path: &Path) -> u64 {
    let o = Command::new("ffprobe")
        .args(["-v", "error", "-select_streams", "v:0", "-count_frames", "-show_entries", "stream=nb_read_frames", "-of", "csv=p=0"])
        .arg(path)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&o.stdout);
    // MPEG-TS lists the stream twice (under its program too): the first line.
    let first = text.lines().map(str::trim).find(|l| !l.is_empty()).unwrap_or("");
    first.parse().unwrap_or_else(|e| panic!("ffprobe {}: {e}: {text}", path.display()))
}

/// Corrupt data at the end of a file (bytes overwritten up to its last one,
/// the file its full length) is corrupt data, not a cut, whatever the
/// container: with FFmpeg as the reference, every frame the clip has is
/// either processed or counted as skipped, never more processed than FFmpeg
/// decodes, at least the frames FFmpeg cannot decode counted, and the tail is a
/// stretch of its own in the summary and `decode_errors`; the run succeeds.
#[test]
fn corrupt_data_at_the_end_of_a_file_is_counted() {
    require_assets();
    let dir = tempfile::tempdir().unwrap();
    // MPEG-TS has no index nor a duration of its own (FFmpeg reads it from
    // the last timestamps it finds), so the frames a garbage tail replaced
    // are in no count there: they are estimated from the unreadable bytes,
    // and said to be.
    for ext in ["mkv", "mp4", "ts"] {
        // 300 frames at 10 fps, a keyframe every 30, no B-frames.
        let clean = dir.path().join(format!("clean.{ext}"));
        let st = Command::new("ffmpeg")
            .args(["-nostdin", "-y", "-loglevel", "error", "-i"])
            .arg(root().join("samples/eval-720p.mp4"))
            .args(["-c:v", "libx264", "-threads", "1", "-g", "30", "-bf", "0"])
            // mp4: the index first, so that the damage is in the frames alone.
            .args(if ext == "mp4" { &["-movflags", "+faststart"][..] } else { &[] })
            .arg(&clean)
            .status()
            .unwrap();
        assert!(st.success());
        let total = ffprobe_frames(&clean);
        // Three stretches overwritten in the middle, and the last 15% of the file.
        let mut bytes = std::fs::read(&clean).unwrap();
        let n = bytes.len();
        for frac in [0.3, 0.5, 0.7] {
            let at = (n as f64 * frac) as usize;
            for (i, b) in bytes[at..at + 400].iter_mut().enumerate() {
                *b = ((i * 37 + 11) % 256) as u8;
            }
        }
        let tail = (n as f64 * 0.85) as usize;
        for (i, b) in bytes[tail..].iter_mut().enumerate() {
            *b = ((i * 37 + 11) % 256) as u8;
        }
        let corrupt = dir.path().join(format!("corrupt.{ext}"));
        std::fs::write(&corrupt, &bytes).unwrap();
        let by_ffmpeg = ffprobe_frames(&corrupt);
        let ffmpeg_errors =
            Command::new("ffmpeg").args(["-nostdin", "-v", "error", "-i"]).arg(&corrupt).args(["-f", "null", "-"]).output().unwrap();
        assert!(!ffmpeg_errors.stderr.is_empty(), "{ext}: FFmpeg finds the damage");
        assert!(by_ffmpeg < total, "{ext}: FFmpeg decodes {by_ffmpeg} of {total} frames");

        let case = Case { name: format!("tail-{ext}"), input: Input::File(corrupt.clone()) };
        let row = run_case(dir.path(), &case);
        let err = std::fs::read_to_string(dir.path().join(format!("tail-{ext}.out/stderr"))).unwrap();
        assert_eq!(row.code, Some(0), "{ext}: corrupt data, not a cut:\n{err}");
        assert_eq!(row.outcome, Outcome::Completed, "{ext}: {}", row.note);
        assert!(!err.contains("truncated"), "{ext}:\n{err}");
        if ext == "ts" {
            let counted = row.decoded + row.decode_errors;
            assert!(counted.abs_diff(total) * 20 <= total, "{ext}: {counted} frames processed or counted of {total} (within 5%):\n{err}");
            assert!(err.contains("estimated from the size of the unreadable data at the end"), "{ext}: the estimate is said:\n{err}");
        } else {
            assert_eq!(row.decoded + row.decode_errors, total, "{ext}: every frame processed or counted:\n{err}");
        }
        assert!(row.decoded <= by_ffmpeg, "{ext}: {} processed, FFmpeg decodes {by_ffmpeg}", row.decoded);
        assert!(row.decode_errors >= total - by_ffmpeg, "{ext}: {} counted, FFmpeg cannot decode {}", row.decode_errors, total - by_ffmpeg);
        let r: serde_json::Value =
            serde_json::from_slice(&std::fs::read(dir.path().join(format!("tail-{ext}.out/report.json"))).unwrap()).unwrap();
        let stretches = r["nodes"][0]["corrupt_bursts"].as_u64().unwrap();
        assert_eq!(stretches, 4, "{ext}: three stretches in the middle, one at the end:\n{err}");
        assert!(err.contains(&format!("cam: {} frame(s) skipped for corrupt data in 4 stretch(es)", row.decode_errors)), "{ext}:\n{err}");
        assert!(err.contains(", no keyframe before the end"), "{ext}: the tail's stretch is said:\n{err}");
    }
}
