//! Tag matching for one endpoint: posted receives and unexpected
//! messages, one pair of queues for untagged messages and one for tagged.
//!
//! Order is MPI's: a message goes to the first posted receive that matches
//! it, a receive takes the first unexpected message that matches it, and
//! the core delivers each source's messages in the order they were sent,
//! so no message overtakes another from the same source.  The queues know
//! nothing of buffers: a posted receive carries an opaque `R` that the
//! caller copies into.  A multi-receive buffer is bookkept here (offsets,
//! release) so that it can be tested without memory.

use crate::kept_bytes::KeptBytes;
use std::collections::VecDeque;

/// Where a message came from: a core task and its endpoint's window.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Source {
    pub task: u32,
    pub window: u32,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Msg = 0,
    Tagged = 1,
}

/// What a receive accepts: a source (None: any) and the tag bits outside
/// `ignore` (untagged receives match on the source only).
#[derive(Clone, Copy, Debug)]
pub struct Want {
    pub src: Option<Source>,
    pub tag: u64,
    pub ignore: u64,
}

impl Want {
    pub fn any() -> Want {
        Want { src: None, tag: 0, ignore: u64::MAX }
    }

    fn matches(&self, kind: Kind, src: Source, tag: u64) -> bool {
        self.src.is_none_or(|s| s == src) && (kind == Kind::Msg || (tag | self.ignore) == (self.tag | self.ignore))
    }
}

/// A multi-receive buffer's fill state.
#[derive(Clone, Copy, Debug)]
pub struct Multi {
    pub cap: usize,
    pub used: usize,
}

/// A posted receive.  `ctx` is the application's context (what fi_cancel names).
pub struct Posted<R> {
    pub want: Want,
    pub ctx: usize,
    pub multi: Option<Multi>,
    pub r: R,
}

/// A message that arrived before its receive: its payload is kept here.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unexpected {
    pub src: Source,
    pub tag: u64,
    pub data: Option<u64>,
    pub payload: KeptBytes,
    /// Some(len): `payload` names a message of `len` bytes that is still in
    /// its sender's memory (wire.rs `Rndv`).
    pub remote: Option<usize>,
}

impl Unexpected {
    /// The message's length.
    pub fn len(&self) -> usize {
        self.remote.unwrap_or(self.payload.len())
    }

    pub fn peeked(&self) -> Peeked {
        Peeked { src: self.src, tag: self.tag, data: self.data, len: self.len() }
    }
}

/// Where a message goes.
#[derive(Debug, PartialEq, Eq)]
pub enum Into<R> {
    /// A single receive, now done.
    One(R),
    /// A multi-receive buffer at `offset`; `last`: the buffer is released
    /// with this message (less than the minimum is left, or it is full).
    Multi { r: R, offset: usize, last: bool },
}

/// What an arriving message found.
#[derive(Debug, PartialEq, Eq)]
pub struct Arrival<R> {
    /// A multi-receive buffer released first, because the message did not
    /// fit in what it had left: it completes with no message.
    pub released: Option<R>,
    /// None: no receive matched, the message was queued as unexpected.
    pub into: Option<Into<R>>,
}

/// What a newly posted receive took from the unexpected queue.
#[derive(Debug, PartialEq, Eq)]
pub struct Posting<R> {
    pub placed: Placements<(Into<R>, Unexpected)>,
    /// A multi-receive buffer released with no message.
    pub released: Option<R>,
}

/// The messages a post took, in order: the first in place (a single
/// receive takes at most one, and a vector's heap block for it was ~180
/// instructions of every receive posted after its message came), any
/// more (a multi-receive buffer) in a vector.
#[derive(Debug, PartialEq, Eq)]
pub struct Placements<T> {
    first: Option<T>,
    rest: Vec<T>,
}

impl<T> Placements<T> {
    fn new() -> Placements<T> {
        Placements { first: None, rest: Vec::new() }
    }

