//! `kind = "clips"`: event clips. On an event (or a detection the filter
//! takes), the source's own compressed packets from the keyframe at or
//! before `event − pre_s` to `event + post_s` are written, unchanged, into a
//! fragmented mp4; events overlapping an open clip extend it (up to
//! `max_s`). The packets come from the stream's ring, which the runtime
//! keeps (`runtime::clips`); this sink owns the clips' files, their events
//! and retention. With `annotated` (forced when a `redact` stage is
//! upstream) the packets are the sink's own encode of the frames it gets,
//! results drawn (`clip_annotate`). A write error stops new clips (said,
//! counted), never the pipeline.

use std::collections::{HashMap, VecDeque};
use std::path::PathBuf;
use std::sync::Arc;

use super::clip_annotate::Annotator;
use super::clip_files;
use crate::backend::ffmpeg::ClipMuxer;
use crate::config::clip_path::{self, Fill};
use crate::config::{ClipTrigger, ClipsSinkConfig, Diagnostic, parse_age, parse_bytes};
use crate::frame::{ClipInfo, Event, EventKind, Frame, Payload};
use crate::runtime::clips::{ClipCounts, ClipHub, ClipRecord, PacketRing};
use crate::stages::build::{Build, BuildCtx};
use crate::stages::{Body, Sink, StageError};

/// Recent frames remembered per stream, to find an event's frame by `seq`.
const RECENT: usize = 512;

/// A clip being written.
struct OpenClip {
    muxer: ClipMuxer,
    path: PathBuf,
    shown: String,
    /// Timeline units: the first packet's pts and dts (subtracted from every packet's).
    start_pts: i64,
    t0: i64,
    /// The clip ends after the packets whose dts reach this; never past `cap`.
    end: i64,
    cap: i64,
    /// The next packet to take from the ring (absolute index).
    next: u64,
    frames: u64,
    last_pts: i64,
    epoch: Option<u64>,
    triggers: Vec<(String, u64)>,
    gaps: Vec<(f64, f64)>,
    /// Where the stream was lost (seconds), until it is back.
    lost_at: Option<f64>,
}

#[derive(Default)]
struct StreamState {
    ring: Option<Arc<PacketRing>>,
    recent: VecDeque<(u64, i64)>,
    time_base: (i32, i32),
    open: Option<OpenClip>,
    /// Annotated clips: this stream's encoder and ring.
    annotator: Option<Annotator>,
}

pub struct ClipsSink {
    name: Arc<str>,
    /// This sink's number with the rings (its node index).
    sink_no: usize,
    hub: Arc<ClipHub>,
    counts: Arc<ClipCounts>,
    on: ClipTrigger,
    pre_s: f64,
    post_s: f64,
    max_s: f64,
    /// The path template, resolved against the pipeline's folder.
    template: String,
    root: PathBuf,
    max_age: Option<f64>,
    max_bytes: Option<u64>,
    streams: HashMap<Arc<str>, StreamState>,
    /// Why new clips are no longer made (a write error).
    stopped: Option<String>,
    /// Annotated clips: the encoder they are made with (`None`: the source's packets, copied).
    annotated: Option<crate::backend::ffmpeg::ChosenEncoder>,
    /// Seconds the rings keep before an event.
    keep_s: f64,
}

impl ClipsSink {
    fn secs(tb: (i32, i32), t: i64) -> f64 {
        t as f64 * tb.0 as f64 / tb.1.max(1) as f64
    }

    fn units(tb: (i32, i32), s: f64) -> i64 {
        (s * tb.1 as f64 / tb.0.max(1) as f64).round() as i64
    }

