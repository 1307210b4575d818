"""A month's statements for 1,000 tenants from a real Prometheus: queries, wall and CPU time, peak memory.

The generated large fleet (benchmarks/generate.py, scale 1: 1,000 tenants), one in ten of them
prepaid with a top-up before the month. Prometheus (`make tools`' 3.5.3, as in the tests)
holds `fleetops:tenant_devices:physical` and `fleetops:tenant_spend:per_hour` (the devices at the pool's
price) every 6 hours for each tenant on one of its pools, and each pool's `fleetops:pool_idle_devices:physical`
and `fleetops:pool_idle_spend:per_hour`, from a week before the month to its end, backfilled with `promtool tsdb create-blocks-from openmetrics`, and answers
a sample for 6 hours (--query.lookback-delta): the server's work for the statements is the same as over
minute samples (the query steps every minute whatever the samples), and promtool writes a block
per 2 hours of history, so hourly samples for 1,000 tenants took over 10 minutes to import on the
shared 2-core machine. Not in `make bench`: it needs that server (`make tools`).

    .venv/bin/python benchmarks/metering_bench.py [--tenants-scale 1] [--keep DIR]
"""

from __future__ import annotations

import argparse
import datetime
import random
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.generate import synthetic_environment  # noqa: E402
from benchmarks.goals import Goal, report  # noqa: E402
from fleetops import spec  # noqa: E402
from fleetops.metering import statements  # noqa: E402
from fleetops.prometheus import Prometheus  # noqa: E402
from fleetops.metrics import DEVICES, IDLE_DEVICES, IDLE_SPEND, SPEND  # noqa: E402
from tests.servers import prometheus_server  # noqa: E402

PERIOD = "2026-11"
START = int(datetime.datetime(2026, 10, 25, tzinfo=datetime.timezone.utc).timestamp())
END = int(datetime.datetime(2026, 12, 1, tzinfo=datetime.timezone.utc).timestamp())
SAMPLE_SECONDS = 6 * 3600
QUERIES = 7  # device-hours, spend, idle device-hours, idle spend and the revisions applied for the month, device-hours and spend of the
# prepaid tenants' use before it: the bound, whatever the tenants
WALL_SECONDS = 30.0
PEAK_MIB = 256.0


def environment(scale: float, directory: Path) -> spec.Environment:
    raw = synthetic_environment(scale)
    for i, tenant in enumerate(raw["tenants"]):
        if i % 10 == 0:
            tenant["billing"] = {"mode": "prepaid", "top_ups": [{"date": datetime.date(2026, 10, 1), "amount": 50000}]}
    path = directory / "large.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return spec.load_environment(path)


def openmetrics(env: spec.Environment) -> tuple[str, int]:
    """Device and spend series for each tenant on one of its pools, and idle device and spend series for every pool, a sample
    every SAMPLE_SECONDS; the number of series."""
    rng = random.Random(22)
    clusters = {c.name: c for c in env.clusters}
    devices, spend, count = [f"# TYPE {DEVICES} gauge"], [f"# TYPE {SPEND} gauge"], 0
    for tenant in env.tenants:
        groups = spec.eligible_groups(tenant, [clusters[n] for n in tenant.clusters])[:1]
        for group in groups:
            cluster = next(c for c in tenant.clusters if any(g is group for g in (*clusters[c].pools, *clusters[c].edge_groups)))
            where = f'cluster="{cluster}",pool="{group.name}",tenant="{tenant.name}"'
            held, price = rng.randint(1, 8), spec.device_hour_price(env, group)
            for t in range(START, END + 1, SAMPLE_SECONDS):
                now = held if rng.random() < 0.6 else 0
                devices.append(f'{DEVICES}{{{where},resource="{group.device.resource}"}} {now} {t}')
                spend.append(f'{SPEND}{{{where},currency="{env.budget.currency}"}} {now * price} {t}')
            count += 2
    idle, idle_spend = [f"# TYPE {IDLE_DEVICES} gauge"], [f"# TYPE {IDLE_SPEND} gauge"]
    for cluster in env.clusters:
        for group in (*cluster.pools, *cluster.edge_groups):
            where, price = f'cluster="{cluster.name}",pool="{group.name}"', spec.device_hour_price(env, group)
            for t in range(START, END + 1, SAMPLE_SECONDS):
                now = rng.randint(0, spec.physical_devices(group))
                idle.append(f"{IDLE_DEVICES}{{{where}}} {now} {t}")
                idle_spend.append(f'{IDLE_SPEND}{{{where},currency="{env.budget.currency}"}} {now * price} {t}')
            count += 2
    return "\n".join(devices + spend + idle + idle_spend) + "\n# EOF\n", count


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tenants-scale", type=float, default=1.0, help="scale of the generated fleet (1: 1,000 tenants)")
    parser.add_argument("--keep", type=Path, help="keep the server's folder here")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="metering-bench-") as tmp:
        directory = args.keep or Path(tmp)
        env = environment(args.tenants_scale, directory)
        text, series = openmetrics(env)
        began = time.perf_counter()
        with prometheus_server(directory / "prometheus", text, lookback=f"{SAMPLE_SECONDS}s") as server:
            loaded = time.perf_counter() - began
            client = Prometheus(server.url)
            tracemalloc.start()
            wall, cpu = time.perf_counter(), time.process_time()
            result = statements.build(env, client, statements.Period.parse(PERIOD))
            wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
            peak = tracemalloc.get_traced_memory()[1] / 2**20
            tracemalloc.stop()
    lines = sum(len(s.lines) for s in result.statements)
    print(f"{len(env.tenants)} tenants ({sum(s.balance is not None for s in result.statements)} prepaid), {series} series, "
          f"{lines} statement lines; blocks written and server ready in {loaded:.1f} s")
    print(f"statements for {PERIOD}: {client.queries} range queries, {wall:.2f} s wall, {cpu:.2f} s CPU (client), "
          f"peak {peak:.1f} MiB allocated (client)")
    return report("metering", [
        Goal("range queries for a month's statements", client.queries, QUERIES),
        Goal("statements wall time", wall, WALL_SECONDS, " s"),
        Goal("statements peak memory (client)", peak, PEAK_MIB, " MiB"),
    ])


if __name__ == "__main__":
    sys.exit(main())
