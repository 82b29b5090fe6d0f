//! The exposition and the HTTP endpoints, on stats made here.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::Ordering;
use std::time::Duration;

use prometheus_client::encoding::text;

use super::*;

/// A source `cam`, an infer stage `det` and a sink `out` with some traffic.
fn pipeline() -> (Arc<Metrics>, Vec<Arc<NodeStats>>, Arc<Accounting>, Arc<Shutdown>) {
    let cam = Arc::new(NodeStats::new("cam", "file", Role::Source));
    let det = Arc::new(NodeStats::new("det", "infer", Role::Stage));
    let out = Arc::new(NodeStats::new("out", "ndjson", Role::Sink));
    cam.decode_errors.store(2, Ordering::Relaxed);
    for s in [&det, &out] {
        s.set_capacity(8);
    }
    for _ in 0..3 {
        det.frame_in(4);
        det.record(Duration::from_millis(30), None);
        det.frames_out.fetch_add(1, Ordering::Relaxed);
    }
    det.queued.store(5, Ordering::Relaxed); // 3 taken, 2 waiting
    det.dropped.store(1, Ordering::Relaxed);
    out.frame_in(0);
    out.record(Duration::from_micros(300), Some(Duration::from_millis(700)));
    out.frames_out.fetch_add(1, Ordering::Relaxed);
    let acct = Arc::new(Accounting::default());
    for fate in 0..3 {
        let t = acct.issue();
        match fate {
            0 => t.sunk(),
            1 => t.dropped(),
            _ => {}
        }
        if fate < 2 {
            drop(t);
        } else {
            std::mem::forget(t); // still in flight
        }
    }
    let sd = Shutdown::new();
    let m = Metrics::new();
    let nodes = vec![cam, det, out];
    m.watch_stats("p".into(), nodes.clone(), vec![("det".into(), "cpu".into())], acct.clone(), sd.clone());
    (m, nodes, acct, sd)
}

fn openmetrics(m: &Arc<Metrics>) -> String {
    let mut s = String::new();
    text::encode(&mut s, &Metrics::registry(m)).unwrap();
    s
}

/// `text` without the `process_*` families.
fn without_process(text: &str) -> String {
    text.lines().filter(|l| !l.contains("process_")).map(|l| format!("{l}\n")).collect()
}

fn assert_lines(text: &str, lines: &[&str]) {
    for l in lines {
        assert!(text.lines().any(|t| t == *l), "missing line\n{l}\nin\n{text}");
    }
}

