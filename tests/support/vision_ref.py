"""Reference decodes for tests/vision.rs, independent of infer-stream.

It reads the frames with OpenCV, runs the same ONNX model with ONNX Runtime's
Python API and decodes its output the way ultralytics does, with numpy and
OpenCV only: no code shared with infer-stream.

  yolo MODEL MEDIA FRAMES [--line X0,Y0,X1,Y1 --margin PX]

The decode is ultralytics' (LetterBox, then ops.non_max_suppression and
scale_boxes): the frame letterboxed into the model's input (resized with
OpenCV's bilinear INTER_LINEAR, centred, padded with grey 114), RGB / 255,
each anchor's best class kept when its score is above 0.25, class-wise NMS
at IoU 0.45 (a box goes when it overlaps a better one of its class by more
than 0.45), at most 300 boxes, mapped back to source pixels and clipped.

With --line it also follows the people (class 0, score >= 0.35) from frame to
frame by a rule of its own, unlike infer-stream's tracker: each box joins the
chain whose last box (seen within the last 10 frames) it overlaps most, IoU
>= 0.3, greedily, best overlap first; a box left over starts a chain. A chain
crosses the line when its boxes' bottom centre goes from one side to the other
(farther than --margin pixels from the line on both sides, and not past the
segment's ends; the line drawn top to bottom counts left -> right
as `in`, as docs/analytics.md says of the `analytics` stage).

Prints one JSON line first, {"names": [...]} (the model's `names` metadata),
then one per frame, {"seq": n, "boxes": [[x0, y0, x1, y1, score, class], ...],
"chains": [chain id of each box, or -1]} in source pixels, best score first;
with --line, last {"chains": n, "crossed": {"in": a, "out": b}, "crossings":
[[chain, seq, "in" | "out"], ...]}.
Run with .deps/vision-venv/bin/python (scripts/fetch-vision.sh).
"""

import argparse
import ast
import json

import cv2
import numpy as np
import onnxruntime as ort

CONFIDENCE, IOU, MAX_DET = 0.25, 0.45, 300
PERSON, PERSON_SCORE, LINK_IOU, LINK_GAP = 0, 0.35, 0.3, 10


def frames(media, count):
    """RGB frames of a video or a still, as OpenCV (its own FFmpeg) decodes them."""
    cap = cv2.VideoCapture(media)
    n = 0
    while n < count:
        ok, bgr = cap.read()
        if not ok:
            break
        if bgr.ndim == 2:
            bgr = cv2.cvtColor(bgr, cv2.COLOR_GRAY2BGR)
        yield n, cv2.cvtColor(bgr, cv2.COLOR_BGR2RGB)
        n += 1


def iou_matrix(a, b):
    """IoU of every box of a against every box of b, [len(a), len(b)]."""
    a, b = np.asarray(a, dtype=np.float64).reshape(-1, 4), np.asarray(b, dtype=np.float64).reshape(-1, 4)
    x0 = np.maximum(a[:, None, 0], b[None, :, 0])
    y0 = np.maximum(a[:, None, 1], b[None, :, 1])
    x1 = np.minimum(a[:, None, 2], b[None, :, 2])
    y1 = np.minimum(a[:, None, 3], b[None, :, 3])
    inter = np.clip(x1 - x0, 0, None) * np.clip(y1 - y0, 0, None)
    area = lambda m: (m[:, 2] - m[:, 0]) * (m[:, 3] - m[:, 1])  # noqa: E731
    return inter / (area(a)[:, None] + area(b)[None, :] - inter + 1e-12)


def nms(boxes, scores, iou):
    """Greedy NMS, best first: a box goes when it overlaps a kept one by more than `iou`."""
    order = np.argsort(-scores, kind="stable")
    keep = []
    while order.size:
        i = order[0]
        keep.append(i)
        rest = order[1:]
        order = rest[iou_matrix(boxes[i], boxes[rest])[0] <= iou]
    return np.array(keep, dtype=int)


def letterbox(rgb, th, tw):
    """ultralytics.data.augment.LetterBox (auto=False, center=True, scaleup=True)."""
    h, w = rgb.shape[:2]
    r = min(th / h, tw / w)
    nw, nh = int(round(w * r)), int(round(h * r))
    dw, dh = (tw - nw) / 2, (th - nh) / 2
    img = cv2.resize(rgb, (nw, nh), interpolation=cv2.INTER_LINEAR) if (nw, nh) != (w, h) else rgb
    top, bottom = int(round(dh - 0.1)), int(round(dh + 0.1))
    left, right = int(round(dw - 0.1)), int(round(dw + 0.1))
    img = cv2.copyMakeBorder(img, top, bottom, left, right, cv2.BORDER_CONSTANT, value=(114, 114, 114))
    return img, r, left, top


