//! `kind = "classification"`: class scores → top-k classes with labels, per
//! frame or, for a model run on crops, per region.

use std::sync::Arc;

use crate::config::{ClassificationConfig, Diagnostic};
use crate::frame::{ClassScore, Classified, Frame, Payload};
use crate::stages::build::{Build, BuildCtx};
use crate::stages::{Body, Stage, StageError};

/// Softmax in place (numerically stable).
pub fn softmax(v: &mut [f32]) {
    let max = v.iter().copied().fold(f32::MIN, f32::max);
    let mut sum = 0.0;
    for x in v.iter_mut() {
        *x = (*x - max).exp();
        sum += *x;
    }
    for x in v.iter_mut() {
        *x /= sum;
    }
}

/// The `k` best classes (ties: lower class first), at least `min_score`.
pub fn top_k(scores: &[f32], k: usize, min_score: f32) -> Vec<(u32, f32)> {
    let mut idx: Vec<u32> = (0..scores.len() as u32).collect();
    idx.sort_by(|&a, &b| scores[b as usize].total_cmp(&scores[a as usize]).then(a.cmp(&b)));
    idx.into_iter().take(k).map(|i| (i, scores[i as usize])).filter(|(_, s)| *s >= min_score).collect()
}

pub struct Classification {
    name: Arc<str>,
    cfg: ClassificationConfig,
    labels: Vec<Arc<str>>,
    scratch: Vec<f32>,
}

impl Classification {
    pub fn new(name: Arc<str>, cfg: ClassificationConfig, labels: Vec<String>) -> Self {
        Classification { name, cfg, labels: labels.into_iter().map(Arc::from).collect(), scratch: Vec::new() }
    }

    fn classify(&mut self, row: &[f32]) -> Vec<ClassScore> {
        self.scratch.clear();
        self.scratch.extend_from_slice(row);
        if self.cfg.softmax {
            softmax(&mut self.scratch);
        }
        top_k(&self.scratch, self.cfg.top_k, self.cfg.min_score)
            .into_iter()
            .map(|(class, score)| ClassScore { class, label: self.labels.get(class as usize).cloned(), score })
            .collect()
    }
}

impl Stage for Classification {
    fn describe(&self) -> String {
        format!("top {} of {} labels{}", self.cfg.top_k, self.labels.len(), if self.cfg.softmax { ", softmax" } else { "" })
    }

    fn process(&mut self, frame: &mut Frame) -> Result<(), StageError> {
        // Not inferred (`interval`): no outputs to read; the tracker downstream predicts.
        if frame.predicted() {
            return Ok(());
        }
        let regions: Option<Vec<[f32; 4]>> = frame.crops().map(|c| c.regions.iter().map(|r| r.bbox).collect());
        let out = super::outputs(frame)?;
        let mut results = Vec::new();
        if let Some(t) = out.get(self.cfg.output.as_ref().map(|s| s.get_ref().as_str())) {
            let n = t.shape.first().copied().unwrap_or(1).max(1);
            let per = t.data.len() / n;
            let rows: Vec<Vec<f32>> = t.data.chunks_exact(per.max(1)).map(<[f32]>::to_vec).collect();
            match &regions {
                Some(r) if r.len() != rows.len() => {
                    return Err(StageError::Frame(format!("{} regions but {} classifications", r.len(), rows.len())));
                }
                _ => {}
            }
            for (i, row) in rows.iter().enumerate() {
                let top = self.classify(row);
                results.push(Classified { bbox: regions.as_ref().map(|r| r[i]), top });
            }
        } else if regions.as_ref().is_none_or(|r| !r.is_empty()) {
            return Err(StageError::Frame("model output not found".into()));
        }
        frame.attach(&self.name, Payload::Classes(results));
        Ok(())
    }
}

impl Build for ClassificationConfig {
    fn build(&self, cx: &BuildCtx<'_>) -> Result<Body, Diagnostic> {
        let labels = cx.labels(self.labels.as_ref())?;
        Ok(Body::Stage(Box::new(Classification::new(cx.name.clone(), self.clone(), labels))))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn softmax_sums_to_one_and_keeps_order() {
        let mut v = [1.0, 2.0, 3.0];
        softmax(&mut v);
        assert!((v.iter().sum::<f32>() - 1.0).abs() < 1e-6);
        assert!(v[2] > v[1] && v[1] > v[0]);
        assert!((v[2] - 0.665_240_9).abs() < 1e-6);
        let mut big = [1000.0, 1000.0];
        softmax(&mut big);
        assert_eq!(big, [0.5, 0.5], "stable for large logits");
    }

    #[test]
    fn top_k_orders_filters_and_breaks_ties() {
        assert_eq!(top_k(&[0.1, 0.7, 0.2], 2, 0.0), vec![(1, 0.7), (2, 0.2)]);
        assert_eq!(top_k(&[0.5, 0.5], 1, 0.0), vec![(0, 0.5)]);
        assert_eq!(top_k(&[0.1, 0.7, 0.2], 3, 0.15), vec![(1, 0.7), (2, 0.2)]);
    }
}