    /// The event's name when it starts a clip (`on` lists event kinds).
    fn wanted(&self, e: &Event) -> Option<u64> {
        let ClipTrigger::Events(kinds) = &self.on else { return None };
        if !kinds.iter().any(|k| k == e.name()) {
            return None;
        }
        match &e.kind {
            EventKind::Crossed { seq, .. } | EventKind::Entered { seq, .. } | EventKind::Left { seq, .. } => Some(*seq),
            EventKind::TrackEnded { last_seq, .. } => Some(*last_seq),
            EventKind::Custom { fields, .. } => Some(fields.get("seq").and_then(|s| s.as_u64()).unwrap_or(u64::MAX)),
            _ => Some(u64::MAX),
        }
    }

    /// The class a detection filter takes on this frame, if any.
    fn detected(&self, frame: &Frame) -> Option<String> {
        let ClipTrigger::Detections(f) = &self.on else { return None };
        frame.results.iter().find_map(|a| match &*a.payload {
            Payload::Objects(objs) => objs.iter().find_map(|o| {
                let label = o.label.as_deref().map_or_else(|| o.class.to_string(), str::to_string);
                let class_ok = f.classes.is_empty() || f.classes.iter().any(|c| *c == label || *c == o.class.to_string());
                (class_ok && o.score >= f.min_score).then_some(label)
            }),
            _ => None,
        })
    }

    /// An event of `stream` at frame `seq` (time `t`, timeline units).
    fn trigger(&mut self, stream: &Arc<str>, event: &str, seq: u64, t: i64) {
        let (pre, post, max) = (self.pre_s, self.post_s, self.max_s);
        let Some(st) = self.streams.get_mut(stream) else { return };
        let tb = st.time_base;
        if let Some(c) = st.open.as_mut()
            && t - Self::units(tb, pre) <= c.end
        {
            c.end = (t + Self::units(tb, post)).max(c.end).min(c.cap);
            c.triggers.push((event.to_string(), seq));
            return;
        }
        // The open clip ends before this one: what it still has in the ring first.
        self.pump(stream);
        self.close(stream, false);
        if let Some(why) = &self.stopped {
            tracing::debug!("clips sink `{}`: no clip for `{event}` on `{stream}`: {why}", self.name);
            return;
        }
        let st = self.streams.get_mut(stream).expect("stream state");
        let Some(ring) = st.ring.clone() else { return };
        let Some((at, key_pts)) = ring.start_at(t - Self::units(tb, pre)) else {
            tracing::warn!("clips sink `{}`: stream `{stream}`: no keyframe held yet; no clip for `{event}` at frame {seq}", self.name);
            return;
        };
        let (params, ring_tb) = ring.params();
        let Some(params) = params else { return };
        // `{start}`: the wall clock at the clip's first frame.
        let now = crate::frame::event::wall_ms() as f64 / 1000.0;
        let start_wall = (now - Self::secs(tb, t - key_pts)).floor() as i64;
        let fill = Fill { stream, start: start_wall, event, seq };
        let result = clip_path::fill(&self.template, &fill).and_then(|p| {
            let path = clip_files::unused(PathBuf::from(p));
            if let Some(dir) = path.parent() {
                std::fs::create_dir_all(dir).map_err(|e| format!("cannot make {}: {e}", dir.display()))?;
            }
            let first = ring.take(at, Some(key_pts)).packets.first().map_or(key_pts, |p| p.dts.min(key_pts));
            ClipMuxer::create(&path, &params, ring_tb).map(|m| (m, path, first))
        });
        match result {
            Ok((muxer, path, t0)) => {
                ring.hold(self.sink_no, Some(at));
                let shown = crate::config::tidy_path(&path).to_string_lossy().into_owned();
                st.open = Some(OpenClip {
                    muxer,
                    shown,
                    path,
                    start_pts: key_pts,
                    t0,
                    end: (t + Self::units(tb, post)).min(key_pts + Self::units(tb, max)),
                    cap: key_pts + Self::units(tb, max),
                    next: at,
                    frames: 0,
                    last_pts: key_pts,
                    epoch: None,
                    triggers: vec![(event.to_string(), seq)],
                    gaps: Vec::new(),
                    lost_at: None,
                });
                self.pump(stream);
            }
            Err(e) => self.fail(stream, e),
        }
    }

