"""The command-line and ini options (their value checks are ``option_values``'). Kept light:
pytest imports this in every run; reading them into settings happens in ``settings``, only when
evals run."""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from pathlib import Path

import pytest

from pytest_opik_eval.option_values import (
    BATCH_AFTER_CAP,
    BATCH_MAX_ROUNDS,
    BATCH_MODES,
    METRIC_FORMS,
    RECORD_MODES,
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
    metric_spec,
    one_of,
    rate,
    record_mode,
    resume_id,
    run_id,
    seconds,
    shard,
    threads_count,
)

STORE_ENV = "PYTEST_OPIK_EVAL_STORE"
BACKEND_ENV = "PYTEST_OPIK_EVAL_BACKEND"
BACKENDS = ("local", "opik")
STORE_FOLDER = ".opik-eval"
STORE_FILE = "store.db"
GATE_MODES = ("normal", "strict")
JUDGE_CACHE_ENV = "PYTEST_OPIK_EVAL_JUDGE_CACHE"
JUDGE_CACHE_SETTINGS = ("auto", "on", "off")
RECORD_ENV = "PYTEST_OPIK_EVAL_RECORD"
LLM_SPANS_ENV = "PYTEST_OPIK_EVAL_LLM_SPANS"
LLM_SPANS_SETTINGS = ("auto", "on", "off")
BATCH_ENV = "PYTEST_OPIK_EVAL_BATCH"

# The item key of human labels, unless ini eval_labels_field or the marker's labels_field names another.
LABELS_FIELD = "labels"
# Where human labels come from, besides the items' labels field: --eval-labels-from.
LABEL_SOURCES = ("dataset", "opik-feedback")


