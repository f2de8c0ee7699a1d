//! The app backend's hooks on this shard: sending a connection's hook call
//! (with its bound per socket, and one push at a time per socket and
//! topic), and applying the answers that come back through the inbox to the
//! socket that waits for them (`crate::hooks`).

use std::sync::Arc;

use throng_protocol::Vsn;

use super::conn::Kind;
use super::Conns;
use crate::hooks::{Failure, Hook, HookAnswer, Outcome, Wait, Waiting};
use crate::longpoll::{is_session, SESSION_BIT};
use crate::node::Node;
use crate::socket::Scratch;

impl Conns {
    /// Sends hook call `body` of connection `key` on `topic`, or queues it
    /// behind this socket's push in flight on the topic.
    pub(super) fn hook_call(
        &mut self,
        node: &Node,
        key: usize,
        hook: Hook,
        topic: &str,
        body: Vec<u8>,
        what: Waiting,
    ) -> Result<(), Failure> {
        let Some(client) = node.hooks.as_ref() else {
            return Err(Failure::Unavailable);
        };
        let waits = &mut self.hook_waits;
        if hook == Hook::Join {
            waits.cancel_join(key, topic);
        }
        if waits.held(key) >= client.config().max_in_flight_per_socket {
            client.refused(hook);
            return Err(Failure::Busy);
        }
        let id = waits.next_id();
        let wait = Wait {
            key,
            topic: Arc::from(topic),
            what,
        };
        if hook == Hook::Push && waits.push_busy(key, topic) {
            waits.enqueue(id, body, wait);
            return Ok(());
        }
        client.call(hook, self.id, id, body)?;
        waits.start(id, wait);
        Ok(())
    }

    /// The id of connection `key` in hook requests: unique among the
    /// node's open sockets.
    pub(super) fn socket_id(&self, node: &Node, key: usize) -> String {
        format!("{}.{}.{key}", node.control.node_id, self.id)
    }

    /// The answer to a hook call of this shard.
    pub fn hook_answer(&mut self, node: &Node, scratch: &mut Scratch, a: HookAnswer) {
        let Some(wait) = self.hook_waits.finish(a.id) else {
            // Its socket closed, or it left the join meanwhile.
            return;
        };
        let (key, topic) = (wait.key, wait.topic.clone());
        let push = matches!(wait.what, Waiting::Push { .. });
        self.hook_apply(node, scratch, wait, a.outcome);
        if push {
            self.next_push(node, scratch, key, &topic);
        }
    }

    /// Sends the next push queued on `key`'s `topic`; one refused at once
    /// is answered, and the next one tried.
    fn next_push(&mut self, node: &Node, scratch: &mut Scratch, key: usize, topic: &Arc<str>) {
        let Some(client) = node.hooks.clone() else {
            return;
        };
        while let Some((id, body, wait)) = self.hook_waits.next_push(key, topic) {
            match client.call(Hook::Push, self.id, id, body) {
                Ok(()) => {
                    self.hook_waits.resume(id, wait);
                    return;
                }
                Err(f) => {
                    self.hook_waits.done(key);
                    self.hook_apply(node, scratch, wait, Outcome::Failed(f));
                }
            }
        }
    }

    /// Hands `outcome` to the socket of `wait`, and sends what it wrote.
    fn hook_apply(&mut self, node: &Node, scratch: &mut Scratch, wait: Wait, outcome: Outcome) {
        let key = wait.key;
        let Some(vsn) = self.vsn_of(key) else {
            return;
        };
        let topic = wait.topic;
        let what = wait.what;
        let fail = self.with_socket(node, scratch, key, vsn, |mux| match what {
            Waiting::Join { .. } => mux.hook_joined(&topic, what, outcome),
            Waiting::Push { .. } => mux.hook_pushed(&topic, what, outcome),
        });
        if is_session(key) {
            if fail.is_some() {
                self.lp_doom(key & !SESSION_BIT, crate::longpoll::End::Closed);
            }
            return;
        }
        if let Some((code, reason)) = fail {
            self.close_with(node, scratch, key, code, reason);
        }
        self.flush_reply(key);
    }

    /// The serializer of a live connection or session.
    fn vsn_of(&self, key: usize) -> Option<Vsn> {
        if is_session(key) {
            let s = self.lp.sessions.get(key & !SESSION_BIT)?;
            return (!s.dead).then_some(s.vsn);
        }
        match self.slab.get(key).filter(|c| !c.dead)?.kind {
            Kind::Ws { vsn, .. } => Some(vsn),
            _ => None,
        }
    }
}
