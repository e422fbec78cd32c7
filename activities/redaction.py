"""A redacted copy of a transcript: phone numbers, email addresses, payment card numbers,
street addresses and people's names replaced by their kind (``<PHONE_NUMBER>``,
``<PERSON>``: Presidio's entity names), for what leaves the call (the webhook, the analysis
LLM) when the flow asks for it. The original stays as it was (encrypted in Temporal's
payloads and in the database).

A recognizer set of our own, not Presidio: Presidio's analyzer runs on spaCy and finds names
only with a spaCy language model, which is downloaded from a model hub (no model ships in a
PyPI package of spaCy's own) and cannot be fetched where Ringflow runs its tests or, often,
where it is deployed; these need nothing. Card numbers are checked with the Luhn sum, so
order numbers and dates are left alone.

Names, without a model, come from two places: the names the call was started with (its
variables named ``name``, ``first_name``, ``patient_name``...: the person the flow is
calling) and the names people give in the conversation ("my name is Robin Hale", "this is
Dana", "Mr. Okafor", "call me Sam"). Each name found anywhere is then replaced wherever it
is said in the transcript ("Thank you, Robin"). A name nobody introduces and the call was
not given is not recognised: that needs a model.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

EMAIL = re.compile(r"\b[A-Za-z0-9._%+-]+@[A-Za-z0-9.-]+\.[A-Za-z]{2,}\b")
# 13 to 19 digits, in groups separated by single spaces or dashes
CARD = re.compile(r"\b\d(?:[ -]?\d){12,18}\b")
# +CC and 7 to 14 more digits with the usual separators, a North American 10-digit number,
# or a national number with its trunk 0 (07700 900123, 020 7946 0958)
PHONE = re.compile(
    r"(?<![\w+])(?:\+\d{1,3}[\s.-]?(?:\(?\d{1,4}\)?[\s.-]?){1,4}\d{2,4}"
    r"|\(?\b\d{3}\)?[\s.-]?\d{3}[\s.-]?\d{4}"
    r"|\b0\d{2,4}[\s.-]?\d{3,4}[\s.-]?\d{3,4})\b"
)
_STREET = (
    "street|st|avenue|ave|road|rd|boulevard|blvd|lane|ln|drive|dr|court|ct|way|place|pl|"
    "terrace|close|parkway|pkwy|square|sq|highway|hwy"
)
ADDRESS = re.compile(
    rf"\b\d{{1,6}}[A-Za-z]?\s+(?:[A-Z][A-Za-z'-]*\s+){{1,4}}(?:{_STREET})\b\.?"
    r"(?:,?\s+(?:apt|apartment|suite|unit)\.?\s*#?\w+)?",
    re.IGNORECASE,
)


def luhn_ok(digits: str) -> bool:
    total = 0
    for i, ch in enumerate(reversed(digits)):
        d = int(ch)
        if i % 2 == 1:
            d = d * 2 - 9 if d > 4 else d * 2
        total += d
    return total % 10 == 0


def _card(m: re.Match[str]) -> str:
    digits = re.sub(r"\D", "", m.group(0))
    return "<CREDIT_CARD>" if 13 <= len(digits) <= 19 and luhn_ok(digits) else m.group(0)


def _phone(m: re.Match[str]) -> str:
    digits = re.sub(r"\D", "", m.group(0))
    return "<PHONE_NUMBER>" if 7 <= len(digits) <= 15 else m.group(0)


# In this order: a card number is digits a phone pattern would also take.
RECOGNIZERS: tuple[tuple[str, re.Pattern[str], Callable[[re.Match[str]], str]], ...] = (
    ("EMAIL_ADDRESS", EMAIL, lambda m: "<EMAIL_ADDRESS>"),
    ("CREDIT_CARD", CARD, _card),
    ("ADDRESS", ADDRESS, lambda m: "<ADDRESS>"),
    ("PHONE_NUMBER", PHONE, _phone),
)


_UP, _LOW = "A-ZÀ-ÖØ-Þ", "a-zß-öø-ÿ"
_NAME = rf"[{_UP}](?:[{_LOW}]+|'[{_UP}][{_LOW}]+)(?:-[{_UP}][{_LOW}]+)?"  # Dana, O'Brien, Jean-Luc, Zoë
# a cue (any case) and then one to three capitalised words: the name someone gives
NAME_CUES = re.compile(
    r"(?:\b(?i:my\s+name\s+is|my\s+name's|name's|the\s+name\s+is|this\s+is|i\s+am|i'm|call\s+me|"
    r"speaking\s+(?:with|to)|ask\s+for|mr|mrs|ms|miss|mx|dr)\.?,?\s+)"
    rf"(?!(?:Mr|Mrs|Ms|Miss|Mx|Dr)\b)(?P<name>{_NAME}(?:\s+{_NAME}){{0,2}})"  # "with Mrs. X": X
    rf"|(?P<before>{_NAME}(?:\s+{_NAME})?)(?=\s+(?i:speaking|here)\b)"
)
# capitalised words that follow "this is", "I'm"... without being a name
NOT_NAMES = frozenset(
    """
    a an the and or but so yes no not okay ok sure sorry fine good great well here there
    just very really still also only calling speaking ready done busy glad happy afraid
    about with from for at in on to of it its this that what who how why when where hello
    hi hey thanks thank please monday tuesday wednesday thursday friday saturday sunday
    january february march april may june july august september october november december
    today tomorrow tonight morning afternoon evening i me my we our you your
    """.split()
)
# the call's variables that hold the person's name (first_name, patient_name, name...)
NAME_KEY = re.compile(
    r"(?:^|_)(?:first|last|full|given|family|sur)?_?name$|^(?:patient|caller|customer|contact)$"
)


def _words(name: str) -> list[str]:
    return [w for w in re.split(r"\s+", name.strip()) if w]


def names_in(text: str) -> set[str]:
    """The names people give in ``text`` (each whole name and each of its words)."""
    found: set[str] = set()
    for m in NAME_CUES.finditer(text):
        words = _words(m.group("name") or m.group("before") or "")
        while words and words[-1].lower() in NOT_NAMES:  # "this is Dana Here" / "I'm Dana Thanks"
            words.pop()
        words = [w for w in words if w.lower() not in NOT_NAMES] if len(words) > 1 else words
        if words and words[0].lower() not in NOT_NAMES:
            found.add(" ".join(words))
            found.update(w for w in words if len(w) > 1)
    return found


def known_names(values: dict[str, Any]) -> set[str]:
    """The names a call was started with: its variables whose key says they are one, each
    a few words of letters (a number or a sentence under such a key is not a name)."""
    out: set[str] = set()
    for key, value in values.items():
        if not isinstance(value, str) or not NAME_KEY.search(key.lower()):
            continue
        words = _words(value)
        if 1 <= len(words) <= 4 and all(re.fullmatch(r"[^\W\d_]+(?:['.-][^\W\d_]*)*", w) for w in words):
            out.add(" ".join(words))
            out.update(w for w in words if len(w) > 1 and w.lower() not in NOT_NAMES)
    return out


def _names_pattern(names: set[str]) -> re.Pattern[str] | None:
    if not names:
        return None
    # as written and capitalised (a variable may hold "dana"); case matters, so "Will" the
    # name leaves "I will pay" alone; "Robin Hale" is tried before "Robin"
    forms = {*names, *(n[:1].upper() + n[1:] for n in names)}
    alts = sorted(forms, key=len, reverse=True)
    return re.compile(r"(?<![\w<])(?:" + "|".join(re.escape(n) for n in alts) + r")(?![\w>])")


def redact(text: str, names: set[str] | frozenset[str] = frozenset()) -> str:
    """``text`` with every recognised entity replaced by ``<KIND>``: ``names`` (the call's,
    see ``redact_turns``) and the names given in ``text`` itself are ``<PERSON>``."""
    for _, pattern, replace in RECOGNIZERS:
        text = pattern.sub(replace, text)
    people = _names_pattern({*names, *names_in(text)})
    return people.sub("<PERSON>", text) if people is not None else text


def redact_turns(turns: list[dict[str, Any]], values: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """A copy of transcript entries with their text redacted; the originals are not touched.
    A name given in one turn, or among the call's ``values`` (its variables), is replaced in
    every turn."""
    texts = [str(t.get("text") or "") for t in turns]
    names = known_names(values or {})
    for text in texts:
        names |= names_in(text)
    return [{**t, "text": redact(text, names)} for t, text in zip(turns, texts, strict=True)]
