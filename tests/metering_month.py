"""A month of the metering recording rules' series as OpenMetrics, for the real Prometheus
(tests/servers.py::prometheus_server) behind the plan's utilisation test and the review's screenshot
(docs/review/journeys.py), with the averages they make, computed here."""

from __future__ import annotations

DAY = 86400
SCRAPE = 120  # seconds between samples, as a recording rule evaluated every 2 minutes would write them
BLOCK = "768h"  # one TSDB block for the whole month: promtool's 2h blocks take minutes to write
PRICE = {"h100-train": 2.9, "a100-infer": 1.4}  # environments/prod.yaml's prices per device-hour


def series(now: int) -> tuple[str, dict[str, float]]:
    """31 days of the metering recording rules' series up to `now`, and the averages over the last 30
    days they make, computed here: vision held 20 H100 for 20 days then 5 (15 on average), nothing on
    a100-infer for 15 days then 7.2 (3.6: a hole is nothing held); llm-pretrain 40 H100 throughout."""
    start = now - 31 * DAY
    window = now - 30 * DAY

    def vision_h100(t: int) -> float:
        return 20.0 if t < now - 10 * DAY else 5.0

    def vision_a100(t: int) -> float | None:
        return None if t < now - 15 * DAY else 7.2

    tracks = {("h100-train", "vision"): vision_h100, ("a100-infer", "vision"): vision_a100,
              ("h100-train", "llm-pretrain"): lambda t: 40.0}
    lines = ["# TYPE fleetops:tenant_devices:physical gauge"]
    spend_lines = ["# TYPE fleetops:tenant_spend:per_hour gauge"]
    for (pool, tenant), held in tracks.items():
        for t in range(start, now + 1, SCRAPE):
            if (value := held(t)) is None:
                continue
            labels = f'cluster="center-bj",pool="{pool}",tenant="{tenant}",resource="nvidia.com/gpu"'
            lines.append(f"fleetops:tenant_devices:physical{{{labels}}} {value} {t}")
            spend_lines.append(f'fleetops:tenant_spend:per_hour{{cluster="center-bj",pool="{pool}",tenant="{tenant}",currency="USD"}} '
                               f"{value * PRICE[pool]} {t}")
    # The independent figures: averages of the piecewise constant tracks over the window, a hole as zero.
    h100, a100 = (20 * 20 + 5 * 10) / 30, 7.2 * 15 / 30
    expected = {"vision_devices": h100 + a100, "pool_devices": h100 + 40.0,
                "vision_spend": (h100 * PRICE["h100-train"] + a100 * PRICE["a100-infer"]) * 30 * 24}
    assert window > start
    return "\n".join(lines + spend_lines) + "\n# EOF\n", expected
