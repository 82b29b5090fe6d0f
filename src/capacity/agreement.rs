//! Result agreement of pipeline B against pipeline A on the same frames, per
//! result kind: boxes matched one-to-one at IoU ≥ 0.5 (precision, recall,
//! mean IoU), recognised text (character error rate), class labels (top-1
//! agreement), speech segments (F1 by duration) and track ids (agreement with
//! the id mapping, and switches).

use std::collections::{BTreeMap, HashMap};
use std::path::Path;

use serde::Serialize;
use serde_json::Value;

/// A frame: its stream and number.
pub type FrameKey = (String, u64);

/// Results of one run: per frame, per producing node, the result JSON.
#[derive(Debug, Default)]
pub struct Results {
    pub frames: BTreeMap<FrameKey, BTreeMap<String, Value>>,
}

impl Results {
    /// Read an NDJSON results file (events and lines without a frame are skipped;
    /// a frame that reached the sink through several inputs is merged).
    pub fn read(path: &Path) -> Result<Results, String> {
        let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
        let mut r = Results::default();
        for line in text.lines().filter(|l| !l.trim().is_empty()) {
            let v: Value = serde_json::from_str(line).map_err(|e| format!("{}: {e}", path.display()))?;
            let (Some(stream), Some(seq)) = (v["stream"].as_str(), v["seq"].as_u64()) else { continue };
            let entry = r.frames.entry((stream.to_string(), seq)).or_default();
            if let Some(res) = v["results"].as_object() {
                for (node, val) in res {
                    entry.insert(node.clone(), val.clone());
                }
            }
        }
        Ok(r)
    }

    /// Each node that produced results, with its kind.
    pub fn nodes(&self) -> Vec<(String, Kind)> {
        let mut out: Vec<(String, Kind)> = Vec::new();
        for res in self.frames.values() {
            for (node, v) in res {
                if let Some(k) = Kind::of(v)
                    && !out.iter().any(|(n, _)| n == node)
                {
                    out.push((node.clone(), k));
                }
            }
        }
        out
    }
}

/// What a node's results are.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    Boxes,
    Text,
    Labels,
    Speech,
    Tracks,
}

impl Kind {
    pub fn of(v: &Value) -> Option<Kind> {
        if v.get("text_boxes").is_some() || v.get("detections").is_some() {
            Some(Kind::Boxes)
        } else if v.get("texts").is_some() {
            Some(Kind::Text)
        } else if v.get("classes").is_some() {
            Some(Kind::Labels)
        } else if v.get("tracks").is_some() {
            Some(Kind::Tracks)
        } else if v.get("probability").is_some() {
            Some(Kind::Speech)
        } else {
            None
        }
    }

    /// The headline score's name.
    pub fn metric(self) -> &'static str {
        match self {
            Kind::Boxes => "F1",
            Kind::Text => "1 - CER",
            Kind::Labels => "agreement",
            Kind::Speech => "F1",
            Kind::Tracks => "ID agreement",
        }
    }
}

/// Agreement of one pair of nodes (A's, B's).
#[derive(Debug, Clone, Serialize)]
pub struct KindAgreement {
    pub kind: Kind,
    pub node_a: String,
    pub node_b: String,
    /// The headline: 1.0 when B gives exactly A's results.
    pub agreement: f64,
    pub metric: &'static str,
    /// Boxes and tracks: B against A.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub precision: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub recall: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mean_iou: Option<f64>,
    /// Text: character error rate of B's text against A's.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cer: Option<f64>,
    /// Tracks: times a track of A was continued by another id in B.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub id_switches: Option<u64>,
    /// Items compared: boxes of A and B, characters of A, labels, seconds of speech in A.
    pub count_a: f64,
    pub count_b: f64,
    pub frames: usize,
    /// Per frame: the frame's own score (for the frames that disagree most).
    #[serde(skip)]
    pub per_frame: Vec<(FrameKey, f64)>,
}

/// IoU of two `[x0, y0, x1, y1]` boxes.
pub fn iou(a: [f64; 4], b: [f64; 4]) -> f64 {
    let w = (a[2].min(b[2]) - a[0].max(b[0])).max(0.0);
    let h = (a[3].min(b[3]) - a[1].max(b[1])).max(0.0);
    let inter = w * h;
    let area = |r: [f64; 4]| (r[2] - r[0]).max(0.0) * (r[3] - r[1]).max(0.0);
    let union = area(a) + area(b) - inter;
    if union <= 0.0 { 0.0 } else { inter / union }
}

fn bbox(v: &Value) -> Option<[f64; 4]> {
    let a = v.get("bbox")?.as_array()?;
    let f: Vec<f64> = a.iter().filter_map(Value::as_f64).collect();
    (f.len() == 4).then(|| [f[0], f[1], f[2], f[3]])
}

