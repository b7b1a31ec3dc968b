"""Hostile image files for the fuzz campaign, generated from the corpus photos: seeded,
so the same seed gives the same files byte for byte.

Kinds: truncations at many offsets; byte flips in JPEG headers and in scan data; edited
SOF dimensions (0, 1, 65500: a decompression bomb); wrong extensions; PNG, WebP, BMP and
TIFF encodings, truncated and byte-flipped; a zero-length file and a huge one."""

from __future__ import annotations

import io
import os
import random
import struct
from pathlib import Path

SOURCES = ("squirrel_cls.jpg", "baboon.jpg", "fruits.jpg", "orange.jpg")
"""Corpus photos the files are made from (JPEGs of opencv-doc)."""
FORMATS = {"PNG": ".png", "WEBP": ".webp", "BMP": ".bmp", "TIFF": ".tif"}
HUGE_BYTES = 24 * 2 ** 20
"""The huge file: a real JPEG followed by this much junk (about 24 MiB)."""


def _sof(data: bytes) -> int | None:
    """Offset of the first SOF0/1/2 marker of a JPEG (its height follows at +5, width at +7)."""
    for marker in (b"\xff\xc0", b"\xff\xc1", b"\xff\xc2"):
        at = data.find(marker, 2)
        if at > 0:
            return at
    return None


def _sos(data: bytes) -> int:
    """Offset of the first byte of scan data (after the SOS segment)."""
    at = data.find(b"\xff\xda")
    return at + 2 + struct.unpack(">H", data[at + 2:at + 4])[0]


def _flip(data: bytes, rng: random.Random, start: int, end: int, flips: int) -> bytes:
    out = bytearray(data)
    for _ in range(flips):
        i = rng.randrange(start, max(start + 1, min(end, len(out))))
        out[i] ^= 1 << rng.randrange(8)
    return bytes(out)


def _encode(data: bytes, fmt: str, side: int = 160) -> bytes:
    from PIL import Image

    image = Image.open(io.BytesIO(data)).convert("RGB")
    image.thumbnail((side, side))
    buf = io.BytesIO()
    image.save(buf, fmt)
    return buf.getvalue()


def hostile_files(photos_dir: Path, out_dir: Path, seed: int = 0, scale: int = 1) -> list[Path]:
    """Write the hostile files into ``out_dir`` (created); returns their paths. About
    ``210 * scale`` files (plus the fixed ones): ``scale`` sets the campaign's size."""
    rng = random.Random(seed)
    out_dir.mkdir(parents=True, exist_ok=True)
    files: dict[str, bytes] = {}
    photos = {name: (photos_dir / name).read_bytes() for name in SOURCES}
    for name, data in photos.items():
        stem = Path(name).stem
        for i in range(12 * scale):  # truncations anywhere, the header included
            cut = rng.randrange(1, len(data))
            files[f"trunc_{stem}_{i}_{cut}.jpg"] = data[:cut]
        for i in range(10 * scale):  # byte flips in the header segments (tables, SOF, SOS)
            files[f"hdrflip_{stem}_{i}.jpg"] = _flip(data, rng, 2, _sos(data), rng.randint(1, 4))
        for i in range(8 * scale):  # byte flips in the entropy-coded scan data
            files[f"scanflip_{stem}_{i}.jpg"] = _flip(data, rng, _sos(data), len(data) - 2, rng.randint(1, 16))
        sof = _sof(data)
        # Not 1x65500: it passes every pixel limit, and the deployed DALI resize of it to a
        # shorter side of 256 allocates 12 GiB (see the report to the lead): not on a shared machine.
        for h, w in ((0, 0), (0, 640), (480, 0), (1, 1), (1, 640), (65500, 65500), (65500, 640)):
            edited = bytearray(data)
            edited[sof + 5:sof + 9] = struct.pack(">HH", h, w)
            files[f"sof_{stem}_{h}x{w}.jpg"] = bytes(edited)
        for fmt, ext in FORMATS.items():
            encoded = _encode(data, fmt)
            files[f"ok_{stem}{ext}"] = encoded
            files[f"{fmt.lower()}_as_jpg_{stem}.jpg"] = encoded  # wrong extension, valid file
            for i in range(3 * scale):
                files[f"{fmt.lower()}_trunc_{stem}_{i}{ext}"] = encoded[:rng.randrange(1, len(encoded))]
                files[f"{fmt.lower()}_flip_{stem}_{i}{ext}"] = _flip(encoded, rng, 0, 64, rng.randint(1, 6))
        files[f"jpg_as_png_{stem}.png"] = data
    files["empty.jpg"] = b""
    files["text.jpg"] = b"this is not an image\n" * 10
    files["zeros.jpg"] = bytes(4096)
    files["random.jpg"] = rng.randbytes(50_000)
    files["jpeg_magic_only.jpg"] = b"\xff\xd8\xff"
    photo = photos[SOURCES[0]]
    files["huge.jpg"] = photo + rng.randbytes(HUGE_BYTES)
    paths = []
    for name, data in files.items():
        path = out_dir / name
        path.write_bytes(data)
        paths.append(path)
    return paths


