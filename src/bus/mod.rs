//! Delivery for the message-bus sinks (Kafka, MQTT): what they share.
//!
//! This module owns the bounded memory buffer of messages sent but not yet
//! acknowledged by the broker, the on-disk [`spool::Spool`] that takes over
//! when that buffer is full (the broker is away) and is replayed in order when
//! it returns or at the next start, and the delivery accounting
//! ([`Delivery`]: delivered, retried, spooled, spool bytes, latency, errors)
//! that the summary, `--report` and `/metrics` read.
//!
//! One FIFO: every message gets a token in the order it was written. While
//! the spool holds anything, new messages go behind it on disk, so the broker
//! sees them in that order (the transports keep their own order: Kafka's
//! idempotent producer, MQTT's resend after reconnecting). A message is
//! *delivered* when the broker acknowledged it (Kafka delivery report, MQTT
//! PUBACK at QoS 1); until then the [`Outbox`] keeps a copy, and what is left
//! at exit is written to the spool.
//!
//! A client that is connected but acknowledges nothing for `stall_timeout`
//! (a broker that lost its producer state when it restarted keeps refusing
//! the idempotent producer's sequence) is started again, and every message
//! in flight is handed to the new client in order: delivered at least once.

pub mod identity;
pub mod spool;

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crossbeam_channel::Receiver;
use hdrhistogram::Histogram;

pub use identity::RunId;
pub use spool::{Spool, SpoolError};

/// One message for a broker: the JSON body, its topic, key (the stream) and
/// id ([`identity`]: `RUN/STREAM/SEQ`; kept in the spool with the message).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Message {
    pub topic: String,
    pub key: String,
    pub body: Vec<u8>,
    /// Empty for a message spooled before messages had ids.
    pub id: String,
}

/// A bus sink's live delivery counters (shared with the runtime's stats).
#[derive(Debug)]
pub struct Delivery {
    /// Messages the broker acknowledged.
    pub delivered: AtomicU64,
    /// Messages sent again (after a reconnect, or replayed from the spool).
    pub retried: AtomicU64,
    /// Messages of this run written to the spool (while the broker was
    /// away, and those still only in memory at exit), each counted once.
    pub spooled: AtomicU64,
    /// Bytes in the spool not yet acknowledged (a gauge).
    pub spool_bytes: AtomicU64,
    /// Messages not spooled because the spool was full (dropped, counted).
    pub dropped: AtomicU64,
    /// Messages the broker refused for good, and transport errors.
    pub errors: AtomicU64,
    /// Messages still undelivered when the sink closed (left in the spool).
    pub left_in_spool: AtomicU64,
    /// Whether the broker is reachable now (as far as the client knows).
    pub up: AtomicBool,
    /// From the write of a message to its acknowledgement, µs.
    pub latency: Mutex<Histogram<u64>>,
}

impl Default for Delivery {
    fn default() -> Self {
        Delivery {
            delivered: AtomicU64::new(0),
            retried: AtomicU64::new(0),
            spooled: AtomicU64::new(0),
            spool_bytes: AtomicU64::new(0),
            dropped: AtomicU64::new(0),
            errors: AtomicU64::new(0),
            left_in_spool: AtomicU64::new(0),
            up: AtomicBool::new(true),
            latency: Mutex::new(Histogram::new_with_bounds(1, 3_600_000_000, 3).expect("valid histogram bounds")),
        }
    }
}

/// A snapshot of [`Delivery`] for the report.
#[derive(Debug, Clone, Copy, Default, PartialEq, serde::Serialize)]
pub struct DeliveryReport {
    pub delivered: u64,
    pub retried: u64,
    pub spooled: u64,
    pub spool_bytes: u64,
    pub dropped: u64,
    pub errors: u64,
    pub left_in_spool: u64,
    pub latency_p50_ms: f64,
    pub latency_p99_ms: f64,
}

