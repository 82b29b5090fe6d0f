#!/usr/bin/env bash
# Generate deterministic sample media + ground truth under samples/ with the
# system ffmpeg, espeak-ng and sox (see samples/README.md). Skips when every
# output exists and is newer than this script; `--force` regenerates;
# `--demo` makes only the demo's clip (text-720p.mp4 and its truth, the same
# bytes as in a full run: scripts/setup-run.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib.sh

OUTS=()
for clip in text-720p.mp4 eval-720p.mp4 clip-1080p.mkv clip.webm; do
  OUTS+=("samples/$clip" "samples/${clip%.*}.truth.json")
done
OUTS+=(samples/not-media.mp4 samples/truncated.mp4 samples/frames/img00030.jpg)
for clip in speech-eval.wav speech-short.wav; do
  OUTS+=("samples/$clip" "samples/${clip%.*}.truth.json")
done
OUTS+=(samples/speech-short.m4a samples/plates.mp4 samples/plates.truth.json samples/still-plates.mp4)
OUTS+=(samples/entering-plates.mp4 samples/entering-plates.truth.json)

ONLY=""
if [[ ${1:-} == --demo ]]; then
  ONLY=text-720p.mp4
  OUTS=(samples/text-720p.mp4 samples/text-720p.truth.json)
fi

if [[ ${1:-} != --force ]]; then
  fresh=1
  for f in "${OUTS[@]}"; do [[ $f -nt scripts/make-samples.sh ]] || fresh=0; done
  if ((fresh)); then log "samples: up to date"; exit 0; fi
fi

tools=(ffmpeg espeak-ng sox)
[[ -n $ONLY ]] && tools=(ffmpeg)
for tool in "${tools[@]}"; do
  command -v $tool >/dev/null || die "$tool not found (run scripts/install-deps.sh)"
done
[[ -f /usr/share/fonts/truetype/dejavu/DejaVuSans-Bold.ttf ]] \
  || die "DejaVu fonts not found (run scripts/install-deps.sh)"
mkdir -p samples

SAMPLES_ONLY=$ONLY python3 - <<'PY'
import json, os, re, subprocess

FONTS = "/usr/share/fonts/truetype/dejavu/"
BOLD, SANS, SERIF, MONO = "DejaVuSans-Bold", "DejaVuSans", "DejaVuSerif-Bold", "DejaVuSansMono-Bold"
# text/box styles: (fontcolor, box colour or None, border colour or None)
WB, BW = ("white", "black", None), ("black", "white", None)          # boxes
YB, CK = ("yellow", "0x1A2A6C", None), ("cyan", "0x202020", None)
KO, GW = ("black", "0xFFA500", None), ("white", "0x1B7F3A", None)
RW, WK = ("red", None, "white"), ("white", None, "black")            # outlined

def T(text, size, x, y, style, font=BOLD):
    return dict(text=text, size=size, x=x, y=y, style=style, font=font)

