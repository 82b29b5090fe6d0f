//! Pipeline TOML → typed node configs.
//!
//! The load is two-phase so that every error carries its exact position: the
//! document is parsed once into a spanned table; each node's `kind` is read
//! and looked up in the registry; then the node's own table is deserialized
//! into that kind's struct (`deny_unknown_fields` everywhere). Errors are
//! collected across all nodes rather than stopping at the first.

pub mod api;
pub mod clip_path;
pub mod diag;
pub mod fetch_hint;
mod kinds;
pub mod paths;
mod redact;

use std::net::SocketAddr;
use std::ops::Range;
use std::path::{Path, PathBuf};

use serde::Deserialize;
use toml::Spanned;
use toml::de::{DeTable, DeValue, ValueDeserializer};

pub use diag::{Diagnostic, Diagnostics};
pub use kinds::*;
pub use redact::mask_credentials;

/// Where a node sits in the graph.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    Source,
    Stage,
    Sink,
}

impl Role {
    pub fn section(self) -> &'static str {
        match self {
            Role::Source => "sources",
            Role::Stage => "stages",
            Role::Sink => "sinks",
        }
    }
    pub fn noun(self) -> &'static str {
        match self {
            Role::Source => "source",
            Role::Stage => "stage",
            Role::Sink => "sink",
        }
    }
}

/// What happens when a stage fails on one frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OnError {
    /// Count the frame as failed and go on with the next one.
    #[default]
    Skip,
    /// Stop the pipeline: sources stop, frames in flight drain, exit code 1.
    Stop,
}

/// What the runtime does when a source fails or ends (`restart`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Restart {
    /// The source runs once (default).
    #[default]
    Never,
    /// Start it again after an error or a panic (with backoff); an end of input ends it.
    OnError,
    /// Start it again whenever it stops, error or end of input (a file then loops).
    Always,
}

/// What a full queue does with a new frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WhenFull {
    /// Wait for room (no frame is lost; the producer slows down).
    Block,
    /// Drop the oldest queued frame to make room (live sources: the newest frame matters most).
    DropOldest,
    /// Drop the new frame.
    DropNewest,
}

/// The queue in front of a node (all its inputs share it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct QueueConfig {
    #[serde(default = "default_capacity")]
    pub capacity: std::num::NonZeroUsize,
    pub when_full: Option<WhenFull>,
}

fn default_capacity() -> std::num::NonZeroUsize {
    std::num::NonZeroUsize::new(8).unwrap()
}

/// Keys every node may have, whatever its kind.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Common {
    kind: Spanned<String>,
    #[serde(default)]
    inputs: Option<Spanned<Vec<Spanned<String>>>>,
    queue: Option<QueueConfig>,
    on_error: Option<OnError>,
    restart: Option<Spanned<Restart>>,
    max_restarts: Option<u32>,
    #[serde(default = "restart_backoff")]
    restart_backoff_ms: u64,
}
const COMMON_KEYS: &[&str] = &["kind", "inputs", "queue", "on_error", "restart", "max_restarts", "restart_backoff_ms"];

fn restart_backoff() -> u64 {
    500
}

/// `[pipeline]`: settings for the whole run.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Settings {
    /// A name for logs and summaries (defaults to the file stem).
    pub name: Option<String>,
    /// The ONNX Runtime shared library (overrides `ORT_DYLIB_PATH`).
    pub ort_library: Option<Spanned<String>>,
    /// Default error policy for stages that do not set `on_error`.
    pub on_error: Option<OnError>,
    /// Serve Prometheus metrics and health checks on this `IP:PORT` (see [`PipelineConfig::metrics_addr`]).
    pub metrics_addr: Option<Spanned<String>>,
    /// Largest video frame (width × height) a source accepts; default 8192×8192.
    pub max_pixels: Option<u64>,
    /// `infer-stream serve`: the API's address, TLS and tokens (docs/api.md).
    pub api: Option<api::ApiConfig>,
}

/// One node of the graph, as configured.
#[derive(Debug)]
pub struct NodeConfig {
    pub name: String,
    pub role: Role,
    /// The node's header key (`[stages.det]` → `det`).
    pub name_span: Range<usize>,
    pub kind: NodeKind,
    pub kind_span: Range<usize>,
    pub inputs: Vec<Spanned<String>>,
    pub queue: Option<QueueConfig>,
    /// Where the queue's capacity is written (its `capacity` key, else `queue`): checks on it point here.
    pub queue_span: Range<usize>,
    pub on_error: OnError,
    on_error_set: Option<OnError>,
    /// Sources: start again after an error (or always), waiting
    /// `restart_backoff_ms`, doubling up to 30 s, at most `max_restarts` times.
    pub restart: Option<Spanned<Restart>>,
    pub max_restarts: Option<u32>,
    pub restart_backoff_ms: u64,
}

