"""The secrets kept out of recordings and the judge cache (``masking``): pure functions."""

from __future__ import annotations

import base64
import os
from urllib.parse import quote, quote_plus

import pytest

from pytest_opik_eval.masking import (
    REDACTED,
    EnvironmentSecrets,
    Scrubber,
    env_secrets,
    is_credential,
    is_secret_env,
    is_secret_param,
    mask,
)
from pytest_opik_eval.run.http_calls import canonical_url


@pytest.mark.parametrize(
    "name",
    [
        # Signed URLs (S3 v4 and v2, Azure SAS, Google), API keys, OAuth.
        "X-Amz-Credential",
        "X-Amz-Signature",
        "X-Amz-Security-Token",
        "x-amz-signature",
        "AWSAccessKeyId",
        "Signature",
        "sig",
        "signature",
        "X-Goog-Signature",
        "key",
        "apikey",
        "api_key",
        "API-Key",
        "subscription-key",
        "token",
        "access_token",
        "code",
        "client_secret",
        "password",
        "auth",
        "jwt",
        "client_assertion",
        "assertion",  # OAuth's JWT bearer grant
        "session_id",
    ],
)
def test_credential_query_parameters_are_found_by_meaning(name: str) -> None:
    assert is_secret_param(name)


@pytest.mark.parametrize(
    "name",
    [
        "model",
        "max_tokens",
        "keyword",
        "monkey",
        "page",
        "zip_code",
        "X-Amz-Date",
        "X-Amz-Expires",
        "author",
        "se",
    ],
)
def test_other_query_parameters_are_kept(name: str) -> None:
    assert not is_secret_param(name)


def test_a_signed_url_keeps_no_credential() -> None:
    url = (
        "https://bucket.s3.amazonaws.com/audio.wav?X-Amz-Algorithm=AWS4-HMAC-SHA256"
        "&X-Amz-Credential=AKIAEXAMPLE%2F20260101&X-Amz-Date=20260101T000000Z&X-Amz-Expires=60"
        "&X-Amz-Security-Token=FwoGZXIvYXdzEXAMPLE&X-Amz-Signature=abcdef0123456789"
    )
    canonical = canonical_url(url, Scrubber(EnvironmentSecrets({})))
    for secret in ("AKIAEXAMPLE", "FwoGZXIvYXdzEXAMPLE", "abcdef0123456789"):
        assert secret not in canonical
    assert "X-Amz-Date=20260101T000000Z" in canonical
    assert f"X-Amz-Signature={REDACTED}" in canonical


@pytest.mark.parametrize(
    "name",
    ["api_key", "apiKey", "x-api-key", "access_token", "refresh_token", "id_token", "client_secret",
     "password", "Authorization", "aws_access_key_id", "aws_secret_access_key", "credentials", "auth",
     "basic_auth", "jwt", "x-session-id", "sessionId", "github_pat", "api_key_2", "Cookie", "set-cookie",
     "proxy-authorization", "private_key", "SessionToken", "client_assertion"],
)  # fmt: skip
def test_credential_fields_are_found(name: str) -> None:
    assert is_credential(name)


@pytest.mark.parametrize(
    # What providers' bodies hold and an app sends back as it is: usage, a logprob's token, a
    # thinking block's signature, the app's own keys.
    "name",
    ["max_tokens", "prompt_tokens", "token", "signature", "thoughtSignature", "key", "model", "keyword",
     "token_type", "session", "author", "oauth", "auth_type", "authorization_url", "input_tokens",
     "assertion", "assertions"],
)  # fmt: skip
def test_provider_fields_are_no_credentials(name: str) -> None:
    assert not is_credential(name)


def test_a_credential_field_is_redacted_and_usage_kept() -> None:
    body = {
        "auth": {"api_key": "k-123", "client_secret": "s-456"},
        "usage": {"prompt_tokens": 10},
        "logprobs": [{"token": "Hi"}],
        "credentials": {"password": "p-789"},
    }
    assert Scrubber(EnvironmentSecrets({})).value(body) == {
        "auth": {"api_key": REDACTED, "client_secret": REDACTED},
        "usage": {"prompt_tokens": 10},
        "logprobs": [{"token": "Hi"}],
        "credentials": {"password": REDACTED},
    }


