//! A worker offers its upstream's tools (and prompts, resources, templates): the whole
//! candidate is validated at once and the connector's actor commits it, or refuses it with
//! every problem named.

use std::collections::BTreeMap;
use std::sync::Arc;

use tonic::Status;
use tutti_proto::kernel as pb;
use tutti_proto::limits::OfferedList;

use super::admit::{check_worker, probe_of, worker_release};
use crate::catalog::{Candidate, Offered, OfferedPrompt, OfferedResource};
use crate::guards::manifest_of;
use crate::lifecycle::{Input, Msg};
use crate::state::{Kernel, lock};
use crate::toolset::{OfferedTool, validate};

/// Commits the offered candidate for the worker's generation, or says why not (the live
/// generation, if any, stays).
pub async fn offer(
    k: &Arc<Kernel>,
    req: pb::OfferToolsRequest,
) -> Result<pb::OfferToolsReply, Status> {
    let (actor, verdict) = {
        let mut inner = lock(&k.inner);
        if let Some(slot) = probe_of(&mut inner, &req.key, req.generation, &req.worker_token) {
            let offered = offered_tools(&req.tools);
            let problem = offer_size_problem(&req);
            crate::supervisor::probe::finish(
                slot,
                &offered,
                problem,
                &req.protocol_version,
                &req.server_name,
            );
            return Ok(pb::OfferToolsReply {
                committed: false,
                error: "probe finished".into(),
            });
        }
        check_worker(&inner, &req.key, req.generation, &req.worker_token)?;
        let manifest = match worker_release(&inner, &req.key, req.generation) {
            Some(r) => r.manifest,
            None => manifest_of(&inner, &req.key)?.clone(),
        };
        let verdict = match offer_size_problem(&req) {
            Some(problem) => Err(problem),
            None => validate_candidate(&req, &manifest.tool_risk),
        };
        (inner.actors.get(&req.key).cloned(), verdict)
    };
    // The connector's actor decides: commit (once), or refuse.
    let (reply, answer) = tokio::sync::oneshot::channel();
    let offer = Input::Offer {
        generation: req.generation,
        tools: verdict,
    };
    let sent = actor.is_some_and(|a| {
        a.send(Msg {
            input: offer,
            reply: Some(reply),
        })
        .is_ok()
    });
    let answer = match sent {
        true => answer
            .await
            .unwrap_or_else(|_| Err("the connector stopped".into())),
        false => Err(format!(
            "generation {} of {} is fenced",
            req.generation, req.key
        )),
    };
    if let Err(error) = &answer {
        tracing::warn!(key = %req.key, %error, "candidate refused");
    }
    Ok(pb::OfferToolsReply {
        committed: answer.is_ok(),
        error: answer.err().unwrap_or_default(),
    })
}

/// Why an offer is refused by its size alone (`tutti_proto::limits`): the worker withheld a
/// list over its limits, or sent one anyway. Every list over its limits is named, one
/// sentence each.
fn offer_size_problem(req: &pb::OfferToolsRequest) -> Option<String> {
    let named = |items: &[pb::OfferedTool]| {
        sent_size(items.iter().map(|t| (&t.upstream_name, &t.definition_json)))
    };
    let prompts = req
        .prompts
        .iter()
        .map(|p| (&p.upstream_name, &p.definition_json));
    let resources = |items: &[pb::OfferedResource]| {
        sent_size(items.iter().map(|r| (&r.uri, &r.definition_json)))
    };
    let lists = [
        (
            OfferedList::Tools,
            (req.withheld_tools, req.withheld_bytes),
            named(&req.tools),
        ),
        (
            OfferedList::Prompts,
            (req.withheld_prompts, req.withheld_prompt_bytes),
            sent_size(prompts),
        ),
        (
            OfferedList::Resources,
            (req.withheld_resources, req.withheld_resource_bytes),
            resources(&req.resources),
        ),
        (
            OfferedList::ResourceTemplates,
            (req.withheld_templates, req.withheld_template_bytes),
            resources(&req.resource_templates),
        ),
    ];
    let problems: Vec<String> = lists
        .into_iter()
        .filter_map(|(list, withheld, sent)| list_size_problem(list, withheld, sent))
        .collect();
    (!problems.is_empty()).then(|| problems.join("; "))
}

/// How many items and bytes of definitions (`limits::item_bytes`) a list sent has.
fn sent_size<'a>(items: impl Iterator<Item = (&'a String, &'a String)>) -> (usize, usize) {
    items.fold((0, 0), |(count, bytes), (name, json)| {
        (
            count + 1,
            bytes + tutti_proto::limits::item_bytes(name, json),
        )
    })
}

/// One list's size problem: `withheld` (count, bytes) when the worker withheld it, else what
/// it sent.
fn list_size_problem(
    list: OfferedList,
    withheld: (u64, u64),
    sent: (usize, usize),
) -> Option<String> {
    if withheld.0 == 0 {
        return list.problem(sent.0, sent.1);
    }
    let count = usize::try_from(withheld.0).unwrap_or(usize::MAX);
    let bytes = usize::try_from(withheld.1).unwrap_or(usize::MAX);
    Some(list.problem(count, bytes).unwrap_or_else(|| {
        format!(
            "the worker withheld {count} {} that are within the limits",
            list.items()
        )
    }))
}

/// The whole candidate, tools and what comes with them, validated at once: every
/// problem of either refuses it, one line each.
fn validate_candidate(
    req: &pb::OfferToolsRequest,
    risk_overrides: &BTreeMap<String, String>,
) -> Result<Candidate, String> {
    let resources = |items: &[pb::OfferedResource]| {
        items
            .iter()
            .map(|r| OfferedResource {
                uri: r.uri.clone(),
                definition_json: r.definition_json.clone(),
            })
            .collect()
    };
    let offered = Offered {
        prompts: req
            .prompts
            .iter()
            .map(|p| OfferedPrompt {
                upstream_name: p.upstream_name.clone(),
                definition_json: p.definition_json.clone(),
            })
            .collect(),
        resources: resources(&req.resources),
        templates: resources(&req.resource_templates),
        completions: req.completions,
        subscribe: req.resources_subscribe,
    };
    let tools = validate(&req.key, &offered_tools(&req.tools), risk_overrides);
    let catalog = crate::catalog::validate(&req.key, &offered);
    match (tools, catalog) {
        (Ok(tools), Ok(catalog)) => Ok(Candidate { tools, catalog }),
        (tools, catalog) => {
            let mut problems = tools.err().unwrap_or_default();
            problems.extend(catalog.err().unwrap_or_default());
            Err(problems.join("; "))
        }
    }
}

fn offered_tools(tools: &[pb::OfferedTool]) -> Vec<OfferedTool> {
    tools
        .iter()
        .map(|t| OfferedTool {
            upstream_name: t.upstream_name.clone(),
            definition: serde_json::from_str(&t.definition_json).unwrap_or(serde_json::Value::Null),
        })
        .collect()
}
