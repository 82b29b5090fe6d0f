//! Runtime behaviour with synthetic stages: policies, queues, fan-out, shutdown.

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::node::StageError;
use super::*;
use crate::frame::{ColorInfo, EventKind, Image, Matrix, PoolBuf, Storage};
use crate::stages::{Sink, Source, Stage};

/// Emits `n` tiny grey frames as fast as the queues allow.
struct Counter(u64);

impl Source for Counter {
    fn describe(&self) -> String {
        "counter".into()
    }
    fn run(&mut self, ctx: &mut SourceCtx<'_>) -> Result<(), String> {
        for seq in 0..self.0 {
            if ctx.stopping() {
                break;
            }
            let image = Image {
                width: 4,
                height: 4,
                format: crate::frame::PixelFormat::GRAY8,
                color: ColorInfo { matrix: Matrix::Unspecified, full_range: true },
                offsets: [0; 4],
                strides: [4, 0, 0, 0],
                storage: Storage::Host(PoolBuf::detached(vec![0; 16])),
            };
            let f = ctx.new_frame(seq, Some(seq as i64), (1, 10), Some(Arc::new(image)));
            if !ctx.emit(f) {
                break;
            }
        }
        Ok(())
    }
}

/// Fails (or panics) on chosen frames; optionally slow.
struct Flaky {
    fail_every: u64,
    panic_at: Option<u64>,
    delay: Duration,
}

impl Stage for Flaky {
    fn describe(&self) -> String {
        "flaky".into()
    }
    fn process(&mut self, frame: &mut Frame) -> Result<(), StageError> {
        std::thread::sleep(self.delay);
        if Some(frame.seq) == self.panic_at {
            panic!("boom");
        }
        if self.fail_every > 0 && frame.seq.is_multiple_of(self.fail_every) {
            return Err(StageError::Frame(format!("bad frame {}", frame.seq)));
        }
        Ok(())
    }
}

type Seen = Arc<Mutex<Vec<(u64, usize)>>>;

/// Records (seq, image address) of every frame.
struct Recorder(Seen, Duration);

impl Sink for Recorder {
    fn describe(&self) -> String {
        "recorder".into()
    }
    fn write(&mut self, frame: &Frame) -> Result<(), StageError> {
        std::thread::sleep(self.1);
        let addr = frame.image.as_ref().map_or(0, |i| Arc::as_ptr(i) as usize);
        self.0.lock().unwrap().push((frame.seq, addr));
        Ok(())
    }
    fn finish(&mut self) -> Result<(), String> {
        Ok(())
    }
}

/// A pipeline whose structure comes from `toml` and whose bodies are given.
fn pipeline(toml: &str, bodies: Vec<Body>) -> Pipeline {
    let cfg = crate::config::parse(Path::new("t.toml"), toml.to_string()).unwrap();
    let graph = crate::graph::check(&cfg).unwrap();
    Pipeline::new(&cfg, graph, bodies)
}

const LINEAR: &str = "[sources.cam]\nkind = \"file\"\nuri = \"/dev/null\"\n[stages.s]\nkind = \"preprocess\"\nwidth = 4\nheight = 4\ninputs = [\"cam\"]\nON_ERROR\n[sinks.out]\nkind = \"null\"\ninputs = [\"s\"]\nQUEUE\n";

/// source → stage → sink, built but not run; the sink records what it sees.
fn linear_pipeline(on_error: &str, queue: &str, source: u64, stage: Flaky, sink_delay: Duration) -> (Pipeline, Seen) {
    let seen = Seen::default();
    let toml = LINEAR.replace("ON_ERROR", on_error).replace("QUEUE", queue);
    let bodies = vec![
        Body::Source(Box::new(Counter(source))),
        Body::Stage(Box::new(stage)),
        Body::Sink(Box::new(Recorder(seen.clone(), sink_delay))),
    ];
    (pipeline(&toml, bodies), seen)
}