/// A loaded pipeline file: settings, nodes in file order, and the text they came from.
#[derive(Debug)]
pub struct PipelineConfig {
    pub file: PathBuf,
    pub base_dir: PathBuf,
    pub source: String,
    pub settings: Settings,
    pub nodes: Vec<NodeConfig>,
    /// Nodes that failed to parse (lenient loading): other checks skip references to them.
    pub failed: Vec<(String, Role)>,
}

impl PipelineConfig {
    /// A diagnostic located in this file.
    pub fn diag(&self, span: Range<usize>, message: impl Into<String>) -> Diagnostic {
        Diagnostic::at(&self.file, &self.source, span, message)
    }

    pub fn node(&self, name: &str) -> Option<&NodeConfig> {
        self.nodes.iter().find(|n| n.name == name)
    }

    pub fn name(&self) -> String {
        self.settings.name.clone().unwrap_or_else(|| self.file.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default())
    }

    /// Expand `${VAR}` and resolve a path against the file's folder.
    pub fn resolve_path(&self, value: &Spanned<String>) -> Result<PathBuf, Diagnostic> {
        let expanded = self.expand(value)?;
        let p = Path::new(&expanded);
        Ok(if p.is_absolute() || is_url(&expanded) || expanded == "-" { p.to_path_buf() } else { self.base_dir.join(p) })
    }

    /// `[pipeline] metrics_addr`, expanded and parsed by [`listen_addr`]: the `IP:PORT`
    /// written, or a port alone on 127.0.0.1 (no host names), so nothing listens
    /// beyond this machine unless an address says so.
    pub fn metrics_addr(&self) -> Result<Option<SocketAddr>, Diagnostic> {
        let Some(value) = &self.settings.metrics_addr else { return Ok(None) };
        let text = self.expand(value)?;
        listen_addr(&text).map(Some).map_err(|e| {
            self.diag(value.span(), format!("invalid `metrics_addr` `{text}`: {e}"))
                .with_help("write a port (`9464`: this machine only), or an IP address and a port, e.g. `127.0.0.1:9464` or `0.0.0.0:9464` (every interface)")
        })
    }

    /// Expand `${VAR}` from the environment; an unset variable is an error at the string.
    pub fn expand(&self, value: &Spanned<String>) -> Result<String, Diagnostic> {
        expand_env(value.get_ref()).map_err(|var| {
            self.diag(value.span(), format!("environment variable `{var}` is not set"))
                .with_help(format!("export {var}=... before running, or write the value in the file"))
        })
    }
}

/// An address to listen on: `IP:PORT` (`[IPv6]:PORT`) exactly as written, or a
/// port alone (`9464` or `:9464`) on 127.0.0.1, the loopback interface: the
/// short form never exposes anything to other machines.
pub fn listen_addr(text: &str) -> Result<SocketAddr, String> {
    let t = text.trim();
    let port = t.strip_prefix(':').unwrap_or(t);
    if !port.is_empty() && port.bytes().all(|b| b.is_ascii_digit()) {
        return port
            .parse::<u16>()
            .map(|p| SocketAddr::from(([127, 0, 0, 1], p)))
            .map_err(|_| format!("port `{port}` is out of range (0–65535)"));
    }
    t.parse().map_err(|_| "expected PORT or IP:PORT".to_string())
}

/// `path` as shown to a user (never opened by it): without `.` components and with each `dir/..` taken out, by its
/// text alone (a `..` at the start of a relative path stays; one above the
/// root is dropped, as the root's parent is the root).
pub fn tidy_path(path: &Path) -> PathBuf {
    use std::path::Component;
    let mut out: Vec<Component> = Vec::new();
    for c in path.components() {
        match c {
            Component::CurDir => {}
            Component::ParentDir => match out.last() {
                Some(Component::Normal(_)) => {
                    out.pop();
                }
                Some(Component::RootDir | Component::Prefix(_)) => {}
                _ => out.push(c),
            },
            c => out.push(c),
        }
    }
    if out.is_empty() { PathBuf::from(".") } else { out.iter().collect() }
}

/// `scheme://...`
pub fn is_url(s: &str) -> bool {
    s.split_once("://").is_some_and(|(scheme, _)| !scheme.is_empty() && scheme.chars().all(|c| c.is_ascii_alphanumeric() || c == '+'))
}