impl Delivery {
    pub fn report(&self) -> DeliveryReport {
        let g = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let (p50, p99) = self
            .latency
            .lock()
            .map(
                |h| if h.is_empty() { (0.0, 0.0) } else { (h.value_at_quantile(0.5) as f64 / 1e3, h.value_at_quantile(0.99) as f64 / 1e3) },
            )
            .unwrap_or_default();
        DeliveryReport {
            delivered: g(&self.delivered),
            retried: g(&self.retried),
            spooled: g(&self.spooled),
            spool_bytes: g(&self.spool_bytes),
            dropped: g(&self.dropped),
            errors: g(&self.errors),
            left_in_spool: g(&self.left_in_spool),
            latency_p50_ms: p50,
            latency_p99_ms: p99,
        }
    }
}

/// What a transport tells the outbox, from its client's threads.
#[derive(Debug)]
pub enum Note {
    /// The broker acknowledged the message with this token.
    Acked(u64),
    /// The broker refused it for good (not retried).
    Failed(u64, String),
    /// The broker became unreachable.
    Down(String),
    /// The message with this token is being sent again (a reconnect).
    Resent(u64),
    /// Whether the client holds a working connection to a broker now.
    Link(bool),
}

/// A client that delivers messages and keeps retrying each one (in order)
/// until the broker acknowledges it; acknowledgements come back as [`Note`]s.
pub trait Transport: Send {
    /// Hand one message over; `Err` only when the client cannot take it now.
    fn submit(&mut self, token: u64, msg: &Arc<Message>) -> Result<(), String>;
    /// Stop: nothing more is sent or acknowledged after this.
    fn close(&mut self);
    /// Replace the client by a new one (what was handed over and not
    /// acknowledged is forgotten; the outbox submits it again). `Ok(false)`:
    /// this transport cannot.
    fn restart(&mut self) -> Result<bool, String> {
        Ok(false)
    }
}

/// How an [`Outbox`] is bounded.
#[derive(Debug, Clone)]
pub struct Limits {
    /// Messages sent and not yet acknowledged, in memory.
    pub buffer_messages: usize,
    /// Largest spool (bytes); when full, new messages are dropped (counted).
    pub spool_max_bytes: u64,
    /// How long `end_stream` and `finish` wait for acknowledgements.
    pub flush_timeout: Duration,
    /// Connected, messages in flight, and no acknowledgement for this long:
    /// the client is started again (`None`: never).
    pub stall_timeout: Option<Duration>,
}

/// A message handed to the transport, not yet acknowledged.
struct InFlight {
    msg: Arc<Message>,
    at: Instant,
}

/// The delivery machinery of one bus sink: see the module docs.
pub struct Outbox<T: Transport> {
    name: String,
    transport: T,
    notes: Receiver<Note>,
    inflight: BTreeMap<u64, InFlight>,
    /// Records taken from the spool, in file order: (token, end offset).
    from_spool: VecDeque<(u64, u64)>,
    spool: Spool,
    next_token: u64,
    /// The first token of this run (lower ones were left by an earlier run).
    first_token: u64,
    /// Messages of each stream not yet acknowledged (in flight or spooled).
    outstanding: HashMap<String, u64>,
    limits: Limits,
    stats: Arc<Delivery>,
    /// A flush timed out and no acknowledgement came since: later flushes do not wait again.
    stalled: bool,
    closed: bool,
    /// The client says it is connected (its last [`Note::Link`]).
    linked: bool,
    /// The last acknowledgement, restart, or the moment something went in flight with nothing before it.
    progress_at: Instant,
}

