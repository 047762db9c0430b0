"""The public surface only grows on purpose: ``__all__`` must equal the checked-in list."""

from __future__ import annotations

from pathlib import Path

import weft_serverless
from weft_serverless.errors import WeftError

EXPECTED = Path(__file__).with_name("public_api.txt")


def test_all_matches_the_checked_in_list() -> None:
    """Adding or removing a public name means editing tests/unit/public_api.txt too."""
    names = sorted(name for name in weft_serverless.__all__ if name != "__version__")
    assert names == EXPECTED.read_text().split()


def test_every_public_name_resolves() -> None:
    for name in weft_serverless.__all__:
        assert getattr(weft_serverless, name) is not None, name


def test_every_public_error_derives_from_weft_error_with_its_class_name_as_code() -> None:
    errors = [
        getattr(weft_serverless, name)
        for name in weft_serverless.__all__
        if isinstance(getattr(weft_serverless, name), type)
        and issubclass(getattr(weft_serverless, name), Exception)
        and not issubclass(getattr(weft_serverless, name), Warning)
    ]
    assert errors
    for error in errors:
        assert issubclass(error, WeftError), error
        instance = error.__new__(error)
        assert instance.code == error.__name__
