"""Reading Typer's own errors for out-of-range options (``typer.Option(min=, max=)``)."""
from __future__ import annotations

import re

_WORDS = {">=": "greater than or equal to", "<=": "less than or equal to",
          ">": "greater than", "<": "less than"}


def range_refused(output: str, option: str, relation: str, bound: str) -> bool:
    """Whether ``output`` refuses ``option`` for breaking ``relation bound`` (``">=", "1"``).

    Typer 0.29 words it "Invalid value for '--x': Input should be greater than or equal to 1";
    older Typer (click) "Invalid value for '--x': 0 is not in the range x>=1". The rich panel
    wraps lines and draws borders, so both are flattened first.
    """
    flat = " ".join(re.sub(r"[│╭╮╰╯─]", " ", output).split())
    named = f"Invalid value for '{option}'" in flat or f"Invalid value for {option}" in flat
    return named and (f"{_WORDS[relation]} {bound}" in flat or f"x{relation}{bound}" in flat)
