//! Edits on a pipeline file's TOML document before it is built: a setting by
//! key path (`det.batch.max = 4`), a source replayed as N paced streams, and
//! every sink replaced by one that captures the results. Editing the document
//! (not the parsed config) means every key a node accepts can be varied, and
//! the edited text goes through the same checks as a file.

use std::path::{Path, PathBuf};

use toml::{Table, Value};

use super::Error;
use crate::config::{self, PipelineConfig};
use crate::graph::{self, Graph};

const SECTIONS: [&str; 3] = ["sources", "stages", "sinks"];

/// A pipeline file's document, editable.
#[derive(Debug, Clone)]
pub struct Doc {
    /// The file it came from (relative paths in it resolve against its folder).
    pub path: PathBuf,
    table: Table,
    /// What was changed, for messages (`det.batch.max = 4`).
    pub edits: Vec<String>,
}

/// `KEY=V1,V2,…` from the command line: the key path and its values.
#[derive(Debug, Clone, PartialEq)]
pub struct Setting {
    pub key: String,
    pub values: Vec<Value>,
}

impl std::str::FromStr for Setting {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let (key, values) = s.split_once('=').ok_or_else(|| format!("`{s}`: write NODE.KEY=V1,V2,… (e.g. det.batch.max=1,4)"))?;
        let key = key.trim();
        if key.split('.').count() < 2 || key.split('.').any(|p| p.trim().is_empty()) {
            return Err(format!("`{key}`: the key is NODE.KEY (e.g. det.intra_threads or det.batch.max)"));
        }
        let values: Vec<Value> = split_values(values).iter().map(|v| parse_value(v)).collect();
        if values.is_empty() {
            return Err(format!("`{s}`: no values after `=`"));
        }
        Ok(Setting { key: key.to_string(), values })
    }
}

/// What one source reads (see [`Doc::inputs`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Input {
    pub source: String,
    /// As the file writes it: `file ../samples/clip.mp4`.
    pub shown: String,
    /// The same, with paths resolved: equal keys read the same input.
    pub key: String,
}

/// `u` against the pipeline file's folder `base` when it is a relative path
/// (not a URL or `-`), symbolic links resolved where it exists.
fn resolved(base: &Path, u: &str) -> String {
    if u == "-" || u.contains("://") || u.contains('{') {
        return u.to_string();
    }
    let p = base.join(u);
    let p = std::path::absolute(&p).unwrap_or(p);
    std::fs::canonicalize(&p).unwrap_or(p).display().to_string()
}

/// Split on commas that are not inside brackets, braces or quotes.
fn split_values(s: &str) -> Vec<String> {
    let (mut out, mut cur, mut depth, mut quote) = (Vec::new(), String::new(), 0i32, None::<char>);
    for c in s.chars() {
        match (c, quote) {
            ('"' | '\'', None) => quote = Some(c),
            (q, Some(open)) if q == open => quote = None,
            ('[' | '{', None) => depth += 1,
            (']' | '}', None) => depth -= 1,
            (',', None) if depth == 0 => {
                out.push(std::mem::take(&mut cur));
                continue;
            }
            _ => {}
        }
        cur.push(c);
    }
    out.push(cur);
    out.into_iter().map(|v| v.trim().to_string()).filter(|v| !v.is_empty()).collect()
}

/// A TOML value (`4`, `0.5`, `true`, `[0.5, 0.5, 0.5]`, `"bgr"`), or the text as a string.
pub fn parse_value(text: &str) -> Value {
    match format!("v = {text}").parse::<Table>() {
        Ok(mut t) => t.remove("v").unwrap_or_else(|| Value::String(text.into())),
        Err(_) => Value::String(text.to_string()),
    }
}

/// A value as TOML writes it (`4`, `"bgr"`).
pub fn show_value(v: &Value) -> String {
    match v {
        Value::String(s) => format!("{s:?}"),
        v => v.to_string(),
    }
}

