"""``Election.run``, without I/O: the state of one run and what each event of it means, for the
sync front end (``redislock.Election.run``) and the asyncio one.

A run campaigns, and once elected calls the work with a cancellation handle of the term (a
``threading.Event``; asyncio: an ``asyncio.Event`` and the work's task cancelled); resigns when
the work returns; and campaigns again, until it is stopped. Decided here:

- A term's handle fires once, at the first of: leadership lost (the candidate lock's loss: a
  renewal that found the term gone, the lease clock run out, the term's connection closed), the
  run stopped, the work returned. It fires *before* the term is resigned, so a successor elected
  by the resignation starts after it; a term already lost when it is granted fires at once.
- A stopped run campaigns no more; a stop fires the handle of the term it interrupts.
- ``on_elected(term)`` once per term, before the work; ``on_new_leader(leader)`` once per change
  an observer of the run saw (a ``Leader``, or None: nobody leads), never after the run ended.
"""

from __future__ import annotations

import threading
import time
from typing import Any, Callable, List, Optional, TypeVar

from ._election import Leader
from ._flow import Flow, step

T = TypeVar("T")

__all__ = ["FOLLOW_BLOCK", "Run", "Term", "LOST", "STOPPED", "RETURNED", "CampaignCancelled", "cancellable"]

#: The longest one ``LOCK.OBSERVE … BLOCK`` of a run's observer waits (seconds): the observer
#: leaves within this once the run ended.
FOLLOW_BLOCK = 1.0

#: Why a term's handle fired.
LOST = "lost"
STOPPED = "stopped"
RETURNED = "returned"


#: A run's pauses between campaigns the server did not answer (restarting, failing over):
#: doubling from the first, up to the most; a run goes on until it is stopped.
RETRY_FIRST = 0.05
RETRY_MOST = 1.0


def next_pause(pause: float) -> float:
    return min(pause * 2, RETRY_MOST)


class CampaignCancelled(Exception):
    """Raised inside a campaign's flow (and by the campaign) when it was cancelled: the
    candidate's wait ended (``Election.cancel()``, or the run stopped)."""


class Term:
    """One term of a run and its cancellation handle (``fire``: sets the front end's event,
    cancels its task), fired once."""

    def __init__(self, term: int, fire: Callable[[], Any]) -> None:
        self.term = term
        self._fire = fire
        self._mutex = threading.Lock()
        #: Why the handle fired (``LOST``, ``STOPPED``, ``RETURNED``), None while it has not.
        self.why: Optional[str] = None
        #: When it fired (``time.monotonic()``).
        self.fired_at: Optional[float] = None

    def end(self, why: str) -> bool:
        """Fires the handle, the first time only: True then."""
        with self._mutex:
            if self.why is not None:
                return False
            self.why, self.fired_at = why, time.monotonic()
        self._fire()
        return True


class Run:
    """One run of an election (see the module)."""

    def __init__(
        self,
        on_elected: Optional[Callable[[int], Any]] = None,
        on_new_leader: Optional[Callable[[Optional[Leader]], Any]] = None,
    ) -> None:
        self.on_elected = on_elected
        self.on_new_leader = on_new_leader
        self._mutex = threading.Lock()
        self.stopped = False
        self.ended = False
        #: The term now worked in, None between terms.
        self.current: Optional[Term] = None
        #: Every term of the run, in order.
        self.terms: List[Term] = []

    def campaigning(self) -> bool:
        """Campaign (again): not stopped."""
        return not self.stopped

    def stop(self) -> None:
        """No more campaigns; the term now worked in (if any) ends at once."""
        with self._mutex:
            self.stopped = True
            term = self.current
        if term is not None:
            term.end(STOPPED)

    def lost(self) -> None:
        """The candidate lost leadership: the term now worked in ends at once."""
        term = self.current
        if term is not None:
            term.end(LOST)

    def elected(self, term: int, fire: Callable[[], Any], leading: Callable[[], bool]) -> Term:
        """A term was granted: the term to work in, fired already if the run was stopped or it
        was lost meanwhile (``leading()``, asked once the term is current, so that a loss
        signalled from now on finds it: its lease clock still runs, no loss signalled)."""
        started = Term(term, fire)
        with self._mutex:
            self.current = started
            self.terms.append(started)
            stopped = self.stopped
        if stopped:
            started.end(STOPPED)
        elif not leading():
            started.end(LOST)
        return started

    def working(self, term: Term) -> bool:
        """Start the work of ``term``: not when it ended already (lost, stopped)."""
        return term.why is None

    def finished(self, term: Term) -> None:
        """The work of ``term`` returned (or raised): its handle fires before the resignation."""
        term.end(RETURNED)
        with self._mutex:
            if self.current is term:
                self.current = None

    def seen(self, leader: Optional[Leader]) -> bool:
        """An observer of the run saw a change: call ``on_new_leader`` (not once the run ended)."""
        return self.on_new_leader is not None and not self.ended

    def end(self) -> None:
        """The run is over: no more callbacks."""
        with self._mutex:
            self.ended = True
            self.stopped = True


def cancellable(flow: Flow[T], cancelled: Callable[[], bool]) -> Flow[T]:
    """``flow`` (a campaign), ended with ``CampaignCancelled`` as soon as ``cancelled()`` says so:
    looked at before each request and on each reply or error (an error made by cancelling: the
    wait's connection shut down under it). A reply is never given to the flow once cancelled,
    so a grant that came with the cancellation is not taken: its connection, closed by the front
    end, ends it in the server."""
    reply: Any = None
    error: Optional[Exception] = None
    while True:
        if cancelled():
            flow.close()
            raise CampaignCancelled("the campaign was cancelled")
        done, value = step(flow, reply, error)
        if done:
            result: T = value
            return result
        if cancelled():
            flow.close()
            raise CampaignCancelled("the campaign was cancelled")
        try:
            reply, error = (yield value), None
        except Exception as err:  # the flow decides what an error means
            reply, error = None, err
