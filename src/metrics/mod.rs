//! Prometheus metrics and health checks for a running pipeline.
//!
//! Nothing here keeps numbers of its own: at each scrape, [`Metrics`] reads the
//! same counters the progress bar and the end-of-run summary read (each node's
//! [`NodeStats`] and the pipeline's [`Accounting`]), so the endpoint and the
//! summary cannot disagree. [`server::MetricsServer`] serves it over HTTP.

pub mod gpu;
pub mod process;
pub mod server;

use std::fmt;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use hdrhistogram::Histogram;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric, NoLabelSet};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::registry::{Registry, Unit};

use crate::config::Role;
use crate::frame::Accounting;
use crate::runtime::{NodeStats, Pipeline, Shutdown};

pub use server::{MetricsError, MetricsServer};

/// Upper bounds (seconds) of the latency histogram buckets; `+Inf` follows.
pub const LATENCY_BUCKETS: [f64; 16] =
    [0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0];

/// What the endpoints report on: nothing but the build until a pipeline is watched.
#[derive(Debug, Default)]
pub struct Metrics {
    watched: OnceLock<Watched>,
    /// Streams added at run time (`infer-stream serve`), read at each scrape.
    added: OnceLock<AddedStreams>,
}

/// Where the counters of the streams added at run time are read (the service's control handle).
pub struct AddedStreams(pub Box<dyn Fn() -> Vec<Arc<NodeStats>> + Send + Sync>);

impl fmt::Debug for AddedStreams {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("AddedStreams")
    }
}

/// A built pipeline's live counters.
#[derive(Debug)]
struct Watched {
    pipeline: String,
    nodes: Vec<Arc<NodeStats>>,
    /// (node, execution provider in use)
    providers: Vec<(String, String)>,
    acct: Arc<Accounting>,
    shutdown: Arc<Shutdown>,
}

impl Metrics {
    pub fn new() -> Arc<Self> {
        Arc::new(Metrics::default())
    }

    /// Report on `pipeline`, built (models loaded) and about to run with `acct` and `shutdown`.
    pub fn watch(&self, pipeline: &Pipeline, acct: Arc<Accounting>, shutdown: Arc<Shutdown>) {
        // The summary writes `cpu (fallback from cuda)`; the label is the provider in use.
        let providers = pipeline
            .nodes
            .iter()
            .filter_map(|n| {
                let p = n.provider.as_deref()?;
                Some((n.name.to_string(), p.split_once(" (").map_or(p, |(name, _)| name).to_string()))
            })
            .collect();
        self.watch_stats(pipeline.name.clone(), pipeline.stats().to_vec(), providers, acct, shutdown);
    }

    /// [`Metrics::watch`] from the parts: the pipeline's name, its nodes' stats,
    /// (node, provider) pairs, its accounting and shutdown. Only the first call counts.
    pub fn watch_stats(
        &self,
        pipeline: String,
        nodes: Vec<Arc<NodeStats>>,
        providers: Vec<(String, String)>,
        acct: Arc<Accounting>,
        shutdown: Arc<Shutdown>,
    ) {
        let _ = self.watched.set(Watched { pipeline, nodes, providers, acct, shutdown });
    }

    /// Report on the streams added at run time too: `streams` lists their
    /// counters now (each named by its stream id). Only the first call counts.
    pub fn watch_added(&self, streams: impl Fn() -> Vec<Arc<NodeStats>> + Send + Sync + 'static) {
        let _ = self.added.set(AddedStreams(Box::new(streams)));
    }

    /// `Ok` once the pipeline is built (models loaded), every source has
    /// produced a frame or finished, no source's stream is lost now (a
    /// camera reconnecting) and none failed for good (required ones);
    /// otherwise why not, naming the first stream at fault.
    pub fn readiness(&self) -> Result<(), String> {
        let Some(w) = self.watched.get() else {
            return Err("not ready: building the pipeline (opening sources, loading models)".into());
        };
        if w.shutdown.stopping() {
            return Err("not ready: stopping (draining frames in flight)".into());
        }
        // A template of added streams has no stream of its own: its streams' readiness is the API's.
        for s in w.nodes.iter().filter(|s| s.role == Role::Source && !s.dynamic.load(Ordering::Relaxed)) {
            match stream_state(s) {
                // A source that is not required (a request source: frames only when asked) is ready without one.
                StreamState::Waiting if s.required.load(Ordering::Relaxed) => {
                    return Err(format!("not ready: source `{}` has not produced a frame yet", s.name));
                }
                StreamState::Waiting => {}
                StreamState::Lost { secs, reason } if s.required.load(Ordering::Relaxed) => {
                    return Err(format!("not ready: stream `{}` is lost ({reason}) for {secs:.1} s, reconnecting", s.name));
                }
                StreamState::Lost { .. } => {}
                StreamState::Failed(reason) if s.required.load(Ordering::Relaxed) => {
                    return Err(format!("not ready: source `{}` failed: {reason}", s.name));
                }
                StreamState::Streaming | StreamState::Finished | StreamState::Failed(_) => {}
            }
        }
        Ok(())
    }

