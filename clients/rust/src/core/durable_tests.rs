//! Durable grants, checked without a server.

use super::*;

fn text(lines: &[Vec<Vec<u8>>]) -> Vec<String> {
    lines
        .iter()
        .map(|l| {
            let words: Vec<String> = l
                .iter()
                .map(|w| String::from_utf8_lossy(w).into_owned())
                .collect();
            words.join(" ")
        })
        .collect()
}

fn aof(replicas: u64, local: bool, aof_replicas: u64) -> Replicas {
    Replicas {
        replicas,
        timeout: Duration::from_millis(700),
        aof_local: local,
        aof_replicas,
    }
}

fn pair(local: i64, n: i64) -> Value {
    Value::Array(vec![Value::Int(local), Value::Int(n)])
}

fn server_error(text: &str) -> redis::RedisError {
    match redis::parse_redis_value(format!("-{text}\r\n").as_bytes()) {
        Ok(Value::ServerError(e)) => e.into(),
        other => panic!("{other:?}"),
    }
}

#[test]
fn nothing_asked_sends_nothing() {
    assert_eq!(Replicas::new(0, DEFAULT_TIMEOUT), None);
    assert_eq!(Replicas::default().asked(), None);
    assert_eq!(Replicas::default().probe(), None);
    assert!(aof(0, true, 0).asked().is_some());
    assert!(aof(0, false, 1).asked().is_some());
}

#[test]
fn wait_is_bounded_by_the_lease_left_and_never_zero() {
    let r = Replicas::new(2, Duration::from_millis(1500)).unwrap();
    let (lines, bound) = r.wait(None);
    assert_eq!(text(&lines), ["WAIT 2 1500"]);
    assert_eq!(bound, Duration::from_millis(1500) + ANSWER_GRACE);
    assert_eq!(
        text(&r.wait(Some(Duration::from_millis(300))).0),
        ["WAIT 2 300"]
    );
    assert_eq!(text(&r.wait(Some(Duration::ZERO)).0), ["WAIT 2 1"]);
}

#[test]
fn waitaof_follows_with_or_without_wait() {
    assert_eq!(text(&aof(0, true, 0).wait(None).0), ["WAITAOF 1 0 700"]);
    assert_eq!(text(&aof(0, false, 2).wait(None).0), ["WAITAOF 0 2 700"]);
    assert_eq!(
        text(&aof(1, true, 1).wait(Some(Duration::from_millis(50))).0),
        ["WAIT 1 50", "WAITAOF 1 1 50"]
    );
    assert_eq!(
        aof(0, true, 0).probe().map(|l| text(&[l])),
        Some(vec!["WAITAOF 1 0 1".to_string()])
    );
    assert_eq!(
        aof(0, false, 1).probe().map(|l| text(&[l])),
        Some(vec!["WAITAOF 0 0 1".to_string()])
    );
    assert_eq!(aof(3, false, 0).probe(), None);
}

#[test]
fn acknowledgements_are_counted() {
    let r = Replicas::new(2, DEFAULT_TIMEOUT).unwrap();
    assert_eq!(r.acks(Some(&Value::Int(2))), (Some(2), true));
    assert_eq!(r.acks(Some(&Value::Int(3))), (Some(3), true));
    assert_eq!(r.acks(Some(&Value::Int(1))), (Some(1), false));
    assert_eq!(r.acks(None), (None, false));
    assert!(matches!(
        r.shortfall("x", Some(1)),
        Error::NotReplicated {
            replicas: Some(1),
            needed: 2,
            ..
        }
    ));
}

#[test]
fn fsyncs_are_counted() {
    let local = aof(0, true, 0);
    assert_eq!(local.acks(Some(&pair(1, 0))), (Some(0), true));
    assert_eq!(local.acks(Some(&pair(0, 0))), (Some(0), false));
    let both = aof(0, true, 1);
    assert_eq!(both.acks(Some(&pair(1, 1))), (Some(1), true));
    assert_eq!(both.acks(Some(&pair(1, 0))), (Some(0), false));
    assert_eq!(both.acks(Some(&Value::Int(1))), (None, false));
    let all = aof(2, false, 1);
    let answer = Value::Array(vec![Value::Int(2), pair(0, 1)]);
    assert_eq!(all.acks(Some(&answer)), (Some(1), true));
    let answer = Value::Array(vec![Value::Int(1), pair(0, 1)]);
    assert_eq!(all.acks(Some(&answer)), (Some(1), false));
    assert!(matches!(
        all.shortfall("x", None),
        Error::NotReplicated { needed: 2, .. }
    ));
    assert!(matches!(
        aof(0, false, 3).shortfall("x", None),
        Error::NotReplicated { needed: 3, .. }
    ));
}

#[test]
fn a_server_without_waitaof_is_unsupported() {
    let r = aof(0, true, 0);
    let unknown = server_error("ERR unknown command 'WAITAOF', with args beginning with: '1'");
    assert!(matches!(r.probe_failed(unknown, "k"), Error::Unsupported(m) if m.contains("WAITAOF")));
    let off =
        server_error("ERR WAITAOF cannot be used when numlocal is set but appendonly is disabled.");
    assert!(matches!(r.probe_failed(off, "k"), Error::Unsupported(m) if m.contains("appendonly")));
    let dropped: redis::RedisError =
        std::io::Error::from(std::io::ErrorKind::ConnectionReset).into();
    assert!(matches!(r.probe_failed(dropped, "k"), Error::Redis(_)));
}

#[test]
fn answers_are_joined() {
    assert_eq!(joined(vec![Value::Int(1)]), Value::Int(1));
    assert_eq!(
        joined(vec![Value::Int(1), pair(1, 0)]),
        Value::Array(vec![Value::Int(1), pair(1, 0)])
    );
}