/// Greedy one-to-one matching at IoU ≥ `min_iou`, best pairs first; `same(i, j)` must hold.
pub fn match_boxes(a: &[[f64; 4]], b: &[[f64; 4]], min_iou: f64, same: impl Fn(usize, usize) -> bool) -> Vec<(usize, usize, f64)> {
    let mut pairs: Vec<(usize, usize, f64)> = Vec::new();
    for (i, x) in a.iter().enumerate() {
        for (j, y) in b.iter().enumerate() {
            let o = iou(*x, *y);
            if o >= min_iou && same(i, j) {
                pairs.push((i, j, o));
            }
        }
    }
    pairs.sort_by(|p, q| q.2.total_cmp(&p.2));
    let (mut used_a, mut used_b) = (vec![false; a.len()], vec![false; b.len()]);
    pairs.retain(|&(i, j, _)| {
        let keep = !used_a[i] && !used_b[j];
        if keep {
            used_a[i] = true;
            used_b[j] = true;
        }
        keep
    });
    pairs
}

fn items<'a>(v: Option<&'a Value>, key: &str) -> Vec<&'a Value> {
    v.and_then(|v| v.get(key)).and_then(Value::as_array).map(|a| a.iter().collect()).unwrap_or_default()
}

/// The frames either run has, in order.
fn keys<'a>(a: &'a Results, b: &'a Results) -> Vec<&'a FrameKey> {
    let mut k: Vec<&FrameKey> = a.frames.keys().chain(b.frames.keys()).collect();
    k.sort();
    k.dedup();
    k
}

fn ratio(num: f64, den: f64) -> f64 {
    if den == 0.0 { if num == 0.0 { 1.0 } else { 0.0 } } else { num / den }
}

fn f1(p: f64, r: f64) -> f64 {
    if p + r == 0.0 { 0.0 } else { 2.0 * p * r / (p + r) }
}

