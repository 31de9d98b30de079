/* The least a module can do to block a client: FLOOR.WAIT blocks the caller
 * with RedisModule_BlockClient and nothing else; FLOOR.SERVE unblocks every
 * waiting client, which is answered OK. Loaded next to redislock by
 * bench/waiting.py to measure what the server itself spends per module
 * waiter (its memory, and what it keeps after the waiters are served). */

#include <stdlib.h>

#include "redismodule.h"

static RedisModuleBlockedClient **waiting;
static size_t count, room;

static int answer(RedisModuleCtx *ctx, RedisModuleString **argv, int argc) {
    (void)argv;
    (void)argc;
    return RedisModule_ReplyWithSimpleString(ctx, "OK");
}

static int wait_cmd(RedisModuleCtx *ctx, RedisModuleString **argv, int argc) {
    (void)argv;
    (void)argc;
    if (count == room) {
        size_t grown = room ? room * 2 : 1024;
        RedisModuleBlockedClient **more = realloc(waiting, grown * sizeof(*more));
        if (!more) return RedisModule_ReplyWithError(ctx, "ERR out of memory");
        waiting = more;
        room = grown;
    }
    waiting[count++] = RedisModule_BlockClient(ctx, answer, answer, NULL, 0);
    return REDISMODULE_OK;
}

static int serve_cmd(RedisModuleCtx *ctx, RedisModuleString **argv, int argc) {
    (void)argv;
    (void)argc;
    size_t served = count;
    for (size_t i = 0; i < count; i++) RedisModule_UnblockClient(waiting[i], NULL);
    count = 0;
    return RedisModule_ReplyWithLongLong(ctx, (long long)served);
}

int RedisModule_OnLoad(RedisModuleCtx *ctx, RedisModuleString **argv, int argc) {
    (void)argv;
    (void)argc;
    if (RedisModule_Init(ctx, "blockfloor", 1, REDISMODULE_APIVER_1) == REDISMODULE_ERR)
        return REDISMODULE_ERR;
    if (RedisModule_CreateCommand(ctx, "floor.wait", wait_cmd, "", 0, 0, 0) == REDISMODULE_ERR)
        return REDISMODULE_ERR;
    if (RedisModule_CreateCommand(ctx, "floor.serve", serve_cmd, "", 0, 0, 0) == REDISMODULE_ERR)
        return REDISMODULE_ERR;
    return REDISMODULE_OK;
}
