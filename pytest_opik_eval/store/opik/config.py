"""Where the Opik server is, and with what credentials: the same settings, from the same places
and in the same order, as the Opik SDK (environment, then the [opik] section of ~/.opik.config)."""

from __future__ import annotations

import os
import shlex
from dataclasses import dataclass
from pathlib import Path

DEFAULT_URL = "https://www.comet.com/opik/api/"
DEFAULT_WORKSPACE = "default"
DEFAULT_PROJECT = "Default Project"
SYNC_TIMEOUT = 30.0  # seconds to send what is left at the end of a session (--eval-sync-timeout)
SYNC_COMMAND = "opik-eval sync"  # sends what a session left in the default spool
DATASET_PREFIX = "opik:"  # dataset="opik:NAME": a dataset that lives on the Opik server

# setting -> (environment variable, key in the [opik] section of the config file)
_SOURCES = {
    "url": ("OPIK_URL_OVERRIDE", "url_override"),
    "api_key": ("OPIK_API_KEY", "api_key"),
    "workspace": ("OPIK_WORKSPACE", "workspace"),
    "project": ("OPIK_PROJECT_NAME", "project_name"),
}


@dataclass(frozen=True)
class OpikSettings:
    url: str
    api_key: str | None
    workspace: str
    project: str
    sources: dict[str, str]  # setting -> where it came from, for the session header

    def __repr__(self) -> str:
        # Never let the key reach a log line or a traceback's locals.
        key = "set" if self.api_key else "none"
        return (
            f"OpikSettings(url={self.url!r}, workspace={self.workspace!r}, "
            f"project={self.project!r}, api_key={key})"
        )

    def describe(self) -> str:
        """One header line: the server and workspace and where each came from; never the key."""
        key = f"api key from {self.sources['api_key']}" if self.api_key else "no api key"
        return (
            f"opik server: {self.url} (from {self.sources['url']}), workspace {self.workspace} "
            f"(from {self.sources['workspace']}), project {self.project!r}, {key}"
        )


def sync_command(spool: Path | None = None) -> str:
    """The command that sends what a session left in ``spool``: :data:`SYNC_COMMAND` when the
    spool is the default one, which that command finds by itself."""
    if spool is None:
        return SYNC_COMMAND
    program, command = SYNC_COMMAND.split()
    return shlex.join([program, f"--store={spool}", command])


def config_path() -> Path:
    return Path(os.environ.get("OPIK_CONFIG_PATH") or Path.home() / ".opik.config").expanduser()


def read_settings() -> OpikSettings:
    path = config_path()
    section: dict[str, str] = {}
    if path.is_file():
        import configparser  # only here: settings.py imports this module in every --eval session

        parser = configparser.ConfigParser()
        parser.read(path, encoding="utf-8")
        if parser.has_section("opik"):
            section = dict(parser.items("opik"))
    values: dict[str, str | None] = {}
    sources: dict[str, str] = {}
    for setting, (env, key) in _SOURCES.items():
        if os.environ.get(env):
            values[setting], sources[setting] = os.environ[env], f"env {env}"
        elif section.get(key):
            values[setting], sources[setting] = section[key], f"{path} [opik] {key}"
        else:
            values[setting], sources[setting] = None, "default"
    url = values["url"] or DEFAULT_URL
    return OpikSettings(
        url=url if url.endswith("/") else url + "/",
        api_key=values["api_key"],
        workspace=values["workspace"] or DEFAULT_WORKSPACE,
        project=values["project"] or DEFAULT_PROJECT,
        sources=sources,
    )
