//! `kind = "kafka"`: batch processing scaled out over worker processes. Jobs
//! come from a Kafka topic read in a consumer group; each job, a JSON object
//! naming its media (`{"id": "...", "uri": "..."}`), becomes its own stream
//! (named by the job id) and is decoded as one file of a `dir` batch, up to
//! `parallel` at once. Kafka's group protocol is the only coordinator: every
//! worker of the group gets some of the topic's partitions.
//!
//! Nothing is lost (at-least-once): a job's offset is committed only once every
//! sink has delivered its results (its stream flushed without error). Per
//! partition the jobs seen are tracked by offset, and the committed offset is
//! the lowest one not yet complete, so a job finished early never commits past
//! an unfinished one.
//!
//! Attempt numbers: a job's results carry its id and which delivery this is.
//! Before a job at offset `o` starts as attempt `n`, the worker commits `o + 1`
//! for its partition in the group `GROUP.started.n` (offsets only, nobody
//! consumes with it). A worker given the partition later reads those groups:
//! a job below the offset recorded for attempt `n` was started `n` times
//! already, so it runs as `n + 1`. The attempt is on record before any of its
//! results exist, so one attempt number is one delivery. (Offsets only, not
//! commit metadata, so that any Kafka-protocol broker keeps it.)
//!
//! A bad job (not JSON, no `id` or `uri`, media that cannot be read, frames the
//! pipeline failed on) goes to the dead-letter topic with its reason and is
//! committed: never retried for ever. Jobs of partitions taken away in a
//! rebalance are stopped without a commit; their new worker redoes them.

use std::collections::{HashMap, HashSet, VecDeque};
use std::path::PathBuf;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, bounded, unbounded};
use rdkafka::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::producer::BaseProducer;

use super::batch::{Decode, Feed, Input, Media, Msg};
use crate::config::{Diagnostic, KafkaSourceConfig, NodeConfig, PipelineConfig};
use crate::frame::{InputEnd, JobTag, Payload, Pool};
use crate::runtime::SourceCtx;
use crate::stages::{Body, Source};

mod clients;
mod ledger;
mod worker;
use crate::stages::build::{Build, BuildCtx};
use clients::*;
use worker::*;

/// How long a commit, a committed-offsets query or a dead letter may take.
const BROKER_WAIT: Duration = Duration::from_secs(10);
/// Attempt records read at most, per partition.
const MAX_ATTEMPTS_READ: u32 = 100;

/// The group that records the starts of attempt `n`.
fn started_group(group: &str, n: u32) -> String {
    format!("{group}.started.{n}")
}

/// How long a stopping worker waits for its jobs' results to be flushed.
const DRAIN_WAIT: Duration = Duration::from_secs(10);

pub struct KafkaSource {
    describe: String,
    group: String,
    /// The consumer's settings (the attempt records use them with their own group).
    config: ClientConfig,
    /// The dead-letter producer's settings, and its topic.
    letters: Option<(ClientConfig, String)>,
    topic: String,
    worker: String,
    base_dir: PathBuf,
    parallel: usize,
    idle: Option<Duration>,
    decoder_threads: usize,
    max_frames: Option<u64>,
    media: Media,
    rotate: bool,
    pool: Pool<u8>,
    audio_pool: Pool<f32>,
}

/// This worker's default name: `HOST:PID`.
fn default_worker() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|h| h.trim().to_string())
        .filter(|h| !h.is_empty())
        .or_else(|| std::env::var("HOSTNAME").ok())
        .unwrap_or_else(|| "localhost".into());
    format!("{host}:{}", std::process::id())
}

