//! `kind = "dir"`: batch processing of recorded media. Every file of a
//! folder (or matching a glob), in path order, each its own stream named by
//! its path relative to the folder; `parallel` files decoded at once. Each
//! file gives its video frames, or (`media = "audio"`) its audio cut into
//! timed windows.
//!
//! A state file records each file whose results every sink has flushed, and
//! each file that failed (with its size and modification time). A rerun skips
//! both while they are unchanged; a file that was stopped mid-way is not in
//! it, so a rerun does it again from the start (its per-stream output is
//! truncated when reopened, never appended twice).

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crossbeam_channel::{RecvTimeoutError, bounded};
use serde::{Deserialize, Serialize};

use crate::backend::ffmpeg::{AudioDecoder, FfmpegError, VideoDecoder, copy_to_image, turn_picture};
use crate::config::{Diagnostic, DirSourceConfig, NodeConfig, NodeKind, PipelineConfig};
use crate::frame::{AudioChunk, Image, InputEnd, Pool};
use crate::runtime::report::FailedInput;
use crate::runtime::{InputLog, SourceCtx};
use crate::stages::Source;
use crate::stages::sinks::stream_file_name;

/// The state file's default name, in the output folder.
pub const STATE_FILE: &str = ".infer-stream-batch.json";

/// One input file.
#[derive(Debug, Clone)]
struct Entry {
    path: PathBuf,
    /// Path relative to the folder, `/`-separated: the stream name.
    rel: String,
    size: u64,
    mtime_ns: i128,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
enum Status {
    Complete,
    Failed,
}

/// What the state file says about one file.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Record {
    status: Status,
    size: u64,
    mtime_ns: i128,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    frames: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    reason: Option<String>,
}

#[derive(Debug, Default, Serialize, Deserialize)]
struct StateFile {
    version: u32,
    /// By path relative to the folder.
    files: BTreeMap<String, Record>,
}

/// The batch state, rewritten whole (temporary file + rename) on each change.
struct BatchState {
    path: PathBuf,
    state: Mutex<StateFile>,
}

impl BatchState {
    fn load(path: PathBuf) -> Result<Self, String> {
        let state = match std::fs::read(&path) {
            Ok(bytes) => serde_json::from_slice::<StateFile>(&bytes)
                .map_err(|e| format!("batch state {} is not readable ({e}); delete it to start the batch over", path.display()))?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => StateFile { version: 1, files: BTreeMap::new() },
            Err(e) => return Err(format!("cannot read batch state {}: {e}", path.display())),
        };
        Ok(BatchState { path, state: Mutex::new(state) })
    }

    fn get(&self, rel: &str) -> Option<Record> {
        self.state.lock().unwrap_or_else(|e| e.into_inner()).files.get(rel).cloned()
    }

    /// Record `rel` and write the file atomically: a reader (or the next run) sees the old state or the new one.
    fn set(&self, rel: &str, record: Record) {
        let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        st.files.insert(rel.to_string(), record);
        if let Err(e) = self.write(&st) {
            tracing::error!("cannot write batch state {}: {e}", self.path.display());
        }
    }

    fn write(&self, st: &StateFile) -> std::io::Result<()> {
        use std::io::Write;
        if let Some(dir) = self.path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir)?;
        }
        let tmp = self.path.with_extension("json.tmp");
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(&serde_json::to_vec_pretty(st).map_err(std::io::Error::other)?)?;
        f.sync_all()?;
        std::fs::rename(&tmp, &self.path)
    }
}

pub struct DirSource {
    describe: String,
    /// Files to read this run, in path order.
    todo: Vec<Entry>,
    /// Files skipped: complete before; failed before and unchanged (with the reason).
    skipped: u64,
    skipped_failed: Vec<FailedInput>,
    state: Option<Arc<BatchState>>,
    parallel: usize,
    decoder_threads: usize,
    max_frames: Option<u64>,
    /// Frames in all, over every file (benchmarks).
    limit: Option<u64>,
    media: Media,
    /// `rotate = "auto"`: each file's frames turned as its display matrix asks.
    rotate: bool,
    pool: Pool<u8>,
    audio_pool: Pool<f32>,
}

