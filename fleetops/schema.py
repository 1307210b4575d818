"""Schema validation of rendered objects, the way the API server would judge them with strict field validation.

Built-in kinds are checked by `kubernetes-validate` against the schemas of a current Kubernetes
release; custom resources against the openAPIV3Schema of their upstream CRD (shipped unedited in
`fleetops/crds/`, or `FLEETOPS_CRD_DIR`). Unknown fields are errors in both, as with
`kubectl apply --validate=strict`: a typo must not be silently pruned by the server.

`python -m fleetops.schema` (`make generated`) writes the strict schemas of the shipped CRDs to
`fleetops/crds/strict-schemas.json`, with the digest of the YAML they came from; it is read only
while that digest is the files'.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import json
import os
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jsonschema_rs
import orjson
import yaml

from fleetops import spec
from fleetops.errors import Problem
from fleetops.kube import DNS_LABEL, DNS_SUBDOMAIN, LABEL_KEY, LABEL_VALUE

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
    if isinstance(out.get("pattern"), str) and "(?" in out["pattern"]:
        out[_RE2_PATTERN] = out.pop("pattern")
    return out


_RE2_PATTERN = "x-fleetops-re2-pattern"


class _Re2Pattern:
    """A CRD's `pattern` with a group or flag ECMA 262 lacks, as the API server's Go RE2 reads it
    (prometheus-operator: `^(?i)(abort|warn)?$`). JSON Schema names ECMA 262, so jsonschema-rs refuses
    such a schema; Python's `re` reads these constructs as RE2 does."""

    def __init__(self, parent_schema: dict[str, Any], value: str, schema_path: list[str | int]) -> None:
        # RE2 takes flags anywhere, Python only first: flags after leading anchors move in front of
        # them. RE2's `$` is the end of the text; Python's also matches before a final newline.
        lead = re.match(r"(\^*)\(\?([a-z]+)\)", value)
        python = f"(?{lead[2]}){lead[1]}{value[lead.end():]}" if lead else value
        self.pattern, self.regex = value, re.compile(re.sub(r"(?<!\\)\$(?![^\[]*\])", r"\\Z", python))

    def validate(self, instance: Any) -> None:
        if isinstance(instance, str) and not self.regex.search(instance):
            raise ValueError(f"{json.dumps(instance)} does not match {json.dumps(self.pattern)}")


Schemas = dict[tuple[str, str], dict[str, Any]]

SHIPPED_CRDS = Path(__file__).resolve().parent / "crds"
# The strict schemas of the shipped CRDs as JSON: PyYAML's constructor took 45-80 ms of every
# `validate` to read the 400 kB of YAML, json 1.5 ms (benchmarks/README.md, "Plan and validate").
STRICT_SCHEMAS = SHIPPED_CRDS / "strict-schemas.json"
# No CRD is larger than the API server takes in one request (3 MiB): a larger file is no CRD.
_CRD_BYTES = 3 * 1024 * 1024


def _read_crds(directory: Path) -> list[tuple[str, bytes]]:
    """(file name, bytes) of every CRD file of the folder, in name order; each read bounded."""
    return [(path.name, spec.read_bounded(path, _CRD_BYTES, str(path), "a CRD")) for path in sorted(directory.glob("*.yaml"))]


def _digest(files: list[tuple[str, bytes]]) -> str:
    """What the schemas are made of: the files' names (their order decides which of two same kinds
    counts) and contents."""
    digest = hashlib.sha256()
    for name, data in files:
        digest.update(f"{name}\0{len(data)}\0".encode())
        digest.update(data)
    return f"sha256:{digest.hexdigest()}"


def _schemas_of_yaml(files: list[tuple[str, bytes]], directory: Path) -> Schemas:
    schemas: Schemas = {}
    for name, data in files:
        file = str(directory / name)
        with spec.yaml_errors(file):
            docs = list(yaml.load_all(data, Loader=spec.YAML_LOADER))
        for doc in docs:
            if not isinstance(doc, dict) or doc.get("kind") != "CustomResourceDefinition":
                continue
            try:
                group, kind = doc["spec"]["group"], doc["spec"]["names"]["kind"]
                versions = [(v["name"], dict(v["schema"]["openAPIV3Schema"])) for v in doc["spec"]["versions"] if v.get("served", True) and "schema" in v]
            except (KeyError, TypeError, ValueError, AttributeError) as exc:
                raise spec.SpecError([Problem(f"a CustomResourceDefinition without spec.group, spec.names.kind or spec.versions[].name and schema.openAPIV3Schema ({type(exc).__name__}: {exc})", file, 1, 1)]) from None
            for version, openapi in versions:
                # _strict builds every mapping and list anew: the document is never changed (a deep copy
                # first was a third of this function's time, 18 ms of every validate)
                schema = _strict(openapi)
                # metadata is validated by the server's ObjectMeta rules, not the CRD.
                schema.setdefault("properties", {})["metadata"] = {"type": "object"}
                schemas[(f"{group}/{version}", kind)] = schema
    return schemas


