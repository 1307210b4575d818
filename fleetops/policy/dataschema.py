"""The policy data's schema (`policies/data.schema.json`): what `data.yaml` may and must hold, and what
the rules may read of it.

A rule that reads a key the data lacks is undefined in Rego, and an undefined rule never fires: a
misspelt threshold in `data.yaml`, or in the `.rego` that reads it, opened the gate silently. So both
sides are checked against the one schema whenever the policies are loaded: the data (an unknown key, a
missing one, a wrong type is a problem at its line of `data.yaml`) and every `data.fleet_data` path the
rules read (one the schema does not declare is a problem at its line of the `.rego`).

The reads are found in the Rego's text, not by a Rego parser: a path is followed through a package's
`x := data.fleet_data....` aliases, `some v in` / `some k, v in` / `every v in` iteration, `v := ref`
and `object.get(ref, "key", ...)` in a rule's body, and into the parameters of the functions such a
value is passed to (`data.fleet.lib.system_component(r, entry)`). A read made another way (a key
computed at evaluation, `walk`) is not checked here; the shipped policies have none.
"""

from __future__ import annotations

import difflib
import functools
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from fleetops.errors import PolicyError, Problem
from fleetops.spec import Loc, Positions

SCHEMA_FILE = "data.schema.json"
DATA_REF = "data.fleet_data"
# A directory without a schema declares no data: any key in data.yaml, any read of it, is refused.
NO_SCHEMA: dict[str, Any] = {"type": "object", "additionalProperties": False}

ANY = "*"  # a path's step that is a computed key or an item of a list
Path = tuple[str, ...]


@functools.lru_cache(maxsize=4)  # checking a schema against the meta-schema is most of a load's 50 ms; plan loads twice
def parse_schema(text: str, file: str) -> dict[str, Any]:
    """The schema file as a JSON Schema (2020-12); not JSON, or not a schema, is a PolicyError at its place."""
    from jsonschema import Draft202012Validator
    from jsonschema.exceptions import SchemaError

    try:
        schema = json.loads(text)
    except json.JSONDecodeError as exc:
        raise PolicyError(problems=[Problem(f"not JSON: {exc.msg}", file, exc.lineno, exc.colno)]) from None
    try:
        Draft202012Validator.check_schema(schema)
    except SchemaError as exc:
        where = "/".join(map(str, exc.path))
        raise PolicyError(f"{file}: not a JSON Schema{f' at {where}' if where else ''}: {exc.message}") from None
    if not isinstance(schema, dict):
        raise PolicyError(f"{file}: the policy data's schema must be an object")
    return schema


def _shown(error: Any) -> str:
    # jsonschema writes the whole offending value into its message: a list item's mapping is long.
    message: str = error.message
    value = repr(error.instance)
    return message.replace(value, "the value") if len(value) > 60 else message


def data_problems(data: Any, positions: Positions, schema: dict[str, Any], schema_file: str) -> list[Problem]:
    """Every way `data` breaks `schema`, each one line at its place, in the order of the file: an
    unknown key (a misspelling of a missing key is that one line, not two), a missing key, then any
    other violation."""
    from jsonschema import Draft202012Validator

    problems, unknown, missing, declared = [], {}, {}, {}
    for error in Draft202012Validator(schema).iter_errors(data):
        loc: Loc = tuple(error.absolute_path)
        if error.validator == "additionalProperties" and isinstance(error.instance, dict):
            declared[loc] = sorted(error.schema.get("properties", {}))
            unknown[loc] = sorted((str(k) for k in set(error.instance) - set(declared[loc])))
        elif error.validator == "required" and isinstance(error.instance, dict):
            missing[loc] = [key for key in error.validator_value if key not in error.instance]
        else:
            problems.append(positions.error(loc, _shown(error)))
    for loc, keys in unknown.items():
        for key in keys:
            meant = difflib.get_close_matches(key, missing.get(loc, []), n=1)
            if meant:
                missing[loc].remove(meant[0])
                problems.append(positions.error((*loc, key), f"unknown key: did you mean {meant[0]}? {meant[0]} is missing, "
                                                             f"and the rules that read it would never fire ({schema_file})"))
            else:
                like = difflib.get_close_matches(key, declared[loc], n=1)
                problems.append(positions.error((*loc, key), f"unknown key: {f'did you mean {like[0]}? ' if like else ''}no rule reads it "
                                                             f"({schema_file} declares {', '.join(declared[loc]) or 'none'})"))
    for loc, keys in missing.items():
        problems.extend(positions.error((*loc, key), f"missing: the rules that read it would never fire ({schema_file} requires it)") for key in keys)
    return sorted(problems, key=lambda p: (p.line or 0, p.column or 0))


@dataclass(frozen=True)
class Read:
    """One path of the policy data a rule reads, and where."""

    file: str
    line: int
    column: int
    path: Path