impl KafkaSource {
    /// Check the settings and create the clients (no connection yet), so a
    /// bad client property is a located error before anything runs.
    pub fn build(cfg: &PipelineConfig, node: &NodeConfig, c: &KafkaSourceConfig, pool_size: usize) -> Result<Self, Diagnostic> {
        let media = match super::audio_windows(cfg, node, c.media, c.sample_rate.as_ref(), c.window.as_ref(), c.hop.as_ref())? {
            None => Media::Video,
            Some((rate, window, hop)) => Media::Audio { rate, window, hop },
        };
        let brokers = cfg.expand(&c.brokers)?;
        let topic = cfg.expand(&c.topic)?;
        let group = cfg.expand(&c.group)?;
        for (v, what) in [(&brokers, &c.brokers), (&topic, &c.topic), (&group, &c.group)] {
            if v.trim().is_empty() {
                return Err(cfg.diag(what.span(), format!("source `{}`: must not be empty", node.name)));
            }
        }
        let worker = match &c.worker {
            Some(w) => cfg.expand(w)?,
            None => default_worker(),
        };
        let mut client = Vec::new();
        for (k, v) in &c.client {
            let text = match v.get_ref() {
                crate::config::ClientSetting::Text(_) => cfg.expand(&toml::Spanned::new(v.span(), v.get_ref().text()))?,
                other => other.text(),
            };
            client.push((k.clone(), text, v.span()));
        }
        // A located error for a property librdkafka rejects: at its value when it names one.
        let located = |e: KafkaError| {
            let msg = e.to_string();
            let span = client.iter().find(|(k, ..)| msg.contains(&format!("\"{k}\""))).map_or(node.kind_span.clone(), |(.., s)| s.clone());
            cfg.diag(span, format!("source `{}`: kafka client: {msg}", node.name))
                .with_help("`client` takes librdkafka properties (https://docs.confluent.io/platform/current/clients/librdkafka/html/md_CONFIGURATION.html)")
        };
        let mut cc = ClientConfig::new();
        cc.set("bootstrap.servers", &brokers)
            .set("group.id", &group)
            .set("enable.auto.commit", "false")
            .set("enable.auto.offset.store", "false")
            .set("auto.offset.reset", "earliest")
            .set("client.id", format!("infer-stream {worker}"));
        for (k, v, _) in &client {
            cc.set(k, v);
        }
        // Checked without brokers: `validate` connects to nothing.
        let _: BaseConsumer = cc.clone().remove("bootstrap.servers").create().map_err(located)?;
        let letters = match &c.dead_letter_topic {
            Some(t) => {
                let t = cfg.expand(t)?;
                let mut pc = ClientConfig::new();
                pc.set("bootstrap.servers", &brokers).set("client.id", format!("infer-stream {worker}"));
                // The client's other properties (TLS, SASL) apply to the producer too; consumer-only ones are not given to it.
                for (k, v, _) in &client {
                    if !CONSUMER_ONLY.contains(&k.as_str()) {
                        pc.set(k, v);
                    }
                }
                let _: BaseProducer = pc.clone().remove("bootstrap.servers").create().map_err(located)?;
                Some((pc, t))
            }
            None => None,
        };
        let parallel = c.parallel.get_ref().get();
        let idle = c.stop_when_idle_ms.as_ref().map(|v| Duration::from_millis(*v.get_ref()));
        let describe = format!(
            "jobs from kafka topic `{topic}` at {brokers} in group `{group}` as worker `{worker}`, {parallel} at a time{}{}",
            c.dead_letter_topic.as_ref().map(|t| format!(", bad jobs to `{}`", t.get_ref())).unwrap_or_default(),
            idle.map(|d| format!(", ends after {} ms idle", d.as_millis())).unwrap_or_default(),
        );
        Ok(KafkaSource {
            describe,
            group,
            config: cc,
            letters,
            topic,
            worker,
            base_dir: cfg.base_dir.clone(),
            parallel,
            idle,
            decoder_threads: c.decoder_threads,
            max_frames: c.max_frames,
            media,
            rotate: c.rotate == crate::config::Rotate::Auto,
            pool: Pool::new(pool_size + 4 * parallel),
            audio_pool: Pool::new(pool_size + 4 * parallel),
        })
    }
}

impl Source for KafkaSource {
    fn describe(&self) -> String {
        self.describe.clone()
    }

