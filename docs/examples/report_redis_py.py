"""redislock with plain redis-py commands: a write to SQLite that only the newest holder of the
lock gets through (docs/clients.md).

    python report_redis_py.py   # the server on 127.0.0.1:6379, or on the port in REDIS_PORT

The table is in reports.db, in the current directory.
"""

import os
import sqlite3

import redis

r = redis.Redis(host="127.0.0.1", port=int(os.environ.get("REDIS_PORT", "6379")))
db = sqlite3.connect("reports.db")
db.execute("CREATE TABLE IF NOT EXISTS reports (id TEXT PRIMARY KEY, body TEXT, fence INTEGER)")

# "*": the server makes a random token. BLOCK: wait in the server, up to 10 s (without it, a
# busy lock answers None at once).
grant = r.execute_command("LOCK.ACQUIRE", "lock:report", "*", "PX", 30000, "BLOCK", 10000)
if grant is None:
    raise SystemExit("lock:report is held by someone else")
token, fence = grant                 # token: bytes, fence: int


def save(body: str) -> None:
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
print("released:", r.execute_command("LOCK.RELEASE", "lock:report", token))  # 0 if it had expired
print("the report holds:", db.execute("SELECT body FROM reports").fetchone()[0])