    fn push(&mut self, t: T) {
        match self.first {
            None => self.first = Some(t),
            Some(_) => self.rest.push(t),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.first.is_none()
    }

    pub fn len(&self) -> usize {
        usize::from(self.first.is_some()) + self.rest.len()
    }

    pub fn iter(&self) -> impl Iterator<Item = &T> {
        self.first.iter().chain(self.rest.iter())
    }
}

impl<T> IntoIterator for Placements<T> {
    type Item = T;
    type IntoIter = std::iter::Chain<std::option::IntoIter<T>, std::vec::IntoIter<T>>;

    fn into_iter(self) -> Self::IntoIter {
        self.first.into_iter().chain(self.rest)
    }
}

impl<T> std::ops::Index<usize> for Placements<T> {
    type Output = T;

    fn index(&self, i: usize) -> &T {
        match i {
            0 => self.first.as_ref().expect("index 0 of no placement"),
            _ => &self.rest[i - 1],
        }
    }
}

/// What a peek found: a copy of the message's description.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Peeked {
    pub src: Source,
    pub tag: u64,
    pub data: Option<u64>,
    pub len: usize,
}

pub struct Matcher<R> {
    posted: [VecDeque<Posted<R>>; 2],
    unexpected: [VecDeque<Unexpected>; 2],
    /// Messages a peek claimed, by the claiming context.
    claimed: Vec<(usize, Unexpected)>,
    /// A multi-receive buffer is released once less than this is left.
    pub min_multi: usize,
}

impl<R> Default for Matcher<R> {
    fn default() -> Self {
        Matcher {
            posted: [VecDeque::new(), VecDeque::new()],
            unexpected: [VecDeque::new(), VecDeque::new()],
            claimed: Vec::new(),
            min_multi: 0,
        }
    }
}

impl<R: Clone> Matcher<R> {
    /// A message arrives: into the first matching posted receive, or queued.
    #[inline]
    pub fn arrive(&mut self, kind: Kind, src: Source, tag: u64, data: Option<u64>, payload: &[u8]) -> Arrival<R> {
        self.arrive_with(kind, src, tag, data, payload, None)
    }

    /// A message of `len` bytes left in its sender's memory arrives, named
    /// by `desc`: as `arrive`, and kept as `desc` if no receive takes it.
    pub fn arrive_remote(&mut self, kind: Kind, src: Source, tag: u64, data: Option<u64>, desc: &[u8], len: usize) -> Arrival<R> {
        self.arrive_with(kind, src, tag, data, desc, Some(len))
    }

    /// The common case alone: the first posted receive takes the message
    /// (a single receive that matches it).  None: `arrive` decides.
    #[inline]
    pub fn arrive_front(&mut self, kind: Kind, src: Source, tag: u64) -> Option<R> {
        let q = &mut self.posted[kind as usize];
        if q.front().is_some_and(|p| p.multi.is_none() && p.want.matches(kind, src, tag)) {
            return q.pop_front().map(|p| p.r);
        }
        None
    }

    /// Inlined into the caller: the common case, a stream into receives
    /// posted in its order, where the first one takes the message (no
    /// search, no shift of the queue); the rest in `arrive_search`.
    #[inline]
    fn arrive_with(&mut self, kind: Kind, src: Source, tag: u64, data: Option<u64>, payload: &[u8], remote: Option<usize>) -> Arrival<R> {
        if let Some(r) = self.arrive_front(kind, src, tag) {
            return Arrival { released: None, into: Some(Into::One(r)) };
        }
        self.arrive_search(kind, src, tag, data, payload, remote)
    }

