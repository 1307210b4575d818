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
from tests.command import run

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
        body = Forge.routes.get(self.path, Forge.routes.get(self.path.split("?")[0]))  # a query routed apart, where a test says so
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


GITLAB = {"FLEETOPS_GITLAB_TOKEN": "glpat-secret", "CI_PROJECT_ID": "42", "CI_MERGE_REQUEST_IID": "9"}


PUSHED, LATER = "2026-12-01T10:00:00.000Z", "2026-12-01T11:30:00.000Z"


def gitlab_routes(approved_by: list[str], diffs: list[dict], author: str = "mallory", approved_at: str = LATER) -> dict[str, object]:
    """A merge request as GitLab's API shows it: its author, approvals (given at `approved_at`), pushes, changed
    files; users @mallory and @alice, groups everyone-else and org/sre."""
    return {"/projects/42/merge_requests/9": {"iid": 9, "author": {"username": author}},
            "/projects/42/merge_requests/9/approvals": {"approved_by": [{"user": {"username": u}, "approved_at": approved_at} for u in approved_by]},
            "/projects/42/merge_requests/9/versions": [{"id": 2, "created_at": PUSHED}, {"id": 1, "created_at": "2026-11-30T09:00:00.000Z"}],
            "/projects/42/merge_requests/9/diffs": diffs,
            "/users": [], "/users?username=mallory": [{"username": "mallory"}], "/users?username=alice": [{"username": "alice"}],  # a user by that name, or none
            "/groups/org%2Fsre/members/all": [{"username": "sam", "access_level": 30}, {"username": "guest", "access_level": 10}],
            "/groups/everyone-else/members/all": [{"username": "zed", "access_level": 40}, {"username": "yan", "access_level": 30}]}


def test_the_cli_counts_gitlabs_approvals_only_from_the_code_owners_of_each_path(forge: str, tmp_path: Path) -> None:
    # GitLab's approvals API lists whoever approved, whatever GitLab's own approval rules said: a and b
    # own nothing, guest is a member of org/sre below Developer, mallory wrote the merge request.
    Forge.routes = gitlab_routes(["a", "b", "sam", "guest", "mallory"], [{"old_path": "environments/prod.yaml", "new_path": "environments/prod.yaml"}],
                                 author="mallory")
    (tmp_path / "CODEOWNERS").write_text(CODEOWNERS.replace("@alice ", "").replace("/environments/prod.yaml  ", "/environments/prod.yaml  @mallory "))
    done = run("approvals", "gitlab", "--codeowners", tmp_path / "CODEOWNERS", env={**GITLAB, "CI_API_V4_URL": forge})
    assert (done.returncode, done.stdout) == (0, "1\n"), done.stderr  # sam alone
    assert "environments/prod.yaml" in done.stderr


def test_a_gitlab_approval_given_before_the_latest_push_does_not_count(forge: str, tmp_path: Path) -> None:
    # GitLab keeps approvals across a push unless the project removes them (its Free tier cannot): sam
    # approved, then the author pushed another commit.
    diffs = [{"old_path": "environments/prod.yaml", "new_path": "environments/prod.yaml"}]
    (tmp_path / "CODEOWNERS").write_text(CODEOWNERS)
    for approved_at, counted in (("2026-12-01T09:59:59.000Z", "0\n"), (PUSHED, "1\n"), (None, "0\n")):
        Forge.routes = gitlab_routes(["sam"], diffs, approved_at=approved_at)
        done = run("approvals", "gitlab", "--codeowners", tmp_path / "CODEOWNERS", env={**GITLAB, "CI_API_V4_URL": forge})
        assert (done.returncode, done.stdout) == (0, counted), (approved_at, done.stderr)


def test_gitlab_without_codeowners_counts_no_approval(forge: str, tmp_path: Path) -> None:
    Forge.routes = gitlab_routes(["a", "b"], [{"old_path": "environments/prod.yaml", "new_path": "environments/prod.yaml"}])
    done = run("approvals", "gitlab", env={**GITLAB, "CI_API_V4_URL": forge}, cwd=tmp_path)
    assert (done.returncode, done.stdout) == (0, "0\n"), done.stderr
    assert "no CODEOWNERS" in done.stderr