    /// A write failed: no more clips this run (said once, counted).
    fn fail(&mut self, stream: &str, e: String) {
        self.counts.failed.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let why = format!("clip of stream `{stream}`: {e}");
        tracing::error!("clips sink `{}`: {why}; no more clips are made in this run (the pipeline goes on)", self.name);
        self.stopped.get_or_insert(why);
    }

    /// Write the packets the ring holds for the open clip of `stream`; close it once past its end.
    fn pump(&mut self, stream: &Arc<str>) {
        let Some(st) = self.streams.get_mut(stream) else { return };
        let (Some(c), Some(ring)) = (st.open.as_mut(), st.ring.as_ref()) else { return };
        let taken = ring.take(c.next, Some(c.end));
        if taken.missed > 0 {
            tracing::warn!(
                "clips sink `{}`: stream `{stream}`: {} packet(s) left the ring before they were written",
                self.name,
                taken.missed
            );
        }
        let tb = st.time_base;
        let mut err = None;
        for p in &taken.packets {
            if p.no_pts {
                err = Some(format!(
                    "{}: the source's packets carry no presentation timestamps (an AVI with B-frames): copied, its frames would play out of order; remux the source first (ffmpeg -fflags +genpts -i IN -c copy OUT.mp4)",
                    c.shown
                ));
                break;
            }
            // (A file that loops or restarts goes on where it was: no gap.)
            if c.epoch.is_some_and(|e| e != p.epoch) && p.pts - c.last_pts > 2 * p.duration.max(1) {
                // A new connection or input: the time it was away is a gap of the clip.
                c.gaps.push((Self::secs(tb, c.last_pts), Self::secs(tb, p.pts)));
            }
            c.epoch = Some(p.epoch);
            if let Err(e) = c.muxer.write(&p.packet, p.pts - c.t0, p.dts - c.t0, p.duration) {
                err = Some(e);
                break;
            }
            c.frames += 1;
            c.last_pts = c.last_pts.max(p.pts);
        }
        c.next = taken.next;
        ring.hold(self.sink_no, Some(c.next));
        // Closed once no event still to come can extend it (the frames here are
        // past its end by more than the pre-roll) and its packets are all written.
        let seen = st.recent.back().map(|r| r.1);
        let done = seen.is_some_and(|s| s - Self::units(tb, self.pre_s) > c.end) && ring.newest_dts().is_some_and(|d| d > c.end);
        if let Some(e) = err {
            let c = st.open.take().expect("open clip");
            ring.hold(self.sink_no, None);
            let _ = std::fs::remove_file(&c.path);
            self.fail(stream, e);
        } else if done {
            self.close(stream, false);
        }
    }

    /// Finish the open clip of `stream` (`cut`: the pipeline stops or the stream ended before its end).
    fn close(&mut self, stream: &Arc<str>, cut: bool) {
        let Some(st) = self.streams.get_mut(stream) else { return };
        let Some(c) = st.open.take() else { return };
        let tb = st.time_base;
        if let Some(r) = &st.ring {
            r.hold(self.sink_no, None);
        }
        let cut = cut && c.last_pts < c.end;
        let OpenClip { muxer, path, shown, start_pts, last_pts, frames, triggers, gaps, .. } = c;
        let bytes = match muxer.finish() {
            Ok(b) => b,
            Err(e) => {
                let _ = std::fs::remove_file(&path);
                return self.fail(stream, e);
            }
        };
        let info = ClipInfo {
            sink: self.name.clone(),
            path: shown.clone(),
            start_pts: Self::secs(tb, start_pts),
            end_pts: Self::secs(tb, last_pts),
            frames,
            triggers,
            gaps,
            cut,
        };
        tracing::info!(
            "clips sink `{}`: {shown}: {:.2} s to {:.2} s of `{stream}`, {frames} frames{}",
            self.name,
            info.start_pts,
            info.end_pts,
            if cut { " (cut short)" } else { "" }
        );
        let record = ClipRecord {
            id: self.hub.next_id(),
            sink: self.name.to_string(),
            stream: stream.to_string(),
            path: path.clone(),
            shown,
            start_pts: info.start_pts,
            end_pts: info.end_pts,
            frames,
            bytes,
            at_ms: crate::frame::event::wall_ms(),
        };
        self.counts.written.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.hub.announce(Event::new(stream.clone(), EventKind::Clip(Box::new(info))), record);
        self.retain();
    }