#[test]
fn exposition_reads_the_live_counters() {
    let (m, nodes, _acct, _sd) = pipeline();
    let t = openmetrics(&m);
    assert_lines(
        &t,
        &[
            "# TYPE infer_stream_build_info gauge",
            &format!("infer_stream_build_info{{version=\"{}\"}} 1", env!("CARGO_PKG_VERSION")),
            "# TYPE infer_stream_frames_decoded counter",
            "infer_stream_frames_decoded_total{pipeline=\"p\"} 3",
            "infer_stream_frames_processed_total{pipeline=\"p\"} 1",
            "infer_stream_frames_dropped_total{pipeline=\"p\"} 1",
            "infer_stream_frames_failed_total{pipeline=\"p\"} 0",
            "infer_stream_frames_lost_total{pipeline=\"p\"} 0",
            "infer_stream_node_frames_in_total{pipeline=\"p\",node=\"det\",kind=\"infer\"} 3",
            "infer_stream_node_frames_in_total{pipeline=\"p\",node=\"out\",kind=\"ndjson\"} 1",
            "infer_stream_node_frames_out_total{pipeline=\"p\",node=\"cam\",kind=\"file\"} 0",
            "infer_stream_node_frames_out_total{pipeline=\"p\",node=\"det\",kind=\"infer\"} 3",
            "infer_stream_node_frames_dropped_total{pipeline=\"p\",node=\"det\",kind=\"infer\"} 1",
            "infer_stream_node_frames_failed_total{pipeline=\"p\",node=\"out\",kind=\"ndjson\"} 0",
            "infer_stream_source_decode_errors_total{pipeline=\"p\",node=\"cam\",kind=\"file\"} 2",
            "# TYPE infer_stream_node_busy_seconds counter",
            "# UNIT infer_stream_node_busy_seconds seconds",
            "infer_stream_node_busy_seconds_total{pipeline=\"p\",node=\"det\",kind=\"infer\"} 0.09",
            "# TYPE infer_stream_node_latency_seconds histogram",
            "infer_stream_node_latency_seconds_count{pipeline=\"p\",node=\"det\",kind=\"infer\"} 3",
            "infer_stream_node_latency_seconds_bucket{le=\"0.025\",pipeline=\"p\",node=\"det\",kind=\"infer\"} 0",
            "infer_stream_node_latency_seconds_bucket{le=\"0.05\",pipeline=\"p\",node=\"det\",kind=\"infer\"} 3",
            "infer_stream_node_latency_seconds_bucket{le=\"+Inf\",pipeline=\"p\",node=\"det\",kind=\"infer\"} 3",
            "infer_stream_node_latency_seconds_bucket{le=\"0.00025\",pipeline=\"p\",node=\"out\",kind=\"ndjson\"} 0",
            "infer_stream_node_latency_seconds_bucket{le=\"0.0005\",pipeline=\"p\",node=\"out\",kind=\"ndjson\"} 1",
            "infer_stream_sink_end_to_end_latency_seconds_bucket{le=\"0.5\",pipeline=\"p\",node=\"out\",kind=\"ndjson\"} 0",
            "infer_stream_sink_end_to_end_latency_seconds_bucket{le=\"1.0\",pipeline=\"p\",node=\"out\",kind=\"ndjson\"} 1",
            "infer_stream_node_queue_depth{pipeline=\"p\",node=\"det\",kind=\"infer\"} 2",
            "infer_stream_node_queue_capacity{pipeline=\"p\",node=\"det\",kind=\"infer\"} 8",
            "infer_stream_node_queue_max_depth{pipeline=\"p\",node=\"det\",kind=\"infer\"} 4",
            "infer_stream_execution_provider_info{pipeline=\"p\",node=\"det\",provider=\"cpu\"} 1",
        ],
    );
    assert!(t.ends_with("# EOF\n"));
    // Sources have no input queue and no latency; stages and sources have no end-to-end latency.
    for absent in [
        "infer_stream_node_frames_in_total{pipeline=\"p\",node=\"cam\"",
        "infer_stream_node_queue_depth{pipeline=\"p\",node=\"cam\"",
        "infer_stream_node_latency_seconds_count{pipeline=\"p\",node=\"cam\"",
        "infer_stream_sink_end_to_end_latency_seconds_count{pipeline=\"p\",node=\"det\"",
    ] {
        assert!(!t.contains(absent), "{absent} in\n{t}");
    }
    // Read at each scrape: the next one sees new frames.
    nodes[1].frames_out.fetch_add(4, Ordering::Relaxed);
    assert_lines(&openmetrics(&m), &["infer_stream_node_frames_out_total{pipeline=\"p\",node=\"det\",kind=\"infer\"} 7"]);
}

#[test]
fn only_the_build_before_a_pipeline_is_watched() {
    let m = Metrics::new();
    let t = openmetrics(&m);
    assert_eq!(
        t,
        format!(
            "# HELP infer_stream_build_info infer-stream version (always 1).\n# TYPE infer_stream_build_info gauge\ninfer_stream_build_info{{version=\"{}\"}} 1\n# EOF\n",
            env!("CARGO_PKG_VERSION")
        )
    );
}

#[test]
fn latency_buckets_follow_the_hdr_histogram() {
    let mut h = Histogram::<u64>::new_with_bounds(1, 3_600_000_000, 3).unwrap();
    h.record_n(300, 2).unwrap(); // 0.3 ms
    h.record(40_000).unwrap(); // 40 ms
    h.record(20_000_000).unwrap(); // 20 s: above the last bound
    let (sum, count, buckets) = latency_buckets(&h);
    assert_eq!(count, 4);
    assert!((sum - 20.0406).abs() < 20.0406 * 1e-3, "{sum}");
    assert_eq!(buckets.len(), LATENCY_BUCKETS.len() + 1);
    assert_eq!(buckets.last().unwrap().0, f64::INFINITY);
    let nonzero: Vec<(f64, u64)> = buckets.into_iter().filter(|b| b.1 > 0).collect();
    assert_eq!(nonzero, vec![(0.0005, 2), (0.05, 1), (f64::INFINITY, 1)]);
    let (sum, count, buckets) = latency_buckets(&Histogram::<u64>::new(3).unwrap());
    assert_eq!((sum, count), (0.0, 0));
    assert!(buckets.iter().all(|b| b.1 == 0));
}

