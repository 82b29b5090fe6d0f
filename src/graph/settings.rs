//! Per-kind settings checks, run by [`super::check`] once the edges are known:
//! values in range (sizes, rates, tracker and motion settings, RTSP timings),
//! input formats FFmpeg has, sizes that would exhaust memory, settings that
//! need a certain stage up- or downstream, and what a `video` sink can write.

use super::{MAX_BATCH, MAX_BATCH_WAIT_MS, MAX_QUEUE, MAX_TENSOR_SIDE, MAX_WAIT_MS, upstream_sources};
use crate::config::{Diagnostics, NodeKind, PipelineConfig, mask_credentials};

/// Silero VAD takes 512-sample windows at 16 kHz or 256 at 8 kHz.
pub(super) fn check_vad_windows(cfg: &PipelineConfig, producers: &[Vec<usize>], diags: &mut Diagnostics) {
    for (i, node) in cfg.nodes.iter().enumerate() {
        if !matches!(node.kind, NodeKind::Vad(_)) {
            continue;
        }
        for &p in &producers[i] {
            if let NodeKind::Audio(a) = &cfg.nodes[p].kind {
                let ok = matches!((*a.sample_rate.get_ref(), *a.window.get_ref()), (16000, 512) | (8000, 256));
                if !ok {
                    diags.push(cfg.diag(a.window.span(), format!(
                        "vad `{}` needs 512-sample windows at 16000 Hz (or 256 at 8000 Hz), but `{}` makes {}-sample windows at {} Hz",
                        node.name, cfg.nodes[p].name, a.window.get_ref(), a.sample_rate.get_ref()
                    )).with_help("set sample_rate = 16000 and window = 512"));
                }
            }
        }
    }
}

/// Synthetic video is YUV 4:2:0: even sizes, a positive rate.
pub(super) fn check_testsrc(cfg: &PipelineConfig, diags: &mut Diagnostics) {
    for node in &cfg.nodes {
        if let NodeKind::TestSrc(t) = &node.kind {
            for v in [&t.width, &t.height] {
                if *v.get_ref() == 0 || v.get_ref() % 2 == 1 || *v.get_ref() > 8192 {
                    diags.push(cfg.diag(v.span(), format!("testsrc `{}`: sizes must be even and 2–8192, got {}", node.name, v.get_ref())));
                }
            }
            if !(t.rate > 0.0 && t.rate <= 1000.0) {
                diags.push(cfg.diag(node.kind_span.clone(), format!("testsrc `{}`: rate must be in (0, 1000], got {}", node.name, t.rate)));
            }
        }
    }
}

/// Tracker parameters and detection files: values that make sense.
pub(super) fn check_tracking(cfg: &PipelineConfig, diags: &mut Diagnostics) {
    for node in &cfg.nodes {
        let mut bad = |span: std::ops::Range<usize>, what: &str| {
            diags.push(cfg.diag(span, format!("{} `{}`: {what}", node.kind.name(), node.name)));
        };
        match &node.kind {
            NodeKind::Track(t) => {
                let a = *t.track_activation_threshold.get_ref();
                if !(a > 0.0 && a < 1.0) {
                    bad(t.track_activation_threshold.span(), &format!("track_activation_threshold must be in (0, 1), got {a}"));
                }
                let m = *t.minimum_matching_threshold.get_ref();
                if !(m > 0.0 && m <= 1.0) {
                    bad(t.minimum_matching_threshold.span(), &format!("minimum_matching_threshold must be in (0, 1], got {m}"));
                }
                let r = *t.frame_rate.get_ref();
                if !(r > 0.0 && r <= 1000.0) {
                    bad(t.frame_rate.span(), &format!("frame_rate must be in (0, 1000], got {r}"));
                }
                if *t.minimum_consecutive_frames.get_ref() == 0 {
                    bad(t.minimum_consecutive_frames.span(), "minimum_consecutive_frames must be at least 1");
                }
            }
            NodeKind::Analytics(a) => {
                for (span, what) in crate::analytics::check(cfg, a) {
                    bad(if span.is_empty() { node.kind_span.clone() } else { span }, &what);
                }
            }
            NodeKind::Detections(d) => {
                let r = *d.rate.get_ref();
                if !(r > 0.0 && r <= 1000.0) {
                    bad(d.rate.span(), &format!("rate must be in (0, 1000], got {r}"));
                }
            }
            _ => {}
        }
    }
}

