//! Accepted TCP connections that have not finished the handshake
//! (handshake.rs).  The FLIH owns them alone: they sit in its epoll set,
//! never in the endpoint's connection set, so a stranger is never a peer,
//! never wakes a receiver, and is never a loss or a goodbye.
//!
//! Bounded in number and in time, so silent connections cannot pile up:
//! at most CAP at once (a new one closes the oldest; a real connector
//! answers its challenge within a round trip, so a flood must outpace that
//! to push it out, and the connector then retries), and each is closed
//! HELLO_DEADLINE after it was accepted.

use crate::net::handshake::{self, Nonce, Secret, Transcript, HELLO_BYTES};
#[cfg(test)]
use crate::net::handshake::Connector;
use std::collections::{HashMap, VecDeque};
use std::io::{self, Read};
use std::net::TcpStream;

/// Marks a pending connection's token in the FLIH's epoll set.
pub(crate) const PENDING_BIT: u64 = 1 << 60;
pub(crate) const CAP: usize = 64;
pub(crate) const HELLO_DEADLINE_NS: u64 = 3_000_000_000;

pub(crate) struct Pending {
    pub stream: TcpStream,
    nonce: Nonce,
    hello: [u8; HELLO_BYTES],
    got: usize,
    deadline: u64,
}

/// What a readable pending connection came to.
pub(crate) enum Step {
    /// Waiting for more of the hello.
    More,
    /// A valid hello: the connection belongs to `t.connector` (its job,
    /// task and key).
    Greeted(Pending, Transcript),
    /// Closed, garbage, or a hello that fails the check: drop it.
    Stranger(Pending),
}

/// What the listener knows to check a hello.
pub(crate) struct Listener<'a> {
    pub secret: &'a Secret,
    pub job_hash: u64,
    pub task: u32,
    pub max_tasks: u32,
}

#[derive(Default)]
pub(crate) struct PendingSet {
    conns: HashMap<u64, Pending>,
    /// Tokens in accept order, which is deadline order (stale ones skipped).
    order: VecDeque<u64>,
}

impl PendingSet {
    pub fn len(&self) -> usize {
        self.conns.len()
    }

    /// Track a connection that was sent its challenge (nonce).  At CAP
    /// already, the oldest makes room: it is returned, for the caller to close.
    #[must_use]
    pub fn insert(&mut self, token: u64, stream: TcpStream, nonce: Nonce, now: u64) -> Option<Pending> {
        let evicted = if self.len() >= CAP { self.pop_oldest() } else { None };
        let p = Pending { stream, nonce, hello: [0; HELLO_BYTES], got: 0, deadline: now + HELLO_DEADLINE_NS };
        self.conns.insert(token, p);
        self.order.push_back(token);
        evicted
    }

    /// The oldest connection, taken out.
    fn pop_oldest(&mut self) -> Option<Pending> {
        while let Some(t) = self.order.pop_front() {
            if let Some(p) = self.conns.remove(&t) {
                return Some(p);
            }
        }
        None
    }

    /// Connections past their deadline, taken out.
    pub fn expired(&mut self, now: u64) -> Vec<Pending> {
        let mut out = vec![];
        while let Some(t) = self.order.front() {
            match self.conns.get(t) {
                Some(p) if p.deadline > now => break,
                Some(_) => out.extend(self.conns.remove(t)),
                None => {}
            }
            self.order.pop_front();
        }
        out
    }

    /// When the next deadline passes, if any connection is pending.
    pub fn next_deadline(&mut self) -> Option<u64> {
        while let Some(t) = self.order.front() {
            if let Some(p) = self.conns.get(t) {
                return Some(p.deadline);
            }
            self.order.pop_front();
        }
        None
    }

    /// Read what the connection sent, up to the end of the hello and no
    /// further (frames that follow stay in the socket for the connection's
    /// reader), and check the hello once it is whole.
    pub fn readable(&mut self, token: u64, me: &Listener) -> Step {
        let Some(p) = self.conns.get_mut(&token) else { return Step::More };
        match p.read_hello(me) {
            None => Step::More,
            Some(checked) => {
                let p = self.conns.remove(&token).expect("looked up above");
                match checked {
                    Some(t) => Step::Greeted(p, t),
                    None => Step::Stranger(p),
                }
            }
        }
    }
}