# Each clip: size, fps, frames, segment length in frames, background and,
# per segment, the strings drawn: T(text, font px, x, y, style[, font]).
CLIPS = {
  "text-720p.mp4": dict(w=1280, h=720, fps=10, frames=100, seg=25,
    bg=("0x203A5C", "0x5C8FB0", "0xE0C080", 1), segments=[
      [T("HELLO WORLD", 72, 80, 80, WB), T("Stream", 48, 900, 230, BW),
       T("OPEN 24 HOURS", 56, 300, 560, WB)],
      [T("Video Inference", 60, 120, 300, BW), T("EXIT", 72, 1000, 80, WB),
       T("Platform 9", 48, 700, 600, BW), T("rust", 40, 60, 620, WB)],
      [T("ONNX RUNTIME", 64, 400, 120, WB), T("Text Detection", 52, 100, 450, BW),
       T("SALE", 72, 950, 500, WB)],
      [T("NO PARKING", 64, 80, 100, WB), T("Frame by frame", 56, 500, 300, BW),
       T("42", 72, 1100, 140, BW), T("Welcome", 48, 150, 600, BW),
       T("Quick Brown Fox", 44, 760, 620, WB)],
    ]),
  "eval-720p.mp4": dict(w=1280, h=720, fps=10, frames=300, seg=50,
    bg=("0x3C1F4A", "0x9A5B6E", "0x406E3C", 7), segments=[
      [T("Morning News", 66, 560, 60, YB, SERIF), T("GATE B12", 50, 90, 330, CK, MONO),
       T("Fresh Coffee", 42, 820, 590, RW, SANS)],
      [T("LIMITED EDITION", 58, 240, 200, KO), T("Main Street", 46, 40, 40, WK, SANS),
       T("Departures", 70, 700, 470, GW, SERIF), T("Library", 42, 150, 620, CK)],
      [T("CLOSED", 70, 920, 40, RW), T("Pizza Slice", 50, 420, 380, YB, SANS),
       T("Track 7", 58, 60, 560, KO, MONO)],
      [T("Summer Festival", 62, 330, 110, GW, SERIF), T("PUSH", 46, 1120, 610, WK),
       T("North Entrance", 42, 70, 470, YB, SANS), T("Chapter Three", 50, 720, 330, CK, SERIF),
       T("Tickets", 66, 90, 240, KO)],
      [T("Speed Limit 50", 54, 600, 600, RW, MONO), T("Museum", 70, 140, 130, WK, SERIF),
       T("Harbor View", 46, 800, 90, GW, SANS)],
      [T("WiFi Zone", 62, 380, 290, YB), T("Bakery", 42, 1060, 380, CK, SANS),
       T("Level 3", 50, 60, 600, GW, MONO), T("Good Night", 58, 690, 560, WK, SERIF)],
    ]),
  "clip-1080p.mkv": dict(w=1920, h=1080, fps=10, frames=30, seg=30,
    bg=("0x10403A", "0x7AA0C8", "0x303030", 3), segments=[
      [T("FULL HD", 72, 200, 150, WB), T("Matroska Container", 64, 700, 520, BW),
       T("Sample Clip", 48, 1300, 900, WB)],
    ]),
  "clip.webm": dict(w=640, h=360, fps=10, frames=20, seg=20,
    bg=("0x502020", "0xC09060", "0x204060", 5), segments=[
      [T("WebM", 48, 60, 50, WB), T("Small Video", 40, 260, 250, BW)],
    ]),
}
ENCODE = {  # container -> encoder options (single-threaded for bit-exact output)
  "mp4": ["-c:v", "libx264", "-threads", "1", "-preset", "veryfast", "-crf", "20", "-g", "20",
          "-movflags", "+faststart", "-f", "mp4"],
  "mkv": ["-c:v", "libx264", "-threads", "1", "-preset", "veryfast", "-crf", "20", "-g", "20",
          "-f", "matroska"],
  "webm": ["-c:v", "libvpx-vp9", "-threads", "1", "-row-mt", "0", "-deadline", "good",
           "-cpu-used", "5", "-crf", "32", "-b:v", "0", "-g", "20", "-f", "webm"],
}

def drawtext(t, measure=False):
    assert re.fullmatch(r"[A-Za-z0-9 ]+", t["text"]), t["text"]
    fg, box, border = t["style"]
    opts = [f"fontfile={FONTS}{t['font']}.ttf", f"text='{t['text']}'",
            f"fontsize={t['size']}", f"x={t['x']}", f"y={t['y']}"]
    if border:
        opts += ["borderw=3", f"bordercolor={'white' if measure else border}"]
    opts.append(f"fontcolor={'white' if measure else fg}")
    if box and not measure:
        opts += ["box=1", f"boxcolor={box}", "boxborderw=12"]
    return "drawtext=" + ":".join(opts)

def measure(c, texts):
    """Exact glyph bounds: draw each string alone (white, no box) on a black
    gray canvas, one frame per string; bbox of pixels != background.
    Returns [x0, y0, x1, y1) per string (x1/y1 exclusive)."""
    w, h = c["w"], c["h"]
    chain = ",".join(f"{drawtext(t, True)}:enable='eq(n,{i})'" for i, t in enumerate(texts))
    raw = subprocess.run(
        ["ffmpeg", "-nostdin", "-v", "error", "-f", "lavfi", "-i", f"color=c=black:s={w}x{h}:r=1",
         "-vf", f"format=gray,{chain}", "-frames:v", str(len(texts)), "-f", "rawvideo",
         "-pix_fmt", "gray", "-"], check=True, capture_output=True).stdout
    assert len(raw) == w * h * len(texts)
    boxes = []
    for i in range(len(texts)):
        frame = raw[i * w * h:(i + 1) * w * h]
        bg = frame[0:1]
        rows = [y for y in range(h) if frame[y * w:(y + 1) * w].strip(bg)]
        assert rows, f"nothing drawn for {texts[i]['text']!r}"
        x0 = min(w - len(frame[y * w:(y + 1) * w].lstrip(bg)) for y in rows)
        x1 = max(len(frame[y * w:(y + 1) * w].rstrip(bg)) for y in rows)
        boxes.append([x0, rows[0], x1, rows[-1] + 1])
    return boxes

