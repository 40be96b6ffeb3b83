"""The reference pages' tables, generated at build time from the code (an MkDocs hook, named in
``mkdocs.yml``): the options and ini keys from the parser, the environment variables from the
settings' constants, the marker's arguments from its signature, the hooks from their specs, the
``opik-eval`` commands from their argparse parser and the JSON report's fields from the JSON
Schema the package publishes. A page asks for one with an HTML comment, ``<!-- generated: NAME -->``,
so that it still reads as a plain Markdown file on GitHub; a name without a generator fails the
build, and so does a page that still holds a placeholder after the hook has run."""

from __future__ import annotations

import argparse
import functools
import inspect
import json
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
SCHEMA = ROOT / "schema" / "eval-report.schema.json"
PLACEHOLDER = re.compile(r"<!-- generated: ([a-z-]+) -->")
# Files of the repository outside docs/ that pages link to (relative links, so that they work on
# GitHub too): the site publishes a copy under _repo/ and the links point at it.
REPO_FILES = ("schema/eval-report.schema.json",)
REPO_FOLDER = "_repo"


def on_files(files: Any, config: Any) -> Any:
    """MkDocs' hook: the repository files the pages link to, added to the site."""
    from mkdocs.structure.files import File

    for path in REPO_FILES:
        files.append(File.generated(config, f"{REPO_FOLDER}/{path}", abs_src_path=str(ROOT / path)))
    return files


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    """MkDocs' hook: each placeholder replaced by its table, each link to a repository file by
    a link to the site's copy."""
    markdown = PLACEHOLDER.sub(lambda match: generate(match.group(1), page.file.src_path), markdown)
    return repo_links(markdown, page.file.src_path)


def repo_links(markdown: str, src_path: str) -> str:
    """Links from the page at ``src_path`` (under docs/) to one of :data:`REPO_FILES`, pointed
    at the site's copy; any other link that leaves docs/ is left for MkDocs to report."""
    depth = src_path.count("/")
    for path in REPO_FILES:
        markdown = markdown.replace(
            f"]({'../' * (depth + 1)}{path})", f"]({'../' * depth}{REPO_FOLDER}/{path})"
        )
    return markdown


def generate(name: str, where: str = "") -> str:
    generator = GENERATORS.get(name)
    if generator is None:
        raise ValueError(f"{where}: no generated table named {name!r}; the names: {', '.join(GENERATORS)}")
    return generator()


# -- the pytest options and ini keys, from the parser ---------------------------------------------


class _Recorder:
    """Stands in for pytest's parser and its option group: records what ``add_options`` adds."""

    def __init__(self) -> None:
        self.options: list[tuple[tuple[str, ...], dict[str, Any]]] = []
        self.inis: list[tuple[str, str, str]] = []

    def getgroup(self, name: str, description: str = "") -> _Recorder:
        return self

    def addoption(self, *names: str, **attrs: Any) -> None:
        self.options.append((names, attrs))

    def addini(self, name: str, help: str, type: str = "string", default: Any = None) -> None:
        self.inis.append((name, help, type))


def recorded_options() -> _Recorder:
    """What the plugin's ``add_options`` adds to pytest's parser."""
    from pytest_opik_eval.options import add_options

    recorder = _Recorder()
    add_options(recorder)  # type: ignore[arg-type]  # duck-typed: the two methods it calls
    return recorder


def _cell(text: object) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def _value(names: tuple[str, ...], attrs: dict[str, Any]) -> str:
    if attrs.get("action") == "store_true":
        return ""
    if attrs.get("choices"):
        return "|".join(attrs["choices"])
    return str(attrs.get("metavar") or attrs.get("dest", "").upper())


def _env_of(help_text: str) -> str:
    found = re.search(r"\benv (PYTEST_OPIK_EVAL_[A-Z_]+)", help_text)
    return f"`{found.group(1)}`" if found else ""


def options_table() -> str:
    recorder = recorded_options()
    inis = {name for name, _, _ in recorder.inis}
    rows = ["| option | value | ini key | env | help |", "|---|---|---|---|---|"]
    for names, attrs in recorder.options:
        value = _value(names, attrs)
        ini = attrs.get("dest", "") if attrs.get("dest") in inis else ""
        repeat = (
            " (repeatable)" if attrs.get("action") == "append" and "repeatable" not in attrs["help"] else ""
        )
        rows.append(
            f"| `{', '.join(names)}` | {f'`{_cell(value)}`' if value else ''} | {f'`{ini}`' if ini else ''} "
            f"| {_env_of(attrs['help'])} | {_cell(attrs['help'])}{repeat} |"
        )
    return "\n".join(rows)


def ini_table() -> str:
    rows = ["| ini key | type | help |", "|---|---|---|"]
    rows += [f"| `{name}` | {kind} | {_cell(text)} |" for name, text, kind in recorded_options().inis]
    return "\n".join(rows)