/// Expand `${NAME}` and `${NAME:-default}` (default when unset or empty); `$${`
/// escapes a literal `${`. Returns the first unset variable (without default) as the error.
pub fn expand_env(s: &str) -> Result<String, String> {
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(i) = rest.find('$') {
        out.push_str(&rest[..i]);
        let tail = &rest[i..];
        if let Some(t) = tail.strip_prefix("$${") {
            out.push_str("${");
            rest = t;
        } else if let Some(t) = tail.strip_prefix("${") {
            let Some(end) = t.find('}') else {
                out.push_str(tail);
                return Ok(out);
            };
            let (var, default) = match t[..end].split_once(":-") {
                Some((v, d)) => (v, Some(d)),
                None => (&t[..end], None),
            };
            match (std::env::var(var), default) {
                (Ok(v), None) => out.push_str(&v),
                (Ok(v), Some(_)) if !v.is_empty() => out.push_str(&v),
                (_, Some(d)) => out.push_str(d),
                (Err(_), None) => return Err(var.to_string()),
            }
            rest = &t[end + 1..];
        } else {
            out.push('$');
            rest = &tail[1..];
        }
    }
    out.push_str(rest);
    Ok(out)
}

/// Read and parse a pipeline file. All errors found are returned together.
pub fn load(path: &Path) -> Result<PipelineConfig, Diagnostics> {
    match load_lenient(path) {
        (Some(cfg), d) if d.is_empty() => Ok(cfg),
        (_, d) => Err(d),
    }
}

/// Load what can be loaded: the nodes that parsed (so graph checks can still
/// run on them) and every error. `None` when the file is unreadable or not TOML.
pub fn load_lenient(path: &Path) -> (Option<PipelineConfig>, Diagnostics) {
    match std::fs::read_to_string(path) {
        Ok(source) => parse_lenient(path, source),
        Err(e) => (None, Diagnostics(vec![Diagnostic::whole_file(path, format!("cannot read pipeline file: {e}"))])),
    }
}

/// Parse pipeline text that came from `path` (used for its folder and in messages).
pub fn parse(path: &Path, source: String) -> Result<PipelineConfig, Diagnostics> {
    match parse_lenient(path, source) {
        (Some(cfg), d) if d.is_empty() => Ok(cfg),
        (_, d) => Err(d),
    }
}

/// Like [`parse`], keeping the nodes that parsed alongside the errors.
pub fn parse_lenient(path: &Path, source: String) -> (Option<PipelineConfig>, Diagnostics) {
    let base_dir = path.parent().map(Path::to_path_buf).unwrap_or_default();
    let base_dir = if base_dir.as_os_str().is_empty() { PathBuf::from(".") } else { base_dir };
    let mut diags = Diagnostics::default();
    let mut cfg = PipelineConfig {
        file: path.to_path_buf(),
        base_dir,
        source: String::new(),
        settings: Settings::default(),
        nodes: Vec::new(),
        failed: Vec::new(),
    };

    let (root, syntax) = DeTable::parse_recoverable(&source);
    for e in syntax {
        let mut d = toml_diag(path, &source, &e, None);
        if e.span().is_some_and(|span| unquoted_env_reference(&source, span.start)) {
            d = d.with_help("environment references work inside quoted strings: write \"${VAR}\"");
        }
        diags.push(d);
    }
    if !diags.is_empty() {
        return (None, diags);
    }
    let root = root.into_inner();
    for (key, value) in root.iter() {
        let section = key.get_ref().as_ref();
        match section {
            "pipeline" => match Settings::deserialize(ValueDeserializer::from(value.clone())) {
                Ok(s) => cfg.settings = s,
                Err(e) => diags.push(toml_diag(
                    path,
                    &source,
                    &e,
                    Some(&["name", "ort_library", "on_error", "metrics_addr", "max_pixels", "api"]),
                )),
            },
            "sources" | "stages" | "sinks" => {
                let role = match section {
                    "sources" => Role::Source,
                    "stages" => Role::Stage,
                    _ => Role::Sink,
                };
                let DeValue::Table(table) = value.get_ref() else {
                    diags.push(
                        Diagnostic::at(path, &source, value.span(), format!("`{section}` must be a table of named {}s", role.noun()))
                            .with_help(format!("write `[{section}.NAME]` with `kind = \"...\"` under it")),
                    );
                    continue;
                };
                for (name, node) in table.iter() {
                    match parse_node(path, &source, role, name, node) {
                        Ok(n) => cfg.nodes.push(n),
                        Err(mut ds) => {
                            cfg.failed.push((name.get_ref().to_string(), role));
                            diags.0.append(&mut ds);
                        }
                    }
                }
            }
            other => {
                let mut d = Diagnostic::at(
                    path,
                    &source,
                    key.span(),
                    format!("unknown section `{other}`, expected one of `pipeline`, `sources`, `stages`, `sinks`"),
                );
                if let Some(c) = diag::closest(other, ["pipeline", "sources", "stages", "sinks"]) {
                    d = d.with_help(format!("did you mean `{c}`?"));
                }
                diags.push(d);
            }
        }
    }
    let default_policy = cfg.settings.on_error.unwrap_or_default();
    for n in &mut cfg.nodes {
        n.on_error = n.on_error_set.unwrap_or(default_policy);
    }
    cfg.source = source;
    if let Err(d) = cfg.metrics_addr() {
        diags.push(d);
    }
    diags.sort();
    (Some(cfg), diags)
}

