//! The session each connection runs: its role's [`Program`](crate::scenario::Program), one op after
//! another until one blocks (a connect, a think, a reply waited on, the
//! barrier, the hold), and the one timer heap behind every think time,
//! timeout and heartbeat.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::rc::Rc;

use throng_protocol::Vsn;

use super::conn::{Conn, State};
use super::socket::ErrKind;
use super::{Cause, Engine};
use crate::scenario::Op;

impl Engine {
    /// Starts global user `g` (0-based): a connection running its role's
    /// program, or a `local_limit` error when the agent holds its capacity.
    pub(super) fn start_user(&mut self, g: u64) {
        self.counters.started += 1;
        if self.conns.len() >= self.capacity || g >= u32::MAX as u64 {
            self.counters.ended += 1;
            self.count_error(ErrKind::Capacity);
            return;
        }
        let role = self.scenario.role_of(g);
        let v2 = matches!(
            self.programs[role as usize].ops.first(),
            Some(Op::Connect { vsn: Vsn::V2, .. })
        );
        let token = self
            .conns
            .insert(Conn::new(None, (g + 1) as u32, State::Running, role, v2));
        self.advance(token);
    }

    /// Adds the connection's step timer (think, connect or reply timeout)
    /// at `at` ms.
    pub(super) fn schedule(&mut self, token: usize, at: u32) {
        self.timers.push(Reverse((at, token as u32)));
    }

    /// Schedules the connection's next heartbeat at the first grid point at
    /// or after `at` ms (see `Engine::grid_ms`), and marks it as its one.
    pub(super) fn schedule_heartbeat(&mut self, token: usize, at: u32) {
        let at = self.on_grid(at);
        self.conns[token].hb_ms = at;
        self.hb_timers.push(Reverse((at, token as u32)));
    }

    /// Fires every due timer: sends heartbeats, wakes sleepers, times out
    /// connects and replies.
    pub(super) fn fire_timers(&mut self) {
        let now = self.now_ms();
        while let Some((at, t)) = pop_due(&mut self.hb_timers, now) {
            let Some(c) = self.conns.get_mut(t) else {
                continue;
            };
            if c.hb_ms == at && !matches!(c.state, State::Connecting | State::Handshaking) {
                let late = now.wrapping_sub(at) as u64;
                self.counters.hb_late_max_ms = self.counters.hb_late_max_ms.max(late);
                let next = at.wrapping_add(self.heartbeat_interval(t));
                self.send_heartbeat(t);
                if self.conns.contains(t) {
                    self.schedule_heartbeat(t, next);
                }
            }
        }
        while let Some((at, t)) = pop_due(&mut self.timers, now) {
            let Some(c) = self.conns.get_mut(t) else {
                continue;
            };
            if c.deadline_ms != at {
                continue;
            }
            match c.state {
                State::Sleeping => {
                    c.state = State::Running;
                    self.advance(t);
                }
                State::Connecting => self.drop_conn(t, Cause::Error(ErrKind::TimeoutTcp)),
                State::Handshaking => {
                    self.drop_conn(t, Cause::Error(ErrKind::TimeoutUpgrade));
                }
                State::Awaiting => self.drop_conn(t, Cause::Error(ErrKind::TimeoutReply)),
                _ => {}
            }
        }
    }

    /// Runs the connection's program until an op blocks.
    pub(super) fn advance(&mut self, token: usize) {
        let programs = Rc::clone(&self.programs);
        loop {
            let Some(c) = self.conns.get_mut(token) else {
                return;
            };
            let ops = &programs[c.role as usize].ops;
            let Some(op) = ops.get(c.pc as usize) else {
                // Tsung's semantics: the end of the session closes the connection.
                self.drop_conn(token, Cause::Done);
                return;
            };
            c.pc += 1;
            match op {
                Op::Connect { .. } => {
                    if c.sock.is_none() {
                        self.connect(token);
                        return;
                    }
                }
                Op::Send { wait, .. } => {
                    self.send_op(token, op);
                    if *wait {
                        let at = self.now_ms().wrapping_add(self.reply_timeout_ms);
                        let Some(c) = self.conns.get_mut(token) else {
                            return;
                        };
                        c.state = State::Awaiting;
                        c.deadline_ms = at;
                        self.schedule(token, at);
                        return;
                    }
                }
                Op::Think { ms } => {
                    let at = (self.epoch.elapsed().as_millis() as u32).wrapping_add(*ms);
                    c.state = State::Sleeping;
                    c.deadline_ms = at;
                    self.schedule(token, at);
                    return;
                }
                Op::LoopStart { times, slot, end } => {
                    if *times == 0 {
                        c.pc = *end;
                    } else {
                        c.loops[*slot as usize] = *times;
                    }
                }
                Op::LoopEnd { start, slot } => {
                    let n = &mut c.loops[*slot as usize];
                    *n = n.saturating_sub(1);
                    if *n > 0 {
                        c.pc = start + 1;
                    }
                }
                Op::Barrier => {
                    if !self.released {
                        c.state = State::Barrier;
                        self.barrier.push(token as u32);
                        return;
                    }
                }
                Op::Hold => {
                    c.state = State::Hold;
                    return;
                }
                Op::Disconnect => {
                    self.drop_conn(token, Cause::Done);
                    return;
                }
            }
        }
    }
}

/// Pops the soonest timer of `heap` if it is due by `now`: its time and
/// connection.
fn pop_due(heap: &mut BinaryHeap<Reverse<(u32, u32)>>, now: u32) -> Option<(u32, usize)> {
    let &Reverse((at, token)) = heap.peek()?;
    if at > now {
        return None;
    }
    heap.pop();
    Some((at, token as usize))
}
