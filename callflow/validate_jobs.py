"""Validation rules for ``jobs`` entries (background job groups, ``callflow/jobs.py``)."""

from __future__ import annotations

from ringflow.callflow.errors import did_you_mean
from ringflow.callflow.model import BranchTable, FunctionEntry, HttpSpec
from ringflow.callflow.templating import strings_in
from ringflow.callflow.validate_checker import Checker


def check_jobs_entry(checker: Checker, path: str, fn: FunctionEntry, is_run: bool) -> None:
    """A group: described for the LLM, each job a documented handler whose required
    arguments are given (by the LLM through the entry's ``parameters``, or by ``args``),
    routed on ``outcome`` alone. The group's module (its state models, the effects it
    starts) is imported here, for a flow that has a group: ``ringflow flow validate`` of
    any other loads none of it (tests/ringflow/test_cli_startup.py)."""
    from ringflow.callflow.jobs import CANCEL_TOOL, OUTCOMES

    spec = fn.jobs
    assert spec is not None
    if is_run:
        checker.err(path, "an action node runs a handler or an http entry, not a job group")
    if fn.name == CANCEL_TOOL:
        checker.err(
            f"{path}.name", f"'{CANCEL_TOOL}' is the built-in that cancels a group: pick another name"
        )
    if not fn.description:
        checker.err(f"{path}.description", "a jobs entry needs a description (what the LLM starts)")
    checker.check_parameters(f"{path}.parameters", fn.parameters, required=False)
    if fn.timeout_s is not None:
        checker.err(
            f"{path}.timeout_s", "a group's time limit is jobs.timeout_s (each job's: run[].timeout_s)"
        )
    if fn.retry is not None:
        checker.err(f"{path}.retry", "each job retries on its own: put retry on the jobs in jobs.run")
    given = set(((fn.parameters or {}).get("properties") or {}).keys())
    for i, job in enumerate(spec.run):
        where = f"{path}.jobs.run[{i}]"
        if job.http is not None:
            _check_http_job(checker, where, job.http, given | set(job.args))
            continue
        handler = checker.handler(f"{where}.name", job.name)
        if handler is None:
            continue
        props = handler.parameters.get("properties") or {}
        for arg in job.args:
            if arg not in props:
                checker.err(
                    f"{where}.args.{arg}",
                    f"handler '{job.name}' has no parameter '{arg}'{did_you_mean(arg, list(props))}",
                )
        missing = [n for n in handler.parameters.get("required") or [] if n not in given | set(job.args)]
        if missing:
            checker.err(
                f"{where}.args",
                f"handler '{job.name}' requires {', '.join(repr(n) for n in missing)}: give it in args, "
                "or declare it in the entry's parameters for the LLM to give",
            )
    t = fn.transition_to
    if isinstance(t, BranchTable):
        if t.field != "outcome":
            checker.err(
                f"{path}.transition_to.field",
                f"a group routes on its outcome: use field: outcome, not '{t.field}'",
            )
        for case in t.cases:
            if case not in OUTCOMES:
                checker.err(
                    f"{path}.transition_to.cases.{case}",
                    f"a group's outcome is one of {', '.join(OUTCOMES)}{did_you_mean(case, list(OUTCOMES))}",
                )


def _check_http_job(checker: Checker, where: str, http: HttpSpec, args: set[str]) -> None:
    """An HTTP job's request: templated like an HTTP entry's, with the group's arguments
    and the job's own ``args`` beside the call's values."""
    checker.check_template(f"{where}.http.url", http.url, args, url=True)
    for k, v in (http.headers or {}).items():
        checker.check_template(f"{where}.http.headers.{k}", v, args)
    for text in strings_in(http.body):
        checker.check_template(f"{where}.http.body", text, args)