/// What a file gives.
#[derive(Debug, Clone, Copy)]
enum Media {
    Video,
    /// Audio resampled to `rate` Hz mono, in windows of `window` samples every `hop`.
    Audio {
        rate: u32,
        window: usize,
        hop: usize,
    },
}

/// Files of `folder` (and its subfolders when `recursive`), hidden ones left out.
fn walk(folder: &Path, recursive: bool, out: &mut Vec<PathBuf>) -> std::io::Result<()> {
    for e in std::fs::read_dir(folder)? {
        let e = e?;
        if e.file_name().to_string_lossy().starts_with('.') {
            continue;
        }
        let ty = e.file_type()?;
        let p = e.path();
        if ty.is_dir() || (ty.is_symlink() && p.is_dir()) {
            if recursive {
                walk(&p, recursive, out)?;
            }
        } else {
            out.push(p);
        }
    }
    Ok(())
}

/// The longest leading part of a glob with no wildcard in it: the folder stream names are relative to.
fn glob_base(pattern: &str) -> PathBuf {
    let mut base = PathBuf::new();
    for part in Path::new(pattern).components() {
        if part.as_os_str().to_string_lossy().contains(['*', '?', '[']) {
            break;
        }
        base.push(part);
    }
    // The last part may be the file itself (a glob with no wildcard).
    if base.is_file() { base.parent().map(Path::to_path_buf).unwrap_or_default() } else { base }
}

/// Where the state file goes by default: beside the first NDJSON output made per stream (`{stream}` in its path).
fn default_state(cfg: &PipelineConfig) -> Result<Option<PathBuf>, Diagnostic> {
    for n in &cfg.nodes {
        if let NodeKind::Ndjson(c) = &n.kind
            && c.path.get_ref().contains("{stream}")
        {
            let p = cfg.resolve_path(&c.path)?.to_string_lossy().into_owned();
            let prefix = &p[..p.find("{stream}").expect("checked above")];
            let dir = if prefix.ends_with('/') || prefix.is_empty() {
                PathBuf::from(prefix)
            } else {
                Path::new(prefix).parent().map(Path::to_path_buf).unwrap_or_default()
            };
            return Ok(Some(dir.join(STATE_FILE)));
        }
    }
    Ok(None)
}

fn mtime_ns(m: &std::fs::Metadata) -> i128 {
    m.modified().ok().and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok()).map_or(0, |d| d.as_nanos() as i128)
}

