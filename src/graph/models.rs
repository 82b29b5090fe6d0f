//! Models against the graph, once they are loaded: each infer stage's model
//! input fits the tensors fed to it, and each postprocess fits the model output
//! it reads.

use super::{Graph, ModelIo};
use crate::config::{Diagnostics, Layout, NodeKind, PipelineConfig};

/// Check every infer stage's model against what feeds it, and every
/// postprocess against the model it reads.
pub fn check_models(cfg: &PipelineConfig, graph: &Graph, models: &ModelIo) -> Diagnostics {
    let mut diags = Diagnostics::default();
    for (i, node) in cfg.nodes.iter().enumerate() {
        match &node.kind {
            NodeKind::Infer(c) => {
                let Some((inputs, _)) = models.get(&node.name) else {
                    continue;
                };
                let input = match &c.input {
                    Some(n) => match inputs.iter().find(|x| &x.name == n.get_ref()) {
                        Some(x) => x,
                        None => {
                            let names: Vec<_> = inputs.iter().map(|x| format!("`{}`", x.name)).collect();
                            diags.push(
                                cfg.diag(n.span(), format!("model has no input `{}`; its inputs are {}", n.get_ref(), names.join(", "))),
                            );
                            continue;
                        }
                    },
                    None => match inputs.first() {
                        Some(x) => x,
                        None => continue,
                    },
                };
                if !input.dtype.contains("float32") && !input.dtype.contains("f32") {
                    diags.push(
                        cfg.diag(
                            c.model.span(),
                            format!("model input `{}` is {}, but preprocess produces float32", input.name, input.dtype),
                        ),
                    );
                }
                for &p in &graph.producers[i] {
                    let NodeKind::Preprocess(pc) = &cfg.nodes[p].kind else {
                        continue;
                    };
                    let pname = &cfg.nodes[p].name;
                    let want = graph.preprocess_shape(cfg, i).unwrap_or_default();
                    let model = c.model.get_ref();
                    if input.dims.len() != 4 {
                        diags.push(cfg.diag(c.model.span(), format!(
                            "model `{model}` input `{}` has shape {}, but preprocess `{pname}` produces a 4-d image tensor {want:?}", input.name, input.shape_string()
                        )).with_help("use an image model (N, C, H, W or N, H, W, C input)"));
                        continue;
                    }
                    let (c_at, h_at, w_at) = match pc.layout {
                        Layout::Nchw => (1, 2, 3),
                        Layout::Nhwc => (3, 1, 2),
                    };
                    let d = &input.dims;
                    let fixed = |k: usize| (d[k] >= 0).then_some(d[k] as usize);
                    // Channels where the other layout has them while ours is not 3: the layout is wrong.
                    let other_c = if pc.layout == Layout::Nchw { 3 } else { 1 };
                    if fixed(c_at).is_some_and(|v| v != 3) || (fixed(c_at).is_none() && fixed(other_c) == Some(3)) {
                        let (ours, other) = if pc.layout == Layout::Nchw { ("nchw", "nhwc") } else { ("nhwc", "nchw") };
                        diags.push(
                            cfg.diag(
                                c.model.span(),
                                format!(
                                    "model `{model}` input `{}` has shape {}, which is not {ours} with 3 channels as preprocess `{pname}` produces",
                                    input.name,
                                    input.shape_string(),
                                ),
                            )
                            .with_help(format!("set layout = \"{other}\" in `{pname}` if the model takes that layout")),
                        );
                        continue;
                    }
                    if fixed(0).is_some_and(|v| v != 1) {
                        diags.push(
                            cfg.diag(
                                c.model.span(),
                                format!(
                                    "model `{model}` input `{}` has a fixed batch of {} ({}); frames are fed one at a time",
                                    input.name,
                                    d[0],
                                    input.shape_string()
                                ),
                            )
                            .with_help("export the model with batch 1 or a dynamic batch"),
                        );
                    }
                    for (k, key, val) in [(h_at, "height", &pc.height), (w_at, "width", &pc.width)] {
                        if let Some(v) = fixed(k)
                            && v != *val.get_ref() as usize
                        {
                            diags.push(cfg.diag(val.span(), format!(
                                    "preprocess `{pname}` makes tensors of {key} {}, but model `{model}` input `{}` needs {key} {v} (shape {})",
                                    val.get_ref(), input.name, input.shape_string()
                                )).with_help(format!("set {key} = {v} in `{pname}`")));
                        }
                    }
                }
            }
            NodeKind::TextDetection(c) => {
                for &p in &graph.producers[i] {
                    let Some((_, outputs)) = models.get(&cfg.nodes[p].name) else {
                        continue;
                    };
                    let out = match &c.output {
                        Some(n) => match outputs.iter().find(|o| &o.name == n.get_ref()) {
                            Some(o) => o,
                            None => {
                                let names: Vec<_> = outputs.iter().map(|x| format!("`{}`", x.name)).collect();
                                diags.push(cfg.diag(
                                    n.span(),
                                    format!(
                                        "model of `{}` has no output `{}`; its outputs are {}",
                                        cfg.nodes[p].name,
                                        n.get_ref(),
                                        names.join(", ")
                                    ),
                                ));
                                continue;
                            }
                        },
                        None => match outputs.first() {
                            Some(o) => o,
                            None => continue,
                        },
                    };
                    let ok = matches!(out.dims.as_slice(), [_, c1, _, _] if *c1 == 1 || *c1 < 0);
                    if !ok {
                        diags.push(
                            cfg.diag(
                                node.kind_span.clone(),
                                format!(
                                    "text_detection `{}` needs a probability map [N, 1, H, W], but `{}` outputs `{}` with shape {}",
                                    node.name,
                                    cfg.nodes[p].name,
                                    out.name,
                                    out.shape_string()
                                ),
                            )
                            .with_help("feed it a DB text detection model such as PP-OCRv4 det"),
                        );
                    }
                }
            }
            _ => {}
        }
    }
    diags.sort();
    diags
}

