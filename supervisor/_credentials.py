"""``TenantCredentials``: the host's ``credentials`` callback, asked at every incarnation.

An ``AgentHost(credentials=fn)`` calls ``fn(tenant_id)`` each time one of the
tenant's sessions starts, is restarted after a crash, reactivated or resumed
(``Incarnations._incarnate``), so a rotated key reaches the next incarnation
without a host restart. What it returns goes to the session with its launch
(over the pipe in process mode) and from there with every model request: it
is never part of a snapshot, an event or a log line.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from actors import Credentials
from supervisor.errors import CredentialsUnavailable

__all__ = ["CredentialsSource", "TenantCredentials"]

CredentialsSource = Callable[[str], Credentials | str | None]
"""The host's ``credentials`` callback: a tenant id to its ``Credentials``, an API key
(``str``, short for ``Credentials(api_key=...)``), or ``None`` (the model's own)."""


class TenantCredentials:
    """Resolves a tenant's credentials through the host's callback.

    Thread-safe if the callback is. The host calls it where incarnations start: on its
    supervisor's thread, one start at a time, so a slow callback delays every start and
    restart: keep it quick.

    Args:
        source: The callback, or ``None`` for a host without one (every session then
            gets ``None``).

    Raises:
        TypeError: ``source`` is not callable.
    """

    __slots__ = ("_source",)

    def __init__(self, source: CredentialsSource | None) -> None:
        if source is not None and not callable(source):
            hint = (
                "; for a mapping of tenant ids to keys, give its get method (credentials=keys.get)"
                if isinstance(source, Mapping)
                else ""
            )
            raise TypeError(  # the type only: what was given may hold keys
                "credentials must be a callable taking a tenant id (or None), got a value "
                f"of type {type(source).__name__}{hint}"
            )
        self._source = source

    def resolve(self, tenant_id: str) -> Credentials | None:
        """The credentials of ``tenant_id``'s sessions now.

        Raises:
            CredentialsUnavailable: the callback raised (its error is the cause) or
                returned something else than ``Credentials``, a non-empty ``str`` or ``None``.
        """
        if self._source is None:
            return None
        try:
            found = self._source(tenant_id)
        except Exception as exc:
            raise CredentialsUnavailable(
                tenant_id, f"the callback raised {type(exc).__name__}"
            ) from exc
        if found is None or isinstance(found, Credentials):
            return found
        if isinstance(found, str):
            if found:
                return Credentials(api_key=found)
            raise CredentialsUnavailable(
                tenant_id, "the callback returned an empty str (no API key)"
            )
        raise CredentialsUnavailable(tenant_id, _wrong_answer(found))


def _wrong_answer(found: object) -> str:
    """What the callback returned, when it is no credentials: its type by name, in words
    that read right whatever the name ("a value of type int", never "a int"), and never
    the value itself (a key of the wrong type, ``bytes`` say, is still a key)."""
    return f"the callback returned a value of type {type(found).__name__}, not credentials"