impl DirSource {
    /// List the files now, so an empty match or a missing folder is reported before anything runs.
    /// `use_state`: read and write the batch state (runs; benchmarks neither skip files nor record them).
    /// `limit`: frames in all (benchmarks).
    pub fn build(
        cfg: &PipelineConfig,
        node: &NodeConfig,
        c: &DirSourceConfig,
        pool_size: usize,
        use_state: bool,
        limit: Option<u64>,
    ) -> Result<Self, Diagnostic> {
        let media = match super::audio_windows(cfg, node, c.media, c.sample_rate.as_ref(), c.window.as_ref(), c.hop.as_ref())? {
            None => Media::Video,
            Some((rate, window, hop)) => Media::Audio { rate, window, hop },
        };
        let (value, root, mut paths) = match (&c.path, &c.glob) {
            (Some(p), None) => {
                let root = cfg.resolve_path(p)?;
                let mut paths = Vec::new();
                walk(&root, c.recursive, &mut paths)
                    .map_err(|e| cfg.diag(p.span(), format!("source `{}`: cannot list folder {}: {e}", node.name, root.display())))?;
                (p, root, paths)
            }
            (None, Some(g)) => {
                let pattern = cfg.resolve_path(g)?.to_string_lossy().into_owned();
                let opts = glob::MatchOptions { require_literal_separator: true, require_literal_leading_dot: true, ..Default::default() };
                let found =
                    glob::glob_with(&pattern, opts).map_err(|e| cfg.diag(g.span(), format!("source `{}`: bad glob: {e}", node.name)))?;
                let paths = found.filter_map(Result::ok).filter(|p| p.is_file()).collect();
                (g, glob_base(&pattern), paths)
            }
            _ => {
                return Err(cfg
                    .diag(
                        node.kind_span.clone(),
                        format!("source `{}`: a `dir` source needs `path` (a folder) or `glob`, not both", node.name),
                    )
                    .with_help("path = \"recordings\" or glob = \"recordings/*.mp4\""));
            }
        };
        if let Some(exts) = &c.extensions {
            paths.retain(|p| {
                p.extension().is_some_and(|e| exts.iter().any(|x| x.trim_start_matches('.').eq_ignore_ascii_case(&e.to_string_lossy())))
            });
        }
        let mut files: Vec<Entry> = paths
            .into_iter()
            .map(|path| {
                let rel =
                    path.strip_prefix(&root).unwrap_or(&path).components().map(|c| c.as_os_str().to_string_lossy()).collect::<Vec<_>>();
                let meta = std::fs::metadata(&path).ok();
                Entry { rel: rel.join("/"), size: meta.as_ref().map_or(0, |m| m.len()), mtime_ns: meta.as_ref().map_or(0, mtime_ns), path }
            })
            .collect();
        files.sort_by(|a, b| a.rel.cmp(&b.rel));
        if files.is_empty() {
            return Err(cfg
                .diag(value.span(), format!("source `{}`: no files in {}", node.name, value.get_ref()))
                .with_help("check the folder or glob (relative paths start at the pipeline file's folder) and `extensions`"));
        }
        // Outputs are named after streams: two files must not share a name.
        let mut names: HashMap<String, &str> = HashMap::new();
        for f in &files {
            if let Some(other) = names.insert(stream_file_name(&f.rel), &f.rel) {
                return Err(cfg.diag(value.span(), format!("source `{}`: `{other}` and `{}` make the same output name", node.name, f.rel)));
            }
        }
        let state_path = match &c.state {
            Some(s) => Some(cfg.resolve_path(s)?),
            None => default_state(cfg)?,
        }
        .filter(|_| use_state);
        let state = match state_path {
            Some(p) => Some(Arc::new(BatchState::load(p).map_err(|e| {
                let span = c.state.as_ref().map_or(node.kind_span.clone(), |s| s.span());
                cfg.diag(span, format!("source `{}`: {e}", node.name))
            })?)),
            None => None,
        };
        if state.is_some() {
            for n in &cfg.nodes {
                if let NodeKind::Ndjson(s) = &n.kind
                    && !s.path.get_ref().contains("{stream}")
                    && !s.append
                {
                    tracing::warn!(
                        "sink `{}` writes every file's results to one file, emptied at start: files skipped as complete are not in it \
                         (use path = \"out/{{stream}}.ndjson\" for one file per input)",
                        n.name
                    );
                }
            }
        }
        let (mut todo, mut skipped, mut skipped_failed) = (Vec::new(), 0, Vec::new());
        for f in files.iter() {
            match state.as_ref().and_then(|s| s.get(&f.rel)).filter(|r| r.size == f.size && r.mtime_ns == f.mtime_ns) {
                Some(r) if r.status == Status::Complete => skipped += 1,
                Some(r) => skipped_failed.push(FailedInput {
                    path: f.path.display().to_string(),
                    reason: format!("{} (unchanged since an earlier run)", r.reason.unwrap_or_default()),
                }),
                None => todo.push(f.clone()),
            }
        }
        let parallel = c.parallel.get_ref().get();
        let describe = format!(
            "{} file(s) in {}{}{}, {} at a time{}",
            files.len(),
            root.display(),
            match media {
                Media::Video => String::new(),
                Media::Audio { rate, window, hop } => format!(" (audio at {rate} Hz, windows of {window} samples every {hop})"),
            },
            match (skipped, skipped_failed.len()) {
                (0, 0) => String::new(),
                (s, 0) => format!(" (skipped {s} already complete)"),
                (s, f) => format!(" (skipped {s} already complete, {f} failed before and unchanged)"),
            },
            parallel,
            state.as_ref().map(|s| format!(", state in {}", s.path.display())).unwrap_or_else(|| ", no state file (no resume)".into())
        );
        Ok(DirSource {
            describe,
            todo,
            skipped,
            skipped_failed,
            state,
            parallel,
            decoder_threads: c.decoder_threads,
            max_frames: c.max_frames,
            limit,
            media,
            rotate: c.rotate == crate::config::Rotate::Auto,
            pool: Pool::new(pool_size + 4 * parallel),
            audio_pool: Pool::new(pool_size + 4 * parallel),
        })
    }
}