/// `restart` is for sources: a stage or sink has nothing to start again.
pub(super) fn check_restart(cfg: &PipelineConfig, diags: &mut Diagnostics) {
    for node in &cfg.nodes {
        if let Some(r) = &node.restart
            && node.role != crate::config::Role::Source
        {
            diags.push(
                cfg.diag(r.span(), format!("{} `{}`: `restart` applies to sources only", node.role.noun(), node.name))
                    .with_help("stages and sinks follow `on_error` (\"skip\" or \"stop\")"),
            );
        }
    }
}

/// `max_streams` belongs to templates of added streams (`dynamic = true`), and is 1 or more.
pub(super) fn check_max_streams(cfg: &PipelineConfig, diags: &mut Diagnostics) {
    for node in &cfg.nodes {
        let (dynamic, max) = match &node.kind {
            NodeKind::Rtsp(c) => (c.dynamic, &c.max_streams),
            NodeKind::File(c) => (c.dynamic, &c.max_streams),
            _ => continue,
        };
        match max {
            Some(m) if !dynamic => diags.push(
                cfg.diag(m.span(), format!("source `{}`: `max_streams` is for templates of added streams", node.name))
                    .with_help("set `dynamic = true` as well, or leave `max_streams` out"),
            ),
            Some(m) if *m.get_ref() == 0 => diags.push(
                cfg.diag(m.span(), format!("source `{}`: `max_streams` must be at least 1", node.name))
                    .with_help("leave it out for no limit but the pipeline's (`[pipeline] api.max_streams`)"),
            ),
            _ => {}
        }
    }
}

/// RTSP cameras: an rtsp:// URL and workable timings.
pub(super) fn check_rtsp_sources(cfg: &PipelineConfig, diags: &mut Diagnostics) {
    for node in &cfg.nodes {
        if let NodeKind::Rtsp(r) = &node.kind {
            check_rtsp(cfg, &node.name, r, diags);
        }
    }
}

