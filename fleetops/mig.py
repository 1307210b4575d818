"""NVIDIA Multi-Instance GPU: which profiles each GPU model offers and which layouts fit on one GPU.

From NVIDIA's MIG User Guide ("Supported MIG Profiles", `nvidia-smi mig -lgipp` placements) and the
configurations NVIDIA ships with mig-parted and the GPU Operator. A GPU has 8 memory slices (A30: 4);
each profile occupies a fixed number of them and may only start at certain slices, so a layout fits
when its instances can be placed without overlap. Compute slices (7, A30: 4) are checked too.
Every one of NVIDIA's own default layouts (mig-parted's config-default.yaml) fits by these rules.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache


@dataclass(frozen=True)
class Profile:
    name: str  # e.g. "3g.40gb"
    compute: int  # compute (SM) slices
    memory: int  # memory slices: the size of its placement
    max_instances: int
    starts: tuple[int, ...]  # memory slices where an instance may start


@dataclass(frozen=True)
class Family:
    name: str  # e.g. "H100-80GB"
    memory_slices: int
    compute_slices: int
    profiles: dict[str, Profile]


# GPU instance roles of the 8-slice GPUs (A100, H100, H800, H200, B200, GB200): compute, memory, max, starts.
_EIGHT = {
    "1g": (1, 1, 7, (0, 1, 2, 3, 4, 5, 6)),
    "1g+me": (1, 1, 1, (0, 1, 2, 3, 4, 5, 6)),
    "1g.2m": (1, 2, 4, (0, 2, 4, 6)),
    "2g": (2, 2, 3, (0, 2, 4)),
    "3g": (3, 4, 2, (0, 4)),
    "4g": (4, 4, 1, (0,)),
    "7g": (7, 8, 1, (0,)),
}
_A30 = {
    "1g": (1, 1, 4, (0, 1, 2, 3)),
    "1g+me": (1, 1, 1, (0, 1, 2, 3)),
    "2g": (2, 2, 2, (0, 2)),
    "2g+me": (2, 2, 1, (0, 2)),
    "4g": (4, 4, 1, (0,)),
}


def _family(name: str, roles: dict[str, tuple[int, int, int, tuple[int, ...]]], names: dict[str, str]) -> Family:
    memory = 4 if roles is _A30 else 8
    profiles = {names[role]: Profile(names[role], *roles[role]) for role in names}
    return Family(name, memory, 4 if roles is _A30 else 7, profiles)


def _names(one: str, two: str, three: str, full: str) -> dict[str, str]:
    """Profile names of an 8-slice GPU from its memory sizes: 1g, 1g/2g with two slices, 3g/4g, 7g."""
    return {"1g": f"1g.{one}gb", "1g+me": f"1g.{one}gb+me", "1g.2m": f"1g.{two}gb", "2g": f"2g.{two}gb",
            "3g": f"3g.{three}gb", "4g": f"4g.{three}gb", "7g": f"7g.{full}gb"}


FAMILIES = {
    f.name: f
    for f in (
        _family("A100-40GB", _EIGHT, _names("5", "10", "20", "40")),
        _family("A100-80GB", _EIGHT, _names("10", "20", "40", "80")),
        _family("A30-24GB", _A30, {"1g": "1g.6gb", "1g+me": "1g.6gb+me", "2g": "2g.12gb", "2g+me": "2g.12gb+me", "4g": "4g.24gb"}),
        _family("H100-80GB", _EIGHT, _names("10", "20", "40", "80")),  # H800-80GB too
        _family("H100-94GB", _EIGHT, _names("12", "24", "47", "94")),  # H100 NVL
        _family("H100-96GB", _EIGHT, _names("12", "24", "48", "96")),  # H100 of GH200
        _family("H200-141GB", _EIGHT, _names("18", "35", "71", "141")),
        _family("B200-180GB", _EIGHT, _names("23", "45", "90", "180")),
        _family("GB200-186GB", _EIGHT, _names("23", "47", "93", "186")),
    )
}

# How device models are written in environments (A100-SXM4-80GB, H100-SXM-80GB, H100-NVL ...), by family.
_MODELS = (
    (r"GB200", "GB200-186GB"),
    (r"B200", "B200-180GB"),
    (r"H100.*96GB|GH200", "H100-96GB"),  # before H200: "GH200" contains it
    (r"H200", "H200-141GB"),
    (r"H100.*(NVL|94GB)|H800.*NVL", "H100-94GB"),
    (r"H100|H800", "H100-80GB"),
    (r"A100.*80GB|A800.*80GB", "A100-80GB"),
    (r"A100|A800", "A100-40GB"),
    (r"A30", "A30-24GB"),
)


@cache
def family_of(model: str) -> Family | None:
    """The MIG family of a GPU model as an environment names it; None for a GPU without MIG."""
    upper = model.upper()
    for pattern, family in _MODELS:
        if re.search(pattern, upper):
            return FAMILIES[family]
    return None


def layout_problem(model: str, profiles: dict[str, int]) -> str | None:
    """Why `profiles` (instances per GPU) cannot be one GPU's layout on `model`; None when it fits."""
    family = family_of(model)
    if family is None:
        return f"{model} has no MIG"
    unknown = sorted(set(profiles) - set(family.profiles))
    if unknown:
        return f"{model} ({family.name}) has no MIG profile {', '.join(unknown)}; its profiles: {', '.join(family.profiles)}"
    for name, count in sorted(profiles.items()):
        if count > family.profiles[name].max_instances:
            return f"{model} fits at most {family.profiles[name].max_instances} {name} per GPU, got {count}"
    if sum(count for name, count in profiles.items() if name.endswith("+me")) > 1:
        return f"{model} has one media engine: at most one +me instance per GPU"
    compute = sum(family.profiles[n].compute * c for n, c in profiles.items())
    if compute > family.compute_slices:
        return f"the layout needs {compute} compute slices, {model} has {family.compute_slices}"
    memory = sum(family.profiles[n].memory * c for n, c in profiles.items())
    if memory > family.memory_slices:
        return f"the layout needs {memory} memory slices, {model} has {family.memory_slices}"
    if not _placeable(family, profiles):
        return f"the instances cannot be placed on one {model} without overlapping (NVIDIA's placement rules)"
    return None


def _placeable(family: Family, profiles: dict[str, int]) -> bool:
    """Whether every instance finds a start of its own (largest first, backtracking: at most 7 instances)."""
    items = sorted((family.profiles[n] for n, c in profiles.items() for _ in range(c)), key=lambda p: -p.memory)
    used = [False] * family.memory_slices

    def place(k: int) -> bool:
        if k == len(items):
            return True
        p = items[k]
        for start in p.starts:
            span = range(start, start + p.memory)
            if span.stop <= family.memory_slices and not any(used[i] for i in span):
                for i in span:
                    used[i] = True
                if place(k + 1):
                    return True
                for i in span:
                    used[i] = False
        return False

    return place(0)
