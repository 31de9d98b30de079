#!/usr/bin/env python3
"""Instructions per operation, native lock commands against the module's.

Runs one server (with the module loaded) under valgrind's callgrind, with
instrumentation off; for each workload it switches instrumentation on,
sends N commands with `redis-cli --pipe`, dumps the profile and switches it
off again. Instruction counts do not depend on other load on the machine,
so the figures repeat from run to run to within a fraction of a percent.

Per workload the table gives the whole server's instructions per command
(event loop, protocol, the command, replies) and, for the module's
commands, where they go: the parts the server's module API makes every
module command pay, which the native command does not, are listed apart.

Writes (appends to) --out as Markdown; the raw profiles go to a temp dir.
"""

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from resp import encode, free_port  # noqa: E402

TOKEN = "abcdefghijklmnopqrstuvwxyz012345"  # 32 bytes
N = int(os.environ.get("BENCH_CALLGRIND_N", "20000"))

# Functions whose inclusive cost is reported per command (Redis names them
# RM_*, Valkey VM_*; both are matched).
API = [
    ("dispatch", "ModuleCommandDispatcher"),
    ("replicate", "M_Replicate"),
    ("  of which: command lookup", "lookupCommandByCString"),
    ("open key", "M_OpenKey"),
    ("close key", "M_CloseKey"),
    ("set value", "M_ModuleTypeSetValue"),
    ("set expiry", "M_SetAbsExpire"),
    ("delete key", "M_DeleteKey"),
    ("redact token", "M_RedactClientCommandArgument"),
    ("notify", "M_NotifyKeyspaceEvent"),
]
REPLY = ("reply", ["M_ReplyWithArray", "M_ReplyWithStringBuffer", "M_ReplyWithLongLong",
                   "M_ReplyWithNull", "M_ReplyWithSimpleString"])


def commands(template, n):
    return b"".join(encode([a.replace("%i", "%012d" % i) for a in template]) for i in range(n))


