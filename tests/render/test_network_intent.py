"""The network intent (fleetops.spec.reach) against what render writes, read by an independent
NetworkPolicy analyzer (tests/netpol.py); the dataplane itself is tests/render/test_real_network.py."""

from __future__ import annotations

import datetime as dt

import pytest

from fleetops import policy, render, spec
from fleetops.envelope import DecisionStatus
from tests.helpers import ROOT
from tests import netmatrix
from tests.netpol import Host, Pod, Policies


def test_a_tenant_another_lets_in_can_reach_it() -> None:
    # prod: speech lists allow_from_tenants: [vision]. Both namespaces deny by default, so vision's
    # egress must be opened toward speech as speech's ingress is opened to vision, or nothing flows.
    state = render.render(ROOT / "environments" / "prod.yaml")
    policies = Policies(state.clusters["center-bj"], {})
    assert policies.allows(Pod("vision"), Pod("speech"), 8080)
    assert not policies.allows(Pod("speech"), Pod("vision"), 8080)  # one way: vision does not let speech in
    assert not policies.allows(Pod("vision"), Pod("llm-pretrain"), 8080)


def test_the_gate_refuses_a_declared_pair_opened_at_one_end_only() -> None:
    # What the program rendered before: speech's ingress opened to vision, vision's egress never
    # opened toward speech. The gate read the allow lists as the same one-sided model and passed it.
    path = ROOT / "environments" / "prod.yaml"
    env, state = spec.load_environment(path), render.render(path, revision="test")
    state.clusters["center-bj"] = [m for m in state.clusters["center-bj"]
                                   if (m["kind"], m["metadata"].get("name")) != ("NetworkPolicy", "allow-to-tenants")]
    verdict = policy.evaluate(env, state, today=dt.date(2026, 12, 2))
    assert [d.msg for d in verdict.of(DecisionStatus.DENY)] == [
        "center-bj: tenant vision must be open out to tenant speech on every port, but no NetworkPolicy of its namespace "
        "opens that egress: the traffic can never flow"]


def analyzed(party: netmatrix.Party) -> Pod | Host:
    return Pod(party.namespace, party.labels) if party.namespace is not None else Host(party.address)


@pytest.mark.parametrize("name", ["dev", "staging", "prod"])
def test_the_intent_is_what_the_rendered_policies_allow(name: str) -> None:
    # Every cell of the probe matrix the dataplane test runs: the expectation (spec.reach) against
    # the rendered NetworkPolicies of the cluster as the independent analyzer reads them.
    path = ROOT / "environments" / f"{name}.yaml"
    env, state = spec.load_environment(path), render.render(path, revision="test")
    disagree, counted = [], 0
    for cluster in env.clusters:
        parties = netmatrix.parties(env, cluster)
        policies = Policies(state.clusters[cluster.name], {})
        for cell in netmatrix.cells(env, cluster, parties):
            counted += 1
            seen = policies.allows(analyzed(cell.source), analyzed(cell.destination), cell.port.number, str(cell.port.protocol))
            if seen != cell.expected:
                disagree.append(f"{cluster.name}: {cell.source.label} -> {cell.destination.label} :{cell.port} expected {cell.expected}")
    assert counted > 50 and not disagree, disagree
