//! `Election::run`'s callbacks (`on_elected`, `on_new_leader`), and a campaign without limit
//! waiting in the server with `BLOCK 0`.

use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use redislock_client::{aio, Leader, Locker};

use crate::common::{until, Server};

const SEC: Duration = Duration::from_secs(1);

#[derive(Clone, Debug, PartialEq, Eq)]
enum Event {
    Elected(u64),
    Work(u64),
    Leader(Option<(u64, String)>),
}

type Events = Arc<Mutex<Vec<Event>>>;

fn seen(leader: Option<&Leader>) -> Event {
    Event::Leader(leader.map(|l| {
        let data = l.data.clone().unwrap_or_default();
        (l.term, String::from_utf8(data).unwrap())
    }))
}

fn has(events: &Events, e: &Event) -> bool {
    events.lock().unwrap().contains(e)
}

fn position(events: &Events, e: &Event) -> usize {
    let all = events.lock().unwrap();
    all.iter()
        .position(|x| x == e)
        .unwrap_or_else(|| panic!("{e:?} not in {all:?}"))
}

/// Stops a run when dropped: a failing test does not leave it campaigning.
struct StopOnDrop(redislock_client::Stopper);

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        self.0.stop();
    }
}

/// Waits (async) until `cond` holds; panics after 10 s.
async fn until_async(what: &str, cond: impl Fn() -> bool) {
    let deadline = std::time::Instant::now() + 10 * SEC;
    while !cond() {
        assert!(
            std::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// How many threads of this process run a follower.
fn followers() -> usize {
    std::fs::read_dir("/proc/self/task")
        .unwrap()
        .filter_map(|t| std::fs::read_to_string(t.unwrap().path().join("comm")).ok())
        .filter(|name| name.trim() == "redislock-follow")
        .count()
}

#[test]
fn run_calls_on_elected_before_the_work_and_on_new_leader_until_it_returns() {
    let server = Server::start();
    let locker = Locker::open(server.url().as_str()).unwrap();
    let mut b = locker.election("er:svc").data("b");
    let t1 = b.campaign(Some(SEC)).unwrap();
    let events = Events::default();
    let (on_elected, on_new_leader) = (events.clone(), events.clone());
    let mut a = locker
        .election("er:svc")
        .data("a")
        .on_elected(move |t| on_elected.lock().unwrap().push(Event::Elected(t)))
        .on_new_leader(move |l| on_new_leader.lock().unwrap().push(seen(l)));
    let stopper = a.stopper();
    let _stop = StopOnDrop(a.stopper());
    let at_return = std::thread::scope(|s| {
        let _stop = StopOnDrop(a.stopper());
        let working = events.clone();
        let runner = s.spawn(move || {
            a.run(|term| {
                working.lock().unwrap().push(Event::Work(term.term()));
                let mine = Event::Leader(Some((term.term(), "a".into())));
                until(10 * SEC, "the follower to see this term", || {
                    has(&working, &mine)
                });
                stopper.stop();
            })
        });
        until(10 * SEC, "the follower to see b", || {
            has(&events, &Event::Leader(Some((t1, "b".into()))))
        });
        until(10 * SEC, "a waiting in the server", || {
            locker.info("er:svc").unwrap().unwrap().waiters == 1
        });
        assert!(b.resign().unwrap());
        runner.join().unwrap().unwrap();
        events.lock().unwrap().clone()
    });
    let t2 = at_return
        .iter()
        .find_map(|e| match e {
            Event::Elected(t) => Some(*t),
            _ => None,
        })
        .expect("elected");
    assert!(t2 > t1);
    assert!(position(&events, &Event::Elected(t2)) < position(&events, &Event::Work(t2)));
    assert_eq!(
        position(&events, &Event::Leader(Some((t1, "b".into())))),
        0,
        "{at_return:?}"
    );
    // Once the follower is gone, a change (b leads again) reaches no callback.
    until(10 * SEC, "the follower to leave", || followers() == 0);
    let t3 = b.campaign(Some(SEC)).unwrap();
    let mut observer = locker.election("er:svc").observe();
    assert_eq!(observer.next().unwrap().unwrap().map(|l| l.term), Some(t3));
    assert_eq!(*events.lock().unwrap(), at_return);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_tokio_front_end() {
    let server = Server::start();
    let locker = aio::Locker::open(server.url().as_str()).unwrap();
    let mut b = locker.election("er:aio").data("b");
    let t1 = b.campaign(Some(SEC)).await.unwrap();
    let events = Events::default();
    let (on_elected, on_new_leader) = (events.clone(), events.clone());
    let mut a = locker
        .election("er:aio")
        .data("a")
        .on_elected(move |t| on_elected.lock().unwrap().push(Event::Elected(t)))
        .on_new_leader(move |l| on_new_leader.lock().unwrap().push(seen(l)));
    let stopper = a.stopper();
    let _stop = StopOnDrop(a.stopper());
    let working = events.clone();
    let runner = tokio::spawn(async move {
        a.run(|term| {
            let (working, stopper) = (working.clone(), stopper.clone());
            async move {
                working.lock().unwrap().push(Event::Work(term.term()));
                let mine = Event::Leader(Some((term.term(), "a".into())));
                let seen = || has(&working, &mine);
                until_async("the follower to see this term", seen).await;
                stopper.stop();
            }
        })
        .await
    });
    let plain = Locker::open(server.url().as_str()).unwrap();
    let b_seen = Event::Leader(Some((t1, "b".into())));
    tokio::task::spawn_blocking(move || {
        until(10 * SEC, "a waiting in the server", || {
            plain.info("er:aio").unwrap().unwrap().waiters == 1
        })
    })
    .await
    .unwrap();
    until_async("the follower to see b", || has(&events, &b_seen)).await;
    assert!(b.resign().await.unwrap());
    tokio::time::timeout(30 * SEC, runner)
        .await
        .expect("the run returns")
        .unwrap()
        .unwrap();
    let at_return = events.lock().unwrap().clone();
    let t2 = at_return
        .iter()
        .find_map(|e| match e {
            Event::Elected(t) => Some(*t),
            _ => None,
        })
        .expect("elected");
    assert!(t2 > t1);
    assert!(position(&events, &Event::Elected(t2)) < position(&events, &Event::Work(t2)));
    assert_eq!(position(&events, &b_seen), 0, "{at_return:?}");
    // The follower task ended with the run: a change reaches no callback.
    let t3 = b.campaign(Some(SEC)).await.unwrap();
    let mut observer = locker.election("er:aio").observe();
    let next = observer.next().await.unwrap().unwrap();
    assert_eq!(next.map(|l| l.term), Some(t3));
    assert_eq!(*events.lock().unwrap(), at_return);
}

/// The commands the server runs, as `MONITOR` shows them.
struct Monitor {
    lines: BufReader<TcpStream>,
}

impl Monitor {
    fn start(server: &Server) -> Monitor {
        let mut s = TcpStream::connect(("127.0.0.1", server.port)).unwrap();
        s.set_read_timeout(Some(30 * SEC)).unwrap();
        s.write_all(b"MONITOR\r\n").unwrap();
        let mut lines = BufReader::new(s);
        let mut ok = String::new();
        lines.read_line(&mut ok).unwrap();
        assert_eq!(ok, "+OK\r\n");
        Monitor { lines }
    }

    /// The next command line of `LOCK.ACQUIRE` of `name`.
    fn acquire_of(&mut self, name: &str) -> String {
        let key = format!("\"{name}\"");
        loop {
            let mut line = String::new();
            self.lines.read_line(&mut line).unwrap();
            if line.contains("\"LOCK.ACQUIRE\"") && line.contains(&key) {
                return line.trim_end().to_string();
            }
        }
    }
}

#[test]
fn a_campaign_without_limit_waits_with_block_0() {
    let server = Server::start();
    let locker = Locker::open(server.url().as_str()).unwrap();
    let mut a = locker.election("er:forever");
    a.campaign(Some(SEC)).unwrap();
    let mut monitor = Monitor::start(&server);
    std::thread::scope(|s| {
        let mut b = locker.election("er:forever");
        let waiting = s.spawn(move || b.campaign(None));
        let line = monitor.acquire_of("er:forever");
        assert!(a.resign().unwrap());
        waiting.join().unwrap().unwrap();
        assert!(line.ends_with("\"BLOCK\" \"0\""), "{line}");
    });
}

#[tokio::test]
async fn a_tokio_campaign_without_limit_waits_with_block_0() {
    let server = Server::start();
    let locker = aio::Locker::open(server.url().as_str()).unwrap();
    let mut a = locker.election("er:forever:aio");
    a.campaign(Some(SEC)).await.unwrap();
    let mut monitor = Monitor::start(&server);
    let mut b = locker.election("er:forever:aio");
    let waiting = tokio::spawn(async move { b.campaign(None).await });
    let line = tokio::task::spawn_blocking(move || monitor.acquire_of("er:forever:aio"))
        .await
        .unwrap();
    assert!(a.resign().await.unwrap());
    waiting.await.unwrap().unwrap();
    assert!(line.ends_with("\"BLOCK\" \"0\""), "{line}");
}
