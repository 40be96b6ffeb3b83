"""The eval options of one session, read and resolved (CLI > environment > ini > default)."""

from __future__ import annotations

import argparse
import importlib.util
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, TypeVar

import pytest

from pytest_opik_eval.option_values import (
    BATCH_AFTER_CAP,
    BATCH_MAX_ROUNDS,
    Host,
    allowed_host,
    batch_mode,
    batch_provider,
    batch_rounds,
    budget,
    confidence,
    cost_limit,
    judge_floor,
    judge_samples_count,
    latency_limit,
    metric_bound,
    one_of,
    rate,
    record_mode,
    seconds,
    threads_count,
)
from pytest_opik_eval.options import (
    BACKEND_ENV,
    BACKENDS,
    BATCH_ENV,
    GATE_MODES,
    JUDGE_CACHE_ENV,
    JUDGE_CACHE_SETTINGS,
    LABEL_SOURCES,
    LABELS_FIELD,
    LLM_SPANS_ENV,
    LLM_SPANS_SETTINGS,
    RECORD_ENV,
    STORE_ENV,
    STORE_FILE,
    STORE_FOLDER,
    resume_command,
)
from pytest_opik_eval.store.opik.config import SYNC_TIMEOUT, sync_command
from pytest_opik_eval.store.records import BudgetSetting, GateMode


@dataclass(frozen=True)
class GateOptions:
    """Gate settings given for the whole session, from one source (command line or ini)."""

    fail_under: dict[str, float]
    min_pass_rate: float | None
    max_regression: dict[str, float]
    soft: bool | None
    mode: GateMode | None
    confidence: float | None
    max_cost: dict[str, float] = field(default_factory=dict)  # "item" / "run" -> USD
    max_latency: tuple[float, float] | None = None  # (seconds, percentile)
    judge_floor: dict[str, float] = field(default_factory=dict)  # "kappa"... -> the least allowed


