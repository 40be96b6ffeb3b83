"""Secrets kept out of what the plugin writes: recordings, the judge cache.

One rule for both: which environment variables hold secrets (their values are replaced by
``<NAME>`` wherever they appear, so a key set differently in CI changes nothing), and which
names of query parameters, JSON fields and attributes hold credentials (their values are
redacted whatever they are). A leaf: it imports nothing of the package.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Mapping

# Environment variables whose values are secrets: OPENAI_API_KEY, AWS_ACCESS_KEY_ID,
# AWS_SECRET_ACCESS_KEY, HF_TOKEN, DB_PASSWORD...
_SECRET_ENV = re.compile(
    r".*(?:_KEY|_TOKEN|_SECRET|_PASSWORD)|.*(?:API_KEY|KEY_ID|ACCESS_KEY|SECRET|TOKEN|PASSWORD).*",
    re.IGNORECASE,
)
_MIN_CHARS = 8  # shorter values ("1", "true") would be replaced everywhere
# A name's words: snake_case, kebab-case, dotted and camelCase alike (X-Amz-Signature,
# AWSAccessKeyId, client_secret).
_WORD = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|[0-9]+")
# Words that make a name a credential wherever they are: client_secret, X-Amz-Credential.
_SECRET_WORDS = frozenset({"credential", "credentials", "secret", "password", "passwd"})
# Words that make it one at its end, after another word: access_token (not max_tokens, nor a
# logprob's "token"), x-api-key (not a "key" field of the app's own data).
_SECRET_LAST_WORDS = frozenset({"token", "key"})
_SECRET_NAMES = frozenset({"apikey", "authorization"})
# Query parameters that are credentials too: a bare key or token (Gemini's ?key=), a URL's
# signature (X-Amz-Signature, sig), an OAuth code. Not JSON fields: Anthropic's and Gemini's
# thinking blocks carry a "signature" the app sends back as it is.
_SECRET_PARAM_WORDS = frozenset({"signature", "token", "key"})
_SECRET_PARAMS = frozenset({"sig", "code"})  # by their whole name: a zip_code is no secret


def env_secrets(environ: Mapping[str, str]) -> dict[str, str]:
    """The values of ``environ``'s secret variables (8 characters or more), each with the
    placeholder that stands for it (``<OPENAI_API_KEY>``), longest first: a value that contains
    another is replaced whole."""
    found = {
        value: f"<{name}>"
        for name, value in sorted(environ.items())
        if len(value) >= _MIN_CHARS and _SECRET_ENV.fullmatch(name)
    }
    return dict(sorted(found.items(), key=lambda pair: -len(pair[0])))


def mask(text: str, secrets: Mapping[str, str]) -> str:
    """``text`` with each secret value of ``secrets`` (see :func:`env_secrets`) replaced."""
    for value, placeholder in secrets.items():
        if value in text:
            text = text.replace(value, placeholder)
    return text


def is_credential(name: str) -> bool:
    """Whether a JSON field or an attribute named ``name`` holds a credential: ``api_key``,
    ``access_token``, ``client_secret``, ``password``, ``Authorization``, ``aws_access_key_id``."""
    words = [word.lower() for word in _WORD.findall(name)]
    if not words:
        return False
    if _SECRET_WORDS.intersection(words) or words[-1] in _SECRET_NAMES:
        return True
    if len(words) > 1 and words[-1] in _SECRET_LAST_WORDS:
        return True
    # An access key's id names the account: AWSAccessKeyId, aws_access_key_id.
    return any(pair == ("key", "id") for pair in itertools.pairwise(words))


def is_secret_param(name: str) -> bool:
    """Whether a URL's query parameter ``name`` holds a credential: those of :func:`is_credential`,
    and those named for a key, a token or a signature (``key``, ``X-Amz-Signature``, ``sig``)."""
    words = [word.lower() for word in _WORD.findall(name)]
    return (
        name.lower() in _SECRET_PARAMS or bool(_SECRET_PARAM_WORDS.intersection(words)) or is_credential(name)
    )
