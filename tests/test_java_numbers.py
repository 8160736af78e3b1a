"""How the services read a number a Java broker wrote into a property or a record's body: as
Java's ``Integer.parseInt`` / ``Long.parseLong`` do, one helper for every service."""

from __future__ import annotations

import pytest

from rocketstore.base._checks import java_int
from rocketstore.services import schedule, transaction


@pytest.mark.parametrize(
    "text, bits, expected",
    [
        ("0", 32, 0),
        ("+7", 32, 7),
        ("-2147483648", 32, -(1 << 31)),
        ("2147483647", 32, (1 << 31) - 1),
        ("2147483648", 32, None),  # past an int: Integer.parseInt throws
        ("2147483648", 64, 1 << 31),  # a long takes it
        ("9223372036854775808", 64, None),
        ("1_000", 32, None),  # Python's int() reads these; Java does not
        (" 5", 32, None),
        ("5 ", 32, None),
        ("\u0663", 32, None),  # an Arabic-Indic digit
        ("", 32, None),
        ("+", 32, None),
        (None, 32, None),
        (5, 32, None),  # not text
    ],
)
def test_java_int_reads_what_java_reads(text, bits, expected):
    assert java_int(text, bits) == expected


def test_the_services_read_numbers_with_the_one_helper():
    assert not hasattr(schedule, "_java_int") and not hasattr(transaction, "_java_int")


def test_a_check_immunity_java_cannot_read_is_the_timeout():
    """A half message's CHECK_IMMUNITY_TIME_IN_SECONDS that Java's Long.parseLong refuses gives
    the check timeout, not what Python's int() makes of it; a long is read whole."""
    assert transaction._immunity_ms("1_0", 6_000) == 6_000
    assert transaction._immunity_ms("10", 6_000) == 10_000
    assert transaction._immunity_ms("3000000000", 6_000) == 3_000_000_000_000  # a long
