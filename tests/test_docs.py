"""The documentation's examples run, and its links resolve (the README and every page of docs/).

Every ```python and ```sh block is run unless the comment line just above it says why it cannot
(``<!-- example: skip: needs an Opik server -->``). By default a Python block that defines an
eval test is written to a test file in an empty folder and run with ``pytest --eval``, which must
pass; any other Python block is run as a script; a shell block's commands are run one by one, as
written, in a copy of the example project, and each must exit 0. The comment changes that with
``key=value`` words:

- ``setup=NAME``: what the block assumes and does not show (the app, a dataset, a provider), from
  :data:`SETUPS`: code put before and after it, files beside it, commands run before it;
- ``exit=1,0``: the exit status each command of a shell block is expected to end with;
- ``fresh``: a set-up command for a fresh machine (it makes a virtualenv and installs from the
  package registry): run only with ``DOCS_FRESH=1``, in a copy of the checkout, with no virtualenv
  active, as ``.ci/run``'s docs step does;
- ``synopsis``: a list of ``opik-eval`` commands with placeholders: each command and option must
  be one the ``opik-eval`` parser knows.

Blocks of other languages (YAML for GitHub Actions, the output samples) are not run.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType

import pytest
from conftest import extra_reason, installed

ROOT = Path(__file__).parent.parent
DOCS = ROOT / "docs"
PAGES = [ROOT / "README.md", *sorted(DOCS.rglob("*.md"))]
EXAMPLE = ROOT / "example_project"
RUN = ("python", "sh")
DIRECTIVE = re.compile(r"<!-- example: (.*?) -->")
FENCE = re.compile(r"^```(\w*)[^\n]*\n(.*?)^```", flags=re.DOTALL | re.MULTILINE)
# The venv this suite runs in: its pytest and opik-eval are the ones the commands mean.
BIN = str(Path(sys.executable).parent)

QA_ITEMS = [
    {"id": "q1", "input": {"text": "Paris"}, "expected_output": "Paris"},
    {"id": "q2", "input": {"text": "Rome"}, "expected_output": "Rome"},
]


@dataclass(frozen=True)
class Setup:
    """What a block assumes and does not show."""

    before: str = ""  # code put before a Python block
    after: str = ""  # code put after it
    files: dict[str, str] = field(default_factory=dict)  # files beside it
    commands: tuple[str, ...] = ()  # commands run before a shell block
    extra: tuple[str, str] | None = None  # (extra, module): the optional extra the block needs


SETUPS = {
    # The examples' app and dataset: an app that answers with the question's text, a dataset whose
    # expected output is that text, so every trial passes.
    "qa": Setup(
        before="def my_app(text):\n    return text\n\n\n",
        files={"data/qa.jsonl": "".join(json.dumps(item) + "\n" for item in QA_ITEMS)},
    ),
    # A TracerProvider the app keeps to itself, and a trial that makes an OpenTelemetry span.
    "otel-provider": Setup(
        extra=("otel", "opentelemetry.sdk"),
        before="from opentelemetry.sdk.trace import TracerProvider\n\nprovider = TracerProvider()\n\n",
        after=(
            "\n\nimport pytest\n\n\n"
            "@pytest.mark.eval(dataset=[{'id': 'q1'}])\n"
            "def test_app(eval_item):\n"
            "    with provider.get_tracer('app').start_as_current_span('answer'):\n"
            "        return 'an answer'\n"
        ),
    ),
    # The app's helpers the manual-spans example calls, and an eval test that runs it.
    "manual-spans": Setup(
        before=(
            "from types import SimpleNamespace\n\n"
            "import pytest\n"
            "from pytest_opik_eval.tracing import trace\n\n\n"
            "def search(question):\n    return [question]\n\n\n"
            "client = SimpleNamespace(complete=lambda prompt: SimpleNamespace("
            "text=prompt, input_tokens=12, output_tokens=3))\n\n\n"
        ),
        after=(
            "\n\n@pytest.mark.eval(dataset=[{'id': 'q1', 'question': 'What is the capital of France?'}])\n"
            "def test_app(eval_item):\n"
            "    return answer(' '.join(retrieve(eval_item['question'])))\n"
        ),
    ),
    # The example project after its first run (one trial left pending).
    "example-run": Setup(commands=("pytest --eval",)),
}


@dataclass(frozen=True)
class Example:
    page: Path
    line: int
    language: str
    code: str
    directive: str  # the words of the comment above the block, or ""

    @property
    def id(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"

    def words(self) -> dict[str, str]:
        return dict(word.partition("=")[::2] for word in self.directive.split())

    @property
    def skip(self) -> str | None:
        return self.directive[len("skip:") :].strip() if self.directive.startswith("skip:") else None


def examples() -> list[Example]:
    found = []
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        for match in FENCE.finditer(text):
            if match.group(1) not in RUN:
                continue
            line = text.count("\n", 0, match.start()) + 1
            above = text[: match.start()].rstrip("\n").rsplit("\n", 1)[-1]
            directive = DIRECTIVE.fullmatch(above.strip())
            found.append(
                Example(page, line, match.group(1), match.group(2), directive.group(1) if directive else "")
            )
    return found


EXAMPLES = examples()


def test_the_examples_are_found() -> None:
    # The README's eval example, the tutorial's custom metric and its quick start, at least.
    ids = [example.id for example in EXAMPLES]
    assert "README.md:10" in ids
    assert any(i.startswith("docs/tutorial/writing-eval-tests.md") for i in ids)
    for example in EXAMPLES:
        unknown = set(example.words()) - {"setup", "exit", "fresh", "synopsis"}
        assert example.skip or not unknown, f"{example.id}: unknown words in its example comment: {unknown}"
        assert example.skip != "", f"{example.id}: a skipped example says why"
        assert example.words().get("setup", "qa") in SETUPS, (
            f"{example.id}: no setup {example.words()['setup']!r}"
        )


def run(command: str, cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    bash = shutil.which("bash")
    assert bash is not None
    return subprocess.run(
        [bash, "-c", command], cwd=cwd, env=env or venv_env(), capture_output=True, text=True, timeout=600
    )


def venv_env() -> dict[str, str]:
    return {**os.environ, "PATH": BIN + os.pathsep + os.environ["PATH"]}


def commands(code: str) -> list[str]:
    """A shell block's commands: its lines, joined where they end with a backslash."""
    return [c.strip() for c in code.replace("\\\n", " ").splitlines() if c.strip() and not c.startswith("#")]


