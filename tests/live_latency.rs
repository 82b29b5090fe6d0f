//! A live source faster than the model: latency must stay bounded (the newest
//! frames are worked on, older ones are dropped and counted), not creep as a
//! backlog grows.

mod util;

use util::*;

/// 30 fps of 720p synthetic video, paced like a camera, into text detection on
/// a 1280×736 tensor (several times slower than 30 fps on a CPU), every queue
/// `drop_oldest` with room for 2 frames.
///
/// The bound: with `drop_oldest`, a frame reaching a node waits behind at most
/// `capacity` queued frames plus the one in service, so source-to-sink latency
/// is at most Σ over nodes of (capacity + 1) × that node's time per frame. The
/// test measures each node's p99 time in the same run and asserts the
/// end-to-end p99 (and the maximum) under that sum plus 150 ms of scheduling
/// slack. A growing backlog would instead add (30 − model fps) frames of delay
/// every second: seconds after the 8 s run.
#[test]
fn live_latency_stays_bounded_when_the_model_is_slower_than_the_camera() {
    require_assets();
    let dir = tempfile::tempdir().unwrap();
    let toml = dir.path().join("live.toml");
    let model = root().join("models/ppocr/ch_PP-OCRv4_det_infer.onnx");
    let q = "queue = { capacity = 2, when_full = \"drop_oldest\" }";
    std::fs::write(
        &toml,
        format!(
            "[sources.cam]\nkind = \"testsrc\"\nwidth = 1280\nheight = 720\nrate = 30\nduration = 8\nrealtime = true\n\n\
             [stages.pre]\nkind = \"preprocess\"\ninputs = [\"cam\"]\nwidth = 1280\nheight = 736\n{q}\n\n\
             [stages.det]\nkind = \"infer\"\ninputs = [\"pre\"]\nmodel = \"{}\"\n{q}\n\n\
             [stages.boxes]\nkind = \"text_detection\"\ninputs = [\"det\"]\n{q}\n\n\
             [sinks.out]\nkind = \"ndjson\"\ninputs = [\"boxes\"]\npath = \"out.ndjson\"\n{q}\n",
            model.display()
        ),
    )
    .unwrap();
    let report = dir.path().join("report.json");
    let o = bin().arg("run").arg(&toml).args(["--progress", "never", "--report"]).arg(&report).output().unwrap();
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(0), "{err}");
    let (decoded, processed, dropped, failed) = accounting(&err);
    let r: serde_json::Value = serde_json::from_slice(&std::fs::read(&report).unwrap()).unwrap();
    let nodes = r["nodes"].as_array().unwrap();
    let node = |name: &str| nodes.iter().find(|n| n["name"] == name).unwrap_or_else(|| panic!("no node {name}"));
    let p99 = |name: &str| node(name)["latency_ms"]["p99"].as_f64().unwrap();
    let bound: f64 = ["pre", "det", "boxes", "out"].iter().map(|n| 3.0 * p99(n)).sum::<f64>() + 150.0;
    let e2e = &node("out")["end_to_end_ms"];
    let (e2e_p99, e2e_max) = (e2e["p99"].as_f64().unwrap(), e2e["max"].as_f64().unwrap());
    let det_fps = 1000.0 / node("det")["latency_ms"]["p50"].as_f64().unwrap();
    println!(
        "decoded {decoded} = processed {processed} + dropped {dropped} + failed {failed}; det {:.1} ms/frame ({det_fps:.1} fps) p99 {:.1} ms; \
         end-to-end p99 {e2e_p99:.1} ms, max {e2e_max:.1} ms; bound {bound:.1} ms",
        node("det")["latency_ms"]["p50"].as_f64().unwrap(),
        p99("det")
    );
    // The camera was never slowed down by the model: all 240 frames came out at their pace.
    assert_eq!(decoded, 240, "{err}");
    assert!(det_fps < 25.0, "the model must be slower than the camera for this test to mean anything: {det_fps:.1} fps");
    assert!(dropped > 0 && processed > 0, "{err}");
    assert_eq!(read_ndjson(&dir.path().join("out.ndjson")).len() as u64, processed);
    assert!(e2e_p99 <= bound, "end-to-end p99 {e2e_p99:.1} ms over the queue bound {bound:.1} ms");
    assert!(e2e_max <= bound, "end-to-end max {e2e_max:.1} ms over the queue bound {bound:.1} ms");
}
