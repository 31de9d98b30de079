//! A TCP proxy to a server that can hold all traffic back (a partition) and let it go again.

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
        let (g, s) = (gates.clone(), stop.clone());
        thread::spawn(move || {
            for client in listener.incoming() {
                if s.load(Ordering::SeqCst) {
                    return;
                }
                let Ok(client) = client else { return };
                let Ok(server) = TcpStream::connect(("127.0.0.1", port)) else {
                    continue;
                };
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
        }
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