/// A file being read: its input token, next sequence number, time base, and whether it failed.
type InProgress = (Arc<crate::frame::InputToken>, u64, (i32, i32), Arc<AtomicBool>);

/// Corrupt data a file's decoder skipped: frames (audio: packets) and the
/// stretches they came in (video; each ended by a keyframe or the end).
#[derive(Debug, Clone, Copy, Default)]
struct Corrupt {
    frames: u64,
    bursts: u64,
}

impl Corrupt {
    fn add(&mut self, other: Corrupt) {
        self.frames += other.frames;
        self.bursts += other.bursts;
    }
}

/// What a decoding worker sends to the source thread.
enum Msg {
    Opened {
        file: usize,
        time_base: (i32, i32),
    },
    Frame {
        file: usize,
        pts: Option<i64>,
        item: Item,
    },
    /// Read to the end (or to `max_frames`): `Err` says why the file is not
    /// usable. `corrupt`: what its decoder skipped (also when it failed).
    Done {
        file: usize,
        result: Result<u64, String>,
        corrupt: Corrupt,
    },
    /// The run is stopping: the file was not finished (`corrupt`: what its decoder skipped so far).
    Stopped {
        file: usize,
        corrupt: Corrupt,
    },
}

/// A decoded video frame or audio window.
enum Item {
    Image(Image),
    Audio(AudioChunk),
}

/// Why a file cannot be opened, without its path (the report names it).
fn open_reason(e: FfmpegError, size: u64) -> String {
    if size == 0 {
        return "empty file (0 bytes)".into();
    }
    match e {
        FfmpegError::Open { source, .. } => format!("not readable as media (not a media file, or truncated): {source}"),
        FfmpegError::NoVideo { .. } => "no video stream".into(),
        FfmpegError::NoAudio { .. } => "no audio stream".into(),
        FfmpegError::Decoder { codec, source, .. } => format!("no decoder for codec {codec}: {source}"),
        other => other.to_string(),
    }
}

/// The decoding side of a dir source: what each worker needs.
struct Decode<'a> {
    media: Media,
    rotate: bool,
    threads: usize,
    max_frames: Option<u64>,
    pool: &'a Pool<u8>,
    audio_pool: &'a Pool<f32>,
    tx: crossbeam_channel::Sender<Msg>,
    stop: &'a AtomicBool,
}

