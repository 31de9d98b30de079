/* The least a module data type costs per key: FLOOR.SET key token PX ms
 * stores the token as a value of a module type (one allocation) with the
 * key's TTL, only if the key is absent (as SET NX PX); the type saves the
 * token as one string in RDB and loads it back. Loaded next to redislock by
 * bench/million.py to measure what the server spends per module-typed key
 * (creation, RDB bytes, DEBUG RELOAD) whatever the module stores.
 *
 * FLOOR.LOCK key token PX ms is the least a fenced lock costs on top: the
 * same value, a fence counted, the expiry made absolute and the grant
 * propagated as its exact effect (FLOOR.TYPEAPPLY key token fence unix-ms, with
 * RedisModule_Replicate: a relative TTL replayed from the AOF later would
 * be wrong), and the grant answered [token, fence]. */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "redismodule.h"

static RedisModuleType *floor_type;

typedef struct {
    size_t len;
    char bytes[];
} Token;

static Token *token_of(RedisModuleString *arg) {
    size_t len;
    const char *token = RedisModule_StringPtrLen(arg, &len);
    Token *t = RedisModule_Alloc(sizeof(Token) + len);
    t->len = len;
    memcpy(t->bytes, token, len);
    return t;
}

static long long last_fence;

/* KEY token PX ms, if the key is free: FLOOR.SET (fenced 0) or FLOOR.LOCK (fenced 1). */
static int create(RedisModuleCtx *ctx, RedisModuleString **argv, int argc, int fenced) {
    long long px;
    if (argc != 5) return RedisModule_WrongArity(ctx);
    if (RedisModule_StringToLongLong(argv[4], &px) != REDISMODULE_OK || px <= 0)
        return RedisModule_ReplyWithError(ctx, "ERR invalid PX");
    RedisModuleKey *key = RedisModule_OpenKey(ctx, argv[1], REDISMODULE_READ | REDISMODULE_WRITE);
    if (RedisModule_KeyType(key) != REDISMODULE_KEYTYPE_EMPTY) {
        RedisModule_CloseKey(key);
        return RedisModule_ReplyWithNull(ctx);
    }
    RedisModule_ModuleTypeSetValue(key, floor_type, token_of(argv[2]));
    if (!fenced) {
        RedisModule_SetExpire(key, px);
        RedisModule_CloseKey(key);
        RedisModule_ReplicateVerbatim(ctx);
        return RedisModule_ReplyWithSimpleString(ctx, "OK");
    }
    long long fence = ++last_fence;
    long long at = RedisModule_Milliseconds() + px;
    RedisModule_SetAbsExpire(key, at);
    RedisModule_CloseKey(key);
    size_t token_len;
    const char *token = RedisModule_StringPtrLen(argv[2], &token_len);
    char fence_text[24], at_text[24];
    int fence_len = snprintf(fence_text, sizeof fence_text, "%lld", fence);
    int at_len = snprintf(at_text, sizeof at_text, "%lld", at);
    RedisModule_Replicate(ctx, "FLOOR.TYPEAPPLY", "sbbb", argv[1], token, token_len, fence_text,
                          (size_t)fence_len, at_text, (size_t)at_len);
    RedisModule_ReplyWithArray(ctx, 2);
    RedisModule_ReplyWithString(ctx, argv[2]);
    return RedisModule_ReplyWithLongLong(ctx, fence);
}

static int set_cmd(RedisModuleCtx *ctx, RedisModuleString **argv, int argc) {
    return create(ctx, argv, argc, 0);
}

static int lock_cmd(RedisModuleCtx *ctx, RedisModuleString **argv, int argc) {
    return create(ctx, argv, argc, 1);
}

/* FLOOR.TYPEAPPLY key token fence unix-ms: a grant as its master made it. */
static int apply_cmd(RedisModuleCtx *ctx, RedisModuleString **argv, int argc) {
    long long at;
    if (argc != 5) return RedisModule_WrongArity(ctx);
    if (RedisModule_StringToLongLong(argv[4], &at) != REDISMODULE_OK)
        return RedisModule_ReplyWithError(ctx, "ERR invalid time");
    RedisModuleKey *key = RedisModule_OpenKey(ctx, argv[1], REDISMODULE_READ | REDISMODULE_WRITE);
    RedisModule_ModuleTypeSetValue(key, floor_type, token_of(argv[2]));
    RedisModule_SetAbsExpire(key, at);
    RedisModule_CloseKey(key);
    return RedisModule_ReplyWithSimpleString(ctx, "OK");
}

static void *rdb_load(RedisModuleIO *rdb, int encver) {
    (void)encver;
    size_t len;
    char *bytes = RedisModule_LoadStringBuffer(rdb, &len);
    if (!bytes) return NULL;
    Token *t = RedisModule_Alloc(sizeof(Token) + len);
    t->len = len;
    memcpy(t->bytes, bytes, len);
    RedisModule_Free(bytes);
    return t;
}

static void rdb_save(RedisModuleIO *rdb, void *value) {
    Token *t = value;
    RedisModule_SaveStringBuffer(rdb, t->bytes, t->len);
}

static void free_value(void *value) { RedisModule_Free(value); }

static size_t mem_usage(const void *value) {
    const Token *t = value;
    return sizeof(Token) + t->len;
}

int RedisModule_OnLoad(RedisModuleCtx *ctx, RedisModuleString **argv, int argc) {
    (void)argv;
    (void)argc;
    if (RedisModule_Init(ctx, "typefloor", 1, REDISMODULE_APIVER_1) == REDISMODULE_ERR)
        return REDISMODULE_ERR;
    RedisModuleTypeMethods methods = {
        .version = REDISMODULE_TYPE_METHOD_VERSION,
        .rdb_load = rdb_load,
        .rdb_save = rdb_save,
        .free = free_value,
        .mem_usage = mem_usage,
    };
    floor_type = RedisModule_CreateDataType(ctx, "typeflr00", 0, &methods);
    if (!floor_type) return REDISMODULE_ERR;
    if (RedisModule_CreateCommand(ctx, "floor.set", set_cmd, "write deny-oom", 1, 1, 1) == REDISMODULE_ERR)
        return REDISMODULE_ERR;
    if (RedisModule_CreateCommand(ctx, "floor.lock", lock_cmd, "write deny-oom", 1, 1, 1) == REDISMODULE_ERR)
        return REDISMODULE_ERR;
    if (RedisModule_CreateCommand(ctx, "floor.typeapply", apply_cmd, "write deny-oom", 1, 1, 1) == REDISMODULE_ERR)
        return REDISMODULE_ERR;
    return REDISMODULE_OK;
}
