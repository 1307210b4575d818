"""Reading an environment file: bounded, parsed with positions, validated by the models and the
checks, every problem worded in the file's own terms at its line and column."""

import dataclasses
import difflib
import os
import re
import stat
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from fleetops.errors import Problem, SpecError
from fleetops.spec.checks import cross_checks, over_limits
from fleetops.spec.fields import LIMITS, Environment
from fleetops.spec.positions import Loc, Positions, format_loc, parse_yaml

M = TypeVar("M", bound=BaseModel)


_TYPE_NAMES = {
    "int_type": "an integer",
    "int_parsing": "an integer",
    "int_from_float": "an integer",
    "float_type": "a number",
    "float_parsing": "a number",
    "string_type": "a string",
    "bool_type": "true or false",
    "list_type": "a list",
    "dict_type": "a mapping",
    "model_type": "a mapping",
    "model_attributes_type": "a mapping",
}
_BOUNDS = {"greater_than_equal": (">=", "ge"), "greater_than": (">", "gt"), "less_than_equal": ("<=", "le"), "less_than": ("<", "lt")}


def _yaml_repr(value: Any) -> str:
    """A scalar as the person wrote it in YAML: true, null, 4, 'text'."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    return repr(value)


def _message(err: Any, fields: list[str]) -> str:
    """One pydantic error as a short sentence in the file's own terms, without pydantic's phrasing."""
    kind, ctx = err["type"], err.get("ctx", {})
    if kind == "extra_forbidden":
        close = difflib.get_close_matches(str(err["loc"][-1]), fields, n=1)
        return f"unknown field (did you mean {close[0]!r}?)" if close else "unknown field"
    if kind == "missing":
        return "required field is missing"
    if kind in _TYPE_NAMES:
        msg = f"must be {_TYPE_NAMES[kind]}"
    elif kind in _BOUNDS:
        op, key = _BOUNDS[kind]
        msg = f"must be {op} {ctx[key]}"
    elif kind == "literal_error":
        msg = f"must be one of {ctx['expected']}"
    elif kind == "too_long":  # only the LIMITS set a longest list
        msg = f"at most {ctx['max_length']:,} items (fleetops.spec.LIMITS), got {len(err['input']):,}"
    elif kind in ("too_short", "string_too_short"):
        msg = "must not be empty" if ctx.get("min_length") == 1 else f"must have at least {ctx['min_length']} items"
    elif kind == "string_too_long":
        msg = f"must be at most {ctx['max_length']} characters"
    elif kind == "string_pattern_mismatch":
        msg = f"must match {ctx['pattern']}"
    elif kind == "value_error":
        msg = str(ctx.get("error", err["msg"]))
    else:
        msg = err["msg"].replace("Input should be", "must be", 1)
    if "got" not in msg and not isinstance(err.get("input"), (dict, list)) and "input" in err:
        msg = f"{msg}, got {_yaml_repr(err['input'])}"
    return msg


def _model_fields(loc: Loc) -> list[str]:
    """The field names of the model at `loc` (for 'did you mean'): walks Environment's annotations."""
    model: Any = Environment
    for part in loc[:-1]:
        if isinstance(part, int) or not (isinstance(model, type) and issubclass(model, BaseModel)):
            continue
        field = model.model_fields.get(part)
        if field is None:  # a key of a mapping field (quota: {nvidia.com/gpu: Quota}): stay on its values
            continue
        model = field.annotation
        for arg in getattr(model, "__args__", ()):  # list[Pool], Sharing | None
            if isinstance(arg, type) and issubclass(arg, BaseModel):
                model = arg
    return list(model.model_fields) if isinstance(model, type) and issubclass(model, BaseModel) else []


def _pydantic_problems(exc: ValidationError, pos: Positions) -> list[Problem]:
    problems = []
    for err in exc.errors(include_url=False):
        loc = tuple(p for p in err["loc"] if p != "[key]")
        fields = _model_fields(loc) if err["type"] == "extra_forbidden" else []
        problems.append(pos.error(loc, _message(err, fields)))
    return problems


@dataclass(frozen=True)
class Document:
    """An environment file as read: the validated model, and the data and positions it came from
    (plan compares the data field by field and points decisions at their lines without reading it again)."""

    env: Environment
    data: dict[str, Any]
    positions: Positions