@pytest.mark.parametrize("example", EXAMPLES, ids=[e.id for e in EXAMPLES])
def test_example_runs(example: Example, tmp_path: Path) -> None:
    if example.skip:
        pytest.skip(example.skip)
    words = example.words()
    # The app the examples call, my_app, and its dataset, unless the comment names another setup.
    name = words.get("setup", "qa" if "my_app(" in example.code else "")
    setup = SETUPS[name] if name else Setup()
    if setup.extra is not None and not installed(setup.extra[1]):
        pytest.skip(extra_reason(*setup.extra))  # the core-only suite (.ci/run) has no extras
    if "synopsis" in words:
        check_synopsis(example)
    elif "fresh" in words:
        run_fresh(example, tmp_path)
    elif example.language == "python":
        run_python(example, setup, tmp_path)
    else:
        run_shell(example, setup, tmp_path)


def run_python(example: Example, setup: Setup, folder: Path) -> None:
    for name, content in setup.files.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(content)
    code = setup.before + example.code + setup.after
    if "@pytest.mark.eval(" not in code:
        (folder / "example.py").write_text(code)
        result = run(f"{shlex.quote(sys.executable)} example.py", folder)
        assert result.returncode == 0, f"{example.id} failed:\n{result.stdout}\n{result.stderr}"
        return
    (folder / "test_example.py").write_text(code)
    result = run("pytest --eval -p no:cacheprovider -q -rA", folder)
    assert result.returncode == 0, f"{example.id} failed:\n{result.stdout}\n{result.stderr}"
    assert re.search(r"\b\d+ passed\b", result.stdout), result.stdout  # it ran trials


def run_shell(example: Example, setup: Setup, folder: Path) -> None:
    project = folder / "example_project"
    shutil.copytree(EXAMPLE, project, ignore=shutil.ignore_patterns(".opik-eval", ".flaky*", "__pycache__"))
    for command in setup.commands:
        run(command, project)
    steps = commands(example.code)
    expected = [int(code) for code in example.words().get("exit", "").split(",") if code] or [0] * len(steps)
    assert len(expected) == len(steps), (
        f"{example.id}: exit= gives {len(expected)} codes for {len(steps)} commands"
    )
    for command, code in zip(steps, expected, strict=True):
        result = run(command, project)
        assert result.returncode == code, (
            f"{example.id}: `{command}` exited {result.returncode}, not {code}:\n{result.stdout}\n{result.stderr}"
        )


def run_fresh(example: Example, folder: Path) -> None:
    """As a new user would: a copy of the checkout, the system's python3, no virtualenv active."""
    if os.environ.get("DOCS_FRESH") != "1":
        pytest.skip(
            "a fresh machine's set-up (a new virtualenv, installs from the registry): DOCS_FRESH=1 runs it"
        )
    twin = next(e for e in EXAMPLES if "fresh" in e.words() and e.code == example.code)
    if twin is not example:
        pytest.skip(f"the same command as {twin.id}, run there")
    checkout = folder / "checkout"
    tracked = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, text=True, check=True)
    for name in filter(None, tracked.stdout.split("\0")):
        (checkout / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / name, checkout / name)
    path = os.pathsep.join(p for p in os.environ["PATH"].split(os.pathsep) if p != BIN)
    env = {key: value for key, value in os.environ.items() if key != "VIRTUAL_ENV"} | {"PATH": path}
    [command] = commands(example.code)
    expected = int(example.words().get("exit") or 0)
    result = run(command, checkout, env)
    assert result.returncode == expected, (
        f"{example.id}: exited {result.returncode}:\n{result.stdout}\n{result.stderr}"
    )


