"""Boxes in NDJSON results, for scripts/gpu-check.sh's comparisons.

    from boxes import frames, match
"""
import json


def boxes(rec):
    """Every `bbox` anywhere in one result record."""
    found = []

    def walk(x):
        if isinstance(x, dict):
            if "bbox" in x:
                found.append(x["bbox"])
            for v in x.values():
                walk(v)
        elif isinstance(x, list):
            for v in x:
                walk(v)

    walk(rec)
    return found


def frames(path):
    """{frame seq: [bbox, ...]} of an NDJSON file."""
    res = {}
    with open(path) as f:
        for i, line in enumerate(f):
            r = json.loads(line)
            res[r.get("seq", i)] = boxes(r)
    return res


def iou(a, b):
    ix = max(0, min(a[2], b[2]) - max(a[0], b[0]))
    iy = max(0, min(a[3], b[3]) - max(a[1], b[1]))
    u = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - ix * iy
    return ix * iy / u if u > 0 else 0


def match(ref, got):
    """How `ref`'s boxes are found in `got`, frame by frame: (boxes, found at
    IoU >= 0.9, worst best IoU, boxes in `got` beyond `ref`'s count)."""
    total = close = extra = 0
    worst = 1.0
    for k, bs in ref.items():
        for b in bs:
            total += 1
            best = max((iou(b, c) for c in got.get(k, [])), default=0)
            worst = min(worst, best)
            close += best >= 0.9
        extra += max(0, len(got.get(k, [])) - len(bs))
    return total, close, worst, extra