def parse_environment(text: str, file: str, name: str | None = None) -> Document:
    """Validate an environment document (of the file named `name`, when given); raises SpecError with
    every problem found in one pass: the schema's, then the cross-field checks on every item that
    passed the schema."""
    data, pos = parse_yaml(text, file)
    if data is None:
        raise SpecError([Problem("the file is empty; an environment needs at least 'environment', 'clusters' and 'budget'", file, 1, 1)])
    if not isinstance(data, dict):
        raise SpecError([pos.error((), f"the document must be a mapping, got {type(data).__name__}")])
    pos = dataclasses.replace(pos, data=data)
    # Objects are labelled and pruned by environment name: a file that names another environment
    # would act on that one's objects.
    written = data.get("environment")
    problems = [pos.error(("environment",), f"must equal the file name {name!r}, got {written!r}")] if name and isinstance(written, str) and written != name else []
    try:
        env = Environment.model_validate(data)
    except ValidationError as exc:
        problems += _pydantic_problems(exc, pos)
        try:
            valid = _valid_part(data, exc)
        except RecursionError:  # data that holds itself (an alias of its own anchor): its schema errors say enough
            valid = None
        if valid is not None:
            part, kept, dropped_names = valid
            checks = _checks(part, lambda loc: format_loc(_original(loc, kept), pos.item_name))
            problems += [pos.error(_original(loc, kept), msg) for loc, msg in checks
                         if not any(re.search(rf"(?<![-\w.]){re.escape(n)}(?![-\w.])", msg) for n in dropped_names)]
        raise SpecError(problems) from None
    problems += [pos.error(loc, msg) for loc, msg in _checks(env, lambda loc: format_loc(loc, pos.item_name))]
    if problems:
        raise SpecError(problems)
    return Document(env, data, pos)


def _checks(env: Environment, where: Callable[[Loc], str]) -> list[tuple[Loc, str]]:
    """The LIMITS, then the cross checks, which grow with what the limits bound."""
    return list(over_limits(env)) or list(cross_checks(env, where))


MAX_PRUNES = 4  # rounds of leaving out invalid items (one usually does: an item left out takes its errors with it)


def _valid_part(data: dict[str, Any], exc: ValidationError) -> tuple[Environment, dict[Loc, list[int]], set[str]] | None:
    """The environment without the list items that fail the schema, so the cross checks can judge the
    rest in the same run: the model, which original indices each shortened list kept, and the names
    of the items left out and of the items holding them (a check that names one cannot be judged).
    None when an error is not inside a list item: nothing can stand in for what is missing."""
    dropped: set[Loc] = set()
    kept: dict[Loc, list[int]] = {}
    for _ in range(MAX_PRUNES):
        for err in exc.errors(include_url=False):
            loc = _original(tuple(p for p in err["loc"] if p != "[key]"), kept)
            items = [end for end, part in enumerate(loc, start=1) if isinstance(part, int)]
            if not items:
                return None
            dropped.add(loc[: items[-1]])
        kept = {}
        pruned = _without(data, (), dropped, kept)
        try:
            env = Environment.model_validate(pruned)
        except ValidationError as again:
            exc = again
            continue
        # The name as written and as it reads trimmed ("center-a\n" is refused; "center-a" is what references say).
        return env, kept, {form for loc in dropped for name in _names_along(data, loc) for form in (name, name.strip()) if form}
    return None


def _without(value: Any, loc: Loc, dropped: set[Loc], kept: dict[Loc, list[int]]) -> Any:
    """`value` without the list items at `dropped`; `kept` gets the original indices of each list shortened."""
    if isinstance(value, dict):
        return {key: _without(item, loc + (key,), dropped, kept) for key, item in value.items()}
    if isinstance(value, list):
        indices = [i for i in range(len(value)) if loc + (i,) not in dropped]
        if len(indices) != len(value):
            kept[loc] = indices
        return [_without(value[i], loc + (i,), dropped, kept) for i in indices]
    return value


def _original(loc: Loc, kept: dict[Loc, list[int]]) -> Loc:
    """A place in the shortened data as a place in the file."""
    out: Loc = ()
    for part in loc:
        out += (kept[out][part] if isinstance(part, int) and out in kept else part,)
    return out