@pytest.mark.parametrize(
    "name",
    ["OPENAI_API_KEY", "OPENAI_API_KEY_PROD", "MY_SERVICE_APIKEY", "GITHUB_PAT", "HF_TOKEN", "HF_TOKEN_READ",
     "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "DB_PASSWORD", "CLIENTSECRET", "BASIC_AUTH", "X_JWT"],
)  # fmt: skip
def test_secret_environment_names(name: str) -> None:
    assert is_secret_env(name)


@pytest.mark.parametrize(
    "name", ["HOME", "PATH", "MODEL", "TOKENIZERS_PARALLELISM", "KEYBOARD", "PYTEST_ADDOPTS", "SSH_AUTH_SOCK"]
)
def test_other_environment_names(name: str) -> None:
    # TOKENIZERS_PARALLELISM holds "false": too short to be masked even so.
    assert not is_secret_env(name) or name == "TOKENIZERS_PARALLELISM"


@pytest.mark.parametrize(
    ("text", "scrubbed"),
    [
        ("https://x.test/a?sv=1&sig=s1gnature0&se=2", f"https://x.test/a?sv=1&sig={REDACTED}&se=2"),
        ("see ?auth=abc&jwt=def and &code=12", f"see ?auth={REDACTED}&jwt={REDACTED} and &code={REDACTED}"),
        ('{"a": 1, "api_key": "k-1", "token": "t"}', f'{{"a": 1, "api_key": "{REDACTED}", "token": "t"}}'),
        ('{\\"password\\": \\"hunter22\\"}', f'{{\\"password\\": \\"{REDACTED}\\"}}'),
        ("Authorization: Bearer abc.def.ghi1234", f"Authorization: Bearer {REDACTED}"),
        ("Bearer authentication is common", "Bearer authentication is common"),
        ("key sk-proj-abcdefghij0123456789 here", f"key {REDACTED} here"),
        ("sk-learn-compatible-estimators-only", "sk-learn-compatible-estimators-only"),
        ("Gemini AIzaSyA-1234567890abcdefghijklmnopqrstu!", f"Gemini {REDACTED}!"),
        ("postgres://app:hunter2hunter2@db:5432/x", f"postgres://app:{REDACTED}@db:5432/x"),
        ("mail bob@example.com at https://x.test/", "mail bob@example.com at https://x.test/"),
        ("<Creds><SecretAccessKey>abc123</SecretAccessKey><Expiration>1</Expiration></Creds>",
         f"<Creds><SecretAccessKey>{REDACTED}</SecretAccessKey><Expiration>1</Expiration></Creds>"),
        ("a <b>bold</b> move", "a <b>bold</b> move"),
        ("https://app.test/cb#access_token=tok123&state=1", f"https://app.test/cb#access_token={REDACTED}&state=1"),
        ("-----BEGIN RSA PRIVATE KEY-----\nMIIE\n-----END RSA PRIVATE KEY-----",
         f"-----BEGIN RSA PRIVATE KEY-----{REDACTED}-----END RSA PRIVATE KEY-----"),
        ("the capital of France is Paris", "the capital of France is Paris"),
    ],
)  # fmt: skip
def test_the_shapes_of_credentials_in_a_text(text: str, scrubbed: str) -> None:
    assert Scrubber(EnvironmentSecrets({})).text(text) == scrubbed


def test_a_value_found_by_name_is_masked_everywhere_after() -> None:
    scrubber = Scrubber(EnvironmentSecrets({}))
    assert (
        scrubber.value({"prompt": "use tok-1234567", "access_token": "tok-1234567"})["prompt"]
        == "use tok-1234567"
    )
    assert scrubber.found() == 1  # the caller scrubs again: the value is now known
    assert scrubber.value({"prompt": "use tok-1234567"}) == {"prompt": f"use {REDACTED}"}


def test_the_environments_secrets_in_their_other_forms() -> None:
    secret = "wJalrXUtnFEMI/K7MDENG+bPx"
    scrubber = Scrubber(EnvironmentSecrets({"AWS_SECRET_ACCESS_KEY": secret}))
    for form in (secret, quote(secret, safe=""), quote_plus(secret)):
        assert scrubber.text(f"a {form} b") == "a <AWS_SECRET_ACCESS_KEY> b"
    for prefix in (b"", b"x", b"xy"):  # inside base64, at each of its three offsets
        encoded = base64.b64encode(prefix + secret.encode()).decode()
        assert "<AWS_SECRET_ACCESS_KEY>" in scrubber.text(encoded)
    assert scrubber.bytes(b"\x00" + secret.encode() + b"\xff") == b"\x00<AWS_SECRET_ACCESS_KEY>\xff"


def test_the_environment_is_read_again_when_it_changed() -> None:
    environ = {"A_KEY": "first-value-1"}
    secrets = EnvironmentSecrets(environ)
    assert mask("first-value-1", secrets) == "<A_KEY>"
    environ["B_TOKEN"] = "second-value-2"
    assert mask("first-value-1 second-value-2", secrets) == "<A_KEY> <B_TOKEN>"


def test_the_environment_is_read_through_os_environs_own_dict() -> None:
    # EnvironmentSecrets compares os.environ's own dict (a private attribute of CPython's
    # os._Environ) to see a change in a microsecond; without it, it copies the mapping each time.
    assert isinstance(getattr(os.environ, "_data", None), dict)


def test_the_environments_secrets_are_masked_by_their_names() -> None:
    environ = {
        "OPENAI_API_KEY": "sk-openai-0123456789",
        "AWS_ACCESS_KEY_ID": "AKIAIOSFODNN7EXAMPLE",
        "AWS_SECRET_ACCESS_KEY": "wJalrXUtnFEMI/K7MDENG",
        "AWS_SESSION_TOKEN": "FwoGZXIvYXdzEXAMPLE",
        "HF_TOKEN": "hf_abcdefghijk",
        "DB_PASSWORD_PROD": "hunter2hunter2",
        "MY_SECRET_VALUE": "very-secret-value",
        "SHORT_TOKEN": "1234567",  # shorter than 8: would be replaced everywhere
        "HOME": "/home/someone",
        "MODEL": "gpt-4o-mini-2024",
    }
    secrets = env_secrets(environ)
    assert set(secrets.values()) == {
        "<OPENAI_API_KEY>",
        "<AWS_ACCESS_KEY_ID>",
        "<AWS_SECRET_ACCESS_KEY>",
        "<AWS_SESSION_TOKEN>",
        "<HF_TOKEN>",
        "<DB_PASSWORD_PROD>",
        "<MY_SECRET_VALUE>",
    }
    text = "Bearer sk-openai-0123456789 as AKIAIOSFODNN7EXAMPLE in /home/someone"
    assert mask(text, secrets) == "Bearer <OPENAI_API_KEY> as <AWS_ACCESS_KEY_ID> in /home/someone"


def test_a_secret_that_contains_another_is_masked_whole() -> None:
    secrets = env_secrets({"A_KEY": "abcdefgh", "B_KEY": "abcdefgh-longer"})
    assert mask("abcdefgh-longer abcdefgh", secrets) == "<B_KEY> <A_KEY>"