    /// [`Metrics::readiness`] as `/readyz?verbose` says it: the verdict, then
    /// one line per source stream with its state and its losses so far.
    pub fn readiness_verbose(&self) -> Result<String, String> {
        let verdict = self.readiness();
        let mut text = match &verdict {
            Ok(()) => "ready\n".to_string(),
            Err(why) => format!("{why}\n"),
        };
        if let Some(w) = self.watched.get() {
            for s in w.nodes.iter().filter(|s| s.role == Role::Source) {
                let state = match stream_state(s) {
                    StreamState::Waiting => "waiting for its first frame".to_string(),
                    StreamState::Streaming => "streaming".to_string(),
                    StreamState::Finished => "finished".to_string(),
                    StreamState::Failed(reason) => format!("failed: {reason}"),
                    StreamState::Lost { secs, reason } => format!(
                        "lost for {secs:.1} s ({reason}), reconnecting{}",
                        if s.required.load(Ordering::Relaxed) { "" } else { " (not required)" }
                    ),
                };
                let (lost, back) = (s.losses.load(Ordering::Relaxed), s.reconnects.load(Ordering::Relaxed));
                text.push_str(&format!(
                    "stream `{}`: {state}; {} frames, lost {lost}×, reconnected {back}×\n",
                    s.name,
                    s.frames_out.load(Ordering::Relaxed)
                ));
            }
        }
        verdict.map(|()| text.clone()).map_err(|_| text)
    }

    /// A registry whose only collector is `metrics`.
    pub fn registry(metrics: &Arc<Metrics>) -> Registry {
        let mut r = Registry::default();
        r.register_collector(Box::new(metrics.clone()));
        r
    }
}

/// Where a source's stream stands, for readiness.
enum StreamState {
    Waiting,
    Streaming,
    Finished,
    /// Ended for good with this error (it gave up, or its input broke).
    Failed(String),
    /// Lost `secs` ago for `reason`, not back yet.
    Lost {
        secs: f64,
        reason: String,
    },
}

fn stream_state(s: &NodeStats) -> StreamState {
    if s.done.load(Ordering::Acquire) {
        return match &*s.failure.lock().unwrap_or_else(|e| e.into_inner()) {
            Some(e) => StreamState::Failed(e.clone()),
            None => StreamState::Finished,
        };
    }
    if let Some((at, reason)) = &*s.lost_now.lock().unwrap_or_else(|e| e.into_inner()) {
        return StreamState::Lost { secs: at.elapsed().as_secs_f64(), reason: reason.clone() };
    }
    if s.frames_out.load(Ordering::Relaxed) == 0 { StreamState::Waiting } else { StreamState::Streaming }
}

type NodeLabels<'a> = [(&'static str, &'a str); 3];

fn node_labels<'a>(pipeline: &'a str, s: &'a NodeStats) -> NodeLabels<'a> {
    [("pipeline", pipeline), ("node", s.name.as_str()), ("kind", s.kind)]
}

/// One metric family: a descriptor, then a sample per label set.
fn family<L: EncodeLabelSet, M: EncodeMetric>(
    enc: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    unit: Option<&Unit>,
    kind: MetricType,
    samples: impl IntoIterator<Item = (L, M)>,
) -> fmt::Result {
    let mut family = enc.encode_descriptor(name, help, unit, kind)?;
    for (labels, metric) in samples {
        metric.encode(family.encode_family(&labels)?)?;
    }
    Ok(())
}

