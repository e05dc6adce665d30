//! What connectors offer: tool search, skills, offer limits, pinned definitions, the live list,
//! prompts, resources and subscriptions.

mod beyond_rest;
mod beyond_tools;
mod live_list_sdk;
mod offer_limits;
mod pinning;
mod sdk_everything;
mod skills_root;
mod tool_search;
