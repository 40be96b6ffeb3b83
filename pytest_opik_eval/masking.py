"""Secrets kept out of what the plugin writes: recordings, the judge cache.

One policy for both (the README's "What is never stored" states it for users):

- **Names.** A value stored under a credential's name is ``REDACTED``, wherever the name is: a
  JSON field at any depth (and everything under it, when it holds an object: ``credentials``,
  ``auth``), a ``"name": "value"`` pair or an XML element inside a text (a stream's events, a
  tool call's arguments, AWS's XML answers), a URL's query parameter (in a request's URL, in a
  JSON string, in a ``location`` header), a form field (urlencoded or multipart), a response
  header (dropped). See :func:`is_credential` and :func:`is_secret_param`.
- **Shapes.** What is a credential whatever holds it: a ``Bearer`` token, a URL's
  ``user:password@``, a PEM private key, and the LLM providers' keys whose format says what they
  are (``sk-...``, ``AIza...``). A value found by name or shape is then masked everywhere else in
  the trial (the app sending again a token a server gave it).
- **The environment's values.** The values (8 characters or more) of the environment variables
  named like a secret (:func:`is_secret_env`) are replaced by ``<NAME>`` wherever they appear,
  also percent-encoded, JSON-escaped or inside base64: a key set differently in CI changes
  nothing. The environment is read again whenever it changed (a session fixture, a
  ``monkeypatch.setenv``, a ``.env`` loaded late), at the cost of one dict comparison.

A leaf: it imports nothing of the package.
"""

from __future__ import annotations

import base64
import dataclasses
import functools
import itertools
import json
import os
import re
import threading
from collections.abc import Callable, ItemsView, Iterator, Mapping
from typing import Any
from urllib.parse import quote, quote_plus, unquote_plus

REDACTED = "REDACTED"  # what stands for a value found by name or by shape
_MIN_CHARS = 8  # shorter values ("1", "true") would be replaced everywhere

# A name's words: snake_case, kebab-case, dotted and camelCase alike (X-Amz-Signature,
# AWSAccessKeyId, client_secret).
_WORD = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|[0-9]+")
# Words that make a name a credential wherever they are: client_secret, X-Amz-Credential.
_SECRET_WORDS = frozenset(
    {"credential", "credentials", "secret", "secrets", "password", "passwords", "passwd", "passphrase"}
)
# Words that make it one as the name or its last word: auth, x-auth, OPENAI_APIKEY, x-jwt, Cookie.
_SECRET_NAMES = frozenset({"apikey", "auth", "authorization", "jwt", "cookie"})
# Words that make it one as its last word after another one: access_token, x-api-key,
# GITHUB_PAT, client_assertion; not max_tokens, nor a logprob's "token", nor a "key" or an
# "assertion" field of the app's own data (a test generator's).
_SECRET_LAST_WORDS = frozenset({"token", "key", "pat", "assertion"})
# Pairs of words that make it one wherever they are: AWSAccessKeyId, OPENAI_API_KEY_PROD,
# x-session-id.
_SECRET_PAIRS = frozenset({("key", "id"), ("api", "key"), ("access", "key"), ("session", "id")})
# Query parameters and form fields that are credentials as well: a bare key or token (Gemini's
# ?key=), a URL's signature (X-Amz-Signature, sig), an OAuth code. Not JSON fields: Anthropic's
# and Gemini's thinking blocks carry a "signature" the app sends back as it is.
_SECRET_PARAM_WORDS = frozenset({"signature", "token", "key"})
# By their whole name (a zip_code is no secret): OAuth's assertion grant sends ?assertion=<JWT>.
_SECRET_PARAMS = frozenset({"sig", "code", "assertion"})


@functools.lru_cache(maxsize=4096)  # names repeat: every request has the same fields
def _words(name: str) -> tuple[str, ...]:
    words = [word.lower() for word in _WORD.findall(name)]
    while len(words) > 1 and words[-1].isdigit():  # API_KEY_2 is an API_KEY
        words.pop()
    return tuple(words)


@functools.lru_cache(maxsize=4096)
def is_credential(name: str) -> bool:
    """Whether a JSON field, an attribute or a header named ``name`` holds a credential:
    ``api_key``, ``access_token``, ``client_secret``, ``password``, ``Authorization``, ``auth``,
    ``aws_access_key_id``, ``x-session-id``, ``github_pat``."""
    words = _words(name)
    if not words:
        return False
    if _SECRET_WORDS.intersection(words) or words[-1] in _SECRET_NAMES:
        return True
    if len(words) > 1 and words[-1] in _SECRET_LAST_WORDS:
        return True
    return any(pair in _SECRET_PAIRS for pair in itertools.pairwise(words))


@functools.lru_cache(maxsize=4096)
def is_secret_param(name: str) -> bool:
    """Whether a URL's query parameter or a form field named ``name`` holds a credential: those of
    :func:`is_credential`, and those named for a key, a token or a signature (``key``,
    ``X-Amz-Signature``, ``sig``, ``code``)."""
    words = _words(name)
    return (
        name.lower() in _SECRET_PARAMS or bool(_SECRET_PARAM_WORDS.intersection(words)) or is_credential(name)
    )


