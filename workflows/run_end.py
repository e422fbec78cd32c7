"""How a run of the call's workflow ends: continue-as-new, or the call's end and its record.

Both write payloads Temporal caps at 2 MB, so both go by the byte budgets of
``workflows/budgets.py``: the transcript leaves for the database in slices before a payload
could near the limit, and the next run gets a continuation checked for size. ``CallWorkflow`` (``call.py``)
owns one, given the call's driver.
"""

from __future__ import annotations

from datetime import timedelta

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from ringflow.callflow.model import AnalysisSettings
    from ringflow.contract.analysis import AnalysisInput
    from ringflow.contract.call import Continuation
    from ringflow.contract.events import Turn
    from ringflow.contract.records import CallRecord, TranscriptAppend, WebhookDelivery
    from ringflow.contract.wire import encoded_bytes
    from ringflow.workflows import activity_calls as acts
    from ringflow.workflows import budgets
    from ringflow.workflows.call_driver import REJECTED_TAIL, CallDriver
    from ringflow.workflows.record import build_record, transcript_items
    from ringflow.workflows.recording import Recording


class RunEnd:
    """How this run ends (continue-as-new, or the call's finish), on the call the driver holds."""

    def __init__(self, d: CallDriver, recording: Recording) -> None:
        self.d = d
        self.recording = recording

    def should_continue_as_new(self) -> bool:
        info = workflow.info()
        busy = (
            info.is_continue_as_new_suggested()
            or info.get_current_history_length() > self.d.inp.max_history_events
            or self.d.transcript.bytes > budgets.MEMORY_MAX_BYTES
        )
        return busy and not self.d.tasks and workflow.all_handlers_finished()

    async def continue_as_new(self) -> None:
        await workflow.wait_condition(lambda: workflow.all_handlers_finished() and not self.d.tasks)
        turns = self.d.transcript.turns
        cut = budgets.tail_start(turns)
        await self.store_transcript(turns[:cut], self.d.transcript.base)
        tail = turns[cut:]
        next_seq, seen, held = self.d.inbox.handed_on()
        fn_results, fn_done = self.d.functions.for_next_run()
        continuation = Continuation(
            state=self.d.call.flow_state,
            status=self.d.call.status,
            next_seq=next_seq,
            held=held,
            seen_ids=seen,
            transcript_tail=tail,
            transcript_count=self.d.transcript.count,
            rejected=self.d.call.rejected[-REJECTED_TAIL:],
            agent_id=self.d.call.agent_id,
            dispatch_failures=self.d.call.dispatch_failures,
            extraction_errors=self.d.call.extraction_errors,
            pending_extractions=self.d.pending_extractions,
            values_ready=self.d.call.values_ready,
            events_applied=self.d.call.events_applied,
            started_at=self.d.call.started_at,
            runs=self.d.call.runs,
            hangup_seen=self.d.call.hangup_seen,
            fn_results=fn_results,
            fn_done=fn_done,
            held_since=self.d.inbox.held_since,
            sip=self.d.call.sip,
            amd=self.d.call.amd,
            epoch=self.d.call.epoch,
            recording=self.d.call.recording,
            supervision=self.d.call.supervision,
        )
        nxt = self.d.inp.model_copy(update={"carry": continuation})
        if encoded_bytes(nxt) > budgets.CONTINUE_MAX_BYTES:
            # The flow's own size (definition, variables, handler state) leaves no room: end the
            # call cleanly instead of ordering a continue-as-new the server would refuse.
            self.d.fail_call(f"the call's state is {encoded_bytes(nxt)} bytes, too large to continue as new")
            return
        workflow.continue_as_new(nxt)

    async def store_transcript(self, turns: list[Turn], base: int) -> None:
        """Write ``turns`` (the first at index ``base``) to the database, in slices that
        each stay far under the payload limit."""
        if not turns:
            return
        for part in budgets.slices(transcript_items(turns, base)):
            await acts.append_transcript(TranscriptAppend(call_id=self.d.inp.call_id, items=part))

    async def finish(self) -> CallRecord:
        try:
            await workflow.wait_condition(
                lambda: not self.d.tasks and workflow.all_handlers_finished(), timeout=timedelta(minutes=5)
            )
        except TimeoutError:
            self.d.record_rejected(None, "work still running 5 min after the call ended: not waited for")
        await self.recording.stop()  # done already unless the call's loop could not end normally
        self.d.call.status = "ended"
        # The whole transcript goes to the database when the record could not carry it inline
        # (the head of a continued-as-new call is there already; a long one would not fit a
        # payload): the record then holds none and every reader takes the stored one.
        in_db = self.d.transcript.base > 0 or self.d.transcript.bytes > budgets.RECORD_MAX_BYTES
        if in_db:
            await self.store_transcript(self.d.transcript.turns, self.d.transcript.base)
        record = build_record(
            self.d.inp,
            self.d.call.flow_state,
            self.d.call.status,
            [] if in_db else self.d.transcript.turns,
            self.d.transcript.base,
            self.d.call.started_at,
            workflow.now(),
            sip=self.d.call.sip,
            amd=self.d.call.amd,
            recording=self.d.call.recording,
        )
        analysis = self.d.inp.definition.flow.analysis
        self.d.call.flow_state = self.d.call.flow_state.model_copy(update={"disposition": record.disposition})
        self.d.vis.sync(self.d.call.flow_state, self.d.call.status)
        await acts.persist(record)
        await acts.webhook(
            WebhookDelivery(
                record=record,
                run_id=workflow.info().first_execution_run_id,
                sent_at=workflow.now(),
                transcript_in_db=in_db,
                redact=analysis is not None and analysis.redact,
            )
        )
        self.d.vis.count_end(self.d.call.flow_state)
        settings = self.d.inp.definition.flow.analysis
        if settings is not None:
            record = await self.analyse(record, settings, in_db)
        return record

    async def analyse(self, record: CallRecord, settings: AnalysisSettings, in_db: bool) -> CallRecord:
        """After ``call.ended``: the analysis of the whole transcript, then the record again
        with it and a ``call.analyzed`` webhook. A failed analysis is the record's
        ``analysis.error``; the call's outcome stands."""
        result = await acts.analyze(
            AnalysisInput(
                call_id=record.call_id,
                settings=settings,
                transcript=record.transcript,
                transcript_in_db=in_db,
            )
        )
        record = record.model_copy(update={"analysis": result, "updated_at": workflow.now()})
        if result.error is not None:
            self.d.record_rejected(None, f"analysis: {result.error}")
        if result.success is not None:
            self.d.vis.success(result.success.passed)
        await acts.persist(record)
        await acts.webhook(
            WebhookDelivery(
                record=record,
                run_id=workflow.info().first_execution_run_id,
                event="call.analyzed",
                sent_at=workflow.now(),
                transcript_in_db=in_db,
                redact=settings.redact,
            )
        )
        return record
