//! Warnings: a pipeline that is valid, but probably not what was meant.
//! `validate` and `run` say them; they never stop a run.

use super::Graph;
use crate::config::{Diagnostic, NodeKind, PipelineConfig, ProviderName, Role};

/// Every warning for a checked pipeline, located, in file order.
pub fn warnings(cfg: &PipelineConfig, graph: &Graph) -> Vec<Diagnostic> {
    let mut out = Vec::new();
    // Whether a node's frames reach a sink: consumers come after producers in `order`.
    let mut feeds = vec![false; cfg.nodes.len()];
    for &i in graph.order.iter().rev() {
        feeds[i] = cfg.nodes[i].role == Role::Sink || graph.consumers[i].iter().any(|&c| feeds[c]);
    }
    for (i, node) in cfg.nodes.iter().enumerate() {
        if !feeds[i] {
            let what = match node.role {
                Role::Source => "its frames are decoded and discarded",
                _ => "its results are computed and discarded",
            };
            out.push(
                cfg.diag(node.name_span.clone(), format!("{} `{}` feeds no sink: {what}", node.role.noun(), node.name))
                    .with_help("name it in the `inputs` of a sink (or of a stage that feeds one), or remove it")
                    .into_warning(),
            );
        }
        if let NodeKind::Clips(c) = &node.kind
            && !*c.annotated.get_ref()
            && let Some(&r) =
                super::settings::upstream_nodes(&graph.producers, i).iter().find(|&&j| matches!(cfg.nodes[j].kind, NodeKind::Redact(_)))
        {
            out.push(
                cfg.diag(
                    node.kind_span.clone(),
                    format!(
                        "clips sink `{}`: stage `{}` redacts the frames, and a clip of the source's own packets would show what it hides: \
                         its clips are re-encoded from the redacted frames, with the results drawn (annotated = true, forced)",
                        node.name, cfg.nodes[r].name
                    ),
                )
                .with_help("write `annotated = true` to say so (re-encoding costs an encode of every frame)")
                .into_warning(),
            );
        }
        if let NodeKind::Infer(c) = &node.kind
            && let Some(b) = &c.batch
            && b.get_ref().max.get() > 1
            && c.providers.get_ref().iter().all(|p| p.name == ProviderName::Cpu)
        {
            out.push(
                cfg.diag(
                    b.span(),
                    format!(
                        "stage `{}` batches up to {} frames on the CPU: batching helps on GPU providers (cuda, tensorrt); \
                         on the CPU a batch takes about as long as its frames one by one, and frames wait for it (more latency, no more throughput)",
                        node.name,
                        b.get_ref().max
                    ),
                )
                .with_help("remove `batch` for CPU inference, or list a GPU provider first, e.g. providers = [\"cuda\", \"cpu\"]")
                .into_warning(),
            );
        }
    }
    out.sort_by_key(|d| (d.line, d.column));
    out
}