def add_options(parser: pytest.Parser) -> None:
    group = parser.getgroup("eval", "LLM evaluations (pytest-opik-eval)")
    group.addoption(
        "--eval",
        action="store_true",
        dest="eval",
        help="Run eval tests (tests marked @pytest.mark.eval); without it they are left out",
    )
    group.addoption(
        "--eval-resume",
        metavar="ID",
        dest="eval_resume",
        type=resume_id,
        help="Rerun only the pending trials of an experiment or run (an id, or 'last'); implies --eval",
    )
    group.addoption(
        "--eval-rescore",
        metavar="ID",
        dest="eval_rescore",
        type=resume_id,
        help="Score the stored outputs of an experiment or run (an id, or 'last') again, without "
        "calling the task, as a new run linked to it; implies --eval",
    )
    group.addoption(
        "--eval-calibrate",
        action="store_true",
        dest="eval_calibrate",
        help="Run only the dataset items with human labels, with the judge cache off: today's "
        "judges against the labels, kept as their calibration; with --eval-rescore, their stored "
        "outputs judged again; implies --eval",
    )
    group.addoption(
        "--eval-labels-from",
        metavar="SOURCE",
        dest="eval_labels_from",
        type=one_of(LABEL_SOURCES),
        help="Where human labels come from: dataset (the items' labels field, the default) or "
        "opik-feedback (also the feedback scores people gave in the Opik UI to the traces of "
        "earlier experiments on the dataset, read when the session ends; needs --eval-backend=opik; "
        "ini eval_labels_from)",
    )
    group.addoption(
        "--eval-metric",
        metavar="SPEC",
        dest="eval_metric",
        action="append",
        type=metric_spec,
        help="With --eval-rescore, score with this metric instead of the marker's (repeatable): "
        f"{METRIC_FORMS}",
    )
    group.addoption(
        "--eval-store",
        metavar="PATH",
        dest="eval_store",
        help=f"The local store file (env {STORE_ENV}, ini eval_store; "
        f"default: {STORE_FOLDER}/{STORE_FILE} under the rootdir)",
    )
    group.addoption(
        "--eval-backend",
        dest="eval_backend",
        choices=("local", "opik"),
        help=f"Where runs are recorded: the local store, or the Opik server of the OPIK_* settings "
        f"(env {BACKEND_ENV}, ini eval_backend; default: local)",
    )
    group.addoption(
        "--eval-threads",
        metavar="N",
        dest="eval_threads",
        type=threads_count,
        help="Run up to N trials of an eval test at the same time, per process (ini eval_threads; "
        "the marker's task_threads wins; default: 1)",
    )
    group.addoption(
        "--eval-judge-samples",
        metavar="N",
        dest="eval_judge_samples",
        type=judge_samples_count,
        help="Score each output N times with each LLM judge: the score is their mean, a pass/fail "
        "judge's majority (ini eval_judge_samples; the marker's judge_samples wins; default: 1)",
    )
    group.addoption(
        "--eval-run-id",
        metavar="NAME",
        dest="eval_run_id",
        type=resume_id,
        help="Join the run named NAME (e.g. the CI's run number): sessions given the same name, "
        "on any machine, record one run",
    )
    group.addoption(
        "--eval-shard",
        metavar="K/N",
        dest="eval_shard",
        type=shard,
        help="Run the K-th of N stable, balanced shares of the trials (K from 1); the whole "
        "experiment is planned",
    )
    group.addoption(
        "--eval-report",
        metavar="PATH",
        dest="eval_report",
        help="Write a JSON report of the evaluated experiments to PATH (ini eval_report)",
    )
    group.addoption(
        "--eval-html",
        metavar="PATH",
        dest="eval_html",
        help="Write a self-contained HTML report of the evaluated experiments to PATH (ini eval_html)",
    )
    group.addoption(
        "--eval-fail-under",
        metavar="METRIC=MIN",
        dest="eval_fail_under",
        action="append",
        type=metric_bound,
        help="Fail unless each experiment's mean of METRIC is at least MIN (repeatable; ini eval_fail_under)",
    )
    group.addoption(
        "--eval-judge-floor",
        metavar="FIGURE=MIN",
        dest="eval_judge_floor",
        action="append",
        type=judge_floor,
        help="Strict mode refuses a gate on a judge whose calibration against human labels has its "
        "FIGURE (kappa, sensitivity or specificity) below MIN (repeatable; ini eval_judge_floor)",
    )
    group.addoption(
        "--eval-max-judge-drift",
        metavar="SHARE",
        dest="eval_max_judge_drift",
        type=rate,
        help="Fail the session when a judge's verdicts changed on more than this share (0 to 1) of "
        "the labelled items its stored calibration has, such as 0.1; the stored calibration is then "
        "kept (ini eval_max_judge_drift)",
    )
    group.addoption(
        "--eval-judge-drift-since",
        metavar="RUN",
        dest="eval_judge_drift_since",
        type=run_id,
        help="Measure a judge's drift against the calibration run RUN (a run id or name) kept, not "
        "against the newest: a judge that moves a little every night reaches the bound "
        "(ini eval_judge_drift_since)",
    )
    group.addoption(
        "--eval-min-pass-rate",
        metavar="RATE",
        dest="eval_min_pass_rate",
        type=rate,
        help="Fail unless this share (0 to 1) of each experiment's trials passed, or of its items with "
        "pass_threshold (ini eval_min_pass_rate)",
    )
    group.addoption(
        "--eval-soft",
        action="store_true",
        dest="eval_soft",
        default=None,
        help="Trials that miss their thresholds do not fail the session; the gates decide (ini eval_soft)",
    )
    group.addoption(
        "--eval-baseline",
        metavar="ID",
        dest="eval_baseline",
        type=resume_id,
        help="Compare with a baseline: an experiment id, a run id, 'last' (the test's newest earlier "
        "experiment) or 'last-passing' (its newest that met its gates) (ini eval_baseline)",
    )
    group.addoption(
        "--eval-max-regression",
        metavar="METRIC=DELTA",
        dest="eval_max_regression",
        action="append",
        type=metric_bound,
        help="Fail when METRIC's mean drops by more than DELTA from the baseline (repeatable; "
        "ini eval_max_regression)",
    )
    group.addoption(
        "--eval-max-cost",
        metavar="USD[/item|/run]",
        dest="eval_max_cost",
        action="append",
        type=cost_limit,
        help="Fail when an item's mean cost (the app's spans, per trial) is above USD, or with /run "
        "when the experiment's whole spend (app, judges and simulated users) is; give both to gate "
        "both (ini eval_max_cost)",
    )
    group.addoption(
        "--eval-max-latency",
        metavar="SECONDS[@pNN]",
        dest="eval_max_latency",
        type=latency_limit,
        help="Fail when the task latency's percentile (p95 unless @pNN says another) is above "
        "SECONDS, such as 2.5, 800ms or 2.5@p99 (ini eval_max_latency)",
    )
    group.addoption(
        "--eval-gate-mode",
        dest="eval_gate_mode",
        choices=GATE_MODES,
        help="normal: a regression gate fails on a significant drop beyond its DELTA, an absolute "
        "gate on its estimate; strict: a gate passes only when its confidence interval clears the "
        "bound (ini eval_gate_mode; default: normal)",
    )
    group.addoption(
        "--eval-confidence",
        metavar="LEVEL",
        dest="eval_confidence",
        type=confidence,
        help="The confidence level of the gates' intervals and tests, such as 0.9 or 0.99 "
        "(ini eval_confidence; default: 0.95)",
    )
    group.addoption(
        "--eval-sync-timeout",
        metavar="SECONDS",
        dest="eval_sync_timeout",
        type=seconds,
        help="With --eval-backend=opik, spend at most this long at the end of the session sending what "
        "is left to the server; the rest waits for opik-eval sync (ini eval_sync_timeout; default: 30)",
    )
    group.addoption(
        "--eval-budget",
        metavar="AMOUNT",
        dest="eval_budget",
        type=budget,
        help="Start no new trial once the trials' spans cost AMOUNT US dollars (5, 2.50, $5) or used "
        "AMOUNT tokens (200000tokens, 200k tokens); the rest stay pending for --eval-resume "
        "(ini eval_budget; with --eval-shard=K/N each shard gets AMOUNT/N)",
    )
    group.addoption(
        "--eval-judge-cache",
        dest="eval_judge_cache",
        choices=JUDGE_CACHE_SETTINGS,
        help="Keep the LLM judges' scores, keyed by the metric's class, code, configuration and inputs, the "
        "item and the trial, and reuse them: on, off, or auto, on with --eval-record (any mode but off; in "
        "strict replay a judge score not in the cache fails its trial) "
        f"(env {JUDGE_CACHE_ENV}, ini eval_judge_cache; default: auto)",
    )
    group.addoption(
        "--eval-record",
        metavar="MODE",
        dest="eval_record",
        type=record_mode,
        help="Record the app's HTTP calls per trial, and replay them: "
        + "; ".join(f"{mode}: {meaning}" for mode, meaning in RECORD_MODES.items())
        + f" (env {RECORD_ENV}, ini eval_record; default: off)",
    )
    group.addoption(
        "--eval-llm-spans",
        dest="eval_llm_spans",
        choices=LLM_SPANS_SETTINGS,
        help="Make each OpenAI or Anthropic call a trial's task makes over HTTP, with no instrumented "
        "span around it, an LLM span of the trial (its tool calls, usage and cost): auto, for the tests "
        "whose metrics read the tool calls; on, every test; off "
        f"(env {LLM_SPANS_ENV}, ini eval_llm_spans; default: auto; needs the record extra)",
    )
    group.addoption(
        "--eval-record-allow-host",
        metavar="HOST[:PORT]",
        dest="eval_record_allow_host",
        action="append",
        type=allowed_host,
        help="Leave the requests to this host (on any port, or on PORT) alone in every --eval-record "
        "mode: sent, never recorded, replayed or refused, such as a local service a fixture starts "
        "(repeatable; with ini eval_record_allow_host, one per line)",
    )
    group.addoption(
        "--eval-batch",
        metavar="MODE",
        dest="eval_batch",
        nargs="?",
        const="on",
        type=batch_mode,
        help="Send the app's LLM requests through the providers' batch APIs, at half the price, results "
        "within 24 hours: "
        + "; ".join(f"{mode}: {meaning}" for mode, meaning in BATCH_MODES.items())
        + ". The trials wait, pending, until --eval-resume collects the answers "
        f"(bare flag: on; env {BATCH_ENV}, ini eval_batch; default: off)",
    )
    group.addoption(
        "--eval-batch-max-rounds",
        metavar="N",
        dest="eval_batch_max_rounds",
        type=batch_rounds,
        help="The batched rounds a trial may take (one per dependent call, and the judges'); at the "
        f"cap its next request does what --eval-batch-after-cap says (ini eval_batch_max_rounds; "
        f"default {BATCH_MAX_ROUNDS})",
    )
    group.addoption(
        "--eval-batch-after-cap",
        dest="eval_batch_after_cap",
        choices=BATCH_AFTER_CAP,
        help="What the next request of a trial at --eval-batch-max-rounds does: pending, the trial "
        "fails, pending, with the reason (no surprise bill); live, it is sent and recorded at the live price "
        "(ini eval_batch_after_cap; default: pending)",
    )
    group.addoption(
        "--eval-batch-provider",
        metavar="HOST[:PORT]=PROVIDER",
        dest="eval_batch_provider",
        action="append",
        type=batch_provider,
        help="The batch API a host speaks when its name does not tell (api.openai.com, api.anthropic.com "
        "and generativelanguage.googleapis.com do): openai, anthropic or gemini (repeatable; with ini "
        "eval_batch_provider, one per line)",
    )
    parser.addini("eval_store", "The local store file of pytest-opik-eval", type="string")
    parser.addini("eval_threads", "How many trials of an eval test may run at once", type="string")
    parser.addini("eval_backend", "Where runs are recorded: local or opik", type="string")
    parser.addini(
        "eval_sync_timeout", "Seconds to send what is left to the Opik server at the end", type="string"
    )
    parser.addini("eval_report", "Write the pytest-opik-eval JSON report to this path", type="string")
    parser.addini("eval_html", "Write the pytest-opik-eval HTML report to this path", type="string")
    parser.addini("eval_fail_under", "METRIC=MIN gates, one per line", type="linelist")
    parser.addini("eval_judge_floor", "FIGURE=MIN floors of a judge's calibration", type="linelist")
    parser.addini(
        "eval_max_judge_drift", "The share of labelled items a judge may change its verdict on", type="string"
    )
    parser.addini(
        "eval_judge_drift_since", "The run whose calibrations judge drift is measured against", type="string"
    )
    parser.addini("eval_min_pass_rate", "The minimum share of passed trials (or items)", type="string")
    parser.addini("eval_soft", "Trials that miss their thresholds do not fail the session", type="bool")
    parser.addini("eval_baseline", "The baseline: an id, last, or last-passing", type="string")
    parser.addini("eval_max_regression", "METRIC=DELTA regression gates, one per line", type="linelist")
    parser.addini("eval_max_cost", "USD[/item|/run] cost gates, one per line", type="linelist")
    parser.addini("eval_max_latency", "SECONDS[@pNN]: a gate on the task latency", type="string")
    parser.addini("eval_gate_mode", "How the gates decide: normal or strict", type="string")
    parser.addini("eval_confidence", "The confidence level of the gates (default 0.95)", type="string")
    parser.addini("eval_budget", "The spend (5, $5, 200k tokens) after which no trial starts", type="string")
    parser.addini(
        "eval_labels_field", "The item key of human labels by score name (default: labels)", type="string"
    )
    parser.addini("eval_labels_from", "Where human labels come from: dataset or opik-feedback", type="string")
    parser.addini("eval_judge_samples", "How many times each LLM judge scores an output", type="string")
    parser.addini("eval_judge_cache", "Keep the LLM judges' scores: auto, on or off", type="string")
    parser.addini(
        "eval_record", "Record and replay the app's HTTP calls: " + ", ".join(RECORD_MODES), type="string"
    )
    parser.addini("eval_llm_spans", "LLM spans from the app's HTTP calls: auto, on or off", type="string")
    parser.addini(
        "eval_batch", "Defer the LLM requests to provider batches: off, on or strict", type="string"
    )
    parser.addini("eval_batch_provider", "HOST[:PORT]=PROVIDER, one per line", type="linelist")
    parser.addini("eval_batch_max_rounds", "The batched rounds a trial may take (default 8)", type="string")
    parser.addini("eval_batch_after_cap", "A trial at the round cap: pending or live", type="string")
    parser.addini(
        "eval_record_allow_host", "HOST[:PORT] that --eval-record leaves alone, one per line", type="linelist"
    )


def resume_command(
    target: str, *, store: Path | None = None, paths: Sequence[str] = (), option: str = "--eval-resume"
) -> str:
    """The pytest command that runs the pending trials of ``target`` (an experiment or run id),
    or with ``option="--eval-rescore"`` rescores it: with ``--eval-store`` when the store is not
    the one pytest finds by itself, and with the test paths given."""
    store_option = [] if store is None else [f"--eval-store={store}"]
    return shlex.join(["pytest", f"{option}={target}", *store_option, *paths])