def test_a_catch_all_owner_approving_another_file_does_not_approve_the_environment(forge: str, tmp_path: Path) -> None:
    # The attack: README.md touched beside prod.yaml; with a catch-all line, its team's two approvals
    # counted as approvals of the whole change, prod.yaml's owners (alice, sre) having given none.
    Forge.routes = {
        "/repos/acme/fleet/pulls/7/reviews": [review("zed", "APPROVED"), review("yan", "APPROVED")],
        "/repos/acme/fleet/pulls/7/files": [{"filename": "README.md"}, {"filename": "environments/prod.yaml"}],
        "/orgs/org/teams/sre/members": [{"login": "sam"}],
        "/orgs/org/teams/all/members": [{"login": "zed"}, {"login": "yan"}],
    }
    env = github_event(tmp_path, forge, CODEOWNERS.replace("@everyone-else", "@org/all"))
    done = run("approvals", "github", "--codeowners", tmp_path / "CODEOWNERS", env=env)
    assert (done.returncode, done.stdout) == (0, "0\n"), done.stderr
    assert "approvals: 0 from the code owners of environments/prod.yaml" in done.stderr
    Forge.routes["/repos/acme/fleet/pulls/7/reviews"] += [review("alice", "APPROVED"), review("sam", "APPROVED")]
    done = run("approvals", "github", "--codeowners", tmp_path / "CODEOWNERS", env=env)
    assert (done.returncode, done.stdout) == (0, "2\n"), done.stderr


def test_a_renamed_file_needs_the_approvals_of_its_old_owners(forge: str, tmp_path: Path) -> None:
    # The attack: prod.yaml renamed into a folder the fleet team owns; only the new name's owners were asked.
    Forge.routes = {
        "/repos/acme/fleet/pulls/7/reviews": [review("fay", "APPROVED"), review("gus", "APPROVED")],
        "/repos/acme/fleet/pulls/7/files": [{"filename": "environments/retired/prod.yaml", "previous_filename": "environments/prod.yaml",
                                             "status": "renamed"}],
        "/orgs/org/teams/sre/members": [{"login": "sam"}],
        "/orgs/org/teams/fleet/members": [{"login": "fay"}, {"login": "gus"}],
    }
    env = github_event(tmp_path, forge, CODEOWNERS + "/environments/retired/  @org/fleet\n")
    done = run("approvals", "github", "--codeowners", tmp_path / "CODEOWNERS", env=env)
    assert (done.returncode, done.stdout) == (0, "0\n"), done.stderr
    assert "environments/prod.yaml" in done.stderr


def test_a_pull_request_github_cannot_list_whole_counts_no_approval(forge: str, tmp_path: Path) -> None:
    Forge.routes = {"/repos/acme/fleet/pulls/7/reviews": [review("alice", "APPROVED")],
                    "/repos/acme/fleet/pulls/7/files": [{"filename": f"docs/n{i}.md"} for i in range(approvals.GITHUB_MAX_FILES)]}
    done = run("approvals", "github", "--codeowners", tmp_path / "CODEOWNERS", env=github_event(tmp_path, forge, CODEOWNERS))
    assert done.returncode == 2 and "at most 3,000 changed files" in done.stderr and done.stdout == ""


def github_event(tmp_path: Path, forge: str, codeowners: str) -> dict[str, str]:
    event = tmp_path / "event.json"
    event.write_text(json.dumps({"pull_request": {"number": 7, "head": {"sha": HEAD}}}))
    (tmp_path / "CODEOWNERS").write_text(codeowners)
    return {"GH_TOKEN": "ghs_secret", "GITHUB_EVENT_PATH": str(event), "GITHUB_REPOSITORY": "acme/fleet", "GITHUB_API_URL": forge}


def test_each_protected_path_counts_its_own_owners_and_each_gitlab_section() -> None:
    owners = "* @everyone\n[Fleet]\n/environments/ @fleet\n[Security][2] @sec\n/environments/prod.yaml\n/README.md\n"
    members = {"@everyone": {"x", "y"}, "@fleet": {"f"}, "@sec": {"s", "t"}}.__getitem__
    by_path = approvals.approvals_by_path(owners, ["README.md", "environments/prod.yaml", "environments/dev.yaml", "docs/x.md"],
                                          {"x", "y", "f", "s"}, members, gitlab=True)
    # README.md is no protected path; prod.yaml needs the Fleet and the Security sections (1 each); dev.yaml, Fleet's.
    assert by_path == {"environments/dev.yaml": 1, "environments/prod.yaml": 1}
    assert approvals.fewest(by_path) == (1, "environments/dev.yaml")
    assert approvals.approvals_by_path(owners, ["environments/prod.yaml"], {"f"}, members, gitlab=True) == {"environments/prod.yaml": 0}
    # A protected path nobody owns has no approval, however many were given elsewhere.
    assert approvals.approvals_by_path("/docs/ @x\n", ["Makefile"], {"x"}, lambda o: {"x"}) == {"Makefile": 0}
    assert approvals.fewest({}) == (0, None)


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