fn parse_node(
    path: &Path,
    src: &str,
    role: Role,
    name: &Spanned<std::borrow::Cow<'_, str>>,
    node: &Spanned<DeValue<'_>>,
) -> Result<NodeConfig, Vec<Diagnostic>> {
    let node_name = name.get_ref().to_string();
    if node_name.trim().is_empty() || node_name.chars().any(char::is_control) {
        return Err(vec![
            Diagnostic::at(path, src, name.span(), format!("{} name {node_name:?} is empty or holds control characters", role.noun()))
                .with_help("names appear in logs, metrics and file names: use letters, digits, `-` and `_`"),
        ]);
    }
    let DeValue::Table(table) = node.get_ref() else {
        return Err(vec![
            Diagnostic::at(path, src, name.span(), format!("{} `{node_name}` must be a table", role.noun()))
                .with_help(format!("write `[{}.{node_name}]` with `kind = \"...\"` under it", role.section())),
        ]);
    };
    let queue_span = table
        .iter()
        .find(|(k, _)| k.get_ref() == "queue")
        .map(|(k, v)| match v.get_ref() {
            DeValue::Table(q) => q.iter().find(|(k, _)| k.get_ref() == "capacity").map_or(k.span(), |(k, _)| k.span()),
            _ => k.span(),
        })
        .unwrap_or(name.span());
    let mut common = toml::map::Map::new();
    let mut rest = toml::map::Map::new();
    for (k, v) in table.iter() {
        if COMMON_KEYS.contains(&k.get_ref().as_ref()) {
            common.insert(k.clone(), v.clone());
        } else {
            rest.insert(k.clone(), v.clone());
        }
    }
    let kinds = kinds::kinds_for(role);
    if !common.keys().any(|k| k.get_ref() == "kind") {
        return Err(vec![
            Diagnostic::at(path, src, name.span(), format!("{} `{node_name}` has no `kind`", role.noun()))
                .with_help(format!("add `kind = \"...\"`, one of {}", quote_list(kinds))),
        ]);
    }
    let mut common_diags = Vec::new();
    let common = deserialize_all_errors(path, src, node.span(), common, Common::deserialize, &mut common_diags);
    let Some(common) = common.filter(|_| common_diags.is_empty()) else {
        return Err(common_diags);
    };
    let kind_name = common.kind.get_ref().as_str();
    if !kinds.contains(&kind_name) {
        let mut d = Diagnostic::at(
            path,
            src,
            common.kind.span(),
            format!("unknown {} kind `{kind_name}`, expected one of {}", role.noun(), quote_list(kinds)),
        );
        if let Some(c) = diag::closest(kind_name, kinds.iter().copied()) {
            d = d.with_help(format!("did you mean `{c}`?"));
        }
        return Err(vec![d]);
    }
    let mut diags = Vec::new();
    let kind = deserialize_all_errors(path, src, node.span(), rest, |v| kinds::deserialize_kind(role, kind_name, v), &mut diags);
    let inputs = match (role, common.inputs) {
        (Role::Source, Some(i)) => {
            diags.push(
                Diagnostic::at(path, src, i.span(), format!("source `{node_name}` cannot have `inputs`"))
                    .with_help("sources read media; remove `inputs` or make this node a stage"),
            );
            Vec::new()
        }
        (Role::Stage | Role::Sink, None) => {
            diags.push(
                Diagnostic::at(path, src, name.span(), format!("{} `{node_name}` has no `inputs`", role.noun()))
                    .with_help("add `inputs = [\"NAME\"]` naming the upstream node(s)"),
            );
            Vec::new()
        }
        (Role::Stage | Role::Sink, Some(i)) if i.get_ref().is_empty() => {
            diags.push(
                Diagnostic::at(path, src, i.span(), format!("{} `{node_name}` has an empty `inputs` list", role.noun()))
                    .with_help("name at least one upstream node"),
            );
            Vec::new()
        }
        (_, i) => i.map(Spanned::into_inner).unwrap_or_default(),
    };
    let Some(kind) = kind.filter(|_| diags.is_empty()) else {
        return Err(diags);
    };
    Ok(NodeConfig {
        name: node_name,
        role,
        name_span: name.span(),
        kind,
        kind_span: common.kind.span(),
        inputs,
        queue: common.queue,
        queue_span,
        on_error: OnError::Skip,
        on_error_set: common.on_error,
        restart: common.restart,
        max_restarts: common.max_restarts,
        restart_backoff_ms: common.restart_backoff_ms,
    })
}