    #[inline(never)]
    fn arrive_search(&mut self, kind: Kind, src: Source, tag: u64, data: Option<u64>, payload: &[u8], remote: Option<usize>) -> Arrival<R> {
        let len = remote.unwrap_or(payload.len());
        let mut released = None;
        let q = &mut self.posted[kind as usize];
        let Some(i) = q.iter().position(|p| p.want.matches(kind, src, tag)) else {
            self.unexpected[kind as usize].push_back(Unexpected { src, tag, data, payload: KeptBytes::copy_of(payload), remote });
            return Arrival { released, into: None };
        };
        if q[i].multi.is_none() {
            let p = q.remove(i).expect("index found above");
            return Arrival { released, into: Some(Into::One(p.r)) };
        }
        let mut i = i;
        loop {
            match self.place(kind, i, len) {
                Placed::Into(into) => return Arrival { released, into: Some(into) },
                Placed::DidNotFit(r) => {
                    // Only one buffer can be released per message: the next
                    // matching one is either fresh (it takes the message) or
                    // also partly used (then it is released the same way,
                    // and reported on the next arrival's pass: see below).
                    debug_assert!(released.is_none());
                    released = Some(r);
                    let q = &self.posted[kind as usize];
                    match q.iter().position(|p| p.want.matches(kind, src, tag)) {
                        Some(j) if q[j].multi.is_some_and(|m| m.used == 0) || q[j].multi.is_none() => {
                            if q[j].multi.is_none() {
                                let p = self.posted[kind as usize].remove(j).expect("index found above");
                                return Arrival { released, into: Some(Into::One(p.r)) };
                            }
                            i = j;
                        }
                        _ => {
                            self.unexpected[kind as usize].push_back(Unexpected {
                                src,
                                tag,
                                data,
                                payload: KeptBytes::copy_of(payload),
                                remote,
                            });
                            return Arrival { released, into: None };
                        }
                    }
                }
            }
        }
    }

    /// Put `len` bytes into the multi-receive buffer at `i` of `kind`'s
    /// posted queue.  A fresh buffer always takes the message (truncated
    /// if it must be, and then released).
    fn place(&mut self, kind: Kind, i: usize, len: usize) -> Placed<R> {
        let q = &mut self.posted[kind as usize];
        let p = &mut q[i];
        let m = p.multi.as_mut().expect("a multi-receive entry");
        let left = m.cap - m.used;
        if len > left && m.used > 0 {
            let p = q.remove(i).expect("index is valid");
            return Placed::DidNotFit(p.r);
        }
        let offset = m.used;
        m.used += len.min(left);
        let last = m.cap - m.used < self.min_multi.max(1) || len >= left;
        let r = p.r.clone();
        if last {
            q.remove(i);
        }
        Placed::Into(Into::Multi { r, offset, last })
    }

    /// Post a receive: it takes the first matching unexpected message (a
    /// multi-receive buffer takes as many as fit), else it waits in order.
    pub fn post(&mut self, kind: Kind, p: Posted<R>) -> Posting<R> {
        let mut out = Posting { placed: Placements::new(), released: None };
        let want = p.want;
        let uq = &mut self.unexpected[kind as usize];
        if p.multi.is_none() {
            if let Some(i) = uq.iter().position(|u| want.matches(kind, u.src, u.tag)) {
                let u = uq.remove(i).expect("index found above");
                out.placed.push((Into::One(p.r), u));
            } else {
                self.posted[kind as usize].push_back(p);
            }
            return out;
        }
        // A multi-receive buffer goes last in the queue, then drains the
        // unexpected messages it matches while it lasts.
        self.posted[kind as usize].push_back(p);
        let at = self.posted[kind as usize].len() - 1;
        loop {
            let uq = &self.unexpected[kind as usize];
            let Some(i) = uq.iter().position(|u| want.matches(kind, u.src, u.tag)) else { return out };
            let len = uq[i].len();
            match self.place(kind, at, len) {
                Placed::Into(into) => {
                    let last = matches!(into, Into::Multi { last: true, .. });
                    let u = self.unexpected[kind as usize].remove(i).expect("index found above");
                    out.placed.push((into, u));
                    if last {
                        return out;
                    }
                }
                Placed::DidNotFit(r) => {
                    out.released = Some(r);
                    return out;
                }
            }
        }
    }

    /// Post a single receive when nothing unexpected of its kind waits
    /// (what `post` would do then, without its result); else give it back.
    pub fn post_if_none_waits(&mut self, kind: Kind, p: Posted<R>) -> Result<(), Posted<R>> {
        if p.multi.is_some() || !self.unexpected[kind as usize].is_empty() {
            return Err(p);
        }
        self.posted[kind as usize].push_back(p);
        Ok(())
    }

