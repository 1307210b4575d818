"""The forge a fleet repository lives on: approvals as the gate counts them, and the plan's sticky note.

Approvals (for `fleetops plan --approvals`) are counted per protected path: each file the change
touches that the gate protects (an environment file, policies/, the program as `revisions.PROGRAM`
defines it, a CODEOWNERS file), under its new name and, for a rename, its old one, has the approvals
of its own owners (CODEOWNERS, last matching pattern wins; a team or group counts through its
members), and the change has the fewest of them. An owner of README.md (a catch-all line) approving
does not approve environments/prod.yaml; a protected path nobody owns has none. CODEOWNERS is read
from the checkout the gate runs in, the base's, never the head's; without one, none counts.

GitHub: only current approvals count (each reviewer's latest review is APPROVED and was given on the
head commit: a push after it, or a dismissal, takes it back). GitLab: the merge request approvals
API, only approvals given since the latest push (`approved_at` against the newest diff version), the
author's own left out, each counted only where the approver is a code owner (a user, or a member of
a group with at least Developer access) of the path in every CODEOWNERS section that owns it;
GitLab's own approval rules decide nothing here.
Sticky note (GitLab; GitHub workflows use marocchino/sticky-pull-request-comment): one note per
environment, found again by a hidden marker and edited in place, so a merge request does not
collect a plan per push. Tokens come from the environment and never appear in output or errors.
"""

from __future__ import annotations

import datetime as dt
import functools
import json
import os
import re
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import pathspec

from fleetops import revisions, spec
from fleetops.errors import ForgeError

Fetch = Callable[[str], Any]  # URL -> decoded JSON (every page)
Send = Callable[[str, str, dict[str, Any]], Any]  # method, URL, JSON body -> decoded JSON
Members = Callable[[str], set[str]]  # an owner as CODEOWNERS names it (`@user`, `@org/team`) -> the logins it stands for


CODEOWNERS_PLACES = (".github/CODEOWNERS", "CODEOWNERS", "docs/CODEOWNERS")  # where GitHub looks, in its order
GITLAB_CODEOWNERS_PLACES = ("CODEOWNERS", "docs/CODEOWNERS", ".gitlab/CODEOWNERS")  # where GitLab looks, in its order

# GitLab's section header: `[Name]`, `^[Name]` (optional), `[Name][2]` (approvals), then default owners.
_SECTION = re.compile(r"^\^?\[[^\]]+\](?:\[\d+\])?\s*(.*)$")
GITHUB_MAX_FILES = 3000  # "List pull requests files" answers at most this many
_DEVELOPER = 30  # GitLab's access level from which a group member's approval is a code owner's


def protected(path: str) -> bool:
    """Whether the gate's approvals are for a change of `path`: an environment, the policies, the
    program, or who owns them."""
    return (path.startswith((f"{spec.ENVIRONMENTS.as_posix()}/", "policies/")) or revisions.in_program(path)
            or path in CODEOWNERS_PLACES or path in GITLAB_CODEOWNERS_PLACES)


@dataclass(frozen=True)
class _Rule:
    pattern: pathspec.GitIgnoreSpec
    owners: tuple[str, ...]


def _sections(codeowners: str, gitlab: bool) -> list[list[_Rule]]:
    """CODEOWNERS's rules, per section: GitHub's file is one section; GitLab's `[Section]` headers start
    another, whose default owners own its lines that name none."""
    sections: list[list[_Rule]] = [[]]
    defaults: tuple[str, ...] = ()
    for line in codeowners.splitlines():
        text = line.split("#", 1)[0].strip()
        header = _SECTION.match(text) if gitlab else None
        if header:
            sections.append([])
            defaults = tuple(header[1].split())
        elif text:
            pattern, *owners = text.split()
            sections[-1].append(_Rule(pathspec.GitIgnoreSpec.from_lines([pattern]), tuple(owners) or defaults))
    return [rules for rules in sections if rules]


def _owners(sections: list[list[_Rule]], path: str) -> list[tuple[str, ...]]:
    """Per section that owns `path`, its owners: the last matching pattern's (one that names nobody leaves it unowned)."""
    found = []
    for rules in sections:
        matched = [rule.owners for rule in rules if rule.pattern.match_file(path)]
        if matched and matched[-1]:
            found.append(matched[-1])
    return found


def code_owners(codeowners: str, files: Iterable[str], gitlab: bool = False) -> set[str]:
    """Owners (`@user`, `@org/team`) of the files: for each file, the last pattern that matches (in each section)."""
    sections = _sections(codeowners, gitlab)
    return {owner for path in files for owners in _owners(sections, path) for owner in owners}