impl Doc {
    /// Read and check a pipeline file (its own diagnostics, located, when it is wrong).
    pub fn load(path: &Path) -> Result<Doc, Error> {
        let cfg = config::load(path)?;
        graph::check(&cfg)?;
        let table = cfg.source.parse::<Table>().map_err(|e| Error::Setting(format!("{}: {e}", path.display())))?;
        Ok(Doc { path: path.to_path_buf(), table, edits: Vec::new() })
    }

    fn nodes(&self) -> impl Iterator<Item = (&'static str, &String, &Value)> {
        SECTIONS.iter().flat_map(move |s| {
            self.table.get(*s).and_then(Value::as_table).into_iter().flat_map(move |t| t.iter().map(move |(k, v)| (*s, k, v)))
        })
    }

    fn node_names(&self) -> Vec<String> {
        self.nodes().map(|(_, k, _)| k.clone()).collect()
    }

    fn node_mut(&mut self, name: &str) -> Option<&mut Table> {
        for s in SECTIONS {
            let found = self.table.get(s).and_then(Value::as_table).is_some_and(|t| t.contains_key(name));
            if found {
                return self.table.get_mut(s).and_then(Value::as_table_mut).and_then(|t| t.get_mut(name)).and_then(Value::as_table_mut);
            }
        }
        None
    }

    /// Set `NODE.KEY[.SUBKEY…]` to `value` (tables on the way are made when missing).
    pub fn set(&mut self, key: &str, value: &Value) -> Result<(), Error> {
        let mut parts = key.split('.').map(str::trim);
        let node = parts.next().unwrap_or_default();
        let path: Vec<&str> = parts.collect();
        let names = self.node_names();
        let file = self.path.display().to_string();
        let Some(mut table) = self.node_mut(node) else {
            let help = crate::config::diag::closest(node, names.iter().map(String::as_str))
                .map(|c| format!("; did you mean `{c}`?"))
                .unwrap_or_default();
            return Err(Error::Setting(format!("`{key}`: {file} has no node `{node}` (its nodes: {}){help}", names.join(", "))));
        };
        let (last, parents) = path.split_last().ok_or_else(|| Error::Setting(format!("`{key}`: name a key of node `{node}`")))?;
        for (i, p) in parents.iter().enumerate() {
            let entry = table.entry(p.to_string()).or_insert_with(|| Value::Table(Table::new()));
            table = entry
                .as_table_mut()
                .ok_or_else(|| Error::Setting(format!("`{key}`: `{node}.{}` is a value, not a table of keys", parents[..=i].join("."))))?;
        }
        table.insert(last.to_string(), value.clone());
        self.edits.push(format!("{key} = {}", show_value(value)));
        Ok(())
    }

    /// The sources' names.
    pub fn sources(&self) -> Vec<String> {
        self.nodes().filter(|(s, _, _)| *s == "sources").map(|(_, k, _)| k.clone()).collect()
    }

    /// What each source reads, as [`Input`]s: its kind and the file, folder or
    /// URL it names (`uri`, `path`; a relative path resolved against the
    /// pipeline file's folder), or, for a source that makes its own frames
    /// (`testsrc`, `audio_testsrc`, ...), its settings but `realtime`.
    pub fn inputs(&self) -> Vec<Input> {
        let base = self.path.parent().unwrap_or(Path::new(""));
        let Some(sources) = self.table.get("sources").and_then(Value::as_table) else { return Vec::new() };
        let mut out: Vec<Input> = sources
            .iter()
            .map(|(name, v)| {
                let t = v.as_table().cloned().unwrap_or_default();
                let kind = t.get("kind").and_then(Value::as_str).unwrap_or_default().to_string();
                let named = ["uri", "path"].iter().find_map(|k| t.get(*k).and_then(Value::as_str));
                let (shown, key) = match named {
                    Some(u) => (format!("{kind} {u}"), format!("{kind} {}", resolved(base, u))),
                    None => {
                        let mut rest = t.clone();
                        rest.remove("kind");
                        rest.remove("realtime");
                        let settings = Value::Table(rest).to_string().replace('\n', " ").trim().to_string();
                        let shown = if settings.is_empty() { kind.clone() } else { format!("{kind} {{ {settings} }}") };
                        (shown.clone(), shown)
                    }
                };
                Input { source: name.clone(), shown, key }
            })
            .collect();
        out.sort_by(|x, y| x.key.cmp(&y.key).then(x.source.cmp(&y.source)));
        out
    }