/// (status, head, body) of one request sent as is.
fn request(addr: SocketAddr, raw: &str) -> (u16, String, String) {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(raw.as_bytes()).unwrap();
    let mut resp = String::new();
    s.read_to_string(&mut resp).unwrap();
    let (head, body) = resp.split_once("\r\n\r\n").unwrap_or_else(|| panic!("no head in {resp:?}"));
    let status = head.split_whitespace().nth(1).unwrap().parse().unwrap();
    assert!(head.contains("\r\nConnection: close"), "{head}");
    assert!(head.contains(&format!("\r\nContent-Length: {}", body.len())), "{head}");
    (status, head.to_string(), body.to_string())
}

fn get(addr: SocketAddr, path: &str) -> (u16, String, String) {
    request(addr, &format!("GET {path} HTTP/1.1\r\nHost: test\r\n\r\n"))
}

#[test]
fn server_answers_health_readiness_and_metrics() {
    let m = Metrics::new();
    let server = MetricsServer::start("127.0.0.1:0".parse().unwrap(), m.clone()).unwrap();
    let addr = server.local_addr();
    assert_ne!(addr.port(), 0);

    assert_eq!(get(addr, "/healthz").0, 200);
    let (status, _, body) = get(addr, "/readyz");
    assert_eq!((status, body.as_str()), (503, "not ready: building the pipeline (opening sources, loading models)\n"));

    // Watch a pipeline whose source has produced nothing yet.
    let (watched, nodes, acct, sd) = pipeline();
    drop(watched);
    m.watch_stats("p".into(), nodes.clone(), vec![("det".into(), "cpu".into())], acct, sd.clone());
    let (status, _, body) = get(addr, "/readyz");
    assert_eq!((status, body.as_str()), (503, "not ready: source `cam` has not produced a frame yet\n"));
    nodes[0].frames_out.store(1, Ordering::Relaxed);
    let (status, _, body) = get(addr, "/readyz?verbose");
    assert_eq!((status, body.as_str()), (200, "ready\nstream `cam`: streaming; 1 frames, lost 0×, reconnected 0×\n"));
    // The camera is lost: not ready, naming the stream, until it is back.
    nodes[0].stream_event(&crate::frame::EventKind::Lost { reason: "no frame for 1000 ms (watchdog_ms)".into() });
    let (status, _, body) = get(addr, "/readyz");
    assert_eq!(status, 503);
    assert!(body.starts_with("not ready: stream `cam` is lost (no frame for 1000 ms (watchdog_ms)) for 0."), "{body}");
    let (status, _, body) = get(addr, "/readyz?verbose");
    assert_eq!(status, 503);
    assert!(
        body.lines()
            .nth(1)
            .is_some_and(|l| l.starts_with("stream `cam`: lost for ") && l.ends_with("reconnecting; 1 frames, lost 1×, reconnected 0×")),
        "{body}"
    );
    // A stream that is not required (`required = false`): still listed, no longer holding readiness.
    nodes[0].required.store(false, Ordering::Relaxed);
    let (status, _, body) = get(addr, "/readyz?verbose");
    assert_eq!(status, 200, "{body}");
    assert!(body.starts_with("ready\nstream `cam`: lost for ") && body.contains("reconnecting (not required); 1 frames"), "{body}");
    nodes[0].required.store(true, Ordering::Relaxed);
    nodes[0].stream_event(&crate::frame::EventKind::Reconnected { gap_ms: 700, attempts: 2 });
    let (status, _, body) = get(addr, "/readyz?verbose");
    assert_eq!((status, body.as_str()), (200, "ready\nstream `cam`: streaming; 1 frames, lost 1×, reconnected 1×\n"));
    let (status, head, body) = get(addr, "/readyz");
    assert_eq!((status, body.as_str()), (200, "ready\n"));
    assert!(head.contains("Content-Type: text/plain; charset=utf-8"), "{head}");

    // Plain clients get the Prometheus text format; Prometheus asks for OpenMetrics.
    let (status, head, body) = get(addr, "/metrics");
    assert_eq!(status, 200);
    assert!(head.contains("Content-Type: text/plain; version=0.0.4; charset=utf-8"), "{head}");
    assert_lines(&body, &["infer_stream_node_frames_out_total{pipeline=\"p\",node=\"det\",kind=\"infer\"} 3"]);
    assert!(!body.contains("# EOF"));
    let (status, head, body) = request(
        addr,
        "GET /metrics HTTP/1.1\r\nHost: test\r\nAccept: application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5\r\n\r\n",
    );
    assert_eq!(status, 200);
    assert!(head.contains("Content-Type: application/openmetrics-text; version=1.0.0; charset=utf-8"), "{head}");
    // The same text, but for the process's CPU and memory, which move between the two reads.
    assert_eq!(without_process(&body), without_process(&openmetrics(&m)));

    assert_eq!(get(addr, "/nope").0, 404);
    let (status, head, _) = request(addr, "POST /metrics HTTP/1.1\r\nContent-Length: 0\r\n\r\n");
    assert_eq!(status, 405);
    assert!(head.contains("\r\nAllow: GET"), "{head}");
    assert_eq!(request(addr, "hello\r\n\r\n").0, 400);
    let huge = format!("GET /metrics HTTP/1.1\r\nX-Pad: {}\r\n\r\n", "a".repeat(20_000));
    let mut s = TcpStream::connect(addr).unwrap();
    s.write_all(huge.as_bytes()).unwrap();
    let mut resp = String::new();
    s.read_to_string(&mut resp).unwrap();
    assert!(resp.starts_with("HTTP/1.1 431 "), "{resp}");

    // A client that sends nothing holds the server for the read timeout at most; the next one is served after.
    let idle = TcpStream::connect(addr).unwrap();
    assert_eq!(get(addr, "/healthz").0, 200);
    drop(idle);

    sd.stop();
    let (status, _, body) = get(addr, "/readyz");
    assert_eq!((status, body.as_str()), (503, "not ready: stopping (draining frames in flight)\n"));

    server.stop();
    assert!(TcpStream::connect(addr).is_err(), "nothing listens after stop");
}

