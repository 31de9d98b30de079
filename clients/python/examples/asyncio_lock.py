"""redislock with redis.asyncio (docs/clients.md).

    python asyncio_lock.py        # the server on 127.0.0.1:6379, or on the port in REDIS_PORT
"""

import asyncio
import os

PORT = int(os.environ.get("REDIS_PORT", "6379"))


import redis.asyncio as aioredis
import redislock.asyncio


async def main() -> None:
    r = aioredis.Redis(host="127.0.0.1", port=PORT)
    async with r.lock("lock:report", timeout=30, lock_class=redislock.asyncio.Lock) as lock:
        print("fence", lock.fence)
    await r.aclose()


asyncio.run(main())
