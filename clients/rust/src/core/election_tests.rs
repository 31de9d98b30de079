//! The decisions of an election, checked without a server.

use super::*;

fn reply(fence: i64, data: Option<&str>) -> Value {
    Value::Array(vec![
        Value::Int(fence),
        data.map_or(Value::Nil, |d| Value::BulkString(d.as_bytes().to_vec())),
    ])
}

fn text(args: &[Vec<u8>]) -> String {
    let words: Vec<String> = args
        .iter()
        .map(|a| String::from_utf8_lossy(a).into_owned())
        .collect();
    words.join(" ")
}

fn leader(term: u64, data: &str) -> Change {
    Change::Leader(Leader {
        term,
        data: Some(data.as_bytes().to_vec()),
    })
}

#[test]
fn an_observation_gives_out_each_change_once() {
    let mut o = Observation::new();
    let (first, block) = o.request(b"e", Duration::from_secs(5));
    assert_eq!((text(&first).as_str(), block), ("LOCK.OBSERVE e", None));
    assert_eq!(o.answer(&reply(0, None)).unwrap(), Change::Unchanged);
    let (next, block) = o.request(b"e", Duration::from_secs(5));
    assert_eq!(text(&next), "LOCK.OBSERVE e AFTER 0 SEEN  BLOCK 5000");
    assert_eq!(block, Some(Duration::from_secs(5)));
    assert_eq!(o.answer(&reply(7, Some("a"))).unwrap(), leader(7, "a"));
    assert_eq!(o.answer(&Value::Nil).unwrap(), Change::Unchanged);
    assert_eq!(o.answer(&reply(7, Some("a"))).unwrap(), Change::Unchanged);
    assert_eq!(o.answer(&reply(7, Some("b"))).unwrap(), leader(7, "b"));
    let (next, _) = o.request(b"e", Duration::from_millis(10));
    assert_eq!(text(&next), "LOCK.OBSERVE e AFTER 7 SEEN b BLOCK 10");
    assert_eq!(o.answer(&reply(0, None)).unwrap(), Change::Vacant);
    assert_eq!(o.answer(&reply(0, None)).unwrap(), Change::Unchanged);
    assert_eq!(o.answer(&reply(5, Some("old"))).unwrap(), Change::Unchanged);
    assert_eq!(
        o.answer(&reply(9, None)).unwrap(),
        Change::Leader(Leader {
            term: 9,
            data: None
        })
    );
    assert!(o.answer(&Value::Int(3)).is_err());
}

#[test]
fn steps_wait_out_what_waiting_mends_and_end_after_the_rest() {
    let mut o = Observation::new();
    let (line, bound) = o.next_request(b"e", OBSERVE_BLOCK);
    assert_eq!(text(&line), "LOCK.OBSERVE e");
    assert_eq!(bound, crate::COMMAND_TIMEOUT);
    let dropped = || std::io::Error::from(std::io::ErrorKind::ConnectionReset).into();
    assert!(matches!(o.step(Err(dropped()), b"e"), Step::Pause(d) if d == RETRY_FIRST));
    let held = Value::Array(vec![Value::Int(3), Value::BulkString(b"a".to_vec())]);
    assert!(matches!(
        o.step(Ok(held.clone()), b"e"),
        Step::Give(Ok(Some(Leader { term: 3, .. })))
    ));
    assert!(matches!(o.step(Err(dropped()), b"e"), Step::Pause(d) if d == RETRY_FIRST));
    assert!(matches!(o.step(Ok(held), b"e"), Step::Again));
    let (_, bound) = o.next_request(b"e", OBSERVE_BLOCK);
    assert_eq!(bound, OBSERVE_BLOCK + super::super::acquire::WAIT_GRACE);
    assert!(!o.ended());
    let wrong = match redis::parse_redis_value(b"-WRONGTYPE Operation\r\n") {
        Ok(Value::ServerError(e)) => redis::RedisError::from(e),
        other => panic!("{other:?}"),
    };
    assert!(matches!(o.step(Err(wrong), b"e"), Step::Give(Err(_))));
    assert!(o.ended());
}

#[test]
fn pauses_double_up_to_a_second() {
    let mut o = Observation::new();
    let pauses: Vec<u128> = (0..7).map(|_| o.failed().as_millis()).collect();
    assert_eq!(pauses, [50, 100, 200, 400, 800, 1000, 1000]);
    assert_eq!(retry_pause(40), RETRY_MOST);
    o.answer(&Value::Nil).unwrap();
    assert_eq!(o.failed(), RETRY_FIRST);
}

#[test]
fn leaders_data_and_proclamations() {
    assert_eq!(leader_of(&reply(0, None)).unwrap(), None);
    assert_eq!(
        leader_of(&reply(3, Some("x"))).unwrap(),
        Some(Leader {
            term: 3,
            data: Some(b"x".to_vec())
        })
    );
    assert!(check_data(b"").is_err());
    assert!(check_data(&[0; 4096]).is_ok());
    assert!(matches!(check_data(&[0; 4097]), Err(Error::Invalid(_))));
    assert_eq!(proclaimed(Some((b"t".to_vec(), 4)), 4), Proclaimed::Done);
    assert_eq!(
        proclaimed(Some((b"t".to_vec(), 8)), 4),
        Proclaimed::GiveBack
    );
    assert_eq!(proclaimed(None, 4), Proclaimed::Lost);
    let io: redis::RedisError = std::io::Error::from(std::io::ErrorKind::ConnectionRefused).into();
    assert!(run_retries(&Error::Redis(io)));
    assert!(run_retries(&Error::Timeout {
        name: "e".into(),
        what: "acquire"
    }));
    assert!(!run_retries(&Error::NotOwner { name: "e".into() }));
    assert!(not_now("LOADING Redis is loading"));
    assert!(!not_now("WRONGTYPE x"));
}

#[test]
fn proclamations_resignations_and_retries() {
    let line = proclamation(b"e", b"tok", Ttl::Px(900), b"v2");
    assert_eq!(text(&line), "LOCK.ACQUIRE e tok PX 900 EPHEMERAL DATA v2");
    let granted = |fence| Value::Array(vec![Value::BulkString(b"tok".to_vec()), Value::Int(fence)]);
    assert_eq!(
        proclamation_reply(&granted(4), 4).unwrap(),
        Proclaimed::Done
    );
    assert_eq!(
        proclamation_reply(&granted(5), 4).unwrap(),
        Proclaimed::GiveBack
    );
    assert_eq!(
        proclamation_reply(&Value::Nil, 4).unwrap(),
        Proclaimed::Lost
    );
    assert!(resigned(Ok(())).unwrap());
    assert!(!resigned(Err(Error::Lost { name: "e".into() })).unwrap());
    assert!(!resigned(Err(Error::NotOwner { name: "e".into() })).unwrap());
    assert!(resigned(Err(Error::Invalid("x".into()))).is_err());
    let mut r = Retries::default();
    let down = || Error::Redis(std::io::Error::from(std::io::ErrorKind::ConnectionRefused).into());
    assert_eq!(r.failed(down()).unwrap(), RETRY_FIRST);
    assert_eq!(r.failed(down()).unwrap(), RETRY_FIRST * 2);
    r.elected();
    assert_eq!(r.failed(down()).unwrap(), RETRY_FIRST);
    assert!(r.failed(Error::Invalid("x".into())).is_err());
}
