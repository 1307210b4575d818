"""The fleet's Pulumi program. `pulumi up -s prod` deploys it; `fleetops render` runs the same file under mocks.

Config (stacks/Pulumi.<stack>.yaml):
  fleetops:environment  environment name (default: the stack name) -> environments/<name>.yaml
  fleetops:specFile     explicit path to the environment file (render sets it)
  fleetops:revision     Git revision deployed, exported as the stack output `revision` (default: the repository's HEAD)
"""

from pathlib import Path

import pulumi

from fleetops import git, spec
from modules.program import deploy

ROOT = Path(__file__).resolve().parent.parent

config = pulumi.Config("fleetops")
name = config.get("environment") or pulumi.get_stack()
spec_file = config.get("specFile") or str(spec.environment_path(name, ROOT / spec.ENVIRONMENTS))
revision = config.get("revision") or git.revision(ROOT)

environment = spec.load_environment(spec_file)
deploy(environment)

pulumi.export("environment", environment.environment)
pulumi.export("revision", revision)
pulumi.export("clusters", [c.name for c in environment.clusters])
