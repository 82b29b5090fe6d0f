"""A gRPC client of `infer-stream serve` for the tests, from proto/ itself.

The Python stubs are generated from proto/infer_stream.proto when this runs
(grpc_tools.protoc, into a temporary folder), so the client always speaks
the proto the server was built from.

  grpc_client.py ADDR infer PICTURE [--token T] [--timeout-ms N] [--source S]
      one Infer call; prints {"ok": reply} or {"error": code, "details": ...}
  grpc_client.py ADDR results [--stream S] [--count N] [--token T] [--slow-ms N]
                               [--silent-until PATH --then-ms N]
      reads N messages of Results; prints one JSON line per message. With
      --silent-until, opens the call and reads nothing until PATH exists, then
      reads for N ms more and cancels the call (printing {"error": "CANCELLED"})
"""

import argparse
import importlib
import json
import os
import sys
import tempfile
import threading
import time

import grpc
from grpc_tools import protoc

PROTO_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "proto")


def stubs():
    out = tempfile.mkdtemp(prefix="grpc-stubs-")
    rc = protoc.main(["protoc", f"-I{PROTO_DIR}", f"--python_out={out}", f"--grpc_python_out={out}", "infer_stream.proto"])
    if rc != 0:
        sys.exit(f"protoc failed ({rc})")
    sys.path.insert(0, out)
    return importlib.import_module("infer_stream_pb2"), importlib.import_module("infer_stream_pb2_grpc")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("addr")
    ap.add_argument("call", choices=["infer", "results"])
    ap.add_argument("picture", nargs="?")
    ap.add_argument("--token")
    ap.add_argument("--timeout-ms", type=int, default=0)
    ap.add_argument("--source", default="")
    ap.add_argument("--stream", default="")
    ap.add_argument("--count", type=int, default=1)
    ap.add_argument("--slow-ms", type=int, default=0)
    ap.add_argument("--silent-until")
    ap.add_argument("--then-ms", type=int, default=3000)
    a = ap.parse_args()
    pb, rpc = stubs()
    # No window tuning: a slow reader soon leaves messages on the server.
    channel = grpc.insecure_channel(a.addr, options=[("grpc.http2.bdp_probe", 0)])
    stub = rpc.InferStreamStub(channel)
    metadata = [("authorization", f"Bearer {a.token}")] if a.token else None
    try:
        if a.call == "infer":
            with open(a.picture, "rb") as f:
                image = f.read()
            r = stub.Infer(pb.InferRequest(image=image, timeout_ms=a.timeout_ms, source=a.source), metadata=metadata, timeout=60)
            boxes = [
                {
                    "node": b.node,
                    "bbox": [b.x0, b.y0, b.x1, b.y1],
                    "score": b.score,
                    **({"class": b.class_id} if b.HasField("class_id") else {}),
                    **({"label": b.label} if b.label else {}),
                    **({"text": b.text} if b.text else {}),
                }
                for b in r.boxes
            ]
            reply = {"request_id": r.request_id, "frame": json.loads(r.results_json), "boxes": boxes, "width": r.width, "height": r.height}
            print(json.dumps({"ok": reply}))
        else:
            got = 0
            call = stub.Results(pb.ResultsRequest(stream=a.stream), metadata=metadata, timeout=120)
            if a.silent_until:
                # The call is open (the server has subscribed it); nothing is read meanwhile.
                give_up = time.time() + 120  # the call's deadline
                while not os.path.exists(a.silent_until) and time.time() < give_up:
                    time.sleep(0.05)
                threading.Timer(a.then_ms / 1000, call.cancel).start()
            for m in call:
                print(json.dumps({"kind": m.kind, "stream": m.stream, "json": json.loads(m.json), "dropped": m.dropped}), flush=True)
                got += 1
                if got >= a.count:
                    break
                if a.slow_ms:
                    time.sleep(a.slow_ms / 1000)
    except grpc.RpcError as e:
        print(json.dumps({"error": e.code().name, "details": e.details()}))


if __name__ == "__main__":
    main()