# A reference: a head (an alias, a bound variable or data.fleet_data) and its .key / [index] steps.
_REF = re.compile(r"(?<![\w.])(?P<head>data\.fleet_data|[A-Za-z_]\w*)(?P<steps>(?:\.[A-Za-z_]\w*|\[[^\[\]\n]*\])*)")
_STEP = re.compile(r"\.(?P<key>[A-Za-z_]\w*)|\[\s*(?:\"(?P<string>[^\"\\]*)\"|(?P<other>[^\]]*))\]")
_IN = re.compile(r"\b(?:some|every)\s+(?P<first>[A-Za-z_]\w*)(?:\s*,\s*(?P<second>[A-Za-z_]\w*))?\s+in\s+(?P<ref>[^\s;{}]+)")
_ASSIGN = re.compile(r"(?<![\w.])(?P<var>[A-Za-z_]\w*)\s*:=\s*(?P<ref>[^\s;{}|]+)\s*(?:$|[;}\]|])", re.MULTILINE)
_OBJECT_GET = re.compile(r"\bobject\.get\(\s*(?P<ref>[^\s,()]+)\s*,\s*(?:\"(?P<key>[^\"\\]*)\"|\[(?P<keys>[^\]]*)\])")
_CALL = re.compile(r"(?<![\w.])(?P<name>(?:data\.)?[A-Za-z_][\w.]*)\(")
_HEAD = re.compile(r"^(?P<name>[A-Za-z_]\w*)(?:\((?P<params>[^)]*)\))?")
_COMMENT = re.compile(r'"(?:[^"\\\n]|\\.)*"|`[^`]*`|(?P<comment>#[^\n]*)')
_PACKAGE = re.compile(r"^package\s+([\w.]+)", re.MULTILINE)


def _without_comments(source: str) -> str:
    """The source with each comment blanked, strings and line numbers kept."""
    return _COMMENT.sub(lambda m: " " * len(m.group(0)) if m.group("comment") else m.group(0), source)


def _without_strings(text: str) -> str:
    """`text` with each string's inside blanked (same length): `"cfg.x, y"` in a message is no read and no comma."""
    return _COMMENT.sub(lambda m: m.group(0) if m.group("comment") else m.group(0)[0] + " " * (len(m.group(0)) - 2) + m.group(0)[-1], text)


@dataclass(frozen=True)
class _Block:
    """A top-level statement of a module: a rule or function with its body."""

    file: str
    package: str
    line: int  # of its head
    text: str  # comments blanked
    code: str  # strings blanked too: where references, bindings and calls are looked for


def _blocks(file: str, source: str) -> Iterator[_Block]:
    text = _without_comments(source)
    package = match.group(1) if (match := _PACKAGE.search(text)) else ""
    lines = text.split("\n")
    starts = [i for i, line in enumerate(lines) if line[:1].isalpha() or line[:1] == "_"]
    for n, start in enumerate(starts):
        end = starts[n + 1] if n + 1 < len(starts) else len(lines)
        if not re.match(r"(package|import)\b", lines[start]):
            block = "\n".join(lines[start:end])
            yield _Block(file, package, start + 1, block, _without_strings(block))


def _call_arguments(text: str, start: int) -> list[str]:
    """The top-level, comma-separated arguments of the call whose `(` is at `start`."""
    depth, current, out = 0, "", []
    for char in text[start + 1:]:
        if char in "([{":
            depth += 1
        elif char in ")]}":
            if depth == 0:
                out.append(current.strip())
                return out
            depth -= 1
        if char == "," and depth == 0:
            out.append(current.strip())
            current = ""
        else:
            current += char
    return []


