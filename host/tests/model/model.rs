//! The reference model: the semantics the README states (Mastodon's), over plain maps — what every write and
//! job should answer and leave behind. Written from the README, not from the host's code.

use std::collections::{BTreeMap, BTreeSet};

/// A follow edge's state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Edge {
    #[default]
    None,
    Follow,
    Request,
}

/// An account's state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum State {
    #[default]
    Active,
    Suspended,
    Deleted,
}

/// One write or job, as the generator makes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Op {
    Follow(i64, i64),
    Unfollow(i64, i64),
    /// `.0` authorizes `.1`'s request.
    Authorize(i64, i64),
    Reject(i64, i64),
    /// `.0` removes its follower `.1`.
    RemoveFollower(i64, i64),
    Block(i64, i64),
    Unblock(i64, i64),
    Mute(i64, i64),
    Unmute(i64, i64),
    Private(i64, bool),
    Suspend(i64),
    Restore(i64),
    Delete(i64),
    /// `.0`'s followers move to `.1`.
    Move(i64, i64),
    /// Follows imported: (from, to).
    Import(Vec<(i64, i64)>),
}

impl Op {
    /// The users whose relations the op reads or changes: ops with disjoint footprints commute.
    pub fn footprint(&self, model: &Model) -> BTreeSet<i64> {
        if let Some((a, b)) = self.pair() {
            return [a, b].into();
        }
        match self {
            // Going public authorizes its requesters' requests.
            Op::Private(a, _) => {
                let mut users: BTreeSet<i64> = model.edges_to(*a).map(|(from, _)| from).collect();
                users.insert(*a);
                users
            }
            _ => model.users(),
        }
    }

    /// The two users of a relation write.
    fn pair(&self) -> Option<(i64, i64)> {
        match *self {
            Op::Follow(a, b)
            | Op::Unfollow(a, b)
            | Op::Authorize(a, b)
            | Op::Reject(a, b)
            | Op::RemoveFollower(a, b)
            | Op::Block(a, b)
            | Op::Unblock(a, b)
            | Op::Mute(a, b)
            | Op::Unmute(a, b) => Some((a, b)),
            _ => None,
        }
    }

    /// Whether it runs alone (a job, an import), not beside other ops.
    pub fn alone(&self) -> bool {
        matches!(self, Op::Suspend(_) | Op::Restore(_) | Op::Delete(_) | Op::Move(..) | Op::Import(_))
    }
}

/// What an op answers: the HTTP status, and for relation writes whether it changed anything.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Answer {
    pub status: u16,
    pub changed: Option<bool>,
}

impl Answer {
    fn ok(changed: bool) -> Self {
        Self { status: 200, changed: Some(changed) }
    }

    fn refused(status: u16) -> Self {
        Self { status, changed: None }
    }

    fn job(started: bool) -> Self {
        Self { status: if started { 202 } else { 409 }, changed: None }
    }
}

/// The truth as the model holds it.
#[derive(Debug, Clone, Default)]
pub struct Model {
    pub user_count: i64,
    pub follows: BTreeMap<(i64, i64), Edge>,
    /// What a suspension ended (a follow or a request), for its restore.
    pub hidden: BTreeMap<(i64, i64), Edge>,
    pub blocks: BTreeSet<(i64, i64)>,
    pub mutes: BTreeSet<(i64, i64)>,
    pub private: BTreeSet<i64>,
    pub states: BTreeMap<i64, State>,
}

impl Model {
    pub fn new(user_count: i64) -> Self {
        Self { user_count, ..Self::default() }
    }

    pub fn users(&self) -> BTreeSet<i64> {
        (1..=self.user_count).collect()
    }

    pub fn state(&self, user: i64) -> State {
        self.states.get(&user).copied().unwrap_or_default()
    }

    fn edge(&self, from: i64, to: i64) -> Edge {
        self.follows.get(&(from, to)).copied().unwrap_or_default()
    }

    fn set(&mut self, from: i64, to: i64, edge: Edge) {
        if edge == Edge::None {
            self.follows.remove(&(from, to));
        } else {
            self.follows.insert((from, to), edge);
        }
    }

    /// Ends the edge `from → to` (an act that ends follows): a restore does not bring it back.
    fn end(&mut self, from: i64, to: i64) -> bool {
        self.hidden.remove(&(from, to));
        let changed = self.edge(from, to) != Edge::None;
        self.set(from, to, Edge::None);
        changed
    }

    fn blocked(&self, a: i64, b: i64) -> bool {
        self.blocks.contains(&(a, b)) || self.blocks.contains(&(b, a))
    }

