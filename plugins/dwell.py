"""A rule on the tracker's results: a `dwell` event when a tracked object has
stayed more than `seconds` inside a polygon (its box's bottom centre inside,
frame timestamps measuring the time). One event per track and stay; leaving
the polygon starts the count again. With a person detector, set
`classes = [0]` (COCO's person) in `args` to watch people only.
pipelines/python-dwell.toml runs it after a `track` stage."""

SECONDS = 2.0
POLYGON = []
CLASSES = None
TRACKS = "tracks"

# (stream, track id) -> pts it entered at, and whether its event was raised.
inside = {}


def setup(args):
    global SECONDS, POLYGON, CLASSES, TRACKS
    SECONDS = float(args["seconds"])
    POLYGON = [tuple(p) for p in args["polygon"]]
    if len(POLYGON) < 3:
        raise ValueError("`polygon` needs at least three corners")
    CLASSES = set(args["classes"]) if "classes" in args else None
    TRACKS = args.get("tracks", TRACKS)


def contains(x, y):
    """Even-odd rule: whether (x, y) is inside POLYGON."""
    hit = False
    n = len(POLYGON)
    for i in range(n):
        (x0, y0), (x1, y1) = POLYGON[i], POLYGON[(i + 1) % n]
        if (y0 > y) != (y1 > y) and x < x0 + (y - y0) * (x1 - x0) / (y1 - y0):
            hit = not hit
    return hit


def process(frame):
    if frame.pts is None:
        return None
    events = []
    seen = set()
    for t in frame.results.get(TRACKS, {}).get("tracks", []):
        tid = t.get("track_id")
        if tid is None or (CLASSES is not None and t["class"] not in CLASSES):
            continue
        x0, y0, x1, y1 = t.get("bbox") or t["smoothed"]
        key = (frame.stream, tid)
        if not contains((x0 + x1) / 2, y1):
            continue
        seen.add(key)
        since, told = inside.setdefault(key, (frame.pts, False))
        if not told and frame.pts - since > SECONDS:
            inside[key] = (since, True)
            events.append({"event": "dwell", "track_id": tid, "class": t["class"], "since_pts": round(since, 6), "seconds": round(frame.pts - since, 6)})
    for key in [k for k in inside if k[0] == frame.stream and k not in seen]:
        del inside[key]
    return {"events": events} if events else None