fn counters<'a>(enc: &mut DescriptorEncoder, name: &str, help: &str, rows: impl IntoIterator<Item = (NodeLabels<'a>, u64)>) -> fmt::Result {
    family(enc, name, help, None, MetricType::Counter, rows.into_iter().map(|(l, v)| (l, ConstCounter::new(v))))
}

fn gauges<'a>(enc: &mut DescriptorEncoder, name: &str, help: &str, rows: impl IntoIterator<Item = (NodeLabels<'a>, u64)>) -> fmt::Result {
    family(enc, name, help, None, MetricType::Gauge, rows.into_iter().map(|(l, v)| (l, ConstGauge::new(v))))
}

/// Classic Prometheus buckets from an hdr histogram of microseconds: (sum in
/// seconds, count, per-bucket counts with their upper bounds, `+Inf` last).
/// Exact to the histogram's three significant digits.
pub fn latency_buckets(h: &Histogram<u64>) -> (f64, u64, Vec<(f64, u64)>) {
    let mut buckets: Vec<(f64, u64)> = LATENCY_BUCKETS.iter().chain([&f64::INFINITY]).map(|&b| (b, 0)).collect();
    let mut sum_us = 0.0;
    for v in h.iter_recorded() {
        let n = v.count_since_last_iteration();
        // The highest value this hdr bucket stands for: never placed below where it could belong.
        let secs = v.value_iterated_to() as f64 / 1e6;
        sum_us += h.median_equivalent(v.value_iterated_to()) as f64 * n as f64;
        let i = buckets.iter().position(|&(le, _)| secs <= le).unwrap_or(buckets.len() - 1);
        buckets[i].1 += n;
    }
    (sum_us / 1e6, h.len(), buckets)
}

fn histograms<'a>(
    enc: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    rows: impl IntoIterator<Item = (NodeLabels<'a>, &'a Mutex<Histogram<u64>>)>,
) -> fmt::Result {
    let mut family = enc.encode_descriptor(name, help, Some(&Unit::Seconds), MetricType::Histogram)?;
    for (labels, h) in rows {
        // Held while the figures are read out; a frame finishing meanwhile waits that long to be recorded.
        let (sum, count, buckets) = latency_buckets(&h.lock().unwrap_or_else(|e| e.into_inner()));
        family.encode_family(&labels)?.encode_histogram::<NoLabelSet>(sum, count, &buckets, None)?;
    }
    Ok(())
}

