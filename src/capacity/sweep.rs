//! `bench --sweep KEY=V1,V2,…`: the same pipeline with settings varied (several
//! keys: every combination), run in interleaved rounds so machine noise hits
//! every variant alike; the spread over rounds says when two variants tie.

use serde::Serialize;

use super::edit::{Doc, Setting, show_value};
use super::measure::{Measured, Plan, Warmup, measure};
use super::{Error, Spread};
use crate::stages::BuildOptions;

/// Version of the JSON report (`docs/sweep-schema.json`).
pub const SCHEMA: &str = "infer-stream.sweep/1";

#[derive(Debug, Clone)]
pub struct SweepOptions {
    pub build: BuildOptions,
    pub rounds: usize,
    /// Frames per source left out of each run's figures.
    pub warmup: u64,
}

/// A run's figures over rounds.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Summary {
    pub fps: Spread,
    pub p50_ms: Spread,
    pub p95_ms: Spread,
    pub p99_ms: Spread,
    pub cpu_percent: Spread,
    pub rss_mib: Spread,
}

impl Summary {
    pub fn of(runs: &[Measured]) -> Summary {
        let s = |f: fn(&Measured) -> f64| Spread::of(&runs.iter().map(f).collect::<Vec<_>>());
        Summary {
            fps: s(|m| m.fps),
            p50_ms: s(|m| m.latency_ms.p50),
            p95_ms: s(|m| m.latency_ms.p95),
            p99_ms: s(|m| m.latency_ms.p99),
            cpu_percent: s(|m| m.cpu_percent),
            rss_mib: s(|m| m.rss_mib),
        }
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct Variant {
    /// `det.batch.max=4 det.intra_threads=2`.
    pub label: String,
    pub settings: Vec<(String, toml::Value)>,
    #[serde(flatten)]
    pub summary: Summary,
    /// Each round's figures, in round order.
    pub runs: Vec<Measured>,
}

/// The best variant for one figure, and whether the runner-up is within its spread.
#[derive(Debug, Clone, Serialize)]
pub struct Best {
    pub variant: String,
    pub runner_up: Option<String>,
    /// The ranges over rounds of the best and the runner-up overlap.
    pub tie: bool,
}

#[derive(Debug, Clone, Serialize)]
pub struct SweepReport {
    pub schema: &'static str,
    pub pipeline: String,
    pub rounds: usize,
    pub frames_per_run: Option<u64>,
    pub warmup_frames: u64,
    pub variants: Vec<Variant>,
    /// Highest median fps.
    pub best_throughput: Best,
    /// Lowest median p99 latency.
    pub best_latency: Best,
}

/// Every combination of the settings' values, the first key varying slowest.
pub fn combinations(settings: &[Setting]) -> Vec<Vec<(String, toml::Value)>> {
    let mut out: Vec<Vec<(String, toml::Value)>> = vec![Vec::new()];
    for s in settings {
        out = out
            .into_iter()
            .flat_map(|prefix| s.values.iter().map(move |v| [prefix.clone(), vec![(s.key.clone(), v.clone())]].concat()))
            .collect();
    }
    out
}

fn label(settings: &[(String, toml::Value)]) -> String {
    settings.iter().map(|(k, v)| format!("{k}={}", show_value(v))).collect::<Vec<_>>().join(" ")
}

/// The best by `key` (higher is better when `higher`), with tie detection.
fn best(variants: &[Variant], key: fn(&Summary) -> Spread, higher: bool) -> Best {
    let mut order: Vec<&Variant> = variants.iter().collect();
    order.sort_by(|a, b| {
        let (x, y) = (key(&a.summary).median, key(&b.summary).median);
        if higher { y.total_cmp(&x) } else { x.total_cmp(&y) }
    });
    let first = order[0];
    let second = order.get(1);
    Best {
        variant: first.label.clone(),
        runner_up: second.map(|v| v.label.clone()),
        tie: second.is_some_and(|v| key(&v.summary).overlaps(&key(&first.summary))),
    }
}

/// Build every variant first (a bad key or value fails before anything runs), then run the rounds.
pub fn sweep(
    doc: &Doc,
    settings: &[Setting],
    o: &SweepOptions,
    mut progress: impl FnMut(usize, &str, &Measured),
) -> Result<SweepReport, Error> {
    let combos = combinations(settings);
    let mut built = Vec::new();
    for c in &combos {
        let mut d = doc.clone();
        for (k, v) in c {
            d.set(k, v)?;
        }
        built.push(d.build()?);
    }
    let plan = Plan { warmup: Warmup::Frames(o.warmup), window: None };
    let mut runs: Vec<Vec<Measured>> = vec![Vec::new(); combos.len()];
    for round in 0..o.rounds {
        // Each round starts one variant later, so none always runs first or last.
        for k in 0..combos.len() {
            let i = (k + round) % combos.len();
            let (cfg, graph) = &built[i];
            let (m, _) = measure(cfg, graph, &o.build, &plan)?;
            progress(round, &label(&combos[i]), &m);
            runs[i].push(m);
        }
    }
    let variants: Vec<Variant> = combos
        .into_iter()
        .zip(runs)
        .map(|(settings, runs)| Variant { label: label(&settings), summary: Summary::of(&runs), settings, runs })
        .collect();
    Ok(SweepReport {
        schema: SCHEMA,
        pipeline: doc.path.display().to_string(),
        rounds: o.rounds,
        frames_per_run: o.build.max_frames,
        warmup_frames: o.warmup,
        best_throughput: best(&variants, |s| s.fps, true),
        best_latency: best(&variants, |s| s.p99_ms, false),
        variants,
    })
}

impl SweepReport {
    pub fn render(&self) -> String {
        let mut s = format!(
            "sweep of `{}`: {} variant(s) × {} interleaved round(s){}; median (min–max over rounds)\n",
            self.pipeline,
            self.variants.len(),
            self.rounds,
            self.frames_per_run.map(|f| format!(", {f} frames per source per run, {} warm-up", self.warmup_frames)).unwrap_or_default()
        );
        let w = self.variants.iter().map(|v| v.label.len()).max().unwrap_or(7).max(7);
        s.push_str(&format!("{:<w$}  {:>20}  {:>22}  {:>22}  {:>16}\n", "variant", "fps", "p50 ms", "p99 ms", "cpu %"));
        for v in &self.variants {
            let m = &v.summary;
            s.push_str(&format!(
                "{:<w$}  {:>20}  {:>22}  {:>22}  {:>16}\n",
                v.label,
                m.fps.show(1),
                m.p50_ms.show(1),
                m.p99_ms.show(1),
                m.cpu_percent.show(0)
            ));
        }
        for (what, b) in [("throughput", &self.best_throughput), ("latency (p99)", &self.best_latency)] {
            s.push_str(&format!("best for {what}: {}", b.variant));
            match (&b.runner_up, b.tie) {
                (Some(r), true) => s.push_str(&format!(" — a tie: {r} is within the spread over rounds\n")),
                (Some(r), false) => s.push_str(&format!(" (ahead of {r} beyond the spread over rounds)\n")),
                (None, _) => s.push('\n'),
            }
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn combinations_are_the_cross_product() {
        let s: Vec<Setting> = ["det.batch.max=1,4", "det.intra_threads=1,2,3"].iter().map(|s| s.parse().unwrap()).collect();
        let c = combinations(&s);
        assert_eq!(c.len(), 6);
        assert_eq!(label(&c[0]), "det.batch.max=1 det.intra_threads=1");
        assert_eq!(label(&c[5]), "det.batch.max=4 det.intra_threads=3");
    }

    #[test]
    fn a_best_within_the_runner_up_spread_is_a_tie() {
        let v = |label: &str, lo: f64, mid: f64, hi: f64| Variant {
            label: label.into(),
            settings: Vec::new(),
            summary: Summary { fps: Spread { median: mid, min: lo, max: hi }, ..Default::default() },
            runs: Vec::new(),
        };
        let b = best(&[v("a", 9.0, 10.0, 11.0), v("b", 10.5, 11.0, 12.0)], |s| s.fps, true);
        assert_eq!((b.variant.as_str(), b.tie), ("b", true));
        let b = best(&[v("a", 9.0, 10.0, 10.2), v("b", 10.5, 11.0, 12.0)], |s| s.fps, true);
        assert_eq!((b.variant.as_str(), b.tie), ("b", false));
    }
}