const PASS: Flaky = Flaky { fail_every: 0, panic_at: None, delay: Duration::ZERO };

fn linear(on_error: &str, queue: &str, source: u64, stage: Flaky, sink_delay: Duration) -> (RunReport, Seen) {
    let (p, seen) = linear_pipeline(on_error, queue, source, stage, sink_delay);
    (p.run(Shutdown::new(), Arc::new(Accounting::default()), None), seen)
}

/// The sink's dropped frames of stream `cam`, as its per-stream counters say.
fn sink_stream_dropped(queue: &str) -> (u64, u64) {
    let (p, _) = linear_pipeline("", queue, 200, PASS, Duration::from_millis(2));
    let stats = p.stats().to_vec();
    let r = p.run(Shutdown::new(), Arc::new(Accounting::default()), None);
    let per_stream: u64 = stats[2].stream_counts().iter().map(|(_, c)| c[2]).sum();
    (r.nodes[2].dropped, per_stream)
}

/// Either drop policy counts each dropped frame for its stream too.
#[test]
fn dropped_frames_are_counted_per_stream_under_both_policies() {
    for policy in ["drop_oldest", "drop_newest"] {
        let (node, per_stream) = sink_stream_dropped(&format!("queue = {{ capacity = 2, when_full = \"{policy}\" }}"));
        assert!(node > 0, "{policy}: something was dropped");
        assert_eq!(per_stream, node, "{policy}: per-stream dropped = node dropped");
    }
}

#[test]
fn skip_policy_counts_failed_frames_and_goes_on() {
    let (r, seen) = linear("", "", 20, Flaky { fail_every: 4, panic_at: None, delay: Duration::ZERO }, Duration::ZERO);
    assert_eq!((r.frames.decoded, r.frames.processed, r.frames.dropped, r.frames.failed), (20, 15, 0, 5));
    assert!(r.frames.balanced() && r.fatal.is_none());
    let seqs: Vec<u64> = seen.lock().unwrap().iter().map(|s| s.0).collect();
    assert_eq!(seqs, (1..20).filter(|s| s % 4 != 0).collect::<Vec<_>>(), "order kept, failed frames skipped");
    assert_eq!(r.nodes[1].failed, 5);
}

#[test]
fn stop_policy_stops_the_pipeline_and_drains() {
    let (r, _) = linear(
        "on_error = \"stop\"",
        "",
        100_000,
        Flaky { fail_every: 7, panic_at: None, delay: Duration::from_millis(1) },
        Duration::ZERO,
    );
    assert_eq!(r.fatal.as_deref(), Some("stage `s` failed on stream `cam` frame 0: bad frame 0"));
    assert!(r.frames.decoded < 100, "sources stopped early: {:?}", r.frames);
    assert!(r.frames.balanced(), "{:?}", r.frames);
}

#[test]
fn panic_in_a_stage_is_caught_and_handled_by_policy() {
    // skip (the default): the frame fails, the stage and the stream go on.
    let (r, seen) = linear("", "", 50, Flaky { fail_every: 0, panic_at: Some(3), delay: Duration::ZERO }, Duration::ZERO);
    assert!(r.fatal.is_none(), "{:?}", r.fatal);
    assert_eq!((r.frames.decoded, r.frames.processed, r.frames.failed), (50, 49, 1));
    assert!(r.frames.balanced(), "{:?}", r.frames);
    assert!(!seen.lock().unwrap().iter().any(|s| s.0 == 3));
    // stop: the pipeline stops, naming the stage, stream and frame; frames in flight drain.
    let (r, _) = linear(
        "on_error = \"stop\"",
        "",
        1000,
        Flaky { fail_every: 0, panic_at: Some(3), delay: Duration::from_millis(1) },
        Duration::ZERO,
    );
    assert_eq!(r.fatal.as_deref(), Some("stage `s` failed on stream `cam` frame 3: panic: boom"));
    assert!(r.frames.balanced(), "{:?}", r.frames);
    assert_eq!(r.frames.processed, 3);
}