impl<T: Transport> Outbox<T> {
    /// Open the spool at `spool_path` (replaying what a previous run left
    /// there before anything new) and start delivering through `transport`.
    pub fn open(
        name: &str,
        transport: T,
        notes: Receiver<Note>,
        spool_path: &Path,
        limits: Limits,
        stats: Arc<Delivery>,
    ) -> Result<Self, SpoolError> {
        let (spool, pending) = Spool::open(spool_path, limits.spool_max_bytes, 64, Duration::from_millis(200))?;
        if spool.torn_bytes > 0 {
            tracing::warn!("sink `{name}`: spool {}: a torn last record ({} bytes) was cut off", spool_path.display(), spool.torn_bytes);
        }
        let next_token = pending.iter().map(|r| r.token + 1).max().unwrap_or(0);
        let mut ob = Outbox {
            name: name.to_string(),
            transport,
            notes,
            inflight: BTreeMap::new(),
            from_spool: VecDeque::new(),
            spool,
            next_token,
            first_token: next_token,
            outstanding: HashMap::new(),
            limits,
            stats,
            stalled: false,
            closed: false,
            linked: false,
            progress_at: Instant::now(),
        };
        if !pending.is_empty() {
            tracing::info!(
                "sink `{name}`: replaying {} message(s) left in the spool {} by an earlier run",
                pending.len(),
                spool_path.display()
            );
        }
        // The previous run's records are counted, then sent first, in order
        // (read back from the file as the memory buffer has room).
        for r in &pending {
            *ob.outstanding.entry(r.msg.key.clone()).or_default() += 1;
        }
        drop(pending);
        ob.after_notes();
        ob.gauge();
        Ok(ob)
    }

    pub fn stats(&self) -> &Arc<Delivery> {
        &self.stats
    }

    pub fn spool_path(&self) -> &Path {
        self.spool.path()
    }

    fn gauge(&self) {
        self.stats.spool_bytes.store(self.spool.bytes(), Ordering::Relaxed);
    }

    fn submit(&mut self, token: u64, msg: Arc<Message>) {
        if let Err(e) = self.transport.submit(token, &msg) {
            // The client's own queue is full: it stays in flight in our copy, sent again at the next reconnect.
            tracing::debug!("sink `{}`: {e}", self.name);
        }
        if self.inflight.is_empty() {
            self.progress_at = Instant::now();
        }
        self.inflight.insert(token, InFlight { msg, at: Instant::now() });
    }

    /// Queue one message (in order after everything before it).
    pub fn push(&mut self, msg: Message) -> Result<(), String> {
        self.pump();
        let token = self.next_token;
        self.next_token += 1;
        let key = msg.key.clone();
        if self.spool.has_unread() || self.inflight.len() >= self.limits.buffer_messages {
            match self.spool.append(token, &msg) {
                Ok(()) => {
                    let n = self.stats.spooled.fetch_add(1, Ordering::Relaxed) + 1;
                    if n == 1 || n.is_power_of_two() {
                        tracing::warn!(
                            "sink `{}`: the broker is not keeping up or is unreachable: {n} message(s) spooled to {} so far",
                            self.name,
                            self.spool.path().display()
                        );
                    }
                }
                Err(SpoolError::Full(p)) => {
                    let n = self.stats.dropped.fetch_add(1, Ordering::Relaxed) + 1;
                    if n == 1 || n.is_power_of_two() {
                        tracing::error!("sink `{}`: spool {p} is full (spool_max_bytes): {n} message(s) dropped so far", self.name);
                    }
                    return Ok(());
                }
                Err(e) => {
                    self.stats.errors.fetch_add(1, Ordering::Relaxed);
                    return Err(e.to_string());
                }
            }
        } else {
            self.submit(token, Arc::new(msg));
        }
        *self.outstanding.entry(key).or_default() += 1;
        self.gauge();
        Ok(())
    }

    fn settle(&mut self, token: u64) -> bool {
        let Some(f) = self.inflight.remove(&token) else { return false };
        if let Some(n) = self.outstanding.get_mut(&f.msg.key) {
            *n = n.saturating_sub(1);
        }
        true
    }

