//! The ACL in front of a server: a [`Processor`] that checks each request against what it
//! needs before the server it wraps sees it, so that no server's handlers know about ACL and
//! a refused request reaches none of them (nothing is read or changed).

use std::sync::Arc;

use conveyor_protocol::command::RemotingCommand;

use super::{Acl, Need};
use crate::remoting::{Connection, Processor};

/// What a request to server `P` needs of its subject.
pub type NeedsOf<P> = Arc<dyn Fn(&P, &RemotingCommand) -> Vec<Need> + Send + Sync>;

/// Server `P` behind the ACL.
pub struct Guarded<P> {
    /// The server.
    inner: Arc<P>,
    /// The rules.
    acl: Arc<Acl>,
    /// What its requests need.
    needs: NeedsOf<P>,
}

impl<P> Guarded<P> {
    /// `inner` behind `acl`, its requests needing what `needs` says.
    pub fn new(inner: Arc<P>, acl: Arc<Acl>, needs: NeedsOf<P>) -> Self {
        Self { inner, acl, needs }
    }
}

impl<P: Processor> Processor for Guarded<P> {
    async fn handle(
        self: Arc<Self>,
        conn: Connection,
        request: RemotingCommand,
    ) -> Option<RemotingCommand> {
        let needs = || (self.needs)(&self.inner, &request);
        if let Err(refusal) = self.acl.check(conn.peer().ip(), &request, needs) {
            return (!request.is_oneway()).then_some(refusal);
        }
        self.inner.clone().handle(conn, request).await
    }

    fn on_disconnect(&self, conn: &Connection) {
        self.inner.on_disconnect(conn);
    }

    fn runs_inline(&self, request: &RemotingCommand) -> bool {
        self.inner.runs_inline(request)
    }
}
