"""Fixtures shared by the test modules."""

from __future__ import annotations

import pytest

from fleetops import render
from tests.helpers import render_env, small_env


@pytest.fixture(scope="module")
def small_state(tmp_path_factory: pytest.TempPathFactory) -> render.DesiredState:
    return render_env(tmp_path_factory.mktemp("small"), small_env())
