//! `kind = "kafka"`: one message per frame (the ndjson sink's JSON, with the
//! run's id) and per stream event, in order, keyed by stream, with the
//! headers `run` and `id` (`RUN/STREAM/SEQ`), through librdkafka's idempotent
//! producer (`acks = all`, at most 5 requests in flight: order kept across
//! retries). librdkafka retries each message until the broker has it
//! (`message.timeout.ms = 0`); the [`Outbox`] keeps a copy until its delivery
//! report, spools what does not fit in memory while the broker is away, and
//! spools what is still undelivered at exit. A producer that is connected
//! but gets no acknowledgement for `stall_timeout_ms` (a broker that forgot
//! its producer ids when it restarted) is made again and sent what is in
//! flight, in order. librdkafka's own log lines about connections (what the
//! spool handles) are logged at INFO, not ERROR.

use std::sync::Arc;
use std::time::Duration;

use crossbeam_channel::Sender;
use rdkafka::ClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::config::RDKafkaLogLevel;
use rdkafka::error::KafkaError;
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::{BaseRecord, DeliveryResult, ProducerContext, ThreadedProducer};
use rdkafka::statistics::Statistics;
use rdkafka::types::RDKafkaErrorCode;

use super::bus::{BusSink, Topics, open_outbox};
use crate::bus::{Limits, Message, Note, RunId, Transport};
use crate::config::{Diagnostic, KafkaAcks, KafkaCompression, KafkaSinkConfig, NodeConfig, PipelineConfig, mask_credentials};
use crate::stages::Body;
use crate::stages::build::{Build, BuildCtx};

/// Delivery reports and client errors, from librdkafka's threads to the outbox.
struct Reports {
    notes: Sender<Note>,
}

impl ClientContext for Reports {
    fn error(&self, error: KafkaError, reason: &str) {
        let reason = mask_credentials(reason).into_owned();
        match error.rdkafka_error_code() {
            // Away, or refusing these settings (TLS, SASL): nothing gets through.
            Some(
                RDKafkaErrorCode::AllBrokersDown
                | RDKafkaErrorCode::BrokerTransportFailure
                | RDKafkaErrorCode::SSL
                | RDKafkaErrorCode::Authentication
                | RDKafkaErrorCode::SaslAuthenticationFailed,
            ) => {
                let _ = self.notes.send(Note::Down(reason));
            }
            _ => tracing::debug!("librdkafka: {error}: {reason}"),
        }
    }

    /// librdkafka's own lines. A broker away, refusing a connection or
    /// dropping one is what the outbox handles (the messages wait and spool;
    /// it says so once, as a warning): librdkafka's lines about it, logged at
    /// its level `Error` on every attempt, are INFO here. A message refused
    /// for good is an ERROR from the outbox (its delivery report).
    fn log(&self, level: RDKafkaLogLevel, fac: &str, log_message: &str) {
        let text = mask_credentials(log_message);
        match level {
            RDKafkaLogLevel::Emerg | RDKafkaLogLevel::Alert | RDKafkaLogLevel::Critical => {
                tracing::error!(target: "librdkafka", "librdkafka: {fac} {text}")
            }
            RDKafkaLogLevel::Error | RDKafkaLogLevel::Warning | RDKafkaLogLevel::Notice | RDKafkaLogLevel::Info => {
                tracing::info!(target: "librdkafka", "librdkafka: {fac} {text}")
            }
            RDKafkaLogLevel::Debug => tracing::debug!(target: "librdkafka", "librdkafka: {fac} {text}"),
        }
    }

    /// librdkafka's statistics (every second): whether a broker connection is up.
    fn stats(&self, s: Statistics) {
        let up = s.brokers.values().any(|b| b.state == "UP");
        let _ = self.notes.send(Note::Link(up));
    }
}

impl ProducerContext for Reports {
    type DeliveryOpaque = Box<u64>;

    fn delivery(&self, result: &DeliveryResult<'_>, token: Box<u64>) {
        let note = match result {
            Ok(_) => Note::Acked(*token),
            // Taken back when the producer stops: the outbox still has it (it goes to the spool).
            Err((KafkaError::MessageProduction(RDKafkaErrorCode::PurgeQueue | RDKafkaErrorCode::PurgeInflight), _)) => return,
            Err((e, _)) => Note::Failed(*token, e.to_string()),
        };
        let _ = self.notes.send(note);
    }
}

/// The Kafka client of a [`KafkaSink`]: librdkafka's producer, made again on a stall.
pub struct Producer {
    producer: Option<ThreadedProducer<Reports>>,
    /// What a new producer is made from (a restart).
    config: ClientConfig,
    notes: Sender<Note>,
}

impl Producer {
    fn create(config: &ClientConfig, notes: Sender<Note>) -> Result<ThreadedProducer<Reports>, KafkaError> {
        config.create_with_context(Reports { notes })
    }
}

impl Transport for Producer {
    fn submit(&mut self, token: u64, msg: &Arc<Message>) -> Result<(), String> {
        let Some(p) = &self.producer else { return Err("the producer is closed".into()) };
        let mut rec = BaseRecord::with_opaque_to(&msg.topic, Box::new(token)).key(msg.key.as_bytes()).payload(&msg.body);
        if !msg.id.is_empty() {
            let run = crate::bus::identity::run_of(&msg.id);
            rec = rec.headers(
                OwnedHeaders::new_with_capacity(2)
                    .insert(Header { key: "run", value: Some(run) })
                    .insert(Header { key: "id", value: Some(msg.id.as_str()) }),
            );
        }
        p.send(rec).map_err(|(e, _)| format!("producing to {}: {e}", msg.topic))
    }

