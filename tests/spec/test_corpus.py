"""Malformed environment files: one line per problem at the right place, exit 2, nothing written, no traceback.

Each file in tests/spec/corpus/ opens with one `# expect[:LINE]: FRAGMENT` comment per problem it has, in
the order they are reported.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.command import run
from tests.helpers import ROOT

CORPUS = ROOT / "tests" / "spec" / "corpus"
EXPECT = re.compile(r"^# expect(?::(\d+))?: (.*)$")


def expectations(path: Path) -> list[tuple[int | None, str]]:
    out = []
    for line in path.read_bytes().decode("utf-8", errors="replace").splitlines():
        match = EXPECT.match(line)
        if not match:
            break
        out.append((int(match[1]) if match[1] else None, match[2]))
    return out


def assert_problems(stderr: str, file: str, expected: list[tuple[int | None, str]]) -> None:
    lines = stderr.splitlines()
    assert len(lines) == len(expected), stderr
    for line, (number, fragment) in zip(lines, expected):
        assert re.match(rf"^{re.escape(file)}:\d+:\d+: ", line), line
        assert fragment in line, line
        if number is not None:
            assert line.startswith(f"{file}:{number}:"), line


def assert_refused(env: str, directory: Path, file: str, expected: list[tuple[int | None, str]], tmp_path: Path) -> None:
    out_dir = tmp_path / "out"
    for args in (["validate"], ["render", "-o", out_dir]):
        done = run(*args, "--env", env, "--environments", directory)
        assert done.returncode == 2, (args, done.stderr)
        assert "Traceback" not in done.stdout + done.stderr
        assert done.stdout == ""
        assert_problems(done.stderr, file, expected)
    assert not out_dir.exists()


def test_the_corpus_covers_at_least_25_malformed_files() -> None:
    files = sorted(CORPUS.glob("*.yaml"))
    assert len(files) >= 25
    assert all(expectations(f) for f in files), [f.name for f in files if not expectations(f)]


@pytest.mark.parametrize("path", sorted(CORPUS.glob("*.yaml")), ids=lambda p: p.stem)
def test_malformed_environment_is_refused_with_one_line_per_problem(path: Path, tmp_path: Path) -> None:
    assert_refused(path.stem, CORPUS.relative_to(ROOT), f"tests/spec/corpus/{path.name}", expectations(path), tmp_path)


def test_a_file_over_8_mib_is_refused_before_parsing(tmp_path: Path) -> None:
    envs = tmp_path / "envs"
    envs.mkdir()
    huge = envs / "huge.yaml"
    huge.write_text("environment: huge\n" + "# padding\n" * (900 * 1024))
    size = huge.stat().st_size
    assert size > 8 * 1024 * 1024
    expected = [(1, f"file is {size} bytes, more than the 8388608 byte limit for an environment")]
    assert_refused("huge", envs, str(huge), expected, tmp_path)
