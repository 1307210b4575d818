"""What every member node of a pool or edge group carries (the pool contract: labels, taints) and
which live node belongs to which group by its declared match."""

import fnmatch

from fleetops import kube
from fleetops.kube import EDGE_GROUP_LABEL, MIG_CONFIG_LABEL, NVIDIA_CONFIG_LABEL, POOL_LABEL
from fleetops.spec.devices import is_spot
from fleetops.spec.fields import Group, Pool, Taint, plugin_kind


RESERVED_LABELS = {POOL_LABEL, EDGE_GROUP_LABEL, NVIDIA_CONFIG_LABEL, MIG_CONFIG_LABEL}
# Every node of a spot pool carries it, and so does its Kueue ResourceFlavor: Kueue admits to the pool,
# and the scheduler places on it, only pods that tolerate it, which the tenant's admission policy
# allows to preemptible classes alone (modules/tenant.py).
SPOT_TAINT = Taint(**kube.SPOT_TAINT)


def taints(group: Group) -> list[Taint]:
    """The taints every member node of a pool or edge group carries: its own, and a spot pool's."""
    return [*group.taints, SPOT_TAINT] if is_spot(group) else list(group.taints)


def node_labels(group: Group) -> dict[str, str]:
    """The labels every member node of a pool or edge group carries: the pool contract."""
    key = POOL_LABEL if isinstance(group, Pool) else EDGE_GROUP_LABEL
    labels = {**group.labels, key: group.name}  # the contract's own keys win (validation rejects them too)
    if plugin_kind(group.device.resource) == "nvidia":
        labels[NVIDIA_CONFIG_LABEL] = group.name
    if isinstance(group, Pool) and group.sharing.mode == "mig":
        labels[MIG_CONFIG_LABEL] = group.name
    return dict(sorted(labels.items()))


def matches_node(group: Group, name: str, labels: dict[str, str]) -> bool:
    """Whether a live node belongs to a group by its declared selectors."""
    match = group.match
    if match.name_pattern is None and not match.labels:
        return False
    if match.name_pattern is not None and not fnmatch.fnmatchcase(name, match.name_pattern):
        return False
    return all(labels.get(k) == v for k, v in match.labels.items())
