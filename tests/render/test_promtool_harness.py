"""The promtool harness (tests/promtool.py) reports what promtool reports: a broken rule, an alert
that does not fire as a case expects. Without this, a harness that swallowed promtool's exit code
would make every rule test pass."""

from __future__ import annotations

import pytest

from tests import promtool

GROUP = {
    "name": "g",
    "rules": [{"alert": "Up0", "expr": "up == 0", "for": "5m", "labels": {"severity": "warning"}}],
}


def _case(eval_time: str, alerts: list[dict]) -> dict:
    return {
        "tests": [
            {
                "interval": "1m",
                "input_series": [{"series": 'up{job="a"}', "values": "0x10"}],
                "alert_rule_test": [{"eval_time": eval_time, "alertname": "Up0", "exp_alerts": alerts}],
            }
        ]
    }


def test_check_rules_rejects_a_bad_expression() -> None:
    promtool.check_rules([GROUP])
    with pytest.raises(promtool.PromtoolFailed, match="parse error|could not parse|unexpected"):
        promtool.check_rules([{"name": "g", "rules": [{"alert": "Bad", "expr": "sum by (x"}]}])


def test_test_rules_passes_a_true_case_and_fails_a_false_one() -> None:
    fired = [{"exp_labels": {"severity": "warning", "job": "a"}}]
    promtool.test_rules([GROUP], _case("6m", fired))
    promtool.test_rules([GROUP], _case("3m", []))
    with pytest.raises(promtool.PromtoolFailed, match="Up0"):
        promtool.test_rules([GROUP], _case("3m", fired))


def test_prometheus_rule_objects_are_read_for_their_groups() -> None:
    rule = {"apiVersion": "monitoring.coreos.com/v1", "kind": "PrometheusRule", "spec": {"groups": [GROUP]}}
    promtool.test_rules([rule], _case("6m", [{"exp_labels": {"severity": "warning", "job": "a"}}]))


def test_each_prometheus_rule_is_checked_as_its_own_file() -> None:
    """prometheus-operator loads each PrometheusRule as one file: the same group name in two objects is fine,
    twice in one object is not."""
    rule = {"kind": "PrometheusRule", "spec": {"groups": [GROUP]}}
    promtool.check_rules([rule, rule])
    with pytest.raises(promtool.PromtoolFailed, match="repeated"):
        promtool.check_rules([{"kind": "PrometheusRule", "spec": {"groups": [GROUP, GROUP]}}])