    /// FI_PEEK: the first matching unexpected message, left in place;
    /// with `claim`, moved aside for a later `take_claimed(claim)`.
    pub fn peek(&mut self, kind: Kind, want: Want, claim: Option<usize>) -> Option<Peeked> {
        let uq = &mut self.unexpected[kind as usize];
        let i = uq.iter().position(|u| want.matches(kind, u.src, u.tag))?;
        let u = &uq[i];
        let found = u.peeked();
        if let Some(ctx) = claim {
            let u = uq.remove(i).expect("index found above");
            self.claimed.push((ctx, u));
        }
        Some(found)
    }

    /// FI_PEEK|FI_DISCARD: take the first matching unexpected message out
    /// (the caller drops it, and ends a remote one's rendezvous).
    pub fn discard(&mut self, kind: Kind, want: Want) -> Option<Unexpected> {
        let uq = &mut self.unexpected[kind as usize];
        let i = uq.iter().position(|u| want.matches(kind, u.src, u.tag))?;
        uq.remove(i)
    }

    /// FI_CLAIM: the message an earlier peek claimed with this context.
    pub fn take_claimed(&mut self, ctx: usize) -> Option<Unexpected> {
        let i = self.claimed.iter().position(|(c, _)| *c == ctx)?;
        Some(self.claimed.swap_remove(i).1)
    }

    /// fi_cancel: remove the posted receive with this context.
    pub fn cancel(&mut self, ctx: usize) -> Option<Posted<R>> {
        for q in &mut self.posted {
            if let Some(i) = q.iter().position(|p| p.ctx == ctx) {
                return q.remove(i);
            }
        }
        None
    }

    /// Remove every posted receive that names `task` as its source (the
    /// task is gone: they can never match).
    pub fn drop_directed_at(&mut self, task: u32) -> Vec<Posted<R>> {
        let mut out = Vec::new();
        for q in &mut self.posted {
            let (gone, keep): (VecDeque<_>, VecDeque<_>) = q.drain(..).partition(|p| p.want.src.is_some_and(|s| s.task == task));
            *q = keep;
            out.extend(gone);
        }
        out
    }

    /// Receives of this kind waiting for a message.
    pub fn posted_of(&self, kind: Kind) -> usize {
        self.posted[kind as usize].len()
    }

    pub fn posted_len(&self) -> usize {
        self.posted.iter().map(VecDeque::len).sum()
    }

    pub fn unexpected_len(&self) -> usize {
        self.unexpected.iter().map(VecDeque::len).sum()
    }
}

enum Placed<R> {
    Into(Into<R>),
    DidNotFit(R),
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: Source = Source { task: 1, window: 0 };
    const B: Source = Source { task: 2, window: 0 };

    fn want(src: Option<Source>, tag: u64, ignore: u64) -> Want {
        Want { src, tag, ignore }
    }

    fn one(id: u32, w: Want) -> Posted<u32> {
        Posted { want: w, ctx: id as usize, multi: None, r: id }
    }

    fn multi(id: u32, cap: usize) -> Posted<u32> {
        Posted { want: Want::any(), ctx: id as usize, multi: Some(Multi { cap, used: 0 }), r: id }
    }

    #[test]
    fn posted_first_then_arrival_matches_exact_tag_and_source() {
        let mut m = Matcher::<u32>::default();
        assert!(m.post(Kind::Tagged, one(1, want(Some(A), 7, 0))).placed.is_empty());
        // Wrong tag, wrong source: both queued as unexpected.
        assert_eq!(m.arrive(Kind::Tagged, A, 8, None, b"x").into, None);
        assert_eq!(m.arrive(Kind::Tagged, B, 7, None, b"y").into, None);
        assert_eq!(m.arrive(Kind::Tagged, A, 7, None, b"z").into, Some(Into::One(1)));
        assert_eq!((m.posted_len(), m.unexpected_len()), (0, 2));
    }