/// Deserialize `table`; on an error, note it, remove the offending key and
/// try again, so one node reports every bad key rather than the first.
fn deserialize_all_errors<'i, T>(
    path: &Path,
    src: &str,
    span: Range<usize>,
    mut table: DeTable<'i>,
    de: impl Fn(ValueDeserializer<'i>) -> Result<T, toml::de::Error>,
    diags: &mut Vec<Diagnostic>,
) -> Option<T> {
    let mut removed: Vec<String> = Vec::new();
    for _ in 0..=table.len() {
        match de(ValueDeserializer::from(Spanned::new(span.clone(), DeValue::Table(table.clone())))) {
            Ok(v) => return diags.is_empty().then_some(v),
            Err(e) => {
                let msg = e.message();
                // A key removed after an earlier error now shows up as missing: already reported.
                if msg.starts_with("missing field") && removed.iter().any(|k| msg.contains(&format!("`{k}`"))) {
                    return None;
                }
                let d = toml_diag(path, src, &e, Some(COMMON_KEYS));
                if let Some(suggested) = d.help.as_deref().and_then(|h| h.strip_prefix("did you mean `")).and_then(|h| h.split('`').next())
                {
                    removed.push(suggested.to_string());
                }
                diags.push(d);
                let at = e.span()?;
                let key = table.iter().find(|(k, v)| {
                    let (ks, vs) = (k.span(), v.span());
                    (ks.start <= at.start && at.start < ks.end.max(ks.start + 1))
                        || (vs.start <= at.start && at.end <= vs.end.max(vs.start + 1))
                });
                let key = key.map(|(k, _)| k.clone())?;
                removed.push(key.get_ref().to_string());
                table.remove(&key);
            }
        }
    }
    None
}

/// Whether a syntax error at byte `at` is about a `${VAR}` written without quotes:
/// the error sits on it, or the value of the key on that line starts with it.
fn unquoted_env_reference(src: &str, at: usize) -> bool {
    let at = at.min(src.len());
    if !src.is_char_boundary(at) {
        return false;
    }
    let line_start = src[..at].rfind('\n').map_or(0, |i| i + 1);
    let line_end = src[at..].find('\n').map_or(src.len(), |i| at + i);
    let value = src[line_start..line_end].split_once('=').map(|(_, v)| v.trim_start());
    src[at..].starts_with("${") || value.is_some_and(|v| v.starts_with("${") || v.starts_with("[${"))
}

fn quote_list(items: &[&str]) -> String {
    items.iter().map(|s| format!("`{s}`")).collect::<Vec<_>>().join(", ")
}

/// Turn a toml/serde error into a located diagnostic with a fix hint.
fn toml_diag(path: &Path, src: &str, e: &toml::de::Error, extra_known: Option<&[&str]>) -> Diagnostic {
    let span = e.span().unwrap_or(0..0);
    let message = e.message().trim().to_string();
    let mut d = Diagnostic::at(path, src, span, message.clone());
    if let Some(field) = message.strip_prefix("unknown field `").and_then(|m| m.split('`').next()) {
        let expected: Vec<&str> = message.split("expected ").nth(1).map(|s| s.split('`').skip(1).step_by(2).collect()).unwrap_or_default();
        let candidates = expected.iter().copied().chain(extra_known.unwrap_or(&[]).iter().copied());
        d = match diag::closest(field, candidates) {
            Some(c) => d.with_help(format!("did you mean `{c}`?")),
            None => d.with_help("remove it, or check the key names in docs/reference.md"),
        };
    } else if message.starts_with("invalid type") {
        d = d.with_help("check the value's type in docs/reference.md");
    } else if message.starts_with("missing field") {
        d = d.with_help("add the field to this table");
    } else if message.starts_with("invalid value") || message.starts_with("invalid length") {
        d = d.with_help("check the allowed values in docs/reference.md");
    } else if message.starts_with("unknown variant") {
        d = d.with_help("use one of the listed values");
    }
    d
}

#[cfg(test)]
mod reference_tests;
#[cfg(test)]
mod tests;
