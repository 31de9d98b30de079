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
        # A value may have spaces ("EX, PX and DATA"), but stays inside its backquotes.
        pattern = r"[^`|]+?".join(re.escape(part) for part in re.split(r"\{[^}]*\}", line))
        assert re.search(pattern, text), f"docs/commands.md does not list the error {line!r}"


COMMANDS = ["LOCK.ACQUIRE", "LOCK.RELEASE", "LOCK.EXTEND", "LOCK.INFO", "LOCK.OBSERVE",
            "LOCK.ACQUIREALL", "LOCK.RELEASEALL", "LOCK.CALL", "LOCK.FENCE"]


def test_every_command_in_the_acl_table_and_the_package() -> None:
    ops = (REPO / "docs" / "operations.md").read_text()
    table = ops[ops.index("**Categories.**"):ops.index("and every one of them in `@redislock`")]
    for command in COMMANDS:
        assert f"`{command}`" in table, f"the ACL table of docs/operations.md lacks {command}"
    assert "-dump" in ops, "docs/operations.md says how to deny DUMP, which shows tokens"
    cargo = (REPO / "Cargo.toml").read_text()
    deb = cargo[cargo.index("extended-description"):]
    deb = deb[:deb.index('"""', deb.index('"""') + 3)]
    for command in COMMANDS:
        assert re.search(rf"\b{re.escape(command)}\b(?!\w)", deb.replace("\\\n", " ")), (
            f"the .deb's description lacks {command}")


def test_troubleshooting_names_every_option() -> None:
    text = (REPO / "docs" / "troubleshooting.md").read_text()
    row = next(line for line in text.splitlines() if "Options after the token are" in line)
    for option in ["EX", "PX", "SHARED", "LIMIT", "EPHEMERAL", "BLOCK", "DATA", "AFTER"]:
        assert f"`{option}`" in row, option


def test_make_run_checks_the_port_of_the_configuration() -> None:
    makefile = (REPO / "Makefile").read_text()
    run = makefile[makefile.index("\nrun:"):]
    run = run[:run.index("\n\n")]
    assert "6379" not in run.replace("p ? p : 6379", ""), "make run checks a fixed port"
    assert "$(RUN_PORT)" in run and "redis.conf.example" in makefile[makefile.index("RUN_PORT ="):]
