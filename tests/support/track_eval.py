#!/usr/bin/env python3
"""Tracker evaluation on real pedestrian trajectories (the MOT ground truth
that ships in the motmetrics wheel: TUD-Campus, TUD-Stadtmitte).

  track_eval.py noisy SEQ OUT.txt SEED
      Write detections made from SEQ's ground truth with seeded noise: box
      jitter, misses, weak scores, false positives (MOT text, frames from 1).
  track_eval.py score SEQ DETS.txt OURS.ndjson NODE FRAME_RATE
      Run supervision's ByteTrack on the same detections, score it and the
      tracks in OURS.ndjson (the `track` stage NODE's confirmed tracks) with
      motmetrics against the ground truth, and print one JSON object.

Runs in the evaluation venv made by scripts/fetch-eval-deps.sh.
"""
import json
import os
import sys
import tempfile
import time

import numpy as np

# Noise: a detector that misses 15% of people, jitters boxes by ~4%, is unsure
# of a fifth of its true boxes, and sees ~0.4 false people a frame.
MISS = 0.15
JITTER = 0.04
WEAK = 0.2
FALSE_PER_FRAME = 0.4
WIDTH, HEIGHT = 640, 480


def gt_path(seq):
    import motmetrics

    return os.path.join(os.path.dirname(motmetrics.__file__), "data", seq, "gt.txt")


def read_gt(seq):
    rows = []
    with open(gt_path(seq)) as f:
        for line in f:
            p = line.strip().split(",")
            if len(p) >= 6:
                rows.append((int(float(p[0])), int(float(p[1])), *map(float, p[2:6])))
    return rows


def noisy(seq, out, seed):
    rng = np.random.RandomState(seed)
    rows = read_gt(seq)
    last = max(r[0] for r in rows)
    dets = []
    for frame, _id, x, y, w, h in rows:
        if rng.rand() < MISS:
            continue
        cx = x + w / 2 + rng.randn() * JITTER * w
        cy = y + h / 2 + rng.randn() * JITTER * h
        w2, h2 = w * np.exp(rng.randn() * JITTER), h * np.exp(rng.randn() * JITTER)
        score = rng.uniform(0.12, 0.45) if rng.rand() < WEAK else rng.uniform(0.5, 0.95)
        dets.append((frame, cx - w2 / 2, cy - h2 / 2, w2, h2, score))
    for frame in range(1, last + 1):
        for _ in range(rng.poisson(FALSE_PER_FRAME)):
            w = rng.uniform(30, 80)
            h = w * rng.uniform(2.0, 3.0)
            dets.append((frame, rng.uniform(0, WIDTH - w), rng.uniform(0, HEIGHT - h), w, h, rng.uniform(0.1, 0.55)))
    dets.sort(key=lambda d: d[0])
    with open(out, "w") as f:
        for frame, x, y, w, h, s in dets:
            f.write(f"{frame},-1,{x:.2f},{y:.2f},{w:.2f},{h:.2f},{s:.4f},-1,-1,-1\n")
    print(json.dumps({"frames": last, "gt_boxes": len(rows), "detections": len(dets)}))


def read_dets(path):
    by_frame = {}
    with open(path) as f:
        for line in f:
            p = line.strip().split(",")
            fr = int(p[0])
            x, y, w, h, s = map(float, p[2:7])
            by_frame.setdefault(fr, []).append((x, y, x + w, y + h, s))
    return by_frame


def write_mot(rows, path):
    with open(path, "w") as f:
        for frame, tid, x0, y0, x1, y1 in rows:
            f.write(f"{frame},{tid},{x0:.2f},{y0:.2f},{x1 - x0:.2f},{y1 - y0:.2f},1,-1,-1,-1\n")


def reference(dets, frames, frame_rate):
    import supervision as sv

    tracker = sv.ByteTrack(frame_rate=frame_rate)
    rows, times = [], []
    for fr in range(1, frames + 1):
        d = np.array(dets.get(fr, []), dtype=np.float32).reshape(-1, 5)
        det = sv.Detections(xyxy=d[:, :4], confidence=d[:, 4], class_id=np.zeros(len(d), dtype=int))
        t0 = time.perf_counter()
        out = tracker.update_with_detections(det)
        times.append(time.perf_counter() - t0)
        for box, tid in zip(out.xyxy, out.tracker_id):
            rows.append((fr, int(tid), *map(float, box)))
    return rows, times


def ours(path, node):
    rows, smoothed = [], []
    with open(path) as f:
        for line in f:
            v = json.loads(line)
            if "seq" not in v:
                continue  # a stream event
            fr = v["seq"] + 1
            for t in v["results"].get(node, {}).get("tracks", []):
                if t["state"] == "confirmed":
                    rows.append((fr, t["track_id"], *t["bbox"]))
                    smoothed.append((fr, t["track_id"], *t["smoothed"]))
    return rows, smoothed


def metrics(seq, rows, tmp, name):
    import motmetrics as mm

    gt = mm.io.loadtxt(gt_path(seq), fmt="mot15-2D")
    p = os.path.join(tmp, name + ".txt")
    write_mot(rows, p)
    hyp = mm.io.loadtxt(p, fmt="mot15-2D")
    acc = mm.utils.compare_to_groundtruth(gt, hyp, "iou", distth=0.5)
    m = mm.metrics.create().compute(acc, metrics=["mota", "idf1", "num_switches", "num_false_positives", "num_misses"], name=name)
    r = m.iloc[0]
    return {
        "mota": float(r["mota"]),
        "idf1": float(r["idf1"]),
        "id_switches": int(r["num_switches"]),
        "false_positives": int(r["num_false_positives"]),
        "misses": int(r["num_misses"]),
        "tracks": len({t[1] for t in rows}),
    }


def score(seq, dets_path, ours_path, node, frame_rate):
    dets = read_dets(dets_path)
    frames = max(r[0] for r in read_gt(seq))
    ref_rows, ref_times = reference(dets, frames, frame_rate)
    our_rows, our_smoothed = ours(ours_path, node)
    with tempfile.TemporaryDirectory() as tmp:
        out = {
            "sequence": seq,
            "frames": frames,
            "ours": metrics(seq, our_rows, tmp, "ours"),
            "ours_smoothed": metrics(seq, our_smoothed, tmp, "ours_smoothed"),
            "reference": metrics(seq, ref_rows, tmp, "reference"),
            "reference_ms_per_frame": {
                "p50": float(np.median(ref_times) * 1000),
                "mean": float(np.mean(ref_times) * 1000),
            },
        }
    print(json.dumps(out))


if __name__ == "__main__":
    cmd = sys.argv[1]
    if cmd == "noisy":
        noisy(sys.argv[2], sys.argv[3], int(sys.argv[4]))
    elif cmd == "score":
        score(sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5], int(sys.argv[6]))
    else:
        sys.exit(f"unknown command {cmd}")
