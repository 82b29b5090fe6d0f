"""A YOLO (ultralytics v8/v11: output [1, 4 + classes, N]) decoder in numpy,
from the raw tensors of the infer stage before it: confidence filter,
class-aware NMS, boxes mapped back through the letterbox to source pixels.
pipelines/python-yolo.toml runs it beside the built-in `detection` stage on
the same infer stage; their boxes agree (tests/python.rs)."""

import numpy as np

CONFIDENCE = 0.25
IOU = 0.45
MAX_DETECTIONS = 300
OUTPUT = None


def setup(args):
    global CONFIDENCE, IOU, MAX_DETECTIONS, OUTPUT
    CONFIDENCE = float(args.get("confidence", CONFIDENCE))
    IOU = float(args.get("iou", IOU))
    MAX_DETECTIONS = int(args.get("max_detections", MAX_DETECTIONS))
    OUTPUT = args.get("output")


def iou(box, boxes):
    """IoU of one box [4] against boxes [n, 4] (x0, y0, x1, y1)."""
    iw = np.clip(np.minimum(box[2], boxes[:, 2]) - np.maximum(box[0], boxes[:, 0]), 0, None)
    ih = np.clip(np.minimum(box[3], boxes[:, 3]) - np.maximum(box[1], boxes[:, 1]), 0, None)
    inter = iw * ih
    area = lambda b: np.clip(b[..., 2] - b[..., 0], 0, None) * np.clip(b[..., 3] - b[..., 1], 0, None)
    union = area(box) + area(boxes) - inter
    return np.where(union > 0, inter / np.where(union > 0, union, 1), 0)


def process(frame):
    if not frame.tensors:
        return None
    out = frame.tensors[OUTPUT] if OUTPUT else next(iter(frame.tensors.values()))
    rows = out[0]  # [4 + classes, N]
    scores = rows[4:]
    cls = scores.argmax(axis=0)
    best = scores.max(axis=0)
    keep = best >= CONFIDENCE
    cx, cy, w, h = rows[0][keep], rows[1][keep], rows[2][keep], rows[3][keep]
    boxes = np.stack([cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2], axis=1).astype(np.float32)
    best, cls = best[keep], cls[keep]
    order = np.argsort(-best, kind="stable")
    kept = []
    for i in order:
        if len(kept) >= MAX_DETECTIONS:
            break
        same = [k for k in kept if cls[k] == cls[i]]
        if not same or (iou(boxes[i], boxes[same]) <= IOU).all():
            kept.append(i)
    lb = frame.letterbox
    found = []
    for i in kept:
        x0, y0, x1, y1 = boxes[i]
        sx = lambda x: float(np.clip((x - lb["pad_x"]) * lb["inv_scale_x"], 0, lb["src_w"]))
        sy = lambda y: float(np.clip((y - lb["pad_y"]) * lb["inv_scale_y"], 0, lb["src_h"]))
        box = [sx(x0), sy(y0), sx(x1), sy(y1)]
        if box[2] > box[0] and box[3] > box[1]:
            found.append({"bbox": box, "score": float(best[i]), "class": int(cls[i])})
    return {"detections": found}