# -- hostile names, spec values and options (issue 25) -------------------------------------------

NAME_PIECES = (
    b"\xff", b"\xfe\xfd", b"\xc3", b"\xed\xa0\x80", b"\x80abc", b"\x1b[31m", b"\x1b]0;title\x07", b"\x1b[2J",
    "\u202e".encode(), "\u200b".encode(), "\u2028".encode(), b"$\\frac{1}{0}$", b"$x$", b"$", b"<script>",
    b"<img src=x onerror=alert(1)>", b"&amp;", b"|", b"`", b"``", b"*", b"**", b"_", b"__", b"[bold]", b"[link=x]",
    b"[", b"]", b"=", b"+", b"-", b"@", b"%", b"\t", b"\r", b"\n", b" ", b"..", b"\\", b"'", b'"', b"%s", b"{}",
    "\u00e9".encode(), "\u65e5\u672c".encode(), "\U0001f642".encode(), b"#", b"!", b"~", b"&", b"\x7f", b"\x01",
    b"=HYPERLINK(\"x\")", b"-1+1", b"@SUM(A1)",
)


def hostile_names(rng: random.Random, count: int) -> list[bytes]:
    """``count`` distinct file names (bytes) made of :data:`NAME_PIECES`: not UTF-8, control and
    format characters, mathtext, HTML, Markdown, Rich markup, formula starts, up to 255 bytes
    (never ``/`` nor NUL, which no file name holds)."""
    names: set[bytes] = set()
    while len(names) < count:
        name = b"".join(rng.choice(NAME_PIECES) for _ in range(rng.randint(1, 6)))
        name += rng.choice((b".jpg", b".png", b"", b".JPG", b".jpeg"))
        if rng.random() < 0.2:  # long names: 240-255 bytes, where derived names used to overflow
            name = (name + b"x" * 255)[: rng.randint(240, 255)]
        if name not in (b".", b"..") and len(name) <= 255:
            names.add(name)
    return sorted(names)


def hostile_folder(photos_dir: Path, out_dir: Path, seed: int = 0, count: int = 40) -> dict[str, int]:
    """A folder of ``count`` entries under :func:`hostile_names`: copies of corpus photos, hostile
    bytes, links inside, outside and dangling, FIFOs and sub-folders. Returns how many of each."""
    import os

    rng = random.Random(seed)
    out_dir.mkdir(parents=True, exist_ok=True)
    photos = [photos_dir / name for name in SOURCES]
    kinds: dict[str, int] = {}
    made: list[bytes] = []
    raw_dir = os.fsencode(out_dir)
    for name in hostile_names(rng, count):
        path = raw_dir + b"/" + name
        kind = rng.choices(("photo", "bytes", "inside", "outside", "dangling", "fifo", "folder"),
                           (10, 3, 2, 1, 1, 1, 1))[0]
        if kind in ("inside",) and not made:
            kind = "photo"
        if kind == "photo":
            with open(path, "wb") as f:
                f.write(rng.choice(photos).read_bytes())
            made.append(name)
        elif kind == "bytes":
            with open(path, "wb") as f:
                f.write(rng.randbytes(rng.randint(0, 2000)))
        elif kind == "inside":
            os.symlink(rng.choice(made), path)
        elif kind == "outside":
            os.symlink(rng.choice((b"/etc/passwd", b"/proc/self/environ", os.fsencode(photos[0]))), path)
        elif kind == "dangling":
            os.symlink(b"no-such-file", path)
        elif kind == "fifo":
            os.mkfifo(path)
        else:
            os.mkdir(path)
        kinds[kind] = kinds.get(kind, 0) + 1
    return kinds