impl Decode<'_> {
    /// Decode one file, sending its frames or windows; the result says whether it is whole.
    fn file(&self, file: usize, e: &Entry) {
        match self.media {
            Media::Video => self.video(file, e),
            Media::Audio { rate, window, hop } => self.audio(file, e, rate, window, hop),
        }
    }

    /// Decode one video file, sending its frames; the result says whether it is whole.
    fn video(&self, file: usize, e: &Entry) {
        let (tx, stop, max_frames, pool) = (&self.tx, self.stop, self.max_frames, self.pool);
        let mut dec = match VideoDecoder::open(&e.path, self.threads) {
            Ok(d) => d,
            Err(err) => {
                // Not opened, nothing decoded: the file is failed (and named), no frame is counted.
                let _ = tx.send(Msg::Done { file, result: Err(open_reason(err, e.size)), corrupt: Corrupt::default() });
                return;
            }
        };
        let _ = tx.send(Msg::Opened { file, time_base: dec.info.time_base });
        let turn = dec.info.quarter_turn().filter(|_| self.rotate);
        match (turn, dec.info.turn_note()) {
            (Some(d), _) => tracing::info!("{}: frames turned {d}° clockwise, as the container's display matrix asks", e.path.display()),
            (None, Some(note)) => tracing::warn!("{}: {note}", e.path.display()),
            _ => {}
        }
        let (mut n, mut bad) = (0u64, 0u64);
        // As the `file` source counts: frames skipped (rejected, damaged, or
        // unusable once decoded) and the stretches of corrupt data.
        let corrupt = |dec: &VideoDecoder, bad: u64| Corrupt { frames: dec.skipped_frames + bad, bursts: dec.corrupt_bursts };
        let mut hit_limit = false;
        loop {
            if stop.load(Ordering::Acquire) {
                let _ = tx.send(Msg::Stopped { file, corrupt: corrupt(&dec, bad) });
                return;
            }
            if max_frames.is_some_and(|m| n >= m) {
                hit_limit = true;
                break;
            }
            let frame = match dec.next_frame() {
                Ok(Some(f)) => f,
                Ok(None) => break,
                Err(err) => {
                    let _ = tx.send(Msg::Done { file, result: Err(err.to_string()), corrupt: corrupt(&dec, bad) });
                    return;
                }
            };
            let pts = frame.timestamp().or(frame.pts());
            let image = match (copy_to_image(frame, pool), turn) {
                (Ok(i), Some(d)) => turn_picture(&i, d, pool),
                (image, _) => image,
            };
            match image {
                Ok(image) => {
                    n += 1;
                    if tx.send(Msg::Frame { file, pts, item: Item::Image(image) }).is_err() {
                        return;
                    }
                }
                Err(err) => {
                    bad += 1;
                    tracing::debug!("{}: frame {n}: {err}", e.path.display());
                }
            }
        }
        let skipped = corrupt(&dec, bad);
        let result = if let Some(t) = dec.truncated.filter(|_| !hit_limit) {
            Err(t.describe(n))
        } else if let Some(err) = &dec.read_error {
            Err(format!("read error after {n} frame(s): {err} (truncated?)"))
        } else if skipped.frames > 0 {
            Err(format!("corrupt data: {} frame(s) skipped in {} stretch(es) ({n} frame(s) decoded)", skipped.frames, skipped.bursts))
        } else if let Some(d) = dec.info.declared_frames.filter(|d| !hit_limit && n < *d) {
            Err(format!("decoded {n} of the {d} frames the container lists (truncated?)"))
        } else if n == 0 {
            Err("no video frames decoded".into())
        } else {
            Ok(n)
        };
        let _ = tx.send(Msg::Done { file, result, corrupt: skipped });
    }

    fn audio(&self, file: usize, e: &Entry, rate: u32, window: usize, hop: usize) {
        let tx = &self.tx;
        let mut dec = match AudioDecoder::open(&e.path, rate) {
            Ok(d) => d,
            Err(err) => {
                let _ = tx.send(Msg::Done { file, result: Err(open_reason(err, e.size)), corrupt: Corrupt::default() });
                return;
            }
        };
        // As the `audio` source counts: packets the decoder rejected.
        let corrupt = |dec: &AudioDecoder| Corrupt { frames: dec.corrupt_packets, bursts: 0 };
        let _ = tx.send(Msg::Opened { file, time_base: (1, rate as i32) });
        let mut windows = super::audio::Windows::new(window, hop);
        let (mut n, mut hit_limit) = (0u64, false);
        loop {
            if self.stop.load(Ordering::Acquire) {
                let _ = tx.send(Msg::Stopped { file, corrupt: corrupt(&dec) });
                return;
            }
            if self.max_frames.is_some_and(|m| n >= m) {
                hit_limit = true;
                break;
            }
            match windows.next(&mut dec, self.audio_pool, rate) {
                Ok(Some(chunk)) => {
                    n += 1;
                    if tx.send(Msg::Frame { file, pts: Some(chunk.start as i64), item: Item::Audio(chunk) }).is_err() {
                        return;
                    }
                }
                Ok(None) => break,
                Err(err) => {
                    let result = Err(format!("read error after {n} window(s): {err}"));
                    let _ = tx.send(Msg::Done { file, result, corrupt: corrupt(&dec) });
                    return;
                }
            }
        }
        let seconds = windows.consumed() as f64 / rate as f64;
        let result = if let Some(err) = &dec.read_error {
            Err(format!("read error after {n} window(s): {err} (truncated?)"))
        } else if dec.corrupt_packets > 0 {
            Err(format!("corrupt data: {} packet(s) could not be decoded ({n} window(s) decoded)", dec.corrupt_packets))
        } else if n == 0 {
            Err("no audio decoded".into())
        } else if let Some(d) = dec.duration.filter(|d| !hit_limit && seconds < d - 0.5) {
            Err(format!("decoded {seconds:.1} s of the {d:.1} s the container declares (truncated?)"))
        } else {
            Ok(n)
        };
        let _ = tx.send(Msg::Done { file, result, corrupt: corrupt(&dec) });
    }
}

