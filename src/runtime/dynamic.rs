//! Sources whose streams come and go while the pipeline runs (`dynamic = true`,
//! `infer-stream serve`). The node is one source that runs a worker thread per
//! stream: each worker decodes its own stream (its own frames, tickets, stop
//! flag and counters) and hands frames to the node's thread, which sends them
//! on to the same stages as every other stream. A stream removed stops alone:
//! its frames in flight drain, the sinks close its per-stream files, and no
//! other stream notices.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::thread::JoinHandle;
use std::time::Duration;

use crossbeam_channel::{Sender, bounded, never};

use super::node::{Command, Prepared, Source, Template};
use super::slot::StreamSlot;
use super::{Msg, NodeStats, Shutdown, SourceCtx, panic_message};
use crate::frame::InputEnd;

/// The node of a template: no stream of its own, one worker per added stream.
pub struct DynamicSource {
    template: Arc<Template>,
    describe: String,
}

impl DynamicSource {
    pub fn new(template: Arc<Template>, describe: String) -> Self {
        DynamicSource { template, describe }
    }
}

struct Worker {
    slot: Arc<StreamSlot>,
    thread: JoinHandle<()>,
}

impl Source for DynamicSource {
    fn is_live(&self) -> bool {
        true
    }
    fn required(&self) -> bool {
        false
    }
    fn describe(&self) -> String {
        self.describe.clone()
    }
    fn template(&self) -> Option<Arc<Template>> {
        Some(self.template.clone())
    }

    fn run(&mut self, ctx: &mut SourceCtx<'_>) -> Result<(), String> {
        let commands = self.template.rx.lock().unwrap_or_else(|e| e.into_inner()).take().unwrap_or_else(never);
        // Frames and events of every stream, to be sent on from this thread.
        let (tx, rx) = bounded::<Msg>(16);
        let mut workers: Vec<Worker> = Vec::new();
        while !ctx.stopping() {
            crossbeam_channel::select! {
                recv(commands) -> c => if let Ok(Command::Start(slot, prepared)) = c {
                    match start(ctx, slot.clone(), prepared, tx.clone()) {
                        Ok(thread) => workers.push(Worker { slot, thread }),
                        Err(e) => slot.failed(format!("cannot start its thread: {e}")),
                    }
                },
                recv(rx) -> m => if let Ok(m) = m {
                    forward(ctx, m);
                },
                default(Duration::from_millis(50)) => {}
            }
            workers.retain(|w| !w.thread.is_finished());
        }
        // Stop every stream; send on what they still hand over until all are done.
        for w in &workers {
            w.slot.stop();
        }
        drop(tx);
        while let Ok(m) = rx.recv() {
            forward(ctx, m);
        }
        for w in workers {
            let _ = w.thread.join();
        }
        Ok(())
    }
}

fn forward(ctx: &mut SourceCtx<'_>, m: Msg) {
    match m {
        Msg::Frame(f) => {
            ctx.emit(f);
        }
        Msg::Event(e) => {
            if let Some(send) = ctx.events {
                send(e);
            }
        }
    }
}

/// Start one stream's worker thread.
fn start(ctx: &SourceCtx<'_>, slot: Arc<StreamSlot>, prepared: Prepared, tx: Sender<Msg>) -> std::io::Result<JoinHandle<()>> {
    // The stream's input (what the sinks close) opens once its source is built:
    // a stream that never starts leaves no output behind.
    let opener = ctx.input_opener();
    let acct = ctx.acct.clone();
    let index = ctx.index;
    let restart = slot.restart;
    std::thread::Builder::new().name(format!("stream:{}", slot.id)).spawn(move || {
        // Its source (decoder, threads, pools) is gone when this returns.
        run_stream(&slot, prepared, opener, acct, index, restart, tx);
        slot.exited();
    })
}

/// Build one stream's source and drive it until it ends or is stopped.
fn run_stream(
    slot: &Arc<StreamSlot>,
    prepared: Prepared,
    opener: super::InputOpener,
    acct: Arc<crate::frame::Accounting>,
    index: u32,
    restart: super::control::RestartPolicy,
    tx: Sender<Msg>,
) {
    let built = catch_unwind(AssertUnwindSafe(prepared.build)).unwrap_or_else(|p| Err(format!("panic: {}", panic_message(p))));
    let mut src = match built {
        Ok(s) => s,
        Err(e) => {
            tracing::warn!("stream `{}` ({}): {e}", slot.id, slot.shown);
            slot.failed(e);
            // Nothing of it reached a sink: nothing to flush.
            slot.flushed(&InputEnd::nothing(slot.id.clone()), true);
            return;
        }
    };
    let flushed = slot.clone();
    let input = opener.open(slot.id.clone(), move |end, ok| flushed.flushed(&end, ok));
    let _ = slot.first_result.set(input.first_result.clone());
    let stats: &NodeStats = &slot.stats;
    stats.required.store(src.required(), Ordering::Relaxed);
    let sd: Arc<Shutdown> = slot.stop_flag();
    let frames = tx.clone();
    let mut emit = move |f| frames.send(Msg::Frame(f)).is_ok();
    let events = move |e| {
        let _ = tx.send(Msg::Event(e));
    };
    let mut sctx = SourceCtx::new(slot.id.clone(), index, &sd, &acct, stats, &mut emit).with_events(&events);
    sctx.input = Some(input);
    tracing::info!("stream `{}` of `{}` started: {}", slot.id, slot.source, slot.shown);
    let err = super::drive_source(&mut src, &mut sctx, stats, restart);
    sctx.finish();
    drop(sctx);
    stats.finish();
    match err {
        Some(e) => {
            tracing::warn!("stream `{}`: {e}", slot.id);
            slot.failed(e);
        }
        None => slot.worker_done(),
    }
}