def make(name, c):
    w, h, fps, n, seg, out = c["w"], c["h"], c["fps"], c["frames"], c["seg"], "samples/" + name
    texts, truth_segs = [], []
    for k, strings in enumerate(c["segments"]):
        a, b = k * seg, min((k + 1) * seg, n)
        for t in strings:
            t["enable"] = f"between(n,{a},{b - 1})"
        texts += strings
        truth_segs.append(dict(start=a / fps, end=b / fps, start_frame=a, end_frame=b, boxes=strings))
    boxes = measure(c, texts)
    for t, (x0, y0, x1, y1) in zip(texts, boxes):
        assert 16 <= x0 < x1 <= w - 16 and 16 <= y0 < y1 <= h - 16, (name, t["text"], x0, y0, x1, y1)
        t["bbox"] = dict(text=t["text"], x0=x0, y0=y0, x1=x1, y1=y1)
    for s in truth_segs:  # boxes within a segment must not overlap
        bb = [t["bbox"] for t in s["boxes"]]
        for i, p in enumerate(bb):
            for q in bb[i + 1:]:
                assert p["x1"] <= q["x0"] or q["x1"] <= p["x0"] or p["y1"] <= q["y0"] or q["y1"] <= p["y0"], (name, p, q)
        s["boxes"] = bb

    # Smooth rotating gradient + a soft-coloured moving disk (no text-like
    # structure), then the strings, each only within its segment's frames.
    c0, c1, disk, seed = c["bg"]
    r = min(w, h) // 4
    graph = (
        f"gradients=s={w}x{h}:r={fps}:c0={c0}:c1={c1}:seed={seed}:speed=0.02,format=rgba[bg];"
        f"color=c={disk}:s={2 * r}x{2 * r}:r={fps},format=rgba,"
        f"geq=r='r(X,Y)':g='g(X,Y)':b='b(X,Y)':a='255*lte(hypot(X-{r},Y-{r}),{r - 1})'[disk];"
        f"[bg][disk]overlay=x='(W-w)*(0.5+0.45*sin(0.6*t))':y='(H-h)*(0.5+0.4*cos(0.45*t))',"
        "format=yuv420p," + ",".join(f"{drawtext(t)}:enable='{t['enable']}'" for t in texts) + "[v]")
    ext = name.rsplit(".", 1)[1]
    subprocess.run(["ffmpeg", "-nostdin", "-y", "-v", "error", "-filter_complex", graph,
                    "-map", "[v]", "-frames:v", str(n), "-an", "-map_metadata", "-1",
                    "-fflags", "+bitexact", "-flags:v", "+bitexact", "-pix_fmt", "yuv420p",
                    *ENCODE[ext], out + ".part"], check=True)
    os.replace(out + ".part", out)
    truth = dict(width=w, height=h, fps=fps, frames=n, segments=truth_segs)
    with open(out.rsplit(".", 1)[0] + ".truth.json", "w") as f:
        json.dump(truth, f, indent=1)
        f.write("\n")
    print(f"==> {out}: {w}x{h} {n} frames, {len(texts)} strings in {len(truth_segs)} segment(s)")

for name, c in CLIPS.items():
    if os.environ["SAMPLES_ONLY"] in ("", name):
        make(name, c)
PY
if [[ -n $ONLY ]]; then
  log "samples: the demo's clip (scripts/make-samples.sh makes the others)"
  exit 0
fi

printf 'This is a plain text file, not a video. Used by bad-input tests.\n' > samples/not-media.mp4
size=$(stat -c %s samples/text-720p.mp4)
head -c $((size * 30 / 100)) samples/text-720p.mp4 > samples/truncated.mp4
log "samples/not-media.mp4, samples/truncated.mp4 ($((size * 30 / 100)) of $size bytes)"

