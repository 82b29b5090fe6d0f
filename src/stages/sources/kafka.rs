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

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender, bounded, unbounded};
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer, ConsumerContext, Rebalance, RebalanceProtocol};
use rdkafka::error::KafkaError;
use rdkafka::message::{BorrowedMessage, Message};
use rdkafka::producer::{BaseProducer, BaseRecord, DeliveryResult, Producer, ProducerContext};
use rdkafka::{ClientConfig, ClientContext, Offset, TopicPartitionList};
use serde::Deserialize;
use serde_json::{Value, json};

use super::batch::{Decode, Feed, Input, Media, Msg};
use crate::config::{Diagnostic, KafkaSourceConfig, NodeConfig, PipelineConfig};
use crate::frame::{InputEnd, JobTag, Payload, Pool};
use crate::runtime::report::FailedInput;
use crate::runtime::{InputLog, SourceCtx};
use crate::stages::Source;

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

/// A job message: `id` and `uri` are required, other fields are kept for dead letters.
#[derive(Debug, Deserialize)]
struct JobMessage {
    id: String,
    uri: String,
}

/// Group events, noted during `poll` and handled after it on the source thread.
enum GroupEvent {
    Assign(Vec<i32>),
    Revoke(Vec<i32>),
}

struct GroupContext {
    topic: String,
    events: Mutex<Vec<GroupEvent>>,
}

impl ClientContext for GroupContext {
    fn error(&self, error: KafkaError, reason: &str) {
        tracing::warn!("kafka: {error}: {reason}");
    }
}

impl ConsumerContext for GroupContext {
    fn post_rebalance(&self, _consumer: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        let parts =
            |tpl: &TopicPartitionList| tpl.elements().iter().filter(|e| e.topic() == self.topic).map(|e| e.partition()).collect::<Vec<_>>();
        let event = match rebalance {
            Rebalance::Assign(tpl) => GroupEvent::Assign(parts(tpl)),
            Rebalance::Revoke(tpl) => GroupEvent::Revoke(parts(tpl)),
            Rebalance::Error(e) => {
                tracing::warn!("kafka: rebalance failed: {e}");
                return;
            }
        };
        self.events.lock().unwrap_or_else(|e| e.into_inner()).push(event);
    }
}

/// Collects the delivery failures of dead letters.
#[derive(Default)]
struct LetterContext {
    failed: Mutex<Vec<String>>,
}

impl ClientContext for LetterContext {}

impl ProducerContext for LetterContext {
    type DeliveryOpaque = ();
    fn delivery(&self, result: &DeliveryResult<'_>, _: ()) {
        if let Err((e, _)) = result {
            self.failed.lock().unwrap_or_else(|e| e.into_inner()).push(e.to_string());
        }
    }
}

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

/// Consumer properties a producer does not take.
const CONSUMER_ONLY: &[&str] = &[
    "group.id",
    "group.instance.id",
    "session.timeout.ms",
    "heartbeat.interval.ms",
    "max.poll.interval.ms",
    "auto.offset.reset",
    "enable.auto.commit",
    "auto.commit.interval.ms",
    "enable.auto.offset.store",
    "partition.assignment.strategy",
    "group.protocol",
    "fetch.min.bytes",
    "fetch.wait.max.ms",
    "fetch.max.bytes",
    "max.partition.fetch.bytes",
    "queued.min.messages",
    "queued.max.messages.kbytes",
    "enable.partition.eof",
    "check.crcs",
    "isolation.level",
];

/// Where a job stands, by its offset in its partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Slot {
    /// Consumed, not started yet.
    Queued,
    /// Started as this attempt.
    Running(u32),
    /// Its results are delivered (or it was dead-lettered).
    Done(u32),
    /// Its results could not be delivered: the partition's commits stop here.
    Held(u32),
}

/// A partition this worker is assigned.
struct Part {
    /// Changes each time the partition is newly assigned: jobs of an older assignment never commit.
    epoch: u64,
    jobs: BTreeMap<i64, Slot>,
    /// Every offset below this is done (committed or about to be).
    below: Option<i64>,
    /// Per attempt `n` (from 1): every job below this offset was started as attempt `n` at least.
    started: Vec<i64>,
    /// What was last committed.
    committed: Option<i64>,
}

impl Part {
    fn new(epoch: u64, started: Vec<i64>) -> Self {
        Part { epoch, jobs: BTreeMap::new(), below: None, started, committed: None }
    }

