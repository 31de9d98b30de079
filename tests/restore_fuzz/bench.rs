//! A server to restore payloads into, and what it shows of what it restored.

use super::*;

/// A restored key as `LOCK.INFO` shows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Restored {
    Nothing,
    Gate {
        fence: u64,
    },
    Lock {
        token: Vec<u8>,
        fence: u64,
        data: Option<Vec<u8>>,
    },
    Holders {
        kind: Kind,
        listed: Vec<Listed>,
    },
}

/// A holder as `LOCK.INFO` lists it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Listed {
    pub(super) token: Vec<u8>,
    pub(super) fence: u64,
    pub(super) ttl: i64,
    pub(super) data: Option<Vec<u8>>,
}

pub(super) fn field(pairs: &[(Vec<u8>, Value)], name: &str) -> Value {
    pairs
        .iter()
        .find(|(k, _)| k == name.as_bytes())
        .map(|(_, v)| v.clone())
        .unwrap_or_else(|| panic!("no `{name}` in {pairs:?}"))
}

/// `LOCK.INFO key`, of any kind of lock.
pub(super) fn restored(con: &mut Connection, key: &str) -> Restored {
    let v = ok(con, &rcmd!("LOCK.INFO", key));
    if v == Value::Nil {
        return Restored::Nothing;
    }
    let p = field_pairs(&v);
    let fence = |p: &[(Vec<u8>, Value)]| as_int(&field(p, "fence")) as u64;
    // `data` is there only when the hold has some.
    let data = |p: &[(Vec<u8>, Value)]| {
        p.iter()
            .find(|(k, _)| k == b"data")
            .map(|(_, v)| as_bytes(v))
    };
    match as_bytes(&field(&p, "mode")).as_slice() {
        b"gate" => Restored::Gate { fence: fence(&p) },
        b"exclusive" => Restored::Lock {
            token: as_bytes(&field(&p, "token")),
            fence: fence(&p),
            data: data(&p),
        },
        mode @ (b"shared" | b"semaphore") => {
            let kind = if mode == b"shared" {
                Kind::Shared
            } else {
                Kind::Semaphore {
                    limit: as_int(&field(&p, "limit")) as u64,
                }
            };
            let Value::Array(list) = field(&p, "holders") else {
                panic!("LOCK.INFO {key}: holders are not a list: {v:?}");
            };
            let listed = list
                .iter()
                .map(|h| {
                    let h = field_pairs(h);
                    Listed {
                        token: as_bytes(&field(&h, "token")),
                        fence: fence(&h),
                        ttl: as_int(&field(&h, "ttl")),
                        data: data(&h),
                    }
                })
                .collect();
            Restored::Holders { kind, listed }
        }
        other => panic!("LOCK.INFO {key}: mode {:?}: {v:?}", lossy(other)),
    }
}

/// The holders `LOCK.INFO` listed, at some time between the Unix times `before` and `after`,
/// for a key restored with `holds`: exactly those whose lease had not ended, in fence order,
/// each with what is left of its lease as its TTL.
pub(super) fn check_listed(what: &str, listed: &[Listed], holds: &[Hold], before: i64, after: i64) {
    let mut want: Vec<&Hold> = holds.iter().collect();
    want.sort_by_key(|h| h.fence);
    let mut shown = listed.iter().peekable();
    for h in want {
        match shown.peek() {
            Some(l) if l.token == h.token => {
                assert!(
                    h.expire_at >= before,
                    "{what}: a lease that ended is listed: {h:?}"
                );
                // One millisecond either side: the server's clock and this process's are read
                // apart and rounded each on its own (seen 1 ms over on Valkey 9.1).
                let ttl =
                    h.expire_at.saturating_sub(after + 1)..=h.expire_at.saturating_sub(before - 1);
                assert!(
                    l.fence == h.fence && ttl.contains(&l.ttl) && l.data == h.data,
                    "{what}: {l:?} listed for {h:?} (TTL {ttl:?})"
                );
                shown.next();
            }
            _ => assert!(
                h.expire_at < after,
                "{what}: {h:?} is not listed (or out of order): {listed:?}"
            ),
        }
    }
    assert!(
        shown.next().is_none(),
        "{what}: listed holders that were not restored, or out of order: {listed:?} for {holds:?}"
    );
}

/// Whether `payload` (sealed) is a record of a key with holders, by its mode.
pub(super) fn has_holders(payload: &[u8]) -> bool {
    let mut r = Reader { b: payload, at: 1 };
    let Some(id) = r.value() else {
        return false;
    };
    if id & 1023 == ENCODING_VERSION {
        return packed::has_holders(&mut r);
    }
    matches!(
        r.uint(),
        Some(MODE_SHARED | MODE_SEMAPHORE | MODE_SHARED_WITH_DATA | MODE_SEMAPHORE_WITH_DATA)
    )
}

