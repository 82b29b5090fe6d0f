//! Restart policies: a source that stops starts again (with backoff, at most
//! `max_restarts` times); a failure is a lost/reconnected event in the
//! results, a deliberate loop (`restart = "always"`, input ended) is counted
//! as a loop and logged as one, not as a loss; the other streams are not
//! disturbed.

mod util;

use util::*;

#[test]
fn a_source_restarts_by_policy_and_the_others_go_on() {
    require_assets();
    let dir = tempfile::tempdir().unwrap();
    let clip = root().join("samples/text-720p.mp4");
    let nd = dir.path().join("out.ndjson");
    let p = dir.path().join("restart.toml");
    std::fs::write(
        &p,
        format!(
            "[sources.loop]\nkind = \"file\"\nuri = \"{c}\"\nrestart = \"always\"\nmax_restarts = 2\nrestart_backoff_ms = 50\n\
             [sources.once]\nkind = \"file\"\nuri = \"{c}\"\n\
             [sinks.out]\nkind = \"ndjson\"\ninputs = [\"loop\", \"once\"]\npath = \"{}\"\n",
            nd.display(),
            c = clip.display()
        ),
    )
    .unwrap();
    let o = bin().arg("run").arg(&p).args(["--progress", "never"]).output().unwrap();
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(0), "{err}");
    let (decoded, processed, _, _) = accounting(&err);
    assert_eq!((decoded, processed), (400, 400), "three plays of the looped file, one of the other");
    // Playing the file again is a loop, not a loss: said at INFO, counted as loops.
    assert!(err.contains("loop: looped 2×"), "{err}");
    assert!(!err.contains("stream lost") && !err.contains("WARN"), "a deliberate loop is no loss:\n{err}");
    assert_eq!(err.matches("source `loop`: looped").count(), 2, "{err}");
    let lines = read_ndjson(&nd);
    let looped: Vec<_> = lines.iter().filter(|l| l["stream"] == "loop" && l.get("event").is_none()).collect();
    assert_eq!(looped.len(), 300);
    let mut last_pts = -1.0;
    for (i, l) in looped.iter().enumerate() {
        assert_eq!(l["seq"], i as u64, "frame numbers go on across restarts");
        let pts = l["pts"].as_f64().unwrap();
        assert!(pts > last_pts, "timestamps keep increasing: {l}");
        last_pts = pts;
    }
    let events: Vec<&str> = lines.iter().filter(|l| l["stream"] == "loop").filter_map(|l| l["event"].as_str()).collect();
    assert!(events.is_empty(), "no lost/reconnected events for a loop: {events:?}");
    assert_eq!(lines.iter().filter(|l| l["stream"] == "once" && l.get("event").is_none()).count(), 100);
    assert!(lines.iter().all(|l| l["stream"] != "once" || l.get("event").is_none()), "the other stream had no event");

    // `restart` is for sources: on a sink it is a located error.
    std::fs::write(
        &p,
        format!(
            "[sources.cam]\nkind = \"file\"\nuri = \"{}\"\n[sinks.out]\nkind = \"null\"\ninputs = [\"cam\"]\nrestart = \"always\"\n",
            clip.display()
        ),
    )
    .unwrap();
    let o = bin().arg("run").arg(&p).output().unwrap();
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("error: sink `out`: `restart` applies to sources only") && err.contains("restart.toml:7:11"), "{err}");
}