/// Input formats: a demuxer FFmpeg has; raw video and raw audio say what the bytes are.
pub(super) fn check_input_formats(cfg: &PipelineConfig, diags: &mut Diagnostics) {
    for node in &cfg.nodes {
        let (format, what) = match &node.kind {
            NodeKind::File(c) => (&c.format, "video"),
            NodeKind::Audio(c) => (&c.format, "audio"),
            _ => continue,
        };
        let expanded = |v: &toml::Spanned<String>, diags: &mut Diagnostics| match cfg.expand(v) {
            Ok(s) => Some(s),
            Err(d) => {
                diags.push(d);
                None
            }
        };
        let format_name = format.as_ref().and_then(|f| expanded(f, diags));
        if let (Some(f), Some(name)) = (format, &format_name)
            && !crate::backend::ffmpeg::input_format_exists(name)
        {
            diags.push(cfg.diag(f.span(), format!("source `{}`: FFmpeg has no input format `{name}`", node.name)).with_help(
                if what == "video" {
                    "e.g. rawvideo, mpegts, matroska, nut (ffmpeg -demuxers)"
                } else {
                    "e.g. s16le, f32le, wav (ffmpeg -demuxers)"
                },
            ));
            continue;
        }
        let raw = format_name.as_deref() == Some("rawvideo");
        if let NodeKind::File(c) = &node.kind {
            if raw {
                let missing: Vec<&str> = [("width", c.width.is_none()), ("height", c.height.is_none())]
                    .into_iter()
                    .filter_map(|(k, m)| m.then_some(k))
                    .collect();
                if !missing.is_empty() {
                    diags.push(
                        cfg.diag(
                            format.as_ref().expect("raw").span(),
                            format!("source `{}`: rawvideo needs {}", node.name, missing.join(" and ")),
                        )
                        .with_help("raw frames carry no header: set width, height (and pixel_format, rate) as the sender wrote them"),
                    );
                }
                for v in [&c.width, &c.height].into_iter().flatten() {
                    if *v.get_ref() == 0 || *v.get_ref() > 16384 {
                        diags.push(cfg.diag(v.span(), format!("source `{}`: sizes must be 1–16384, got {}", node.name, v.get_ref())));
                    }
                }
                if let Some(p) = &c.pixel_format
                    && let Some(pf) = expanded(p, diags)
                    && !crate::backend::ffmpeg::pixel_format_exists(&pf)
                {
                    diags.push(
                        cfg.diag(p.span(), format!("source `{}`: unknown pixel format `{pf}`", node.name))
                            .with_help("e.g. yuv420p, nv12, rgb24, bgr24, gray (ffmpeg -pix_fmts)"),
                    );
                }
                if let Some(r) = &c.rate
                    && !(*r.get_ref() > 0.0 && *r.get_ref() <= 1000.0)
                {
                    diags.push(cfg.diag(r.span(), format!("source `{}`: rate must be in (0, 1000], got {}", node.name, r.get_ref())));
                }
            } else if let Some(span) = [
                c.pixel_format.as_ref().map(|v| v.span()),
                c.width.as_ref().map(|v| v.span()),
                c.height.as_ref().map(|v| v.span()),
                c.rate.as_ref().map(|v| v.span()),
            ]
            .into_iter()
            .flatten()
            .next()
            {
                diags.push(
                    cfg.diag(span, format!("source `{}`: pixel_format, width, height and rate describe raw video", node.name))
                        .with_help("add format = \"rawvideo\", or remove them (other formats say what they hold)"),
                );
            }
        }
        if let NodeKind::Audio(c) = &node.kind {
            let pcm = format_name.as_deref().is_some_and(is_raw_pcm);
            if pcm && c.input_rate.is_none() {
                diags.push(
                    cfg.diag(format.as_ref().expect("pcm").span(), format!("source `{}`: raw audio needs input_rate", node.name))
                        .with_help("set input_rate (and channels) as the sender wrote them, e.g. input_rate = 44100, channels = 2"),
                );
            }
            if !pcm && let Some(span) = c.input_rate.as_ref().map(|v| v.span()).or(c.channels.as_ref().map(|v| v.span())) {
                diags.push(
                    cfg.diag(span, format!("source `{}`: input_rate and channels describe raw audio", node.name))
                        .with_help("add format = \"s16le\" (or f32le, ...), or remove them"),
                );
            }
            for v in [&c.input_rate, &c.channels].into_iter().flatten() {
                if *v.get_ref() == 0 {
                    diags.push(cfg.diag(v.span(), format!("source `{}`: must be positive", node.name)));
                }
            }
        }
    }
}

/// Sizes that would exhaust memory or overflow at run time are refused here,
/// where they can be located, rather than found as an allocation failure later.
pub(super) fn check_limits(cfg: &PipelineConfig, diags: &mut Diagnostics) {
    for node in &cfg.nodes {
        if let Some(q) = node.queue
            && q.capacity.get() > MAX_QUEUE
        {
            diags.push(
                cfg.diag(
                    node.queue_span.clone(),
                    format!("{} `{}`: queue capacity {} is over {MAX_QUEUE}", node.role.noun(), node.name, q.capacity),
                )
                .with_help("a queue holds whole frames; a few (the default is 8) absorb jitter, more only add latency and memory"),
            );
        }
        match &node.kind {
            NodeKind::Preprocess(c) => {
                for v in [&c.width, &c.height] {
                    if *v.get_ref() == 0 || *v.get_ref() > MAX_TENSOR_SIDE {
                        diags.push(cfg.diag(
                            v.span(),
                            format!("preprocess `{}`: tensor sizes must be 1–{MAX_TENSOR_SIDE}, got {}", node.name, v.get_ref()),
                        ));
                    }
                }
            }
            NodeKind::Crop(c) => {
                let h = *c.height.get_ref();
                if h == 0 || h > MAX_TENSOR_SIDE || c.max_width == 0 || c.max_width > MAX_TENSOR_SIDE || c.min_width > c.max_width {
                    diags.push(cfg.diag(
                        c.height.span(),
                        format!(
                            "crop `{}`: height {h}, min_width {} and max_width {} must be 1–{MAX_TENSOR_SIDE}, with min_width ≤ max_width",
                            node.name, c.min_width, c.max_width
                        ),
                    ));
                }
            }
            NodeKind::Infer(c) => {
                if let Some(spanned) = &c.batch
                    && let b = spanned.get_ref()
                    && (b.max.get() > MAX_BATCH || b.timeout_ms > MAX_BATCH_WAIT_MS)
                {
                    diags.push(
                        cfg.diag(
                            spanned.span(),
                            format!(
                                "infer `{}`: batch max {} / timeout_ms {} out of range (max 1–{MAX_BATCH}, timeout_ms 0–{MAX_BATCH_WAIT_MS})",
                                node.name, b.max, b.timeout_ms
                            ),
                        )
                        .with_help("batches of a few frames, formed within milliseconds, e.g. batch = { max = 4, timeout_ms = 10 }"),
                    );
                }
            }
            _ => {}
        }
    }
}