/// Whatever was accepted is a lock a server could hold.
pub(super) fn assert_plausible(what: &str, got: &Restored) {
    let token_ok = |t: &[u8]| (1..=MAX_TOKEN).contains(&t.len());
    match got {
        Restored::Nothing => {}
        Restored::Gate { fence } => assert!(valid_fence(*fence), "{what}: {got:?}"),
        Restored::Lock { token, fence, data } => {
            let data_ok = data
                .as_ref()
                .is_none_or(|d| (1..=MAX_DATA).contains(&d.len()));
            assert!(
                token_ok(token) && valid_fence(*fence) && data_ok,
                "{what}: {got:?}"
            )
        }
        Restored::Holders { kind, listed } => {
            if let Kind::Semaphore { limit } = *kind {
                assert!(
                    (1..=MAX_LIMIT).contains(&limit) && listed.len() as u64 <= limit,
                    "{what}: {got:?}"
                );
            }
            let tokens: HashSet<&[u8]> = listed.iter().map(|l| &l.token[..]).collect();
            assert!(
                tokens.len() == listed.len()
                    && listed.windows(2).all(|w| w[0].fence < w[1].fence)
                    && listed
                        .iter()
                        .all(|l| token_ok(&l.token) && valid_fence(l.fence) && l.ttl >= 0),
                "{what}: {got:?}"
            );
        }
    }
}

pub(super) const STRING_SENTINEL: &str = "sentinel:string";
pub(super) const LOCK_SENTINEL: &str = "sentinel:lock";

pub(super) struct Bench {
    pub(super) s: Server,
    pub(super) c: Connection,
    /// The module type id without its encoding version.
    pub(super) name_bits: u64,
    pub(super) sentinel_fence: i64,
    pub(super) last_fence: i64,
    pub(super) n: usize,
    pub(super) accepted: usize,
    pub(super) refused: usize,
    /// Accepted keys with holders, checked holder by holder.
    pub(super) exact_holders: usize,
    /// Cases the reference decoder left to the server (`Expect::Either`).
    pub(super) either: usize,
}

impl Bench {
    pub(super) fn start() -> Bench {
        let s = Server::start();
        let mut c = s.conn();
        c.set_read_timeout(Some(Duration::from_secs(5) * time_scale()))
            .unwrap();
        ok(&mut c, &rcmd!("SET", STRING_SENTINEL, "untouched"));
        let (_, sentinel_fence) = grant(&mut c, LOCK_SENTINEL, b"sentinel", 3_600_000);
        let mut b = Bench {
            s,
            c,
            name_bits: 0,
            sentinel_fence,
            last_fence: sentinel_fence,
            n: 0,
            accepted: 0,
            refused: 0,
            exact_holders: 0,
            either: 0,
        };
        let base = b.dump_of("probe", b"probe-token");
        b.name_bits = module_id(&base.body) >> 10;
        b
    }

    /// A lock granted now with `token`, as `DUMP` gives it.
    pub(super) fn dump_of(&mut self, key: &str, token: &[u8]) -> Dump {
        grant(&mut self.c, key, token, 3_600_000);
        let payload = as_bytes(&ok(&mut self.c, &rcmd!("DUMP", key)));
        ok(&mut self.c, &rcmd!("DEL", key));
        Dump::parse(&payload)
    }

    /// A read/write lock (`options` `SHARED`) or a semaphore (`LIMIT n`) granted now to each of
    /// `tokens`, as `DUMP` gives it, and the grants.
    pub(super) fn dump_holders(
        &mut self,
        key: &str,
        tokens: &[&[u8]],
        options: &[&str],
    ) -> (Dump, Vec<(Vec<u8>, u64)>) {
        let mut grants = Vec::new();
        for token in tokens {
            let mut cmd = rcmd!("LOCK.ACQUIRE", key, *token, "PX", 3_600_000);
            for o in options {
                cmd.arg(*o);
            }
            let (token, fence) = parse_grant(&ok(&mut self.c, &cmd))
                .unwrap_or_else(|| panic!("{key}: {} should hold", lossy(token)));
            grants.push((token, fence as u64));
        }
        let payload = as_bytes(&ok(&mut self.c, &rcmd!("DUMP", key)));
        ok(&mut self.c, &rcmd!("DEL", key));
        (Dump::parse(&payload), grants)
    }