    /// Play the pipeline's one source as `n` streams (`NAME-1` … `NAME-N`), each
    /// paced at its native rate (`realtime = true`) and looping (`restart =
    /// "always"`) when it is a file or a test source; every node that read the
    /// source reads them all (fan-in).
    pub fn replicate_source(&mut self, n: usize) -> Result<Vec<String>, Error> {
        let sources = self.sources();
        let [name] = &sources[..] else {
            return Err(Error::Setting(format!(
                "{}: --capacity adds copies of one source; this pipeline has {} ({})",
                self.path.display(),
                sources.len(),
                sources.join(", ")
            )));
        };
        let table = self.table.get_mut("sources").and_then(Value::as_table_mut).expect("listed above");
        let mut node = table.remove(name).and_then(|v| v.as_table().cloned()).unwrap_or_default();
        let kind = node.get("kind").and_then(Value::as_str).unwrap_or_default().to_string();
        if matches!(kind.as_str(), "file" | "testsrc") {
            node.insert("realtime".into(), Value::Boolean(true));
        }
        if kind == "file" {
            node.insert("restart".into(), Value::String("always".into()));
            node.remove("max_restarts");
            node.insert("restart_backoff_ms".into(), Value::Integer(0));
        }
        let names: Vec<String> = (1..=n).map(|i| format!("{name}-{i}")).collect();
        for s in &names {
            table.insert(s.clone(), Value::Table(node.clone()));
        }
        for section in ["stages", "sinks"] {
            let Some(t) = self.table.get_mut(section).and_then(Value::as_table_mut) else { continue };
            for (_, v) in t.iter_mut() {
                let Some(inputs) = v.get_mut("inputs").and_then(Value::as_array_mut) else { continue };
                if inputs.iter().any(|i| i.as_str() == Some(name)) {
                    inputs.retain(|i| i.as_str() != Some(name));
                    inputs.extend(names.iter().map(|s| Value::String(s.clone())));
                }
            }
        }
        self.edits.push(format!("{n} × {name}"));
        Ok(names)
    }

    /// Replace every sink with one NDJSON sink on the nodes they read (and,
    /// when `images` is given, annotated snapshots of every frame there).
    pub fn capture(&mut self, ndjson: &Path, images: Option<&Path>) {
        let mut inputs: Vec<Value> = Vec::new();
        if let Some(sinks) = self.table.get("sinks").and_then(Value::as_table) {
            for v in sinks.values() {
                for i in v.get("inputs").and_then(Value::as_array).into_iter().flatten() {
                    if !inputs.contains(i) {
                        inputs.push(i.clone());
                    }
                }
            }
        }
        let mut sinks = Table::new();
        let mut results = Table::new();
        results.insert("kind".into(), "ndjson".into());
        results.insert("inputs".into(), Value::Array(inputs.clone()));
        results.insert("path".into(), ndjson.display().to_string().into());
        sinks.insert("captured".into(), Value::Table(results));
        if let Some(dir) = images {
            let mut shots = Table::new();
            shots.insert("kind".into(), "images".into());
            shots.insert("inputs".into(), Value::Array(inputs));
            shots.insert("folder".into(), dir.display().to_string().into());
            shots.insert("annotate".into(), true.into());
            shots.insert("format".into(), "png".into());
            sinks.insert("snapshots".into(), Value::Table(shots));
        }
        self.table.insert("sinks".into(), Value::Table(sinks));
    }

    /// The edited document as pipeline text.
    pub fn text(&self) -> String {
        toml::to_string(&self.table).unwrap_or_default()
    }