#[test]
fn a_busy_port_is_an_error() {
    let taken = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap();
    let e = MetricsServer::start(addr, Metrics::new()).unwrap_err();
    let msg = e.to_string();
    assert!(msg.starts_with(&format!("cannot listen on {addr}: ")), "{msg}");
    assert!(matches!(e, MetricsError::Bind { source, .. } if source.kind() == std::io::ErrorKind::AddrInUse));
}

#[test]
fn per_stream_counts_and_batch_sizes() {
    use crate::frame::Accounting;
    use crate::runtime::stats::StreamEvent;
    let m = Metrics::new();
    let det = std::sync::Arc::new(NodeStats::new("det", "infer", Role::Stage));
    let (a, b): (std::sync::Arc<str>, std::sync::Arc<str>) = ("cam0".into(), "cam1".into());
    for _ in 0..3 {
        det.stream(&a, StreamEvent::In);
        det.stream(&a, StreamEvent::Out);
    }
    det.stream(&b, StreamEvent::In);
    det.stream(&b, StreamEvent::Failed);
    det.batch_formed(4);
    det.batch_formed(4);
    det.batch_formed(3);
    m.watch_stats("p".into(), vec![det], vec![], std::sync::Arc::new(Accounting::default()), Shutdown::new());
    let t = openmetrics(&m);
    for line in [
        "infer_stream_stream_frames_total{pipeline=\"p\",node=\"det\",stream=\"cam0\",outcome=\"in\"} 3",
        "infer_stream_stream_frames_total{pipeline=\"p\",node=\"det\",stream=\"cam0\",outcome=\"out\"} 3",
        "infer_stream_stream_frames_total{pipeline=\"p\",node=\"det\",stream=\"cam1\",outcome=\"failed\"} 1",
        "infer_stream_node_batch_size_bucket{le=\"2.0\",pipeline=\"p\",node=\"det\",kind=\"infer\"} 0",
        "infer_stream_node_batch_size_bucket{le=\"4.0\",pipeline=\"p\",node=\"det\",kind=\"infer\"} 3",
        "infer_stream_node_batch_size_sum{pipeline=\"p\",node=\"det\",kind=\"infer\"} 11.0",
        "infer_stream_node_batch_size_count{pipeline=\"p\",node=\"det\",kind=\"infer\"} 3",
    ] {
        assert!(t.lines().any(|l| l == line), "missing line\n{line}\nin\n{t}");
    }
}

