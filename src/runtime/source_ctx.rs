//! What a source sees of the runtime ([`SourceCtx`]): the stop flag, a way
//! to emit frames (waiting for room downstream is not busy time), stream
//! events, tracing, and the opening of inputs whose ends the sinks close
//! ([`InputOpener`] for other threads).

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Instant;

use super::ends::StreamEnds;
use super::report::InputLog;
use super::stats::{NodeStats, StreamEvent};
use super::{Shutdown, trace};
use crate::frame::{Accounting, Event, EventKind, Frame, Image, InputEnd, InputToken, Ticket};

/// Opens inputs of a source (see [`SourceCtx::open_input`]) from any thread.
pub(crate) struct InputOpener(Option<Arc<StreamEnds>>);

impl InputOpener {
    pub(crate) fn open(self, stream: Arc<str>, on_flushed: impl FnOnce(InputEnd, bool) + Send + 'static) -> Arc<InputToken> {
        let ends = self.0;
        InputToken::new(
            stream,
            Box::new(move |end: InputEnd| match ends {
                Some(hub) => {
                    let s = end.stream.clone();
                    hub.ended(s, Box::new(move |ok| on_flushed(end, ok)));
                }
                None => on_flushed(end, true),
            }),
        )
    }
}

/// What a source sees: the stop flag and a way to emit frames.
pub struct SourceCtx<'a> {
    pub name: Arc<str>,
    pub index: u32,
    pub(super) shutdown: &'a Arc<Shutdown>,
    pub(super) acct: &'a Arc<Accounting>,
    pub(super) stats: &'a NodeStats,
    pub(super) emit: &'a mut dyn FnMut(Frame) -> bool,
    /// Where stream events go (none: counted only).
    pub(super) events: Option<&'a dyn Fn(Arc<Event>)>,
    /// Start of the current busy stretch: waiting for room downstream is not busy time.
    pub(super) busy_since: Instant,
    pub(super) trace: Option<trace::TraceBuf>,
    pub(super) last_emit: Instant,
    /// Where ended inputs go to be closed by the sinks (multi-input sources).
    pub(super) ends: Option<Arc<StreamEnds>>,
    pub(super) inputs: Arc<InputLog>,
    /// The input this context's frames belong to (a stream of a dynamic source).
    pub(super) input: Option<Arc<InputToken>>,
}

impl<'a> SourceCtx<'a> {
    /// A context that hands frames to `emit` (used by the runtime and by `bench --isolate`).
    pub fn new(
        name: Arc<str>,
        index: u32,
        shutdown: &'a Arc<Shutdown>,
        acct: &'a Arc<Accounting>,
        stats: &'a NodeStats,
        emit: &'a mut dyn FnMut(Frame) -> bool,
    ) -> Self {
        SourceCtx {
            name,
            index,
            shutdown,
            acct,
            stats,
            emit,
            events: None,
            busy_since: Instant::now(),
            trace: None,
            last_emit: Instant::now(),
            ends: None,
            inputs: Arc::new(InputLog::default()),
            input: None,
        }
    }

    /// Send this source's stream events to `events`.
    pub fn with_events(mut self, events: &'a dyn Fn(Arc<Event>)) -> Self {
        self.events = Some(events);
        self
    }

    /// Outcomes of this source's inputs (multi-input sources record into it).
    pub fn inputs(&self) -> &Arc<InputLog> {
        &self.inputs
    }

    /// Start one input of a multi-input source, its own stream named `stream`.
    /// `on_flushed` runs once the input has ended (the source dropped the token
    /// and every frame of it settled) and every sink closed the stream; its
    /// `bool` says whether all sinks did so without error.
    pub fn open_input(&self, stream: Arc<str>, on_flushed: impl FnOnce(InputEnd, bool) + Send + 'static) -> Arc<InputToken> {
        self.input_opener().open(stream, on_flushed)
    }

