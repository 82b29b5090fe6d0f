//! `validate` and `graph`: check pipeline files without running them, and draw one.

use std::path::{Path, PathBuf};

use anyhow::Result;

use infer_stream::config::{self, Diagnostics};
use infer_stream::graph;
use infer_stream::stages::{self, BuildOptions};

use super::args::GraphFormat;
use super::common::{load_checked, print_diags};
use super::exit;

pub(super) fn validate(paths: &[PathBuf], no_models: bool, ort_library: Option<PathBuf>, quiet: bool) -> Result<u8> {
    let mut all = Diagnostics::default();
    for path in paths {
        let (cfg, graph) = match load_checked(path) {
            Ok(x) => x,
            Err(mut d) => {
                all.0.append(&mut d.0);
                continue;
            }
        };
        let warnings = graph::warnings(&cfg, &graph);
        if !quiet {
            for w in &warnings {
                eprintln!("{w}");
            }
        }
        all.0.append(&mut graph::check_machine(&cfg, true).0);
        // `serve`'s API settings: address, tokens, TLS files.
        #[cfg(feature = "serve")]
        if cfg.settings.api.is_some()
            && let Err(mut d) = infer_stream::api::ApiSettings::from_config(&cfg, None)
        {
            all.0.append(&mut d.0);
        }
        // `python` stages: the code imports and its functions fit (setup is not called).
        #[cfg(feature = "python")]
        for node in &cfg.nodes {
            if let config::NodeKind::Python(c) = &node.kind
                && let Err(d) = stages::python::check(&cfg, node, c)
            {
                all.push(d);
            }
        }
        if !no_models {
            let opts = BuildOptions { ort_library: ort_library.clone(), batch_state: true, ..Default::default() };
            let mut models = stages::ModelIo::new();
            for node in cfg.nodes.iter() {
                let config::NodeKind::Infer(c) = &node.kind else {
                    continue;
                };
                let rt = match stages::ort_runtime(&cfg, &opts) {
                    Ok(rt) => rt,
                    Err(d) => {
                        all.push(d);
                        break;
                    }
                };
                let model = cfg.resolve_path(&c.model).expect("checked by graph::check");
                match infer_stream::backend::ort::inspect(rt, &model) {
                    Ok(io) => {
                        models.insert(node.name.clone(), io);
                    }
                    Err(e) => all.push(cfg.diag(c.model.span(), format!("stage `{}`: {e}", node.name))),
                }
            }
            all.0.append(&mut graph::check_models(&cfg, &graph, &models).0);
        }
        if all.0.iter().all(|d| d.file != *path) {
            let n = warnings.len();
            let said = if n == 0 { String::new() } else { format!(", {n} warning{}", if n == 1 { "" } else { "s" }) };
            // The result on stdout (warnings and errors are on stderr).
            println!("{}: ok ({} nodes{said})", path.display(), cfg.nodes.len());
        }
    }
    if all.is_empty() { Ok(exit::OK) } else { Ok(print_diags(&all)) }
}

pub(super) fn graph_cmd(path: &Path, format: GraphFormat) -> Result<u8> {
    let cfg = match load_checked(path) {
        Ok((cfg, _)) => cfg,
        Err(d) => return Ok(print_diags(&d)),
    };
    print!(
        "{}",
        match format {
            GraphFormat::Dot => graph::to_dot(&cfg),
            GraphFormat::Mermaid => graph::to_mermaid(&cfg),
        }
    );
    Ok(exit::OK)
}