/// A crop's `orientation` must name a classification stage.
pub(super) fn check_crop_orientation(cfg: &PipelineConfig, diags: &mut Diagnostics) {
    for node in &cfg.nodes {
        if let NodeKind::Crop(c) = &node.kind
            && let Some(o) = &c.orientation
            && !cfg.nodes.iter().any(|n| &n.name == o.get_ref() && matches!(n.kind, NodeKind::Classification(_)))
        {
            diags.push(
                cfg.diag(
                    o.span(),
                    format!("crop `{}`: `orientation` names `{}`, which is not a classification stage", node.name, o.get_ref()),
                )
                .with_help("name the `classification` stage that runs the orientation model on this crop's regions"),
            );
        }
    }
}

/// Nodes reached from `i` following `next` (producers: upstream; consumers: downstream), `i` excluded.
fn reached(next: &dyn Fn(usize) -> Vec<usize>, n: usize, i: usize) -> Vec<bool> {
    let mut seen = vec![false; n];
    let mut todo = next(i);
    while let Some(j) = todo.pop() {
        if j < n && !seen[j] {
            seen[j] = true;
            todo.extend(next(j));
        }
    }
    seen
}

/// `interval` needs a `track` stage downstream (it predicts the skipped
/// frames); `once_per_track` a `track` stage upstream (it gives the ids);
/// `motion` settings in range.
pub(super) fn check_gating(cfg: &PipelineConfig, producers: &[Vec<usize>], diags: &mut Diagnostics) {
    let n = cfg.nodes.len();
    let up = |i: usize| producers.get(i).cloned().unwrap_or_default();
    let down = |i: usize| (0..n).filter(|&j| producers[j].contains(&i)).collect::<Vec<_>>();
    let is_track = |j: usize| matches!(cfg.nodes[j].kind, NodeKind::Track(_));
    for (i, node) in cfg.nodes.iter().enumerate() {
        match &node.kind {
            NodeKind::Infer(c) => {
                if *c.interval.get_ref() > 0 && !reached(&down, n, i).iter().enumerate().any(|(j, r)| *r && is_track(j)) {
                    diags.push(
                        cfg.diag(
                            c.interval.span(),
                            format!(
                                "infer `{}`: interval = {} skips frames, but no `track` stage downstream predicts their boxes",
                                node.name,
                                c.interval.get_ref()
                            ),
                        )
                        .with_help("add a `track` stage after the detection stage that reads this one, or remove `interval`"),
                    );
                }
                if let Some(m) = &c.motion {
                    let v = m.get_ref();
                    let in_range = (0.0..=1.0).contains(&v.min_area)
                        && v.alpha > 0.0
                        && v.alpha <= 1.0
                        && (8..=4096).contains(&v.width)
                        && (2..=64).contains(&v.cell)
                        && (0.0..=1.0).contains(&v.cell_area);
                    if !in_range {
                        diags.push(
                            cfg.diag(
                                m.span(),
                                format!(
                                    "infer `{}`: motion min_area {}, alpha {}, width {}, cell {} and cell_area {} out of range \
                                     (min_area 0–1, alpha over 0 up to 1, width 8–4096, cell 2–64, cell_area 0–1)",
                                    node.name, v.min_area, v.alpha, v.width, v.cell, v.cell_area
                                ),
                            )
                            .with_help("e.g. motion = { threshold = 25, min_area = 0.002 }"),
                        );
                    }
                }
            }
            NodeKind::Crop(c) if *c.once_per_track.get_ref() && !reached(&up, n, i).iter().enumerate().any(|(j, r)| *r && is_track(j)) => {
                diags.push(
                    cfg.diag(
                        c.once_per_track.span(),
                        format!("crop `{}`: once_per_track needs a `track` stage upstream (it gives each region its track id)", node.name),
                    )
                    .with_help("put a `track` stage between the detection stage and this crop, or remove `once_per_track`"),
                );
            }
            _ => {}
        }
    }
}

