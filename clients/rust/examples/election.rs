//! Several keys at once and a leader election from Rust: the example of docs/clients.md.
//!
//!     cargo run -p redislock-client --example election  # the server on 127.0.0.1:6379, or on the port in REDIS_PORT

use std::time::Duration;

use redislock_client::{Error, Locker};

fn main() -> Result<(), Error> {
    let port = std::env::var("REDIS_PORT").unwrap_or_else(|_| "6379".to_string());
    let locker = Locker::open(format!("redis://127.0.0.1:{port}/").as_str())?;

    // Both accounts in one LOCK.ACQUIREALL (one hash tag: one slot), a fence per key.
    let accounts = locker.multi_lock(["{acct}:alice", "{acct}:bob"]);
    let hold = accounts.acquire(Duration::from_secs(5))?;
    let fences = hold.fences(); // in the order given; fence_of(name) by name
    println!("fences: alice {}, bob {}", fences[0], fences[1]);
    assert_eq!(hold.fence_of("{acct}:bob"), Some(fences[1]));
    hold.release()?;

    // Keys in two hash slots are refused before anything is sent.
    let apart = locker.multi_lock(["account:alice", "account:bob"]);
    assert!(matches!(apart.try_acquire(), Err(Error::CrossSlot(_))));

    // An election: the term is the fence of the leader's grant, on a connection of its own.
    let mut observer = locker.election("election:api").observe();
    let mut candidate = locker.election("election:api").data("10.0.0.1:8080");
    let term = candidate.campaign(Some(Duration::from_secs(5)))?;
    println!("leading in term {term}: {}", candidate.is_leader());
    let leader = observer
        .next()
        .expect("an observer goes on")?
        .expect("a leader");
    let data = String::from_utf8_lossy(leader.data.as_deref().unwrap_or_default());
    println!("observed term {} at {data}", leader.term);
    candidate.proclaim("10.0.0.1:9090")?; // the same term, a new value for observers
    let leader = observer
        .next()
        .expect("an observer goes on")?
        .expect("a leader");
    let data = String::from_utf8_lossy(leader.data.as_deref().unwrap_or_default());
    println!("observed term {} at {data}", leader.term);
    candidate.resign()?;
    println!("resigned; leader now: {:?}", candidate.leader()?);
    Ok(())
}
