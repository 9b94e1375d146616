"""The native core's ids of a task's peers, with room for tasks that join at run time.

The core (``tensorverbs._core.Rendezvous``) knows its peers as ids into a list of names
fixed when it starts. A cluster that grows needs spare ids: the list ends with
``spare`` placeholders, and a task that joins (:meth:`TaskIds.add`) takes a free one. A
joined task that is gone (:meth:`TaskIds.release`) frees its id for the next. The core
names a peer by its placeholder in its messages; :meth:`TaskIds.named` puts the task's
name back.
"""
from __future__ import annotations

import asyncio
import threading
from typing import Iterable

from ..cluster import TaskName
from ..errors import InvalidArgumentError, ResourceExhaustedError, UnavailableError


def _placeholder(slot: int) -> str:
    return f"<task joining at run time #{slot}>"


class TaskIds:
    """``{task: core id}`` of the cluster's ``tasks``, then ``spare`` ids for tasks that join."""

    def __init__(self, tasks: Iterable[TaskName], spare: int) -> None:
        tasks = list(tasks)
        self._ids = {task: i for i, task in enumerate(tasks)}
        self._first_spare = len(tasks)
        #: the core's names, by id (a placeholder for a spare id)
        self.core_names = [str(task) for task in tasks] + [_placeholder(s) for s in range(spare)]
        #: the tasks' names, by id (a free spare id's is its placeholder)
        self.names = list(self.core_names)
        self._free = list(range(self._first_spare, len(self.core_names)))
        self.spare_total = spare
        self._lock = threading.Lock()
        #: the futures of the set-ups waiting for their task to join, each with its loop
        self._waiters: list[tuple[asyncio.AbstractEventLoop, asyncio.Future]] = []
        #: channel set-ups waiting for their task to join
        self.waiting = 0

    def __getitem__(self, task: TaskName) -> int:
        """The id of ``task``; UnavailableError if it has none (it joined and left)."""
        try:
            return self._ids[task]
        except KeyError:
            raise UnavailableError(f"{task} left the cluster") from None

    def task(self, pid: int) -> TaskName:
        """The task that holds id ``pid``; UnavailableError if none does (it left)."""
        with self._lock:
            for task, held in self._ids.items():
                if held == pid:
                    return task
        raise UnavailableError(f"no task holds the core's id {pid}")

    def __contains__(self, task: TaskName) -> bool:
        return task in self._ids

    @property
    def spare(self) -> int:
        """How many more tasks may join."""
        return len(self._free)

    def joined(self, task: TaskName) -> bool:
        """Whether ``task`` holds an id it took when it joined at run time."""
        return self._ids.get(task, -1) >= self._first_spare

    def check_room(self, task: TaskName) -> None:
        """ResourceExhaustedError unless ``task`` has an id or can get one."""
        if task not in self._ids and not self.spare:
            raise ResourceExhaustedError(
                f"{task} cannot join: no room is left for tasks joining at run time "
                f"({self.spare_total} spare, each taken until its task is gone; "
                "Server(spare_tasks=...) sets how many)")

    def add(self, task: TaskName) -> None:
        """Give ``task`` a free spare id (nothing if it has one); ResourceExhaustedError
        when none is free."""
        with self._lock:
            self.check_room(task)
            if task in self._ids:
                return
            slot = self._free.pop(0)
            self._ids[task] = slot
            self.names[slot] = str(task)
            waiters, self._waiters = self._waiters, []
        for loop, waiter in waiters:  # each looks again: its task, or no room left
            loop.call_soon_threadsafe(_wake, waiter)

    def release(self, task: TaskName) -> bool:
        """Free the id of ``task``, which joined at run time and is gone, for the next task
        that joins; False (nothing done) for a task of the cluster it started with."""
        with self._lock:
            if not self.joined(task):
                return False
            slot = self._ids.pop(task)
            self.names[slot] = self.core_names[slot]
            self._free.append(slot)
            self._free.sort()
            return True

    async def wait_for(self, task: TaskName, timeout: float) -> int:
        """The id of ``task``, waiting (on the event loop, holding no thread) up to
        ``timeout`` seconds for it to join while there is room; InvalidArgumentError naming
        it if it does not."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        self.waiting += 1
        try:
            while True:
                with self._lock:
                    if task in self._ids or not self.spare:
                        break
                    joined = loop.create_future()
                    self._waiters.append((loop, joined))
                try:
                    await asyncio.wait_for(joined, deadline - loop.time())
                except asyncio.TimeoutError:
                    with self._lock:
                        if (loop, joined) in self._waiters:
                            self._waiters.remove((loop, joined))
                    break
        finally:
            self.waiting -= 1
        with self._lock:
            if task not in self._ids:
                waited = f" (waited {timeout:g} s for it to join)" if self.spare else ""
                raise InvalidArgumentError(f"task {task} is not in the cluster{waited}")
            return self._ids[task]

    def named(self, message: str) -> str:
        """``message`` of the core with each placeholder replaced by its task's name."""
        for core_name, name in zip(self.core_names, self.names):
            if core_name != name:
                message = message.replace(core_name, name)
        return message


def _wake(waiter: asyncio.Future) -> None:
    if not waiter.done():
        waiter.set_result(None)