class Profiled:
    def __init__(self, server, module, work):
        self.port = free_port()
        self.work = work
        self.proc = subprocess.Popen(
            ["valgrind", "--tool=callgrind", "--instr-atstart=no",
             "--callgrind-out-file=%s/callgrind.out.%%p" % work,
             server, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "no", "--loadmodule", module],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for _ in range(300):
            if self.cli("PING").strip() == "PONG":
                return
            time.sleep(0.1)
        raise RuntimeError("the server under callgrind did not start")

    def cli(self, *args):
        r = subprocess.run(["redis-cli", "-p", str(self.port)] + list(args),
                           capture_output=True, text=True)
        return r.stdout

    def pipe(self, text):
        subprocess.run(["redis-cli", "-p", str(self.port), "--pipe"], input=text,
                       capture_output=True, check=True)

    def control(self, *args):
        subprocess.run(["callgrind_control"] + list(args) + [str(self.proc.pid)],
                       capture_output=True, check=True)

    def measure(self, label, template, prefill=None):
        self.cli("FLUSHALL")
        if prefill:
            self.pipe(commands(prefill, N))
        text = commands(template, N)
        self.control("-i", "on")
        self.control("-z")
        self.pipe(text)
        self.control("-d", label)
        self.control("-i", "off")

    def stop(self):
        self.cli("SHUTDOWN", "NOSAVE")
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def has_command(p, name):
    return name.lower() in p.cli("COMMAND", "INFO", name).lower()


def has_set_ifeq(p):
    p.cli("SET", "probe", "x")
    ok = p.cli("SET", "probe", "x", "IFEQ", "x").strip() == "OK"
    p.cli("DEL", "probe")
    return ok


def profiles(work):
    """label -> (total Ir, {function: inclusive Ir})"""
    out = {}
    for name in os.listdir(work):
        path = os.path.join(work, name)
        if not re.search(r"\.\d+$", name):
            continue
        with open(path, errors="replace") as f:
            head = f.read(4096)
        m = re.search(r"^desc: Trigger: dump (\S+)", head, re.M)
        if not m:
            continue
        ann = subprocess.run(["callgrind_annotate", "--inclusive=yes", "--threshold=100", path],
                             capture_output=True, text=True).stdout
        total = 0
        funcs = {}
        for line in ann.splitlines():
            t = re.match(r"\s*([\d,]+)\s+\(\s*[\d.]+%\)\s+PROGRAM TOTALS", line)
            if t:
                total = int(t.group(1).replace(",", ""))
                continue
            f = re.match(r"\s*([\d,]+)\s+\(\s*[\d.]+%\)\s+\S*?:(\S+)", line)
            if f:
                funcs.setdefault(f.group(2), int(f.group(1).replace(",", "")))
        out[m.group(1)] = (total, funcs)
    return out


def inclusive(funcs, suffix):
    return sum(v for k, v in funcs.items() if k.endswith(suffix) and not k.startswith("redislock"))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--server", required=True)
    ap.add_argument("--module", required=True)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    for tool in ("valgrind", "callgrind_control", "callgrind_annotate", "redis-cli"):
        if not shutil.which(tool):
            print("callgrind: %s not found (apt-get install valgrind)" % tool, file=sys.stderr)
            return 1
    version = subprocess.run([a.server, "--version"], capture_output=True, text=True).stdout.split(" sha=")[0]
    work = tempfile.mkdtemp(prefix="redislock-callgrind.")
    p = Profiled(a.server, a.module, work)
    pairs = []
    try:
        p.measure("ping", ["PING"])
        p.measure("n_acquire", ["SET", "lock:%i", TOKEN, "NX", "PX", "60000"])
        p.measure("m_acquire", ["LOCK.ACQUIRE", "lock:%i", TOKEN, "PX", "60000"])
        pairs.append(("acquire, granted", "`SET NX PX`", "n_acquire", "m_acquire"))
        p.measure("n_refused", ["SET", "lock:%i", "other", "NX", "PX", "60000"],
                  prefill=["SET", "lock:%i", TOKEN, "PX", "600000"])
        p.measure("m_refused", ["LOCK.ACQUIRE", "lock:%i", "other", "PX", "60000"],
                  prefill=["LOCK.ACQUIRE", "lock:%i", TOKEN, "PX", "600000"])
        pairs.append(("acquire, refused", "`SET NX PX` on a held key", "n_refused", "m_refused"))
        release_native = None
        if has_command(p, "DELIFEQ"):
            release_native = ("`DELIFEQ`", ["DELIFEQ", "lock:%i", TOKEN])
        elif has_command(p, "DELEX"):
            release_native = ("`DELEX IFEQ`", ["DELEX", "lock:%i", "IFEQ", TOKEN])
        if release_native:
            p.measure("n_release", release_native[1], prefill=["SET", "lock:%i", TOKEN, "PX", "600000"])
        p.measure("m_release", ["LOCK.RELEASE", "lock:%i", TOKEN],
                  prefill=["LOCK.ACQUIRE", "lock:%i", TOKEN, "PX", "600000"])
        pairs.append(("release", release_native[0] if release_native else None,
                      "n_release" if release_native else None, "m_release"))
        ifeq = has_set_ifeq(p)
        if ifeq:
            p.measure("n_extend", ["SET", "lock:%i", TOKEN, "IFEQ", TOKEN, "PX", "60000"],
                      prefill=["SET", "lock:%i", TOKEN, "PX", "600000"])
        p.measure("m_extend", ["LOCK.EXTEND", "lock:%i", TOKEN, "PX", "60000"],
                  prefill=["LOCK.ACQUIRE", "lock:%i", TOKEN, "PX", "600000"])
        pairs.append(("extend", "`SET IFEQ PX`" if ifeq else None, "n_extend" if ifeq else None,
                      "m_extend"))
    finally:
        p.stop()
    prof = profiles(work)
    shutil.rmtree(work, ignore_errors=True)

    def per_op(label):
        return prof[label][0] / N

    lines = ["", "### %s" % version, "",
             "Whole server, instructions per command (`PING` through the same path: %.0f). "
             "Ratio = native / module: at least 1.0 means the module costs no more." % per_op("ping"), "",
             "| operation | native | native Ir | module Ir | ratio |", "|---|---|---|---|---|"]
    for name, native, n, m in pairs:
        if native:
            lines.append("| %s | %s | %.0f | %.0f | %.2f |" % (name, native, per_op(n), per_op(m),
                                                            per_op(n) / per_op(m)))
        else:
            lines.append("| %s | n/a (no native command) | — | %.0f | — |" % (name, per_op(m)))
    lines += ["", "Where the module's instructions go, per command (inclusive; the first rows are "
              "the server's module API):", "",
              "| part | " + " | ".join(name for name, _, _, _ in pairs) + " |",
              "|---|" + "---|" * len(pairs)]
    rows = API + [REPLY]
    for title, fn in rows:
        cells = []
        for _, _, _, m in pairs:
            funcs = prof[m][1]
            v = sum(inclusive(funcs, f) for f in fn) if isinstance(fn, list) else inclusive(funcs, fn)
            cells.append("%.0f" % (v / N) if v else "—")
        lines.append("| %s | %s |" % (title, " | ".join(cells)))
    own = []
    for _, _, _, m in pairs:
        funcs = prof[m][1]
        disp = inclusive(funcs, "ModuleCommandDispatcher")
        api = sum(inclusive(funcs, f) for _, f in API[1:] if not f.startswith("lookup"))
        api += sum(inclusive(funcs, f) for f in REPLY[1])
        own.append("%.0f" % (max(0, disp - api) / N))
    lines.append("| the module's own code (dispatch minus the API calls above) | %s |" % " | ".join(own))
    with open(a.out, "a") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
