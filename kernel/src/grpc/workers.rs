//! The `Workers` service (upstream workers): decode, call the use case, encode.

use std::sync::Arc;

use tonic::{Request, Response, Status};
use tutti_proto::kernel as pb;
use tutti_proto::kernel::workers_server::Workers as WorkersRpc;

use crate::state::Kernel;
use crate::workers;

pub struct Workers {
    pub k: Arc<Kernel>,
}

type Answer<T> = Result<Response<T>, Status>;

#[tonic::async_trait]
impl WorkersRpc for Workers {
    async fn register_worker(
        &self,
        req: Request<pb::RegisterWorkerRequest>,
    ) -> Answer<pb::RegisterWorkerReply> {
        Ok(Response::new(
            workers::register(&self.k, req.into_inner()).await?,
        ))
    }

    async fn offer_tools(
        &self,
        req: Request<pb::OfferToolsRequest>,
    ) -> Answer<pb::OfferToolsReply> {
        Ok(Response::new(
            workers::offer(&self.k, req.into_inner()).await?,
        ))
    }

    async fn report_worker(&self, req: Request<pb::WorkerReport>) -> Answer<pb::Empty> {
        workers::report(&self.k, req.into_inner()).await?;
        Ok(Response::new(pb::Empty {}))
    }

    async fn refresh_worker_token(
        &self,
        req: Request<pb::RefreshWorkerTokenRequest>,
    ) -> Answer<pb::RefreshWorkerTokenReply> {
        Ok(Response::new(
            workers::refresh_token(&self.k, req.into_inner()).await?,
        ))
    }
}
