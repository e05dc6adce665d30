//! A Worker service for the transport's tests: `Cancel` answers, the rest is unimplemented.

use crate::worker::worker_server::Worker;
use crate::worker::{
    AnswerUpstreamRequestRequest, CallToolEvent, CallToolReply, CallToolRequest, CancelRequest,
    Empty, GenerationRequest, ShutdownRequest,
};
use tonic::{Request, Response, Status};

pub(crate) struct Stub;

#[tonic::async_trait]
impl Worker for Stub {
    async fn call_tool(
        &self,
        _: Request<CallToolRequest>,
    ) -> Result<Response<CallToolReply>, Status> {
        Err(Status::unimplemented("stub"))
    }
    type CallToolStreamStream = futures_util::stream::Empty<Result<CallToolEvent, Status>>;
    async fn call_tool_stream(
        &self,
        _: Request<CallToolRequest>,
    ) -> Result<Response<Self::CallToolStreamStream>, Status> {
        Err(Status::unimplemented("stub"))
    }
    async fn cancel(&self, _: Request<CancelRequest>) -> Result<Response<Empty>, Status> {
        Ok(Response::new(Empty {}))
    }
    async fn fence(&self, _: Request<GenerationRequest>) -> Result<Response<Empty>, Status> {
        Err(Status::unimplemented("stub"))
    }
    async fn shutdown(&self, _: Request<ShutdownRequest>) -> Result<Response<Empty>, Status> {
        Err(Status::unimplemented("stub"))
    }
    async fn answer_upstream_request(
        &self,
        _: Request<AnswerUpstreamRequestRequest>,
    ) -> Result<Response<Empty>, Status> {
        Err(Status::unimplemented("stub"))
    }
}