impl Pending {
    /// None while the hello is incomplete; then Some(the check's result)
    /// (None for a stranger: closed, garbage, or a hello that fails).
    fn read_hello(&mut self, me: &Listener) -> Option<Option<Transcript>> {
        loop {
            match (&self.stream).read(&mut self.hello[self.got..]) {
                Ok(0) => return Some(None),
                Ok(n) => {
                    self.got += n;
                    if self.got < HELLO_BYTES {
                        // Another protocol or version is told at once.
                        if !handshake::hello_prefix_ok(&self.hello[..self.got]) {
                            return Some(None);
                        }
                        continue;
                    }
                    return Some(handshake::verify_hello(&self.hello, me.secret, me.job_hash, me.task, &self.nonce, me.max_tasks));
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return None,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => return Some(None),
            }
        }
    }

    /// A connection leaving the set (past its deadline, or pushed out by a
    /// newer one): greeted if its whole hello is in the socket by now.  The
    /// FLIH may not have seen it yet: it was busy accepting a flood, or its
    /// process was stopped past the deadline with the hello waiting.
    pub fn last_look(mut self, me: &Listener) -> Step {
        match self.read_hello(me) {
            Some(Some(t)) => Step::Greeted(self, t),
            _ => Step::Stranger(self),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;

    fn pair(l: &TcpListener) -> (TcpStream, TcpStream) {
        let c = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (s, _) = l.accept().unwrap();
        s.set_nonblocking(true).unwrap();
        (c, s)
    }

    /// Connection i is accepted at time i us: its deadline tells it apart.
    fn deadline_of(i: u64) -> u64 {
        HELLO_DEADLINE_NS + i * 1000
    }

    #[test]
    fn the_cap_closes_the_oldest_and_deadlines_come_in_accept_order() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let mut set = PendingSet::default();
        let mut clients = vec![];
        let mut evicted = vec![];
        for i in 0..CAP as u64 + 2 {
            let (c, s) = pair(&l);
            clients.push(c);
            evicted.extend(set.insert(100 + i, s, [0; 16], i * 1000).map(|p| p.deadline));
            assert_eq!(set.len(), CAP.min(i as usize + 1));
        }
        assert_eq!(evicted, [deadline_of(0), deadline_of(1)], "the two oldest made room, in order");
        // One that finished its handshake leaves a stale token in the order.
        let greeted = set.conns.remove(&(100 + 3)).unwrap();
        assert_eq!(greeted.deadline, deadline_of(3));
        assert_eq!(set.next_deadline(), Some(deadline_of(2)));
        let gone: Vec<u64> = set.expired(deadline_of(5)).iter().map(|p| p.deadline).collect();
        assert_eq!(gone, [deadline_of(2), deadline_of(4), deadline_of(5)]);
        assert_eq!(set.len(), CAP - 4);
        assert_eq!(set.next_deadline(), Some(deadline_of(6)));
        assert_eq!(set.expired(u64::MAX).len(), CAP - 4);
        assert_eq!(set.next_deadline(), None);
    }

    #[test]
    fn reads_the_hello_and_no_further() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let key = [7u8; 16];
        let me = Listener { secret: &key, job_hash: 5, task: 0, max_tasks: 10 };
        let mut set = PendingSet::default();
        let (mut c, s) = pair(&l);
        assert!(set.insert(20, s, [1; 16], 0).is_none());
        let who = Connector { job_hash: 5, task: 3, key: 11 };
        let t = Transcript { listener_job: 5, listener: 0, connector: who, nonce_l: [1; 16], nonce_c: [2; 16] };
        use std::io::Write;
        let hello = t.hello(&key);
        c.write_all(&hello[..10]).unwrap();
        std::thread::sleep(std::time::Duration::from_millis(20));
        assert!(matches!(set.readable(20, &me), Step::More));
        c.write_all(&hello[10..]).unwrap();
        c.write_all(b"frame").unwrap();
        std::thread::sleep(std::time::Duration::from_millis(20));
        let Step::Greeted(p, t) = set.readable(20, &me) else { panic!("a valid hello") };
        assert_eq!(t.connector, who);
        let mut rest = [0u8; 5];
        (&p.stream).read_exact(&mut rest).unwrap();
        assert_eq!(&rest, b"frame", "the bytes after the hello stay in the socket");

        let (mut c, s) = pair(&l);
        assert!(set.insert(21, s, [1; 16], 0).is_none());
        c.write_all(&t.hello(&[8; 16])).unwrap();
        std::thread::sleep(std::time::Duration::from_millis(20));
        assert!(matches!(set.readable(21, &me), Step::Stranger(_)), "another secret");
        assert_eq!(set.len(), 0);
    }

    /// A connection leaving the set by its deadline or the cap is greeted
    /// if its hello came meanwhile, unread (the FLIH was stopped or busy);
    /// a silent one or a wrong hello is a stranger.
    #[test]
    fn a_hello_waiting_in_the_socket_is_read_before_the_connection_leaves() {
        use std::io::Write;
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let key = [7u8; 16];
        let me = Listener { secret: &key, job_hash: 5, task: 0, max_tasks: 10 };
        let who = Connector { job_hash: 5, task: 3, key: 11 };
        let t = Transcript { listener_job: 5, listener: 0, connector: who, nonce_l: [1; 16], nonce_c: [2; 16] };
        let mut set = PendingSet::default();
        let (mut real, s) = pair(&l);
        assert!(set.insert(1, s, [1; 16], 0).is_none());
        real.write_all(&t.hello(&key)).unwrap();
        let (mut wrong, s) = pair(&l);
        assert!(set.insert(2, s, [1; 16], 0).is_none());
        wrong.write_all(&t.hello(&[8; 16])).unwrap();
        let (_silent, s) = pair(&l);
        assert!(set.insert(3, s, [1; 16], 0).is_none());
        std::thread::sleep(std::time::Duration::from_millis(20));
        let steps: Vec<Step> = set.expired(u64::MAX).into_iter().map(|p| p.last_look(&me)).collect();
        assert!(matches!(&steps[..], [Step::Greeted(_, t), Step::Stranger(_), Step::Stranger(_)] if t.connector.task == 3));

        let (mut real, s) = pair(&l);
        assert!(set.insert(10, s, [1; 16], 0).is_none());
        real.write_all(&t.hello(&key)).unwrap();
        std::thread::sleep(std::time::Duration::from_millis(20));
        let (mut pushed_out, mut clients) = (vec![], vec![]);
        for i in 0..CAP as u64 {
            let (c, s) = pair(&l);
            clients.push(c);
            pushed_out.extend(set.insert(11 + i, s, [0; 16], 0));
        }
        assert!(matches!(&pushed_out.pop().map(|p| p.last_look(&me)), Some(Step::Greeted(..))), "pushed out by the cap");
    }
}
