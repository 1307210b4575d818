"""Schema validation of rendered objects, the way the API server would judge them with strict field validation.

Built-in kinds are checked by `kubernetes-validate` against the schemas of a current Kubernetes
release; custom resources against the openAPIV3Schema of their upstream CRD (`../shared/crds/`
by default, or `FLEETOPS_CRD_DIR`). Unknown fields are errors in both, as with
`kubectl apply --validate=strict`: a typo must not be silently pruned by the server.
"""

from __future__ import annotations

import copy
import functools
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import yaml

KUBERNETES_VERSION = "1.37.0"
ROOT = Path(__file__).resolve().parent.parent


def crd_dir() -> Path:
    """`FLEETOPS_CRD_DIR`, else the nearest `shared/crds` above the checkout.

    The checkout may be the main clone (`/work/main` -> `/work/shared/crds`) or a Git worktree one
    level deeper (`/work/wt/NAME`), so a fixed `../shared/crds` finds the schemas in only one of them.
    """
    if "FLEETOPS_CRD_DIR" in os.environ:
        return Path(os.environ["FLEETOPS_CRD_DIR"])
    for parent in ROOT.parents:
        if (parent / "shared" / "crds").is_dir():
            return parent / "shared" / "crds"
    return ROOT.parent / "shared" / "crds"


@dataclass(frozen=True)
class SchemaProblem:
    cluster: str
    kind: str
    name: str
    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.cluster}: {self.kind} {self.name}: {self.path or '(root)'}: {self.message}"


def _strict(schema: Any) -> Any:
    """Close every object schema that lists its properties, unless it keeps unknown fields on purpose."""
    if isinstance(schema, list):
        return [_strict(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: _strict(v) for k, v in schema.items()}
    if "properties" in out and "additionalProperties" not in out and not out.get("x-kubernetes-preserve-unknown-fields"):
        out["additionalProperties"] = False
    if out.get("x-kubernetes-int-or-string"):
        out.pop("type", None)
        out.setdefault("anyOf", [{"type": "integer"}, {"type": "string"}])
    return out


@functools.cache
def crd_schemas(directory: Path) -> dict[tuple[str, str], dict[str, Any]]:
    """(apiVersion, kind) -> strict JSON schema, for every served version of every CRD in the folder."""
    schemas: dict[tuple[str, str], dict[str, Any]] = {}
    for path in sorted(directory.glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if not doc or doc.get("kind") != "CustomResourceDefinition":
                continue
            group, kind = doc["spec"]["group"], doc["spec"]["names"]["kind"]
            for version in doc["spec"]["versions"]:
                if version.get("served", True) and "schema" in version:
                    schema = _strict(copy.deepcopy(version["schema"]["openAPIV3Schema"]))
                    # metadata is validated by the server's ObjectMeta rules, not the CRD.
                    schema.setdefault("properties", {})["metadata"] = {"type": "object"}
                    schemas[(f"{group}/{version['name']}", kind)] = schema
    return schemas


def _crd_problems(cluster: str, manifest: dict[str, Any], schema: dict[str, Any]) -> list[SchemaProblem]:
    validator = jsonschema.Draft7Validator(schema)
    return [
        SchemaProblem(cluster, manifest["kind"], manifest["metadata"]["name"], ".".join(str(p) for p in err.absolute_path), err.message)
        for err in sorted(validator.iter_errors(manifest), key=lambda e: list(map(str, e.absolute_path)))
    ]


def validate_objects(objects: Iterable[tuple[str, dict[str, Any]]], crds: Path | None = None) -> list[SchemaProblem]:
    """Every problem of every (cluster, manifest); an empty list means all objects are valid."""
    schemas = crd_schemas(crds or crd_dir())
    problems: list[SchemaProblem] = []
    for cluster, manifest in objects:
        key = (manifest["apiVersion"], manifest["kind"])
        name = manifest.get("metadata", {}).get("name", "?")
        if "/" in key[0] and key in schemas:
            problems += _crd_problems(cluster, manifest, schemas[key])
            continue
        try:
            kubernetes_validate.validate(manifest, KUBERNETES_VERSION, strict=True)
        except kubernetes_validate.ValidationError as err:
            path = ".".join(str(p) for p in err.path)
            problems.append(SchemaProblem(cluster, key[1], name, path, err.message))
        except kubernetes_validate.SchemaNotFoundError:
            problems.append(SchemaProblem(cluster, key[1], name, "", f"no schema for {key[0]} {key[1]} (no built-in kind, no CRD in {crds or crd_dir()})"))
    return problems
