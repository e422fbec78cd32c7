"""The redacted copy of a transcript: each entity kind replaced, look-alikes left alone, the
original entries untouched."""

from __future__ import annotations

import pytest

from ringflow.activities.redaction import known_names, luhn_ok, redact, redact_turns


@pytest.mark.parametrize(
    ("said", "sent"),
    [
        ("Call me on +1 415 555 0123.", "Call me on <PHONE_NUMBER>."),
        ("It's (212) 555-0199, or 212.555.0142", "It's <PHONE_NUMBER>, or <PHONE_NUMBER>"),
        ("My mobile is 07700 900123", "My mobile is <PHONE_NUMBER>"),
        ("Office: +44 20 7946 0958 ext 2", "Office: <PHONE_NUMBER> ext 2"),
        ("Write to jo.doe+clinic@example.co.uk please", "Write to <EMAIL_ADDRESS> please"),
        ("Card 4111 1111 1111 1111, expiry 09/28", "Card <CREDIT_CARD>, expiry 09/28"),
        ("It is 5500-0000-0000-0004", "It is <CREDIT_CARD>"),
        ("amex 378282246310005", "amex <CREDIT_CARD>"),
        ("I live at 221B Baker Street, apt 4.", "I live at <ADDRESS>."),
        ("Send it to 1600 Pennsylvania Avenue", "Send it to <ADDRESS>"),
        ("Deliver to 42 Elm Rd by noon", "Deliver to <ADDRESS> by noon"),
        ("Hi, my name is Robin Hale.", "Hi, my name is <PERSON>."),
        ("This is Dana, returning your call", "This is <PERSON>, returning your call"),
        ("I'm Jean-Luc O'Brien", "I'm <PERSON>"),
        ("You were speaking with Mrs. Okafor", "You were speaking with Mrs. <PERSON>"),
        ("Zoë speaking.", "<PERSON> speaking."),
        ("call me Sam", "call me <PERSON>"),
    ],
)
def test_each_entity_kind_is_replaced_by_its_name(said: str, sent: str) -> None:
    assert redact(said) == sent


@pytest.mark.parametrize(
    "said",
    [
        "Order 1234 5678 9012 3456 is late",  # 16 digits failing the Luhn check: not a card
        "Table for 4 at 7:30 on 2026-05-01",
        "My booking is number 48213",
        "I'm 42 and I have 3 kids",
        "email me at the clinic",
        "I'm Calling about my bill, this is Tuesday's",  # capitalised words that are not names
        "I will pay on Friday",
    ],
)
def test_look_alikes_are_left_as_said(said: str) -> None:
    assert redact(said) == said


def test_luhn() -> None:
    assert luhn_ok("4111111111111111") and not luhn_ok("4111111111111112")


def test_the_copy_leaves_the_original_turns_untouched() -> None:
    turns = [{"role": "user", "text": "mail a@b.io", "node": "n"}, {"role": "assistant", "text": None}]
    copy = redact_turns(turns)
    assert copy == [
        {"role": "user", "text": "mail <EMAIL_ADDRESS>", "node": "n"},
        {"role": "assistant", "text": ""},
    ]
    assert turns[0]["text"] == "mail a@b.io"


def test_a_name_given_once_is_replaced_in_every_turn_and_the_call_s_names_too() -> None:
    turns = [
        {"role": "assistant", "text": "Hello, am I speaking to Dana?"},  # the call's variable
        {"role": "user", "text": "Yes. My husband Will is here too; you can ask for Will Barnes."},
        {"role": "assistant", "text": "Thanks, Dana. Barnes with one r? I will note it."},
    ]
    names = {"first_name": "Dana", "appointment_time": "Tuesday at 3 PM", "order_name": "42-B"}
    assert [t["text"] for t in redact_turns(turns, names)] == [
        "Hello, am I speaking to <PERSON>?",
        "Yes. My husband <PERSON> is here too; you can ask for <PERSON>.",
        "Thanks, <PERSON>. <PERSON> with one r? I will note it.",  # "will" the word is left
    ]


def test_only_variables_named_as_names_and_holding_words_are_the_call_s_names() -> None:
    values = {
        "patient": "Alex Doe",
        "last_name": "Ng",
        "name": "call back at 5 PM please now",  # a sentence is not a name
        "first_name": 42,
        "city": "Springfield",
    }
    assert known_names(values) == {"Alex Doe", "Alex", "Doe", "Ng"}
