//! A Worker service for the transport's tests: `Cancel` answers, the rest is unimplemented.

use crate::worker::worker_server::Worker;
use crate::worker::{
    AnswerUpstreamRequestRequest, CallToolEvent, CallToolReply, CallToolRequest, CancelRequest,
    Empty, ForwardRequest, GenerationRequest, LogMessage, ResourceUpdated, ShutdownRequest,
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
    async fn get_prompt(
        &self,
        _: Request<ForwardRequest>,
    ) -> Result<Response<CallToolReply>, Status> {
        Err(Status::unimplemented("stub"))
    }
    async fn read_resource(
        &self,
        _: Request<ForwardRequest>,
    ) -> Result<Response<CallToolReply>, Status> {
        Err(Status::unimplemented("stub"))
    }
    async fn complete(
        &self,
        _: Request<ForwardRequest>,
    ) -> Result<Response<CallToolReply>, Status> {
        Err(Status::unimplemented("stub"))
    }
    async fn subscribe(
        &self,
        _: Request<ForwardRequest>,
    ) -> Result<Response<CallToolReply>, Status> {
        Err(Status::unimplemented("stub"))
    }
    async fn unsubscribe(
        &self,
        _: Request<ForwardRequest>,
    ) -> Result<Response<CallToolReply>, Status> {
        Err(Status::unimplemented("stub"))
    }
    type WatchResourcesStream = futures_util::stream::Empty<Result<ResourceUpdated, Status>>;
    async fn watch_resources(
        &self,
        _: Request<GenerationRequest>,
    ) -> Result<Response<Self::WatchResourcesStream>, Status> {
        Err(Status::unimplemented("stub"))
    }
    async fn answer_upstream_request(
        &self,
        _: Request<AnswerUpstreamRequestRequest>,
    ) -> Result<Response<Empty>, Status> {
        Err(Status::unimplemented("stub"))
    }
    type WatchLogsStream = futures_util::stream::Empty<Result<LogMessage, Status>>;
    async fn watch_logs(
        &self,
        _: Request<GenerationRequest>,
    ) -> Result<Response<Self::WatchLogsStream>, Status> {
        Err(Status::unimplemented("stub"))
    }
}