    /// The encoder's last pictures into the ring (the stream ended).
    fn flush_annotator(&mut self, stream: &Arc<str>) {
        let Some(a) = self.streams.get_mut(stream).and_then(|s| s.annotator.as_mut()) else { return };
        if let Err(e) = a.flush() {
            tracing::warn!("clips sink `{}`: stream `{stream}`: the encoder's last pictures: {e}", self.name);
        }
    }

    /// Delete the oldest clips past `max_age` / `max_bytes`.
    fn retain(&mut self) {
        if self.max_age.is_none() && self.max_bytes.is_none() {
            return;
        }
        let open: Vec<PathBuf> = self.streams.values().filter_map(|s| s.open.as_ref().map(|c| c.path.clone())).collect();
        let (deleted, left) = clip_files::retain(&self.root, self.max_age, self.max_bytes, &open);
        use std::sync::atomic::Ordering::Relaxed;
        for (path, bytes) in deleted {
            tracing::info!("clips sink `{}`: deleted {} (retention)", self.name, path.display());
            self.counts.deleted.fetch_add(1, Relaxed);
            self.counts.deleted_bytes.fetch_add(bytes, Relaxed);
            self.hub.forget(&path);
        }
        self.counts.bytes.store(left, Relaxed);
    }
}

impl Sink for ClipsSink {
    fn write(&mut self, frame: &Frame) -> Result<(), StageError> {
        let Some(pts) = frame.pts else { return Ok(()) };
        let hub = self.hub.clone();
        let st = self.streams.entry(frame.stream.clone()).or_default();
        st.time_base = frame.time_base;
        if let Some(encoder) = &self.annotated {
            let a = st.annotator.get_or_insert_with(|| Annotator::new(&frame.stream, self.keep_s, encoder.clone()));
            st.ring.get_or_insert_with(|| a.ring());
            if let Err(e) = a.push(frame) {
                // Clips stop (said, counted); the pipeline goes on.
                if self.stopped.is_none() {
                    self.fail(&frame.stream, format!("annotating frame {}: {e}", frame.seq));
                }
                return Ok(());
            }
        } else if st.ring.is_none() {
            st.ring = hub.find_ring(&frame.stream);
        }
        let st = self.streams.get_mut(&frame.stream).expect("made above");
        if let Some(r) = &st.ring {
            r.seen(self.sink_no, pts);
        }
        if st.recent.len() == RECENT {
            st.recent.pop_front();
        }
        st.recent.push_back((frame.seq, pts));
        if let Some(c) = st.open.as_mut().filter(|c| c.lost_at.is_some()) {
            c.lost_at = None;
        }
        if let Some(class) = self.detected(frame) {
            self.trigger(&frame.stream, &class, frame.seq, pts);
        }
        self.pump(&frame.stream);
        Ok(())
    }

    fn event(&mut self, e: &Event) -> Result<(), String> {
        if let EventKind::Lost { .. } = e.kind
            && let Some(c) = self.streams.get_mut(&e.stream).and_then(|s| s.open.as_mut())
        {
            c.lost_at = Some(c.last_pts as f64);
        }
        let Some(seq) = self.wanted(e) else { return Ok(()) };
        let Some(st) = self.streams.get(&e.stream) else { return Ok(()) };
        // The event's frame (else the newest frame seen: events follow their frame).
        let t = st.recent.iter().rev().find(|(s, _)| *s == seq).or(st.recent.back()).map(|&(_, t)| t);
        let seq = if seq == u64::MAX { st.recent.back().map_or(0, |r| r.0) } else { seq };
        if let Some(t) = t {
            self.trigger(&e.stream, e.name(), seq, t);
        }
        Ok(())
    }

