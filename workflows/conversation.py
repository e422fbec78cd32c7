"""The call's conversation: the main loop of ``CallWorkflow.run`` from the first effects
to the end of the call, on the call's driver and how its run ends. Apart from ``call.py`` (the
workflow's lifecycle and message handlers) so each file reads in one sitting.
"""

from __future__ import annotations

import asyncio

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from ringflow.callflow.effects import Effect
    from ringflow.callflow.events import MaxDuration
    from ringflow.contract.call import CallInput
    from ringflow.workflows.agent_presence import agent_lost, final_turn
    from ringflow.workflows.call_driver import CallDriver
    from ringflow.workflows.dialing import place_call
    from ringflow.workflows.journal_recovery import recover_journal
    from ringflow.workflows.run_end import RunEnd
    from ringflow.workflows.supervision import paused_deadline

LATE_TIMER_S = 5.0


async def converse(d: CallDriver, run_end: RunEnd, inp: CallInput, startup: list[Effect]) -> None:
    d.apply_effects(startup)
    if inp.dial is not None and inp.carry is None:
        d.spawn(place_call(d))
    d.vis.sync(d.call.flow_state, d.call.shown_status)
    run_end.recording.maybe_start()  # a continued run's call is live already
    settings = inp.definition.flow.settings
    limit = d.call.started_at + settings.max_duration_s
    # One timer at a time, re-armed only once it has fired or when something must happen
    # sooner than it would fire. A timeout on each wait would cancel and restart a timer on
    # every wake-up: two history events per signal. The agent timeout moves later with each
    # event, so the timer may fire early; the checks below then find nothing due and re-arm.
    timer: asyncio.Task[None] | None = None
    timer_at = 0.0
    while not d.call.flow_state.ended:
        now = workflow.now().timestamp()
        # The time limit pauses while a supervisor has the call, and moves later by the
        # takeovers' length after it (workflows/supervision.py); no takeover: as it was.
        deadline = paused_deadline(d.call.supervision, limit, now)
        due = deadline
        if d.call.status == "live":
            due = min(due, d.liveness.due)
        if d.inbox.held_since is not None:
            due = min(due, d.inbox.held_since + inp.gap_wait_s)  # see Inbox.skip_gap
        if timer is not None and not timer.done() and d.rearm_due(timer_at, deadline):
            timer.cancel()
            timer = None
        if timer is None or timer.done() or due < timer_at:
            if timer is not None:
                timer.cancel()
            timer_at = due
            timer = asyncio.get_event_loop().create_task(workflow.sleep(max(0.001, due - now)))

        def woken(
            t: asyncio.Task[None] = timer, at: float = timer_at, limit: float = deadline
        ) -> bool:  # bound now
            return d.wake or d.call.flow_state.ended or t.done() or d.rearm_due(at, limit)

        await workflow.wait_condition(woken)
        d.wake = False
        d.vis.sync(d.call.flow_state, d.call.shown_status)
        if d.call.flow_state.ended:
            break
        run_end.recording.maybe_start()
        now = workflow.now().timestamp()
        d.apply_ready(*d.inbox.skip_gap(now, inp.gap_wait_s))
        # A timer firing long after it was due means Temporal (or every worker) was down,
        # not just the agent: its events could not arrive either, so it gets a fresh timeout.
        fired_late = timer is not None and timer.done() and now - timer_at > LATE_TIMER_S
        if now >= deadline:
            d.step(MaxDuration(at=now))
        elif d.call.status == "live" and d.liveness.overdue(now):
            if fired_late:
                d.liveness.seen(now)
            else:
                await agent_lost(d)
        elif run_end.should_continue_as_new():
            await run_end.continue_as_new()
    await final_turn(d)
    await run_end.recording.stop()  # after the last words, whatever ended the call
    if not d.call.hangup_seen or d.hangup_signalled:  # not ended by the agent's last send
        await recover_journal(d, "the call ended without the agent's hangup")
    d.settle_values()  # results no agent applied go into the record
    for eff in d.final_extracts:
        d.pending_extractions.append(eff.id or eff.node)
        d.spawn(d.extract(eff))