#[cfg(test)]
mod model_tests {
    use std::path::Path;

    use super::*;
    use crate::backend::ort::IoInfo;
    use crate::graph::check;

    const SRC: &str = "[sources.cam]\nkind = \"file\"\nuri = \"/dev/null\"\n[stages.pre]\nkind = \"preprocess\"\ninputs = [\"cam\"]\nwidth = 640\nheight = 384\n[stages.det]\nkind = \"infer\"\ninputs = [\"pre\"]\nmodel = \"/dev/null\"\n[stages.boxes]\nkind = \"text_detection\"\ninputs = [\"det\"]\n[sinks.out]\nkind = \"null\"\ninputs = [\"boxes\"]\n";

    fn check_with(input: Vec<i64>, output: Vec<i64>) -> Vec<String> {
        let cfg = crate::config::parse(Path::new("p.toml"), SRC.into()).unwrap();
        let graph = check(&cfg).unwrap();
        let io = |name: &str, dims: Vec<i64>| IoInfo { name: name.into(), dims, dtype: "float32".into() };
        let models = ModelIo::from([("det".to_string(), (vec![io("x", input)], vec![io("y", output)]))]);
        check_models(&cfg, &graph, &models).0.iter().map(|d| d.headline()).collect()
    }

    #[test]
    fn dynamic_and_matching_shapes_pass() {
        assert!(check_with(vec![-1, 3, -1, -1], vec![-1, 1, -1, -1]).is_empty());
        assert!(check_with(vec![1, 3, 384, 640], vec![1, 1, 384, 640]).is_empty());
    }

    #[test]
    fn fixed_size_mismatch_points_at_the_preprocess_key() {
        assert_eq!(
            check_with(vec![1, 3, 640, 640], vec![1, 1, 640, 640]),
            vec![
                "p.toml:8:10: preprocess `pre` makes tensors of height 384, but model `/dev/null` input `x` needs height 640 (shape [1, 3, 640, 640])"
            ]
        );
    }

    #[test]
    fn layout_and_batch_mismatches() {
        assert_eq!(
            check_with(vec![1, 384, 640, 3], vec![1, 1, 384, 640]),
            vec![
                "p.toml:12:9: model `/dev/null` input `x` has shape [1, 384, 640, 3], which is not nchw with 3 channels as preprocess `pre` produces"
            ]
        );
        assert_eq!(
            check_with(vec![4, 3, -1, -1], vec![4, 1, -1, -1]),
            vec!["p.toml:12:9: model `/dev/null` input `x` has a fixed batch of 4 ([4, 3, ?, ?]); frames are fed one at a time"]
        );
    }

    #[test]
    fn text_detection_needs_a_single_channel_map() {
        assert_eq!(
            check_with(vec![-1, 3, -1, -1], vec![-1, 2, -1, -1]),
            vec!["p.toml:14:8: text_detection `boxes` needs a probability map [N, 1, H, W], but `det` outputs `y` with shape [?, 2, ?, ?]"]
        );
    }
}
