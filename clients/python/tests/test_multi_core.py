"""The multi-lock's I/O-free decisions (``redislock._multi``) without a server: the flows are
driven with replies and errors given here."""

from __future__ import annotations

import time
from typing import Any, Callable, List, Tuple

import pytest
from redis.crc import key_slot
from redis.exceptions import ClusterCrossSlotError, ConnectionError, LockError, LockNotOwnedError, ResponseError, TimeoutError, TryAgainError

from helpers import must
from redislock import CrossSlotError, NotReplicatedError
from redislock._durable import Durability
from redislock._flow import Followed, drive
from redislock._multi import (
    MultiHold,
    MultiSpec,
    RenewAll,
    acquire_all,
    check_names,
    cluster_slot,
    release_all,
    renew_all,
)

NAMES = ["{acct}:a", "{acct}:b", "{acct}:c"]
SPEC = MultiSpec(NAMES, 3000, [], auto_renew=True, ephemeral=False)


def script(*answers: Any) -> Tuple[Callable[[Any], Any], List[Any]]:
    """A ``carry`` that answers the requests in turn (an exception is raised), and the requests
    it saw."""
    seen: List[Any] = []
    left = list(answers)

    def carry(request: Any) -> Any:
        seen.append(request)
        answer = left.pop(0)
        if isinstance(answer, BaseException):
            raise answer
        return answer

    return carry, seen


def hold(durable: Any = None) -> MultiHold:
    return MultiHold(NAMES, b"t", [4, 9, 1], 3000, time.monotonic(), True, durable=durable)


# --- names and slots ------------------------------------------------------------------------------


def test_names_are_one_to_64_distinct_keys() -> None:
    assert check_names(["a", b"b", memoryview(b"c")]) == ["a", b"b", b"c"]
    with pytest.raises(ValueError, match="1 to 64"):
        check_names([])
    with pytest.raises(ValueError, match="1 to 64"):
        check_names([f"k{i}" for i in range(65)])
    with pytest.raises(ValueError, match="named twice"):
        check_names(["a", b"a"])
    with pytest.raises(TypeError):
        check_names("ab")


def test_names_in_two_slots_are_refused_before_anything_is_sent() -> None:
    assert cluster_slot(NAMES, key_slot) == key_slot(b"acct")
    with pytest.raises(CrossSlotError, match="one Cluster slot") as caught:
        cluster_slot(["acct:a", "acct:b", "{x}y"], key_slot)
    assert isinstance(caught.value, LockError) and isinstance(caught.value, ValueError)


# --- acquire ----------------------------------------------------------------------------------------


def test_a_grant_gives_a_fence_per_key_in_order() -> None:
    carry, seen = script([b"t", [4, 9, 1]])
    token, fences, _ = must(drive(acquire_all(SPEC, b"t", None), carry))
    assert (token, fences) == (b"t", [4, 9, 1])
    assert seen[0].args == ["LOCK.ACQUIREALL", 3, *NAMES, b"t", "PX", 3000]
    carry, _ = script(None)
    assert drive(acquire_all(SPEC, b"t", None), carry) is None


def test_a_reply_with_the_wrong_number_of_fences_is_an_error() -> None:
    carry, _ = script([b"t", [4, 9]])
    with pytest.raises(LockError, match="unexpected"):
        drive(acquire_all(SPEC, b"t", None), carry)


def test_crossslot_from_the_server_is_a_cross_slot_error() -> None:
    carry, _ = script(ResponseError("CROSSSLOT Keys in request don't hash to the same slot"))
    with pytest.raises(CrossSlotError, match="CROSSSLOT"):
        drive(acquire_all(SPEC, b"t", 1000), carry)
    carry, _ = script(ClusterCrossSlotError("Keys in request don't hash to the same slot"))  # as redis-py parses it
    with pytest.raises(CrossSlotError, match="CROSSSLOT"):
        drive(acquire_all(SPEC, b"t", None), carry)


def test_a_wait_is_sent_again_after_a_drop_and_a_redirect() -> None:
    carry, seen = script(ConnectionError("dropped"), TryAgainError("TRYAGAIN"), None, [b"t", [1, 2, 3]])
    assert must(drive(acquire_all(SPEC, b"t", 5000), carry))[1] == [1, 2, 3]
    assert [s.args[0] for s in seen if hasattr(s, "args")] == ["LOCK.ACQUIREALL"] * 3
    assert hasattr(seen[2], "seconds")  # a pause after the redirect
    assert all(s.wait_until is not None and not s.idempotent for s in seen if hasattr(s, "args"))