def is_secret_env(name: str) -> bool:
    """Whether the environment variable ``name`` holds a secret: a credential's name (see
    :func:`is_credential`: ``OPENAI_API_KEY``, ``HF_TOKEN``, ``GITHUB_PAT``, ``OPENAI_APIKEY``,
    ``AWS_ACCESS_KEY_ID``), or one with SECRET, TOKEN or PASSWORD in it (``HF_TOKEN_READ``,
    ``CLIENTSECRET``): environment names are written in capitals, where words do not show."""
    upper = name.upper()
    return is_credential(name) or any(word in upper for word in ("SECRET", "TOKEN", "PASSWORD", "PASSWD"))


def env_secrets(environ: Mapping[str, str]) -> dict[str, str]:
    """The values of ``environ``'s secret variables (8 characters or more), each with the
    placeholder that stands for it (``<OPENAI_API_KEY>``), longest first: a value that contains
    another is replaced whole."""
    return _longest_first(
        {
            value: f"<{name}>"
            for name, value in sorted(environ.items())
            if len(value) >= _MIN_CHARS and is_secret_env(name)
        }
    )


def _variants(value: str) -> set[str]:
    """The forms ``value`` takes in what an app sends: as it is, percent-encoded (a URL, a form),
    JSON-escaped, and inside base64 (a data URL, a file sent as base64, Basic auth), where it
    starts at any of three offsets: the characters that depend on its bytes alone."""
    data = value.encode()
    found = {value, quote(value, safe=""), quote_plus(value), json.dumps(value, ensure_ascii=True)[1:-1]}
    for offset in range(3):
        encoded = base64.b64encode(b"\0" * offset + data).decode("ascii")
        core = encoded[4 if offset else 0 : 4 * ((offset + len(data)) // 3)]
        if len(core) >= _MIN_CHARS:
            found.add(core)
    return found


def _longest_first(secrets: Mapping[str, str]) -> dict[str, str]:
    return dict(sorted(secrets.items(), key=lambda pair: -len(pair[0])))


class EnvironmentSecrets(Mapping[str, str]):
    """The environment's secrets, as :func:`env_secrets` gives them with their other forms (see
    ``_variants``): a live view, read again whenever the environment changed, so a variable a
    session fixture sets after the plugin started is masked too."""

    def __init__(self, environ: Mapping[str, str] | None = None) -> None:
        self._environ = os.environ if environ is None else environ
        self._lock = threading.Lock()
        self._seen: dict[Any, Any] | None = None
        self._secrets: dict[str, str] = {}

    def current(self) -> dict[str, str]:
        """The secrets as the environment stands now (the same dict while it does not change)."""
        # os.environ's own dict, compared in a microsecond (reading the environment through the
        # mapping decodes every name and value: 100 times slower); any other mapping is copied.
        data = getattr(self._environ, "_data", None)
        now = dict(self._environ) if not isinstance(data, dict) else data
        if now != self._seen:
            with self._lock:
                variants = {
                    form: placeholder
                    for value, placeholder in env_secrets(self._environ).items()
                    for form in _variants(value)
                }
                self._secrets = _longest_first(variants)
                self._seen = dict(now)
        return self._secrets

    def __getitem__(self, value: str) -> str:
        return self.current()[value]

    def items(self) -> ItemsView[str, str]:
        return self.current().items()

    def __iter__(self) -> Iterator[str]:
        return iter(self.current())

    def __len__(self) -> int:
        return len(self.current())


def mask(text: str, secrets: Mapping[str, str]) -> str:
    """``text`` with each secret value of ``secrets`` (see :func:`env_secrets`) replaced."""
    for value, placeholder in secrets.items():
        if value in text:
            text = text.replace(value, placeholder)
    return text


@dataclasses.dataclass(frozen=True)
class _Shape:
    """A shape of credential in a text: its ``pattern`` holds the secret in the group ``secret``
    and, for a credential known by its name, the name in the group ``name``, which ``named``
    tells. ``present`` looks first for what the shape needs with plain searches (one character
    costs next to nothing; a regular expression, a pass over the whole text)."""

    present: Callable[[str], bool]
    pattern: re.Pattern[str]
    named: Callable[[str], bool] | None = None


_SHAPES = (
    # A URL's (or a form's) secret parameter, in a query or a fragment (OAuth's #access_token=).
    _Shape(
        lambda text: "=" in text,
        re.compile(r"[?&#](?P<name>[\w.~%+-]+)=(?P<secret>[^&#\s\"'<>\\]+)"),
        lambda name: is_secret_param(unquote_plus(name)),
    ),
    # A JSON pair with a credential's name, at any level of escaping (a tool call's arguments
    # are JSON in a JSON string).
    _Shape(
        lambda text: '"' in text and ('":' in text or '" :' in text),
        re.compile(r"(?P<q>\\*\")(?P<name>[\w.-]{1,64})(?P=q)\s*:\s*(?P=q)(?P<secret>[^\"\\]+)(?P=q)"),
        is_credential,
    ),
    # An XML element with a credential's name (AWS STS answers <SecretAccessKey> in XML).
    _Shape(
        lambda text: "<" in text and "</" in text,
        re.compile(r"<(?P<name>[\w.:-]{1,64})>(?P<secret>[^<>]+)</(?P=name)>"),
        is_credential,
    ),
    # A URL's user:password@ (a database's URL given to a tool).
    _Shape(
        lambda text: "@" in text and "://" in text,
        re.compile(r"\b[a-zA-Z][\w+.-]*://[^/\s:@\"'<>]*:(?P<secret>[^/\s@\"'<>]+)@"),
    ),
    # A Bearer token (with a digit: not "Bearer authentication").
    _Shape(
        lambda text: "B" in text and "Bearer" in text,
        re.compile(r"\bBearer\s+(?P<secret>(?=[\w.~+/-]{12})(?=[\w.~+/-]*\d)[\w.~+/-]+=*)"),
    ),
    # A private key, as PEM writes it.
    _Shape(
        lambda text: "PRIVATE KEY-----" in text,
        re.compile(
            r"-----BEGIN (?P<kind>[A-Z ]*PRIVATE KEY)-----(?P<secret>.+?)-----END (?P=kind)-----", re.S
        ),
    ),
    # The LLM providers' keys whose prefix says what they are: OpenAI's, Anthropic's,
    # OpenRouter's sk-..., Google's AIza....
    _Shape(
        lambda text: ("-" in text and "sk-" in text) or ("z" in text and "AIza" in text),
        re.compile(r"(?<![\w-])(?P<secret>sk-(?=[\w-]*\d)[\w-]{20,}|AIza[\w-]{35})"),
    ),
)


class Scrubber:
    """Applies the policy to what is about to be written: texts, JSON values, bytes. One per
    trial attempt (a recording) or per write (the judge cache): the values it found by name or
    shape are masked in everything it scrubs after, as REDACTED."""

    def __init__(self, environment: EnvironmentSecrets) -> None:
        self._environment = environment
        self._secrets = environment.current()
        self._learned: dict[str, str] = {}  # values found by name or shape -> REDACTED
        self._lock = threading.Lock()  # an app may send from several threads of one trial

    def refresh(self) -> None:
        """Take the environment's secrets as they are now (before each request and response)."""
        self._secrets = self._environment.current()

    def found(self) -> int:
        """How many values it found by name or shape so far: a caller that scrubbed a request
        scrubs it again when this grew, so a value found in one part is masked in the others."""
        return len(self._learned)

    def learn(self, value: str) -> None:
        """Mask ``value`` (a credential found by name or by shape) from now on."""
        placeholder = value.startswith("<") and value.endswith(">")  # an environment's, already masked
        if len(value) >= _MIN_CHARS and value not in self._learned and value != REDACTED and not placeholder:
            with self._lock:
                self._learned = _longest_first({**self._learned, value: REDACTED})

    def text(self, text: str) -> str:
        return self._shapes(mask(mask(text, self._secrets), self._learned))

    def bytes(self, data: bytes) -> bytes:
        """Bytes that are not text (a file, an audio answer): the secrets' values replaced."""
        for value, placeholder in [*self._secrets.items(), *self._learned.items()]:
            encoded = value.encode()
            if encoded in data:
                data = data.replace(encoded, placeholder.encode())
        return data

    def value(self, value: Any) -> Any:
        """A JSON value with every string (and key) scrubbed, and credential fields redacted."""
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, list):
            return [self.value(v) for v in value]
        if isinstance(value, dict):
            return {
                self.text(str(k)): self.redacted(v) if is_credential(str(k)) else self.value(v)
                for k, v in value.items()
            }
        return value

    def redacted(self, value: Any) -> Any:
        """What a credential's name holds: its strings redacted (and learned), at any depth."""
        if isinstance(value, str):
            if not value:
                return value
            self.learn(value)
            return REDACTED
        if isinstance(value, list):
            return [self.redacted(v) for v in value]
        if isinstance(value, dict):
            return {self.text(str(k)): self.redacted(v) for k, v in value.items()}
        return value

    def _shapes(self, text: str) -> str:
        if len(text) < _MIN_CHARS:
            return text
        for shape in _SHAPES:
            if shape.present(text):
                text = shape.pattern.sub(functools.partial(self._redact, shape.named), text)
        return text

    def _redact(self, named: Callable[[str], bool] | None, match: re.Match[str]) -> str:
        """The match with its secret redacted (and learned); as it is when its name is no
        credential's."""
        if named is not None and not named(match["name"]):
            return match.group()
        secret = match["secret"]
        self.learn(secret)
        self.learn(unquote_plus(secret))  # a URL's or a form's value, as the app had it
        whole, offset = match.group(), match.start()
        start, end = match.span("secret")
        return whole[: start - offset] + REDACTED + whole[end - offset :]