/// Compare node `na` of A with node `nb` of B.
pub fn agree(a: &Results, b: &Results, na: &str, nb: &str, kind: Kind) -> KindAgreement {
    let mut out = KindAgreement {
        kind,
        node_a: na.into(),
        node_b: nb.into(),
        agreement: 1.0,
        metric: kind.metric(),
        precision: None,
        recall: None,
        mean_iou: None,
        cer: None,
        id_switches: None,
        count_a: 0.0,
        count_b: 0.0,
        frames: 0,
        per_frame: Vec::new(),
    };
    let frames = keys(a, b);
    out.frames = frames.len();
    let get = |r: &Results, node: &str, k: &FrameKey| r.frames.get(k).and_then(|m| m.get(node)).cloned();
    match kind {
        Kind::Boxes | Kind::Tracks => {
            let key = if kind == Kind::Tracks { "tracks" } else { "" };
            let (mut tp, mut na_, mut nb_, mut iou_sum) = (0usize, 0usize, 0usize, 0.0);
            // Tracks: A id → (B id → matches), and the last B id seen per A id.
            let mut map: HashMap<u64, HashMap<u64, u64>> = HashMap::new();
            let mut last: HashMap<u64, u64> = HashMap::new();
            let mut switches = 0u64;
            for k in &frames {
                let (va, vb) = (get(a, na, k), get(b, nb, k));
                let list = |v: &Option<Value>| -> Vec<Value> {
                    let v = v.as_ref();
                    let key = if !key.is_empty() {
                        key
                    } else if v.and_then(|v| v.get("detections")).is_some() {
                        "detections"
                    } else {
                        "text_boxes"
                    };
                    items(v, key)
                        .into_iter()
                        .filter(|x| kind != Kind::Tracks || x.get("track_id").is_some())
                        .filter(|x| bbox(x).is_some())
                        .cloned()
                        .collect()
                };
                let (la, lb) = (list(&va), list(&vb));
                let (ba, bb): (Vec<[f64; 4]>, Vec<[f64; 4]>) = (la.iter().filter_map(bbox).collect(), lb.iter().filter_map(bbox).collect());
                let m = match_boxes(&ba, &bb, 0.5, |i, j| la[i].get("class") == lb[j].get("class"));
                tp += m.len();
                na_ += ba.len();
                nb_ += bb.len();
                iou_sum += m.iter().map(|p| p.2).sum::<f64>();
                if kind == Kind::Tracks {
                    for &(i, j, _) in &m {
                        let (Some(ia), Some(ib)) = (la[i]["track_id"].as_u64(), lb[j]["track_id"].as_u64()) else { continue };
                        *map.entry(ia).or_default().entry(ib).or_default() += 1;
                        if last.insert(ia, ib).is_some_and(|prev| prev != ib) {
                            switches += 1;
                        }
                    }
                }
                let p = ratio(m.len() as f64, bb.len() as f64);
                let r = ratio(m.len() as f64, ba.len() as f64);
                out.per_frame.push(((*k).clone(), if ba.is_empty() && bb.is_empty() { 1.0 } else { f1(p, r) }));
            }
            let (p, r) = (ratio(tp as f64, nb_ as f64), ratio(tp as f64, na_ as f64));
            out.precision = Some(p);
            out.recall = Some(r);
            out.mean_iou = Some(if tp == 0 { if na_ + nb_ == 0 { 1.0 } else { 0.0 } } else { iou_sum / tp as f64 });
            out.count_a = na_ as f64;
            out.count_b = nb_ as f64;
            out.agreement = if na_ + nb_ == 0 { 1.0 } else { f1(p, r) };
            if kind == Kind::Tracks {
                let pairs: u64 = map.values().flat_map(|m| m.values()).sum();
                let kept: u64 = map.values().map(|m| m.values().copied().max().unwrap_or(0)).sum();
                out.agreement = ratio(kept as f64, pairs as f64) * out.recall.unwrap_or(1.0);
                out.id_switches = Some(switches);
            }
        }
        Kind::Text => {
            let (mut dist, mut chars_a, mut chars_b) = (0usize, 0usize, 0usize);
            let text = |v: &Option<Value>| -> String {
                let mut lines: Vec<(i64, i64, String)> = items(v.as_ref(), "texts")
                    .into_iter()
                    .map(|t| {
                        let b = bbox(t).unwrap_or_default();
                        ((b[1] / 8.0).round() as i64, b[0] as i64, t["text"].as_str().unwrap_or_default().to_string())
                    })
                    .collect();
                lines.sort();
                lines.into_iter().map(|l| l.2).collect::<Vec<_>>().join("\n")
            };
            for k in &frames {
                let (ta, tb) = (text(&get(a, na, k)), text(&get(b, nb, k)));
                let d = strsim::levenshtein(&ta, &tb);
                let n = ta.chars().count();
                dist += d;
                chars_a += n;
                chars_b += tb.chars().count();
                out.per_frame.push(((*k).clone(), 1.0 - ratio(d as f64, n as f64).min(1.0)));
            }
            let cer = if chars_a == 0 { if chars_b == 0 { 0.0 } else { 1.0 } } else { dist as f64 / chars_a as f64 };
            out.cer = Some(cer);
            out.count_a = chars_a as f64;
            out.count_b = chars_b as f64;
            out.agreement = (1.0 - cer).max(0.0);
        }
        Kind::Labels => {
            let (mut same, mut total, mut na_, mut nb_) = (0usize, 0usize, 0usize, 0usize);
            let top = |c: &Value| c["top"].get(0).map(|t| t.get("label").cloned().unwrap_or_else(|| t["class"].clone()));
            for k in &frames {
                let (va, vb) = (get(a, na, k), get(b, nb, k));
                let (ca, cb) = (items(va.as_ref(), "classes"), items(vb.as_ref(), "classes"));
                let n = ca.len().max(cb.len());
                let s = ca.iter().zip(&cb).filter(|(x, y)| top(x) == top(y)).count();
                same += s;
                total += n;
                na_ += ca.len();
                nb_ += cb.len();
                out.per_frame.push(((*k).clone(), ratio(s as f64, n as f64)));
            }
            out.count_a = na_ as f64;
            out.count_b = nb_ as f64;
            out.agreement = ratio(same as f64, total as f64);
        }
        Kind::Speech => {
            // Segments as each stream's windows closed them (the last window lists them all).
            let segments = |r: &Results, node: &str| -> Vec<(String, f64, f64)> {
                let mut out = Vec::new();
                for ((stream, _), res) in &r.frames {
                    for s in items(res.get(node), "ended") {
                        if let (Some(s0), Some(s1)) = (s["start"].as_f64(), s["end"].as_f64()) {
                            out.push((stream.clone(), s0, s1));
                        }
                    }
                }
                out.sort_by(|x, y| x.0.cmp(&y.0).then(x.1.total_cmp(&y.1)));
                out.dedup();
                out
            };
            let (sa, sb) = (segments(a, na), segments(b, nb));
            let total = |s: &[(String, f64, f64)]| s.iter().map(|x| (x.2 - x.1).max(0.0)).sum::<f64>();
            let overlap: f64 =
                sa.iter().flat_map(|x| sb.iter().filter(move |y| y.0 == x.0).map(move |y| (x.2.min(y.2) - x.1.max(y.1)).max(0.0))).sum();
            let (ta, tb) = (total(&sa), total(&sb));
            let (p, r) = (ratio(overlap, tb), ratio(overlap, ta));
            out.precision = Some(p);
            out.recall = Some(r);
            out.count_a = ta;
            out.count_b = tb;
            out.agreement = if ta + tb == 0.0 { 1.0 } else { f1(p, r) };
        }
    }
    out
}

