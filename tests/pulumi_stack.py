"""The fleet's stack under the real Pulumi engine (`make tools` builds the CLI and the Kubernetes provider).

The CLI built from source has no Python language host, so the program runs inline through the
Automation API (the same `stacks/__main__.py` file, run as `__main__`) and the policy pack as a
binary analyzer (`policies/pack/analyzer`). State lives in a local file backend; nothing reaches a
network service, and the provider plugin is installed into a private PULUMI_HOME.
"""

from __future__ import annotations

import os
import runpy
import subprocess
from pathlib import Path

from tests import servers

ROOT = Path(__file__).resolve().parent.parent
PROGRAM = ROOT / "stacks" / "__main__.py"
PACK = ROOT / "policies" / "pack" / "analyzer"


def provider_version() -> str:
    """The release the provider binary was built as: its folder in .tools (tools/build.sh)."""
    return servers.tool("pulumi-resource-kubernetes").resolve().parent.name.removeprefix("v")


def install_provider(home: Path) -> Path:
    home.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        [str(servers.tool("pulumi")), "plugin", "install", "resource", "kubernetes", provider_version(),
         "--file", str(servers.tool("pulumi-resource-kubernetes"))],
        env={**os.environ, **engine_env(home, home / "unused-state")}, check=True, capture_output=True, timeout=300,
    )
    return home


def engine_env(home: Path, state: Path, kubeconfig: Path | None = None) -> dict[str, str]:
    env = {
        "PULUMI_HOME": str(home),
        "PULUMI_BACKEND_URL": f"file://{state}",
        "PULUMI_CONFIG_PASSPHRASE": "fleetops-test",  # a local test stack's secrets provider, nothing more
        "PULUMI_SKIP_UPDATE_CHECK": "true",
        "PULUMI_DISABLE_AUTOMATIC_PLUGIN_ACQUISITION": "true",
        "PULUMI_IGNORE_AMBIENT_PLUGINS": "true",  # the installed provider, not a binary that happens to be on PATH
    }
    if kubeconfig is not None:
        env["KUBECONFIG"] = str(kubeconfig)
    # The Kubernetes provider writes a copy of the kubeconfig it is given (tokens and all) to a new
    # file in TMPDIR at every start, for Helm, and never removes it: here, it goes with the test's folders.
    tmp = home / "tmp"
    tmp.mkdir(parents=True, exist_ok=True)
    env["TMPDIR"] = str(tmp)
    return env


def stack(home: Path, workdir: Path, kubeconfig: Path, spec_file: Path, revision: str, name: str = "dev"):
    """A stack of the fleetops project whose program is stacks/__main__.py, configured as a Pulumi.<env>.yaml would."""
    from pulumi import automation as auto

    state = workdir / "state"
    state.mkdir(parents=True, exist_ok=True)
    env = engine_env(home, state, kubeconfig)
    os.environ.update({"KUBECONFIG": str(kubeconfig)})  # the inline program's providers read it in this process
    options = auto.LocalWorkspaceOptions(
        work_dir=str(workdir), pulumi_home=str(home), env_vars=env,
        pulumi_command=auto.PulumiCommand(root=str(servers.tool("pulumi").parent.parent), skip_version_check=True),
        project_settings=auto.ProjectSettings(name="fleetops", runtime="python"),
    )
    program = lambda: runpy.run_path(str(PROGRAM), run_name="__main__")  # noqa: E731
    result = auto.create_or_select_stack(stack_name=name, project_name="fleetops", program=program, opts=options)
    result.set_all_config({
        "fleetops:environment": auto.ConfigValue(name),
        "fleetops:specFile": auto.ConfigValue(str(spec_file)),
        "fleetops:revision": auto.ConfigValue(revision),
    })
    return result