def _names_along(data: Any, loc: Loc) -> Iterator[str]:
    """The names of the items on the way to `loc` (a pool's and its cluster's)."""
    for part in loc:
        if isinstance(data, dict) and part in data or isinstance(data, list) and isinstance(part, int) and part < len(data):
            data = data[part]
        else:
            return
        if isinstance(part, int) and isinstance(data, dict) and isinstance(data.get("name"), str):
            yield data["name"]


_FILE_TYPES = ((stat.S_ISDIR, "a folder"), (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
               (stat.S_ISFIFO, "a named pipe"), (stat.S_ISSOCK, "a socket"))


def read_bounded(path: Path, limit: int, file: str, what: str) -> bytes:
    """The bytes of a regular file (a link is followed), at most `limit` of them; anything else is one
    SpecError at `file:1:1`. A device, pipe or socket is refused before a byte is read (its size says
    nothing of what it yields: /dev/zero never ends, a pipe blocks), and a file that grows past its
    size while read, or a /proc file that reports none, is cut at limit + 1 bytes and refused."""
    try:
        # O_NONBLOCK: opening a named pipe must not wait for a writer; a regular file reads as ever.
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY)
    except FileNotFoundError:
        raise SpecError([Problem("no such file", file, 1, 1)]) from None
    except OSError as exc:  # no permission, a dangling link, a loop of links
        raise SpecError([Problem(f"cannot read {what}: {exc.strerror}", file, 1, 1)]) from None
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode) or info.st_size > limit:
        os.close(fd)
        if stat.S_ISREG(info.st_mode):
            raise SpecError([Problem(f"file is {info.st_size} bytes, more than the {limit} byte limit for {what}", file, 1, 1)])
        kind = next((name for test, name in _FILE_TYPES if test(info.st_mode)), "of another kind")
        raise SpecError([Problem(f"is {kind}, not a regular file: {what} is read from a regular file only", file, 1, 1)])
    with os.fdopen(fd, "rb") as stream:
        try:
            data = stream.read(limit + 1)
        except OSError as exc:
            raise SpecError([Problem(f"cannot read {what}: {exc.strerror}", file, 1, 1)]) from None
    if len(data) > limit:
        raise SpecError([Problem(f"more than the {limit} byte limit for {what}", file, 1, 1)])
    return data


def read_output(path: Path, model: type[M], limit: int, command: str) -> M:
    """A command's `--output json` document given back to fleetops (audit --statements, --whatif), read whole
    (at most `limit` bytes) into `model`; one ValueError naming the file and its first wrong field otherwise."""
    raw = read_bounded(path, limit, str(path), f"the output of `fleetops {command}`")
    try:
        return model.model_validate_json(raw)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(map(str, first["loc"])) or "the document"
        raise ValueError(f"{path}: not the JSON of `fleetops {command} --output json`: {where}: {first['msg']}") from None


ENVIRONMENTS = Path("environments")  # the folder of environment files, in a fleet's repository


def environment_path(name: str, folder: Path = ENVIRONMENTS) -> Path:
    """The file of environment `name` (a DNS label, never a path) in `folder`."""
    return folder / f"{name}.yaml"


def no_environment(path: str | Path, name: str, known: Iterable[str], where: str = "") -> Problem:
    """`--env NAME` that names no environment file (`where` it was looked for), with the names there are to choose from."""
    return Problem(f"no environment {name!r}{where} (known: {', '.join(sorted(set(known))) or 'none'})", str(path), 1, 1)


def load_environment(path: str | Path, display: str | None = None) -> Environment:
    """Read and validate `environments/<env>.yaml`."""
    return read_environment(path, display).env


def read_environment(path: str | Path, display: str | None = None) -> Document:
    """`load_environment`, keeping the data and positions the model was validated from."""
    path = Path(path)
    file = display or str(path)
    data = read_bounded(path, LIMITS.file_bytes, file, "an environment")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        col = exc.start - (data.rfind(b"\n", 0, exc.start) + 1) + 1
        raise SpecError([Problem(f"not UTF-8 text ({exc.reason} at byte {exc.start})", file, line, col)]) from None
    return parse_environment(text, file, path.stem)
