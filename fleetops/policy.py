"""The policy gate: build the policy input, evaluate the Rego policies, apply waivers, log decisions.

    verdict = evaluate(env, state, live=None, change=None, engine=None)
    verdict.denied      # unwaived deny decisions: any of them fails the gate
    verdict.decisions   # every decision, deny / warn / waived

Policies are Rego v1 files under `policies/` (packages `fleet.<domain>`, each exposing `deny` and
`warn` sets). Two engines give the same decisions: `EmbeddedEngine` (regorus, in-process, the
default) and `OpaEngine` (an OPA server, through opa-python-client). Anything that keeps the engine
from answering - a policy that does not parse, an unreachable server, a timeout - raises
`PolicyError`, and callers fail closed: no answer is never a pass.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import getpass
import hashlib
import ipaddress
import json
import os
import re
import time
import uuid
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal, Protocol
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, StrictBool, ValidationError, field_validator, model_validator

from fleetops import git, grants, memory, spec
from fleetops.errors import PolicyError
from fleetops.output import decision_counts
from fleetops.kube import ENVIRONMENT_LABEL, object_key
from fleetops.render import DesiredState

ROOT = Path(__file__).resolve().parent.parent
POLICIES_DIR = ROOT / "policies"
DATA_FILE = "data.yaml"
WAIVERS_FILE = "waivers.yaml"
DATA_ROOT = "fleet_data"  # policy data is data.fleet_data; policies are data.fleet.*
MAX_WAIVER_DAYS = 90
DEFAULT_TIMEOUT = 30.0
# The policy input (canonical JSON) one evaluation may hand an engine. regorus takes about 15 bytes of
# memory per byte of input, linearly (measured: the generated large fleet, 15,348 objects, 13 MB ->
# +200 MB; 20,000 small tenants, 191 MB -> +2.7 GB; 55,000 tenants died at 7.8 GB). 64 MiB is about
# 5x the large fleet and 1 GB of engine memory; more is refused, not evaluated in chunks: policies
# judge sums across tenants and clusters, which no part of the fleet shows alone.
MAX_INPUT_BYTES = 64 << 20

Status = Literal["deny", "warn", "waived"]


# --- input ---------------------------------------------------------------------------------


class _Edge(BaseModel):
    model_config = ConfigDict(extra="forbid")


# A Kubernetes quantity ("8", "500m", "16Gi") or a plain count.
Quantity = Annotated[int, Field(ge=0)] | Annotated[str, Field(pattern=r"^[0-9]+(\.[0-9]+)?([munkMGTPE]|[KMGTPE]i)?$")]


class LiveNode(_Edge):
    """One live node as the reconciler lists it: device quantities are Kubernetes quantity strings or ints."""

    cluster: str = Field(min_length=1)
    name: str = Field(min_length=1)
    labels: dict[str, str] = {}
    capacity: dict[str, Quantity] = {}
    allocatable: dict[str, Quantity] = {}
    ready: StrictBool


class Inventory(_Edge):
    nodes: list[LiveNode]


class PolicyInput(BaseModel):
    """The document every policy reads as `input` (policies/README.md describes each field)."""

    model_config = ConfigDict(extra="forbid")

    environment: str
    revision: str
    spec: dict[str, Any]
    resources: list[dict[str, Any]]
    by_kind: dict[str, list[int]]
    facts: dict[str, Any]
    live: Inventory | None = None
    change: dict[str, Any] | None = None


def load_inventory(path: Path) -> Inventory:
    """`--live INVENTORY.json`: a list of nodes or `{"nodes": [...]}`; errors name file:line."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise PolicyError(f"{path}:1:1: cannot read the live inventory: {exc.strerror}") from None
    except UnicodeDecodeError as exc:
        raise PolicyError(f"{path}:1:1: the live inventory is not UTF-8 ({exc.reason} at byte {exc.start})") from None
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as exc:
        raise PolicyError(f"{path}:{exc.lineno}:{exc.colno}: not JSON: {exc.msg}") from None
    except RecursionError:
        raise PolicyError(f"{path}:1:1: the live inventory is nested too deeply (deeper than Python's recursion limit)") from None
    try:
        return Inventory.model_validate({"nodes": raw} if isinstance(raw, list) else raw)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise PolicyError(f"{path}:1:1: {where}: {first['msg']}") from None


def resource_entry(cluster: str, manifest: dict[str, Any]) -> dict[str, Any]:
    _, api_version, kind, namespace, name = object_key(cluster, manifest)
    return {"cluster": cluster, "kind": kind, "apiVersion": api_version, "name": name, "namespace": namespace, "manifest": manifest}


def _group_fact(cluster: str, group: spec.Group) -> dict[str, Any]:
    sharing = group.sharing if isinstance(group, spec.Pool) else None
    return {
        "cluster": cluster,
        "kind": "pool" if isinstance(group, spec.Pool) else "edge_group",
        "model": group.device.model,
        "resource": group.device.resource,
        "physical_devices": spec.physical_devices(group),
        "sharing": sharing.mode if sharing else "exclusive",
        "replicas": sharing.replicas if sharing else None,
        "units": spec.group_capacity(group),
    }


def derived_facts(env: spec.Environment) -> dict[str, Any]:
    """Facts an auditor can recompute from the environment file; policies compare against them."""
    quota = spec.quota_sums(env)
    holders: dict[tuple[str, str], int] = {}
    for tenant in env.tenants:
        for cluster in tenant.clusters:
            for resource, q in tenant.quota.items():
                if q.guaranteed > 0:
                    holders[cluster, resource] = holders.get((cluster, resource), 0) + 1
    clusters = {c.name: c for c in env.clusters}
    return {
        "capacity": spec.capacity(env),
        "quota": {
            c: {r: {**sums, "tenants": holders.get((c, r), 0)} for r, sums in per.items()} for c, per in quota.items()
        },
        "monthly_cost": spec.monthly_cost(env),
        "hours_per_month": spec.HOURS_PER_MONTH,
        "groups": {g.name: _group_fact(c.name, g) for c in env.clusters for g in (*c.pools, *c.edge_groups)},
        "eligible": {
            t.name: {c: [g.name for g in spec.eligible_groups(t, [clusters[c]])] for c in t.clusters if c in clusters}
            for t in env.tenants
        },
    }


def _egress_blocks(manifest: Any) -> Iterator[str]:
    """The CIDR of every egress IP block of a NetworkPolicy, whatever program wrote it: a part that is
    not the documented shape has no block to count, and the schema check refuses it anyway."""
    body = manifest.get("spec") if isinstance(manifest, dict) else None
    rules = body.get("egress") if isinstance(body, dict) else None
    for rule in rules if isinstance(rules, list) else []:
        peers = rule.get("to") if isinstance(rule, dict) else None
        for peer in peers if isinstance(peers, list) else []:
            block = peer.get("ipBlock") if isinstance(peer, dict) else None
            if isinstance(block, dict) and "cidr" in block:
                yield str(block["cidr"])