ODD_VALUES = (float("nan"), float("inf"), -float("inf"), 0, -1, 1, 3, 2 ** 31, 1e308, -0.0, 0.5, 224.5, True, False,
              "", "x", "linear", "RGB", "half_up", [], [1], [1, 2], [224, 224], [1, 2, 3], [float("nan"), 1, 2],
              [127.0, 127.0, 127.0], ["a", "b", "c"], {"a": 1}, 256, 100000, 8192, 8193, -256)


def random_spec(rng: random.Random, directory: Path) -> str:
    """The TOML text of a spec with a few keys set to odd values (:data:`ODD_VALUES`), now and
    then an unknown key or section, or an ``extends`` to something that is not a spec."""
    import dataclasses

    import tomli_w

    from harness.spec import _SECTIONS, TOLERANCE_KEYS

    table: dict = {}

    def section(name: str) -> dict:
        if not isinstance(table.get(name), dict):
            table[name] = {}
        return table[name]

    for _ in range(rng.randint(1, 4)):
        roll = rng.random()
        if roll < 0.7:
            name = rng.choice(list(_SECTIONS))
            key = rng.choice([f.name for f in dataclasses.fields(_SECTIONS[name])])
            section(name)[key] = rng.choice(ODD_VALUES)
        elif roll < 0.8:
            stage = rng.choice(("decode", "resize", "crop", "input", "output", "topk", "nope"))
            section("tolerances").setdefault(stage, {})[rng.choice(TOLERANCE_KEYS)] = rng.choice(ODD_VALUES)
        elif roll < 0.85:
            section("reference")["recipe"] = rng.choice(("opencv", "torchvision", "dali", "nope", 3))
        elif roll < 0.9:
            table[rng.choice(("bogus", "resize", "deployment"))] = rng.choice(ODD_VALUES)
        else:
            table["extends"] = rng.choice(("/dev/zero", str(directory), "missing.toml", 7, "", "self.toml"))
    try:
        return tomli_w.dumps(table)
    except (TypeError, ValueError):  # a value TOML cannot hold (a heterogeneous array): write it as text
        return "\n".join(f"{k} = {v!r}" for k, v in table.items() if not isinstance(v, dict)) + "\n"


OPTION_VALUES = {
    "--workers": ("0", "-1", "1", "3", "64", "65", "x", "1e3", "2.5"),
    "--retries": ("-1", "0", "1", "21", "x"),
    "--timeout": ("0", "-1", "nan", "inf", "1e-9", "0.5", "30", "1e9", "x"),
    "--tie-margin": ("nan", "-0.1", "0", "0.5", "inf", "x"),
    "--top-k": ("0", "-5", "1", "5", "1000", "100000", "x"),
    "--memory-budget": ("0", "1", "64", "1024", "-1", "x"),
    "--fail-on": ("diverged", "tie", "close", "never"),
    "--protocol": ("grpc", "http", "ftp"),
    "--pipeline": ("dali", "opencv", "tensorrt"),
    "--reference": ("opencv", "torchvision", "nope", "/nonexistent.py:f", "x.py"),
    "--url": ("http://127.0.0.1:1", "127.0.0.1", "127.0.0.1:0", "[::1]:1", "a b:1", "127.0.0.1:70000"),
}
FLAGS = ("--no-isolate", "--save-tensors", "--allow-rejected", "--follow-links", "--resume")
HOSTILE_NUMBERS = ("nan", "NaN", "inf", "-inf", "1e308", "1e999", "-1", "-0.5", "x", "", " ", "0x10", "1" + "0" * 30,
                   "9" * 5000)
"""What no option taking a number accepts (issue 54: ``--interval nan`` ran rounds back to back,
``1e308`` overflowed a sleep)."""
HOSTILE_SHARDS = ("nan/1", "1/0", "-1/2", "0/nan", "2/2", "1e308/1", "x", "", "/")


def random_options(rng: random.Random) -> list[str]:
    """A few of check's options with odd values (:data:`OPTION_VALUES`) and flags."""
    args: list[str] = []
    for option in rng.sample(sorted(OPTION_VALUES), rng.randint(1, 4)):
        args += [option, rng.choice(OPTION_VALUES[option])]
    args += rng.sample(FLAGS, rng.randint(0, 2))
    return args


