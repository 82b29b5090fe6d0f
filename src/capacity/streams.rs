//! `bench --capacity`: the largest number of paced streams this machine
//! keeps in real time within a latency budget. The pipeline's source is played
//! as N streams at its native rate; N doubles until a count fails, then the
//! gap is bisected; the answer is run once more to confirm it (when it fails
//! then, the search goes on below it). Each count runs for a set time with its
//! warm-up left out.

use std::time::Duration;

use serde::Serialize;

use super::Error;
use super::edit::Doc;
use super::measure::{Measured, Plan, Warmup, measure};
use crate::stages::BuildOptions;

/// Version of the JSON report (`docs/capacity-schema.json`).
pub const SCHEMA: &str = "infer-stream.capacity/1";

#[derive(Debug, Clone)]
pub struct CapacityOptions {
    pub build: BuildOptions,
    /// End-to-end p99 must stay under this.
    pub latency_budget_ms: f64,
    /// Dropped / decoded allowed (0: none).
    pub max_drops: f64,
    /// Measured time per count, and the warm-up before it.
    pub step_seconds: f64,
    pub warmup_seconds: f64,
    pub max_streams: usize,
}

/// One stream count tried.
#[derive(Debug, Clone, Serialize)]
pub struct Step {
    pub streams: usize,
    /// Every stream kept real time within the budget.
    pub ok: bool,
    /// Why not, when not.
    pub reason: Option<String>,
    #[serde(flatten)]
    pub measured: Measured,
}

#[derive(Debug, Clone, Serialize)]
pub struct CapacityReport {
    pub schema: &'static str,
    pub pipeline: String,
    /// The source played as each stream.
    pub input: String,
    pub latency_budget_ms: f64,
    pub max_drops: f64,
    pub step_seconds: f64,
    pub warmup_seconds: f64,
    /// Counts tried, in the order they were tried.
    pub steps: Vec<Step>,
    /// The answer: the largest count that kept up (0: not even one).
    pub streams: usize,
    /// Why the next count failed (`None` when `max_streams` was reached).
    pub limit: Option<String>,
    /// The answer in words.
    pub answer: String,
}

/// Why a step fails, if it does.
pub fn verdict(m: &Measured, o: &CapacityOptions) -> Option<String> {
    let mut why = Vec::new();
    if m.drop_fraction > o.max_drops {
        why.push(format!(
            "{} of {} frames dropped ({:.1}%, allowed {:.1}%)",
            m.frames.dropped,
            m.frames.decoded,
            m.drop_fraction * 100.0,
            o.max_drops * 100.0
        ));
    }
    if m.latency_ms.p99 > o.latency_budget_ms {
        why.push(format!("p99 latency {:.0} ms over the {:.0} ms budget", m.latency_ms.p99, o.latency_budget_ms));
    }
    // The slowest stream must see (nearly) every frame its source delivered.
    if m.source_fps > 0.0 && m.stream_fps_min < m.source_fps * (1.0 - o.max_drops) * 0.9 {
        why.push(format!("slowest stream {:.1} fps of the source's {:.1} fps", m.stream_fps_min, m.source_fps));
    }
    if m.frames.failed > 0 {
        why.push(format!("{} frames failed", m.frames.failed));
    }
    if m.frames.processed == 0 {
        why.push("no frame processed in the window".into());
    }
    if why.is_empty() {
        return None;
    }
    let bottleneck =
        m.bottleneck.as_ref().map(|b| format!(" (bottleneck: {b}, {:.0}% busy)", m.bottleneck_busy * 100.0)).unwrap_or_default();
    Some(format!("{}{bottleneck}", why.join("; ")))
}

/// Run one count.
pub fn step(doc: &Doc, n: usize, o: &CapacityOptions) -> Result<Step, Error> {
    let mut d = doc.clone();
    d.replicate_source(n)?;
    let (cfg, graph) = d.build()?;
    let plan = Plan { warmup: Warmup::Seconds(o.warmup_seconds), window: Some(Duration::from_secs_f64(o.step_seconds)) };
    let (measured, _) = measure(&cfg, &graph, &o.build, &plan)?;
    let reason = verdict(&measured, o);
    Ok(Step { streams: n, ok: reason.is_none(), reason, measured })
}

