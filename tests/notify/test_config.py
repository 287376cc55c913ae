"""The [notify] block: strict, each problem named by its place, a URL's secret never repeated."""

from __future__ import annotations

import pytest

from muster_api.errors import ConfigurationError
from muster_api.notify.config import EVENT_KINDS, parse_notify
from muster_api.notify.render import MAX_FULL, MAX_LINE, excerpt

SECRET = "xoxb-sekrit-token-5521"


def test_no_block_or_no_url_is_off() -> None:
    assert not parse_notify({}).enabled
    assert not parse_notify({"notify": {"urls": []}}).enabled


def test_defaults_are_every_event_and_the_first_line() -> None:
    config = parse_notify({"notify": {"urls": [f"json://u:{SECRET}@127.0.0.1:9/hook"]}})
    assert config.enabled
    assert config.on == frozenset(EVENT_KINDS)
    assert config.body == "first_line"
    [target] = config.targets
    assert (target.service, target.scheme) == ("JSON", "json")
    assert SECRET not in repr(target) and SECRET not in target.digest


@pytest.mark.parametrize(
    ("block", "names"),
    [
        ({"urls": [], "sound": True}, "notify.sound: Extra inputs are not permitted"),
        ({"urls": [], "on": ["run_failed", "lunch"]}, "notify.on.1"),
        ({"urls": [], "body": "all"}, "notify.body"),
        ({"urls": "json://x"}, "notify.urls"),
        ({"urls": [f"nonsense://{SECRET}@host"]}, "notify.urls[0] (nonsense://…)"),
        ({"urls": [SECRET]}, "notify.urls[0]: not an Apprise URL"),
    ],
)
def test_a_bad_block_is_refused_by_name_without_its_secret(block: dict[str, object], names: str) -> None:
    with pytest.raises(ConfigurationError) as caught:
        parse_notify({"notify": block})
    assert names in str(caught.value)
    assert SECRET not in str(caught.value)


def test_the_block_must_be_a_table() -> None:
    with pytest.raises(ConfigurationError, match="must be a table"):
        parse_notify({"notify": ["json://x"]})


def test_bodies_are_bounded() -> None:
    text = "x" * 10_000 + "\nsecond"
    assert excerpt(text, "none") == ""
    assert len(excerpt(text, "first_line")) == MAX_LINE
    assert len(excerpt(text, "full")) == MAX_FULL
    assert excerpt("  one\ntwo", "first_line") == "one"