/// A long batch's ended streams beyond the most recent ones are one folded
/// series per node and outcome; with the per-stream series they add up to the node.
#[test]
fn ended_streams_are_folded_into_one_series() {
    use crate::frame::Accounting;
    use crate::runtime::stats::{LISTED_ENDED_STREAMS, StreamEvent};
    let m = Metrics::new();
    let det = std::sync::Arc::new(NodeStats::new("det", "infer", Role::Stage));
    for i in 0..LISTED_ENDED_STREAMS + 3 {
        let s: std::sync::Arc<str> = format!("f{i:04}").into();
        det.stream(&s, StreamEvent::In);
        det.stream(&s, StreamEvent::Out);
        det.stream_ended(&s);
    }
    m.watch_stats("p".into(), vec![det], vec![], std::sync::Arc::new(Accounting::default()), Shutdown::new());
    let t = openmetrics(&m);
    for line in [
        "infer_stream_ended_streams_folded_total{pipeline=\"p\",node=\"det\",kind=\"infer\"} 3",
        "infer_stream_ended_stream_frames_total{pipeline=\"p\",node=\"det\",outcome=\"in\"} 3",
        "infer_stream_ended_stream_frames_total{pipeline=\"p\",node=\"det\",outcome=\"out\"} 3",
    ] {
        assert!(t.lines().any(|l| l == line), "missing line\n{line}\nin\n{t}");
    }
    let per_stream = t.lines().filter(|l| l.starts_with("infer_stream_stream_frames_total{") && l.contains("outcome=\"in\"")).count();
    assert_eq!(per_stream, LISTED_ENDED_STREAMS);
    assert!(!t.contains("stream=\"f0000\""), "the oldest ended stream is folded");
}

/// The text a collector of these GPU readings writes.
fn gpu_text(gpus: Vec<super::gpu::GpuReading>) -> String {
    #[derive(Debug)]
    struct Gpus(Vec<super::gpu::GpuReading>);
    impl Collector for Gpus {
        fn encode(&self, mut enc: DescriptorEncoder) -> fmt::Result {
            super::gpu::encode(&mut enc, &self.0)
        }
    }
    let mut r = Registry::default();
    r.register_collector(Box::new(Gpus(gpus)));
    let mut s = String::new();
    text::encode(&mut s, &r).unwrap();
    s
}

#[test]
fn without_a_gpu_the_gpu_series_are_absent_not_zero() {
    let t = gpu_text(Vec::new());
    assert_eq!(t, "# EOF\n", "no GPU: no family, not even its HELP line");
    // And a watched pipeline's scrape on this machine has none either, unless NVML finds a GPU.
    let (m, ..) = pipeline();
    let scrape = openmetrics(&m);
    assert_eq!(scrape.contains("infer_stream_gpu_"), !super::gpu::read().is_empty(), "{scrape}");
}

#[test]
fn gpu_readings_become_one_series_per_gpu_and_figure() {
    let gpus = vec![
        super::gpu::GpuReading {
            index: 0,
            uuid: "GPU-aaaa".into(),
            name: "NVIDIA L4".into(),
            utilization_pct: Some(37),
            memory_used_bytes: Some(1_073_741_824),
            memory_total_bytes: Some(24_146_608_128),
            decoder_pct: Some(12),
            encoder_pct: Some(0),
        },
        // A device that reports no codec use (an H200 has no NVENC).
        super::gpu::GpuReading {
            index: 1,
            uuid: "GPU-bbbb".into(),
            name: "NVIDIA H200".into(),
            utilization_pct: Some(100),
            memory_used_bytes: Some(2048),
            memory_total_bytes: Some(4096),
            decoder_pct: Some(5),
            encoder_pct: None,
        },
    ];
    let t = gpu_text(gpus);
    let l0 = r#"gpu="0",uuid="GPU-aaaa",name="NVIDIA L4""#;
    let l1 = r#"gpu="1",uuid="GPU-bbbb",name="NVIDIA H200""#;
    assert_lines(
        &t,
        &[
            "# TYPE infer_stream_gpu_utilization_ratio gauge",
            &format!("infer_stream_gpu_utilization_ratio{{{l0}}} 0.37"),
            &format!("infer_stream_gpu_utilization_ratio{{{l1}}} 1.0"),
            &format!("infer_stream_gpu_memory_used_bytes{{{l0}}} 1073741824.0"),
            &format!("infer_stream_gpu_memory_total_bytes{{{l1}}} 4096.0"),
            &format!("infer_stream_gpu_decoder_utilization_ratio{{{l0}}} 0.12"),
            &format!("infer_stream_gpu_encoder_utilization_ratio{{{l0}}} 0.0"),
        ],
    );
    assert!(!t.contains(&format!("infer_stream_gpu_encoder_utilization_ratio{{{l1}}}")), "a figure not reported is absent:\n{t}");
}