    fn note(&mut self, n: Note) {
        match n {
            Note::Acked(token) => {
                if let Some(f) = self.inflight.get(&token) {
                    let us = f.at.elapsed().as_micros() as u64;
                    if let Ok(mut h) = self.stats.latency.lock() {
                        let _ = h.record(us.max(1));
                    }
                }
                self.progress_at = Instant::now();
                if self.settle(token) {
                    self.stats.delivered.fetch_add(1, Ordering::Relaxed);
                    self.stalled = false;
                    if !self.stats.up.swap(true, Ordering::Relaxed) {
                        tracing::warn!("sink `{}`: the broker is reachable again; delivering what waited", self.name);
                    }
                }
            }
            Note::Failed(token, e) => {
                if self.settle(token) {
                    let n = self.stats.errors.fetch_add(1, Ordering::Relaxed) + 1;
                    if n == 1 || n.is_power_of_two() {
                        tracing::error!("sink `{}`: the broker refused a message: {e} ({n} so far)", self.name);
                    }
                }
            }
            Note::Down(reason) => {
                self.linked = false;
                if self.stats.up.swap(false, Ordering::Relaxed) {
                    tracing::warn!(
                        "sink `{}`: the broker is unreachable ({reason}); messages wait in memory, then in the spool {}",
                        self.name,
                        self.spool.path().display()
                    );
                }
            }
            Note::Resent(_) => {
                self.stats.retried.fetch_add(1, Ordering::Relaxed);
            }
            Note::Link(up) => {
                if up && !self.linked {
                    // Connected again: the wait for an acknowledgement starts now.
                    self.progress_at = Instant::now();
                }
                self.linked = up;
            }
        }
    }

    /// Connected, messages in flight, nothing acknowledged for `stall_timeout`:
    /// start the client again and hand it everything in flight, in order.
    fn unstick(&mut self) {
        let Some(after) = self.limits.stall_timeout else { return };
        if self.closed || !self.linked || self.inflight.is_empty() || self.progress_at.elapsed() < after {
            return;
        }
        self.progress_at = Instant::now();
        match self.transport.restart() {
            Ok(false) => {}
            Ok(true) => {
                let again: Vec<(u64, Arc<Message>)> = self.inflight.iter().map(|(t, f)| (*t, f.msg.clone())).collect();
                tracing::warn!(
                    "sink `{}`: the broker is connected but acknowledged nothing for {} ms: the client was started again, and the {} message(s) in flight are sent again, in order",
                    self.name,
                    after.as_millis(),
                    again.len()
                );
                self.stats.retried.fetch_add(again.len() as u64, Ordering::Relaxed);
                for (token, msg) in again {
                    if let Err(e) = self.transport.submit(token, &msg) {
                        tracing::debug!("sink `{}`: {e}", self.name);
                    }
                }
            }
            Err(e) => tracing::warn!("sink `{}`: starting the client again: {e}", self.name),
        }
    }

    /// Take in what the transport reported, acknowledge delivered spool
    /// records, and send more from the spool while the memory buffer has room.
    pub fn pump(&mut self) {
        while let Ok(n) = self.notes.try_recv() {
            self.note(n);
        }
        self.unstick();
        self.after_notes();
    }

    fn after_notes(&mut self) {
        let mut acked_to = None;
        while let Some(&(token, end)) = self.from_spool.front() {
            if self.inflight.contains_key(&token) {
                break;
            }
            acked_to = Some(end);
            self.from_spool.pop_front();
        }
        if let Some(end) = acked_to
            && let Err(e) = self.spool.acknowledge(end)
        {
            tracing::warn!("sink `{}`: {e}", self.name);
        }
        if !self.closed && self.spool.has_unread() && self.inflight.len() < self.limits.buffer_messages {
            let room = self.limits.buffer_messages - self.inflight.len();
            match self.spool.next_batch(room) {
                Ok(recs) => {
                    for r in recs {
                        if r.token < self.first_token {
                            // Left by an earlier run: sent again.
                            self.stats.retried.fetch_add(1, Ordering::Relaxed);
                        }
                        self.from_spool.push_back((r.token, r.end));
                        self.submit(r.token, r.msg);
                    }
                }
                Err(e) => tracing::warn!("sink `{}`: {e}", self.name),
            }
        }
        if let Err(e) = self.spool.sync_if_due() {
            tracing::warn!("sink `{}`: {e}", self.name);
        }
        self.gauge();
    }

