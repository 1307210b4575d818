"""fleetops's build: the project is declared in pyproject.toml; this adds the one compiled part.

fleetops/yamltext.py (the YAML writer of `render -o`) is compiled by Cython into the twin module
`fleetops._yamltext`, stamped with the SHA-256 of the text it was built from: fleetops.emit loads
it only while yamltext.py still has that text. It is optional: with no C compiler (or no Cython,
as in a build without isolation) the build goes on and fleetops writes the same YAML with the
plain module, 1.8x slower. FLEETOPS_PURE_PYTHON=1 builds a pure wheel (image/build.py: the
reconciler writes no YAML files, and its image may have another Python than this machine).
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from setuptools import Extension, setup

HERE = Path(__file__).resolve().parent
SOURCE = HERE / "fleetops" / "yamltext.py"
TWIN = HERE / "build" / "native" / "_yamltext.py"


def twin() -> str:
    """yamltext.py's text, stamped with its digest, where Cython compiles it under the twin's name."""
    text = SOURCE.read_bytes()
    stamped = text + f'\n\nSOURCE_SHA256 = "{hashlib.sha256(text).hexdigest()}"\n'.encode()
    TWIN.parent.mkdir(parents=True, exist_ok=True)
    if not TWIN.exists() or TWIN.read_bytes() != stamped:  # an unchanged twin is not compiled again
        TWIN.write_bytes(stamped)
    return os.path.relpath(TWIN, HERE)  # setuptools wants paths relative to the project


def extensions() -> list[Extension]:
    if os.environ.get("FLEETOPS_PURE_PYTHON"):
        return []
    try:
        from Cython.Build import cythonize
    except ImportError:
        return []
    return cythonize([Extension("fleetops._yamltext", [twin()], optional=True)], compiler_directives={"language_level": 3}, quiet=True)


setup(ext_modules=extensions())