    fn run(&mut self, ctx: &mut SourceCtx<'_>) -> Result<(), String> {
        let consumer: BaseConsumer<GroupContext> = self
            .config
            .create_with_context(GroupContext { topic: self.topic.clone(), events: Mutex::new(Vec::new()) })
            .map_err(|e| format!("kafka client: {e}"))?;
        let letters = match &self.letters {
            Some((pc, topic)) => {
                let p: BaseProducer<LetterContext> =
                    pc.create_with_context(LetterContext::default()).map_err(|e| format!("kafka dead-letter producer: {e}"))?;
                Some((p, topic.clone()))
            }
            None => None,
        };
        consumer.subscribe(&[&self.topic]).map_err(|e| format!("cannot subscribe to `{}`: {e}", self.topic))?;
        let log = ctx.inputs().clone();
        log.record(|_| {});
        let parallel = self.parallel;
        let (to_decoders, jobs) = bounded::<Started>(parallel);
        let (tx, rx) = bounded::<Msg>(2 * parallel);
        let (done_tx, done_rx) = unbounded::<Finished>();
        let stop = AtomicBool::new(false);
        let name = ctx.name.clone();
        let (media, rotate, threads, max_frames, pool, audio_pool) =
            (self.media, self.rotate, self.decoder_threads, self.max_frames, &self.pool, &self.audio_pool);
        let mut w = Worker {
            consumer: &consumer,
            group: self.group.clone(),
            config: &self.config,
            recorders: Default::default(),
            letters: letters.as_ref(),
            topic: &self.topic,
            worker: &self.worker,
            base_dir: &self.base_dir,
            log,
            parts: HashMap::new(),
            epochs: 0,
            queued: VecDeque::new(),
            running: HashMap::new(),
            next_slot: 0,
            dirty: HashSet::new(),
            last_commit_try: Instant::now(),
            paused: false,
            assigned_at: None,
        };
        std::thread::scope(|scope| {
            for i in 0..parallel {
                let jobs: Receiver<Started> = jobs.clone();
                let d = Decode { media, rotate, threads, max_frames, pool, audio_pool, tx: tx.clone(), stop: &stop };
                std::thread::Builder::new()
                    .name(format!("{name}:decode{i}"))
                    .spawn_scoped(scope, move || {
                        while let Ok(s) = jobs.recv() {
                            d.file(s.slot, &Input { path: &s.path, size: s.size, cancel: Some(&s.cancel) });
                        }
                    })
                    .expect("spawn decoder thread");
            }
            drop(tx);
            let mut feed = Feed::default();
            let mut last_busy = Instant::now();
            let mut stopping_since: Option<Instant> = None;
            loop {
                if stopping_since.is_none() && (ctx.stopping() || stop.load(Ordering::Acquire)) {
                    stop.store(true, Ordering::Release);
                    w.queued.clear();
                    stopping_since = Some(Instant::now());
                }
                let mut busy = false;
                while let Ok(f) = done_rx.try_recv() {
                    w.finished(f);
                    busy = true;
                }
                while let Ok(msg) = rx.try_recv() {
                    busy = true;
                    match msg {
                        Msg::Opened { file, time_base } => {
                            let Some(job) = w.running.get(&file) else { continue };
                            let done_tx = done_tx.clone();
                            feed.opened(ctx, file, time_base, job.id.clone(), move |end: InputEnd, flushed: bool| {
                                let _ = done_tx.send(Finished { slot: file, end, flushed });
                            });
                        }
                        Msg::Frame { file, pts, item } => {
                            let Some(job) = w.running.get(&file) else { continue };
                            let skip = stop.load(Ordering::Acquire) || job.cancel.load(Ordering::Acquire);
                            let tag = JobTag { id: job.id.clone(), attempt: job.attempt };
                            if !feed.frame(ctx, file, pts, item, skip, |f| f.attach(&name, Payload::Job(tag))) {
                                stop.store(true, Ordering::Release);
                            }
                        }
                        Msg::Done { file, result, corrupt } => {
                            if let Err(reason) = feed.done(ctx, file, result, corrupt)
                                && let Some(job) = w.running.remove(&file)
                            {
                                if job.cancel.load(Ordering::Acquire) {
                                    w.log.record(|r| r.revoked += 1);
                                } else if stop.load(Ordering::Acquire) {
                                    w.log.record(|r| r.incomplete += 1);
                                } else if w.current(job.partition, job.epoch) {
                                    w.bad_job(job, reason);
                                }
                            }
                        }
                        Msg::Stopped { file, corrupt } => feed.stopped(ctx, file, corrupt),
                    }
                }
                if let Some(since) = stopping_since {
                    if w.running.is_empty() {
                        break;
                    }
                    if since.elapsed() > DRAIN_WAIT {
                        tracing::warn!("{} job(s) still flushing after {} s: left uncommitted", w.running.len(), DRAIN_WAIT.as_secs());
                        let n = w.running.len() as u64;
                        w.log.record(|r| r.incomplete += n);
                        break;
                    }
                } else {
                    // Poll the group (rebalances are handled here), then take jobs while there is room.
                    for _ in 0..(2 * parallel).max(4) {
                        let polled = consumer.poll(Duration::ZERO);
                        w.group_events();
                        match polled {
                            None => break,
                            Some(Ok(m)) => {
                                busy = true;
                                w.consumed(&m);
                            }
                            Some(Err(e)) => tracing::warn!("kafka: {e}"),
                        }
                    }
                    w.flow(parallel);
                    w.start(parallel, &to_decoders);
                    if !w.running.is_empty() || !w.queued.is_empty() {
                        last_busy = Instant::now();
                    }
                    if busy {
                        last_busy = Instant::now();
                    }
                    // Idle time counts from the group's last assignment: joining is not idleness.
                    if let Some(at) = w.assigned_at
                        && at > last_busy
                    {
                        last_busy = at;
                    }
                    if w.assigned_at.is_some() && self.idle.is_some_and(|d| last_busy.elapsed() >= d) {
                        tracing::info!("kafka: no job for {} ms: ending", last_busy.elapsed().as_millis());
                        stop.store(true, Ordering::Release);
                    }
                }
                if !w.dirty.is_empty() && w.last_commit_try.elapsed() > Duration::from_millis(500) {
                    w.commit();
                }
                if !busy {
                    crossbeam_channel::select! {
                        recv(done_rx) -> f => if let Ok(f) = f { w.finished(f) },
                        default(Duration::from_millis(20)) => {}
                    }
                }
            }
            drop(to_decoders);
            // Decoders still reading a stopped job send its end: drain until they are gone.
            while let Ok(msg) = rx.recv() {
                match msg {
                    Msg::Done { file, result, corrupt } => {
                        let _ = feed.done(ctx, file, result, corrupt);
                    }
                    Msg::Stopped { file, corrupt } => feed.stopped(ctx, file, corrupt),
                    Msg::Opened { .. } | Msg::Frame { .. } => {}
                }
            }
        });
        w.commit();
        drop(w);
        // Leaving the group now hands this worker's partitions to the others at once.
        drop(consumer);
        Ok(())
    }
}

impl Build for KafkaSourceConfig {
    fn build(&self, cx: &BuildCtx<'_>) -> Result<Body, Diagnostic> {
        KafkaSource::build(cx.cfg, cx.node, self, cx.pool_size).map(|s| Body::Source(Box::new(s)))
    }
}

#[cfg(test)]
mod tests;
