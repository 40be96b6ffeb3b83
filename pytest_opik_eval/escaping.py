"""Control characters in text that came from a dataset, an app, a metric or a server.

Such text is data: an ESC in an item or an output would otherwise reach the terminal raw and
could repaint or hide lines of a CI log (a BEL rings, a CR overwrites the line, an ANSI sequence
clears the screen); in Markdown or XML it breaks the document. Every output that shows such text
(the terminal summary, failure messages, notices, ``opik-eval``, the Markdown job summary, the
JUnit XML properties) passes it through :func:`escape_control`; the HTML report escapes on its own.
"""

from __future__ import annotations

import re

# C0 (with TAB, CR, LF), DEL, C1, and the bidirectional overrides that reorder what a reader
# sees (the "Trojan Source" characters).
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")
_CONTROL_BUT_NEWLINE = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def _escaped(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def escape_control(text: str, *, newlines: bool = False) -> str:
    """``text`` with each control character written as a visible escape (ESC as ``\\x1b``).

    ``newlines=True`` keeps line feeds, for a message of several lines of our own making; the
    data inside it should then already be on one line.
    """
    return (_CONTROL_BUT_NEWLINE if newlines else _CONTROL).sub(_escaped, text)
