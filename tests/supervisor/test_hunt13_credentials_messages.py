"""``CredentialsUnavailable`` says what the host's ``credentials`` callback returned in
words a person reads ("a value of type int"), not a type name glued to an article
("a int"),
and never the value itself (it may be a credential of the wrong type)."""

from __future__ import annotations

import pytest

from actors import Credentials
from supervisor import CredentialsUnavailable
from supervisor._credentials import TenantCredentials


def refusal(answer: object) -> str:
    """The message resolving tenant ``acme`` fails with when the callback returns ``answer``."""
    credentials = TenantCredentials(lambda tenant_id: answer)  # type: ignore[arg-type,return-value]
    with pytest.raises(CredentialsUnavailable) as info:
        credentials.resolve("acme")
    return str(info.value)


@pytest.mark.parametrize(
    ("answer", "said"),
    [
        (42, "the callback returned a value of type int, not credentials;"),
        ([], "the callback returned a value of type list, not credentials;"),
        (b"sk-bytes", "the callback returned a value of type bytes, not credentials;"),
    ],
)
def test_a_wrong_type_is_named_without_an_article(answer: object, said: str) -> None:
    message = refusal(answer)
    assert message.startswith(f"no credentials for tenant 'acme': {said}")
    assert "sk-bytes" not in message  # the value stays out: it may be a key


def test_an_empty_key_is_called_empty() -> None:
    """An empty ``str`` is a ``str``: "returned a str, not credentials" would be false."""
    message = refusal("")
    assert message.startswith(
        "no credentials for tenant 'acme': the callback returned an empty str (no API key);"
    )


def test_what_the_callback_raised_is_named() -> None:
    def failing(tenant_id: str) -> Credentials:
        raise KeyError(tenant_id)

    with pytest.raises(CredentialsUnavailable) as info:
        TenantCredentials(failing).resolve("acme")
    assert str(info.value).startswith(
        "no credentials for tenant 'acme': the callback raised KeyError;"
    )


def test_a_mapping_of_keys_given_as_the_callback_is_not_quoted() -> None:
    """A mapping of tenant ids to keys is the likeliest thing given instead of a callable:
    the error names its type and the fix, and quotes none of its keys."""
    with pytest.raises(TypeError) as info:
        TenantCredentials({"acme": "sk-secret-key"})  # type: ignore[arg-type]
    message = str(info.value)
    assert "sk-secret-key" not in message
    assert message == (
        "credentials must be a callable taking a tenant id (or None), got a value of type "
        "dict; for a mapping of tenant ids to keys, give its get method (credentials=keys.get)"
    )
