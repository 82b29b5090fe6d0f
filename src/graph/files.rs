//! The files a pipeline reads and writes, checked before the run: inputs
//! (media, models, the ONNX Runtime library) exist, and sinks' outputs can be
//! written without two of them landing in one file.

use std::collections::HashMap;

use super::upstream_sources;
use crate::config::{Diagnostics, NodeKind, PipelineConfig, fetch_hint, is_url};

/// Files that must exist before the run.
pub(super) fn check_input_files(cfg: &PipelineConfig, diags: &mut Diagnostics) {
    for node in &cfg.nodes {
        let (value, what) = match &node.kind {
            // A GStreamer line that does not read `{uri}` (a test pattern, a camera element) needs no file.
            NodeKind::File(c) if c.launch.as_ref().is_some_and(|l| !l.get_ref().contains("{uri}")) => continue,
            NodeKind::File(c) => (&c.uri, "media file"),
            NodeKind::Audio(c) => (&c.uri, "media file"),
            NodeKind::Infer(c) => (&c.model, "model file"),
            NodeKind::Vad(c) => (&c.model, "model file"),
            NodeKind::Python(c) => match &c.script {
                Some(s) => (s, "Python script"),
                None => continue,
            },
            _ => continue,
        };
        match cfg.resolve_path(value) {
            // `${VAR}` may hold a URL: look at the expanded value.
            Ok(p) if is_url(&p.to_string_lossy()) || p.as_os_str() == "-" => {}
            Ok(p) if !p.exists() => {
                let help = if what == "model file" { fetch_hint::missing_model(&p) } else { fetch_hint::missing_media(&p) };
                diags.push(cfg.diag(value.span(), format!("{what} not found: {}", p.display())).with_help(help));
            }
            Ok(p) if p.is_dir() => diags.push(cfg.diag(value.span(), format!("{what} is a folder: {}", p.display()))),
            Ok(_) => {}
            Err(d) => diags.push(d),
        }
    }
    if let Some(s) = &cfg.settings.ort_library
        && let Err(d) = cfg.resolve_path(s)
    {
        diags.push(d);
    }
}

/// `path` with `.` and `..` worked out in the text (nothing need exist yet).
fn lexical(path: &std::path::Path) -> std::path::PathBuf {
    use std::path::Component;
    let mut out = std::path::PathBuf::new();
    for c in path.components() {
        match c {
            Component::CurDir => {}
            Component::ParentDir if matches!(out.components().next_back(), Some(Component::Normal(_))) => {
                out.pop();
            }
            c => out.push(c),
        }
    }
    out
}

/// Why a sink could not write `path` (a file, or a folder for `images`), when
/// that can be told before the run: a folder where the file goes, a file
/// where a folder goes, `{stream}` outside the file name.
fn unwritable(path: &std::path::Path, folder: bool, templated: bool) -> Option<String> {
    if templated && path.parent().is_some_and(|d| d.to_string_lossy().contains("{stream}")) {
        return Some("`{stream}` may only appear in the file name, not in a folder (e.g. path = \"out/{stream}.ndjson\")".into());
    }
    if !folder && !templated && path.is_dir() {
        return Some(format!("{} is a folder, not a file", path.display()));
    }
    let first = if folder { Some(path) } else { path.parent() };
    let existing = first.into_iter().flat_map(|p| p.ancestors()).find(|a| !a.as_os_str().is_empty() && a.exists())?;
    (!existing.is_dir()).then(|| format!("cannot make the folder for {}: {} is a file", path.display(), existing.display()))
}