    /// `RESTORE` of `payload` into a fresh key, and every check that follows.
    pub(super) fn case(&mut self, what: &str, payload: &[u8], want: &Expect) {
        self.n += 1;
        self.either += usize::from(*want == Expect::Either);
        let key = format!("restored:{}", self.n);
        let r = run(&mut self.c, &rcmd!("RESTORE", &key, 0, payload));
        let answered = match &r {
            Ok(v) => {
                assert_eq!(*v, Value::Okay, "{what}: RESTORE answered {v:?}");
                true
            }
            Err(e) => {
                assert!(
                    !e.is_io_error() && !e.is_connection_dropped() && !e.is_timeout(),
                    "{what}: the server did not answer RESTORE: {e}\n{}",
                    self.s.log_tail(20)
                );
                false
            }
        };
        match (want, answered) {
            (Expect::Refused, true) => panic!(
                "{what}: a damaged payload was accepted: {:?}",
                restored(&mut self.c, &key)
            ),
            (Expect::Refused | Expect::Either, false) => {}
            (_, false) => panic!(
                "{what}: a valid payload was refused: {}",
                err_text(r.as_ref().unwrap_err())
            ),
            (_, true) => {
                let before = now_ms();
                let got = restored(&mut self.c, &key);
                let after = now_ms();
                let kind = type_of(&mut self.c, &key);
                // A key whose every lease has ended goes once the server notices.
                let may_be_gone = match want {
                    Expect::Holders { holds, .. } => holds.iter().all(|h| h.expire_at < after),
                    Expect::Either => has_holders(payload),
                    _ => false,
                };
                assert!(
                    kind == "redislock" || (may_be_gone && kind == "none"),
                    "{what}: the restored key is of type {kind}: {got:?}"
                );
                match want {
                    _ if got == Restored::Nothing => {
                        assert!(may_be_gone, "{what}: accepted, but LOCK.INFO shows nothing")
                    }
                    Expect::Lock { token, fence, data } => {
                        let want = Restored::Lock {
                            token: token.clone(),
                            fence: *fence,
                            data: data.clone(),
                        };
                        assert_eq!(got, want, "{what}: restored lock");
                    }
                    Expect::Gate { fence } => {
                        assert_eq!(got, Restored::Gate { fence: *fence }, "{what}: gate");
                    }
                    Expect::Holders { kind, holds } => {
                        let Restored::Holders { kind: k, listed } = &got else {
                            panic!("{what}: restored {got:?}, not holders {holds:?}");
                        };
                        assert_eq!(k, kind, "{what}: restored kind");
                        check_listed(what, listed, holds, before, after);
                        // RESTORE was given TTL 0; the key's TTL becomes its latest lease.
                        let latest = holds.iter().map(|h| h.expire_at).max().unwrap_or(0);
                        let ttl_is_lease = format!("{what}: the TTL of the latest lease");
                        wait_until(&ttl_is_lease, Duration::from_secs(5), || {
                            let at = pexpiretime(&mut self.c, &key);
                            at == latest || (latest < now_ms() && at == -2)
                        });
                        self.exact_holders += 1;
                    }
                    Expect::Refused | Expect::Either => assert_plausible(what, &got),
                }
            }
        }
        if answered {
            self.accepted += 1;
        } else {
            self.refused += 1;
            assert!(
                !exists(&mut self.c, &key),
                "{what}: a refused RESTORE left a key"
            );
        }
        ok(&mut self.c, &rcmd!("DEL", &key));
        self.assert_healthy(what);
    }

    /// The server answers, the sentinels are as they were, and a new lock gets a fence that is
    /// larger than the last one, not exhausted, and of a plausible epoch.
    pub(super) fn assert_healthy(&mut self, what: &str) {
        ping(&mut self.c);
        let v = ok(&mut self.c, &rcmd!("GET", STRING_SENTINEL));
        assert_eq!(as_bytes(&v), b"untouched", "{what}: sentinel string");
        let held = info_some(&mut self.c, LOCK_SENTINEL);
        assert_eq!(
            (held.token.as_slice(), held.fence),
            (&b"sentinel"[..], self.sentinel_fence),
            "{what}: sentinel lock"
        );
        let (_, fence) = grant(&mut self.c, "fresh", b"fresh", 10_000);
        assert!(fence > self.last_fence, "{what}: fence {fence} went back");
        assert!(fence < i64::MAX, "{what}: fences exhausted");
        assert!(
            fence >> EPOCH_SHIFT <= 65,
            "{what}: fence {fence} is in epoch {}",
            fence >> EPOCH_SHIFT
        );
        self.last_fence = fence;
        assert_eq!(release(&mut self.c, "fresh", b"fresh"), 1);
    }

    pub(super) fn expect(&self, payload: &[u8]) -> Expect {
        expect(payload, self.name_bits, now_ms())
    }

    /// Ends a run: no abort, no crash, no module read error in the log.
    pub(super) fn finish(&mut self, label: &str) {
        self.assert_healthy(label);
        let log = self.s.log();
        assert!(
            !log.contains("Error loading data from RDB"),
            "{label}: a module read error aborted loading\n{}",
            self.s.log_tail(30)
        );
        let crashes = self.s.crash_lines();
        assert!(crashes.is_empty(), "{label}: {}", crashes.join("\n"));
    }
}

pub(super) fn module_id(body: &[u8]) -> u64 {
    let mut r = Reader { b: body, at: 1 };
    r.value().expect("module id")
}

/// A fence of epoch `epoch` at Unix time `at_ms`.
pub(super) fn fence_at(epoch: u64, at_ms: i64) -> u64 {
    (epoch << EPOCH_SHIFT) | (((at_ms - TIME_BASE_MS) as u64) << 10)
}
