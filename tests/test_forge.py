"""Approvals as the forges count them: GitHub's current code-owner approvals, GitLab's approvals API.

The forges are played by a local HTTP server answering with the shapes of their documented APIs
(GitHub REST "List reviews for a pull request", "List pull request files", "List team members";
GitLab "Get the approval state of a merge request"); no claim here rests on more than those shapes.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path

import pytest

from fleetops import forge as approvals
from tests.cli import run

HEAD = "c0ffee"
CODEOWNERS = "*  @everyone-else\n/environments/prod.yaml  @alice @org/sre\n/policies/  @carol\n"


def review(login: str, state: str, commit: str = HEAD) -> dict:
    return {"user": {"login": login}, "state": state, "commit_id": commit}


def test_only_each_reviewers_latest_approval_of_the_head_commit_counts() -> None:
    reviews = [review("alice", "APPROVED"), review("bob", "APPROVED", "0ld"), review("dave", "APPROVED"),
               review("dave", "CHANGES_REQUESTED"), review("erin", "APPROVED"), review("erin", "DISMISSED"), review("frank", "COMMENTED")]
    assert approvals.current_approvers(reviews, HEAD) == {"alice"}


def test_code_owners_follow_the_last_matching_pattern() -> None:
    assert approvals.code_owners(CODEOWNERS, ["environments/prod.yaml"]) == {"@alice", "@org/sre"}
    assert approvals.code_owners(CODEOWNERS, ["policies/quota.rego", "README.md"]) == {"@carol", "@everyone-else"}


class Forge(BaseHTTPRequestHandler):
    routes: dict[str, object] = {}
    seen: list[dict[str, str]] = []
    written: list[tuple[str, str, str]] = []

    def do_GET(self) -> None:  # noqa: N802 - the http.server API
        Forge.seen.append(dict(self.headers))
        body = Forge.routes.get(self.path.split("?")[0])
        self.send_response(200 if body is not None else 404)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(json.dumps(body if body is not None else {"message": "Not Found"}).encode())

    def do_POST(self) -> None:  # noqa: N802
        self._write()

    def do_PUT(self) -> None:  # noqa: N802
        self._write()

    def _write(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        Forge.written.append((self.command, self.path, body["body"]))
        self.send_response(201)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(b'{"id": 5}')

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def forge() -> str:
    server = HTTPServer(("127.0.0.1", 0), Forge)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


def test_the_cli_counts_current_code_owner_approvals_on_github(forge: str, tmp_path: Path) -> None:
    Forge.routes = {
        "/repos/acme/fleet/pulls/7/reviews": [review("alice", "APPROVED"), review("sam", "APPROVED"), review("zed", "APPROVED"), review("old", "APPROVED", "0ld")],
        "/repos/acme/fleet/pulls/7/files": [{"filename": "environments/prod.yaml"}],
        "/orgs/org/teams/sre/members": [{"login": "sam"}],
    }
    event = tmp_path / "event.json"
    event.write_text(json.dumps({"pull_request": {"number": 7, "head": {"sha": HEAD}}}))
    (tmp_path / "CODEOWNERS").write_text(CODEOWNERS)
    env = {"GH_TOKEN": "ghs_secret", "GITHUB_EVENT_PATH": str(event), "GITHUB_REPOSITORY": "acme/fleet", "GITHUB_API_URL": forge}
    done = run("approvals", "github", "--codeowners", tmp_path / "CODEOWNERS", env=env)
    assert (done.returncode, done.stdout) == (0, "2\n"), done.stderr  # alice and sam (sre); zed owns nothing here
    assert Forge.seen[-1]["Authorization"] == "Bearer ghs_secret"


def test_without_codeowners_no_approval_counts(forge: str, tmp_path: Path) -> None:
    # A head that deletes CODEOWNERS must not turn every approval into a code owner's: none counts.
    Forge.routes = {"/repos/acme/fleet/pulls/7/reviews": [review("alice", "APPROVED"), review("zed", "APPROVED")],
                    "/repos/acme/fleet/pulls/7/files": [{"filename": "environments/prod.yaml"}]}
    event = tmp_path / "event.json"
    event.write_text(json.dumps({"pull_request": {"number": 7, "head": {"sha": HEAD}}}))
    env = {"GH_TOKEN": "ghs_secret", "GITHUB_EVENT_PATH": str(event), "GITHUB_REPOSITORY": "acme/fleet", "GITHUB_API_URL": forge}
    done = run("approvals", "github", env=env, cwd=tmp_path)
    assert (done.returncode, done.stdout) == (0, "0\n"), done.stderr
    assert "no CODEOWNERS" in done.stderr


def test_the_cli_reads_gitlabs_approvals_api(forge: str) -> None:
    Forge.routes = {"/projects/42/merge_requests/9/approvals": {"approved_by": [{"user": {"username": "a"}}, {"user": {"username": "b"}}]}}
    env = {"FLEETOPS_GITLAB_TOKEN": "glpat-secret", "CI_API_V4_URL": forge, "CI_PROJECT_ID": "42", "CI_MERGE_REQUEST_IID": "9"}
    done = run("approvals", "gitlab", env=env)
    assert (done.returncode, done.stdout) == (0, "2\n"), done.stderr


def test_a_forge_error_is_one_line_exit_2_without_the_token(forge: str) -> None:
    Forge.routes = {}
    env = {"FLEETOPS_GITLAB_TOKEN": "glpat-secret", "CI_API_V4_URL": forge, "CI_PROJECT_ID": "42", "CI_MERGE_REQUEST_IID": "9"}
    done = run("approvals", "gitlab", env=env)
    assert done.returncode == 2 and "404" in done.stderr and "glpat-secret" not in done.stderr + done.stdout
    assert len(done.stderr.strip().splitlines()) == 1


def test_the_gitlab_note_is_posted_once_then_edited_in_place(forge: str, tmp_path: Path) -> None:
    comment = tmp_path / "comment.md"
    comment.write_text("### fleetops plan `prod`: ✅ allowed\n")
    env = {"FLEETOPS_GITLAB_TOKEN": "glpat-secret", "CI_API_V4_URL": forge, "CI_PROJECT_ID": "42", "CI_MERGE_REQUEST_IID": "9"}
    Forge.routes, Forge.written = {"/projects/42/merge_requests/9/notes": [{"id": 3, "body": "looks good"}]}, []
    first = run("note", comment, "--key", "prod", env=env)
    assert first.returncode == 0 and "created" in first.stderr, first.stderr
    (method, path, body), = Forge.written
    assert (method, path) == ("POST", "/projects/42/merge_requests/9/notes") and body.startswith("<!-- fleetops-plan:prod -->\n### fleetops plan")
    Forge.routes["/projects/42/merge_requests/9/notes"] = [{"id": 3, "body": "looks good"}, {"id": 5, "body": body}]
    second = run("note", comment, "--key", "prod", env=env)
    assert second.returncode == 0 and Forge.written[-1][:2] == ("PUT", "/projects/42/merge_requests/9/notes/5")