@dataclass(frozen=True)
class EvalOptions:
    """The options of one session, resolved to absolute paths, with where each came from."""

    resume: str | None
    rescore: str | None  # --eval-rescore: the experiment or run whose stored outputs are scored again
    metric_specs: tuple[str, ...]  # --eval-metric: with a rescore, the metrics instead of the marker's
    backend: str  # "local" or "opik"
    store_path: Path  # the store, or with the opik backend the local spool
    store_source: str  # "--eval-store", "env PYTEST_OPIK_EVAL_STORE", "ini eval_store" or "default"
    report_path: Path | None
    html_path: Path | None
    paths: tuple[str, ...]  # the test paths given on the command line, for the resume command
    threads: int
    run_name: str | None
    shard: tuple[int, int] | None
    cli_gates: GateOptions  # given on this command line: they win over what a resume stored
    ini_gates: GateOptions
    baseline: str | None
    sync_timeout: float  # with the opik backend: the budget for sending what is left at the end
    sync_command: str  # the command that sends what the end of the session could not
    budget: BudgetSetting | None  # --eval-budget, else ini eval_budget (a resume may use the run's)
    judge_cache: str  # "auto", "on" or "off": see judge_cache_enabled
    record_mode: str  # --eval-record: one of options.RECORD_MODES ("off" by default)
    record_source: str  # "default", "--eval-record", "env PYTEST_OPIK_EVAL_RECORD", "ini eval_record"
    record_allowed: tuple[Host, ...]  # --eval-record-allow-host and ini eval_record_allow_host
    llm_spans: str = "auto"  # --eval-llm-spans: "auto", "on" or "off" (see Recorder.makes_spans)
    labels_field: str = LABELS_FIELD  # ini eval_labels_field: the item key of human labels
    labels_from: str = "dataset"  # --eval-labels-from: "opik-feedback" adds the Opik UI's scores
    calibrate: bool = False  # --eval-calibrate: only the labelled items, the judge cache off
    # --eval-max-judge-drift: the share of a calibration's labelled items whose verdicts may change
    max_judge_drift: float | None = None
    # --eval-judge-drift-since: the run (id or name) whose calibrations drift is measured against
    judge_drift_since: str | None = None
    judge_samples: int = 1  # --eval-judge-samples, else ini: times each LLM judge scores an output
    batch: str = "off"  # --eval-batch: one of option_values.BATCH_MODES
    batch_source: str = "default"  # where it came from: "--eval-batch", "env ...", "ini eval_batch"
    batch_providers: tuple[tuple[Host, str], ...] = ()  # --eval-batch-provider and ini eval_batch_provider
    batch_max_rounds: int = BATCH_MAX_ROUNDS  # --eval-batch-max-rounds, else ini
    batch_after_cap: str = "pending"  # --eval-batch-after-cap, else ini: pending or live

    @classmethod
    def read(cls, config: pytest.Config) -> EvalOptions:
        resume: str | None = config.getoption("eval_resume")
        rescore: str | None = config.getoption("eval_rescore")
        metric_specs = tuple(config.getoption("eval_metric") or ())
        _check_rescore(resume, rescore, metric_specs)
        store_path, store_source = _store(config)
        backend = _backend(config)
        report_path = _path_option(config, "eval_report")
        batch, batch_source = _batch(config, rescore)
        record, record_source = _record(config, batch)
        return cls(
            resume=resume,
            rescore=rescore,
            metric_specs=metric_specs,
            backend=backend,
            store_path=store_path,
            store_source=store_source,
            report_path=report_path,
            html_path=_path_option(config, "eval_html"),
            threads=_threads_option(config),
            run_name=config.getoption("eval_run_id"),
            shard=config.getoption("eval_shard"),
            paths=tuple(config.args) if config.args_source is pytest.Config.ArgsSource.ARGS else (),
            cli_gates=GateOptions(
                fail_under=dict(config.getoption("eval_fail_under") or ()),
                min_pass_rate=config.getoption("eval_min_pass_rate"),
                max_regression=dict(config.getoption("eval_max_regression") or ()),
                soft=config.getoption("eval_soft"),
                mode=config.getoption("eval_gate_mode"),
                confidence=config.getoption("eval_confidence"),
                max_cost=dict(config.getoption("eval_max_cost") or ()),
                max_latency=config.getoption("eval_max_latency"),
                judge_floor=dict(config.getoption("eval_judge_floor") or ()),
            ),
            ini_gates=_ini_gates(config),
            baseline=config.getoption("eval_baseline")
            or (str(config.getini("eval_baseline")).strip() or None),
            sync_timeout=_sync_timeout(config),
            sync_command=_sync_command(config, store_path, store_source),
            budget=_budget(config),
            # Calibrating judges today's judges: a cached score is yesterday's.
            judge_cache="off" if config.getoption("eval_calibrate") else _judge_cache(config),
            record_mode=record,
            record_source=record_source,
            record_allowed=_record_allowed(config),
            llm_spans=_llm_spans(config),
            labels_field=str(config.getini("eval_labels_field") or "").strip() or LABELS_FIELD,
            labels_from=_labels_from(config, backend),
            calibrate=bool(config.getoption("eval_calibrate")),
            max_judge_drift=_max_judge_drift(config),
            judge_drift_since=config.getoption("eval_judge_drift_since")
            or (str(config.getini("eval_judge_drift_since")).strip() or None),
            judge_samples=_judge_samples_option(config),
            batch=batch,
            batch_source=batch_source,
            batch_providers=_batch_providers(config),
            batch_max_rounds=_batch_max_rounds(config),
            batch_after_cap=_batch_after_cap(config),
        )

    def resume_command(self, target: str) -> str:
        """The command that resumes ``target`` from the same folder: with the store and the test
        paths when they were given on the command line."""
        store = self.store_path if self.store_source == "--eval-store" else None
        return resume_command(target, store=store, paths=self.paths)

    def budget_resume_command(self, target: str) -> str:
        """The command that resumes ``target`` after the budget stopped it: a shard's names its
        shard, whose store holds the other shards' trials too, never run there."""
        command = self.resume_command(target)
        if self.shard is None:
            return command
        return f"{command} --eval-shard={self.shard[0]}/{self.shard[1]}"


