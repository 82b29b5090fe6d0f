//! The graph drawn as text: Graphviz DOT and Mermaid, for `graph`.

use std::collections::HashMap;
use std::fmt::Write as _;

use crate::config::{NodeKind, PipelineConfig, Role};

/// `text` inside a double-quoted DOT string.
fn dot_quoted(text: &str) -> String {
    text.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}

/// `text` inside a double-quoted Mermaid label (entity codes for what would end or break it).
fn mermaid_quoted(text: &str) -> String {
    text.replace('"', "#quot;").replace('<', "#lt;").replace('>', "#gt;")
}

fn shape(kind: &NodeKind, role: Role, name: &str) -> (String, String) {
    let label = format!("{}\\n{}", mermaid_quoted(name), kind.name());
    match role {
        Role::Source => (format!("[/\"{label}\"/]"), "invhouse".into()),
        Role::Stage => (format!("[\"{label}\"]"), "box".into()),
        Role::Sink => (format!("[(\"{label}\")]"), "cylinder".into()),
    }
}

/// Graphviz DOT: sources, stages and sinks drawn as different shapes.
pub fn to_dot(cfg: &PipelineConfig) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "digraph \"{}\" {{\n  rankdir=LR;", dot_quoted(&cfg.name()));
    for n in &cfg.nodes {
        let (_, dot_shape) = shape(&n.kind, n.role, &n.name);
        let name = dot_quoted(&n.name);
        let _ = writeln!(s, "  \"{name}\" [shape={dot_shape}, label=\"{name}\\n({})\"];", n.kind.name());
    }
    for n in &cfg.nodes {
        for i in &n.inputs {
            let _ = writeln!(s, "  \"{}\" -> \"{}\";", dot_quoted(i.get_ref()), dot_quoted(&n.name));
        }
    }
    s.push_str("}\n");
    s
}

/// Mermaid flowchart, with the same shapes.
pub fn to_mermaid(cfg: &PipelineConfig) -> String {
    let mut s = String::from("flowchart LR\n");
    // Ids are names made safe; two names that become one id (`a b`, `a_b`) get the node's index.
    let mut ids: HashMap<&str, String> = HashMap::new();
    let mut used = std::collections::HashSet::new();
    for (k, n) in cfg.nodes.iter().enumerate() {
        let mut id = n.name.replace(|c: char| !c.is_ascii_alphanumeric() && c != '_', "_");
        if id.is_empty() || !used.insert(id.clone()) {
            id = format!("{id}_{k}");
            used.insert(id.clone());
        }
        ids.insert(&n.name, id);
    }
    let id = |name: &str| ids.get(name).cloned().unwrap_or_else(|| name.replace(|c: char| !c.is_ascii_alphanumeric() && c != '_', "_"));
    for n in &cfg.nodes {
        let (m, _) = shape(&n.kind, n.role, &n.name);
        let _ = writeln!(s, "  {}{}", id(&n.name), m.replace("\\n", "<br/>"));
    }
    for n in &cfg.nodes {
        for i in &n.inputs {
            let _ = writeln!(s, "  {} --> {}", id(i.get_ref()), id(&n.name));
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Any node name renders as valid DOT and Mermaid: quotes escaped, and
    /// names that make one Mermaid id (`a b`, `a_b`) kept apart.
    #[test]
    fn graph_output_escapes_names() {
        let src = "[sources.\"a b\"]\nkind = \"testsrc\"\n[sources.a_b]\nkind = \"testsrc\"\n[sinks.'x\"y\\z']\nkind = \"null\"\ninputs = [\"a b\", \"a_b\"]\n";
        let cfg = crate::config::parse(std::path::Path::new("/p/p.toml"), src.to_string()).unwrap();
        let dot = to_dot(&cfg);
        assert!(dot.contains(r#"  "x\"y\\z" [shape=cylinder, label="x\"y\\z\n(null)"];"#), "{dot}");
        assert!(dot.contains(r#"  "a b" -> "x\"y\\z";"#), "{dot}");
        let m = to_mermaid(&cfg);
        assert!(m.contains("  a_b[/\"a b<br/>testsrc\"/]\n  a_b_1[/\"a_b<br/>testsrc\"/]"), "{m}");
        assert!(m.contains("#quot;") && m.contains("  a_b_1 --> x_y_z\n"), "{m}");
    }
}
