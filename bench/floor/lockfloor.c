/* The least a FIFO lock in a module can be, for the hot handoff: what the
 * module API itself costs a lock that blocks its waiters and hands itself
 * on, whatever else the lock does. Loaded next to redislock by
 * bench/waiting.py.
 *
 *   FLOOR.ACQUIRE key token timeout-ms
 *       Free key: stores the owner as a value of a module type with a
 *       10 s lease (the key's TTL), propagates FLOOR.APPLY, replies
 *       [token, fence]. Held key: blocks the caller (0 = no limit) at the
 *       back of the key's queue; nil when the timeout passes.
 *   FLOOR.RELEASE key token
 *       0 unless token owns the key. No waiter: deletes the key and
 *       propagates DEL. Else hands the lock to the first waiter (new owner,
 *       next fence, a fresh lease), propagates FLOOR.APPLY with the
 *       waiter's token, fence and absolute lease end, and unblocks it with
 *       the grant. Replies 1.
 *   FLOOR.APPLY key token fence unix-ms
 *       The effect a grant propagates, as a replica or the AOF applies it.
 *   FLOOR.XACQUIRE key token PX ms BLOCK ms, FLOOR.XRELEASE key token
 *       The same lock with what redislock's hot commands carry besides the
 *       lock rules: LOCK.ACQUIRE's arguments (the lease is PX, the wait
 *       ends after BLOCK ms by the blocked client's own timeout, 0: no
 *       limit), the token kept out of SLOWLOG and MONITOR
 *       (RedisModule_RedactClientCommandArgument), and a keyspace event for
 *       each grant and release, as redislock sends them.
 *
 * The module API path is redislock's: RedisModule_BlockClient (no keys) and
 * RedisModule_UnblockClient from the releasing command, a disconnect
 * callback, and RedisModule_Replicate of the grant's exact effect (owner,
 * fence, absolute lease end) on every grant, DEL on a release nobody waits
 * for. What it leaves out, and redislock does: its own deadlines (this
 * uses the blocked client's timeout, which on Redis 7.0 can end a wait
 * with no reply when the timeout and the grant fall in the same event-loop
 * pass), handing the lock on when a lease ends (the waiters of a key that
 * expires or is deleted get nil here), giving the lock back when a granted
 * waiter disconnects before its reply, shared holds, token checks and the
 * rest of the lock rules, keyspace events and token redaction (but see
 * FLOOR.XACQUIRE), and FLUSHALL ASYNC (the free callback must run on the
 * main thread). */

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "redismodule.h"

#define LEASE_MS 10000

struct Lock;

typedef struct Waiter {
    RedisModuleBlockedClient *bc;
    struct Lock *lock; /* the queue it stands in; NULL once it left it */
    struct Waiter *prev, *next;
    long long fence; /* of its grant */
    long long lease_ms;
    size_t len;
    char token[];
} Waiter;

typedef struct Lock {
    long long fence;
    Waiter *head, *tail;
    size_t len;
    char *owner;
} Lock;

static RedisModuleType *lock_type;
static long long last_fence;

/* Waiters by blocked-client handle, for the timeout and disconnect
 * callbacks: open addressing, linear probing, a power-of-two table kept at
 * most half full, backward-shift deletion. */
static Waiter **slots;
static size_t nslots, used;
static unsigned bits;

static size_t home(const RedisModuleBlockedClient *bc) {
    return (size_t)(((uint64_t)(uintptr_t)bc * 0x9E3779B97F4A7C15ull) >> (64 - bits));
}

static void place(Waiter *w) {
    size_t i = home(w->bc);
    while (slots[i]) i = (i + 1) & (nslots - 1);
    slots[i] = w;
}

static void table_put(Waiter *w) {
    if ((used + 1) * 2 > nslots) {
        Waiter **old = slots;
        size_t n = nslots;
        bits++;
        nslots = (size_t)1 << bits;
        slots = RedisModule_Calloc(nslots, sizeof(*slots));
        for (size_t i = 0; i < n; i++)
            if (old[i]) place(old[i]);
        RedisModule_Free(old);
    }
    place(w);
    used++;
}

static Waiter *table_get(const RedisModuleBlockedClient *bc) {
    for (size_t i = home(bc);; i = (i + 1) & (nslots - 1))
        if (!slots[i] || slots[i]->bc == bc) return slots[i];
}

static void table_del(const RedisModuleBlockedClient *bc) {
    size_t mask = nslots - 1, i = home(bc);
    while (slots[i] && slots[i]->bc != bc) i = (i + 1) & mask;
    if (!slots[i]) return;
    used--;
    for (size_t j = (i + 1) & mask; slots[j]; j = (j + 1) & mask) {
        size_t h = home(slots[j]->bc);
        /* slots[j] may move back to i unless its home lies in (i, j]. */
        int stays = i <= j ? (h > i && h <= j) : (h > i || h <= j);
        if (!stays) {
            slots[i] = slots[j];
            i = j;
        }
    }
    slots[i] = NULL;
}