# Still frames for the image_sequence source: the first 3 s of text-720p.mp4 as JPEGs.
rm -rf samples/frames && mkdir -p samples/frames
ffmpeg -nostdin -y -loglevel error -i samples/text-720p.mp4 -frames:v 30 -q:v 2 samples/frames/img%05d.jpg
log "samples/frames/img00001.jpg ... img00030.jpg"

# A mostly still scene for motion gating: 20 s at 15 fps (300 frames) of a
# parked plate on grey with light temporal noise, and a second plate driving
# across from t = 9 s to t = 11 s (x = -400 + 900 (t - 9), frames 135-165).
F=/usr/share/fonts/truetype/dejavu/DejaVuSans-Bold.ttf
ffmpeg -nostdin -y -loglevel error -f lavfi -i color=c=0x505050:s=1280x720:r=15:d=20 -vf \
"drawtext=fontfile=$F:text='PK 042':fontsize=72:fontcolor=black:box=1:boxcolor=white:boxborderw=14:x=760:y=480,\
drawtext=fontfile=$F:text='MV 321':fontsize=72:fontcolor=black:box=1:boxcolor=white:boxborderw=14:x=-400+900*(t-9):y=160:enable='between(t,9,11)',\
noise=alls=4:allf=t:all_seed=7" \
  -c:v libx264 -pix_fmt yuv420p -g 15 -preset veryfast -threads 1 -fflags +bitexact -flags +bitexact samples/still-plates.mp4
log "samples/still-plates.mp4 (20 s still, a plate driving across at 9-11 s)"

# Speech for the voice-activity detector: espeak-ng sentences (3 voices and
# speeds, varied levels) between silent gaps, at 16 kHz mono, plus light pink
# noise over the whole file. The truth is measured on the clean speech track
# before the noise is added. sox -R fixes the noise seed.
python3 - <<'PY'
import array, json, os, subprocess, tempfile, wave

SR = 16000
THRESH = 328          # 1% of full scale: a sample is speech when |x| > THRESH
PAD = 0.03            # s of espeak's own (sub-threshold) lead-in/tail kept around each utterance
NOISE_DBFS = -42.0    # RMS of the background pink noise
VOICES = {"a": ("en-us", 160), "b": ("en-gb", 175), "c": ("en-us+f3", 150)}

# Each file: lead-in silence, then per utterance (gap before it in s, voice,
# peak level in dBFS, text), then tail silence. Gaps are between truth
# segments: from the end of one utterance's speech to the start of the next.
SPEECH = {
  "speech-eval.wav": dict(lead=1.0, tail=1.0, utts=[
    (None, "a", -3, "Good morning everyone."),
    (1.2, "b", -5, "The train to the airport leaves from platform four in about ten minutes."),
    (0.5, "c", -4, "Thank you very much."),
    (2.5, "a", -6, "Please remember to switch off the lights before you leave the office tonight."),
    (0.8, "b", -3, "Where did you put the keys?"),
    (3.0, "c", -7, "Our quarterly results were better than expected, and the team deserves credit."),
    (0.45, "a", -4, "Absolutely, no problem."),
    (1.6, "b", -6, "It might rain later, so bring an umbrella."),
    (1.0, "c", -3, "Turn left at the next corner and then keep going straight for two blocks."),
    (2.0, "a", -5, "Could you repeat that, please?"),
    (0.6, "b", -4, "Seven, eight, nine."),
    (1.4, "c", -6, "The meeting has been moved to Thursday afternoon because the room was double booked."),
  ]),
  "speech-short.wav": dict(lead=1.0, tail=1.0, utts=[
    (None, "a", -3, "Hello, how are you today?"),
    (0.8, "b", -5, "Fine, thanks."),
    (1.8, "c", -4, "Let us test the voice detector on this short clip."),
  ]),
}

def run(cmd, **kw):
    return subprocess.run(cmd, check=True, capture_output=True, **kw).stdout

