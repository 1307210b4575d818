"""The fleet's stack under the real Pulumi engine, as `fleetops deploy` opens it (fleetops.deploy), with
the CLI and Kubernetes provider `make tools` built: fixtures only."""

from __future__ import annotations

from pathlib import Path

from fleetops import deploy
from tests import servers

ROOT = Path(__file__).resolve().parent.parent
PACK = ROOT / deploy.PACK


def engine(state: Path, kubeconfig: Path) -> deploy.PulumiEngine:
    """A state folder of its own (backend, plugins, stack settings), a test passphrase, the built binaries."""
    passphrase = state.parent / f"{state.name}-passphrase"
    passphrase.write_text("fleetops-test\n")  # a local test stack's secrets provider, nothing more
    return deploy.prepare(ROOT, state, kubeconfig=kubeconfig, passphrase_file=passphrase,
                          pulumi=servers.tool("pulumi"), provider=servers.tool("pulumi-resource-kubernetes"))


def stack(state: Path, repo: Path, kubeconfig: Path, name: str = "dev"):
    """Stack `name` of the fleetops project whose program is `repo`'s stacks/__main__.py."""
    return deploy.open_stack(engine(state, kubeconfig), repo, name, name)