    fn close(&mut self) {
        // Dropping purges what is still queued (without delivery reports to wait for) and stops its threads.
        self.producer.take();
    }

    fn restart(&mut self) -> Result<bool, String> {
        self.producer.take();
        let p = Producer::create(&self.config, self.notes.clone()).map_err(|e| mask_credentials(&e.to_string()).into_owned())?;
        self.producer = Some(p);
        Ok(true)
    }
}

/// The librdkafka properties for `c` (secrets included: never printed).
pub fn client_config(cfg: &PipelineConfig, node: &NodeConfig, c: &KafkaSinkConfig, buffer: usize) -> Result<ClientConfig, Diagnostic> {
    let mut cc = ClientConfig::new();
    cc.set("bootstrap.servers", cfg.expand(&c.brokers)?)
        .set(
            "acks",
            match c.acks {
                KafkaAcks::All => "all",
                KafkaAcks::Leader => "1",
                KafkaAcks::None => "0",
            },
        )
        .set("enable.idempotence", if c.idempotent { "true" } else { "false" })
        .set("max.in.flight.requests.per.connection", "5")
        // Retried until the broker has it: an unreachable broker delays, never drops.
        .set("message.timeout.ms", "0")
        .set(
            "compression.type",
            match c.compression {
                KafkaCompression::None => "none",
                KafkaCompression::Gzip => "gzip",
                KafkaCompression::Snappy => "snappy",
                KafkaCompression::Lz4 => "lz4",
                KafkaCompression::Zstd => "zstd",
            },
        )
        .set("linger.ms", c.linger_ms.to_string())
        .set("queue.buffering.max.messages", (buffer + 1000).min(10_000_000).to_string())
        .set("reconnect.backoff.ms", "100")
        .set("reconnect.backoff.max.ms", "1000")
        // Connection states for the stall check (`Note::Link`).
        .set("statistics.interval.ms", "1000")
        .set("log_level", "3");
    if let Some(b) = c.batch_size {
        cc.set("batch.size", b.to_string());
    }
    if c.idempotent && c.acks != KafkaAcks::All {
        return Err(cfg
            .diag(node.kind_span.clone(), format!("sink `{}`: the idempotent producer needs acks = \"all\"", node.name))
            .with_help("leave `acks` out (all), or set `idempotent = false`"));
    }
    let tls = c.tls.is_some();
    if let Some(t) = &c.tls {
        for (key, v) in [("ssl.ca.location", &t.ca), ("ssl.certificate.location", &t.cert), ("ssl.key.location", &t.key)] {
            if let Some(v) = v {
                let p = cfg.resolve_path(v)?;
                if !p.is_file() {
                    return Err(cfg.diag(v.span(), format!("no such file: {}", p.display())));
                }
                cc.set(key, p.display().to_string());
            }
        }
    }
    cc.set(
        "security.protocol",
        match (tls, c.sasl.is_some()) {
            (false, false) => "plaintext",
            (true, false) => "ssl",
            (false, true) => "sasl_plaintext",
            (true, true) => "sasl_ssl",
        },
    );
    if let Some(s) = &c.sasl {
        cc.set("sasl.mechanism", cfg.expand(&s.mechanism)?)
            .set("sasl.username", cfg.expand(&s.username)?)
            .set("sasl.password", cfg.expand(&s.password)?);
    }
    for (k, v) in &c.client {
        cc.set(k, cfg.expand(v)?);
    }
    Ok(cc)
}

/// `kind = "kafka"`: the bus sink over librdkafka's producer.
pub type KafkaSink = BusSink<Producer>;

impl KafkaSink {
    /// Settings are checked here; the broker is not contacted (a broker down
    /// at start only delays delivery: messages wait and spool).
    pub fn build(cfg: &PipelineConfig, node: &NodeConfig, c: &KafkaSinkConfig, run: &RunId) -> Result<Self, Diagnostic> {
        let cc = client_config(cfg, node, c, c.buffer_messages.max(1))?;
        let (tx, rx) = crossbeam_channel::unbounded();
        let producer = Producer::create(&cc, tx.clone()).map_err(|e| {
            let text = mask_credentials(&e.to_string()).into_owned();
            // A property librdkafka refused: point at it when it is one of `[client]`.
            let span = c.client.iter().find(|(k, _)| text.contains(k.as_str())).map(|(_, v)| v.span()).unwrap_or(node.kind_span.clone());
            cfg.diag(span, format!("sink `{}`: {text}", node.name))
        })?;
        let limits = Limits {
            buffer_messages: c.buffer_messages.max(1),
            spool_max_bytes: c.spool_max_bytes,
            flush_timeout: Duration::from_millis(c.flush_timeout_ms),
            stall_timeout: (c.stall_timeout_ms > 0).then(|| Duration::from_millis(c.stall_timeout_ms)),
        };
        let transport = Producer { producer: Some(producer), config: cc, notes: tx };
        let outbox = open_outbox(cfg, node, transport, rx, c.spool_dir.as_ref(), limits)?;
        let topic = cfg.expand(&c.topic)?;
        let brokers = mask_credentials(&cfg.expand(&c.brokers)?).into_owned();
        let target = format!("Kafka to {brokers} topic {topic}");
        Ok(BusSink::new(node, outbox, run, target, Topics::Template(topic), c.only_with_results))
    }
}

impl Build for KafkaSinkConfig {
    fn build(&self, cx: &BuildCtx<'_>) -> Result<Body, Diagnostic> {
        KafkaSink::build(cx.cfg, cx.node, self, cx.run).map(|s| Body::Sink(Box::new(s)))
    }
}
