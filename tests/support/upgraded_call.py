"""Two "next releases" of CallWorkflow for the upgrade test (``tests/workflows/test_upgrade.py``).

Both add one step at the start of a call. ``PatchedCallWorkflow`` guards it with
``workflow.patched`` as the project's rule requires, so a call started on the old code
replays without it and carries on; ``UnpatchedCallWorkflow`` does not, which is what the
rule exists to stop. Kept in their own module so the workflow sandbox can import them.
"""

from __future__ import annotations

from datetime import timedelta

from temporalio import workflow
from temporalio.common import RawValue

with workflow.unsafe.imports_passed_through():
    from ringflow.contract.records import CallRecord
    from ringflow.workflows.call import CallWorkflow

UPGRADE_PATCH = "test-upgrade-settle-timer"


@workflow.defn(name="CallWorkflow")
class PatchedCallWorkflow(CallWorkflow):
    @workflow.run
    async def run(self, inp: RawValue) -> CallRecord:
        if workflow.patched(UPGRADE_PATCH):
            await workflow.sleep(timedelta(milliseconds=1))
        return await super().run(inp)


@workflow.defn(name="CallWorkflow")
class UnpatchedCallWorkflow(CallWorkflow):
    @workflow.run
    async def run(self, inp: RawValue) -> CallRecord:
        await workflow.sleep(timedelta(milliseconds=1))
        return await super().run(inp)
