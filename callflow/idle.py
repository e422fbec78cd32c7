"""What the LLM is told when the caller gives it nothing: which kind of empty input it
was and which attempt this is, so that the re-prompts can differ and escalate (a first
"are you still there?" is not a last "I'll hang up now"). Pure text from the event's kind
and the count in the state: the workflow and the agent derive the same words."""

from __future__ import annotations

from ringflow.callflow.events import IdleKind

WHAT_HAPPENED: dict[str, str] = {
    "silence": "The caller has been silent for a while.",
    "empty_transcript": "The caller made a sound or spoke, but no words could be made out.",
    "empty_turn": "The caller pressed to talk and released without saying anything.",
}
ASK: dict[str, str] = {
    "silence": "Briefly and politely check whether they are still there",
    "empty_transcript": "Briefly say you did not catch that and ask them to say it again",
    "empty_turn": "Briefly remind them to hold the talk button while they speak",
}


def idle_instructions(kind: IdleKind, attempt: int, prompts: int, on_give_up: str) -> str:
    """The instructions for re-prompt ``attempt`` (1-based) of ``prompts``."""
    text = (
        f"{WHAT_HAPPENED[kind]} This is empty input {attempt} of {prompts} before giving up. "
        f"{ASK[kind]}, in the language of the conversation."
    )
    if attempt >= prompts:
        text += (
            " If nothing comes, you will stop prompting and wait quietly: say they can talk "
            "to you whenever they are ready."
            if on_give_up == "wait"
            else " If nothing comes, the call will end: say so kindly."
        )
    return text