/// A `video` sink writes one stream per file: several streams need `{stream}`
/// in the path or one chosen `stream`; the container and encoder must exist.
pub(super) fn check_video_sinks(cfg: &PipelineConfig, producers: &[Vec<usize>], diags: &mut Diagnostics) {
    for (i, node) in cfg.nodes.iter().enumerate() {
        let NodeKind::Video(v) = &node.kind else { continue };
        let sources = upstream_sources(cfg, producers, i);
        let names: Vec<&str> = sources.iter().map(|&j| cfg.nodes[j].name.as_str()).collect();
        // A `dir` source makes one stream per file.
        let batch = sources
            .iter()
            .find(|&&j| matches!(cfg.nodes[j].kind, NodeKind::Dir(_) | NodeKind::KafkaJobs(_)))
            .map(|&j| cfg.nodes[j].name.as_str());
        let listed = names.iter().map(|n| format!("`{n}`")).collect::<Vec<_>>().join(", ");
        let path = match cfg.expand(&v.path) {
            Ok(p) => p,
            Err(d) => {
                diags.push(d);
                continue;
            }
        };
        let path = path.as_str();
        let templated = path.contains("{stream}");
        let stdout = path == "-";
        if templated && stdout {
            diags.push(cfg.diag(v.path.span(), format!("video sink `{}`: `{{stream}}` cannot be used with stdout", node.name)));
        }
        match &v.stream {
            Some(s) if !names.contains(&s.get_ref().as_str()) && !names.is_empty() => diags.push(
                cfg.diag(
                    s.span(),
                    format!("video sink `{}`: stream `{}` does not feed this sink; its streams are {listed}", node.name, s.get_ref()),
                )
                .with_help("name one of the sources upstream of this sink"),
            ),
            None if !templated && let Some(dir) = batch => diags.push(
                cfg.diag(
                    v.path.span(),
                    format!("video sink `{}` is fed by the `dir` source `{dir}`, one stream per file; a video file holds one", node.name),
                )
                .with_help("put `{stream}` in `path` for one file per input, e.g. path = \"out/{stream}.mp4\""),
            ),
            None if names.len() > 1 && !templated => diags.push(
                cfg.diag(
                    v.path.span(),
                    format!("video sink `{}` is fed by {} streams ({listed}); a video file holds one", node.name, names.len()),
                )
                .with_help(format!("put `{{stream}}` in `path` for one file per stream, or set `stream = \"{}\"`", names[0])),
            ),
            _ => {}
        }
        match (&v.format, stdout) {
            (None, true) => diags.push(
                cfg.diag(v.path.span(), format!("video sink `{}`: writing to stdout needs a container", node.name))
                    .with_help("set `format = \"mpegts\"` (or `\"matroska\"`): mp4 cannot be streamed"),
            ),
            (Some(f), true) if *f.get_ref() == crate::config::VideoContainer::Mp4 && !v.fragmented => diags.push(
                cfg.diag(
                    f.span(),
                    format!("video sink `{}`: plain mp4 cannot be written to stdout (it seeks back to finish the file)", node.name),
                )
                .with_help("use `format = \"mpegts\"` or `\"matroska\"`, or `fragmented = true`"),
            ),
            (None, false) if crate::config::VideoContainer::from_path(path).is_none() => diags.push(
                cfg.diag(v.path.span(), format!("video sink `{}`: cannot tell the container from `{path}`", node.name))
                    .with_help("end the path with .mp4, .mkv or .ts, push to an rtmp://, rtsp://, srt:// or udp:// URL, or set `format = \"mp4\" | \"matroska\" | \"mpegts\"`"),
            ),
            _ => {}
        }
        if v.fragmented
            && v.format.as_ref().map_or(crate::config::VideoContainer::from_path(path), |f| Some(*f.get_ref()))
                != Some(crate::config::VideoContainer::Mp4)
        {
            diags.push(cfg.diag(v.path.span(), format!("video sink `{}`: `fragmented` applies to mp4 only", node.name)));
        }
        if let Some(k) = &v.keyframe_interval_s
            && !(k.get_ref().is_finite() && *k.get_ref() > 0.0)
        {
            diags.push(
                cfg.diag(
                    k.span(),
                    format!("video sink `{}`: keyframe_interval_s must be a positive number of seconds, got {}", node.name, k.get_ref()),
                )
                .with_help("e.g. keyframe_interval_s = 1 (a keyframe each second)"),
            );
        }
        if let Some(f) = &v.fragment_duration_ms {
            if !v.fragmented {
                diags.push(
                    cfg.diag(f.span(), format!("video sink `{}`: `fragment_duration_ms` applies to fragmented mp4 only", node.name))
                        .with_help("add `fragmented = true`, or remove `fragment_duration_ms`"),
                );
            } else if *f.get_ref() == 0 {
                diags.push(cfg.diag(f.span(), format!("video sink `{}`: fragment_duration_ms must be at least 1", node.name)));
            }
        }
        if let Err(e) = crate::backend::ffmpeg::check_video_encoder(v.codec.get_ref()) {
            diags.push(
                cfg.diag(v.codec.span(), format!("video sink `{}`: {e}", node.name))
                    .with_help("use `libx264` (CPU), `h264_nvenc` (NVIDIA GPU) or `auto`; `ffmpeg -encoders` lists what this FFmpeg has"),
            );
        }
        if let Some(c) = &v.crf
            && *c.get_ref() > 51
        {
            diags.push(cfg.diag(c.span(), format!("video sink `{}`: crf must be 0–51, got {}", node.name, c.get_ref())));
        }
    }
}