#[test]
fn drop_oldest_keeps_the_newest_frames() {
    let (r, seen) = linear("", "queue = { capacity = 2, when_full = \"drop_oldest\" }", 200, PASS, Duration::from_millis(2));
    assert!(r.frames.dropped > 0 && r.frames.balanced(), "{:?}", r.frames);
    assert_eq!(r.nodes[2].dropped, r.frames.dropped);
    let seen = seen.lock().unwrap();
    assert_eq!(seen.last().unwrap().0, 199, "the newest frame is delivered");
    assert!(seen.windows(2).all(|w| w[0].0 < w[1].0), "order kept");
}

#[test]
fn drop_newest_keeps_the_oldest_frames() {
    let (r, seen) = linear("", "queue = { capacity = 2, when_full = \"drop_newest\" }", 200, PASS, Duration::from_millis(2));
    assert!(r.frames.dropped > 0 && r.frames.balanced(), "{:?}", r.frames);
    assert_eq!(seen.lock().unwrap()[0].0, 0);
}

#[test]
fn fan_out_shares_the_image_and_fan_in_merges() {
    let toml = "[sources.a]\nkind = \"file\"\nuri = \"/dev/null\"\n[sources.b]\nkind = \"file\"\nuri = \"/dev/null\"\n[sinks.x]\nkind = \"null\"\ninputs = [\"a\", \"b\"]\n[sinks.y]\nkind = \"null\"\ninputs = [\"a\"]\n";
    let (x, y) = (Seen::default(), Seen::default());
    let bodies = vec![
        Body::Source(Box::new(Counter(30))),
        Body::Source(Box::new(Counter(20))),
        Body::Sink(Box::new(Recorder(x.clone(), Duration::ZERO))),
        Body::Sink(Box::new(Recorder(y.clone(), Duration::ZERO))),
    ];
    let p = pipeline(toml, bodies);
    let stats = p.stats().to_vec();
    let r = p.run(Shutdown::new(), Arc::new(Accounting::default()), None);
    assert_eq!((r.frames.decoded, r.frames.processed), (50, 50));
    // Sink x counts each stream it merged: [in, out, dropped, failed].
    let mut per_stream = stats[2].stream_counts();
    per_stream.sort_by(|a, b| a.0.cmp(&b.0));
    assert_eq!(per_stream, vec![(Arc::from("a"), [30, 30, 0, 0]), (Arc::from("b"), [20, 20, 0, 0])]);
    let (x, y) = (x.lock().unwrap(), y.lock().unwrap());
    assert_eq!(x.len(), 50, "fan-in: both sources reach x");
    assert_eq!(y.len(), 30);
    // Every frame of `a` seen by y is the very same image x saw (shared, not copied).
    for (seq, addr) in y.iter() {
        assert!(x.iter().any(|(s, a)| s == seq && a == addr), "frame {seq} image shared");
    }
}

#[test]
fn interrupt_stops_sources_and_drains_in_flight_frames() {
    let seen = Seen::default();
    let toml = LINEAR.replace("ON_ERROR", "").replace("QUEUE", "");
    let bodies = vec![
        Body::Source(Box::new(Counter(1_000_000))),
        Body::Stage(Box::new(Flaky { fail_every: 0, panic_at: None, delay: Duration::from_millis(1) })),
        Body::Sink(Box::new(Recorder(seen.clone(), Duration::ZERO))),
    ];
    let sd = Shutdown::new();
    let sd2 = sd.clone();
    std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(100));
        sd2.interrupt(2);
    });
    let r = pipeline(&toml, bodies).run(sd, Arc::new(Accounting::default()), None);
    assert_eq!(r.interrupted_by_signal, Some(2));
    assert!(r.frames.decoded > 0 && r.frames.decoded < 1_000_000);
    assert_eq!(r.frames.processed, r.frames.decoded, "nothing lost: {:?}", r.frames);
    assert_eq!(seen.lock().unwrap().len() as u64, r.frames.processed);
}