    /// Drop the done jobs at the bottom; the offset to commit.
    fn frontier(&mut self) -> Option<i64> {
        while let Some((&o, Slot::Done(_))) = self.jobs.first_key_value() {
            self.jobs.remove(&o);
            self.below = Some(o + 1);
        }
        self.jobs.first_key_value().map(|(&o, _)| o).or(self.below)
    }

    /// The attempt a start of the job at `offset` is: one more than the starts on record.
    fn attempt(&self, offset: i64) -> u32 {
        1 + self.started.iter().take_while(|&&s| s > offset).count() as u32
    }
}

/// One job taken from the topic.
struct Job {
    id: Arc<str>,
    partition: i32,
    offset: i64,
    epoch: u64,
    path: PathBuf,
    size: u64,
    /// The message as it came, for a dead letter.
    raw: Vec<u8>,
    attempt: u32,
    cancel: Arc<AtomicBool>,
}

/// Sent to a decoder: which job, as slot `slot`.
struct Started {
    slot: usize,
    path: PathBuf,
    size: u64,
    cancel: Arc<AtomicBool>,
}

/// A job's stream ended and every sink closed it.
struct Finished {
    slot: usize,
    end: InputEnd,
    flushed: bool,
}

/// The source thread's state while it runs.
struct Worker<'a> {
    consumer: &'a BaseConsumer<GroupContext>,
    group: String,
    /// The client settings, for the clients of the attempt records.
    config: &'a ClientConfig,
    recorders: std::cell::RefCell<HashMap<String, BaseConsumer>>,
    letters: Option<&'a (BaseProducer<LetterContext>, String)>,
    topic: &'a str,
    worker: &'a str,
    base_dir: &'a std::path::Path,
    log: Arc<InputLog>,
    parts: HashMap<i32, Part>,
    epochs: u64,
    queued: VecDeque<Job>,
    running: HashMap<usize, Job>,
    next_slot: usize,
    /// Partitions whose commit is due (a failed commit is retried).
    dirty: HashSet<i32>,
    last_commit_try: Instant,
    paused: bool,
    /// When the group last handed out partitions (none yet: not joined, never idle).
    assigned_at: Option<Instant>,
}

