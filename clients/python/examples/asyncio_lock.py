"""redislock with redis.asyncio (docs/clients.md).

    python asyncio_lock.py [PORT]
"""

import asyncio
import sys

PORT = int(sys.argv[1]) if len(sys.argv) > 1 else 6379


# docs:begin asyncio
import redis.asyncio as aioredis
import redislock.asyncio


async def main() -> None:
    r = aioredis.Redis(host="127.0.0.1", port=PORT)
    async with r.lock("lock:report", timeout=30, lock_class=redislock.asyncio.Lock) as lock:
        print("fence", lock.fence)
    await r.aclose()


asyncio.run(main())
# docs:end asyncio