def check_synopsis(example: Example) -> None:
    from pytest_opik_eval import cli

    parser = cli._parser()
    [subparsers] = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    global_options = {o for a in parser._actions for o in a.option_strings}
    for command in commands(example.code):
        words = command.split("#")[0].split()
        assert words[0] == "opik-eval", f"{example.id}: {command}"
        name = next(w for w in words[1:] if not w.startswith("-"))
        assert name in subparsers.choices, f"{example.id}: opik-eval has no command {name!r}"
        known = global_options | {o for a in subparsers.choices[name]._actions for o in a.option_strings}
        options = {w.strip("[]").split("=")[0] for w in words if w.strip("[").startswith("-") and w != "--"}
        assert options <= known, f"{example.id}: opik-eval {name} has no option {options - known}"


# -- links ----------------------------------------------------------------------------------------

LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
SNIPPET = re.compile(r'^--8<-- "([^"]+)"$', flags=re.MULTILINE)


def slug(heading: str) -> str:
    """A heading's anchor, as MkDocs' toc makes it (and GitHub, for these headings)."""
    text = re.sub(r"[^\w\s-]", "", heading).strip().lower()
    return re.sub(r"[-\s]+", "-", text)


def prose(text: str) -> str:
    """The page without its code blocks, where a link is code, not a link."""
    return FENCE.sub("", text)


def anchors(page: Path) -> set[str]:
    return {
        slug(h) for h in re.findall(r"^#+ (.*)$", prose(page.read_text(encoding="utf-8")), flags=re.MULTILINE)
    }


@pytest.mark.parametrize("page", PAGES, ids=[str(p.relative_to(ROOT)) for p in PAGES])
def test_every_link_to_another_page_resolves(page: Path) -> None:
    text = prose(page.read_text(encoding="utf-8"))
    broken = []
    for target in LINK.findall(text):
        if re.match(r"[a-z]+:", target):
            continue  # a web address
        path, _, anchor = target.partition("#")
        file = (page.parent / path).resolve() if path else page
        if not file.exists():
            broken.append(f"{target}: no file {file}")
        elif anchor and file.suffix == ".md" and anchor not in anchors(file):
            broken.append(f"{target}: no heading with the anchor #{anchor} in {file.relative_to(ROOT)}")
    for include in SNIPPET.findall(text):
        name, _, section = include.partition(":")
        content = (ROOT / name).read_text(encoding="utf-8") if (ROOT / name).exists() else None
        if content is None or (section and f"[start:{section}]" not in content):
            broken.append(f"the include {include!r}: no such file or section")
    assert not broken, f"{page.relative_to(ROOT)}: " + "; ".join(broken)


def test_every_page_is_in_the_sites_navigation() -> None:
    nav = (ROOT / "mkdocs.yml").read_text(encoding="utf-8").split("\nnav:\n", 1)[1]
    listed = set(re.findall(r"[\w/-]+\.md", nav))
    assert listed == {str(p.relative_to(DOCS)) for p in DOCS.rglob("*.md")}


# -- the reference pages generated from the code --------------------------------------------------


def reference() -> ModuleType:
    """docs_tools/reference.py, which MkDocs runs as a hook; loaded here without MkDocs, so that a
    module it reads that moved or changed fails this suite, not only the docs build."""
    spec = importlib.util.spec_from_file_location("docs_reference", ROOT / "docs_tools" / "reference.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_generated_reference_covers_every_option_ini_key_hook_command_and_field() -> None:
    from pytest_opik_eval import cli, hookspecs

    tools = reference()
    generated = {name: generate() for name, generate in tools.GENERATORS.items()}
    flags = [names[0] for names, _ in tools.recorded_options().options]
    assert len(flags) > 20
    assert all(f"`{flag}" in generated["options"] for flag in flags)
    assert all(f"`{name}`" in generated["ini"] for name, _, _ in tools.recorded_options().inis)
    assert "`PYTEST_OPIK_EVAL_STORE`" in generated["env"]
    assert "`OPIK_API_KEY`" in generated["env"]
    assert "`max_latency`" in generated["marker"]
    hooks = [name for name in vars(hookspecs) if name.startswith("pytest_opik_eval_")]
    assert hooks
    assert all(f"### `{name}`" in generated["hooks"] for name in hooks)
    [commands] = [a for a in cli._parser()._actions if isinstance(a, argparse._SubParsersAction)]
    assert all(f"### `opik-eval {name}`" in generated["cli"] for name in commands.choices)
    schema = json.loads((ROOT / "schema" / "eval-report.schema.json").read_text())
    assert all(f"### {name}\n" in generated["json"] for name in schema["$defs"])


def test_the_hand_written_options_table_names_every_option_and_ini_key() -> None:
    # The table with the options' full meaning, above the generated one: a new option needs a row.
    page = (DOCS / "reference" / "options.md").read_text(encoding="utf-8")
    table = page.split("## Every option, from the parser")[0]
    recorded = reference().recorded_options()
    assert [names[0] for names, _ in recorded.options if f"| `{names[0]}" not in table] == []
    assert [name for name, _, _ in recorded.inis if f"ini `{name}`" not in table] == []
