//! `kind = "text_recognition"`: CTC greedy decoding of a text recogniser's
//! outputs (e.g. PP-OCR rec, [N, T, C] probabilities) into one string per crop.

use std::sync::Arc;

use crate::config::{Diagnostic, TextRecognitionConfig};
use crate::frame::{Frame, Payload, TextLine};
use crate::stages::build::{Build, BuildCtx};
use crate::stages::{Body, Stage, StageError};

/// Class index → character: `blank` is the CTC blank, the classes after it are
/// the dictionary in order, and one more class (if the model has it) is a space.
#[derive(Debug, Clone)]
pub struct Charset {
    chars: Vec<String>,
    blank: usize,
}

impl Charset {
    /// `dictionary`: one character per line (PP-OCR's `character` metadata or keys file).
    pub fn new(dictionary: &str, blank: usize) -> Self {
        let mut chars: Vec<String> = dictionary.lines().map(str::to_string).collect();
        chars.push(" ".into());
        Charset { chars, blank }
    }

    pub fn len(&self) -> usize {
        self.chars.len()
    }

    pub fn is_empty(&self) -> bool {
        self.chars.is_empty()
    }

    fn get(&self, class: usize) -> Option<&str> {
        let i = if class > self.blank { class - 1 } else { class };
        self.chars.get(i).map(String::as_str)
    }
}

/// Greedy CTC: best class per time step, repeats collapsed, blanks removed.
/// Returns the string and the mean probability of the kept steps.
pub fn decode(probs: &[f32], steps: usize, classes: usize, charset: &Charset) -> (String, f32) {
    let mut text = String::new();
    let (mut sum, mut n) = (0f32, 0u32);
    let mut prev = usize::MAX;
    for t in 0..steps {
        let row = &probs[t * classes..(t + 1) * classes];
        let (best, p) = row.iter().enumerate().fold((0, f32::MIN), |acc, (i, &v)| if v > acc.1 { (i, v) } else { acc });
        if best != charset.blank
            && best != prev
            && let Some(c) = charset.get(best)
        {
            text.push_str(c);
            sum += p;
            n += 1;
        }
        prev = best;
    }
    (text, if n == 0 { 0.0 } else { sum / n as f32 })
}

pub struct TextRecognition {
    name: Arc<str>,
    cfg: TextRecognitionConfig,
    charset: Charset,
    /// `once_per_track` crops upstream: each track's best reading, per
    /// stream: text, score, and whether the region lay wholly inside the
    /// picture. Such a reading beats any of the region cut by the edge, and
    /// among them the higher score wins; while the region has only been seen
    /// cut, the latest reading (an object driving in shows more of itself
    /// every frame).
    by_track: std::collections::HashMap<(Arc<str>, u64), (String, f32, bool)>,
}

impl TextRecognition {
    pub fn new(name: Arc<str>, cfg: TextRecognitionConfig, charset: Charset) -> Self {
        TextRecognition { name, cfg, charset, by_track: Default::default() }
    }
}

impl Stage for TextRecognition {
    fn describe(&self) -> String {
        format!("CTC greedy decode, {} characters, min_score {}", self.charset.len(), self.cfg.min_score)
    }