#[test]
fn process_cpu_and_memory_from_proc() {
    // `(` and `)` in the command name must not shift the fields.
    let stat = "4242 (infer (x) y) S 1 4242 4242 0 -1 4194304 1000 0 0 0 250 50 0 0 20 0 9 0 100 0 0";
    let (cpu, rss) = super::process::parse(stat, "5000 1234 200 10 0 900 0\n").unwrap();
    assert_eq!((cpu, rss), (3.0, 1234 * 4096));
    assert_eq!(super::process::parse("garbage", ""), None);
    let (m, ..) = pipeline();
    let scrape = openmetrics(&m);
    assert!(scrape.contains("# TYPE process_cpu_seconds counter") && scrape.contains("process_resident_memory_bytes "), "{scrape}");
}

/// Line crossings and zone events an analytics stage raised, per stream,
/// line or zone, class and direction; occupancy is entered less left.
#[test]
fn line_crossings_zone_events_and_occupancy() {
    use crate::frame::{Direction, Event, EventKind, TrackRef};
    let m = Metrics::new();
    let counts = Arc::new(NodeStats::new("counts", "analytics", Role::Stage));
    let trk = Arc::new(NodeStats::new("trk", "track", Role::Stage));
    let person = |id| TrackRef { id, class: 0, label: Some("person".into()) };
    let ev = |kind| Event::new("cam".into(), kind);
    for (id, direction) in [(1, Direction::In), (2, Direction::In), (3, Direction::Out)] {
        counts.stage_event(&ev(EventKind::Crossed { line: "gate".into(), track: person(id), direction, seq: id }));
    }
    for id in 1..=3 {
        counts.stage_event(&ev(EventKind::Entered { zone: "desk".into(), track: person(id), seq: id }));
    }
    counts.stage_event(&ev(EventKind::Left {
        zone: "desk".into(),
        track: person(1),
        seq: 9,
        dwell_frames: 8,
        dwell_ms: None,
        track_ended: false,
    }));
    let ended = EventKind::TrackEnded { track: person(1), first_seq: 0, last_seq: 9, hits: 10, duration_ms: None, with_stream: true };
    trk.stage_event(&ev(ended));
    m.watch_stats("p".into(), vec![trk, counts], vec![], Arc::new(Accounting::default()), Shutdown::new());
    assert_lines(
        &openmetrics(&m),
        &[
            "infer_stream_line_crossings_total{pipeline=\"p\",node=\"counts\",stream=\"cam\",line=\"gate\",class=\"person\",direction=\"in\"} 2",
            "infer_stream_line_crossings_total{pipeline=\"p\",node=\"counts\",stream=\"cam\",line=\"gate\",class=\"person\",direction=\"out\"} 1",
            "infer_stream_zone_events_total{pipeline=\"p\",node=\"counts\",stream=\"cam\",zone=\"desk\",class=\"person\",event=\"entered\"} 3",
            "infer_stream_zone_events_total{pipeline=\"p\",node=\"counts\",stream=\"cam\",zone=\"desk\",class=\"person\",event=\"left\"} 1",
            "infer_stream_zone_occupancy{pipeline=\"p\",node=\"counts\",stream=\"cam\",zone=\"desk\",class=\"person\"} 2",
            "infer_stream_tracks_ended_total{pipeline=\"p\",node=\"trk\",kind=\"track\"} 1",
        ],
    );
}

/// What an infer stage's model did, per stream and mode.
#[test]
fn infer_stages_count_frames_inferred_predicted_and_carried() {
    let (m, nodes, _, _) = pipeline();
    let cam: Arc<str> = "cam".into();
    for mode in [
        crate::frame::WorkMode::Inferred,
        crate::frame::WorkMode::Predicted,
        crate::frame::WorkMode::Predicted,
        crate::frame::WorkMode::Carried,
    ] {
        nodes[1].worked(&cam, mode);
    }
    assert_lines(
        &openmetrics(&m),
        &[
            r#"infer_stream_stage_frames_total{pipeline="p",node="det",stream="cam",mode="inferred"} 1"#,
            r#"infer_stream_stage_frames_total{pipeline="p",node="det",stream="cam",mode="predicted"} 2"#,
            r#"infer_stream_stage_frames_total{pipeline="p",node="det",stream="cam",mode="carried"} 1"#,
        ],
    );
}
