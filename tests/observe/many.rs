//! Many observers woken by one release: every one is answered, and the server goes on serving
//! other clients meanwhile — a PING from another connection waits no longer than it does while
//! the same server delivers one PUBLISH to as many subscribers, measured side by side.

use std::io::{BufReader, Write};
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use super::*;
use crate::common::*;

/// The 20,000 observers of the SPEC, or as many as this process's and the server's open-file
/// limits allow (each connection is a file at both ends), less room for the other tests.
fn how_many() -> usize {
    let limits = std::fs::read_to_string("/proc/self/limits").unwrap_or_default();
    let open_files = limits
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .and_then(|l| l.split_whitespace().nth(3))
        .and_then(|n| n.parse::<usize>().ok())
        .unwrap_or(20_000);
    20_000.min(open_files.saturating_sub(1_000))
}

/// `n` plain connections.
fn connect_many(s: &Server, n: usize) -> Vec<BufReader<TcpStream>> {
    (0..n)
        .map(|_| {
            let stream = TcpStream::connect(("127.0.0.1", s.port())).expect("connect");
            stream.set_read_timeout(Some(io_timeout())).unwrap();
            stream.set_nodelay(true).unwrap();
            BufReader::with_capacity(256, stream)
        })
        .collect()
}

/// Sends `args` on every connection, then reads one reply from each.
fn call_all(conns: &mut [BufReader<TcpStream>], args: &[&str]) -> Vec<Resp> {
    let bytes = resp_commands(&[args]);
    for c in conns.iter_mut() {
        c.get_mut().write_all(&bytes).expect("write");
    }
    conns
        .iter_mut()
        .map(|c| read_resp(c, 0).expect("reply"))
        .collect()
}

/// Sends `args` on every connection without reading.
fn send_all(conns: &mut [BufReader<TcpStream>], args: &[&str]) {
    let bytes = resp_commands(&[args]);
    for c in conns.iter_mut() {
        c.get_mut().write_all(&bytes).expect("write");
    }
}

/// PINGs from a connection of its own until stopped; the worst round trip.
struct Pinger {
    stop: Arc<AtomicBool>,
    worst: thread::JoinHandle<Duration>,
}

impl Pinger {
    fn start(s: &Server) -> Pinger {
        let mut con = RawConn::connect(s);
        con.call(&["PING"]);
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = Arc::clone(&stop);
        let (running, started) = std::sync::mpsc::channel();
        let worst = thread::spawn(move || {
            let (mut worst, mut n) = (Duration::ZERO, 0);
            loop {
                let t = Instant::now();
                assert_eq!(con.call(&["PING"]), Resp::Simple(b"PONG".to_vec()));
                worst = worst.max(t.elapsed());
                n += 1;
                if n == 1 {
                    running.send(()).unwrap();
                }
                if stopped.load(Ordering::Relaxed) {
                    break;
                }
            }
            worst
        });
        // The thread is pinging before the round begins, however late it was scheduled: a
        // round that no PING overlapped would pass whatever the stall.
        started.recv().unwrap();
        Pinger { stop, worst }
    }

    fn stop(self) -> Duration {
        self.stop.store(true, Ordering::Relaxed);
        self.worst.join().unwrap()
    }
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

/// `n` observers of one lock, each blocked on its holder's fence, all woken by one release;
/// every one answered `[0, nil]`. Returns the worst PING meanwhile, and how long the last
/// observer waited for its answer.
fn wake_round(
    s: &Server,
    conns: &mut [BufReader<TcpStream>],
    c: &mut Connection,
) -> (Duration, Duration) {
    let n = conns.len();
    let (_, f) = grant(c, "leader", b"a", 600_000);
    send_all(
        conns,
        &[
            "LOCK.OBSERVE",
            "leader",
            "AFTER",
            &f.to_string(),
            "BLOCK",
            "60000",
        ],
    );
    wait_until(&format!("{n} observers"), Duration::from_secs(30), || {
        observers(s) == n as i64
    });
    let pinger = Pinger::start(s);
    let released = Instant::now();
    assert_eq!(release(c, "leader", b"a"), 1);
    for (i, conn) in conns.iter_mut().enumerate() {
        let got = read_resp(conn, 0).unwrap_or_else(|e| panic!("observer {i}: {e}"));
        assert_eq!(
            got,
            Resp::Array(vec![Resp::Int(0), Resp::Nil]),
            "observer {i}"
        );
    }
    let all_answered = released.elapsed();
    let worst = pinger.stop();
    assert_eq!(observers(s), 0);
    (worst, all_answered)
}

/// One PUBLISH to every connection (each subscribed); the worst PING meanwhile.
fn publish_round(s: &Server, conns: &mut [BufReader<TcpStream>], c: &mut Connection) -> Duration {
    let pinger = Pinger::start(s);
    let reached = as_int(&ok(c, &rcmd!("PUBLISH", "news", "leader changed")));
    assert_eq!(reached, conns.len() as i64);
    for conn in conns.iter_mut() {
        assert!(matches!(read_resp(conn, 0), Ok(Resp::Other(b'>', _))));
    }
    pinger.stop()
}

#[test]
fn two_hundred_observers_are_all_answered() {
    let s = Server::start();
    let mut c = s.conn();
    let mut conns = connect_many(&s, 200);
    for _ in 0..3 {
        let (_, all) = wake_round(&s, &mut conns, &mut c);
        assert!(all < Duration::from_secs(1) * time_scale(), "{all:?}");
    }
}

#[test]
fn thousands_of_observers_woken_at_once_stall_nobody_more_than_a_publish() {
    let _files = many_files();
    let n = how_many();
    let s = Server::builder()
        .set("maxclients", &(n + 100).to_string())
        .start();
    let mut c = s.conn();
    let mut conns = connect_many(&s, n);
    for r in call_all(&mut conns, &["HELLO", "3"]) {
        assert!(matches!(r, Resp::Other(b'%', _)), "{r:?}");
    }
    // Side by side, three rounds each: a PUBLISH to the n subscribers, n observers woken. (A
    // subscribed connection may not block on some servers: it unsubscribes to observe.)
    let (mut publish, mut wake, mut all) = (Vec::new(), Vec::new(), Vec::new());
    let passes = stat(&s, "timer_passes_cut");
    for _ in 0..3 {
        for r in call_all(&mut conns, &["SUBSCRIBE", "news"]) {
            assert!(matches!(r, Resp::Other(b'>', _)), "{r:?}");
        }
        publish.push(publish_round(&s, &mut conns, &mut c));
        for r in call_all(&mut conns, &["UNSUBSCRIBE", "news"]) {
            assert!(matches!(r, Resp::Other(b'>', _)), "{r:?}");
        }
        let (worst, answered) = wake_round(&s, &mut conns, &mut c);
        wake.push(worst);
        all.push(answered);
    }
    let (publish, wake, all) = (median(publish), median(wake), median(all));
    eprintln!(
        "{n} observers: worst PING {wake:?} while they were woken, {publish:?} while a PUBLISH \
         reached as many subscribers; the last observer answered {all:?} after the release \
         (medians of 3); passes cut: {}",
        stat(&s, "timer_passes_cut") - passes
    );
    assert!(
        wake <= publish,
        "{n} observers woken stall a PING {wake:?}, a PUBLISH to as many {publish:?}"
    );
}
