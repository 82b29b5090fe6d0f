//! The thread body of each node: a source driven until it is done and
//! started again as its `restart` policy says ([`drive_source`]), and a
//! stage or sink taking frames from its queue, batching, handling errors as
//! `on_error` says, and passing frames and stream ends on ([`run_node`]).

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crossbeam_channel::Receiver;

use super::ends::StreamEnds;
use super::node::{Body, StageError};
use super::report::InputLog;
use super::results::ResultsHub;
use super::source_ctx::SourceCtx;
use super::stats::NodeStats;
use super::{Again, Msg, Node, Outputs, Shutdown, node, request, restart_decision, results, stats, trace};
use crate::config::OnError;
use crate::frame::{Accounting, Event, EventKind, Frame};

/// What became of one frame in a stage.
enum Outcome {
    Done,
    /// Failed; counted and skipped (`on_error = "skip"`).
    Skip(String),
    /// Failed in a way that stops the pipeline.
    Stop(String),
    /// Failed, and passed on marked for the `redact` stage after this one.
    PassFailed(String),
    /// Failed upstream: passed on untouched to the `redact` stage after this one.
    Pass,
    /// Kept from the nodes after this one on purpose (`redact`'s `on_miss = "drop"`).
    Withhold(String),
}

pub(super) fn panic_message(p: Box<dyn std::any::Any + Send>) -> String {
    p.downcast_ref::<&str>().map(|s| s.to_string()).or_else(|| p.downcast_ref::<String>().cloned()).unwrap_or_else(|| "panic".into())
}

/// Run a source until it is done, starting it again as its `restart` policy
/// says (with backoff); the error it ended with, if any.
pub(super) fn drive_source(
    src: &mut Box<dyn node::Source>,
    ctx: &mut SourceCtx<'_>,
    st: &NodeStats,
    restart: (crate::config::Restart, Option<u32>, Duration),
) -> Option<String> {
    let name = ctx.name.clone();
    let (policy, max_restarts, first_wait) = restart;
    let mut restarts = 0u32;
    let mut wait = first_wait;
    loop {
        let r = catch_unwind(AssertUnwindSafe(|| src.run(ctx)));
        let err = match r {
            Ok(Ok(())) => None,
            Ok(Err(e)) => Some(e),
            Err(p) => Some(format!("panic: {}", panic_message(p))),
        };
        match restart_decision(policy, err.as_deref(), restarts, max_restarts, ctx.stopping() || src.exhausted()) {
            None => break err,
            Some(again) => {
                // A failure loses the stream; it comes back (a `reconnected` event) once the source
                // runs again. A deliberate loop is neither: it is counted as a loop.
                let lost_at = Instant::now();
                match &again {
                    Again::Lost(reason) => {
                        tracing::warn!("source `{name}`: {reason}; starting it again in {} ms", wait.as_millis());
                        ctx.event(EventKind::Lost { reason: reason.clone() });
                    }
                    Again::Loop => tracing::debug!("source `{name}`: input ended; playing it again in {} ms", wait.as_millis()),
                }
                let mut attempts = 0u32;
                let reopened = loop {
                    let until = Instant::now() + wait;
                    while !ctx.stopping() && Instant::now() < until {
                        std::thread::sleep((until - Instant::now()).min(Duration::from_millis(50)));
                    }
                    wait = (wait * 2).min(Duration::from_secs(30));
                    if ctx.stopping() {
                        break false;
                    }
                    attempts += 1;
                    restarts += 1;
                    match catch_unwind(AssertUnwindSafe(|| src.reopen())).unwrap_or_else(|p| Err(panic_message(p))) {
                        Ok(()) => break true,
                        Err(e) if max_restarts.is_some_and(|m| restarts >= m) => {
                            tracing::warn!("source `{name}`: cannot start again: {e}");
                            break false;
                        }
                        Err(e) => tracing::warn!("source `{name}`: cannot start again: {e}; next try in {} ms", wait.as_millis()),
                    }
                };
                if !reopened {
                    break err;
                }
                if again == Again::Loop {
                    let n = st.loops.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
                    tracing::info!("source `{name}`: looped (input ended, playing it again from the start: loop {n})");
                } else {
                    ctx.event(EventKind::Reconnected { gap_ms: lost_at.elapsed().as_millis() as u64, attempts });
                }
            }
        }
    }
}

