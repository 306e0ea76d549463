"""What a segmentation mask's pixels mean (`--masks-dir`): the colour map of RGB masks and the ignore value.

A one-channel mask's values, and a palette mask's indices, are class ids as they are; an RGB
mask (what annotation tools export) says a class by colour, so it needs a map from colours to
ids: `--mask-colors FILE` (`r,g,b,name` lines, ids numbered from 0 in line order; a line named
`ignore` maps its colour to the ignore value and takes no id), or a table by name: `voc` (Pascal
VOC's 21 classes, its void border colour to the ignore value) or `cityscapes` (Cityscapes' 19
training classes by their train ids, as its `*_gtFine_labelTrainIds.png` hold them; the void
colours to the ignore value). Made once in the plan, carried whole to the workers in
`EncodeOptions.masks`, so every worker maps a colour the same way.
"""

from __future__ import annotations

from dataclasses import dataclass

from img2tfrecord.errors import UsageError, option

MAX_ID = 65535  # a 16-bit PNG holds the ids

VOC_NAMES = (
    "background aeroplane bicycle bird boat bottle bus car cat chair cow diningtable dog horse motorbike "
    "person pottedplant sheep sofa train tvmonitor"
).split()

# Cityscapes' training classes (cityscapesScripts' labels.py: name, colour) in train id order
CITYSCAPES = (
    ("road", (128, 64, 128)),
    ("sidewalk", (244, 35, 232)),
    ("building", (70, 70, 70)),
    ("wall", (102, 102, 156)),
    ("fence", (190, 153, 153)),
    ("pole", (153, 153, 153)),
    ("traffic light", (250, 170, 30)),
    ("traffic sign", (220, 220, 0)),
    ("vegetation", (107, 142, 35)),
    ("terrain", (152, 251, 152)),
    ("sky", (70, 130, 180)),
    ("person", (220, 20, 60)),
    ("rider", (255, 0, 0)),
    ("car", (0, 0, 142)),
    ("truck", (0, 0, 70)),
    ("bus", (0, 60, 100)),
    ("train", (0, 80, 100)),
    ("motorcycle", (0, 0, 230)),
    ("bicycle", (119, 11, 32)),
)
# Cityscapes' void and unused classes' colours (train id 255)
CITYSCAPES_VOID = (
    (0, 0, 0),
    (111, 74, 0),
    (81, 0, 81),
    (250, 170, 160),
    (230, 150, 140),
    (180, 165, 180),
    (150, 100, 100),
    (150, 120, 90),
    (0, 0, 90),
    (0, 0, 110),
)


@dataclass(frozen=True)
class Color:
    """One colour of a colour map and the id its pixels get."""

    rgb: tuple[int, int, int]
    id: int


@dataclass(frozen=True)
class MaskSettings:
    """How the workers read masks: the colour map (None: RGB masks are refused), the class names by
    id it gives (empty without one), the ignore value, and the map's name as dataset.json records it."""

    colors: tuple[Color, ...] | None = None
    names: tuple[str, ...] = ()
    ignore: int = 255
    colors_from: str | None = None  # "voc", "cityscapes", or the file given


def voc_palette() -> list[tuple[int, int, int]]:
    """Pascal VOC's 256 palette colours (its devkit's `labelcolormap`: the bits of the index spread
    over the high bits of r, g and b)."""
    out = []
    for i in range(256):
        r = g = b = 0
        c = i
        for j in range(8):
            r |= ((c >> 0) & 1) << (7 - j)
            g |= ((c >> 1) & 1) << (7 - j)
            b |= ((c >> 2) & 1) << (7 - j)
            c >>= 3
        out.append((r, g, b))
    return out


def _named(name: str, ignore: int) -> MaskSettings:
    if name == "voc":
        pal = voc_palette()
        colors = tuple(Color(pal[i], i) for i in range(len(VOC_NAMES))) + (Color(pal[255], ignore),)
        return MaskSettings(colors, tuple(VOC_NAMES), ignore, name)
    colors = tuple(Color(rgb, i) for i, (_, rgb) in enumerate(CITYSCAPES))
    colors += tuple(Color(rgb, ignore) for rgb in CITYSCAPES_VOID)
    return MaskSettings(colors, tuple(n for n, _ in CITYSCAPES), ignore, name)


def _parse(path: str, text: str, ignore: int) -> MaskSettings:
    """A `r,g,b,name` file (blank lines and `#` comments allowed) as a colour map; UsageError naming the line."""
    colors: list[Color] = []
    names: list[str] = []
    seen: dict[tuple[int, int, int], int] = {}
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        parts = [p.strip() for p in line.split(",", 3)]
        where = f"{option('mask_colors', path)}: line {n}"
        if len(parts) != 4 or not all(p.isdigit() and int(p) <= 255 for p in parts[:3]) or not parts[3]:
            raise UsageError(f"{where}: {line.strip()[:80]!r} is not r,g,b,name with r, g and b in 0..255")
        rgb = (int(parts[0]), int(parts[1]), int(parts[2]))
        if rgb in seen:
            raise UsageError(f"{where}: colour {rgb} is given twice (also line {seen[rgb]})")
        seen[rgb] = n
        if parts[3] == "ignore":
            colors.append(Color(rgb, ignore))
            continue
        colors.append(Color(rgb, len(names)))
        names.append(parts[3])
    if not names:
        raise UsageError(f"{option('mask_colors', path)} lists no colour (r,g,b,name lines)")
    return MaskSettings(tuple(colors), tuple(names), ignore, path)


def mask_settings(colors: str | None, ignore: int) -> MaskSettings:
    """`--mask-colors` (a file, `voc`, `cityscapes` or None) and `--mask-ignore` as the workers use them."""
    if not 0 <= ignore <= MAX_ID:
        raise UsageError(f"bad {option('mask_ignore', ignore)}: choose 0..{MAX_ID}")
    if colors is None:
        return MaskSettings(ignore=ignore)
    if colors in ("voc", "cityscapes"):
        return _named(colors, ignore)
    try:
        with open(colors, encoding="utf-8") as f:
            text = f.read(1 << 20)
    except (OSError, UnicodeDecodeError) as e:
        raise UsageError(
            f"{option('mask_colors', colors)}: cannot read it ({e.__class__.__name__}): give a file of r,g,b,name "
            "lines, voc or cityscapes"
        ) from None
    return _parse(colors, text, ignore)