    /// What [`SourceCtx::open_input`] needs, to open an input later on another thread.
    pub(crate) fn input_opener(&self) -> InputOpener {
        InputOpener(self.ends.clone())
    }

    /// A new frame of one input (its own stream), with its accounting ticket.
    pub fn new_frame_of(
        &self,
        input: &Arc<InputToken>,
        seq: u64,
        pts: Option<i64>,
        time_base: (i32, i32),
        image: Option<Arc<Image>>,
    ) -> Frame {
        self.frame(input.stream.clone(), seq, pts, time_base, image, self.acct.issue_for(Some(input.clone())))
    }

    pub(super) fn frame(
        &self,
        stream: Arc<str>,
        seq: u64,
        pts: Option<i64>,
        time_base: (i32, i32),
        image: Option<Arc<Image>>,
        ticket: Arc<Ticket>,
    ) -> Frame {
        Frame {
            stream,
            stream_index: self.index,
            seq,
            pts,
            time_base,
            created: Instant::now(),
            image,
            audio: None,
            results: Vec::new(),
            ticket,
            queued_at: None,
            events: Vec::new(),
            filtered: false,
        }
    }

    pub fn stopping(&self) -> bool {
        self.shutdown.stopping()
    }

    /// The pipeline's stop flag, for code that cannot borrow the context (an FFmpeg interrupt callback).
    pub fn shutdown(&self) -> Arc<Shutdown> {
        self.shutdown.clone()
    }

    /// Something happened to this stream (lost, reconnected): counted, and sent
    /// downstream in order with the frames, to the sinks.
    pub fn event(&mut self, kind: EventKind) {
        self.stats.stream_event(&kind);
        let event = Arc::new(Event::new(self.name.clone(), kind));
        if let Some(send) = self.events {
            send(event);
        }
    }

    /// The input refuses this source for now (`Some`: why; the stream shows as
    /// `failed` while the source goes on trying), or no longer (`None`).
    pub fn refused(&self, reason: Option<String>) {
        *self.stats.refused.lock().unwrap_or_else(|e| e.into_inner()) = reason;
    }

    /// A new frame of this stream, with its accounting ticket.
    pub fn new_frame(&self, seq: u64, pts: Option<i64>, time_base: (i32, i32), image: Option<Arc<Image>>) -> Frame {
        match &self.input {
            Some(input) => self.frame(input.stream.clone(), seq, pts, time_base, image, self.acct.issue_for(Some(input.clone()))),
            None => self.frame(self.name.clone(), seq, pts, time_base, image, self.acct.issue()),
        }
    }

    /// Send a frame downstream; `false` when nobody is listening any more.
    pub fn emit(&mut self, frame: Frame) -> bool {
        self.stats.frames_out.fetch_add(1, Ordering::Relaxed);
        self.stats.stream(&frame.stream, StreamEvent::Out);
        let t0 = Instant::now();
        if let Some(t) = &mut self.trace {
            // Decoding this frame took from the previous hand-off until now.
            t.work(&frame, self.last_emit, t0);
        }
        // Busy time is counted frame by frame, so it is live while the source runs.
        self.stats.add_busy(self.busy_since.elapsed());
        let open = (self.emit)(frame);
        self.busy_since = Instant::now();
        self.last_emit = self.busy_since;
        open
    }

    /// The source is done: count its busy time since the last frame.
    pub(super) fn finish(&self) {
        self.stats.add_busy(self.busy_since.elapsed());
    }

    /// Corrupt packets or unusable frames the decoder skipped.
    pub fn note_decode_errors(&self, n: u64) {
        self.stats.decode_errors.fetch_add(n, Ordering::Relaxed);
    }

    /// Frames skipped for corrupt data so far, and the stretches they came in (totals, kept live).
    pub fn set_decode_errors(&self, frames: u64, bursts: u64) {
        self.stats.decode_errors.store(frames, Ordering::Relaxed);
        self.stats.corrupt_bursts.store(bursts, Ordering::Relaxed);
    }
}
