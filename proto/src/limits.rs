//! Sizes every process agrees on. gRPC refuses a message over its decoder's limit as a whole,
//! which once made a connector with a huge tool list crash-loop its worker and one huge
//! manifest field break `connector available` for every connector: these limits turn that
//! into one clear refusal, and the clients of the kernel accept replies as large as the
//! kernel can build.

/// Most tools one connector may offer; a larger tool set is refused at commit.
pub const MAX_TOOLS: usize = 10_000;

/// Most bytes of tool definitions (each tool's name plus its JSON) one connector may offer;
/// a larger tool set is refused at commit.
pub const MAX_TOOL_SET_BYTES: usize = 4 * 1024 * 1024;

/// Most prompts one connector may offer; more are refused at commit.
pub const MAX_PROMPTS: usize = 10_000;

/// Most bytes of prompt definitions (name plus JSON) one connector may offer.
pub const MAX_PROMPT_SET_BYTES: usize = 4 * 1024 * 1024;

/// Most resources one connector may offer; more are refused at commit.
pub const MAX_RESOURCES: usize = 10_000;

/// Most bytes of resource definitions (URI plus JSON) one connector may offer.
pub const MAX_RESOURCE_SET_BYTES: usize = 4 * 1024 * 1024;

/// Most resource templates one connector may offer; more are refused at commit.
pub const MAX_RESOURCE_TEMPLATES: usize = 10_000;

/// Most bytes of resource template definitions (URI template plus JSON) one connector may offer.
pub const MAX_RESOURCE_TEMPLATE_SET_BYTES: usize = 4 * 1024 * 1024;

/// Largest request the kernel decodes: an offer with every list at its limits, with room for
/// its framing.
pub const MAX_KERNEL_REQUEST_BYTES: usize = 2
    * (MAX_TOOL_SET_BYTES
        + MAX_PROMPT_SET_BYTES
        + MAX_RESOURCE_SET_BYTES
        + MAX_RESOURCE_TEMPLATE_SET_BYTES);

/// Largest reply a client of the kernel decodes (`status`, `available`, the route stream):
/// the kernel is trusted, and these replies grow with the number of connectors.
pub const MAX_KERNEL_REPLY_BYTES: usize = 64 * 1024 * 1024;

/// Bytes a tool counts for against [`MAX_TOOL_SET_BYTES`].
pub fn tool_bytes(name: &str, definition_json: &str) -> usize {
    item_bytes(name, definition_json)
}

/// Bytes an item of any [`OfferedList`] counts for against its byte limit: its name (a
/// resource's URI, a template's URI template) plus its JSON definition.
pub fn item_bytes(name: &str, definition_json: &str) -> usize {
    name.len() + definition_json.len()
}

/// Why a tool set of `tools` tools and `bytes` bytes is refused, or `None` when it fits.
pub fn tool_set_problem(tools: usize, bytes: usize) -> Option<String> {
    OfferedList::Tools.problem(tools, bytes)
}

/// One list of an offer, each with its own limits: a connector over any of them is refused
/// at commit, with a reason naming the list, its size and the limits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OfferedList {
    Tools,
    Prompts,
    Resources,
    ResourceTemplates,
}

impl OfferedList {
    /// The list's items, in the plural, as a refusal names them.
    pub fn items(self) -> &'static str {
        match self {
            Self::Tools => "tools",
            Self::Prompts => "prompts",
            Self::Resources => "resources",
            Self::ResourceTemplates => "resource templates",
        }
    }

    fn item(self) -> &'static str {
        match self {
            Self::Tools => "tool",
            Self::Prompts => "prompt",
            Self::Resources => "resource",
            Self::ResourceTemplates => "resource template",
        }
    }

    /// Most items of this list one connector may offer.
    pub fn max_count(self) -> usize {
        match self {
            Self::Tools => MAX_TOOLS,
            Self::Prompts => MAX_PROMPTS,
            Self::Resources => MAX_RESOURCES,
            Self::ResourceTemplates => MAX_RESOURCE_TEMPLATES,
        }
    }

    /// Most bytes of definitions (each item's name or URI plus its JSON) of this list.
    pub fn max_bytes(self) -> usize {
        match self {
            Self::Tools => MAX_TOOL_SET_BYTES,
            Self::Prompts => MAX_PROMPT_SET_BYTES,
            Self::Resources => MAX_RESOURCE_SET_BYTES,
            Self::ResourceTemplates => MAX_RESOURCE_TEMPLATE_SET_BYTES,
        }
    }

    /// Why `count` items of `bytes` bytes are refused, or `None` when they fit.
    pub fn problem(self, count: usize, bytes: usize) -> Option<String> {
        let (max_count, max_bytes) = (self.max_count(), self.max_bytes());
        if count <= max_count && bytes <= max_bytes {
            return None;
        }
        let (items, item) = (self.items(), self.item());
        Some(format!(
            "the {item} set is too large: {count} {items} and {bytes} bytes of {item} \
             definitions (limits: {max_count} {items}, {max_bytes} bytes); the upstream must \
             offer fewer or smaller {items}"
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_name_both_numbers() {
        assert_eq!(tool_set_problem(MAX_TOOLS, MAX_TOOL_SET_BYTES), None);
        let p = tool_set_problem(50_000, 10).unwrap_or_default();
        assert!(
            p.contains("50000 tools") && p.contains("limits: 10000 tools"),
            "{p}"
        );
        assert!(tool_set_problem(1, MAX_TOOL_SET_BYTES + 1).is_some());
    }

    #[test]
    fn every_list_names_itself_and_its_limits() {
        let p = OfferedList::Prompts.problem(20_000, 10).unwrap_or_default();
        assert!(
            p.starts_with("the prompt set is too large: 20000 prompts")
                && p.contains("limits: 10000 prompts"),
            "{p}"
        );
        let r = OfferedList::Resources
            .problem(1, MAX_RESOURCE_SET_BYTES + 1)
            .unwrap_or_default();
        assert!(
            r.starts_with("the resource set is too large: 1 resources"),
            "{r}"
        );
        let t = OfferedList::ResourceTemplates.problem(10_001, 0);
        assert!(t.is_some_and(|t| t.contains("resource template set")));
        assert_eq!(
            OfferedList::Prompts.problem(MAX_PROMPTS, MAX_PROMPT_SET_BYTES),
            None
        );
    }
}