def approvals_by_path(codeowners: str, files: Iterable[str], approvers: set[str], members: Members, gitlab: bool = False) -> dict[str, int]:
    """Each protected path of `files`: how many of `approvers` are among its own owners (the fewest over
    the CODEOWNERS sections that own it; 0 where nobody owns it). Logins compare case-insensitively."""
    sections = _sections(codeowners, gitlab)
    approving = {login.casefold() for login in approvers}
    counts = {}
    for path in sorted({f for f in files if protected(f)}):
        per_section = [len(approving & {m.casefold() for owner in owners for m in members(owner)}) for owners in _owners(sections, path)]
        counts[path] = min(per_section, default=0)
    return counts


def fewest(counts: dict[str, int]) -> tuple[int, str | None]:
    """The approvals the change has, as the gate counts them: those of its least approved protected path
    (which it names); none when it touches no protected path."""
    if not counts:
        return 0, None
    path = min(counts, key=lambda p: (counts[p], p))
    return counts[path], path


def current_approvers(reviews: list[dict[str, Any]], head_sha: str) -> set[str]:
    """Reviewers whose latest review approves the head commit."""
    latest: dict[str, dict[str, Any]] = {}
    for review in reviews:  # the API lists them oldest first
        if review.get("state") in ("APPROVED", "CHANGES_REQUESTED", "DISMISSED"):
            latest[review["user"]["login"]] = review
    return {login for login, r in latest.items() if r["state"] == "APPROVED" and r.get("commit_id") == head_sha}


def github_approvals(repo: str, number: int, head_sha: str, fetch: Fetch, codeowners: str | None) -> dict[str, int]:
    if codeowners is None:  # no CODEOWNERS file: nobody is known to own anything, so no approval counts (fail closed)
        return {}
    approvers = current_approvers(fetch(f"/repos/{repo}/pulls/{number}/reviews?per_page=100"), head_sha)
    listed = fetch(f"/repos/{repo}/pulls/{number}/files?per_page=100")
    if len(listed) >= GITHUB_MAX_FILES:  # the list may be cut there: a protected path beyond it would go uncounted
        raise ForgeError(f"GitHub lists at most {GITHUB_MAX_FILES:,} changed files of a pull request: the owners of every path "
                         "it touches cannot be known, so no approval is counted (split the pull request)")
    files = {name for f in listed for name in (f["filename"], f.get("previous_filename")) if name}

    def members(owner: str) -> set[str]:
        if not owner.startswith("@"):
            return set()  # an e-mail address: GitHub's own mapping to an account is not in the API
        if "/" not in owner:
            return {owner[1:]}
        org, slug = owner[1:].split("/", 1)
        return {m["login"] for m in fetch(f"/orgs/{org}/teams/{slug}/members?per_page=100")}

    return approvals_by_path(codeowners, files, approvers, functools.cache(members))  # an owner asked for once


def gitlab_current_approvers(approved_by: list[dict[str, Any]], versions: list[dict[str, Any]], author: str | None) -> set[str]:
    """Approvers of the merge request as its latest push left it: each approval given at or after the
    newest diff version was made (GitLab keeps approvals across a push unless the project removes them,
    which its Free tier cannot), the author's own left out. An approval GitLab does not date
    (`approved_at`) cannot be told current and does not count."""
    if not versions:
        return set()
    pushed = max(dt.datetime.fromisoformat(v["created_at"]) for v in versions)
    return {a["user"]["username"] for a in approved_by
            if a.get("approved_at") and dt.datetime.fromisoformat(a["approved_at"]) >= pushed} - {author}


def gitlab_approvals(project: str, iid: int, fetch: Fetch, codeowners: str | None) -> dict[str, int]:
    mr = f"/projects/{project}/merge_requests/{iid}"
    author = fetch(mr).get("author", {}).get("username")
    approvers = gitlab_current_approvers(fetch(f"{mr}/approvals").get("approved_by", []), fetch(f"{mr}/versions?per_page=100"), author)
    if codeowners is None:  # as on GitHub: without CODEOWNERS nobody owns anything, whatever GitLab's rules say
        return {}
    files = {name for d in fetch(f"{mr}/diffs?per_page=100") for name in (d.get("new_path"), d.get("old_path")) if name}

    def members(owner: str) -> set[str]:
        name = owner[1:]
        if not owner.startswith("@") or name.startswith("@"):
            return set()  # an e-mail address, or a role (`@@maintainer`): not counted
        if "/" not in name and fetch(f"/users?username={urllib.parse.quote(name)}"):
            return {name}  # a user; a top-level group has no slash either, and no user of its name
        group = urllib.parse.quote(name, safe="")
        return {m["username"] for m in fetch(f"/groups/{group}/members/all?per_page=100") if m.get("access_level", 0) >= _DEVELOPER}

    return approvals_by_path(codeowners, files, approvers, functools.cache(members), gitlab=True)


