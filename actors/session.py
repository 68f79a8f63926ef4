"""``AgentSession``: one agent conversation running as a Pykka actor.

The actor owns the conversation (messages, usage, plugin states) and runs the
turn loop on its own thread: user message -> model -> tool calls -> model ...
-> final answer. Messages sent through its ``ActorRef``/proxy are handled one at
a time, so a session needs no locks of its own; the steering queue and event
buffer are the two parts shared with other threads, and both are thread-safe.
"""

from __future__ import annotations

import copy
import threading
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import Any, ClassVar, Self, cast

import pykka

from actors._arguments import (
    check_metadata,
    check_session_arguments,
    restored_turns,
    session_id_of,
)
from actors._call_ids import CallIds
from actors._codec import encode_plain
from actors._history import HistoryCodec
from actors._hooks import PROMPT, RESPONSE, TOOL_CALL, PluginRunner
from actors._later import LaterAnswer, PendingSave
from actors._loop import ends_session
from actors._loop import run as run_loop
from actors._mailbox import new_inbox, new_reply
from actors._prompt import PromptView
from actors._restored import RestoredMessages
from actors._session_calls import GetHistory, Send, StartCheck, TakeSnapshot
from actors._step import STEP, StepKey
from actors._storable import (
    check_provider_state,
    check_response,
    stop_reason_of,
    storable_message,
    user_text,
)
from actors._strip import (
    STRIPPED_KEY,
    first_live,
    is_flat_plain,
    is_stripped_marker,
    strip_live,
)
from actors._tool_text import tool_error, tool_output
from actors._turn_undo import TurnMark, Undo, copy_containers
from actors.errors import (
    CheckpointAborted,
    ModelCallAborted,
    PluginError,
    SnapshotDecodeError,
    SnapshotEncodeError,
    TurnLimitExceeded,
)
from actors.events import EventBatch, EventBuffer, Subscriber
from actors.messages import Message, ToolCall, Usage
from actors.model import GenerateModel, Model, ModelResponse
from actors.plugins import Plugin
from actors.providers import ProviderRegistry
from actors.request import Credentials, ModelRequest
from actors.snapshot import Snapshot, saved_steering, session_snapshot
from actors.steering import SteeringQueue
from actors.streaming import Delta
from actors.template import AgentTemplate
from actors.tools import Tool

__all__ = ["AgentSession"]


def _save(checkpointer: Callable[[Snapshot], object], snapshot: Snapshot) -> object:
    """Call ``checkpointer`` with ``snapshot`` and return what it returns (a
    ``PendingSave`` when it did not wait for the commit); a ``BaseException`` it raises
    that keeps no meaning of its own (``asyncio.CancelledError`` of an asyncio store, see
    ``actors._loop.ends_session``) becomes ``CheckpointAborted``: the save failed, as with
    an ``Exception``, and the turn is rolled back. Let through, it ended the session with
    the turn's changes in place."""
    try:
        return checkpointer(snapshot)
    except Exception:
        raise
    except BaseException as exc:
        if ends_session(exc):
            raise
        raise CheckpointAborted(exc) from exc


def _raise_failed(saved: PendingSave) -> None:
    """Raise the error of ``saved``, a save that ended, as ``_save`` raises a checkpointer's
    (nothing if it is durable)."""
    error = saved.error
    del saved
    if error is None:
        return
    try:
        if isinstance(error, Exception):
            raise error
        raise CheckpointAborted(error) from error
    finally:
        del error  # this frame is in the error's traceback: kept, it made a reference cycle


