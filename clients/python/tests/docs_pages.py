"""The manual's pages (README.md, docs/*.md) as fenced blocks, with the HTML comments that steer
how the tests use them.

- A block with `name> command` lines is a redis-cli session (test_docs_sessions.py).
- A block after `<!-- example: PATH -->` is a whole program, equal to the file PATH
  (test_docs_programs.py runs the block itself); a block after `<!-- output -->` is what the
  program before it prints.
- `<!-- not-run: reason -->`: a block of code that no test runs, and why.
- `<!-- replay: … -->`: see test_docs_sessions.py.

What the server answers differently on every run (fences, remaining times) is matched, not
compared, and only on a page that tells the reader so with the words of `VARIES`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import List, Optional

from servers import REPO

PAGES = [REPO / "README.md"] + sorted((REPO / "docs").glob("*.md"))
PROMPT = re.compile(r"^([A-Za-z][\w-]*)> (.*)$")
CODE_LANGS = {"python", "py", "js", "javascript", "mjs", "ts", "typescript", "rust", "java", "sh-session"}
# A page whose shown replies or output carry a fence or a remaining time says so in these words.
VARIES = "differ on every run"


@dataclass
class Block:
    page: Path
    line: int  # 1-based line of the opening fence
    lang: str
    lines: List[str]
    directives: List[str] = field(default_factory=list)

    @property
    def where(self) -> str:
        return f"{self.page.relative_to(REPO)}:{self.line}"

    @property
    def text(self) -> str:
        return "\n".join(self.lines) + "\n"

    def directive(self, kind: str) -> Optional[str]:
        for d in self.directives:
            if d == kind:
                return ""
            if d.startswith(kind + ":"):
                return d[len(kind) + 1 :].strip()
        return None

    @property
    def is_session(self) -> bool:
        return any(PROMPT.match(l) for l in self.lines) or self.directive("replay") is not None

    @property
    def is_program(self) -> bool:
        return self.directive("example") is not None

    @property
    def is_output(self) -> bool:
        return self.directive("output") is not None


def blocks(page: Path) -> List[Block]:
    found: List[Block] = []
    pending: List[str] = []
    lines = page.read_text().splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        comment = re.match(r"^<!--\s*(.*?)\s*-->\s*$", line)
        if comment:
            pending.append(comment.group(1))
        elif line.startswith("```"):
            lang = line[3:].strip()
            start = i
            body = []
            i += 1
            while i < len(lines) and not lines[i].startswith("```"):
                body.append(lines[i])
                i += 1
            found.append(Block(page, start + 1, lang, body, pending))
            pending = []
        elif line.strip():
            pending = []
        i += 1
    return found


def says_it_varies(page: Path) -> bool:
    return VARIES in " ".join(page.read_text().split())


def programs(page: Path) -> List["tuple[Block, Optional[Block]]"]:
    """Each program block of `page`, with the output block that follows it (if any)."""
    found: List["tuple[Block, Optional[Block]]"] = []
    for b in blocks(page):
        if b.is_program:
            found.append((b, None))
        elif b.is_output:
            assert found and found[-1][1] is None, f"{b.where}: an output block after no program"
            found[-1] = (found[-1][0], b)
    return found