def sticky_note(project: str, iid: int, key: str, body: str, fetch: Fetch, send: Send) -> str:
    """Create or update the merge request's note for `key`; returns "created" or "updated"."""
    marker = f"<!-- fleetops-plan:{key} -->"
    notes = fetch(f"/projects/{project}/merge_requests/{iid}/notes?per_page=100&sort=asc")
    mine = next((n for n in notes if marker in n.get("body", "")), None)
    text = f"{marker}\n{body}"
    if mine is None:
        send("POST", f"/projects/{project}/merge_requests/{iid}/notes", {"body": text})
        return "created"
    send("PUT", f"/projects/{project}/merge_requests/{iid}/notes/{mine['id']}", {"body": text})
    return "updated"


def _error(url: str, exc: Exception) -> ForgeError:
    return ForgeError(f"{url.split('?')[0]}: {getattr(exc, 'code', '') or type(exc).__name__} {getattr(exc, 'reason', '')}".strip())


def http_send(api: str, headers: dict[str, str]) -> Send:
    def send(method: str, path: str, body: dict[str, Any]) -> Any:
        url = api.rstrip("/") + path
        request = urllib.request.Request(url, data=json.dumps(body).encode(), method=method,
                                         headers={"Content-Type": "application/json", "Accept": "application/json", **headers})
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                return json.load(response)
        except (urllib.error.URLError, TimeoutError, json.JSONDecodeError) as exc:
            raise _error(url, exc) from None

    return send


def http_fetch(api: str, headers: dict[str, str]) -> Fetch:
    """GET JSON from the forge's API, following `Link: rel="next"` pages; errors name the URL, not the token."""

    def fetch(path: str) -> Any:
        url, pages = api.rstrip("/") + path, []
        while url:
            request = urllib.request.Request(url, headers={"Accept": "application/json", **headers})
            try:
                with urllib.request.urlopen(request, timeout=30) as response:
                    pages.append(json.load(response))
                    url = _next_link(response.headers.get("Link", ""))
            except (urllib.error.URLError, TimeoutError, json.JSONDecodeError) as exc:
                raise _error(url, exc) from None
        return [item for page in pages for item in page] if all(isinstance(p, list) for p in pages) else pages[0]

    return fetch


def _next_link(header: str) -> str:
    for part in header.split(","):
        if 'rel="next"' in part:
            return part.split(";")[0].strip().strip("<>")
    return ""


def from_environment(provider: str, codeowners: str | None) -> dict[str, int]:
    """Ask the forge the CI job runs in, from the variables its runners set."""
    env = os.environ
    if provider == "github":
        token, event_path = env.get("GH_TOKEN") or env.get("GITHUB_TOKEN"), env.get("GITHUB_EVENT_PATH")
        if not token or not event_path:
            raise ForgeError("GitHub: set GH_TOKEN (or GITHUB_TOKEN) and run in a pull_request or pull_request_review job")
        event = json.loads(open(event_path, encoding="utf-8").read())
        pr = event.get("pull_request") or {}
        if not pr:
            raise ForgeError("GitHub: the event has no pull request")
        fetch = http_fetch(env.get("GITHUB_API_URL", "https://api.github.com"),
                           {"Authorization": f"Bearer {token}", "X-GitHub-Api-Version": "2022-11-28"})
        return github_approvals(env["GITHUB_REPOSITORY"], int(pr["number"]), pr["head"]["sha"], fetch, codeowners)
    api, headers = gitlab_api()
    return gitlab_approvals(env["CI_PROJECT_ID"], int(env["CI_MERGE_REQUEST_IID"]), http_fetch(api, headers), codeowners)


def gitlab_api() -> tuple[str, dict[str, str]]:
    env = os.environ
    token = env.get("FLEETOPS_GITLAB_TOKEN")
    if not token or not env.get("CI_MERGE_REQUEST_IID"):
        raise ForgeError("GitLab: set FLEETOPS_GITLAB_TOKEN (a project access token, api scope) and run in a merge request pipeline")
    return env["CI_API_V4_URL"], {"PRIVATE-TOKEN": token}


def gitlab_note(key: str, body: str) -> str:
    api, headers = gitlab_api()
    env = os.environ
    return sticky_note(env["CI_PROJECT_ID"], int(env["CI_MERGE_REQUEST_IID"]), key, body, http_fetch(api, headers), http_send(api, headers))
