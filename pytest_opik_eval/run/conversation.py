"""Conversations as trials: the ``eval_conversation`` fixture's :class:`Conversation`, which
drives one whole conversation between the app and a simulated user built from the trial's item.

One trial is one conversation. Its output is the transcript (``conversation``, the list of
``{"role", "content"}`` messages Opik's conversation metrics read unchanged), the last reply
(``output``), the number of turns and what ended it; each turn is a span of the trial, the app's
own spans nested under it, and the simulated user's calls in a span of their own. A conversation
that raises (the app, or the simulated user's model) leaves its trial pending: it reruns whole.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Callable, Mapping
from typing import Any, cast

from pytest_opik_eval._compat_opik import SIMULATOR_FAILED, simulated_user
from pytest_opik_eval.run.manual_spans import trace
from pytest_opik_eval.store.records import SIMULATOR_TAG, TURN_TAG

# What a simulated user answers when its goal is met (the default persona asks for it): the
# conversation ends there, and the token is not part of it.
STOP = "<<END>>"
MAX_TURNS = 5  # the default, as the Opik SDK's run_simulation

Message = dict[str, str]
User = Callable[[list[Message]], Any]


class ConversationError(Exception):
    """The conversation cannot go on: a simulated user that cannot be made, or whose model failed."""


class Conversation:
    """One trial's conversation, from its dataset item: ``persona`` and ``goal`` (the simulated
    user's), ``first_message`` (else the simulated user opens), ``max_turns``, and
    ``user_responses`` (a scripted user: its messages in order, then the end)."""

    def __init__(self, item: Mapping[str, Any]) -> None:
        self.item = item

    def run(
        self,
        app: Callable[..., Any],
        *,
        user: Any = None,
        max_turns: int | None = None,
        stop: Callable[[list[Message]], bool] | None = None,
    ) -> dict[str, Any]:
        """Drive the conversation to its end and return the trial's output. ``app(message)``
        (or ``app(message, history=[...])``, the messages before it) returns the reply, a string
        or a ``{"role": "assistant", "content"}`` message. ``user``: the simulated user, a callable
        ``(history) -> str`` or an object with ``generate_response(history)`` (the Opik SDK's
        ``SimulatedUser``); by default one made from the item. It ends when the user answers
        ``<<END>>`` (or None), when ``stop(conversation)`` holds after a reply, or at
        ``max_turns``."""
        driver = _Driver(self.item, user, max_turns, stop)
        while not driver.done():
            message = driver.opening()
            if message is None:
                message = driver.accepted(_user_message(driver.user, driver.history))
                if message is None:
                    break
            with driver.turn(message) as span:
                span.output = driver.replied(_call_app(app, message, driver.history[:-1]))
        return driver.output()

    async def arun(
        self,
        app: Callable[..., Any],
        *,
        user: Any = None,
        max_turns: int | None = None,
        stop: Callable[[list[Message]], bool] | None = None,
    ) -> dict[str, Any]:
        """:meth:`run` for an async app (its reply awaited) in an async test; a synchronous
        simulated user runs in a thread (``asyncio.to_thread``, which carries the trial)."""
        driver = _Driver(self.item, user, max_turns, stop)
        while not driver.done():
            message = driver.opening()
            if message is None:
                message = driver.accepted(await _auser_message(driver.user, driver.history))
                if message is None:
                    break
            with driver.turn(message) as span:
                reply = _call_app(app, message, driver.history[:-1])
                span.output = driver.replied(await reply if inspect.isawaitable(reply) else reply)
        return driver.output()


class _Driver:
    """The state of one conversation: its transcript, the turn spans, and why it ended."""

    def __init__(
        self,
        item: Mapping[str, Any],
        user: Any,
        max_turns: int | None,
        stop: Callable[[list[Message]], bool] | None,
    ) -> None:
        self.max_turns = _max_turns(max_turns if max_turns is not None else item.get("max_turns", MAX_TURNS))
        self.stop = stop
        self.history: list[Message] = []
        self.first: str | None = _first_message(item)
        self.stopped_by = "max_turns"
        self.ended = False  # by the user or the stop rule
        # Checked now, made when first asked: a bad item fails before the app's first (paid)
        # turn; a conversation of the item's first message and one turn needs no user.
        self._user: Any = user
        needed = self.first is None or self.max_turns > 1
        self._make_user = _no_user if user is not None else _user_of(item, needed=needed)

    @property
    def user(self) -> Any:
        """The simulated user, made from the item when first asked: a conversation the item's
        first message and one turn make needs none."""
        if self._user is None:
            self._user = self._make_user()
        return self._user

    def done(self) -> bool:
        return self.ended or len(self.history) // 2 >= self.max_turns

    def opening(self) -> str | None:
        """The item's first message, for the first turn."""
        return self.first if not self.history else None

    def accepted(self, message: Any) -> str | None:
        """The simulated user's message, or None when it ended the conversation."""
        if message is None or (isinstance(message, str) and message.strip() == STOP):
            self.stopped_by, self.ended = "user", True
            return None
        if not isinstance(message, str):
            raise ConversationError(
                f"the simulated user returned {type(message).__name__}, not the user's next message (a str)"
            )
        if message.startswith(SIMULATOR_FAILED):
            raise ConversationError(f"the simulated user's model failed: {message}")
        return message

    def turn(self, message: str) -> Any:
        self.history.append({"role": "user", "content": message})
        number = len(self.history) // 2 + 1
        return trace.span(
            f"turn {number}",
            input={"role": "user", "content": message},
            metadata={"turn": number},
            tags=[TURN_TAG],
        )

    def replied(self, reply: Any) -> Message:
        content = reply.get("content") if isinstance(reply, Mapping) else reply
        if not isinstance(content, str):
            raise ConversationError(
                f"the app replied {type(reply).__name__}, not a str or a "
                "{'role': 'assistant', 'content': str} message"
            )
        message = {"role": "assistant", "content": content}
        self.history.append(message)
        if self.stop is not None and self.stop(list(self.history)):
            self.stopped_by, self.ended = "rule", True
        return message

    def output(self) -> dict[str, Any]:
        replies = [m["content"] for m in self.history if m["role"] == "assistant"]
        return {
            "conversation": self.history,
            "output": replies[-1] if replies else None,
            "turns": len(replies),
            "stopped_by": self.stopped_by,
        }