def judge_cache_enabled(setting: str, record_mode: str) -> bool:
    """Whether the judge cache is on: ``on``, or ``auto`` with ``--eval-record`` (any mode but
    ``off``): the recording modes fill it as they record the app's calls, and strict replay
    (``none``) needs it, since judges run outside the recording and would reach the network."""
    return setting == "on" or (setting == "auto" and record_mode != "off")


def _judge_cache(config: pytest.Config) -> str:
    given = _layered(config, "eval_judge_cache", JUDGE_CACHE_ENV, one_of(JUDGE_CACHE_SETTINGS))
    return "auto" if given is None else given[0]


def _llm_spans(config: pytest.Config) -> str:
    """--eval-llm-spans: ``on`` needs vcrpy (the record extra), said before anything runs;
    ``auto`` without it makes no span (the advice on a trial without spans names the extra)."""
    given = _layered(config, "eval_llm_spans", LLM_SPANS_ENV, one_of(LLM_SPANS_SETTINGS))
    if given is None:
        return "auto"
    setting, source = given
    if setting == "on" and importlib.util.find_spec("vcr") is None:
        raise pytest.UsageError(
            f"--eval-llm-spans=on (from {source}) reads the app's HTTP calls with vcrpy, which is not "
            "installed: pip install 'pytest-opik-eval[record]'"
        )
    return setting


def _labels_from(config: pytest.Config, backend: str) -> str:
    cli: str | None = config.getoption("eval_labels_from")
    source = "--eval-labels-from"
    given = cli
    if given is None:
        given, source = _ini_value(config, "eval_labels_from", one_of(LABEL_SOURCES)), "ini eval_labels_from"
    if given == "opik-feedback" and backend != "opik":
        raise pytest.UsageError(
            f"{source}=opik-feedback reads the scores people gave in the Opik UI from the Opik server: "
            "run with --eval-backend=opik (or PYTEST_OPIK_EVAL_BACKEND=opik) and the OPIK_* settings"
        )
    return given or "dataset"


def _check_rescore(resume: str | None, rescore: str | None, metric_specs: tuple[str, ...]) -> None:
    if resume is not None and rescore is not None:
        raise pytest.UsageError(
            f"--eval-resume={resume} and --eval-rescore={rescore} cannot be combined: resume runs the "
            "task for the pending trials, rescore scores the completed ones again without it; "
            "resume first, then rescore"
        )
    if metric_specs and rescore is None:
        raise pytest.UsageError(
            f"--eval-metric={metric_specs[0]} replaces the marker's metrics in a rescore: give "
            "--eval-rescore=ID with it (a new run scores with the metrics of its marker)"
        )


def _threads_option(config: pytest.Config) -> int:
    given: int | None = config.getoption("eval_threads")
    if given is not None:
        return given
    ini = str(config.getini("eval_threads") or "").strip()
    try:
        return threads_count(ini) if ini else 1
    except argparse.ArgumentTypeError as error:
        raise pytest.UsageError(f"ini eval_threads: {error}") from None


def _judge_samples_option(config: pytest.Config) -> int:
    given: int | None = config.getoption("eval_judge_samples")
    if given is not None:
        return given
    ini = str(config.getini("eval_judge_samples") or "").strip()
    try:
        return judge_samples_count(ini) if ini else 1
    except argparse.ArgumentTypeError as error:
        raise pytest.UsageError(f"ini eval_judge_samples: {error}") from None


def _budget(config: pytest.Config) -> BudgetSetting | None:
    given: tuple[float, Literal["usd", "tokens"]] | None = config.getoption("eval_budget")
    if given is None:
        given = _ini_value(config, "eval_budget", budget)
    return None if given is None else BudgetSetting(amount=given[0], unit=given[1])


def _max_judge_drift(config: pytest.Config) -> float | None:
    given: float | None = config.getoption("eval_max_judge_drift")
    return given if given is not None else _ini_value(config, "eval_max_judge_drift", rate)


def _sync_timeout(config: pytest.Config) -> float:
    given: float | None = config.getoption("eval_sync_timeout")
    if given is not None:
        return given
    ini = str(config.getini("eval_sync_timeout") or "").strip()
    try:
        return seconds(ini) if ini else SYNC_TIMEOUT
    except argparse.ArgumentTypeError as error:
        raise pytest.UsageError(f"ini eval_sync_timeout: {error}") from None