/// Record a failed file: in the summary, the log and the state file.
fn record_failure(log: &InputLog, state: Option<&BatchState>, e: &Entry, reason: String) {
    tracing::warn!("{}: {reason}; skipped", e.path.display());
    if let Some(s) = state {
        s.set(&e.rel, Record { status: Status::Failed, size: e.size, mtime_ns: e.mtime_ns, frames: None, reason: Some(reason.clone()) });
    }
    log.record(|r| r.failed.push(FailedInput { path: e.path.display().to_string(), reason }));
}

impl Source for DirSource {
    fn describe(&self) -> String {
        self.describe.clone()
    }

    fn expected_frames(&self) -> Option<u64> {
        self.limit
    }

    fn run(&mut self, ctx: &mut SourceCtx<'_>) -> Result<(), String> {
        let log = ctx.inputs().clone();
        let (skipped, skipped_failed) = (self.skipped, std::mem::take(&mut self.skipped_failed));
        log.record(|r| {
            r.skipped += skipped;
            r.skipped_failed += skipped_failed.len() as u64;
            r.failed.extend(skipped_failed);
        });
        if skipped > 0 {
            tracing::info!("source `{}`: skipped {skipped} already complete", ctx.name);
        }
        let todo = std::mem::take(&mut self.todo);
        let next = Mutex::new(0usize);
        let stop = AtomicBool::new(false);
        let (tx, rx) = bounded::<Msg>(2 * self.parallel);
        // Summed over the files, kept live as each file ends.
        let mut corrupt = Corrupt::default();
        let (media, rotate, threads, max_frames, pool, audio_pool) =
            (self.media, self.rotate, self.decoder_threads, self.max_frames, &self.pool, &self.audio_pool);
        std::thread::scope(|scope| {
            for w in 0..self.parallel.min(todo.len()) {
                let (todo, next) = (&todo, &next);
                let d = Decode { media, rotate, threads, max_frames, pool, audio_pool, tx: tx.clone(), stop: &stop };
                std::thread::Builder::new()
                    .name(format!("{}:decode{w}", ctx.name))
                    .spawn_scoped(scope, move || {
                        while !d.stop.load(Ordering::Acquire) {
                            let i = {
                                let mut n = next.lock().unwrap_or_else(|e| e.into_inner());
                                if *n >= todo.len() {
                                    break;
                                }
                                *n += 1;
                                *n - 1
                            };
                            d.file(i, &todo[i]);
                        }
                    })
                    .expect("spawn decoder thread");
            }
            drop(tx);
            let mut open: HashMap<usize, InProgress> = HashMap::new();
            let mut emitted = 0u64;
            loop {
                if ctx.stopping() {
                    stop.store(true, Ordering::Release);
                }
                let msg = match rx.recv_timeout(Duration::from_millis(100)) {
                    Ok(m) => m,
                    Err(RecvTimeoutError::Timeout) => continue,
                    Err(RecvTimeoutError::Disconnected) => break,
                };
                match msg {
                    Msg::Opened { file, time_base } => {
                        let e = todo[file].clone();
                        let failed = Arc::new(AtomicBool::new(false));
                        let (log, state, f2) = (log.clone(), self.state.clone(), failed.clone());
                        let token = ctx.open_input(Arc::from(e.rel.as_str()), move |end: InputEnd, flushed: bool| {
                            if f2.load(Ordering::Acquire) {
                                return;
                            }
                            if !end.read_to_end {
                                tracing::info!(
                                    "{}: stopped after {} frame(s); redone from the start next run",
                                    e.path.display(),
                                    end.decoded
                                );
                                log.record(|r| r.incomplete += 1);
                            } else if !flushed {
                                record_failure(&log, state.as_deref(), &e, "its results could not be written".into());
                            } else if end.failed > 0 {
                                let reason = format!("{} of its {} frame(s) failed in the pipeline", end.failed, end.decoded);
                                record_failure(&log, state.as_deref(), &e, reason);
                            } else {
                                if let Some(s) = &state {
                                    let r = Record {
                                        status: Status::Complete,
                                        size: e.size,
                                        mtime_ns: e.mtime_ns,
                                        frames: Some(end.decoded),
                                        reason: None,
                                    };
                                    s.set(&e.rel, r);
                                }
                                tracing::info!("{}: complete ({} frame(s))", e.path.display(), end.decoded);
                                log.record(|r| r.complete += 1);
                            }
                        });
                        open.insert(file, (token, 0, time_base, failed));
                    }
                    Msg::Frame { file, pts, item } => {
                        let Some((token, seq, tb, _)) = open.get_mut(&file) else { continue };
                        if stop.load(Ordering::Acquire) {
                            continue;
                        }
                        let frame = match item {
                            Item::Image(image) => ctx.new_frame_of(token, *seq, pts, *tb, Some(Arc::new(image))),
                            Item::Audio(chunk) => {
                                let mut f = ctx.new_frame_of(token, *seq, pts, *tb, None);
                                f.audio = Some(Arc::new(chunk));
                                f
                            }
                        };
                        *seq += 1;
                        emitted += 1;
                        if !ctx.emit(frame) || self.limit.is_some_and(|l| emitted >= l) {
                            stop.store(true, Ordering::Release);
                        }
                    }
                    Msg::Done { file, result, corrupt: c } => {
                        corrupt.add(c);
                        ctx.set_decode_errors(corrupt.frames, corrupt.bursts);
                        let entry = open.remove(&file);
                        match result {
                            Ok(sent) => {
                                // Complete only if every frame it decoded went downstream (none left behind by a stop).
                                if let Some((token, emitted, ..)) = &entry
                                    && *emitted == sent
                                {
                                    token.read_to_end();
                                }
                            }
                            Err(reason) => {
                                if let Some((_, _, _, failed)) = &entry {
                                    failed.store(true, Ordering::Release);
                                }
                                record_failure(&log, self.state.as_deref(), &todo[file], reason);
                            }
                        }
                        // Dropping the token here: the file ends once its last frame has settled downstream.
                    }
                    Msg::Stopped { file, corrupt: c } => {
                        corrupt.add(c);
                        ctx.set_decode_errors(corrupt.frames, corrupt.bursts);
                        open.remove(&file);
                    }
                }
            }
        });
        // Files never started because the run stopped: redone next run.
        let started = *next.lock().unwrap_or_else(|e| e.into_inner());
        let never = todo.len().saturating_sub(started);
        if never > 0 {
            log.record(|r| r.incomplete += never as u64);
        }
        Ok(())
    }
}
