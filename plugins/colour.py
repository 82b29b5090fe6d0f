"""Enrichment: each box of the detection stage before it gets the dominant
colour of the picture inside it (`colour`: the mean RGB of the box's pixels,
rounded, and `colour_name`: the nearest of a few named colours), from
`frame.image()`. A box's pixels: rows round(y0) to round(y1) - 1, columns
round(x0) to round(x1) - 1, clipped to the picture. Needs `image = true`.
pipelines/python-colour.toml runs it."""

import numpy as np

BOXES = "boxes"
NAMES = {
    "black": (0, 0, 0), "white": (255, 255, 255), "grey": (128, 128, 128), "red": (200, 30, 30),
    "green": (30, 160, 60), "blue": (30, 60, 200), "yellow": (230, 210, 40), "orange": (240, 140, 30),
}


def setup(args):
    global BOXES
    BOXES = args.get("boxes", BOXES)


def nearest(rgb):
    return min(NAMES, key=lambda n: sum((a - b) ** 2 for a, b in zip(rgb, NAMES[n])))


def process(frame):
    result = frame.results.get(BOXES, {})
    key = "detections" if "detections" in result else "text_boxes"
    boxes = result.get(key, [])
    picture = frame.image()
    h, w, _ = picture.shape
    out = []
    for b in boxes:
        x0, y0, x1, y1 = (int(round(v)) for v in b["bbox"])
        x0, x1 = max(0, min(x0, w - 1)), max(1, min(x1, w))
        y0, y1 = max(0, min(y0, h - 1)), max(1, min(y1, h))
        patch = picture[y0:y1, x0:x1].reshape(-1, 3)
        mean = [int(v) for v in patch.mean(axis=0).round()] if len(patch) else [0, 0, 0]
        out.append(dict(b, colour=mean, colour_name=nearest(mean)))
    return {key: out}