def _sync_command(config: pytest.Config, store_path: Path, store_source: str) -> str:
    """``opik-eval sync``, naming the spool unless that command, run from here, finds it by
    itself: the default spool (the CLI looks in this folder and its parents)."""
    here = config.invocation_params.dir
    if store_source == "default" and (here == config.rootpath or config.rootpath in here.parents):
        return sync_command()
    return sync_command(store_path)


_Parsed = TypeVar("_Parsed")


def _ini_value(config: pytest.Config, name: str, parse: Callable[[str], _Parsed]) -> _Parsed | None:
    """The ini value ``name`` parsed as its command-line option is, or None when it is not set;
    a bad one is a usage error that names the ini key."""
    text = str(config.getini(name) or "").strip()
    try:
        return parse(text) if text else None
    except argparse.ArgumentTypeError as error:
        raise pytest.UsageError(f"ini {name}: {error}") from None


def _ini_gates(config: pytest.Config) -> GateOptions:
    def bounds(name: str, parse: Callable[[str], tuple[str, float]] = metric_bound) -> dict[str, float]:
        try:
            return dict(parse(line) for line in config.getini(name) if line.strip())
        except argparse.ArgumentTypeError as error:
            raise pytest.UsageError(f"ini {name}: {error}") from None

    min_pass_rate = _ini_value(config, "eval_min_pass_rate", rate)
    mode_text = str(config.getini("eval_gate_mode") or "").strip()
    if mode_text and mode_text not in GATE_MODES:
        raise pytest.UsageError(
            f"ini eval_gate_mode: expected one of {', '.join(GATE_MODES)}; got {mode_text!r}"
        )
    mode: GateMode | None = "strict" if mode_text == "strict" else "normal" if mode_text else None
    level = _ini_value(config, "eval_confidence", confidence)
    try:
        # One per line; two on one line ("0.01/item 5/run") read the same.
        max_cost = dict(cost_limit(part) for line in config.getini("eval_max_cost") for part in line.split())
    except argparse.ArgumentTypeError as error:
        raise pytest.UsageError(f"ini eval_max_cost: {error}") from None
    max_latency = _ini_value(config, "eval_max_latency", latency_limit)
    return GateOptions(
        fail_under=bounds("eval_fail_under"),
        min_pass_rate=min_pass_rate,
        max_regression=bounds("eval_max_regression"),
        soft=bool(config.getini("eval_soft")),
        mode=mode,
        confidence=level,
        max_cost=max_cost,
        max_latency=max_latency,
        judge_floor=bounds("eval_judge_floor", judge_floor),
    )


def _backend(config: pytest.Config) -> str:
    given = _layered(config, "eval_backend", BACKEND_ENV, one_of(BACKENDS))
    return "local" if given is None else given[0]


def _record(config: pytest.Config, batch: str) -> tuple[str, str]:
    """--eval-record's mode, and where it came from; a mode that records needs vcrpy (the
    record extra), said before anything runs. --eval-batch replays what earlier rounds
    collected and defers the rest: mode new_episodes, and no other."""
    mode, source = _record_setting(config)
    if batch != "off":
        if mode not in ("off", "new_episodes"):
            raise pytest.UsageError(
                f"--eval-batch replays the answers earlier rounds collected and defers the rest: it records "
                f"in mode new_episodes, not --eval-record={mode} (from {source}); leave --eval-record out"
            )
        mode, source = "new_episodes", f"--eval-batch={batch}"
    if mode != "off" and importlib.util.find_spec("vcr") is None:
        raise pytest.UsageError(
            f"--eval-record={mode} (from {source}) records the app's calls with vcrpy, which is not "
            "installed: pip install 'pytest-opik-eval[record]'"
        )
    return mode, source