    /// Messages not yet acknowledged: of `stream`, or all.
    pub fn pending(&self, stream: Option<&str>) -> u64 {
        match stream {
            Some(s) => self.outstanding.get(s).copied().unwrap_or(0),
            None => self.outstanding.values().sum(),
        }
    }

    /// Wait until every message (of `stream`, or all) is acknowledged, at most `flush_timeout`.
    pub fn flush(&mut self, stream: Option<&str>) -> Result<(), String> {
        let t0 = Instant::now();
        loop {
            self.pump();
            let left = self.pending(stream);
            if left == 0 {
                return Ok(());
            }
            let waited = t0.elapsed();
            if self.stalled || waited >= self.limits.flush_timeout {
                self.stalled = true;
                let of = stream.map(|s| format!(" of stream `{s}`")).unwrap_or_default();
                return Err(format!(
                    "{left} message(s){of} not acknowledged by the broker within flush_timeout_ms = {} (kept for delivery: in the spool {} at exit)",
                    self.limits.flush_timeout.as_millis(),
                    self.spool.path().display()
                ));
            }
            let wait = (self.limits.flush_timeout - waited).min(Duration::from_millis(50));
            if let Ok(n) = self.notes.recv_timeout(wait) {
                self.note(n);
            }
        }
    }

    /// Flush (bounded by `flush_timeout`), stop the transport, and write
    /// everything still undelivered to the spool, in order. Returns how many
    /// messages were left there.
    pub fn close(&mut self) -> Result<u64, String> {
        if self.closed {
            return Ok(self.stats.left_in_spool.load(Ordering::Relaxed));
        }
        let flushed = self.flush(None);
        self.closed = true;
        self.transport.close();
        // Late acknowledgements that came before the client stopped.
        while let Ok(n) = self.notes.try_recv() {
            if matches!(n, Note::Acked(_) | Note::Failed(..)) {
                self.note(n);
            }
        }
        self.after_notes();
        if flushed.is_ok() && self.inflight.is_empty() && !self.spool.has_unread() {
            self.spool.sync().map_err(|e| e.to_string())?;
            self.gauge();
            return Ok(0);
        }
        // In flight (memory and replayed spool records) and spooled but not
        // yet sent: all of it, in token order, becomes the new spool.
        let mut left: Vec<(u64, Arc<Message>)> = self.inflight.iter().map(|(t, f)| (*t, f.msg.clone())).collect();
        // Those only in memory until now are spooled now (the others are in the file already).
        let on_disk: std::collections::HashSet<u64> = self.from_spool.iter().map(|(t, _)| *t).collect();
        let newly = left.iter().filter(|(t, _)| !on_disk.contains(t)).count() as u64;
        loop {
            let recs = self.spool.next_batch(4096).map_err(|e| e.to_string())?;
            if recs.is_empty() {
                break;
            }
            left.extend(recs.into_iter().map(|r| (r.token, r.msg)));
        }
        left.sort_by_key(|(t, _)| *t);
        left.dedup_by_key(|(t, _)| *t);
        self.spool.rewrite(&left).map_err(|e| e.to_string())?;
        self.stats.spooled.fetch_add(newly, Ordering::Relaxed);
        self.inflight.clear();
        self.from_spool.clear();
        let n = left.len() as u64;
        self.stats.left_in_spool.store(n, Ordering::Relaxed);
        self.gauge();
        if n > 0 {
            tracing::warn!(
                "sink `{}`: {n} message(s) not delivered before the flush deadline: kept in the spool {} (sent first at the next start)",
                self.name,
                self.spool.path().display()
            );
        }
        Ok(n)
    }
}

