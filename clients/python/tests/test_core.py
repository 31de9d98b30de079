"""The I/O-free core (``redislock._core``) without a server: the flows are driven with replies
and errors given here, the schedule with moments given here."""

from __future__ import annotations

import time
from types import SimpleNamespace
from typing import Any, Callable, List, Tuple

import pytest
from redis.exceptions import (
    AskError,
    ClusterError,
    ConnectionError,
    LockNotOwnedError,
    ResponseError,
    TryAgainError,
)

from helpers import must
from redislock import StaleFenceError, UnsupportedError, _core, _flow
from redislock._core import Pause, Spec
from redislock._lease import Hold, Schedule

SPEC = Spec("lock:x", 3000, [], auto_renew=True, ephemeral=False, timeout_given=True)


def script(*answers: Any) -> Tuple[Callable[[Any], Any], List[Any]]:
    """A ``carry`` that answers the flow's requests in turn (an exception is raised), and the
    list of the requests it saw."""
    seen: List[Any] = []
    left = list(answers)

    def carry(request: Any) -> Any:
        seen.append(request)
        answer = left.pop(0)
        if isinstance(answer, BaseException):
            raise answer
        return answer

    return carry, seen


def held(token: bytes = b"t", fence: int = 7) -> Any:
    now = time.monotonic()
    return SimpleNamespace(token=token, fence=fence, hold=Hold("lock:x", token, fence, 3000, now, True))


# --- reply → outcome, re-queue rules ------------------------------------------------------------


def test_a_grant_and_a_refusal() -> None:
    carry, seen = script([b"t", 5])
    assert must(_core.drive(_core.acquire(SPEC, b"t", None, 0.1), carry))[:2] == (b"t", 5)
    assert seen[0].args[:5] == ["LOCK.ACQUIRE", "lock:x", b"t", "PX", 3000]
    assert seen[0].wait_until is None and seen[0].idempotent
    carry, _ = script(None)
    assert _core.drive(_core.acquire(SPEC, b"t", None, 0.1), carry) is None


def test_a_wait_is_sent_again_after_a_redirect_within_its_timeout() -> None:
    carry, seen = script(TryAgainError("TRYAGAIN moving"), None, AskError("1 127.0.0.1:7001"), None, [b"t", 9])
    assert must(_core.drive(_core.acquire(SPEC, b"t", 5000, 0.1), carry))[:2] == (b"t", 9)
    sends = [s for s in seen if not isinstance(s, Pause)]
    assert len(sends) == 3 and [type(s) for s in seen].count(Pause) == 2  # a short pause each
    assert all(s.wait_until == sends[0].wait_until and not s.idempotent for s in sends)
    # Without a wait, a redirect the client could not follow is the caller's.
    carry, _ = script(ClusterError("TTL exhausted."))
    with pytest.raises(ClusterError):
        _core.drive(_core.acquire(SPEC, b"t", None, 0.1), carry)


def test_a_wait_whose_connection_dropped_is_sent_again_once() -> None:
    carry, seen = script(ConnectionError("cut"), ConnectionError("cut again"))
    with pytest.raises(ConnectionError):
        _core.drive(_core.acquire(SPEC, b"t", 5000, 0.1), carry)
    assert len(seen) == 2


def test_a_wait_cut_short_goes_on_and_one_at_its_end_does_not() -> None:
    carry, seen = script(None, [b"t", 3])  # the first came back early (a read bound)
    assert _core.drive(_core.acquire(SPEC, b"t", 5000, 0.1), carry) is not None
    assert len(seen) == 2
    carry, seen = script(None)
    assert _core.drive(_core.acquire(SPEC, b"t", 1, 0.1), carry) is None  # 1 ms: over


def test_a_wait_without_limit_goes_on_after_an_empty_answer() -> None:
    carry, seen = script(None, None, [b"t", 3])  # two parts cut short by a read bound
    assert _core.drive(_core.acquire(SPEC, b"t", 0, 0.1), carry) is not None
    assert len(seen) == 3 and all(s.forever and s.args[-2:] == ["BLOCK", 0] for s in seen)


def test_a_key_of_another_type_is_polled() -> None:
    wrong = ResponseError("WRONGTYPE Operation against a key holding the wrong kind of value")
    carry, seen = script(wrong, None, [b"t", 4])
    assert _core.drive(_core.acquire(SPEC, b"t", 5000, 0.25), carry) is not None
    assert isinstance(seen[1], Pause) and seen[1].seconds == 0.25
    carry, _ = script(wrong)
    assert _core.drive(_core.acquire(SPEC, b"t", None, 0.25), carry) is None


# --- error translation --------------------------------------------------------------------------


