"""The policies on disk: the bundle one evaluation uses (Rego, data, digest) and the rules' METADATA."""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, replace
from enum import StrEnum
from pathlib import Path
from typing import Any, TypeVar

from fleetops import spec
from fleetops.envelope import Severity
from fleetops.errors import PolicyError
from fleetops.policy.dataschema import NO_SCHEMA, SCHEMA_FILE, data_problems, data_reads, parse_schema, read_problems

ROOT = Path(__file__).resolve().parent.parent.parent
POLICIES_DIR = ROOT / "policies"
DATA_FILE = "data.yaml"
WAIVERS_FILE = "waivers.yaml"
DATA_ROOT = "fleet_data"  # policy data is data.fleet_data; policies are data.fleet.*


def display_path(path: Path) -> str:
    """A path as a person would type it from here: relative to the working folder when inside it."""
    try:
        return str(path.resolve().relative_to(Path.cwd()))
    except ValueError:
        return str(path)

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
    return parse_yaml_places(text, file)[0]


def parse_yaml_places(text: str, file: str) -> tuple[Any, spec.Positions]:
    """`parse_yaml` with the line and column of each node, for problems at their place."""
    try:
        return spec.parse_yaml(text, file)
    except spec.SpecError as exc:
        raise PolicyError(problems=exc.problems[:1]) from None


def checked_data(directory: Path, policies: dict[str, str]) -> tuple[str, dict[str, Any]]:
    """`data.yaml`'s text and data, checked against `data.schema.json` beside it, and every path of the
    data the policies read checked to be declared there: anything else is a PolicyError, each problem
    at its line, since a rule that reads a key the data lacks never fires."""
    data_path, schema_path = directory / DATA_FILE, directory / SCHEMA_FILE
    data_text = read_text(data_path) if data_path.is_file() else ""
    data, places = parse_yaml_places(data_text, display_path(data_path))
    if not isinstance(data, dict):
        if data is not None:
            raise PolicyError(f"{display_path(data_path)}:1:1: policy data must be a mapping")
        data = {}
    shown = display_path(schema_path)
    schema = parse_schema(read_text(schema_path), shown) if schema_path.is_file() else NO_SCHEMA
    problems = data_problems(data, places, schema, shown)
    reads = data_reads({display_path(directory / name): source for name, source in policies.items()})
    problems += read_problems(reads, schema, shown if schema_path.is_file() else f"{shown} (there is none)")
    if problems:
        raise PolicyError(problems=problems)
    return data_text, data


def load_bundle(directory: Path = POLICIES_DIR) -> Bundle:
    if not directory.is_dir():
        raise PolicyError(f"{directory}: no policy folder")
    files = sorted(p for p in directory.rglob("*.rego") if ".venv" not in p.parts)
    sources = {p.relative_to(directory).as_posix(): read_text(p) for p in files}
    policies = {k: v for k, v in sources.items() if not _is_test(Path(k))}
    if not policies:
        raise PolicyError(f"{directory}: no .rego policies")
    data_text, data = checked_data(directory, policies)
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


_Word = TypeVar("_Word", bound=StrEnum)


class Resolution(StrEnum):
    """What resolves a rule's denial (`custom.gate`): a different change, or (`approval`) more approvals."""

    CHANGE = "change"
    APPROVAL = "approval"


@dataclass(frozen=True)
class RuleMeta:
    """A `# METADATA` block and the rule it annotates, for reports and the audit."""

    file: str
    line: int  # of the rule head
    rule: str  # the head, e.g. "deny" or "warn"
    rule_id: str  # the "rule" its decisions carry, e.g. "quota.tenant_share"
    title: str
    description: str
    severity: Severity
    control_id: str
    # custom.fix: how to resolve a decision of this rule, for the plan: one text, or alternatives
    # ("..., or ..."); `{name}` is a value of the decision (its resource, figures or fix_values), and an
    # alternative naming a value the decision does not give is left out.
    fix: tuple[str, ...] = ()
    gate: Resolution = Resolution.CHANGE
    # custom.location: where in the environment file a decision of this rule is, beside the item its
    # resource names: `field`, the field of that item the rule is about (a quota's `guaranteed`), and
    # `causes`, fields elsewhere whose edit makes it fire (a fleet-wide setting, what a cost is made of).
    field: spec.Loc = ()
    causes: tuple[spec.Loc, ...] = ()


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
                first = exc.problems[0]
                raise PolicyError(problems=[replace(first, message=f"{first.message} (METADATA of the rule at line {line})")]) from None
            if not isinstance(meta, dict):
                raise PolicyError(f"{display_path(bundle.directory / name)}:{line}: METADATA must be a mapping")
            if meta.get("scope") == "package" or match.group(2) == "package":
                continue
            custom = meta.get("custom") or {}
            rule_id = _RULE_ID.search(source, match.end())
            where = f"{display_path(bundle.directory / name)}:{line}"
            out.append(RuleMeta(name, line, match.group(2), rule_id.group(1) if rule_id else "", str(meta.get("title", "")),
                                str(meta.get("description", "")), word(custom.get("severity"), Severity, f"{where}: METADATA custom.severity is"),
                                str(custom.get("control_id", "")), _texts(custom.get("fix", ()), f"{where}: METADATA custom.fix"),
                                word(custom.get("gate", Resolution.CHANGE), Resolution, f"{where}: METADATA custom.gate is"),
                                *_location(custom.get("location") or {}, f"{where}: METADATA custom.location")))
    return out


def _texts(value: Any, said: str) -> tuple[str, ...]:
    """One text or a list of them (`custom.fix`, `custom.location.causes`)."""
    texts = [value] if isinstance(value, str) else value
    if not isinstance(texts, list | tuple) or not all(isinstance(t, str) and t for t in texts):
        raise PolicyError(f"{said} is {value!r}, not a text or a list of texts (policies/README.md)")
    return tuple(texts)


def _location(value: Any, said: str) -> tuple[spec.Loc, tuple[spec.Loc, ...]]:
    """`custom.location` ({field: a.b, causes: [c.d, ...]}, dotted paths of the environment file) as paths;
    anything else is refused: a misspelt key would leave the rule's decisions at the wrong line."""
    if not isinstance(value, dict) or not set(value) <= {"field", "causes"}:
        raise PolicyError(f"{said} is {value!r}, not a mapping of field and causes (policies/README.md)")
    field = _texts(value.get("field", []), f"{said}.field")
    if len(field) > 1:
        raise PolicyError(f"{said}.field is {value['field']!r}, not one dotted path")
    causes = _texts(value.get("causes", []), f"{said}.causes")
    return (tuple(field[0].split(".")) if field else ()), tuple(tuple(c.split(".")) for c in causes)


def word(value: Any, kind: type[_Word], said: str) -> _Word:
    """A word of one of the policy contract's closed sets (a severity, a gate); another is a PolicyError
    `<said> <value>, not one of ...`: the gate would otherwise weigh a rule or a decision it cannot read."""
    try:
        return kind(value)
    except ValueError:
        raise PolicyError(f"{said} {value!r}, not one of {', '.join(kind)} (policies/README.md)") from None