    fn end_stream(&mut self, stream: &str) -> Result<(), String> {
        if let Some(s) = self.streams.keys().find(|k| &***k == stream).cloned() {
            self.flush_annotator(&s);
            self.pump(&s);
            self.close(&s, true);
            // Its ring goes with its source (a stream removed at run time); one that goes on is found again.
            self.streams.remove(&s);
        }
        Ok(())
    }

    fn finish(&mut self) -> Result<(), String> {
        let streams: Vec<Arc<str>> = self.streams.keys().cloned().collect();
        for s in streams {
            self.flush_annotator(&s);
            self.pump(&s);
            self.close(&s, true);
        }
        Ok(())
    }

    fn describe(&self) -> String {
        format!(
            "clips {} ({} s before, {} s after, at most {} s; {})",
            self.template,
            self.pre_s,
            self.post_s,
            self.max_s,
            match &self.annotated {
                Some(e) => format!("annotated: every frame drawn and encoded with {}", e.name),
                None => "packets copied, not re-encoded".into(),
            }
        )
    }

    fn clip_hub(&self) -> Option<Arc<ClipHub>> {
        Some(self.hub.clone())
    }
}

impl Build for ClipsSinkConfig {
    fn build(&self, cx: &BuildCtx<'_>) -> Result<Body, Diagnostic> {
        let Some(hub) = cx.clips.clone() else {
            return Ok(Body::Sink(Box::new(super::NullSink)));
        };
        let template = cx.cfg.resolve_path(&self.path)?.to_string_lossy().into_owned();
        let (max_age, max_bytes) = match &self.retain {
            Some(r) => (
                r.max_age.as_ref().map(|a| parse_age(a.get_ref()).map_err(|e| cx.cfg.diag(a.span(), e))).transpose()?,
                r.max_bytes.as_ref().map(|b| parse_bytes(b.get_ref()).map_err(|e| cx.cfg.diag(b.span(), e))).transpose()?,
            ),
            None => (None, None),
        };
        let counts = hub.counts(&cx.name);
        // A clip must never show what a `redact` stage upstream hides: then it is re-encoded from the redacted frames.
        let redacted = crate::graph::upstream(&cx.graph.producers, cx.index)
            .into_iter()
            .any(|j| matches!(cx.cfg.nodes[j].kind, crate::config::NodeKind::Redact(_)));
        let annotated = if *self.annotated.get_ref() || redacted {
            let settings = crate::backend::ffmpeg::EncoderSettings { codec: "libx264".into(), preset: Some("veryfast".into()), crf: None };
            Some(
                crate::backend::ffmpeg::choose_encoder(&settings)
                    .map_err(|e| cx.cfg.diag(self.annotated.span(), format!("clips sink `{}`: {e}", cx.name)))?,
            )
        } else {
            None
        };
        let mut sink = ClipsSink {
            name: cx.name.clone(),
            sink_no: cx.index,
            counts,
            hub,
            on: self.on.get_ref().clone(),
            pre_s: *self.pre_s.get_ref(),
            post_s: *self.post_s.get_ref(),
            max_s: *self.max_s.get_ref(),
            root: clip_files::root(std::path::Path::new(&template)),
            template,
            max_age,
            max_bytes,
            streams: HashMap::new(),
            stopped: None,
            annotated,
            keep_s: *self.pre_s.get_ref(),
        };
        // Clips of earlier runs count towards retention from the start.
        sink.retain();
        Ok(Body::Sink(Box::new(sink)))
    }
}