impl Worker<'_> {
    /// Handle the group's rebalances noted during the last poll.
    fn group_events(&mut self) {
        let events = std::mem::take(&mut *self.consumer.context().events.lock().unwrap_or_else(|e| e.into_inner()));
        for ev in events {
            match ev {
                GroupEvent::Revoke(parts) => {
                    // Eager rebalancing takes every partition and hands out the new set at once:
                    // jobs of partitions kept go on, the others stop when the new set is known.
                    if matches!(self.consumer.rebalance_protocol(), RebalanceProtocol::Cooperative) {
                        self.drop_partitions(&parts);
                    }
                }
                GroupEvent::Assign(parts) => {
                    // Resumed by the next `flow` unless jobs wait: a new assignment may keep an old pause.
                    self.paused = true;
                    self.assigned_at = Some(Instant::now());
                    if !matches!(self.consumer.rebalance_protocol(), RebalanceProtocol::Cooperative) {
                        let gone: Vec<i32> = self.parts.keys().filter(|p| !parts.contains(p)).copied().collect();
                        self.drop_partitions(&gone);
                    }
                    let new: Vec<i32> = parts.into_iter().filter(|p| !self.parts.contains_key(p)).collect();
                    self.take_partitions(&new);
                    let mut held: Vec<i32> = self.parts.keys().copied().collect();
                    held.sort_unstable();
                    tracing::info!("kafka: holding partition(s) {held:?} of `{}`", self.topic);
                }
            }
        }
    }

    /// Partitions given to this worker: read what their last commit says.
    fn take_partitions(&mut self, parts: &[i32]) {
        if parts.is_empty() {
            return;
        }
        // Attempt `n`'s record is read only while some job at or above the group's offset was started `n` times.
        let mut started: HashMap<i32, Vec<i64>> = parts.iter().map(|&p| (p, Vec::new())).collect();
        let from = self.offsets(&self.group, parts);
        let mut open: Vec<i32> = parts.to_vec();
        let mut n = 1;
        while !open.is_empty() && n <= MAX_ATTEMPTS_READ {
            let got = self.offsets(&started_group(&self.group, n), &open);
            open.retain(|p| {
                let s = got.get(p).copied().unwrap_or(-1);
                let low = from.get(p).copied().unwrap_or(-1);
                if s > low.max(0) {
                    started.get_mut(p).expect("listed").push(s);
                    true
                } else {
                    false
                }
            });
            n += 1;
        }
        for &p in parts {
            self.epochs += 1;
            self.parts.insert(p, Part::new(self.epochs, started.remove(&p).unwrap_or_default()));
        }
        tracing::info!("kafka: assigned partition(s) {parts:?} of `{}`", self.topic);
    }

    /// Partitions taken away: their queued jobs are forgotten, their running ones stopped (not committed).
    fn drop_partitions(&mut self, parts: &[i32]) {
        if parts.is_empty() {
            return;
        }
        for &p in parts {
            self.parts.remove(&p);
            self.dirty.remove(&p);
        }
        self.queued.retain(|j| !parts.contains(&j.partition));
        for j in self.running.values().filter(|j| parts.contains(&j.partition)) {
            tracing::info!("job `{}`: partition {} reassigned; stopped without a commit", j.id, j.partition);
            j.cancel.store(true, Ordering::Release);
        }
        tracing::info!("kafka: partition(s) {parts:?} of `{}` revoked", self.topic);
    }

    /// The offsets group `group` has committed for `parts` of the job topic (none: not read, or nothing committed).
    fn offsets(&self, group: &str, parts: &[i32]) -> HashMap<i32, i64> {
        let mut tpl = TopicPartitionList::new();
        for &p in parts {
            tpl.add_partition(self.topic, p);
        }
        let got = if group == self.group {
            self.consumer.committed_offsets(tpl, BROKER_WAIT)
        } else {
            match self.recorder(group) {
                Ok(c) => c.committed_offsets(tpl, BROKER_WAIT),
                Err(e) => Err(e),
            }
        };
        match got {
            Ok(got) => got
                .elements()
                .iter()
                .filter_map(|e| match e.offset() {
                    Offset::Offset(o) => Some((e.partition(), o)),
                    _ => None,
                })
                .collect(),
            Err(e) => {
                tracing::warn!("kafka: cannot read the offsets of group `{group}` ({e}): attempts may be counted low");
                HashMap::new()
            }
        }
    }

    /// A client of group `group`, for the attempt records (made once, kept).
    fn recorder(&self, group: &str) -> Result<std::cell::Ref<'_, BaseConsumer>, KafkaError> {
        if !self.recorders.borrow().contains_key(group) {
            let mut cc = self.config.clone();
            cc.set("group.id", group);
            let c: BaseConsumer = cc.create()?;
            self.recorders.borrow_mut().insert(group.to_string(), c);
        }
        Ok(std::cell::Ref::map(self.recorders.borrow(), |m| m.get(group).expect("made above")))
    }

    /// Record that the job at `offset` of `partition` starts as attempt `n`; `false` if that failed.
    fn record_start(&mut self, partition: i32, offset: i64, n: u32) -> bool {
        let group = started_group(&self.group, n);
        let mut tpl = TopicPartitionList::new();
        if tpl.add_partition_offset(self.topic, partition, Offset::Offset(offset + 1)).is_err() {
            return false;
        }
        let r = self.recorder(&group).and_then(|c| c.commit(&tpl, CommitMode::Sync));
        match r {
            Ok(()) => {
                if let Some(part) = self.parts.get_mut(&partition) {
                    let i = n as usize - 1;
                    if part.started.len() <= i {
                        part.started.resize(i + 1, -1);
                    }
                    part.started[i] = part.started[i].max(offset + 1);
                }
                true
            }
            Err(e) => {
                tracing::warn!("kafka: cannot record the start of attempt {n} in group `{group}` ({e})");
                false
            }
        }
    }

    /// Whether `job` still belongs to this worker's current assignment.
    fn current(&self, partition: i32, epoch: u64) -> bool {
        self.parts.get(&partition).is_some_and(|p| p.epoch == epoch)
    }

    fn set_slot(&mut self, partition: i32, epoch: u64, offset: i64, slot: Slot) {
        if !self.current(partition, epoch) {
            return;
        }
        if let Some(p) = self.parts.get_mut(&partition) {
            p.jobs.insert(offset, slot);
            self.dirty.insert(partition);
        }
    }

    /// Commit every partition whose frontier or note changed; `false` if a commit failed (retried later).
    fn commit(&mut self) -> bool {
        self.last_commit_try = Instant::now();
        if self.dirty.is_empty() {
            return true;
        }
        let mut planned = Vec::new();
        for &p in &self.dirty {
            let Some(part) = self.parts.get_mut(&p) else { continue };
            let Some(at) = part.frontier() else { continue };
            if part.committed == Some(at) {
                continue;
            }
            planned.push((p, at));
        }
        if planned.is_empty() {
            self.dirty.clear();
            return true;
        }
        let mut tpl = TopicPartitionList::new();
        for (p, at) in &planned {
            let _ = tpl.add_partition_offset(self.topic, *p, Offset::Offset(*at));
        }
        match self.consumer.commit(&tpl, CommitMode::Sync) {
            Ok(()) => {
                for (p, at) in planned {
                    tracing::debug!("kafka: committed partition {p} at offset {at}");
                    if let Some(part) = self.parts.get_mut(&p) {
                        part.committed = Some(at);
                    }
                }
                self.dirty.clear();
                true
            }
            Err(e) => {
                tracing::warn!("kafka: commit failed ({e}); retried");
                false
            }
        }
    }

    /// A message from the job topic: queued as a job, or dead-lettered when it is not one.
    fn consumed(&mut self, m: &BorrowedMessage<'_>) {
        let (p, offset) = (m.partition(), m.offset());
        let Some(part) = self.parts.get_mut(&p) else { return };
        if part.jobs.contains_key(&offset) || part.below.is_some_and(|b| offset < b) {
            // Fetched again after a rebalance: this worker has it already.
            return;
        }
        let epoch = part.epoch;
        part.jobs.insert(offset, Slot::Queued);
        let raw = m.payload().unwrap_or_default().to_vec();
        let parsed = serde_json::from_slice::<JobMessage>(&raw).map_err(|e| format!("not a job message ({e})")).and_then(|j| {
            if j.id.trim().is_empty() {
                Err("not a job message (empty `id`)".to_string())
            } else if j.uri.trim().is_empty() {
                Err("not a job message (empty `uri`)".to_string())
            } else {
                Ok(j)
            }
        });
        let mut job = Job {
            id: Arc::from(""),
            partition: p,
            offset,
            epoch,
            path: PathBuf::new(),
            size: 0,
            raw,
            attempt: 1,
            cancel: Arc::new(AtomicBool::new(false)),
        };
        match parsed {
            Ok(j) => {
                let path = match crate::config::expand_env(&j.uri) {
                    Ok(u) if crate::config::is_url(&u) || std::path::Path::new(&u).is_absolute() => PathBuf::from(u),
                    Ok(u) => self.base_dir.join(u),
                    Err(var) => {
                        job.id = Arc::from(j.id.as_str());
                        self.bad_job(job, format!("`uri` names environment variable `{var}`, which is not set"));
                        return;
                    }
                };
                job.size = std::fs::metadata(&path).map_or(1, |m| m.len());
                job.path = path;
                job.id = Arc::from(j.id.as_str());
                self.queued.push_back(job);
            }
            Err(reason) => self.bad_job(job, reason),
        }
    }

    /// Record a bad job, send its dead letter, and commit it once the letter is delivered.
    fn bad_job(&mut self, job: Job, reason: String) {
        let id = if job.id.is_empty() { format!("{}:{}@{}", self.topic, job.partition, job.offset) } else { job.id.to_string() };
        tracing::warn!("job `{id}` (partition {}, offset {}): {reason}", job.partition, job.offset);
        let delivered = match self.letters {
            Some((producer, topic)) => {
                let original = serde_json::from_slice::<Value>(&job.raw)
                    .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&job.raw).into_owned()));
                let letter = json!({
                    "job": original,
                    "id": (!job.id.is_empty()).then(|| job.id.to_string()),
                    "reason": reason,
                    "worker": self.worker,
                    "topic": self.topic,
                    "partition": job.partition,
                    "offset": job.offset,
                    "attempt": job.attempt,
                });
                let payload = letter.to_string();
                let mut record = BaseRecord::to(topic).payload(&payload);
                if !job.id.is_empty() {
                    record = record.key(&*job.id);
                }
                let sent = producer
                    .send(record)
                    .map_err(|(e, _)| e.to_string())
                    .and_then(|()| producer.flush(BROKER_WAIT).map_err(|e| e.to_string()));
                let failed: Vec<String> = std::mem::take(&mut *producer.context().failed.lock().unwrap_or_else(|e| e.into_inner()));
                match sent {
                    Ok(()) if failed.is_empty() => true,
                    Ok(()) => {
                        tracing::error!("job `{id}`: dead letter to `{topic}` not delivered ({}); not committed", failed.join("; "));
                        false
                    }
                    Err(e) => {
                        tracing::error!("job `{id}`: dead letter to `{topic}` not delivered ({e}); not committed");
                        false
                    }
                }
            }
            None => true,
        };
        let slot = if delivered { Slot::Done(job.attempt) } else { Slot::Held(job.attempt) };
        self.set_slot(job.partition, job.epoch, job.offset, slot);
        self.log.record(|r| r.failed.push(FailedInput { path: id, reason }));
        self.commit();
    }

    /// Start queued jobs while fewer than `parallel` run; a job whose id is running waits.
    fn start(&mut self, parallel: usize, to_decoders: &Sender<Started>) {
        while self.running.len() < parallel {
            let Some(i) = self.queued.iter().position(|j| !self.running.values().any(|r| r.id == j.id)) else { return };
            let mut job = self.queued.remove(i).expect("found above");
            let Some(part) = self.parts.get(&job.partition).filter(|p| p.epoch == job.epoch) else { continue };
            job.attempt = part.attempt(job.offset);
            self.set_slot(job.partition, job.epoch, job.offset, Slot::Running(job.attempt));
            // The attempt is on record before any result of it exists.
            self.record_start(job.partition, job.offset, job.attempt);
            tracing::info!("job `{}` started (attempt {}, partition {}, offset {})", job.id, job.attempt, job.partition, job.offset);
            let slot = self.next_slot;
            self.next_slot += 1;
            let started = Started { slot, path: job.path.clone(), size: job.size, cancel: job.cancel.clone() };
            self.running.insert(slot, job);
            if to_decoders.send(started).is_err() {
                return;
            }
        }
    }

    /// A job's results are flushed by every sink (or its stream was stopped).
    fn finished(&mut self, f: Finished) {
        let Some(job) = self.running.remove(&f.slot) else { return };
        let current = self.current(job.partition, job.epoch);
        if !f.end.read_to_end {
            if job.cancel.load(Ordering::Acquire) {
                self.log.record(|r| r.revoked += 1);
            } else {
                tracing::info!("job `{}`: stopped after {} frame(s); not committed (redone)", job.id, f.end.decoded);
                self.log.record(|r| r.incomplete += 1);
            }
        } else if !f.flushed {
            tracing::error!("job `{}`: its results could not be delivered; not committed", job.id);
            self.set_slot(job.partition, job.epoch, job.offset, Slot::Held(job.attempt));
            self.log.record(|r| r.incomplete += 1);
        } else if f.end.failed > 0 {
            let reason = format!("{} of its {} frame(s) failed in the pipeline", f.end.failed, f.end.decoded);
            if current {
                self.bad_job(job, reason);
            }
        } else {
            tracing::info!("job `{}`: complete ({} frame(s), attempt {})", job.id, f.end.decoded, job.attempt);
            let redone = job.attempt > 1;
            self.log.record(|r| {
                r.complete += 1;
                r.redone += u64::from(redone);
            });
            self.set_slot(job.partition, job.epoch, job.offset, Slot::Done(job.attempt));
            self.commit();
        }
    }

    /// Hold back fetching while jobs wait (the broker keeps them), go on when they run low.
    fn flow(&mut self, parallel: usize) {
        let want_pause = self.queued.len() >= parallel;
        if want_pause == self.paused {
            return;
        }
        if let Ok(assigned) = self.consumer.assignment() {
            let r = if want_pause { self.consumer.pause(&assigned) } else { self.consumer.resume(&assigned) };
            if r.is_ok() {
                self.paused = want_pause;
            }
        }
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Offsets are committed up to the lowest job not yet done, never past it.
    #[test]
    fn the_commit_stops_at_the_lowest_job_not_done() {
        let mut p = Part::new(1, Vec::new());
        assert_eq!(p.frontier(), None, "nothing seen, nothing to commit");
        for o in 10..14 {
            p.jobs.insert(o, Slot::Running(1));
        }
        p.jobs.insert(11, Slot::Done(1));
        p.jobs.insert(12, Slot::Done(1));
        assert_eq!(p.frontier(), Some(10), "10 still runs: 11 and 12 wait behind it");
        p.jobs.insert(10, Slot::Done(1));
        assert_eq!(p.frontier(), Some(13));
        p.jobs.insert(13, Slot::Held(1));
        assert_eq!(p.frontier(), Some(13), "undelivered results hold the partition");
        p.jobs.insert(13, Slot::Done(1));
        assert_eq!(p.frontier(), Some(14), "all done: past the last one");
        assert!(p.jobs.is_empty());
    }

    /// A job below the offset recorded for attempt n was started n times.
    #[test]
    fn attempts_count_the_recorded_starts() {
        // Started once up to offset 9, twice up to offset 4.
        let p = Part::new(1, vec![10, 5]);
        assert_eq!(p.attempt(3), 3);
        assert_eq!(p.attempt(4), 3);
        assert_eq!(p.attempt(5), 2);
        assert_eq!(p.attempt(9), 2);
        assert_eq!(p.attempt(10), 1);
        assert_eq!(Part::new(1, Vec::new()).attempt(0), 1);
    }
}