/// Raw PCM demuxers (`s16le`, `f32le`, `u8`, `alaw`, ...): their bytes carry no rate or channel count.
pub fn is_raw_pcm(format: &str) -> bool {
    let f = format.trim_end_matches("le").trim_end_matches("be");
    matches!(f, "s8" | "u8" | "s16" | "u16" | "s24" | "u24" | "s32" | "u32" | "f32" | "f64" | "alaw" | "mulaw")
}

/// An rtsp:// URL and workable timings.
fn check_rtsp(cfg: &PipelineConfig, name: &str, r: &crate::config::RtspSourceConfig, diags: &mut Diagnostics) {
    match cfg.expand(&r.uri) {
        Ok(url) => {
            let scheme = url.split_once("://").map(|(s, _)| s.to_ascii_lowercase());
            if !matches!(scheme.as_deref(), Some("rtsp" | "rtsps")) {
                diags.push(
                    cfg.diag(r.uri.span(), format!("rtsp `{name}`: expected an rtsp:// or rtsps:// URL, got `{}`", mask_credentials(&url)))
                        .with_help("files and other URLs are read by `kind = \"file\"`"),
                );
            }
        }
        Err(d) => diags.push(d),
    }
    for (key, v, min) in [
        ("connect_timeout_ms", &r.connect_timeout_ms, 100),
        ("watchdog_ms", &r.watchdog_ms, 100),
        ("backoff_initial_ms", &r.backoff_initial_ms, 1),
    ] {
        if *v.get_ref() < min {
            diags.push(cfg.diag(v.span(), format!("rtsp `{name}`: `{key}` must be at least {min}, got {}", v.get_ref())));
        }
    }
    // A day at most: longer waits are never meant, and deadlines past the clock's range would overflow.
    for (key, v) in [
        ("connect_timeout_ms", &r.connect_timeout_ms),
        ("watchdog_ms", &r.watchdog_ms),
        ("backoff_initial_ms", &r.backoff_initial_ms),
        ("backoff_max_ms", &r.backoff_max_ms),
        ("probe_interval_ms", &r.probe_interval_ms),
        ("probe_window_ms", &r.probe_window_ms),
    ] {
        if *v.get_ref() > MAX_WAIT_MS {
            diags.push(cfg.diag(v.span(), format!("rtsp `{name}`: `{key}` must be at most {MAX_WAIT_MS} (a day), got {}", v.get_ref())));
        }
    }
    if *r.max_auth_failures.get_ref() == 0 {
        diags.push(
            cfg.diag(r.max_auth_failures.span(), format!("rtsp `{name}`: `max_auth_failures` must be at least 1, got 0"))
                .with_help("the number of refused credentials (RTSP 401) in a row before the stream shows as failed"),
        );
    }
    let probe = *r.probe_interval_ms.get_ref();
    if probe != 0 && probe < 50 {
        diags.push(
            cfg.diag(
                r.probe_interval_ms.span(),
                format!("rtsp `{name}`: `probe_interval_ms` must be 0 (no probing) or at least 50, got {probe}"),
            )
            .with_help("a probe is a TCP connect to the camera; more often than 20 times a second only hammers it"),
        );
    }
    if r.backoff_max_ms.get_ref() < r.backoff_initial_ms.get_ref() {
        let v = if r.backoff_max_ms.span().is_empty() { &r.backoff_initial_ms } else { &r.backoff_max_ms };
        diags.push(
            cfg.diag(
                v.span(),
                format!(
                    "rtsp `{name}`: `backoff_max_ms` ({}) is below `backoff_initial_ms` ({})",
                    r.backoff_max_ms.get_ref(),
                    r.backoff_initial_ms.get_ref()
                ),
            )
            .with_help("the wait doubles from backoff_initial_ms up to backoff_max_ms"),
        );
    }
}