    #[test]
    fn the_front_receive_alone_takes_a_message_on_the_short_way() {
        let mut m = Matcher::<u32>::default();
        m.post(Kind::Tagged, one(1, want(Some(A), 7, 0)));
        m.post(Kind::Tagged, one(2, want(Some(B), 7, 0)));
        // B's message matches the second receive only: the short way
        // declines it (arrive searches), and leaves both posted.
        assert_eq!(m.arrive_front(Kind::Tagged, B, 7), None);
        assert_eq!(m.arrive_front(Kind::Msg, A, 7), None, "another kind's queue");
        assert_eq!(m.posted_len(), 2);
        assert_eq!(m.arrive_front(Kind::Tagged, A, 7), Some(1));
        assert_eq!(m.arrive_front(Kind::Tagged, B, 7), Some(2));
        // A multi-receive buffer at the front is arrive's to fill.
        m.post(Kind::Msg, multi(3, 64));
        assert_eq!(m.arrive_front(Kind::Msg, A, 0), None);
        assert_eq!(m.arrive(Kind::Msg, A, 0, None, b"abc").into, Some(Into::Multi { r: 3, offset: 0, last: false }));
    }

    #[test]
    fn wildcard_source_and_ignored_tag_bits() {
        let mut m = Matcher::<u32>::default();
        m.post(Kind::Tagged, one(1, want(None, 0x5, 0xffff_0000_0000)));
        assert_eq!(m.arrive(Kind::Tagged, B, 0x1_0000_0000_0005, None, b"").into, None, "bit 48 is not ignored");
        assert_eq!(m.arrive(Kind::Tagged, A, 0x6, None, b"").into, None, "low bits differ");
        assert_eq!(m.arrive(Kind::Tagged, A, 0x1234_0000_0005, None, b"").into, Some(Into::One(1)));
        // Ignoring bits 48..63 instead takes the first queued message.
        let p = m.post(Kind::Tagged, one(2, want(None, 0x5, 0xffff_0000_0000_0000)));
        assert_eq!(p.placed[0].1.tag, 0x1_0000_0000_0005);
        assert_eq!(p.placed[0].1.src, B);
        assert_eq!(m.unexpected_len(), 1);
    }

    #[test]
    fn unexpected_in_arrival_order_per_source() {
        let mut m = Matcher::<u32>::default();
        for (i, s) in [A, B, A, B, A].iter().enumerate() {
            m.arrive(Kind::Tagged, *s, 5, Some(i as u64), &[i as u8]);
        }
        let take = |m: &mut Matcher<u32>, src| {
            let p = m.post(Kind::Tagged, one(9, want(src, 5, 0)));
            p.placed.into_iter().next().map(|(_, u)| u.payload[0])
        };
        assert_eq!(take(&mut m, Some(B)), Some(1));
        assert_eq!(take(&mut m, Some(A)), Some(0));
        assert_eq!(take(&mut m, None), Some(2));
        assert_eq!(take(&mut m, Some(A)), Some(4));
        assert_eq!(take(&mut m, None), Some(3));
        assert_eq!(take(&mut m, None), None);
        assert_eq!(m.posted_len(), 1);
    }

    #[test]
    fn a_receive_posted_ahead_queues_and_one_behind_takes_its_message() {
        let mut m = Matcher::<u32>::default();
        assert!(m.post_if_none_waits(Kind::Tagged, one(1, want(Some(A), 7, 0))).is_ok());
        assert!(m.post_if_none_waits(Kind::Tagged, one(2, want(Some(B), 7, 0))).is_ok());
        // Not the front's: the search finds the second, the front stays.
        assert_eq!(m.arrive(Kind::Tagged, B, 7, None, b"b").into, Some(Into::One(2)));
        assert_eq!(m.arrive(Kind::Tagged, A, 7, None, b"a").into, Some(Into::One(1)));
        // A message waits: the post is given back, for `post` to match it.
        assert_eq!(m.arrive(Kind::Tagged, A, 7, None, b"c").into, None);
        let back = m.post_if_none_waits(Kind::Tagged, one(3, want(Some(B), 7, 0))).map_err(|p| p.r);
        assert_eq!(back, Err(3), "even one it does not match: `post` decides");
        assert_eq!(m.post_if_none_waits(Kind::Msg, multi(4, 64)).map_err(|p| p.r), Err(4), "a multi-receive buffer");
        assert!(m.post_if_none_waits(Kind::Msg, one(5, Want::any())).is_ok(), "kinds apart");
        assert_eq!(m.posted_len(), 1);
    }

