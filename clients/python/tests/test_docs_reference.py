"""The reference pages name every command, option and error reply of the module."""

from __future__ import annotations

import re

from servers import REPO


def test_every_command_and_option_is_documented() -> None:
    text = (REPO / "docs" / "commands.md").read_text()
    for word in ["LOCK.ACQUIRE", "LOCK.RELEASE", "LOCK.EXTEND", "LOCK.INFO", "BLOCK", "EX seconds",
                 "PX milliseconds", "SHARED", "LIMIT count", "EPHEMERAL", "LOCK.CALL", "LOCK.FENCE",
                 "LOCK._APPLY", "LOCK._HOLD", "LOCK._GATE", "LOCK._EPOCH", '"holders"']:
        assert word in text, word
    ops = (REPO / "docs" / "operations.md").read_text()
    for word in ["redislock.max-ttl", "redislock.max-block", "INFO redislock", "lock.acquired",
                 "lock.handoff", "lock.expired", "lease_ends", "LOCK._HOLD", "ACL"]:
        assert word in ops, word
    # Every error line the module can send (src/core/errors.rs) is in commands.md, with an
    # example value where the line has one.
    errors = (REPO / "src" / "core" / "errors.rs").read_text()
    lines = re.findall(r'f\.write_str\("([^"]+)"\)', errors) + re.findall(r'write!\(f, "([^"]+)"', errors)
    assert len(lines) > 30
    for line in lines:
        pattern = r"\S+?".join(re.escape(part) for part in re.split(r"\{[^}]*\}", line))
        assert re.search(pattern, text), f"docs/commands.md does not list the error {line!r}"
