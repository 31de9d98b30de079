"""The programs of README.md and docs/*.md, each run as a reader would run it.

A block of code after `<!-- example: PATH -->` is a whole program, equal to the file PATH of the
repository (other tests run the files too). Each block is written to a file of its own and run
unchanged — Python with this interpreter, JavaScript with `node`, as `node file.js`, a program of
the Rust client (`clients/rust/examples/NAME.rs`) as `cargo run -p redislock-client --example
NAME` from the repository (the file is the example itself) — against a
fresh server with the module, whose port it is given as a reader gives it: `REDIS_PORT`
(README.md names the variable). `redislock` is found as an installed package would be
(`clients/python/src` on PYTHONPATH; for Node.js a directory on NODE_PATH holding `redislock`,
a link to `clients/node`, beside `clients/node/node_modules`). The program must exit 0, and what
it prints must equal the block after it marked `<!-- output -->`, if there is one (fences may
differ on a page that says so; see docs_replies.compare_lines).

Every other block of code says why no test runs it: `<!-- not-run: reason -->`.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import List, Optional, Tuple

import pytest

from docs_pages import CODE_LANGS, PAGES, Block, blocks, programs, says_it_varies
from docs_replies import Bindings, compare_lines
from servers import REPO, Server

RUNNERS = {"python": "python", "py": "python", "js": "node", "javascript": "node", "mjs": "node",
           "rust": "cargo"}
#: The Rust programs run here are the Rust client's examples; tests/clients.rs runs the others.
RUST_CLIENT_EXAMPLES = "clients/rust/examples/"
SUFFIX = {"python": ".py", "node": ".js"}


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(REPO)))
def test_code_blocks_are_programs_or_say_why_not(page: Path) -> None:
    for block in blocks(page):
        example = block.directive("example")
        if example:
            assert "#" not in example, f"{block.where}: a block shows a whole file, not a part of one"
            file = REPO / example
            assert file.is_file(), f"{block.where}: no file {example}"
            assert block.text.strip("\n") == file.read_text().strip("\n"), (
                f"{block.where}: the block differs from {example}; copy it again"
            )
        elif block.lang.lower() in CODE_LANGS:
            assert block.directive("not-run"), (
                f"{block.where}: a {block.lang} block must be a whole program "
                "(<!-- example: PATH -->) or say why it is not run (<!-- not-run: … -->)"
            )


def runnable() -> List[Tuple[Block, Optional[Block]]]:
    found = []
    for page in PAGES:
        for program, output in programs(page):
            if program.lang.lower() not in RUNNERS:
                continue
            if RUNNERS[program.lang.lower()] == "cargo" and not (
                program.directive("example") or ""
            ).startswith(RUST_CLIENT_EXAMPLES):
                continue
            found.append((program, output))
    return found


def node_path(work: str) -> str:
    """NODE_PATH on which `require("redislock")` finds clients/node, as if installed."""
    modules = os.path.join(work, "packages")
    os.makedirs(modules)
    os.symlink(REPO / "clients" / "node", os.path.join(modules, "redislock"))
    return os.pathsep.join([modules, str(REPO / "clients" / "node" / "node_modules")])


def run(block: Block, port: int, work: str) -> "subprocess.CompletedProcess[str]":
    runner = RUNNERS[block.lang.lower()]
    example = block.directive("example") or "program"
    if runner == "cargo":
        return run_rust_example(block, example, port)
    name = Path(example).name
    if not name.endswith((".py", ".js", ".mjs")):
        name += SUFFIX[runner]
    path = os.path.join(work, name)
    with open(path, "w") as f:
        f.write(block.text)
    env = {k: v for k, v in os.environ.items()
           if k not in ("REDIS_URL", "REDIS_HOST", "PYTHONPATH", "NODE_PATH")}
    env["REDIS_PORT"] = str(port)
    if runner == "python":
        env["PYTHONPATH"] = str(REPO / "clients" / "python" / "src")
        cmd = [sys.executable, path]
    else:
        node = shutil.which(os.environ.get("REDISLOCK_NODE", "node"))
        assert node, "node is not installed: run scripts/clients.sh"
        assert (REPO / "clients/node/node_modules/ioredis").is_dir(), (
            "clients/node/node_modules is missing: run scripts/clients.sh"
        )
        env["NODE_PATH"] = node_path(work)
        cmd = [node, path]
    return subprocess.run(cmd, cwd=work, env=env, capture_output=True, text=True, timeout=60,
                          stdin=subprocess.DEVNULL)


def run_rust_example(block: Block, example: str, port: int) -> "subprocess.CompletedProcess[str]":
    """The Rust client's example `example` (the block is that file, as the first test checks),
    built and run with cargo (built already after `make test`'s build step; up to a few minutes
    where it is not)."""
    assert block.text.strip("\n") == (REPO / example).read_text().strip("\n"), f"{block.where}"
    env = {k: v for k, v in os.environ.items() if k not in ("REDIS_URL", "REDIS_HOST")}
    env["REDIS_PORT"] = str(port)
    cargo = os.environ.get("CARGO", "cargo")
    cmd = [cargo, "run", "-q", "-p", "redislock-client", "--example", Path(example).stem]
    return subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=600,
                          stdin=subprocess.DEVNULL)


# A Rust example may have to wait for cargo's build directory (make test builds the Rust client
# beside the client suites) and then build: more than the suite's 60 s on a busy machine. Each
# run is bounded by its own subprocess timeout.
@pytest.mark.timeout(660)
@pytest.mark.parametrize("program,output", runnable(), ids=lambda b: b.where if b else "")
def test_program_prints_what_the_page_shows(program: Block, output: Optional[Block]) -> None:
    server = Server()
    work = tempfile.mkdtemp(prefix="redislock-doc-")
    try:
        done = run(program, server.port, work)
        assert done.returncode == 0, (
            f"{program.where} exited {done.returncode}\n--- stdout ---\n{done.stdout}"
            f"\n--- stderr ---\n{done.stderr}"
        )
        if output is not None:
            got = done.stdout.rstrip("\n").split("\n") if done.stdout else []
            compare_lines(output.lines, got, [False] * max(len(got), len(output.lines)), Bindings(),
                          says_it_varies(program.page), output.where, f"the output of {program.where}")
    finally:
        server.stop()
        shutil.rmtree(work, ignore_errors=True)