    #[test]
    fn posted_in_post_order_and_kinds_apart() {
        let mut m = Matcher::<u32>::default();
        m.post(Kind::Tagged, one(1, want(None, 0, u64::MAX)));
        m.post(Kind::Tagged, one(2, want(Some(A), 3, 0)));
        m.post(Kind::Msg, one(3, Want::any()));
        assert_eq!(m.arrive(Kind::Tagged, A, 3, None, b"").into, Some(Into::One(1)));
        assert_eq!(m.arrive(Kind::Tagged, A, 3, None, b"").into, Some(Into::One(2)));
        // An untagged message never goes to a tagged receive, nor the reverse.
        assert_eq!(m.arrive(Kind::Tagged, A, 3, None, b"").into, None);
        assert_eq!(m.arrive(Kind::Msg, A, 3, None, b"").into, Some(Into::One(3)));
    }

    #[test]
    fn peek_claim_discard() {
        let mut m = Matcher::<u32>::default();
        assert_eq!(m.peek(Kind::Tagged, Want::any(), None), None, "nothing to peek: the caller reports FI_ENOMSG");
        m.arrive(Kind::Tagged, A, 1, Some(11), b"abc");
        m.arrive(Kind::Tagged, B, 2, None, b"de");
        let p = m.peek(Kind::Tagged, want(None, 2, 0), None).unwrap();
        assert_eq!((p.src, p.tag, p.len), (B, 2, 2));
        assert_eq!(m.unexpected_len(), 2, "a plain peek leaves the message");
        let p = m.peek(Kind::Tagged, want(Some(A), 1, 0), Some(77)).unwrap();
        assert_eq!((p.data, p.len), (Some(11), 3));
        assert_eq!(m.unexpected_len(), 1, "a claimed message leaves the queue");
        // A receive posted now cannot take the claimed message.
        m.post(Kind::Tagged, one(5, want(Some(A), 1, 0)));
        assert_eq!(m.take_claimed(76), None);
        assert_eq!(m.take_claimed(77).unwrap().payload.as_slice(), b"abc");
        assert_eq!(m.take_claimed(77), None);
        assert_eq!(m.discard(Kind::Tagged, want(None, 2, 0)).unwrap().len(), 2);
        assert_eq!(m.unexpected_len(), 0);
    }

    #[test]
    fn a_remote_message_reports_its_own_length_and_keeps_its_descriptor() {
        let mut m = Matcher::<u32>::default();
        assert_eq!(m.arrive_remote(Kind::Tagged, A, 4, None, b"desc", 1 << 20).into, None);
        let p = m.peek(Kind::Tagged, Want::any(), None).unwrap();
        assert_eq!(p.len, 1 << 20, "a peek reports the message, not its descriptor");
        let posting = m.post(Kind::Tagged, one(1, want(Some(A), 4, 0)));
        let (into, u) = posting.placed.into_iter().next().unwrap();
        assert_eq!(into, Into::One(1));
        assert_eq!((u.payload.as_slice(), u.remote, u.len()), (&b"desc"[..], Some(1 << 20), 1 << 20));
        m.post(Kind::Tagged, one(2, Want::any()));
        assert_eq!(m.arrive_remote(Kind::Tagged, B, 5, None, b"d2", 7).into, Some(Into::One(2)), "a posted receive takes it at once");
        m.arrive_remote(Kind::Tagged, B, 6, None, b"d3", 9);
        let d = m.discard(Kind::Tagged, Want::any()).unwrap();
        assert_eq!((d.len(), d.remote), (9, Some(9)), "a discard hands the descriptor back (its sender waits for a FIN)");
    }

    #[test]
    fn cancel_removes_only_that_receive() {
        let mut m = Matcher::<u32>::default();
        m.post(Kind::Tagged, one(1, Want::any()));
        m.post(Kind::Msg, one(2, Want::any()));
        assert!(m.cancel(3).is_none());
        assert_eq!(m.cancel(1).map(|p| p.r), Some(1));
        assert!(m.cancel(1).is_none());
        assert_eq!(m.arrive(Kind::Tagged, A, 0, None, b"").into, None);
        assert_eq!(m.arrive(Kind::Msg, A, 0, None, b"").into, Some(Into::One(2)));
    }

