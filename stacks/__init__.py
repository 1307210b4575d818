"""The fleet's Pulumi program (`__main__.py`, the file `pulumi up` runs). A regular package, not a namespace one:
import-linter's graph then reads this tree's copy alone (`.importlinter`, `tests/project/test_layers.py`)."""
