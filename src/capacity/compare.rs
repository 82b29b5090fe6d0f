//! `infer-stream compare A.toml B.toml`: two versions of a pipeline on the
//! same input, in interleaved rounds: speed side by side with the ratio B/A
//! and its spread, result agreement of B against A per result kind, the
//! frames where they disagree most, and gates that fail a regression.

use std::path::{Path, PathBuf};

use serde::Serialize;

use super::agreement::{self, Kind, KindAgreement, Results};
use super::edit::Doc;
use super::measure::{Measured, Plan, Warmup, measure};
use super::sweep::Summary;
use super::{Error, Spread};
use crate::stages::BuildOptions;

/// Version of the JSON report (`docs/compare-schema.json`).
pub const SCHEMA: &str = "infer-stream.compare/1";

/// Limits that make the comparison fail (B regressed).
#[derive(Debug, Clone, Default)]
pub struct Gates {
    /// A's fps / B's fps (median over rounds) at most this.
    pub max_slowdown: Option<f64>,
    /// Every result kind's agreement at least this.
    pub min_agreement: Option<f64>,
    /// Boxes and tracks: B's recall against A at least this.
    pub min_recall: Option<f64>,
    /// Text: B's character error rate against A at most this.
    pub max_cer: Option<f64>,
}

#[derive(Debug, Clone)]
pub struct CompareOptions {
    pub build: BuildOptions,
    pub rounds: usize,
    pub warmup: u64,
    /// Compare only this node of A with this node of B (e.g. two branches of one graph).
    pub nodes: Option<(String, String)>,
    /// Write side-by-side annotated pictures of the frames that disagree most here.
    pub write_disagreements: Option<PathBuf>,
    /// How many of those frames to list.
    pub worst: usize,
    pub gates: Gates,
    /// Compare even when A and B read different inputs (speed only makes
    /// sense then; their results cannot agree).
    pub inputs_differ: bool,
}

/// Ratios B/A per round.
#[derive(Debug, Clone, Serialize)]
pub struct Ratios {
    pub fps: Spread,
    pub p50_ms: Spread,
    pub p95_ms: Spread,
    pub p99_ms: Spread,
    pub cpu_percent: Spread,
    pub rss_mib: Spread,
}