def strict_schemas_json(directory: Path = SHIPPED_CRDS) -> str:
    """The text of `STRICT_SCHEMAS` for the CRDs of `directory`."""
    files = _read_crds(directory)
    schemas = [{"apiVersion": api_version, "kind": kind, "schema": schema} for (api_version, kind), schema in _schemas_of_yaml(files, directory).items()]
    return json.dumps({"digest": _digest(files), "schemas": schemas}, separators=(",", ":")) + "\n"


@functools.cache
def crd_schemas(directory: Path) -> Schemas:
    """(apiVersion, kind) -> strict JSON schema, for every served version of every CRD in the folder.

    From `STRICT_SCHEMAS` when the folder's files are those it was written from (any folder: the
    digest is of the contents), else from the YAML: a CRD changed and not written again, or the
    CRDs of `FLEETOPS_CRD_DIR`, are read as they are."""
    files = _read_crds(directory)
    shipped = json.loads(STRICT_SCHEMAS.read_bytes())
    if shipped["digest"] == _digest(files):
        return {(s["apiVersion"], s["kind"]): s["schema"] for s in shipped["schemas"]}
    return _schemas_of_yaml(files, directory)


# Validators are jsonschema-rs (compiled): the large fleet's 15,000 objects take 0.1 s where the
# pure-Python jsonschema took 5 s, and validation ran on every render, check and reconcile pass.
# Formats are annotations, as they were: the API server checks its own formats, not these schemas.


@functools.cache
def _crd_validator(directory: Path, key: tuple[str, str]) -> jsonschema_rs.Draft7Validator:
    return jsonschema_rs.Draft7Validator(crd_schemas(directory)[key], validate_formats=False, keywords={_RE2_PATTERN: _Re2Pattern})


class SchemaNotFound(LookupError):
    """No schema of kubernetes-validate's release names this apiVersion and kind."""


_FOLDER = f"kubernetes-json-schema/v{KUBERNETES_VERSION}-local-strict"


@functools.cache
def _schema_folder() -> Path:
    """The schemas kubernetes-validate ships, found without importing it: its `__init__` imports
    jsonschema and its referencing stack (a fifth of `validate`'s start), of which nothing is used here."""
    package = importlib.util.find_spec("kubernetes_validate")
    if package is None or not package.submodule_search_locations:
        raise ModuleNotFoundError("kubernetes-validate is not installed")
    return Path(package.submodule_search_locations[0]) / _FOLDER


def _schema_contents(name: str) -> Any:
    """One of its schema files, as its `utils.schema_contents` reads it."""
    return json.loads((_schema_folder() / name).read_bytes())


@functools.cache
def _definitions() -> jsonschema_rs.Registry:
    definitions = _schema_contents("_definitions.json")
    return jsonschema_rs.Registry([(definitions["$id"], definitions)])


@functools.cache
def _core_validator(api_version: str, kind: str) -> jsonschema_rs.Draft202012Validator:
    """The schema `kubernetes_validate.validate(strict=True)` checks against, compiled once per kind.

    The library reads two JSON files and compiles the schema on every call (~15 ms an object); the
    files do not change in a process.
    """
    group_version = re.sub(r"^([^./]*)(?:\.[^/]*)?/", r"\1-", api_version)  # rbac.authorization.k8s.io/v1 -> rbac-v1
    try:
        schema = _schema_contents(f"{kind.lower()}-{group_version}.json")
    except FileNotFoundError:
        raise SchemaNotFound(f"{api_version} {kind}") from None
    return jsonschema_rs.Draft202012Validator(schema, registry=_definitions(), validate_formats=False)


# A message quotes the whole value it refuses: a list of 1,000 flavors made each line 100 kB.
_MESSAGE_ENDS = 120


def _short(message: str) -> str:
    """The start and the end of a long message (what was refused, and why), one line."""
    message = message.replace("\n", " ")
    if len(message) <= 2 * _MESSAGE_ENDS + 20:
        return message
    return f"{message[:_MESSAGE_ENDS]} … ({len(message) - 2 * _MESSAGE_ENDS:,} characters) … {message[-_MESSAGE_ENDS:]}"