class _Reads:
    """The data paths a set of modules reads, found by following each alias and bound value."""

    def __init__(self, sources: dict[str, str]) -> None:
        self.blocks = [block for file, source in sources.items() for block in _blocks(file, source)]
        self.aliases: dict[str, dict[str, Path]] = {}  # package -> alias -> path
        self.functions: dict[str, list[tuple[_Block, list[str]]]] = {}  # "package.name" -> bodies, parameters
        for block in self.blocks:
            head = _HEAD.match(block.text)
            if head is None:
                continue
            if head.group("params") is not None:
                params = [p.strip() for p in head.group("params").split(",")]
                self.functions.setdefault(f"{block.package}.{head.group('name')}", []).append((block, params))
            elif (alias := re.fullmatch(rf"([A-Za-z_]\w*)\s*:=\s*({re.escape(DATA_REF)}(?:\.[A-Za-z_]\w*)*)\s*", block.text)):
                self.aliases.setdefault(block.package, {})[alias.group(1)] = tuple(alias.group(2).split(".")[2:])
        self.found: list[Read] = []
        self.followed: set[tuple[str, int, str, Path]] = set()

    def resolve(self, ref: str, env: dict[str, Path]) -> Path | None:
        match = _REF.fullmatch(ref.strip())
        if match is None:
            return None
        head = match.group("head")
        if head == DATA_REF:
            path: Path = ()
        elif head in env:
            path = env[head]
        else:
            return None
        for step in _STEP.finditer(match.group("steps")):
            path = (*path, step.group("key") or (step.group("string") if step.group("string") is not None else ANY))
        return path

    def scan(self, block: _Block, env: dict[str, Path]) -> None:
        env = dict(env)
        for _ in range(8):  # bindings found in the body's order need a few rounds at most; bounded
            before = len(env)
            for match in _IN.finditer(block.code):
                if (path := self.resolve(match.group("ref"), env)) is not None:
                    env[match.group("second") or match.group("first")] = (*path, ANY)
            for match in _ASSIGN.finditer(block.code):
                if (path := self.resolve(match.group("ref"), env)) is not None:
                    env[match.group("var")] = path
            if len(env) == before:
                break

        def place(offset: int) -> tuple[int, int]:
            return block.line + block.text.count("\n", 0, offset), offset - block.text.rfind("\n", 0, offset)

        for match in _REF.finditer(block.code):
            if (path := self.resolve(match.group(0), env)) is not None:
                self.found.append(Read(block.file, *place(match.start()), path))
        for match in _OBJECT_GET.finditer(block.text):
            if (path := self.resolve(match.group("ref"), env)) is not None:
                keys = [match.group("key")] if match.group("key") is not None else re.findall(r'"([^"\\]*)"', match.group("keys"))
                self.found.append(Read(block.file, *place(match.start()), (*path, *keys)))
        for match in _CALL.finditer(block.code):
            name = match.group("name")
            function = name.removeprefix("data.") if name.startswith("data.") else f"{block.package}.{name}"
            for index, argument in enumerate(_call_arguments(block.code, match.end() - 1)):
                if (path := self.resolve(argument, env)) is not None:
                    self.follow(function, index, path)

    def follow(self, function: str, index: int, path: Path) -> None:
        for body, params in self.functions.get(function, []):
            key = (body.file, body.line, function, (str(index), *path))
            if index < len(params) and key not in self.followed:
                self.followed.add(key)
                self.scan(body, {**self.aliases.get(body.package, {}), params[index]: path})

    def all(self) -> list[Read]:
        for block in self.blocks:
            self.scan(block, self.aliases.get(block.package, {}))
        return sorted(set(self.found), key=lambda r: (r.file, r.line, r.column, r.path))


def data_reads(sources: dict[str, str]) -> list[Read]:
    """Every path of `data.fleet_data` the modules (file -> Rego source) read, with its place."""
    return list(_reads(tuple(sorted(sources.items()))))


@functools.lru_cache(maxsize=4)
def _reads(sources: tuple[tuple[str, str], ...]) -> tuple[Read, ...]:
    return tuple(_Reads(dict(sources)).all())


def _resolve(schema: dict[str, Any], node: dict[str, Any]) -> dict[str, Any]:
    ref = node.get("$ref")
    if isinstance(ref, str) and ref.startswith("#/"):
        for part in ref[2:].split("/"):
            schema = schema[part]
        return schema
    return node


def declares(schema: dict[str, Any], path: Path) -> bool:
    """Whether `path` (keys, `*` for a computed key or a list item) names data the schema declares."""
    nodes = [schema]
    for step in path:
        following = []
        for node in (_resolve(schema, n) for n in nodes):
            properties = node.get("properties", {})
            extra = node.get("additionalProperties")
            if step == ANY and "items" in node:
                following.append(node["items"])
            elif step == ANY:
                following.extend(properties.values())
            if step in properties:
                following.append(properties[step])
            if isinstance(extra, dict):
                following.append(extra)
        if not following:
            return False
        nodes = following
    return True


def declared_paths(schema: dict[str, Any], node: dict[str, Any] | None = None, path: Path = ()) -> Iterator[Path]:
    """Every path the schema declares, a computed key or list item as `*`."""
    node = _resolve(schema, schema if node is None else node)
    yield path
    for key, child in node.get("properties", {}).items():
        yield from declared_paths(schema, child, (*path, key))
    if isinstance(node.get("additionalProperties"), dict):
        yield from declared_paths(schema, node["additionalProperties"], (*path, ANY))
    if isinstance(node.get("items"), dict):
        yield from declared_paths(schema, node["items"], (*path, ANY))


def read_problems(reads: list[Read], schema: dict[str, Any], schema_file: str) -> list[Problem]:
    """A problem at each read of a path the schema does not declare."""
    return [Problem(f"reads {'.'.join((DATA_REF, *r.path))}, which {schema_file} does not declare: the rule would never fire",
                    r.file, r.line, r.column) for r in reads if not declares(schema, r.path)]