    /// The edges pointing at `user`, with their state.
    pub fn edges_to(&self, user: i64) -> impl Iterator<Item = (i64, Edge)> + '_ {
        self.follows.iter().filter(move |((_, to), _)| *to == user).map(|((from, _), edge)| (*from, *edge))
    }

    /// Both users' states refuse a relation that begins: 410 for a deleted one, and for a follow (or an
    /// authorization) 403 for a suspended one.
    fn refusal(&self, a: i64, b: i64, follow_like: bool) -> Option<Answer> {
        let states = [self.state(a), self.state(b)];
        if states.contains(&State::Deleted) {
            Some(Answer::refused(410))
        } else if follow_like && states.contains(&State::Suspended) {
            Some(Answer::refused(403))
        } else {
            None
        }
    }

    /// Applies `op`; what it answers.
    pub fn apply(&mut self, op: &Op) -> Answer {
        if op.pair().is_some_and(|(a, b)| a == b) {
            return Answer::refused(422);
        }
        match *op {
            Op::Follow(a, b) => {
                if let Some(refused) = self.refusal(a, b, true) {
                    return refused;
                }
                if self.blocked(a, b) {
                    return Answer::refused(403);
                }
                let wanted = if self.private.contains(&b) { Edge::Request } else { Edge::Follow };
                match self.edge(a, b) {
                    Edge::Follow => Answer::ok(false),
                    Edge::Request if wanted == Edge::Request => Answer::ok(false),
                    _ => {
                        self.set(a, b, wanted);
                        Answer::ok(true)
                    }
                }
            }
            Op::Unfollow(a, b) => Answer::ok(self.end(a, b)),
            Op::Authorize(a, b) => {
                if let Some(refused) = self.refusal(a, b, true) {
                    return refused;
                }
                let pending = self.edge(b, a) == Edge::Request;
                if pending {
                    self.set(b, a, Edge::Follow);
                }
                Answer::ok(pending)
            }
            Op::Reject(a, b) => {
                let pending = self.edge(b, a) == Edge::Request;
                self.hidden.remove(&(b, a));
                if pending {
                    self.set(b, a, Edge::None);
                }
                Answer::ok(pending)
            }
            Op::RemoveFollower(a, b) => {
                let following = self.edge(b, a) == Edge::Follow;
                self.hidden.remove(&(b, a));
                if following {
                    self.set(b, a, Edge::None);
                }
                Answer::ok(following)
            }
            Op::Block(a, b) => {
                if let Some(refused) = self.refusal(a, b, false) {
                    return refused;
                }
                let ended = [self.end(a, b), self.end(b, a)].contains(&true);
                Answer::ok(self.blocks.insert((a, b)) || ended)
            }
            Op::Unblock(a, b) => Answer::ok(self.blocks.remove(&(a, b))),
            Op::Mute(a, b) => {
                if let Some(refused) = self.refusal(a, b, false) {
                    return refused;
                }
                Answer::ok(self.mutes.insert((a, b)))
            }
            Op::Unmute(a, b) => Answer::ok(self.mutes.remove(&(a, b))),
            Op::Private(a, private) => {
                if private {
                    self.private.insert(a);
                } else {
                    self.private.remove(&a);
                    let requesters: Vec<i64> =
                        self.edges_to(a).filter(|(_, edge)| *edge == Edge::Request).map(|(from, _)| from).collect();
                    for requester in requesters {
                        self.set(requester, a, Edge::Follow);
                    }
                }
                Answer { status: 200, changed: None }
            }
            Op::Suspend(a) => {
                if self.state(a) == State::Deleted {
                    return Answer::job(false);
                }
                self.states.insert(a, State::Suspended);
                let held: Vec<((i64, i64), Edge)> = self
                    .follows
                    .iter()
                    .filter(|((from, to), _)| *from == a || *to == a)
                    .map(|(pair, edge)| (*pair, *edge))
                    .collect();
                for (pair, edge) in held {
                    self.hidden.insert(pair, edge);
                    self.set(pair.0, pair.1, Edge::None);
                }
                Answer::job(true)
            }
            Op::Restore(a) => {
                if self.state(a) != State::Suspended {
                    return Answer::job(false);
                }
                let hidden: Vec<((i64, i64), Edge)> = self
                    .hidden
                    .iter()
                    .filter(|((from, to), _)| *from == a || *to == a)
                    .map(|(pair, edge)| (*pair, *edge))
                    .collect();
                for ((from, to), edge) in hidden {
                    let other = if from == a { to } else { from };
                    if self.state(other) == State::Active && self.edge(from, to) == Edge::None {
                        self.hidden.remove(&(from, to));
                        self.set(from, to, edge);
                    }
                }
                self.states.insert(a, State::Active);
                Answer::job(true)
            }
            Op::Delete(a) => {
                self.states.insert(a, State::Deleted);
                self.follows.retain(|(from, to), _| *from != a && *to != a);
                self.hidden.retain(|(from, to), _| *from != a && *to != a);
                self.blocks.retain(|(from, to)| *from != a && *to != a);
                self.mutes.retain(|(from, to)| *from != a && *to != a);
                Answer::job(true)
            }
            Op::Move(a, b) => {
                if a == b || self.state(a) != State::Active || self.state(b) != State::Active {
                    return Answer::job(false);
                }
                let followers: Vec<i64> =
                    self.edges_to(a).filter(|(_, edge)| *edge == Edge::Follow).map(|(from, _)| from).collect();
                for x in followers {
                    let welcome = x != b && !self.blocked(x, b) && self.state(x) == State::Active;
                    let private = self.private.contains(&b);
                    let current = self.edge(x, b);
                    if welcome && current != Edge::Follow && !(current == Edge::Request && private) {
                        self.set(x, b, if private { Edge::Request } else { Edge::Follow });
                    }
                    self.set(x, a, Edge::None);
                }
                Answer::job(true)
            }
            Op::Import(ref follows) => {
                for &(from, to) in follows {
                    let active = self.state(from) == State::Active && self.state(to) == State::Active;
                    if self.edge(from, to) != Edge::None || !active || self.blocked(from, to) {
                        continue;
                    }
                    self.hidden.remove(&(from, to));
                    self.set(from, to, if self.private.contains(&to) { Edge::Request } else { Edge::Follow });
                }
                Answer { status: 200, changed: None }
            }
        }
    }

    /// `user`'s (followings, followers): follows only.
    pub fn counts(&self, user: i64) -> (i64, i64) {
        let follows = |pick: fn(&(i64, i64)) -> i64| {
            self.follows.iter().filter(|(pair, edge)| **edge == Edge::Follow && pick(pair) == user).count() as i64
        };
        (follows(|(from, _)| *from), follows(|(_, to)| *to))
    }
}