def env_table() -> str:
    from pytest_opik_eval import options
    from pytest_opik_eval.store.opik import config

    recorder = recorded_options()
    rows = ["| variable | what it sets |", "|---|---|"]
    for constant, variable in sorted(vars(options).items()):
        if constant.endswith("_ENV") and isinstance(variable, str):
            flags = [names[0] for names, attrs in recorder.options if f"env {variable}" in attrs["help"]]
            rows.append(
                f"| `{variable}` | the value of `{', '.join(flags) or constant}`, below the command line |"
            )
    for setting, (variable, key) in config._SOURCES.items():
        rows.append(
            f"| `{variable}` | the Opik server's {setting} (else `{key}` in `~/.opik.config`'s `[opik]`) |"
        )
    return "\n".join(rows)


# -- the marker's arguments, from its signature ---------------------------------------------------


def marker_table() -> str:
    from pytest_opik_eval.collect import marker

    signature = inspect.signature(marker._signature)
    rows = [
        f"`@pytest.mark.{marker.MARKER}{_plain_signature(signature)}`",
        "",
        "| argument | type | default |",
        "|---|---|---|",
    ]
    for parameter in signature.parameters.values():
        default = "required" if parameter.default is inspect.Parameter.empty else f"`{parameter.default!r}`"
        rows.append(f"| `{parameter.name}` | `{_cell(parameter.annotation)}` | {default} |")
    return "\n".join(rows + ["", f"pytest's `--markers` line: {marker.MARKER_HELP}"])


def _plain_signature(signature: inspect.Signature) -> str:
    return str(
        signature.replace(
            parameters=[p.replace(annotation=p.empty) for p in signature.parameters.values()],
            return_annotation=inspect.Signature.empty,
        )
    )


# -- the hooks, from their specs ------------------------------------------------------------------


def _markdown(docstring: str) -> str:
    """reStructuredText's inline code and roles, as Markdown."""
    text = re.sub(r":[a-z]+:`~?([^`]+)`", r"`\1`", docstring)
    return text.replace("``", "`")


def hooks_list() -> str:
    from pytest_opik_eval import hookspecs

    parts = []
    for name, function in inspect.getmembers(hookspecs, inspect.isfunction):
        if name.startswith("pytest_opik_eval_"):
            # The module postpones its annotations: the signature shows them quoted.
            signature = str(inspect.signature(function)).replace("'", "")
            parts += [f"### `{name}`", "", "```python", f"def {name}{signature}", "```", ""]
            parts += [_markdown(inspect.cleandoc(function.__doc__ or "")), ""]
    return "\n".join(parts)


# -- the opik-eval command, from its argparse parser ----------------------------------------------


def _commands(parser: argparse.ArgumentParser) -> Iterator[tuple[str, argparse.ArgumentParser]]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            yield from action.choices.items()


def _help(parser: argparse.ArgumentParser) -> str:
    # argparse wraps at the terminal's width: 100 columns on every build, without touching the
    # environment of the process that builds (the suite runs this in-process, beside other tests).
    parser.formatter_class = functools.partial(argparse.HelpFormatter, width=100)
    return parser.format_help().rstrip()


def cli_help() -> str:
    from pytest_opik_eval import cli

    parser = cli._parser()
    parts = ["```text", _help(parser), "```", ""]
    for name, command in _commands(parser):
        parts += [f"### `opik-eval {name}`", "", "```text", _help(command), "```", ""]
    return "\n".join(parts)


# -- the JSON report's fields, from its JSON Schema -----------------------------------------------


def _type(schema: dict[str, Any]) -> str:
    if "$ref" in schema:
        name = schema["$ref"].rsplit("/", 1)[-1]
        return f"[{name}](#{name.lower()})"
    if "anyOf" in schema:
        return " or ".join(_type(option) for option in schema["anyOf"])
    if "const" in schema:
        return f"`{json.dumps(schema['const'])}`"
    if "enum" in schema:
        return " \\| ".join(f"`{json.dumps(value)}`" for value in schema["enum"])
    kind = schema.get("type", "any")
    if kind == "array":
        return f"list of {_type(schema.get('items', {}))}"
    if kind == "object" and isinstance(schema.get("additionalProperties"), dict):
        return f"object of {_type(schema['additionalProperties'])}"
    return str(kind)


def _fields(title: str, schema: dict[str, Any]) -> list[str]:
    required = set(schema.get("required", ()))
    lines = [f"### {title}", ""]
    if schema.get("description"):
        lines += [_markdown(" ".join(schema["description"].split())), ""]
    lines += ["| field | type | default |", "|---|---|---|"]
    for name, field in schema.get("properties", {}).items():
        default = "required" if name in required else f"`{json.dumps(field.get('default'))}`"
        lines.append(f"| `{name}` | {_type(field)} | {default} |")
    return lines + [""]


def json_fields() -> str:
    schema = json.loads(SCHEMA.read_text(encoding="utf-8"))
    lines = _fields("Report", schema)
    for name, model in schema.get("$defs", {}).items():
        lines += _fields(name, model)
    return "\n".join(lines)


GENERATORS: dict[str, Callable[[], str]] = {
    "options": options_table,
    "ini": ini_table,
    "env": env_table,
    "marker": marker_table,
    "hooks": hooks_list,
    "cli": cli_help,
    "json": json_fields,
}
