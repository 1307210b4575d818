"""fleetops's build: the project is declared in pyproject.toml; this adds the one compiled part.

fleetops/_yamlwriter.pyx (the YAML writer of `render -o` and `render`, in C) is compiled by Cython
into `fleetops._yamlwriter`, stamped with the SHA-256 of the text it was built from: fleetops.emit
loads it only while _yamlwriter.pyx still has that text. It is optional: with no C compiler (or
no Cython, as in a build without isolation) the build goes on and fleetops writes the same YAML
with fleetops/yamltext.py, in Python. FLEETOPS_PURE_PYTHON=1 builds a pure wheel (image/build.py:
the reconciler writes no YAML files, and its image may have another Python than this machine).
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from setuptools import Extension, setup

HERE = Path(__file__).resolve().parent
SOURCE = HERE / "fleetops" / "_yamlwriter.pyx"
STAMPED = HERE / "build" / "native" / "_yamlwriter.pyx"


def stamped() -> str:
    """_yamlwriter.pyx's text, stamped with its digest, where Cython compiles it."""
    text = SOURCE.read_bytes()
    stamp = f'\n\nSOURCE_SHA256 = "{hashlib.sha256(text).hexdigest()}"\n'.encode()
    STAMPED.parent.mkdir(parents=True, exist_ok=True)
    if not STAMPED.exists() or STAMPED.read_bytes() != text + stamp:  # an unchanged source is not compiled again
        STAMPED.write_bytes(text + stamp)
    return os.path.relpath(STAMPED, HERE)  # setuptools wants paths relative to the project


def extensions() -> list[Extension]:
    if os.environ.get("FLEETOPS_PURE_PYTHON"):
        return []
    try:
        from Cython.Build import cythonize
    except ImportError:
        return []
    return cythonize([Extension("fleetops._yamlwriter", [stamped()], optional=True, extra_compile_args=["-O2"])], quiet=True)


setup(ext_modules=extensions())
