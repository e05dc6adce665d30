//! The `Admin` service (the CLI and the console): decode, call the use case, encode.

use std::path::PathBuf;
use std::sync::Arc;

use tonic::{Request, Response, Status};
use tutti_proto::kernel as pb;
use tutti_proto::kernel::admin_server::Admin as AdminRpc;

use crate::install::{self, Install};
use crate::state::Kernel;
use crate::{confirmations, connect, review, sessions, status};

pub struct Admin {
    pub k: Arc<Kernel>,
}

type Answer<T> = Result<Response<T>, Status>;

/// What to install, as the request names it.
fn install_of(req: pb::InstallRequest) -> Install {
    Install {
        folder: PathBuf::from(req.source_dir),
        allow_commands: req.allow_commands,
        allow_env: req.allow_env,
        expected_sha256: req.expected_sha256,
        allow_skill_findings: req.allow_skill_findings,
        trust_updates: req.trust_updates,
    }
}

#[tonic::async_trait]
impl AdminRpc for Admin {
    async fn plan_install(&self, req: Request<pb::InstallRequest>) -> Answer<pb::InstallPlan> {
        let plan = install::plan(&self.k, &install_of(req.into_inner())).await?;
        Ok(Response::new(plan.summary))
    }

    async fn install(&self, req: Request<pb::InstallRequest>) -> Answer<pb::InstallReply> {
        let reply = install::install(&self.k, install_of(req.into_inner())).await?;
        Ok(Response::new(reply))
    }

    async fn uninstall(&self, req: Request<pb::KeyRequest>) -> Answer<pb::Empty> {
        let req = req.into_inner();
        install::uninstall(&self.k, &req.key, &req.expected_sha256).await?;
        Ok(Response::new(pb::Empty {}))
    }

    async fn connect_connector(&self, req: Request<pb::ConnectRequest>) -> Answer<pb::Empty> {
        connect::connect(&self.k, req.into_inner()).await?;
        Ok(Response::new(pb::Empty {}))
    }

    async fn disconnect_connector(&self, req: Request<pb::KeyRequest>) -> Answer<pb::Empty> {
        let req = req.into_inner();
        connect::disconnect(&self.k, &req.key, &req.expected_sha256).await?;
        Ok(Response::new(pb::Empty {}))
    }

    async fn status(&self, _req: Request<pb::Empty>) -> Answer<pb::StatusReply> {
        Ok(Response::new(status::status(&self.k)))
    }

    async fn available(&self, _req: Request<pb::Empty>) -> Answer<pb::AvailableReply> {
        Ok(Response::new(status::available(&self.k)))
    }

    async fn issue_session(
        &self,
        req: Request<pb::IssueSessionRequest>,
    ) -> Answer<pb::IssueSessionReply> {
        Ok(Response::new(
            sessions::issue(&self.k, req.into_inner()).await?,
        ))
    }

    async fn revoke_session(
        &self,
        req: Request<pb::RevokeSessionRequest>,
    ) -> Answer<pb::RevokeSessionReply> {
        let revoked = sessions::revoke_sessions(&self.k, req.into_inner()).await?;
        Ok(Response::new(pb::RevokeSessionReply { revoked }))
    }

    async fn list_sessions(&self, _req: Request<pb::Empty>) -> Answer<pb::ListSessionsReply> {
        Ok(Response::new(sessions::list(&self.k)))
    }

    async fn probe(&self, req: Request<pb::ProbeRequest>) -> Answer<pb::ProbeReply> {
        let reply = crate::supervisor::probe::probe(&self.k, req.into_inner()).await?;
        Ok(Response::new(reply))
    }

    async fn review_changes(&self, req: Request<pb::KeyRequest>) -> Answer<pb::ReviewReply> {
        Ok(Response::new(review::review(
            &self.k,
            &req.into_inner().key,
        )?))
    }

    async fn approve_changes(&self, req: Request<pb::KeyRequest>) -> Answer<pb::Empty> {
        let req = req.into_inner();
        let expected = (!req.expected_offered_hash.is_empty()).then_some(req.expected_offered_hash);
        review::approve(&self.k, &req.key, expected).await?;
        Ok(Response::new(pb::Empty {}))
    }

    async fn begin_login(
        &self,
        req: Request<pb::BeginLoginRequest>,
    ) -> Answer<pb::BeginLoginReply> {
        let reply = connect::oauth::begin(&self.k, req.into_inner()).await?;
        Ok(Response::new(reply))
    }

    async fn complete_login(&self, req: Request<pb::CompleteLoginRequest>) -> Answer<pb::Empty> {
        connect::complete_login(&self.k, req.into_inner()).await?;
        Ok(Response::new(pb::Empty {}))
    }

    async fn redact_text(
        &self,
        req: Request<pb::RedactTextRequest>,
    ) -> Answer<pb::RedactTextReply> {
        let text = self.k.redact(&req.into_inner().text);
        Ok(Response::new(pb::RedactTextReply { text }))
    }

    async fn list_confirmations(&self, _req: Request<pb::Empty>) -> Answer<pb::ConfirmationsReply> {
        Ok(Response::new(confirmations::list(&self.k)))
    }

    async fn answer_confirmation(
        &self,
        req: Request<pb::AnswerConfirmationRequest>,
    ) -> Answer<pb::Empty> {
        let req = req.into_inner();
        confirmations::answer(&self.k, &req.id, req.allow)?;
        Ok(Response::new(pb::Empty {}))
    }
}