impl Collector for Metrics {
    fn encode(&self, mut enc: DescriptorEncoder) -> fmt::Result {
        family(
            &mut enc,
            "infer_stream_build_info",
            "infer-stream version (always 1).",
            None,
            MetricType::Gauge,
            [([("version", env!("CARGO_PKG_VERSION"))], ConstGauge::new(1))],
        )?;
        let Some(w) = self.watched.get() else { return Ok(()) };
        let p = w.pipeline.as_str();

        let c = w.acct.snapshot();
        for (name, help, v) in [
            ("infer_stream_frames_decoded", "Frames the sources decoded.", c.decoded),
            ("infer_stream_frames_processed", "Decoded frames that reached a sink.", c.processed),
            ("infer_stream_frames_dropped", "Decoded frames a full queue dropped.", c.dropped),
            ("infer_stream_frames_failed", "Decoded frames a stage or sink failed on.", c.failed),
            ("infer_stream_frames_filtered", "Decoded frames a stage took out on purpose (a python stage's drop).", c.filtered),
            ("infer_stream_frames_lost", "Decoded frames that vanished unaccounted for (a bug if not 0).", c.lost),
        ] {
            family(&mut enc, name, help, None, MetricType::Counter, [([("pipeline", p)], ConstCounter::new(v))])?;
        }

        let all = || w.nodes.iter().map(|s| (node_labels(p, s), s.as_ref()));
        // Sources have no input queue: frames in, queue drops and queue gauges are for stages and sinks.
        let queued = || all().filter(|(_, s)| s.role != Role::Source);
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        counters(
            &mut enc,
            "infer_stream_node_frames_in",
            "Frames a node took from its input queue.",
            queued().map(|(l, s)| (l, get(&s.frames_in))),
        )?;
        counters(
            &mut enc,
            "infer_stream_node_frames_out",
            "Frames a node emitted (sinks: wrote).",
            all().map(|(l, s)| (l, get(&s.frames_out))),
        )?;
        counters(
            &mut enc,
            "infer_stream_node_frames_dropped",
            "Frames a node's full input queue dropped.",
            queued().map(|(l, s)| (l, get(&s.dropped))),
        )?;
        counters(&mut enc, "infer_stream_node_frames_failed", "Frames a node failed on.", all().map(|(l, s)| (l, get(&s.failed))))?;
        counters(
            &mut enc,
            "infer_stream_source_decode_errors",
            "Corrupt packets and unusable frames a source skipped.",
            all().filter(|(_, s)| s.role == Role::Source).map(|(l, s)| (l, get(&s.decode_errors))),
        )?;
        // Live sources (cameras): each source is one stream, and so is each stream added at run time.
        let added: Vec<Arc<NodeStats>> = self.added.get().map(|a| (a.0)()).unwrap_or_default();
        let sources = || all().filter(|(_, s)| s.role == Role::Source).map(|(_, s)| s).chain(added.iter().map(|s| s.as_ref()));
        for (name, help, pick) in [
            (
                "infer_stream_stream_lost",
                "Times a source's stream was lost (end, error, watchdog).",
                (|s: &NodeStats| &s.losses) as fn(&NodeStats) -> &AtomicU64,
            ),
            ("infer_stream_stream_reconnects", "Times a source's stream came back after a loss.", |s: &NodeStats| &s.reconnects),
        ] {
            family(
                &mut enc,
                name,
                help,
                None,
                MetricType::Counter,
                sources().map(|s| ([("pipeline", p), ("stream", s.name.as_str())], ConstCounter::new(get(pick(s))))),
            )?;
        }
        family(
            &mut enc,
            "infer_stream_node_busy",
            "Time a node spent working.",
            Some(&Unit::Seconds),
            MetricType::Counter,
            all().map(|(l, s)| (l, ConstCounter::new(get(&s.busy_ns) as f64 / 1e9))),
        )?;
        histograms(&mut enc, "infer_stream_node_latency", "Time a node spent on each frame.", queued().map(|(l, s)| (l, &s.service)))?;
        histograms(
            &mut enc,
            "infer_stream_sink_end_to_end_latency",
            "Time from a frame's decoding to its sink.",
            all().filter(|(_, s)| s.role == Role::Sink).map(|(l, s)| (l, &s.end_to_end)),
        )?;
        // The same counts per stream (a stage fed by several sources sees each of them).
        let per_stream: Vec<(&NodeStats, crate::runtime::stats::StreamCounts)> =
            w.nodes.iter().map(|s| (s.as_ref(), s.stream_counts())).collect();
        family(
            &mut enc,
            "infer_stream_stream_frames",
            "Frames of one stream in one node, by outcome (in, out, dropped, failed).",
            None,
            MetricType::Counter,
            per_stream.iter().flat_map(|(s, counts)| {
                counts.iter().flat_map(move |(stream, c)| {
                    ["in", "out", "dropped", "failed"].into_iter().zip(*c).filter(move |(o, _)| s.role != Role::Source || *o == "out").map(
                        move |(outcome, v)| {
                            (
                                [("pipeline", p), ("node", s.name.as_str()), ("stream", &**stream), ("outcome", outcome)],
                                ConstCounter::new(v),
                            )
                        },
                    )
                })
            }),
        )?;
        // What each infer stage's model did, per stream.
        let work: Vec<(&NodeStats, crate::runtime::stats::WorkCounts)> =
            w.nodes.iter().filter(|s| s.kind == "infer").map(|s| (s.as_ref(), s.work_counts())).collect();
        family(
            &mut enc,
            "infer_stream_stage_frames",
            "Frames of one stream in an infer stage, by what the model did (inferred: it ran; predicted: skipped by `interval`, \
             the tracker predicts; carried: skipped, earlier results reused).",
            None,
            MetricType::Counter,
            work.iter().flat_map(|(s, rows)| {
                rows.iter().flat_map(move |(stream, c)| {
                    crate::frame::WorkMode::ALL.into_iter().zip(*c).map(move |(mode, v)| {
                        ([("pipeline", p), ("node", s.name.as_str()), ("stream", &**stream), ("mode", mode.name())], ConstCounter::new(v))
                    })
                })
            }),
        )?;
        for (name, help, index) in [
            (
                "infer_stream_stage_carried_moved_frames",
                "Frames of one stream an infer stage carried (`motion`) in stretches after which the detected boxes had moved \
                 (a box's IoU with its carried self under 0.8, or a box appeared or vanished).",
                crate::runtime::stats::WORK_CARRIED_MOVED,
            ),
            (
                "infer_stream_stage_rereads",
                "Regions of one stream a `once_per_track` crop sent to this infer stage again because their track came wholly \
                 inside the picture.",
                crate::runtime::stats::WORK_REREAD,
            ),
        ] {
            family(
                &mut enc,
                name,
                help,
                None,
                MetricType::Counter,
                work.iter().flat_map(|(s, rows)| {
                    rows.iter().map(move |(stream, c)| {
                        ([("pipeline", p), ("node", s.name.as_str()), ("stream", &**stream)], ConstCounter::new(c[index]))
                    })
                }),
            )?;
        }
        // What each redact stage rewrote.
        let redact: Vec<&NodeStats> = w.nodes.iter().filter(|s| s.kind == "redact").map(|s| s.as_ref()).collect();
        counters(
            &mut enc,
            "infer_stream_redacted_boxes",
            "Boxes a redact stage blurred, pixelated or filled.",
            redact.iter().map(|s| (node_labels(p, s), s.redacted[0].load(Ordering::Relaxed))),
        )?;
        counters(
            &mut enc,
            "infer_stream_redacted_whole_frames",
            "Frames a redact stage redacted whole because a detector before it failed on them or skipped them (`on_miss = \"full\"`).",
            redact.iter().map(|s| (node_labels(p, s), s.redacted[1].load(Ordering::Relaxed))),
        )?;
        // Ended streams beyond the most recent ones (a long `dir` batch), folded
        // per node so that the series stay few: these plus the per-stream series
        // add up to the node's counts.
        let folded: Vec<(&NodeStats, crate::runtime::stats::FoldedStreams)> =
            w.nodes.iter().map(|s| (s.as_ref(), s.folded_streams())).filter(|(_, f)| f.streams > 0).collect();
        counters(
            &mut enc,
            "infer_stream_ended_streams_folded",
            "Ended streams no longer listed one by one (all but the most recent ones), per node.",
            folded.iter().map(|(s, f)| (node_labels(p, s), f.streams)),
        )?;
        family(
            &mut enc,
            "infer_stream_ended_stream_frames",
            "Frames of the folded ended streams together, by outcome (in, out, dropped, failed; sources: out).",
            None,
            MetricType::Counter,
            folded.iter().flat_map(|(s, f)| {
                ["in", "out", "dropped", "failed"]
                    .into_iter()
                    .zip(f.counts)
                    .filter(move |(o, _)| s.role != Role::Source || *o == "out")
                    .map(move |(outcome, v)| ([("pipeline", p), ("node", s.name.as_str()), ("outcome", outcome)], ConstCounter::new(v)))
            }),
        )?;
        // Message-bus sinks (Kafka, MQTT): delivery and the spool.
        let bus: Vec<(&NodeStats, &Arc<crate::bus::Delivery>)> =
            w.nodes.iter().filter_map(|s| s.delivery.get().map(|d| (s.as_ref(), d))).collect();
        for (name, help, pick) in [
            (
                "infer_stream_sink_delivered",
                "Messages a bus sink's broker acknowledged.",
                (|d: &crate::bus::Delivery| &d.delivered) as fn(&crate::bus::Delivery) -> &AtomicU64,
            ),
            ("infer_stream_sink_retried", "Messages a bus sink sent again (after a reconnect, or left by an earlier run).", |d| &d.retried),
            ("infer_stream_sink_spooled", "Messages a bus sink wrote to its disk spool.", |d| &d.spooled),
            ("infer_stream_sink_spool_dropped", "Messages a bus sink dropped because its spool was full.", |d| &d.dropped),
            ("infer_stream_sink_errors", "Messages a bus sink's broker refused, and spool errors.", |d| &d.errors),
        ] {
            family(
                &mut enc,
                name,
                help,
                None,
                MetricType::Counter,
                bus.iter().map(|(s, d)| ([("pipeline", p), ("sink", s.name.as_str())], ConstCounter::new(get(pick(d))))),
            )?;
        }
        family(
            &mut enc,
            "infer_stream_sink_spool_bytes",
            "Bytes in a bus sink's disk spool not yet delivered (grows while the broker is unreachable).",
            None,
            MetricType::Gauge,
            bus.iter().map(|(s, d)| ([("pipeline", p), ("sink", s.name.as_str())], ConstGauge::new(get(&d.spool_bytes)))),
        )?;
        family(
            &mut enc,
            "infer_stream_sink_broker_up",
            "Whether a bus sink's broker is reachable (1) or not (0), as its client last saw it.",
            None,
            MetricType::Gauge,
            bus.iter().map(|(s, d)| ([("pipeline", p), ("sink", s.name.as_str())], ConstGauge::new(d.up.load(Ordering::Relaxed) as u64))),
        )?;
        {
            let mut family = enc.encode_descriptor(
                "infer_stream_sink_delivery_latency",
                "From a bus sink's write of a message to the broker's acknowledgement.",
                Some(&Unit::Seconds),
                MetricType::Histogram,
            )?;
            for (s, d) in &bus {
                let (sum, count, buckets) = latency_buckets(&d.latency.lock().unwrap_or_else(|e| e.into_inner()));
                family
                    .encode_family(&[("pipeline", p), ("sink", s.name.as_str())])?
                    .encode_histogram::<NoLabelSet>(sum, count, &buckets, None)?;
            }
        }
        // Event clips: each stream's packet ring, each clips sink's clips.
        let hub = w.nodes.iter().find_map(|s| s.clips.get().cloned());
        let rings = hub.as_ref().map(|h| h.rings()).unwrap_or_default();
        family(
            &mut enc,
            "infer_stream_clip_ring_bytes",
            "Bytes of compressed video a stream's clip ring holds now (the last pre_s seconds and a GOP).",
            None,
            MetricType::Gauge,
            rings.iter().map(|r| ([("pipeline", p), ("stream", &*r.stream)], ConstGauge::new(r.bytes.load(Ordering::Relaxed)))),
        )?;
        family(
            &mut enc,
            "infer_stream_clip_ring_overflows",
            "GOPs a stream's clip ring dropped early to stay within its byte bound.",
            None,
            MetricType::Counter,
            rings.iter().map(|r| ([("pipeline", p), ("stream", &*r.stream)], ConstCounter::new(r.overflows.load(Ordering::Relaxed)))),
        )?;
        let counts = hub.as_ref().map(|h| h.all_counts()).unwrap_or_default();
        for (name, help, pick) in [
            (
                "infer_stream_clips_written",
                "Clips a clips sink wrote.",
                (|c: &crate::runtime::clips::ClipCounts| &c.written) as fn(&crate::runtime::clips::ClipCounts) -> &AtomicU64,
            ),
            ("infer_stream_clips_failed", "Clips a clips sink could not write (after the first, it makes no more).", |c| &c.failed),
            ("infer_stream_clips_deleted", "Clips retention deleted (max_age, max_bytes).", |c| &c.deleted),
            ("infer_stream_clips_deleted_bytes", "Bytes of the clips retention deleted.", |c| &c.deleted_bytes),
        ] {
            family(
                &mut enc,
                name,
                help,
                None,
                MetricType::Counter,
                counts.iter().map(|(s, c)| ([("pipeline", p), ("sink", s.as_str())], ConstCounter::new(get(pick(c))))),
            )?;
        }
        family(
            &mut enc,
            "infer_stream_clips_bytes",
            "Bytes of a clips sink's clips on disk, as its retention last counted them.",
            None,
            MetricType::Gauge,
            counts.iter().map(|(s, c)| ([("pipeline", p), ("sink", s.as_str())], ConstGauge::new(get(&c.bytes)))),
        )?;
        // Batch sizes formed by batching stages.
        let mut fam = enc.encode_descriptor(
            "infer_stream_node_batch_size",
            "Frames per model run in a batching infer stage.",
            None,
            MetricType::Histogram,
        )?;
        for s in w.nodes.iter() {
            let sizes = s.batch_sizes.lock().unwrap_or_else(|e| e.into_inner()).clone();
            if sizes.is_empty() {
                continue;
            }
            let (mut sum, mut count) = (0f64, 0u64);
            let mut buckets: Vec<(f64, u64)> = [1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, f64::INFINITY].iter().map(|&b| (b, 0)).collect();
            for (n, c) in sizes.iter().enumerate().filter(|(_, c)| **c > 0) {
                sum += (n as u64 * c) as f64;
                count += c;
                if let Some(b) = buckets.iter_mut().find(|(le, _)| n as f64 <= *le) {
                    b.1 += c;
                }
            }
            fam.encode_family(&node_labels(p, s))?.encode_histogram::<NoLabelSet>(sum, count, &buckets, None)?;
        }
        let size = |a: &AtomicUsize| a.load(Ordering::Relaxed) as u64;
        gauges(
            &mut enc,
            "infer_stream_node_queue_depth",
            "Frames waiting in a node's input queue.",
            queued().map(|(l, s)| (l, s.depth())),
        )?;
        gauges(
            &mut enc,
            "infer_stream_node_queue_capacity",
            "Capacity of a node's input queue.",
            queued().map(|(l, s)| (l, size(&s.capacity))),
        )?;
        gauges(
            &mut enc,
            "infer_stream_node_queue_max_depth",
            "Most frames waiting in a node's input queue at once (at most its capacity).",
            queued().map(|(l, s)| (l, size(&s.max_depth))),
        )?;
        // Line crossings and zone events of `analytics` stages, and zone occupancy (entered less left).
        let rows: Vec<(&NodeStats, Vec<(crate::runtime::stats::CountKey, u64)>)> =
            w.nodes.iter().map(|s| (s.as_ref(), s.count_rows())).filter(|(_, r)| !r.is_empty()).collect();
        family(
            &mut enc,
            "infer_stream_line_crossings",
            "Tracks that crossed a counting line, by stream, line, class and direction (in, out).",
            None,
            MetricType::Counter,
            rows.iter().flat_map(|(s, r)| {
                r.iter().filter(|(k, _)| k.kind == "line").map(move |(k, v)| {
                    (
                        [
                            ("pipeline", p),
                            ("node", s.name.as_str()),
                            ("stream", &*k.stream),
                            ("line", &*k.name),
                            ("class", k.class.as_str()),
                            ("direction", k.what),
                        ],
                        ConstCounter::new(*v),
                    )
                })
            }),
        )?;
        family(
            &mut enc,
            "infer_stream_zone_events",
            "Tracks that entered or left a zone, by stream, zone, class and event (entered, left).",
            None,
            MetricType::Counter,
            rows.iter().flat_map(|(s, r)| {
                r.iter().filter(|(k, _)| k.kind == "zone").map(move |(k, v)| {
                    (
                        [
                            ("pipeline", p),
                            ("node", s.name.as_str()),
                            ("stream", &*k.stream),
                            ("zone", &*k.name),
                            ("class", k.class.as_str()),
                            ("event", k.what),
                        ],
                        ConstCounter::new(*v),
                    )
                })
            }),
        )?;
        family(
            &mut enc,
            "infer_stream_zone_occupancy",
            "Tracks inside a zone now, by stream, zone and class.",
            None,
            MetricType::Gauge,
            rows.iter().flat_map(|(s, r)| {
                r.iter().filter(|(k, _)| k.kind == "zone" && k.what == "entered").map(move |(k, v)| {
                    let left = r
                        .iter()
                        .find(|(o, _)| o.what == "left" && (&o.stream, &o.name, &o.class) == (&k.stream, &k.name, &k.class))
                        .map_or(0, |o| o.1);
                    (
                        [
                            ("pipeline", p),
                            ("node", s.name.as_str()),
                            ("stream", &*k.stream),
                            ("zone", &*k.name),
                            ("class", k.class.as_str()),
                        ],
                        ConstGauge::new(v.saturating_sub(left)),
                    )
                })
            }),
        )?;
        counters(
            &mut enc,
            "infer_stream_tracks_ended",
            "Tracks a `track` stage ended (lost longer than its buffer, or with the stream).",
            all().filter(|(_, s)| s.kind == "track").map(|(l, s)| (l, get(&s.tracks_ended))),
        )?;
        family(
            &mut enc,
            "infer_stream_execution_provider_info",
            "The execution provider an infer node runs on (always 1).",
            None,
            MetricType::Gauge,
            w.providers
                .iter()
                .map(|(node, provider)| ([("pipeline", p), ("node", node.as_str()), ("provider", provider.as_str())], ConstGauge::new(1))),
        )?;
        // The process's CPU and memory, and the GPUs' use (absent without NVML).
        process::encode(&mut enc, process::read())?;
        gpu::encode(&mut enc, &gpu::read())
    }
}

#[cfg(test)]
mod tests;