#[test]
fn live_stats_show_queue_depth_and_capacity_while_running() {
    let (p, _) = linear_pipeline("", "queue = { capacity = 4 }", 60, PASS, Duration::from_millis(5));
    let stats = p.stats().to_vec();
    // Known before the run: what a metrics endpoint shows while models load.
    let caps: Vec<usize> = stats.iter().map(|s| s.capacity.load(Ordering::Relaxed)).collect();
    assert_eq!(caps, vec![0, 8, 4]);
    let run = std::thread::spawn(move || p.run(Shutdown::new(), Arc::new(Accounting::default()), None));
    // The slow sink's queue fills up; its depth is visible while the pipeline runs.
    let mut deepest = 0;
    while !run.is_finished() {
        let d = stats[2].depth();
        // Read while frames move: the frame being handed over (taken, not yet counted) may show for an instant.
        assert!(d <= 4 + 1, "depth {d} over capacity");
        deepest = deepest.max(d);
        std::thread::sleep(Duration::from_millis(1));
    }
    let r = run.join().unwrap();
    assert_eq!(r.frames.processed, 60);
    assert!(deepest >= 3, "the sink's queue was seen filling up (deepest {deepest})");
    assert!(stats.iter().all(|s| s.depth() == 0), "queues empty at the end");
    assert_eq!(stats[2].queued.load(Ordering::Relaxed), 60);
    assert!(stats[0].busy_ns.load(Ordering::Relaxed) > 0, "the source's busy time is counted");
}

/// Emits frames with a lost/reconnected pair in the middle.
struct Flapping(u64);

impl Source for Flapping {
    fn describe(&self) -> String {
        "flapping".into()
    }
    fn run(&mut self, ctx: &mut SourceCtx<'_>) -> Result<(), String> {
        let mut c = Counter(self.0 / 2);
        c.run(ctx)?;
        ctx.event(EventKind::Lost { reason: "end of stream".into() });
        ctx.event(EventKind::Reconnected { gap_ms: 7, attempts: 3 });
        c.run(ctx)
    }
}

type Log = Arc<Mutex<Vec<String>>>;

/// Records frames (`f`) and events (their name), in arrival order.
struct EventLog(Log, Duration);

impl Sink for EventLog {
    fn describe(&self) -> String {
        "event log".into()
    }
    fn write(&mut self, _frame: &Frame) -> Result<(), StageError> {
        std::thread::sleep(self.1);
        self.0.lock().unwrap().push("f".into());
        Ok(())
    }
    fn event(&mut self, event: &Event) -> Result<(), String> {
        self.0.lock().unwrap().push(format!("{}:{}", event.stream, event.name()));
        Ok(())
    }
    fn finish(&mut self) -> Result<(), String> {
        Ok(())
    }
}

fn flapping(queue: &str, sink_delay: Duration) -> (RunReport, Vec<String>) {
    let log = Log::default();
    let toml = LINEAR.replace("ON_ERROR", "").replace("QUEUE", queue);
    let bodies =
        vec![Body::Source(Box::new(Flapping(20))), Body::Stage(Box::new(PASS)), Body::Sink(Box::new(EventLog(log.clone(), sink_delay)))];
    let report = pipeline(&toml, bodies).run(Shutdown::new(), Arc::new(Accounting::default()), None);
    let log = log.lock().unwrap().clone();
    (report, log)
}

#[test]
fn events_pass_through_stages_in_order_and_are_not_frames() {
    let (r, log) = flapping("", Duration::ZERO);
    let mut expected = vec!["f".to_string(); 10];
    expected.extend(["cam:lost".to_string(), "cam:reconnected".to_string()]);
    expected.extend(vec!["f".to_string(); 10]);
    assert_eq!(log, expected);
    assert_eq!((r.frames.decoded, r.frames.processed), (20, 20));
    assert!(r.frames.balanced());
    let src = &r.nodes[0];
    assert_eq!((src.stream_lost, src.reconnects, src.longest_gap_ms), (1, 1, 7));
    assert!(r.render().contains("cam: stream lost 1×, reconnected 1× (longest gap 0.0 s)"), "{}", r.render());
}