def utterance(tmp, voice, peak, text):
    """espeak-ng -> 16 kHz int16 at the given peak level, trimmed to its first/last
    sample above THRESH plus PAD of espeak's own lead-in/tail on each side."""
    v, speed = VOICES[voice]
    run(["espeak-ng", "-v", v, "-s", str(speed), "-w", f"{tmp}/u.wav", text])
    raw = run(["sox", "-D", f"{tmp}/u.wav", "-t", "raw", "-e", "signed", "-b", "16", "-c", "1",
               "-", "rate", "-v", str(SR), "gain", "-n", str(peak)])
    x = array.array("h", raw)
    loud = [i for i, s in enumerate(x) if abs(s) > THRESH]
    pad = round(PAD * SR)
    a, b = max(loud[0] - pad, 0), min(loud[-1] + 1 + pad, len(x))
    return x[a:b]

def noise(tmp, n):
    """Pink noise, n samples, scaled to NOISE_DBFS RMS; sox -R fixes the seed."""
    raw = run(["sox", "-R", "-r", str(SR), "-c", "1", "-n", "-t", "raw", "-e", "floating-point",
               "-b", "32", "-", "synth", f"{n}s", "pinknoise"])
    x = array.array("f", raw)
    assert len(x) == n
    rms = (sum(v * v for v in x) / n) ** 0.5
    k = 32768 * 10 ** (NOISE_DBFS / 20) / rms
    return [v * k for v in x]

def write_wav(path, x):
    with wave.open(path + ".part", "wb") as w:
        w.setnchannels(1); w.setsampwidth(2); w.setframerate(SR)
        w.writeframes(x.tobytes())
    os.replace(path + ".part", path)

def make(name, c, tmp):
    out = "samples/" + name
    clips = [(gap, text, utterance(tmp, voice, peak, text)) for gap, voice, peak, text in c["utts"]]
    # place each clip so that its first loud sample is at `lead` (first clip) or
    # `gap` after the previous clip's last loud sample
    places, end = [], None
    for gap, text, x in clips:
        loud0 = next(i for i, s in enumerate(x) if abs(s) > THRESH)
        start = (round(c["lead"] * SR) if end is None else end + round(gap * SR)) - loud0
        places.append(start)
        last = max(i for i, s in enumerate(x) if abs(s) > THRESH)
        end = start + last + 1
    n = end + round(c["tail"] * SR)
    clean = array.array("h", bytes(2 * n))
    for start, (_, _, x) in zip(places, clips):
        assert start >= 0 and all(v == 0 for v in clean[start:start + len(x)])
        clean[start:start + len(x)] = x
    # truth: measured on the clean track, within each utterance's placement
    segs = []
    for start, (_, text, x) in zip(places, clips):
        loud = [start + i for i, s in enumerate(clean[start:start + len(x)]) if abs(s) > THRESH]
        segs.append(dict(start=round(loud[0] / SR, 3), end=round((loud[-1] + 1) / SR, 3), text=text))
    for p, q in zip(segs, segs[1:]):
        assert p["end"] < q["start"], (p, q)
    mixed = array.array("h", (max(-32768, min(32767, round(s + v)))
                              for s, v in zip(clean, noise(tmp, n))))
    write_wav(out, mixed)
    truth = dict(sample_rate=SR, duration=round(n / SR, 3), segments=segs)
    with open(out.rsplit(".", 1)[0] + ".truth.json", "w") as f:
        json.dump(truth, f, indent=1)
        f.write("\n")
    print(f"==> {out}: {n / SR:.2f} s, {len(segs)} utterances, speech "
          f"{sum(s['end'] - s['start'] for s in segs):.2f} s")

with tempfile.TemporaryDirectory() as tmp:
    for name, c in SPEECH.items():
        make(name, c, tmp)
PY

# The short one again as AAC in MP4 (same truth): compressed audio decodes too.
ffmpeg -nostdin -y -v error -i samples/speech-short.wav -map_metadata -1 -c:a aac -b:a 64k \
  -fflags +bitexact -flags:a +bitexact -f mp4 samples/speech-short.m4a.part
mv samples/speech-short.m4a.part samples/speech-short.m4a
log "samples/speech-short.m4a: AAC-LC 64 kb/s of speech-short.wav"

