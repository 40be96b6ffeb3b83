"""Control characters in text that came from a dataset, an app, a metric or a server.

Such text is data: an ESC in an item or an output would otherwise reach the terminal raw and
could repaint or hide lines of a CI log (a BEL rings, a CR overwrites the line, an ANSI sequence
clears the screen); in Markdown or XML it breaks the document. Every output that shows such text
(the terminal summary, failure messages, notices, ``opik-eval``, the Markdown job summary, the
JUnit XML properties) passes it through :func:`escape_control`; the HTML report escapes on its own.
A JUnit property's name built from such a name (an experiment's, a score's) takes it through
:func:`property_key`, the one rule for every such name.
Long text is cut by :func:`shorten`, before it is escaped (so that a cut never halves an escape).
"""

from __future__ import annotations

import re

# C0 (with TAB, CR, LF), DEL, C1, and the bidirectional overrides that reorder what a reader
# sees (the "Trojan Source" characters).
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")
_CONTROL_BUT_NEWLINE = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")
# A backslash escape as escape_control, json.dumps or repr write them (\x1b, \u202e, \n, \\).
_ESCAPE = re.compile(r"\\(?:x[0-9a-fA-F]{2}|u[0-9a-fA-F]{4}|U[0-9a-fA-F]{8}|.)", re.DOTALL)
_LONGEST_ESCAPE = 10


def _escaped(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def escape_control(text: str, *, newlines: bool = False) -> str:
    """``text`` with each control character written as a visible escape (ESC as ``\\x1b``).

    ``newlines=True`` keeps line feeds, for a message of several lines of our own making; the
    data inside it should then already be on one line.
    """
    return (_CONTROL_BUT_NEWLINE if newlines else _CONTROL).sub(_escaped, text)


def property_key(name: str) -> str:
    """An experiment's or a score's name as a part of a JUnit property's name
    (``eval.<experiment>.<score>.mean``): as it is named, spaces and dots too, so that a plain name
    reads as itself; control characters escaped, which XML forbids (pytest escapes only values)."""
    return escape_control(name)


def shorten(text: str, limit: int) -> str:
    """``text`` if it has at most ``limit`` characters; else its first ``limit`` characters and
    the count of those left out: ``abc... (1234 more characters)``.

    Mask secrets before (a cut could leave part of one) and escape control characters after (an
    escape stands for one character of the data). The cut never falls inside a backslash escape
    of text that was escaped already (by ``repr`` or ``json.dumps``): it moves to its start.
    """
    if len(text) <= limit:
        return text
    keep = limit
    for match in _ESCAPE.finditer(text, max(0, keep - _LONGEST_ESCAPE + 1), keep + _LONGEST_ESCAPE):
        if match.start() < keep < match.end():
            keep = match.start()
            break
    left = len(text) - keep
    return f"{text[:keep]}... ({left} more character{'' if left == 1 else 's'})"
