//! The build's optional capabilities (cargo features): which ones this binary
//! has, and what a pipeline or a command that asks for a missing one is told
//! (the feature's name and the command that builds it in).

use crate::config::{Diagnostic, Diagnostics, NodeConfig, NodeKind, PipelineConfig};

/// One cargo feature: its name, whether this build has it, what it brings.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct Feature {
    pub name: &'static str,
    pub compiled: bool,
    pub what: &'static str,
}

/// Every optional feature, in the order `doctor` lists them.
pub const FEATURES: &[Feature] = &[
    Feature {
        name: "gstreamer",
        compiled: cfg!(feature = "gstreamer"),
        what: "GStreamer as a second decode backend (backend = \"gstreamer\")",
    },
    Feature {
        name: "bus",
        compiled: cfg!(feature = "bus"),
        what: "Kafka and MQTT sinks, the Kafka job source (kind = \"kafka\", \"mqtt\")",
    },
    Feature { name: "serve", compiled: cfg!(feature = "serve"), what: "`infer-stream serve`: the REST and gRPC API" },
    Feature {
        name: "python",
        compiled: cfg!(feature = "python"),
        what: "`kind = \"python\"` stages: your own Python code on each frame (embedded CPython, numpy)",
    },
    Feature { name: "cuda", compiled: cfg!(feature = "cuda"), what: "the GPU path: NVDEC, NVRTC kernels, device tensors" },
];

/// The names of the features this build has, in [`FEATURES`] order.
pub fn compiled() -> Vec<&'static str> {
    FEATURES.iter().filter(|f| f.compiled).map(|f| f.name).collect()
}

/// `what` needs `feature`, which this build does not have.
pub fn not_compiled(what: &str, feature: &str) -> String {
    format!("{what} is not compiled into this build (built without the `{feature}` feature)")
}

/// How to get a binary with `feature`.
pub fn rebuild_help(feature: &str) -> String {
    format!(
        "rebuild with it: cargo build --release --locked --features {feature} (or --all-features); \
         `infer-stream doctor` lists the features a binary has"
    )
}

/// Whether this build has the feature `name`.
pub fn has(name: &str) -> bool {
    FEATURES.iter().any(|f| f.name == name && f.compiled)
}

/// The feature `kind` needs, when `have` says the build lacks it.
fn missing_for_kind(kind: &NodeKind, have: &dyn Fn(&str) -> bool) -> Option<&'static str> {
    match kind {
        NodeKind::Kafka(_) | NodeKind::KafkaJobs(_) | NodeKind::Mqtt(_) if !have("bus") => Some("bus"),
        NodeKind::Python(_) if !have("python") => Some("python"),
        _ => None,
    }
}

/// The located error for `node`, whose kind needs `feature` (at its `kind`).
pub fn node_not_compiled(cfg: &PipelineConfig, node: &NodeConfig, feature: &str) -> Diagnostic {
    let what = format!("{} `{}`: kind = \"{}\"", node.role.noun(), node.name, node.kind.name());
    cfg.diag(node.kind_span.clone(), not_compiled(&what, feature)).with_help(rebuild_help(feature))
}

/// Every node whose kind this build does not have, located (`validate` and a
/// run say so before anything opens).
pub fn check_nodes(cfg: &PipelineConfig, diags: &mut Diagnostics) {
    check_nodes_with(cfg, diags, &has);
}

fn check_nodes_with(cfg: &PipelineConfig, diags: &mut Diagnostics, have: &dyn Fn(&str) -> bool) {
    for node in &cfg.nodes {
        if let Some(feature) = missing_for_kind(&node.kind, have) {
            diags.push(node_not_compiled(cfg, node, feature));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_cargo_feature_is_listed_once_with_this_builds_state() {
        let names: Vec<_> = FEATURES.iter().map(|f| f.name).collect();
        assert_eq!(names, ["gstreamer", "bus", "serve", "python", "cuda"]);
        // The features Cargo.toml declares (besides `default`) are exactly these.
        let manifest: toml::Table = include_str!("../Cargo.toml").parse().unwrap();
        let mut declared: Vec<_> = manifest["features"].as_table().unwrap().keys().filter(|k| *k != "default").cloned().collect();
        declared.sort();
        let mut listed: Vec<_> = names.iter().map(|n| n.to_string()).collect();
        listed.sort();
        assert_eq!(declared, listed);
        let by_name = |n: &str| FEATURES.iter().find(|f| f.name == n).unwrap().compiled;
        assert_eq!(by_name("bus"), cfg!(feature = "bus"));
        assert_eq!(by_name("serve"), cfg!(feature = "serve"));
        assert_eq!(by_name("python"), cfg!(feature = "python"));
        assert_eq!(compiled().len(), FEATURES.iter().filter(|f| f.compiled).count());
    }

    #[test]
    fn a_missing_feature_is_named_with_the_command_that_builds_it_in() {
        assert_eq!(
            not_compiled("sink kind `kafka`", "bus"),
            "sink kind `kafka` is not compiled into this build (built without the `bus` feature)"
        );
        let help = rebuild_help("serve");
        assert!(help.contains("cargo build --release --locked --features serve"), "{help}");
        assert!(help.contains("infer-stream doctor"), "{help}");
    }

    /// A build without `bus` points at the `kind` of each bus node, names the
    /// feature and says how to build it in; other kinds pass.
    #[test]
    fn bus_kinds_in_a_build_without_bus_are_located_errors() {
        let text = "[sources.cam]\nkind = \"file\"\nuri = \"clip.mp4\"\n\n[sinks.out]\nkind = \"mqtt\"\ninputs = [\"cam\"]\nbroker = \"127.0.0.1:1883\"\n";
        let cfg = crate::config::parse(std::path::Path::new("p.toml"), text.into()).expect("parses");
        let mut diags = Diagnostics::default();
        check_nodes_with(&cfg, &mut diags, &|f| f != "bus");
        let all: Vec<String> = diags.0.iter().map(|d| d.to_string()).collect();
        assert_eq!(all.len(), 1, "{all:?}");
        assert!(
            all[0].contains("sink `out`: kind = \"mqtt\" is not compiled into this build (built without the `bus` feature)"),
            "{}",
            all[0]
        );
        assert!(all[0].contains("--> p.toml:6:"), "{}", all[0]);
        assert!(all[0].contains("--features bus"), "{}", all[0]);
        let mut none = Diagnostics::default();
        check_nodes_with(&cfg, &mut none, &|_| true);
        assert!(none.0.is_empty());
        assert_eq!(has("bus"), cfg!(feature = "bus"));
    }
}
