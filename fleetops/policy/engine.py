"""The two engines that give the same decisions: regorus in-process (`EmbeddedEngine`) and an OPA server (`OpaEngine`)."""

from __future__ import annotations

import contextlib
import json
import os
import re
import time
import uuid
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import urlsplit

from fleetops.errors import PolicyError, connection_failure
from fleetops.policy.bundle import DATA_FILE, DATA_ROOT, Bundle, display_path, package_of

DEFAULT_TIMEOUT = 30.0

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
    every module carries `fleetops_policy_digest`: an answer without it, or with other data, is no
    answer. That tells a stray write, not a forgery: `OpaEngine` also checks the answer against the
    embedded engine's.
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
    (`OpaUpload`), queried with the input, checked to be the ones uploaded, and removed; the answer
    stands only where the embedded engine decides the same.

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
        self.embedded = EmbeddedEngine(timeout)

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
        if reason := connection_failure(exc):  # which request met it says nothing more: the server is not answering
            return PolicyError(f"OPA at {self.url}: no answer: {reason}")
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
        answer = collect(result["fleet"], fleet_packages(bundle.policies))
        # A client that can write to this OPA can also copy the package and digest lines above and
        # replace the rules under them: nothing in the answer tells that apart. So OPA's answer
        # stands only where the embedded engine, given the same bundle and input in this process,
        # answers the same; any difference is no verdict, and so OPA can fail a gate, never pass it.
        if dispute := disagreement(answer, self.embedded.evaluate(bundle, document, text)):
            raise PolicyError(f"OPA at {self.url}: its answer differs from the embedded engine's on the same policies and input ({dispute}): "
                              "no verdict; an OPA that other clients can write to is no judge (README: trust boundary)")
        return answer


def _plain(value: Any) -> Any:
    """A decision as both engines' JSON reads it: OPA writes a whole number 2 where regorus may write 2.0."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


def _tally(decisions: list[dict[str, Any]]) -> Counter[str]:
    return Counter(json.dumps(_plain(d), sort_keys=True) for d in decisions)


def disagreement(answer: Results, reference: Results) -> str | None:
    """The first decision one engine made and the other did not (the reference's denials first), or None."""
    for kind in ("deny", "warn"):
        for package in sorted(answer.keys() | reference.keys()):
            theirs, ours = (_tally(side.get(package, {}).get(kind, [])) for side in (answer, reference))
            for missing, by in ((ours - theirs, "OPA"), (theirs - ours, "the embedded engine")):
                if missing:
                    first = json.loads(min(missing))
                    resource = first.get("resource") if isinstance(first.get("resource"), dict) else {}
                    where = "/".join(str(resource[k]) for k in ("cluster", "kind", "namespace", "name") if resource.get(k))
                    return f"data.{package}.{kind}: {by} did not decide {first.get('rule')}{f' on {where}' if where else ''}"
    return None


def engine_from(opa_url: str | None = None, timeout: float = DEFAULT_TIMEOUT) -> Engine:
    """`--opa-url` or FLEETOPS_OPA_URL selects an OPA server (token: FLEETOPS_OPA_TOKEN); else the embedded engine."""
    url = opa_url or os.environ.get("FLEETOPS_OPA_URL")
    if url:
        return OpaEngine(url, token=os.environ.get("FLEETOPS_OPA_TOKEN") or None, timeout=timeout)
    return EmbeddedEngine(timeout=timeout)