/// Pair A's nodes with B's: by name, else the first unpaired node of the same kind.
pub fn pairs(a: &Results, b: &Results) -> Vec<(String, String, Kind)> {
    let (na, nb) = (a.nodes(), b.nodes());
    let mut used: Vec<&str> = Vec::new();
    let mut out = Vec::new();
    for (name, kind) in &na {
        let pick = nb
            .iter()
            .find(|(n, k)| n == name && k == kind && !used.contains(&n.as_str()))
            .or_else(|| nb.iter().find(|(n, k)| k == kind && !used.contains(&n.as_str()) && !na.iter().any(|(m, _)| m == n)));
        if let Some((n, _)) = pick {
            used.push(n);
            out.push((name.clone(), n.clone(), *kind));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn results(lines: &[&str]) -> Results {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("r.ndjson");
        std::fs::write(&p, lines.join("\n")).unwrap();
        Results::read(&p).unwrap()
    }

    #[test]
    fn iou_and_matching() {
        assert_eq!(iou([0.0, 0.0, 10.0, 10.0], [0.0, 0.0, 10.0, 10.0]), 1.0);
        assert!((iou([0.0, 0.0, 10.0, 10.0], [5.0, 0.0, 15.0, 10.0]) - 1.0 / 3.0).abs() < 1e-9);
        let m = match_boxes(&[[0.0, 0.0, 10.0, 10.0], [20.0, 0.0, 30.0, 10.0]], &[[21.0, 0.0, 31.0, 10.0]], 0.5, |_, _| true);
        assert_eq!(m.len(), 1);
        assert_eq!((m[0].0, m[0].1), (1, 0));
    }

    #[test]
    fn boxes_precision_and_recall_of_b_against_a() {
        let a = results(&[
            r#"{"stream":"cam","seq":0,"results":{"boxes":{"text_boxes":[{"bbox":[0,0,10,10]},{"bbox":[20,0,30,10]}]}}}"#,
            r#"{"stream":"cam","seq":1,"results":{"boxes":{"text_boxes":[]}}}"#,
        ]);
        let b = results(&[r#"{"stream":"cam","seq":0,"results":{"boxes":{"text_boxes":[{"bbox":[0,0,10,10]}]}}}"#]);
        let p = pairs(&a, &b);
        assert_eq!(p, [("boxes".to_string(), "boxes".to_string(), Kind::Boxes)]);
        let g = agree(&a, &b, "boxes", "boxes", Kind::Boxes);
        assert_eq!((g.precision, g.recall), (Some(1.0), Some(0.5)));
        assert!((g.agreement - 2.0 / 3.0).abs() < 1e-9);
        let same = agree(&a, &a, "boxes", "boxes", Kind::Boxes);
        assert_eq!(same.agreement, 1.0);
    }

    #[test]
    fn text_labels_and_speech() {
        let a = results(&[
            r#"{"stream":"s","seq":0,"results":{"ocr":{"texts":[{"text":"HELLO","bbox":[0,0,1,1]}]},"cls":{"classes":[{"top":[{"class":1,"label":"cat"}]}]},"vad":{"probability":0.9,"ended":[{"start":0.0,"end":2.0}]}}}"#,
        ]);
        let b = results(&[
            r#"{"stream":"s","seq":0,"results":{"ocr":{"texts":[{"text":"HELL0","bbox":[0,0,1,1]}]},"cls":{"classes":[{"top":[{"class":2,"label":"dog"}]}]},"vad":{"probability":0.9,"ended":[{"start":1.0,"end":2.0}]}}}"#,
        ]);
        let t = agree(&a, &b, "ocr", "ocr", Kind::Text);
        assert!((t.cer.unwrap() - 0.2).abs() < 1e-9);
        assert_eq!(agree(&a, &b, "cls", "cls", Kind::Labels).agreement, 0.0);
        let v = agree(&a, &b, "vad", "vad", Kind::Speech);
        assert_eq!((v.precision, v.recall), (Some(1.0), Some(0.5)));
    }

    #[test]
    fn track_switches_are_counted() {
        let line = |seq: u64, id: u64| {
            format!(r#"{{"stream":"s","seq":{seq},"results":{{"t":{{"tracks":[{{"track_id":{id},"bbox":[0,0,10,10]}}]}}}}}}"#)
        };
        let a = results(&[&line(0, 1), &line(1, 1), &line(2, 1)]);
        let b = results(&[&line(0, 7), &line(1, 8), &line(2, 8)]);
        let g = agree(&a, &b, "t", "t", Kind::Tracks);
        assert_eq!(g.id_switches, Some(1));
        assert!((g.agreement - 2.0 / 3.0).abs() < 1e-9);
    }
}
