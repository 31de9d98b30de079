//! A TCP proxy to a server that can hold all traffic back (a partition) and let it go again,
//! cut the connections through it, and refuse new ones.

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread;

struct Gate {
    held: Mutex<bool>,
    cv: Condvar,
}

pub struct Proxy {
    pub port: u16,
    /// Client to server, and server to client.
    gates: [Arc<Gate>; 2],
    stop: Arc<AtomicBool>,
    /// New connections are closed at once.
    refusing: Arc<AtomicBool>,
    /// Both ends of every connection made through the proxy.
    conns: Arc<Mutex<Vec<TcpStream>>>,
}

impl Proxy {
    pub fn to(port: u16) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let my_port = listener.local_addr().unwrap().port();
        let gate = || {
            Arc::new(Gate {
                held: Mutex::new(false),
                cv: Condvar::new(),
            })
        };
        let gates = [gate(), gate()];
        let stop = Arc::new(AtomicBool::new(false));
        let refusing = Arc::new(AtomicBool::new(false));
        let conns = Arc::new(Mutex::new(Vec::new()));
        let (g, s, r, c) = (gates.clone(), stop.clone(), refusing.clone(), conns.clone());
        thread::spawn(move || {
            for client in listener.incoming() {
                if s.load(Ordering::SeqCst) {
                    return;
                }
                let Ok(client) = client else { return };
                if r.load(Ordering::SeqCst) {
                    let _ = client.shutdown(Shutdown::Both);
                    continue;
                }
                let Ok(server) = TcpStream::connect(("127.0.0.1", port)) else {
                    continue;
                };
                let mut open = c.lock().unwrap();
                open.push(client.try_clone().unwrap());
                open.push(server.try_clone().unwrap());
                drop(open);
                pipe(
                    client.try_clone().unwrap(),
                    server.try_clone().unwrap(),
                    g[0].clone(),
                );
                pipe(server, client, g[1].clone());
            }
        });
        Proxy {
            port: my_port,
            gates,
            stop,
            refusing,
            conns,
        }
    }

    /// Closes every connection made through the proxy so far (both ends).
    pub fn cut(&self) {
        for c in self.conns.lock().unwrap().drain(..) {
            let _ = c.shutdown(Shutdown::Both);
        }
    }

    /// From now on (`true`), new connections are closed as soon as they are accepted.
    pub fn refuse(&self, on: bool) {
        self.refusing.store(on, Ordering::SeqCst);
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    /// From now on, bytes in either direction are held back.
    pub fn hold(&self) {
        for g in &self.gates {
            *g.held.lock().unwrap() = true;
        }
    }

    /// From now on, the server's replies are held back (requests go through).
    pub fn hold_replies(&self) {
        *self.gates[1].held.lock().unwrap() = true;
    }

    /// Lets held and new traffic through.
    pub fn release(&self) {
        for g in &self.gates {
            *g.held.lock().unwrap() = false;
            g.cv.notify_all();
        }
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        self.release();
        let _ = TcpStream::connect(("127.0.0.1", self.port));
    }
}

fn pipe(mut from: TcpStream, mut to: TcpStream, gate: Arc<Gate>) {
    thread::spawn(move || {
        let mut buf = [0u8; 16384];
        loop {
            let n = match from.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => n,
            };
            let mut held = gate.held.lock().unwrap();
            while *held {
                held = gate.cv.wait(held).unwrap();
            }
            drop(held);
            if to.write_all(&buf[..n]).is_err() {
                break;
            }
        }
        let _ = to.shutdown(Shutdown::Write);
    });
}