/// A `clips` sink: times in range, a path template it can fill, retention it
/// can read, and only sources whose packets it can copy (`file`: files,
/// URLs, RTSP cameras). (With a `redact` stage upstream its clips are
/// re-encoded from the redacted frames: a warning, `graph::warnings`.)
pub(super) fn check_clips(cfg: &PipelineConfig, producers: &[Vec<usize>], diags: &mut Diagnostics) {
    for (i, node) in cfg.nodes.iter().enumerate() {
        let NodeKind::Clips(c) = &node.kind else { continue };
        let name = &node.name;
        for (v, key, min) in [(&c.pre_s, "pre_s", 0.0), (&c.post_s, "post_s", 0.0), (&c.max_s, "max_s", 0.001)] {
            let x = *v.get_ref();
            if !(x.is_finite() && x >= min && x <= 3600.0) {
                diags.push(cfg.diag(v.span(), format!("clips sink `{name}`: {key} = {x} is out of range (0 to 3600 seconds)")));
            }
        }
        if *c.max_s.get_ref() <= *c.pre_s.get_ref() {
            diags.push(
                cfg.diag(c.max_s.span(), format!("clips sink `{name}`: max_s must be more than pre_s"))
                    .with_help("max_s is the longest clip, pre-roll included"),
            );
        }
        match c.on.get_ref() {
            crate::config::ClipTrigger::Events(k) if k.is_empty() => {
                diags.push(cfg.diag(c.on.span(), format!("clips sink `{name}`: `on` lists no event")).with_help(
                    "name event kinds (`[\"crossed\", \"entered\"]`) or a detection filter (`{ classes = [\"person\"], min_score = 0.5 }`)",
                ))
            }
            crate::config::ClipTrigger::Detections(f) if !(0.0..=1.0).contains(&f.min_score) => {
                diags.push(cfg.diag(c.on.span(), format!("clips sink `{name}`: min_score must be within 0 to 1")))
            }
            _ => {}
        }
        if let Ok(t) = cfg.expand(&c.path) {
            let f = crate::config::clip_path::Fill { stream: "s", start: 0, event: "e", seq: 0 };
            if let Err(e) = crate::config::clip_path::fill(&t, &f) {
                diags.push(cfg.diag(c.path.span(), format!("clips sink `{name}`: {e}")));
            }
        }
        if let Some(r) = &c.retain {
            if let Some(Err(e)) = r.max_age.as_ref().map(|a| crate::config::parse_age(a.get_ref())) {
                diags.push(cfg.diag(r.max_age.as_ref().expect("set").span(), format!("clips sink `{name}`: max_age: {e}")));
            }
            if let Some(Err(e)) = r.max_bytes.as_ref().map(|b| crate::config::parse_bytes(b.get_ref())) {
                diags.push(cfg.diag(r.max_bytes.as_ref().expect("set").span(), format!("clips sink `{name}`: max_bytes: {e}")));
            }
        }
        let up = upstream_nodes(producers, i);
        for &j in &up {
            let src = &cfg.nodes[j];
            let ok = match &src.kind {
                NodeKind::File(f) => *f.backend.get_ref() != crate::config::DecodeBackend::Gstreamer,
                NodeKind::Rtsp(r) => r.media == crate::config::MediaKind::Video,
                _ => false,
            };
            if src.role == crate::config::Role::Source && !ok {
                diags.push(
                    cfg.diag(
                        node.kind_span.clone(),
                        format!(
                            "clips sink `{name}`: source `{}` (kind `{}`) has no compressed packets to copy",
                            src.name,
                            src.kind.name()
                        ),
                    )
                    .with_help("clips are made from `file` sources (files, URLs) decoded by FFmpeg and `rtsp` cameras' video"),
                );
            }
        }
    }
}