/// A frame where B's results differ from A's.
#[derive(Debug, Clone, Serialize)]
pub struct Disagreement {
    pub stream: String,
    pub seq: u64,
    /// The lowest per-frame score over the result kinds (1.0: the same).
    pub score: f64,
    pub kind: Kind,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Gate {
    pub gate: String,
    pub limit: f64,
    pub value: f64,
    pub passed: bool,
}

#[derive(Debug, Clone, Serialize)]
pub struct CompareReport {
    pub schema: &'static str,
    pub a: String,
    pub b: String,
    pub rounds: usize,
    pub frames_per_run: Option<u64>,
    pub warmup_frames: u64,
    pub speed_a: Summary,
    pub speed_b: Summary,
    /// B / A, per round.
    pub ratio: Ratios,
    pub agreement: Vec<KindAgreement>,
    pub disagreements: Vec<Disagreement>,
    pub gates: Vec<Gate>,
    /// Every gate passed.
    pub passed: bool,
    /// A and B read different inputs (`--inputs-differ`): the agreement compares different footage.
    pub inputs_differ: bool,
}

/// A scratch folder for one comparison, removed when dropped.
struct Scratch(PathBuf);

impl Scratch {
    fn new() -> Result<Scratch, Error> {
        let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
        let p = std::env::temp_dir().join(format!("infer-stream-compare-{}-{nanos}", std::process::id()));
        std::fs::create_dir_all(&p).map_err(|e| Error::Io(format!("{}: {e}", p.display())))?;
        Ok(Scratch(p))
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn run_captured(doc: &Doc, out: &Path, images: Option<&Path>, o: &CompareOptions, plan: &Plan) -> Result<Measured, Error> {
    let mut d = doc.clone();
    d.capture(out, images);
    let (cfg, graph) = d.build()?;
    Ok(measure(&cfg, &graph, &o.build, plan)?.0)
}

/// Why A and B cannot be compared as given: they read different inputs, so
/// their results cannot agree and their speeds measure different work.
/// `None` when they read the same inputs.
pub fn different_inputs(a: &Doc, b: &Doc) -> Option<String> {
    let (ia, ib) = (a.inputs(), b.inputs());
    if ia.iter().map(|i| &i.key).eq(ib.iter().map(|i| &i.key)) {
        return None;
    }
    let list = |v: &[super::edit::Input]| {
        if v.is_empty() {
            "nothing".to_string()
        } else {
            v.iter().map(|i| format!("`{}` = {}", i.source, i.shown)).collect::<Vec<_>>().join(", ")
        }
    };
    Some(format!(
        "A and B read different inputs: A ({}) reads {}; B ({}) reads {}: results of different inputs cannot agree, and their speeds \
         measure different work; give both pipelines the same input (or pass --inputs-differ to compare them anyway)",
        a.path.display(),
        list(&ia),
        b.path.display(),
        list(&ib)
    ))
}

pub fn compare(a: &Doc, b: &Doc, o: &CompareOptions, mut progress: impl FnMut(usize, &str, &Measured)) -> Result<CompareReport, Error> {
    // Both must build before anything is measured.
    for d in [a, b] {
        let mut d = d.clone();
        d.capture(Path::new("/dev/null"), None);
        d.build()?;
    }
    let differ = different_inputs(a, b);
    if let (Some(why), false) = (&differ, o.inputs_differ) {
        return Err(Error::Setting(why.clone()));
    }
    let inputs_differ = differ.is_some();
    let scratch = Scratch::new()?;
    let plan = Plan { warmup: Warmup::Frames(o.warmup), window: None };
    let (mut runs_a, mut runs_b) = (Vec::new(), Vec::new());
    let (res_a, res_b) = (scratch.0.join("a.ndjson"), scratch.0.join("b.ndjson"));
    let (mut got_a, mut got_b) = (None, None);
    for round in 0..o.rounds.max(1) {
        // A first in even rounds, B first in odd ones.
        let order = if round % 2 == 0 { [true, false] } else { [false, true] };
        for is_a in order {
            let (doc, out, runs) = if is_a { (a, &res_a, &mut runs_a) } else { (b, &res_b, &mut runs_b) };
            let m = run_captured(doc, out, None, o, &plan)?;
            progress(round, if is_a { "A" } else { "B" }, &m);
            runs.push(m);
            let got = if is_a { &mut got_a } else { &mut got_b };
            if got.is_none() {
                *got = Some(Results::read(out).map_err(Error::Io)?);
            }
        }
    }
    let (ra, rb) = (got_a.unwrap_or_default(), got_b.unwrap_or_default());
    let pairs = match &o.nodes {
        Some((na, nb)) => {
            let kind = ra.nodes().into_iter().find(|(n, _)| n == na).map(|x| x.1);
            let kind_b = rb.nodes().into_iter().find(|(n, _)| n == nb).map(|x| x.1);
            match (kind, kind_b) {
                (Some(k), Some(kb)) if k == kb => vec![(na.clone(), nb.clone(), k)],
                (Some(_), Some(_)) => {
                    return Err(Error::Setting(format!("--nodes {na}:{nb}: the two nodes give different kinds of results")));
                }
                (None, _) => return Err(Error::Setting(format!("--nodes: A has no results from a node `{na}`"))),
                (_, None) => return Err(Error::Setting(format!("--nodes: B has no results from a node `{nb}`"))),
            }
        }
        None => agreement::pairs(&ra, &rb),
    };
    let agreement: Vec<KindAgreement> = pairs.iter().map(|(na, nb, k)| agreement::agree(&ra, &rb, na, nb, *k)).collect();

    // The frames that disagree most: each frame's lowest score over the kinds.
    let mut worst: Vec<Disagreement> = Vec::new();
    for g in &agreement {
        for ((stream, seq), score) in &g.per_frame {
            match worst.iter_mut().find(|d| d.stream == *stream && d.seq == *seq) {
                Some(d) if *score < d.score => {
                    d.score = *score;
                    d.kind = g.kind;
                }
                Some(_) => {}
                None => worst.push(Disagreement { stream: stream.clone(), seq: *seq, score: *score, kind: g.kind, image: None }),
            }
        }
    }
    worst.retain(|d| d.score < 1.0);
    worst.sort_by(|x, y| x.score.total_cmp(&y.score).then(x.seq.cmp(&y.seq)));
    worst.truncate(o.worst);
    if let Some(dir) = &o.write_disagreements
        && !worst.is_empty()
    {
        write_pictures(a, b, o, &plan, &scratch.0, dir, &mut worst)?;
    }

    let ratio = |f: fn(&Measured) -> f64| {
        Spread::of(&runs_a.iter().zip(&runs_b).map(|(x, y)| if f(x) == 0.0 { f64::NAN } else { f(y) / f(x) }).collect::<Vec<_>>())
    };
    let ratios = Ratios {
        fps: ratio(|m| m.fps),
        p50_ms: ratio(|m| m.latency_ms.p50),
        p95_ms: ratio(|m| m.latency_ms.p95),
        p99_ms: ratio(|m| m.latency_ms.p99),
        cpu_percent: ratio(|m| m.cpu_percent),
        rss_mib: ratio(|m| m.rss_mib),
    };
    let mut gates = Vec::new();
    let g = &o.gates;
    if let Some(limit) = g.max_slowdown {
        let value = if ratios.fps.median > 0.0 { 1.0 / ratios.fps.median } else { f64::INFINITY };
        gates.push(Gate { gate: "max-slowdown (A fps / B fps)".into(), limit, value, passed: value <= limit });
    }
    for k in &agreement {
        if let Some(limit) = g.min_agreement {
            gates.push(Gate {
                gate: format!(
                    "min-agreement {} {} ({})",
                    k.node_b,
                    k.metric,
                    serde_json::to_value(k.kind).ok().and_then(|v| v.as_str().map(String::from)).unwrap_or_default()
                ),
                limit,
                value: k.agreement,
                passed: k.agreement >= limit,
            });
        }
        if let (Some(limit), Some(r)) = (g.min_recall, k.recall)
            && matches!(k.kind, Kind::Boxes | Kind::Tracks)
        {
            gates.push(Gate { gate: format!("min-recall {}", k.node_b), limit, value: r, passed: r >= limit });
        }
        if let (Some(limit), Some(c)) = (g.max_cer, k.cer) {
            gates.push(Gate { gate: format!("max-cer {}", k.node_b), limit, value: c, passed: c <= limit });
        }
    }
    if agreement.is_empty() && (g.min_agreement.is_some() || g.min_recall.is_some() || g.max_cer.is_some()) {
        gates.push(Gate { gate: "results to compare (none found)".into(), limit: 1.0, value: 0.0, passed: false });
    }
    let passed = gates.iter().all(|g| g.passed);
    Ok(CompareReport {
        schema: SCHEMA,
        a: a.path.display().to_string(),
        b: b.path.display().to_string(),
        rounds: o.rounds.max(1),
        frames_per_run: o.build.max_frames,
        warmup_frames: o.warmup,
        speed_a: Summary::of(&runs_a),
        speed_b: Summary::of(&runs_b),
        ratio: ratios,
        agreement,
        disagreements: worst,
        gates,
        passed,
        inputs_differ,
    })
}

/// Run A and B once more with annotated snapshots of every frame, and put
/// the two pictures of each listed frame side by side in `dir`.
fn write_pictures(
    a: &Doc,
    b: &Doc,
    o: &CompareOptions,
    plan: &Plan,
    scratch: &Path,
    dir: &Path,
    worst: &mut [Disagreement],
) -> Result<(), Error> {
    let io = |p: &Path, e: String| Error::Io(format!("{}: {e}", p.display()));
    std::fs::create_dir_all(dir).map_err(|e| io(dir, e.to_string()))?;
    let (sa, sb) = (scratch.join("shots-a"), scratch.join("shots-b"));
    run_captured(a, &scratch.join("pa.ndjson"), Some(&sa), o, plan)?;
    run_captured(b, &scratch.join("pb.ndjson"), Some(&sb), o, plan)?;
    for d in worst.iter_mut() {
        let name = format!("{}-{:06}.png", crate::stages::sinks::stream_file_name(&d.stream), d.seq);
        let (Ok(pa), Ok(pb)) = (image::open(sa.join(&name)), image::open(sb.join(&name))) else { continue };
        let (pa, pb) = (pa.to_rgb8(), pb.to_rgb8());
        let gap = 8;
        let mut out = image::RgbImage::from_pixel(pa.width() + gap + pb.width(), pa.height().max(pb.height()), image::Rgb([255, 255, 255]));
        image::imageops::replace(&mut out, &pa, 0, 0);
        image::imageops::replace(&mut out, &pb, (pa.width() + gap) as i64, 0);
        let path = dir.join(format!("{}-{:06}-a-vs-b.png", crate::stages::sinks::stream_file_name(&d.stream), d.seq));
        out.save(&path).map_err(|e| io(&path, e.to_string()))?;
        d.image = Some(path.display().to_string());
    }
    Ok(())
}

/// A row of the speed table: its name, the figure, the ratio, decimals.
type Row = (&'static str, fn(&Summary) -> Spread, Spread, usize);

impl CompareReport {
    pub fn render(&self) -> String {
        let mut s = format!(
            "compare A = {} with B = {}: {} interleaved round(s){}; median (min–max over rounds)\n",
            self.a,
            self.b,
            self.rounds,
            self.frames_per_run.map(|f| format!(", {f} frames per source per run, {} warm-up", self.warmup_frames)).unwrap_or_default()
        );
        if self.inputs_differ {
            s.push_str("inputs: A and B read different inputs (--inputs-differ): the agreement below compares different footage\n");
        }
        s.push_str(&format!("{:<8} {:>22} {:>22} {:>22}\n", "", "A", "B", "B/A"));
        let rows: [Row; 6] = [
            ("fps", |m| m.fps, self.ratio.fps, 1),
            ("p50 ms", |m| m.p50_ms, self.ratio.p50_ms, 1),
            ("p95 ms", |m| m.p95_ms, self.ratio.p95_ms, 1),
            ("p99 ms", |m| m.p99_ms, self.ratio.p99_ms, 1),
            ("cpu %", |m| m.cpu_percent, self.ratio.cpu_percent, 0),
            ("RSS MiB", |m| m.rss_mib, self.ratio.rss_mib, 0),
        ];
        for (name, f, r, d) in rows {
            s.push_str(&format!("{name:<8} {:>22} {:>22} {:>22}\n", f(&self.speed_a).show(d), f(&self.speed_b).show(d), r.show(3)));
        }
        let r = &self.ratio.fps;
        s.push_str(&if self.rounds < 2 {
            format!("speed: B/A fps {:.3} in one round: no spread to judge it by (use --rounds 3 or more)\n", r.median)
        } else if r.contains(1.0) {
            format!(
                "speed: B/A fps {:.3} ± {:.3}: within the spread over rounds of 1.0 (no measurable difference)\n",
                r.median,
                r.half_range()
            )
        } else if r.median > 1.0 {
            format!("speed: B is faster, {:.3}× A's fps (range {:.3}–{:.3} over rounds)\n", r.median, r.min, r.max)
        } else {
            format!("speed: B is slower, {:.3}× A's fps (range {:.3}–{:.3} over rounds)\n", r.median, r.min, r.max)
        });
        if self.agreement.is_empty() {
            s.push_str("results: none to compare (no boxes, text, labels, speech or tracks in the outputs)\n");
        }
        for k in &self.agreement {
            let kind = serde_json::to_value(k.kind).ok().and_then(|v| v.as_str().map(String::from)).unwrap_or_default();
            let nodes = if k.node_a == k.node_b { k.node_a.clone() } else { format!("{} vs {}", k.node_a, k.node_b) };
            s.push_str(&format!("agreement {nodes} ({kind}): {} {:.4}", k.metric, k.agreement));
            if let (Some(p), Some(r)) = (k.precision, k.recall) {
                s.push_str(&format!(", precision {p:.4}, recall {r:.4}"));
            }
            if let Some(i) = k.mean_iou {
                s.push_str(&format!(", mean IoU {i:.4}"));
            }
            if let Some(c) = k.cer {
                s.push_str(&format!(", CER {c:.4}"));
            }
            if let Some(w) = k.id_switches {
                s.push_str(&format!(", {w} id switch(es)"));
            }
            s.push_str(&format!(" ({} in A, {} in B, {} frames)\n", k.count_a, k.count_b, k.frames));
        }
        if !self.disagreements.is_empty() {
            s.push_str("frames that disagree most:\n");
            for d in &self.disagreements {
                s.push_str(&format!(
                    "  {} frame {}: score {:.3}{}\n",
                    d.stream,
                    d.seq,
                    d.score,
                    d.image.as_ref().map(|p| format!(" → {p}")).unwrap_or_default()
                ));
            }
        }
        for g in &self.gates {
            s.push_str(&format!("gate {}: {:.4} (limit {}) {}\n", g.gate, g.value, g.limit, if g.passed { "passed" } else { "FAILED" }));
        }
        if !self.gates.is_empty() {
            s.push_str(if self.passed { "result: B passes every gate\n" } else { "result: B regressed (a gate failed)\n" });
        }
        s
    }
}
