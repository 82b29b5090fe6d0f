//! Paths of per-stream outputs: a stream name as a safe file-name component
//! and the file a `{stream}` path template names for it (sinks, the bus
//! spool, and the graph's checks of output paths).

/// A stream name as one file-name component: letters, digits, `-`, `_` and
/// `.` are kept, anything else (`/`, `\`, spaces, ...) becomes `_`, and a
/// leading `.` becomes `_`, so the result can never name a folder above
/// (`..`), a hidden file, or a path in another folder.
pub fn stream_file_name(stream: &str) -> String {
    let mut n: String =
        stream.chars().map(|c| if c.is_ascii_alphanumeric() || c == '-' || c == '_' || c == '.' { c } else { '_' }).collect();
    if n.is_empty() || n.starts_with('.') {
        n.replace_range(..n.chars().next().map_or(0, char::len_utf8), "_");
    }
    n
}

/// The file of `stream` for a `{stream}` path template.
pub fn stream_path(template: &std::path::Path, stream: &str) -> std::path::PathBuf {
    let name = template.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    template.with_file_name(name.replace("{stream}", &stream_file_name(stream)))
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::{stream_file_name, stream_path};

    #[test]
    fn per_stream_paths_stay_in_the_output_folder() {
        let t = Path::new("/out/{stream}.ndjson");
        assert_eq!(stream_path(t, "day 2/cam.mp4"), Path::new("/out/day_2_cam.mp4.ndjson"));
        assert_eq!(stream_path(t, "../../etc/passwd"), Path::new("/out/_._.._etc_passwd.ndjson"));
        assert_eq!(stream_path(Path::new("/out/run-{stream}-a.ndjson"), "cam"), Path::new("/out/run-cam-a.ndjson"));
        for s in ["..", "../x", "/abs", "a/../../b", ".hidden"] {
            assert_eq!(stream_path(t, s).parent(), Some(Path::new("/out")), "{s}");
        }
    }

    #[test]
    fn stream_file_names_stay_in_their_folder() {
        assert_eq!(stream_file_name("clip-1.mp4"), "clip-1.mp4");
        assert_eq!(stream_file_name("day 1/cam.mp4"), "day_1_cam.mp4");
        assert_eq!(stream_file_name("../../etc/passwd"), "_._.._etc_passwd");
        assert_eq!(stream_file_name(".."), "_.");
        assert_eq!(stream_file_name(".hidden"), "_hidden");
        assert_eq!(stream_file_name("a\\b"), "a_b");
        assert_eq!(stream_file_name(""), "_");
        for s in ["..", "../x", "a/../../b", "/abs"] {
            let n = stream_file_name(s);
            assert!(!n.contains('/') && n != ".." && n != "." && !n.starts_with('.'), "{s} -> {n}");
        }
    }
}
