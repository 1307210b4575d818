"""fleetops's build: the project is declared in pyproject.toml; this adds the one compiled part.

fleetops/yamltext.py (the YAML writer of `render -o`) is compiled by Cython into the twin module
`fleetops._yamltext`, stamped with the SHA-256 of the text it was built from: fleetops.emit loads
it only while yamltext.py still has that text. The extension is optional: with no C compiler the
build goes on and fleetops writes YAML with the plain module, 1.8x slower.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from Cython.Build import cythonize
from setuptools import Extension, setup

SOURCE = Path("fleetops") / "yamltext.py"
TWIN = Path("build") / "native" / "_yamltext.py"


def twin() -> str:
    """yamltext.py's text, stamped with its digest, where Cython compiles it under the twin's name."""
    text = SOURCE.read_bytes()
    stamped = text + f'\n\nSOURCE_SHA256 = "{hashlib.sha256(text).hexdigest()}"\n'.encode()
    TWIN.parent.mkdir(parents=True, exist_ok=True)
    if not TWIN.exists() or TWIN.read_bytes() != stamped:  # an unchanged twin is not compiled again
        TWIN.write_bytes(stamped)
    return str(TWIN)


setup(ext_modules=cythonize([Extension("fleetops._yamltext", [twin()], optional=True)],
                            compiler_directives={"language_level": 3}, quiet=True))