class AgentSession(pykka.ThreadingActor):
    """A conversation with a model, its tools and plugins, as a Pykka actor.

    Start it with ``AgentSession.start(template, ...)``; the call returns once
    every plugin's ``session_start`` has run, and raises ``PluginError`` (after
    stopping the actor) if one failed. Talk to it through ``ref.proxy()``:
    ``send``, ``steer``, ``history``, ``usage``, ``state``, ``events``.

    Thread-safety: the actor serializes every call made through its ref. The
    ``steering`` queue and ``event_buffer`` attributes are thread-safe objects
    that a host may pass in and use directly (steering must reach a turn that
    is running; events must be readable while it runs).

    A ``SystemExit`` (alone or in a ``BaseExceptionGroup``) raised in a turn by the
    model, a tool or a hook ends this session alone, as under a supervisor: the ask fails
    with ``pykka.ActorDeadError`` caused by it and ``on_failure`` runs (see
    ``actors._loop``); Pykka alone would stop every actor of the process. Any other
    ``BaseException`` but ``KeyboardInterrupt`` (``asyncio.CancelledError`` of an asyncio
    call inside, a library's own) fails what raised it, as an ``Exception`` does: a
    tool's is a tool error the model sees, a model's fails the turn with
    ``ModelCallAborted``, a hook's is a ``plugin_error`` event; the session goes on.

    Args:
        template: Model, tools, instructions and plugins.
        session_id: A non-empty ``str``; defaults to the restored state's, else a new
            random id.
        restored_state: A ``state()`` dict to continue from (resume). The state of a plugin
            the template does not list is kept as it is, in every later snapshot, for a
            template that lists the plugin again (``PluginRunner.kept``); no hook sees it.
        restored_checked: ``restored_state``'s messages are vouched for by the store that
            loaded them (``checked_messages(snapshot)`` is that list): not checked again.
        restored_encoding: With ``restored_checked``, the messages' encodings back to
            back as the store read them (``checked_encoding(snapshot)``): the first
            snapshot cuts them instead of encoding the history again.
        stripped_fields: Paths stripped from the snapshot it came from; each
            plugin sees those under ``plugins.<name>.`` in ``ctx.stripped``.
        model: A live model to use instead of resolving ``template.model``.
        providers: Resolves model strings; defaults to a registry with ``echo``.
        max_steps: Most model calls in one turn (``TurnLimitExceeded`` when the last one
            still asks for tools, which are then not run).
        max_steering_queue: Most steering messages waiting at once.
        event_buffer_size: Most events retained.
        metadata: Plain user data kept in the state, and in every snapshot: what no
            checkpoint can hold (a set, an object, an integer beyond 64 bits, a key that
            is not a ``str``) is refused here, naming its path, and so is a live value (a
            lock, a socket, a callable): nothing would rebuild it on resume. The session
            keeps its own copy of the containers.
        steering: A queue to use (for a host that keeps a handle on it).
        event_buffer: A buffer to use (likewise).
        checkpointer: Called with a fresh ``Snapshot`` after every
            ``checkpoint_every``-th completed turn, on the session's thread and
            before ``send`` returns, so an answer the caller received is already
            saved (a host passes its store's ``save``), and before the turn's
            ``turn_finished`` event: the snapshot's event mark is the buffer's
            ``mark``, which counts that event. If it raises, the turn
            is rolled back as a failed turn is (see ``send``), an ``error``
            event is published instead of ``turn_finished`` and ``send`` raises that
            exception (a ``BaseException`` such as ``asyncio.CancelledError`` as
            ``CheckpointAborted``; ``SystemExit`` ends the session): the caller knows
            the answer is not durable, and may send the same text again.
        checkpoint_every: Turns between checkpoints (>= 1).
        credentials: Handed to a model of the ``respond`` form with every request
            (``ModelRequest.credentials``); never part of the state or a snapshot.
        epoch: The host's ownership epoch of the session (0 outside a cluster), part of
            the ``current_step()`` key that tools and plugins read.

    Raises:
        TypeError: ``template`` is not an ``AgentTemplate``, ``session_id`` not a ``str``,
            ``metadata`` not a mapping, or ``checkpointer`` not callable.
        SnapshotEncodeError: (a ``TypeError``) ``metadata`` holds what no checkpoint can
            hold, or a live value, naming its path (``metadata.a``).
        ValueError: ``session_id`` is empty, or ``max_steps`` or ``checkpoint_every`` is
            not a positive integer, or ``metadata`` holds a reference cycle.
        SnapshotDecodeError: ``restored_state`` is not a valid session state.
    """

    start_timeout: ClassVar[float] = 30.0
    """Seconds ``start`` waits for ``session_start`` hooks before giving up."""

    # Every turn is an ask: a C-level inbox and a one-lock reply slot (see actors._mailbox).
    _create_actor_inbox = staticmethod(new_inbox)
    _create_future = staticmethod(new_reply)

    def __init__(
        self,
        template: AgentTemplate,
        *,
        session_id: str | None = None,
        restored_state: Mapping[str, Any] | None = None,
        restored_checked: bool = False,
        restored_encoding: bytes | None = None,
        stripped_fields: Sequence[str] = (),
        model: Model | None = None,
        providers: ProviderRegistry | None = None,
        max_steps: int = 8,
        max_steering_queue: int = 16,
        event_buffer_size: int = 1000,
        metadata: Mapping[str, Any] | None = None,
        steering: SteeringQueue | None = None,
        event_buffer: EventBuffer | None = None,
        checkpointer: Callable[[Snapshot], object] | None = None,
        checkpoint_every: int = 1,
        credentials: Credentials | None = None,
        epoch: int = 0,
    ) -> None:
        super().__init__()
        for name, value in (("max_steps", max_steps), ("checkpoint_every", checkpoint_every)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        check_session_arguments(template, metadata, checkpointer)
        self.checkpointer = checkpointer
        self.checkpoint_every = checkpoint_every
        self.epoch = epoch
        restored = restored_state or {}
        self.session_id = session_id_of(session_id, restored) or uuid.uuid4().hex
        self.template = template
        self.max_steps = max_steps
        self.model_string = template.model_string
        self.model = model if model is not None else self._resolve(template.model, providers)
        self._credentials = credentials
        self._call_model = self._model_call(self.model)
        # The template's tools; the plugins' join them at start (``on_start``).
        self.tools: dict[str, Tool] = {t.name: t for t in template.tools}
        self._tool_list = list(template.tools)
        self.steering = steering if steering is not None else SteeringQueue(max_steering_queue)
        self.event_buffer = (
            event_buffer if event_buffer is not None else EventBuffer(event_buffer_size)
        )
        try:  # a checkpoint that decodes but holds the wrong shapes: one documented error
            # Checked now, built when first read (``actors._restored``).
            self._restored = RestoredMessages(
                restored.get("messages", []),
                checked=restored_checked,
                encoding=restored_encoding,
            )
            self._usage = Usage.from_dict(restored["usage"]) if "usage" in restored else Usage()
            if steering is None:  # a queue passed in is its owner's (a host restores it)
                self.steering.requeue(saved_steering(restored))
            self._turns = restored_turns(restored)
            # Its own containers: what the caller changes in them later is not checked.
            self._metadata: dict[str, Any] = copy_containers(
                dict(metadata if metadata is not None else restored.get("metadata", {}))
            )
            if metadata is None and self._metadata and not restored_checked:
                check_metadata(self._metadata)  # a hand-made state's (a store's is plain)
            self.plugins = PluginRunner(
                template.plugins,
                session_id=self.session_id,
                states=copy_containers(restored.get("plugins", {})),
                stripped_fields=stripped_fields,
                resumed=restored_state is not None,
                events=self.event_buffer,
            )
        except (ValueError, TypeError, AttributeError, KeyError, RecursionError) as exc:
            raise SnapshotDecodeError(
                f"the checkpoint of session {self.session_id!r} is not a valid session state "
                f"({type(exc).__name__}: {exc}); resume an older checkpoint"
            ) from exc
        self._provider_state = restored.get("provider_state")
        # Append-only (a rolled-back turn swaps in a shorter copy): ``_history``
        # strips and encodes each message once, for every later snapshot.
        self._message_list: list[Message] | None = None  # see ``_messages``
        self._history = HistoryCodec()
        self._call_ids = CallIds()  # the history's tool-call ids (see ``_record``)
        self._start_error: BaseException | None = None
        # Held until ``on_start`` is over (a one-shot signal to ``start``, the one waiter:
        # a lock costs a tenth of an Event); ``_start_ok`` when the hooks all succeeded
        # (see ``start``: a start that succeeded needs no round trip through the inbox).
        self._start_done = threading.Lock()
        self._start_done.acquire()
        self._start_ok = False
        self._steered: list[str] = []
        self._system: Message | None = None
        # Without plugins a turn skips its hooks outright: calling the runner
        # (and building the hooks' arguments) was a measurable part of a turn.
        self._has_plugins = bool(self.plugins.plugins)
        self._prompt_plugins = any(
            getattr(type(p), "before_model", None) is not Plugin.before_model
            for p in template.plugins
        )

    @property
    def _messages(self) -> list[Message]:
        """The history; a resumed one is built from its checkpoint's dicts when first read,
        on the session's thread, not while its resume waits."""
        messages = self._message_list
        if messages is None:
            messages = self._message_list = self._restored.messages()
        return messages

    @_messages.setter
    def _messages(self, messages: list[Message]) -> None:
        self._message_list = messages

    @staticmethod
    def _resolve(model: Model | str, providers: ProviderRegistry | None) -> Model:
        if isinstance(model, str):
            return (providers or ProviderRegistry()).lookup(model)
        return model

    def _model_call(self, model: Model) -> Callable[[Sequence[Message], list[Tool]], ModelResponse]:
        """How this session calls its model, chosen once: ``respond`` with a request, or
        ``generate`` (see ``actors.model``).

        ``isinstance(model, RespondModel)`` asks exactly whether ``model.respond`` is
        there and not ``None``; asked here directly, since the runtime protocol check
        walks the protocol's attributes on every call: a quarter of a new session's constructor."""
        respond = getattr(model, "respond", None)
        if respond is not None:
            self._respond_to: Callable[[ModelRequest], ModelResponse] = respond
            return self._respond
        return cast(GenerateModel, model).generate

    @classmethod
    def start(cls, *args: Any, **kwargs: Any) -> pykka.ActorRef[Self]:
        """Start the actor and wait for its plugins' ``session_start`` hooks.

        Without plugins (and with this class's own ``on_start``) nothing at start
        can fail, so it does not wait for the actor's thread: a call asked at once
        is queued behind the start as any other. With them it waits until
        ``on_start`` is over; a start that failed (or an ``on_start`` of a
        subclass) is then asked about through the inbox, which raises what failed.

        Raises:
            PluginError: a ``session_start`` hook raised; the actor was stopped.
            pykka.Timeout: the hooks took longer than ``start_timeout``.
        """
        ref = super().start(*args, **kwargs)
        own_start = cls.on_start is AgentSession.on_start
        template = kwargs["template"] if "template" in kwargs else args[0] if args else None
        if own_start and not getattr(template, "plugins", True):
            return ref  # no hook to wait for: that round trip would only cost the caller
        try:
            if not (own_start and _started_well(ref, cls.start_timeout)):
                ref.ask(StartCheck(), timeout=cls.start_timeout)
        except BaseException:
            ref.stop(block=False)
            raise
        return ref

    # -- lifecycle (actor thread) -------------------------------------------------

    def on_start(self) -> None:
        try:
            try:
                offered = self.plugins.start(self.tools)
                if self._has_plugins:
                    self._check_started_states()
            except Exception as exc:
                self._start_error = exc
                self.plugins.end("error")
                return
            for item in offered:  # the plugins' tools, alongside the template's
                self.tools[item.name] = self._wrap_tool(item)
                self._tool_list.append(item)
            self.plugins.announce_kept()
            self._start_ok = True
        finally:  # a BaseException too: ``start`` stops waiting and asks what happened
            self._start_done.release()

    def _wrap_tool(self, tool: Tool) -> Tool:
        """How this session runs ``tool``: here, as it is. The plugins' tools pass through it at
        start; a subclass that runs tools its own way (a worker's session times each one)
        overrides it and passes the template's tools through it as well."""
        return tool

    def on_receive(self, message: Any) -> Any:
        if isinstance(message, Send):
            return self.send(message.text, tag=message.tag)
        if isinstance(message, TakeSnapshot):
            return self.snapshot(message.label)
        if isinstance(message, GetHistory):
            return self.history()
        if isinstance(message, StartCheck):
            if self._start_error is not None:
                raise self._start_error
            return None
        raise TypeError(
            f"AgentSession does not understand {message!r}; "
            "use ref.ask(Send(text)) or the proxy methods"
        )

    def on_stop(self) -> None:
        self.plugins.end("normal")

    def _actor_loop_running(self) -> None:
        # Pykka's loop, except that a ``SystemExit`` (or any ``BaseException`` but
        # ``KeyboardInterrupt``) raised in a turn ends this session alone, as it does a
        # supervised one: Pykka stops every actor of the process (see ``actors._loop``).
        run_loop(self)

    def on_failure(self, *_exc_info: object) -> None:
        # A crash in the middle of a turn: the steering it took goes back to the
        # front of the queue, for the session's next incarnation.
        self.steering.requeue(self._steered)
        self._steered = []
        self.plugins.end("error")

    # -- public API (through the proxy) --------------------------------------------

    def send(self, text: str, *, tag: str | None = None) -> Message:
        """Run one turn for user ``text`` and return the final assistant message
        (``tag``: see ``Send``).

        Steering waiting when the turn begins was said before ``text``: it enters the
        history first (a ``steered`` event each, after ``turn_started``), then ``text``.

        A failed turn (the model raised: a ``BaseException`` such as
        ``asyncio.CancelledError`` as ``ModelCallAborted``; ``TurnLimitExceeded``; or the
        ``checkpointer`` raised after the turn: a ``BaseException`` as
        ``CheckpointAborted``; or a plugin's state or the model's provider state
        became one no checkpoint can hold: ``SnapshotEncodeError``, whether a
        checkpoint was due or not) is rolled back: the
        history, the turn counter, the provider state and every plugin's
        ``ctx.state`` are as before the call, steering messages it had taken go
        back to the front of the queue, an ``error`` event is published, and
        the exception reaches the caller; the session lives on and can still
        checkpoint. Not rolled back: ``usage`` (the tokens were spent), events
        already published, the side effects of plugin hooks (``after_turn``
        included when the checkpoint failed), and changes made inside a value
        of a plugin's state that is not a dict, list, tuple or set (or a subclass
        of one: a ``Counter``, a ``defaultdict``).

        A turn's ``turn_finished`` event is published last, once its checkpoint is
        saved (and the checks above passed): a failed turn publishes its ``error``
        and never a ``turn_finished``. The checkpoint's event mark (what the saver
        reads from ``event_buffer.mark``) still covers that ``turn_finished``: the
        session reserves it (``EventBuffer.reserve``) before the save, so a stream
        resumed from the checkpoint numbers its events after it.

        A ``checkpointer`` that queues the save and returns an unfinished
        ``actors._later.PendingSave`` (a host's, in thread mode) makes this return a
        ``LaterAnswer`` for the actor's loop instead: the thread that commits the save
        publishes ``turn_finished`` and answers the call (see ``actors._later``).

        Raises:
            TypeError: ``text`` is not a ``str``, or ``tag`` is neither a ``str`` nor ``None``.
            ValueError: ``text`` or ``tag`` holds a lone surrogate, which no checkpoint (nor
                JSON) can store; refused before the turn starts (a ``str`` subclass is taken
                as a plain copy).
        """
        if not isinstance(text, str):
            raise TypeError(f"send() takes the user's text as a str, got {type(text).__name__}")
        text = user_text(text, "the user's text")
        if tag is not None:  # checked here, as ``Send`` (a message) is not: it reaches events
            if not isinstance(tag, str):
                raise TypeError(
                    f"send()'s tag must be a str or None, got {type(tag).__name__} {tag!r:.40}"
                )
            tag = user_text(tag, "the send's tag")
        mark = self._mark()
        self._steered = []
        if tag is None:
            self.event_buffer.publish("turn_started", turn=self._turns + 1, text=text)
        else:
            self.event_buffer.publish("turn_started", turn=self._turns + 1, text=text, tag=tag)
        # Steering that was waiting was said before ``text``: the history keeps that order.
        self._take_steering()
        self._messages.append(Message.user(text))
        started = time.perf_counter()
        try:
            answer = self._run_turn()
        except Exception as exc:
            self._rollback(mark)
            self.event_buffer.publish("error", turn=self._turns + 1, error=repr(exc))
            raise
        self._turns += 1
        if self._has_plugins:
            added = tuple(self._messages[mark.messages :])
            self.plugins.notify("after_turn", lambda p, c: p.after_turn(c, added))
        events = self.event_buffer
        checkpointer = self.checkpointer if self._turns % self.checkpoint_every == 0 else None
        if checkpointer is not None:
            events.reserve()  # the checkpoint's event mark covers the ``turn_finished`` below
        pending = None
        try:
            pending = self._settle(mark, checkpointer)
            if pending is None:
                events.publish(
                    "turn_finished",
                    turn=self._turns,
                    content=answer.content,
                    seconds=time.perf_counter() - started,
                )
        finally:
            if checkpointer is not None and pending is None:
                events.unreserve()  # after the publish: a mark never falls short of it
        if pending is not None:  # its committer publishes and answers (``actors._later``)
            return LaterAnswer(self, pending, mark, answer, started)  # type: ignore[return-value]
        self._steered = []
        return answer

    def _settle(
        self, mark: TurnMark, checkpointer: Callable[[Snapshot], object] | None
    ) -> PendingSave | None:
        """Save the turn begun at ``mark`` with ``checkpointer`` (when one is due), or check that
        a later checkpoint could hold what it changed; roll it back and publish its ``error``
        if not (see ``send``), before its ``turn_finished`` is published: a failed turn has
        none, which every follower of the events (metrics, tracing, a streamed send) would
        take as its success. The ``PendingSave`` of a checkpointer that did not wait for
        the commit (see ``actors._later``), whose outcome settles the turn then."""
        provider_changed = self._provider_state is not mark.provider_state
        if checkpointer is None and not self._has_plugins and not provider_changed:
            return None
        try:
            if checkpointer is not None:
                saved = _save(checkpointer, self.snapshot())
                if isinstance(saved, PendingSave):
                    if not saved.finished:
                        return saved
                    _raise_failed(saved)  # ended already (this thread committed it)
            else:  # what a later checkpoint would refuse must not outlive this turn
                if self._has_plugins:
                    self._check_plugin_states()
                if provider_changed:
                    self._check_provider_state()
        except Exception as exc:
            self._rollback(mark)
            self.event_buffer.publish("error", turn=self._turns + 1, error=repr(exc))
            raise
        return None

    def _mark(self) -> TurnMark:
        """Where the session stands before a turn: what ``_rollback`` returns it to."""
        states = None
        if self._has_plugins:
            try:
                states = Undo.record(self.plugins.states())
            except RecursionError:  # already unstorable: the turn's checkpoint will say where
                states = None
        return TurnMark(len(self._messages), self._turns, self._provider_state, states)

    def _rollback(self, mark: TurnMark) -> None:
        """Undo the turn begun at ``mark`` (see ``send``), on the session's thread.

        The steering the turn took (``_steered``) goes back to the front of the queue.
        """
        # A new list, not ``del``: prompts handed to the model are views of the old one.
        self._messages = self._messages[: mark.messages]
        self._history.truncate(mark.messages)
        self._call_ids.forget()
        self._turns = mark.turns
        self._provider_state = mark.provider_state
        if mark.plugin_states is not None:  # in place: a plugin may hold on to its ctx.state
            mark.plugin_states.restore(self.plugins.contexts)
        self.steering.requeue(self._steered)
        self._steered = []

    def snapshot(self, label: str | None = None) -> Snapshot:
        """A snapshot of the session now: its ``state()`` with live values stripped.

        Costs what changed since the last one, not the history: each message is
        converted, stripped and encoded once, the first time a snapshot holds it,
        and later snapshots share those dicts and bytes (treat a snapshot's
        message dicts as read-only); its list of them is made only if its ``state``
        is read (a store needs only the bytes). Plugin states, provider state and metadata
        are copied and stripped in full every time, as ``Snapshot.new`` does.

        Raises:
            SnapshotEncodeError: as ``state``; or the provider state holds a live value
                (see ``_refuse_live_provider_state``).
        """
        try:
            state = self._state(with_messages=False)
        except RecursionError:
            raise self._too_deep_error() from None
        if self._provider_state is not None:
            self._refuse_live_provider_state()
        restored = self._restored
        if not len(self._history) and len(restored) and restored.canonical:
            # The first snapshot: the checkpoint's own dicts (and bytes, when the store kept them).
            self._history.seed(restored.plain, restored.encoding)
        unread = self._message_list is None and restored.canonical  # the codec has them all
        messages, paths, encoded = self._history.snapshot_part(
            restored.plain if unread else self._messages
        )
        return session_snapshot(
            session_id=self.session_id,
            state=state,
            messages=messages,
            message_paths=paths,
            encoded=encoded,
            label=label,
        )

    def steer(self, text: str) -> None:
        """Queue ``text`` as a user message for the session's next model call (``SteeringQueueFull``
        when ``max_steering_queue`` messages wait; ``ValueError`` for text with a lone
        surrogate, which no checkpoint could store).

        The history keeps the order things were said in: text still waiting when a turn
        begins goes before that turn's user message; text that arrives during a turn goes
        right before its next model call."""
        self.steering.put(text)

    def history(self) -> list[Message]:
        """The conversation so far, without the system prompt (which the template supplies)."""
        return list(self._messages)

    def usage(self) -> Usage:
        """Tokens used by every model call of the session, failed turns included."""
        return self._usage

    def events(self, since: int | None = None) -> EventBatch:
        """Events after cursor ``since`` and the cursor to pass next time."""
        return self.event_buffer.since(since)

    def subscribe(self, subscriber: Subscriber) -> Callable[[], None]:
        """Call ``subscriber`` (on this session's thread) with every future event.

        Returns a function that unsubscribes it (callable from any thread).
        """
        return self.event_buffer.subscribe(subscriber)

    def state(self) -> dict[str, Any]:
        """The session's conversational state as plain containers.

        Plugin states are copied as they are, so they may hold live values;
        ``Snapshot.new`` strips those and records their paths.

        Raises:
            SnapshotEncodeError: a plugin's state (or the provider state or
                metadata) holds a cycle or nests deeper than Python can copy, or a
                plugin's ``ctx.state`` is no longer a dict.
        """
        try:
            return self._state()
        except RecursionError:
            raise self._too_deep_error() from None

    def _check_started_states(self) -> None:
        """Fail the start if a checkpoint could not hold a plugin's state as its
        ``session_start`` left it: such a session would start, then fail every turn.

        Raises:
            PluginError: naming the plugin; the ``SnapshotEncodeError`` (naming the path)
                is its ``error``.
        """
        try:
            self._check_plugin_states()
        except SnapshotEncodeError as exc:
            raise PluginError(self._plugin_at(exc.path), "session_start", exc) from exc

    def _plugin_at(self, path: str) -> str:
        """The plugin whose state ``path`` (``state.plugins.<name>...``) is in."""
        for name in sorted(self.plugins.states(), key=len, reverse=True):  # "a.b" before "a"
            root = f"state.plugins.{name}"
            if path == root or path.startswith((f"{root}.", f"{root}[")):
                return name
        return "?"  # pragma: no cover - every path of _check_plugin_states names a plugin

    def _check_plugin_states(self) -> None:
        """Raise ``SnapshotEncodeError`` (naming the path) if a checkpoint could not hold the
        plugins' states as they are now; costs a walk of those states, not of the history."""
        dicts = self._plugin_dicts()
        if all(map(is_flat_plain, dicts.values())) and all(map(_ascii_name, dicts)):
            return  # nothing to strip, all plain: the common case, without the walk
        try:
            states = copy_containers(dicts)
        except RecursionError:
            raise self._too_deep_error() from None
        stripped, _ = strip_live(states)
        encode_plain(stripped, root="state.plugins")  # as a checkpoint's error names it

    def _plugin_dicts(self) -> dict[str, dict[str, Any]]:
        """``plugins.states()``, each checked to be a dict, as a resume requires: a hook or a
        plugin's tool may have replaced its ``ctx.state`` with anything, and a checkpoint
        holding a list there saved well, then failed every resume (``SnapshotDecodeError``).
        Nor a dict of the stripped marker's form (``{"__stripped__": <str>}``): saved as it
        was, a resume took it for a state stripped whole and emptied it (``PluginRunner``);
        the stored form cannot tell the two apart, so the key alone is reserved.

        Raises:
            SnapshotEncodeError: naming the plugin's path (``state.plugins.<name>``).
        """
        states = self.plugins.states()
        for name, state in states.items():
            if not isinstance(state, dict):
                raise SnapshotEncodeError(
                    f"state.plugins.{name}",
                    state,
                    f"a plugin's ctx.state must be a dict, got {type(state).__name__}; "
                    "change it in place instead of replacing it",
                )
            if is_stripped_marker(state):
                raise SnapshotEncodeError(
                    f"state.plugins.{name}",
                    state,
                    f"a plugin's ctx.state must not be exactly {{{STRIPPED_KEY!r}: <str>}}, the "
                    "form of a stripped marker: a resume reads it as a state stripped whole and "
                    f"starts the plugin afresh; the key {STRIPPED_KEY!r} alone is reserved, so "
                    "rename it or keep another key beside it",
                )
        return states

    def _check_provider_state(self) -> None:
        """Raise ``SnapshotEncodeError`` (naming the path) if a checkpoint could not hold the
        provider state the model left. Checked when a turn changed it and no checkpoint was
        due: a model keeps its state until it returns another, and the rollback of every
        later checkpointed turn would restore the same unstorable one, so no checkpoint of
        the session would succeed again."""
        try:
            state = copy_containers(self._provider_state)
        except RecursionError:
            raise SnapshotEncodeError(
                "state.provider_state",
                self._provider_state,
                "it holds a cycle or nests deeper than a checkpoint can hold",
            ) from None
        self._refuse_live_provider_state()
        stripped, _ = strip_live(state)
        encode_plain(stripped, root="state.provider_state")

    def _refuse_live_provider_state(self) -> None:
        """Raise ``SnapshotEncodeError`` (naming the path) if the provider state holds a live
        value (``actors._strip``). A snapshot would strip it to a marker, as it strips a
        plugin's, but a model has no ``session_start`` to rebuild it in: it got the live
        object while the session ran and the marker after a resume, failing far from the
        cause. A marker restored from a checkpoint is plain data."""
        found = first_live(self._provider_state, "state.provider_state")
        if found is not None:
            path, value = found
            kind = type(value)
            raise SnapshotEncodeError(
                path,
                value,
                f"a live {kind.__module__}.{kind.__qualname__}; a model's provider state must "
                "be plain data, which the model gets back after a resume too: keep live "
                "objects on the model itself",
            )

    def _too_deep_error(self) -> SnapshotEncodeError:
        part, value = self._too_deep()
        return SnapshotEncodeError(
            part, value, "it holds a cycle or nests deeper than a checkpoint can hold"
        )

    def _too_deep(self) -> tuple[str, object]:
        """The part of the state that holds a cycle or nests too deep, and its value."""
        parts: list[tuple[str, object]] = [
            ("metadata", self._metadata),
            ("state.provider_state", self._provider_state),
        ]
        states = [*self.plugins.states().items(), *self.plugins.kept.items()]
        parts += [(f"state.plugins.{name}", state) for name, state in states]
        for part, value in parts:
            try:
                copy_containers(value)
            except RecursionError:
                return part, value
        return "plugins", self.plugins.states()

    def _state(self, *, with_messages: bool = True) -> dict[str, Any]:
        """The state (see ``state``); with ``with_messages=False`` its ``messages`` entry is
        ``None``, a place holder that keeps the order of the keys."""
        state: dict[str, Any] = {
            "session_id": self.session_id,
            "messages": [m.to_dict() for m in self._messages] if with_messages else None,
            "usage": self._usage.to_dict(),
            "metadata": copy_containers(self._metadata),
            "model": self.model_string,
            "instructions": self.template.instructions,
            "plugins": self._plugin_states(),
            "provider_state": copy_containers(self._provider_state),
            "turns": self._turns,
        }
        waiting = self.steering.waiting()
        if waiting:  # accepted steering outlives a stop or shutdown (none: no entry)
            state["steering"] = waiting
        return state

    def _plugin_states(self) -> dict[str, Any]:
        """Copies of the plugins' states as a checkpoint holds them: each live plugin's, in the
        template's order, then each state kept without its plugin, in the order it was
        restored (see ``PluginRunner``): carried unchanged, so a template that lists the
        plugin again gets it back. Copies, so no caller of ``state`` can change a kept one."""
        states: dict[str, Any] = copy_containers(self._plugin_dicts())
        kept = self.plugins.kept
        if kept:
            states.update(copy_containers(kept))
        return states

    # -- the turn loop -------------------------------------------------------------

    def _run_turn(self) -> Message:
        """The turn's steps, each with its ``current_step()`` key set on this thread."""
        token = STEP.set(None)
        try:
            return self._steps()
        finally:
            STEP.reset(token)

    def _steps(self) -> Message:
        tools = self._tool_list
        turn = self._turns + 1
        for step in range(1, self.max_steps + 1):
            STEP.set(StepKey(self.session_id, self.epoch, turn, step))
            self._take_steering()
            prompt = self._prompt()
            if self._prompt_plugins:
                prompt = self._piped_prompt(list(prompt))
            called = time.perf_counter()
            try:
                response = self._call_model(prompt, tools)
            except Exception:
                raise
            except BaseException as exc:  # CancelledError & co.: the call failed, no more
                if ends_session(exc):
                    raise
                raise ModelCallAborted(exc) from exc
            seconds = time.perf_counter() - called
            check_response(response)
            spent = response.usage
            self._usage += spent
            if self._has_plugins:
                response = self.plugins.pipe(
                    "after_model", response, lambda p, c, v: p.after_model(c, v), RESPONSE
                )
            message, refused = self._record(response, spent, seconds)
            if not message.tool_calls:
                return message
            if step == self.max_steps:
                # No model call is left to read these calls' results: running them only
                # did their side effects for a turn that fails (and a retry repeats them).
                break
            for index, call in enumerate(message.tool_calls):
                self._call_tool(call, refused.get(index))
        raise TurnLimitExceeded(self.max_steps)

    def _take_steering(self) -> None:
        """Append every waiting steering text as a user message (a ``steered`` event each),
        remembered in ``_steered`` so a failed turn puts them back in the queue."""
        for text in self.steering.drain():
            self._steered.append(text)
            self._messages.append(Message.user(text))
            self.event_buffer.publish("steered", text=text)

    def _prompt(self) -> Sequence[Message]:
        """System prompt then history, as an O(1) view (``before_model`` plugins get a list)."""
        if self._system is None and self.template.instructions:
            self._system = Message.system(self.template.instructions)
        return PromptView(self._system, self._messages)

    def _respond(self, prompt: Sequence[Message], tools: list[Tool]) -> ModelResponse:
        """Call a model of the ``respond`` form (see ``_model_call``)."""
        tenant = self._metadata.get("tenant_id")
        request = ModelRequest(
            prompt,
            tools,
            session_id=self.session_id,
            tenant_id=tenant if isinstance(tenant, str) else None,
            provider_state=self._provider_state,
            credentials=self._credentials,
            on_delta=self._publish_delta,
        )
        return self._respond_to(request)

    def _publish_delta(self, delta: Delta) -> None:
        """A streamed delta: published at once (``publish_now``: a worker writes it to the
        host without waiting for the turn's end)."""
        self.event_buffer.publish_now("delta", **delta.event_data())

    def _piped_prompt(self, prompt: list[Message]) -> list[Message]:
        return self.plugins.pipe(
            "before_model", prompt, lambda p, c, v: p.before_model(c, v), PROMPT
        )

    def _record(
        self, response: ModelResponse, spent: Usage, seconds: float
    ) -> tuple[Message, dict[int, str]]:
        """Append the model's message, made storable (see ``actors._storable``); return it and
        what to answer instead of running each call not to run, by its position in the
        message. ``spent``: the usage of the model's own response, which the session
        counted, and ``seconds``: how long the call took, both published with the message.

        ``spent``, not the usage of what ``after_model`` put in its place: a host sums the
        events' usage (``SessionInfo.usage``), and a rewritten answer's (zero by default)
        made the call free there; one that was not a ``Usage`` failed the turn.

        A call whose id is empty, or already in the history or the message, gets a new id
        (``actors._call_ids``): its tool message answers that one, and the conversation
        stays one every provider takes."""
        message, refused = storable_message(response.message)
        check_provider_state(response)
        stop_reason = stop_reason_of(response)
        message = self._call_ids.unique(message, self._messages)
        self._messages.append(message)
        if response.provider_state is not None:
            self._provider_state = response.provider_state
        data: dict[str, Any] = {
            "content": message.content,
            "tool_calls": [c.to_dict() for c in message.tool_calls] if message.tool_calls else [],
            "usage": spent.to_dict(),
            "seconds": seconds,
        }
        if stop_reason is not None:
            data["stop_reason"] = stop_reason
        self.event_buffer.publish("model_response", **data)
        return message, refused

    def _call_tool(self, call: ToolCall, refused: str | None = None) -> None:
        """Run the model's ``call`` and append its tool message; ``refused``: the answer to
        give instead of running it (see ``actors._storable.storable_message``).

        The tool message answers the model's call (its id and name) even when an
        ``on_tool_call`` plugin replaced it: providers pair the two by id, and an answer
        under the replacement's id left the model's call unanswered (a 400 on the next
        request)."""
        asked = call
        call = self.plugins.pipe(
            "on_tool_call", call, lambda p, c, v: p.on_tool_call(c, v), TOOL_CALL
        )
        self.event_buffer.publish("tool_call", **call.to_dict())
        tool = self.tools.get(call.name)
        ok = False
        started = time.perf_counter()
        if refused is not None:
            output = refused
        elif tool is None:
            output = f"error: unknown tool {call.name!r}; available: {sorted(self.tools)}"
        else:
            try:
                # Copies: the call is in the history (encoded once, as appended), and a
                # tool changing an argument in place changed the model's call there.
                result = tool(**copy.deepcopy(call.arguments))
            except BaseException as exc:  # CancelledError & co.: the tool failed, no more
                if ends_session(exc):
                    raise  # they keep their meaning: stop the process, end the session
                output = tool_error(exc)
            else:
                output, ok = tool_output(result), True
        self._messages.append(Message.tool(asked, output))
        seconds = time.perf_counter() - started
        self.event_buffer.publish(
            "tool_result", id=call.id, name=call.name, ok=ok, content=output, seconds=seconds
        )


AgentSession.__module__ = "actors"
for _cls in (Send, TakeSnapshot, GetHistory):
    _cls.__module__ = "actors"


def _ascii_name(name: object) -> bool:
    """Whether a plugin's name, a key of the checkpoint's plugin states, encodes as it is."""
    return type(name) is str and name.isascii()


def _started_well(ref: pykka.ActorRef[Any], timeout: float) -> bool:
    """Whether the session of ``ref`` ran its own ``on_start`` to success; waits up to
    ``timeout`` for it to be over (then raises ``pykka.Timeout``, as the ask would).

    Waits for the lock ``on_start`` releases when it is over (Pykka's ``ActorRef``
    keeps a weak reference to its actor; a collected actor has ended).
    """
    actor = ref._actor_weakref()
    if not isinstance(actor, AgentSession):
        return False
    if not actor._start_done.acquire(timeout=timeout):
        raise pykka.Timeout(f"{ref} did not finish its start within {timeout} s")
    return actor._start_ok