def _problems(cluster: str, manifest: dict[str, Any], validator: jsonschema_rs.Validator) -> list[SchemaProblem]:
    if validator.is_valid(manifest):
        return []
    return [
        SchemaProblem(cluster, manifest["kind"], manifest["metadata"]["name"], ".".join(str(p) for p in err.instance_path), _short(err.message))
        for err in sorted(validator.iter_errors(manifest), key=lambda e: list(map(str, e.instance_path)))
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
        except SchemaNotFound:
            problems.append(SchemaProblem(cluster, key[1], name, "", f"no schema for {key[0]} {key[1]} (no built-in kind, no CRD in {directory})"))
            continue
        except (jsonschema_rs.ValidationError, jsonschema_rs.ReferencingError) as exc:  # a CRD of FLEETOPS_CRD_DIR that is no schema
            problems.append(SchemaProblem(cluster, key[1], name, "", f"the schema of {key[0]} {key[1]} in {directory} is not usable: {str(exc).splitlines()[0]}"))
            continue
        problems += _problems(cluster, manifest, validator)
    return problems


# What the API server refuses that no schema says, whatever program rendered the object.
MAX_OBJECT_BYTES = 1536 * 1024  # etcd's --max-request-bytes default: larger, "etcdserver: request is too large"
MAX_DATA_BYTES = 1024 * 1024  # a ConfigMap's or Secret's data and binaryData together (corevalidation.MaxSecretSize)
MAX_ANNOTATION_BYTES = 256 * 1024  # metadata.annotations, keys and values (TotalAnnotationSizeLimitB)
DNS_LABEL_KINDS = frozenset({"Namespace", "Service"})  # named by a DNS-1123 label (a Service by a DNS-1035 one, stricter still)
# A job names its LocalQueue in the label kueue.x-k8s.io/queue-name: a longer name is created, and never usable.
LABEL_VALUE_KINDS = frozenset({"LocalQueue"})


def _mapping(value: Any) -> dict[str, Any]:
    """A program's object as a mapping where it is one (where it is not, its schema says so)."""
    return value if isinstance(value, dict) else {}


def _bytes(mapping: dict[str, Any]) -> int:
    return sum(len(str(k)) + len(str(v)) for k, v in mapping.items())


def _size_problems(kind: str, manifest: dict[str, Any]) -> Iterator[tuple[str, str]]:
    try:
        size = len(orjson.dumps(manifest))
    except orjson.JSONEncodeError as exc:  # a program's object: an integer past 64 bits, a key that is no string
        yield "", f"cannot be sent as JSON: {exc}"
        return
    if size > MAX_OBJECT_BYTES:
        yield "", (f"{size:,} bytes of JSON, more than the {MAX_OBJECT_BYTES:,} (1.5 MiB) the API server stores in one object "
                   "(etcd's request limit): split what it holds, or hold less")
    if kind in ("ConfigMap", "Secret"):
        data = _bytes(_mapping(manifest.get("data"))) + _bytes(_mapping(manifest.get("binaryData")))
        if data > MAX_DATA_BYTES:
            yield "data", f"{data:,} bytes, more than the {MAX_DATA_BYTES:,} (1 MiB) a {kind} holds"
    annotations = _bytes(_mapping(_mapping(manifest.get("metadata")).get("annotations")))
    if annotations > MAX_ANNOTATION_BYTES:
        yield "metadata.annotations", f"{annotations:,} bytes, more than the {MAX_ANNOTATION_BYTES:,} (256 KiB) the API server takes"


def _name_problem(kind: str, name: str) -> str | None:
    if kind in DNS_LABEL_KINDS or kind in LABEL_VALUE_KINDS:
        pattern, rule = (DNS_LABEL, "a DNS-1123 label") if kind in DNS_LABEL_KINDS else (LABEL_VALUE, "a label value (jobs name it in kueue.x-k8s.io/queue-name)")
        return None if pattern.fullmatch(name) else f"{len(name)} characters: must be {rule}, at most 63 characters"
    return None if DNS_SUBDOMAIN.fullmatch(name) else f"{len(name)} characters: must be a DNS-1123 subdomain, at most 253 characters"


def _label_problems(labels: dict[str, Any], seen: set[tuple[str, str]]) -> Iterator[tuple[str, str]]:
    for key, value in labels.items():
        if not isinstance(value, str) or (key, value) in seen:  # not a string: its schema says so; most labels recur
            continue
        if LABEL_KEY.fullmatch(key) and LABEL_VALUE.fullmatch(value):
            seen.add((key, value))
        else:
            yield f"metadata.labels.{key}", (f"{value[:80]!r} is no label (a key of at most 63 characters after its prefix, "
                                             "a value of at most 63 letters, digits, '-', '_' or '.')")


def limit_problems(objects: Iterable[tuple[str, dict[str, Any]]]) -> list[SchemaProblem]:
    """What the API server refuses of each (cluster, manifest) whatever its schema says: its size (the
    object's, a ConfigMap's or Secret's data, its annotations), its name for its kind, its labels."""
    seen: set[tuple[str, str]] = set()
    problems = []
    for cluster, manifest in objects:
        kind, metadata = str(manifest.get("kind")), _mapping(manifest.get("metadata"))
        name = metadata.get("name")
        found = [*_size_problems(kind, manifest), *_label_problems(_mapping(metadata.get("labels")), seen)]
        if isinstance(name, str) and (problem := _name_problem(kind, name)):
            found.append(("metadata.name", problem))
        problems += [SchemaProblem(cluster, kind, _short(str(name)), path, message) for path, message in found]
    return problems

if __name__ == "__main__":  # `make generated`
    STRICT_SCHEMAS.write_text(strict_schemas_json())