def test_only_notowner_and_stalefence_are_lock_errors() -> None:
    local = held()
    for error in ("WRONGTYPE Operation against a key holding the wrong kind of value",
                  "ERR unknown command 'NOSUCH', with args beginning with: "):
        carry, _ = script(ResponseError(error), None)  # LOCK.INFO: the lock's key is a lock
        with pytest.raises(ResponseError) as caught:
            _core.drive(_core.call("lock:x", local, ["NOSUCH"]), carry)
        assert type(caught.value) is ResponseError
    carry, _ = script(ResponseError("NOTOWNER the token does not hold the lock"))
    with pytest.raises(LockNotOwnedError):
        _core.drive(_core.call("lock:x", local, ["GET", "k"]), carry)
    carry, _ = script(ResponseError("STALEFENCE fence 3 is older than 5"))
    with pytest.raises(StaleFenceError) as stale:
        _core.drive(_core.fence_call("g", 3, ["GET", "k"]), carry)
    assert (stale.value.fence, stale.value.highest) == (3, 5)
    carry, _ = script(ResponseError("ERR unknown command 'LOCK.CALL', with args beginning with: "))
    with pytest.raises(UnsupportedError):
        _core.drive(_core.call("lock:x", local, ["GET", "k"]), carry)


def test_a_gate_needs_an_integer_fence() -> None:
    for fence in (None, "7", True):
        with pytest.raises(TypeError, match="fence"):
            _core.drive(_core.fence_call("g", fence, ["GET", "k"]), script()[0])


def test_a_lost_hold_releases_and_says_so() -> None:
    local = held()
    local.hold.mark_lost(time.monotonic())
    carry, seen = script(1)
    with pytest.raises(LockNotOwnedError):
        _core.drive(_core.release("lock:x", local, lambda: None), carry)
    assert seen[0].args == ["LOCK.RELEASE", "lock:x", b"t"] and local.token is None


# --- the lease clock and the schedule -----------------------------------------------------------


def test_the_schedule_renews_every_third_and_loses_at_the_lease_end() -> None:
    now = time.monotonic()
    hold = Hold("a", b"t", 1, 3000, now, auto_renew=True)
    plain = Hold("b", b"u", 2, 1500, now, auto_renew=False)
    schedule = Schedule()
    schedule.add(hold)
    schedule.add(plain)
    assert schedule.next_wake() == pytest.approx(now + 1.0)
    renew, lost = schedule.due(now + 1.0)
    assert [h for h, _ in renew] == [hold] and lost == []
    assert renew[0][1].args == ["LOCK.EXTEND", "a", b"t", "PX", 3000]
    # No renewal of a hold without auto-renew: its lease clock runs out (1 % + 2 ms early).
    assert schedule.next_wake() == pytest.approx(now + 1.5 - 0.015 - 0.002)
    renew, lost = schedule.due(now + 1.49)
    assert renew == [] and lost == [plain] and plain.lost and plain.left() == 0.0
    # The renewal sent at now + 1 was answered: the lease counts from then.
    assert hold.renewed(now + 1.0, 1) is False
    schedule.add(hold)
    assert hold.lease_end == pytest.approx(now + 4.0 - 0.03 - 0.002)
    assert schedule.next_wake() == pytest.approx(now + 2.0)


def test_a_renewal_unanswered_until_the_lease_end_is_a_loss() -> None:
    now = time.monotonic()
    hold = Hold("a", b"t", 1, 3000, now, auto_renew=True)
    schedule = Schedule()
    schedule.add(hold)
    renew, _ = schedule.due(now + 1.0)  # sent; no answer comes
    assert hold.renewing and schedule.next_wake() == hold.lease_end
    _, lost = schedule.due(hold.lease_end)
    assert lost == [hold]
    assert hold.renewed(now + 1.0, 1) is False  # an answer after the loss changes nothing
    assert hold.lost and hold.left() == 0.0


def test_renewal_outcomes() -> None:
    now = time.monotonic()
    hold = Hold("a", b"t", 1, 3000, now, auto_renew=True)
    assert hold.renewed(now, 0) is True and hold.gone  # answered 0: gone
    hold = Hold("a", b"t", 1, 3000, now, auto_renew=True)
    wrong = ResponseError("WRONGTYPE Operation against a key holding the wrong kind of value")
    assert hold.renewed(now, error=wrong) is True
    hold = Hold("a", b"t", 1, 3000, now, auto_renew=True)
    assert hold.renewed(now, error=ResponseError("READONLY You can't write")) is False
    assert hold.renewed(now, error=ConnectionError("cut")) is False
    assert hold.next_renew - time.monotonic() <= hold.retry_pause  # tried again soon


def test_released_holds_leave_the_schedule() -> None:
    now = time.monotonic()
    schedule = Schedule()
    holds = [Hold(f"k{i}", b"t", i, 3000, now, auto_renew=True) for i in range(200)]
    for hold in holds:
        schedule.add(hold)
    for hold in holds[:150]:
        schedule.remove(hold)
    assert len(schedule) == 50
    renew, lost = schedule.due(now + 1.0)
    assert {h.name for h, _ in renew} == {h.name for h in holds[150:]} and lost == []


def test_block_left_reads_the_time_left_when_sent() -> None:
    block = _flow.BlockLeft(time.monotonic() + 2.0)
    assert 1900 < int(repr(block)) <= 2000
    expired = _flow.BlockLeft(time.monotonic() - 1.0)
    assert repr(expired) == "1"  # never 0: BLOCK 0 would wait without limit
