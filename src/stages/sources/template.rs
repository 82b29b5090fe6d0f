//! `dynamic = true` on an `rtsp` or `file` source: a template for streams
//! added while `infer-stream serve` runs. Each added stream is the template's
//! table with the keys the request sets (only those `allow` names), checked
//! as the pipeline file would be, and built as its own source. A `uri` the
//! request sets must also pass the template's value rules ([`UriRules`]:
//! `schemes`, `hosts`, `roots`) before anything is opened.

use std::path::Path;
use std::sync::Arc;

use serde_json::{Map, Value};

use crate::config::{Diagnostic, NodeConfig, NodeKind, PipelineConfig, is_url, mask_credentials};
use crate::runtime::clips::ClipHub;
use crate::runtime::dynamic::DynamicSource;
use crate::runtime::node::{Prepared, Template};
use crate::stages::Source;

use super::uri_rules::UriRules;

/// Keys no added stream may set, whatever `allow` says.
const FIXED: &[&str] = &[
    "kind",
    "dynamic",
    "allow",
    "schemes",
    "hosts",
    "roots",
    "max_streams",
    "inputs",
    "queue",
    "on_error",
    "restart",
    "max_restarts",
    "restart_backoff_ms",
];

/// Whether `node` is a template (`dynamic = true`).
pub fn is_template(node: &NodeConfig) -> bool {
    match &node.kind {
        NodeKind::Rtsp(c) => c.dynamic,
        NodeKind::File(c) => c.dynamic,
        _ => false,
    }
}

/// The template source of `node`; `None` when it is not a template.
pub fn build(
    cfg: &PipelineConfig,
    node: &NodeConfig,
    index: u32,
    pool_size: usize,
    max_frames: Option<u64>,
    clips: Option<Arc<ClipHub>>,
) -> Result<Option<DynamicSource>, Diagnostic> {
    let kind = node.kind.name();
    let (allow, max_streams, rules) = match &node.kind {
        NodeKind::Rtsp(c) if c.dynamic => {
            (&c.allow, &c.max_streams, UriRules::from_config(cfg, kind, c.schemes.as_deref(), c.hosts.as_deref(), None)?)
        }
        NodeKind::File(c) if c.dynamic => {
            (&c.allow, &c.max_streams, UriRules::from_config(cfg, kind, c.schemes.as_deref(), c.hosts.as_deref(), c.roots.as_deref())?)
        }
        _ => return Ok(None),
    };
    // Checked with the graph: 1 or more.
    let max_streams = max_streams.as_ref().map(|m| *m.get_ref());
    if let Some(a) = allow.iter().find(|a| FIXED.contains(&a.get_ref().as_str())) {
        return Err(cfg
            .diag(a.span(), format!("source `{}`: an added stream may not set `{}`", node.name, a.get_ref()))
            .with_help("`allow` names keys of the source's kind, such as \"uri\" or \"required\""));
    }
    let allow: Vec<String> = allow.iter().map(|a| a.get_ref().clone()).collect();
    // The template's own table, and the `[pipeline]` settings an added stream is checked under.
    let doc: toml::Table = toml::from_str(&cfg.source).map_err(|e| cfg.diag(node.name_span.clone(), e.to_string()))?;
    let table = doc
        .get("sources")
        .and_then(|s| s.get(&node.name))
        .and_then(|t| t.as_table())
        .cloned()
        .ok_or_else(|| cfg.diag(node.name_span.clone(), format!("source `{}`: cannot read its table", node.name)))?;
    let mut settings = doc.get("pipeline").and_then(|p| p.as_table()).cloned().unwrap_or_default();
    settings.remove("api");
    settings.remove("metrics_addr");
    let file = cfg.file.clone();
    let name = node.name.clone();
    let prepare = Box::new(move |id: &str, fields: &Map<String, Value>| {
        prepare(&file, &name, kind, &rules, &settings, &table, (index, pool_size, max_frames, clips.clone()), id, fields)
    });
    let describe = format!(
        "template of streams added at run time (they may set: {})",
        if allow.is_empty() { "nothing but their id".into() } else { allow.join(", ") }
    );
    Ok(Some(DynamicSource::new(Template::new(node.name.clone(), kind, allow, max_streams, prepare), describe)))
}