    #[test]
    fn a_lost_task_takes_only_the_receives_that_name_it() {
        let mut m = Matcher::<u32>::default();
        m.post(Kind::Tagged, one(1, want(Some(A), 1, 0)));
        m.post(Kind::Tagged, one(2, want(None, 1, 0)));
        m.post(Kind::Msg, one(3, Want { src: Some(A), ..Want::any() }));
        m.post(Kind::Tagged, one(4, want(Some(B), 1, 0)));
        let mut gone: Vec<u32> = m.drop_directed_at(A.task).into_iter().map(|p| p.r).collect();
        gone.sort();
        assert_eq!(gone, vec![1, 3]);
        assert_eq!(m.posted_len(), 2);
        assert_eq!(m.arrive(Kind::Tagged, B, 1, None, b"").into, Some(Into::One(2)), "order kept");
    }

    #[test]
    fn multi_receive_fills_then_releases() {
        let mut m = Matcher::<u32> { min_multi: 16, ..Default::default() };
        m.post(Kind::Msg, multi(1, 64));
        m.post(Kind::Msg, multi(2, 64));
        let at = |a: Arrival<u32>| match a.into {
            Some(Into::Multi { r, offset, last }) => (a.released, r, offset, last),
            other => panic!("{other:?}"),
        };
        assert_eq!(at(m.arrive(Kind::Msg, A, 0, None, &[0; 20])), (None, 1, 0, false));
        assert_eq!(at(m.arrive(Kind::Msg, A, 0, None, &[0; 20])), (None, 1, 20, false));
        // 24 left: 10 fit, then 14 < 16 left releases the buffer.
        assert_eq!(at(m.arrive(Kind::Msg, A, 0, None, &[0; 10])), (None, 1, 40, true));
        assert_eq!(at(m.arrive(Kind::Msg, A, 0, None, &[0; 30])), (None, 2, 0, false));
        // 34 left, 40 do not fit: buffer 2 is released empty-handed and
        // the message is queued (no buffer left).
        let a = m.arrive(Kind::Msg, A, 0, None, &[0; 40]);
        assert_eq!((a.released, a.into), (Some(2), None));
        // A new buffer drains the queue.
        let p = m.post(Kind::Msg, multi(3, 100));
        assert_eq!(p.placed.len(), 1);
        assert_eq!(p.placed[0].0, Into::Multi { r: 3, offset: 0, last: false });
        assert_eq!(m.posted_len(), 1);
    }

    #[test]
    fn multi_receive_fresh_buffer_truncates() {
        let mut m = Matcher::<u32>::default();
        m.post(Kind::Msg, multi(1, 8));
        let a = m.arrive(Kind::Msg, B, 0, None, &[0; 20]);
        assert_eq!(a.into, Some(Into::Multi { r: 1, offset: 0, last: true }));
        assert_eq!(m.posted_len(), 0);
    }

    #[test]
    fn multi_receive_drains_several_unexpected_on_post() {
        let mut m = Matcher::<u32> { min_multi: 4, ..Default::default() };
        for i in 0..5u8 {
            m.arrive(Kind::Msg, A, 0, None, &[i; 10]);
        }
        let p = m.post(Kind::Msg, multi(1, 32));
        let offs: Vec<_> = p.placed.iter().map(|(i, u)| (i, u.payload[0])).collect();
        assert_eq!(offs.len(), 3);
        assert_eq!(*offs[2].0, Into::Multi { r: 1, offset: 20, last: true });
        assert_eq!(offs.iter().map(|o| o.1).collect::<Vec<_>>(), vec![0, 1, 2]);
        assert_eq!(m.unexpected_len(), 2);
    }

    #[test]
    fn placements_keep_their_order_in_place_and_beyond() {
        let mut p = Placements::new();
        assert!(p.is_empty() && p.len() == 0);
        for i in 1..=4 {
            p.push(i);
        }
        assert_eq!((p.len(), p[0], p[3]), (4, 1, 4));
        assert_eq!(p.iter().copied().collect::<Vec<_>>(), [1, 2, 3, 4]);
        assert_eq!(p.into_iter().collect::<Vec<_>>(), [1, 2, 3, 4]);
    }
}