    /// Parse and check the edited document as the file it came from.
    pub fn build(&self) -> Result<(PipelineConfig, Graph), Error> {
        let shown = if self.edits.is_empty() { String::new() } else { format!(" with {}", self.edits.join(", ")) };
        let wrap = |d: crate::config::Diagnostics| {
            Error::Setting(format!(
                "{}{shown}: the edited pipeline does not load (the key or value is not accepted):\n{}",
                self.path.display(),
                d.0.iter().map(|d| format!("  {}", d.headline())).collect::<Vec<_>>().join("\n")
            ))
        };
        let cfg = config::parse(&self.path, self.text()).map_err(wrap)?;
        let graph = graph::check(&cfg).map_err(wrap)?;
        Ok((cfg, graph))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PIPE: &str = r#"
[sources.cam]
kind = "file"
uri = "a.mp4"

[stages.pre]
kind = "preprocess"
inputs = ["cam"]
width = 640
height = 384

[stages.det]
kind = "infer"
inputs = ["pre"]
model = "m.onnx"

[sinks.out]
kind = "null"
inputs = ["det"]
"#;

    fn doc() -> Doc {
        Doc { path: "p.toml".into(), table: PIPE.parse().unwrap(), edits: Vec::new() }
    }

    #[test]
    fn settings_parse_values_and_lists() {
        let s: Setting = "det.batch.max=1,4".parse().unwrap();
        assert_eq!(s.key, "det.batch.max");
        assert_eq!(s.values, [Value::Integer(1), Value::Integer(4)]);
        let s: Setting = "pre.mean=[0.5, 0.5, 0.5],[0,0,0]".parse().unwrap();
        assert_eq!(s.values.len(), 2);
        assert!(s.values[0].is_array());
        let s: Setting = "pre.color=bgr,\"rgb\"".parse().unwrap();
        assert_eq!(s.values, [Value::String("bgr".into()), Value::String("rgb".into())]);
        assert!("det=1".parse::<Setting>().is_err());
        assert!("det.batch.max".parse::<Setting>().is_err());
        assert!("det.x=".parse::<Setting>().is_err());
    }

    #[test]
    fn set_by_path_makes_tables_and_names_unknown_nodes() {
        let mut d = doc();
        d.set("det.batch.max", &Value::Integer(4)).unwrap();
        d.set("pre.width", &Value::Integer(480)).unwrap();
        let t = d.text();
        assert!(t.contains("max = 4"), "{t}");
        assert!(t.contains("width = 480"), "{t}");
        let e = d.set("dett.batch.max", &Value::Integer(4)).unwrap_err().to_string();
        assert!(e.contains("no node `dett`") && e.contains("did you mean `det`"), "{e}");
        let e = d.set("pre.width.x", &Value::Integer(4)).unwrap_err().to_string();
        assert!(e.contains("`pre.width` is a value"), "{e}");
    }

    #[test]
    fn replicated_source_feeds_every_reader() {
        let mut d = doc();
        let names = d.replicate_source(3).unwrap();
        assert_eq!(names, ["cam-1", "cam-2", "cam-3"]);
        let t: Table = d.text().parse().unwrap();
        let inputs = t["stages"]["pre"]["inputs"].as_array().unwrap();
        assert_eq!(inputs.len(), 3);
        assert_eq!(t["sources"]["cam-2"]["realtime"].as_bool(), Some(true));
        assert_eq!(t["sources"]["cam-2"]["restart"].as_str(), Some("always"));
        assert!(t["sources"].get("cam").is_none());
    }

    #[test]
    fn capture_replaces_the_sinks() {
        let mut d = doc();
        d.capture(Path::new("/tmp/x.ndjson"), None);
        let t: Table = d.text().parse().unwrap();
        let sinks = t["sinks"].as_table().unwrap();
        assert_eq!(sinks.len(), 1);
        assert_eq!(sinks["captured"]["inputs"].as_array().unwrap()[0].as_str(), Some("det"));
    }
}
