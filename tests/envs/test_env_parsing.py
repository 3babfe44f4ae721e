"""The action protocol parser."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gigpo_envs.parsing import ActionParser, normalize_action_text

PARSER = ActionParser()


@pytest.mark.parametrize(
    ("response", "expected"),
    [
        ("<think>go up</think><action>up</action>", "up"),
        ("<action>UP</action>", "up"),
        ("< Action >  Left \n</ ACTION >", "left"),
        ("<action> move   up </action>", "move up"),
        ('<action>"Right."</action>', "right"),
        ("<action>up</action><action>down</action>", "up"),
        ("text before <action>10</action> text after", "10"),
        ("<action></action>", None),
        ("<action>   </action>", None),
        ("<action>up", None),
        ("up</action>", None),
        ("up", None),
        ("", None),
        ("<actions>up</actions>", None),
        ("<action><action>up</action></action>", "<action>up"),
    ],
)
def test_extract(response, expected):
    assert PARSER.extract(response) == expected


def test_non_text_and_bytes():
    assert PARSER.extract(None) is None
    assert PARSER.extract(3) is None
    assert PARSER.extract(["<action>up</action>"]) is None
    assert PARSER.extract(b"<action>up</action>") == "up"
    assert PARSER.extract(b"<action>\xff\xfe</action>") == "\ufffd\ufffd"


def test_length_limits():
    parser = ActionParser(max_response_chars=100, max_action_chars=5)
    assert parser.extract("<action>up</action>" + " " * 81) == "up"
    assert parser.extract("<action>up</action>" + " " * 82) is None
    assert parser.extract("<action>abcde</action>") == "abcde"
    assert parser.extract("<action>abcdef</action>") is None


def test_require_think():
    strict = ActionParser(require_think=True)
    assert strict.extract("<think>plan</think><action>up</action>") == "up"
    assert strict.extract("<action>up</action>") is None
    assert strict.extract("<action>up</action><think>late</think>") is None
    assert strict.extract("<think>plan<action>up</action>") is None


def test_allow_bare_and_custom_tag():
    bare = ActionParser(allow_bare=True)
    assert bare.extract("  Up ") == "up"
    assert bare.extract("<think>x</think> up") is None
    custom = ActionParser(action_tag="answer")
    assert custom.extract("<answer>Paris</answer>") == "paris"
    assert custom.extract("<action>Paris</action>") is None
    assert custom.format_example("x") == "<answer>x</answer>"


def test_bad_configuration_is_refused():
    with pytest.raises(ValueError, match="action_tag"):
        ActionParser(action_tag="")
    with pytest.raises(ValueError, match="positive"):
        ActionParser(max_response_chars=0)


def test_normalize():
    assert normalize_action_text("  `Move\tUp.` ") == "move up"
    assert normalize_action_text(".") == "."
    assert normalize_action_text("") == ""


@settings(max_examples=400, deadline=None)
@given(st.one_of(st.text(max_size=200), st.binary(max_size=200)))
def test_any_text_gives_none_or_a_normalized_short_action(response):
    result = PARSER.extract(response)
    if result is not None:
        assert result == normalize_action_text(result)
        assert 0 < len(result) <= PARSER.max_action_chars


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=50), st.text(max_size=50), st.text(max_size=50))
def test_first_well_formed_tag_wins(prefix, body, suffix):
    prefix = prefix.replace("<", "")
    body = body.replace("<", "")
    result = PARSER.extract(f"{prefix}<action>{body}</action>{suffix}")
    assert result == (normalize_action_text(body) or None)
