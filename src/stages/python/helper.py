"""infer-stream's side of `kind = "python"` stages (docs/python.md): loading
the user's code, checking its functions, the frame object handed to
`process(frame)`, and results turned into JSON."""

import importlib
import importlib.util
import inspect
import json
import os
import re
import sys


class Frame:
    """One frame as a `python` stage sees it (docs/python.md)."""

    __slots__ = ("stream", "seq", "pts", "width", "height", "results", "tensors", "letterbox", "_image")

    def __init__(self, meta, tensors, image):
        self.stream = meta["stream"]
        self.seq = meta["seq"]
        self.pts = meta["pts"]
        self.width = meta.get("width")
        self.height = meta.get("height")
        self.results = meta["results"]
        self.letterbox = meta.get("letterbox")
        self.tensors = tensors
        self._image = image

    def image(self):
        """The picture: a numpy array, height x width x 3, uint8, RGB."""
        if self._image is None:
            raise RuntimeError("frame.image() needs `image = true` in this stage's config (or the frame has no picture)")
        return self._image

    def __repr__(self):
        return f"Frame(stream={self.stream!r}, seq={self.seq}, pts={self.pts})"


def frame(meta_json, tensors, image):
    return Frame(json.loads(meta_json), tensors, image)


def load(stage, script, module, folder):
    """The user's module: `script` (a file) run as a module of its own, or `module` imported."""
    if folder and folder not in sys.path:
        sys.path.insert(0, folder)
    if script is None:
        return importlib.import_module(module)
    here = os.path.dirname(os.path.abspath(script))
    if here not in sys.path:
        sys.path.insert(0, here)
    name = "infer_stream_stage_" + re.sub(r"\W", "_", stage)
    spec = importlib.util.spec_from_file_location(name, script)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {script} as Python (is it a .py file?)")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


def _takes(f, args):
    try:
        sig = inspect.signature(f)
    except (TypeError, ValueError):
        return None, True
    try:
        sig.bind(*args)
        return sig, True
    except TypeError:
        return sig, False


def _where(f):
    code = getattr(f, "__code__", None)
    return f" (defined at {code.co_filename}:{code.co_firstlineno})" if code else ""


def check(mod, function):
    """What is wrong with the module's functions, or None."""
    f = getattr(mod, function, None)
    if f is None:
        found = sorted(n for n, v in vars(mod).items() if callable(v) and not n.startswith("_") and inspect.isfunction(v))
        have = f"; it has {', '.join(found)}" if found else ""
        return f"has no function `{function}`{have}"
    if not callable(f):
        return f"`{function}` is not a function (it is a {type(f).__name__})"
    sig, ok = _takes(f, (None,))
    if not ok:
        return f"`{function}{sig}` must take one argument, the frame{_where(f)}"
    for name, args, what in (("setup", ({},), "one argument, the args dict"), ("finish", (), "no arguments")):
        g = getattr(mod, name, None)
        if g is None:
            continue
        if not callable(g):
            return f"`{name}` is not a function"
        sig, ok = _takes(g, args)
        if not ok:
            return f"`{name}{sig}` must take {what}{_where(g)}"
    return None


def _plain(o):
    if hasattr(o, "tolist"):
        return o.tolist()
    raise TypeError(f"a {type(o).__name__} cannot be written as JSON: return numbers, strings, lists and dicts")


def dumps(value):
    """A result as JSON text; numpy numbers and arrays become plain ones."""
    return json.dumps(value, default=_plain, allow_nan=False)


def traceback_text(exc, tb):
    import traceback

    return "".join(traceback.format_exception(type(exc), exc, tb)).rstrip()
