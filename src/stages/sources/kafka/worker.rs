//! The worker loop: jobs taken from the topic, their attempt numbers read and
//! recorded, up to `parallel` decoded at once as streams, commits as their
//! results are delivered, dead letters for bad jobs, and rebalances.

use std::collections::{HashMap, HashSet, VecDeque};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use crossbeam_channel::Sender;
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer, RebalanceProtocol};
use rdkafka::error::KafkaError;
use rdkafka::message::{BorrowedMessage, Message};
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use rdkafka::{ClientConfig, Offset, TopicPartitionList};
use serde_json::{Value, json};

use super::clients::{GroupContext, GroupEvent, JobMessage, LetterContext};
use super::ledger::{Part, Slot};
use super::{BROKER_WAIT, MAX_ATTEMPTS_READ, started_group};
use crate::frame::InputEnd;
use crate::runtime::InputLog;
use crate::runtime::report::FailedInput;

/// One job taken from the topic.
pub(super) struct Job {
    pub(super) id: Arc<str>,
    pub(super) partition: i32,
    pub(super) offset: i64,
    pub(super) epoch: u64,
    pub(super) path: PathBuf,
    pub(super) size: u64,
    /// The message as it came, for a dead letter.
    pub(super) raw: Vec<u8>,
    pub(super) attempt: u32,
    pub(super) cancel: Arc<AtomicBool>,
}

/// Sent to a decoder: which job, as slot `slot`.
pub(super) struct Started {
    pub(super) slot: usize,
    pub(super) path: PathBuf,
    pub(super) size: u64,
    pub(super) cancel: Arc<AtomicBool>,
}

/// A job's stream ended and every sink closed it.
pub(super) struct Finished {
    pub(super) slot: usize,
    pub(super) end: InputEnd,
    pub(super) flushed: bool,
}

/// The source thread's state while it runs.
pub(super) struct Worker<'a> {
    pub(super) consumer: &'a BaseConsumer<GroupContext>,
    pub(super) group: String,
    /// The client settings, for the clients of the attempt records.
    pub(super) config: &'a ClientConfig,
    pub(super) recorders: std::cell::RefCell<HashMap<String, BaseConsumer>>,
    pub(super) letters: Option<&'a (BaseProducer<LetterContext>, String)>,
    pub(super) topic: &'a str,
    pub(super) worker: &'a str,
    pub(super) base_dir: &'a std::path::Path,
    pub(super) log: Arc<InputLog>,
    pub(super) parts: HashMap<i32, Part>,
    pub(super) epochs: u64,
    pub(super) queued: VecDeque<Job>,
    pub(super) running: HashMap<usize, Job>,
    pub(super) next_slot: usize,
    /// Partitions whose commit is due (a failed commit is retried).
    pub(super) dirty: HashSet<i32>,
    pub(super) last_commit_try: Instant,
    pub(super) paused: bool,
    /// When the group last handed out partitions (none yet: not joined, never idle).
    pub(super) assigned_at: Option<Instant>,
}

impl Worker<'_> {
    /// Handle the group's rebalances noted during the last poll.
    pub(super) fn group_events(&mut self) {
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
    pub(super) fn take_partitions(&mut self, parts: &[i32]) {
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
    pub(super) fn drop_partitions(&mut self, parts: &[i32]) {
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
    pub(super) fn offsets(&self, group: &str, parts: &[i32]) -> HashMap<i32, i64> {
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
    pub(super) fn recorder(&self, group: &str) -> Result<std::cell::Ref<'_, BaseConsumer>, KafkaError> {
        if !self.recorders.borrow().contains_key(group) {
            let mut cc = self.config.clone();
            cc.set("group.id", group);
            let c: BaseConsumer = cc.create()?;
            self.recorders.borrow_mut().insert(group.to_string(), c);
        }
        Ok(std::cell::Ref::map(self.recorders.borrow(), |m| m.get(group).expect("made above")))
    }

    /// Record that the job at `offset` of `partition` starts as attempt `n`; `false` if that failed.
    pub(super) fn record_start(&mut self, partition: i32, offset: i64, n: u32) -> bool {
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
    pub(super) fn current(&self, partition: i32, epoch: u64) -> bool {
        self.parts.get(&partition).is_some_and(|p| p.epoch == epoch)
    }

    pub(super) fn set_slot(&mut self, partition: i32, epoch: u64, offset: i64, slot: Slot) {
        if !self.current(partition, epoch) {
            return;
        }
        if let Some(p) = self.parts.get_mut(&partition) {
            p.jobs.insert(offset, slot);
            self.dirty.insert(partition);
        }
    }

    /// Commit every partition whose frontier or note changed; `false` if a commit failed (retried later).
    pub(super) fn commit(&mut self) -> bool {
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
    pub(super) fn consumed(&mut self, m: &BorrowedMessage<'_>) {
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
    pub(super) fn bad_job(&mut self, job: Job, reason: String) {
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
    pub(super) fn start(&mut self, parallel: usize, to_decoders: &Sender<Started>) {
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
    pub(super) fn finished(&mut self, f: Finished) {
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
    pub(super) fn flow(&mut self, parallel: usize) {
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
