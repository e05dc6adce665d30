//! What the connectors offer, as the kernel committed it: the route table of tools
//! ([`routes`]), prompts and resources ([`compiled`], served by [`beyond`]), tool search
//! ([`search`], [`search_index`]) and skills ([`skills`]).

pub(crate) mod beyond;
pub(crate) mod compiled;
pub(crate) mod routes;
pub(crate) mod search;
pub(crate) mod search_index;
pub(crate) mod skills;