#[test]
fn full_drop_oldest_queues_drop_frames_never_events() {
    // A slow sink behind a one-frame queue: frames are dropped, both events arrive, accounting holds.
    let (r, log) = flapping("queue = { capacity = 1, when_full = \"drop_oldest\" }", Duration::from_millis(5));
    let events: Vec<&String> = log.iter().filter(|e| *e != "f").collect();
    assert_eq!(events, ["cam:lost", "cam:reconnected"]);
    assert!(r.frames.dropped > 0, "{:?}", r.frames);
    assert_eq!(r.frames.processed as usize, log.len() - 2);
    assert!(r.frames.balanced(), "{:?}", r.frames);
}

/// Raises a `crossed` event on every third frame, and one more at the end of its input.
struct Raiser;

impl Stage for Raiser {
    fn describe(&self) -> String {
        "raiser".into()
    }
    fn process(&mut self, frame: &mut Frame) -> Result<(), StageError> {
        if frame.seq % 3 == 2 {
            let track = crate::frame::TrackRef { id: frame.seq, class: 0, label: None };
            let kind = EventKind::Crossed { line: "gate".into(), track, direction: crate::frame::Direction::In, seq: frame.seq };
            frame.events.push(Event::new(frame.stream.clone(), kind));
        }
        Ok(())
    }
    fn finish(&mut self) -> Vec<Event> {
        let track = crate::frame::TrackRef { id: 99, class: 0, label: None };
        vec![Event::new(Arc::from("cam"), EventKind::Entered { zone: "desk".into(), track, seq: 9 })]
    }
}

/// A stage's events reach the sink right after their frame, the end-of-input
/// ones after the last frame; they are counted, never dropped, and not frames.
#[test]
fn stage_events_follow_their_frame_and_are_counted() {
    for (queue, delay) in [("", Duration::ZERO), ("queue = { capacity = 1, when_full = \"drop_oldest\" }", Duration::from_millis(3))] {
        let log = Log::default();
        let toml = LINEAR.replace("ON_ERROR", "").replace("QUEUE", queue);
        let bodies =
            vec![Body::Source(Box::new(Counter(10))), Body::Stage(Box::new(Raiser)), Body::Sink(Box::new(EventLog(log.clone(), delay)))];
        let r = pipeline(&toml, bodies).run(Shutdown::new(), Arc::new(Accounting::default()), None);
        let log = log.lock().unwrap().clone();
        let events: Vec<&String> = log.iter().filter(|e| *e != "f").collect();
        assert_eq!(events, ["cam:crossed", "cam:crossed", "cam:crossed", "cam:entered"], "{queue}");
        assert_eq!(log.last().map(String::as_str), Some("cam:entered"), "after the last frame: {log:?}");
        assert!(r.frames.balanced(), "{:?}", r.frames);
        assert_eq!(r.frames.processed as usize, log.len() - 4);
        if queue.is_empty() {
            let mut want = Vec::new();
            for seq in 0..10 {
                want.push("f".to_string());
                if seq % 3 == 2 {
                    want.push("cam:crossed".into());
                }
            }
            want.push("cam:entered".into());
            assert_eq!(log, want, "each event right after its frame");
        }
        let rows: Vec<(String, String, u64)> = r.counts.iter().map(|c| (c.name.clone(), c.what.clone(), c.count)).collect();
        assert_eq!(rows, [("gate".to_string(), "in".to_string(), 3), ("desk".to_string(), "entered".to_string(), 1)]);
        assert!(r.render().contains("s: line `gate` (cam) class 0: in 3, out 0"), "{}", r.render());
    }
}
