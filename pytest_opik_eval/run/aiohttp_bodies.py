"""aiohttp's request bodies that are objects, not bytes, as the recorder's canonical request needs
them: vcrpy hands over what the app passed as ``data=``, an ``aiohttp.FormData`` (a file upload,
a form) or a payload, which aiohttp renders only later, as it sends.

A FormData is rendered from its fields without calling it: before aiohttp 3.12 a FormData
renders once only ("Form data has been processed already"), so rendering it here would break
the real request. Its fields, and the parts of a payload it made, are aiohttp's private
attributes: they are read here only, pinned by ``tests/test_secrets.py``.
"""

from __future__ import annotations

import io
import re
from typing import Any
from urllib.parse import unquote, urlencode

BOUNDARY = "BOUNDARY"  # the boundary of a rendered multipart body: aiohttp's is random
FORM = "application/x-www-form-urlencoded"
_PARAMETER = re.compile(r'\b(name|filename)="([^"]*)"')


def rendered(body: Any) -> tuple[bytes, str] | None:
    """The bytes and content type of an aiohttp ``FormData`` or payload ``body``, None for
    any other body. A multipart body is cut by :data:`BOUNDARY`, and its parts are named by their
    field's name and file name alone (not the headers aiohttp adds as it sends): the same before
    aiohttp sent it and after (in mode ``all``, vcrpy asks for the request once sent)."""
    if not type(body).__module__.startswith("aiohttp."):
        return None
    if hasattr(body, "add_field"):
        return _form(body)
    if hasattr(body, "boundary"):  # a MultipartWriter
        return _multipart([_part(part) for part, *_ in body]), _multipart_type()
    return _payload(body), str(getattr(body, "content_type", "application/octet-stream"))


def _form(form: Any) -> tuple[bytes, str]:
    fields: list[tuple[Any, dict[str, str], Any]] = list(getattr(form, "_fields", []))
    charset = getattr(form, "_charset", None) or "utf-8"
    if not getattr(form, "is_multipart", getattr(form, "_is_multipart", False)):
        pairs = [(str(options["name"]), value) for options, _, value in fields]
        return urlencode(pairs, doseq=True, encoding=charset).encode(), FORM
    parts = [(dict(options), _value(value, charset)) for options, _, value in fields]
    if not parts:
        # aiohttp 3.12 and later move the fields into the payload as it sends: a FormData sent
        # (and so asked for by vcrpy in mode all), or sent again (a retry), has its parts there.
        parts = [_part(part) for part, *_ in getattr(form, "_writer", ())]
    return _multipart(parts), _multipart_type()


def _part(payload: Any) -> tuple[dict[str, str], bytes]:
    """A part of a payload aiohttp made: its field's name and file name, and its bytes."""
    disposition = str(payload.headers.get("Content-Disposition", ""))
    names = {key: unquote(value) for key, value in _PARAMETER.findall(disposition)}
    return names, _payload(payload)


def _multipart(parts: list[tuple[dict[str, str], bytes]]) -> bytes:
    delimiter = f"--{BOUNDARY}\r\n".encode()
    rendered = [
        delimiter
        + ("Content-Disposition: form-data" + "".join(f'; {k}="{v}"' for k, v in names.items())).encode()
        + b"\r\n\r\n"
        + data
        for names, data in parts
    ]
    return b"\r\n".join(rendered) + f"\r\n--{BOUNDARY}--\r\n".encode()


def _multipart_type() -> str:
    return f"multipart/form-data; boundary={BOUNDARY}"


def _payload(payload: Any) -> bytes:
    return _value(getattr(payload, "_value", b""), getattr(payload, "encoding", None) or "utf-8")


def _value(value: Any, charset: str) -> bytes:
    """A field's value as aiohttp sends it: text encoded, bytes as they are, a file's content (read
    and rewound, so that aiohttp still sends it whole)."""
    if isinstance(value, str):
        return value.encode(charset)
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value)
    if isinstance(value, io.IOBase) or hasattr(value, "read"):
        if not (hasattr(value, "seekable") and value.seekable()):
            # A stream read now would be gone for aiohttp: known by its kind alone.
            return f"<a stream: {type(value).__qualname__}>".encode()
        try:
            position = value.tell()
            content = value.read()
            value.seek(position)
        except ValueError:  # closed: aiohttp closes a file it sent (a FormData sent again)
            return f"<a closed file: {type(value).__qualname__}>".encode()
        return content.encode(charset) if isinstance(content, str) else bytes(content)
    if type(value).__module__.startswith("aiohttp."):  # a payload given as a field's value
        return _payload(value)
    return str(value).encode(charset)