def _batch(config: pytest.Config, rescore: str | None) -> tuple[str, str]:
    """--eval-batch's mode and where it came from."""
    given = _layered(config, "eval_batch", BATCH_ENV, batch_mode)
    if given is None or given[0] == "off":
        return given or ("off", "default")
    if rescore is not None and config.getoption("eval_calibrate"):
        if given[1] != "--eval-batch":  # a project's ini or environment: a calibration's judges run live
            return "off", "default"
        # Its verdicts are compared with the labels at the session's end, which a resume does not
        # do: a calibration is made again, not resumed.
        raise pytest.UsageError(
            f"--eval-batch (from {given[1]}) with opik-eval calibrate or judge-drift: a calibration "
            "measures the judges in one session, live; run it without --eval-batch"
        )
    return given


def _batch_max_rounds(config: pytest.Config) -> int:
    given: int | None = config.getoption("eval_batch_max_rounds")
    if given is None:
        given = _ini_value(config, "eval_batch_max_rounds", batch_rounds)
    return BATCH_MAX_ROUNDS if given is None else given


def _batch_after_cap(config: pytest.Config) -> str:
    given: str | None = config.getoption("eval_batch_after_cap")
    if given is None:
        given = _ini_value(config, "eval_batch_after_cap", one_of(BATCH_AFTER_CAP))
    return "pending" if given is None else given


def _batch_providers(config: pytest.Config) -> tuple[tuple[Host, str], ...]:
    try:
        ini = [batch_provider(line) for line in config.getini("eval_batch_provider") if line.strip()]
    except argparse.ArgumentTypeError as error:
        raise pytest.UsageError(f"ini eval_batch_provider: {error}") from None
    return tuple(dict.fromkeys([*(config.getoption("eval_batch_provider") or ()), *ini]))


def _record_setting(config: pytest.Config) -> tuple[str, str]:
    return _layered(config, "eval_record", RECORD_ENV, record_mode) or ("off", "default")


def _record_allowed(config: pytest.Config) -> tuple[Host, ...]:
    """The hosts --eval-record leaves alone: the command line's and the ini file's together."""
    try:
        ini = [allowed_host(line) for line in config.getini("eval_record_allow_host") if line.strip()]
    except argparse.ArgumentTypeError as error:
        raise pytest.UsageError(f"ini eval_record_allow_host: {error}") from None
    return tuple(dict.fromkeys([*(config.getoption("eval_record_allow_host") or ()), *ini]))


def _layered(
    config: pytest.Config, name: str, env: str, parse: Callable[[str], _Parsed]
) -> tuple[_Parsed, str] | None:
    """Option ``name``'s value and where it came from: the command line (parsed by argparse),
    else the environment variable ``env``, else the ini key ``name``, each parsed as the command
    line is; None when none sets it. A bad value is a usage error that names its source."""
    cli: _Parsed | None = config.getoption(name)
    if cli:
        return cli, "--" + name.replace("_", "-")
    text = os.environ.get(env, "").strip()
    if text:
        try:
            return parse(text), f"env {env}"
        except argparse.ArgumentTypeError as error:
            raise pytest.UsageError(f"env {env}: {error}") from None
    ini = _ini_value(config, name, parse)
    return None if ini is None else (ini, f"ini {name}")


def _store(config: pytest.Config) -> tuple[Path, str]:
    cli: str | None = config.getoption("eval_store")
    if cli:
        return _absolute(Path(cli), config.invocation_params.dir), "--eval-store"
    env = os.environ.get(STORE_ENV)
    if env:
        return _absolute(Path(env), Path.cwd()), f"env {STORE_ENV}"
    ini = _ini_path(config, "eval_store")
    if ini is not None:
        return ini, "ini eval_store"
    return config.rootpath / STORE_FOLDER / STORE_FILE, "default"


def _path_option(config: pytest.Config, name: str) -> Path | None:
    cli: str | None = config.getoption(name)
    if cli:
        return _absolute(Path(cli), config.invocation_params.dir)
    return _ini_path(config, name)


def _ini_path(config: pytest.Config, name: str) -> Path | None:
    value = str(config.getini(name) or "").strip()
    if not value:
        return None
    # ini paths are relative to the ini file, as pytest's own path settings are.
    base = config.inipath.parent if config.inipath else config.rootpath
    return _absolute(Path(value), base)


def _absolute(path: Path, base: Path) -> Path:
    path = path.expanduser()
    return path if path.is_absolute() else base / path