# -- deploy's inputs (issue 54): models, framework configs, references ----------------------------

def hostile_models(model: Path, directory: Path, seed: int) -> dict[str, Path]:
    """ONNX files deploy must refuse before it writes anything, by kind, from ``model`` (a real
    classifier): not protobuf, truncated, empty, a folder, and tensors whose external data lies
    outside the model's folder (relative, absolute, through a link) or is missing."""
    import onnx
    from onnx import TensorProto, helper

    rng = random.Random(seed)
    data = model.read_bytes()
    files = {"garbage": rng.randbytes(4096), "empty": b"", "text": b"ir_version: 8\ngraph { }\n",
             "truncated": data[:rng.randrange(1000, len(data) // 2)], "zip": b"PK\x03\x04" + rng.randbytes(200),
             "jpeg": b"\xff\xd8\xff\xe0" + rng.randbytes(500)}
    made = {}
    for kind, content in files.items():
        made[kind] = directory / f"{kind}.onnx"
        made[kind].write_bytes(content)
    made["folder"] = directory / "folder.onnx"
    made["folder"].mkdir()
    (directory / "outside").mkdir()
    (directory / "outside" / "weights.bin").write_bytes(b"\0" * 4)
    (directory / "models").mkdir()
    os.symlink(directory / "outside" / "weights.bin", directory / "models" / "link.bin")
    for kind, location in (("outside", "../../../../../../etc/passwd"), ("absolute", "/etc/passwd"),
                           ("sibling", "../outside/weights.bin"), ("linked", "link.bin"), ("missing", "weights.bin")):
        weight = helper.make_tensor("w", TensorProto.FLOAT, [1], [1.0])
        graph = helper.make_graph([helper.make_node("Mul", ["input", "w"], ["logits"])], "g",
                                  [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["N", 3, 224, 224])],
                                  [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", 1000])], [weight])
        tensor = graph.initializer[0]
        tensor.ClearField("float_data")
        tensor.data_location = TensorProto.EXTERNAL
        entry = tensor.external_data.add()
        entry.key, entry.value = "location", location
        made[kind] = directory / "models" / f"{kind}.onnx"
        onnx.save(helper.make_model(graph), str(made[kind]))
    return made


HF_KEYS = ("size", "crop_size", "resample", "image_mean", "image_std", "rescale_factor", "do_resize", "do_center_crop",
           "do_normalize", "do_rescale", "do_pad", "crop_pct", "default_to_square", "image_processor_type",
           "feature_extractor_type")
TIMM_KEYS = ("input_size", "interpolation", "crop_pct", "crop_mode", "mean", "std")
SIZES = ({"height": float("nan"), "width": 224}, {"height": 1e308, "width": 224}, {"shortest_edge": -1},
         {"height": "224", "width": 224}, {"longest_edge": 224}, {"height": 224}, {}, [224, float("inf")], [True, 1],
         {"shortest_edge": 2 ** 40}, {"height": [224], "width": 224})
"""Sizes as Hugging Face writes them, made hostile (beside :data:`ODD_VALUES`)."""


def hostile_framework_config(rng: random.Random, config: dict, keys: tuple[str, ...]) -> dict:
    """``config`` with one to three of ``keys`` set to odd values (a size key to an odd size)."""
    config = dict(config)
    for key in rng.sample(keys, rng.randint(1, 3)):
        config[key] = rng.choice(SIZES if "size" in key and rng.random() < 0.6 else ODD_VALUES)
    return config


HOSTILE_REFERENCES = ("torchvision:resnet50.DEFAULT", "torchvision:resnet50", "torchvision:ResNet50_Weights",
                      "torchvision:ResNet50_Weights.", "torchvision:.", "torchvision:..", "torchvision:os.system",
                      "torchvision:__builtins__.open", "torchvision:ResNet50_Weights.IMAGENET1K_V2.transforms",
                      "torchvision:get_weight.DEFAULT", "torchvision:" + "A" * 5000, "torchvision:Weights\x00.X",
                      "torchvision:", "timm:", "hf:", "hf::pil", "hf:/dev/zero", "hf:/etc", "timm:/dev/null",
                      "timm:/etc", "nope:x", "x.py", ":", "/nonexistent/training.py:f")
"""Malformed ``--reference`` values (none names a file of code that exists: nothing is run)."""
