"""`fleetops plan --prometheus` against the real Prometheus (`make tools`), holding 30
days of the metering series written with `promtool tsdb create-blocks-from openmetrics`: the plan's
utilisation and spend equal the averages this test computes from the series it wrote."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from fleetops import usage
from tests import servers
from tests.metering_month import BLOCK, SCRAPE, series
from tests.plan.test_plan import commit, edit, make_repo, plan
from tests.plan.test_plan_usage import VISION, VISION_RAISED

pytestmark = pytest.mark.real


def test_plan_reads_30_days_of_metering_from_a_real_prometheus(tmp_path: Path) -> None:
    now = int(time.time()) // SCRAPE * SCRAPE
    text, expected = series(now)
    repo = make_repo(tmp_path)
    edit(repo, VISION, VISION_RAISED)
    edit(repo, "nodes: 16", "nodes: 20")
    commit(repo, "vision: more H100")
    with servers.prometheus_server(tmp_path / "prometheus", text, max_block_duration=BLOCK) as prometheus:
        out = plan(repo, "--env", "prod", "--output", "json", "--prometheus", prometheus.url, "--usage-window", "30d")
    assert "Traceback" not in out.stderr, out.stderr
    result = json.loads(out.stdout)
    (tenant,), (pool,) = result["usage"]["tenants"], result["usage"]["pools"]
    assert result["usage"]["status"] == tenant["status"] == pool["status"] == usage.Status.measured.value
    # 48 H100 whole + 48 A100 units time-sliced 4 to a GPU: 60 physical devices behind vision's 96.
    assert tenant["guaranteed_devices"] == 60
    assert tenant["used_devices"] == pytest.approx(expected["vision_devices"], rel=0.005)
    assert tenant["utilisation"] == pytest.approx(expected["vision_devices"] / 60, rel=0.005)
    assert tenant["spend"] == pytest.approx(expected["vision_spend"], rel=0.005) and tenant["currency"] == "USD"
    assert pool["used_devices"] == pytest.approx(expected["pool_devices"], rel=0.005)
    assert pool["utilisation"] == pytest.approx(expected["pool_devices"] / 128, rel=0.005)
    assert {"usage.guarantee_raise_underused", "usage.pool_growth_idle"} <= {d["rule"] for d in result["decisions"] if d["status"] == "approval"}
