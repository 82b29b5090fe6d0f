//! The Kafka clients' contexts: the group consumer's (rebalance events passed to
//! the worker) and the dead-letter producer's, the job message as read, and the
//! consumer-only properties a producer does not take.

use std::sync::Mutex;

use rdkafka::consumer::{BaseConsumer, ConsumerContext, Rebalance};
use rdkafka::error::KafkaError;
use rdkafka::producer::{DeliveryResult, ProducerContext};
use rdkafka::{ClientContext, TopicPartitionList};
use serde::Deserialize;

/// A job message: `id` and `uri` are required, other fields are kept for dead letters.
#[derive(Debug, Deserialize)]
pub(super) struct JobMessage {
    pub(super) id: String,
    pub(super) uri: String,
}

/// Group events, noted during `poll` and handled after it on the source thread.
pub(super) enum GroupEvent {
    Assign(Vec<i32>),
    Revoke(Vec<i32>),
}

pub(super) struct GroupContext {
    pub(super) topic: String,
    pub(super) events: Mutex<Vec<GroupEvent>>,
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
pub(super) struct LetterContext {
    pub(super) failed: Mutex<Vec<String>>,
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

/// Consumer properties a producer does not take.
pub(super) const CONSUMER_ONLY: &[&str] = &[
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