/// Every node upstream of `i`.
pub fn upstream_nodes(producers: &[Vec<usize>], i: usize) -> Vec<usize> {
    let mut seen = vec![false; producers.len()];
    let mut todo = producers[i].clone();
    while let Some(j) = todo.pop() {
        if !std::mem::replace(&mut seen[j], true) {
            todo.extend(producers[j].iter().copied());
        }
    }
    (0..producers.len()).filter(|&j| seen[j]).collect()
}

#[cfg(test)]
mod url_tests {
    use crate::graph::check;

    fn errors(src: String) -> Vec<String> {
        let cfg = crate::config::parse(std::path::Path::new("/p/p.toml"), src).unwrap();
        match check(&cfg) {
            Ok(_) => Vec::new(),
            Err(d) => d.0.iter().map(|d| d.headline()).collect(),
        }
    }

    fn video(path: &str, extra: &str) -> String {
        format!(
            "[sources.a]\nkind = \"testsrc\"\n[sources.b]\nkind = \"testsrc\"\n[sinks.out]\nkind = \"video\"\ninputs = [\"a\", \"b\"]\npath = \"{path}\"\n{extra}"
        )
    }

    /// A server URL is no file: its scheme tells the container, `{stream}`
    /// may stand anywhere in it, and no folder or collision rule applies.
    #[test]
    fn server_urls_are_checked_as_urls_not_paths() {
        for url in ["rtmp://127.0.0.1:1935/{stream}/live", "rtsp://127.0.0.1:8554/cams/{stream}", "srt://127.0.0.1:9000?streamid={stream}"]
        {
            assert_eq!(errors(video(url, "")), Vec::<String>::new(), "{url}");
        }
        assert_eq!(errors(video("udp://127.0.0.1:1234", "stream = \"a\"\n")), Vec::<String>::new());
        // Still one stream per server URL.
        let e = errors(video("udp://127.0.0.1:1234", ""));
        assert!(e.len() == 1 && e[0].contains("fed by 2 streams"), "{e:?}");
    }

    #[test]
    fn keyframe_and_fragment_settings_are_checked() {
        let e = errors(video("out/{stream}.mp4", "keyframe_interval_s = 0\n"));
        assert!(e.len() == 1 && e[0].contains("/p/p.toml:9:23: video sink `out`: keyframe_interval_s must be a positive number"), "{e:?}");
        let e = errors(video("out/{stream}.mp4", "fragment_duration_ms = 500\n"));
        assert!(e.len() == 1 && e[0].contains("`fragment_duration_ms` applies to fragmented mp4 only"), "{e:?}");
        let ok = video("out/{stream}.mp4", "fragmented = true\nfragment_duration_ms = 500\nkeyframe_interval_s = 0.5\n");
        assert_eq!(errors(ok), Vec::<String>::new());
    }
}
