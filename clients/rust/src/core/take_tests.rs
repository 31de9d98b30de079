//! The steps of an acquire, checked without a server.

use super::*;

fn text(line: &[Vec<u8>]) -> String {
    let words: Vec<String> = line
        .iter()
        .map(|a| String::from_utf8_lossy(a).into_owned())
        .collect();
    words.join(" ")
}

fn tok() -> Token {
    Token::Given(b"t".to_vec())
}

fn grant(fence: i64) -> Value {
    Value::Array(vec![Value::BulkString(b"t".to_vec()), Value::Int(fence)])
}

fn grant_all(fences: &[i64]) -> Value {
    let list = fences.iter().map(|f| Value::Int(*f)).collect();
    Value::Array(vec![Value::BulkString(b"t".to_vec()), Value::Array(list)])
}

fn dropped() -> redis::RedisError {
    std::io::Error::from(std::io::ErrorKind::ConnectionReset).into()
}

fn server_error(text: &str) -> redis::RedisError {
    match redis::parse_redis_value(format!("-{text}\r\n").as_bytes()) {
        Ok(Value::ServerError(e)) => e.into(),
        other => panic!("{other:?}"),
    }
}

fn line(step: &Step) -> String {
    match step {
        Step::Send { line, .. } | Step::Release(line) => text(line),
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_try_granted_at_once() {
    let now = Instant::now();
    let mut t = Take::one(
        b"k",
        tok(),
        Ttl::Px(1000),
        Mode::Exclusive,
        Attempt::new(None),
    );
    assert_eq!(line(&t.next(now)), "LOCK.ACQUIRE k t PX 1000");
    let later = now + Duration::from_millis(5);
    match t.answered(Ok((grant(7), None)), later) {
        Step::Done(Ok(Some(g))) => assert_eq!((g.fences, g.sent), (vec![7], now)),
        other => panic!("{other:?}"),
    }
    let mut t = Take::one(
        b"k",
        tok(),
        Ttl::Px(1000),
        Mode::Exclusive,
        Attempt::new(None),
    );
    t.next(now);
    assert!(matches!(
        t.answered(Ok((Value::Nil, None)), now),
        Step::Done(Ok(None))
    ));
}

#[test]
fn a_wait_cut_short_waits_on_and_a_dropped_one_is_sent_again_once() {
    let now = Instant::now();
    let deadline = now + Duration::from_secs(1);
    let mut t = Take::one(
        b"k",
        tok(),
        Ttl::Px(1000),
        Mode::Shared,
        Attempt::new(Some(deadline)),
    )
    .ephemeral(Some(b"d"));
    assert_eq!(
        line(&t.next(now)),
        "LOCK.ACQUIRE k t PX 1000 SHARED EPHEMERAL DATA d BLOCK 1000"
    );
    let at = now + Duration::from_millis(400);
    assert!(line(&t.answered(Ok((Value::Nil, None)), at)).ends_with("BLOCK 600"));
    assert!(matches!(t.answered(Err(dropped()), at), Step::Send { .. }));
    assert!(matches!(
        t.answered(Err(dropped()), at),
        Step::Done(Err(Error::Redis(_)))
    ));
    assert!(matches!(t.next(deadline), Step::Done(Ok(None))));
}

#[test]
fn a_grant_after_a_long_wait_is_renewed_at_once() {
    let now = Instant::now();
    let deadline = now + Duration::from_secs(5);
    let mut t = Take::one(
        b"k",
        tok(),
        Ttl::Px(100),
        Mode::Exclusive,
        Attempt::new(Some(deadline)),
    );
    t.next(now);
    let at = now + Duration::from_secs(2);
    match t.answered(Ok((grant(3), None)), at) {
        Step::Renew(lines) => assert_eq!(text(&lines[0]), "LOCK.EXTEND k t PX 100"),
        other => panic!("{other:?}"),
    }
    let after = at + Duration::from_millis(1);
    match t.renewed(&[Renewed::Extended], after) {
        Step::Done(Ok(Some(g))) => assert_eq!(g.sent, at),
        other => panic!("{other:?}"),
    }
    // Gone already: wait on.
    t.next(now);
    t.answered(Ok((grant(3), None)), at);
    assert!(matches!(
        t.renewed(&[Renewed::Gone], after),
        Step::Send { .. }
    ));
    // Unknown: from the request.
    t.next(now);
    t.answered(Ok((grant(3), None)), at);
    match t.renewed(&[Renewed::Failed], after) {
        Step::Done(Ok(Some(g))) => assert_eq!(g.sent, now),
        other => panic!("{other:?}"),
    }
}

#[test]
fn several_keys_gone_in_part_are_given_back() {
    let now = Instant::now();
    let names = vec![b"{a}1".to_vec(), b"{a}2".to_vec()];
    let deadline = now + Duration::from_secs(5);
    let mut t = Take::all(
        &names,
        tok(),
        Ttl::Px(100),
        Mode::Exclusive,
        Attempt::new(Some(deadline)),
    );
    assert_eq!(
        line(&t.next(now)),
        "LOCK.ACQUIREALL 2 {a}1 {a}2 t PX 100 BLOCK 5000"
    );
    let at = now + Duration::from_secs(1);
    assert!(matches!(
        t.answered(Ok((grant_all(&[4, 9]), None)), at),
        Step::Renew(l) if l.len() == 2
    ));
    let step = t.renewed(&[Renewed::Extended, Renewed::Gone], at);
    assert_eq!(line(&step), "LOCK.RELEASEALL 2 {a}1 {a}2 t");
    assert!(matches!(t.next(at), Step::Send { .. }));
    let bad = vec![b"x".to_vec(), b"y".to_vec()];
    let mut t = Take::all(
        &bad,
        tok(),
        Ttl::Px(100),
        Mode::Exclusive,
        Attempt::new(None),
    );
    assert!(matches!(t.next(now), Step::Done(Err(Error::CrossSlot(_)))));
}

#[test]
fn a_grant_not_acknowledged_is_given_back_and_fails() {
    let now = Instant::now();
    let r = Replicas::new(1, Duration::from_millis(50));
    let mut t = Take::one(
        b"k",
        tok(),
        Ttl::Px(1000),
        Mode::Exclusive,
        Attempt::new(None),
    )
    .replicas(r);
    t.next(now);
    assert!((t.follow_up())(&grant(1)).is_some());
    let step = t.answered(Ok((grant(1), Some(Value::Int(0)))), now);
    assert_eq!(line(&step), "LOCK.RELEASE k t");
    assert!(matches!(
        t.next(now),
        Step::Done(Err(Error::NotReplicated {
            replicas: Some(0),
            ..
        }))
    ));
    t.next(now);
    assert!(matches!(
        t.answered(Ok((grant(1), Some(Value::Int(1)))), now),
        Step::Done(Ok(Some(_)))
    ));
}

#[test]
fn outcomes() {
    assert_eq!(outcome(Some(&Value::Int(1))), Renewed::Extended);
    assert_eq!(outcome(Some(&Value::Int(0))), Renewed::Gone);
    assert_eq!(outcome(Some(&Value::Nil)), Renewed::Failed);
    assert_eq!(outcome(None), Renewed::Failed);
}

/// On a Cluster, a wait (one key or several, bound or not) that a slot move or a failover
/// interrupts is sent again with the time it has left, never with its first `BLOCK`.
#[test]
fn a_redirected_wait_is_sent_again_with_the_time_left() {
    let now = Instant::now();
    let deadline = now + Duration::from_secs(1);
    let names = vec![b"{a}1".to_vec(), b"{a}2".to_vec()];
    let takes = [
        Take::one(
            b"k",
            tok(),
            Ttl::Px(1000),
            Mode::Exclusive,
            Attempt::new(Some(deadline)),
        ),
        Take::all(
            &names,
            tok(),
            Ttl::Px(1000),
            Mode::Exclusive,
            Attempt::new(Some(deadline)),
        )
        .ephemeral(None),
    ];
    for mut t in takes {
        assert!(line(&t.next(now)).ends_with("BLOCK 1000"));
        let at = now + Duration::from_millis(300);
        let moved = server_error("MOVED 1 127.0.0.1:7001");
        assert!(line(&t.answered(Err(moved), at)).ends_with("BLOCK 700"));
        let lost = server_error(super::super::redirect::NODE_LOST);
        let Step::Pause(pause) = t.answered(Err(lost), at) else {
            panic!("a lost node is waited out")
        };
        let at = at + pause;
        let left = format!("BLOCK {}", (deadline - at).as_millis());
        assert!(line(&t.next(at)).ends_with(&left));
        let busy = server_error("TRYAGAIN x");
        assert!(matches!(
            t.answered(Err(busy), deadline),
            Step::Done(Ok(None))
        ));
    }
}
