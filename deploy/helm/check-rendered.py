#!/usr/bin/env python3
"""Validate every object `helm template` rendered, offline.

Usage: helm template ... | check-rendered.py KUBERNETES_VERSION [--json FILE]

Built-in kinds are checked against the Kubernetes API schema of that version
(kubernetes-validate, strict: unknown fields fail). The KEDA ScaledObject and
the prometheus-operator ServiceMonitor are checked against models generated
from their CRDs (cloudcoil-models-keda, cloudcoil-models-prometheus-operator):
each object must load, and dumping it again must give back exactly what was
rendered, so a misspelt or unknown field fails too. Prints one line per
object; exits 1 if any fails. `--json FILE` also writes the objects there as
one JSON array, for tests to look into.
"""
import json
import sys

import kubernetes_validate
import yaml


def crd_model(kind, api):
    if (kind, api) == ("ScaledObject", "keda.sh/v1alpha1"):
        from cloudcoil.models.keda.v1alpha1 import ScaledObject

        return ScaledObject
    if (kind, api) == ("ServiceMonitor", "monitoring.coreos.com/v1"):
        from cloudcoil.models.prometheus_operator.v1 import ServiceMonitor

        return ServiceMonitor
    return None


def normalise(v):
    """JSON round trip: the models dump numbers and strings as JSON does."""
    return json.loads(json.dumps(v))


def check(doc, version):
    kind, api = doc.get("kind"), doc.get("apiVersion")
    model = crd_model(kind, api)
    if model is not None:
        obj = model.model_validate(doc)
        back = obj.model_dump(by_alias=True, exclude_none=True, mode="json")
        if normalise(back) != normalise(doc):
            raise ValueError(f"fields the {kind} CRD does not know, or of the wrong type: rendered {json.dumps(doc, sort_keys=True)} but the CRD model keeps {json.dumps(back, sort_keys=True)}")
        return f"CRD schema ({model.__module__})"
    kubernetes_validate.validate(doc, version, strict=True)
    return f"Kubernetes {version} schema"


def main():
    version = sys.argv[1]
    docs = [d for d in yaml.safe_load_all(sys.stdin) if d]
    if len(sys.argv) > 3 and sys.argv[2] == "--json":
        with open(sys.argv[3], "w") as f:
            json.dump(docs, f)
    if not docs:
        print("error: nothing rendered", file=sys.stderr)
        return 1
    failed = 0
    for d in docs:
        name = f"{d.get('kind')}/{d.get('metadata', {}).get('name')}"
        try:
            how = check(d, version)
            print(f"ok {name} ({how})")
        except Exception as e:  # every failure is reported, then counted
            failed += 1
            print(f"FAIL {name}: {e}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