/// No two outputs may be one file: two sinks writing one path, or one
/// sink's `{stream}` files for streams whose names make one file name (`a b`
/// and `a_b` both make `a_b`: names are made file-name safe). Either would
/// silently overwrite or interleave results.
pub(super) fn check_output_files(cfg: &PipelineConfig, producers: &[Vec<usize>], diags: &mut Diagnostics) {
    use crate::config::paths::{stream_file_name, stream_path};
    // A file (or, for a `dir` source's streams, a path template) → who writes it.
    let mut taken: HashMap<std::path::PathBuf, (&str, String)> = HashMap::new();
    for (i, node) in cfg.nodes.iter().enumerate() {
        let (value, images, only) = match &node.kind {
            NodeKind::Ndjson(c) => (&c.path, false, None),
            NodeKind::Subtitles(c) => (&c.path, false, None),
            NodeKind::Video(c) => (&c.path, false, c.stream.as_ref().map(|s| s.get_ref().as_str())),
            NodeKind::Images(c) => (&c.folder, true, None),
            _ => continue,
        };
        // Unset variables and stdout are reported or allowed elsewhere.
        let (Ok(text), Ok(path)) = (cfg.expand(value), cfg.resolve_path(value)) else { continue };
        // A server (a URL) is no file here: no folder to make, no file to share.
        if text == "-" || crate::config::is_url(&text) {
            continue;
        }
        let path = lexical(&path);
        if let Some(e) = unwritable(&path, images, text.contains("{stream}")) {
            diags.push(cfg.diag(value.span(), format!("sink `{}`: {e}", node.name)));
            continue;
        }
        // `None`: every stream of a `dir` source (the template itself is the key).
        let file_of = |stream: Option<&str>| -> std::path::PathBuf {
            match (images, stream) {
                // Snapshots are `STREAM-SEQ.ext` in the folder.
                (true, s) => path.join(format!("{}-*", s.map_or_else(|| "{stream}".to_string(), stream_file_name))),
                (false, Some(s)) => stream_path(&path, s),
                (false, None) => path.clone(),
            }
        };
        let mut files = Vec::new();
        if images || text.contains("{stream}") {
            for j in upstream_sources(cfg, producers, i) {
                let source = &cfg.nodes[j];
                if only.is_some_and(|o| o != source.name) {
                    continue;
                }
                if matches!(source.kind, NodeKind::Dir(_) | NodeKind::KafkaJobs(_)) {
                    // Named at run time, one per input file (the `dir` source checks its own names).
                    files.push((file_of(None), format!("the files of `{}` source `{}`", source.kind.name(), source.name)));
                } else {
                    files.push((file_of(Some(&source.name)), format!("stream `{}`", source.name)));
                }
            }
        } else {
            files.push((path.clone(), String::new()));
        }
        for (file, what) in files {
            match taken.get(&file) {
                Some((sink, other)) if *sink == node.name => diags.push(
                    cfg.diag(value.span(), format!("sink `{sink}`: {other} and {what} would write the same file {}", file.display()))
                        .with_help("stream names are made file-name safe (characters other than letters, digits, `-`, `_` and `.` become `_`): rename one of the sources"),
                ),
                Some((sink, _)) => diags.push(
                    cfg.diag(value.span(), format!("sinks `{sink}` and `{}` would write the same file {}", node.name, file.display()))
                        .with_help("give each sink its own path"),
                ),
                None => {
                    taken.insert(file, (node.name.as_str(), what));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::graph::check;

    fn errors(src: String) -> Vec<String> {
        let cfg = crate::config::parse(std::path::Path::new("/p/p.toml"), src).unwrap();
        match check(&cfg) {
            Ok(_) => Vec::new(),
            Err(d) => d.0.iter().map(|d| d.headline()).collect(),
        }
    }

    /// What a sink cannot write is a located error before the run (and in `validate`).
    #[test]
    fn outputs_that_cannot_be_written_are_errors() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path().display().to_string();
        std::fs::write(dir.path().join("file"), b"x").unwrap();
        let sink = |kind: &str, key: &str, path: &str| {
            format!("[sources.a]\nkind = \"testsrc\"\n[sinks.out]\nkind = \"{kind}\"\ninputs = [\"a\"]\n{key} = \"{path}\"\n")
        };
        let cases = [
            (sink("ndjson", "path", &d), format!("{d} is a folder, not a file")),
            (sink("ndjson", "path", &format!("{d}/file/r.ndjson")), format!("{d}/file is a file")),
            (sink("video", "path", &format!("{d}/file/sub/{{stream}}.mp4")), format!("{d}/file is a file")),
            (sink("images", "folder", &format!("{d}/file")), format!("{d}/file is a file")),
            (sink("ndjson", "path", &format!("{d}/{{stream}}/r.ndjson")), "may only appear in the file name".to_string()),
        ];
        for (src, want) in cases {
            let e = errors(src.clone());
            assert!(e.len() == 1 && e[0].starts_with("/p/p.toml:6:") && e[0].contains(&want), "{src}\n{e:?}");
        }
        assert_eq!(errors(sink("ndjson", "path", &format!("{d}/new/folder/r.ndjson"))), Vec::<String>::new());
        let src = "[sources.a]\nkind = \"testsrc\"\n[stages.det]\nkind = \"infer\"\ninputs = [\"a\"]\nmodel = \"m.onnx\"\nproviders = []\n[sinks.out]\nkind = \"null\"\ninputs = [\"det\"]\n";
        let e = crate::config::parse(std::path::Path::new("/p/p.toml"), src.to_string()).unwrap_err();
        assert!(e.0.iter().any(|e| e.headline().starts_with("/p/p.toml:7:13: providers = [] leaves no execution provider")), "{e:?}");
    }

    /// Two outputs that would be one file are located errors, before anything runs.
    #[test]
    fn outputs_that_would_share_a_file_are_errors() {
        let src = |a: &str, b: &str, sinks: &str| {
            format!("[sources.\"{a}\"]\nkind = \"testsrc\"\n[sources.\"{b}\"]\nkind = \"testsrc\"\n{sinks}",)
        };
        let one = |kind: &str, key: &str, path: &str| {
            format!("[sinks.out]\nkind = \"{kind}\"\ninputs = [\"a b\", \"a_b\"]\n{key} = \"{path}\"\n")
        };
        // Streams `a b` and `a_b` of one sink.
        let e = errors(src("a b", "a_b", &one("ndjson", "path", "out/{stream}.ndjson")));
        assert_eq!(e.len(), 1, "{e:?}");
        assert!(e[0].contains("sink `out`: stream `a b` and stream `a_b` would write the same file /p/out/a_b.ndjson"), "{e:?}");
        let e = errors(src("a b", "a_b", &one("video", "path", "out/{stream}.mp4")));
        assert_eq!(e.len(), 1, "{e:?}");
        let e = errors(src("a b", "a_b", &one("subtitles", "path", "out/{stream}.srt")));
        assert_eq!(e.iter().filter(|e| e.contains("would write the same file /p/out/a_b.srt")).count(), 1, "{e:?}");
        assert!(errors(src("a b", "a_b", &one("images", "folder", "shots")))[0].contains("/p/shots/a_b-*"));
        // Distinct names are fine; one file for both streams is fine.
        assert_eq!(errors(src("a b", "a_b", &one("ndjson", "path", "out/all.ndjson"))), Vec::<String>::new());
        let fine = "[sources.a]\nkind = \"testsrc\"\n[sources.b]\nkind = \"testsrc\"\n[sinks.out]\nkind = \"ndjson\"\ninputs = [\"a\", \"b\"]\npath = \"out/{stream}.ndjson\"\n";
        assert_eq!(errors(fine.to_string()), Vec::<String>::new());
        // Two sinks, one path (however it is written).
        let two = "[sources.a]\nkind = \"testsrc\"\n[sinks.x]\nkind = \"ndjson\"\ninputs = [\"a\"]\npath = \"out/same.ndjson\"\n[sinks.y]\nkind = \"ndjson\"\ninputs = [\"a\"]\npath = \"out/./sub/../same.ndjson\"\n";
        let e = errors(two.to_string());
        assert_eq!(e, vec!["/p/p.toml:10:8: sinks `x` and `y` would write the same file /p/out/same.ndjson"], "{e:?}");
        // A `dir` source's files through two sinks with one template.
        let dir = "[sources.d]\nkind = \"dir\"\npath = \"in\"\n[sinks.x]\nkind = \"ndjson\"\ninputs = [\"d\"]\npath = \"out/{stream}.ndjson\"\n[sinks.y]\nkind = \"ndjson\"\ninputs = [\"d\"]\npath = \"out/{stream}.ndjson\"\n";
        let e = errors(dir.to_string());
        assert!(e.len() == 1 && e[0].contains("sinks `x` and `y` would write the same file /p/out/{stream}.ndjson"), "{e:?}");
    }
}
