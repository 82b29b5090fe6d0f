//! Synthetic audio: tone bursts at known times, found there by the level meter.

mod util;

use util::*;

#[test]
fn audio_testsrc_bursts_are_found_at_their_times() {
    let dir = tempfile::tempdir().unwrap();
    let nd = dir.path().join("tone.ndjson");
    let o = bin().args(["run", "pipelines/audio-testsrc.toml", "--progress", "never"]).env("OUT", &nd).output().unwrap();
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(0), "{err}");
    let lines = read_ndjson(&nd);
    assert_eq!(lines.len(), 313, "10 s of 512-sample windows at 16 kHz");
    let segments = lines.last().unwrap()["results"]["level"]["segments"].as_array().unwrap().clone();
    assert_eq!(segments.len(), 10, "{segments:?}");
    let window = 512.0 / 16000.0;
    for (k, s) in segments.iter().enumerate() {
        let (start, end) = (s["start"].as_f64().unwrap(), s["end"].as_f64().unwrap());
        assert!((start - k as f64).abs() <= window, "burst {k} starts at {start}");
        assert!((end - (k as f64 + 0.3)).abs() <= window + 1e-9, "burst {k} ends at {end}");
    }
}