def test_a_wait_that_drops_twice_raises() -> None:
    carry, _ = script(ConnectionError("dropped"), ConnectionError("again"))
    with pytest.raises(ConnectionError):
        drive(acquire_all(SPEC, b"t", 5000), carry)


def test_a_grant_not_replicated_is_released_on_every_key() -> None:
    durable = must(Durability.make(1, 0.1, False, 0))
    spec = MultiSpec(NAMES, 3000, [], True, False, durable)
    carry, seen = script(Followed([b"t", [1, 2, 3]], [0]), 3)
    with pytest.raises(NotReplicatedError) as caught:
        drive(acquire_all(spec, b"t", None), carry)
    assert caught.value.released and caught.value.replicas == 0
    assert seen[0].follow.commands == [["WAIT", 1, 100]]
    assert seen[1].args == ["LOCK.RELEASEALL", 3, *NAMES, b"t"]


def test_a_late_grant_renews_every_key_at_once() -> None:
    slow = MultiSpec(NAMES, 100, [], True, False)

    def carry(request: Any) -> Any:
        if request.args[0] == "LOCK.ACQUIREALL":
            time.sleep(0.02)  # the grant came after a wait longer than a tenth of the lease
            return [b"t", [1, 2, 3]]
        seen.append(request.args)
        return 1

    seen: List[Any] = []
    before = time.monotonic()
    _, _, sent = must(drive(acquire_all(slow, b"t", 1000), carry))
    assert [a[:2] for a in seen] == [["LOCK.EXTEND", n] for n in NAMES]
    assert sent > before + 0.015  # the lease clock counts from the renewal


# --- renewals --------------------------------------------------------------------------------------


def test_a_renewal_extends_every_key_and_stops_at_one_gone() -> None:
    h = hold()
    carry, seen = script(1, 1, 1)
    assert drive(renew_all(RenewAll(h, time.monotonic() + 1)), carry) == [1, 1, 1]
    assert [s.args for s in seen] == [["LOCK.EXTEND", n, b"t", "PX", 3000] for n in NAMES]
    carry, seen = script(1, 0)
    assert drive(renew_all(RenewAll(h, time.monotonic() + 1)), carry) == [1, 0]
    assert len(seen) == 2


def test_the_lease_clock_moves_only_when_every_key_was_renewed() -> None:
    h = hold()
    sent = time.monotonic() + 0.5
    end = h.lease_end
    assert not h.renewed(sent, [1, ConnectionError("cut"), 1]) and h.lease_end == end
    assert not h.renewed(sent, [1, 1]) and h.lease_end == end  # the lease ran out midway
    assert not h.renewed(sent, None, TimeoutError("no answer")) and h.lease_end == end
    assert not h.renewed(sent, [1, 1, 1]) and h.lease_end > end


def test_one_key_gone_loses_the_set() -> None:
    assert hold().renewed(time.monotonic(), [1, 0])
    h = hold()
    assert h.renewed(time.monotonic(), [1, 1, ResponseError("WRONGTYPE Operation against a key")]) and h.gone


def test_a_renewal_not_replicated_does_not_count() -> None:
    durable = must(Durability.make(1, 0.1, False, 0))
    h = hold(durable)
    end = h.lease_end
    sent = time.monotonic() + 0.5
    assert not h.renewed(sent, [Followed(1, [1]), Followed(1, [0]), Followed(1, [1])]) and h.lease_end == end
    assert not h.renewed(sent, [Followed(1, [1])] * 3) and h.lease_end > end


# --- release ---------------------------------------------------------------------------------------


def test_release_gives_every_key_back() -> None:
    carry, seen = script(3)
    assert drive(release_all(NAMES, b"t", False, 1.0), carry) == 3
    assert seen[0].args == ["LOCK.RELEASEALL", 3, *NAMES, b"t"]


def test_a_release_that_finds_a_key_gone_or_the_set_lost_raises() -> None:
    carry, _ = script(2)
    with pytest.raises(LockNotOwnedError, match="2 of 3"):
        drive(release_all(NAMES, b"t", False, 1.0), carry)
    carry, _ = script(3)
    with pytest.raises(LockNotOwnedError):
        drive(release_all(NAMES, b"t", True, 1.0), carry)
    with pytest.raises(LockError):
        drive(release_all(NAMES, None, False, 1.0), script()[0])
