"""A task whose every call runs inside a context of its trial (its trace, its recording scope),
wherever the call really runs: inside the coroutine for an ``async def`` task."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any, TypeVar, cast

_Function = TypeVar("_Function", bound=Callable[..., Any])


def within(function: _Function, enter: Callable[[], AbstractContextManager[Any]]) -> _Function:
    """``function``, run inside ``enter()`` each time it is called: for a coroutine function,
    inside the coroutine, where the event loop's task runs it (pytest-asyncio runs a test in a
    context it copied before our hooks ran, so a context entered outside would not reach it)."""
    if inspect.iscoroutinefunction(function):

        @functools.wraps(function)
        async def within_async(*args: Any, **kwargs: Any) -> Any:
            with enter():
                return await function(*args, **kwargs)

        return cast(_Function, within_async)

    @functools.wraps(function)
    def within_sync(*args: Any, **kwargs: Any) -> Any:
        with enter():
            return function(*args, **kwargs)

    return cast(_Function, within_sync)