    fn process(&mut self, frame: &mut Frame) -> Result<(), StageError> {
        let crops = frame.crops().ok_or_else(|| StageError::Frame("no crops on the frame (is a crop stage upstream?)".into()))?;
        let regions = &crops.regions;
        let mut lines = Vec::with_capacity(regions.len());
        if !regions.is_empty() {
            let out = super::outputs(frame)?;
            let want = self.cfg.output.as_ref().map(|s| s.get_ref().as_str());
            let t = super::output(out, want)?;
            let (n, steps, classes) = match t.shape.as_slice() {
                [n, s, c] => (*n, *s, *c),
                s => return Err(StageError::Frame(format!("recogniser output must be [N, T, C], got {s:?}"))),
            };
            if n != regions.len() {
                return Err(StageError::Frame(format!("{} crops but {n} recognitions", regions.len())));
            }
            if classes > self.charset.len() + 1 {
                return Err(StageError::Frame(format!(
                    "model has {classes} classes but the dictionary {} characters (+ blank)",
                    self.charset.len()
                )));
            }
            for (i, r) in regions.iter().enumerate() {
                let (text, score) = decode(&t.data[i * steps * classes..(i + 1) * steps * classes], steps, classes, &self.charset);
                let track_id = crops.track_ids.get(i).copied().flatten();
                let (mut text, mut score, mut reused) = (text, score, false);
                if let Some(id) = track_id {
                    if self.by_track.len() >= 65_536 {
                        // Tracks of streams that ended without ending their tracks: start afresh.
                        self.by_track.clear();
                    }
                    let inside = crops.inside.get(i).copied().unwrap_or(true);
                    let best = self.by_track.entry((frame.stream.clone(), id)).or_insert_with(|| (text.clone(), score, inside));
                    if !best.2 || (inside && score > best.1) {
                        *best = (text.clone(), score, inside);
                    }
                    // The track's best reading, which may be an earlier one.
                    if best.0 != text || best.1 != score {
                        (text, score, reused) = (best.0.clone(), best.1, true);
                    }
                }
                if !text.is_empty() && score >= self.cfg.min_score {
                    lines.push(TextLine { text, score, bbox: r.bbox, quad: r.quad, track_id, reused });
                }
            }
        }
        // Regions whose track was recognised before: its text, at this frame's box.
        for (id, r) in &crops.reused {
            if let Some((text, score, _)) = self.by_track.get(&(frame.stream.clone(), *id))
                && !text.is_empty()
                && *score >= self.cfg.min_score
            {
                lines.push(TextLine { text: text.clone(), score: *score, bbox: r.bbox, quad: r.quad, track_id: Some(*id), reused: true });
            }
        }
        for id in &crops.ended {
            self.by_track.remove(&(frame.stream.clone(), *id));
        }
        frame.attach(&self.name, Payload::Texts(lines));
        Ok(())
    }
}

impl Build for TextRecognitionConfig {
    fn build(&self, cx: &BuildCtx<'_>) -> Result<Body, Diagnostic> {
        let charset = charset(cx, self)?;
        Ok(Body::Stage(Box::new(TextRecognition::new(cx.name.clone(), self.clone(), charset))))
    }
}

/// The recogniser's characters: the `dictionary` file, else the `character`
/// metadata of the model in the infer stage feeding it.
fn charset(cx: &BuildCtx<'_>, c: &TextRecognitionConfig) -> Result<Charset, Diagnostic> {
    let node = cx.node;
    if let Some(d) = &c.dictionary {
        return Ok(Charset::new(&cx.read_listed(d, "dictionary")?, c.blank));
    }
    match cx.upstream_metadata("character")? {
        Some((_, Some(chars))) => Ok(Charset::new(&chars, c.blank)),
        Some((model, None)) => Err(cx
            .cfg
            .diag(node.kind_span.clone(), format!("model {} has no `character` metadata", model.get_ref()))
            .with_help("set `dictionary = \"keys.txt\"` (one character per line)")),
        None => Err(cx
            .cfg
            .diag(node.kind_span.clone(), format!("text_recognition `{}` has no dictionary", node.name))
            .with_help("set `dictionary = \"keys.txt\"`, or feed it an infer stage whose model has `character` metadata")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One-hot-ish probabilities for a class sequence.
    fn probs(seq: &[usize], classes: usize) -> Vec<f32> {
        let mut v = vec![0.01f32; seq.len() * classes];
        for (t, &c) in seq.iter().enumerate() {
            v[t * classes + c] = 0.9;
        }
        v
    }

    #[test]
    fn collapses_repeats_and_drops_blanks() {
        // Classes: 0 blank, 1 'a', 2 'b', 3 'l', 4 space.
        let cs = Charset::new("a\nb\nl", 0);
        let seq = [0, 2, 2, 1, 0, 3, 3, 0, 3, 4, 1, 0];
        let (text, score) = decode(&probs(&seq, 5), seq.len(), 5, &cs);
        assert_eq!(text, "ball a");
        assert!((score - 0.9).abs() < 1e-6);
    }

    #[test]
    fn all_blank_is_empty() {
        let cs = Charset::new("a", 0);
        assert_eq!(decode(&probs(&[0, 0, 0], 3), 3, 3, &cs), (String::new(), 0.0));
    }

    #[test]
    fn multibyte_characters() {
        let cs = Charset::new("疗\n绚\n1", 0);
        let seq = [1, 0, 2, 3];
        assert_eq!(decode(&probs(&seq, 5), 4, 5, &cs).0, "疗绚1");
    }
}