def decode(out, r, left, top, w, h):
    """One image's [4 + classes, N] output -> [[x0, y0, x1, y1, score, class], ...] in source pixels."""
    out = out.T  # [N, 4 + classes]
    cls = out[:, 4:].argmax(1)
    score = out[np.arange(len(out)), 4 + cls]
    m = score > CONFIDENCE
    out, cls, score = out[m], cls[m], score[m]
    xyxy = np.stack([out[:, 0] - out[:, 2] / 2, out[:, 1] - out[:, 3] / 2, out[:, 0] + out[:, 2] / 2, out[:, 1] + out[:, 3] / 2], 1)
    keep = []
    for c in np.unique(cls):  # class-wise
        idx = np.nonzero(cls == c)[0]
        keep.extend(idx[nms(xyxy[idx], score[idx], IOU)])
    keep = sorted(keep, key=lambda i: -score[i])[:MAX_DET]
    boxes = []
    for i in keep:
        b = xyxy[i].astype(np.float64)
        b[[0, 2]] = ((b[[0, 2]] - left) / r).clip(0, w)
        b[[1, 3]] = ((b[[1, 3]] - top) / r).clip(0, h)
        boxes.append([float(v) for v in b] + [float(score[i]), int(cls[i])])
    return boxes


class Chains:
    """People followed by overlap alone (greedy, best IoU first), and their line crossings."""

    def __init__(self, line, margin):
        self.line, self.margin = line, margin
        self.last = {}  # chain id -> (box, seq seen)
        self.side = {}  # chain id -> -1 / +1: the last side it was clearly on
        self.next_id = 0
        self.crossings = []

    def signed(self, box):
        """Signed distance of the box's bottom centre from the line, + on the
        `in` side, or None when it is past the segment's ends."""
        (x0, y0, x1, y1), (ax, ay, bx, by) = box[:4], self.line
        px, py = (x0 + x1) / 2, y1
        dx, dy = bx - ax, by - ay
        t = ((px - ax) * dx + (py - ay) * dy) / (dx * dx + dy * dy)
        if not 0 <= t <= 1:
            return None
        # `in` is a quarter turn counter-clockwise on screen (y down) from from -> to.
        return ((px - ax) * dy - (py - ay) * dx) / np.hypot(dx, dy)

    def step(self, seq, boxes):
        ids = [-1] * len(boxes)
        people = [i for i, b in enumerate(boxes) if b[5] == PERSON and b[4] >= PERSON_SCORE]
        alive = [c for c, (_, s) in self.last.items() if seq - s <= LINK_GAP]
        pairs = []
        if people and alive:
            m = iou_matrix([boxes[i][:4] for i in people], [self.last[c][0] for c in alive])
            pairs = sorted(((m[p, c], p, c) for p in range(len(people)) for c in range(len(alive)) if m[p, c] >= LINK_IOU), reverse=True)
        used_p, used_c = set(), set()
        for _, p, c in pairs:
            if p in used_p or c in used_c:
                continue
            used_p.add(p)
            used_c.add(c)
            ids[people[p]] = alive[c]
        for p, i in enumerate(people):
            if p not in used_p:
                ids[i] = self.next_id
                self.next_id += 1
        for i in people:
            c = ids[i]
            self.last[c] = (boxes[i][:4], seq)
            if self.line is None:
                continue
            d = self.signed(boxes[i])
            if d is None or abs(d) <= self.margin:
                continue
            side = 1 if d > 0 else -1
            if self.side.get(c, side) != side:
                self.crossings.append([c, seq, "in" if side > 0 else "out"])
            self.side[c] = side
        return ids


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("what", choices=["yolo"])
    ap.add_argument("model")
    ap.add_argument("media")
    ap.add_argument("frames", type=int)
    ap.add_argument("--line", type=lambda s: [float(v) for v in s.split(",")])
    ap.add_argument("--margin", type=float, default=4.0)
    a = ap.parse_args()
    ort.set_default_logger_severity(3)
    sess = ort.InferenceSession(a.model, providers=["CPUExecutionProvider"])
    names = ast.literal_eval(sess.get_modelmeta().custom_metadata_map["names"])
    print(json.dumps({"names": [names[i] for i in sorted(names)]}))
    inp = sess.get_inputs()[0]
    th, tw = inp.shape[2], inp.shape[3]
    chains = Chains(a.line, a.margin)
    for seq, rgb in frames(a.media, a.frames):
        img, r, left, top = letterbox(rgb, th, tw)
        x = (img.astype(np.float32) / 255.0).transpose(2, 0, 1)[None]
        boxes = decode(sess.run(None, {inp.name: x})[0][0], r, left, top, rgb.shape[1], rgb.shape[0])
        print(json.dumps({"seq": seq, "boxes": boxes, "chains": chains.step(seq, boxes)}))
    if a.line is not None:
        crossed = {d: sum(1 for c in chains.crossings if c[2] == d) for d in ("in", "out")}
        print(json.dumps({"chains": chains.next_id, "crossed": crossed, "crossings": chains.crossings}))


if __name__ == "__main__":
    main()
