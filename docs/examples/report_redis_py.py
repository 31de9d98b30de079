"""redislock with plain redis-py commands: a fenced write to SQLite (docs/clients.md).

    python report_redis_py.py PORT

Exits 0 after acquiring, writing twice with the fence, extending, releasing and waiting with
BLOCK; the database lives in a temporary directory.
"""

import os
import sys
import tempfile

PORT = int(sys.argv[1])
os.chdir(tempfile.mkdtemp())

# docs:begin acquire
import sqlite3

import redis

r = redis.Redis(host="127.0.0.1", port=PORT)
db = sqlite3.connect("reports.db")
db.execute("CREATE TABLE IF NOT EXISTS reports (id TEXT PRIMARY KEY, body TEXT, fence INTEGER)")

grant = r.execute_command("LOCK.ACQUIRE", "lock:report", "*", "PX", 30000)
if grant is None:
    raise SystemExit("lock:report is held by someone else")
token, fence = grant                 # token: bytes, fence: int


def save(body):
    # The table accepts a write only from the newest holder of the lock.
    cur = db.execute(
        "INSERT INTO reports (id, body, fence) VALUES ('daily', ?, ?) "
        "ON CONFLICT (id) DO UPDATE SET body = excluded.body, fence = excluded.fence "
        "WHERE reports.fence <= excluded.fence",
        (body, fence),
    )
    db.commit()
    if cur.rowcount == 0:
        raise RuntimeError("a newer holder of lock:report has written: stop")


save("part 1")
if r.execute_command("LOCK.EXTEND", "lock:report", token, "PX", 30000) != 1:
    raise SystemExit("lease lost: stop working")
save("part 2")
r.execute_command("LOCK.RELEASE", "lock:report", token)   # 1, or 0 if it had expired
# docs:end acquire

assert db.execute("SELECT body, fence FROM reports").fetchall() == [("part 2", fence)]
assert r.execute_command("LOCK.INFO", "lock:report") is None

# docs:begin block
grant = r.execute_command("LOCK.ACQUIRE", "lock:report", "*", "PX", 30000, "BLOCK", 10000)
# [b'c834520e11172b0ecc8fdc4aac86bdb1', 61726731028480], or None after 10 s
# docs:end block

assert grant is not None and grant[1] > fence, grant
assert r.execute_command("LOCK.RELEASE", "lock:report", grant[0]) == 1
print("OK")
