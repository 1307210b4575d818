"""The forge a fleet repository lives on: approvals as it counts them, and the plan's sticky note.

Approvals (for `fleetops plan --approvals`):

GitHub: only current approvals count (each reviewer's latest review is APPROVED and was given on the
head commit: a push after it, or a dismissal, takes it back), and only from a code owner of a file
the pull request changes (CODEOWNERS, last matching pattern wins; a team counts through its members;
read from the checkout the gate runs in, the base's, never the head's; without one, none counts).
GitLab: the merge request approvals API, which already drops approvals that a push resets.
Sticky note (GitLab; GitHub workflows use marocchino/sticky-pull-request-comment): one note per
environment, found again by a hidden marker and edited in place, so a merge request does not
collect a plan per push. Tokens come from the environment and never appear in output or errors.
"""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable
from typing import Any

import pathspec

from fleetops.errors import ForgeError

Fetch = Callable[[str], Any]  # URL -> decoded JSON (every page)
Send = Callable[[str, str, dict[str, Any]], Any]  # method, URL, JSON body -> decoded JSON


CODEOWNERS_PLACES = (".github/CODEOWNERS", "CODEOWNERS", "docs/CODEOWNERS")  # where GitHub looks, in its order


def code_owners(codeowners: str, files: Iterable[str]) -> set[str]:
    """Owners (`@user`, `@org/team`) of the changed files: for each file, the last pattern that matches."""
    rules = []
    for line in codeowners.splitlines():
        parts = line.split("#", 1)[0].split()
        if len(parts) >= 1:
            rules.append((pathspec.GitIgnoreSpec.from_lines([parts[0]]), parts[1:]))
    owners: set[str] = set()
    for path in files:
        matched = [people for spec, people in rules if spec.match_file(path)]
        if matched:
            owners.update(matched[-1])
    return owners


def current_approvers(reviews: list[dict[str, Any]], head_sha: str) -> set[str]:
    """Reviewers whose latest review approves the head commit."""
    latest: dict[str, dict[str, Any]] = {}
    for review in reviews:  # the API lists them oldest first
        if review.get("state") in ("APPROVED", "CHANGES_REQUESTED", "DISMISSED"):
            latest[review["user"]["login"]] = review
    return {login for login, r in latest.items() if r["state"] == "APPROVED" and r.get("commit_id") == head_sha}


def github_approvals(repo: str, number: int, head_sha: str, fetch: Fetch, codeowners: str | None) -> int:
    if codeowners is None:  # no CODEOWNERS file: nobody is known to own anything, so no approval counts (fail closed)
        return 0
    approvers = current_approvers(fetch(f"/repos/{repo}/pulls/{number}/reviews?per_page=100"), head_sha)
    files = [f["filename"] for f in fetch(f"/repos/{repo}/pulls/{number}/files?per_page=100")]
    owners = code_owners(codeowners, files)
    allowed = {o[1:] for o in owners if "/" not in o}
    for team in (o[1:] for o in owners if "/" in o):
        org, slug = team.split("/", 1)
        allowed |= {m["login"] for m in fetch(f"/orgs/{org}/teams/{slug}/members?per_page=100")}
    return len(approvers & allowed)


def gitlab_approvals(project: str, iid: int, fetch: Fetch) -> int:
    return len(fetch(f"/projects/{project}/merge_requests/{iid}/approvals").get("approved_by", []))


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


def from_environment(provider: str, codeowners: str | None) -> int:
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
    return gitlab_approvals(env["CI_PROJECT_ID"], int(env["CI_MERGE_REQUEST_IID"]), http_fetch(api, headers))


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