static char *copy(const char *bytes, size_t len) {
    char *c = RedisModule_Alloc(len ? len : 1);
    memcpy(c, bytes, len);
    return c;
}

static size_t decimal(unsigned long long v, char buf[24]) {
    char tmp[24];
    size_t n = 0;
    do {
        tmp[n++] = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    for (size_t i = 0; i < n; i++) buf[i] = tmp[n - 1 - i];
    return n;
}

/* The grant's exact effect, to replicas and the AOF. */
static void replicate_apply(RedisModuleCtx *ctx, RedisModuleString *key, const char *token,
                            size_t len, long long fence, long long at) {
    char f[24], a[24];
    size_t fl = decimal((unsigned long long)fence, f), al = decimal((unsigned long long)at, a);
    RedisModule_Replicate(ctx, "FLOOR.APPLY", "sbbb", key, token, len, f, fl, a, al);
}

static int reply_grant(RedisModuleCtx *ctx, const char *token, size_t len, long long fence) {
    RedisModule_ReplyWithArray(ctx, 2);
    RedisModule_ReplyWithStringBuffer(ctx, token, len);
    return RedisModule_ReplyWithLongLong(ctx, fence);
}

/* Takes a waiter out of its queue and the handle table. */
static void leave(Waiter *w) {
    Lock *l = w->lock;
    if (l) {
        if (w->prev) w->prev->next = w->next; else l->head = w->next;
        if (w->next) w->next->prev = w->prev; else l->tail = w->prev;
        w->lock = NULL;
    }
    table_del(w->bc);
}

/* A wait that ends without the lock: nil from the reply callback. */
static void send_away(Waiter *w) {
    leave(w);
    RedisModule_UnblockClient(w->bc, NULL);
    RedisModule_Free(w);
}

static int on_reply(RedisModuleCtx *ctx, RedisModuleString **argv, int argc) {
    (void)argv;
    (void)argc;
    Waiter *w = RedisModule_GetBlockedClientPrivateData(ctx);
    if (!w) return RedisModule_ReplyWithNull(ctx);
    return reply_grant(ctx, w->token, w->len, w->fence);
}

static int on_timeout(RedisModuleCtx *ctx, RedisModuleString **argv, int argc) {
    (void)argv;
    (void)argc;
    /* Granted in the same pass: the grant is the answer. */
    Waiter *w = RedisModule_GetBlockedClientPrivateData(ctx);
    if (w) return reply_grant(ctx, w->token, w->len, w->fence);
    RedisModuleBlockedClient *bc = RedisModule_GetBlockedClientHandle(ctx);
    w = table_get(bc);
    if (w) send_away(w);
    return RedisModule_ReplyWithNull(ctx);
}

static void on_disconnect(RedisModuleCtx *ctx, RedisModuleBlockedClient *bc) {
    (void)ctx;
    Waiter *w = table_get(bc);
    if (w) send_away(w);
}

static void free_granted(RedisModuleCtx *ctx, void *privdata) {
    (void)ctx;
    RedisModule_Free(privdata);
}

/* Grants the key to the caller or queues it (see FLOOR.ACQUIRE); `events`
 * sends a keyspace event for a grant. */
static int acquire(RedisModuleCtx *ctx, RedisModuleString **argv, long long lease_ms, long long timeout,
                   int events) {
    size_t len;
    const char *token = RedisModule_StringPtrLen(argv[2], &len);
    RedisModuleKey *key = RedisModule_OpenKey(ctx, argv[1], REDISMODULE_READ | REDISMODULE_WRITE);
    if (RedisModule_KeyType(key) == REDISMODULE_KEYTYPE_EMPTY) {
        Lock *l = RedisModule_Calloc(1, sizeof(*l));
        l->owner = copy(token, len);
        l->len = len;
        l->fence = ++last_fence;
        RedisModule_ModuleTypeSetValue(key, lock_type, l);
        RedisModule_SetExpire(key, lease_ms);
        RedisModule_CloseKey(key);
        if (events) RedisModule_NotifyKeyspaceEvent(ctx, REDISMODULE_NOTIFY_MODULE, "floor.acquired", argv[1]);
        replicate_apply(ctx, argv[1], token, len, l->fence, RedisModule_Milliseconds() + lease_ms);
        return reply_grant(ctx, token, len, l->fence);
    }
    if (RedisModule_ModuleTypeGetType(key) != lock_type) {
        RedisModule_CloseKey(key);
        return RedisModule_ReplyWithError(ctx, REDISMODULE_ERRORMSG_WRONGTYPE);
    }
    Lock *l = RedisModule_ModuleTypeGetValue(key);
    RedisModule_CloseKey(key);
    if (l->len == len && memcmp(l->owner, token, len) == 0) return reply_grant(ctx, token, len, l->fence);
    int flags = RedisModule_GetContextFlags(ctx);
    if (flags & (REDISMODULE_CTX_FLAGS_MULTI | REDISMODULE_CTX_FLAGS_LUA | REDISMODULE_CTX_FLAGS_DENY_BLOCKING))
        return RedisModule_ReplyWithNull(ctx);
    Waiter *w = RedisModule_Alloc(sizeof(*w) + len);
    memcpy(w->token, token, len);
    w->len = len;
    w->fence = 0;
    w->lease_ms = lease_ms;
    w->bc = RedisModule_BlockClient(ctx, on_reply, on_timeout, free_granted, timeout);
    RedisModule_SetDisconnectCallback(w->bc, on_disconnect);
    w->lock = l;
    w->next = NULL;
    w->prev = l->tail;
    if (l->tail) l->tail->next = w; else l->head = w;
    l->tail = w;
    table_put(w);
    return REDISMODULE_OK;
}

static int acquire_cmd(RedisModuleCtx *ctx, RedisModuleString **argv, int argc) {
    long long timeout;
    if (argc != 4) return RedisModule_WrongArity(ctx);
    if (RedisModule_StringToLongLong(argv[3], &timeout) != REDISMODULE_OK || timeout < 0)
        return RedisModule_ReplyWithError(ctx, "ERR invalid timeout");
    return acquire(ctx, argv, LEASE_MS, timeout, 0);
}

static int xacquire_cmd(RedisModuleCtx *ctx, RedisModuleString **argv, int argc) {
    long long lease_ms = -1, timeout = -1;
    if (argc != 7) return RedisModule_WrongArity(ctx);
    for (int i = 3; i < argc; i += 2) {
        const char *name = RedisModule_StringPtrLen(argv[i], NULL);
        long long v;
        if (RedisModule_StringToLongLong(argv[i + 1], &v) != REDISMODULE_OK || v < 0)
            return RedisModule_ReplyWithError(ctx, "ERR invalid number");
        if (!strcasecmp(name, "PX") && v > 0) lease_ms = v;
        else if (!strcasecmp(name, "BLOCK")) timeout = v;
        else return RedisModule_ReplyWithError(ctx, "ERR syntax error");
    }
    if (lease_ms < 0 || timeout < 0) return RedisModule_ReplyWithError(ctx, "ERR syntax error");
    int status = acquire(ctx, argv, lease_ms, timeout, 1);
    RedisModule_RedactClientCommandArgument(ctx, 2);
    return status;
}

/* Releases the key if the token owns it (see FLOOR.RELEASE); `events`
 * sends the keyspace events of a release and a handoff's grant. */
static int release(RedisModuleCtx *ctx, RedisModuleString **argv, int events) {
    size_t len;
    const char *token = RedisModule_StringPtrLen(argv[2], &len);
    RedisModuleKey *key = RedisModule_OpenKey(ctx, argv[1], REDISMODULE_READ | REDISMODULE_WRITE);
    if (RedisModule_ModuleTypeGetType(key) != lock_type) {
        RedisModule_CloseKey(key);
        return RedisModule_ReplyWithLongLong(ctx, 0);
    }
    Lock *l = RedisModule_ModuleTypeGetValue(key);
    if (l->len != len || memcmp(l->owner, token, len) != 0) {
        RedisModule_CloseKey(key);
        return RedisModule_ReplyWithLongLong(ctx, 0);
    }
    Waiter *w = l->head;
    if (!w) {
        RedisModule_DeleteKey(key);
        RedisModule_CloseKey(key);
        if (events) RedisModule_NotifyKeyspaceEvent(ctx, REDISMODULE_NOTIFY_MODULE, "floor.released", argv[1]);
        RedisModule_Replicate(ctx, "DEL", "s", argv[1]);
        return RedisModule_ReplyWithLongLong(ctx, 1);
    }
    leave(w);
    RedisModule_Free(l->owner);
    l->owner = copy(w->token, w->len);
    l->len = w->len;
    l->fence = w->fence = ++last_fence;
    RedisModule_SetExpire(key, w->lease_ms);
    RedisModule_CloseKey(key);
    if (events) {
        RedisModule_NotifyKeyspaceEvent(ctx, REDISMODULE_NOTIFY_MODULE, "floor.released", argv[1]);
        RedisModule_NotifyKeyspaceEvent(ctx, REDISMODULE_NOTIFY_MODULE, "floor.acquired", argv[1]);
    }
    replicate_apply(ctx, argv[1], w->token, w->len, w->fence, RedisModule_Milliseconds() + w->lease_ms);
    RedisModule_UnblockClient(w->bc, w);
    return RedisModule_ReplyWithLongLong(ctx, 1);
}

static int release_cmd(RedisModuleCtx *ctx, RedisModuleString **argv, int argc) {
    if (argc != 3) return RedisModule_WrongArity(ctx);
    return release(ctx, argv, 0);
}

static int xrelease_cmd(RedisModuleCtx *ctx, RedisModuleString **argv, int argc) {
    if (argc != 3) return RedisModule_WrongArity(ctx);
    int status = release(ctx, argv, 1);
    RedisModule_RedactClientCommandArgument(ctx, 2);
    return status;
}

static int apply_cmd(RedisModuleCtx *ctx, RedisModuleString **argv, int argc) {
    long long fence, at;
    if (argc != 5) return RedisModule_WrongArity(ctx);
    if (RedisModule_StringToLongLong(argv[3], &fence) != REDISMODULE_OK ||
        RedisModule_StringToLongLong(argv[4], &at) != REDISMODULE_OK)
        return RedisModule_ReplyWithError(ctx, "ERR invalid fence or time");
    size_t len;
    const char *token = RedisModule_StringPtrLen(argv[2], &len);
    RedisModuleKey *key = RedisModule_OpenKey(ctx, argv[1], REDISMODULE_READ | REDISMODULE_WRITE);
    Lock *l = RedisModule_Calloc(1, sizeof(*l));
    l->owner = copy(token, len);
    l->len = len;
    l->fence = fence;
    if (fence > last_fence) last_fence = fence;
    RedisModule_ModuleTypeSetValue(key, lock_type, l);
    long long ttl = at - RedisModule_Milliseconds();
    RedisModule_SetExpire(key, ttl > 0 ? ttl : 1);
    RedisModule_CloseKey(key);
    RedisModule_ReplicateVerbatim(ctx);
    return RedisModule_ReplyWithSimpleString(ctx, "OK");
}

/* The key is gone (released, deleted, expired, overwritten): its waiters
 * are answered nil. */
static void free_lock(void *value) {
    Lock *l = value;
    while (l->head) send_away(l->head);
    RedisModule_Free(l->owner);
    RedisModule_Free(l);
}

static void rdb_save(RedisModuleIO *rdb, void *value) {
    Lock *l = value;
    RedisModule_SaveStringBuffer(rdb, l->owner, l->len);
    RedisModule_SaveSigned(rdb, l->fence);
}

static void *rdb_load(RedisModuleIO *rdb, int encver) {
    (void)encver;
    size_t len;
    char *owner = RedisModule_LoadStringBuffer(rdb, &len);
    if (!owner) return NULL;
    Lock *l = RedisModule_Calloc(1, sizeof(*l));
    l->owner = copy(owner, len);
    l->len = len;
    RedisModule_Free(owner);
    l->fence = RedisModule_LoadSigned(rdb);
    if (l->fence > last_fence) last_fence = l->fence;
    return l;
}

int RedisModule_OnLoad(RedisModuleCtx *ctx, RedisModuleString **argv, int argc) {
    (void)argv;
    (void)argc;
    if (RedisModule_Init(ctx, "lockfloor", 1, REDISMODULE_APIVER_1) == REDISMODULE_ERR)
        return REDISMODULE_ERR;
    RedisModuleTypeMethods methods = {
        .version = REDISMODULE_TYPE_METHOD_VERSION,
        .rdb_load = rdb_load,
        .rdb_save = rdb_save,
        .free = free_lock,
    };
    lock_type = RedisModule_CreateDataType(ctx, "lockflr00", 0, &methods);
    if (!lock_type) return REDISMODULE_ERR;
    bits = 6;
    nslots = (size_t)1 << bits;
    slots = RedisModule_Calloc(nslots, sizeof(*slots));
    if (RedisModule_CreateCommand(ctx, "floor.acquire", acquire_cmd, "write deny-oom", 1, 1, 1) == REDISMODULE_ERR ||
        RedisModule_CreateCommand(ctx, "floor.release", release_cmd, "write", 1, 1, 1) == REDISMODULE_ERR ||
        RedisModule_CreateCommand(ctx, "floor.xacquire", xacquire_cmd, "write deny-oom", 1, 1, 1) == REDISMODULE_ERR ||
        RedisModule_CreateCommand(ctx, "floor.xrelease", xrelease_cmd, "write", 1, 1, 1) == REDISMODULE_ERR ||
        RedisModule_CreateCommand(ctx, "floor.apply", apply_cmd, "write deny-oom", 1, 1, 1) == REDISMODULE_ERR)
        return REDISMODULE_ERR;
    return REDISMODULE_OK;
}