/// `host:port`, `mqtt://host[:port]` or `mqtts://host[:port]` → (host, port, TLS).
pub fn parse_mqtt_broker(s: &str) -> Result<(String, u16, bool), String> {
    let (rest, tls) = match s.split_once("://") {
        Some(("mqtt" | "tcp", r)) => (r, false),
        Some(("mqtts" | "ssl", r)) => (r, true),
        Some((scheme, _)) => return Err(format!("unknown scheme `{scheme}://` (mqtt:// or mqtts://)")),
        None => (s, false),
    };
    let rest = rest.trim_end_matches('/');
    let rest = rest.rsplit_once('@').map_or(rest, |(_, h)| h);
    let (host, port) = match rest.rsplit_once(':') {
        Some((h, p)) => (h, p.parse::<u16>().map_err(|_| format!("bad port `{p}`"))?),
        None => (rest, if tls { 8883 } else { 1883 }),
    };
    if host.is_empty() {
        return Err("no host".into());
    }
    Ok((host.trim_matches(|c| c == '[' || c == ']').to_string(), port, tls))
}

/// The bus sinks' settings that can be checked before the run (`validate`
/// included; the broker itself is not contacted): the idempotent producer
/// with `acks` other than `all`, a Kafka topic with characters Kafka refuses,
/// an MQTT broker address that does not parse, a prefix with `+` or `#`.
pub fn check_settings(cfg: &crate::config::PipelineConfig, node: &crate::config::NodeConfig) -> Vec<crate::config::Diagnostic> {
    use crate::config::{KafkaAcks, NodeKind};
    let mut d = Vec::new();
    match &node.kind {
        NodeKind::Kafka(c) => {
            if c.idempotent && c.acks != KafkaAcks::All {
                d.push(
                    cfg.diag(node.kind_span.clone(), format!("sink `{}`: the idempotent producer needs acks = \"all\"", node.name))
                        .with_help("leave `acks` out (all), or set `idempotent = false`"),
                );
            }
            if let Ok(t) = cfg.expand(&c.topic) {
                let bare = t.replace("{stream}", "");
                if t.is_empty() || t.len() > 249 || !bare.chars().all(|ch| ch.is_ascii_alphanumeric() || "._-".contains(ch)) {
                    d.push(
                        cfg.diag(c.topic.span(), format!("sink `{}`: `{t}` is not a Kafka topic name", node.name))
                            .with_help("use letters, digits, `.`, `_` and `-` (and `{stream}`), at most 249 characters"),
                    );
                }
            }
        }
        NodeKind::Mqtt(c) => {
            if let Ok(b) = cfg.expand(&c.broker)
                && let Err(e) = parse_mqtt_broker(&b)
            {
                d.push(
                    cfg.diag(c.broker.span(), format!("sink `{}`: broker `{}`: {e}", node.name, crate::config::mask_credentials(&b)))
                        .with_help("write `host:port`, `mqtt://host:port` or `mqtts://host:port`"),
                );
            }
            if c.prefix.get_ref().contains(['+', '#']) {
                d.push(cfg.diag(c.prefix.span(), format!("sink `{}`: an MQTT topic prefix cannot hold `+` or `#`", node.name)));
            }
        }
        _ => {}
    }
    d
}

/// The spool file of sink `sink`: `SPOOL_DIR/PIPELINE-SINK.spool`, the
/// folder `spool_dir` (relative to the pipeline file) or `spool/` beside the
/// pipeline file. Created now, so an unwritable one fails before the run.
pub fn spool_path(
    cfg: &crate::config::PipelineConfig,
    sink: &str,
    spool_dir: Option<&toml::Spanned<String>>,
) -> Result<std::path::PathBuf, crate::config::Diagnostic> {
    let dir = match spool_dir {
        Some(d) => cfg.resolve_path(d)?,
        None => cfg.base_dir.join("spool"),
    };
    std::fs::create_dir_all(&dir).map_err(|e| {
        let msg = format!("cannot create the spool folder {}: {e}", dir.display());
        match spool_dir {
            Some(d) => cfg.diag(d.span(), msg),
            None => crate::config::Diagnostic::whole_file(&cfg.file, msg).with_help("set `spool_dir` to a writable folder"),
        }
    })?;
    let name = crate::config::paths::stream_file_name(&format!("{}-{sink}", cfg.name()));
    Ok(dir.join(format!("{name}.spool")))
}

#[cfg(test)]
mod tests;
