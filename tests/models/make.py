"""Tiny ONNX models whose outputs are known constants, one per YOLO output
layout, for testing the detection postprocess end to end (ONNX Runtime loads
and runs them; the tests know exactly which boxes must come out).

Run with a Python that has `onnx` (e.g. `.deps/venv/bin/pip install onnx`):
    python tests/models/make.py
The .onnx files are committed; this script documents and regenerates them.
"""
import os

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

HERE = os.path.dirname(os.path.abspath(__file__))
NAMES = "{0: 'cat', 1: 'dog', 2: 'bird'}"

# Candidates in model-input pixels (64x64 input): cx, cy, w, h, class, score.
CANDIDATES = [
    (20.0, 20.0, 10.0, 10.0, 0, 0.90),  # kept
    (21.0, 21.0, 10.0, 10.0, 0, 0.80),  # same class, IoU 0.68 with the first: suppressed
    (21.0, 21.0, 10.0, 10.0, 1, 0.70),  # same place, other class: kept
    (50.0, 40.0, 8.0, 6.0, 2, 0.30),    # kept (above 0.25)
    (10.0, 50.0, 6.0, 6.0, 2, 0.20),    # below the confidence threshold
]
ANCHORS = 8
CLASSES = 3


def model(name, out):
    """images [1,3,64,64] -> out (a constant that still depends on the input)."""
    x = helper.make_tensor_value_info("images", TensorProto.FLOAT, [1, 3, 64, 64])
    y = helper.make_tensor_value_info("output0", TensorProto.FLOAT, list(out.shape))
    nodes = [
        helper.make_node("Constant", [], ["c"], value=numpy_helper.from_array(out.astype(np.float32), "c")),
        helper.make_node("ReduceMax", ["images"], ["m"], keepdims=0),
        helper.make_node("Constant", [], ["zero"], value=numpy_helper.from_array(np.array(0.0, np.float32), "zero")),
        helper.make_node("Mul", ["m", "zero"], ["z"]),
        helper.make_node("Add", ["c", "z"], ["output0"]),
    ]
    g = helper.make_graph(nodes, name, [x], [y])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], producer_name="infer-stream tests")
    m.ir_version = 8
    helper.set_model_props(m, {"names": NAMES})
    onnx.checker.check_model(m)
    onnx.save(m, os.path.join(HERE, name + ".onnx"))


# ultralytics v8/v11: [1, 4 + classes, anchors], boxes as cx, cy, w, h.
v8 = np.zeros((1, 4 + CLASSES, ANCHORS))
for j, (cx, cy, w, h, c, s) in enumerate(CANDIDATES):
    v8[0, 0:4, j] = (cx, cy, w, h)
    v8[0, 4 + c, j] = s
model("yolov8", v8)

# v5: [1, anchors, 5 + classes]: cx, cy, w, h, objectness, class scores (score = obj * class).
v5 = np.zeros((1, ANCHORS, 5 + CLASSES))
for j, (cx, cy, w, h, c, s) in enumerate(CANDIDATES):
    v5[0, j, 0:5] = (cx, cy, w, h, 1.0)
    v5[0, j, 5 + c] = s
v5[0, 3, 4], v5[0, 3, 5 + 2] = 0.5, 0.6  # 0.5 * 0.6 = the same 0.3
model("yolov5", v5)

# NMS-free end to end (v10, YOLO26): [1, N, 6] = x0, y0, x1, y1, score, class; no NMS afterwards.
e2e = np.zeros((1, 6, 6))
for j, (cx, cy, w, h, c, s) in enumerate(CANDIDATES):
    e2e[0, j] = (cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2, s, c)
model("end2end", e2e)

# An output whose shape depends on the data, not only on the input shape (as
# in models with NMS inside): positives [1, n] = the input's values above 0,
# in order. For IoBinding, whose outputs must be bound anew when their shape
# changes from run to run.
x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, "k"])
y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, "n"])
nodes = [
    helper.make_node("Squeeze", ["x", "axis0"], ["row"]),
    helper.make_node("Greater", ["row", "zero"], ["positive"]),
    helper.make_node("Compress", ["x", "positive"], ["y"], axis=1),
]
init = [numpy_helper.from_array(np.array([0], np.int64), "axis0"), numpy_helper.from_array(np.array(0.0, np.float32), "zero")]
g = helper.make_graph(nodes, "positives", [x], [y], initializer=init)
m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], producer_name="infer-stream tests")
m.ir_version = 8
onnx.checker.check_model(m)
onnx.save(m, os.path.join(HERE, "positives.onnx"))
print("wrote", ", ".join(n + ".onnx" for n in ("yolov8", "yolov5", "end2end", "positives")))
