"""The secrets kept out of recordings and the judge cache (``masking``): pure functions."""

from __future__ import annotations

import pytest

from pytest_opik_eval.masking import REDACTED, EnvironmentSecrets, Scrubber, env_secrets, is_credential, is_secret_param, mask
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
    ],
)
def test_credential_query_parameters_are_found_by_meaning(name: str) -> None:
    assert is_secret_param(name)


@pytest.mark.parametrize(
    "name", ["model", "max_tokens", "keyword", "monkey", "page", "zip_code", "X-Amz-Date", "X-Amz-Expires"]
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
     "password", "Authorization", "aws_access_key_id", "aws_secret_access_key", "credentials"],
)  # fmt: skip
def test_credential_fields_are_found(name: str) -> None:
    assert is_credential(name)


@pytest.mark.parametrize(
    # What providers' bodies hold and an app sends back as it is: usage, a logprob's token, a
    # thinking block's signature, the app's own keys.
    "name",
    ["max_tokens", "prompt_tokens", "token", "signature", "thoughtSignature", "key", "model", "keyword"],
)
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
