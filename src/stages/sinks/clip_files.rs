//! A `clips` sink's files: the folder its template writes under, free
//! names, and retention (the oldest clips under that folder deleted past
//! `max_age` or `max_bytes`).

use std::path::{Path, PathBuf};
use std::time::SystemTime;

/// The folder above every clip a template makes: its path up to the first `{`.
pub fn root(template: &Path) -> PathBuf {
    let mut root = PathBuf::new();
    for c in template.components() {
        if c.as_os_str().to_string_lossy().contains('{') {
            return root;
        }
        root.push(c);
    }
    root.parent().map(Path::to_path_buf).unwrap_or_default()
}

/// `path`, or `path` with `-1`, `-2`, ... before its extension when a file is there already.
pub fn unused(path: PathBuf) -> PathBuf {
    if !path.exists() {
        return path;
    }
    let stem = path.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();
    let ext = path.extension().map(|e| format!(".{}", e.to_string_lossy())).unwrap_or_default();
    (1..).map(|n| path.with_file_name(format!("{stem}-{n}{ext}"))).find(|p| !p.exists()).expect("a free name")
}

/// The mp4 files under `dir` (recursively): (path, bytes, modified).
fn clips_under(dir: &Path, out: &mut Vec<(PathBuf, u64, SystemTime)>) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    for e in entries.flatten() {
        let p = e.path();
        let Ok(meta) = e.metadata() else { continue };
        if meta.is_dir() {
            clips_under(&p, out);
        } else if p.extension().is_some_and(|x| x == "mp4") {
            out.push((p, meta.len(), meta.modified().unwrap_or(SystemTime::UNIX_EPOCH)));
        }
    }
}

/// Delete the oldest clips under `root` older than `max_age` seconds or while
/// all of them take more than `max_bytes`, never one in `keep` (open now).
/// The files deleted (path, bytes), and the bytes left.
pub fn retain(root: &Path, max_age: Option<f64>, max_bytes: Option<u64>, keep: &[PathBuf]) -> (Vec<(PathBuf, u64)>, u64) {
    let mut files = Vec::new();
    clips_under(root, &mut files);
    files.sort_by_key(|f| f.2);
    let now = SystemTime::now();
    let mut total: u64 = files.iter().map(|f| f.1).sum();
    let mut deleted = Vec::new();
    for (path, bytes, modified) in files {
        if keep.contains(&path) {
            continue;
        }
        let old = max_age.is_some_and(|a| now.duration_since(modified).is_ok_and(|d| d.as_secs_f64() > a));
        let over = max_bytes.is_some_and(|m| total > m);
        if !(old || over) {
            continue;
        }
        match std::fs::remove_file(&path) {
            Ok(()) => {
                total -= bytes;
                deleted.push((path, bytes));
            }
            Err(e) => tracing::warn!("clips: cannot delete {}: {e}", path.display()),
        }
    }
    (deleted, total)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roots() {
        assert_eq!(root(Path::new("/a/clips/{stream}/{start}.mp4")), Path::new("/a/clips"));
        assert_eq!(root(Path::new("/a/clips/x.mp4")), Path::new("/a/clips"));
    }
}
