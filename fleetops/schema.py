"""Schema validation of rendered objects, the way the API server would judge them with strict field validation.

Built-in kinds are checked by `kubernetes-validate` against the schemas of a current Kubernetes
release; custom resources against the openAPIV3Schema of their upstream CRD (shipped unedited in
`fleetops/crds/`, or `FLEETOPS_CRD_DIR`). Unknown fields are errors in both, as with
`kubectl apply --validate=strict`: a typo must not be silently pruned by the server.
"""

from __future__ import annotations

import copy
import functools
import os
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import yaml
from kubernetes_validate import utils as k8s_utils
from referencing import Registry, Resource

KUBERNETES_VERSION = "1.37.0"
ROOT = Path(__file__).resolve().parent.parent


def crd_dir() -> Path:
    """`FLEETOPS_CRD_DIR`, else the upstream CRDs shipped in `fleetops/crds/`.

    The files are byte-for-byte the upstream ones listed (with blob ids) in `fleetops/crds/SOURCES.md`;
    shipping them keeps validation the same on every checkout, wherever it lies.
    """
    return Path(os.environ.get("FLEETOPS_CRD_DIR") or Path(__file__).resolve().parent / "crds")


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


@functools.cache
def _crd_validator(directory: Path, key: tuple[str, str]) -> jsonschema.Draft7Validator:
    return jsonschema.Draft7Validator(crd_schemas(directory)[key])


@functools.cache
def _core_validator(api_version: str, kind: str) -> jsonschema.Draft202012Validator:
    """The validator `kubernetes_validate.validate(strict=True)` builds, built once per kind.

    The library reads two JSON files and compiles the schema on every call (~15 ms an object), which
    is most of the time to validate a fleet of 10,000 objects; the files do not change in a process.
    """
    group_version = re.sub(r"^([^./]*)(?:\.[^/]*)?/", r"\1-", api_version)  # rbac.authorization.k8s.io/v1 -> rbac-v1
    folder = f"kubernetes-json-schema/v{KUBERNETES_VERSION}-local-strict"
    try:
        schema = k8s_utils.schema_contents(f"{folder}/{kind.lower()}-{group_version}.json", KUBERNETES_VERSION)
    except FileNotFoundError:
        raise kubernetes_validate.SchemaNotFoundError(kind=kind, version=KUBERNETES_VERSION, api_version=api_version) from None
    definitions = k8s_utils.schema_contents(f"{folder}/_definitions.json", KUBERNETES_VERSION)
    registry = Resource.from_contents(definitions) @ (Resource.from_contents(schema) @ Registry())
    return jsonschema.Draft202012Validator(schema, registry=registry)


def _problems(cluster: str, manifest: dict[str, Any], validator: jsonschema.protocols.Validator) -> list[SchemaProblem]:
    return [
        SchemaProblem(cluster, manifest["kind"], manifest["metadata"]["name"], ".".join(str(p) for p in err.absolute_path), err.message)
        for err in sorted(validator.iter_errors(manifest), key=lambda e: list(map(str, e.absolute_path)))
    ]


def validate_objects(objects: Iterable[tuple[str, dict[str, Any]]], crds: Path | None = None) -> list[SchemaProblem]:
    """Every problem of every (cluster, manifest); an empty list means all objects are valid."""
    directory = crds or crd_dir()
    schemas = crd_schemas(directory)
    problems: list[SchemaProblem] = []
    for cluster, manifest in objects:
        key = (manifest["apiVersion"], manifest["kind"])
        name = manifest.get("metadata", {}).get("name", "?")
        try:
            validator = _crd_validator(directory, key) if "/" in key[0] and key in schemas else _core_validator(*key)
        except kubernetes_validate.SchemaNotFoundError:
            problems.append(SchemaProblem(cluster, key[1], name, "", f"no schema for {key[0]} {key[1]} (no built-in kind, no CRD in {directory})"))
            continue
        problems += _problems(cluster, manifest, validator)
    return problems
