"""The receive loop of a bare ``AgentSession``: one that ends alone.

Pykka's ``ThreadingActor`` meets a ``BaseException`` that is not an
``Exception`` (a tool's ``SystemExit``, say) in a handler by stopping *every*
actor of the process (``ActorRegistry.stop_all()``), and it leaves the ask being
handled unanswered, so its caller waits out its timeout. One session's tool
took down every other session of the process, and their hosts' actors too.

``run`` is Pykka's loop (``pykka>=4,<5``, whose private ``_actor_loop_running``
``AgentSession`` overrides) with that one case changed, to what a supervised
session does (``supervisor.SupervisedActor``, whose own loop comes first in a
supervised session's class): the session ends alone, the ask it was handling
fails with ``pykka.ActorDeadError`` caused by the exception, and ``on_failure``
runs (the steering the turn took goes back to the queue, plugins end with
``error``). ``KeyboardInterrupt`` keeps Pykka's meaning: stop everything.
"""

from __future__ import annotations

import contextlib
import logging
import queue
import sys
from typing import Any

import pykka

from actors._later import LaterAnswer, reply

__all__ = ["ends_session", "run"]

logger = logging.getLogger("actors")


def run(actor: pykka.ThreadingActor) -> None:
    """Receive and handle ``actor``'s messages until it is stopped (on its own thread)."""
    inbox = actor.actor_inbox
    stopped = actor.actor_stopped
    later: LaterAnswer | None = None  # the last turn's, while its save may be pending
    while not stopped.is_set():
        envelope = inbox.get()
        try:
            if later is not None:  # before any message (see ``actors._later``)
                settling, later = later, None
                settling.settle()
            later = reply(actor._handle_receive(envelope.message), envelope.reply_to)
        except Exception:
            if envelope.reply_to is not None:
                logger.info("exception returned from %s to caller", actor, exc_info=True)
                envelope.reply_to.set_exception()
            else:
                actor._handle_failure(*sys.exc_info())
                _on_failure(actor, *sys.exc_info())
        except KeyboardInterrupt:
            _fail_ask(actor, envelope.reply_to, sys.exc_info()[1])
            actor._stop()
            pykka.ActorRegistry.stop_all()
        except BaseException as exc:
            logger.error("%r in %s: stopping this session only", exc, actor, exc_info=exc)
            _fail_ask(actor, envelope.reply_to, exc)
            pykka.ActorRegistry.unregister(actor.actor_ref)
            stopped.set()
            _on_failure(actor, type(exc), exc, exc.__traceback__)


def ends_session(exc: BaseException) -> bool:
    """Whether ``exc``, raised by a session's model, tool or plugin hook, keeps its meaning:
    a ``SystemExit`` (it ends the session), a ``KeyboardInterrupt`` (it stops every actor),
    or a ``BaseExceptionGroup`` holding one. Any other exception (``asyncio.CancelledError``
    of an asyncio call inside it, a library's own ``BaseException``) is a failure of that
    call, as an ``Exception`` is: the call failed, not the session."""
    return isinstance(exc, KeyboardInterrupt | SystemExit) or (
        isinstance(exc, BaseExceptionGroup)
        and exc.subgroup((KeyboardInterrupt, SystemExit)) is not None
    )


def _fail_ask(actor: pykka.ThreadingActor, reply: Any, exc: BaseException | None) -> None:
    """Fail the ask being handled (if it was one) with ``ActorDeadError`` caused by ``exc``."""
    if reply is None:
        return
    dead = pykka.ActorDeadError(f"{actor.actor_ref} exited with {exc!r} handling it")
    dead.__cause__ = exc
    with contextlib.suppress(queue.Full):  # the reply was set before the exception
        reply.set_exception(exc_info=(type(dead), dead, None))


def _on_failure(actor: pykka.ThreadingActor, *exc_info: Any) -> None:
    try:
        actor.on_failure(*exc_info)
    except Exception:
        actor._handle_failure(*sys.exc_info())