# Moving plates for tracking and line counting: three white plates drawn at
# constant speeds over 8 s at 15 fps (120 frames), 1280x720. A vertical line
# at x = 640 (drawn top to bottom) is crossed once by each: plates 1 and 3
# left to right ("in"), plate 2 right to left ("out"). The truth is the
# formulas: the text's left edge is at x0 + vx * t, its top at y.
F=/usr/share/fonts/truetype/dejavu/DejaVuSans-Bold.ttf
ffmpeg -nostdin -y -loglevel error -f lavfi -i color=c=0x505050:s=1280x720:r=15:d=8 -vf \
"drawtext=fontfile=$F:text='AB 123':fontsize=72:fontcolor=black:box=1:boxcolor=white:boxborderw=14:x=-400+200*t:y=90,\
drawtext=fontfile=$F:text='XY 789':fontsize=72:fontcolor=black:box=1:boxcolor=white:boxborderw=14:x=1280-180*t:y=320,\
drawtext=fontfile=$F:text='KL 456':fontsize=72:fontcolor=black:box=1:boxcolor=white:boxborderw=14:x=-400+260*t:y=540" \
  -c:v libx264 -pix_fmt yuv420p -g 15 -preset veryfast samples/plates.mp4
cat > samples/plates.truth.json <<'JSON'
{
 "width": 1280,
 "height": 720,
 "fps": 15,
 "frames": 120,
 "line": {"from": [640, 0], "to": [640, 720]},
 "plates": [
  {"text": "AB 123", "x0": -400, "vx": 200, "y": 90, "direction": "in"},
  {"text": "XY 789", "x0": 1280, "vx": -180, "y": 320, "direction": "out"},
  {"text": "KL 456", "x0": -400, "vx": 260, "y": 540, "direction": "in"}
 ]
}
JSON
log "samples/plates.mp4: 3 moving plates, 120 frames at 15 fps; samples/plates.truth.json"

# Small plates entering the picture and moving a few pixels a frame, for
# motion gating and reading once per track: 12 s at 15 fps (180 frames),
# 1280x720, light temporal noise. Plates are 36 px DejaVu Sans Bold, black on
# light grey (0x9A9A9A on 0x505050: in a 160 px wide grey copy a plate is a
# few pixels of low contrast); a plate is the text's box plus `pad` px, `h`
# px high and `w` px wide. "KT 563" drives in from the left at 6 px a frame,
# "RM 208" from the right at 5 px a frame from t = 1 s, "ZX 941" is parked
# until t = 6 s and then moves at 5.3 px a frame. The truth is the formulas:
# the text's left edge at x0 + vx * max(0, t - t0) from t = from, its top at
# y; the plate spans [x - pad, x - pad + w) x [y - pad, y - pad + h).
F=/usr/share/fonts/truetype/dejavu/DejaVuSans-Bold.ttf
P="fontfile=$F:fontsize=36:fontcolor=black:box=1:boxcolor=0x9A9A9A:boxborderw=10"
ffmpeg -nostdin -y -loglevel error -f lavfi -i color=c=0x505050:s=1280x720:r=15:d=12 -vf \
"drawtext=$P:text='KT 563':x=-200+90*t:y=100,\
drawtext=$P:text='RM 208':x=1280-75*(t-1):y=330:enable='gte(t,1)',\
drawtext=$P:text='ZX 941':x=420+80*max(0\,t-6):y=560,\
noise=alls=4:allf=t:all_seed=7" \
  -c:v libx264 -pix_fmt yuv420p -g 15 -preset veryfast -threads 1 -fflags +bitexact -flags +bitexact samples/entering-plates.mp4
cat > samples/entering-plates.truth.json <<'JSON'
{
 "width": 1280,
 "height": 720,
 "fps": 15,
 "frames": 180,
 "plates": [
  {"text": "KT 563", "x0": -200, "vx": 90, "t0": 0, "from": 0, "y": 100, "pad": 10, "w": 161, "h": 46},
  {"text": "RM 208", "x0": 1280, "vx": -75, "t0": 1, "from": 1, "y": 330, "pad": 10, "w": 172, "h": 46},
  {"text": "ZX 941", "x0": 420, "vx": 80, "t0": 6, "from": 0, "y": 560, "pad": 10, "w": 162, "h": 46}
 ]
}
JSON
log "samples/entering-plates.mp4: 3 small plates entering and moving 5-6 px a frame, 180 frames at 15 fps; samples/entering-plates.truth.json"
