//! How a run talks about its inputs: paths shown tidied (no `dir/../`), the
//! decode choice said once per source.

mod util;

use util::*;

/// A pipeline in `pipelines/` naming `../samples/…` (here through a symlinked
/// `samples` folder) and writing `../out/…`: the log shows the paths tidied by
/// their text, the symlink kept, and says the decode choice once, in the summary.
#[test]
fn paths_are_tidied_and_the_decode_choice_is_said_once() {
    require_assets();
    let dir = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink(root().join("samples"), dir.path().join("samples")).unwrap();
    std::fs::create_dir(dir.path().join("pipelines")).unwrap();
    let p = dir.path().join("pipelines/p.toml");
    std::fs::write(&p, "[sources.cam]\nkind = \"file\"\nuri = \"../samples/text-720p.mp4\"\nmax_frames = 5\n[sinks.out]\nkind = \"ndjson\"\ninputs = [\"cam\"]\npath = \"../out/p.ndjson\"\n")
        .unwrap();
    let o = bin().arg("run").arg(&p).args(["--progress", "never"]).output().unwrap();
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(0), "{err}");
    let shown = format!("{}/samples/text-720p.mp4", dir.path().display());
    assert!(err.contains(&format!("source `cam` (file): {shown} (")), "the tidied path:\n{err}");
    assert!(err.contains(&format!("NDJSON to {}/out/p.ndjson", dir.path().display())), "the sink's path tidied:\n{err}");
    assert!(!err.contains("/../"), "a path shown with `..`:\n{err}");

    let choice = err.lines().find_map(|l| l.strip_prefix("cam: decode ")).unwrap_or_else(|| panic!("no decode line:\n{err}"));
    // The reason software was chosen (or the GPU NVDEC runs on): said once.
    let key = choice.strip_prefix("software (").and_then(|r| r.strip_suffix(')')).unwrap_or(choice);
    assert_eq!(err.matches(key).count(), 1, "`{key}` said more than once:\n{err}");
}