#[allow(clippy::too_many_arguments)]
fn prepare(
    file: &Path,
    template: &str,
    kind: &'static str,
    rules: &UriRules,
    settings: &toml::Table,
    table: &toml::Table,
    (index, pool_size, max_frames, clips): (u32, usize, Option<u64>, Option<Arc<ClipHub>>),
    id: &str,
    fields: &Map<String, Value>,
) -> Result<Prepared, String> {
    let mut node = table.clone();
    for k in ["dynamic", "allow", "schemes", "hosts", "roots"] {
        node.remove(k);
    }
    for (k, v) in fields {
        if let Some(s) = v.as_str()
            && s.contains("${")
        {
            return Err(format!("`{k}`: `${{...}}` is not expanded in added streams; write the value itself"));
        }
        // The request's input: checked against the template's rules before anything opens it; a path is opened as resolved.
        let checked;
        let v = match (k.as_str(), v.as_str()) {
            ("uri", Some(uri)) => {
                checked = Value::String(rules.check(uri).map_err(|e| format!("`uri` {}: {e}", mask_credentials(uri)))?);
                &checked
            }
            _ => v,
        };
        let value = toml::Value::try_from(v).map_err(|_| format!("`{k}`: {v} is not a value a pipeline file can hold"))?;
        node.insert(k.clone(), value);
    }
    let mut sources = toml::Table::new();
    sources.insert(id.to_string(), toml::Value::Table(node));
    let mut doc = toml::Table::new();
    doc.insert("pipeline".into(), toml::Value::Table(settings.clone()));
    doc.insert("sources".into(), toml::Value::Table(sources));
    let text = toml::to_string(&doc).map_err(|e| e.to_string())?;
    let cfg = crate::config::parse(file, text).map_err(|d| {
        d.0.iter()
            .map(|d| match &d.help {
                Some(h) => format!("{} ({h})", d.message),
                None => d.message.clone(),
            })
            .collect::<Vec<_>>()
            .join("; ")
    })?;
    let node = cfg.nodes.first().ok_or("no stream")?;
    let (uri, required) = match &node.kind {
        NodeKind::Rtsp(c) => (c.uri.get_ref().clone(), c.required),
        NodeKind::File(c) => (c.uri.get_ref().clone(), true),
        _ => return Err(format!("source `{template}` is not an rtsp or file source")),
    };
    let shown = mask_credentials(&uri).into_owned();
    check_uri(&cfg, kind, &uri).map_err(|e| format!("`uri` {shown}: {e}"))?;
    // Event clips: an added stream keeps its packets in a ring of its own id, as a source of the file does.
    let id = id.to_string();
    let build = Box::new(move || -> Result<Box<dyn Source>, String> {
        let node = &cfg.nodes[0];
        let shown = |d: Diagnostic| mask_credentials(&d.message).into_owned();
        match &node.kind {
            NodeKind::Rtsp(c) => super::rtsp::RtspSource::build(&cfg, node, c, index, pool_size, max_frames)
                .map(|s| Box::new(s.with_ring(clips.as_deref(), &id)) as Box<dyn Source>)
                .map_err(shown),
            NodeKind::File(c) => super::file::FileSource::build(&cfg, node, c, index, pool_size, max_frames, None)
                .map(|b| match (b, &clips) {
                    (super::Built::Ready(s), Some(hub)) => super::Built::Ready(s.with_ring(hub.ring(&id))).boxed(),
                    (b, _) => b.boxed(),
                })
                .map_err(shown),
            _ => Err("not an rtsp or file source".into()),
        }
    });
    Ok(Prepared { shown, required, build })
}

/// An added stream's input must be one its kind can open.
fn check_uri(cfg: &PipelineConfig, kind: &str, uri: &str) -> Result<(), String> {
    let has_host = |rest: &str| {
        let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
        let host = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
        !host.is_empty() && !host.starts_with(':') && !host.contains(char::is_whitespace)
    };
    match kind {
        "rtsp" => match uri.split_once("://") {
            Some((scheme, rest)) if scheme.eq_ignore_ascii_case("rtsp") || scheme.eq_ignore_ascii_case("rtsps") => {
                if has_host(rest) {
                    Ok(())
                } else {
                    Err("names no host: write rtsp://HOST[:PORT]/PATH".into())
                }
            }
            _ => Err("is not an RTSP address: write rtsp://HOST[:PORT]/PATH (credentials as user:password@ before the host)".into()),
        },
        _ if is_url(uri) => match uri.split_once("://") {
            Some((_, rest)) if has_host(rest) || uri.starts_with("file://") => Ok(()),
            _ => Err("names no host".into()),
        },
        _ => {
            if uri == "-" {
                return Err("stdin cannot be an added stream".into());
            }
            let path = cfg.base_dir.join(uri);
            if path.is_file() { Ok(()) } else { Err("no such file (relative paths start at the pipeline file's folder)".into()) }
        }
    }
}