/// Double, then bisect, then run the answer again to confirm it, calling
/// `progress` after each step.
pub fn search(doc: &Doc, o: &CapacityOptions, mut progress: impl FnMut(&Step)) -> Result<CapacityReport, Error> {
    let mut steps: Vec<Step> = Vec::new();
    let mut run = |n: usize, steps: &mut Vec<Step>| -> Result<bool, Error> {
        let s = step(doc, n, o)?;
        progress(&s);
        let ok = s.ok;
        steps.push(s);
        Ok(ok)
    };
    let (mut good, mut bad) = (0usize, None::<usize>);
    let mut n = 1;
    loop {
        if run(n, &mut steps)? {
            good = n;
            if n >= o.max_streams {
                break;
            }
            n = (n * 2).min(o.max_streams);
        } else {
            bad = Some(n);
            break;
        }
    }
    loop {
        while let Some(b) = bad
            && b - good > 1
        {
            let mid = (good + b) / 2;
            if run(mid, &mut steps)? {
                good = mid;
            } else {
                bad = Some(mid);
            }
        }
        // The answer runs once more: a count that passed once by luck on a busy
        // machine fails here, and the search goes on below it.
        if good == 0 || run(good, &mut steps)? {
            break;
        }
        bad = Some(good);
        good = steps.iter().filter(|s| s.ok && s.streams < good).map(|s| s.streams).max().unwrap_or(0);
    }
    let input = steps.first().map(|s| s.measured.input.clone()).unwrap_or_default();
    let limit = bad
        .and_then(|b| steps.iter().find(|s| s.streams == b))
        .and_then(|s| s.reason.as_ref().map(|r| format!("{} streams: {r}", s.streams)));
    let plural = |n: usize| if n == 1 { "" } else { "s" };
    let answer = match good {
        0 => format!("not even 1 stream of {input} keeps real time at p99 < {:.0} ms", o.latency_budget_ms),
        g if bad.is_none() => {
            format!("{g} stream{} of {input} at p99 < {:.0} ms (the most tried: --max-streams)", plural(g), o.latency_budget_ms)
        }
        g => format!("{g} stream{} of {input} at p99 < {:.0} ms", plural(g), o.latency_budget_ms),
    };
    Ok(CapacityReport {
        schema: SCHEMA,
        pipeline: doc.path.display().to_string(),
        input,
        latency_budget_ms: o.latency_budget_ms,
        max_drops: o.max_drops,
        step_seconds: o.step_seconds,
        warmup_seconds: o.warmup_seconds,
        steps,
        streams: good,
        limit,
        answer,
    })
}

/// The header of the step table.
pub fn header() -> String {
    format!(
        "{:>7} {:>8} {:>10} {:>8} {:>8} {:>8} {:>8} {:>6} {:>8} {:>5}  {}\n",
        "streams", "fps", "stream fps", "p50 ms", "p95 ms", "p99 ms", "dropped", "cpu %", "RSS MiB", "gpu %", "result (bottleneck)"
    )
}

/// One row of the step table.
pub fn row(s: &Step) -> String {
    let m = &s.measured;
    let l = &m.latency_ms;
    let result = match &s.reason {
        None => format!("ok ({} {:.0}% busy)", m.bottleneck.as_deref().unwrap_or("-"), m.bottleneck_busy * 100.0),
        Some(r) => format!("FAIL: {r}"),
    };
    format!(
        "{:>7} {:>8.1} {:>10.1} {:>8.1} {:>8.1} {:>8.1} {:>8} {:>6.0} {:>8.1} {:>5}  {result}\n",
        s.streams,
        m.fps,
        m.stream_fps_min,
        l.p50,
        l.p95,
        l.p99,
        m.frames.dropped,
        m.cpu_percent,
        m.rss_mib,
        m.gpu_percent.map_or("-".to_string(), |g| format!("{g:.0}")),
    )
}

impl CapacityReport {
    /// The text report: the steps by stream count, then the answer.
    pub fn render(&self) -> String {
        let mut s = format!(
            "capacity of `{}`: N streams of {}, {:.0} s per count after {:.0} s warm-up; budget p99 < {:.0} ms, drops ≤ {:.1}%\n",
            self.pipeline,
            self.input,
            self.step_seconds,
            self.warmup_seconds,
            self.latency_budget_ms,
            self.max_drops * 100.0
        );
        s.push_str(&header());
        let mut steps: Vec<&Step> = self.steps.iter().collect();
        steps.sort_by_key(|s| s.streams);
        for st in steps {
            s.push_str(&row(st));
        }
        s.push_str(&format!("answer: {}\n", self.answer));
        if let Some(l) = &self.limit {
            s.push_str(&format!("limit: {l}\n"));
        }
        s
    }
}
