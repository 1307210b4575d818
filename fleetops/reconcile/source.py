"""The revision: a Git clone fetched each pass, credentials kept out of the clone and the logs."""

from __future__ import annotations

import base64
import hashlib
import re
import shutil
import urllib.parse
from dataclasses import dataclass
from pathlib import Path

from fleetops import git

# --- the revision ---------------------------------------------------------------------------


_CREDENTIALS = re.compile(r"(\w+://)[^/\s]*@")


def redact(text: str) -> str:
    """URLs without their user:token part, for logs and reports."""
    return _CREDENTIALS.sub(r"\1***@", text)


@dataclass
class Fetched:
    path: Path | None
    revision: str | None
    error: str | None = None


def credentials(url: str) -> tuple[str, dict[str, str]]:
    """An http(s) URL without its user:token part, and the Git environment that sends them instead.

    Git would store a URL's credentials in the clone's .git/config. Given as configuration in the
    environment of each command (GIT_CONFIG_COUNT/KEY/VALUE), they are neither stored nor in the
    command line, and the header goes to this URL only, not to a host a redirect names.
    """
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or "@" not in parts.netloc:
        return url, {}
    userinfo, _, host = parts.netloc.rpartition("@")
    user, _, password = userinfo.partition(":")
    clean = urllib.parse.urlunsplit(parts._replace(netloc=host))
    basic = base64.b64encode(f"{urllib.parse.unquote(user)}:{urllib.parse.unquote(password)}".encode()).decode()
    return clean, {"GIT_CONFIG_COUNT": "1", "GIT_CONFIG_KEY_0": f"http.{clean}.extraHeader", "GIT_CONFIG_VALUE_0": f"Authorization: Basic {basic}"}


class GitSource:
    """A clone of the repository in a cache folder, fetched each pass; on failure the last good checkout stays."""

    def __init__(self, repo: str, ref: str = "main", cache_dir: Path | None = None):
        local = Path(repo).expanduser()
        given = str(local.resolve()) if local.is_dir() else repo
        self.repo, self._env = credentials(given)
        # A refused credential is an error of the pass, never a prompt; a server that stops sending ends the fetch.
        self._env.update(GIT_TERMINAL_PROMPT="0", GIT_HTTP_LOW_SPEED_LIMIT="1", GIT_HTTP_LOW_SPEED_TIME="60")
        self.ref = ref
        root = cache_dir or Path.home() / ".cache" / "fleetops" / "repos"
        # Named by the URL as given, so that a cache an earlier version cloned with credentials is found and cleaned.
        self.path = root / hashlib.sha256(given.encode()).hexdigest()[:16]

    @property
    def _marker(self) -> Path:
        return self.path / ".git" / "fleetops-checked-out"

    def _current(self) -> str | None:
        # Recorded after each successful checkout: a fresh clone's HEAD was never checked out.
        try:
            return self._marker.read_text().strip() or None
        except OSError:
            return None

    def fetch(self) -> Fetched:
        try:
            if not (self.path / ".git").is_dir():
                shutil.rmtree(self.path, ignore_errors=True)
                self.path.parent.mkdir(parents=True, exist_ok=True)
                git.run(self.path.parent, "clone", "--quiet", "--no-checkout", self.repo, str(self.path), env=self._env)
            else:
                git.run(self.path, "remote", "set-url", "origin", self.repo)  # drops credentials an older clone stored
                git.run(self.path, "fetch", "--quiet", "--prune", "--force", "origin",
                        "+refs/heads/*:refs/remotes/origin/*", "+refs/tags/*:refs/tags/*", env=self._env)
            sha = self._resolve()
            git.run(self.path, "checkout", "--quiet", "--force", "--detach", sha)
            self._marker.write_text(sha)
            return Fetched(self.path, sha)
        except (git.GitError, OSError) as exc:
            good = self._current()
            error = redact(str(exc))
            if good is None:
                return Fetched(None, None, f"{redact(self.repo)}: {error}")
            return Fetched(self.path, good, f"{redact(self.repo)}: {error}; keeping the last good revision {good[:12]}")

    def _resolve(self) -> str:
        for candidate in (f"origin/{self.ref}", self.ref):
            try:
                return git.run(self.path, "rev-parse", "--verify", "--quiet", f"{candidate}^{{commit}}").strip()
            except git.GitError:
                continue
        raise git.GitError(f"no branch, tag or commit {self.ref!r}")