def egress_coverage(entries: Iterable[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """"cluster/namespace" -> the share of the IPv4 and IPv6 address spaces its NetworkPolicies' egress IP
    blocks reach together, for `network.egress_anywhere`.

    Arithmetic, not strings: 0.0.0.0/1 + 128.0.0.0/1 is all of IPv4 as much as 0.0.0.0/0 is, and two
    overlapping blocks count once (their union). Neither engine can merge CIDRs (regorus lacks
    net.cidr_merge), so the union is computed here and the rule compares the share with its data.
    `except` is not subtracted: the share is an upper bound, so an exception never hides a wide block.
    A CIDR that does not parse cannot be measured and is listed as invalid (the rule denies it).
    """
    blocks: dict[tuple[str, str], list[str]] = {}
    for entry in entries:
        if entry["kind"] == "NetworkPolicy":
            blocks.setdefault((entry["cluster"], entry["namespace"]), []).extend(_egress_blocks(entry["manifest"]))
    out: dict[str, dict[str, Any]] = {}
    for (cluster, namespace), cidrs in sorted(blocks.items()):
        if not cidrs:
            continue
        families: dict[int, list[Any]] = {4: [], 6: []}  # collapse_addresses takes one version at a time
        invalid = []
        for cidr in cidrs:
            try:
                network = ipaddress.ip_network(cidr, strict=False)
            except ValueError:
                invalid.append(cidr)
                continue
            if network.version == 6 and network.network_address.ipv4_mapped is not None and network.prefixlen >= 96:
                # ::ffff:0.0.0.0/96 is all of IPv4 to a Go CNI (net.IPNet unmaps it): count it there.
                network = ipaddress.ip_network((network.network_address.ipv4_mapped, network.prefixlen - 96))
            families[network.version].append(network)
        fact: dict[str, Any] = {"cluster": cluster, "namespace": namespace, "invalid": sorted(set(invalid))}
        for version, networks in families.items():
            union = list(ipaddress.collapse_addresses(networks))
            bits = 32 if version == 4 else 128
            fact[f"ipv{version}"] = {
                "cidrs": [str(n) for n in union],
                "share": sum(n.num_addresses for n in union) / 2**bits,
            }
        out[f"{cluster}/{namespace}"] = fact
    return out


def build_input(
    env: spec.Environment,
    resources: Iterable[dict[str, Any]],
    revision: str,
    live: Inventory | None = None,
    change: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The policy input as plain data. Spec and resources are already validated upstream."""
    if change is not None and not isinstance(change, dict):
        raise PolicyError(f"the change under review must be an object, got {type(change).__name__}")
    entries = list(resources)
    by_kind: dict[str, list[int]] = {}
    for i, entry in enumerate(entries):
        by_kind.setdefault(entry["kind"], []).append(i)
    return {
        "environment": env.environment,
        "revision": revision,
        "spec": env.model_dump(mode="json"),
        "resources": entries,
        "by_kind": by_kind,
        "facts": {**derived_facts(env), "egress": egress_coverage(entries), "grants": grants.of_entries(entries)},
        "live": live.model_dump(mode="json") if live is not None else None,
        "change": change,
    }


def policy_input(
    env: spec.Environment, state: DesiredState, live: Inventory | None = None, change: dict[str, Any] | None = None
) -> dict[str, Any]:
    return build_input(env, (resource_entry(c, m) for c, m in state.objects()), state.revision, live, change)


# --- policies on disk -------------------------------------------------------------------------


@dataclass(frozen=True)
class Bundle:
    """The policy files and data one evaluation uses, with the digest the decision log records."""

    directory: Path
    policies: dict[str, str]  # path relative to the directory -> Rego source, tests excluded
    tests: dict[str, str]
    data: dict[str, Any]
    digest: str


def _is_test(path: Path) -> bool:
    return path.name.endswith("_test.rego")


def read_text(path: Path) -> str:
    """A policy, data or waivers file as text: unreadable or not UTF-8 is one line naming the file."""
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        line = exc.object.count(b"\n", 0, exc.start) + 1
        raise PolicyError(f"{display_path(path)}:{line}: not UTF-8 ({exc.reason} at byte {exc.start})") from None
    except OSError as exc:
        raise PolicyError(f"{display_path(path)}: cannot read: {exc.strerror}") from None


def parse_yaml(text: str, file: str) -> Any:
    """YAML as the environment loader reads it (a key written twice is refused), errors as PolicyError."""
    try:
        return spec.parse_yaml(text, file)[0]
    except spec.SpecError as exc:
        raise PolicyError(exc.problems[0]) from None


def load_bundle(directory: Path = POLICIES_DIR) -> Bundle:
    if not directory.is_dir():
        raise PolicyError(f"{directory}: no policy folder")
    files = sorted(p for p in directory.rglob("*.rego") if ".venv" not in p.parts)
    sources = {p.relative_to(directory).as_posix(): read_text(p) for p in files}
    policies = {k: v for k, v in sources.items() if not _is_test(Path(k))}
    if not policies:
        raise PolicyError(f"{directory}: no .rego policies")
    data_path = directory / DATA_FILE
    data_text = read_text(data_path) if data_path.is_file() else ""
    data = parse_yaml(data_text, display_path(data_path)) or {}
    if not isinstance(data, dict):
        raise PolicyError(f"{display_path(data_path)}:1:1: policy data must be a mapping")
    waivers_path = directory / WAIVERS_FILE
    waivers_text = read_text(waivers_path) if waivers_path.is_file() else ""
    # Everything that decides a verdict: the rules, their data and the waivers that suspend them.
    digest = hashlib.sha256()
    for name, text in [*sorted(policies.items()), (DATA_FILE, data_text), (WAIVERS_FILE, waivers_text)]:
        digest.update(name.encode() + b"\0" + text.encode() + b"\0")
    tests = {k: v for k, v in sources.items() if _is_test(Path(k))}
    return Bundle(directory, policies, tests, {DATA_ROOT: data}, "sha256:" + digest.hexdigest())


_PACKAGE = re.compile(r"^package\s+([\w.]+)", re.MULTILINE)


def package_of(source: str) -> str:
    match = _PACKAGE.search(source)
    return match.group(1) if match else ""


@dataclass(frozen=True)
class RuleMeta:
    """A `# METADATA` block and the rule it annotates, for reports and the audit."""

    file: str
    line: int  # of the rule head
    rule: str  # the head, e.g. "deny" or "warn"
    rule_id: str  # the "rule" its decisions carry, e.g. "quota.tenant_share"
    title: str
    description: str
    severity: str
    control_id: str
    fix: str = ""  # custom.fix: how to resolve a decision of this rule, for the plan and check
    gate: str = ""  # custom.gate: "approval" when more approvals, not a different change, resolve it


_RULE_ID = re.compile(r'"rule":\s*"([a-z_]+\.[a-z_]+)"')
_METADATA = re.compile(r"^# METADATA\n((?:#.*\n)+?)(?!#)(\w+)", re.MULTILINE)


def rule_metadata(bundle: Bundle) -> list[RuleMeta]:
    """Every rule-scoped METADATA block of the shipped policies; a block that is not YAML is a PolicyError.

    OPA rejects such a block at compile time, so catching it here keeps both engines in step.
    """
    out = []
    for name, source in bundle.policies.items():
        for match in _METADATA.finditer(source):
            body = "\n".join(line[2:] if line.startswith("# ") else line[1:] for line in match.group(1).splitlines())
            line = source.count("\n", 0, match.start(2)) + 1
            # Blank lines ahead of the block keep the lines of YAML errors those of the .rego file.
            first = source.count("\n", 0, match.start(1))
            try:
                meta = spec.parse_yaml("\n" * first + body, display_path(bundle.directory / name))[0] or {}
            except spec.SpecError as exc:
                raise PolicyError(f"{exc.problems[0]} (METADATA of the rule at line {line})") from None
            if not isinstance(meta, dict):
                raise PolicyError(f"{display_path(bundle.directory / name)}:{line}: METADATA must be a mapping")
            if meta.get("scope") == "package" or match.group(2) == "package":
                continue
            custom = meta.get("custom") or {}
            rule_id = _RULE_ID.search(source, match.end())
            out.append(RuleMeta(name, line, match.group(2), rule_id.group(1) if rule_id else "", str(meta.get("title", "")),
                                str(meta.get("description", "")), str(custom.get("severity", "")), str(custom.get("control_id", "")),
                                str(custom.get("fix", "")), str(custom.get("gate", ""))))
    return out


# --- engines --------------------------------------------------------------------------------

Results = dict[str, dict[str, list[dict[str, Any]]]]  # package ("fleet.quota") -> {"deny": [...], "warn": [...]}


class Engine(Protocol):
    name: str

    def evaluate(self, bundle: Bundle, document: dict[str, Any], text: bytes | None = None) -> Results:
        """`text` is `document` already serialised (canonical JSON), for engines that can reuse it."""
        ...


_REGORUS_LOCATION = re.compile(r"-->\s*(?P<file>[^:\s]+):(?P<line>\d+):(?P<col>\d+)")
_REGORUS_MESSAGE = re.compile(r"^error:\s*(?P<msg>.+)$", re.MULTILINE)


def regorus_error(exc: Exception, directory: Path) -> str:
    """regorus errors come with a Rust backtrace; keep the place and the message only."""
    text = str(exc)
    where = _REGORUS_LOCATION.search(text)
    message = _REGORUS_MESSAGE.search(text)
    msg = message.group("msg").strip() if message else text.strip().splitlines()[0] if text.strip() else type(exc).__name__
    if where:
        return f"{display_path(directory / where.group('file'))}:{where.group('line')}:{where.group('col')}: {msg}"
    return f"{display_path(directory)}: {msg}"


def collect(document: Any, packages: dict[str, set[str]]) -> Results:
    """Pick each package's deny and warn out of the `data.fleet` document; anything malformed is an engine error."""
    if not isinstance(document, dict):
        raise PolicyError("the engine returned no data.fleet document")
    results: Results = {}
    for package in sorted(packages):
        node: Any = document
        for part in package.split(".")[1:]:
            node = node.get(part, {}) if isinstance(node, dict) else {}
        if not isinstance(node, dict) or not packages[package] <= node.keys():
            raise PolicyError(f"data.{package}: the engine returned no {' and '.join(sorted(packages[package]))}")
        decisions = {k: node[k] for k in sorted(packages[package])}
        for kind, items in decisions.items():
            if not isinstance(items, list) or not all(isinstance(d, dict) and "rule" in d for d in items):
                raise PolicyError(f"{package}.{kind}: decisions must be objects with a rule, got {str(items)[:120]}")
        results[package] = decisions
    return results


class EmbeddedEngine:
    """regorus, in-process: no server to run, the default."""

    name = "embedded"

    def __init__(self, timeout: float = DEFAULT_TIMEOUT):
        self.timeout = timeout

    def load(self, bundle: Bundle, sources: dict[str, str]) -> Any:
        import regorus

        engine = regorus.Engine()
        problem = None
        for name, text in sources.items():
            try:
                engine.add_policy(name, text)
            except RuntimeError as exc:
                problem = regorus_error(exc, bundle.directory)
                break
        if problem is not None:
            raise PolicyError(problem)
        engine.add_data_json(json.dumps(bundle.data))
        return engine

    def evaluate(self, bundle: Bundle, document: dict[str, Any], text: bytes | None = None) -> Results:
        packages = fleet_packages(bundle.policies)
        # One query over all packages: rules a package shares between deny and warn run once.
        query = "{" + ", ".join(
            f'"{p}": {{' + ", ".join(f'"{k}": data.{p}.{k}' for k in sorted(kinds)) + "}" for p, kinds in packages.items() if kinds
        ) + "}"

        started = time.perf_counter()
        engine = self.load(bundle, bundle.policies)
        try:
            with memory.heap_kept():
                engine.set_input_json(text.decode() if text is not None else json.dumps(document))
            answer = json.loads(engine.eval_query_as_json(query))
            value = answer["result"][0]["expressions"][0]["value"]
        except RuntimeError as exc:
            raise PolicyError(regorus_error(exc, bundle.directory)) from None
        except (KeyError, IndexError, TypeError) as exc:
            raise PolicyError(f"embedded policy engine: unexpected answer ({type(exc).__name__}: {exc})") from None
        except (KeyboardInterrupt, SystemExit):
            raise
        except BaseException as exc:  # a Rust panic surfaces as pyo3's PanicException (a BaseException)
            raise PolicyError(f"embedded policy engine failed: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}") from None
        # regorus holds the GIL for a whole query, so a watchdog thread could not interrupt it; the
        # deadline is enforced when the query returns, and a late answer is no answer (fail closed).
        elapsed = time.perf_counter() - started
        if elapsed > self.timeout:
            raise PolicyError(f"embedded policy engine: no answer within {self.timeout:g}s (took {elapsed:.2f}s)")
        nested: dict[str, Any] = {}
        for package, decisions in value.items():
            node = nested
            for part in package.split(".")[1:]:
                node = node.setdefault(part, {})
            node.update(decisions)
        return collect(nested, packages)


_DECISION_RULE = re.compile(r"^(deny|warn)\b", re.MULTILINE)


def fleet_packages(sources: dict[str, str]) -> dict[str, set[str]]:
    """`fleet.<domain>` package -> which of deny / warn it defines (tests excluded by the caller).

    A package without warn rules has no `warn` document at all, and referencing it would make the
    whole query undefined, so only defined rules are queried.
    """
    out: dict[str, set[str]] = {}
    for source in sources.values():
        package = package_of(source)
        if package.startswith("fleet."):
            out.setdefault(package, set()).update(_DECISION_RULE.findall(source))
    return dict(sorted(out.items()))


def _redact(text: str, secret: str | None) -> str:
    return text.replace(secret, "***") if secret else text


_REBASE = re.compile(
    r'(?P<skip>"(?:[^"\\\n]|\\.)*"|`[^`]*`|#[^\n]*)'  # strings and comments stay as written
    r"|(?P<head>(?<![\w.])data\.|^package[ \t]+)(?=fleet(?:_data)?\b)"
    r"|(?P<other>(?<![\w.])data\b)",
    re.MULTILINE,
)
DIGEST_RULE = "fleetops_policy_digest"


@dataclass(frozen=True)
class OpaUpload:
    """One evaluation's policies and data on a shared OPA, under a root no other evaluation uses.

    Module ids are `fleetops/<root>/<file>`, packages `<root>.fleet.*`, data `<root>.fleet_data`, and
    every module carries `fleetops_policy_digest`: the answer is checked to come from these modules
    and this data, so a client writing to the same OPA meanwhile can make the gate fail, never pass.
    """

    root: str  # "fleetops.e<uuid hex>": a Rego reference, so it starts with a letter
    modules: dict[str, str]  # module id -> rebased source, helpers (no deny/warn) first
    data: dict[str, Any]  # the policy data as JSON reads it back

    @property
    def path(self) -> str:
        return self.root.replace(".", "/")

    @classmethod
    def of(cls, bundle: Bundle) -> OpaUpload:
        root = f"fleetops.e{uuid.uuid4().hex}"
        modules = {}
        for name, source in sorted(bundle.policies.items(), key=lambda item: bool(_DECISION_RULE.search(item[1]))):
            rebased = rebase(source, root, bundle.directory / name)
            modules[f"{root.replace('.', '/')}/{name.removesuffix('.rego')}"] = f'{rebased}\n{DIGEST_RULE} := "{bundle.digest}"\n'
        return cls(root, modules, json.loads(json.dumps(bundle.data[DATA_ROOT])))

    def mismatch(self, answer: Any, bundle: Bundle) -> str | None:
        """What in OPA's answer did not come from this upload, or None."""
        if not isinstance(answer, dict):
            return f"data.{self.root} is not a document"
        if answer.get(DATA_ROOT) != self.data:
            return f"data.{self.root}.{DATA_ROOT} differs from {DATA_FILE}"
        for package in sorted({package_of(source) for source in bundle.policies.values()}):
            node: Any = answer
            for part in package.split("."):
                node = node.get(part) if isinstance(node, dict) else None
            if not isinstance(node, dict) or node.get(DIGEST_RULE) != bundle.digest:
                return f"data.{self.root}.{package} has no {DIGEST_RULE} {bundle.digest[:19]}"
        return None


def rebase(source: str, root: str, path: Path) -> str:
    """A policy with its `fleet` package and `data.fleet` / `data.fleet_data` references moved under `root`.

    Any other package or read of `data` is refused: on a shared OPA other clients own the rest.
    """
    package = package_of(source)
    if package != "fleet" and not package.startswith("fleet."):
        raise PolicyError(f"{display_path(path)}:1: package {package or '(none)'}: policies are packages fleet.*")

    def move(match: re.Match[str]) -> str:
        if match.group("skip"):
            return match.group(0)
        if match.group("other"):
            line = source.count("\n", 0, match.start()) + 1
            raise PolicyError(f"{display_path(path)}:{line}: policies read only data.fleet and data.fleet_data (OPA holds other clients' data)")
        return f"{match.group('head')}{root}."

    return _REBASE.sub(move, source)


def _refuse_redirects(url: str) -> Any:
    """A requests response hook: OPA answering 30x must not be followed, or policies, input and token go elsewhere."""

    def hook(response: Any, *args: Any, **kwargs: Any) -> None:
        if response.is_redirect:
            raise PolicyError(f"OPA at {url}: answered {response.status_code} redirecting elsewhere: redirects are refused, nothing was sent on")

    return hook


class OpaEngine:
    """An OPA server: one evaluation's policies and data are uploaded under a root of their own
    (`OpaUpload`), queried with the input, checked to be the ones uploaded, and removed.

    The bearer token travels only in the Authorization header; every message this class raises has
    it redacted, and the URL is shown without user information.
    """

    name = "opa"

    def __init__(self, url: str, token: str | None = None, timeout: float = DEFAULT_TIMEOUT):
        want = "want http(s)://HOST[:PORT]"
        try:
            parts = urlsplit(url)
            port = parts.port  # raises on a port that is not a number in 0..65535
        except ValueError:
            raise PolicyError(f"--opa-url: {want}, got a malformed URL") from None
        if parts.scheme not in ("http", "https") or not parts.hostname or parts.path not in ("", "/"):
            raise PolicyError(f"--opa-url: {want}, got {self._shown(url)}")
        self.url = f"{parts.scheme}://{parts.hostname}{f':{port}' if port else ''}"
        self.host = parts.hostname
        self.port = port or (443 if parts.scheme == "https" else 80)
        self.ssl = parts.scheme == "https"
        self.token = token
        self.timeout = timeout

    @staticmethod
    def _shown(url: str) -> str:
        parts = urlsplit(url)
        return f"{parts.scheme}://{parts.hostname or ''}{f':{parts.port}' if parts.port else ''}{parts.path}"

    def client(self) -> Any:
        from opa_client.opa import OpaClient

        # retries=0: a failed upload or query is reported, not hidden behind back-off.
        client = OpaClient(host=self.host, port=self.port, ssl=self.ssl, token=self.token, timeout=self.timeout, retries=0)
        client._session.hooks["response"].append(_refuse_redirects(self.url))  # opa-python-client has no option for it
        return client

    def _refused(self, exc: Exception) -> PolicyError | None:
        """OPA's answer to a missing or wrong token (401, code "unauthorized"), whichever call met it first."""
        response = getattr(exc, "response", None)
        if getattr(exc, "expression", None) != "unauthorized" and getattr(response, "status_code", None) != 401:
            return None
        given = "the token in FLEETOPS_OPA_TOKEN" if self.token else "no token (set FLEETOPS_OPA_TOKEN)"
        return PolicyError(f"OPA at {self.url}: 401 unauthorized: the server refused {given}")

    def _fail(self, step: str, exc: Exception) -> PolicyError:
        if isinstance(exc, PolicyError):
            return exc
        if refused := self._refused(exc):
            return refused
        detail = getattr(exc, "message", None) or str(exc) or type(exc).__name__
        if isinstance(detail, (dict, list)):
            detail = json.dumps(detail)[:300]
        return PolicyError(_redact(f"OPA at {self.url}: {step}: {type(exc).__name__}: {detail}", self.token))

    def _upload_error(self, path: Path, exc: Exception) -> PolicyError:
        """OPA's compile errors carry row and column in the uploaded module: name our file and line."""
        if refused := self._refused(exc):
            return refused
        errors = getattr(exc, "errors", None)
        if isinstance(errors, list) and errors and isinstance(errors[0], dict):
            first = errors[0]
            loc = first.get("location") or {}
            return PolicyError(_redact(f"{display_path(path)}:{loc.get('row', 1)}:{loc.get('col', 1)}: OPA at {self.url}: {first.get('message', 'rejected')}", self.token))
        return self._fail(f"upload {display_path(path)}", exc)

    def _ask(self, client: Any, upload: OpaUpload, bundle: Bundle, document: dict[str, Any], uploaded: list[str]) -> Any:
        for policy_id, module in upload.modules.items():
            try:
                client.update_policy_from_string(module, policy_id, rego_compat=False)
            except Exception as exc:
                raise self._upload_error(bundle.directory / f"{policy_id.removeprefix(upload.path + '/')}.rego", exc) from None
            uploaded.append(policy_id)
        try:
            client.update_or_create_data(upload.data, f"{upload.path}/{DATA_ROOT}")
        except Exception as exc:
            raise self._fail("upload policy data", exc) from None
        try:
            answer = client.query_rule(input_data=document, package_path=upload.path)
        except Exception as exc:
            raise self._fail(f"query data.{upload.root}", exc) from None
        if not isinstance(answer, dict) or "result" not in answer:
            raise PolicyError(f"OPA at {self.url}: query data.{upload.root}: no result (are the policies loaded?)")
        return answer["result"]

    def _remove(self, client: Any, upload: OpaUpload, uploaded: list[str]) -> None:
        # Callers go before the helpers they call: OPA compiles what it holds at every change.
        for policy_id in reversed(uploaded):
            client.delete_policy(policy_id)
        client.delete_data(upload.path)

    def evaluate(self, bundle: Bundle, document: dict[str, Any], text: bytes | None = None) -> Results:
        upload = OpaUpload.of(bundle)
        try:
            client = self.client()
        except Exception as exc:
            raise self._fail("connect", exc) from None
        uploaded: list[str] = []
        with client:
            try:
                result = self._ask(client, upload, bundle, document, uploaded)
            except BaseException:
                with contextlib.suppress(Exception):  # the first failure is the one to report
                    self._remove(client, upload, uploaded)
                raise
            try:
                self._remove(client, upload, uploaded)
            except Exception as exc:
                raise self._fail(f"remove data.{upload.root}", exc) from None
        if problem := upload.mismatch(result, bundle):
            raise PolicyError(f"OPA at {self.url}: the answer is not from the policies this evaluation uploaded ({problem}): "
                              "another client wrote to this OPA meanwhile")
        return collect(result["fleet"], fleet_packages(bundle.policies))


def engine_from(opa_url: str | None = None, timeout: float = DEFAULT_TIMEOUT) -> Engine:
    """`--opa-url` or FLEETOPS_OPA_URL selects an OPA server (token: FLEETOPS_OPA_TOKEN); else the embedded engine."""
    url = opa_url or os.environ.get("FLEETOPS_OPA_URL")
    if url:
        return OpaEngine(url, token=os.environ.get("FLEETOPS_OPA_TOKEN") or None, timeout=timeout)
    return EmbeddedEngine(timeout=timeout)


# --- waivers --------------------------------------------------------------------------------


class WaiverScope(_Edge):
    environment: str = Field(min_length=1)
    cluster: str | None = None
    tenant: str | None = None
    resource: str | None = None  # "Kind/name" or "Kind/namespace/name", as decisions show it


class Waiver(_Edge):
    rule: str = Field(pattern=r"^[a-z_]+\.[a-z_]+$")
    scope: WaiverScope
    owner: str = Field(min_length=1)
    reason: str = Field(min_length=1)
    ticket: str = Field(min_length=1)
    created: dt.date
    expires: dt.date

    @field_validator("created", "expires", mode="before")
    @classmethod
    def _iso_date(cls, value: Any) -> Any:
        if isinstance(value, dt.date):
            return value
        if isinstance(value, str):
            try:
                return dt.date.fromisoformat(value)
            except ValueError:
                pass
        raise ValueError(f"must be a date YYYY-MM-DD, got {value!r}")

    @model_validator(mode="after")
    def _window(self) -> Waiver:
        days = (self.expires - self.created).days
        if days < 0:
            raise ValueError(f"expires {self.expires} is before created {self.created}")
        if days > MAX_WAIVER_DAYS:
            raise ValueError(f"expires {days} days after created, at most {MAX_WAIVER_DAYS} allowed")
        return self

    def matches(self, environment: str, decision: Decision) -> bool:
        s = self.scope
        return (
            self.rule == decision.rule
            and s.environment == environment
            and s.cluster in (None, decision.resource.get("cluster"))
            and s.tenant in (None, decision.resource.get("tenant"))
            and s.resource in (None, decision.resource_ref(with_cluster=False))
        )


@dataclass(frozen=True)
class LoadedWaiver:
    waiver: Waiver
    where: str  # file:line


@dataclass(frozen=True)
class Waivers:
    active: list[LoadedWaiver]
    problems: list[str]  # expired or malformed entries, each `file:line: ...`; they waive nothing


def display_path(path: Path) -> str:
    """A path as a person would type it from here: relative to the working folder when inside it."""
    try:
        return str(path.resolve().relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def load_waivers(path: Path, today: dt.date) -> Waivers:
    """Each entry is validated on its own: a bad or expired waiver is reported and waives nothing."""
    if not path.is_file():
        return Waivers([], [])
    try:
        # Named as in the repository (policies/waivers.yaml), whatever the working folder: decisions cite it.
        tree, positions = spec.parse_yaml(read_text(path), f"{path.parent.name}/{path.name}")
    except spec.SpecError as exc:
        raise PolicyError(exc.problems[0]) from None
    if tree is None:
        return Waivers([], [])
    entries = tree.get("waivers") if isinstance(tree, dict) else None
    if not isinstance(entries, list):
        raise PolicyError(positions.error((), "want a mapping with a 'waivers' list"))
    active, problems = [], []
    for i, entry in enumerate(entries):
        try:
            waiver = Waiver.model_validate(entry)
        except ValidationError as exc:
            for err in exc.errors(include_url=False):
                msg = "required field is missing" if err["type"] == "missing" else err["msg"].removeprefix("Value error, ")
                problems.append(positions.error(("waivers", i, *err["loc"]), msg))
            continue
        if waiver.created > today:
            # A waiver dated ahead would waive now and for longer than the 90 days its dates show.
            problems.append(positions.error(("waivers", i, "created"), f"waiver of {waiver.rule} is created in the future ({waiver.created})"))
            continue
        if waiver.expires < today:
            problems.append(positions.error(("waivers", i), f"waiver of {waiver.rule} expired on {waiver.expires} (owner {waiver.owner}, {waiver.ticket})"))
            continue
        line, _ = positions.at(("waivers", i))
        active.append(LoadedWaiver(waiver, f"{positions.file}:{line}"))
    return Waivers(active, problems)


# --- decisions and the verdict -------------------------------------------------------------------


@dataclass(frozen=True)
class Decision:
    package: str
    kind: Literal["deny", "warn"]
    rule: str
    msg: str
    severity: str
    resource: dict[str, Any]
    waived_by: str | None = None  # file:line of the waiver

    @property
    def status(self) -> Status:
        return "waived" if self.waived_by else self.kind

    def resource_ref(self, with_cluster: bool = True) -> str:
        r = self.resource
        parts = [r.get("kind"), r.get("namespace"), r.get("name")]
        ref = "/".join(str(p) for p in parts if p)
        return f"{r['cluster']}:{ref}" if with_cluster and r.get("cluster") else ref

    def as_dict(self) -> dict[str, Any]:
        """The one decision shape of every command's output (fleetops/output.schema.json)."""
        return {
            "status": self.status,
            "rule": self.rule,
            "severity": self.severity,
            "msg": self.msg,
            "resource": self.resource_ref(),
            "subject": self.resource,
            "package": self.package,
            "waived_by": self.waived_by,
        }


@dataclass
class Verdict:
    environment: str
    revision: str
    engine: str
    policy_digest: str
    input_digest: str
    duration_seconds: float
    decisions: list[Decision]
    waiver_problems: list[str] = field(default_factory=list)

    @property
    def denied(self) -> list[Decision]:
        return [d for d in self.decisions if d.status == "deny"]

    @property
    def warnings(self) -> list[Decision]:
        return [d for d in self.decisions if d.status == "warn"]

    @property
    def waived(self) -> list[Decision]:
        return [d for d in self.decisions if d.status == "waived"]

    @property
    def ok(self) -> bool:
        return not self.denied

    def rules(self, status: Status | None = None) -> set[str]:
        return {d.rule for d in self.decisions if status is None or d.status == status}

    def judgement(self) -> dict[str, Any]:
        """How the decisions were reached: engine, policy and input digests, time, unusable waivers."""
        return {"engine": self.engine, "policy_digest": self.policy_digest, "input_digest": self.input_digest,
                "duration_seconds": round(self.duration_seconds, 4), "waiver_problems": self.waiver_problems}

    def as_dict(self) -> dict[str, Any]:
        return {
            "environment": self.environment,
            "revision": self.revision,
            "engine": self.engine,
            "policy_digest": self.policy_digest,
            "input_digest": self.input_digest,
            "duration_seconds": round(self.duration_seconds, 4),
            "passed": self.ok,
            "summary": {s: sum(d.status == s for d in self.decisions) for s in ("deny", "warn", "waived")},
            "decisions": [d.as_dict() for d in self.decisions],
            "waiver_problems": self.waiver_problems,
        }


def to_decisions(results: Results) -> list[Decision]:
    out = []
    for package, kinds in results.items():
        for kind in ("deny", "warn"):
            for d in kinds.get(kind, []):
                out.append(
                    Decision(
                        package=package,
                        kind=kind,  # type: ignore[arg-type]
                        rule=str(d["rule"]),
                        msg=str(d.get("msg", "")),
                        severity=str(d.get("severity", "high" if kind == "deny" else "low")),
                        resource=d.get("resource") if isinstance(d.get("resource"), dict) else {},
                    )
                )
    # Stable order for reports and digests: denies first, then by rule and resource.
    return sorted(out, key=lambda d: (d.kind != "deny", d.rule, d.resource_ref(), d.msg))


def apply_waivers(decisions: list[Decision], environment: str, waivers: list[LoadedWaiver]) -> list[Decision]:
    out = []
    for d in decisions:
        match = next((w for w in waivers if w.waiver.matches(environment, d)), None)
        out.append(Decision(**{**d.__dict__, "waived_by": match.where}) if match else d)
    return out


def canonical_json(document: Any) -> bytes:
    """Sorted keys, no whitespace, UTF-8: the text the engine reads and the input digest hashes.
    orjson writes the large fleet's 13 MB of policy input in 0.06 s; json.dumps took 0.3 s."""
    import orjson

    return orjson.dumps(document, option=orjson.OPT_SORT_KEYS)


def evaluate_input(
    document: dict[str, Any],
    engine: Engine | None = None,
    policies_dir: Path = POLICIES_DIR,
    today: dt.date | None = None,
    max_input_bytes: int = MAX_INPUT_BYTES,
) -> Verdict:
    """Evaluate a ready-made policy input (the Pulumi policy pack builds its own)."""
    engine = engine or EmbeddedEngine()
    bundle = load_bundle(policies_dir)
    waivers = load_waivers(policies_dir / WAIVERS_FILE, today or dt.date.today())
    known = {m.rule_id for m in rule_metadata(bundle)}
    unknown = [w for w in waivers.active if w.waiver.rule not in known]
    # A waiver of a rule that does not exist waives nothing; say so, as it usually is a typo.
    problems = waivers.problems + [f"{w.where}: waiver of {w.waiver.rule}: no policy has this rule" for w in unknown]
    active = [w for w in waivers.active if w not in unknown]
    text = canonical_json(document)  # serialised once: the engine reads it, the digest hashes it
    if len(text) > max_input_bytes:
        tenants = len(document.get("spec", {}).get("tenants", []))
        raise PolicyError(f"{document['environment']}: the policy input is {len(text):,} bytes ({len(document['resources']):,} objects, "
                          f"{tenants:,} tenants), more than the {max_input_bytes:,} bytes a policy evaluation takes; split the environment")
    started = time.perf_counter()
    results = engine.evaluate(bundle, document, text)
    duration = time.perf_counter() - started
    decisions = apply_waivers(to_decisions(results), document["environment"], active)
    return Verdict(
        environment=document["environment"],
        revision=document.get("revision", ""),
        engine=engine.name,
        policy_digest=bundle.digest,
        input_digest="sha256:" + hashlib.sha256(text).hexdigest(),
        duration_seconds=duration,
        decisions=decisions,
        waiver_problems=problems,
    )


def evaluate(
    env: spec.Environment,
    state: DesiredState,
    live: Inventory | None = None,
    change: dict[str, Any] | None = None,
    engine: Engine | None = None,
    policies_dir: Path = POLICIES_DIR,
    today: dt.date | None = None,
    max_input_bytes: int = MAX_INPUT_BYTES,
) -> Verdict:
    """Judge a rendered environment. Raises PolicyError when no decision could be made."""
    document = policy_input(env, state, live, change)
    return evaluate_input(document, engine, policies_dir, today, max_input_bytes)


def junit_report(suite: str, classname: str, rows: list[dict[str, Any]]) -> str:
    """Decisions as JUnit XML for CI test tabs: a deny fails, a waived deny is skipped, a warning passes
    with its message; a last case, "policy gate", passes or fails with the whole verdict."""
    from junit_xml import TestCase, TestSuite, to_xml_report_string

    cases = []
    for d in rows:
        case = TestCase(f"{d['rule']} {d.get('resource') or ''}".strip(), classname=classname, stdout=d["msg"])
        if d["status"] in ("deny", "approval"):  # an approval missing blocks the merge as a deny does
            case.add_failure_info(message=d["msg"], failure_type="approval" if d["status"] == "approval" else d.get("severity"))
        elif d["status"] == "waived":
            case.add_skipped_info(message=f"waived: {d['msg']}")
        else:
            case.stdout = f"warning: {d['msg']}"
        cases.append(case)
    denied = sum(d["status"] in ("deny", "approval") for d in rows)
    gate = TestCase("policy gate", classname=classname, stdout=f"{denied} unwaived deny or approval decision(s)")
    if denied:
        gate.add_failure_info(message=f"{denied} unwaived deny or approval decision(s)")
    return to_xml_report_string([TestSuite(suite, [*cases, gate])])


def report_rows(verdict: Verdict) -> list[dict[str, Any]]:
    """The decisions as flat rows (resource as text), the shape reports and the plan share."""
    return [d.as_dict() for d in verdict.decisions]


# --- decision log ----------------------------------------------------------------------------

DEFAULT_DECISION_LOG = Path(".fleetops") / "decisions.jsonl"


def decision_log_path(option: Path | None = None) -> Path:
    return option or Path(os.environ.get("FLEETOPS_DECISION_LOG") or DEFAULT_DECISION_LOG)


RECORD_SCHEMA = "fleetops.decision/v1"


def ci_context() -> dict[str, Any]:
    """The pull request and the actor, as the CI systems this project ships workflows for name them."""
    ref = os.environ.get("GITHUB_REF", "")
    pr = (os.environ.get("FLEETOPS_PR") or os.environ.get("CI_MERGE_REQUEST_IID")
          or (ref.split("/")[2] if ref.startswith("refs/pull/") else ""))
    actor = os.environ.get("FLEETOPS_ACTOR") or os.environ.get("GITHUB_ACTOR") or os.environ.get("GITLAB_USER_LOGIN") or ""
    if not actor:
        with contextlib.suppress(Exception):  # no user database entry in a container: leave it empty
            actor = getpass.getuser()
    return {"pr": pr or None, "actor": actor or None}


def decision_record(source: str, environment: str, revision: str, judgement: dict[str, Any], decisions: list[dict[str, Any]],
                    outcome: str, approvals: int | None = None) -> dict[str, Any]:
    """The one record every gate writes (check, plan, reconcile, the Pulumi policy pack) and audit reads:
    who judged what, with which policies, and what came out. Decisions and digests only, never the input."""
    return {
        "schema": RECORD_SCHEMA,
        "id": uuid.uuid4().hex,
        "time": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "source": source,
        "environment": environment,
        "revision": revision,
        **ci_context(),
        "approvals": approvals,
        **judgement,
        "verdict": outcome,
        "summary": decision_counts(decisions),
        "decisions": decisions,
    }


def verdict_record(verdict: Verdict, source: str) -> dict[str, Any]:
    return decision_record(source, verdict.environment, verdict.revision, verdict.judgement(),
                           [d.as_dict() for d in verdict.decisions], "denied" if verdict.denied else "allowed")


def log_decisions(path: Path, record: dict[str, Any]) -> None:
    """Append one decision record (`decision_record`) as a JSON line."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("a") as fh:
            fh.write(json.dumps(record, sort_keys=True, default=str) + "\n")
    except OSError as exc:
        raise PolicyError(f"{path}: cannot write the decision log: {exc.strerror}") from None


# --- Rego tests and coverage -------------------------------------------------------------------

_TEST_RULE = re.compile(r"^(test_\w+)\b", re.MULTILINE)


@dataclass(frozen=True)
class TestResult:
    package: str
    name: str
    passed: bool
    error: str | None = None


@dataclass(frozen=True)
class FileCoverage:
    path: str
    covered: list[int]
    not_covered: list[int]

    @property
    def percent(self) -> float:
        total = len(self.covered) + len(self.not_covered)
        return 100.0 if total == 0 else round(100 * len(self.covered) / total, 1)


@dataclass(frozen=True)
class TestReport:
    results: list[TestResult]
    coverage: list[FileCoverage]  # shipped policies only, not the tests themselves

    @property
    def passed(self) -> bool:
        return bool(self.results) and all(r.passed for r in self.results)

    def as_dict(self) -> dict[str, Any]:
        return {
            "passed": self.passed,
            "tests": [r.__dict__ for r in self.results],
            "coverage": [{"path": c.path, "percent": c.percent, "not_covered": c.not_covered} for c in self.coverage],
        }


def discover_tests(tests: dict[str, str]) -> Iterator[tuple[str, str]]:
    """(package, rule) for each `test_*` rule; a rule defined twice runs once, as OPA does."""
    for _, source in sorted(tests.items()):
        package = package_of(source)
        yield from ((package, name) for name in dict.fromkeys(_TEST_RULE.findall(source)))


def run_tests(policies_dir: Path = POLICIES_DIR) -> TestReport:
    """Run every `*_test.rego` through the embedded engine, with line coverage of the policies.

    Tests pass inputs with `with input as` / `with data.fleet_data... as` (verified on regorus
    0.9.1); a test passes when its rule evaluates to true, fails when undefined or false.
    """
    bundle = load_bundle(policies_dir)
    if not bundle.tests:
        raise PolicyError(f"{policies_dir}: no *_test.rego files")
    embedded = EmbeddedEngine()
    engine = embedded.load(bundle, {**bundle.policies, **bundle.tests})
    engine.set_enable_coverage(True)
    engine.set_input_json("{}")
    results = []
    for package, name in discover_tests(bundle.tests):
        try:
            value = engine.eval_rule(f"data.{package}.{name}")
            results.append(TestResult(package, name, value is True, None if value is True else f"evaluated to {value!r}"))
        except RuntimeError as exc:
            results.append(TestResult(package, name, False, regorus_error(exc, policies_dir)))
    report = {f["path"]: f for f in json.loads(engine.get_coverage_report_as_json()).get("files", [])}
    coverage = []
    for path, source in sorted(bundle.policies.items()):
        if path in report:
            coverage.append(FileCoverage(path, sorted(report[path]["covered"]), sorted(report[path]["not_covered"])))
        else:
            # No test evaluated the file, so regorus reports nothing for it: all its lines are uncovered.
            coverage.append(FileCoverage(path, [], _coverable_lines(embedded, bundle, path)))
    return TestReport(results, coverage)


def _coverable_lines(embedded: EmbeddedEngine, bundle: Bundle, path: str) -> list[int]:
    """The lines of a policy file that coverage counts, as regorus counts them (the lines of its
    expressions, not braces or blank lines): evaluate the file's package once on an empty input in
    an engine of its own, and take every line the report mentions, covered or not."""
    engine = embedded.load(bundle, bundle.policies)
    engine.set_enable_coverage(True)
    engine.set_input_json("{}")
    try:
        engine.eval_query(f"data.{package_of(bundle.policies[path])}")
    except RuntimeError:
        pass  # an error part-way still leaves the lines it reached in the report
    report = {f["path"]: f for f in json.loads(engine.get_coverage_report_as_json()).get("files", [])}
    entry = report.get(path, {"covered": [], "not_covered": []})
    return sorted({*entry["covered"], *entry["not_covered"]})


# --- Pulumi stack -> policy input ------------------------------------------------------------------


def provider_cluster(provider: Any) -> str | None:
    """A pulumi_kubernetes provider resource is named after its cluster (modules/cluster.py)."""
    if provider is None:
        return None
    name = getattr(provider, "name", None)
    if name:
        return str(name)
    urn = getattr(provider, "urn", "") or ""
    return urn.rsplit("::", 1)[-1] or None


def plain(value: Any) -> Any:
    """Pulumi's policy SDK hands props as read-only mapping and sequence proxies: make them data."""
    if isinstance(value, Mapping):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, Sequence) and not isinstance(value, (str, bytes)):
        return [plain(v) for v in value]
    return value


def manifest_from_props(resource_type: str, props: Mapping[str, Any]) -> dict[str, Any]:
    """kubernetes:<group/version>:<Kind> props are the manifest; apiVersion and kind come from the type when absent.

    The server-set `status` is dropped: policies judge what Git declares.
    """
    _, api, kind = resource_type.split(":", 2)
    manifest = {k: v for k, v in plain(props).items() if k != "status"}
    manifest.setdefault("apiVersion", api.removeprefix("core/"))
    manifest.setdefault("kind", kind)
    return manifest


@dataclass(frozen=True)
class StackObject:
    entry: dict[str, Any]
    urn: str


def stack_objects(resources: Iterable[Any]) -> tuple[list[StackObject], list[str]]:
    """Policy-input resources from Pulumi stack resources (PolicyResource-like: resource_type, props, provider, urn)."""
    out, problems = [], []
    for r in resources:
        if not r.resource_type.startswith("kubernetes:"):
            continue  # providers are pulumi:providers:kubernetes; components are fleetops:fleet:*
        cluster = provider_cluster(getattr(r, "provider", None))
        if cluster is None:
            problems.append(f"{r.urn}: no Kubernetes provider, so no cluster")
            continue
        manifest = manifest_from_props(r.resource_type, r.props)
        if not isinstance(manifest.get("metadata"), dict) or "name" not in manifest["metadata"]:
            problems.append(f"{r.urn}: manifest without metadata.name")
            continue
        out.append(StackObject(resource_entry(cluster, manifest), r.urn))
    return out, problems


def _stamp(objects: list[StackObject], where: str, key: str) -> set[str]:
    return {o.entry["manifest"]["metadata"].get(where, {}).get(key) for o in objects} - {None}


def stack_input(resources: Iterable[Any], environments: Path) -> tuple[dict[str, Any], list[StackObject]]:
    """A Pulumi stack's resources -> the same policy input `fleetops check` builds from a render.

    The environment is the one every object is stamped with (label fleetops.io/environment); its
    spec and derived facts come from that environment file in this checkout.
    """
    objects, problems = stack_objects(resources)
    if problems:
        raise PolicyError(problems[0])
    names = _stamp(objects, "labels", ENVIRONMENT_LABEL)
    if len(names) != 1:
        raise PolicyError(f"stack objects must carry one fleetops.io/environment label, found {sorted(names) or 'none'}")
    name = names.pop()
    try:
        env = spec.load_environment(spec.environment_path(name, environments))
    except spec.SpecError as exc:
        raise PolicyError(exc.problems[0]) from None
    # The pack runs in the checkout Pulumi deploys from: its commit is the revision under review.
    return build_input(env, (o.entry for o in objects), git.revision(environments.parent)), objects


def validate_stack(
    resources: Iterable[Any],
    report_violation: Any,
    kind: Literal["deny", "warn"],
    environments: Path,
    policies_dir: Path,
    engine: Engine | None = None,
) -> Verdict | None:
    """The Pulumi policy pack's stack validation: report each unwaived `kind` decision as a violation.

    No decision (bad stack, engine failure) is itself a violation of the deny policy: fail closed.
    """
    try:
        document, objects = stack_input(resources, environments)
        verdict = evaluate_input(document, engine, policies_dir)
    except PolicyError as exc:
        if kind == "deny":
            report_violation(f"fleetops policy gate could not decide: {exc}", None)
        return None
    urns = {(o.entry["cluster"], o.entry["kind"], o.entry["namespace"], o.entry["name"]): o.urn for o in objects}
    for d in verdict.decisions:
        if d.status == kind:
            r = d.resource
            urn = urns.get((r.get("cluster"), r.get("kind"), r.get("namespace", ""), r.get("name")))
            report_violation(f"[{d.rule}] {d.msg}", urn)
    return verdict