/// What connects a node to the ends of streams.
pub(super) struct Links {
    /// Every node's counts (a detection postprocess counts carried frames
    /// whose boxes had moved for the infer stage before it).
    pub(super) stats: Vec<Arc<NodeStats>>,
    pub(super) ends: Arc<StreamEnds>,
    /// For a sink: its index among the sinks and where ended streams arrive.
    pub(super) sink: Option<(usize, Receiver<Arc<str>>)>,
    pub(super) inputs: Arc<InputLog>,
    /// Request sources' hubs by node index: a sink's written frame answers its request.
    pub(super) replies: Arc<[Option<request::RequestHub>]>,
    /// The first sink publishes what it writes here.
    pub(super) results: Option<Arc<ResultsHub>>,
    /// The sink whose frames live viewers see offers them here.
    pub(super) live: Option<super::live::LiveHub>,
}

#[allow(clippy::too_many_arguments)]
pub(super) fn run_node(
    index: u32,
    node: Node,
    rx: Option<Receiver<Msg>>,
    out: Outputs,
    st: Arc<NodeStats>,
    sd: Arc<Shutdown>,
    acct: Arc<Accounting>,
    errs: Arc<Mutex<Vec<String>>>,
    mut trace: Option<trace::TraceBuf>,
    links: Links,
) {
    let Node { name, body, on_error, role, restart, pass_failed, .. } = node;
    match body {
        Body::Source(mut src) => {
            let mut emit = |f: Frame| out.send(f);
            let events = |e: Arc<Event>| out.send_event(e);
            let mut ctx = SourceCtx::new(name.clone(), index, &sd, &acct, &st, &mut emit).with_events(&events);
            ctx.trace = trace.take();
            ctx.ends = Some(links.ends.clone());
            ctx.inputs = links.inputs.clone();
            let err = drive_source(&mut src, &mut ctx, &st, restart);
            ctx.finish();
            if let Some(e) = err {
                *st.failure.lock().unwrap_or_else(|e| e.into_inner()) = Some(e.clone());
                let msg = format!("source `{name}`: {e}");
                tracing::error!("{msg}");
                errs.lock().unwrap_or_else(|e| e.into_inner()).push(msg);
            }
            // Dropping `out` closes our side of every edge: end of stream downstream.
        }
        Body::Stage(mut stage) => {
            let rx = rx.expect("stage has an input");
            let (max, wait) = stage.batching().unwrap_or((1, Duration::ZERO));
            let mut dead = false;
            let mut batch: Vec<Frame> = Vec::with_capacity(max);
            let mut open = true;
            // An event that arrived while a batch was forming: passed on after the batch, keeping the order.
            let mut event_after: Option<Arc<Event>> = None;
            while open {
                if let Some(e) = event_after.take() {
                    out.send_event(e);
                }
                // One frame, then (when batching) more until the batch is full or the oldest has waited `wait`.
                match rx.recv() {
                    Ok(Msg::Frame(f)) => batch.push(f),
                    Ok(Msg::Event(e)) => {
                        // Events pass through stages untouched.
                        out.send_event(e);
                        continue;
                    }
                    Err(_) => break,
                }
                let deadline = Instant::now() + wait;
                while batch.len() < max {
                    match rx.recv_deadline(deadline) {
                        Ok(Msg::Frame(f)) => batch.push(f),
                        Ok(Msg::Event(e)) => {
                            event_after = Some(e);
                            break;
                        }
                        Err(crossbeam_channel::RecvTimeoutError::Timeout) => break,
                        Err(crossbeam_channel::RecvTimeoutError::Disconnected) => {
                            open = false;
                            break;
                        }
                    }
                }
                for f in &batch {
                    st.took(f, rx.len());
                }
                if dead {
                    for frame in batch.drain(..) {
                        frame.ticket.failed();
                        st.failed_on(&frame);
                    }
                    continue;
                }
                // Frames a stage before failed on go to the `redact` stage after, untouched.
                let mut failed_before: Vec<(usize, Frame)> = Vec::new();
                if st.kind != "redact" && batch.iter().any(|f| f.failed_upstream().is_some()) {
                    let mut i = 0;
                    let mut k = 0;
                    while i < batch.len() {
                        if batch[i].failed_upstream().is_some() {
                            failed_before.push((k, batch.remove(i)));
                        } else {
                            i += 1;
                        }
                        k += 1;
                    }
                }
                let t0 = Instant::now();
                let r = if batch.is_empty() { Ok(Vec::new()) } else { catch_unwind(AssertUnwindSafe(|| stage.process_batch(&mut batch))) };
                let t1 = Instant::now();
                if max > 1 {
                    st.batch_formed(batch.len());
                }
                let per_frame = (t1 - t0) / batch.len().max(1) as u32;
                let mut results: Vec<Outcome> = match r {
                    Ok(rs) => rs
                        .into_iter()
                        .map(|r| match r {
                            Ok(()) => Outcome::Done,
                            Err(StageError::Withheld(e)) => Outcome::Withhold(e),
                            Err(StageError::Frame(e)) if pass_failed && on_error == OnError::Skip => Outcome::PassFailed(e),
                            Err(StageError::Frame(e)) if on_error == OnError::Skip => Outcome::Skip(e),
                            Err(e) => Outcome::Stop(e.to_string()),
                        })
                        .collect(),
                    Err(p) => {
                        // A panic is an error on these frames, handled by the policy like any other.
                        let msg = format!("panic: {}", panic_message(p));
                        for f in &batch {
                            tracing::error!("stage `{name}` panicked on stream `{}` frame {}: {msg}", f.stream, f.seq);
                        }
                        batch
                            .iter()
                            .map(|_| match on_error {
                                OnError::Skip if pass_failed => Outcome::PassFailed(msg.clone()),
                                OnError::Skip => Outcome::Skip(msg.clone()),
                                OnError::Stop => Outcome::Stop(msg.clone()),
                            })
                            .collect()
                    }
                };
                for (k, f) in failed_before {
                    batch.insert(k, f);
                    results.insert(k, Outcome::Pass);
                }
                for (mut frame, r) in batch.drain(..).zip(results) {
                    // Events the stage raised on this frame follow it, whatever became of it.
                    let events = std::mem::take(&mut frame.events);
                    st.record(per_frame, None);
                    if let Some(t) = &mut trace {
                        t.waited(&frame, t0);
                        t.work(&frame, t0, t1);
                    }
                    match r {
                        Outcome::Done => {
                            if st.kind == "infer"
                                && let Some(mode) = frame.work_mode(&name)
                            {
                                st.worked(&frame.stream, mode);
                                if let Some(n) = frame.crops_before(&name).map(|c| c.reread).filter(|n| *n > 0) {
                                    st.add_work(&frame.stream, stats::WORK_REREAD, n as u64);
                                }
                            }
                            if let Some((node, n)) = frame.carried_moved(&name)
                                && let Some(up) = links.stats.iter().find(|s| *s.name == **node)
                            {
                                up.add_work(&frame.stream, stats::WORK_CARRIED_MOVED, n as u64);
                            }
                            if st.kind == "redact"
                                && let Some(r) = frame.results.iter().rev().find_map(|a| match &*a.payload {
                                    crate::frame::Payload::Redaction(r) if a.node == name => Some(r),
                                    _ => None,
                                })
                            {
                                st.redacted[0].fetch_add(r.boxes as u64, Ordering::Relaxed);
                                st.redacted[1].fetch_add(r.full.is_some() as u64, Ordering::Relaxed);
                            }
                            if frame.filtered {
                                frame.ticket.filtered();
                                st.filtered.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                            } else {
                                st.passed(&frame);
                                out.send(frame);
                            }
                        }
                        Outcome::PassFailed(e) => {
                            let n = st.failed_on(&frame);
                            if n.is_power_of_two() {
                                tracing::warn!(
                                    "stage `{name}`: stream `{}` frame {}: {e} (passed on to be redacted whole or dropped; {n} so far)",
                                    frame.stream,
                                    frame.seq
                                );
                            }
                            frame.attach(&name, crate::frame::Payload::Failed(e));
                            out.send(frame);
                        }
                        Outcome::Pass => {
                            st.passed(&frame);
                            out.send(frame);
                        }
                        Outcome::Withhold(e) => {
                            frame.ticket.dropped();
                            st.dropped.fetch_add(1, Ordering::Relaxed);
                            st.stream(&frame.stream, stats::StreamEvent::Dropped);
                            let n = st.dropped.load(Ordering::Relaxed);
                            if n.is_power_of_two() {
                                tracing::warn!("stage `{name}`: stream `{}` frame {}: {e} (dropped; {n} so far)", frame.stream, frame.seq);
                            }
                        }
                        Outcome::Skip(e) => {
                            frame.ticket.failed();
                            let n = st.failed_on(&frame);
                            if n.is_power_of_two() {
                                tracing::warn!("stage `{name}`: stream `{}` frame {}: {e} (skipped; {n} so far)", frame.stream, frame.seq);
                            }
                        }
                        Outcome::Stop(e) => {
                            frame.ticket.failed();
                            st.failed_on(&frame);
                            if !dead {
                                sd.fail(format!("stage `{name}` failed on stream `{}` frame {}: {e}", frame.stream, frame.seq));
                            }
                            dead = true;
                        }
                    }
                    for e in events {
                        st.stage_event(&e);
                        out.send_event(Arc::new(e));
                    }
                }
            }
            if let Some(e) = event_after {
                out.send_event(e);
            }
            // The input ended: what the stage still has to say (tracks ending with the stream).
            if !dead {
                match catch_unwind(AssertUnwindSafe(|| stage.finish())) {
                    Ok(events) => {
                        for e in events {
                            st.stage_event(&e);
                            out.send_event(Arc::new(e));
                        }
                    }
                    Err(p) => tracing::error!("stage `{name}` panicked at the end of its input: {}", panic_message(p)),
                }
            }
        }
        Body::Sink(mut sink) => {
            let rx = rx.expect("sink has an input");
            let (sink_no, end_rx) = links.sink.expect("sink has an index");
            let mut dead = false;
            loop {
                // Frames and stream events, and streams that ended (every frame of them written): close those.
                let msg = crossbeam_channel::select! {
                    recv(rx) -> f => match f {
                        Ok(f) => f,
                        Err(_) => break,
                    },
                    recv(end_rx) -> s => {
                        if let Ok(stream) = s {
                            let r = catch_unwind(AssertUnwindSafe(|| sink.end_stream(&stream))).unwrap_or_else(|p| Err(panic_message(p)));
                            if let Err(e) = &r {
                                tracing::error!("sink `{name}`: closing stream `{stream}`: {e}");
                            }
                            links.ends.closed(sink_no, &stream, r.is_ok() && !dead);
                        }
                        continue;
                    }
                };
                let frame = match msg {
                    Msg::Frame(f) => f,
                    Msg::Event(e) => {
                        if let Some(hub) = &links.results {
                            hub.publish(&e.stream, results::ResultKind::Event, || e.to_json().to_string());
                        }
                        if !dead {
                            match catch_unwind(AssertUnwindSafe(|| sink.event(&e))) {
                                Ok(Ok(())) => {}
                                Ok(Err(err)) => tracing::warn!("sink `{name}`: stream `{}` event {}: {err}", e.stream, e.name()),
                                Err(p) => {
                                    tracing::warn!("sink `{name}`: stream `{}` event {}: panic: {}", e.stream, e.name(), panic_message(p))
                                }
                            }
                        }
                        continue;
                    }
                };
                st.took(&frame, rx.len());
                if dead {
                    frame.ticket.failed();
                    st.failed_on(&frame);
                    continue;
                }
                let t0 = Instant::now();
                let r = catch_unwind(AssertUnwindSafe(|| sink.write(&frame)));
                let t1 = Instant::now();
                st.record(t1 - t0, Some(t1 - frame.created));
                if let Some(t) = &mut trace {
                    t.waited(&frame, t0);
                    t.work(&frame, t0, t1);
                }
                match r {
                    Ok(Ok(())) => {
                        let _ = st.first_out.set(t1);
                        if let Some(hub) = &links.results {
                            hub.publish(&frame.stream, results::ResultKind::Frame, || crate::frame::json::frame_json_string(&frame));
                        }
                        if let Some(live) = &links.live {
                            live.offer(&frame.stream, frame.seq, frame.image.as_ref(), &frame.results);
                        }
                        if let Some(Some(hub)) = links.replies.get(frame.stream_index as usize) {
                            hub.deliver(&frame);
                        }
                        frame.ticket.sunk();
                        st.passed(&frame);
                    }
                    Ok(Err(StageError::Frame(e))) if on_error == OnError::Skip => {
                        frame.ticket.failed();
                        st.failed_on(&frame);
                        tracing::warn!("sink `{name}`: stream `{}` frame {}: {e} (skipped)", frame.stream, frame.seq);
                    }
                    Ok(Err(e)) => {
                        frame.ticket.failed();
                        st.failed_on(&frame);
                        sd.fail(format!("sink `{name}` failed on stream `{}` frame {}: {e}", frame.stream, frame.seq));
                        dead = true;
                    }
                    Err(p) if on_error == OnError::Skip => {
                        frame.ticket.failed();
                        st.failed_on(&frame);
                        tracing::error!(
                            "sink `{name}` panicked on stream `{}` frame {}: {} (skipped)",
                            frame.stream,
                            frame.seq,
                            panic_message(p)
                        );
                    }
                    Err(p) => {
                        frame.ticket.failed();
                        st.failed_on(&frame);
                        sd.fail(format!("sink `{name}` panicked on stream `{}` frame {}: {}", frame.stream, frame.seq, panic_message(p)));
                        dead = true;
                    }
                }
            }
            let finished = catch_unwind(AssertUnwindSafe(|| sink.finish())).unwrap_or_else(|p| Err(panic_message(p)));
            if let Err(e) = &finished {
                sd.fail(format!("sink `{name}`: {e}"));
            }
            if let Some(hub) = sink.clip_hub() {
                hub.sink_done();
            }
            let losses = sink.output_losses();
            st.losses.fetch_add(losses.lost, Ordering::Relaxed);
            st.reconnects.fetch_add(losses.reconnects, Ordering::Relaxed);
            st.undelivered.fetch_add(losses.undelivered, Ordering::Relaxed);
            links.ends.sink_finished(sink_no, finished.is_ok() && !dead);
        }
    }
    let _ = role;
    st.finish();
}
