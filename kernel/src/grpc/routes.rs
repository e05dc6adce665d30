//! The `Routes` service (the MCP frontend, the shim manager, the console's live view):
//! decode, call the use case, encode.

use std::sync::Arc;

use tonic::{Request, Response, Status};
use tutti_proto::kernel as pb;
use tutti_proto::kernel::routes_server::Routes as RoutesRpc;

use crate::state::Kernel;
use crate::watch::EventStream;
use crate::{calls, confirmations, review, sessions, shims, watch};

pub struct Routes {
    pub k: Arc<Kernel>,
}

type Answer<T> = Result<Response<T>, Status>;

#[tonic::async_trait]
impl RoutesRpc for Routes {
    async fn verify_session(
        &self,
        req: Request<pb::VerifySessionRequest>,
    ) -> Answer<pb::VerifySessionReply> {
        Ok(Response::new(sessions::verify(
            &self.k,
            &req.get_ref().token,
        )))
    }

    type WatchRoutesStream = EventStream;

    async fn watch_routes(&self, req: Request<pb::WatchRoutesRequest>) -> Answer<EventStream> {
        let req = req.into_inner();
        let stream = watch::watch(&self.k, req.watcher_id, req.caches_sessions)?;
        Ok(Response::new(stream))
    }

    async fn ack_routes(&self, req: Request<pb::AckRoutesRequest>) -> Answer<pb::Empty> {
        let req = req.into_inner();
        watch::ack(&self.k, req.watcher_id, req.revision);
        Ok(Response::new(pb::Empty {}))
    }

    async fn record_calls(
        &self,
        req: Request<tonic::Streaming<pb::CallRecord>>,
    ) -> Answer<pb::Empty> {
        let mut stream = req.into_inner();
        while let Some(record) = stream.message().await? {
            calls::record(&self.k, record);
        }
        Ok(Response::new(pb::Empty {}))
    }

    async fn report_circuit(&self, req: Request<pb::CircuitReport>) -> Answer<pb::Empty> {
        review::report_circuit(&self.k, req.into_inner());
        Ok(Response::new(pb::Empty {}))
    }

    async fn resolve_shim(&self, req: Request<pb::KeyRequest>) -> Answer<pb::ResolveShimReply> {
        Ok(Response::new(shims::resolve(
            &self.k,
            &req.into_inner().key,
        )))
    }

    async fn await_confirmation(
        &self,
        req: Request<pb::ConfirmationRequest>,
    ) -> Answer<pb::ConfirmationDecision> {
        let decision = confirmations::await_decision(&self.k, req.into_inner()).await?;
        Ok(Response::new(decision))
    }

    async fn answer_agent_confirmation(
        &self,
        req: Request<pb::AgentConfirmationAnswer>,
    ) -> Answer<pb::Empty> {
        let req = req.into_inner();
        confirmations::answer_by_agent(&self.k, &req.call_key, req.allow);
        Ok(Response::new(pb::Empty {}))
    }
}
