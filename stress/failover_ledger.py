"""The failover soak's books: the resource that checks fences, the record of every acknowledged
grant, the count of lost grants and its table. No I/O; `self_test()` shows the counts catch
what they are meant to catch before a run trusts a zero.

Times are `time.monotonic()` of the soak's one process.

An acknowledged grant is one that `Lock.acquire()` returned True for: the client was told it
holds the lock. Its hold, as the client sees it, lasts from `ack` (when acquire returned) to
`end`: the moment the client sent its release, or the end of its local lease clock
(`ack + lease_left` read at `ack`: conservative, never after the server's lease end),
whichever comes first.

Lost (the soak also counts a grant missing on the new master right after a failover while its
client held it): of two acknowledged grants A and B of one name, A acknowledged first, they
conflict
  - if B was acknowledged while A was held (`B.ack < A.end`): both clients held the lock at once;
  - or if B's fence is not above A's (`B.fence <= A.fence`): B came from a server that had not
    seen A's grant.
Of a conflicting pair the grant with the lower fence is lost (its hold is on a master whose
data does not decide any more; the resource refuses its writes once the other has written);
with equal fences both are, and that is a duplicate fence besides. A lost grant is counted once,
however many grants it conflicts with, and put down to the time of the later grant of its first
conflicting pair (when the loss showed: after the fault, where the grant itself may be older).
Without a fault nothing conflicts: B is granted only after A's release was processed or its
lease ended in the server, both after `A.end`, and fences grow with every grant.

Stale write accepted: an accepted write whose fence is below the highest fence accepted before it
for that name, or equal to it but from another grant (another token). The resource accepts only
fences >= the highest it saw, so only the second can happen, and only if two grants had one fence.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Tuple


@dataclass
class Grant:
    name: str
    worker: int
    token: bytes
    fence: int
    ack: float
    lease_end: float
    segment: int
    release_sent: Optional[float] = None
    #: The release's answer: "ok", "gone" (the lock was no longer held), or an error's class.
    release: Optional[str] = None
    release_answered: Optional[float] = None

    @property
    def end(self) -> float:
        return self.lease_end if self.release_sent is None else min(self.release_sent, self.lease_end)

    @property
    def vanished(self) -> bool:
        """The release, answered before the local lease clock ran out, found the lock gone: the
        hold vanished while the server's lease still ran. (A release that redis-py sent again
        after a broken connection may find its own earlier release: reported, not counted as
        lost.)"""
        return (self.release == "gone" and self.release_answered is not None
                and self.release_answered < self.lease_end)


@dataclass
class Write:
    name: str
    fence: int
    token: bytes
    at: float
    accepted: bool


class Resource:
    """Per lock name, accepts a write only if its fence is >= the highest fence it accepted;
    records every write, accepted or refused."""

    def __init__(self) -> None:
        self.mutex = threading.Lock()
        self.top: Dict[str, int] = {}
        self.writes: List[Write] = []

    def write(self, name: str, fence: int, token: bytes, now: float) -> bool:
        with self.mutex:
            top = self.top.get(name)
            accepted = top is None or fence >= top
            if accepted:
                self.top[name] = fence
            self.writes.append(Write(name, fence, token, now, accepted))
            return accepted


def stale_accepted(writes: List[Write]) -> List[Write]:
    """The accepted writes that were stale (see the module's text), found from the record alone."""
    top: Dict[str, Tuple[int, bytes]] = {}
    stale = []
    for w in writes:
        if not w.accepted:
            continue
        seen = top.get(w.name)
        if seen is not None and (w.fence < seen[0] or (w.fence == seen[0] and w.token != seen[1])):
            stale.append(w)
        if seen is None or w.fence >= seen[0]:
            top[w.name] = (w.fence, w.token)
    return stale


@dataclass
class Verdict:
    #: index into the grants → (why, index of the grant whose acknowledgement showed the loss)
    lost: Dict[int, Tuple[str, int]] = field(default_factory=dict)
    duplicate_fences: int = 0


def lost_grants(grants: List[Grant]) -> Verdict:
    """The lost grants (see the module's text), by index into `grants`."""
    verdict = Verdict()
    by_name: Dict[str, List[int]] = {}
    for i, g in enumerate(grants):
        by_name.setdefault(g.name, []).append(i)
    for indices in by_name.values():
        indices.sort(key=lambda i: grants[i].ack)
        active: List[int] = []  # earlier grants still held
        best: Optional[int] = None  # the earlier grant with the highest fence
        for i in indices:
            b = grants[i]
            active = [a for a in active if grants[a].end > b.ack]
            for a in active:
                _lose(verdict, grants, a, i, "acknowledged while another grant was held")
            if best is not None and b.fence <= grants[best].fence:
                _lose(verdict, grants, best, i, "fence not above an earlier acknowledged grant's")
            active.append(i)
            if best is None or b.fence > grants[best].fence:
                best = i
    return verdict


def _lose(verdict: Verdict, grants: List[Grant], a: int, b: int, why: str) -> None:
    fa, fb = grants[a].fence, grants[b].fence
    if fa == fb:
        verdict.duplicate_fences += 1
    for i in ([a] if fa < fb else [b] if fb < fa else [a, b]):
        verdict.lost.setdefault(i, (why, b))


LEGEND = """\
failovers: faults made and recovered from. grants: acknowledged (acquire returned True), by when.
lost: acknowledged grants whose hold vanished while the client held it: missing on the new master
right after a failover, or in conflict with another acknowledged grant (both held at once, or a
later grant with a fence not above it: stress/failover_ledger.py), put down to the fault after
which it showed. stale accepted: writes the resource accepted with a fence older than one it had
seen (must be 0); stale refused: writes it refused. not replicated: NotReplicatedError (the grant
was released, not reported). gone at release: releases answered "not held" while the lease ran
(the hold went after the client stopped relying on it; not counted as lost). errors: other failed
acquires (connection errors, NOREPLICAS, READONLY)."""


def markdown(rows: List[Dict[str, Any]]) -> List[str]:
    cols = ["failovers", "grants", "lost", "stale accepted", "stale refused", "not replicated", "gone at release",
            "errors"]
    lines = ["| leg | fault | " + " | ".join(cols) + " |", "| --- | --- |" + " ---: |" * len(cols)]
    for r in rows:
        lines.append(f"| {r['leg']} | {r['fault']} | " + " | ".join(str(r.get(c, 0)) for c in cols) + " |")
    return lines


def self_test() -> None:
    """The counts on made-up histories: each kind of loss is caught, a clean history is not."""

    def g(fence: int, ack: float, end: float, release: Optional[float] = None, name: str = "n") -> Grant:
        return Grant(name, 0, b"t%d" % fence, fence, ack, end, 0, release_sent=release)

    clean = [g(1, 0.0, 2.0, 0.5), g(2, 0.6, 2.6, 1.0), g(3, 2.0, 4.0), g(1, 0.1, 2.1, name="other")]
    assert lost_grants(clean).lost == {}, "a clean history counted as lost"
    # A failover: the new master grants (higher fence) while the first holder's lease runs.
    overlap = [g(1, 0.0, 2.0), g(10, 1.0, 3.0, 1.2)]
    assert lost_grants(overlap).lost.keys() == {0}, "an overlap not caught"
    # Split brain: the old master grants (lower fence) after the new one did.
    behind = [g(10, 0.0, 2.0, 0.1), g(2, 0.5, 2.5, 0.6)]
    assert lost_grants(behind).lost.keys() == {1}, "a fence going back not caught"
    twins = [g(5, 0.0, 2.0, 0.1), Grant("n", 1, b"other", 5, 0.5, 2.5, 0)]
    verdict = lost_grants(twins)
    assert verdict.lost.keys() == {0, 1} and verdict.duplicate_fences == 1, "a duplicate fence not caught"

    r = Resource()
    assert r.write("n", 5, b"a", 0.0) and r.write("n", 5, b"a", 0.1) and not r.write("n", 4, b"b", 0.2)
    assert r.write("n", 6, b"c", 0.3) and stale_accepted(r.writes) == [], "a clean record counted as stale"
    forged = r.writes + [Write("n", 3, b"d", 0.4, True), Write("n", 6, b"e", 0.5, True)]
    assert len(stale_accepted(forged)) == 2, "a stale accepted write not caught"
