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

use super::batch::{Decode, Feed, Input, Media, Msg};
use crate::config::{Diagnostic, DirSourceConfig, NodeConfig, NodeKind, PipelineConfig};
use crate::frame::{InputEnd, Pool};
use crate::runtime::report::FailedInput;
use crate::runtime::{InputLog, SourceCtx};
use crate::stages::build::{Build, BuildCtx};
use crate::stages::sinks::stream_file_name;
use crate::stages::{Body, Source};

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
                            let e = &todo[i];
                            d.file(i, &Input { path: &e.path, size: e.size, cancel: None });
                        }
                    })
                    .expect("spawn decoder thread");
            }
            drop(tx);
            let mut feed = Feed::default();
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
                        let (log, state) = (log.clone(), self.state.clone());
                        feed.opened(ctx, file, time_base, Arc::from(e.rel.as_str()), move |end: InputEnd, flushed: bool| {
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
                    }
                    Msg::Frame { file, pts, item } => {
                        if !feed.frame(ctx, file, pts, item, stop.load(Ordering::Acquire), |_| {})
                            || self.limit.is_some_and(|l| feed.emitted >= l)
                        {
                            stop.store(true, Ordering::Release);
                        }
                    }
                    Msg::Done { file, result, corrupt } => {
                        if let Err(reason) = feed.done(ctx, file, result, corrupt) {
                            record_failure(&log, self.state.as_deref(), &todo[file], reason);
                        }
                    }
                    Msg::Stopped { file, corrupt } => feed.stopped(ctx, file, corrupt),
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

impl Build for DirSourceConfig {
    fn build(&self, cx: &BuildCtx<'_>) -> Result<Body, Diagnostic> {
        DirSource::build(cx.cfg, cx.node, self, cx.pool_size, cx.opts.batch_state, cx.max_frames()).map(|s| Body::Source(Box::new(s)))
    }
}