def _user_message(user: Any, history: list[Message]) -> Any:
    with trace.span("simulated user", tags=[SIMULATOR_TAG], input={"messages": len(history)}) as span:
        message = _simulator(user)(list(history))
        span.output = {"content": message}
        return message


async def _auser_message(user: Any, history: list[Message]) -> Any:
    with trace.span("simulated user", tags=[SIMULATOR_TAG], input={"messages": len(history)}) as span:
        simulate = _simulator(user)
        if inspect.iscoroutinefunction(simulate):
            message = await simulate(list(history))
        else:
            message = await asyncio.to_thread(simulate, list(history))
        span.output = {"content": message}
        return message


def _simulator(user: Any) -> Callable[[list[Message]], Any]:
    generate = getattr(user, "generate_response", None)
    found = generate if callable(generate) else user if callable(user) else None
    if found is None:
        raise ConversationError(
            f"user={type(user).__name__}: a simulated user is a callable (history) -> str, or an object "
            "with generate_response(history), such as the Opik SDK's SimulatedUser"
        )
    return cast(Callable[[list[Message]], Any], found)


def _call_app(app: Callable[..., Any], message: str, history: list[Message]) -> Any:
    if _takes_history(app):
        return app(message, history=list(history))
    return app(message)


def _takes_history(app: Callable[..., Any]) -> bool:
    try:
        parameters = inspect.signature(app).parameters
    except (TypeError, ValueError):  # a builtin or C callable: its message only
        return False
    return "history" in parameters or any(p.kind is p.VAR_KEYWORD for p in parameters.values())


def _first_message(item: Mapping[str, Any]) -> str | None:
    first = item.get("first_message")
    if first is not None and not isinstance(first, str):
        raise ConversationError(f"the item's first_message is {type(first).__name__}, not a str")
    return first


def _max_turns(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConversationError(f"max_turns must be a whole number of turns, 1 or more; got {value!r}")
    return value


def _user_of(item: Mapping[str, Any], *, needed: bool) -> Callable[[], Any]:
    """What makes the item's simulated user: its scripted ``user_responses``, else the Opik SDK's
    ``SimulatedUser`` from its ``persona`` and ``goal`` (and ``simulator_model``). The item is
    checked now (when a user is ``needed``); the SDK's user, which loads a model, is made later."""
    scripted = item.get("user_responses")
    if scripted is not None:
        if not isinstance(scripted, list) or not all(isinstance(m, str) for m in scripted):
            raise ConversationError(
                "the item's user_responses must be a list of str, the user's messages in order"
            )
        return lambda: _Scripted(scripted)
    persona = item.get("persona")
    if not isinstance(persona, str):
        if needed:
            raise ConversationError(
                "no simulated user: give the item a persona (and a goal) for the Opik SDK's "
                "SimulatedUser, or user_responses (a scripted user), or pass user= to run() "
                "(a callable (history) -> str)"
            )
        return _no_user
    goal = item.get("goal")
    described = persona + (f"\nYour goal: {goal}" if goal else "")
    described += f"\nWhen your goal is met, or cannot be, answer exactly {STOP} and nothing else."

    def make() -> Any:
        try:
            return simulated_user(described, item.get("simulator_model"))
        except ImportError:
            raise ConversationError(
                "the item's persona needs the Opik SDK's SimulatedUser (pip install opik), or pass "
                "user= to run() (a callable (history) -> str)"
            ) from None

    return make


def _no_user() -> Any:
    raise AssertionError("a conversation with a simulated user given, or none needed, asked to make one")


class _Scripted:
    """A user whose messages are written in the item: each in turn, then the end."""

    def __init__(self, messages: list[str]) -> None:
        self._messages = iter(messages)

    def __call__(self, history: list[Message]) -> str | None:
        return next(self._messages, None)
